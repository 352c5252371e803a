//! Per-thread CPU time.

use super::{SysError, SysResult};

/// User and system CPU seconds consumed by the calling thread so far
/// (`getrusage(RUSAGE_THREAD)`), with its minor and major fault counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadUsage {
    /// User-mode CPU seconds.
    pub user_s: f64,
    /// Kernel-mode CPU seconds.
    pub sys_s: f64,
    /// Minor page faults.
    pub minor_faults: u64,
    /// Major page faults.
    pub major_faults: u64,
}

/// Reads the calling thread's usage. One `getrusage` call.
pub fn thread_usage() -> SysResult<ThreadUsage> {
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: usage is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc != 0 {
        return Err(SysError::last("getrusage(RUSAGE_THREAD)"));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(ThreadUsage {
        user_s: secs(usage.ru_utime),
        sys_s: secs(usage.ru_stime),
        minor_faults: usage.ru_minflt as u64,
        major_faults: usage.ru_majflt as u64,
    })
}
