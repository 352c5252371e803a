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
use pagewise::sys::mem::CHeapBlock;
use pagewise::sys::perf::{Counter, CounterSpec, EventType};
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Bytes filled in the measured iterations.
    pub bytes: u64,
    /// Wall seconds of the measured phase.
    pub wall_s: f64,
    /// Page faults in the measured phase (all threads), when they could be counted.
    pub faults: Option<u64>,
    /// `mmap` + `munmap` calls in the measured phase, when tracepoints could be opened.
    pub map_calls: Option<u64>,
    /// User CPU seconds in the measured phase.
    pub user_s: f64,
    /// System CPU seconds in the measured phase.
    pub sys_s: f64,
    /// Measured iterations (all threads).
    pub iterations: u64,
}

/// A xorshift generator: sizes are reproducible from the seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

struct ThreadCounters {
    faults: Option<Counter>,
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
            faults: pagewise::observe::thread_page_fault_counter().ok(),
            mmaps: tracepoint("syscalls:sys_enter_mmap"),
            munmaps: tracepoint("syscalls:sys_enter_munmap"),
        }
    }

    /// Page faults and mmap+munmap calls so far; `None` where the counter did not open.
    fn read(&self) -> (Option<u64>, Option<u64>) {
        let get = |c: &Option<Counter>| c.as_ref().and_then(|c| c.read().ok());
        let maps = match (get(&self.mmaps), get(&self.munmaps)) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        (get(&self.faults), maps)
    }
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
                    let (faults0, maps0) = counters.read();
                    let usage0 = pagewise::sys::time::thread_usage().unwrap_or_default();
                    let mut bytes = 0u64;
                    for i in 0..iterations {
                        let size = w.min_size + (next(seed) % span) as usize;
                        one_iteration(mode, buffer, size, i as u8)?;
                        bytes += size as u64;
                    }
                    let usage1 = pagewise::sys::time::thread_usage().unwrap_or_default();
                    let (faults1, maps1) = counters.read();
                    Ok(WorkerResult {
                        bytes,
                        wall_s: 0.0,
                        faults: faults1.zip(faults0).map(|(a, b)| a - b),
                        map_calls: maps1.zip(maps0).map(|(a, b)| a - b),
                        user_s: usage1.user_s - usage0.user_s,
                        sys_s: usage1.sys_s - usage0.sys_s,
                        iterations: iterations as u64,
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
        ..WorkerResult::default()
    };
    for h in handles {
        let r = h
            .join()
            .map_err(|_| "a worker thread panicked".to_owned())??;
        total.bytes += r.bytes;
        total.faults = total.faults.zip(r.faults).map(|(a, b)| a + b);
        total.map_calls = total.map_calls.zip(r.map_calls).map(|(a, b)| a + b);
        total.user_s += r.user_s;
        total.sys_s += r.sys_s;
        total.iterations += r.iterations;
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
    /// Median user CPU seconds of the measured phase (all threads).
    pub user_s: f64,
    /// Median system CPU seconds of the measured phase (all threads).
    pub sys_s: f64,
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

    let median = |v: Vec<f64>| Summary::of(&v).map_or(f64::NAN, |s| s.median);
    let mut rows = Vec::new();
    let mut glibc_gbps = f64::NAN;
    let mut map_calls_note = None;
    for (i, &row) in Row::ALL.iter().enumerate() {
        let r = &results[i];
        let gbps: Vec<f64> = r.iter().map(|x| x.bytes as f64 / x.wall_s / 1e9).collect();
        let summary = Summary::of(&gbps).ok_or("no trials")?;
        if row == Row::Glibc {
            glibc_gbps = summary.median;
        }
        let per_iter = |f: &dyn Fn(&WorkerResult) -> f64| {
            median(r.iter().map(|x| f(x) / x.iterations as f64).collect())
        };
        let mmaps = if r.iter().all(|x| x.map_calls.is_some()) {
            Some(per_iter(&|x| x.map_calls.unwrap_or(0) as f64))
        } else {
            map_calls_note = Some(
                "mmap/munmap counts need the syscalls tracepoints: run as root with tracefs mounted (see `pagewise doctor`)".to_owned(),
            );
            None
        };
        rows.push(RowResult {
            name: row.name(),
            gbps: summary.median,
            gbps_range: [summary.min, summary.max],
            speedup: summary.median / glibc_gbps,
            faults_per_iter: r
                .iter()
                .all(|x| x.faults.is_some())
                .then(|| per_iter(&|x| x.faults.unwrap_or(0) as f64)),
            mmaps_per_iter: mmaps,
            user_s: median(r.iter().map(|x| x.user_s).collect()),
            sys_s: median(r.iter().map(|x| x.sys_s).collect()),
            glibc_tunables: tunables(row),
        });
    }
    Ok(Report {
        schema: SCHEMA,
        workload: config.workload,
        trials: config.trials,
        map_calls_note,
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
    fn bad_workloads_are_refused() {
        let bad = Workload {
            min_size: 10,
            max_size: 5,
            ..Workload::default()
        };
        assert!(run_worker(WorkerMode::Malloc, &bad).is_err());
    }
}
