//! The functions of an ELF file: name, link-time address, size.

use crate::host::user_files;
use std::collections::HashMap;
use std::path::Path;

/// One function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Symbol name (mangled, as the linker knows it).
    pub name: String,
    /// Link-time virtual address.
    pub vaddr: u64,
    /// Size in bytes (at least 1).
    pub size: u64,
}

/// The function symbols of one binary, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct FunctionTable {
    functions: Vec<Function>,
    by_name: HashMap<String, usize>,
}

/// Why a binary's symbols could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// Not an object file.
    #[error("{path}: not an ELF file: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// No function symbols at all (stripped).
    #[error(
        "{0}: no function symbols (stripped?): rebuild with symbols or give an unstripped copy"
    )]
    NoSymbols(String),
}

/// Calls `visit(vaddr, size, name)` for each function symbol (`STT_FUNC`,
/// `STT_GNU_IFUNC`, non-zero address) of the ELF file at `path`, from
/// `.symtab` then `.dynsym`. Reads the headers, then each symbol table and its
/// string table with one read each, never the code (for a 99 MB `node` about
/// 12 MB), and keeps nothing: what the perf map of a moved range needs.
pub fn visit_functions(path: &Path, visit: impl FnMut(u64, u64, &str)) -> Result<(), SymbolsError> {
    read_elf(path, |cache| visit_elf_functions(cache, visit))
}

/// Runs `read` over the file at `path` through a read cache (so only what it
/// asks for is read; only a regular file is opened), and names the file in
/// the errors it returns.
fn read_elf<T>(
    path: &Path,
    read: impl FnOnce(&object::ReadCache<std::fs::File>) -> Result<T, SymbolsError>,
) -> Result<T, SymbolsError> {
    let file = user_files::open_input(path).map_err(|error| SymbolsError::Read {
        path: path.display().to_string(),
        error,
    })?;
    read(&object::ReadCache::new(file)).map_err(|e| match e {
        SymbolsError::Parse { reason, .. } => SymbolsError::Parse {
            path: path.display().to_string(),
            reason,
        },
        SymbolsError::NoSymbols(_) => SymbolsError::NoSymbols(path.display().to_string()),
        other => other,
    })
}

/// The byte order and the section table (headers and names) of ELF data.
#[allow(clippy::type_complexity)] // the object crate's own types, spelled out once
fn section_table<'data, Elf, R>(
    data: R,
) -> Result<(Elf::Endian, object::read::elf::SectionTable<'data, Elf, R>), SymbolsError>
where
    Elf: object::read::elf::FileHeader<Endian = object::Endianness>,
    R: object::ReadRef<'data>,
{
    let header = Elf::parse(data).map_err(parse_error)?;
    let endian = header.endian().map_err(parse_error)?;
    let sections = header.sections(endian, data).map_err(parse_error)?;
    Ok((endian, sections))
}

fn parse_error(e: impl std::fmt::Display) -> SymbolsError {
    SymbolsError::Parse {
        path: String::new(),
        reason: e.to_string(),
    }
}

/// [`visit_functions`] over ELF data (a file through a read cache, or bytes).
fn visit_elf_functions<'data, R: object::ReadRef<'data>>(
    data: R,
    visit: impl FnMut(u64, u64, &str),
) -> Result<(), SymbolsError> {
    use object::elf::{FileHeader32, FileHeader64};
    match object::FileKind::parse(data).map_err(parse_error)? {
        object::FileKind::Elf64 => visit_elf::<FileHeader64<object::Endianness>, R>(data, visit),
        object::FileKind::Elf32 => visit_elf::<FileHeader32<object::Endianness>, R>(data, visit),
        other => Err(parse_error(format!("a {other:?} file, not ELF"))),
    }
}

fn visit_elf<'data, Elf, R>(
    data: R,
    mut visit: impl FnMut(u64, u64, &str),
) -> Result<(), SymbolsError>
where
    Elf: object::read::elf::FileHeader<Endian = object::Endianness>,
    R: object::ReadRef<'data>,
{
    use object::read::elf::{SectionHeader, Sym};
    let (endian, sections) = section_table::<Elf, R>(data)?;
    let mut any = false;
    for kind in [object::elf::SHT_SYMTAB, object::elf::SHT_DYNSYM] {
        let table = sections.symbols(endian, data, kind).map_err(parse_error)?;
        if table.symbols().is_empty() {
            continue;
        }
        // The whole string table in one read (names one by one would be a read each).
        let strings = sections
            .section(table.string_section())
            .and_then(|s| s.data(endian, data))
            .map_err(parse_error)?;
        for sym in table.symbols() {
            let function = matches!(
                sym.st_type(),
                object::elf::STT_FUNC | object::elf::STT_GNU_IFUNC
            );
            let vaddr: u64 = sym.st_value(endian).into();
            if !function || vaddr == 0 {
                continue;
            }
            let name = strings
                .get(sym.st_name(endian) as usize..)
                .and_then(|s| s.split(|b| *b == 0).next())
                .and_then(|s| std::str::from_utf8(s).ok());
            // Order files and perf maps hold one name per line: a name with a
            // space or a line break (only a damaged or hostile file has one)
            // could not be written there, so it is left out.
            let writable = |n: &&str| {
                !n.is_empty() && !n.contains(|c: char| c.is_whitespace() || c.is_control())
            };
            if let Some(name) = name.filter(writable) {
                any = true;
                visit(vaddr, sym.st_size(endian).into().max(1), name);
            }
        }
    }
    if !any {
        return Err(SymbolsError::NoSymbols(String::new()));
    }
    Ok(())
}

fn collect_functions(
    read: impl FnOnce(&mut dyn FnMut(u64, u64, &str)) -> Result<(), SymbolsError>,
) -> Result<FunctionTable, SymbolsError> {
    let mut functions = Vec::new();
    read(&mut |vaddr, size, name| {
        functions.push(Function {
            name: name.to_owned(),
            vaddr,
            size,
        })
    })?;
    Ok(FunctionTable::from_functions(functions))
}

/// Where an ELF file's loadable segments sit, and its build ID: what turns
/// a file offset (from a profile's mapping) into a link-time address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectLayout {
    /// Each `PT_LOAD` segment: file offset, size in the file, link-time address.
    pub segments: Vec<(u64, u64, u64)>,
    /// The GNU build ID, when the file has one.
    pub build_id: Option<Vec<u8>>,
}

impl ObjectLayout {
    /// Reads the program headers and the build-ID note of `path` (a few
    /// small reads, never the code).
    pub fn read(path: &Path) -> Result<ObjectLayout, SymbolsError> {
        use object::{Object, ObjectSegment};
        read_elf(path, |cache| {
            let obj = object::File::parse(cache).map_err(parse_error)?;
            let segments = obj
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, size, s.address())
                })
                .collect();
            let build_id = obj.build_id().ok().flatten().map(<[u8]>::to_vec);
            Ok(ObjectLayout { segments, build_id })
        })
    }

    /// The link-time address of `file_offset`, through the segment holding it.
    pub fn link_address(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(offset, size, _)| *offset <= file_offset && file_offset - offset < *size)
            .map(|(offset, _, vaddr)| vaddr + (file_offset - offset))
    }
}

/// Names of executable sections that a toolchain fills with code its profile
/// found cold: BOLT's `.bolt.org.text` (the original copy of every function
/// it did not rewrite), and the split-off cold parts of `.text.cold` (BOLT)
/// and `.text.unlikely` (GCC and Clang, when the linker keeps it apart).
pub const COLD_TEXT_SECTIONS: [&str; 3] = [".bolt.org.text", ".text.cold", ".text.unlikely"];

/// What a loaded section holds, for deciding which text pages are worth moving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    /// Executable code.
    Code,
    /// Executable code its toolchain marked cold ([`COLD_TEXT_SECTIONS`]).
    ColdCode,
    /// Loaded data that is not executable (`.eh_frame`, `.rodata`…).
    Data,
}

/// One loaded section: name, link-time address, size and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSection {
    /// The section's name.
    pub name: String,
    /// Link-time address.
    pub vaddr: u64,
    /// Size in bytes.
    pub size: u64,
    /// What it holds.
    pub kind: SectionKind,
}

/// The loaded (`SHF_ALLOC`), non-empty sections of the ELF file at `path`, in
/// file order. Cost: three small reads (the ELF header, the section headers,
/// the section-name table), never the code or the symbols.
pub fn loaded_sections(path: &Path) -> Result<Vec<LoadedSection>, SymbolsError> {
    use object::elf::{FileHeader32, FileHeader64};
    read_elf(path, |cache| {
        match object::FileKind::parse(cache).map_err(parse_error)? {
            object::FileKind::Elf64 => sections_of::<FileHeader64<object::Endianness>, _>(cache),
            object::FileKind::Elf32 => sections_of::<FileHeader32<object::Endianness>, _>(cache),
            other => Err(parse_error(format!("a {other:?} file, not ELF"))),
        }
    })
}

/// [`loaded_sections`] over ELF data: the section headers and their names
/// only (the high-level `object::File` would read the symbol tables too).
fn sections_of<'data, Elf, R>(data: R) -> Result<Vec<LoadedSection>, SymbolsError>
where
    Elf: object::read::elf::FileHeader<Endian = object::Endianness>,
    R: object::ReadRef<'data>,
{
    use object::read::elf::SectionHeader;
    let (endian, sections) = section_table::<Elf, R>(data)?;
    Ok(sections
        .iter()
        .filter_map(|section| {
            let flags: u64 = section.sh_flags(endian).into();
            let size: u64 = section.sh_size(endian).into();
            if flags & u64::from(object::elf::SHF_ALLOC) == 0 || size == 0 {
                return None;
            }
            let name = sections.section_name(endian, section).ok()?;
            let name = String::from_utf8_lossy(name).into_owned();
            let kind = match flags & u64::from(object::elf::SHF_EXECINSTR) != 0 {
                true if COLD_TEXT_SECTIONS.contains(&name.as_str()) => SectionKind::ColdCode,
                true => SectionKind::Code,
                false => SectionKind::Data,
            };
            Some(LoadedSection {
                name,
                vaddr: section.sh_addr(endian).into(),
                size,
                kind,
            })
        })
        .collect())
}

impl FunctionTable {
    /// Reads the `.symtab` (and `.dynsym`) function symbols of `path`.
    /// Cost: reads the headers and the symbol and string tables (not the
    /// code), then sorts and indexes every function by name. Only a regular
    /// file is read: a FIFO or a device (`/dev/zero`) is refused at once.
    pub fn read(path: &Path) -> Result<FunctionTable, SymbolsError> {
        collect_functions(|visit| visit_functions(path, visit))
    }

    /// Parses function symbols from ELF bytes (names with white space or
    /// control characters are left out: see `visit_elf`).
    pub fn parse(data: &[u8]) -> Result<FunctionTable, SymbolsError> {
        collect_functions(|visit| visit_elf_functions(data, visit))
    }

    /// Builds a table from a list (duplicates by address keep the first name;
    /// a size of 0 counts as 1).
    pub fn from_functions(mut functions: Vec<Function>) -> FunctionTable {
        for f in &mut functions {
            f.size = f.size.max(1);
        }
        functions.sort_by(|a, b| a.vaddr.cmp(&b.vaddr).then(a.name.cmp(&b.name)));
        functions.dedup_by_key(|f| f.vaddr);
        let by_name = functions
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        FunctionTable { functions, by_name }
    }

    /// All functions by address.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The index of the function containing `vaddr`. Binary search.
    pub fn at(&self, vaddr: u64) -> Option<usize> {
        let i = self
            .functions
            .partition_point(|f| f.vaddr <= vaddr)
            .checked_sub(1)?;
        let f = &self.functions[i];
        // vaddr >= f.vaddr here; no sum that could pass 2^64.
        (vaddr - f.vaddr < f.size).then_some(i)
    }

    /// The index of the function named `name`.
    pub fn by_name(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let t = FunctionTable::from_functions(vec![
            Function {
                name: "b".into(),
                vaddr: 0x2000,
                size: 0x10,
            },
            Function {
                name: "a".into(),
                vaddr: 0x1000,
                size: 0x100,
            },
        ]);
        assert_eq!(t.at(0x1000), Some(0));
        assert_eq!(t.at(0x10ff), Some(0));
        assert_eq!(t.at(0x1100), None);
        assert_eq!(t.at(0x2005), Some(1));
        assert_eq!(t.by_name("b"), Some(1));
        assert_eq!(t.at(0x10), None);
    }

    #[test]
    fn reads_this_test_binary() {
        let t = FunctionTable::read(&std::env::current_exe().unwrap()).unwrap();
        assert!(t.functions().len() > 100);
    }

    #[test]
    fn layouts_map_file_offsets_to_link_time_addresses() {
        let layout = ObjectLayout {
            segments: vec![(0, 0x1000, 0x40_0000), (0x1000, 0x500, 0x40_1000)],
            build_id: None,
        };
        assert_eq!(layout.link_address(0x10), Some(0x40_0010));
        assert_eq!(layout.link_address(0x1100), Some(0x40_1100));
        assert_eq!(layout.link_address(0x1500), None);
        let this = ObjectLayout::read(&std::env::current_exe().unwrap()).unwrap();
        assert!(this.segments.len() >= 2, "{this:?}");
        assert!(ObjectLayout::read(Path::new("/nonexistent")).is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            FunctionTable::parse(b"not elf"),
            Err(SymbolsError::Parse { .. })
        ));
    }
}
