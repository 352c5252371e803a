//! What this machine offers for memory-path performance.
//!
//! [`MachineReport::probe`] reads `/proc` and `/sys`, asks the CPU, glibc and the
//! kernel, and tries each feature on a scratch mapping. It changes no system
//! setting. [`MachineReport::from_files`] does only the file part, against any
//! root folder, which is how the parsers are tested against fixtures.
//!
//! Cost: a few hundred file reads, a handful of 4 KiB–2 MiB scratch mappings
//! (one hugetlb page per size when a pool has one free), a dozen
//! `perf_event_open` calls and one run of `ld.so --list-tunables`: tens of
//! milliseconds.

mod advice;
mod live_probes;

pub use advice::{advise, Advice};

use crate::host::cpu::{self, Cache};
use crate::host::hugetlb::{self, HugetlbPool};
use crate::host::thp::{self, Thp};
use crate::host::tracefs::{self, TracepointError};
use crate::host::{NotRead, SysRoot};
use crate::sys;
use serde::Serialize;

/// The JSON schema name of a [`MachineReport`].
pub const DOCTOR_SCHEMA: &str = "pagewise.doctor/1";

/// Outcome of trying one feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Tried, and it works.
    Works,
    /// Tried, and this kernel, machine or privilege level does not offer it.
    Unavailable,
    /// Tried, and it failed in an unexpected way (see the detail).
    Failed,
    /// Not tried: a prerequisite is missing (see the detail).
    NotTried,
}

/// A probe's status with a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeResult {
    /// Whether the feature works.
    pub status: ProbeStatus,
    /// What was tried and what happened.
    pub detail: String,
}

impl ProbeResult {
    fn new(status: ProbeStatus, detail: impl Into<String>) -> Self {
        ProbeResult {
            status,
            detail: detail.into(),
        }
    }
    /// The feature works.
    pub fn works(detail: impl Into<String>) -> Self {
        Self::new(ProbeStatus::Works, detail)
    }
    /// The feature is not offered here.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(ProbeStatus::Unavailable, detail)
    }
    /// The probe failed unexpectedly.
    pub fn failed(detail: impl Into<String>) -> Self {
        Self::new(ProbeStatus::Failed, detail)
    }
    /// The probe could not be attempted.
    pub fn not_tried(detail: impl Into<String>) -> Self {
        Self::new(ProbeStatus::NotTried, detail)
    }
    /// Whether the status is [`ProbeStatus::Works`].
    pub fn is_working(&self) -> bool {
        self.status == ProbeStatus::Works
    }
}

/// A probe with the name of what it tried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedProbe {
    /// Event or feature name, for example `dTLB-load-misses`.
    pub name: String,
    /// What happened.
    #[serde(flatten)]
    pub result: ProbeResult,
}

/// The running kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// `uname -r`, from `/proc/sys/kernel/osrelease`.
    pub release: Option<String>,
}

/// Kernel features, each tried for real.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Features {
    /// `MADV_POPULATE_WRITE` (5.14+).
    pub madv_populate_write: ProbeResult,
    /// `MADV_COLLAPSE` (6.1+).
    pub madv_collapse: ProbeResult,
    /// `PAGEMAP_SCAN` ioctl (6.7+).
    pub pagemap_scan: ProbeResult,
    /// `PR_SET_VMA_ANON_NAME` (5.17+, `CONFIG_ANON_VMA_NAME`).
    pub vma_anon_name: ProbeResult,
    /// `MAP_HUGETLB` for each hugetlb page size.
    pub map_hugetlb: Vec<SizedProbe>,
}

/// A probe for one page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizedProbe {
    /// Page size in bytes.
    pub page_size_bytes: u64,
    /// What happened.
    #[serde(flatten)]
    pub result: ProbeResult,
}

/// Access to performance counters and tracepoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Perf {
    /// `/proc/sys/kernel/perf_event_paranoid`.
    pub paranoid: Option<i64>,
    /// Where tracefs is mounted, if it is.
    pub tracefs: Option<String>,
    /// Whether this user can read the tracepoint files there (`None`: not
    /// mounted, or not tried). Mounted plainly, tracefs is root's alone.
    pub tracefs_readable: Option<bool>,
    /// Hardware events: cycles, instructions, dTLB and iTLB misses.
    pub hardware: Vec<NamedProbe>,
    /// Software events: page faults, task clock.
    pub software: Vec<NamedProbe>,
    /// Tracepoints: `exceptions:page_fault_user`, `syscalls:sys_enter_mmap`.
    pub tracepoints: Vec<NamedProbe>,
}

/// The processor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Cpu {
    /// `model name` from `/proc/cpuinfo`.
    pub model: Option<String>,
    /// Logical CPUs online.
    pub online_cpus: usize,
    /// AVX2.
    pub avx2: bool,
    /// AVX-512 Foundation.
    pub avx512f: bool,
    /// AVX-512 Byte/Word.
    pub avx512bw: bool,
    /// Enhanced `rep movsb`.
    pub erms: bool,
    /// Fast short `rep movsb`.
    pub fsrm: bool,
    /// 1 GiB pages.
    pub pdpe1gb: bool,
    /// Cache levels of CPU 0.
    pub caches: Vec<Cache>,
    /// NUMA node numbers.
    pub numa_nodes: Vec<u32>,
}

/// The C library.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Glibc {
    /// glibc version, or `None` when not linked against glibc.
    pub version: Option<String>,
    /// `glibc.malloc.mmap_threshold` tunable; 0 means unset, that is dynamic.
    pub mmap_threshold_tunable: Option<u64>,
    /// What the mmap threshold is in effect, in words.
    pub mmap_threshold_effective: Option<String>,
    /// `glibc.malloc.trim_threshold` tunable; 0 means unset.
    pub trim_threshold_tunable: Option<u64>,
    /// What the trim threshold is in effect, in words.
    pub trim_threshold_effective: Option<String>,
    /// `glibc.cpu.x86_non_temporal_threshold`: copies above it use non-temporal stores.
    pub non_temporal_threshold_bytes: Option<u64>,
    /// `glibc.cpu.x86_rep_movsb_threshold`: copies above it use `rep movsb`.
    pub rep_movsb_threshold_bytes: Option<u64>,
    /// `glibc.cpu.x86_rep_stosb_threshold`: fills above it use `rep stosb`.
    pub rep_stosb_threshold_bytes: Option<u64>,
}

/// Process limits and VM policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// `RLIMIT_MEMLOCK` soft limit in bytes; `None` with `memlock_unlimited`.
    pub memlock_soft_bytes: Option<u64>,
    /// Whether the soft memlock limit is unlimited.
    pub memlock_unlimited: Option<bool>,
    /// `RLIMIT_MEMLOCK` hard limit in bytes (the most this user may raise the
    /// soft limit to); `None` with `memlock_hard_unlimited`.
    pub memlock_hard_bytes: Option<u64>,
    /// Whether the hard memlock limit is unlimited.
    pub memlock_hard_unlimited: Option<bool>,
    /// `/proc/sys/vm/overcommit_memory`: 0 heuristic, 1 always, 2 strict.
    pub overcommit_memory: Option<i64>,
}

/// Everything `pagewise doctor` reports.
#[derive(Debug, Clone, Serialize)]
pub struct MachineReport {
    /// Always [`DOCTOR_SCHEMA`].
    pub schema: &'static str,
    /// Whether the probe ran as root (some files and probes need it).
    pub root: bool,
    /// The effective group id the probe ran with (`None`: not probed). The
    /// tracefs advice does not use it: it names a group `tracing` of its own.
    pub gid: Option<u32>,
    /// The kernel.
    pub kernel: Kernel,
    /// hugetlb pools, one per page size.
    pub hugetlb: Vec<HugetlbPool>,
    /// THP settings.
    pub thp: Thp,
    /// Kernel features, tried for real.
    pub features: Features,
    /// perf access.
    pub perf: Perf,
    /// The CPU.
    pub cpu: Cpu,
    /// glibc.
    pub glibc: Glibc,
    /// Limits and VM policy.
    pub limits: Limits,
    /// What `pagewise::copy` chose here (`None` when live probes were not run).
    pub copy: Option<crate::copy::Choices>,
    /// What to change, one line each, most important first.
    pub advice: Vec<Advice>,
    /// Files and folders that could not be read, and why.
    pub not_read: Vec<NotRead>,
}

fn not_probed() -> ProbeResult {
    ProbeResult::not_tried("live probes were not run")
}

impl MachineReport {
    /// Probes the live machine: files, CPU, glibc, and every kernel feature.
    pub fn probe() -> MachineReport {
        let root = SysRoot::live();
        let mut report = Self::read_files(&root);
        report.root = sys::libc_info::is_root();
        report.gid = Some(sys::libc_info::effective_gid());
        report.probe_live(&root);
        report.not_read = root.not_read();
        report.advice = advise(&report);
        report
    }

    /// Reads only the `/proc` and `/sys` files below `root`; live probes are
    /// marked as not tried. Used with fixture trees in tests.
    pub fn from_files(root: &SysRoot) -> MachineReport {
        let mut report = Self::read_files(root);
        report.not_read = root.not_read();
        report.advice = advise(&report);
        report
    }

    fn read_files(root: &SysRoot) -> MachineReport {
        let hugetlb = hugetlb::pools_at(root);
        let perf = Perf {
            paranoid: root.read_i64("/proc/sys/kernel/perf_event_paranoid"),
            tracefs: root
                .read("/proc/mounts")
                .and_then(|m| tracefs::mount_point(&m)),
            tracefs_readable: None,
            hardware: vec![],
            software: vec![],
            tracepoints: vec![],
        };
        MachineReport {
            schema: DOCTOR_SCHEMA,
            root: false,
            gid: None,
            kernel: Kernel {
                release: root.read("/proc/sys/kernel/osrelease"),
            },
            hugetlb,
            thp: thp::settings(root),
            features: Features {
                madv_populate_write: not_probed(),
                madv_collapse: not_probed(),
                pagemap_scan: not_probed(),
                vma_anon_name: not_probed(),
                map_hugetlb: vec![],
            },
            perf,
            cpu: read_cpu(root),
            glibc: Default::default(),
            limits: Limits {
                overcommit_memory: root.read_i64("/proc/sys/vm/overcommit_memory"),
                ..Limits::default()
            },
            copy: None,
            advice: vec![],
            not_read: vec![],
        }
    }

    fn probe_live(&mut self, root: &SysRoot) {
        self.features = Features {
            madv_populate_write: live_probes::populate_write(),
            madv_collapse: live_probes::collapse(),
            pagemap_scan: live_probes::pagemap_scan(),
            vma_anon_name: live_probes::vma_anon_name(),
            map_hugetlb: self
                .hugetlb
                .iter()
                .map(|pool| SizedProbe {
                    page_size_bytes: pool.page_size_bytes,
                    result: live_probes::map_hugetlb(
                        pool.page_size_bytes as usize,
                        pool.available(),
                    ),
                })
                .collect(),
        };
        self.perf.hardware = live_probes::hardware_counters();
        self.perf.software = live_probes::software_counters();
        self.probe_tracepoints(root);
        self.thp.disabled_for_process = match sys::prctl::thp_disabled() {
            Ok(disabled) => Some(disabled),
            Err(e) => {
                root.note("prctl(PR_GET_THP_DISABLE)", e.to_string());
                None
            }
        };
        let f = sys::cpu::cpu_features();
        self.cpu.avx2 = f.avx2;
        self.cpu.avx512f = f.avx512f;
        self.cpu.avx512bw = f.avx512bw;
        self.cpu.erms = f.erms;
        self.cpu.fsrm = f.fsrm;
        self.cpu.pdpe1gb = f.pdpe1gb;
        self.glibc = read_glibc(root);
        self.copy = Some(crate::copy::Choices::current());
        match sys::libc_info::memlock_limit() {
            Ok(limit) => {
                self.limits.memlock_soft_bytes = limit.soft;
                self.limits.memlock_unlimited = Some(limit.soft.is_none());
                self.limits.memlock_hard_bytes = limit.hard;
                self.limits.memlock_hard_unlimited = Some(limit.hard.is_none());
            }
            Err(e) => root.note("RLIMIT_MEMLOCK", e.to_string()),
        }
    }
}

impl MachineReport {
    /// Whether this user can read tracefs, and the tracepoints `stat` uses,
    /// each opened as `stat` opens it. Where tracefs is not mounted, root
    /// reads the ids through a private mount, as `stat` does (a fork and a
    /// mount in the helper's own namespace; nothing is mounted for anyone
    /// else).
    fn probe_tracepoints(&mut self, root: &SysRoot) {
        const NAMES: [&str; 2] = ["exceptions:page_fault_user", "syscalls:sys_enter_mmap"];
        self.perf.tracefs_readable = self.perf.tracefs.as_deref().and_then(|point| {
            let id = format!("{point}/events/{}/id", NAMES[0].replace(':', "/"));
            match std::fs::File::open(id) {
                Ok(_) => Some(true),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(false),
                Err(_) => None,
            }
        });
        let private = (self.perf.tracefs.is_none() && self.root).then(|| tracefs::lookup(&NAMES));
        self.perf.tracepoints = NAMES
            .iter()
            .map(|name| {
                let id = match &private {
                    Some(found) => found.get(name).map(|tp| tp.id),
                    None => tracepoint_id(root, self.perf.tracefs.as_deref(), name),
                };
                let mut probe = live_probes::tracepoint(name, id);
                if private.is_some() {
                    probe.result.detail +=
                        " (tracefs read through a private mount, as stat does as root)";
                }
                probe
            })
            .collect();
    }
}

fn read_cpu(root: &SysRoot) -> Cpu {
    Cpu {
        model: cpu::model(root),
        online_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        caches: cpu::caches(root),
        numa_nodes: cpu::numa_nodes(root),
        ..Cpu::default()
    }
}

/// The id of tracepoint `group:event`, or why not; an unreadable file is noted in `root`.
fn tracepoint_id(root: &SysRoot, tracefs: Option<&str>, name: &str) -> Result<u64, String> {
    let Some(tracefs) = tracefs else {
        return Err(TracepointError::NotMounted.to_string());
    };
    let (group, event) = name.split_once(':').unwrap_or(("", name));
    tracefs::tracepoint_id(tracefs, group, event).map_err(|e| {
        if let TracepointError::Read {
            path,
            error: source,
        } = &e
        {
            root.note(path, source.to_string());
        }
        e.to_string()
    })
}

fn read_glibc(root: &SysRoot) -> Glibc {
    let mut glibc = Glibc {
        version: sys::libc_info::glibc_version(),
        ..Default::default()
    };
    let Some(loader) = crate::host::glibc_info::dynamic_loader() else {
        root.note("ld.so", "no dynamic loader in /proc/self/maps".to_owned());
        return glibc;
    };
    let tunables = match crate::host::glibc_info::list_tunables(&loader) {
        Ok(tunables) => tunables,
        Err(reason) => {
            root.note(&loader, reason);
            return glibc;
        }
    };
    let get = |name: &str| {
        tunables
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.value)
    };
    glibc.mmap_threshold_tunable = get("glibc.malloc.mmap_threshold");
    glibc.trim_threshold_tunable = get("glibc.malloc.trim_threshold");
    glibc.non_temporal_threshold_bytes = get("glibc.cpu.x86_non_temporal_threshold");
    glibc.rep_movsb_threshold_bytes = get("glibc.cpu.x86_rep_movsb_threshold");
    glibc.rep_stosb_threshold_bytes = get("glibc.cpu.x86_rep_stosb_threshold");
    let set: Vec<&str> = MALLOC_FIXERS
        .into_iter()
        .filter(|name| get(name).is_some_and(|v| v != 0))
        .collect();
    glibc.mmap_threshold_effective = glibc
        .mmap_threshold_tunable
        .map(|t| effective_threshold(t, &set, MMAP_DYNAMIC));
    glibc.trim_threshold_effective = glibc
        .trim_threshold_tunable
        .map(|t| effective_threshold(t, &set, TRIM_DYNAMIC));
    glibc
}

/// The malloc tunables whose setting turns off glibc's adaptation of both
/// thresholds (each one's setter sets `mp_.no_dyn_threshold`, glibc 2.26+).
const MALLOC_FIXERS: [&str; 4] = [
    "glibc.malloc.mmap_threshold",
    "glibc.malloc.trim_threshold",
    "glibc.malloc.top_pad",
    "glibc.malloc.mmap_max",
];
const MMAP_DYNAMIC: &str = "dynamic: starts at 128 KiB and rises with freed blocks up to 32 MiB";
const TRIM_DYNAMIC: &str = "dynamic: starts at 128 KiB, twice the mmap threshold once that rises";

/// A threshold in effect, in words: its tunable `value` when set; else 128
/// KiB fixed when any of `set` (the [`MALLOC_FIXERS`] set to a non-zero
/// value) turns the adaptation off; else `dynamic`. A tunable set to 0
/// explicitly cannot be told from an unset one in `--list-tunables`. Pure.
fn effective_threshold(value: u64, set: &[&str], dynamic: &str) -> String {
    if value != 0 {
        format!(
            "fixed at {} by GLIBC_TUNABLES (no adaptation)",
            crate::units::format_bytes(value)
        )
    } else if let Some(first) = set.first() {
        format!("fixed at 128 KiB: GLIBC_TUNABLES sets {first}, which turns the adaptation off")
    } else {
        dynamic.to_owned()
    }
}

#[cfg(test)]
mod tests;
