//! What `pagewise stat` reports: the data behind the table and the
//! `pagewise.stat/1` JSON schema (documented in docs/stat.md).

use serde::Serialize;

/// The JSON schema name of a [`StatReport`].
pub const STAT_SCHEMA: &str = "pagewise.stat/1";

/// Everything one `pagewise stat` run found.
#[derive(Debug, Clone, Serialize)]
pub struct StatReport {
    /// Always [`STAT_SCHEMA`].
    pub schema: &'static str,
    /// What was observed.
    pub target: TargetInfo,
    /// How the command ended (`None` for `--pid`).
    pub exit: Option<ExitInfo>,
    /// Times, faults and switches.
    pub counts: Counts,
    /// User-mode faults by kind, from `exceptions:page_fault_user`.
    pub fault_kinds: Option<FaultKinds>,
    /// `mmap`, `munmap`, `brk`, `madvise` calls.
    pub syscalls: Option<Syscalls>,
    /// Heap-like anonymous mappings seen in perf `MMAP2` records (no
    /// tracepoints needed): the evidence for heap churn without tracefs.
    pub mapping_records: Option<MappingRecords>,
    /// Resident bytes by page size, sampled while the program ran.
    pub page_sizes: Option<PageSizes>,
    /// How much code the program executes, against the iTLB.
    pub text: Option<TextFootprint>,
    /// Hardware counters, or why there are none.
    pub hardware: Hardware,
    /// What a page fault costs here and how the run's fault time was estimated.
    pub costs: Costs,
    /// How the tracepoints (fault kinds, mmap calls) were obtained.
    pub tracepoints: TracepointSource,
    /// Diagnoses, most costly first.
    pub findings: Vec<Finding>,
    /// With `--sites`: where page faults happen, most first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sites: Option<Vec<Site>>,
    /// With `--sites`: where heap-like `mmap`s that were later unmapped come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmap_sites: Option<Vec<ChurnSite>>,
    /// What could not be measured here, and why.
    pub skipped: Vec<Skipped>,
    /// Records the kernel dropped because the ring buffers were full.
    pub lost_records: u64,
    /// Folded fault stacks (`a;b;c`, count) for a flame graph; not in JSON.
    #[serde(skip)]
    pub folded_fault_stacks: Vec<(String, u64)>,
}

/// The observed command or process.
#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    /// The command and its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The process id (of the command, or the one attached to).
    pub pid: i32,
    /// `--seconds` of a `--pid` observation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// With `--pid`: whether the process exited before the window ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exited_early: Option<bool>,
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExitInfo {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// Its name (`SIGKILL`).
    pub signal_name: Option<String>,
    /// The status a shell reports: the code, or 128 + the signal.
    pub status: i32,
}

/// Times and counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Elapsed seconds.
    pub wall_s: f64,
    /// CPU seconds in user mode (all threads and waited-for children; with
    /// `--pid`, the children started while watched).
    pub user_s: f64,
    /// CPU seconds in the kernel.
    pub sys_s: f64,
    /// Where `user_s` and `sys_s` come from: `getrusage` (a command),
    /// `cpu-clock` (`--pid`: perf's count of the process and the children it
    /// started, split by its samples) or `/proc/PID/stat` (`--pid` without
    /// perf: the process alone).
    pub time_source: String,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// (minor + major) / wall.
    pub faults_per_s: f64,
    /// Context switches (voluntary and involuntary).
    pub context_switches: u64,
    /// Faults taken in user mode.
    pub user_mode_faults: Option<u64>,
    /// Faults taken inside system calls (all minus user-mode).
    pub syscall_faults: Option<u64>,
    /// The largest peak resident set of any one process of the run, bytes
    /// (`getrusage`: the kernel keeps the maximum over the command and the
    /// children it waited for, not their sum).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    /// Processes of the run: the one observed and each one forked from it
    /// while observed (perf fork records; `None` when sampling did not open).
    pub processes: Option<u64>,
    /// Programs they ran: one per process, and one more for each further
    /// program a process exec'd ([`super::collect::Census::programs`]).
    pub programs: Option<u64>,
    /// Where the fault counts come from: `perf` or `getrusage`/`proc` when perf could not count them.
    pub fault_source: String,
    /// `getrusage` of the command, as a cross-check (command mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rusage_minor_faults: Option<u64>,
    /// `getrusage` major faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rusage_major_faults: Option<u64>,
}

/// User-mode faults by `error_code`; the kinds are exclusive and add up to
/// all user-mode faults. The total is exact (all faults minus those taken in
/// kernel mode, from counters); the faults of each kind are counted exactly
/// in windows (the first 20 ms, then 0.5 ms of every 5 ms), and the faults
/// outside them are split as the windows were ([`super::kinds`]), each kind
/// with a 95% range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FaultKinds {
    /// Write to a page that was not present (anonymous first touch: allocate and zero).
    pub write_absent: u64,
    /// Read of a page that was not present.
    pub read_absent: u64,
    /// Instruction fetch from a page that was not present.
    pub fetch_absent: u64,
    /// Protection fault on a present page (copy-on-write, write to read-only, …).
    pub protection: u64,
    /// Faults whose kind was seen: every fault in the windows. The split of
    /// the rest is estimated from them.
    pub samples: u64,
    /// Of those, per kind, in the order above: exact, the least each kind can be.
    pub samples_by_kind: [u64; 4],
    /// Per kind, in the order above: the low end of its range (at least its samples).
    pub low_by_kind: [u64; 4],
    /// Per kind, in the order above: the high end of its range.
    pub high_by_kind: [u64; 4],
    /// Windows in which faults were counted by kind (the first is the start of the run).
    pub windows: u64,
    /// How likely each range is to hold the kind's true count (0.95).
    pub confidence: f64,
    /// Every fault was counted by kind: the ranges are the counts themselves.
    pub exact: bool,
}

impl FaultKinds {
    /// All user-mode faults.
    pub fn total(&self) -> u64 {
        self.write_absent + self.read_absent + self.fetch_absent + self.protection
    }

    /// Write faults to absent pages with the low and high ends of their range.
    pub fn write_absent_range(&self) -> (u64, u64, u64) {
        (self.write_absent, self.low_by_kind[0], self.high_by_kind[0])
    }
}

/// One bucket of a length histogram: `[from, to)` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// Smallest length in the bucket.
    pub from: u64,
    /// One past the largest.
    pub to: u64,
    /// Calls.
    pub count: u64,
}

/// Calls of one memory-mapping system call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CallStats {
    /// Calls.
    pub calls: u64,
    /// Sum of lengths, bytes (0 for `brk`).
    pub bytes: u64,
    /// Lengths in power-of-two buckets (`mmap` and `munmap` only).
    pub histogram: Vec<Bucket>,
}

/// `mmap`, `munmap`, `brk`, `madvise`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Syscalls {
    /// `mmap`.
    pub mmap: CallStats,
    /// `munmap`.
    pub munmap: CallStats,
    /// `brk`.
    pub brk: CallStats,
    /// `madvise`.
    pub madvise: CallStats,
    /// Bytes advised `MADV_HUGEPAGE`.
    pub madv_hugepage_bytes: u64,
    /// Heap-like mappings (anonymous, private, writable) that were unmapped again.
    pub heap_cycles: u64,
    /// Bytes of heap-like mappings made beyond the peak that was live at once:
    /// memory mapped, faulted and zeroed again.
    pub heap_remapped_bytes: u64,
}

/// Heap-like anonymous mappings in perf `MMAP2` records (`//anon`, private,
/// read-write, 1 MiB or more). A range recorded again with the same address
/// and length was unmapped and mapped again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MappingRecords {
    /// Heap-like mapping records.
    pub heap_records: u64,
    /// Their bytes in all, first mappings included.
    pub heap_bytes: u64,
    /// Records of a range that had been recorded before: mapped again.
    pub remapped: u64,
    /// Their bytes (a mapping merged with a neighbour is recorded as the merged range).
    pub remapped_bytes: u64,
    /// The most common lengths of the ranges mapped again, most first.
    pub sizes: Vec<u64>,
}

/// What a 4 KiB page fault costs on this machine, and how the run's fault
/// time was estimated (see docs/stat.md, "Costs").
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Costs {
    /// CPU seconds of one 4 KiB first-touch write fault (allocate, zero, map).
    pub fault_s: f64,
    /// CPU seconds to rewrite 4 KiB that is already resident.
    pub rewrite_4k_s: Option<f64>,
    /// `fault_s - rewrite_4k_s`: what a huge page saves per 4 KiB beyond zeroing.
    pub fault_overhead_s: Option<f64>,
    /// `measured` (calibrated in this run), `cached`, or `assumed`.
    pub source: String,
    /// How, in words.
    pub detail: String,
    /// Kernel-mode `cpu-clock` samples of the run; `None` (JSON `null`)
    /// where the kernel could not be sampled.
    pub kernel_samples: Option<u64>,
    /// Of those, inside the page-fault handler.
    pub kernel_fault_samples: Option<u64>,
    /// How the first-touch time of the run is estimated: `kernel-samples`
    /// (the sampled share of system time in the page-fault handler) or
    /// `calibration` (faults times `fault_s`, at most the system time).
    pub fault_time_from: String,
}

/// How the tracepoint ids and formats were read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TracepointSource {
    /// `mounted` (tracefs is mounted), `private-mount` (read in a helper's
    /// own mount namespace; tracefs is not mounted here), `unavailable`, or
    /// `not-tried` (sampling could not be opened).
    pub source: String,
    /// In words.
    pub detail: String,
}

/// Peak resident bytes by page size.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageSizes {
    /// Snapshots taken.
    pub samples: u64,
    /// Milliseconds between snapshots.
    pub interval_ms: u64,
    /// Peak bytes on 4 KiB pages.
    pub peak_4k_bytes: u64,
    /// Peak bytes on transparent huge pages.
    pub peak_thp_bytes: u64,
    /// Peak bytes on hugetlb pages.
    pub peak_hugetlb_bytes: u64,
    /// Peak of all resident bytes in one snapshot.
    pub peak_total_bytes: u64,
    /// Peak resident bytes in `MADV_HUGEPAGE` mappings.
    pub peak_asked_huge_bytes: u64,
    /// Of those, on huge pages (same snapshot).
    pub peak_asked_huge_granted_bytes: u64,
    /// The largest mappings at the peak, with what they got.
    pub top_mappings: Vec<MappingPages>,
}

/// One mapping's resident bytes by page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappingPages {
    /// Path or pseudo-name.
    pub name: String,
    /// Size of the mapping.
    pub size_bytes: u64,
    /// Bytes on 4 KiB pages.
    pub base_bytes: u64,
    /// Bytes on THP.
    pub thp_bytes: u64,
    /// Bytes on hugetlb pages.
    pub hugetlb_bytes: u64,
}

/// Distinct pages covering a share of samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// Pages for 50% of samples.
    pub p50: u64,
    /// Pages for 90%.
    pub p90: u64,
    /// Pages for 99%.
    pub p99: u64,
}

/// iTLB sizes and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Itlb {
    /// First-level entries for 4 KiB pages.
    pub entries_4k: u32,
    /// First-level entries for 2 MiB pages.
    pub entries_2m: u32,
    /// Second-level entries for 4 KiB pages, where known.
    pub stlb_entries_4k: Option<u32>,
    /// `cpuid` or `assumed` (and why).
    pub source: String,
}

impl Itlb {
    /// Bytes of code the first-level iTLB maps with 4 KiB pages.
    pub fn reach_4k(&self) -> u64 {
        self.entries_4k as u64 * 4096
    }
}

/// Hot-text footprint from user-mode `cpu-clock` samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextFootprint {
    /// User-mode samples.
    pub samples: u64,
    /// Sampling frequency, Hz.
    pub frequency_hz: u64,
    /// Distinct 4 KiB pages covering 50/90/99% of samples.
    pub pages_4k: Coverage,
    /// Distinct 2 MiB pages covering 50/90/99% of samples.
    pub pages_2m: Coverage,
    /// The iTLB.
    pub itlb: Itlb,
    /// Share of samples outside the hottest `entries_4k` 4 KiB pages.
    pub beyond_reach_share: f64,
    /// The objects the samples fell in, most first: (path, samples).
    pub objects: Vec<(String, u64)>,
}

/// Hardware counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Hardware {
    /// Whether the PMU counted anything.
    pub available: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// CPU cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,
    /// Instructions retired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
    /// dTLB load misses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtlb_misses: Option<u64>,
    /// iTLB load misses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itlb_misses: Option<u64>,
}

/// The kinds of diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Faulting and zeroing fresh memory dominates kernel time.
    FirstTouch,
    /// malloc above the mmap threshold maps and unmaps repeatedly.
    HeapChurn,
    /// Hot code larger than the iTLB reach.
    TextFootprint,
    /// Major faults on file mappings.
    FileFaults,
    /// Huge pages asked for but not given.
    ThpNotGranted,
}

impl FindingKind {
    /// The kebab-case name used in output (`first-touch`).
    pub fn name(&self) -> &'static str {
        match self {
            FindingKind::FirstTouch => "first-touch",
            FindingKind::HeapChurn => "heap-churn",
            FindingKind::TextFootprint => "text-footprint",
            FindingKind::FileFaults => "file-faults",
            FindingKind::ThpNotGranted => "thp-not-granted",
        }
    }
}

/// One diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// What kind.
    pub kind: FindingKind,
    /// One line: the diagnosis.
    pub summary: String,
    /// The numbers behind it.
    pub evidence: String,
    /// What to do.
    pub remedy: String,
    /// Estimated seconds it costs this run (the sort key; see docs/stat.md).
    pub cost_s: f64,
    /// When the finding is inferred rather than measured directly: from what
    /// (for example perf `MMAP2` records when the `mmap` tracepoints are
    /// unavailable). `None` for a finding measured directly.
    pub inferred_from: Option<String>,
}

/// A source location.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Location {
    /// Function.
    pub function: String,
    /// Source file, where debug info exists.
    pub file: Option<String>,
    /// Line, where debug info exists.
    pub line: Option<u32>,
}

/// Where page faults happen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Site {
    /// The first function in the program's own code (or the leaf when there is none).
    pub function: String,
    /// Whether `function` is the program's own code: `false` when no frame
    /// of the stack is (a library's own thread, or a library built without
    /// frame pointers where the walk stopped), and the site is the leaf.
    pub own_code: bool,
    /// Its source file.
    pub file: Option<String>,
    /// Its line.
    pub line: Option<u32>,
    /// The object file of the function.
    pub object: String,
    /// Faults sampled here.
    pub faults: u64,
    /// Share of all sampled faults.
    pub share: f64,
    /// The function that took the fault, when it is not the site (for example `memset`).
    pub via: Option<String>,
    /// The callers of the site, innermost first (from the most frequent stack).
    pub callers: Vec<Location>,
    /// When the site is in an interpreter or runtime (CPython, node): which,
    /// and whether it exposes the script's own functions.
    pub interpreter: Option<String>,
    /// The innermost script function on the stack, where the runtime
    /// exposes it (a `/tmp/perf-PID.map` from node `--perf-basic-prof` or
    /// Python 3.12+ `-X perf`).
    pub script: Option<Location>,
}

/// Where heap-like mmaps that were unmapped again come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChurnSite {
    /// The first function in the program's own code (or the leaf when there is none).
    pub function: String,
    /// Whether `function` is the program's own code (see [`Site::own_code`]).
    pub own_code: bool,
    /// Its source file.
    pub file: Option<String>,
    /// Its line.
    pub line: Option<u32>,
    /// The function that called `mmap`, when it is not the site (for example `malloc`).
    pub via: Option<String>,
    /// mmap calls from here that were unmapped again.
    pub cycles: u64,
    /// Bytes they mapped.
    pub bytes: u64,
    /// The most common lengths, most first.
    pub sizes: Vec<u64>,
    /// Callers of the site, innermost first.
    pub callers: Vec<Location>,
    /// When the site is in an interpreter or runtime: which (see [`Site::interpreter`]).
    pub interpreter: Option<String>,
    /// The innermost script function on the stack (see [`Site::script`]).
    pub script: Option<Location>,
}

/// Something that could not be measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// What.
    pub what: String,
    /// Why, and how to get it.
    pub why: String,
}
