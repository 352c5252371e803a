//! `/proc/PID/maps`: the mappings of a process.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// Offset into the file.
    pub offset: u64,
    /// Path, `[heap]`-style name, or empty for anonymous memory.
    pub path: String,
}

impl MapsEntry {
    /// Readable, not writable, executable, private.
    pub fn is_private_text(&self) -> bool {
        self.perms == "r-xp"
    }

    /// Backed by a file (the path is absolute).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// Parses maps text; malformed lines are skipped.
pub fn parse(text: &str) -> Vec<MapsEntry> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let (a, b) = range.split_once('-')?;
            let path = f.skip(2).collect::<Vec<_>>().join(" ");
            Some(MapsEntry {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_owned(),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// The mappings of process `pid` (`None`: this process). One read of the file.
pub fn read(pid: Option<i32>) -> std::io::Result<Vec<MapsEntry>> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/maps"),
        None => "/proc/self/maps".to_owned(),
    };
    Ok(parse(&std::fs::read_to_string(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_file_anonymous_and_named_lines() {
        let text = "00400000-00452000 r-xp 00001000 08:02 173521 /usr/bin/my app\n\
                    7ffd000-7ffe000 rw-p 00000000 00:00 0 [stack]\n\
                    7f00-7f10 rw-p 00000000 00:00 0\n\
                    garbage\n";
        let e = parse(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path, "/usr/bin/my app");
        assert_eq!(e[0].offset, 0x1000);
        assert!(e[0].is_private_text() && e[0].is_file());
        assert_eq!(e[1].path, "[stack]");
        assert_eq!(e[2].path, "");
    }

    #[test]
    fn reads_this_process() {
        let e = read(None).unwrap();
        assert!(e.iter().any(|m| m.is_private_text() && m.is_file()));
    }

    proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,300}") {
            let _ = parse(&text);
        }
    }
}
