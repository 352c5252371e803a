//! Observe a program's memory-path cost from one run: behind `pagewise stat`.
//!
//! [`stat`] starts a command stopped (fork, open the perf events on its pid
//! with `enable_on_exec`, then exec) so that no event is missed, or attaches to
//! a running process for a window. While it runs:
//!
//! - software counters count minor and major faults, faults inside system
//!   calls and context switches;
//! - four counters of `exceptions:page_fault_user`, each filtered to one kind
//!   of fault, are switched on in short windows by a thread of their own
//!   ([`kinds`]: the split of the exact total by kind, with ranges);
//! - per-CPU sampled events, inherited by threads and children, write into
//!   mapped ring buffers: `cpu-clock` (user mode: hot text; kernel mode, where
//!   allowed: the kernel stack, to see how much system time is spent in the
//!   page-fault handler), major faults,
//!   `mmap`/`munmap`/`brk`/`madvise` with their arguments and stacks, and with
//!   `--sites` every page fault with its stack. The `MMAP2` records that come
//!   with them give the mappings, and each executable file is opened at once;
//! - a thread reads `/proc/PID/smaps` of every live process at an interval for
//!   the resident bytes on 4 KiB pages, THP and hugetlb.
//!
//! Tracepoint ids come from tracefs, or through a private mount of it when it
//! is not mounted ([`crate::host::tracefs::lookup`]); without them heap churn
//! is inferred from mmap records ([`churn::RemapRecords`]).
//!
//! Afterwards stacks are symbolized ([`symbolizer`], [`sites`]; generated code
//! through perf maps, [`runtimes`]), system calls analysed for heap churn
//! ([`churn`]), the hot-text footprint measured against the iTLB
//! ([`hot_text`]), the cost of a page fault measured on this machine
//! ([`crate::host::costs`], 7–40 ms), and [`findings`] ranks the diagnoses by
//! estimated cost. What could not be measured is listed in
//! [`StatReport::skipped`].
//!
//! Cost while the program runs: a counter increment per fault in a system call, a
//! tracepoint record and four filtered counts per fault for the first 20 ms
//! and 0.5 ms of every 5 ms after, a sample per ms
//! of user CPU, one ring-buffer record per mmap-family call (and per fault with
//! `--sites`), and smaps reads that take at most 1% of a CPU. See
//! docs/BENCHMARKS.md ("stat overhead").

pub mod address_spaces;
pub mod churn;
pub mod collect;
pub mod findings;
pub mod hot_text;
pub mod kinds;
pub mod names;
pub mod profile_sampler;
pub mod record;
pub mod report;
pub mod runtimes;
pub mod session;
pub mod sites;
pub mod symbolizer;
pub mod target;

pub use report::*;
pub use target::{Target, TargetError};

use crate::host::costs as host_costs;
use crate::host::{kallsyms, proc_stat, tracefs};
use crate::sys::process::{self, ExitKind, Rusage};
use address_spaces::AddressSpaces;
use collect::{Collector, Sampled};
use findings::count;
use session::{Count, Env, PageSamples, Plan};
use std::collections::HashMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};
use symbolizer::Symbolizer;
use target::StoppedCommand;

/// Options of one observation.
#[derive(Debug, Clone)]
pub struct StatOptions {
    /// What to observe.
    pub target: Target,
    /// Sample every fault with its stack and report call sites.
    pub sites: bool,
    /// Interval between page-size snapshots.
    pub interval: Duration,
    /// How many sites to report.
    pub site_limit: usize,
    /// Give a command this process's stderr as its stdout, so that this
    /// process's stdout carries the report alone (`stat -o -`).
    pub stdout_to_stderr: bool,
}

impl StatOptions {
    /// Defaults: no sites, 100 ms snapshots, 10 sites, the command's stdout inherited.
    pub fn new(target: Target) -> Self {
        StatOptions {
            target,
            sites: false,
            interval: Duration::from_millis(100),
            site_limit: 10,
            stdout_to_stderr: false,
        }
    }
}

/// Runs or attaches, observes, and reports. See the module documentation.
pub fn stat(options: &StatOptions) -> Result<StatReport, TargetError> {
    match &options.target {
        Target::Command(argv) => run_command(options, argv),
        Target::Pid { pid, duration } => attach(options, *pid, *duration),
    }
}

fn run_command(options: &StatOptions, argv: &[OsString]) -> Result<StatReport, TargetError> {
    let command = StoppedCommand::spawn_with(argv, options.stdout_to_stderr)?;
    let pid = command.pid();
    // From now until the command has ended, SIGTERM, SIGHUP and a SIGINT sent
    // to this process alone go to the command (the terminal's Ctrl-C reaches
    // it anyway), and this process stays to report how it ended.
    let forward = process::ForwardSignals::to(pid as u32);
    let env = Env::probe();
    let plan = Plan {
        tasks: vec![pid],
        on_exec: true,
        sites: options.sites,
    };
    let mut skipped = vec![];
    let mut hardware = Hardware::default();
    let tracepoints = session::lookup_tracepoints();
    let counters = session::open_counters(&env, &plan, &tracepoints, &mut skipped, &mut hardware);
    let sampling =
        session::open_sampling(&env, &plan, counters.user_only, &tracepoints, &mut skipped);
    let syscalls_open = sampling.as_ref().is_some_and(|s| s.has(Sampled::EnterMmap));
    let tracepoints = sampling.as_ref().map(|s| s.tracepoints.clone());
    let running = session::start(
        sampling,
        AddressSpaces::new(),
        session::live_set(pid),
        Some(options.interval),
    );
    let t0 = Instant::now();
    if let Err(e) = command.release() {
        drop(running.finish());
        return Err(e);
    }
    running.go();
    let (exit, rusage) = process::wait(pid)?;
    let wall = t0.elapsed();
    drop(forward);
    let values = counters.read();
    let user_only = counters.user_only;
    // One helper process closes every event (see `close_in_background`).
    let (collector, pages, mut events) = running.finish_keeping_events();
    events.extend(counters.into_events());
    session::close_events(events);
    let target = TargetInfo {
        command: Some(
            argv.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        ),
        pid,
        window_s: None,
        exited_early: None,
    };
    let exit = Some(exit_info(exit));
    Ok(assemble(Raw {
        options,
        target,
        exit,
        wall,
        user_s: rusage.user.as_secs_f64(),
        sys_s: rusage.sys.as_secs_f64(),
        time_source: "getrusage",
        fallback_faults: (rusage.minor_faults, rusage.major_faults, "getrusage"),
        fallback_switches: rusage.voluntary_switches + rusage.involuntary_switches,
        rusage: Some(rusage),
        values,
        user_only,
        collector,
        pages,
        syscalls_open,
        tracepoints,
        skipped,
        hardware,
    }))
}

fn exit_info(exit: ExitKind) -> ExitInfo {
    match exit {
        ExitKind::Exited(code) => ExitInfo {
            code: Some(code),
            signal: None,
            signal_name: None,
            status: code,
        },
        ExitKind::Signaled { signal, .. } => ExitInfo {
            code: None,
            signal: Some(signal),
            signal_name: Some(process::signal_name(signal)),
            status: exit.shell_status(),
        },
    }
}

fn attach(options: &StatOptions, pid: i32, duration: Duration) -> Result<StatReport, TargetError> {
    let tasks = target::attach_tasks(pid)?;
    let env = Env::probe();
    let _ = process::raise_nofile_limit();
    let mut skipped = vec![];
    let mut spaces = AddressSpaces::new();
    if let Err(why) = target::add_mappings(pid, &mut spaces) {
        skipped.push(Skipped {
            what: "mappings before attaching".to_owned(),
            why,
        });
    }
    let start_stat = proc_stat::read(pid);
    let plan = Plan {
        tasks,
        on_exec: false,
        sites: options.sites,
    };
    let mut hardware = Hardware::default();
    let t0 = Instant::now();
    let tracepoints = session::lookup_tracepoints();
    let counters = session::open_counters(&env, &plan, &tracepoints, &mut skipped, &mut hardware);
    let sampling =
        session::open_sampling(&env, &plan, counters.user_only, &tracepoints, &mut skipped);
    let syscalls_open = sampling.as_ref().is_some_and(|s| s.has(Sampled::EnterMmap));
    let tracepoints = sampling.as_ref().map(|s| s.tracepoints.clone());
    let running = session::start(
        sampling,
        spaces,
        session::live_set(pid),
        Some(options.interval),
    );
    running.go();
    let mut end_stat = start_stat;
    let exited = target::watch_window(t0, duration, || match proc_stat::read(pid) {
        Some(s) if process::exists(pid) => {
            end_stat = Some(s);
            true
        }
        _ => false,
    });
    counters.disable();
    let wall = t0.elapsed();
    let values = counters.read();
    let user_only = counters.user_only;
    // One helper process closes every event (see `close_in_background`).
    let (collector, pages, mut events) = running.finish_keeping_events();
    events.extend(counters.into_events());
    session::close_events(events);
    let ticks = process::clock_ticks_per_second() as f64;
    let (proc_user_s, proc_sys_s, minor, major) = match (start_stat, end_stat) {
        (Some(a), Some(b)) => (
            b.utime_ticks.saturating_sub(a.utime_ticks) as f64 / ticks,
            b.stime_ticks.saturating_sub(a.stime_ticks) as f64 / ticks,
            b.minor_faults.saturating_sub(a.minor_faults),
            b.major_faults.saturating_sub(a.major_faults),
        ),
        _ => (0.0, 0.0, 0, 0),
    };
    // The children it starts are followed by the perf events, not by its
    // /proc/PID/stat (which counts them only once it has waited for them).
    let (user_s, sys_s, time_source) = match collector
        .as_ref()
        .and_then(|c| c.cpu_time(session::CLOCK_PERIOD_NS))
    {
        Some((user, sys)) => (user, sys, "cpu-clock"),
        None => (proc_user_s, proc_sys_s, "/proc/PID/stat"),
    };
    let target = TargetInfo {
        command: None,
        pid,
        window_s: Some(duration.as_secs_f64()),
        exited_early: Some(exited),
    };
    Ok(assemble(Raw {
        options,
        target,
        exit: None,
        wall,
        user_s,
        sys_s,
        time_source,
        fallback_faults: (minor, major, "/proc/PID/stat"),
        fallback_switches: 0,
        rusage: None,
        values,
        user_only,
        collector,
        pages,
        syscalls_open,
        tracepoints,
        skipped,
        hardware,
    }))
}

struct Raw<'a> {
    options: &'a StatOptions,
    target: TargetInfo,
    exit: Option<ExitInfo>,
    wall: Duration,
    user_s: f64,
    sys_s: f64,
    /// Where `user_s` and `sys_s` come from.
    time_source: &'static str,
    fallback_faults: (u64, u64, &'static str),
    fallback_switches: u64,
    rusage: Option<Rusage>,
    values: HashMap<Count, u64>,
    user_only: bool,
    collector: Option<Collector>,
    pages: PageSamples,
    syscalls_open: bool,
    /// How the tracepoints were read (`None`: sampling did not open).
    tracepoints: Option<Result<tracefs::Access, String>>,
    skipped: Vec<Skipped>,
    hardware: Hardware,
}

fn swap_active() -> Option<bool> {
    let text = std::fs::read_to_string("/proc/swaps").ok()?;
    Some(text.lines().skip(1).any(|l| !l.trim().is_empty()))
}

fn assemble(raw: Raw<'_>) -> StatReport {
    let Raw {
        options,
        target,
        exit,
        wall,
        user_s,
        sys_s,
        time_source,
        fallback_faults,
        fallback_switches,
        rusage,
        values,
        user_only,
        collector,
        pages,
        syscalls_open,
        tracepoints,
        mut skipped,
        mut hardware,
    } = raw;
    let get = |c: Count| values.get(&c).copied();
    let mut counts = counts(
        &values,
        user_only,
        CountsFallback {
            wall,
            user_s,
            sys_s,
            time_source,
            faults: fallback_faults,
            switches: fallback_switches,
            rusage,
        },
    );
    if let Some(c) = &collector {
        counts.processes = Some(c.census.processes());
        counts.programs = Some(c.census.programs());
    }
    let fault_kinds = collector
        .as_ref()
        .and_then(|c| fault_kinds(c, counts.user_mode_faults, &mut skipped));
    read_hardware(&mut hardware, get);
    let page_sizes = page_sizes(&pages, options.interval, &mut skipped);
    let costs = costs(collector.as_ref(), &counts, &mut skipped);
    let mapping_records = collector.as_ref().map(|c| c.remaps.summary());
    let mut report = StatReport {
        schema: STAT_SCHEMA,
        target,
        exit,
        counts,
        fault_kinds,
        syscalls: None,
        mapping_records,
        page_sizes,
        text: None,
        hardware,
        costs,
        tracepoints: tracepoint_source(tracepoints),
        findings: vec![],
        sites: None,
        mmap_sites: None,
        skipped: vec![],
        lost_records: 0,
        folded_fault_stacks: vec![],
    };
    let mut top = TopSites::default();
    if let Some(c) = collector {
        top = from_samples(c, &pages, options, syscalls_open, &mut report, &mut skipped);
    } else if options.sites {
        skipped.push(Skipped {
            what: "fault sites".to_owned(),
            why: "sampling could not be opened (see above)".to_owned(),
        });
    }
    let evidence = findings::Evidence {
        counts: &report.counts,
        kinds: report.fault_kinds.as_ref(),
        syscalls: report.syscalls.as_ref(),
        mapping_records: report.mapping_records.as_ref(),
        page_sizes: report.page_sizes.as_ref(),
        text: report.text.as_ref(),
        hardware: &report.hardware,
        costs: &report.costs,
        top_fault_site: report.sites.as_ref().and_then(|s| s.first()),
        top_churn_site: top.churn.as_ref(),
        top_major_site: top.major.as_ref(),
        major_files: &top.major_files,
        swap_active: swap_active(),
    };
    report.findings = findings::findings(&evidence);
    report.skipped = skipped;
    report
}

/// How the tracepoint ids and formats were read, for the report.
fn tracepoint_source(tracepoints: Option<Result<tracefs::Access, String>>) -> TracepointSource {
    match tracepoints {
        Some(Ok(access)) => TracepointSource {
            source: access.name().to_owned(),
            detail: access.describe(),
        },
        Some(Err(why)) => TracepointSource {
            source: "unavailable".to_owned(),
            detail: why,
        },
        None => TracepointSource {
            source: "not-tried".to_owned(),
            detail: "sampling could not be opened (see what was not measured)".to_owned(),
        },
    }
}

/// Kernel samples of the run and how many of them are in the page-fault
/// handler; `None` when the kernel was not sampled (or its symbols are hidden,
/// noted in `skipped`). Reads `/proc/kallsyms` (about 40 ms) only when there
/// are samples to classify and no run earlier in this boot saved what it found.
fn kernel_fault_samples(c: Option<&Collector>, skipped: &mut Vec<Skipped>) -> Option<(u64, u64)> {
    let stacks = &c?.kernel_stacks;
    let total: u64 = stacks.values().sum();
    if total == 0 {
        return None;
    }
    match kallsyms::page_fault_entry() {
        Ok(entry) => Some((
            total,
            stacks
                .iter()
                .filter(|(chain, _)| kallsyms::any_in(chain, &entry))
                .map(|(_, n)| n)
                .sum(),
        )),
        Err(e) => {
            skipped.push(Skipped {
                what: session::KERNEL_CLOCK_WHAT.to_owned(),
                why: format!("{e}; the fault time comes from the calibrated fault cost"),
            });
            None
        }
    }
}

/// What a fault costs here (calibrated after the run, on this thread) and
/// the run's kernel samples. When the calibration fails, all system time is
/// assumed to be fault time, and `skipped` says so.
fn costs(c: Option<&Collector>, counts: &Counts, skipped: &mut Vec<Skipped>) -> Costs {
    let kernel = kernel_fault_samples(c, skipped);
    let mut out = match host_costs::measure() {
        Ok(m) => Costs {
            fault_s: m.fault_s,
            rewrite_4k_s: Some(m.rewrite_s),
            fault_overhead_s: Some(m.overhead_s()),
            source: "measured".to_owned(),
            detail: format!(
                "a first-touch write fault costs {} of CPU time here (median of {} rounds of {} \
                 fresh 4 KiB pages with THP off, rounds {}–{}); rewriting 4 KiB of resident \
                 memory {}; measured in {:.0} ms after the run, not cached (under 50 ms)",
                findings::micros(m.fault_s),
                m.rounds,
                count(m.pages as u64),
                findings::micros(m.fault_range_s.0),
                findings::micros(m.fault_range_s.1),
                findings::micros(m.rewrite_s),
                m.took.as_secs_f64() * 1000.0
            ),
            ..Costs::default()
        },
        Err(e) => {
            let faults = (counts.minor_faults + counts.major_faults).max(1);
            let assumed = counts.sys_s / faults as f64;
            skipped.push(Skipped {
                what: "the cost of a page fault (calibration)".to_owned(),
                why: format!(
                    "{e}; assumed instead that all system time was fault time ({} per fault)",
                    findings::micros(assumed)
                ),
            });
            Costs {
                fault_s: assumed,
                source: "assumed".to_owned(),
                detail: format!(
                    "the calibration failed ({e}): all system time is taken for fault time"
                ),
                ..Costs::default()
            }
        }
    };
    if let Some((total, in_handler)) = kernel {
        out.kernel_samples = Some(total);
        out.kernel_fault_samples = Some(in_handler);
    }
    out.fault_time_from = if kernel.is_some_and(|(total, _)| total >= findings::MIN_KERNEL_SAMPLES)
    {
        "kernel-samples"
    } else {
        "calibration"
    }
    .to_owned();
    out
}

/// What the counts fall back to where perf could not count: `getrusage` or
/// `/proc/PID/stat`, and the times measured around the run.
struct CountsFallback {
    wall: Duration,
    user_s: f64,
    sys_s: f64,
    /// Where the times come from.
    time_source: &'static str,
    /// Minor and major faults, and where they come from.
    faults: (u64, u64, &'static str),
    switches: u64,
    rusage: Option<Rusage>,
}

/// The counts: perf's when it counted every mode, else the fallback's.
/// User-mode faults come from the counters (the fault-kind events count only
/// while they are on, so they cannot stand in).
fn counts(values: &HashMap<Count, u64>, user_only: bool, fallback: CountsFallback) -> Counts {
    let get = |c: Count| values.get(&c).copied();
    let wall_s = fallback.wall.as_secs_f64();
    let perf_faults = !user_only && get(Count::Minor).is_some() && get(Count::Major).is_some();
    let (minor, major, source) = if perf_faults {
        (
            get(Count::Minor).unwrap_or(0),
            get(Count::Major).unwrap_or(0),
            "perf",
        )
    } else {
        fallback.faults
    };
    let user_mode_faults = if user_only {
        get(Count::Faults)
    } else {
        get(Count::KernelFaults).map(|k| (minor + major).saturating_sub(k))
    };
    let syscall_faults = get(Count::KernelFaults)
        .or_else(|| user_mode_faults.map(|u| (minor + major).saturating_sub(u)));
    let context_switches = match get(Count::Switches) {
        Some(n) if !user_only => n,
        _ => fallback.switches,
    };
    let rusage = fallback.rusage;
    Counts {
        wall_s,
        user_s: fallback.user_s,
        sys_s: fallback.sys_s,
        time_source: fallback.time_source.to_owned(),
        minor_faults: minor,
        major_faults: major,
        faults_per_s: if wall_s > 0.0 {
            (minor + major) as f64 / wall_s
        } else {
            0.0
        },
        context_switches,
        user_mode_faults,
        syscall_faults,
        max_rss_bytes: rusage.map(|r| r.max_rss_bytes),
        fault_source: source.to_owned(),
        rusage_minor_faults: rusage.map(|r| r.minor_faults),
        rusage_major_faults: rusage.map(|r| r.major_faults),
        // From the sampled records, once they are read.
        processes: None,
        programs: None,
    }
}

/// The fault kinds: the exact count of user-mode faults split as the
/// fault-kind windows saw them ([`kinds::estimate`]). `None` when the
/// fault-kind events did not open, or there is no total or no sample to
/// split it by (said in `skipped`).
fn fault_kinds(
    c: &Collector,
    user_mode_faults: Option<u64>,
    skipped: &mut Vec<Skipped>,
) -> Option<FaultKinds> {
    if !c.kinds_open {
        return None;
    }
    let why = match user_mode_faults {
        None => "the user-mode faults were not counted, so there is no total to split".to_owned(),
        Some(total) => match kinds::estimate(&c.kind_windows, total) {
            Some(k) => return Some(k),
            None => format!(
                "the fault-kind counters counted none of the {} user-mode faults",
                count(total)
            ),
        },
    };
    skipped.push(Skipped {
        what: "fault kinds".to_owned(),
        why,
    });
    None
}

/// Fills the hardware counts, or marks them unavailable when the cycles
/// counter opened but counted nothing (no PMU behind it).
fn read_hardware(hardware: &mut Hardware, get: impl Fn(Count) -> Option<u64>) {
    if hardware.available && get(Count::Cycles) == Some(0) {
        hardware.available = false;
        hardware.reason =
            Some("the cycles counter opened but counted nothing (no PMU behind it)".into());
    }
    if hardware.available {
        hardware.cycles = get(Count::Cycles);
        hardware.instructions = get(Count::Instructions);
        hardware.dtlb_misses = get(Count::DtlbMisses);
        hardware.itlb_misses = get(Count::ItlbMisses);
    }
}

/// The peak resident bytes by page size, or why there are none (in `skipped`).
fn page_sizes(
    pages: &PageSamples,
    interval: Duration,
    skipped: &mut Vec<Skipped>,
) -> Option<PageSizes> {
    if pages.samples > 0 {
        return Some(PageSizes {
            samples: pages.samples,
            interval_ms: interval.as_millis() as u64,
            peak_4k_bytes: pages.peak.base_bytes,
            peak_thp_bytes: pages.peak.thp_bytes,
            peak_hugetlb_bytes: pages.peak.hugetlb_bytes,
            peak_total_bytes: pages.peak_total,
            peak_asked_huge_bytes: pages.peak.asked_huge_bytes,
            peak_asked_huge_granted_bytes: pages.peak.asked_huge_granted_bytes,
            top_mappings: pages.top_mappings.clone(),
        });
    }
    skipped.push(Skipped {
        what: "page sizes".to_owned(),
        why: pages.error.clone().unwrap_or_else(|| {
            format!(
                "the program ended before the first /proc/PID/smaps snapshot (every {} ms)",
                interval.as_millis()
            )
        }),
    });
    None
}

/// The sites and files a finding may name, found while reading the samples.
#[derive(Default)]
struct TopSites {
    churn: Option<ChurnSite>,
    major: Option<Site>,
    /// Sampled major faults by file, most first.
    major_files: Vec<(String, u64)>,
}

/// Fills the report's sampled parts (hot text, system calls, sites, lost
/// records) from the collector, noting what could not be read in `skipped`.
fn from_samples(
    mut c: Collector,
    pages: &PageSamples,
    options: &StatOptions,
    syscalls_open: bool,
    report: &mut StatReport,
    skipped: &mut Vec<Skipped>,
) -> TopSites {
    for (pid, entries) in &pages.exec_maps {
        c.spaces.add_maps(*pid, entries);
    }
    report.lost_records = c.lost;
    skip_lost_and_malformed(&c, skipped);
    report.text = Some(text_footprint(&c));
    let mut top = TopSites::default();
    let mut sym = Symbolizer::new(&c.spaces);
    // Symbolize only what the report shows or a finding names: loading debug
    // info is the slowest part of the report.
    if syscalls_open {
        let analysis = churn::analyse(&mut c.calls);
        if options.sites || findings::heap_churn_possible(&analysis.stats) {
            let churn_sites =
                sites::churn_sites(&mut sym, &c.stacks, &analysis.by_stack, options.site_limit);
            top.churn = churn_sites.first().cloned();
            if options.sites {
                report.mmap_sites = Some(churn_sites);
            }
        }
        report.syscalls = Some(analysis.stats);
    }
    if !c.major_stacks.is_empty()
        && (options.sites || report.counts.major_faults >= findings::FILE_FAULTS_MIN_MAJORS)
    {
        top.major = sites::fault_sites(&mut sym, &c.stacks, &c.major_stacks, 1)
            .into_iter()
            .next();
    }
    top.major_files = c.major_files.clone().into_iter().collect();
    top.major_files
        .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if options.sites {
        report.sites = Some(sites::fault_sites(
            &mut sym,
            &c.stacks,
            &c.fault_stacks,
            options.site_limit,
        ));
        report.folded_fault_stacks = sites::folded(&mut sym, &c.stacks, &c.fault_stacks, &c.names);
    }
    let mut problems = sym.problems.clone();
    problems.sort();
    problems.dedup();
    for p in problems.into_iter().take(5) {
        skipped.push(Skipped {
            what: "symbols".to_owned(),
            why: p,
        });
    }
    top
}

/// Notes records that did not decode and records the kernel dropped.
fn skip_lost_and_malformed(c: &Collector, skipped: &mut Vec<Skipped>) {
    if c.malformed > 0 {
        skipped.push(Skipped {
            what: format!("{} records", findings::count(c.malformed)),
            why: "they did not decode (truncated or of an unexpected layout)".to_owned(),
        });
    }
    if c.lost > 0 {
        skipped.push(Skipped {
            what: format!("{} sampled records", findings::count(c.lost)),
            why: "the kernel dropped them because a ring buffer was full; sites and \
                  call counts are a lower bound"
                .to_owned(),
        });
    }
}

/// The hot-text footprint of the `cpu-clock` samples against the iTLB, with
/// the five objects that hold the most samples.
fn text_footprint(c: &Collector) -> TextFootprint {
    let info = crate::sys::tlb::tlb_info();
    let itlb = hot_text::itlb(&info);
    let samples: u64 = c.text_pages.values().sum();
    let (p4, p2, beyond) = hot_text::footprint(&c.text_pages, itlb.entries_4k);
    let mut objects: HashMap<String, u64> = HashMap::new();
    for (&(pid, page), &n) in &c.text_pages {
        let name = c
            .spaces
            .lookup(pid, page << 12)
            .map_or_else(|| "[unknown]".to_owned(), |m| m.name.clone());
        *objects.entry(name).or_default() += n;
    }
    let mut objects: Vec<(String, u64)> = objects.into_iter().collect();
    objects.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    objects.truncate(5);
    TextFootprint {
        samples,
        frequency_hz: 1_000_000_000 / session::CLOCK_PERIOD_NS,
        pages_4k: p4,
        pages_2m: p2,
        itlb,
        beyond_reach_share: beyond,
        objects,
    }
}

/// A counter of the calling thread's page faults (the `page-faults` software
/// event), kernel-side faults included when running as root. One
/// `perf_event_open`; reading it is one `read`.
pub fn thread_page_fault_counter() -> crate::sys::SysResult<crate::sys::perf::Counter> {
    use crate::sys::perf::{self, Counter, CounterSpec, EventType};
    let spec = CounterSpec {
        exclude_kernel: !crate::sys::libc_info::is_root(),
        ..CounterSpec::new(EventType::Software, perf::SW_PAGE_FAULTS)
    };
    Counter::open(&spec, 0)
}

/// Page faults the calling thread takes while `work` runs, or `None` when
/// the counter cannot be opened or read here (or went backwards: never a
/// made-up 0).
pub fn faults_during(work: impl FnOnce()) -> Option<u64> {
    let counter = thread_page_fault_counter().ok()?;
    let before = counter.read().ok()?;
    work();
    counter.read().ok()?.checked_sub(before)
}
