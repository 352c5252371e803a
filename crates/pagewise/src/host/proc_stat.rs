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
    })
}

/// The stat fields of process `pid`, or `None` when it is gone or the file
/// does not parse. One read of the file.
pub fn read(pid: i32) -> Option<ProcStat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
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
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn this_process_has_a_thread() {
        let s = read(std::process::id() as i32).expect("our own stat parses");
        assert!(s.threads >= 1);
    }
}
