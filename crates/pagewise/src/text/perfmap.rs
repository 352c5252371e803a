//! perf map files: `START SIZE NAME` per line, hexadecimal, as written by JITs
//! and read by `perf report` for anonymous executable memory.

use crate::sys::create::NewFile;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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
                let (start, size, name) = line_fields(line)?;
                Some(Symbol {
                    start,
                    size,
                    name: name.to_owned(),
                })
            })
            .collect();
        symbols.sort_by_key(|s| s.start);
        PerfMap { symbols }
    }

    /// Reads and parses a perf map file (a regular file only: a FIFO is
    /// refused at once).
    pub fn read(path: &Path) -> std::io::Result<PerfMap> {
        Ok(Self::parse(&crate::host::user_files::read_input_to_string(
            path,
        )?))
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

/// Appends the perf map line `START SIZE NAME` (hexadecimal) to `text`.
pub fn push_line(text: &mut String, start: u64, size: u64, name: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(text, "{start:x} {size:x} {name}");
}

/// The fields of one perf map line `START SIZE NAME` (hexadecimal, with or
/// without `0x`); `None` for a line that does not parse or has no name.
pub fn line_fields(line: &str) -> Option<(u64, u64, &str)> {
    let mut parts = line.trim().splitn(3, ' ');
    let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let name = parts.next()?.trim();
    (!name.is_empty()).then_some((start, size, name))
}

/// Appends the perf map `lines` to `text` with every start address moved by
/// `bias` (link-time to runtime); lines that do not parse are left out.
pub fn rebase_into(text: &mut String, lines: &str, bias: u64) {
    for (start, size, name) in lines.lines().filter_map(line_fields) {
        push_line(text, start.wrapping_add(bias), size, name);
    }
}

/// Writes `/tmp/perf-PID.map` files safely, and replaces only its own.
///
/// Each map is written whole as a new file that has no name yet
/// ([`NewFile`]) and then put in place: with `link`, which fails when
/// anything is at the name (a map from someone else, a planted link), or,
/// for a pid this writer has written before and whose file is still the one
/// it wrote (same device and inode, so owned by this user), with `rename`
/// from a temporary name, which replaces it atomically. A reader never sees half a map and no other
/// file is ever opened, replaced or removed.
#[derive(Debug)]
pub struct PerfMapWriter {
    dir: PathBuf,
    written: HashMap<u32, (u64, u64)>,
}

impl PerfMapWriter {
    /// Maps in `/tmp`, where profilers look for them.
    pub fn in_tmp() -> Self {
        Self::in_dir(Path::new("/tmp"))
    }

    /// Maps in `dir` (for tests).
    pub fn in_dir(dir: &Path) -> Self {
        PerfMapWriter {
            dir: dir.to_owned(),
            written: HashMap::new(),
        }
    }

    /// Where the map of `pid` goes: `DIR/perf-PID.map`.
    pub fn path(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("perf-{pid}.map"))
    }

    /// Whether `path` is still the file this writer put there for `pid`.
    fn still_ours(&self, pid: u32, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(&(dev, ino)) = self.written.get(&pid) else {
            return false;
        };
        std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
    }

    /// Writes the map of `pid`: a new file, or a replacement of the one this
    /// writer wrote for `pid` before, or of a stale one (see
    /// [`stale_map`]). Fails with `AlreadyExists` when another file is at the
    /// name (left as it is). Cost: one file of about 40 bytes per symbol,
    /// two or three system calls around it.
    pub fn write(&mut self, pid: u32, symbols: &[Symbol]) -> std::io::Result<()> {
        let mut text = String::new();
        for s in symbols {
            push_line(&mut text, s.start, s.size, &s.name);
        }
        self.write_text(pid, &text)
    }

    /// [`PerfMapWriter::write`] for map text already made with [`push_line`].
    pub fn write_text(&mut self, pid: u32, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path(pid);
        let replace = self.still_ours(pid, &path) || stale_map(&path, pid);
        let new = if replace {
            NewFile::beside(&path, 0o644)
        } else {
            NewFile::in_dir_of(&path, 0o644)
        }
        .map_err(|e| e.source)?;
        let mut file = new.file();
        file.write_all(text.as_bytes())?;
        let meta = file.metadata()?;
        let placed = if replace {
            new.replace_at(&path)
        } else {
            new.link_at(&path)
        };
        placed.map_err(|e| e.source)?;
        self.written.insert(pid, (meta.dev(), meta.ino()));
        Ok(())
    }

    /// Removes the map this writer wrote for `pid`, if it is still there and
    /// still its own; anything else is left alone. One `lstat`, one `unlink`.
    pub fn remove(&mut self, pid: u32) -> std::io::Result<()> {
        let path = self.path(pid);
        let ours = self.still_ours(pid, &path);
        self.written.remove(&pid);
        if ours {
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }
}

/// Whether `path` holds a map left by an earlier process that had the pid
/// `pid` (pids are reused, and maps stay in `/tmp` after their process for
/// profilers to read): a regular file of this user with one link, last
/// written before process `pid` started. A profiler would name the new
/// process's code with the old one's symbols, so such a map is replaced;
/// anything else (another user's file, a link, a map of the running
/// process) is left alone. One `lstat` and two small `/proc` reads.
pub fn stale_map(path: &Path, pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let Some(started) = crate::host::proc_stat::started_at(pid as i32) else {
        return false;
    };
    let Ok(written) = meta.modified() else {
        return false;
    };
    // `started` is known to within a second (the boot time is whole seconds).
    meta.file_type().is_file()
        && meta.uid() == crate::sys::create::effective_uid()
        && meta.nlink() == 1
        && written + std::time::Duration::from_secs(2) < started
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

    fn one(name: &str) -> Vec<Symbol> {
        vec![Symbol {
            start: 0x400000,
            size: 0x20,
            name: name.into(),
        }]
    }

    #[test]
    fn writes_new_maps_and_never_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PerfMapWriter::in_dir(dir.path());
        writer.write(1, &one("main")).unwrap();
        let path = writer.path(1);
        assert_eq!(
            PerfMap::read(&path).unwrap().lookup(0x400010).unwrap().name,
            "main"
        );
        // A map someone else left is not replaced, by this writer or another.
        let planted = writer.path(2);
        std::fs::write(&planted, "planted\n").unwrap();
        let err = writer.write(2, &one("main")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&planted).unwrap(), "planted\n");
        assert_eq!(
            PerfMapWriter::in_dir(dir.path())
                .write(1, &one("other"))
                .unwrap_err()
                .kind(),
            std::io::ErrorKind::AlreadyExists
        );
        // A planted link (dangling or not) is never followed.
        let target = dir.path().join("target");
        std::os::unix::fs::symlink(&target, writer.path(3)).unwrap();
        assert!(writer.write(3, &one("main")).is_err());
        assert!(!target.exists(), "wrote through a link");
        // No temporary file is left behind.
        let names = crate::sys::file::names_in(dir.path());
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn a_map_older_than_its_process_is_stale_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PerfMapWriter::in_dir(dir.path());
        let me = std::process::id();
        let path = writer.path(me);
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        // Written now, while this process runs: its own, left alone.
        std::fs::write(&path, "current\n").unwrap();
        assert!(!stale_map(&path, me));
        let err = writer.write(me, &one("main")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        // Written before this process started: an earlier process with this pid.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
        assert!(stale_map(&path, me));
        // With a second link it may be someone's file: left alone.
        let other = dir.path().join("other");
        std::fs::hard_link(&path, &other).unwrap();
        assert!(!stale_map(&path, me));
        std::fs::remove_file(&other).unwrap();
        writer.write(me, &one("main")).unwrap();
        assert_eq!(
            PerfMap::read(&path).unwrap().lookup(0x400010).unwrap().name,
            "main"
        );
    }

    #[test]
    fn replaces_only_its_own_map() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PerfMapWriter::in_dir(dir.path());
        writer.write(7, &one("first")).unwrap();
        writer.write(7, &one("second")).unwrap();
        let path = writer.path(7);
        assert_eq!(
            PerfMap::read(&path).unwrap().lookup(0x400000).unwrap().name,
            "second"
        );
        // Once the file is replaced by someone else, it is theirs: left alone.
        // (Written beside it and renamed over it, so it cannot reuse the old
        // file's inode number, which a remove-then-create here sometimes did.)
        let theirs = dir.path().join("theirs");
        std::fs::write(&theirs, "theirs\n").unwrap();
        std::fs::rename(&theirs, &path).unwrap();
        assert!(writer.write(7, &one("third")).is_err());
        writer.remove(7).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "theirs\n");
        // Its own map is removed when asked.
        writer.write(8, &one("x")).unwrap();
        writer.remove(8).unwrap();
        assert!(!writer.path(8).exists());
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
            let mut writer = PerfMapWriter::in_dir(dir.path());
            writer.write(1, &syms).unwrap();
            let map = PerfMap::read(&writer.path(1)).unwrap();
            prop_assert_eq!(map.symbols().len(), syms.len());
        }
    }
}
