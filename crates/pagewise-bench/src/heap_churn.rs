//! The heap-churn experiment: threads that each allocate a buffer of varying
//! size (256 KiB–64 MiB by default), fill it and free it, in a loop.
//!
//! Rows: `glibc` (default malloc settings), `keep-heap` (the tunables of
//! `pagewise run --keep-heap`) and `buffer` (one [`Buffer`] per thread, cleared
//! and refilled). Each row runs in a fresh child process (glibc reads its
//! tunables at start-up), which the caller starts through a
//! [`WorkerSpawner`] (the `pagewise` command re-executes itself with its
//! hidden `bench heap-churn-worker` command). Inside, every thread warms up,
//! waits at a barrier, then counts its own page faults, `mmap`/`munmap` calls
//! and CPU time over the measured iterations.

use crate::{Machine, Progress, Summary};
use pagewise::buffer::{Buffer, BufferOptions, Pretouch};
use pagewise::launch::keep_heap;
use pagewise::os::mem::CHeapBlock;
use pagewise::os::perf::{Counter, CounterSpec, EventType};
use serde::{Deserialize, Serialize};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// The JSON schema of a [`Report`].
pub const SCHEMA: &str = "pagewise.bench.heap-churn/1";

/// How a worker gets its buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerMode {
    /// `malloc`, `memset`, `free` each iteration.
    Malloc,
    /// One pagewise `Buffer` per thread, reserved and pre-touched at the
    /// largest size once: `clear`, then `resize` (fill).
    Buffer,
}

impl WorkerMode {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            WorkerMode::Malloc => "malloc",
            WorkerMode::Buffer => "buffer",
        }
    }
}

/// The workload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Threads.
    pub threads: usize,
    /// Smallest buffer, bytes.
    pub min_size: usize,
    /// Largest buffer, bytes.
    pub max_size: usize,
    /// Measured iterations per thread.
    pub iterations: usize,
    /// Warm-up iterations per thread (not measured).
    pub warmup: usize,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            threads: 4,
            min_size: 256 << 10,
            max_size: 64 << 20,
            iterations: 100,
            warmup: 10,
        }
    }
}

/// What one worker process measured (summed over its threads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Bytes filled in the measured iterations.
    pub bytes: u64,
    /// Wall seconds of the measured phase.
    pub wall_s: f64,
    /// Page faults in the measured phase (all threads), when every thread's
    /// could be counted (`faults_note` says why not).
    pub faults: Option<u64>,
    /// `mmap` + `munmap` calls in the measured phase, when tracepoints could be opened.
    pub map_calls: Option<u64>,
    /// User CPU seconds in the measured phase, when every thread's
    /// `getrusage` succeeded (`cpu_note` says why not).
    pub user_s: Option<f64>,
    /// System CPU seconds in the measured phase, as `user_s`.
    pub sys_s: Option<f64>,
    /// Measured iterations (all threads).
    pub iterations: u64,
    /// Why `faults` is missing, if it is.
    #[serde(default)]
    pub faults_note: Option<String>,
    /// Why the CPU times are missing, if they are.
    #[serde(default)]
    pub cpu_note: Option<String>,
}

/// A xorshift generator: sizes are reproducible from the seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

struct ThreadCounters {
    faults: crate::FaultCounter,
    mmaps: Option<Counter>,
    munmaps: Option<Counter>,
}

impl ThreadCounters {
    fn open() -> ThreadCounters {
        let tracepoint = |name: &str| {
            let id = pagewise::host::tracefs::live_tracepoint_id(name).ok()?;
            Counter::open(&CounterSpec::new(EventType::Tracepoint, id), 0).ok()
        };
        ThreadCounters {
            faults: crate::FaultCounter::new(crate::open_thread_fault_counter()),
            mmaps: tracepoint("syscalls:sys_enter_mmap"),
            munmaps: tracepoint("syscalls:sys_enter_munmap"),
        }
    }

    /// mmap+munmap calls so far; `None` where a counter did not open or a read failed.
    fn map_calls(&self) -> Option<u64> {
        let get = |c: &Option<Counter>| c.as_ref().and_then(|c| c.read().ok());
        get(&self.mmaps)?.checked_add(get(&self.munmaps)?)
    }
}

/// `after - before` of a running count, when both were read and it did not go backwards.
fn delta(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    after?.checked_sub(before?)
}

/// CPU seconds between two `getrusage` readings, or why they are missing.
fn cpu_between(
    before: &Result<pagewise::os::time::ThreadUsage, String>,
    after: &Result<pagewise::os::time::ThreadUsage, String>,
) -> Result<(f64, f64), String> {
    let (a, b) = (before.as_ref()?, after.as_ref()?);
    let (user, sys) = (b.user_s - a.user_s, b.sys_s - a.sys_s);
    if user < 0.0 || sys < 0.0 {
        return Err(format!(
            "a thread's CPU time went backwards ({a:?} then {b:?})"
        ));
    }
    Ok((user, sys))
}

fn one_iteration(
    mode: WorkerMode,
    buffer: &mut Option<Buffer>,
    size: usize,
    byte: u8,
) -> Result<(), String> {
    match mode {
        WorkerMode::Malloc => {
            let block = CHeapBlock::malloc_filled(size, byte).map_err(|e| e.to_string())?;
            std::hint::black_box(block.as_slice()[size - 1]);
        }
        WorkerMode::Buffer => {
            let b = buffer.as_mut().expect("buffer mode has a buffer");
            b.clear();
            b.resize(size, byte).map_err(|e| e.to_string())?;
            std::hint::black_box(b[size - 1]);
        }
    }
    Ok(())
}

/// Runs the workload in this process (the worker side). Threads: warm up,
/// meet at a barrier, then measure.
pub fn run_worker(mode: WorkerMode, workload: &Workload) -> Result<WorkerResult, String> {
    if workload.threads == 0 || workload.min_size == 0 || workload.min_size > workload.max_size {
        return Err("need at least one thread and 0 < min size <= max size".into());
    }
    let start_barrier = Arc::new(Barrier::new(workload.threads + 1));
    let end_barrier = Arc::new(Barrier::new(workload.threads + 1));
    let mut handles = Vec::new();
    for t in 0..workload.threads {
        let w = *workload;
        let start_barrier = Arc::clone(&start_barrier);
        let end_barrier = Arc::clone(&end_barrier);
        handles.push(std::thread::spawn(
            move || -> Result<WorkerResult, String> {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ ((t as u64 + 1) * 0x2545_f491_4f6c_dd1d);
                let span = (w.max_size - w.min_size) as u64 + 1;
                // The Buffer fix as documented: reserve the largest expected size once and
                // fault it in up front, then reuse it. Errors are carried, not returned early:
                // every thread must reach both barriers or the others wait forever.
                let setup = match mode {
                    WorkerMode::Buffer => Buffer::with_options(BufferOptions {
                        max_capacity: w.max_size,
                        huge_pages: false,
                        pretouch: Pretouch::Eager,
                    })
                    .and_then(|mut b| b.reserve(w.max_size).map(|()| b))
                    .map(Some)
                    .map_err(|e| e.to_string()),
                    WorkerMode::Malloc => Ok(None),
                };
                let mut buffer = None;
                let counters = ThreadCounters::open();
                // The warm-up goes through this same function, so the measured
                // phase runs no code and uses no stack depth for the first time:
                // a first call of `thread_usage` or a deeper frame faults on a
                // code or stack page, which is the harness's cost, not the row's.
                let measure = |iterations: usize,
                               seed: &mut u64,
                               buffer: &mut Option<Buffer>|
                 -> Result<WorkerResult, String> {
                    let usage = || {
                        pagewise::os::time::thread_usage()
                            .map_err(|e| format!("getrusage(RUSAGE_THREAD) failed: {e}"))
                    };
                    let faults0 = counters.faults.reading();
                    let maps0 = counters.map_calls();
                    let usage0 = usage();
                    let mut bytes = 0u64;
                    for i in 0..iterations {
                        let size = w.min_size + (next(seed) % span) as usize;
                        one_iteration(mode, buffer, size, i as u8)?;
                        bytes += size as u64;
                    }
                    let usage1 = usage();
                    let faults = counters.faults.since(faults0);
                    let maps1 = counters.map_calls();
                    let cpu = cpu_between(&usage0, &usage1);
                    Ok(WorkerResult {
                        bytes,
                        wall_s: 0.0,
                        faults,
                        map_calls: delta(maps0, maps1),
                        user_s: cpu.as_ref().ok().map(|c| c.0),
                        sys_s: cpu.as_ref().ok().map(|c| c.1),
                        iterations: iterations as u64,
                        faults_note: faults
                            .is_none()
                            .then(|| counters.faults.missing())
                            .flatten(),
                        cpu_note: cpu.err(),
                    })
                };
                let warm = setup.and_then(|b| {
                    buffer = b;
                    measure(w.warmup, &mut seed, &mut buffer)
                });
                start_barrier.wait();
                let measured = warm.and_then(|_| measure(w.iterations, &mut seed, &mut buffer));
                end_barrier.wait();
                measured
            },
        ));
    }
    start_barrier.wait();
    let started = Instant::now();
    end_barrier.wait();
    let wall_s = started.elapsed().as_secs_f64();
    let mut total = WorkerResult {
        wall_s,
        map_calls: Some(0),
        faults: Some(0),
        user_s: Some(0.0),
        sys_s: Some(0.0),
        ..WorkerResult::default()
    };
    let sum = |a: Option<u64>, b: Option<u64>| a?.checked_add(b?);
    let add = |a: Option<f64>, b: Option<f64>| Some(a? + b?);
    for h in handles {
        let r = h
            .join()
            .map_err(|_| "a worker thread panicked".to_owned())??;
        total.bytes += r.bytes;
        total.faults = sum(total.faults, r.faults);
        total.map_calls = sum(total.map_calls, r.map_calls);
        total.user_s = add(total.user_s, r.user_s);
        total.sys_s = add(total.sys_s, r.sys_s);
        total.iterations += r.iterations;
        total.faults_note = total.faults_note.or(r.faults_note);
        total.cpu_note = total.cpu_note.or(r.cpu_note);
    }
    Ok(total)
}

/// A row of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Row {
    /// Default glibc malloc.
    Glibc,
    /// glibc with `pagewise run --keep-heap`'s tunables.
    KeepHeap,
    /// One pagewise Buffer per thread.
    Buffer,
}

impl Row {
    /// Every row, baseline first.
    pub const ALL: [Row; 3] = [Row::Glibc, Row::KeepHeap, Row::Buffer];

    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            Row::Glibc => "glibc",
            Row::KeepHeap => "keep-heap",
            Row::Buffer => "buffer",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The workload.
    pub workload: Workload,
    /// Trials per row, interleaved.
    pub trials: usize,
}

/// Builds the command of one worker process: a fresh process that calls
/// [`run_worker`] with this mode and workload and prints the
/// [`WorkerResult`] as JSON on stdout (one line), exiting 0; or prints why
/// not on stderr and exits non-zero. The experiment sets or removes
/// `GLIBC_TUNABLES` on the command and runs it once per row and trial. The
/// caller owns the command line: the `pagewise` command passes itself with
/// its hidden `bench heap-churn-worker` subcommand.
pub type WorkerSpawner<'a> = &'a dyn Fn(WorkerMode, &Workload) -> Command;

/// One row's medians.
#[derive(Debug, Clone, Serialize)]
pub struct RowResult {
    /// `glibc`, `keep-heap` or `buffer`.
    pub name: &'static str,
    /// Median fill throughput, GB/s (10^9 bytes per second of wall time).
    pub gbps: f64,
    /// Min and max throughput over trials.
    pub gbps_range: [f64; 2],
    /// Median throughput over the `glibc` row's median.
    pub speedup: f64,
    /// Median page faults per iteration (all threads' iterations); null where the
    /// page-faults event could not be opened.
    pub faults_per_iter: Option<f64>,
    /// Median `mmap` + `munmap` calls per iteration; null where tracepoints could not be opened.
    pub mmaps_per_iter: Option<f64>,
    /// Median user CPU seconds of the measured phase (all threads); null
    /// when a trial's could not be measured (the report's `cpu_note` says why).
    pub user_s: Option<f64>,
    /// Median system CPU seconds of the measured phase (all threads), as `user_s`.
    pub sys_s: Option<f64>,
    /// The `GLIBC_TUNABLES` the row ran with, if any.
    pub glibc_tunables: Option<String>,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The workload.
    pub workload: Workload,
    /// Trials per row.
    pub trials: usize,
    /// Why mmap counts are missing, if they are.
    pub map_calls_note: Option<String>,
    /// Why page-fault counts are missing, if they are.
    pub faults_note: Option<String>,
    /// Why CPU times are missing, if they are.
    pub cpu_note: Option<String>,
    /// The machine.
    pub machine: Machine,
    /// Rows, `glibc` first.
    pub rows: Vec<RowResult>,
}

fn run_child(
    spawn: WorkerSpawner<'_>,
    row: Row,
    workload: &Workload,
    tunables: Option<&str>,
) -> Result<WorkerResult, String> {
    let mode = match row {
        Row::Buffer => WorkerMode::Buffer,
        _ => WorkerMode::Malloc,
    };
    let mut command = spawn(mode, workload);
    match tunables {
        Some(t) => command.env("GLIBC_TUNABLES", t),
        None => command.env_remove("GLIBC_TUNABLES"),
    };
    let output = command.output().map_err(|e| {
        format!(
            "cannot start the {} worker {}: {e}",
            row.name(),
            command.get_program().to_string_lossy()
        )
    })?;
    if !output.status.success() {
        return Err(format!(
            "{} worker failed ({}): {}",
            row.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{} worker printed no result: {e}", row.name()))
}

/// Runs every row `trials` times, interleaved, each in a fresh process
/// started by `spawn`.
pub fn run(
    config: &Config,
    spawn: WorkerSpawner<'_>,
    progress: &dyn Progress,
) -> Result<Report, String> {
    let machine = Machine::describe();
    let keep_heap_env = keep_heap::glibc_tunables_env(None, config.workload.max_size as u64).0;
    let tunables = |row: Row| (row == Row::KeepHeap).then(|| keep_heap_env.clone());
    let mut results: Vec<Vec<WorkerResult>> = Row::ALL.iter().map(|_| Vec::new()).collect();
    let total = config.trials * Row::ALL.len();
    for trial in 0..config.trials {
        for (i, &row) in Row::ALL.iter().enumerate() {
            progress.update(
                trial * Row::ALL.len() + i,
                total,
                &format!("trial {}/{}: {}", trial + 1, config.trials, row.name()),
            );
            results[i].push(run_child(
                spawn,
                row,
                &config.workload,
                tunables(row).as_deref(),
            )?);
        }
    }
    progress.update(total, total, "done");

    // The median of a figure every trial measured; `None` when one did not.
    let median = |v: Option<Vec<f64>>| Summary::of(&v?).map(|s| s.median);
    let mut rows = Vec::new();
    let mut glibc_gbps = f64::NAN;
    let mut map_calls_note = None;
    let mut faults_note = None;
    let mut cpu_note = None;
    for (i, &row) in Row::ALL.iter().enumerate() {
        let r = &results[i];
        let gbps: Vec<f64> = r.iter().map(|x| x.bytes as f64 / x.wall_s / 1e9).collect();
        let summary = Summary::of(&gbps).ok_or("no trials")?;
        if row == Row::Glibc {
            glibc_gbps = summary.median;
        }
        let per_iter = |f: &dyn Fn(&WorkerResult) -> Option<u64>| {
            median(
                r.iter()
                    .map(|x| f(x).map(|n| n as f64 / x.iterations as f64))
                    .collect(),
            )
        };
        let mmaps = per_iter(&|x| x.map_calls);
        if mmaps.is_none() {
            map_calls_note = Some(
                "mmap/munmap counts need the syscalls tracepoints: run as root with tracefs mounted (see `pagewise doctor`)".to_owned(),
            );
        }
        let faults_per_iter = per_iter(&|x| x.faults);
        if faults_per_iter.is_none() {
            faults_note = faults_note
                .or_else(|| r.iter().find_map(|x| x.faults_note.clone()))
                .or_else(|| Some(format!("a {} worker counted no page faults", row.name())));
        }
        let user_s = median(r.iter().map(|x| x.user_s).collect());
        let sys_s = median(r.iter().map(|x| x.sys_s).collect());
        if user_s.is_none() || sys_s.is_none() {
            cpu_note = cpu_note
                .or_else(|| r.iter().find_map(|x| x.cpu_note.clone()))
                .or_else(|| Some(format!("a {} worker measured no CPU time", row.name())));
        }
        rows.push(RowResult {
            name: row.name(),
            gbps: summary.median,
            gbps_range: [summary.min, summary.max],
            speedup: summary.median / glibc_gbps,
            faults_per_iter,
            mmaps_per_iter: mmaps,
            user_s,
            sys_s,
            glibc_tunables: tunables(row),
        });
    }
    Ok(Report {
        schema: SCHEMA,
        workload: config.workload,
        trials: config.trials,
        map_calls_note,
        faults_note,
        cpu_note,
        machine,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counts_and_buffer_mode_stops_faulting() {
        let workload = Workload {
            threads: 2,
            min_size: 64 << 10,
            max_size: 8 << 20,
            iterations: 20,
            warmup: 40,
        };
        let buffer = run_worker(WorkerMode::Buffer, &workload).unwrap();
        assert_eq!(buffer.iterations, 40);
        assert!(buffer.bytes >= 40 * (64 << 10));
        assert!(buffer.wall_s > 0.0);
        let malloc = run_worker(WorkerMode::Malloc, &workload).unwrap();
        assert_eq!(malloc.iterations, 40);
        let counting = pagewise::observe::thread_page_fault_counter().is_ok();
        if counting {
            // The buffer was faulted in at its largest size before the loop.
            assert_eq!(buffer.faults, Some(0));
        } else {
            pagewise_testkit::skip_part!(
                "fault check",
                pagewise_testkit::Need::PerfEvents,
                "the page-faults event does not open here"
            );
        }
    }

    #[test]
    fn a_failing_thread_reports_instead_of_hanging() {
        let impossible = Workload {
            threads: 2,
            min_size: 1 << 20,
            max_size: 1 << 60,
            iterations: 1,
            warmup: 0,
        };
        let err = run_worker(WorkerMode::Buffer, &impossible).unwrap_err();
        assert!(
            err.contains("address space") || err.contains("capacity"),
            "{err}"
        );
    }

    #[test]
    fn a_worker_that_fails_or_cannot_start_names_its_row() {
        let config = Config {
            workload: Workload::default(),
            trials: 1,
        };
        let failing = |_: WorkerMode, _: &Workload| Command::new("false");
        let err = run(&config, &failing, &crate::NoProgress).unwrap_err();
        assert!(err.contains("glibc worker failed"), "{err}");
        let missing = |_: WorkerMode, _: &Workload| Command::new("/nonexistent/pagewise");
        let err = run(&config, &missing, &crate::NoProgress).unwrap_err();
        assert!(
            err.contains("cannot start the glibc worker /nonexistent/pagewise"),
            "{err}"
        );
    }

    #[test]
    fn figures_a_worker_could_not_measure_are_null_with_the_reason() {
        let config = Config {
            workload: Workload::default(),
            trials: 2,
        };
        // Workers that measured throughput but whose fault counter and
        // getrusage failed, through the spawner seam.
        let measured = WorkerResult {
            bytes: 1 << 30,
            wall_s: 0.5,
            faults: Some(1000),
            map_calls: None,
            user_s: Some(0.25),
            sys_s: Some(0.25),
            iterations: 100,
            faults_note: None,
            cpu_note: None,
        };
        let failed = WorkerResult {
            faults: None,
            user_s: None,
            sys_s: None,
            faults_note: Some("a page-fault counter read failed: EIO".into()),
            cpu_note: Some("getrusage(RUSAGE_THREAD) failed: EINVAL".into()),
            ..measured.clone()
        };
        let trial = std::cell::Cell::new(0);
        let spawn = |_: WorkerMode, _: &Workload| {
            // The second trial of every row fails to measure.
            let n = trial.get();
            trial.set(n + 1);
            let r = if n < Row::ALL.len() {
                &measured
            } else {
                &failed
            };
            let mut c = Command::new("printf");
            c.args(["%s\n", &serde_json::to_string(r).unwrap()]);
            c
        };
        let report = run(&config, &spawn, &crate::NoProgress).unwrap();
        for row in &report.rows {
            assert!((row.gbps - 2.147_483_648).abs() < 1e-9, "{row:?}");
            assert_eq!(row.faults_per_iter, None, "{row:?}");
            assert_eq!((row.user_s, row.sys_s), (None, None), "{row:?}");
        }
        assert!(report.faults_note.as_deref().unwrap().contains("EIO"));
        assert!(report.cpu_note.as_deref().unwrap().contains("EINVAL"));
        let json = serde_json::to_value(&report).unwrap();
        for key in ["faults_per_iter", "user_s", "sys_s", "mmaps_per_iter"] {
            assert!(json["rows"][0][key].is_null(), "{key}: {json:#}");
        }
        // Every trial measured: the medians are there.
        trial.set(0);
        let one = Config {
            trials: 1,
            ..config
        };
        let report = run(&one, &spawn, &crate::NoProgress).unwrap();
        assert_eq!(report.rows[0].faults_per_iter, Some(10.0));
        assert_eq!(report.rows[0].user_s, Some(0.25));
        assert_eq!(report.faults_note, None);
        assert_eq!(report.cpu_note, None);
    }

    #[test]
    fn bad_workloads_are_refused() {
        let bad = Workload {
            min_size: 10,
            max_size: 5,
            ..Workload::default()
        };
        assert!(run_worker(WorkerMode::Malloc, &bad).is_err());
    }
}
