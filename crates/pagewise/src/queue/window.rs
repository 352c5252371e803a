//! The pre-toucher: a background thread that keeps a window of the file
//! ahead of the writer allocated (`fallocate`) and faulted in
//! (`MADV_POPULATE_WRITE`), so appends take no page fault and never meet a
//! full file system as a SIGBUS, without populating the whole file.
//!
//! The file is cut into fixed *pieces* counted from an origin. The thread and
//! the writer claim pieces from one ordered set (the same scheme as
//! `region::background`, where a waiter helps instead of sleeping); the
//! *frontier* is the end of the longest prepared prefix and is readable
//! without a lock. The writer publishes its position with one relaxed store
//! per append; the thread prepares pieces until the frontier is a *window*
//! ahead of it, then sleeps for about the time the writer needs to eat half
//! the slack.
//!
//! The window adapts to the write rate: `clamp(window, rate × lead,
//! max_window)`, with the rate measured over ~1 ms steps (rising at once,
//! decaying slowly). A piece is claimed only when it ends inside the window,
//! so the file never holds more than the written bytes plus the current
//! window plus one piece in flight (plus the cache lead below, without a
//! thread of normal priority).
//!
//! When the writer catches up with the frontier it prepares the pieces it
//! needs itself: a system call, but not a page fault. Without a thread of
//! normal priority, the work on the writer's CPU keeps a cache lead more
//! (see [`cache_lead`]), so that fresh pages' lines have left the writer's
//! caches before records go in. A failed piece (for
//! example `ENOSPC`) goes back to the unclaimed set; the thread backs off for
//! a while and the writer, when it needs that piece, tries it itself and
//! returns the error from `append`.

use super::error::QueueError;
use super::pattern::{PatternWatch, Switch};
use super::writer::now_unix_ns;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the pre-touch work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreTouchMode {
    /// Chosen from the CPUs this process may use (`sched_getaffinity`) and
    /// the writer's pattern: a thread when there are at least
    /// [`THREAD_MIN_CPUS`]; else idle-time work while the writer has idle
    /// time, and a thread at the lowest priority (`SCHED_IDLE`) while it has
    /// none (it keeps catching up with the window). On a machine with no
    /// core to spare, a third runnable thread of normal priority beside a
    /// spinning writer and reader takes a CPU from one of them every time it
    /// wakes; one at the lowest priority runs only when a CPU would idle.
    #[default]
    Auto,
    /// A background thread (`pagewise-pretouch`) keeps the window ready and
    /// adapts its size to the write rate.
    Thread,
    /// No thread: the writer prepares the window itself, one small piece
    /// (4 KiB) per [`Writer::idle_work`](super::Writer::idle_work) call
    /// while it waits between records, and in runs when it catches up. The
    /// window stays at `window` (no rate adaptation), plus the cache lead
    /// (see `WindowReport::cache_lead_bytes`).
    Idle,
}

/// The fewest usable CPUs for which [`PreTouchMode::Auto`] starts a thread:
/// one for the writer, one for a spinning reader, one for the thread.
pub const THREAD_MIN_CPUS: usize = 3;

/// How the writer's pre-toucher sizes its window and where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreTouch {
    /// The smallest window kept ready ahead of the writer (default 4 MiB).
    pub window: u64,
    /// The largest window the rate adaptation may grow to (default 64 MiB).
    pub max_window: u64,
    /// How far ahead in time the window should reach at the measured write
    /// rate (default 4 ms): a fast writer gets a larger window.
    pub lead: Duration,
    /// Where the work runs (default [`PreTouchMode::Auto`]).
    pub mode: PreTouchMode,
}

impl Default for PreTouch {
    fn default() -> Self {
        PreTouch {
            window: 4 << 20,
            max_window: 64 << 20,
            lead: Duration::from_millis(4),
            mode: PreTouchMode::Auto,
        }
    }
}

/// What pre-touch a writer runs, after [`PreTouchMode::Auto`] was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreToucher {
    /// No pre-touch: the writer allocates as it goes and takes page faults.
    #[default]
    Off,
    /// The background thread.
    Thread,
    /// Idle-time work on the writer's thread.
    Idle,
    /// The background thread at the lowest priority (`SCHED_IDLE`, or nice
    /// 19 where that is refused), started by [`PreTouchMode::Auto`] on a
    /// machine with no CPU to spare when the writer showed no idle time.
    LowPriorityThread,
}

impl PreToucher {
    /// `off`, `thread`, `idle` or `low-priority-thread`.
    pub fn name(self) -> &'static str {
        match self {
            PreToucher::Off => "off",
            PreToucher::Thread => "thread",
            PreToucher::Idle => "idle",
            PreToucher::LowPriorityThread => "low-priority-thread",
        }
    }

    /// The code stored in the queue header for `inspect` (0 means a writer
    /// that did not say: an earlier pagewise). Codes are never reused: an
    /// earlier pagewise shows a code it does not know as "not recorded".
    pub(crate) fn code(self) -> u32 {
        match self {
            PreToucher::Off => 1,
            PreToucher::Thread => 2,
            PreToucher::Idle => 3,
            PreToucher::LowPriorityThread => 4,
        }
    }

    /// The mode stored as `code`, if it is one.
    pub(crate) fn from_code(code: u32) -> Option<PreToucher> {
        match code {
            1 => Some(PreToucher::Off),
            2 => Some(PreToucher::Thread),
            3 => Some(PreToucher::Idle),
            4 => Some(PreToucher::LowPriorityThread),
            _ => None,
        }
    }
}

impl PreTouch {
    /// Checks the sizes.
    pub fn check(&self) -> Result<(), String> {
        if self.window == 0 {
            return Err("the pre-touch window must be at least 1 byte".into());
        }
        if self.max_window < self.window {
            return Err(format!(
                "the largest pre-touch window ({}) is smaller than the window ({})",
                self.max_window, self.window
            ));
        }
        Ok(())
    }

    /// Resolves the mode: what runs first, and why (for reports). `Auto`
    /// asks the kernel which CPUs this thread may use (one system call).
    pub fn resolve(&self) -> (PreToucher, String) {
        let r = self.resolve_auto();
        (r.mode, r.reason)
    }

    /// As [`PreTouch::resolve`], with what `Auto` found.
    pub(crate) fn resolve_auto(&self) -> Resolved {
        let fixed = |mode, reason: &str| Resolved {
            mode,
            reason: reason.to_owned(),
            usable_cpus: None,
            adaptive: false,
        };
        match self.mode {
            PreTouchMode::Thread => fixed(PreToucher::Thread, "asked for"),
            PreTouchMode::Idle => fixed(PreToucher::Idle, "asked for"),
            PreTouchMode::Auto => match crate::sys::process::usable_cpus() {
                Ok(cpus) if cpus.len() >= THREAD_MIN_CPUS => Resolved {
                    mode: PreToucher::Thread,
                    reason: format!(
                        "auto: {} usable CPUs (sched_getaffinity), one to spare for the thread beside a writer and a reader",
                        cpus.len()
                    ),
                    usable_cpus: Some(cpus.len()),
                    adaptive: false,
                },
                Ok(cpus) => Resolved {
                    mode: PreToucher::Idle,
                    reason: format!(
                        "auto: {} usable CPU{} (sched_getaffinity), none to spare for a thread of normal priority beside a spinning writer and reader; idle-time work while the writer has idle time, a lowest-priority thread while it has none",
                        cpus.len(),
                        if cpus.len() == 1 { "" } else { "s" }
                    ),
                    usable_cpus: Some(cpus.len()),
                    adaptive: true,
                },
                Err(e) => fixed(
                    PreToucher::Idle,
                    &format!("auto: the usable CPUs are unknown ({e}), so no thread"),
                ),
            },
        }
    }

    /// The piece size for this window: an eighth of it, 64 KiB to 1 MiB, on
    /// a background thread; 4 KiB (a few microseconds of work) when the
    /// writer prepares pieces in its idle time.
    pub(crate) fn piece(&self, thread: bool) -> u64 {
        if !thread {
            return IDLE_PIECE;
        }
        (self.window / 8)
            .clamp(64 << 10, 1 << 20)
            .next_power_of_two()
    }
}

/// What [`PreTouch::resolve_auto`] chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// What runs first.
    pub mode: PreToucher,
    /// Why.
    pub reason: String,
    /// The usable CPUs `Auto` found (None: not `Auto`, or unknown).
    pub usable_cpus: Option<usize>,
    /// Whether the writer's pattern may switch idle-time work to a
    /// low-priority thread and back.
    pub adaptive: bool,
}

/// The piece size of idle-time preparation.
const IDLE_PIECE: u64 = 4 << 10;

/// The most a writer that caught up prepares in one call.
const INLINE_RUN: u64 = 64 << 10;

/// Runs a catch-up prepares past what the writer needs while the cache lead
/// is short: two, so that the lead grows by one run per run written.
const LEAD_RUNS_PER_CATCH_UP: usize = 2;

/// Catch-ups start building the cache lead once the writer spent at least
/// this many times as long between two of them as in the second. A writer
/// that waits for each record's reader (request and reply) spends most of
/// its time waiting: a 32 B round trip here writes 64 KiB in about 650 µs
/// between catch-ups of 35-100 µs. A writer that streams as fast as it can
/// spends about as long preparing as writing (64 KiB in ~40 µs), and for it
/// the lead costs more than it gives: its records go into lines it must
/// fetch from the shared cache (one-way, `bench queue --only
/// floor,tmpfs+pretouch --trials 3`, six alternating runs: 10.1-12.8 M
/// records/s without a lead, 9.8-11.9 with it at every catch-up).
const LEAD_ON_GAP_PER_BUSY: u32 = 4;

/// Catch-ups stop building the cache lead when the writer spent less than
/// this many times as long between two of them as in the second. Apart
/// from [`LEAD_ON_GAP_PER_BUSY`] so that a writer near the line does not
/// switch back and forth: each start builds the lead again with catch-ups
/// of three runs (a 1 KiB round trip did, and its p99.9 went from 71-78 to
/// 117-130 µs).
const LEAD_OFF_GAP_PER_BUSY: u32 = 1;

/// How far ahead of the writer the work done on its own CPU keeps the
/// prepared bytes when no thread of normal priority does it: twice the
/// level-2 cache (4 MiB when sysfs does not say), at most 64 MiB.
///
/// Why: a page prepared just before the writer reaches it was zeroed by the
/// kernel on the writer's CPU, so its lines are still modified in the
/// writer's caches when records go in, and a reader on another core waits
/// longer for each one. Prepared twice the L2 ahead (the writer of a round
/// trip also reads the other queue through the same L2), they have left
/// for the shared cache by then, as they have with a thread of normal
/// priority, whose window keeps them ahead. Measured on an Emerald Rapids
/// guest (2 CPUs, L2 2 MiB, `bench queue --rtt --rtt-sizes 32,128 --only
/// queue`, four alternating runs): 32 B p50 429-465 ns with none, 418-445
/// with a 1 MiB lead, 359-409 with 2 MiB, 343-356 with 4 MiB (the prepared
/// row's 351); 128 B level.
pub(crate) fn cache_lead(l2_bytes: Option<u64>) -> u64 {
    l2_bytes
        .map_or(4 << 20, |l2| l2.saturating_mul(2))
        .min(64 << 20)
}

/// [`cache_lead`] for this machine's level-2 cache, read once per process.
pub(crate) fn machine_cache_lead() -> u64 {
    static LEAD: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LEAD.get_or_init(|| cache_lead(crate::host::cpu::level_cache_bytes(2)))
}

/// Makes a range of the file ready for the writer.
pub(crate) trait Prepare: Send + Sync + 'static {
    /// Prepares `[offset, offset+len)`: a run of whole pieces.
    fn prepare(&self, offset: u64, len: u64) -> Result<(), QueueError>;
    /// Called by the background thread between pieces: a place to do
    /// deferred work off the writer's path (unmapping retired chunks).
    fn housekeeping(&self) {}
    /// A small step of the same work for the writer's idle time (tens of
    /// microseconds at most); returns whether there was work.
    fn housekeeping_step(&self) -> bool {
        false
    }
    /// The first half of `prepare` alone, for idle-time work: allocates the
    /// storage of `[offset, offset+len)` without faulting it in, so that a
    /// later `prepare` of the same range has only the faults left. Returns
    /// whether it did anything (`false`: already done, or nothing to split
    /// off). Idle-time work goes in these two steps because a whole page
    /// (about 2.5 µs on a KVM guest's tmpfs, where a fresh page costs the
    /// host a fault too) overran the next send of a writer paced at 1 µs
    /// and made the records after it late: see `bench queue`, row
    /// `tmpfs+pretouch`, p90.
    fn reserve(&self, _offset: u64, _len: u64) -> Result<bool, QueueError> {
        Ok(false)
    }
}

/// What the pre-toucher did, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WindowReport {
    /// What prepares the window: the thread, idle-time work, or nothing.
    pub mode: PreToucher,
    /// Why that mode (what `PreTouchMode::Auto` found, or that it was asked
    /// for); after a switch, what the writer's pattern showed.
    pub mode_reason: String,
    /// The usable CPUs `PreTouchMode::Auto` found; None when the mode was
    /// asked for (or the CPUs are unknown).
    pub usable_cpus: Option<usize>,
    /// Whether the mode follows the writer's pattern (`Auto` with fewer than
    /// [`THREAD_MIN_CPUS`] usable CPUs): idle-time work while the writer has
    /// idle time, [`PreToucher::LowPriorityThread`] while it has none.
    pub follows_pattern: bool,
    /// Switches between idle-time work and the low-priority thread so far.
    pub switches: u64,
    /// The last switches, oldest first (at most [`SWITCH_LOG`]).
    pub switch_log: Vec<PreTouchSwitch>,
    /// How the low-priority thread lowered its priority (`SCHED_IDLE`, or
    /// nice 19 and why `SCHED_IDLE` was refused). The thread is created
    /// asleep when the writer opens, so that none is created on the append
    /// path; None when there is none (or it has not started yet).
    pub thread_priority: Option<String>,
    /// Bytes per piece.
    pub piece_bytes: u64,
    /// Configured smallest window.
    pub window_bytes: u64,
    /// Configured largest window.
    pub max_window_bytes: u64,
    /// The window now.
    pub current_window_bytes: u64,
    /// The largest window used so far.
    pub peak_window_bytes: u64,
    /// How far past what it needs the work on the writer's own CPU keeps
    /// the file prepared, so that the kernel's zeroing of a page has left
    /// the writer's private caches before records go in (twice the L2; 0
    /// with a thread of normal priority, which keeps its window ahead, or
    /// without pre-touch).
    pub cache_lead_bytes: u64,
    /// Whether the writer's catch-ups build that lead now: only while they
    /// are far apart for what they cost (a writer that waits for its
    /// readers), not for one that appends as fast as it can.
    pub cache_lead_active: bool,
    /// Pieces the background thread prepared.
    pub pieces_background: u64,
    /// Pieces the writer prepared itself: because it caught up, or instead
    /// of waiting while the thread prepared the one it needed.
    pub pieces_inline: u64,
    /// Pieces the writer prepared in [`Writer::idle_work`](super::Writer::idle_work).
    pub pieces_idle: u64,
    /// Times the writer waited for a piece the thread was preparing.
    pub writer_waits: u64,
    /// The last error the background thread hit (it backs off and retries).
    pub last_error: Option<String>,
}

impl WindowReport {
    /// The mode and why, in one line: `idle (auto: 2 usable CPUs …)`, with
    /// the number of switches when there were any, and the cache lead
    /// while the writer's catch-ups build it.
    pub fn mode_description(&self) -> String {
        let lead = if self.cache_lead_active {
            format!(
                "; catch-ups keep {} KiB ready ahead",
                self.cache_lead_bytes >> 10
            )
        } else {
            String::new()
        };
        match self.switches {
            0 => format!("{} ({}{lead})", self.mode.name(), self.mode_reason),
            n => format!(
                "{} ({}; {n} switch{} so far{lead})",
                self.mode.name(),
                self.mode_reason,
                if n == 1 { "" } else { "es" }
            ),
        }
    }
}

/// How many switches [`WindowReport::switch_log`] keeps.
pub const SWITCH_LOG: usize = 16;

/// One switch of the pre-toucher, for reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PreTouchSwitch {
    /// What runs after the switch.
    pub to: PreToucher,
    /// What the writer's pattern showed.
    pub why: String,
    /// Where the writer was (its position, a file offset).
    pub at_position: u64,
    /// When, ns since the Unix epoch.
    pub at_unix_ns: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Pieces at or above this index may be unclaimed.
    next: u64,
    inflight: BTreeSet<u64>,
    /// Finished pieces above the frontier.
    done: BTreeSet<u64>,
    frontier_piece: u64,
    last_error: Option<String>,
    backoff_until: Option<Instant>,
    /// Threads waiting on `Shared::finished`.
    waiters: usize,
}

impl State {
    fn lowest_unclaimed(&self) -> u64 {
        let mut i = self.next.max(self.frontier_piece);
        while self.inflight.contains(&i) || self.done.contains(&i) {
            i += 1;
        }
        i
    }
}

struct Shared {
    origin: u64,
    piece: u64,
    config: PreTouch,
    /// How far ahead of the writer the work on its own CPU (idle-time work,
    /// catch-ups, the low-priority thread) keeps prepared bytes beyond what
    /// it needs: see [`cache_lead`]. 0 with a thread of normal priority.
    cache_lead: u64,
    prep: Box<dyn Prepare>,
    writer_pos: AtomicU64,
    frontier: AtomicU64,
    state: Mutex<State>,
    /// Signalled when a run of pieces finishes and a writer waits on it
    /// (`State::waiters`).
    finished: Condvar,
    /// Signalled to wake the background thread early.
    wake: Condvar,
    stop: AtomicBool,
    /// The thread prepares pieces; while false it sleeps until woken (the
    /// low-priority thread waits so, started at open, until the writer's
    /// pattern calls for it: no thread is created on the append path).
    active: AtomicBool,
    window_now: AtomicU64,
    peak_window: AtomicU64,
    pieces_background: AtomicU64,
    pieces_inline: AtomicU64,
    pieces_idle: AtomicU64,
    writer_waits: AtomicU64,
    /// How the low-priority thread lowered its priority (it says so when it starts).
    priority: Mutex<Option<String>>,
    /// The low-priority thread could not lower its priority and exited: a
    /// switch to it would name a pre-toucher that does no work.
    thread_gave_up: AtomicBool,
}

/// Who prepared a piece, for the counters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Preparer {
    Background,
    Inline,
    Idle,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn piece_start(&self, i: u64) -> u64 {
        self.origin + i * self.piece
    }

    fn claim(state: &mut State, i: u64) {
        state.inflight.insert(i);
        state.next = i + 1;
    }

    /// Claims piece `i` (unclaimed) and the unclaimed pieces after it, up to
    /// `last` and within one 64 KiB run from the origin (small pieces are
    /// prepared in runs: one system call per 4 KiB would cost more than the
    /// faults; a run never crosses a chunk, since chunks are power-of-two
    /// multiples of 64 KiB), prepares them in one call without the lock, and
    /// completes them (`last == i`: that piece alone). `pos` is the writer's
    /// position, for the peak-window report. Returns the error for the caller.
    fn prepare_run<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        i: u64,
        last: u64,
        pos: u64,
        by: Preparer,
    ) -> Result<(), QueueError> {
        let per_run = (INLINE_RUN / self.piece).max(1);
        let mut run = 1;
        Shared::claim(&mut state, i);
        while !(i + run).is_multiple_of(per_run)
            && i + run <= last
            && !state.inflight.contains(&(i + run))
            && !state.done.contains(&(i + run))
        {
            Shared::claim(&mut state, i + run);
            run += 1;
        }
        self.peak_window.fetch_max(
            self.piece_start(i + run).saturating_sub(pos),
            Ordering::Relaxed,
        );
        drop(state);
        let result = self.prep.prepare(self.piece_start(i), self.piece * run);
        self.complete(self.lock(), i, run, result, by)
    }

    /// Records the run of `count` pieces from `first` as finished (all of
    /// them, or none on an error), under one lock; returns the error for the
    /// caller. Pieces already behind the frontier or already done were
    /// prepared by the other side (the writer that would not wait for a
    /// low-priority thread, or that thread when the writer got there first),
    /// who counted them: a late result, good or bad, changes nothing for
    /// them. Waiters are woken only if there are any: a condition variable's
    /// wake is a system call even when no one waits.
    fn complete(
        &self,
        mut state: MutexGuard<'_, State>,
        first: u64,
        count: u64,
        result: Result<(), QueueError>,
        by: Preparer,
    ) -> Result<(), QueueError> {
        for k in first..first + count {
            state.inflight.remove(&k);
        }
        let is_fresh =
            |state: &State, k: u64| k >= state.frontier_piece && !state.done.contains(&k);
        let first_fresh = (first..first + count).find(|k| is_fresh(&state, *k));
        let out = match (first_fresh, result) {
            (None, _) => Ok(()),
            (Some(first_fresh), Ok(())) => {
                let mut fresh = 0;
                for k in first_fresh..first + count {
                    if is_fresh(&state, k) {
                        state.done.insert(k);
                        fresh += 1;
                    }
                }
                while {
                    let f = state.frontier_piece;
                    state.done.remove(&f)
                } {
                    state.frontier_piece += 1;
                }
                self.frontier
                    .store(self.piece_start(state.frontier_piece), Ordering::Release);
                let counter = match by {
                    Preparer::Background => &self.pieces_background,
                    Preparer::Inline => &self.pieces_inline,
                    Preparer::Idle => &self.pieces_idle,
                };
                counter.fetch_add(fresh, Ordering::Relaxed);
                Ok(())
            }
            (Some(first_fresh), Err(e)) => {
                // Give the pieces back so that someone can retry them.
                state.next = state.next.min(first_fresh);
                if by == Preparer::Background {
                    state.last_error = Some(e.to_string());
                    state.backoff_until = Some(Instant::now() + Duration::from_millis(20));
                }
                Err(e)
            }
        };
        let wake = state.waiters > 0;
        drop(state);
        if wake {
            self.finished.notify_all();
        }
        out
    }
}

/// The pre-touch engine: a background thread, or none (the writer then
/// prepares every piece itself when it reaches it).
pub(crate) struct Window {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// What prepares the window now, and why.
    mode: PreToucher,
    reason: String,
    usable_cpus: Option<usize>,
    /// The writer's pattern, when the mode follows it.
    watch: Option<PatternWatch>,
    follows_pattern: bool,
    switches: u64,
    switch_log: VecDeque<PreTouchSwitch>,
    /// When the current pre-toucher started (the open, or the last switch),
    /// ns since the Unix epoch.
    since_unix_ns: u64,
    /// Whether catch-ups build the cache lead: the writer's last catch-ups
    /// were far enough apart for the time they took (see
    /// [`LEAD_ON_GAP_PER_BUSY`]).
    lead_pays: bool,
    /// When the last catch-up that prepared anything ended.
    last_catch_up_end: Option<Instant>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("origin", &self.shared.origin)
            .field("piece", &self.shared.piece)
            .field("frontier", &self.frontier())
            .field("background", &self.thread.is_some())
            .field("mode", &self.mode)
            .finish()
    }
}

impl Window {
    /// A window over pieces of `piece` bytes counted from `origin`, starting
    /// with the piece that holds `start` (the writer's position). With
    /// `mode` [`PreToucher::Thread`], a thread named `pagewise-pretouch` runs
    /// ahead of the writer; `resolved` also says why that mode, for reports,
    /// and whether the mode follows the writer's pattern. `cache_lead`
    /// (see [`cache_lead`]) applies to every other mode.
    pub(crate) fn start(
        origin: u64,
        piece: u64,
        start: u64,
        config: PreTouch,
        prep: Box<dyn Prepare>,
        resolved: Resolved,
        cache_lead: u64,
    ) -> Result<Window, QueueError> {
        let mode = resolved.mode;
        let background = mode == PreToucher::Thread;
        let cache_lead = if background { 0 } else { cache_lead };
        let first = start.saturating_sub(origin) / piece;
        let shared = Arc::new(Shared {
            origin,
            piece,
            config,
            cache_lead,
            prep,
            writer_pos: AtomicU64::new(start),
            frontier: AtomicU64::new(origin + first * piece),
            state: Mutex::new(State {
                next: first,
                frontier_piece: first,
                ..State::default()
            }),
            finished: Condvar::new(),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            active: AtomicBool::new(background),
            window_now: AtomicU64::new(config.window),
            peak_window: AtomicU64::new(if background { config.window } else { 0 }),
            pieces_background: AtomicU64::new(0),
            pieces_inline: AtomicU64::new(0),
            pieces_idle: AtomicU64::new(0),
            writer_waits: AtomicU64::new(0),
            priority: Mutex::new(None),
            thread_gave_up: AtomicBool::new(false),
        });
        let mut window = Window {
            shared,
            thread: None,
            mode,
            reason: resolved.reason,
            usable_cpus: resolved.usable_cpus,
            watch: resolved.adaptive.then(|| PatternWatch::new(start)),
            follows_pattern: resolved.adaptive,
            switches: 0,
            switch_log: VecDeque::new(),
            since_unix_ns: now_unix_ns(),
            lead_pays: false,
            last_catch_up_end: None,
        };
        if background {
            window.thread = Some(window.spawn(false).map_err(QueueError::Thread)?);
        } else if resolved.adaptive {
            match window.spawn(true) {
                Ok(t) => window.thread = Some(t),
                Err(e) => {
                    window.watch = None;
                    window.follows_pattern = false;
                    window.reason = format!(
                        "{}; but the low-priority thread could not be created ({e}), so idle-time work only",
                        window.reason
                    );
                }
            }
        }
        Ok(window)
    }

    /// Starts the background thread; `low_priority`: at the lowest priority,
    /// and asleep until [`Window::set_active`] wakes it.
    fn spawn(&self, low_priority: bool) -> std::io::Result<JoinHandle<()>> {
        let worker = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("pagewise-pretouch".into())
            .spawn(move || {
                if low_priority {
                    use crate::sys::process::{lowest_priority_for_this_thread, LowPriority};
                    let (how, lowered) = match lowest_priority_for_this_thread() {
                        Ok((LowPriority::SchedIdle, _)) => ("SCHED_IDLE".to_owned(), true),
                        Ok((LowPriority::Nice19, refused)) => (
                            format!(
                                "nice 19 (SCHED_IDLE refused: {})",
                                refused.map_or_else(|| "no reason given".to_owned(), |e| e.to_string())
                            ),
                            true,
                        ),
                        Err(e) => (
                            format!("none: its priority could not be lowered ({e}), so it does no work and the writer prepares its window itself"),
                            false,
                        ),
                    };
                    *worker.priority.lock().unwrap_or_else(|e| e.into_inner()) = Some(how);
                    if !lowered {
                        // A thread of normal priority is what this mode avoids;
                        // the writer never waits for this one.
                        worker.thread_gave_up.store(true, Ordering::Relaxed);
                        return;
                    }
                }
                run(&worker)
            })
    }

    /// Wakes the background thread to work (`true`), or lets it finish the
    /// piece it is preparing and sleep (`false`), without waiting for it: a
    /// lowest-priority thread may get no CPU for a while. One futex wake.
    fn set_active(&self, active: bool) {
        let s = &*self.shared;
        s.active.store(active, Ordering::Relaxed);
        if !active {
            s.window_now.store(s.config.window, Ordering::Relaxed);
        }
        // Take the lock so the thread is either before its check or waiting.
        drop(s.lock());
        s.wake.notify_all();
    }

    /// Acts on the pattern watcher's decision at writer position `pos`;
    /// returns whether the pre-toucher changed (always, unless the thread
    /// could not lower its priority and exited: then it stays idle-time work).
    fn switch(&mut self, switch: Switch, pos: u64) -> bool {
        if matches!(switch, Switch::ToThread(_))
            && self.shared.thread_gave_up.load(Ordering::Relaxed)
        {
            // No thread to hand the work to: idle-time work stays, and the
            // watcher stops asking.
            self.watch = None;
            self.reason.push_str(
                "; the low-priority thread could not lower its priority, so idle-time work stays",
            );
            return false;
        }
        let (to, why) = match switch {
            Switch::ToThread(why) => {
                self.set_active(true);
                (PreToucher::LowPriorityThread, why)
            }
            Switch::ToIdle(why) => {
                self.set_active(false);
                (PreToucher::Idle, why)
            }
        };
        let cpus = self
            .usable_cpus
            .map_or_else(|| "auto".to_owned(), |n| format!("auto: {n} usable CPUs"));
        self.mode = to;
        self.reason = format!("{cpus}, {why}");
        self.switches += 1;
        self.since_unix_ns = now_unix_ns();
        if self.switch_log.len() == SWITCH_LOG {
            self.switch_log.pop_front();
        }
        self.switch_log.push_back(PreTouchSwitch {
            to,
            why,
            at_position: pos,
            at_unix_ns: self.since_unix_ns,
        });
        true
    }

    /// What the header records for `inspect`: the pre-toucher's code, the
    /// switches so far, when the current one started (ns since the Unix
    /// epoch) and the usable CPUs `Auto` found (0: not `Auto`).
    pub(crate) fn header_words(&self) -> (u32, u32, u64, u32) {
        (
            self.mode.code(),
            self.switches.min(u64::from(u32::MAX)) as u32,
            self.since_unix_ns,
            self.usable_cpus
                .map_or(0, |n| n.min(u32::MAX as usize) as u32),
        )
    }

    /// Publishes the writer's position. One relaxed store: call it per append.
    #[inline]
    pub(crate) fn note(&self, pos: u64) {
        self.shared.writer_pos.store(pos, Ordering::Relaxed);
    }

    /// The end of the prepared prefix. One acquire load.
    #[inline]
    pub(crate) fn frontier(&self) -> u64 {
        self.shared.frontier.load(Ordering::Acquire)
    }

    /// Returns once `[.., need)` is prepared (the new frontier), preparing
    /// pieces itself while any it needs is unclaimed. An error from preparing
    /// a piece (`NoSpace`) is returned and nothing is left half-done.
    pub(crate) fn wait_ready(&self, need: u64) -> Result<u64, QueueError> {
        self.ready(need, &mut false)
    }

    /// As [`Window::wait_ready`], for a writer that reached the end of what
    /// it may write without calling here: with `PreTouchMode::Auto` on a
    /// machine with no CPU to spare, a catch-up is what the pattern watcher
    /// counts, and may start the low-priority thread. With a cache lead,
    /// while the writer's catch-ups are far apart for their cost (see
    /// [`LEAD_ON_GAP_PER_BUSY`]), it also prepares up to two runs past
    /// `need` when the frontier is less than the lead ahead of it (best
    /// effort: an error there is left for a later call to meet). With a
    /// lead (active or not) it tells the writer to come back when it is
    /// within the lead of the frontier or has written one run, whichever
    /// comes later: the lead grows by a run per run written, and once it is
    /// built each catch-up prepares one run, as without a lead. The pattern
    /// watcher counts the catch-ups that prepared what the writer needed
    /// or at least half a run of the lead. Returns where the writer should call again (at
    /// least `need`, at most the frontier) and whether the pre-toucher
    /// switched.
    pub(crate) fn catch_up(&mut self, need: u64) -> Result<(u64, bool), QueueError> {
        let mut inline = false;
        let lead = self.shared.cache_lead;
        let started = (lead > 0).then(Instant::now);
        let mut ready = self.ready(need, &mut inline)?;
        let mut extended = false;
        let mut lead_run = false;
        if self.lead_pays {
            // Whole runs from the origin, so that once the lead is built
            // each catch-up prepares one run in one call.
            let s = &*self.shared;
            let target = need.saturating_add(lead);
            let target = s.origin + target.saturating_sub(s.origin) / INLINE_RUN * INLINE_RUN;
            let before = self.frontier();
            extended = self.extend_lead(need, target);
            ready = self.frontier();
            lead_run = ready.saturating_sub(before) >= INLINE_RUN / 2;
        }
        if let (Some(started), true) = (started, inline || extended) {
            let ended = Instant::now();
            if let Some(previous) = self.last_catch_up_end {
                let gap = started.saturating_duration_since(previous);
                let busy = ended - started;
                self.lead_pays = if self.lead_pays {
                    gap >= busy * LEAD_OFF_GAP_PER_BUSY
                } else {
                    gap >= busy * LEAD_ON_GAP_PER_BUSY
                };
            }
            self.last_catch_up_end = Some(ended);
        }
        let ready = ready
            .saturating_sub(lead)
            .max(ready.min(need.saturating_add(INLINE_RUN)))
            .max(need);
        // The pattern watcher counts the catch-ups that prepared what the
        // writer needed, or half a run or more of the lead: the writer
        // prepares its file on its append path either way. Not the lead's
        // smaller top-ups: a writer whose `idle_work` covers most of what it
        // writes meets one every run, and would be moved to the thread.
        let mut switched = false;
        if inline || lead_run {
            let pos = self.shared.writer_pos.load(Ordering::Relaxed);
            if let Some(switch) = self.watch.as_mut().and_then(|w| w.caught_up(pos)) {
                switched = self.switch(switch, pos);
            }
        }
        Ok((ready, switched))
    }

    /// `wait_ready`; sets `inline` when this call prepared pieces itself.
    fn ready(&self, need: u64, inline: &mut bool) -> Result<u64, QueueError> {
        let s = &*self.shared;
        let f = self.frontier();
        if f >= need {
            return Ok(f);
        }
        // Wake the thread of normal priority early. Not the low-priority
        // one: it runs only on an idle CPU, where its naps (50 µs to 5 ms)
        // end soon enough, and a futex wake per catch-up would cost the
        // writer more than it saves.
        if self.mode == PreToucher::Thread {
            s.wake.notify_one();
        }
        let need_piece = (need - 1).saturating_sub(s.origin) / s.piece;
        let mut may_help = true;
        let mut state = s.lock();
        loop {
            let f = s.frontier.load(Ordering::Acquire);
            if f >= need {
                return Ok(f);
            }
            let i = state.lowest_unclaimed();
            if i <= need_piece {
                *inline = true;
                let pos = s.writer_pos.load(Ordering::Relaxed);
                s.prepare_run(state, i, u64::MAX, pos, Preparer::Inline)?;
                state = s.lock();
            } else if self.follows_pattern {
                // The pieces we need are the low-priority thread's (also
                // when it was just told to sleep: it finishes its run
                // first), and it may get no CPU while this one is busy:
                // never wait for it.
                // Prepare them again (both calls are idempotent) and mark
                // them done; the thread's own completion then changes nothing.
                *inline = true;
                let first = state.frontier_piece;
                let per_run = (INLINE_RUN / s.piece).max(1);
                let last = need_piece.min((first / per_run + 1) * per_run - 1);
                drop(state);
                s.prep
                    .prepare(s.piece_start(first), s.piece * (last - first + 1))?;
                s.complete(s.lock(), first, last - first + 1, Ok(()), Preparer::Inline)?;
                state = s.lock();
            } else if may_help
                && s.piece_start(i + 1)
                    <= s.writer_pos.load(Ordering::Relaxed) + s.window_now.load(Ordering::Relaxed)
            {
                // Every piece we need is being prepared by the thread: rather
                // than sleep, prepare the next one inside the window, which the
                // writer needs soon after (both CPUs then share the work). A
                // failure here is not this call's: the piece goes back, and the
                // writer stops helping and waits (it meets the error again only
                // if it needs that piece).
                s.writer_waits.fetch_add(1, Ordering::Relaxed);
                let pos = s.writer_pos.load(Ordering::Relaxed);
                // One piece (a run that ends at `i`).
                if s.prepare_run(state, i, i, pos, Preparer::Inline).is_err() {
                    may_help = false;
                }
                state = s.lock();
            } else {
                // Every piece we need is being prepared by the thread.
                s.writer_waits.fetch_add(1, Ordering::Relaxed);
                state.waiters += 1;
                state = s
                    .finished
                    .wait_timeout(state, Duration::from_millis(1))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                state.waiters -= 1;
            }
        }
    }

    /// Prepares up to [`LEAD_RUNS_PER_CATCH_UP`] runs of the unclaimed
    /// pieces that end by `target`, on the writer's thread; returns whether
    /// it prepared any. Errors are not the caller's: the pieces go back.
    fn extend_lead(&self, need: u64, target: u64) -> bool {
        let s = &*self.shared;
        let pos = s.writer_pos.load(Ordering::Relaxed).max(need);
        let mut worked = false;
        for _ in 0..LEAD_RUNS_PER_CATCH_UP {
            let state = s.lock();
            let i = state.lowest_unclaimed();
            if s.piece_start(i + 1) > target {
                break;
            }
            let last = (target - s.origin) / s.piece - 1;
            if s.prepare_run(state, i, last, pos, Preparer::Inline)
                .is_err()
            {
                break;
            }
            worked = true;
        }
        worked
    }

    /// One step of idle-time work on the writer's thread: half of the
    /// lowest unprepared piece (its storage, or else its faults) if it ends
    /// inside `window` bytes (and the cache lead) of the writer, else one
    /// housekeeping step.
    /// Returns whether it did anything, and whether the pre-toucher switched
    /// (the call is what the pattern watcher counts as idle time). An error
    /// (for example `ENOSPC`) leaves the piece for `append` to retry and
    /// report.
    pub(crate) fn idle_step(&mut self) -> Result<(bool, bool), QueueError> {
        let pos = self.shared.writer_pos.load(Ordering::Relaxed);
        let mut switched = false;
        if let Some(switch) = self.watch.as_mut().and_then(|w| w.idled(pos)) {
            switched = self.switch(switch, pos);
        }
        Ok((self.idle_piece(pos)?, switched))
    }

    /// The work of [`Window::idle_step`].
    fn idle_piece(&self, pos: u64) -> Result<bool, QueueError> {
        let s = &*self.shared;
        let target = pos
            .saturating_add(s.config.window)
            .saturating_add(s.cache_lead);
        if s.frontier.load(Ordering::Acquire) >= target {
            return Ok(s.prep.housekeeping_step());
        }
        // The lowest unclaimed piece, if it ends inside the window.
        let lowest = |state: &State| {
            let i = state.lowest_unclaimed();
            (s.piece_start(i + 1) <= target).then_some(i)
        };
        let Some(i) = lowest(&s.lock()) else {
            return Ok(false);
        };
        // Idle-time work goes a page at a time, in two calls: the storage
        // first (a system call, made without the lock), then the faults
        // (see `Prepare::reserve`).
        if s.prep.reserve(s.piece_start(i), s.piece)? {
            return Ok(true);
        }
        // One piece (a run that ends at it); the thread may have claimed
        // pieces meanwhile.
        let state = s.lock();
        let Some(i) = lowest(&state) else {
            return Ok(false);
        };
        s.prepare_run(state, i, i, pos, Preparer::Idle)?;
        Ok(true)
    }

    /// What the window did so far.
    pub(crate) fn report(&self) -> WindowReport {
        let s = &*self.shared;
        WindowReport {
            mode: self.mode,
            mode_reason: self.reason.clone(),
            usable_cpus: self.usable_cpus,
            follows_pattern: self.follows_pattern,
            switches: self.switches,
            switch_log: self.switch_log.iter().cloned().collect(),
            thread_priority: s.priority.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            piece_bytes: s.piece,
            window_bytes: s.config.window,
            max_window_bytes: s.config.max_window,
            current_window_bytes: s.window_now.load(Ordering::Relaxed),
            peak_window_bytes: s.peak_window.load(Ordering::Relaxed),
            cache_lead_bytes: s.cache_lead,
            cache_lead_active: self.lead_pays,
            pieces_background: s.pieces_background.load(Ordering::Relaxed),
            pieces_inline: s.pieces_inline.load(Ordering::Relaxed),
            pieces_idle: s.pieces_idle.load(Ordering::Relaxed),
            writer_waits: s.writer_waits.load(Ordering::Relaxed),
            last_error: s.lock().last_error.clone(),
        }
    }
}

impl Drop for Window {
    /// Stops the pre-touch thread and waits for it. A low-priority thread in
    /// the middle of a run (at most 64 KiB) finishes it first, and it runs
    /// only when a CPU would otherwise idle: on a machine kept busy, closing
    /// the writer waits until it gets one.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.set_active(false);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Measures the write rate in bytes per second.
struct Rate {
    at: Instant,
    pos: u64,
    bytes_per_s: f64,
}

impl Rate {
    fn update(&mut self, pos: u64) -> f64 {
        let now = Instant::now();
        let dt = now.duration_since(self.at).as_secs_f64();
        if dt >= 0.001 {
            let instant = pos.saturating_sub(self.pos) as f64 / dt;
            // Rise at once (a burst needs the window now), decay slowly.
            self.bytes_per_s = if instant > self.bytes_per_s {
                instant
            } else {
                0.8 * self.bytes_per_s + 0.2 * instant
            };
            self.at = now;
            self.pos = pos;
        }
        self.bytes_per_s
    }
}

/// The background thread's loop, until the window is dropped; while not
/// active it sleeps until woken.
fn run(s: &Shared) {
    let stopped = || s.stop.load(Ordering::Relaxed);
    let mut rate = Rate {
        at: Instant::now(),
        pos: s.writer_pos.load(Ordering::Relaxed),
        bytes_per_s: 0.0,
    };
    let cfg = s.config;
    loop {
        if s.active.load(Ordering::Relaxed) {
            s.prep.housekeeping();
        }
        if stopped() {
            return;
        }
        let pos = s.writer_pos.load(Ordering::Relaxed);
        let bytes_per_s = rate.update(pos);
        let wanted = (bytes_per_s * cfg.lead.as_secs_f64()) as u64;
        let window = wanted.clamp(cfg.window, cfg.max_window);
        s.window_now.store(window, Ordering::Relaxed);
        let target = pos.saturating_add(window).saturating_add(s.cache_lead);
        let state = s.lock();
        if stopped() {
            return;
        }
        if !s.active.load(Ordering::Relaxed) {
            drop(s.wake.wait(state).unwrap_or_else(|e| e.into_inner()));
            // Measure the rate afresh when woken.
            rate = Rate {
                at: Instant::now(),
                pos: s.writer_pos.load(Ordering::Relaxed),
                bytes_per_s: 0.0,
            };
            continue;
        }
        let backing_off = state.backoff_until.is_some_and(|t| Instant::now() < t);
        let i = state.lowest_unclaimed();
        let end = s.piece_start(i + 1);
        if !backing_off && end <= target {
            // The last piece that ends inside the window.
            let last = (target - s.origin) / s.piece - 1;
            let _ = s.prepare_run(state, i, last, pos, Preparer::Background);
            continue;
        }
        // Sleep for about the time the writer needs to use half the slack.
        let frontier = s.frontier.load(Ordering::Acquire);
        let slack = frontier.saturating_sub(pos).saturating_sub(window / 2);
        let _ = s.wake.wait_timeout(state, nap(slack, bytes_per_s));
    }
}

/// How long the pre-toucher sleeps: the time the writer needs to use `slack`
/// bytes at `bytes_per_s`, from 50 µs to 5 ms (5 ms when the rate is 0, or
/// has decayed so far that the time does not fit a `Duration`).
fn nap(slack: u64, bytes_per_s: f64) -> Duration {
    Duration::try_from_secs_f64(slack as f64 / bytes_per_s)
        .unwrap_or(Duration::MAX)
        .clamp(Duration::from_micros(50), Duration::from_millis(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    /// Records prepared pieces; fails pieces at or past `fail_from`.
    struct Log {
        pieces: StdMutex<Vec<u64>>,
        fail_from: AtomicU64,
    }

    impl Prepare for Arc<Log> {
        fn prepare(&self, offset: u64, _len: u64) -> Result<(), QueueError> {
            if offset >= self.fail_from.load(Ordering::Relaxed) {
                return Err(QueueError::InvalidOptions(format!("no space at {offset}")));
            }
            self.pieces.lock().unwrap().push(offset);
            Ok(())
        }
    }

    fn log(fail_from: u64) -> Arc<Log> {
        Arc::new(Log {
            pieces: StdMutex::new(Vec::new()),
            fail_from: AtomicU64::new(fail_from),
        })
    }

    fn resolved(mode: PreToucher, adaptive: bool) -> Resolved {
        Resolved {
            mode,
            reason: "test".into(),
            usable_cpus: adaptive.then_some(2),
            adaptive,
        }
    }

    fn idle() -> Resolved {
        resolved(PreToucher::Idle, false)
    }

    fn thread() -> Resolved {
        resolved(PreToucher::Thread, false)
    }

    const CFG: PreTouch = PreTouch {
        window: 4 << 16,
        max_window: 4 << 16,
        lead: Duration::from_millis(1),
        mode: PreTouchMode::Thread,
    };

    #[test]
    fn the_nap_stays_in_bounds_for_any_rate() {
        // A writer idle for seconds: the rate decays towards 0 through
        // subnormal numbers, where slack / rate overflows a Duration.
        for rate in [
            0.0,
            1e-310,
            f64::MIN_POSITIVE,
            1e-3,
            1.0,
            1e9,
            f64::INFINITY,
            f64::NAN,
        ] {
            let n = nap(64 << 20, rate);
            assert!(
                (Duration::from_micros(50)..=Duration::from_millis(5)).contains(&n),
                "{rate}: {n:?}"
            );
        }
        assert_eq!(nap(1 << 20, 1e9), Duration::from_nanos(1_048_576));
    }

    /// Prepares every run after `cost`, counting them.
    struct Timed {
        cost: Duration,
        runs: AtomicU64,
    }

    impl Prepare for Arc<Timed> {
        fn prepare(&self, _offset: u64, _len: u64) -> Result<(), QueueError> {
            std::thread::sleep(self.cost);
            self.runs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// Waits `gap`, then appends past `come_back` (8 bytes) and catches up,
    /// checking that the writer is told to come back between what it needs
    /// and the frontier; returns what it needed, the new `come_back` and
    /// whether the pre-toucher switched.
    fn catch_up_after(w: &mut Window, gap: Duration, come_back: u64) -> (u64, u64, bool) {
        std::thread::sleep(gap);
        let need = come_back + 8;
        w.note(need - 8);
        let (come_back, switched) = w.catch_up(need).unwrap();
        assert!(come_back >= need && come_back <= w.frontier());
        (need, come_back, switched)
    }

    /// A writer that appends up to where each catch-up says to come back,
    /// `gap` apart, `catch_ups` times; returns (need, frontier, runs) after
    /// each catch-up, and the window's report at the end.
    fn write_with_catch_ups(
        cost: Duration,
        gap: Duration,
        lead: u64,
        catch_ups: usize,
    ) -> (Vec<(u64, u64, u64)>, WindowReport) {
        let t = Arc::new(Timed {
            cost,
            runs: AtomicU64::new(0),
        });
        let mut w = Window::start(
            0,
            IDLE_PIECE,
            0,
            CFG,
            Box::new(Arc::clone(&t)),
            idle(),
            lead,
        )
        .unwrap();
        let mut come_back = 0;
        let mut seen = Vec::new();
        for _ in 0..catch_ups {
            let before = t.runs.load(Ordering::Relaxed);
            let need;
            (need, come_back, _) = catch_up_after(&mut w, gap, come_back);
            seen.push((need, w.frontier(), t.runs.load(Ordering::Relaxed) - before));
        }
        (seen, w.report())
    }

    #[test]
    fn catch_ups_far_apart_for_their_cost_build_the_cache_lead_a_run_at_a_time() {
        let lead = 8 * INLINE_RUN;
        let (seen, report) =
            write_with_catch_ups(Duration::ZERO, Duration::from_millis(10), lead, 24);
        assert!(report.cache_lead_active);
        assert_eq!(report.cache_lead_bytes, lead);
        assert!(report.mode_description().contains("512 KiB ready ahead"));
        // No catch-up prepares more than what it needs and two runs.
        assert!(seen.iter().all(|&(_, _, runs)| runs <= 3), "{seen:?}");
        // The lead grows and is then kept: one run per catch-up, the
        // frontier between the lead and the lead plus a run ahead.
        let (need, frontier, runs) = *seen.last().unwrap();
        assert_eq!(runs, 1, "{seen:?}");
        assert!(
            frontier >= need + lead - 2 * INLINE_RUN && frontier <= need + lead,
            "{seen:?}"
        );
    }

    #[test]
    fn catch_ups_that_build_the_lead_still_count_for_the_pattern() {
        // A writer with no idle time whose catch-ups are far apart (it
        // writes slowly): once the lead is built no catch-up has to prepare
        // what it needs, but each prepares a run on its append path.
        let l = log(u64::MAX);
        let mut w = Window::start(
            0,
            IDLE_PIECE,
            0,
            CFG,
            Box::new(Arc::clone(&l)),
            resolved(PreToucher::Idle, true),
            4 * INLINE_RUN,
        )
        .unwrap();
        let mut come_back = 0;
        let mut switched_at = None;
        for k in 1..=24 {
            let switched;
            (_, come_back, switched) = catch_up_after(&mut w, Duration::from_millis(5), come_back);
            if switched {
                switched_at = Some(k);
                break;
            }
        }
        assert!(switched_at.is_some(), "{:?}", w.report());
        assert_eq!(w.report().mode, PreToucher::LowPriorityThread);
    }

    #[test]
    fn a_failed_run_of_the_lead_is_not_the_writers_error_and_is_not_counted_ready() {
        let lead = 8 * INLINE_RUN;
        let l = log(4 * INLINE_RUN);
        let mut w = Window::start(
            0,
            IDLE_PIECE,
            0,
            CFG,
            Box::new(Arc::clone(&l)),
            idle(),
            lead,
        )
        .unwrap();
        let mut come_back = 0;
        for _ in 0..3 {
            (_, come_back, _) = catch_up_after(&mut w, Duration::from_millis(10), come_back);
            assert!(w.frontier() <= 4 * INLINE_RUN);
        }
        // The lead's runs stopped at the failing piece; the writer meets
        // the error only when it needs that piece.
        assert_eq!(w.frontier(), 4 * INLINE_RUN);
        assert!(w.catch_up(4 * INLINE_RUN + 8).is_err());
    }

    #[test]
    fn a_thread_of_normal_priority_keeps_no_cache_lead() {
        let l = log(u64::MAX);
        let mut w = Window::start(
            0,
            1 << 16,
            0,
            CFG,
            Box::new(Arc::clone(&l)),
            thread(),
            1 << 20,
        )
        .unwrap();
        assert_eq!(w.report().cache_lead_bytes, 0);
        let (ready, _) = w.catch_up(8).unwrap();
        assert!(ready <= w.frontier());
    }

    #[test]
    fn catch_ups_that_take_as_long_as_the_writing_between_them_build_no_lead() {
        let lead = 8 * INLINE_RUN;
        let (seen, report) =
            write_with_catch_ups(Duration::from_millis(2), Duration::ZERO, lead, 12);
        assert!(!report.cache_lead_active);
        for &(need, frontier, runs) in &seen {
            assert_eq!(runs, 1, "{seen:?}");
            assert!(frontier < need + INLINE_RUN, "{seen:?}");
        }
    }

    #[test]
    fn the_cache_lead_is_twice_the_l2_within_bounds() {
        assert_eq!(cache_lead(Some(2 << 20)), 4 << 20);
        assert_eq!(cache_lead(Some(512 << 10)), 1 << 20);
        assert_eq!(cache_lead(None), 4 << 20);
        assert_eq!(cache_lead(Some(u64::MAX)), 64 << 20);
    }

    #[test]
    fn inline_window_prepares_exactly_what_is_needed() {
        let l = log(u64::MAX);
        let w = Window::start(100, 1 << 16, 100, CFG, Box::new(Arc::clone(&l)), idle(), 0).unwrap();
        assert_eq!(w.frontier(), 100);
        assert_eq!(w.wait_ready(101).unwrap(), 100 + (1 << 16));
        assert_eq!(
            w.wait_ready(100 + 3 * (1 << 16)).unwrap(),
            100 + 3 * (1 << 16)
        );
        assert_eq!(
            *l.pieces.lock().unwrap(),
            [100, 100 + (1 << 16), 100 + 2 * (1 << 16)]
        );
        assert_eq!(w.report().pieces_inline, 3);
    }

    #[test]
    fn a_run_of_small_pieces_is_one_call_and_a_failed_run_is_given_back_whole() {
        let piece = 4 << 10;
        let l = log(u64::MAX);
        let w = Window::start(0, piece, 0, CFG, Box::new(Arc::clone(&l)), idle(), 0).unwrap();
        // One byte past the first piece: the catch-up prepares a whole
        // 64 KiB run in one call and counts each of its 16 pieces.
        assert_eq!(w.wait_ready(piece + 1).unwrap(), INLINE_RUN);
        assert_eq!(*l.pieces.lock().unwrap(), [0]);
        assert_eq!(w.report().pieces_inline, INLINE_RUN / piece);
        // The next run fails: nothing of it counts, and the retry starts at
        // its first piece, not past it.
        l.fail_from.store(INLINE_RUN, Ordering::Relaxed);
        assert!(w.wait_ready(INLINE_RUN + 1).is_err());
        assert_eq!(w.frontier(), INLINE_RUN);
        assert_eq!(w.report().pieces_inline, INLINE_RUN / piece);
        l.fail_from.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(w.wait_ready(INLINE_RUN + 1).unwrap(), 2 * INLINE_RUN);
        assert_eq!(*l.pieces.lock().unwrap(), [0, INLINE_RUN]);
        assert_eq!(w.report().pieces_inline, 2 * INLINE_RUN / piece);
    }

    #[test]
    fn a_failed_run_whose_first_pieces_were_done_by_the_other_side_gives_back_the_rest() {
        // The thread claimed pieces 0-3; the writer, not waiting for it,
        // prepared and recorded 0 and 1 itself; then the thread's run fails.
        // Pieces 2 and 3 must be claimable again (before, a failed run whose
        // first piece was late returned early and left them unclaimed below
        // `next`, so `lowest_unclaimed` skipped them), and 0-1 stay counted once.
        let piece = 4 << 10;
        let l = log(u64::MAX);
        let w = Window::start(0, piece, 0, CFG, Box::new(Arc::clone(&l)), idle(), 0).unwrap();
        let s = &*w.shared;
        let mut state = s.lock();
        for i in 0..4 {
            Shared::claim(&mut state, i);
        }
        s.complete(state, 0, 2, Ok(()), Preparer::Inline).unwrap();
        assert_eq!(w.frontier(), 2 * piece);
        let failed = Err(QueueError::InvalidOptions("no space".into()));
        assert!(s
            .complete(s.lock(), 0, 4, failed, Preparer::Background)
            .is_err());
        let state = s.lock();
        assert!(state.inflight.is_empty());
        assert_eq!(state.lowest_unclaimed(), 2);
        assert_eq!(state.next, 2);
        drop(state);
        assert_eq!(w.report().pieces_inline, 2);
        assert_eq!(w.report().pieces_background, 0);
        // A late success of pieces the writer already recorded counts nothing.
        s.complete(s.lock(), 0, 2, Ok(()), Preparer::Background)
            .unwrap();
        assert_eq!(w.report().pieces_background, 0);
        assert_eq!(w.frontier(), 2 * piece);
    }

    #[test]
    fn background_thread_keeps_the_window_but_no_more() {
        let l = log(u64::MAX);
        let w = Window::start(0, 1 << 16, 0, CFG, Box::new(Arc::clone(&l)), thread(), 0).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while w.frontier() < CFG.window && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            w.frontier(),
            CFG.window,
            "the window is filled, and not overfilled"
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.frontier(), CFG.window);
        w.note(CFG.window);
        assert!(w.wait_ready(CFG.window + 1).unwrap() > CFG.window);
        drop(w);
        let pieces = l.pieces.lock().unwrap();
        let mut sorted = pieces.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), pieces.len(), "no piece prepared twice");
    }

    /// Prepares nothing; stalls for `stall` on the background thread, as a
    /// lowest-priority thread that gets no CPU would.
    struct Stalling {
        stall: Duration,
    }

    impl Prepare for Stalling {
        fn prepare(&self, _offset: u64, _len: u64) -> Result<(), QueueError> {
            if std::thread::current().name() == Some("pagewise-pretouch") {
                std::thread::sleep(self.stall);
            }
            Ok(())
        }
    }

    #[test]
    fn a_writer_without_idle_time_gets_a_low_priority_thread_and_never_waits_for_it() {
        let cfg = PreTouch {
            window: 1 << 20,
            max_window: 1 << 20,
            lead: Duration::from_millis(1),
            mode: PreTouchMode::Auto,
        };
        let stall = Duration::from_secs(3);
        let mut w = Window::start(
            0,
            IDLE_PIECE,
            0,
            cfg,
            Box::new(Stalling { stall }),
            resolved(PreToucher::Idle, true),
            0,
        )
        .unwrap();
        // Back to back: each catch-up prepares one 64 KiB run.
        let mut pos = 0;
        let mut switched_at = None;
        for k in 1..=16u64 {
            pos = k * INLINE_RUN;
            w.note(pos - 8);
            let (ready, switched) = w.catch_up(pos).unwrap();
            assert!(ready >= pos);
            if switched {
                switched_at = Some(k);
                break;
            }
        }
        assert_eq!(
            switched_at,
            Some(crate::queue::pattern::CATCH_UPS_TO_THREAD as u64)
        );
        let report = w.report();
        assert_eq!(report.mode, PreToucher::LowPriorityThread);
        assert_eq!(report.switches, 1);
        assert_eq!(w.header_words().0, PreToucher::LowPriorityThread.code());
        // The thread claims the next run and stalls in it; the writer
        // prepares what it needs itself instead of waiting.
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        for _ in 0..8 {
            pos += INLINE_RUN;
            w.note(pos - 8);
            assert!(w.catch_up(pos).unwrap().0 >= pos);
        }
        assert!(
            started.elapsed() < stall / 2,
            "the writer waited for the stalled thread: {:?}",
            started.elapsed()
        );
        // Idle time again: enough idle_work calls stop the thread.
        let mut back = false;
        let started = Instant::now();
        for _ in 0..crate::queue::pattern::IDLE_CALLS_TO_RETURN {
            back |= w.idle_step().unwrap().1;
        }
        assert!(back);
        assert!(
            started.elapsed() < stall / 2,
            "idle_work waited for the stalled thread to stop: {:?}",
            started.elapsed()
        );
        assert_eq!(w.report().mode, PreToucher::Idle);
        assert_eq!(w.report().switches, 2);
        assert!(
            !w.shared.active.load(Ordering::Relaxed),
            "the thread sleeps"
        );
        // The stalled run ends long after the writer prepared those pieces
        // itself: its late completion counts nothing.
        let inline_before = w.report().pieces_inline;
        std::thread::sleep(stall + Duration::from_millis(300));
        let after = w.report();
        assert_eq!(after.pieces_background, 0, "{after:?}");
        assert_eq!(after.pieces_inline, inline_before);
        assert_eq!(after.last_error, None);
    }

    /// Logs both steps of idle-time preparation.
    #[derive(Default)]
    struct TwoSteps {
        steps: StdMutex<Vec<(&'static str, u64)>>,
        reserved: AtomicU64,
    }

    impl Prepare for Arc<TwoSteps> {
        fn prepare(&self, offset: u64, _len: u64) -> Result<(), QueueError> {
            self.steps.lock().unwrap().push(("prepare", offset));
            Ok(())
        }

        fn reserve(&self, offset: u64, _len: u64) -> Result<bool, QueueError> {
            if self.reserved.swap(offset + 1, Ordering::Relaxed) == offset + 1 {
                return Ok(false);
            }
            self.steps.lock().unwrap().push(("reserve", offset));
            Ok(true)
        }
    }

    #[test]
    fn idle_time_work_reserves_a_piece_in_one_call_and_prepares_it_in_the_next() {
        let piece = IDLE_PIECE;
        let t = Arc::new(TwoSteps::default());
        let mut w = Window::start(0, piece, 0, CFG, Box::new(Arc::clone(&t)), idle(), 0).unwrap();
        for _ in 0..4 {
            assert!(w.idle_step().unwrap().0);
        }
        assert_eq!(
            *t.steps.lock().unwrap(),
            [
                ("reserve", 0),
                ("prepare", 0),
                ("reserve", piece),
                ("prepare", piece)
            ]
        );
        assert_eq!(w.frontier(), 2 * piece);
        assert_eq!(w.report().pieces_idle, 2);
        // A reserved piece the writer then needs at once is prepared whole
        // by the catch-up (its 64 KiB run).
        assert!(w.idle_step().unwrap().0);
        assert_eq!(w.wait_ready(2 * piece + 1).unwrap(), INLINE_RUN);
        assert_eq!(
            t.steps.lock().unwrap().last(),
            Some(&("prepare", 2 * piece))
        );
    }

    #[test]
    fn errors_reach_the_writer_and_the_piece_can_be_retried() {
        let l = log(2 << 16);
        let w = Window::start(0, 1 << 16, 0, CFG, Box::new(Arc::clone(&l)), thread(), 0).unwrap();
        let err = w.wait_ready(3 << 16).unwrap_err();
        assert!(err.to_string().contains("no space at 131072"), "{err}");
        // Space comes back: the same piece now succeeds.
        l.fail_from.store(u64::MAX, Ordering::Relaxed);
        assert!(w.wait_ready(3 << 16).unwrap() >= 3 << 16);
    }
}
