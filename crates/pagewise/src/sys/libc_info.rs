//! Facts about the C library and process limits.

use super::{SysError, SysResult};
use std::ffi::CStr;

extern "C" {
    fn gnu_get_libc_version() -> *const libc::c_char;
}

/// The running glibc's version string, for example `"2.36"`.
///
/// Costs one libc call; returns `None` if the string is not valid UTF-8.
pub fn glibc_version() -> Option<String> {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string
    // owned by glibc for the life of the process.
    let version = unsafe { CStr::from_ptr(gnu_get_libc_version()) };
    version.to_str().ok().map(str::to_owned)
}

/// A soft and hard resource limit; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The limit in force.
    pub soft: Option<u64>,
    /// The ceiling an unprivileged process may raise `soft` to.
    pub hard: Option<u64>,
}

/// `RLIMIT_MEMLOCK` of this process, in bytes. One `getrlimit` call.
pub fn memlock_limit() -> SysResult<Limit> {
    let mut raw = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `raw` is a valid, writable rlimit struct.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut raw) };
    if rc != 0 {
        return Err(SysError::last("getrlimit"));
    }
    let finite = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok(Limit {
        soft: finite(raw.rlim_cur),
        hard: finite(raw.rlim_max),
    })
}

/// Whether this process runs with root's effective user id.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The effective user id of this process. One libc call.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// The effective group id of this process. One libc call.
pub fn effective_gid() -> u32 {
    // SAFETY: getegid cannot fail and has no preconditions.
    unsafe { libc::getegid() }
}
