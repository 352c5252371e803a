//! The machine a benchmark ran on, carried by every report: the JSON's
//! `machine` object (the same for every experiment) and the `machine:` line
//! the CLI prints above every table.

use pagewise::host::cpu::Cache;
use pagewise::host::hugetlb::HugetlbPool;
use pagewise::probe::MachineReport;
use pagewise::units::format_bytes;
use serde::Serialize;

/// What a benchmark result must carry to be compared with another: which
/// processor (vendor, model, family/model/stepping, instruction sets,
/// caches, CPUs, hypervisor) and which software settings (kernel, THP,
/// hugetlb pools, glibc). Every value is read from the machine at run time:
/// `cpuid`, `/proc/cpuinfo`, `/sys` and glibc, through `pagewise doctor`'s
/// probe; a value that could not be read is `null`.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU vendor from `cpuid`: `GenuineIntel`, `AuthenticAMD`, ….
    pub vendor: Option<String>,
    /// CPU model name (`model name` in `/proc/cpuinfo`).
    pub cpu: Option<String>,
    /// CPU family from `cpuid` (extended family included).
    pub family: Option<u32>,
    /// CPU model number from `cpuid` (extended model included).
    pub model: Option<u32>,
    /// CPU stepping from `cpuid`.
    pub stepping: Option<u32>,
    /// The instruction sets that decide which copy kernels run.
    pub isa: InstructionSets,
    /// Logical CPUs this process may run on.
    pub online_cpus: usize,
    /// Cache levels of CPU 0 (level, kind, bytes), from sysfs.
    pub caches: Vec<Cache>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// THP `enabled` mode.
    pub thp_enabled: Option<String>,
    /// hugetlb pools at the start of the run.
    pub hugetlb: Vec<HugetlbPool>,
    /// glibc version.
    pub glibc: Option<String>,
    /// The hypervisor when this is a virtual machine (`KVM`, `Hyper-V`, …,
    /// from `cpuid`); `null` on bare metal or under a hypervisor that hides.
    pub hypervisor: Option<String>,
}

/// Instruction-set features from `cpuid` (checked against what the OS
/// enables, for the vector ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InstructionSets {
    /// AVX2.
    pub avx2: bool,
    /// AVX-512 Foundation.
    pub avx512f: bool,
    /// AVX-512 Byte and Word.
    pub avx512bw: bool,
    /// Enhanced `rep movsb` / `rep stosb`.
    pub erms: bool,
    /// Fast short `rep movsb`.
    pub fsrm: bool,
}

impl Machine {
    /// Describes this machine (runs the doctor probe: tens of milliseconds).
    pub fn describe() -> Machine {
        let identity = pagewise::os::cpu::cpu_identity();
        Machine::from_report(MachineReport::probe(), identity)
    }

    /// The description from a doctor report and the `cpuid` identity.
    fn from_report(r: MachineReport, identity: Option<pagewise::os::cpu::CpuIdentity>) -> Machine {
        let (vendor, family, model, stepping, hypervisor) = match identity {
            Some(id) => (
                Some(id.vendor).filter(|v| !v.is_empty()),
                Some(id.family),
                Some(id.model),
                Some(id.stepping),
                id.hypervisor,
            ),
            None => (None, None, None, None, None),
        };
        Machine {
            vendor,
            cpu: r.cpu.model,
            family,
            model,
            stepping,
            isa: InstructionSets {
                avx2: r.cpu.avx2,
                avx512f: r.cpu.avx512f,
                avx512bw: r.cpu.avx512bw,
                erms: r.cpu.erms,
                fsrm: r.cpu.fsrm,
            },
            online_cpus: r.cpu.online_cpus,
            caches: r.cpu.caches,
            kernel: r.kernel.release,
            thp_enabled: r.thp.enabled,
            hugetlb: r.hugetlb,
            glibc: r.glibc.version,
            hypervisor,
        }
    }

    /// One line for the header of a benchmark table, e.g. `AuthenticAMD AMD
    /// EPYC (family 26 model 2 stepping 1), KVM guest; AVX2 AVX-512F ERMS;
    /// L1d 48 KiB, L2 1 MiB, L3 32 MiB; 2 CPUs; kernel 6.18.0; THP madvise;
    /// glibc 2.36`. Values that could not be read say so.
    pub fn summary(&self) -> String {
        let unread = "?";
        let mut cpu = format!(
            "{} {}",
            self.vendor.as_deref().unwrap_or(unread),
            self.cpu.as_deref().unwrap_or("(model name not readable)")
        );
        if let (Some(f), Some(m), Some(s)) = (self.family, self.model, self.stepping) {
            cpu.push_str(&format!(" (family {f} model {m} stepping {s})"));
        }
        match &self.hypervisor {
            Some(h) => cpu.push_str(&format!(", {h} guest")),
            None => cpu.push_str(", no hypervisor seen"),
        }
        let isa: Vec<&str> = [
            (self.isa.avx2, "AVX2"),
            (self.isa.avx512f, "AVX-512F"),
            (self.isa.avx512bw, "AVX-512BW"),
            (self.isa.erms, "ERMS"),
            (self.isa.fsrm, "FSRM"),
        ]
        .iter()
        .filter(|(has, _)| *has)
        .map(|&(_, name)| name)
        .collect();
        let isa = if isa.is_empty() {
            "no AVX2, AVX-512, ERMS or FSRM".to_owned()
        } else {
            isa.join(" ")
        };
        let caches: Vec<String> = self
            .caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .map(|c| {
                let d = if c.kind == "Data" { "d" } else { "" };
                format!("L{}{d} {}", c.level, format_bytes(c.size_bytes))
            })
            .collect();
        let caches = if caches.is_empty() {
            "caches not readable".to_owned()
        } else {
            caches.join(", ")
        };
        format!(
            "{cpu}; {isa}; {caches}; {} CPUs; kernel {}; THP {}; glibc {}",
            self.online_cpus,
            self.kernel.as_deref().unwrap_or(unread),
            self.thp_enabled.as_deref().unwrap_or(unread),
            self.glibc.as_deref().unwrap_or(unread),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise::os::cpu::CpuIdentity;

    fn cache(level: u32, kind: &str, size_bytes: u64) -> Cache {
        Cache {
            level,
            kind: kind.into(),
            size_bytes,
        }
    }

    #[test]
    fn the_summary_names_every_part() {
        let mut report = MachineReport::from_files(&pagewise::host::SysRoot::at(
            std::path::Path::new("/nonexistent"),
        ));
        report.cpu.model = Some("AMD EPYC".into());
        report.cpu.online_cpus = 2;
        report.cpu.avx2 = true;
        report.cpu.erms = true;
        report.cpu.caches = vec![
            cache(1, "Data", 48 << 10),
            cache(1, "Instruction", 32 << 10),
            cache(2, "Unified", 1 << 20),
            cache(3, "Unified", 32 << 20),
        ];
        report.kernel.release = Some("6.18.0".into());
        report.thp.enabled = Some("madvise".into());
        report.glibc.version = Some("2.36".into());
        let identity = CpuIdentity {
            vendor: "AuthenticAMD".into(),
            family: 26,
            model: 2,
            stepping: 1,
            hypervisor: Some("KVM".into()),
        };
        let m = Machine::from_report(report, Some(identity));
        assert_eq!(
            m.summary(),
            "AuthenticAMD AMD EPYC (family 26 model 2 stepping 1), KVM guest; AVX2 ERMS; \
             L1d 48 KiB, L2 1 MiB, L3 32 MiB; 2 CPUs; kernel 6.18.0; THP madvise; glibc 2.36"
        );
    }

    #[test]
    fn what_is_not_read_is_said() {
        let report = MachineReport::from_files(&pagewise::host::SysRoot::at(std::path::Path::new(
            "/nonexistent",
        )));
        let m = Machine::from_report(report, None);
        let s = m.summary();
        assert!(
            s.starts_with("? (model name not readable), no hypervisor seen;"),
            "{s}"
        );
        assert!(s.contains("caches not readable"), "{s}");
        assert!(s.contains("kernel ?"), "{s}");
        let json = serde_json::to_value(&m).unwrap();
        assert!(
            json["vendor"].is_null() && json["family"].is_null(),
            "{json}"
        );
    }

    /// Every value comes from this machine: the live description agrees with
    /// `cpuid`, `/proc/cpuinfo` and `/proc/sys/kernel/osrelease`.
    #[test]
    fn the_live_description_is_this_machine() {
        let m = Machine::describe();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        if let Some(vendor) = field("vendor_id") {
            assert_eq!(m.vendor.as_deref(), Some(vendor.as_str()));
            assert_eq!(m.family.map(|f| f.to_string()), field("cpu family"));
            assert_eq!(m.model.map(|f| f.to_string()), field("model"));
            assert_eq!(m.stepping.map(|f| f.to_string()), field("stepping"));
            let flagged = field("flags").is_some_and(|f| f.split(' ').any(|x| x == "hypervisor"));
            assert_eq!(m.hypervisor.is_some(), flagged, "{m:?}");
        } else {
            pagewise_testkit::skip_part!(
                "cpuid checks",
                pagewise_testkit::Need::CpuFeature,
                "/proc/cpuinfo has no vendor_id here"
            );
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok();
        assert_eq!(m.kernel, release.map(|r| r.trim().to_owned()));
        assert!(m.online_cpus >= 1);
        assert!(m.summary().contains(&format!("{} CPUs", m.online_cpus)));
    }
}
