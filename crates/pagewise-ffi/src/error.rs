//! Return codes and `pw_last_error`: every failure becomes a negative errno
//! value and a one-line message kept per thread.

use pagewise::buffer::BufferError;
use pagewise::queue::{FileKind, QueueError};
use pagewise::region::RegionError;
use std::cell::RefCell;
use std::ffi::CString;
use std::os::raw::{c_char, c_int};

/// A failed call: the negative errno it returns and the message
/// `pw_last_error` gives.
#[derive(Debug)]
pub struct Failure {
    /// A negative errno value.
    pub code: c_int,
    /// One line, for `pw_last_error`.
    pub message: String,
}

/// What an entry point returns before conversion: a non-negative code
/// (`PW_OK`, `PW_EMPTY`) or a failure.
pub type Outcome = Result<c_int, Failure>;

impl Failure {
    /// A failure with `errno` (positive, as in `errno.h`) and a message.
    pub fn new(errno: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code: -errno.abs(),
            message: message.into(),
        }
    }

    /// A required pointer argument was NULL (`-EFAULT`).
    pub fn null(what: &str) -> Failure {
        Failure::new(libc::EFAULT, format!("{what} is NULL"))
    }

    /// An argument value no call accepts (`-EINVAL`).
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(libc::EINVAL, message)
    }
}

/// The errno of an I/O error, or `fallback`.
fn io_errno(error: &std::io::Error, fallback: c_int) -> c_int {
    error.raw_os_error().unwrap_or(fallback)
}

impl From<QueueError> for Failure {
    fn from(e: QueueError) -> Failure {
        let errno = match &e {
            QueueError::Sys { error, .. } => {
                error.errno().map_or(libc::EIO, pagewise::os::Errno::raw)
            }
            QueueError::Io { error, .. } => io_errno(error, libc::EIO),
            QueueError::Exists { .. } => libc::EEXIST,
            QueueError::Refused { .. } => libc::EPERM,
            // What the kernel says of a directory opened for writing; any
            // other file that is not regular is an argument no queue call
            // accepts (`mmap` would say ENODEV, "No such device", which
            // misleads for a FIFO).
            QueueError::NotAFile {
                kind: FileKind::Directory,
                ..
            } => libc::EISDIR,
            QueueError::NotAFile { .. } => libc::EINVAL,
            QueueError::WriterLocked { .. } => libc::EBUSY,
            QueueError::TooShort { .. }
            | QueueError::NotAQueue { .. }
            | QueueError::HeaderChecksum { .. }
            | QueueError::BadHeader { .. }
            | QueueError::Corrupt { .. }
            | QueueError::CrcMismatch { .. }
            | QueueError::DamagedRecord { .. }
            | QueueError::DamagedLength { .. }
            | QueueError::RecordsAfterEnd { .. } => libc::EBADMSG,
            QueueError::UnsupportedVersion { .. } => libc::ENOTSUP,
            QueueError::InvalidOptions(_) | QueueError::InvalidPosition { .. } => libc::EINVAL,
            QueueError::RecordTooLarge { .. } => libc::EMSGSIZE,
            QueueError::NoSpace { error, .. } => {
                error.errno().map_or(libc::ENOSPC, pagewise::os::Errno::raw)
            }
            QueueError::Truncated { .. } => libc::EIO,
            QueueError::FellBehind { .. } => libc::ERANGE,
            QueueError::Thread(error) => io_errno(error, libc::EAGAIN),
        };
        Failure::new(errno, e.to_string())
    }
}

impl From<RegionError> for Failure {
    fn from(e: RegionError) -> Failure {
        let errno = match &e {
            RegionError::ZeroSize => libc::EINVAL,
            RegionError::TooLarge(_) => libc::ENOMEM,
            RegionError::HugetlbUnavailable { .. } | RegionError::ThpUnavailable(_) => libc::ENOMEM,
            RegionError::Map { error: source, .. } => source
                .errno()
                .map_or(libc::ENOMEM, pagewise::os::Errno::raw),
            RegionError::Populate(_) => libc::ENOMEM,
            RegionError::NumaNode { .. } => libc::EINVAL,
            RegionError::Lock(source) | RegionError::Advise(source) => {
                source.errno().map_or(libc::EIO, pagewise::os::Errno::raw)
            }
            RegionError::Thread(error) => io_errno(error, libc::EAGAIN),
        };
        Failure::new(errno, e.to_string())
    }
}

impl From<BufferError> for Failure {
    fn from(e: BufferError) -> Failure {
        let errno = match &e {
            BufferError::CapacityOverflow { .. } => libc::EOVERFLOW,
            BufferError::Reserve { error: source, .. } => source
                .errno()
                .map_or(libc::ENOMEM, pagewise::os::Errno::raw),
            BufferError::Commit(source)
            | BufferError::Move(source)
            | BufferError::Release(source) => source
                .errno()
                .map_or(libc::ENOMEM, pagewise::os::Errno::raw),
            BufferError::Populate(_) => libc::ENOMEM,
        };
        Failure::new(errno, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `message` as this thread's last error (NUL bytes shown as `\0`).
pub fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // A thread being torn down has no slot any more: the code still reports the failure.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
}

/// This thread's last error message, NUL-terminated; valid until the
/// thread's next failing call.
pub fn last_error() -> *const c_char {
    static NONE: &std::ffi::CStr = c"";
    LAST_ERROR
        .try_with(|last| last.borrow().as_ptr())
        .unwrap_or(NONE.as_ptr())
}

/// Turns an outcome into the code the C caller sees, keeping the message.
pub fn finish(outcome: Outcome) -> c_int {
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            set_last_error(&failure.message);
            failure.code
        }
    }
}

/// The failure for a panic caught at the boundary (a bug in pagewise).
pub fn panicked(payload: Box<dyn std::any::Any + Send>) -> Failure {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    Failure::new(
        libc::EIO,
        format!("internal error in pagewise (please report it): {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        LAST_ERROR.with(|last| last.borrow().to_string_lossy().into_owned())
    }

    #[test]
    fn failures_are_negative_and_keep_their_message() {
        assert_eq!(
            finish(Err(Failure::new(libc::EINVAL, "bad"))),
            -libc::EINVAL
        );
        assert_eq!(last(), "bad");
        assert_eq!(finish(Ok(0)), 0);
        assert_eq!(last(), "bad", "a success leaves the last error as it was");
        assert_eq!(
            finish(Err(Failure::new(-libc::EBADF, "x\0y"))),
            -libc::EBADF
        );
        assert_eq!(last(), "x\\0y");
    }

    #[test]
    fn each_thread_has_its_own_message() {
        finish(Err(Failure::invalid("main thread")));
        std::thread::spawn(|| {
            assert_eq!(last(), "");
            finish(Err(Failure::invalid("other thread")));
            assert_eq!(last(), "other thread");
        })
        .join()
        .unwrap();
        assert_eq!(last(), "main thread");
    }

    #[test]
    fn queue_errors_map_to_errno() {
        let e = QueueError::RecordTooLarge { len: 10, max: 5 };
        assert_eq!(Failure::from(e).code, -libc::EMSGSIZE);
        let e = QueueError::InvalidOptions("x".into());
        assert_eq!(Failure::from(e).code, -libc::EINVAL);
        let not_a_file = |kind| QueueError::NotAFile {
            path: "/tmp".into(),
            kind,
        };
        assert_eq!(
            Failure::from(not_a_file(FileKind::Directory)).code,
            -libc::EISDIR
        );
        for kind in [FileKind::Fifo, FileKind::CharDevice, FileKind::Socket] {
            assert_eq!(Failure::from(not_a_file(kind)).code, -libc::EINVAL);
        }
        let e = QueueError::Refused {
            path: "/tmp/q".into(),
            reason: "a symbolic link".into(),
        };
        assert_eq!(Failure::from(e).code, -libc::EPERM);
    }

    #[test]
    fn panics_become_eio_with_the_message() {
        let payload = std::panic::catch_unwind(|| panic!("boom")).unwrap_err();
        let f = panicked(payload);
        assert_eq!(f.code, -libc::EIO);
        assert!(f.message.contains("boom"), "{}", f.message);
    }
}
