//! Address spaces of the observed processes: every mapping from perf `MMAP2`
//! records and `/proc/PID/maps`, following forks and `exec`, and the files
//! behind their code, each opened at once and kept open so that short runs
//! and files deleted after they were mapped can still be read after the
//! program exits. [`LinkAddresses`] turns a code address into a link-time
//! address in its file (what a profile stores); [`super::symbolizer`] goes
//! on to names and lines.

use super::record::Mmap2;
use crate::host::proc_maps::MapsEntry;
use object::{Object, ObjectSegment};
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;

/// Directories whose libraries are the system's, not the program's own code.
const SYSTEM_DIRS: [&str; 5] = [
    "/lib/",
    "/lib64/",
    "/usr/lib/",
    "/usr/lib64/",
    "/usr/libexec/",
];

/// Whether `path` is a system library (libc, the dynamic loader, libstdc++…).
pub fn is_system_path(path: &str) -> bool {
    SYSTEM_DIRS.iter().any(|d| path.starts_with(d))
}

/// An executable file seen in a mapping.
#[derive(Debug)]
pub struct ObjectInfo {
    /// Its path when it was mapped.
    pub path: String,
    /// The build id the kernel reported for the mapping, if any.
    pub build_id: Option<Vec<u8>>,
    /// A system library rather than the program's own code.
    pub system: bool,
    file: Option<File>,
    /// Why the file could not be opened.
    pub error: Option<String>,
}

impl ObjectInfo {
    /// The file, opened when it was mapped (so that it outlives the process
    /// and a later delete).
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }
}

/// One mapping of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Executable.
    pub exec: bool,
    /// The path or pseudo-name (`//anon`, `[heap]`…).
    pub name: String,
    /// Index of the executable object, for executable file mappings.
    pub object: Option<usize>,
    /// When it was made (perf clock, ns), when its record said.
    pub mapped_at: Option<u64>,
}

impl Mapping {
    /// Whether a regular file backs it.
    pub fn is_file(&self) -> bool {
        self.name.starts_with('/') && !self.name.starts_with("//anon")
    }
}

/// Whose code an address is, by the mappings known so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeOwner {
    /// The program's own: an executable file mapping outside the system
    /// library folders.
    Own,
    /// Other code: a system library, the vDSO, anonymous (JIT) code.
    Other,
    /// No executable mapping known holds it: not code, or code whose mapping
    /// record has not been read yet (it may come from another CPU's ring).
    Unmapped,
}

/// The executable ranges of one process (with those it shares with the
/// processes it was forked from), each list sorted and merged.
#[derive(Debug, Default)]
struct CodeRanges {
    /// The program's own code.
    own: Vec<(u64, u64)>,
    /// All code, its own included.
    all: Vec<(u64, u64)>,
}

impl CodeRanges {
    /// Sorts `ranges` and merges those that overlap or touch.
    fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }

    /// Whether one of the sorted, merged `ranges` holds `addr`.
    fn holds(ranges: &[(u64, u64)], addr: u64) -> bool {
        let i = ranges.partition_point(|r| r.0 <= addr);
        i > 0 && addr < ranges[i - 1].1
    }
}

/// The mappings of every observed process, and the files behind their code.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    objects: Vec<ObjectInfo>,
    object_index: HashMap<String, usize>,
    by_pid: HashMap<u32, Vec<Mapping>>,
    parent: HashMap<u32, u32>,
    /// The processes forked from each (the other way of `parent`).
    children: HashMap<u32, Vec<u32>>,
    /// Processes that called `exec`, with the time of the newest one when known.
    execed: HashMap<u32, Option<u64>>,
    /// [`AddressSpaces::code_owner`]'s ranges per process, made on first use.
    code_ranges: HashMap<u32, CodeRanges>,
}

impl AddressSpaces {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `pid` was forked from `ppid` (it shares its mappings until it execs).
    pub fn set_parent(&mut self, pid: u32, ppid: u32) {
        if pid != ppid && self.parent.insert(pid, ppid) != Some(ppid) {
            self.children.entry(ppid).or_default().push(pid);
            // Its fork record may be read after samples of it.
            self.forget_code_ranges(pid);
        }
    }

    /// Records that `pid` called `exec` at `time` (perf clock, ns): its earlier
    /// mappings are gone. With a time, mappings made after it stay: the records
    /// of one process come from the ring of whichever CPU it ran on, so its
    /// `exec` may be read after mappings its new image made.
    pub fn exec(&mut self, pid: u32, time: Option<u64>) {
        let newest = self.execed.entry(pid).or_default();
        *newest = (*newest).max(time);
        match time {
            Some(t) => {
                if let Some(maps) = self.by_pid.get_mut(&pid) {
                    maps.retain(|m| m.mapped_at.is_some_and(|at| at >= t));
                }
            }
            None => {
                self.by_pid.remove(&pid);
            }
        }
        self.forget_code_ranges(pid);
    }

    /// Drops the code ranges made for `pid` and for the processes forked from
    /// it, down to the depth [`AddressSpaces::code_owner`] looks up (theirs
    /// hold the mappings they share with it): made again on use. Costs a
    /// lookup per process forked from it.
    fn forget_code_ranges(&mut self, pid: u32) {
        let mut generation = vec![pid];
        for _ in 0..16 {
            let mut next = Vec::new();
            for p in generation {
                self.code_ranges.remove(&p);
                next.extend(self.children.get(&p).into_iter().flatten());
            }
            if next.is_empty() {
                break;
            }
            generation = next;
        }
    }

    /// The objects seen so far.
    pub fn objects(&self) -> &[ObjectInfo] {
        &self.objects
    }

    fn intern(&mut self, pid: u32, start: u64, end: u64, path: &str, deleted: bool) -> usize {
        let key = if deleted {
            format!("{path} (deleted)@{pid}:{start:x}")
        } else {
            path.to_owned()
        };
        if let Some(&i) = self.object_index.get(&key) {
            return i;
        }
        // A deleted file can still be opened through the process's map_files entry
        // (root only); a live one by its path.
        let open = if deleted {
            File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
        } else {
            File::open(path)
        };
        let (file, error) = match open {
            Ok(f) => (Some(f), None),
            Err(e) if deleted => (
                None,
                Some(format!(
                    "deleted, and its map_files entry is unreadable: {e}"
                )),
            ),
            Err(e) => (None, Some(e.to_string())),
        };
        self.objects.push(ObjectInfo {
            path: path.to_owned(),
            build_id: None,
            system: is_system_path(path),
            file,
            error,
        });
        self.object_index.insert(key, self.objects.len() - 1);
        self.objects.len() - 1
    }

    /// Adds a mapping from a perf `MMAP2` record.
    pub fn add_mmap(&mut self, m: &Mmap2) {
        if let (Some(Some(exec)), Some(at)) = (self.execed.get(&m.pid), m.time) {
            if at < *exec {
                // Made by the image that `exec` replaced, and read late.
                return;
            }
        }
        let (path, deleted) = match m.filename.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (m.filename.as_str(), false),
        };
        let exec = m.is_executable();
        let end = m.addr.saturating_add(m.len);
        let object = (exec && path.starts_with('/') && !path.starts_with("//")).then(|| {
            let i = self.intern(m.pid, m.addr, end, path, deleted);
            if self.objects[i].build_id.is_none() {
                self.objects[i].build_id = m.build_id.clone();
            }
            i
        });
        self.push(
            m.pid,
            Mapping {
                start: m.addr,
                end,
                pgoff: m.pgoff,
                exec,
                name: m.filename.clone(),
                object,
                mapped_at: m.time,
            },
        );
    }

    /// Adds the mappings of `/proc/PID/maps` (for processes that were running
    /// before we attached, and as a fallback for lost records).
    pub fn add_maps(&mut self, pid: u32, entries: &[MapsEntry]) {
        for e in entries {
            if self
                .by_pid
                .get(&pid)
                .is_some_and(|v| v.iter().any(|m| m.start == e.start && m.end == e.end))
            {
                continue;
            }
            let name = e.path.clone().unwrap_or_else(|| "//anon".to_owned());
            let object = (e.perms.exec && e.is_file()).then(|| {
                self.intern(
                    pid,
                    e.start,
                    e.end,
                    e.path.as_deref().unwrap_or(""),
                    e.deleted,
                )
            });
            self.push(
                pid,
                Mapping {
                    start: e.start,
                    end: e.end,
                    pgoff: e.offset,
                    exec: e.perms.exec,
                    name,
                    object,
                    mapped_at: None,
                },
            );
        }
    }

    /// Adds `m` to `pid`'s mappings, kept in the order they were made where
    /// their records say when (records from different CPUs' rings arrive out
    /// of that order), so that the last one holding an address is the newest.
    fn push(&mut self, pid: u32, m: Mapping) {
        if m.exec {
            // Only code is in them.
            self.forget_code_ranges(pid);
        }
        let maps = self.by_pid.entry(pid).or_default();
        let at = match m.mapped_at {
            Some(t) => maps
                .iter()
                .rposition(|o| o.mapped_at.is_none_or(|o| o <= t))
                .map_or(0, |i| i + 1),
            None => maps.len(),
        };
        maps.insert(at, m);
    }

    /// The newest mapping of `pid` (or of the process it was forked from) that holds `addr`.
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        let mut pid = pid;
        for _ in 0..16 {
            if let Some(m) = self
                .by_pid
                .get(&pid)
                .and_then(|v| v.iter().rev().find(|m| m.start <= addr && addr < m.end))
            {
                return Some(m);
            }
            if self.execed.contains_key(&pid) {
                return None;
            }
            pid = *self.parent.get(&pid)?;
        }
        None
    }

    /// Whether `addr` lies in the program's own executable code (an executable
    /// file mapping outside the system library folders). Cached per process.
    pub fn is_own_code(&mut self, pid: u32, addr: u64) -> bool {
        self.code_owner(pid, addr) == CodeOwner::Own
    }

    /// Whose code `addr` is in process `pid`, by the executable mappings known
    /// so far (its own and those it shares with the processes it was forked
    /// from, up to an `exec`). The ranges are made once per process and kept
    /// until code is mapped in it or in a process it was forked from, it
    /// execs, or its fork is read; otherwise two binary searches.
    pub fn code_owner(&mut self, pid: u32, addr: u64) -> CodeOwner {
        if !self.code_ranges.contains_key(&pid) {
            let (mut own, mut all) = (Vec::new(), Vec::new());
            let mut p = pid;
            for _ in 0..16 {
                for m in self.by_pid.get(&p).into_iter().flatten() {
                    if !m.exec {
                        continue;
                    }
                    all.push((m.start, m.end));
                    if m.object.is_some_and(|o| !self.objects[o].system) {
                        own.push((m.start, m.end));
                    }
                }
                if self.execed.contains_key(&p) {
                    break;
                }
                match self.parent.get(&p) {
                    Some(&pp) => p = pp,
                    None => break,
                }
            }
            let ranges = CodeRanges {
                own: CodeRanges::merged(own),
                all: CodeRanges::merged(all),
            };
            self.code_ranges.insert(pid, ranges);
        }
        let ranges = &self.code_ranges[&pid];
        if CodeRanges::holds(&ranges.own, addr) {
            CodeOwner::Own
        } else if CodeRanges::holds(&ranges.all, addr) {
            CodeOwner::Other
        } else {
            CodeOwner::Unmapped
        }
    }
}

/// (file offset, file size, link-time address) of a loadable segment.
pub(super) type Segment = (u64, u64, u64);

/// The whole file, read from its start (the handle may have been read before).
pub(super) fn read_whole(file: &File) -> std::io::Result<Vec<u8>> {
    use std::io::Seek;
    let mut data = Vec::new();
    let mut f = file;
    f.seek(std::io::SeekFrom::Start(0))?;
    f.read_to_end(&mut data)?;
    Ok(data)
}

pub(super) fn segments_of(obj: &object::File<'_>) -> Vec<Segment> {
    obj.segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect()
}

/// The link-time address of a file offset, through the loadable segments.
pub(super) fn svma_in(segments: &[Segment], file_offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|(off, size, _)| *off <= file_offset && file_offset < off + size)
        .map(|(off, _, vaddr)| vaddr + (file_offset - off))
}

/// Turns code addresses of observed processes into link-time addresses in
/// their object files, from the program headers alone (no symbols or debug
/// info): what a profile stores. Reads each object once, on first use.
pub struct LinkAddresses<'a> {
    spaces: &'a AddressSpaces,
    segments: HashMap<usize, Option<Vec<Segment>>>,
}

impl<'a> LinkAddresses<'a> {
    /// Link-time addresses over the captured address spaces.
    pub fn new(spaces: &'a AddressSpaces) -> Self {
        LinkAddresses {
            spaces,
            segments: HashMap::new(),
        }
    }

    /// The object file and link-time address of `addr` in process `pid`;
    /// `None` when no file-backed mapping holds it, or its file cannot be read
    /// or has no loadable segment there.
    pub fn locate(&mut self, pid: u32, addr: u64) -> Option<(&'a str, u64)> {
        let spaces = self.spaces;
        let m = spaces.lookup(pid, addr)?;
        let index = m.object?;
        let info = &spaces.objects[index];
        let segments = self.segments.entry(index).or_insert_with(|| {
            let data = read_whole(info.file()?).ok()?;
            let obj = object::File::parse(&*data).ok()?;
            Some(segments_of(&obj))
        });
        let vaddr = svma_in(segments.as_ref()?, addr - m.start + m.pgoff)?;
        Some((info.path.as_str(), vaddr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn system_paths() {
        assert!(is_system_path("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_system_path("/lib64/ld-linux-x86-64.so.2"));
        assert!(!is_system_path("/tmp/fixture_a"));
        assert!(!is_system_path("/usr/bin/gcc"));
    }

    /// One process's records: mappings (each at its own address) and execs,
    /// with distinct times, and the ring (CPU) each landed in.
    fn records() -> impl Strategy<Value = Vec<(bool, u64, usize)>> {
        proptest::collection::vec((proptest::bool::weighted(0.2), 0usize..3), 1..40).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (exec, ring))| (exec, 10 * i as u64 + 10, ring))
                .collect()
        })
    }

    /// Where a record's mapping goes: its own page, or with `overlap` one of
    /// three pages, so that later mappings replace earlier ones.
    fn page(time: u64, overlap: bool) -> u64 {
        if overlap {
            (time / 10) % 3 + 1
        } else {
            time
        }
    }

    fn apply(s: &mut AddressSpaces, (exec, time, _): (bool, u64, usize), overlap: bool) {
        if exec {
            s.exec(10, Some(time));
        } else {
            s.add_mmap(&Mmap2 {
                pid: 10,
                tid: 10,
                addr: page(time, overlap) << 12,
                len: 0x1000,
                pgoff: 0,
                prot: 1,
                flags: 2,
                build_id: None,
                filename: format!("//anon{time}"),
                time: Some(time),
            });
        }
    }

    proptest! {
        /// Read ring by ring (each ring in time order, the rings one after
        /// another) the records leave the same mappings as read in time
        /// order, also where later mappings replace earlier ones.
        #[test]
        fn the_order_of_the_rings_does_not_change_the_mappings(
            recs in records(),
            overlap in proptest::bool::ANY,
        ) {
            let mut in_time = AddressSpaces::new();
            for &r in &recs {
                apply(&mut in_time, r, overlap);
            }
            let mut by_ring = AddressSpaces::new();
            for ring in [2, 0, 1] {
                for &r in recs.iter().filter(|r| r.2 == ring) {
                    apply(&mut by_ring, r, overlap);
                }
            }
            for &(_, time, _) in &recs {
                let addr = (page(time, overlap) << 12) + 8;
                prop_assert_eq!(
                    in_time.lookup(10, addr).map(|m| &m.name),
                    by_ring.lookup(10, addr).map(|m| &m.name)
                );
            }
        }
    }

    /// Process 10's page at `addr` with `prot`, mapping `name`, with no time.
    fn map(addr: u64, prot: u32, name: &str) -> Mmap2 {
        Mmap2 {
            pid: 10,
            tid: 10,
            addr,
            len: 0x1000,
            pgoff: 0,
            prot,
            flags: 2,
            build_id: None,
            filename: name.to_owned(),
            time: None,
        }
    }

    /// Code with no mapping read yet is told apart from other code, and a
    /// child's ranges follow a mapping of its parent, or its fork, read after
    /// they were first asked for (before, the child's cached ranges never saw
    /// either).
    #[test]
    fn code_owner_tells_unmapped_code_and_follows_a_parents_late_mapping() {
        let mut s = AddressSpaces::new();
        s.add_mmap(&map(0x1000, 5, "/usr/lib/libc.so.6"));
        s.add_mmap(&map(0x2000, 7, "//anon"));
        s.add_mmap(&map(0x3000, 1, "/nonexistent/data"));
        s.set_parent(11, 10);
        assert_eq!(s.code_owner(11, 0x1800), CodeOwner::Other);
        assert_eq!(s.code_owner(11, 0x2800), CodeOwner::Other, "JIT code");
        assert_eq!(s.code_owner(11, 0x3800), CodeOwner::Unmapped, "data");
        assert_eq!(s.code_owner(11, 0x4800), CodeOwner::Unmapped);
        s.add_mmap(&map(0x4000, 5, "/nonexistent/prog"));
        assert_eq!(s.code_owner(11, 0x4800), CodeOwner::Own);
        assert!(s.is_own_code(10, 0x4800));
        // A child asked about before its fork record was read.
        assert_eq!(s.code_owner(12, 0x4800), CodeOwner::Unmapped);
        s.set_parent(12, 11);
        assert_eq!(s.code_owner(12, 0x4800), CodeOwner::Own);
    }

    #[test]
    fn lookups_fall_back_to_the_parent_until_exec() {
        let mut s = AddressSpaces::new();
        s.add_mmap(&map(0x1000, 5, "/nonexistent/prog"));
        s.add_mmap(&map(0x5000, 5, "/usr/lib/libc.so.6"));
        s.set_parent(11, 10);
        assert_eq!(s.lookup(11, 0x1800).unwrap().name, "/nonexistent/prog");
        assert!(s.is_own_code(11, 0x1800));
        assert!(!s.is_own_code(11, 0x5800));
        assert!(!s.is_own_code(11, 0x9000));
        s.exec(11, None);
        assert!(s.lookup(11, 0x1800).is_none());
        assert!(!s.is_own_code(11, 0x1800));
        // A newer mapping over the same range wins.
        s.add_mmap(&map(0x1000, 3, "//anon"));
        assert_eq!(s.lookup(10, 0x1800).unwrap().name, "//anon");
        let o = &s.objects()[0];
        assert!(o.error.is_some(), "a missing file is reported, not hidden");
    }
}
