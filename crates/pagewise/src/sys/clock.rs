//! Clocks whose readings mean the same thing in every process.

/// Reads `clock` in nanoseconds; `clock` must be one that always exists.
#[inline]
fn read_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; callers pass CLOCK_MONOTONIC,
    // CLOCK_MONOTONIC_COARSE or CLOCK_THREAD_CPUTIME_ID, which exist on every
    // supported kernel (2.6.32+).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for the whole machine, so a
/// timestamp taken in one process can be compared with one taken in another.
/// Costs one vDSO call (tens of nanoseconds; no system call).
#[inline]
pub fn monotonic_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the same clock as
/// [`monotonic_ns`], but only as fine as the kernel's tick (1–4 ms) and read
/// from memory the kernel updates at each tick, with no counter read: a
/// vDSO call of a few nanoseconds. Every process reads the same value (in
/// the same time namespace), and it never goes back.
#[inline]
pub fn monotonic_coarse_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// CPU time the calling thread has used, user and kernel, in nanoseconds
/// (`CLOCK_THREAD_CPUTIME_ID`: the scheduler's exact runtime, not ticks).
/// Time the thread spends preempted or waiting is not counted, so a loop timed
/// with it measures its own work even on a loaded machine. One vDSO call or a
/// fast system call.
pub fn thread_cpu_ns() -> u64 {
    read_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_advances() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::monotonic_ns();
        assert!(b >= a + 1_000_000, "{a} {b}");
    }

    #[test]
    fn coarse_follows_the_fine_clock() {
        let coarse = super::monotonic_coarse_ns();
        let fine = super::monotonic_ns();
        // The coarse clock is the fine one as of the last tick (at most a few ms old).
        assert!(
            coarse <= fine && fine - coarse < 1_000_000_000,
            "{coarse} {fine}"
        );
        let start = super::monotonic_coarse_ns();
        while super::monotonic_coarse_ns() == start {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let a = super::thread_cpu_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = super::thread_cpu_ns();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let c = super::thread_cpu_ns();
        assert!(b - a < 10_000_000, "sleeping used {} ns of CPU", b - a);
        assert!(
            c - b >= 1_000_000,
            "spinning 20 ms used only {} ns of CPU",
            c - b
        );
    }
}
