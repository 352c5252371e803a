//! Signals to processes.

use super::{SysError, SysResult};

/// Sends `SIGKILL` to process `pid`: it dies at once, running no destructors
/// and flushing nothing (what crash tests need). One `kill` call.
pub fn sigkill(pid: u32) -> SysResult<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| SysError {
        call: "kill",
        source: std::io::Error::from_raw_os_error(libc::ESRCH),
    })?;
    // SAFETY: kill takes integers; it does not touch our memory.
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    if rc != 0 {
        return Err(SysError::last("kill"));
    }
    Ok(())
}
