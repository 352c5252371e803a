//! Reading tracefs files (tracepoint ids and formats) when tracefs is not
//! mounted, without mounting it for anyone else.
//!
//! A perf tracepoint event needs only its numeric id, and decoding its raw
//! record needs its `format` file; both live in tracefs. On a fresh machine
//! tracefs is often not mounted. Root can read them anyway: a forked child
//! gives itself a mount namespace of its own (`unshare(CLONE_NEWNS)`, `/`
//! made recursively private), mounts tracefs there, reads the files, sends
//! them through a pipe and exits. The mount dies with the child; the rest of
//! the machine never sees it. Costs one `fork`, one mount and a few small
//! reads: about a millisecond.
//!
//! Between `fork` and `_exit` the child only makes async-signal-safe system
//! calls on memory prepared before the fork (paths as C strings, a stack buffer).

use super::{SysError, SysResult};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The largest tracefs file read (format files are 1–4 KiB).
const MAX_FILE: usize = 32 << 10;

/// Reads `files` (paths relative to a tracefs root, such as
/// `events/exceptions/page_fault_user/id`) from a tracefs mounted at
/// `mountpoint` in a private mount namespace of a child process.
///
/// Returns one entry per file: its bytes, or the errno that opening or
/// reading it gave. The whole call fails when the child cannot make the
/// namespace or mount tracefs (EPERM without `CAP_SYS_ADMIN`, for example).
pub fn read_in_private_mount(
    mountpoint: &str,
    files: &[&str],
) -> SysResult<Vec<Result<Vec<u8>, i32>>> {
    let to_c = |s: &str| {
        CString::new(s).map_err(|_| SysError {
            call: "tracefs path",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        })
    };
    let target = to_c(mountpoint)?;
    let paths: Vec<CString> = files
        .iter()
        .map(|f| to_c(&format!("{mountpoint}/{f}")))
        .collect::<SysResult<_>>()?;
    let fstype = to_c("tracefs")?;
    let source = to_c("nodev")?;
    let root = to_c("/")?;

    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(SysError::last("pipe2"));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

    // SAFETY: fork has no memory-safety preconditions; the child branch only makes
    // async-signal-safe calls on memory prepared before the fork, then _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SysError::last("fork"));
    }
    if pid == 0 {
        // SAFETY: in the child: raw system calls on C strings and fds made before
        // the fork and on a stack buffer; never returns.
        unsafe {
            let out = write_end.as_raw_fd();
            libc::close(read_end.as_raw_fd());
            let send = |bytes: &[u8]| {
                let mut sent = 0;
                while sent < bytes.len() {
                    let n = libc::write(out, bytes[sent..].as_ptr().cast(), bytes.len() - sent);
                    if n <= 0 {
                        libc::_exit(3);
                    }
                    sent += n as usize;
                }
            };
            let fail = |code: i64| {
                send(&code.to_ne_bytes());
                libc::_exit(2);
            };
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                fail(-(*libc::__errno_location() as i64));
            }
            let private = libc::MS_REC | libc::MS_PRIVATE;
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                private,
                std::ptr::null(),
            ) != 0
            {
                fail(-(*libc::__errno_location() as i64));
            }
            if libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            ) != 0
            {
                fail(-(*libc::__errno_location() as i64));
            }
            // Mounted: the stream is a 0 marker, then per file a length (or
            // -errno) and that many bytes.
            send(&0i64.to_ne_bytes());
            let mut buf = [0u8; MAX_FILE];
            for path in &paths {
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    send(&(-(*libc::__errno_location() as i64)).to_ne_bytes());
                    continue;
                }
                let mut len = 0usize;
                let mut errno = 0i64;
                loop {
                    if len == buf.len() {
                        errno = libc::EFBIG as i64;
                        break;
                    }
                    let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
                    if n < 0 {
                        if *libc::__errno_location() == libc::EINTR {
                            continue;
                        }
                        errno = *libc::__errno_location() as i64;
                        break;
                    }
                    if n == 0 {
                        break;
                    }
                    len += n as usize;
                }
                libc::close(fd);
                if errno != 0 {
                    send(&(-errno).to_ne_bytes());
                } else {
                    send(&(len as i64).to_ne_bytes());
                    send(&buf[..len]);
                }
            }
            libc::_exit(0);
        }
    }
    drop(write_end);
    let mut stream = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_error = loop {
        // SAFETY: reading into a live stack array we own.
        let n = unsafe { libc::read(read_end.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
        if n < 0 {
            let err = SysError::last("read(tracefs pipe)");
            if err.errno() == Some(libc::EINTR) {
                continue;
            }
            break Some(err);
        }
        if n == 0 {
            break None;
        }
        stream.extend_from_slice(&chunk[..n as usize]);
    };
    let mut status = 0;
    // SAFETY: waiting for our own child; status is a live local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        let err = SysError::last("waitpid");
        if err.errno() != Some(libc::EINTR) {
            return Err(err);
        }
    }
    if let Some(err) = read_error {
        return Err(err);
    }
    parse_stream(&stream, files.len())
}

fn take_word(stream: &[u8], at: &mut usize) -> Option<i64> {
    let bytes = stream.get(*at..*at + 8)?;
    *at += 8;
    Some(i64::from_ne_bytes(bytes.try_into().ok()?))
}

/// Decodes the child's stream: a marker (0, or -errno when mounting failed),
/// then per file a length and its bytes, or -errno.
fn parse_stream(stream: &[u8], files: usize) -> SysResult<Vec<Result<Vec<u8>, i32>>> {
    let broken = |call| SysError {
        call,
        source: std::io::Error::from_raw_os_error(libc::EIO),
    };
    let mut at = 0;
    match take_word(stream, &mut at) {
        Some(0) => {}
        Some(errno) if errno < 0 => {
            return Err(SysError {
                call: "mount tracefs in a private mount namespace",
                source: std::io::Error::from_raw_os_error(-errno as i32),
            })
        }
        _ => return Err(broken("tracefs reader (the child ended early)")),
    }
    let mut out = Vec::with_capacity(files);
    for _ in 0..files {
        let word = take_word(stream, &mut at).ok_or(broken("tracefs reader (short stream)"))?;
        if word < 0 {
            out.push(Err(-word as i32));
            continue;
        }
        let len = word as usize;
        let bytes = stream
            .get(at..at + len)
            .ok_or(broken("tracefs reader (short file)"))?;
        at += len;
        out.push(Ok(bytes.to_vec()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(words: &[i64], payloads: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        let mut p = payloads.iter();
        for w in words {
            v.extend_from_slice(&w.to_ne_bytes());
            if *w > 0 {
                v.extend_from_slice(p.next().unwrap());
            }
        }
        v
    }

    #[test]
    fn the_stream_decodes_files_and_errors() {
        let s = frame(&[0, 3, -2, 0], &[b"42\n"]);
        let files = parse_stream(&s, 3).unwrap();
        assert_eq!(files[0], Ok(b"42\n".to_vec()));
        assert_eq!(files[1], Err(2));
        assert_eq!(files[2], Ok(Vec::new()));
    }

    #[test]
    fn a_failed_mount_and_a_short_stream_are_errors() {
        let err = parse_stream(&frame(&[-1], &[]), 1).unwrap_err();
        assert_eq!(err.errno(), Some(1));
        assert!(parse_stream(&[], 1).is_err());
        assert!(parse_stream(&frame(&[0, 10], &[b"abc"]), 1).is_err());
    }

    #[test]
    fn root_reads_a_tracepoint_id_without_mounting_tracefs_for_others() {
        if !pagewise_testkit::is_root() {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Root,
                "mounting tracefs in a private namespace needs root"
            );
        }
        if !std::path::Path::new("/sys/kernel/tracing").is_dir() {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Kernel,
                "/sys/kernel/tracing does not exist"
            );
        }
        let mounts_before = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let files = read_in_private_mount(
            "/sys/kernel/tracing",
            &[
                "events/exceptions/page_fault_user/id",
                "events/exceptions/page_fault_user/format",
                "events/no_such_group/no_such_event/id",
            ],
        )
        .unwrap();
        let id = String::from_utf8(files[0].clone().unwrap()).unwrap();
        assert!(id.trim().parse::<u64>().is_ok(), "{id:?}");
        let format = String::from_utf8(files[1].clone().unwrap()).unwrap();
        assert!(format.contains("field:unsigned long address"), "{format}");
        assert_eq!(files[2], Err(libc::ENOENT));
        // Nothing changed for this process (or anyone else).
        assert_eq!(
            std::fs::read_to_string("/proc/self/mounts").unwrap(),
            mounts_before
        );
    }
}
