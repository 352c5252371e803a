//! Kernel symbol addresses from `/proc/kallsyms`, only as far as `stat`
//! needs them: the address ranges of the page-fault entry, to tell which
//! sampled kernel stacks are inside the page-fault handler.
//!
//! Reading `/proc/kallsyms` costs about 40 ms of kernel time here (the kernel
//! formats some 120,000 lines, and `exc_page_fault` sits near the end), so it
//! is read only after a run that has kernel samples to classify. The
//! addresses change at every boot (KASLR) and are shown to root only.

use std::io::BufRead;

/// An address range: first byte and one past the last.
pub type Range = (u64, u64);

/// The kernel functions every page fault passes through on x86-64: the IDT
/// entry and the C handler it calls (also reached through FRED's entry).
pub const PAGE_FAULT_ENTRY: [&str; 2] = ["asm_exc_page_fault", "exc_page_fault"];

/// Why the ranges could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KallsymsError {
    /// The file could not be read.
    #[error("cannot read /proc/kallsyms: {error}")]
    Read {
        /// Why.
        error: std::io::Error,
    },
    /// The addresses are hidden (`kernel.kptr_restrict`, or not root).
    #[error("/proc/kallsyms hides the addresses (kernel.kptr_restrict, or not root)")]
    Hidden,
    /// A name is not in the file.
    #[error("the kernel has no symbol {0} in /proc/kallsyms")]
    Missing(String),
}

/// The ranges of `names` in kallsyms text (`ADDRESS TYPE NAME [MODULE]`
/// lines): each from its address to the next higher address in the file.
/// Stops reading once every name has its end. Text symbols only.
pub fn ranges(text: impl BufRead, names: &[&str]) -> Result<Vec<Range>, KallsymsError> {
    let mut found: Vec<Option<Range>> = vec![None; names.len()];
    // Names whose start is known and whose end is the next higher address.
    let mut open: Vec<(usize, u64)> = vec![];
    let mut any_address = false;
    for line in text.lines() {
        let line = line.map_err(|error| KallsymsError::Read { error })?;
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        any_address |= addr != 0;
        open.retain(|&(i, start)| {
            if addr > start {
                found[i] = Some((start, addr));
                false
            } else {
                true
            }
        });
        if matches!(kind, "T" | "t") {
            if let Some(i) = names.iter().position(|n| *n == name) {
                if found[i].is_none() && !open.iter().any(|&(j, _)| j == i) {
                    open.push((i, addr));
                }
            }
        }
        if open.is_empty() && found.iter().all(Option::is_some) {
            break;
        }
    }
    if !any_address {
        return Err(KallsymsError::Hidden);
    }
    names
        .iter()
        .zip(found)
        .map(|(n, r)| r.ok_or_else(|| KallsymsError::Missing((*n).to_owned())))
        .collect()
}

/// The ranges of [`PAGE_FAULT_ENTRY`] in the running kernel. Reads
/// `/proc/kallsyms` (about 40 ms).
pub fn live_page_fault_entry() -> Result<Vec<Range>, KallsymsError> {
    let file =
        std::fs::File::open("/proc/kallsyms").map_err(|error| KallsymsError::Read { error })?;
    ranges(std::io::BufReader::new(file), &PAGE_FAULT_ENTRY)
}

/// Whether any of `frames` lies in one of `ranges`.
pub fn any_in(frames: &[u64], ranges: &[Range]) -> bool {
    frames
        .iter()
        .any(|&ip| ranges.iter().any(|&(s, e)| s <= ip && ip < e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81000c60 T asm_exc_page_fault
ffffffff81000c90 T asm_int80_emulation
ffffffff821f2ed0 T exc_page_fault
ffffffff821f2ed0 t exc_page_fault_alias
ffffffff821f3640 T __pfx_get_cpu_entry_area
ffffffffc0000000 t some_module_fn\t[ext4]
";

    #[test]
    fn each_range_ends_at_the_next_higher_address() {
        let r = ranges(TEXT.as_bytes(), &PAGE_FAULT_ENTRY).unwrap();
        assert_eq!(
            r,
            vec![
                (0xffffffff81000c60, 0xffffffff81000c90),
                (0xffffffff821f2ed0, 0xffffffff821f3640)
            ]
        );
        assert!(any_in(&[1, 0xffffffff81000c82], &r));
        assert!(!any_in(&[0xffffffff81000c90], &r));
    }

    #[test]
    fn hidden_and_missing_symbols_are_errors() {
        let hidden: String = TEXT
            .lines()
            .map(|l| format!("0000000000000000{}\n", &l[16..]))
            .collect();
        assert!(matches!(
            ranges(hidden.as_bytes(), &PAGE_FAULT_ENTRY),
            Err(KallsymsError::Hidden)
        ));
        assert!(matches!(
            ranges(TEXT.as_bytes(), &["no_such_function"]),
            Err(KallsymsError::Missing(n)) if n == "no_such_function"
        ));
    }

    #[test]
    fn the_running_kernel_has_a_page_fault_entry_for_root() {
        match live_page_fault_entry() {
            Ok(r) => assert!(r.iter().all(|(s, e)| s < e), "{r:x?}"),
            Err(e) if !pagewise_testkit::is_root() => {
                pagewise_testkit::skip!(pagewise_testkit::Need::Root, "{e}")
            }
            Err(e @ KallsymsError::Hidden) => {
                pagewise_testkit::skip!(pagewise_testkit::Need::Other, "{e}")
            }
            Err(e) => panic!("{e}"),
        }
    }
}
