//! The only place in pagewise that makes raw system calls or uses `unsafe`.
//!
//! Each submodule wraps one family of kernel interfaces in small, typed, safe
//! functions. Every `unsafe` block carries a `// SAFETY:` line saying why it is
//! sound. Code above this layer never touches raw pointers or errno.

pub mod clock;
pub mod copy;
pub mod cpu;
pub mod create;
pub mod dl;
pub mod file;
pub mod file_map;
pub mod guard;
pub mod libc_info;
pub mod mem;
pub mod pagemap;
pub mod perf;
pub mod poll;
pub mod prctl;
pub mod process;
pub mod sigbus;
pub mod text;
pub mod time;
pub mod tlb;
pub mod tracefs;

use std::io;

/// A failed system call: which call, and the errno it returned.
///
/// Cheap to create; carries no allocation beyond the `io::Error`. Its
/// message includes the errno's, so it reports no separate `source()`: an
/// error chain printed in one line then says the cause once, not
/// "…: Is a directory (os error 21): Is a directory (os error 21)".
#[derive(Debug)]
pub struct SysError {
    /// The system call (or libc function) that failed, for example `"mmap"`.
    pub call: &'static str,
    /// The errno, as an `io::Error`.
    pub source: io::Error,
}

impl std::fmt::Display for SysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.source)
    }
}

impl std::error::Error for SysError {}

impl SysError {
    /// Captures `errno` right after a failed call.
    pub(crate) fn last(call: &'static str) -> Self {
        SysError {
            call,
            source: io::Error::last_os_error(),
        }
    }

    /// The errno, if the error came from the OS: compare it with the
    /// [`Errno`] constants (`e.errno() == Some(Errno::INVAL)`).
    pub fn errno(&self) -> Option<Errno> {
        Errno::of(&self.source)
    }

    /// Whether the errno is one of `any`.
    pub fn errno_is(&self, any: &[Errno]) -> bool {
        self.errno().is_some_and(|e| any.contains(&e))
    }
}

/// An errno value, named: code above `sys` compares with these constants and
/// never with `libc`'s. Costs nothing (a wrapped `i32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

impl Errno {
    /// Operation not permitted.
    pub const PERM: Errno = Errno(libc::EPERM);
    /// No such file or directory.
    pub const NOENT: Errno = Errno(libc::ENOENT);
    /// Interrupted system call.
    pub const INTR: Errno = Errno(libc::EINTR);
    /// Input/output error.
    pub const IO: Errno = Errno(libc::EIO);
    /// Resource temporarily unavailable.
    pub const AGAIN: Errno = Errno(libc::EAGAIN);
    /// Cannot allocate memory.
    pub const NOMEM: Errno = Errno(libc::ENOMEM);
    /// Permission denied.
    pub const ACCES: Errno = Errno(libc::EACCES);
    /// File exists.
    pub const EXIST: Errno = Errno(libc::EEXIST);
    /// No such device.
    pub const NODEV: Errno = Errno(libc::ENODEV);
    /// No such device or address (opening a FIFO for writing with no reader).
    pub const NXIO: Errno = Errno(libc::ENXIO);
    /// Too many levels of symbolic links (`O_NOFOLLOW` met a link).
    pub const LOOP: Errno = Errno(libc::ELOOP);
    /// Result out of range (a size past what a mapping reserved).
    pub const RANGE: Errno = Errno(libc::ERANGE);
    /// Device or resource busy.
    pub const BUSY: Errno = Errno(libc::EBUSY);
    /// Is a directory.
    pub const ISDIR: Errno = Errno(libc::EISDIR);
    /// Connection timed out (a futex wait that timed out).
    pub const TIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    /// Invalid argument.
    pub const INVAL: Errno = Errno(libc::EINVAL);
    /// Inappropriate ioctl for device (an ioctl this kernel does not know).
    pub const NOTTY: Errno = Errno(libc::ENOTTY);
    /// File too large.
    pub const FBIG: Errno = Errno(libc::EFBIG);
    /// No space left on device.
    pub const NOSPC: Errno = Errno(libc::ENOSPC);
    /// Function not implemented.
    pub const NOSYS: Errno = Errno(libc::ENOSYS);
    /// Operation not supported.
    pub const OPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// Disk quota exceeded.
    pub const DQUOT: Errno = Errno(libc::EDQUOT);

    /// The errno of an OS error, if it is one.
    pub fn of(error: &io::Error) -> Option<Errno> {
        error.raw_os_error().map(Errno)
    }

    /// An errno from its number (as a child process or a C caller reports it).
    pub fn from_raw(raw: i32) -> Errno {
        Errno(raw)
    }

    /// The number, for a C caller or a process exit status.
    pub fn raw(self) -> i32 {
        self.0
    }

    /// The `io::Error` of this errno (its message is the C library's).
    pub fn io_error(self) -> io::Error {
        io::Error::from_raw_os_error(self.0)
    }
}

/// Result of a wrapped system call.
pub type SysResult<T> = Result<T, SysError>;

/// The base page size of this machine in bytes (4096 on x86-64).
///
/// Costs one `sysconf` call.
pub fn base_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sys_error_says_its_cause_once() {
        let e = super::SysError {
            call: "open",
            source: std::io::Error::from_raw_os_error(libc::EISDIR),
        };
        let mut chain = vec![e.to_string()];
        let mut next = std::error::Error::source(&e);
        while let Some(s) = next {
            chain.push(s.to_string());
            next = s.source();
        }
        assert_eq!(
            chain.join(": "),
            "open failed: Is a directory (os error 21)"
        );
    }
}
