//! Waiting on descriptors (`ppoll`): perf ring buffers and the wake socket
//! of a sampling session, and whether an output's reader is gone
//! ([`super::file::output_closed`]).

use super::{Errno, SysError, SysResult};
use std::os::fd::{AsRawFd, BorrowedFd};

/// What [`poll_readable`] found for one descriptor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ready {
    /// Data to read (a perf ring buffer reached its watermark).
    pub readable: bool,
    /// Hung up (the task a perf event follows has exited; a socket's peer closed).
    pub hung_up: bool,
}

/// Waits until one of `fds` is readable or hung up, or `timeout` passes, and
/// says which (all default on timeout or when a signal interrupted the wait).
/// The timeout is kept to the nanosecond (`ppoll`): a wait of less than a
/// millisecond is a wait, not a busy return.
pub fn poll_readable(
    fds: &[BorrowedFd<'_>],
    timeout: std::time::Duration,
) -> SysResult<Vec<Ready>> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let wait = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: pollfds is a valid array of pollfd of the length passed; `wait`
    // is a valid timespec that outlives the call; no signal mask is passed.
    let n = unsafe {
        libc::ppoll(
            pollfds.as_mut_ptr(),
            pollfds.len() as libc::nfds_t,
            &wait,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let err = SysError::last("ppoll");
        if err.errno() == Some(Errno::INTR) {
            return Ok(vec![Ready::default(); fds.len()]);
        }
        return Err(err);
    }
    Ok(pollfds
        .iter()
        .map(|p| Ready {
            readable: p.revents & libc::POLLIN != 0,
            hung_up: p.revents & (libc::POLLHUP | libc::POLLERR) != 0,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    #[test]
    fn poll_says_which_descriptor_is_readable_or_hung_up() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (c, d) = UnixStream::pair().unwrap();
        let nothing = poll_readable(&[b.as_fd(), d.as_fd()], Duration::from_micros(100)).unwrap();
        assert_eq!(nothing, [Ready::default(); 2]);
        a.write_all(b"x").unwrap();
        // Not `drop(c)`: a test forking beside this one may hold a copy of
        // the descriptor until its child execs.
        c.shutdown(std::net::Shutdown::Both).unwrap();
        let ready = poll_readable(&[b.as_fd(), d.as_fd()], Duration::ZERO).unwrap();
        assert!(ready[0].readable && !ready[0].hung_up, "{ready:?}");
        assert!(ready[1].hung_up, "{ready:?}");
    }
}
