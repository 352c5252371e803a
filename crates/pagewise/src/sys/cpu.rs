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
    /// `clflushopt`: cache-line flushes that do not wait for each other.
    pub clflushopt: bool,
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
        clflushopt: leaf7_ebx & (1 << 23) != 0,
    }
}

/// On other architectures none of the x86 features exist.
#[cfg(not(target_arch = "x86_64"))]
pub fn cpu_features() -> CpuFeatures {
    CpuFeatures::default()
}

/// Which processor this is, as `cpuid` names it: vendor, family, model and
/// stepping (leaves 0 and 1), and the hypervisor when one says it is there
/// (leaf 1's "hypervisor present" bit, then the signature of leaf
/// `0x4000_0000`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuIdentity {
    /// The vendor string: `GenuineIntel`, `AuthenticAMD`, …
    pub vendor: String,
    /// Family, with the extended family added as the SDM and APM define it
    /// (6 for Intel's cores, 0x19 = 25 for AMD Zen 3 and 4).
    pub family: u32,
    /// Model, with the extended model prepended for families 6 and 15+.
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
    /// The hypervisor: its name when the signature is a known one (`KVM`,
    /// `Hyper-V`, `VMware`, `Xen`, …), else the signature itself, or
    /// `unknown` when the bit is set and the leaf is empty; `None` when no
    /// hypervisor says it is there (bare metal, or one that hides).
    pub hypervisor: Option<String>,
}

/// Reads [`CpuIdentity`] from `cpuid` (a few instructions; each one traps to
/// the hypervisor in a VM, about a microsecond).
#[cfg(target_arch = "x86_64")]
pub fn cpu_identity() -> Option<CpuIdentity> {
    use core::arch::x86_64::__cpuid;
    let leaf0 = __cpuid(0);
    let vendor = register_text(&[leaf0.ebx, leaf0.edx, leaf0.ecx]);
    let leaf1 = (leaf0.eax >= 1).then(|| __cpuid(1));
    let (family, model, stepping) = leaf1.map_or((0, 0, 0), |l| decode_signature(l.eax));
    let hypervisor = leaf1.filter(|l| l.ecx & (1 << 31) != 0).map(|_| {
        let leaf = __cpuid(0x4000_0000);
        hypervisor_name(&register_text(&[leaf.ebx, leaf.ecx, leaf.edx]))
    });
    Some(CpuIdentity {
        vendor,
        family,
        model,
        stepping,
        hypervisor,
    })
}

/// Not an x86 processor: no `cpuid`.
#[cfg(not(target_arch = "x86_64"))]
pub fn cpu_identity() -> Option<CpuIdentity> {
    None
}

/// `(family, model, stepping)` from leaf 1's `eax`: the extended family
/// is added when the base family is 15, and the extended model is the high
/// nibble of the model for families 6 and 15 and up.
pub fn decode_signature(eax: u32) -> (u32, u32, u32) {
    let stepping = eax & 0xf;
    let base_model = (eax >> 4) & 0xf;
    let base_family = (eax >> 8) & 0xf;
    let extended_model = (eax >> 16) & 0xf;
    let extended_family = (eax >> 20) & 0xff;
    let family = if base_family == 0xf {
        base_family + extended_family
    } else {
        base_family
    };
    let model = if base_family == 0x6 || base_family == 0xf {
        (extended_model << 4) | base_model
    } else {
        base_model
    };
    (family, model, stepping)
}

/// The ASCII text of `cpuid` registers, in the order given, without the
/// trailing NULs and spaces.
fn register_text(registers: &[u32]) -> String {
    let bytes: Vec<u8> = registers.iter().flat_map(|r| r.to_le_bytes()).collect();
    String::from_utf8_lossy(&bytes)
        .trim_end_matches(['\0', ' '])
        .to_owned()
}

/// A readable name for a hypervisor signature (leaf `0x4000_0000`).
fn hypervisor_name(signature: &str) -> String {
    let name = match signature {
        "" => "unknown",
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU (TCG)",
        "VBoxVBoxVBox" => "VirtualBox",
        "ACRNACRNACRN" => "ACRN",
        "bhyve bhyve" => "bhyve",
        " lrpepyh  vr" => "Parallels",
        other => other,
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_decode_as_the_manuals_say() {
        // Intel Emerald Rapids: family 6, model 0xCF, stepping 2.
        assert_eq!(decode_signature(0x000C_06F2), (6, 0xCF, 2));
        // AMD Zen 4 (Genoa): base family 0xF + extended 0xA = 0x19, model 0x11.
        assert_eq!(decode_signature(0x00A1_0F11), (0x19, 0x11, 1));
        // An old family-5 part: the extended fields do not apply.
        assert_eq!(decode_signature(0x0001_0543), (5, 4, 3));
    }

    #[test]
    fn register_text_and_hypervisor_names() {
        let kvm = register_text(&[
            u32::from_le_bytes(*b"KVMK"),
            u32::from_le_bytes(*b"VMKV"),
            u32::from_le_bytes(*b"M\0\0\0"),
        ]);
        assert_eq!(hypervisor_name(&kvm), "KVM");
        assert_eq!(hypervisor_name("Microsoft Hv"), "Hyper-V");
        assert_eq!(hypervisor_name(""), "unknown");
        assert_eq!(hypervisor_name("NewVisor"), "NewVisor");
    }

    #[test]
    fn this_cpu_has_an_identity() {
        let Some(id) = cpu_identity() else {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::CpuFeature,
                "not an x86-64 processor: no cpuid"
            );
        };
        assert!(!id.vendor.is_empty(), "{id:?}");
        assert!(id.family > 0, "{id:?}");
    }
}
