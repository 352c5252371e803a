//! CPU feature detection through `cpuid`.
//!
//! The `cpuid` intrinsics are safe on x86-64; they live here with the other
//! machine interfaces so that everything that asks the hardware sits in one layer.

/// Instruction-set features that matter for copying and filling memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX2 (256-bit integer vectors).
    pub avx2: bool,
    /// AVX-512 Foundation.
    pub avx512f: bool,
    /// AVX-512 Byte and Word instructions (masked byte moves).
    pub avx512bw: bool,
    /// Enhanced `rep movsb` / `rep stosb`.
    pub erms: bool,
    /// Fast short `rep movsb` (fast for small sizes too).
    pub fsrm: bool,
    /// 1 GiB pages in the MMU (`pdpe1gb`).
    pub pdpe1gb: bool,
}

/// Reads the features from `cpuid` and checks that the OS saves the vector
/// state (through `is_x86_feature_detected!`). Costs a few `cpuid` instructions.
#[cfg(target_arch = "x86_64")]
pub fn cpu_features() -> CpuFeatures {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    let max_leaf = __cpuid(0).eax;
    let (leaf7_ebx, leaf7_edx) = if max_leaf >= 7 {
        let r = __cpuid_count(7, 0);
        (r.ebx, r.edx)
    } else {
        (0, 0)
    };
    let max_ext = __cpuid(0x8000_0000).eax;
    let ext1_edx = if max_ext >= 0x8000_0001 {
        __cpuid(0x8000_0001).edx
    } else {
        0
    };
    CpuFeatures {
        avx2: std::arch::is_x86_feature_detected!("avx2"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
        avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
        erms: leaf7_ebx & (1 << 9) != 0,
        fsrm: leaf7_edx & (1 << 4) != 0,
        pdpe1gb: ext1_edx & (1 << 26) != 0,
    }
}

/// On other architectures none of the x86 features exist.
#[cfg(not(target_arch = "x86_64"))]
pub fn cpu_features() -> CpuFeatures {
    CpuFeatures::default()
}
