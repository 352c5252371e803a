//! The queue experiment: a writer process and a reader process share a
//! `pagewise::queue` file. Two phases per trial:
//!
//! - **throughput**: the writer appends N records as fast as it can; the
//!   reader reads them all. Records per second = N / (time of the last read
//!   − time of the first append), both `CLOCK_MONOTONIC`.
//! - **latency**: the writer appends at a fixed offered rate; each record
//!   carries the time it was *scheduled* to be sent, and the reader records
//!   `now − scheduled` in an HDR histogram. A writer that falls behind sends
//!   the backlog at once and the waiting shows up in the latency (no
//!   coordinated omission).
//!
//! Page faults are counted in the writer's append loop (its own thread,
//! software event `page-faults`). The processes are started by a caller-supplied
//! function (the CLI re-executes itself with a hidden subcommand); they talk to
//! the parent with one line of JSON each on stdout.

use super::{Machine, Progress, Summary};
use crate::queue::{Options, PreTouch, Reader, ReaderOptions, Start, Wait, Writer};
use crate::sys::clock::monotonic_ns;
use crate::sys::file::{self};
use crate::sys::perf::Counter;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// The JSON schema of a [`Report`].
pub const SCHEMA: &str = "pagewise.bench.queue/1";

/// Which side a child process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Opens the queue for writing and appends.
    Writer,
    /// Reads every record.
    Reader,
}

/// Which measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// As fast as possible.
    Throughput,
    /// At a fixed offered rate, timing every record.
    Latency,
}

/// What a child process does (passed to it as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildSpec {
    /// Writer or reader.
    pub role: Role,
    /// The queue file (created by the parent).
    pub path: PathBuf,
    /// Throughput or latency.
    pub phase: Phase,
    /// Records to send or receive.
    pub records: u64,
    /// Payload bytes per record (at least 16).
    pub record_bytes: usize,
    /// Offered rate of the latency phase, records per second.
    pub rate_per_s: f64,
    /// Whether the writer runs the pre-toucher.
    pub pretouch: bool,
    /// The pre-touch window, bytes.
    pub window: u64,
}

/// What a child reports (one JSON line on stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChildResult {
    /// Writer: records appended.
    pub appended: u64,
    /// Writer: page faults in the append loop (`None`: not countable).
    pub append_faults: Option<u64>,
    /// Writer: `CLOCK_MONOTONIC` ns just before the first append.
    pub first_send_ns: u64,
    /// Writer: ns spent in the append loop.
    pub writer_ns: u64,
    /// Writer: pieces the writer prepared itself (caught up with the pre-toucher).
    pub pieces_inline: u64,
    /// Reader: records received.
    pub received: u64,
    /// Reader: `CLOCK_MONOTONIC` ns after the last record.
    pub last_recv_ns: u64,
    /// Reader, latency phase: percentiles in ns: p50, p90, p99, p99.9, p99.99, max.
    pub latency_ns: Option<[u64; 6]>,
    /// Reader, latency phase: records over 1 ms.
    pub over_1ms: u64,
}

const READY: &str = "ready";

/// Runs one side in this process: prints `ready` when set up, then the
/// result as one line of JSON.
pub fn run_child(spec: &ChildSpec, out: &mut dyn Write) -> Result<(), String> {
    if spec.record_bytes < 16 {
        return Err("records must be at least 16 bytes (sequence number and timestamp)".into());
    }
    let result = match spec.role {
        Role::Writer => run_writer(spec, out)?,
        Role::Reader => run_reader(spec, out)?,
    };
    let line = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    writeln!(out, "{line}").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

fn ready(out: &mut dyn Write) -> Result<(), String> {
    writeln!(out, "{READY}")
        .and_then(|_| out.flush())
        .map_err(|e| e.to_string())
}

fn run_writer(spec: &ChildSpec, out: &mut dyn Write) -> Result<ChildResult, String> {
    let options = Options {
        pretouch: spec.pretouch.then(|| PreTouch {
            window: spec.window,
            ..PreTouch::default()
        }),
        ..Options::default()
    };
    let mut w = Writer::open(&spec.path, options).map_err(|e| e.to_string())?;
    if spec.pretouch {
        w.wait_pretouched(spec.window).map_err(|e| e.to_string())?;
    }
    let counter = crate::observe::thread_page_fault_counter().ok();
    let read = |c: &Option<Counter>| c.as_ref().and_then(|c| c.read().ok());
    let mut payload = vec![0x5Au8; spec.record_bytes];
    ready(out)?;
    // The first clock read maps the vDSO data page: keep that fault out of the loop.
    monotonic_ns();
    let before = read(&counter);
    let first_send_ns = monotonic_ns();
    match spec.phase {
        Phase::Throughput => {
            for i in 0..spec.records {
                payload[..8].copy_from_slice(&i.to_le_bytes());
                w.append(&payload).map_err(|e| e.to_string())?;
            }
        }
        Phase::Latency => {
            let interval = 1e9 / spec.rate_per_s;
            // A millisecond's head start so the first records are not already late.
            let t0 = first_send_ns + 1_000_000;
            for i in 0..spec.records {
                let scheduled = t0 + (i as f64 * interval) as u64;
                while monotonic_ns() < scheduled {
                    std::hint::spin_loop();
                }
                payload[..8].copy_from_slice(&i.to_le_bytes());
                payload[8..16].copy_from_slice(&scheduled.to_le_bytes());
                w.append(&payload).map_err(|e| e.to_string())?;
            }
        }
    }
    let writer_ns = monotonic_ns() - first_send_ns;
    let after = read(&counter);
    Ok(ChildResult {
        appended: spec.records,
        append_faults: before.zip(after).map(|(b, a)| a - b),
        first_send_ns,
        writer_ns,
        pieces_inline: w.report().window.pieces_inline,
        ..ChildResult::default()
    })
}

fn run_reader(spec: &ChildSpec, out: &mut dyn Write) -> Result<ChildResult, String> {
    let mut r = Reader::open_with(
        &spec.path,
        ReaderOptions {
            start: Start::Beginning,
            ..ReaderOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    let mut over_1ms = 0;
    ready(out)?;
    let latency = spec.phase == Phase::Latency;
    for i in 0..spec.records {
        let rec = r
            .next_wait(Wait::Spin, Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no record for 30 s after {i} of {}", spec.records))?;
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&rec.payload[..8]);
        if u64::from_le_bytes(seq) != i {
            return Err(format!(
                "record {i} carries sequence {}",
                u64::from_le_bytes(seq)
            ));
        }
        if latency {
            let now = monotonic_ns();
            let mut sched = [0u8; 8];
            sched.copy_from_slice(&rec.payload[8..16]);
            let ns = now.saturating_sub(u64::from_le_bytes(sched));
            if ns > 1_000_000 {
                over_1ms += 1;
            }
            hist.saturating_record(ns.max(1));
        }
    }
    let last_recv_ns = monotonic_ns();
    let latency_ns = latency.then(|| {
        [
            hist.value_at_quantile(0.5),
            hist.value_at_quantile(0.9),
            hist.value_at_quantile(0.99),
            hist.value_at_quantile(0.999),
            hist.value_at_quantile(0.9999),
            hist.max(),
        ]
    });
    Ok(ChildResult {
        received: spec.records,
        last_recv_ns,
        latency_ns,
        over_1ms,
        ..ChildResult::default()
    })
}

/// Where and how one row runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSpec {
    /// Row name.
    pub name: String,
    /// Directory of the queue file.
    pub dir: PathBuf,
    /// Whether the writer pre-touches.
    pub pretouch: bool,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Payload bytes per record (default 128).
    pub record_bytes: usize,
    /// Records in the throughput phase (default 2,000,000).
    pub records: u64,
    /// Records in the latency phase (default 1,000,000).
    pub latency_records: u64,
    /// Offered rate in the latency phase (default 1,000,000 records/s).
    pub rate_per_s: f64,
    /// The pre-touch window (default 4 MiB).
    pub window: u64,
    /// Trials per row, interleaved (default 5).
    pub trials: usize,
    /// Rows.
    pub rows: Vec<RowSpec>,
}

impl Config {
    /// The default rows: tmpfs and a disk directory, each with and without pre-touch.
    pub fn default_rows(tmpfs: &Path, disk: &Path) -> Vec<RowSpec> {
        let row = |name: &str, dir: &Path, pretouch| RowSpec {
            name: name.to_owned(),
            dir: dir.to_owned(),
            pretouch,
        };
        vec![
            row("tmpfs+pretouch", tmpfs, true),
            row("tmpfs", tmpfs, false),
            row("disk+pretouch", disk, true),
            row("disk", disk, false),
        ]
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            record_bytes: 128,
            records: 2_000_000,
            latency_records: 1_000_000,
            rate_per_s: 1_000_000.0,
            window: 4 << 20,
            trials: 5,
            rows: Config::default_rows(Path::new("/dev/shm"), Path::new("/var/tmp")),
        }
    }
}

/// One row's results: medians over the trials.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Row name.
    pub name: String,
    /// File system of the queue file.
    pub fs: String,
    /// Whether the writer pre-touched.
    pub pretouch: bool,
    /// One-way throughput, records per second (first append to last read).
    pub records_per_s: f64,
    /// Min and max over the trials.
    pub records_per_s_range: [f64; 2],
    /// The writer's own append rate in the throughput phase, records per second.
    pub writer_records_per_s: f64,
    /// Latency at the offered rate, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// 99.99th percentile, ns.
    pub p9999_ns: u64,
    /// Largest latency, ns.
    pub max_ns: u64,
    /// Records over 1 ms, per thousand.
    pub over_1ms_per_mille: f64,
    /// Page faults in the writer's append loops (throughput + latency phase).
    pub append_faults: Option<u64>,
    /// Of which in the throughput phase.
    pub append_faults_throughput: Option<u64>,
    /// Pieces the writer prepared itself in the throughput phase (it caught
    /// up with the pre-toucher; a system call, not a fault).
    pub writer_pieces_inline: u64,
    /// Trials run.
    pub trials: usize,
}

/// A row that could not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotRun {
    /// Row name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Payload bytes per record.
    pub record_bytes: usize,
    /// Records in the throughput phase.
    pub records: u64,
    /// Records in the latency phase.
    pub latency_records: u64,
    /// Offered rate in the latency phase.
    pub rate_per_s: f64,
    /// Pre-touch window.
    pub window_bytes: u64,
    /// Trials per row.
    pub trials: usize,
    /// The machine.
    pub machine: Machine,
    /// Results.
    pub rows: Vec<Row>,
    /// Rows that did not run.
    pub not_run: Vec<NotRun>,
}

struct Trial {
    records_per_s: f64,
    writer_records_per_s: f64,
    latency: [u64; 6],
    over_1ms_per_mille: f64,
    faults: Option<u64>,
    faults_throughput: Option<u64>,
    pieces_inline: u64,
}

/// Starts a child process for a spec, with its stdout piped.
pub type Spawn<'a> = &'a dyn Fn(&ChildSpec) -> std::io::Result<Child>;

struct Running {
    child: Child,
    lines: BufReader<std::process::ChildStdout>,
}

impl Running {
    fn start(spawn: Spawn<'_>, spec: &ChildSpec) -> Result<Running, String> {
        let mut child =
            spawn(spec).map_err(|e| format!("could not start the {:?} process: {e}", spec.role))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("the child's stdout is not piped")?;
        let mut r = Running {
            child,
            lines: BufReader::new(stdout),
        };
        let line = r.line()?;
        if line != READY {
            return Err(format!(
                "the {:?} process said {line:?} instead of ready",
                spec.role
            ));
        }
        Ok(r)
    }

    fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        self.lines.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.is_empty() {
            let status = self.child.wait().map_err(|e| e.to_string())?;
            return Err(format!(
                "the child process ended ({status}) without a result (its error is above)"
            ));
        }
        Ok(line.trim().to_owned())
    }

    fn finish(mut self) -> Result<ChildResult, String> {
        let line = self.line()?;
        let result =
            serde_json::from_str(&line).map_err(|e| format!("bad child result {line:?}: {e}"))?;
        let _ = self.child.wait();
        Ok(result)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn phase(
    config: &Config,
    row: &RowSpec,
    phase: Phase,
    path: &Path,
    spawn: Spawn<'_>,
) -> Result<(ChildResult, ChildResult), String> {
    let remove = || {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(crate::queue::wait_path(path));
    };
    remove();
    drop(
        Writer::create(
            path,
            Options {
                pretouch: None,
                ..Options::default()
            },
        )
        .map_err(|e| e.to_string())?,
    );
    let spec = |role| ChildSpec {
        role,
        path: path.to_owned(),
        phase,
        records: match phase {
            Phase::Throughput => config.records,
            Phase::Latency => config.latency_records,
        },
        record_bytes: config.record_bytes,
        rate_per_s: config.rate_per_s,
        pretouch: row.pretouch,
        window: config.window,
    };
    let result = (|| {
        let reader = Running::start(spawn, &spec(Role::Reader))?;
        let writer = Running::start(spawn, &spec(Role::Writer))?;
        let w = writer.finish()?;
        let r = reader.finish()?;
        Ok((w, r))
    })();
    remove();
    result
}

fn run_trial(config: &Config, row: &RowSpec, spawn: Spawn<'_>) -> Result<Trial, String> {
    let path = row
        .dir
        .join(format!("pagewise-bench-queue-{}.q", std::process::id()));
    let (tw, tr) = phase(config, row, Phase::Throughput, &path, spawn)?;
    let (lw, lr) = phase(config, row, Phase::Latency, &path, spawn)?;
    let span = tr.last_recv_ns.saturating_sub(tw.first_send_ns).max(1);
    let latency = lr.latency_ns.ok_or("the reader sent no latencies")?;
    Ok(Trial {
        records_per_s: config.records as f64 * 1e9 / span as f64,
        writer_records_per_s: config.records as f64 * 1e9 / tw.writer_ns.max(1) as f64,
        latency,
        over_1ms_per_mille: lr.over_1ms as f64 * 1000.0 / config.latency_records.max(1) as f64,
        faults: tw.append_faults.zip(lw.append_faults).map(|(a, b)| a + b),
        faults_throughput: tw.append_faults,
        pieces_inline: tw.pieces_inline,
    })
}

fn fs_of(dir: &Path) -> String {
    std::fs::File::open(dir)
        .ok()
        .and_then(|f| file::fs_kind(&f).ok())
        .map_or_else(|| "unknown".to_owned(), |k| k.name())
}

fn median(v: impl Iterator<Item = f64>) -> Option<Summary> {
    Summary::of(&v.collect::<Vec<_>>())
}

/// Runs the experiment; `spawn` starts a child process that calls
/// [`run_child`] with the spec it is given.
pub fn run(config: &Config, progress: &dyn Progress, spawn: Spawn<'_>) -> Report {
    let machine = Machine::describe();
    let mut trials: Vec<Vec<Trial>> = config.rows.iter().map(|_| Vec::new()).collect();
    let mut failures: Vec<Option<String>> = vec![None; config.rows.len()];
    let total = config.trials * config.rows.len();
    let mut done = 0;
    for trial in 0..config.trials {
        for (i, row) in config.rows.iter().enumerate() {
            progress.update(
                done,
                total,
                &format!("trial {}/{}: {}", trial + 1, config.trials, row.name),
            );
            done += 1;
            if failures[i].is_some() {
                continue;
            }
            match run_trial(config, row, spawn) {
                Ok(t) => trials[i].push(t),
                Err(e) => failures[i] = Some(e),
            }
        }
    }
    progress.update(total, total, "done");
    let mut rows = Vec::new();
    let mut not_run = Vec::new();
    for (i, spec) in config.rows.iter().enumerate() {
        let t = &trials[i];
        if t.is_empty() {
            not_run.push(NotRun {
                name: spec.name.clone(),
                reason: failures[i].take().unwrap_or_else(|| "no trials".into()),
            });
            continue;
        }
        let q = |k: usize| {
            median(t.iter().map(|x| x.latency[k] as f64)).map_or(0, |s| s.median.round() as u64)
        };
        let opt = |f: &dyn Fn(&Trial) -> Option<u64>| {
            let v: Option<Vec<f64>> = t.iter().map(|x| f(x).map(|n| n as f64)).collect();
            v.and_then(|v| Summary::of(&v))
                .map(|s| s.median.round() as u64)
        };
        let Some(rate) = median(t.iter().map(|x| x.records_per_s)) else {
            continue;
        };
        rows.push(Row {
            name: spec.name.clone(),
            fs: fs_of(&spec.dir),
            pretouch: spec.pretouch,
            records_per_s: rate.median,
            records_per_s_range: [rate.min, rate.max],
            writer_records_per_s: median(t.iter().map(|x| x.writer_records_per_s))
                .map_or(0.0, |s| s.median),
            p50_ns: q(0),
            p90_ns: q(1),
            p99_ns: q(2),
            p999_ns: q(3),
            p9999_ns: q(4),
            max_ns: q(5),
            over_1ms_per_mille: median(t.iter().map(|x| x.over_1ms_per_mille))
                .map_or(0.0, |s| s.median),
            append_faults: opt(&|x| x.faults),
            append_faults_throughput: opt(&|x| x.faults_throughput),
            writer_pieces_inline: median(t.iter().map(|x| x.pieces_inline as f64))
                .map_or(0, |s| s.median.round() as u64),
            trials: t.len(),
        });
    }
    Report {
        schema: SCHEMA,
        record_bytes: config.record_bytes,
        records: config.records,
        latency_records: config.latency_records,
        rate_per_s: config.rate_per_s,
        window_bytes: config.window,
        trials: config.trials,
        machine,
        rows,
        not_run,
    }
}
