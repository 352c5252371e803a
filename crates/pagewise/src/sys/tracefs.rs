//! Reading tracefs files (tracepoint ids and formats) when tracefs is not
//! mounted, without mounting it for anyone else.
//!
//! A perf tracepoint event needs only its numeric id, and decoding its raw
//! record needs its `format` file; both live in tracefs. On a fresh machine
//! tracefs is often not mounted. Root can read them anyway: a child process
//! gives itself a mount namespace of its own (`unshare(CLONE_NEWNS)`, `/`
//! made recursively private), mounts tracefs there, reads the files and
//! exits. The mount dies with the child; the rest of the machine never sees it.
//!
//! The child is made with `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn`
//! makes its children: it shares the caller's memory (it writes the files
//! straight into buffers the caller prepared) and the calling thread waits
//! until it exits. A plain `fork` would make every page of the caller
//! copy-on-write, so each page the caller then wrote would fault once: a cost
//! a benchmark or a latency-sensitive program must not pay for a lookup.
//! Costs one `clone`, one mount and a few small reads: about a millisecond.
//!
//! The child runs on its own stack, shares the caller's heap and never
//! allocates: it only makes raw system calls on memory prepared before the
//! `clone` (paths as C strings, output buffers, its result words).

use super::{SysError, SysResult};
use std::ffi::CString;

/// The largest tracefs file read (format files are 1–4 KiB).
const MAX_FILE: usize = 32 << 10;
/// The child's stack: it calls a handful of system calls, no Rust runtime.
const CHILD_STACK: usize = 64 << 10;

/// What the child reads and where it puts it; shared with the child.
struct Job {
    root: CString,
    target: CString,
    source: CString,
    fstype: CString,
    paths: Vec<CString>,
    /// One buffer of `MAX_FILE` bytes per path.
    buffers: Vec<Vec<u8>>,
    /// Per path: bytes read, or -errno.
    results: Vec<i64>,
    /// 0 once tracefs is mounted in the child's namespace, else -errno.
    mounted: i64,
}

/// The child's whole life: make the namespace, mount, read, exit.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Job` the parent passed to clone; the parent's
    // thread is suspended (CLONE_VFORK) and does not touch it until we exit.
    // Only raw system calls on memory prepared before the clone follow.
    unsafe {
        let job = &mut *(arg as *mut Job);
        let errno = || -(*libc::__errno_location() as i64);
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            job.mounted = errno();
            libc::_exit(2);
        }
        if libc::mount(
            std::ptr::null(),
            job.root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            job.mounted = errno();
            libc::_exit(2);
        }
        if libc::mount(
            job.source.as_ptr(),
            job.target.as_ptr(),
            job.fstype.as_ptr(),
            0,
            std::ptr::null(),
        ) != 0
            // EBUSY: tracefs is already mounted there (this namespace is a
            // copy of the caller's, where someone mounted it meanwhile): the
            // files are there to read.
            && *libc::__errno_location() != libc::EBUSY
        {
            job.mounted = errno();
            libc::_exit(2);
        }
        job.mounted = 0;
        for i in 0..job.paths.len() {
            let fd = libc::open(job.paths[i].as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                job.results[i] = errno();
                continue;
            }
            let buf = job.buffers[i].as_mut_ptr();
            let cap = job.buffers[i].len();
            let mut len = 0usize;
            let result: i64;
            loop {
                if len == cap {
                    result = -(libc::EFBIG as i64);
                    break;
                }
                let n = libc::read(fd, buf.add(len).cast(), cap - len);
                if n < 0 {
                    if *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    result = errno();
                    break;
                }
                if n == 0 {
                    result = len as i64;
                    break;
                }
                len += n as usize;
            }
            libc::close(fd);
            job.results[i] = result;
        }
        libc::_exit(0)
    }
}

/// Reads `files` (paths relative to a tracefs root, such as
/// `events/exceptions/page_fault_user/id`) from a tracefs mounted at
/// `mountpoint` in a private mount namespace of a child process that shares
/// this process's memory (no copy-on-write afterwards).
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
    let mut job = Job {
        root: to_c("/")?,
        target: to_c(mountpoint)?,
        source: to_c("nodev")?,
        fstype: to_c("tracefs")?,
        paths: files
            .iter()
            .map(|f| to_c(&format!("{mountpoint}/{f}")))
            .collect::<SysResult<_>>()?,
        buffers: files.iter().map(|_| vec![0u8; MAX_FILE]).collect(),
        results: vec![-(libc::EIO as i64); files.len()],
        mounted: -(libc::EIO as i64),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down: pass its 16-byte-aligned top.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: child_main only touches `job` (alive until after waitpid below)
    // and its own stack (alive likewise); CLONE_VFORK suspends this thread
    // until the child exits, so nothing here races with it.
    let pid = unsafe {
        libc::clone(
            child_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut job as *mut Job).cast(),
        )
    };
    if pid < 0 {
        return Err(SysError::last("clone"));
    }
    let mut status = 0;
    // SAFETY: waiting for our own child; status is a live local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        let err = SysError::last("waitpid");
        if err.errno() != Some(crate::sys::Errno::INTR) {
            return Err(err);
        }
    }
    drop(stack);
    collect(&job)
}

/// The caller's view of what the child left in `job`.
fn collect(job: &Job) -> SysResult<Vec<Result<Vec<u8>, i32>>> {
    if job.mounted != 0 {
        return Err(SysError {
            call: "mount tracefs in a private mount namespace",
            source: std::io::Error::from_raw_os_error((-job.mounted) as i32),
        });
    }
    Ok(job
        .results
        .iter()
        .zip(&job.buffers)
        .map(|(&r, buf)| {
            if r < 0 {
                Err((-r) as i32)
            } else {
                Ok(buf[..r as usize].to_vec())
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(mounted: i64, results: Vec<i64>, contents: &[&[u8]]) -> Job {
        let c = |s: &str| CString::new(s).unwrap();
        Job {
            root: c("/"),
            target: c("/t"),
            source: c("nodev"),
            fstype: c("tracefs"),
            paths: results.iter().map(|_| c("/t/x")).collect(),
            buffers: contents
                .iter()
                .map(|b| {
                    let mut v = b.to_vec();
                    v.resize(MAX_FILE, 0);
                    v
                })
                .collect(),
            results,
            mounted,
        }
    }

    #[test]
    fn the_results_become_files_and_errors() {
        let files = collect(&job(0, vec![3, -2, 0], &[b"42\n", b"", b""])).unwrap();
        assert_eq!(files[0], Ok(b"42\n".to_vec()));
        assert_eq!(files[1], Err(2));
        assert_eq!(files[2], Ok(Vec::new()));
    }

    #[test]
    fn a_failed_mount_is_an_error_with_its_errno() {
        let err = collect(&job(-1, vec![0], &[b""])).unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::PERM));
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

    /// Minor faults of this thread so far.
    fn thread_minor_faults() -> i64 {
        // SAFETY: getrusage writes into the zeroed struct we pass.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
            usage.ru_minflt
        }
    }

    #[test]
    fn the_lookup_leaves_no_copy_on_write_behind() {
        if !pagewise_testkit::is_root() {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Root,
                "mounting tracefs in a private namespace needs root"
            );
        }
        let mut resident = vec![1u8; 8 << 20];
        let rewrite = |buf: &mut Vec<u8>, byte: u8| {
            for page in buf.chunks_mut(4096) {
                page[0] = byte;
            }
            std::hint::black_box(&buf);
        };
        rewrite(&mut resident, 2);
        read_in_private_mount("/sys/kernel/tracing", &["events/header_page"]).unwrap();
        let before = thread_minor_faults();
        rewrite(&mut resident, 3);
        // A fork would have made all 2,048 pages copy-on-write.
        assert_eq!(thread_minor_faults() - before, 0);
    }
}
