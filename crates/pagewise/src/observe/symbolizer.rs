//! Symbolization of the code addresses of observed processes: function,
//! file and line (with inlined frames) from DWARF via `addr2line`, else the
//! ELF symbol table via `object`. The mappings and files come from
//! [`AddressSpaces`].

use super::address_spaces::{read_whole, segments_of, svma_in, AddressSpaces, Segment};
use super::names::short_name;
use super::runtimes::{self, JitSymbol};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::rc::Rc;

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
    /// Generated code named by the process's perf map (a JIT's script function).
    pub jit: bool,
}

struct Symbol {
    start: u64,
    size: u64,
    name: String,
}

type Reader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

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
                // Demangled when looked up: a large program (node: 150,000
                // symbols) would spend seconds demangling names never shown.
                name: name.to_owned(),
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

/// Turns code addresses of observed processes into frames. Loads each object
/// once, on first use, and caches every answer.
pub struct Symbolizer<'a> {
    spaces: &'a AddressSpaces,
    loaded: HashMap<usize, Option<Loaded>>,
    cache: HashMap<(u32, u64, bool), Rc<Vec<Frame>>>,
    perf_maps: HashMap<u32, Option<Vec<JitSymbol>>>,
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
            perf_maps: HashMap::new(),
            problems: vec![],
        }
    }

    /// The perf-map frame of `addr` in process `pid` (generated code that
    /// no file backs), when the process wrote a perf map that names it.
    fn jit_frame(&mut self, pid: u32, addr: u64) -> Option<Frame> {
        let map = self
            .perf_maps
            .entry(pid)
            .or_insert_with(|| runtimes::read_perf_map(pid));
        let sym = runtimes::lookup(map.as_deref()?, addr)?;
        Some(Frame {
            function: sym.name.clone(),
            file: None,
            line: None,
            object: format!("/tmp/perf-{pid}.map"),
            own: true,
            jit: true,
        })
    }

    fn loaded(&mut self, object: usize) -> Option<&Loaded> {
        if !self.loaded.contains_key(&object) {
            let info = &self.spaces.objects()[object];
            let result = match info.file() {
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
            jit: false,
        };
        let spaces = self.spaces;
        let Some(m) = spaces.lookup(pid, addr) else {
            return vec![self
                .jit_frame(pid, addr)
                .unwrap_or_else(|| unknown("[unknown]"))];
        };
        let Some(obj_index) = m.object else {
            let name = m.name.clone();
            return vec![self.jit_frame(pid, addr).unwrap_or_else(|| unknown(&name))];
        };
        let info = &spaces.objects()[obj_index];
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
                        jit: false,
                    });
                }
            }
        }
        let symbol = loaded
            .symbol(probe)
            .map(|s| addr2line::demangle_auto(Cow::Borrowed(&s.name), None).into_owned());
        if out.is_empty() {
            out.push(Frame {
                function: symbol.unwrap_or_else(|| format!("{short}+{file_offset:#x}")),
                file: None,
                line: None,
                object: path.clone(),
                own,
                jit: false,
            });
        } else if let Some(last) = out.last_mut() {
            // The outermost DWARF frame may lack a name (for example assembler code),
            // or have only the unqualified name of a C++ member function
            // (`fill_with` for `grid::Tensor<…>::fill_with<…>(…)`): the symbol
            // table's name of the function is the full one.
            match symbol {
                _ if last.function.is_empty() => {
                    last.function = symbol.unwrap_or_else(|| format!("{short}+{file_offset:#x}"));
                }
                Some(sym)
                    if !short_name(&last.function).contains("::")
                        && sym.contains("::")
                        && short_name(&sym).ends_with(&short_name(&last.function)) =>
                {
                    last.function = sym;
                }
                _ => {}
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
    use super::super::record::Mmap2;
    use super::*;

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
            time: None,
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
            .is_some_and(|f| f.ends_with("symbolizer.rs")));
        assert!(own.own);
    }
}
