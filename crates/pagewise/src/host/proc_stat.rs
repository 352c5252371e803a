//! `/proc/PID/stat`: a process's fault counts, CPU times and thread count
//! (all threads, living and dead). [`parse`] is pure; [`read`] reads the live file.

/// The fields of `/proc/PID/stat` that `pagewise stat --pid` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// Minor faults of the process (all threads, living and dead).
    pub minor_faults: u64,
    /// Major faults.
    pub major_faults: u64,
    /// User time in clock ticks.
    pub utime_ticks: u64,
    /// System time in clock ticks.
    pub stime_ticks: u64,
    /// Number of threads.
    pub threads: u64,
    /// When the process started, in clock ticks since boot.
    pub start_ticks: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse(text: &str) -> Option<ProcStat> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    let get = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        minor_faults: get(10)?,
        major_faults: get(12)?,
        utime_ticks: get(14)?,
        stime_ticks: get(15)?,
        threads: get(20)?,
        start_ticks: get(22)?,
    })
}

/// The stat fields of process `pid`, or `None` when it is gone or the file
/// does not parse. One read of the file.
pub fn read(pid: i32) -> Option<ProcStat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// When process `pid` started, as wall-clock time: its start in ticks
/// since boot (`/proc/PID/stat`) plus the boot time (`btime` in
/// `/proc/stat`, whole seconds, so within a second). `None` when either
/// cannot be read. Two small file reads.
pub fn started_at(pid: i32) -> Option<std::time::SystemTime> {
    let start = read(pid)?.start_ticks;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let boot: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let ticks = crate::sys::process::clock_ticks_per_second();
    let since_boot = std::time::Duration::from_nanos(start.saturating_mul(1_000_000_000) / ticks);
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(boot) + since_boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields() {
        let text = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194304 262210 0 3 0 \
                    7 61 0 0 20 0 1 0 12345 1086935040 262270 18446744073709551615 \
                    1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse(text).unwrap();
        assert_eq!(s.minor_faults, 262210);
        assert_eq!(s.major_faults, 3);
        assert_eq!(s.utime_ticks, 7);
        assert_eq!(s.stime_ticks, 61);
        assert_eq!(s.threads, 1);
        assert_eq!(s.start_ticks, 12345);
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn this_process_started_in_the_last_hour_and_before_now() {
        let started = started_at(std::process::id() as i32).expect("our own start time");
        let now = std::time::SystemTime::now();
        // btime is whole seconds: allow one.
        assert!(started <= now + std::time::Duration::from_secs(1));
        assert!(
            now.duration_since(started).unwrap_or_default() < std::time::Duration::from_secs(3600)
        );
    }

    #[test]
    fn this_process_has_a_thread() {
        let s = read(std::process::id() as i32).expect("our own stat parses");
        assert!(s.threads >= 1);
    }
}
