//! Address spaces of the observed processes and symbolization of their code
//! addresses: function, file and line (with inlined frames) from DWARF via
//! `addr2line`, else the ELF symbol table via `object`.
//!
//! Mappings are captured while the processes live (perf `MMAP2` records and
//! `/proc/PID/maps`), and each executable file is opened at once and kept
//! open, so short runs and files deleted after they were mapped can still be
//! symbolized after the program exits.

use super::record::Mmap2;
use crate::host::proc_maps::MapsEntry;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::rc::Rc;

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
}

impl Mapping {
    /// Whether a regular file backs it.
    pub fn is_file(&self) -> bool {
        self.name.starts_with('/') && !self.name.starts_with("//anon")
    }
}

/// The mappings of every observed process, and the files behind their code.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    objects: Vec<ObjectInfo>,
    object_index: HashMap<String, usize>,
    by_pid: HashMap<u32, Vec<Mapping>>,
    parent: HashMap<u32, u32>,
    execed: std::collections::HashSet<u32>,
    own_ranges: HashMap<u32, Vec<(u64, u64)>>,
}

impl AddressSpaces {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `pid` was forked from `ppid` (it shares its mappings until it execs).
    pub fn set_parent(&mut self, pid: u32, ppid: u32) {
        if pid != ppid {
            self.parent.insert(pid, ppid);
        }
    }

    /// Records that `pid` called `exec`: its earlier mappings are gone.
    pub fn exec(&mut self, pid: u32) {
        self.execed.insert(pid);
        self.by_pid.remove(&pid);
        self.own_ranges.remove(&pid);
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
        let (path, deleted) = match m.filename.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (m.filename.as_str(), false),
        };
        let exec = m.prot & libc::PROT_EXEC as u32 != 0;
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
                },
            );
        }
    }

    fn push(&mut self, pid: u32, m: Mapping) {
        self.own_ranges.remove(&pid);
        self.by_pid.entry(pid).or_default().push(m);
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
            if self.execed.contains(&pid) {
                return None;
            }
            pid = *self.parent.get(&pid)?;
        }
        None
    }

    /// Whether `addr` lies in the program's own executable code (an executable
    /// file mapping outside the system library folders). Cached per process.
    pub fn is_own_code(&mut self, pid: u32, addr: u64) -> bool {
        if !self.own_ranges.contains_key(&pid) {
            let mut ranges = Vec::new();
            let mut p = pid;
            for _ in 0..16 {
                if let Some(v) = self.by_pid.get(&p) {
                    for m in v {
                        if let Some(o) = m.object {
                            if !self.objects[o].system {
                                ranges.push((m.start, m.end));
                            }
                        }
                    }
                }
                if self.execed.contains(&p) {
                    break;
                }
                match self.parent.get(&p) {
                    Some(&pp) => p = pp,
                    None => break,
                }
            }
            ranges.sort_unstable();
            self.own_ranges.insert(pid, ranges);
        }
        let ranges = &self.own_ranges[&pid];
        let i = ranges.partition_point(|r| r.0 <= addr);
        i > 0 && addr < ranges[i - 1].1
    }
}

/// One function frame of a code address (inlined functions expand into several).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name (demangled), or `[unknown]` / `object+0xoffset`.
    pub function: String,
    /// Source file, where debug info exists.
    pub file: Option<String>,
    /// Source line, where debug info exists.
    pub line: Option<u32>,
    /// The file of the code (`[unknown]` when no mapping holds it).
    pub object: String,
    /// Whether it is the program's own code (not a system library).
    pub own: bool,
}

struct Symbol {
    start: u64,
    size: u64,
    name: String,
}

type Reader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

/// (file offset, file size, link-time address) of a loadable segment.
type Segment = (u64, u64, u64);

/// The whole file, read from its start (the handle may have been read before).
fn read_whole(file: &File) -> std::io::Result<Vec<u8>> {
    use std::io::Seek;
    let mut data = Vec::new();
    let mut f = file;
    f.seek(std::io::SeekFrom::Start(0))?;
    f.read_to_end(&mut data)?;
    Ok(data)
}

fn segments_of(obj: &object::File<'_>) -> Vec<Segment> {
    obj.segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect()
}

/// The link-time address of a file offset, through the loadable segments.
fn svma_in(segments: &[Segment], file_offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|(off, size, _)| *off <= file_offset && file_offset < off + size)
        .map(|(off, _, vaddr)| vaddr + (file_offset - off))
}

struct Loaded {
    data: Vec<u8>,
    segments: Vec<Segment>,
    symbols: Vec<Symbol>,
    dwarf: Option<addr2line::Context<Reader>>,
}

impl Loaded {
    /// Reads and parses the file; refuses it when the kernel reported a different
    /// build id for the mapping (the file was replaced after it was mapped).
    fn load(file: &File, expected_build_id: Option<&[u8]>) -> Result<Loaded, String> {
        let data = read_whole(file).map_err(|e| e.to_string())?;
        let (segments, symbols, has_debug, build_id) = {
            let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
            (
                segments_of(&obj),
                symbols_of(&obj),
                obj.section_by_name(".debug_info").is_some(),
                obj.build_id().ok().flatten().map(<[u8]>::to_vec),
            )
        };
        if let (Some(want), Some(got)) = (expected_build_id, build_id.as_deref()) {
            if !want.is_empty() && want != got {
                return Err(
                    "the file changed after it was mapped (its build id differs from the mapping's)"
                        .to_owned(),
                );
            }
        }
        let mut dwarf = if has_debug { dwarf_of(&data) } else { None };
        let mut symbols = symbols;
        if dwarf.is_none() {
            // Separate debug info installed by the distribution (for example libc6-dbg).
            if let Some(id) = build_id.filter(|id| id.len() > 1) {
                let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                let path = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
                if let Ok(debug) = std::fs::read(path) {
                    dwarf = dwarf_of(&debug);
                    if symbols.is_empty() {
                        if let Ok(obj) = object::File::parse(&*debug) {
                            symbols = symbols_of(&obj);
                        }
                    }
                }
            }
        }
        Ok(Loaded {
            data,
            segments,
            symbols,
            dwarf,
        })
    }

    fn svma(&self, file_offset: u64) -> Option<u64> {
        svma_in(&self.segments, file_offset)
    }

    fn symbol(&self, svma: u64) -> Option<&Symbol> {
        let i = self.symbols.partition_point(|s| s.start <= svma);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        let fits = if s.size > 0 {
            svma < s.start + s.size
        } else {
            // Sizeless (assembler) symbols: up to the next symbol, within reason.
            let next = self.symbols.get(i).map_or(u64::MAX, |n| n.start);
            svma < next && svma - s.start < 1 << 16
        };
        fits.then_some(s)
    }
}

fn symbols_of(obj: &object::File<'_>) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?;
            Some(Symbol {
                start: s.address(),
                size: s.size(),
                name: addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned(),
            })
        })
        .collect();
    symbols.sort_by(|a, b| a.start.cmp(&b.start).then(b.size.cmp(&a.size)));
    symbols.dedup_by_key(|s| s.start);
    symbols
}

fn dwarf_of(data: &[u8]) -> Option<addr2line::Context<Reader>> {
    let obj = object::File::parse(data).ok()?;
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let bytes: Rc<[u8]> = match obj.section_by_name(id.name()) {
            // Compressed sections come back as an error: treat them as absent.
            Some(section) => match section.uncompressed_data() {
                Ok(d) => Rc::from(&*d),
                Err(_) => Rc::from(&[][..]),
            },
            None => Rc::from(&[][..]),
        };
        Ok(gimli::EndianRcSlice::new(bytes, endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
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
            let data = read_whole(info.file.as_ref()?).ok()?;
            let obj = object::File::parse(&*data).ok()?;
            Some(segments_of(&obj))
        });
        let vaddr = svma_in(segments.as_ref()?, addr - m.start + m.pgoff)?;
        Some((info.path.as_str(), vaddr))
    }
}

/// Turns code addresses of observed processes into frames. Loads each object
/// once, on first use, and caches every answer.
pub struct Symbolizer<'a> {
    spaces: &'a AddressSpaces,
    loaded: HashMap<usize, Option<Loaded>>,
    cache: HashMap<(u32, u64, bool), Rc<Vec<Frame>>>,
    /// Objects that could not be loaded, with the reason.
    pub problems: Vec<String>,
}

impl<'a> Symbolizer<'a> {
    /// A symbolizer over the captured address spaces.
    pub fn new(spaces: &'a AddressSpaces) -> Self {
        Symbolizer {
            spaces,
            loaded: HashMap::new(),
            cache: HashMap::new(),
            problems: vec![],
        }
    }

    fn loaded(&mut self, object: usize) -> Option<&Loaded> {
        if !self.loaded.contains_key(&object) {
            let info = &self.spaces.objects[object];
            let result = match &info.file {
                Some(f) => Loaded::load(f, info.build_id.as_deref())
                    .map_err(|e| format!("{}: {e}", info.path)),
                None => Err(format!(
                    "{}: {}",
                    info.path,
                    info.error.as_deref().unwrap_or("not opened")
                )),
            };
            let loaded = match result {
                Ok(l) => Some(l),
                Err(e) => {
                    self.problems.push(e);
                    None
                }
            };
            self.loaded.insert(object, loaded);
        }
        self.loaded.get(&object).and_then(Option::as_ref)
    }

    /// The frames at `addr` in process `pid`, innermost first. A return address
    /// (`is_return`) is looked up one byte earlier, inside the call instruction.
    pub fn frames(&mut self, pid: u32, addr: u64, is_return: bool) -> Rc<Vec<Frame>> {
        let key = (pid, addr, is_return);
        if let Some(f) = self.cache.get(&key) {
            return f.clone();
        }
        let frames = Rc::new(self.resolve(pid, addr, is_return));
        self.cache.insert(key, frames.clone());
        frames
    }

    fn resolve(&mut self, pid: u32, addr: u64, is_return: bool) -> Vec<Frame> {
        let unknown = |object: &str| Frame {
            function: format!("[unknown] {addr:#x}"),
            file: None,
            line: None,
            object: object.to_owned(),
            own: false,
        };
        let spaces = self.spaces;
        let Some(m) = spaces.lookup(pid, addr) else {
            return vec![unknown("[unknown]")];
        };
        let Some(obj_index) = m.object else {
            return vec![unknown(&m.name)];
        };
        let info = &spaces.objects[obj_index];
        let (path, own) = (info.path.clone(), !info.system);
        let short = path.rsplit('/').next().unwrap_or(&path).to_owned();
        let file_offset = addr - m.start + m.pgoff;
        let Some(loaded) = self.loaded(obj_index) else {
            return vec![Frame {
                function: format!("{short}+{file_offset:#x}"),
                own,
                ..unknown(&path)
            }];
        };
        let Some(svma) = loaded.svma(file_offset) else {
            return vec![Frame {
                function: format!("{short}+{file_offset:#x}"),
                own,
                ..unknown(&path)
            }];
        };
        let probe = if is_return {
            svma.saturating_sub(1)
        } else {
            svma
        };
        let mut out = Vec::new();
        if let Some(ctx) = &loaded.dwarf {
            if let Ok(mut iter) = ctx.find_frames(probe).skip_all_loads() {
                while let Ok(Some(frame)) = iter.next() {
                    let function = frame
                        .function
                        .as_ref()
                        .and_then(|f| f.demangle().ok().map(Cow::into_owned));
                    let (file, line) = frame
                        .location
                        .as_ref()
                        .map(|l| (l.file.map(str::to_owned), l.line))
                        .unwrap_or((None, None));
                    out.push(Frame {
                        function: function.unwrap_or_default(),
                        file,
                        line,
                        object: path.clone(),
                        own,
                    });
                }
            }
        }
        let symbol = loaded.symbol(probe).map(|s| s.name.clone());
        if out.is_empty() {
            out.push(Frame {
                function: symbol.unwrap_or_else(|| format!("{short}+{file_offset:#x}")),
                file: None,
                line: None,
                object: path.clone(),
                own,
            });
        } else if let Some(last) = out.last_mut() {
            // The outermost DWARF frame may lack a name (for example assembler code).
            if last.function.is_empty() {
                last.function = symbol.unwrap_or_else(|| format!("{short}+{file_offset:#x}"));
            }
        }
        for f in &mut out {
            if f.function.is_empty() {
                f.function = "[inlined]".to_owned();
            }
        }
        out
    }

    /// Whether `addr` in `pid` is a return address: the instruction before it
    /// is a call (direct `e8 rel32`, or an indirect `ff /2` form). Used to
    /// recover the caller that frame-pointer unwinding skips when the leaf is
    /// frameless library code.
    pub fn is_return_address(&mut self, pid: u32, addr: u64) -> bool {
        let spaces = self.spaces;
        let Some(m) = spaces.lookup(pid, addr) else {
            return false;
        };
        let Some(obj) = m.object else { return false };
        if !m.exec {
            return false;
        }
        let off = addr - m.start + m.pgoff;
        let Some(loaded) = self.loaded(obj) else {
            return false;
        };
        if loaded.svma(off).is_none() {
            return false;
        }
        let off = off as usize;
        let Some(before) = off.checked_sub(7).and_then(|s| loaded.data.get(s..off)) else {
            return false;
        };
        is_call_before(before)
    }
}

/// Whether the 7 bytes before a return address end with a call instruction.
pub fn is_call_before(b: &[u8]) -> bool {
    if b.len() < 7 {
        return false;
    }
    let at = |back: usize| b[b.len() - back];
    // call rel32
    at(5) == 0xe8
        // call [rip+disp32] / call [reg+disp32]
        || (at(6) == 0xff && (at(5) & 0x38) == 0x10 && (at(5) >> 6 == 0b10 || at(5) & 0xc7 == 0x05))
        // call [reg+disp8]
        || (at(3) == 0xff && (at(2) & 0xf8) == 0x50)
        // call reg (optionally with a REX prefix)
        || (at(2) == 0xff && (at(1) & 0xf8) == 0xd0)
        // call [reg]
        || (at(2) == 0xff && (at(1) & 0xf8) == 0x10 && at(1) & 7 != 4 && at(1) & 7 != 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_paths() {
        assert!(is_system_path("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_system_path("/lib64/ld-linux-x86-64.so.2"));
        assert!(!is_system_path("/tmp/fixture_a"));
        assert!(!is_system_path("/usr/bin/gcc"));
    }

    #[test]
    fn call_instructions_are_recognised() {
        // call rel32
        assert!(is_call_before(&[0x90, 0x90, 0xe8, 1, 2, 3, 4]));
        // call *0x1234(%rip)
        assert!(is_call_before(&[0x90, 0xff, 0x15, 0x34, 0x12, 0, 0]));
        // call *%rax
        assert!(is_call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xd0]));
        // call *0x8(%rax)
        assert!(is_call_before(&[0x90, 0x90, 0x90, 0x90, 0xff, 0x50, 0x08]));
        // not a call: mov, nops, ret
        assert!(!is_call_before(&[0x90; 7]));
        assert!(!is_call_before(&[0x48, 0x89, 0xe5, 0x90, 0x90, 0x90, 0xc3]));
        assert!(!is_call_before(&[0xe8]));
    }

    #[test]
    fn lookups_fall_back_to_the_parent_until_exec() {
        let map = |addr, prot, name: &str| Mmap2 {
            pid: 10,
            tid: 10,
            addr,
            len: 0x1000,
            pgoff: 0,
            prot,
            flags: 2,
            build_id: None,
            filename: name.to_owned(),
        };
        let mut s = AddressSpaces::new();
        s.add_mmap(&map(0x1000, 5, "/nonexistent/prog"));
        s.add_mmap(&map(0x5000, 5, "/usr/lib/libc.so.6"));
        s.set_parent(11, 10);
        assert_eq!(s.lookup(11, 0x1800).unwrap().name, "/nonexistent/prog");
        assert!(s.is_own_code(11, 0x1800));
        assert!(!s.is_own_code(11, 0x5800));
        assert!(!s.is_own_code(11, 0x9000));
        s.exec(11);
        assert!(s.lookup(11, 0x1800).is_none());
        assert!(!s.is_own_code(11, 0x1800));
        // A newer mapping over the same range wins.
        s.add_mmap(&map(0x1000, 3, "//anon"));
        assert_eq!(s.lookup(10, 0x1800).unwrap().name, "//anon");
        let o = &s.objects()[0];
        assert!(o.error.is_some(), "a missing file is reported, not hidden");
    }

    #[test]
    fn a_file_replaced_after_mapping_is_not_trusted() {
        // This binary, mapped with a build id that is not its own.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let text = crate::host::proc_maps::parse(&maps)
            .into_iter()
            .find(|e| e.perms.exec && e.path.as_deref() == exe.to_str())
            .expect("our code is mapped");
        let mut s = AddressSpaces::new();
        s.add_mmap(&Mmap2 {
            pid: 1,
            tid: 1,
            addr: text.start,
            len: text.end - text.start,
            pgoff: text.offset,
            prot: 5,
            flags: 2,
            build_id: Some(vec![0xde, 0xad, 0xbe, 0xef]),
            filename: exe.to_string_lossy().into_owned(),
        });
        let mut sym = Symbolizer::new(&s);
        let frames = sym.frames(1, text.start + 16, false);
        assert!(frames[0].function.contains('+'), "{frames:?}");
        assert!(sym.problems[0].contains("build id"), "{:?}", sym.problems);
    }

    #[test]
    fn symbolizes_this_test_binary() {
        // This very function's address must resolve to a frame in this binary.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let entries = crate::host::proc_maps::parse(&maps);
        let mut s = AddressSpaces::new();
        let pid = std::process::id();
        s.add_maps(pid, &entries);
        let addr = symbolizes_this_test_binary as *const () as usize as u64;
        let m = s.lookup(pid, addr).expect("mapped");
        assert_eq!(m.name, exe.to_string_lossy());
        let mut sym = Symbolizer::new(&s);
        let frames = sym.frames(pid, addr, false);
        // In an optimised build the first instructions may belong to a callee
        // inlined there (frames come innermost first): this function is then the
        // outer frame of the same address.
        let own = frames
            .iter()
            .find(|f| f.function.contains("symbolizes_this_test_binary"))
            .unwrap_or_else(|| panic!("{frames:?}"));
        assert!(own
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("symbols.rs")));
        assert!(own.own);
    }
}
