//! Round-trip latency: the ping-pong of Aeron's `Ping`/`Pong` and Chronicle
//! Queue's own latency tests, over two queues between two processes.
//!
//! The *ping* process appends a record carrying its sequence number and the
//! time it was sent to queue A and waits (spinning) for the echo on queue B;
//! the *pong* process reads each record from A and appends the same bytes to
//! B. The ping process times every round trip on its own `CLOCK_MONOTONIC`
//! (one clock for both timestamps) and puts it in an HDR histogram; the
//! first `warmup` round trips are not recorded. One record is in flight at a
//! time, as in Aeron's `Ping`. The pong process also times the ping leg
//! (its receive time − the send time in the record; both processes read the
//! same `CLOCK_MONOTONIC`).
//!
//! Rows: `floor` runs the same ping-pong over two files allocated and faulted
//! in before the clock starts, a ring of slots (a commit word, then the
//! payload) in each, with no queue logic at all: what this machine allows any
//! shared-memory transport. `queue` uses `pagewise::queue` with default
//! options on both sides; the other rows change one thing each (the rows'
//! docs say what), to find what costs latency.

use super::{floor_slot, histogram, ready, Running, Sink, Source};
use crate::{Progress, Summary};
use hdrhistogram::Histogram;
use pagewise::copy::Routine;
use pagewise::os::clock::monotonic_ns;
use pagewise::os::file::{self};
use pagewise::os::file_map::{FileAdvice, ReadMap, WriteMap};
use pagewise::queue::{
    Options, PreTouch, PreTouchMode, Reader, ReaderOptions, Start, Wait, Writer,
};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The floor's ring: at most this many bytes per direction (Aeron's default
/// IPC term is 64 MiB too), so it streams through as much memory as a queue
/// does between chunk switches.
const FLOOR_RING: usize = 64 << 20;

/// A round trip slower than this counts as slow: about the least a
/// preemption or a page fault on the path costs on a VM, well above a
/// round trip that ran undisturbed.
pub const SLOW_NS: u64 = 20_000;

/// A queue file holds at most this much per run: larger records get fewer
/// round trips (the row says how many).
const MAX_QUEUE_BYTES: u64 = 1 << 30;

/// Which side of the ping-pong a child process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RttRole {
    /// Sends, waits for the echo, times the round trip.
    Ping,
    /// Echoes every record.
    Pong,
}

/// One row's way of moving records, and what it changes from the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RttKind {
    /// Two pre-faulted mapped files, a ring of slots each, no queue logic.
    Floor,
    /// `pagewise::queue`, default options on both sides; readers spin with
    /// `next_wait(Wait::Spin, None)`.
    Queue,
    /// As `Queue`, and each side calls `Writer::idle_work` while it waits
    /// for the other's record (idle-time pre-touch driven by the caller).
    QueueIdleWork,
    /// As `Queue`, with the pre-touch thread forced on.
    QueueThread,
    /// As `Queue`, with no pre-touch: the writers fault on every new page.
    QueueNoPretouch,
    /// As `Queue`, with readers copying payloads with the unguarded
    /// `copy::Routine` instead of the SIGBUS-guarded copy.
    QueueUnguarded,
    /// As `Queue`, with every byte of the run prepared before the clock
    /// starts, as Aeron allocates and touches its term buffers: each writer
    /// allocates and maps in its file (`Writer::wait_pretouched`) before its
    /// first record, and each reader maps in the other's (`Reader::prepare`)
    /// once a record from it has arrived, in the warm-up (which must be at
    /// least 2 round trips).
    QueuePrepared,
    /// As `QueuePrepared`, with `Options::hand_off` on both writers: each
    /// commit pushes the record's cache lines to the shared cache
    /// (`cldemote`; a no-op on CPUs without it).
    QueueHandOff,
}

impl RttKind {
    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            RttKind::Floor => "floor",
            RttKind::Queue => "queue",
            RttKind::QueueIdleWork => "queue+idle-work",
            RttKind::QueueThread => "queue+thread",
            RttKind::QueueNoPretouch => "queue+no-pretouch",
            RttKind::QueueUnguarded => "queue+unguarded",
            RttKind::QueuePrepared => "queue+prepared",
            RttKind::QueueHandOff => "queue+hand-off",
        }
    }

    /// Every row, in the order they run.
    pub const ALL: [RttKind; 8] = [
        RttKind::Floor,
        RttKind::Queue,
        RttKind::QueueIdleWork,
        RttKind::QueueThread,
        RttKind::QueueNoPretouch,
        RttKind::QueueUnguarded,
        RttKind::QueuePrepared,
        RttKind::QueueHandOff,
    ];

    /// The rows run when none are named: the floor, the queue with default
    /// options, the queue with the run's bytes prepared up front, and that
    /// with the writers handing records off.
    pub const DEFAULT: [RttKind; 4] = [
        RttKind::Floor,
        RttKind::Queue,
        RttKind::QueuePrepared,
        RttKind::QueueHandOff,
    ];

    /// The row called `name`.
    pub fn by_name(name: &str) -> Option<RttKind> {
        RttKind::ALL.into_iter().find(|k| k.name() == name)
    }

    fn is_floor(self) -> bool {
        self == RttKind::Floor
    }

    /// Whether the run's bytes are prepared before the clock starts.
    fn is_prepared(self) -> bool {
        matches!(self, RttKind::QueuePrepared | RttKind::QueueHandOff)
    }
}

/// What a ping-pong child process does (passed to it as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RttChildSpec {
    /// Ping or pong.
    pub role: RttRole,
    /// The row.
    pub kind: RttKind,
    /// The file ping writes and pong reads.
    pub ping_path: PathBuf,
    /// The file pong writes and ping reads.
    pub pong_path: PathBuf,
    /// Payload bytes per record (at least 16).
    pub record_bytes: usize,
    /// Round trips before the measured ones.
    pub warmup: u64,
    /// Measured round trips.
    pub round_trips: u64,
    /// The CPU this process pins itself to before opening anything.
    pub cpu: Option<usize>,
    /// The routine that copies payloads in (and out, where not guarded).
    pub copy: Routine,
    /// Seconds after which the child process exits (a peer that died); 0:
    /// never (for running both sides as threads of one process).
    pub timeout_s: u64,
}

/// What a ping-pong child reports (one JSON line on stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RttChildResult {
    /// Ping: round-trip percentiles in ns: p50, p90, p99, p99.9, p99.99, max.
    pub rtt_ns: Option<[u64; 6]>,
    /// Pong: ping-leg percentiles in ns (same order), receive time − send time.
    pub one_way_ns: Option<[u64; 6]>,
    /// Page faults of this process's thread in the measured round trips.
    pub faults: Option<u64>,
    /// Why `faults` is missing.
    pub faults_note: Option<String>,
    /// Context switches of the measuring thread in the measured round
    /// trips (`getrusage(RUSAGE_THREAD)`): voluntary (it slept) and
    /// involuntary (it was preempted); `None` if getrusage failed.
    pub switches: Option<[u64; 2]>,
    /// Ping: measured round trips slower than [`SLOW_NS`].
    pub slow_round_trips: u64,
    /// The writer's pre-touch mode as it reported it (`thread`, `idle`,
    /// `off`), and why (queue rows).
    pub pretouch: Option<String>,
    /// Pieces the writer prepared itself when it caught up (queue rows).
    pub pieces_inline: u64,
    /// Pieces prepared in `idle_work` (queue rows).
    pub pieces_idle: u64,
    /// Pieces the pre-touch thread prepared (queue rows).
    pub pieces_background: u64,
}

fn percentiles(h: &Histogram<u64>) -> [u64; 6] {
    [
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.value_at_quantile(0.9999),
        h.max(),
    ]
}

/// The writer's end of the ping-pong: a queue (with its report) or the floor.
struct RttQueueSink {
    writer: Writer,
    idle_work: bool,
}

impl Sink for RttQueueSink {
    #[inline]
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        self.writer
            .append(payload)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn idle(&mut self) -> Result<(), String> {
        if self.idle_work {
            self.writer.idle_work().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn wants_idle(&self) -> bool {
        self.idle_work
    }
}

struct RttQueueSource {
    reader: Reader,
    /// Bytes to map in ahead (`Reader::prepare`) once the other side's
    /// writer has prepared them: at the second wait, after a record from
    /// it arrived (it prepares before it sends). 0: nothing (left) to do.
    prepare: u64,
    /// Records received so far, up to 2.
    received: u8,
}

impl RttQueueSource {
    /// The next record if there is one now (never waits).
    #[inline]
    fn poll(&mut self) -> Result<Option<&[u8]>, String> {
        match self.reader.next() {
            Ok(r) => Ok(r.map(|r| r.payload)),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Source for RttQueueSource {
    #[inline]
    fn receive(&mut self) -> Result<&[u8], String> {
        match self.reader.next_wait(Wait::Spin, None) {
            Ok(Some(rec)) => Ok(rec.payload),
            Ok(None) => Err("next_wait without a deadline returned nothing".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The floor's sending side: a ring of slots in a pre-faulted mapping.
struct RingSink {
    map: WriteMap,
    slot: usize,
    slots: usize,
    next: u64,
    copy: fn(&mut [u8], &[u8]),
}

impl Sink for RingSink {
    #[inline]
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        let off = (self.next % self.slots as u64) as usize * self.slot;
        if !self.map.write_with(off + 8, payload, self.copy) {
            return Err("a floor slot lies outside the ring".into());
        }
        self.next += 1;
        self.map.store_u64(off, self.next, Ordering::Release);
        Ok(())
    }
}

/// The floor's receiving side.
struct RingSource {
    map: ReadMap,
    slot: usize,
    slots: usize,
    next: u64,
    buf: Vec<u8>,
    copy: Routine,
}

impl Source for RingSource {
    #[inline]
    fn receive(&mut self) -> Result<&[u8], String> {
        let off = (self.next % self.slots as u64) as usize * self.slot;
        let want = self.next + 1;
        loop {
            match self.map.load_u64(off, Ordering::Acquire) {
                Some(w) if w == want => break,
                Some(_) => std::hint::spin_loop(),
                None => return Err("a floor slot lies outside the ring".into()),
            }
        }
        if !self.copy.copy_out(&self.map, off + 8, &mut self.buf) {
            return Err("a floor slot lies outside the ring".into());
        }
        self.next += 1;
        Ok(&self.buf)
    }
}

/// Bytes of one direction's floor ring for `record_bytes` (whole slots).
fn ring_len(record_bytes: usize, records: u64) -> usize {
    let slot = floor_slot(record_bytes);
    let want = usize::try_from(records)
        .unwrap_or(usize::MAX)
        .saturating_mul(slot);
    want.min(FLOOR_RING / slot * slot).max(slot)
}

enum End {
    Queue(Box<RttQueueSink>, Box<RttQueueSource>),
    Floor(RingSink, RingSource),
}

fn queue_options(spec: &RttChildSpec) -> (Options, ReaderOptions) {
    let mut options = Options {
        copy: spec.copy,
        ..Options::default()
    };
    let mut reader = ReaderOptions {
        start: Start::Beginning,
        ..ReaderOptions::default()
    };
    match spec.kind {
        RttKind::QueueThread => {
            options.pretouch = Some(PreTouch {
                mode: PreTouchMode::Thread,
                ..PreTouch::default()
            });
        }
        RttKind::QueueNoPretouch => options.pretouch = None,
        RttKind::QueueUnguarded => {
            reader.guard_copies = false;
            reader.copy = spec.copy;
        }
        RttKind::QueueHandOff => options.hand_off = true,
        RttKind::Queue | RttKind::QueueIdleWork | RttKind::QueuePrepared | RttKind::Floor => {}
    }
    (options, reader)
}

fn open_end(spec: &RttChildSpec) -> Result<End, String> {
    let (out_path, in_path) = match spec.role {
        RttRole::Ping => (&spec.ping_path, &spec.pong_path),
        RttRole::Pong => (&spec.pong_path, &spec.ping_path),
    };
    if spec.kind.is_floor() {
        let len = ring_len(spec.record_bytes, spec.warmup + spec.round_trips);
        let slot = floor_slot(spec.record_bytes);
        let open = |path: &Path, write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .open(path)
                .map_err(|e| format!("open {}: {e}", path.display()))
        };
        let map = WriteMap::map(&open(out_path, true)?, 0, len, true)
            .map_err(|e| format!("map the floor file: {e}"))?;
        let in_map = ReadMap::map(&open(in_path, false)?, 0, len)
            .map_err(|e| format!("map the floor file: {e}"))?;
        in_map
            .advise(0, len, FileAdvice::PopulateRead)
            .map_err(|e| format!("fault in the floor file: {e}"))?;
        return Ok(End::Floor(
            RingSink {
                map,
                slot,
                slots: len / slot,
                next: 0,
                copy: spec.copy.prepare(),
            },
            RingSource {
                map: in_map,
                slot,
                slots: len / slot,
                next: 0,
                buf: vec![0; spec.record_bytes],
                copy: spec.copy,
            },
        ));
    }
    let (options, reader_options) = queue_options(spec);
    let mut writer = Writer::open(out_path, options).map_err(|e| e.to_string())?;
    // The reader may open before the other side's writer ever ran: the
    // parent created both queues.
    let reader = Reader::open_with(in_path, reader_options).map_err(|e| e.to_string())?;
    let mut prepare = 0;
    if spec.kind.is_prepared() {
        if spec.warmup < 2 {
            return Err(format!(
                "{} needs --warmup of at least 2: its readers prepare in the warm-up",
                spec.kind.name()
            ));
        }
        prepare = run_bytes(spec.record_bytes, spec.warmup + spec.round_trips);
        writer.wait_pretouched(prepare).map_err(|e| e.to_string())?;
    }
    Ok(End::Queue(
        Box::new(RttQueueSink {
            writer,
            idle_work: spec.kind == RttKind::QueueIdleWork,
        }),
        Box::new(RttQueueSource {
            reader,
            prepare,
            received: 0,
        }),
    ))
}

/// Leaves the process after `timeout_s` if it is still running (the other
/// side died, say): a sleeping thread, no cost to the measured loop.
fn watchdog(timeout_s: u64, role: RttRole) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(timeout_s));
        eprintln!("pagewise bench queue --rtt: the {role:?} process gave up after {timeout_s} s");
        std::process::exit(3);
    });
}

/// Runs one side of the ping-pong in this process: prints `ready` when set
/// up, then the result as one line of JSON.
pub fn run_child(spec: &RttChildSpec, out: &mut dyn Write) -> Result<(), String> {
    if spec.record_bytes < 16 {
        return Err("records must be at least 16 bytes (sequence number and timestamp)".into());
    }
    if let Some(cpu) = spec.cpu {
        pagewise::os::process::pin_this_thread(cpu)
            .map_err(|e| format!("pin the {:?} process to CPU {cpu}: {e}", spec.role))?;
    }
    if spec.timeout_s > 0 {
        watchdog(spec.timeout_s, spec.role);
    }
    let mut end = open_end(spec)?;
    let counter = crate::FaultCounter::new(crate::open_thread_fault_counter());
    super::warm_up(spec.copy, &vec![0; spec.record_bytes]);
    ready(out)?;
    monotonic_ns();
    let mut result = match &mut end {
        End::Queue(sink, source) => match spec.role {
            RttRole::Ping => ping(spec, &mut **sink, &mut **source, &counter)?,
            RttRole::Pong => pong(spec, &mut **sink, &mut **source, &counter)?,
        },
        End::Floor(sink, source) => match spec.role {
            RttRole::Ping => ping(spec, sink, source, &counter)?,
            RttRole::Pong => pong(spec, sink, source, &counter)?,
        },
    };
    result.faults_note = counter.missing();
    if let End::Queue(sink, _) = &end {
        let report = sink.writer.report();
        result.pretouch = Some(report.window.mode_description());
        result.pieces_inline = report.window.pieces_inline;
        result.pieces_idle = report.window.pieces_idle;
        result.pieces_background = report.window.pieces_background;
    }
    let line = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    writeln!(out, "{line}").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

/// A source that waits for the next record, doing the sink's idle work
/// between polls when the row asks for it.
trait AnySource {
    fn wait(&mut self, sink: &mut dyn Sink) -> Result<&[u8], String>;
}

impl AnySource for RttQueueSource {
    #[inline]
    fn wait(&mut self, sink: &mut dyn Sink) -> Result<&[u8], String> {
        if self.prepare > 0 {
            if self.received == 1 {
                self.reader
                    .prepare(std::mem::take(&mut self.prepare))
                    .map_err(|e| e.to_string())?;
            }
            self.received += 1;
        }
        if !sink.wants_idle() {
            return self.receive();
        }
        loop {
            // Two borrows of the reader cannot cross the loop: poll, then read.
            if self.reader.poll().map_err(|e| e.to_string())? {
                return self.poll().map(|r| r.unwrap_or_default());
            }
            sink.idle()?;
        }
    }
}

impl AnySource for RingSource {
    #[inline]
    fn wait(&mut self, _sink: &mut dyn Sink) -> Result<&[u8], String> {
        self.receive()
    }
}

/// The calling thread's context switches so far, voluntary and involuntary.
fn switches() -> Option<[u64; 2]> {
    pagewise::os::process::this_thread_usage()
        .ok()
        .map(|u| [u.voluntary_switches, u.involuntary_switches])
}

fn switches_since(before: Option<[u64; 2]>) -> Option<[u64; 2]> {
    let (b, a) = (before?, switches()?);
    Some([a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1])])
}

fn word(payload: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&payload[at..at + 8]);
    u64::from_le_bytes(w)
}

fn ping<S: Sink, R: AnySource>(
    spec: &RttChildSpec,
    sink: &mut S,
    source: &mut R,
    counter: &crate::FaultCounter,
) -> Result<RttChildResult, String> {
    let mut hist = histogram()?;
    let mut payload = vec![0x5Au8; spec.record_bytes];
    let total = spec.warmup + spec.round_trips;
    let mut before = None;
    let mut switched = None;
    for i in 0..total {
        if i == spec.warmup {
            before = counter.reading();
            switched = switches();
        }
        payload[..8].copy_from_slice(&i.to_le_bytes());
        let sent = monotonic_ns();
        payload[8..16].copy_from_slice(&sent.to_le_bytes());
        sink.send(&payload)?;
        let echo = source
            .wait(sink)
            .map_err(|e| format!("round trip {i} of {total}: {e}"))?;
        let received = monotonic_ns();
        if word(echo, 0) != i {
            return Err(format!("round trip {i} came back as {}", word(echo, 0)));
        }
        if i >= spec.warmup {
            hist.saturating_record(received.saturating_sub(sent).max(1));
        }
    }
    let switches = switches_since(switched);
    Ok(RttChildResult {
        rtt_ns: Some(percentiles(&hist)),
        faults: counter.since(before),
        switches,
        slow_round_trips: hist.count_between(SLOW_NS + 1, u64::MAX),
        ..RttChildResult::default()
    })
}

fn pong<S: Sink, R: AnySource>(
    spec: &RttChildSpec,
    sink: &mut S,
    source: &mut R,
    counter: &crate::FaultCounter,
) -> Result<RttChildResult, String> {
    let mut hist = histogram()?;
    let total = spec.warmup + spec.round_trips;
    let mut before = None;
    let mut switched = None;
    for i in 0..total {
        if i == spec.warmup {
            before = counter.reading();
            switched = switches();
        }
        let record = source
            .wait(sink)
            .map_err(|e| format!("record {i} of {total}: {e}"))?;
        if record.len() != spec.record_bytes {
            return Err(format!(
                "record {i} has {} bytes, not {}",
                record.len(),
                spec.record_bytes
            ));
        }
        // The echo goes first, straight from the received bytes, and the
        // clock is read after it: Aeron's and Chronicle's pongs read no
        // clock, and a clock read (and a copy) before the echo would add
        // tens of nanoseconds to every round trip.
        sink.send(record)?;
        let received = monotonic_ns();
        if i >= spec.warmup {
            let sent = word(record, 8);
            hist.saturating_record(received.saturating_sub(sent).max(1));
        }
    }
    let switches = switches_since(switched);
    Ok(RttChildResult {
        one_way_ns: Some(percentiles(&hist)),
        faults: counter.since(before),
        switches,
        ..RttChildResult::default()
    })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RttConfig {
    /// Payload sizes, bytes (each 16 to 1 MiB).
    pub sizes: Vec<usize>,
    /// Round trips before the measured ones (default 100,000).
    pub warmup: u64,
    /// Measured round trips (default 1,000,000; fewer for large records, so
    /// that a queue holds at most 1 GiB).
    pub round_trips: u64,
    /// CPUs for the ping and the pong process.
    pub pin: Option<[usize; 2]>,
    /// The directory of the files (tmpfs).
    pub dir: PathBuf,
    /// Rows.
    pub kinds: Vec<RttKind>,
    /// The routine that copies payloads.
    pub copy: Routine,
    /// Trials per row and size, interleaved (default 3).
    pub trials: usize,
}

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            sizes: vec![32, 128, 1024, 4096],
            warmup: 100_000,
            round_trips: 1_000_000,
            pin: None,
            dir: PathBuf::from("/dev/shm"),
            kinds: RttKind::DEFAULT.to_vec(),
            copy: Routine::default(),
            trials: 3,
        }
    }
}

/// One row and record size: medians over the trials, and each trial's
/// main percentiles (to show runs that differ).
#[derive(Debug, Clone, Serialize)]
pub struct RttRow {
    /// Row name (`floor`, `queue`, `queue+…`).
    pub name: String,
    /// Payload bytes per record.
    pub record_bytes: usize,
    /// Round trips measured per trial.
    pub round_trips: u64,
    /// Round trips before them, not recorded.
    pub warmup: u64,
    /// CPUs of the ping and pong processes, if pinned.
    pub pin: Option<[usize; 2]>,
    /// The routine that copied payloads in (and out where not guarded).
    pub copy: Routine,
    /// Round-trip percentiles, ns, medians over trials.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// 99.99th percentile.
    pub p9999_ns: u64,
    /// Largest round trip.
    pub max_ns: u64,
    /// Each trial's p50, ns.
    pub trial_p50_ns: Vec<u64>,
    /// Each trial's p99, ns.
    pub trial_p99_ns: Vec<u64>,
    /// Each trial's p99.9, ns.
    pub trial_p999_ns: Vec<u64>,
    /// The ping leg alone (pong's receive time − ping's send time), p50 and
    /// p99, ns, medians.
    pub one_way_p50_ns: u64,
    /// See `one_way_p50_ns`.
    pub one_way_p99_ns: u64,
    /// Page faults of both processes in the measured round trips (median
    /// over trials); null when a trial's were not counted.
    pub faults: Option<u64>,
    /// Why `faults` is null.
    pub faults_note: Option<String>,
    /// Voluntary context switches of both measuring threads in the
    /// measured round trips (median over trials); null if not counted.
    pub switches_voluntary: Option<u64>,
    /// Involuntary context switches (preemptions) of both measuring
    /// threads, likewise. Compare with `slow_round_trips`: each preemption
    /// of a spinning side costs at least one slow round trip.
    pub switches_involuntary: Option<u64>,
    /// Measured round trips slower than `slow_ns` (median over trials).
    pub slow_round_trips: u64,
    /// The threshold of `slow_round_trips`, ns ([`SLOW_NS`]).
    pub slow_ns: u64,
    /// The writers' pre-touch mode, as the ping side's writer reported it
    /// (queue rows; null for the floor).
    pub pretouch: Option<String>,
    /// Pieces the writers prepared when they caught up, in idle work, and
    /// on the thread (sums over both sides, medians over trials).
    pub pieces_inline: u64,
    /// See `pieces_inline`.
    pub pieces_idle: u64,
    /// See `pieces_inline`.
    pub pieces_background: u64,
    /// The load average (1 minute) before the row's first trial and after
    /// its last, from /proc/loadavg: other work on the machine shows here.
    pub load_1m: [Option<f64>; 2],
    /// Trials run.
    pub trials: usize,
}

/// A row that did not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct RttNotRun {
    /// Row name.
    pub name: String,
    /// Payload bytes.
    pub record_bytes: usize,
    /// Why.
    pub reason: String,
}

/// Starts a child process for a ping-pong spec, with its stdout piped.
pub type RttSpawn<'a> = &'a dyn Fn(&RttChildSpec) -> std::io::Result<std::process::Child>;

struct RttTrial {
    rtt: [u64; 6],
    one_way: [u64; 6],
    faults: Option<u64>,
    switches: Option<[u64; 2]>,
    slow: u64,
    faults_note: Option<String>,
    pretouch: Option<String>,
    pieces: [u64; 3],
}

/// The 1-minute load average, from /proc/loadavg.
pub fn load_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Checks settings that would make rows fail or crawl, before any runs: a
/// pin of both processes to one CPU (they would take turns, one time slice
/// per round trip), a CPU this process may not use, and `queue+prepared`
/// with a warm-up under 2 round trips (its readers prepare in the warm-up).
/// `Err` is one line. One `sched_getaffinity` when pinned.
pub fn check_settings(config: &RttConfig) -> Result<(), String> {
    if let Some([ping, pong]) = config.pin {
        if ping == pong {
            return Err(format!(
                "ping and pong need two different CPUs, not {ping} for both: on one CPU they take turns, a time slice per round trip"
            ));
        }
        let usable = pagewise::os::process::usable_cpus().map_err(|e| e.to_string())?;
        if let Some(cpu) = [ping, pong].into_iter().find(|c| !usable.contains(c)) {
            let list: Vec<String> = usable.iter().map(|c| c.to_string()).collect();
            return Err(format!(
                "CPU {cpu} is not one this process may run on (it may use {})",
                list.join(", ")
            ));
        }
    }
    if let Some(kind) = config
        .kinds
        .iter()
        .find(|k| k.is_prepared())
        .filter(|_| config.warmup < 2)
    {
        return Err(format!(
            "{} needs a warm-up of at least 2 round trips: its readers prepare in the warm-up",
            kind.name()
        ));
    }
    Ok(())
}

/// Checks the folder of the files before any row runs (see
/// [`super::check_folder`]): room for the two queues of the largest size.
pub fn check_folder(config: &RttConfig) -> Result<(), String> {
    let need = config
        .sizes
        .iter()
        .map(|&size| {
            let (warmup, round_trips) = counts_for(config, size);
            run_bytes(size, warmup + round_trips).saturating_mul(2)
        })
        .max()
        .unwrap_or(0);
    super::check_folder(&config.dir, need)
}

/// Warm-up and measured round trips for `record_bytes`: as configured
/// unless a queue would then hold more than [`MAX_QUEUE_BYTES`]; then the
/// warm-up is cut to a tenth of what fits and the measured round trips to
/// the rest (at least one each).
fn counts_for(config: &RttConfig, record_bytes: usize) -> (u64, u64) {
    let per = floor_slot(record_bytes) as u64;
    let room = (MAX_QUEUE_BYTES / per).max(2);
    let warmup = config.warmup.min(room / 10);
    let round_trips = config.round_trips.min(room - warmup).max(1);
    (warmup, round_trips)
}

/// Bytes a queue takes for `records` records of `record_bytes` (no CRC),
/// with room for the chunk headers and a padding record per chunk.
fn run_bytes(record_bytes: usize, records: u64) -> u64 {
    let per = floor_slot(record_bytes) as u64;
    let data = per.saturating_mul(records);
    let chunks = data / pagewise::queue::layout::DEFAULT_CHUNK + 2;
    data.saturating_add(chunks.saturating_mul(per + pagewise::queue::layout::CHUNK_HEADER_LEN))
}

/// Creates the two files of a trial: for the floor, rings allocated for
/// `records` records of `record_bytes`; else two empty queues (so that
/// each side's reader can open the other's queue before its writer runs).
fn create_files(
    kind: RttKind,
    paths: [&Path; 2],
    record_bytes: usize,
    records: u64,
) -> Result<(), String> {
    for p in paths {
        if kind.is_floor() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(p)
                .map_err(|e| format!("create {}: {e}", p.display()))?;
            let len = ring_len(record_bytes, records) as u64;
            file::allocate(&f, 0, len)
                .map_err(|e| format!("allocate the floor file ({len} bytes): {e}"))?;
        } else {
            drop(
                Writer::create(
                    p,
                    Options {
                        pretouch: None,
                        ..Options::default()
                    },
                )
                .map_err(|e| e.to_string())?,
            );
        }
    }
    Ok(())
}

fn run_trial(
    config: &RttConfig,
    kind: RttKind,
    record_bytes: usize,
    spawn: RttSpawn<'_>,
) -> Result<RttTrial, String> {
    let id = std::process::id();
    let ping_path = config.dir.join(format!("pagewise-rtt-{id}-ping.q"));
    let pong_path = config.dir.join(format!("pagewise-rtt-{id}-pong.q"));
    let (warmup, round_trips) = counts_for(config, record_bytes);
    let remove = || {
        for p in [&ping_path, &pong_path] {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_file(pagewise::queue::lock_path(p));
        }
    };
    remove();
    let records = warmup + round_trips;
    let created = create_files(kind, [&ping_path, &pong_path], record_bytes, records);
    if let Err(e) = created {
        remove();
        return Err(e);
    }
    let spec = |role, cpu| RttChildSpec {
        role,
        kind,
        ping_path: ping_path.clone(),
        pong_path: pong_path.clone(),
        record_bytes,
        warmup,
        round_trips,
        cpu,
        copy: config.copy,
        // Generous: a million round trips take about a second; a loaded
        // machine may take many times that.
        timeout_s: 120 + round_trips / 5_000,
    };
    let result = (|| {
        let pong = Running::start(
            || spawn(&spec(RttRole::Pong, config.pin.map(|p| p[1]))),
            "pong",
        )?;
        let ping = Running::start(
            || spawn(&spec(RttRole::Ping, config.pin.map(|p| p[0]))),
            "ping",
        )?;
        let ping: RttChildResult = ping.finish()?;
        let pong: RttChildResult = pong.finish()?;
        Ok::<_, String>((ping, pong))
    })();
    remove();
    let (ping, pong) = result?;
    let rtt = ping.rtt_ns.ok_or("the ping process sent no round trips")?;
    let one_way = pong
        .one_way_ns
        .ok_or("the pong process sent no latencies")?;
    Ok(RttTrial {
        rtt,
        one_way,
        faults: ping.faults.zip(pong.faults).map(|(a, b)| a + b),
        switches: ping
            .switches
            .zip(pong.switches)
            .map(|(a, b)| [a[0] + b[0], a[1] + b[1]]),
        slow: ping.slow_round_trips,
        faults_note: ping.faults_note.or(pong.faults_note),
        pretouch: ping.pretouch,
        pieces: [
            ping.pieces_inline + pong.pieces_inline,
            ping.pieces_idle + pong.pieces_idle,
            ping.pieces_background + pong.pieces_background,
        ],
    })
}

fn median_u64(v: impl Iterator<Item = u64>) -> u64 {
    let v: Vec<f64> = v.map(|n| n as f64).collect();
    Summary::of(&v).map_or(0, |s| s.median.round() as u64)
}

/// The round-trip part of a [`Report`](super::Report) (`rtt`).
#[derive(Debug, Clone, Serialize)]
pub struct RttReport {
    /// Payload sizes run, bytes.
    pub sizes: Vec<usize>,
    /// Round trips before the measured ones, per trial.
    pub warmup: u64,
    /// Measured round trips asked for per trial (rows say how many ran).
    pub round_trips: u64,
    /// CPUs of the ping and pong processes, if pinned.
    pub pin: Option<[usize; 2]>,
    /// Trials per row and size.
    pub trials: usize,
    /// The directory of the files.
    pub dir: String,
    /// Its file system.
    pub fs: String,
    /// One row per row name and size.
    pub rows: Vec<RttRow>,
    /// Rows that did not run (or stopped), and why.
    pub not_run: Vec<RttNotRun>,
}

/// Runs the ping-pong rows for every size, trials interleaved (row by row
/// within a trial), and reports them with the ones that failed. Costs
/// `trials × sizes × rows` pairs of processes, about a second each at the
/// default million round trips.
pub fn run(config: &RttConfig, progress: &dyn Progress, spawn: RttSpawn<'_>) -> RttReport {
    let cells: Vec<(usize, RttKind)> = config
        .sizes
        .iter()
        .flat_map(|&s| config.kinds.iter().map(move |&k| (s, k)))
        .collect();
    let mut trials: Vec<Vec<RttTrial>> = cells.iter().map(|_| Vec::new()).collect();
    let mut failed: Vec<Option<String>> = vec![None; cells.len()];
    let mut loads: Vec<[Option<f64>; 2]> = vec![[None, None]; cells.len()];
    let total = config.trials * cells.len();
    let mut done = 0;
    for trial in 0..config.trials {
        for (i, &(size, kind)) in cells.iter().enumerate() {
            progress.update(
                done,
                total,
                &format!(
                    "trial {}/{}: {} at {size} B",
                    trial + 1,
                    config.trials,
                    kind.name()
                ),
            );
            done += 1;
            if failed[i].is_some() {
                continue;
            }
            if trial == 0 {
                loads[i][0] = load_1m();
            }
            match run_trial(config, kind, size, spawn) {
                Ok(t) => trials[i].push(t),
                Err(e) => failed[i] = Some(e),
            }
            loads[i][1] = load_1m();
        }
    }
    progress.update(total, total, "done");
    let mut rows = Vec::new();
    let mut not_run = Vec::new();
    for (i, &(size, kind)) in cells.iter().enumerate() {
        let t = &trials[i];
        if let Some(reason) = failed[i].take() {
            not_run.push(RttNotRun {
                name: kind.name().to_owned(),
                record_bytes: size,
                reason: if t.is_empty() {
                    reason
                } else {
                    format!("after {} trials: {reason}", t.len())
                },
            });
        }
        if t.is_empty() {
            continue;
        }
        let q = |k: usize| median_u64(t.iter().map(|x| x.rtt[k]));
        let faults: Option<Vec<u64>> = t.iter().map(|x| x.faults).collect();
        let switches: Option<Vec<[u64; 2]>> = t.iter().map(|x| x.switches).collect();
        rows.push(RttRow {
            name: kind.name().to_owned(),
            record_bytes: size,
            round_trips: counts_for(config, size).1,
            warmup: counts_for(config, size).0,
            pin: config.pin,
            copy: config.copy,
            p50_ns: q(0),
            p90_ns: q(1),
            p99_ns: q(2),
            p999_ns: q(3),
            p9999_ns: q(4),
            max_ns: q(5),
            trial_p50_ns: t.iter().map(|x| x.rtt[0]).collect(),
            trial_p99_ns: t.iter().map(|x| x.rtt[2]).collect(),
            trial_p999_ns: t.iter().map(|x| x.rtt[3]).collect(),
            one_way_p50_ns: median_u64(t.iter().map(|x| x.one_way[0])),
            one_way_p99_ns: median_u64(t.iter().map(|x| x.one_way[2])),
            faults: faults.map(|f| median_u64(f.into_iter())),
            faults_note: t.iter().find_map(|x| x.faults_note.clone()),
            switches_voluntary: switches
                .as_ref()
                .map(|s| median_u64(s.iter().map(|x| x[0]))),
            switches_involuntary: switches
                .as_ref()
                .map(|s| median_u64(s.iter().map(|x| x[1]))),
            slow_round_trips: median_u64(t.iter().map(|x| x.slow)),
            slow_ns: SLOW_NS,
            pretouch: t.iter().find_map(|x| x.pretouch.clone()),
            pieces_inline: median_u64(t.iter().map(|x| x.pieces[0])),
            pieces_idle: median_u64(t.iter().map(|x| x.pieces[1])),
            pieces_background: median_u64(t.iter().map(|x| x.pieces[2])),
            load_1m: loads[i],
            trials: t.len(),
        });
    }
    RttReport {
        sizes: config.sizes.clone(),
        warmup: config.warmup,
        round_trips: config.round_trips,
        pin: config.pin,
        trials: config.trials,
        dir: config.dir.display().to_string(),
        fs: super::fs_of(&config.dir),
        rows,
        not_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs both sides of `kind` as threads of this process (no watchdog)
    /// and returns what each reported.
    fn ping_pong(kind: RttKind, record_bytes: usize) -> (RttChildResult, RttChildResult) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let (ping_path, pong_path) = (dir.path().join("ping"), dir.path().join("pong"));
        let (warmup, round_trips) = (100, 2_000);
        create_files(
            kind,
            [&ping_path, &pong_path],
            record_bytes,
            warmup + round_trips,
        )
        .unwrap();
        let spec = |role| RttChildSpec {
            role,
            kind,
            ping_path: ping_path.clone(),
            pong_path: pong_path.clone(),
            record_bytes,
            warmup,
            round_trips,
            cpu: None,
            copy: Routine::default(),
            timeout_s: 0,
        };
        let side = |spec: RttChildSpec| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                run_child(&spec, &mut out).unwrap();
                let text = String::from_utf8(out).unwrap();
                let mut lines = text.lines();
                assert_eq!(lines.next(), Some("ready"));
                serde_json::from_str::<RttChildResult>(lines.next().unwrap()).unwrap()
            })
        };
        let pong = side(spec(RttRole::Pong));
        let ping = side(spec(RttRole::Ping));
        (ping.join().unwrap(), pong.join().unwrap())
    }

    fn check(ping: &RttChildResult, pong: &RttChildResult) {
        let rtt = ping.rtt_ns.expect("ping reports round trips");
        assert!(rtt[0] > 0, "{rtt:?}");
        assert!(rtt.windows(2).all(|w| w[0] <= w[1]), "{rtt:?}");
        let one_way = pong.one_way_ns.expect("pong reports the ping leg");
        // One leg of a round trip cannot take longer than the slowest round trip.
        assert!(one_way[0] <= rtt[5], "{one_way:?} vs {rtt:?}");
        assert!(ping.slow_round_trips <= 2_000);
        if let (Some(a), Some(b)) = (ping.switches, pong.switches) {
            assert!(a.iter().chain(&b).all(|&n| n < 1_000_000));
        }
    }

    #[test]
    fn the_floor_and_the_queue_echo_every_record_and_time_it() {
        for kind in [RttKind::Floor, RttKind::Queue, RttKind::QueueIdleWork] {
            let (ping, pong) = ping_pong(kind, 32);
            check(&ping, &pong);
            if kind.is_floor() {
                assert_eq!(ping.pretouch, None);
            } else {
                let p = ping
                    .pretouch
                    .clone()
                    .expect("a queue row says its pre-touch");
                assert!(p.starts_with("thread") || p.starts_with("idle"), "{p}");
            }
        }
    }

    /// The prepared row maps in every byte of the run before the clock
    /// starts: neither side takes a page fault in its measured round trips
    /// (when this machine can count them).
    #[test]
    fn the_prepared_row_takes_no_fault_while_measured() {
        let (ping, pong) = ping_pong(RttKind::QueuePrepared, 128);
        check(&ping, &pong);
        for side in [&ping, &pong] {
            if let Some(faults) = side.faults {
                assert_eq!(faults, 0, "{side:?}");
            }
        }
        assert!(
            ping.pieces_inline > 0,
            "the writer prepared the run: {ping:?}"
        );
    }

    /// The prepared row's readers prepare in the warm-up: with less than
    /// two warm-up round trips that would be inside the measured ones.
    #[test]
    fn the_prepared_row_refuses_a_warm_up_below_2() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let (ping_path, pong_path) = (dir.path().join("ping"), dir.path().join("pong"));
        create_files(RttKind::QueuePrepared, [&ping_path, &pong_path], 32, 10).unwrap();
        let spec = RttChildSpec {
            role: RttRole::Ping,
            kind: RttKind::QueuePrepared,
            ping_path,
            pong_path,
            record_bytes: 32,
            warmup: 1,
            round_trips: 9,
            cpu: None,
            copy: Routine::default(),
            timeout_s: 0,
        };
        let err = run_child(&spec, &mut Vec::new()).unwrap_err();
        assert!(err.contains("--warmup of at least 2"), "{err}");
    }

    #[test]
    fn a_record_below_16_bytes_is_refused() {
        let spec = RttChildSpec {
            role: RttRole::Ping,
            kind: RttKind::Floor,
            ping_path: "/nonexistent/a".into(),
            pong_path: "/nonexistent/b".into(),
            record_bytes: 8,
            warmup: 0,
            round_trips: 1,
            cpu: None,
            copy: Routine::default(),
            timeout_s: 0,
        };
        let err = run_child(&spec, &mut Vec::new()).unwrap_err();
        assert!(err.contains("at least 16 bytes"), "{err}");
    }

    #[test]
    fn large_records_get_fewer_round_trips_so_a_queue_stays_under_1_gib() {
        let config = RttConfig::default();
        assert_eq!(counts_for(&config, 32), (config.warmup, config.round_trips));
        for bytes in [4096, 1 << 20] {
            let (warmup, round_trips) = counts_for(&config, bytes);
            assert!(
                warmup >= 1 && round_trips > warmup,
                "{bytes}: {warmup} {round_trips}"
            );
            assert!(
                (warmup + round_trips) * (bytes as u64 + 8) <= MAX_QUEUE_BYTES,
                "{bytes}: {warmup} {round_trips}"
            );
        }
    }

    #[test]
    fn rows_are_named_and_found_by_name() {
        for k in RttKind::ALL {
            assert_eq!(RttKind::by_name(k.name()), Some(k));
        }
        assert_eq!(RttKind::by_name("aeron"), None);
    }
}
