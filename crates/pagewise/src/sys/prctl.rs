//! `prctl` calls: THP opt-out, anonymous VMA names, `no_new_privs`.

use super::{SysError, SysResult};
use std::ffi::CString;

const PR_SET_VMA: libc::c_int = 0x5356_4d41;
const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;

/// Whether transparent huge pages are disabled for this process
/// (`PR_GET_THP_DISABLE`). One `prctl` call.
pub fn thp_disabled() -> SysResult<bool> {
    // SAFETY: PR_GET_THP_DISABLE takes no pointer arguments.
    let rc = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    if rc < 0 {
        return Err(SysError::last("prctl(PR_GET_THP_DISABLE)"));
    }
    Ok(rc != 0)
}

/// Whether this process has `no_new_privs` set (`PR_GET_NO_NEW_PRIVS`: then
/// `exec` ignores set-user-ID and set-group-ID bits). One `prctl` call.
pub fn no_new_privs() -> SysResult<bool> {
    // SAFETY: PR_GET_NO_NEW_PRIVS takes no pointer arguments.
    let rc = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    if rc < 0 {
        return Err(SysError::last("prctl(PR_GET_NO_NEW_PRIVS)"));
    }
    Ok(rc != 0)
}

/// Disables (`true`) or re-enables THP for this process and the children it
/// starts afterwards (`PR_SET_THP_DISABLE`). One `prctl` call.
pub fn set_thp_disabled(disabled: bool) -> SysResult<()> {
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointers.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            libc::c_ulong::from(disabled),
            0,
            0,
            0,
        )
    };
    if rc < 0 {
        return Err(SysError::last("prctl(PR_SET_THP_DISABLE)"));
    }
    Ok(())
}

/// Names the anonymous memory in `[addr, addr + len)` so that it shows as
/// `[anon:NAME]` in `/proc/PID/maps` (`PR_SET_VMA_ANON_NAME`, Linux 5.17+ with
/// `CONFIG_ANON_VMA_NAME`). Changes no memory; fails with `EINVAL` where the
/// kernel lacks the feature. One `prctl` call.
pub fn set_vma_anon_name(addr: usize, len: usize, name: &str) -> SysResult<()> {
    let name = CString::new(name).map_err(|_| SysError {
        call: "prctl(PR_SET_VMA_ANON_NAME)",
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    // SAFETY: the kernel copies the NUL-terminated name, which outlives the call; naming a
    // range only changes VMA metadata and cannot affect memory contents.
    let rc = unsafe {
        libc::prctl(
            PR_SET_VMA,
            PR_SET_VMA_ANON_NAME,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            name.as_ptr() as libc::c_ulong,
        )
    };
    if rc < 0 {
        return Err(SysError::last("prctl(PR_SET_VMA_ANON_NAME)"));
    }
    Ok(())
}
