//! The writer's pattern, as [`PreTouchMode::Auto`](super::PreTouchMode::Auto)
//! sees it on a machine with no CPU to spare: does the writer have idle time
//! to prepare its own window, or does it keep catching up with the window
//! and preparing pages on its append path?
//!
//! Pure logic, fed two events by the writer: *caught up* (an append found the
//! prepared window ending before its record and prepared the next run
//! itself, up to 64 KiB) and *idled* (a call of `Writer::idle_work`). It
//! never reads a clock: the spans are bytes written, so a slow writer and a
//! fast one are judged by the same rule.
//!
//! - **Idle time → low-priority thread:** [`CATCH_UPS_TO_THREAD`] catch-ups
//!   within the last [`CATCH_UP_SPAN`] bytes written. A writer that never
//!   idles catches up once per 64 KiB (16 times per MiB); one that calls
//!   `idle_work` while it waits keeps the window ahead and catches up only
//!   when a burst outruns the whole window.
//! - **Thread → idle time:** while the thread runs, the writer called
//!   `idle_work` at least [`IDLE_CALLS_TO_RETURN`] × 2^(returns so far)
//!   times, and enough times that half a 4 KiB page per call (a call
//!   allocates a page or faults one in) would have prepared twice the bytes
//!   it wrote meanwhile. The doubling is the hysteresis: a writer that
//!   alternates bursts and pauses switches less and less often instead of
//!   flapping.

/// Catch-ups within [`CATCH_UP_SPAN`] that start the thread: half the
/// catch-ups of a writer that never idles (16 per MiB), so that at least
/// half of the last MiB was prepared on the append path.
pub(crate) const CATCH_UPS_TO_THREAD: usize = 8;

/// The span of bytes written over which catch-ups are counted.
pub(crate) const CATCH_UP_SPAN: u64 = 1 << 20;

/// `idle_work` calls (doubled after each return) that stop the thread.
pub(crate) const IDLE_CALLS_TO_RETURN: u64 = 4096;

/// Bytes one `idle_work` call prepares: half a page (it allocates a page,
/// or faults in the page the call before allocated).
const IDLE_CALL_BYTES: u64 = 2 << 10;

/// The largest doubling of [`IDLE_CALLS_TO_RETURN`].
const MAX_RETURN_SHIFT: u32 = 20;

/// What the watcher decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Switch {
    /// Start the low-priority thread; why.
    ToThread(String),
    /// Stop it and go back to idle-time work; why.
    ToIdle(String),
}

/// Watches the writer's pattern; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct PatternWatch {
    thread: bool,
    /// Positions of the last catch-ups, a ring.
    recent: [u64; CATCH_UPS_TO_THREAD],
    next: usize,
    seen: usize,
    /// While the thread runs: where the current span of idle calls started.
    span_start: u64,
    idle_calls: u64,
    returns: u32,
}

impl PatternWatch {
    /// A watcher of a writer in idle-time mode at `pos`.
    pub(crate) fn new(pos: u64) -> PatternWatch {
        PatternWatch {
            thread: false,
            recent: [0; CATCH_UPS_TO_THREAD],
            next: 0,
            seen: 0,
            span_start: pos,
            idle_calls: 0,
            returns: 0,
        }
    }

    /// Whether the watcher has the thread running.
    #[cfg(test)]
    pub(crate) fn thread(&self) -> bool {
        self.thread
    }

    /// The writer caught up with the window at `pos` (bytes written so far).
    pub(crate) fn caught_up(&mut self, pos: u64) -> Option<Switch> {
        if self.thread {
            // The thread did not keep up (it yields to everything): evidence
            // of idle time counted so far does not hold any more.
            self.span_start = pos;
            self.idle_calls = 0;
            return None;
        }
        self.recent[self.next] = pos;
        self.next = (self.next + 1) % CATCH_UPS_TO_THREAD;
        self.seen = (self.seen + 1).min(CATCH_UPS_TO_THREAD);
        // `next` now indexes the oldest of the last CATCH_UPS_TO_THREAD.
        let oldest = self.recent[self.next];
        if self.seen < CATCH_UPS_TO_THREAD || pos.saturating_sub(oldest) > CATCH_UP_SPAN {
            return None;
        }
        self.thread = true;
        self.seen = 0;
        self.span_start = pos;
        self.idle_calls = 0;
        Some(Switch::ToThread(format!(
            "the writer caught up with the window {} times within {} KiB written (no idle time to prepare it)",
            CATCH_UPS_TO_THREAD,
            pos.saturating_sub(oldest).div_ceil(1024)
        )))
    }

    /// The writer called `idle_work` at `pos`.
    pub(crate) fn idled(&mut self, pos: u64) -> Option<Switch> {
        if !self.thread {
            return None;
        }
        self.idle_calls += 1;
        let written = pos.saturating_sub(self.span_start);
        let needed = IDLE_CALLS_TO_RETURN << self.returns.min(MAX_RETURN_SHIFT);
        if self.idle_calls >= needed && self.idle_calls * IDLE_CALL_BYTES >= 2 * written {
            let calls = self.idle_calls;
            self.thread = false;
            self.returns += 1;
            self.seen = 0;
            return Some(Switch::ToIdle(format!(
                "the writer called idle_work {calls} times while it wrote {} KiB (idle time enough to prepare its window)",
                written.div_ceil(1024)
            )));
        }
        // Too few calls for the bytes written: start a new span.
        if self.idle_calls * IDLE_CALL_BYTES < 2 * written && written >= needed * IDLE_CALL_BYTES {
            self.span_start = pos;
            self.idle_calls = 0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: u64 = 64 << 10;

    #[test]
    fn a_writer_that_never_idles_gets_the_thread_after_half_a_mib() {
        let mut w = PatternWatch::new(0);
        let mut switched = None;
        for k in 1..=64u64 {
            if let Some(s) = w.caught_up(k * RUN) {
                switched = Some((k, s));
                break;
            }
        }
        let (k, s) = switched.expect("a switch");
        assert_eq!(k, CATCH_UPS_TO_THREAD as u64);
        assert!(
            matches!(s, Switch::ToThread(ref why) if why.contains("8 times within 448 KiB")),
            "{s:?}"
        );
        assert!(w.thread());
        // More catch-ups while the thread runs change nothing.
        for k in 65..200u64 {
            assert_eq!(w.caught_up(k * RUN), None);
        }
    }

    #[test]
    fn sparse_catch_ups_keep_idle_time_mode() {
        // A writer whose bursts outrun the window now and then: one catch-up
        // per 256 KiB is 4 per MiB, fewer than the 8 that start the thread.
        let mut w = PatternWatch::new(0);
        for k in 1..10_000u64 {
            assert_eq!(w.caught_up(k * (256 << 10)), None);
        }
        assert!(!w.thread());
    }

    #[test]
    fn a_writer_that_idles_stays_in_idle_time_mode() {
        let mut w = PatternWatch::new(0);
        let mut pos = 0;
        for _ in 0..1_000_000 {
            pos += 40;
            assert_eq!(w.idled(pos), None);
        }
        // The first window fill at open is one catch-up, not a pattern.
        assert_eq!(w.caught_up(pos), None);
        assert!(!w.thread());
    }

    /// Drives `w` through a burst of catch-ups; returns whether it switched.
    fn burst(w: &mut PatternWatch, pos: &mut u64) -> bool {
        let mut switched = false;
        for _ in 0..32 {
            *pos += RUN;
            switched |= matches!(w.caught_up(*pos), Some(Switch::ToThread(_)));
        }
        switched
    }

    /// Drives `w` through `calls` idle calls, 40 bytes written per call.
    fn pause(w: &mut PatternWatch, pos: &mut u64, calls: u64) -> bool {
        let mut switched = false;
        for _ in 0..calls {
            *pos += 40;
            switched |= matches!(w.idled(*pos), Some(Switch::ToIdle(_)));
        }
        switched
    }

    #[test]
    fn idle_time_stops_the_thread_and_the_return_needs_more_each_time() {
        let mut w = PatternWatch::new(0);
        let mut pos = 0;
        assert!(burst(&mut w, &mut pos));
        // Fewer idle calls than needed: the thread stays.
        assert!(!pause(&mut w, &mut pos, IDLE_CALLS_TO_RETURN - 1));
        assert!(pause(&mut w, &mut pos, 1));
        assert!(!w.thread());
        // Bursts and pauses alternating: the second return needs twice the
        // idle calls, the third four times.
        assert!(burst(&mut w, &mut pos));
        assert!(!pause(&mut w, &mut pos, IDLE_CALLS_TO_RETURN));
        assert!(pause(&mut w, &mut pos, IDLE_CALLS_TO_RETURN));
        assert!(burst(&mut w, &mut pos));
        assert!(!pause(&mut w, &mut pos, 3 * IDLE_CALLS_TO_RETURN));
        assert!(pause(&mut w, &mut pos, IDLE_CALLS_TO_RETURN));
    }

    #[test]
    fn alternating_bursts_and_short_pauses_do_not_flap() {
        // Pauses of 1000 idle calls between bursts: never enough to stop the
        // thread, so one switch in all.
        let mut w = PatternWatch::new(0);
        let mut pos = 0;
        let mut switches = 0;
        for _ in 0..1000 {
            switches += u32::from(burst(&mut w, &mut pos));
            switches += u32::from(pause(&mut w, &mut pos, 1000));
        }
        assert_eq!(switches, 1);
        assert!(w.thread());
    }

    #[test]
    fn idle_calls_too_few_for_the_bytes_written_do_not_stop_the_thread() {
        // One idle call per 8 KiB written: one page per call cannot keep up.
        let mut w = PatternWatch::new(0);
        let mut pos = 0;
        assert!(burst(&mut w, &mut pos));
        for _ in 0..100_000 {
            pos += 8 << 10;
            assert_eq!(w.idled(pos), None);
        }
        assert!(w.thread());
    }

    #[test]
    fn a_catch_up_while_the_thread_runs_restarts_the_count_of_idle_calls() {
        let mut w = PatternWatch::new(0);
        let mut pos = 0;
        assert!(burst(&mut w, &mut pos));
        assert!(!pause(&mut w, &mut pos, IDLE_CALLS_TO_RETURN - 1));
        assert_eq!(w.caught_up(pos), None);
        assert!(!pause(&mut w, &mut pos, IDLE_CALLS_TO_RETURN - 1));
        assert!(pause(&mut w, &mut pos, 1));
    }
}
