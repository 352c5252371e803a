//! Kernel symbol addresses from `/proc/kallsyms`, only as far as `stat`
//! needs them: the address ranges of the page-fault entry, to tell which
//! sampled kernel stacks are inside the page-fault handler.
//!
//! Reading `/proc/kallsyms` costs about 40 ms of kernel time here (the kernel
//! formats some 120,000 lines, and `exc_page_fault` sits near the end), so it
//! is read only after a run that has kernel samples to classify, and the
//! ranges found are kept in the user's cache for the rest of the boot
//! ([`page_fault_entry`]). The addresses change at every boot (KASLR) and are
//! shown to root only.

use super::user_cache::{self, CacheDir, Purpose};
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

/// The cache file of [`page_fault_entry`], in the directory
/// [`user_cache::directory`](super::user_cache::directory) picks.
pub const CACHE_FILE: &str = "kernel-page-fault-entry";

/// The ranges of [`PAGE_FAULT_ENTRY`] for this boot: from the user's cache
/// when a run earlier in this boot saved them (a few `stat`s and a read of
/// under 200 bytes), else from [`live_page_fault_entry`] (about 40 ms), then
/// saved there for the next run (a write and an `fsync`). The cache is
/// keyed by the boot id, which the kernel draws anew at every boot, as KASLR
/// draws the addresses; a cache that cannot be read or written only costs
/// the 40 ms.
pub fn page_fault_entry() -> Result<Vec<Range>, KallsymsError> {
    page_fault_entry_cached_in(&user_cache::candidates_from_env())
}

/// [`page_fault_entry`] with the cache in the first usable of `dirs`
/// ([`user_cache::choose`]).
pub fn page_fault_entry_cached_in(dirs: &[CacheDir]) -> Result<Vec<Range>, KallsymsError> {
    let Some(boot) = boot_id() else {
        return live_page_fault_entry();
    };
    if let Ok(chosen) = user_cache::choose(dirs, Purpose::Read) {
        if let Ok(Some((text, _))) = user_cache::read(&chosen.path, CACHE_FILE, 4096) {
            if let Some(r) = parse_cached(&text, &boot) {
                return Ok(r);
            }
        }
    }
    let r = live_page_fault_entry()?;
    if let Ok(chosen) = user_cache::choose(dirs, Purpose::Write) {
        // Not saved: the next run reads /proc/kallsyms again, nothing worse.
        let _ = user_cache::write(&chosen.path, CACHE_FILE, cache_text(&boot, &r).as_bytes());
    }
    Ok(r)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), if readable.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && id.len() <= 64).then(|| id.to_owned())
}

/// The cache file's text: `boot BOOT_ID`, then a `START END` line (hex) per
/// name of [`PAGE_FAULT_ENTRY`], in order.
fn cache_text(boot: &str, ranges: &[Range]) -> String {
    let mut text = format!("boot {boot}\n");
    for (start, end) in ranges {
        text.push_str(&format!("{start:x} {end:x}\n"));
    }
    text
}

/// The ranges in a cache file written by [`cache_text`] in the boot `boot`;
/// `None` for another boot or anything malformed (one range per name, each
/// non-empty and in the kernel's upper half).
fn parse_cached(text: &str, boot: &str) -> Option<Vec<Range>> {
    let mut lines = text.lines();
    if lines.next()?.strip_prefix("boot ")? != boot {
        return None;
    }
    let ranges: Vec<Range> = lines
        .map(|l| {
            let (s, e) = l.split_once(' ')?;
            let (s, e) = (
                u64::from_str_radix(s, 16).ok()?,
                u64::from_str_radix(e, 16).ok()?,
            );
            (s >= 1 << 63 && s < e).then_some((s, e))
        })
        .collect::<Option<_>>()?;
    (ranges.len() == PAGE_FAULT_ENTRY.len()).then_some(ranges)
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
    fn a_cached_entry_is_used_only_in_its_boot_and_whole() {
        let r = vec![
            (0xffffffff81000c60, 0xffffffff81000c90),
            (0xffffffff821f2ed0, 0xffffffff821f3640),
        ];
        let text = cache_text("b-1", &r);
        assert_eq!(parse_cached(&text, "b-1"), Some(r.clone()));
        assert_eq!(parse_cached(&text, "b-2"), None, "another boot");
        assert_eq!(parse_cached(&cache_text("b-1", &r[..1]), "b-1"), None);
        let empty = cache_text("b-1", &[(0xffffffff81000c60, 0xffffffff81000c60), r[1]]);
        assert_eq!(parse_cached(&empty, "b-1"), None, "an empty range");
        let user = cache_text("b-1", &[(0x1000, 0x2000), r[1]]);
        assert_eq!(parse_cached(&user, "b-1"), None, "a user-space address");
        assert_eq!(parse_cached("boot b-1\nzz 1\n", "b-1"), None);
        assert_eq!(parse_cached("", "b-1"), None);
    }

    proptest::proptest! {
        #[test]
        fn any_cache_text_parses_or_is_refused_without_panic(text in "\\PC{0,200}") {
            if let Some(r) = parse_cached(&text, "b") {
                proptest::prop_assert_eq!(r.len(), PAGE_FAULT_ENTRY.len());
            }
        }

        #[test]
        fn written_ranges_read_back(starts in proptest::collection::vec(1u64 << 63..u64::MAX - (1 << 20), 2), lens in proptest::collection::vec(1u64..1 << 20, 2)) {
            let r: Vec<Range> = starts.iter().zip(&lens).map(|(&s, &l)| (s, s + l)).collect();
            proptest::prop_assert_eq!(parse_cached(&cache_text("b", &r), "b"), Some(r));
        }
    }

    #[test]
    fn a_saved_entry_of_this_boot_is_used_instead_of_kallsyms() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = [CacheDir::private(tmp.path().join("cache"))];
        let boot = boot_id().expect("/proc/sys/kernel/random/boot_id");
        // Ranges no kernel has: only the cache can give them back.
        let planted = vec![(0xffff_8000_0000_1000, 0xffff_8000_0000_2000); 2];
        user_cache::write(
            &dirs[0].path,
            CACHE_FILE,
            cache_text(&boot, &planted).as_bytes(),
        )
        .unwrap();
        assert_eq!(page_fault_entry_cached_in(&dirs).unwrap(), planted);
        // Another boot's file is read past: kallsyms (root), then saved for this boot.
        user_cache::write(
            &dirs[0].path,
            CACHE_FILE,
            cache_text("another", &planted).as_bytes(),
        )
        .unwrap();
        match page_fault_entry_cached_in(&dirs) {
            Ok(live) => {
                assert_ne!(live, planted);
                let (text, _) = user_cache::read(&dirs[0].path, CACHE_FILE, 4096)
                    .unwrap()
                    .unwrap();
                assert_eq!(parse_cached(&text, &boot), Some(live));
            }
            Err(e) if !pagewise_testkit::is_root() => {
                pagewise_testkit::skip!(pagewise_testkit::Need::Root, "{e}")
            }
            Err(e) => panic!("{e}"),
        }
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
