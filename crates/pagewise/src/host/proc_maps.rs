//! `/proc/PID/maps`: the mappings of a process, one line each
//! (`start-end perms offset dev inode [path]`). [`parse`] and [`parse_line`]
//! are pure and tested against fixture text and with property tests; [`read`]
//! reads the live file.

/// Access bits of a mapping (`r-xp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Perms {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// `MAP_SHARED` (`s`) rather than private (`p`).
    pub shared: bool,
}

impl Perms {
    /// Parses the four-character field of a maps line.
    pub fn parse(text: &str) -> Option<Perms> {
        let b = text.as_bytes();
        if b.len() != 4 {
            return None;
        }
        let flag = |c: u8, on: u8| match c {
            c if c == on => Some(true),
            b'-' => Some(false),
            _ => None,
        };
        Some(Perms {
            read: flag(b[0], b'r')?,
            write: flag(b[1], b'w')?,
            exec: flag(b[2], b'x')?,
            shared: match b[3] {
                b's' => true,
                b'p' => false,
                _ => return None,
            },
        })
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Access bits.
    pub perms: Perms,
    /// Offset into the file.
    pub offset: u64,
    /// Inode of the file (0 for anonymous memory).
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `[stack]`, `[anon:name]`), if any,
    /// without a ` (deleted)` suffix.
    pub path: Option<String>,
    /// The file was deleted after it was mapped.
    pub deleted: bool,
}

impl MapsEntry {
    /// Whether a regular file backs the mapping (not `[heap]`, `[vdso]`, anonymous…).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.as_deref().is_some_and(|p| p.starts_with('/'))
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the range is empty (never true for the kernel's own files).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Readable, not writable, executable, private: program text.
    pub fn is_private_text(&self) -> bool {
        let p = self.perms;
        p.read && !p.write && p.exec && !p.shared
    }
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text, 16).ok()
}

/// Parses one maps line: `start-end perms offset dev inode [path]`.
/// Paths may contain spaces; they run to the end of the line.
pub fn parse_line(line: &str) -> Option<MapsEntry> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (word, tail) = trimmed.split_at(end);
        rest = tail;
        (!word.is_empty()).then_some(word)
    };
    let range = field()?;
    let perms = Perms::parse(field()?)?;
    let offset = hex(field()?)?;
    let dev = field()?;
    if !dev.contains(':') {
        return None;
    }
    let inode: u64 = field()?.parse().ok()?;
    let (start, end) = range.split_once('-')?;
    let (start, end) = (hex(start)?, hex(end)?);
    if end < start {
        return None;
    }
    let path = rest.trim_start();
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(MapsEntry {
        start,
        end,
        perms,
        offset,
        inode,
        path: (!path.is_empty()).then(|| path.to_owned()),
        deleted,
    })
}

/// Parses a whole `/proc/PID/maps`; lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<MapsEntry> {
    text.lines().filter_map(parse_line).collect()
}

/// The mappings of process `pid` (`None`: this process). One read of the file.
pub fn read(pid: Option<i32>) -> std::io::Result<Vec<MapsEntry>> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/maps"),
        None => "/proc/self/maps".to_owned(),
    };
    Ok(parse(&std::fs::read_to_string(path)?))
}

/// Maps every page of this process's program text (the executable mappings
/// of files: the program and its libraries) now, so that code that runs for
/// the first time later takes no page fault for its instructions. What a
/// test or benchmark that counts page faults does before it counts: the
/// first run of a rare path (a slow path taken once in a loop) otherwise
/// faults on its text, which is the harness's cost, not the code's. Returns
/// how many mappings were populated, or the first error (a mapping that
/// cannot be populated faults as before, which shows in the counts). One
/// read of `/proc/self/maps` and one `madvise` per mapping.
pub fn populate_own_text() -> Result<usize, String> {
    let maps = read(None).map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    let mut populated = 0;
    for m in maps.iter().filter(|m| m.is_file() && m.perms.exec) {
        crate::sys::mem::populate_read_range(m.start as usize, m.len() as usize)
            .map_err(|e| format!("{}: {e}", m.path.as_deref().unwrap_or("?")))?;
        populated += 1;
    }
    Ok(populated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAPS: &str = "\
5638c49f5000-5638c49f7000 r--p 00000000 fe:00 247278                     /usr/bin/head
5638c49f7000-5638c49fd000 r-xp 00002000 fe:00 247278                     /usr/bin/head
7f0000000000-7f0040001000 rw-p 00000000 00:00 0 
7f1a2b000000-7f1a2b200000 r-xp 00000000 00:1f 1234                       /tmp/my app/lib x.so (deleted)
7ffc1c3e0000-7ffc1c401000 rw-p 00000000 00:00 0                          [stack]
7ffc1c5f6000-7ffc1c5f8000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn maps_lines() {
        let m = parse(MAPS);
        assert_eq!(m.len(), 7);
        assert_eq!(m[1].start, 0x5638c49f7000);
        assert_eq!(m[1].offset, 0x2000);
        assert!(m[1].perms.exec && m[1].perms.read && !m[1].perms.write);
        assert_eq!(m[1].path.as_deref(), Some("/usr/bin/head"));
        assert!(m[1].is_file());
        assert_eq!(m[2].path, None);
        assert!(!m[2].is_file());
        assert_eq!(m[2].len(), 0x40001000);
        assert_eq!(m[3].path.as_deref(), Some("/tmp/my app/lib x.so"));
        assert!(m[3].deleted);
        assert_eq!(m[4].path.as_deref(), Some("[stack]"));
        assert!(!m[5].is_file());
        assert!(m[6].perms.exec && !m[6].perms.read);
    }

    #[test]
    fn bad_maps_lines_are_refused() {
        for bad in [
            "",
            "zzzz-0000 r-xp 0 fe:00 1 /x",
            "1000-0500 r-xp 0 fe:00 1 /x",
            "1000-2000 rwxq 0 fe:00 1 /x",
            "1000-2000 r-xp 0 fe00 1 /x",
            "1000-2000 r-xp",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_process_has_private_text() {
        let e = read(None).unwrap();
        assert!(e.iter().any(|m| m.is_private_text() && m.is_file()));
        assert!(e.iter().any(|m| !m.is_private_text()));
    }

    fn maps_entry() -> impl Strategy<Value = (u64, u64, String, u64, u64, Option<String>, bool)> {
        (
            0u64..(1 << 47),
            0u64..(1 << 40),
            "[r-][w-][x-][ps]",
            0u64..(1 << 40),
            0u64..u64::MAX,
            proptest::option::of("(/[a-zA-Z0-9_. -]{1,20}){1,4}|\\[[a-z]{1,8}\\]"),
            any::<bool>(),
        )
            .prop_map(|(start, len, perms, off, inode, path, del)| {
                (start, start + len, perms, off, inode, path, del)
            })
    }

    proptest! {
        #[test]
        fn maps_line_round_trips((start, end, perms, off, inode, path, deleted) in maps_entry()) {
            let path_field = match &path {
                Some(p) if deleted => format!("{p} (deleted)"),
                Some(p) => p.clone(),
                None => String::new(),
            };
            let line = format!("{start:x}-{end:x} {perms} {off:08x} fe:01 {inode}                {path_field}");
            let e = parse_line(&line).expect("a well-formed line parses");
            prop_assert_eq!(e.start, start);
            prop_assert_eq!(e.end, end);
            prop_assert_eq!(e.offset, off);
            prop_assert_eq!(e.inode, inode);
            let want_path = path.clone().map(|p| p.trim_start().to_owned()).filter(|p| !p.is_empty());
            prop_assert_eq!(e.path.clone(), want_path);
            prop_assert_eq!(e.deleted, deleted && path.as_deref().is_some_and(|p| !p.trim().is_empty()));
            prop_assert_eq!(e.perms.exec, perms.as_bytes()[2] == b'x');
        }

        #[test]
        fn maps_line_never_panics(line in "\\PC{0,120}") {
            let _ = parse_line(&line);
        }
    }
}
