//! TLB sizes from `cpuid`: Intel's deterministic address translation leaf
//! (0x18) and AMD's L1/L2 TLB leaves (0x8000_0005/6).
//!
//! Virtual machines often hide these leaves; then every field is `None` and the
//! caller must say that it assumed a size.

/// Entries of the instruction TLBs, per page size, where the CPU reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlbInfo {
    /// First-level instruction TLB entries for 4 KiB pages.
    pub itlb_4k: Option<u32>,
    /// First-level instruction TLB entries for 2 MiB pages.
    pub itlb_2m: Option<u32>,
    /// Second-level (shared or instruction) TLB entries for 4 KiB pages.
    pub stlb_4k: Option<u32>,
    /// Second-level TLB entries for 2 MiB pages.
    pub stlb_2m: Option<u32>,
}

/// One sub-leaf of cpuid leaf 0x18 as raw registers (eax, ebx, ecx, edx).
pub type Leaf18 = (u32, u32, u32, u32);

/// Decodes Intel cpuid leaf 0x18 sub-leaves into instruction-TLB sizes.
/// Pure, so it is tested with register values from real CPUs.
pub fn decode_leaf18(subleaves: &[Leaf18]) -> TlbInfo {
    let mut info = TlbInfo::default();
    for &(_, ebx, ecx, edx) in subleaves {
        let kind = edx & 0x1f;
        if kind == 0 {
            continue;
        }
        let level = (edx >> 5) & 7;
        let ways = ebx >> 16;
        let entries = ways.saturating_mul(ecx);
        let four_k = ebx & 1 != 0;
        let two_m = ebx & 2 != 0;
        // 2 = instruction, 3 = unified.
        let instruction = kind == 2 || kind == 3;
        if !instruction || entries == 0 {
            continue;
        }
        let (small, large) = if level == 1 {
            (&mut info.itlb_4k, &mut info.itlb_2m)
        } else {
            (&mut info.stlb_4k, &mut info.stlb_2m)
        };
        if four_k {
            *small = Some(small.unwrap_or(0) + entries);
        }
        if two_m {
            *large = Some(large.unwrap_or(0) + entries);
        }
    }
    info
}

/// Decodes AMD leaves 0x8000_0005 (eax, ebx) and 0x8000_0006 (eax, ebx).
pub fn decode_amd(l1_eax: u32, l1_ebx: u32, l2_eax: u32, l2_ebx: u32) -> TlbInfo {
    let nz = |v: u32| (v != 0).then_some(v);
    TlbInfo {
        itlb_4k: nz(l1_ebx & 0xff),
        itlb_2m: nz(l1_eax & 0xff),
        stlb_4k: nz(l2_ebx & 0xfff),
        stlb_2m: nz(l2_eax & 0xfff),
    }
}

/// Asks the CPU for its instruction TLB sizes. Costs a few `cpuid` instructions.
#[cfg(target_arch = "x86_64")]
pub fn tlb_info() -> TlbInfo {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    let leaf0 = __cpuid(0);
    let vendor_amd = leaf0.ebx == u32::from_le_bytes(*b"Auth");
    if !vendor_amd && leaf0.eax >= 0x18 {
        let max_sub = __cpuid_count(0x18, 0).eax.min(64);
        let subs: Vec<Leaf18> = (0..=max_sub)
            .map(|i| {
                let r = __cpuid_count(0x18, i);
                (r.eax, r.ebx, r.ecx, r.edx)
            })
            .collect();
        return decode_leaf18(&subs);
    }
    if vendor_amd && __cpuid(0x8000_0000).eax >= 0x8000_0006 {
        let l1 = __cpuid(0x8000_0005);
        let l2 = __cpuid(0x8000_0006);
        return decode_amd(l1.eax, l1.ebx, l2.eax, l2.ebx);
    }
    TlbInfo::default()
}

/// Other architectures report nothing.
#[cfg(not(target_arch = "x86_64"))]
pub fn tlb_info() -> TlbInfo {
    TlbInfo::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_an_intel_golden_cove_like_leaf() {
        // Sub-leaf 1: L1 iTLB, 4K+2M+4M, 8 ways x 32 sets = 256 entries.
        // Sub-leaf 2: L2 unified, 4K+2M+4M, 16 ways x 128 sets = 2048 entries.
        let subs = [
            (4, 0, 0, 0),
            (0, (8 << 16) | 0b111, 32, (1 << 5) | 2),
            (0, (16 << 16) | 0b111, 128, (2 << 5) | 3),
            (0, (4 << 16) | 0b1, 16, (1 << 5) | 1), // L1 dTLB: ignored
        ];
        let info = decode_leaf18(&subs);
        assert_eq!(info.itlb_4k, Some(256));
        assert_eq!(info.itlb_2m, Some(256));
        assert_eq!(info.stlb_4k, Some(2048));
        assert_eq!(info.stlb_2m, Some(2048));
    }

    #[test]
    fn an_empty_leaf_reports_nothing() {
        assert_eq!(decode_leaf18(&[(0, 0, 0, 0)]), TlbInfo::default());
    }

    #[test]
    fn decodes_amd_leaves() {
        let info = decode_amd(0x0040_0040, 0x4040_4040, 0x0000_0400, 0x0800_0800);
        assert_eq!(info.itlb_4k, Some(64));
        assert_eq!(info.itlb_2m, Some(64));
        assert_eq!(info.stlb_4k, Some(2048));
        assert_eq!(info.stlb_2m, Some(1024));
    }

    /// The live query is stable, never reports an empty TLB, and on AMD agrees
    /// with the kernel's own decoding of the same leaf: `/proc/cpuinfo`'s
    /// `TLB size` is the second-level data plus instruction TLB entries for
    /// 4 KiB pages (leaf 0x8000_0006 EBX), which holds the instruction part.
    #[test]
    fn the_live_query_is_stable_and_agrees_with_the_kernel() {
        let info = tlb_info();
        assert_eq!(info, tlb_info(), "cpuid answers the same twice");
        for entries in [info.itlb_4k, info.itlb_2m, info.stlb_4k, info.stlb_2m]
            .into_iter()
            .flatten()
        {
            assert!(entries > 0, "{info:?}");
        }
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let amd = field("vendor_id").as_deref() == Some("AuthenticAMD");
        let kernel_total: Option<u32> =
            field("TLB size").and_then(|v| v.strip_suffix(" 4K pages")?.trim().parse().ok());
        match (amd, kernel_total, info.stlb_4k) {
            (true, Some(total), Some(stlb)) => {
                assert!(stlb <= total, "{info:?} vs TLB size {total}")
            }
            (true, Some(total), None) => {
                // The kernel read a size, so the leaf is there: only an empty
                // instruction part leaves ours unset.
                assert!(total > 0, "{info:?}");
            }
            _ => pagewise_testkit::skip_part!(
                "kernel agreement",
                pagewise_testkit::Need::CpuFeature,
                "no AMD TLB leaf for the kernel to decode here (vendor {:?}, TLB size {:?})",
                field("vendor_id"),
                field("TLB size")
            ),
        }
    }
}
