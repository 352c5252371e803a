//! Reading `/proc/PID/maps` (the line parser is [`super::parse::maps`]).

pub use super::parse::MapsEntry;

impl MapsEntry {
    /// Readable, not writable, executable, private: program text.
    pub fn is_private_text(&self) -> bool {
        let p = self.perms;
        p.read && !p.write && p.exec && !p.shared
    }
}

/// The mappings of process `pid` (`None`: this process). One read of the file.
pub fn read(pid: Option<i32>) -> std::io::Result<Vec<MapsEntry>> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/maps"),
        None => "/proc/self/maps".to_owned(),
    };
    Ok(super::parse::maps(&std::fs::read_to_string(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_private_text() {
        let e = read(None).unwrap();
        assert!(e.iter().any(|m| m.is_private_text() && m.is_file()));
        assert!(e.iter().any(|m| !m.is_private_text()));
    }
}
