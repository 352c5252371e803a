//! Hot-text footprint: how many distinct code pages the program's user-mode
//! `cpu-clock` samples fall in, against the reach of the iTLB.

use super::report::{Coverage, Itlb};
use crate::sys::tlb::TlbInfo;
use std::collections::HashMap;

/// iTLB entries assumed when the CPU does not report its TLBs (common in VMs):
/// 128 entries for 4 KiB pages (512 KiB of code) and 8 for 2 MiB pages, the
/// sizes of many recent x86 cores' first-level iTLB.
pub const ASSUMED_ITLB_4K: u32 = 128;
/// See [`ASSUMED_ITLB_4K`].
pub const ASSUMED_ITLB_2M: u32 = 8;

/// The iTLB from `cpuid`, or the assumption, saying which.
pub fn itlb(info: &TlbInfo) -> Itlb {
    match info.itlb_4k {
        Some(entries_4k) => Itlb {
            entries_4k,
            entries_2m: info.itlb_2m.unwrap_or(ASSUMED_ITLB_2M),
            stlb_entries_4k: info.stlb_4k,
            source: "cpuid".to_owned(),
        },
        None => Itlb {
            entries_4k: ASSUMED_ITLB_4K,
            entries_2m: ASSUMED_ITLB_2M,
            stlb_entries_4k: None,
            source: format!(
                "assumed ({ASSUMED_ITLB_4K} x 4 KiB, {ASSUMED_ITLB_2M} x 2 MiB): this CPU reports no TLB sizes in cpuid (common in virtual machines)"
            ),
        },
    }
}

/// Counts sorted from the hottest page down.
fn sorted_counts(pages: &HashMap<(u32, u64), u64>) -> Vec<u64> {
    let mut counts: Vec<u64> = pages.values().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts
}

/// How many of the hottest pages it takes to cover `share` of all samples.
fn pages_for(counts: &[u64], total: u64, share: f64) -> u64 {
    let goal = (total as f64 * share).ceil() as u64;
    let mut sum = 0;
    for (i, c) in counts.iter().enumerate() {
        sum += c;
        if sum >= goal {
            return i as u64 + 1;
        }
    }
    counts.len() as u64
}

fn coverage(pages: &HashMap<(u32, u64), u64>) -> Coverage {
    let counts = sorted_counts(pages);
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return Coverage::default();
    }
    Coverage {
        p50: pages_for(&counts, total, 0.50),
        p90: pages_for(&counts, total, 0.90),
        p99: pages_for(&counts, total, 0.99),
    }
}

/// The coverage of 4 KiB pages (keys are `(pid, address >> 12)`), of 2 MiB
/// pages, and the share of samples beyond the hottest `reach_pages` 4 KiB pages.
pub fn footprint(
    pages_4k: &HashMap<(u32, u64), u64>,
    reach_pages: u32,
) -> (Coverage, Coverage, f64) {
    let mut pages_2m: HashMap<(u32, u64), u64> = HashMap::new();
    for (&(pid, page), &n) in pages_4k {
        *pages_2m.entry((pid, page >> 9)).or_default() += n;
    }
    let counts = sorted_counts(pages_4k);
    let total: u64 = counts.iter().sum();
    let within: u64 = counts.iter().take(reach_pages as usize).sum();
    let beyond = if total == 0 {
        0.0
    } else {
        1.0 - within as f64 / total as f64
    };
    (coverage(pages_4k), coverage(&pages_2m), beyond)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tight_loop_fits() {
        let mut pages = HashMap::new();
        pages.insert((1, 0x401), 1000);
        pages.insert((1, 0x402), 10);
        let (c4, c2, beyond) = footprint(&pages, 128);
        assert_eq!(
            c4,
            Coverage {
                p50: 1,
                p90: 1,
                p99: 1
            }
        );
        assert_eq!(c2.p99, 1);
        assert_eq!(beyond, 0.0);
    }

    #[test]
    fn spread_code_exceeds_the_reach() {
        // 2304 pages, each equally hot: 9 MiB of hot text.
        let pages: HashMap<(u32, u64), u64> = (0..2304u64).map(|p| ((1, 0x400 + p), 10)).collect();
        let (c4, c2, beyond) = footprint(&pages, 128);
        assert_eq!(c4.p50, 1152);
        assert_eq!(c4.p90, 2074); // ceil(0.9 * 23040) / 10 pages
        assert_eq!(c4.p99, 2281);
        assert!(c2.p99 >= 5 && c2.p99 <= 6, "{c2:?}");
        assert!((beyond - (1.0 - 128.0 / 2304.0)).abs() < 1e-9);
    }

    #[test]
    fn no_samples_no_coverage() {
        let (c4, _, beyond) = footprint(&HashMap::new(), 128);
        assert_eq!(c4, Coverage::default());
        assert_eq!(beyond, 0.0);
    }

    #[test]
    fn assumed_itlb_says_so() {
        let i = itlb(&TlbInfo::default());
        assert_eq!(i.reach_4k(), 512 << 10);
        assert!(i.source.starts_with("assumed"));
        let i = itlb(&TlbInfo {
            itlb_4k: Some(256),
            itlb_2m: Some(32),
            ..TlbInfo::default()
        });
        assert_eq!(i.entries_4k, 256);
        assert_eq!(i.source, "cpuid");
    }
}
