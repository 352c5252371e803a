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

    /// The raw errno value, if the error came from the OS.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
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
