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
//! Rows differ in the file system, the pre-touch window and the copy routine
//! that moves payloads in and out of the file. The `floor` row runs the same
//! two processes over the simplest possible shared-memory channel (one slot
//! per record in a file both processes allocated and faulted in before the
//! clock starts, a commit word per slot): no queue, no growth, no faults. It
//! is what this machine allows any shared-memory transport; the queue rows
//! are judged against it.
//!
//! Page faults are counted in the writer's append loop (its own thread,
//! software event `page-faults`). The processes are started by a caller-supplied
//! function (the CLI re-executes itself with a hidden subcommand); they talk to
//! the parent with one line of JSON each on stdout.

use crate::{Machine, Progress, Summary};
use hdrhistogram::Histogram;
use pagewise::copy::Routine;
use pagewise::os::clock::monotonic_ns;
use pagewise::os::file::{self};
use pagewise::os::file_map::{FileAdvice, ReadMap, WriteMap};
use pagewise::queue::{
    Options, PreTouch, PreTouchMode, Reader, ReaderOptions, Start, Wait, Writer,
};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

pub mod rtt;

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

/// What carries the records from the writer process to the reader process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// A `pagewise::queue` file.
    Queue,
    /// The floor: one slot per record (a commit word, then the payload) in a
    /// file as large as all records, allocated by the parent and faulted in
    /// by both processes before the clock starts.
    Floor,
}

/// How the writer keeps its window ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pretouch {
    /// No pre-touch: the writer faults on every new page.
    Off,
    /// The pre-touch thread, asked for (`PreTouchMode::Thread`).
    Background,
    /// Default options (`PreTouchMode::Auto`: the thread with a CPU to
    /// spare, else idle-time work or a lowest-priority thread, following
    /// the writer's pattern); the writer calls `Writer::idle_work` while it
    /// waits for the next record's send time, as the API asks of a paced
    /// writer.
    Auto,
    /// No thread: the writer calls `Writer::idle_work` while it waits for the
    /// next record's send time (the latency phase; the throughput phase
    /// never waits, so the writer prepares pieces when it catches up).
    Idle,
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
    /// How the writer pre-touches.
    pub pretouch: Pretouch,
    /// The pre-touch window, bytes.
    pub window: u64,
    /// Queue or floor.
    pub transport: Transport,
    /// The routine that copies payloads in (writer) and out (reader).
    pub copy: Routine,
}

/// What a child reports (one JSON line on stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChildResult {
    /// Writer: records appended.
    pub appended: u64,
    /// Writer: page faults in the append loop (`None`: not counted, see
    /// `append_faults_note`).
    pub append_faults: Option<u64>,
    /// Writer: why `append_faults` is missing, if it is.
    #[serde(default)]
    pub append_faults_note: Option<String>,
    /// Writer: `CLOCK_MONOTONIC` ns just before the first append.
    pub first_send_ns: u64,
    /// Writer: ns spent in the append loop.
    pub writer_ns: u64,
    /// Writer: pieces the writer prepared itself (caught up with the pre-toucher).
    pub pieces_inline: u64,
    /// Writer: what pre-touched at the end of the phase, and why
    /// (`WindowReport::mode_description`); None without a queue.
    #[serde(default)]
    pub pretouch: Option<String>,
    /// Writer: switches of the pre-toucher during the phase.
    #[serde(default)]
    pub pretouch_switches: u64,
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

/// The writer's end of a transport.
trait Sink {
    fn send(&mut self, payload: &[u8]) -> Result<(), String>;
    /// Pieces of the pre-touch window the writer prepared itself.
    fn pieces_inline(&self) -> u64 {
        0
    }
    /// What pre-touches now, and why (None: no queue).
    fn pretouch(&self) -> Option<String> {
        None
    }
    /// Switches of the pre-toucher so far.
    fn pretouch_switches(&self) -> u64 {
        0
    }
    /// Called while the writer waits for a record's send time.
    fn idle(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Whether `idle` does anything (then a waiting reader calls it).
    fn wants_idle(&self) -> bool {
        false
    }
}

/// The reader's end of a transport.
trait Source {
    /// The next record's payload, waiting (spinning) up to 30 s for it.
    fn receive(&mut self) -> Result<&[u8], String>;
}

/// A record's slot in the floor file: the commit word and the payload,
/// padded as a queue with default options pads a run of records of the same
/// payload from its first record (at a multiple of 64, as the floor's first
/// slot), so that the floor moves the same cache lines.
fn floor_slot(record_bytes: usize) -> usize {
    let first = pagewise::queue::layout::HEADER_LEN + pagewise::queue::layout::CHUNK_HEADER_LEN;
    pagewise::queue::layout::record_bytes(first, record_bytes as u64, 0, true) as usize
}

/// Bytes of the floor file for `records` records.
fn floor_len(spec: &ChildSpec) -> Result<usize, String> {
    usize::try_from(spec.records)
        .ok()
        .and_then(|n| n.checked_mul(floor_slot(spec.record_bytes)))
        .ok_or_else(|| "the floor file would be too large for this machine".to_owned())
}

fn open_floor(spec: &ChildSpec, write: bool) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(&spec.path)
        .map_err(|e| format!("open {}: {e}", spec.path.display()))
}

struct QueueSink {
    writer: Writer,
    idle_pretouch: bool,
}

impl Sink for QueueSink {
    #[inline]
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        self.writer
            .append(payload)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn pieces_inline(&self) -> u64 {
        self.writer.report().window.pieces_inline
    }

    fn pretouch(&self) -> Option<String> {
        Some(self.writer.report().window.mode_description())
    }

    fn pretouch_switches(&self) -> u64 {
        self.writer.report().window.switches
    }

    fn idle(&mut self) -> Result<(), String> {
        if self.idle_pretouch {
            self.writer.idle_work().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

struct FloorSink {
    map: WriteMap,
    slot: usize,
    next: usize,
    copy: fn(&mut [u8], &[u8]),
}

impl Sink for FloorSink {
    #[inline]
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        let off = self.next * self.slot;
        if !self.map.write_with(off + 8, payload, self.copy) {
            return Err("the floor file is full".into());
        }
        self.next += 1;
        self.map
            .store_u64(off, self.next as u64, std::sync::atomic::Ordering::Release);
        Ok(())
    }
}

struct QueueSource {
    reader: Reader,
}

impl Source for QueueSource {
    #[inline]
    fn receive(&mut self) -> Result<&[u8], String> {
        match self
            .reader
            .next_wait(Wait::Spin, Some(Duration::from_secs(30)))
        {
            Ok(Some(rec)) => Ok(rec.payload),
            Ok(None) => Err("no record for 30 s".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct FloorSource {
    map: ReadMap,
    slot: usize,
    next: usize,
    buf: Vec<u8>,
    copy: Routine,
}

impl Source for FloorSource {
    #[inline]
    fn receive(&mut self) -> Result<&[u8], String> {
        let off = self.next * self.slot;
        let want = self.next as u64 + 1;
        let mut spins = 0u32;
        let mut since: Option<std::time::Instant> = None;
        loop {
            match self.map.load_u64(off, std::sync::atomic::Ordering::Acquire) {
                Some(w) if w == want => break,
                Some(_) => {}
                None => return Err("read past the end of the floor file".into()),
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1 << 16) {
                let t = *since.get_or_insert_with(std::time::Instant::now);
                if t.elapsed() > Duration::from_secs(30) {
                    return Err("no record for 30 s".into());
                }
            }
        }
        self.copy.copy_out(&self.map, off + 8, &mut self.buf);
        self.next += 1;
        Ok(&self.buf)
    }
}

fn open_sink(spec: &ChildSpec) -> Result<Box<dyn Sink>, String> {
    match spec.transport {
        Transport::Queue => {
            let pretouch = spec.pretouch != Pretouch::Off;
            let options = Options {
                pretouch: pretouch.then(|| PreTouch {
                    window: spec.window,
                    mode: match spec.pretouch {
                        Pretouch::Background => PreTouchMode::Thread,
                        Pretouch::Auto => PreTouchMode::Auto,
                        Pretouch::Idle | Pretouch::Off => PreTouchMode::Idle,
                    },
                    ..PreTouch::default()
                }),
                copy: spec.copy,
                ..Options::default()
            };
            let mut writer = Writer::open(&spec.path, options).map_err(|e| e.to_string())?;
            if pretouch {
                writer
                    .wait_pretouched(spec.window)
                    .map_err(|e| e.to_string())?;
            }
            Ok(Box::new(QueueSink {
                writer,
                idle_pretouch: matches!(spec.pretouch, Pretouch::Idle | Pretouch::Auto),
            }))
        }
        Transport::Floor => {
            let file = open_floor(spec, true)?;
            let map = WriteMap::map(&file, 0, floor_len(spec)?, true)
                .map_err(|e| format!("map the floor file: {e}"))?;
            Ok(Box::new(FloorSink {
                map,
                slot: floor_slot(spec.record_bytes),
                next: 0,
                copy: spec.copy.function(),
            }))
        }
    }
}

fn open_source(spec: &ChildSpec) -> Result<Box<dyn Source>, String> {
    match spec.transport {
        Transport::Queue => {
            let reader = Reader::open_with(
                &spec.path,
                ReaderOptions {
                    start: Start::Beginning,
                    // The row compares copy routines on both sides: the reader
                    // copies with the chosen routine, not the fault-guarded one.
                    guard_copies: false,
                    copy: spec.copy,
                    ..ReaderOptions::default()
                },
            )
            .map_err(|e| e.to_string())?;
            Ok(Box::new(QueueSource { reader }))
        }
        Transport::Floor => {
            let file = open_floor(spec, false)?;
            let len = floor_len(spec)?;
            let map =
                ReadMap::map(&file, 0, len).map_err(|e| format!("map the floor file: {e}"))?;
            map.advise(0, len, FileAdvice::PopulateRead)
                .map_err(|e| format!("fault in the floor file: {e}"))?;
            Ok(Box::new(FloorSource {
                map,
                slot: floor_slot(spec.record_bytes),
                next: 0,
                buf: vec![0; spec.record_bytes],
                copy: spec.copy,
            }))
        }
    }
}

/// Runs the copy routine once (its first call detects the CPU and reads
/// sysfs), grows the stack, and maps in this program's code, so that none
/// of it happens in the measured loop: a path first taken there (a chunk
/// switch, a catch-up) would otherwise fetch its code with a page fault
/// that the fault counts would charge to the transport. Best effort:
/// without `MADV_POPULATE_READ` the counts show what is left.
fn warm_up(copy: Routine, payload: &[u8]) {
    let mut scratch = vec![0u8; payload.len()];
    copy.function()(&mut scratch, payload);
    std::hint::black_box(&scratch);
    crate::grow_stack();
    let _ = pagewise::host::proc_maps::populate_own_text();
}

fn run_writer(spec: &ChildSpec, out: &mut dyn Write) -> Result<ChildResult, String> {
    let mut sink = open_sink(spec)?;
    let counter = crate::FaultCounter::new(crate::open_thread_fault_counter());
    let mut payload = vec![0x5Au8; spec.record_bytes];
    warm_up(spec.copy, &payload);
    ready(out)?;
    // The first clock read maps the vDSO data page: keep that fault out of the loop.
    monotonic_ns();
    let before = counter.reading();
    let first_send_ns = monotonic_ns();
    match spec.phase {
        Phase::Throughput => {
            for i in 0..spec.records {
                payload[..8].copy_from_slice(&i.to_le_bytes());
                sink.send(&payload)?;
            }
        }
        Phase::Latency => {
            let interval = 1e9 / spec.rate_per_s;
            // A millisecond's head start so the first records are not already late.
            let t0 = first_send_ns + 1_000_000;
            for i in 0..spec.records {
                let scheduled = t0 + (i as f64 * interval) as u64;
                while monotonic_ns() < scheduled {
                    sink.idle()?;
                    std::hint::spin_loop();
                }
                payload[..8].copy_from_slice(&i.to_le_bytes());
                payload[8..16].copy_from_slice(&scheduled.to_le_bytes());
                sink.send(&payload)?;
            }
        }
    }
    let writer_ns = monotonic_ns().saturating_sub(first_send_ns);
    let append_faults = counter.since(before);
    Ok(ChildResult {
        appended: spec.records,
        append_faults,
        append_faults_note: counter.missing(),
        first_send_ns,
        writer_ns,
        pieces_inline: sink.pieces_inline(),
        pretouch: sink.pretouch(),
        pretouch_switches: sink.pretouch_switches(),
        ..ChildResult::default()
    })
}

/// An HDR histogram with its counts written once: they are allocated
/// zeroed but not faulted in, and the first value in an untouched page of
/// buckets (a rare slow record) would take a page fault inside the
/// measured loop.
pub(crate) fn histogram() -> Result<Histogram<u64>, String> {
    let mut h =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    h.clear();
    Ok(h)
}

fn run_reader(spec: &ChildSpec, out: &mut dyn Write) -> Result<ChildResult, String> {
    let mut source = open_source(spec)?;
    let mut hist = histogram()?;
    let mut over_1ms = 0;
    warm_up(spec.copy, &vec![0; spec.record_bytes]);
    ready(out)?;
    let latency = spec.phase == Phase::Latency;
    for i in 0..spec.records {
        let payload = source
            .receive()
            .map_err(|e| format!("record {i} of {}: {e}", spec.records))?;
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&payload[at..at + 8]);
            u64::from_le_bytes(w)
        };
        if word(0) != i {
            return Err(format!("record {i} carries sequence {}", word(0)));
        }
        if latency {
            let scheduled = word(8);
            let ns = monotonic_ns().checked_sub(scheduled).ok_or_else(|| {
                format!("record {i} was read before its scheduled send time {scheduled} ns")
            })?;
            if ns > 1_000_000 {
                over_1ms += 1;
            }
            hist.saturating_record(ns);
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
    /// How the writer pre-touches.
    pub pretouch: Pretouch,
    /// Queue or the shared-memory floor.
    pub transport: Transport,
    /// The routine that copies payloads in and out.
    pub copy: Routine,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Payload bytes per record (default 128).
    pub record_bytes: usize,
    /// Records in the throughput phase (default 2,000,000).
    pub records: u64,
    /// Records in the latency phase (default 1,000,000; 0 skips the phase).
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
    /// The default rows: the shared-memory floor on tmpfs, then the queue on
    /// tmpfs (default options, the pre-touch thread asked for, idle-time
    /// pre-touch asked for, none) and on a disk directory (thread, none);
    /// all copy with `copy`.
    pub fn default_rows(tmpfs: &Path, disk: &Path, copy: Routine) -> Vec<RowSpec> {
        let row = |name: &str, dir: &Path, pretouch, transport| RowSpec {
            name: name.to_owned(),
            dir: dir.to_owned(),
            pretouch,
            transport,
            copy,
        };
        use Pretouch::{Auto, Background, Idle, Off};
        vec![
            row("floor", tmpfs, Off, Transport::Floor),
            row("tmpfs+pretouch", tmpfs, Auto, Transport::Queue),
            row("tmpfs+thread-pretouch", tmpfs, Background, Transport::Queue),
            row("tmpfs+idle-pretouch", tmpfs, Idle, Transport::Queue),
            row("tmpfs", tmpfs, Off, Transport::Queue),
            row("disk+pretouch", disk, Background, Transport::Queue),
            row("disk", disk, Off, Transport::Queue),
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
            rows: Config::default_rows(
                Path::new("/dev/shm"),
                Path::new("/var/tmp"),
                Routine::default(),
            ),
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
    /// How: `off`, `background` (thread), `idle` (in the writer's waits)
    /// or `auto` (default options).
    pub pretouch_mode: Pretouch,
    /// What pre-touched at the end of the last trial's throughput phase,
    /// and why (`WindowReport::mode_description`); None without a queue.
    pub pretouch_throughput: Option<String>,
    /// The same for the latency phase; None without a queue or the phase.
    pub pretouch_latency: Option<String>,
    /// The most switches of the pre-toucher in one trial's throughput phase.
    pub pretouch_switches_throughput: u64,
    /// The most in one trial's latency phase (a writer that falls behind its
    /// schedule sends in a burst, and may switch).
    pub pretouch_switches_latency: u64,
    /// Queue or the shared-memory floor.
    pub transport: Transport,
    /// The routine that copied payloads in and out.
    pub copy: Routine,
    /// One-way throughput, records per second (first append to last read).
    pub records_per_s: f64,
    /// Min and max over the trials.
    pub records_per_s_range: [f64; 2],
    /// The writer's own append rate in the throughput phase, records per
    /// second; null when a trial's append loop took no measurable time.
    pub writer_records_per_s: Option<f64>,
    /// Median latency at the offered rate, ns (`None`: no latency phase).
    pub p50_ns: Option<u64>,
    /// 90th percentile, ns.
    pub p90_ns: Option<u64>,
    /// 99th percentile, ns.
    pub p99_ns: Option<u64>,
    /// 99.9th percentile, ns.
    pub p999_ns: Option<u64>,
    /// 99.99th percentile, ns.
    pub p9999_ns: Option<u64>,
    /// Largest latency, ns.
    pub max_ns: Option<u64>,
    /// Records over 1 ms, per thousand.
    pub over_1ms_per_mille: Option<f64>,
    /// Page faults in the writer's append loops (throughput + latency
    /// phase); null when a trial's were not counted (`faults_note` says why).
    pub append_faults: Option<u64>,
    /// Of which in the throughput phase.
    pub append_faults_throughput: Option<u64>,
    /// Pieces the writer prepared itself in the throughput phase (it caught
    /// up with the pre-toucher; a system call, not a fault).
    pub writer_pieces_inline: u64,
    /// Trials run.
    pub trials: usize,
    /// Why the row's remaining trials were not run, when one failed after
    /// others had succeeded (the figures are then over fewer trials).
    pub failed: Option<String>,
    /// Why `append_faults` is missing, if it is.
    pub faults_note: Option<String>,
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
    /// The round-trip experiment (`bench queue --rtt`), which runs instead
    /// of the one-way rows: then `rows` and `not_run` are empty and the
    /// one-way settings above only echo the configuration. Null otherwise.
    pub rtt: Option<rtt::RttReport>,
}

struct Trial {
    records_per_s: f64,
    writer_records_per_s: Option<f64>,
    latency: Option<[u64; 6]>,
    over_1ms_per_mille: Option<f64>,
    faults: Option<u64>,
    faults_throughput: Option<u64>,
    faults_note: Option<String>,
    pieces_inline: u64,
    pretouch_throughput: Option<String>,
    pretouch_latency: Option<String>,
    switches_throughput: u64,
    switches_latency: u64,
}

/// Starts a child process for a spec, with its stdout piped.
pub type Spawn<'a> = &'a dyn Fn(&ChildSpec) -> std::io::Result<Child>;

struct Running {
    child: Child,
    lines: BufReader<std::process::ChildStdout>,
}

impl Running {
    /// Starts a child with `spawn` and waits for its `ready` line; `role`
    /// names it in errors.
    fn start(
        spawn: impl FnOnce() -> std::io::Result<Child>,
        role: &str,
    ) -> Result<Running, String> {
        let mut child = spawn().map_err(|e| format!("could not start the {role} process: {e}"))?;
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
            return Err(format!("the {role} process said {line:?} instead of ready"));
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

    fn finish<T: serde::de::DeserializeOwned>(mut self) -> Result<T, String> {
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
        let _ = std::fs::remove_file(pagewise::queue::wait_path(path));
        let _ = std::fs::remove_file(pagewise::queue::lock_path(path));
    };
    remove();
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
        transport: row.transport,
        copy: row.copy,
    };
    match row.transport {
        Transport::Queue => drop(
            Writer::create(
                path,
                Options {
                    pretouch: None,
                    ..Options::default()
                },
            )
            .map_err(|e| e.to_string())?,
        ),
        Transport::Floor => {
            let spec = spec(Role::Writer);
            let len = floor_len(&spec)? as u64;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| format!("create {}: {e}", path.display()))?;
            if let Err(e) = file::allocate(&f, 0, len) {
                drop(f);
                remove();
                return Err(format!("allocate the floor file ({len} bytes): {e}"));
            }
        }
    }
    let result = (|| {
        let reader = Running::start(|| spawn(&spec(Role::Reader)), "reader")?;
        let writer = Running::start(|| spawn(&spec(Role::Writer)), "writer")?;
        let w: ChildResult = writer.finish()?;
        let r: ChildResult = reader.finish()?;
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
    let latency_phase = if config.latency_records > 0 {
        let (lw, lr) = phase(config, row, Phase::Latency, &path, spawn)?;
        let latency = lr.latency_ns.ok_or("the reader sent no latencies")?;
        Some((lw, lr, latency))
    } else {
        None
    };
    // Both ends read CLOCK_MONOTONIC, one clock for the whole machine: a
    // last read that is not after the first append is a broken measurement.
    let span = tr
        .last_recv_ns
        .checked_sub(tw.first_send_ns)
        .filter(|&ns| ns > 0)
        .ok_or_else(|| {
            format!(
                "the reader's last record ({} ns) is not after the writer's first append ({} ns)",
                tr.last_recv_ns, tw.first_send_ns
            )
        })?;
    let per_s = |records: u64, ns: u64| (ns > 0).then(|| records as f64 * 1e9 / ns as f64);
    let faults_note = tw.append_faults_note.clone().or_else(|| {
        latency_phase
            .as_ref()
            .and_then(|(lw, _, _)| lw.append_faults_note.clone())
    });
    Ok(Trial {
        records_per_s: config.records as f64 * 1e9 / span as f64,
        writer_records_per_s: per_s(config.records, tw.writer_ns),
        latency: latency_phase.as_ref().map(|(_, _, l)| *l),
        // The phase runs only with latency records, so the division is by at least 1.
        over_1ms_per_mille: latency_phase
            .as_ref()
            .map(|(_, lr, _)| lr.over_1ms as f64 * 1000.0 / config.latency_records as f64),
        faults: match &latency_phase {
            Some((lw, _, _)) => tw
                .append_faults
                .zip(lw.append_faults)
                .and_then(|(a, b)| a.checked_add(b)),
            None => tw.append_faults,
        },
        faults_throughput: tw.append_faults,
        faults_note,
        pieces_inline: tw.pieces_inline,
        pretouch_throughput: tw.pretouch.clone(),
        pretouch_latency: latency_phase
            .as_ref()
            .and_then(|(lw, _, _)| lw.pretouch.clone()),
        switches_throughput: tw.pretouch_switches,
        switches_latency: latency_phase
            .as_ref()
            .map_or(0, |(lw, _, _)| lw.pretouch_switches),
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

/// Bytes of the largest file a one-way trial writes: one file per phase
/// (removed before the next), of `max(records, latency_records)` records.
pub fn largest_file_bytes(config: &Config) -> u64 {
    config
        .records
        .max(config.latency_records)
        .saturating_mul(floor_slot(config.record_bytes) as u64)
}

/// Checks, before any row runs, every folder the rows write in (see
/// [`check_folder`]) for the largest file a trial writes. `Err` is one line.
/// One `statvfs` and a probe file per folder.
pub fn check_folders(config: &Config) -> Result<(), String> {
    let need = largest_file_bytes(config);
    let mut seen: Vec<&Path> = Vec::new();
    for row in &config.rows {
        if !seen.contains(&row.dir.as_path()) {
            seen.push(&row.dir);
            check_folder(&row.dir, need)?;
        }
    }
    Ok(())
}

/// Checks that `dir` is a folder this user can create files in with `need`
/// bytes free, so that a run fails in one line before it starts rather than
/// row by row, or by filling a tmpfs (which is memory) until the kernel
/// kills a process. One `statvfs` and a probe file created and removed.
pub fn check_folder(dir: &Path, need: u64) -> Result<(), String> {
    let shown = dir.display();
    let meta = std::fs::metadata(dir).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_dir() {
        return Err(format!("{shown} is not a folder"));
    }
    let probe = dir.join(format!(".pagewise-bench-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| format!("cannot create files in {shown}: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    let free = file::free_bytes(dir).map_err(|e| format!("{shown}: {e}"))?;
    if need > free {
        return Err(format!(
            "a trial writes a file of {} in {shown}, which has {} free: ask for fewer records or smaller ones",
            pagewise::units::format_bytes(need),
            pagewise::units::format_bytes(free)
        ));
    }
    Ok(())
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
        // The median of a figure that every trial has (`None` otherwise).
        let every = |f: &dyn Fn(&Trial) -> Option<f64>| {
            let v: Option<Vec<f64>> = t.iter().map(f).collect();
            v.and_then(|v| Summary::of(&v)).map(|s| s.median)
        };
        let opt = |f: &dyn Fn(&Trial) -> Option<u64>| {
            every(&|x| f(x).map(|n| n as f64)).map(|m| m.round() as u64)
        };
        let q = |k: usize| opt(&|x| x.latency.map(|l| l[k]));
        let (Some(rate), Some(pieces_inline)) = (
            median(t.iter().map(|x| x.records_per_s)),
            crate::median_count(t.iter().map(|x| Some(x.pieces_inline))),
        ) else {
            not_run.push(NotRun {
                name: spec.name.clone(),
                reason: "a trial's throughput is not a number".into(),
            });
            continue;
        };
        rows.push(Row {
            name: spec.name.clone(),
            fs: fs_of(&spec.dir),
            pretouch: spec.pretouch != Pretouch::Off,
            pretouch_mode: spec.pretouch,
            pretouch_throughput: t.last().and_then(|x| x.pretouch_throughput.clone()),
            pretouch_latency: t.last().and_then(|x| x.pretouch_latency.clone()),
            pretouch_switches_throughput: t
                .iter()
                .map(|x| x.switches_throughput)
                .max()
                .unwrap_or(0),
            pretouch_switches_latency: t.iter().map(|x| x.switches_latency).max().unwrap_or(0),
            transport: spec.transport,
            copy: spec.copy,
            records_per_s: rate.median,
            records_per_s_range: [rate.min, rate.max],
            writer_records_per_s: every(&|x| x.writer_records_per_s),
            p50_ns: q(0),
            p90_ns: q(1),
            p99_ns: q(2),
            p999_ns: q(3),
            p9999_ns: q(4),
            max_ns: q(5),
            over_1ms_per_mille: every(&|x| x.over_1ms_per_mille),
            append_faults: opt(&|x| x.faults),
            append_faults_throughput: opt(&|x| x.faults_throughput),
            writer_pieces_inline: pieces_inline,
            trials: t.len(),
            failed: failures[i].take(),
            faults_note: t.iter().find_map(|x| x.faults_note.clone()),
        });
    }
    report(config, machine, rows, not_run, None)
}

/// A report of `config`'s settings with these results.
fn report(
    config: &Config,
    machine: Machine,
    rows: Vec<Row>,
    not_run: Vec<NotRun>,
    rtt: Option<rtt::RttReport>,
) -> Report {
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
        rtt,
    }
}

/// Runs the round-trip experiment ([`rtt::run`]) instead of the one-way
/// rows, and reports it in the same schema (`rtt`); `config` only supplies
/// the one-way settings the report echoes.
pub fn run_rtt(
    config: &Config,
    rtt_config: &rtt::RttConfig,
    progress: &dyn Progress,
    spawn: rtt::RttSpawn<'_>,
) -> Report {
    let machine = Machine::describe();
    let rtt = rtt::run(rtt_config, progress, spawn);
    report(config, machine, Vec::new(), Vec::new(), Some(rtt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A stand-in child: says `ready`, then prints `result` as its one line.
    fn canned(result: &ChildResult) -> std::io::Result<Child> {
        Command::new("printf")
            .args(["ready\\n%s\\n", &serde_json::to_string(result).unwrap()])
            .stdout(Stdio::piped())
            .spawn()
    }

    fn config(dir: &Path) -> Config {
        Config {
            records: 1000,
            latency_records: 0,
            trials: 1,
            rows: vec![RowSpec {
                name: "tmpfs".into(),
                dir: dir.to_owned(),
                pretouch: Pretouch::Off,
                transport: Transport::Queue,
                copy: Routine::default(),
            }],
            ..Config::default()
        }
    }

    #[test]
    fn an_uncounted_writer_gives_null_faults_and_a_broken_clock_no_rate() {
        let dir = tempfile::tempdir().unwrap();
        let writer = ChildResult {
            appended: 1000,
            append_faults: None,
            append_faults_note: Some("a page-fault counter read failed: EIO".into()),
            first_send_ns: 1_000_000,
            writer_ns: 0,
            ..ChildResult::default()
        };
        let reader = |last_recv_ns| ChildResult {
            received: 1000,
            last_recv_ns,
            ..ChildResult::default()
        };
        let spawn = |spec: &ChildSpec| match spec.role {
            Role::Writer => canned(&writer),
            Role::Reader => canned(&reader(1_500_000)),
        };
        let report = run(&config(dir.path()), &crate::NoProgress, &spawn);
        let row = &report.rows[0];
        assert_eq!(row.records_per_s, 2e6);
        assert_eq!(row.append_faults, None);
        assert_eq!(row.append_faults_throughput, None);
        // A writer loop of 0 ns has no rate: null, not records / 1 ns.
        assert_eq!(row.writer_records_per_s, None);
        assert!(row.faults_note.as_deref().unwrap().contains("EIO"));
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["rows"][0]["append_faults"].is_null(), "{json:#}");
        assert!(
            json["rows"][0]["writer_records_per_s"].is_null(),
            "{json:#}"
        );

        // The reader's last record before the writer's first append: no rate at all.
        let spawn = |spec: &ChildSpec| match spec.role {
            Role::Writer => canned(&writer),
            Role::Reader => canned(&reader(999_999)),
        };
        let report = run(&config(dir.path()), &crate::NoProgress, &spawn);
        assert!(report.rows.is_empty());
        assert!(
            report.not_run[0]
                .reason
                .contains("is not after the writer's first append"),
            "{:?}",
            report.not_run
        );
    }
}
