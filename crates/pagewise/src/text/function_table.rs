//! The functions of an ELF file: name, link-time address, size.

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
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
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

impl FunctionTable {
    /// Reads the `.symtab` (and `.dynsym`) function symbols of `path`.
    /// Cost: reads the whole file once.
    pub fn read(path: &Path) -> Result<FunctionTable, SymbolsError> {
        let data = std::fs::read(path).map_err(|source| SymbolsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data).map_err(|e| match e {
            SymbolsError::Parse { reason, .. } => SymbolsError::Parse {
                path: path.display().to_string(),
                reason,
            },
            SymbolsError::NoSymbols(_) => SymbolsError::NoSymbols(path.display().to_string()),
            other => other,
        })
    }

    /// Parses function symbols from ELF bytes.
    pub fn parse(data: &[u8]) -> Result<FunctionTable, SymbolsError> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let file = object::File::parse(data).map_err(|e| SymbolsError::Parse {
            path: String::new(),
            reason: e.to_string(),
        })?;
        let functions: Vec<Function> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                Some(Function {
                    name: s.name().ok()?.to_owned(),
                    vaddr: s.address(),
                    size: s.size().max(1),
                })
            })
            .collect();
        if functions.is_empty() {
            return Err(SymbolsError::NoSymbols(String::new()));
        }
        Ok(Self::from_functions(functions))
    }

    /// Builds a table from a list (duplicates by address keep the first name).
    pub fn from_functions(mut functions: Vec<Function>) -> FunctionTable {
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
        (vaddr < f.vaddr + f.size).then_some(i)
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
    fn garbage_is_an_error() {
        assert!(matches!(
            FunctionTable::parse(b"not elf"),
            Err(SymbolsError::Parse { .. })
        ));
    }
}
