//! perf map files: `START SIZE NAME` per line, hexadecimal, as written by JITs
//! and read by `perf report` for anonymous executable memory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// One symbol: `[start, start+size)` is `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// First byte.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Function name (as in the symbol table, possibly mangled).
    pub name: String,
}

/// A parsed perf map, sorted by address, for lookups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfMap {
    symbols: Vec<Symbol>,
}

impl PerfMap {
    /// Parses perf map text; malformed lines are skipped. Cost: one pass and a sort.
    pub fn parse(text: &str) -> PerfMap {
        let mut symbols: Vec<Symbol> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.trim().splitn(3, ' ');
                let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let name = parts.next()?.trim();
                (!name.is_empty()).then(|| Symbol {
                    start,
                    size,
                    name: name.to_owned(),
                })
            })
            .collect();
        symbols.sort_by_key(|s| s.start);
        PerfMap { symbols }
    }

    /// Reads and parses a perf map file.
    pub fn read(path: &Path) -> std::io::Result<PerfMap> {
        Ok(Self::parse(&std::fs::read_to_string(path)?))
    }

    /// The symbol containing `addr`, if any. Binary search.
    pub fn lookup(&self, addr: u64) -> Option<&Symbol> {
        let i = self.symbols.partition_point(|s| s.start <= addr);
        let candidate = self.symbols.get(i.checked_sub(1)?)?;
        (addr < candidate.start.saturating_add(candidate.size.max(1))).then_some(candidate)
    }

    /// All symbols, by address.
    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }
}

/// Writes `symbols` to a new file at `path`: created exclusively (never
/// replacing an existing file) and never through a symbolic link, with mode 0644.
pub fn write_new(path: &Path, symbols: &[Symbol]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut text = String::new();
    for s in symbols {
        text.push_str(&format!("{:x} {:x} {}\n", s.start, s.size, s.name));
    }
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lookup_finds_the_containing_symbol() {
        let map = PerfMap::parse("1000 10 alpha\n2000 100 beta gamma\nzz bad line\n1800 8 mid\n");
        assert_eq!(map.symbols().len(), 3);
        assert_eq!(map.lookup(0x1000).unwrap().name, "alpha");
        assert_eq!(map.lookup(0x100f).unwrap().name, "alpha");
        assert!(map.lookup(0x1010).is_none());
        assert_eq!(map.lookup(0x2050).unwrap().name, "beta gamma");
        assert!(map.lookup(0x10).is_none());
    }

    #[test]
    fn write_is_exclusive_and_refuses_links() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        let syms = [Symbol {
            start: 0x400000,
            size: 0x20,
            name: "main".into(),
        }];
        write_new(&path, &syms).unwrap();
        assert_eq!(
            PerfMap::read(&path).unwrap().lookup(0x400010).unwrap().name,
            "main"
        );
        assert_eq!(
            write_new(&path, &syms).unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        let link = dir.path().join("perf-2.map");
        std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
        assert!(write_new(&link, &syms).is_err());
        assert!(!dir.path().join("target").exists(), "wrote through a link");
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC{0,200}") {
            let map = PerfMap::parse(&text);
            let _ = map.lookup(0x1234);
        }

        #[test]
        fn written_maps_read_back(entries in proptest::collection::vec((0u64..1 << 40, 1u64..1 << 16, "[a-z_][a-z0-9_]{0,12}"), 0..20)) {
            let syms: Vec<Symbol> = entries.iter().map(|(a, s, n)| Symbol { start: *a, size: *s, name: n.clone() }).collect();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("m.map");
            write_new(&path, &syms).unwrap();
            let map = PerfMap::read(&path).unwrap();
            prop_assert_eq!(map.symbols().len(), syms.len());
        }
    }
}
