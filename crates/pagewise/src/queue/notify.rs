//! Waking readers that block, without readers writing anything.
//!
//! Readers map the queue read-only and sleep with `FUTEX_WAIT` on the low
//! half of one header word (the *wake word*) that only the writer changes.
//! The writer must call `FUTEX_WAKE` when a reader may be asleep, and must
//! not make a system call per append when none is. It cannot learn from the
//! readers whether one sleeps (they write nowhere), so the two follow a rule
//! that lets the writer know without being told:
//!
//! - The wake word holds `seq` (bits 0–31, the futex word, +1 on every
//!   commit), an *eager* flag (bit 32) and a *time* `P` (bits 33–63): a
//!   reading of `CLOCK_MONOTONIC_COARSE` in units of 2^20 ns, the clock the
//!   kernel advances once per tick and every process reads from the same
//!   memory.
//! - **Reader:** loads the word, looks for a record once more, reads the
//!   coarse clock (`now`), then sleeps on `seq` — for as long as it likes
//!   only if the word is eager or `now` is later than `P`; otherwise for at
//!   most [`SHORT_SLEEP`] at a time.
//! - **Writer**, on each commit: stores the new word (new `seq`, `P` = its
//!   previous clock reading, eager if its last wake woke someone) with a
//!   full barrier after it (a `SeqCst` fence; on x86-64 the store is a
//!   locked exchange, which is one), then calls `FUTEX_WAKE` if the *previous* word was
//!   eager, or if the coarse clock it reads now is later than the previous
//!   word's `P`. Otherwise no system call: the store with its barrier and a vDSO read
//!   of memory (a few nanoseconds).
//!
//! Why a sleeping reader is never missed: say a reader loaded word `k`
//! (`seq` S, time P) and sleeps long on S, and append `k+1` makes no wake
//! call. Then word `k` was not eager, so the reader slept long because its
//! clock reading `r` was later than P, and the writer's reading `c`, taken
//! after its fence made word `k+1` visible to all, was not later than P; so
//! `c < r`. The coarse clock is one memory location the kernel only moves
//! forward; on x86-64 (total store order) the writer's read saw the older
//! value, so word `k+1` was visible before the kernel stored the newer value
//! the reader read, before the reader's `FUTEX_WAIT` compared the futex word:
//! the compare sees `seq` changed and the reader does not sleep. If append
//! `k+1` does call `FUTEX_WAKE`, the usual futex guarantee wakes the reader.
//!
//! What that costs: right after a record (until the clock ticks past `P`, a
//! few ms) a reader that is not told "eager" naps in [`SHORT_SLEEP`] steps
//! (records then wait up to that long). Once a wake finds a sleeper, the
//! writer publishes eager and wakes on every append while wakes keep finding
//! sleepers, so readers that block are woken at once; when a wake finds
//! none, the writer stops. Any process that can read the file can make wakes
//! find a sleeper, and so make the writer call `FUTEX_WAKE` on each append:
//! the worst a reader can do is cost the writer a system call per append.
//!
//! Every reader also sleeps at most [`LONG_SLEEP`] at a time, so a writer that
//! died between its store and its wake, or a reader in another time
//! namespace (whose coarse clock differs), only delays records, by at most
//! that.

use super::layout::OFF_WAKE;
use crate::sys::clock::monotonic_coarse_ns;
use crate::sys::file_map::WriteMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The longest nap of a reader whose writer may not wake it.
pub(crate) const SHORT_SLEEP: Duration = Duration::from_micros(100);
/// The longest sleep of any reader between looks at the queue.
pub(crate) const LONG_SLEEP: Duration = Duration::from_millis(250);

const EAGER: u64 = 1 << 32;
const TIME_SHIFT: u32 = 33;
/// Times are 31-bit: they wrap every 2^31 × 2^20 ns (about 26 days).
const TIME_MASK: u32 = (1 << 31) - 1;

/// The side file of queues written by pagewise before readers slept on the
/// queue's own header: `<queue>.wait`. Nothing creates, opens or trusts it any
/// more; remove a leftover one when cleaning up a queue.
pub fn wait_path(queue: &Path) -> PathBuf {
    let mut p = queue.as_os_str().to_owned();
    p.push(".wait");
    PathBuf::from(p)
}

/// The coarse clock in units of 2^20 ns (about 1 ms), 31 bits.
#[inline]
fn coarse_now() -> u32 {
    (monotonic_coarse_ns() >> 20) as u32 & TIME_MASK
}

/// Whether coarse time `now` is later than `then` (wrapping).
#[inline]
fn later(now: u32, then: u32) -> bool {
    let d = now.wrapping_sub(then) & TIME_MASK;
    d != 0 && d < 1 << 30
}

/// A decoded wake word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakeWord {
    /// The futex word: changes with every commit.
    pub(crate) seq: u32,
    /// The writer wakes on the next commit whatever the clock says.
    eager: bool,
    /// Coarse time the writer compares the clock with on the next commit.
    time: u32,
}

impl WakeWord {
    pub(crate) fn decode(raw: u64) -> WakeWord {
        WakeWord {
            seq: raw as u32,
            eager: raw & EAGER != 0,
            time: (raw >> TIME_SHIFT) as u32 & TIME_MASK,
        }
    }

    fn encode(self) -> u64 {
        u64::from(self.seq)
            | if self.eager { EAGER } else { 0 }
            | (u64::from(self.time & TIME_MASK) << TIME_SHIFT)
    }

    /// How long a reader that loaded this word and found no record may
    /// sleep on `seq` (see the module doc). Reads the coarse clock.
    pub(crate) fn sleep_limit(self) -> Duration {
        if self.eager || later(coarse_now(), self.time) {
            LONG_SLEEP
        } else {
            SHORT_SLEEP
        }
    }
}

/// The writer's side: publishes each commit and wakes sleepers when the
/// protocol says one may be asleep.
#[derive(Debug)]
pub(crate) struct Waker {
    /// The word as last stored.
    word: WakeWord,
    /// The writer's latest clock reading: the next word's time.
    last_now: u32,
    /// The last wake woke someone: publish eager.
    eager: bool,
    /// `FUTEX_WAKE` calls made.
    wakes: u64,
    /// Readers those calls woke.
    woken: u64,
    /// The last `FUTEX_WAKE` error, if one failed.
    error: Option<String>,
}

impl Waker {
    /// Takes over the wake word of `header` and wakes every reader asleep on
    /// it (they may have slept on a writer that died). One `FUTEX_WAKE`.
    pub(crate) fn open(header: &WriteMap) -> Waker {
        let mut word = WakeWord::decode(header.load_u64(OFF_WAKE, Ordering::Acquire).unwrap_or(0));
        // As if the last word were eager: the first notify wakes whatever the clock says.
        word.eager = true;
        let mut waker = Waker {
            word,
            last_now: coarse_now(),
            eager: true,
            wakes: 0,
            woken: 0,
            error: None,
        };
        waker.notify(header);
        waker
    }

    /// Publishes a commit: a store with a full barrier, a coarse clock read, and a
    /// `FUTEX_WAKE` only when a reader may be asleep.
    #[inline]
    pub(crate) fn notify(&mut self, header: &WriteMap) {
        let previous = self.word;
        self.word = WakeWord {
            seq: previous.seq.wrapping_add(1),
            eager: self.eager,
            time: self.last_now,
        };
        // Makes the new word visible to all before the clock is read (the
        // order the module doc's argument rests on).
        header.store_u64_then_full_fence(OFF_WAKE, self.word.encode());
        let wake = previous.eager || {
            self.last_now = coarse_now();
            later(self.last_now, previous.time)
        };
        if wake {
            self.wake(header);
        }
    }

    #[cold]
    fn wake(&mut self, header: &WriteMap) {
        self.wakes += 1;
        match header.futex_wake(OFF_WAKE, u32::MAX) {
            Ok(woken) => {
                self.eager = woken > 0;
                self.woken += u64::from(woken);
            }
            Err(e) => {
                self.eager = false;
                self.error = Some(e.to_string());
            }
        }
    }

    /// `FUTEX_WAKE` calls made so far.
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes
    }

    /// Readers the `FUTEX_WAKE` calls woke so far.
    pub(crate) fn woken(&self) -> u64 {
        self.woken
    }

    /// Why the last failed `FUTEX_WAKE` failed.
    pub(crate) fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for w in [
            WakeWord {
                seq: 0,
                eager: false,
                time: 0,
            },
            WakeWord {
                seq: u32::MAX,
                eager: true,
                time: TIME_MASK,
            },
            WakeWord {
                seq: 7,
                eager: false,
                time: 12345,
            },
        ] {
            assert_eq!(WakeWord::decode(w.encode()), w);
            assert_eq!(w.encode() as u32, w.seq, "the futex word is the low half");
        }
    }

    #[test]
    fn later_wraps() {
        assert!(later(5, 4));
        assert!(!later(4, 4));
        assert!(!later(4, 5));
        assert!(later(0, TIME_MASK));
        assert!(!later(TIME_MASK, 0));
    }
}
