//! Clocks whose readings mean the same thing in every process.

/// Reads `clock` in nanoseconds; `clock` must be one that always exists.
#[inline]
fn read_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; callers pass CLOCK_MONOTONIC or
    // CLOCK_MONOTONIC_COARSE, which exist on every supported kernel (2.6.32+).
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
}
