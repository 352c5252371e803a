//! Starting a command stopped before `exec`, waiting for it with its resource
//! usage, and the signal plumbing around it.
//!
//! [`spawn_stopped`] forks a child that waits on a pipe before it calls
//! `execv`: the parent can open perf events on the child's pid (with
//! `enable_on_exec`) before the program runs its first instruction, so no event
//! is missed. Between `fork` and `exec` the child only calls async-signal-safe
//! functions (`read`, `sigprocmask`, `sigaction`, `dup2`, `close`, `execv`, `write`,
//! `_exit`).

use super::{SysError, SysResult};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A forked child that has not yet called `exec`.
#[derive(Debug)]
pub struct StoppedChild {
    pid: libc::pid_t,
    go: Option<OwnedFd>,
    exec_status: OwnedFd,
}

/// Why `exec` failed in the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecFailed {
    /// The errno `execv` returned.
    pub errno: i32,
}

fn pipe_cloexec() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the array we pass.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(SysError::last("pipe2"));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// Forks a child that will `execv(path, argv)` with this process's
/// environment once [`StoppedChild::release`] is called. The child gets the
/// default dispositions for `SIGPIPE`, `SIGINT` and `SIGQUIT` and an empty
/// signal mask, as a shell would give it (Rust ignores `SIGPIPE` in its own
/// process). With `stdout_to_stderr` the child's standard output is this
/// process's standard error (`dup2(2, 1)` before `exec`; closed when that
/// fails), so that this process's stdout carries only what it writes
/// itself. Costs one `fork` and two pipes.
pub fn spawn_stopped(
    path: &CString,
    argv: &[CString],
    stdout_to_stderr: bool,
) -> SysResult<StoppedChild> {
    let (go_read, go_write) = pipe_cloexec()?;
    let (status_read, status_write) = pipe_cloexec()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let parent_ends = [go_write.as_raw_fd(), status_read.as_raw_fd()];
    // SAFETY: fork has no memory-safety preconditions; the child branch below only uses
    // async-signal-safe calls on memory prepared before the fork, then execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SysError::last("fork"));
    }
    if pid == 0 {
        // SAFETY: in the child, between fork and exec: only async-signal-safe calls on
        // data allocated before the fork (path, argv_ptrs, fds). Never returns.
        unsafe {
            // The parent's ends: holding the write end of the go pipe would keep our
            // own read from ever seeing end-of-file.
            for fd in parent_ends {
                libc::close(fd);
            }
            let mut byte = 0u8;
            let n = libc::read(go_read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
            if n != 1 {
                // The parent gave up (it closed the pipe without a go byte).
                libc::_exit(127);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            for sig in [libc::SIGPIPE, libc::SIGINT, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_DFL);
            }
            if stdout_to_stderr && libc::dup2(2, 1) < 0 {
                // No stderr to give it: no stdout either, rather than ours.
                libc::close(1);
            }
            libc::execv(path.as_ptr(), argv_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(status_write.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        }
    }
    drop(go_read);
    drop(status_write);
    Ok(StoppedChild {
        pid,
        go: Some(go_write),
        exec_status: status_read,
    })
}

impl StoppedChild {
    /// The child's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Lets the child call `exec` and waits until it has (or has failed to).
    /// On failure the child has exited with status 127 and has been reaped.
    pub fn release(mut self) -> SysResult<Result<libc::pid_t, ExecFailed>> {
        let go = self.go.take().expect("released once");
        let byte = [1u8];
        // SAFETY: writing one byte from a live array to a pipe we own.
        let n = unsafe { libc::write(go.as_raw_fd(), byte.as_ptr().cast(), 1) };
        if n != 1 {
            return Err(SysError::last("write(go pipe)"));
        }
        drop(go);
        let mut buf = [0u8; 4];
        let mut got = 0;
        loop {
            // SAFETY: reading into the unfilled tail of a 4-byte array we own.
            let n = unsafe {
                libc::read(
                    self.exec_status.as_raw_fd(),
                    buf[got..].as_mut_ptr().cast(),
                    buf.len() - got,
                )
            };
            if n < 0 {
                let err = SysError::last("read(exec status pipe)");
                if err.errno() == Some(crate::sys::Errno::INTR) {
                    continue;
                }
                return Err(err);
            }
            if n == 0 {
                break;
            }
            got += n as usize;
            if got == buf.len() {
                break;
            }
        }
        if got == 0 {
            // The pipe closed on exec: the program is running.
            return Ok(Ok(self.pid));
        }
        let errno = i32::from_ne_bytes(buf);
        let _ = wait(self.pid);
        self.pid = 0;
        Ok(Err(ExecFailed { errno }))
    }
}

impl Drop for StoppedChild {
    fn drop(&mut self) {
        if self.go.is_some() && self.pid > 0 {
            // Never released: the child is still waiting before exec. Closing the go pipe
            // makes it _exit(127); SIGKILL makes sure. Then reap it.
            self.go = None;
            // SAFETY: kill has no memory-safety preconditions; pid is our unreaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = wait(self.pid);
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// It called `exit` with this status.
    Exited(i32),
    /// A signal killed it.
    Signaled {
        /// The signal number.
        signal: i32,
        /// Whether it dumped core.
        core_dumped: bool,
    },
}

impl ExitKind {
    /// The status a shell reports: the exit code, or 128 + the signal number.
    pub fn shell_status(&self) -> i32 {
        match *self {
            ExitKind::Exited(code) => code,
            ExitKind::Signaled { signal, .. } => 128 + signal,
        }
    }
}

/// Resource usage of a waited-for child (and the descendants it waited for).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rusage {
    /// CPU time in user mode.
    pub user: Duration,
    /// CPU time in the kernel.
    pub sys: Duration,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// Voluntary context switches.
    pub voluntary_switches: u64,
    /// Involuntary context switches.
    pub involuntary_switches: u64,
    /// Peak resident set size in bytes.
    pub max_rss_bytes: u64,
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::new(tv.tv_sec.max(0) as u64, (tv.tv_usec.max(0) as u32) * 1000)
}

/// Waits for child `pid` to end (`wait4`, retried on `EINTR`).
pub fn wait(pid: libc::pid_t) -> SysResult<(ExitKind, Rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 fills it in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: status and ru are valid for writes for the duration of the call.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            break;
        }
        let err = SysError::last("wait4");
        if err.errno() != Some(crate::sys::Errno::INTR) {
            return Err(err);
        }
    }
    let kind = if libc::WIFSIGNALED(status) {
        ExitKind::Signaled {
            signal: libc::WTERMSIG(status),
            core_dumped: libc::WCOREDUMP(status),
        }
    } else {
        ExitKind::Exited(libc::WEXITSTATUS(status))
    };
    Ok((kind, Rusage::from_raw(&ru)))
}

impl Rusage {
    fn from_raw(ru: &libc::rusage) -> Rusage {
        Rusage {
            user: timeval(ru.ru_utime),
            sys: timeval(ru.ru_stime),
            minor_faults: ru.ru_minflt.max(0) as u64,
            major_faults: ru.ru_majflt.max(0) as u64,
            voluntary_switches: ru.ru_nvcsw.max(0) as u64,
            involuntary_switches: ru.ru_nivcsw.max(0) as u64,
            max_rss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
        }
    }
}

/// Resource usage of the calling thread so far (`getrusage(RUSAGE_THREAD)`):
/// its page faults, and its voluntary (it slept) and involuntary (it was
/// preempted) context switches. `max_rss_bytes` is the process's. One
/// system call.
pub fn this_thread_usage() -> SysResult<Rusage> {
    // SAFETY: rusage is plain old data; getrusage fills it in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is valid for writes for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return Err(SysError::last("getrusage(RUSAGE_THREAD)"));
    }
    Ok(Rusage::from_raw(&ru))
}

/// Whether process `pid` exists (`kill(pid, 0)`; a process owned by someone
/// else that we may not signal still counts as existing).
pub fn exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Sends `SIGKILL` to process `pid`: it dies at once, running no destructors
/// and flushing nothing (what crash tests need). One `kill` call.
pub fn sigkill(pid: libc::pid_t) -> SysResult<()> {
    // SAFETY: kill takes integers; it does not touch our memory.
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    if rc != 0 {
        return Err(SysError::last("kill"));
    }
    Ok(())
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of `/proc/PID/stat` times.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// Raises this process's soft limit on open files to the hard limit (perf
/// events on every thread and CPU of a busy process need many descriptors).
/// Returns the new soft limit.
pub fn raise_nofile_limit() -> SysResult<u64> {
    // SAFETY: rlimit is plain old data; getrlimit fills it in.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: lim is valid for writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(SysError::last("getrlimit(RLIMIT_NOFILE)"));
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: lim is a valid rlimit read from the kernel with the soft limit raised.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(SysError::last("setrlimit(RLIMIT_NOFILE)"));
        }
    }
    Ok(lim.rlim_cur as u64)
}

/// Closes `fds` without waiting for what closing them costs.
///
/// Releasing the last perf event of a tracepoint waits for an RCU grace period
/// in the kernel (about 40 ms per tracepoint on the development VM), under a
/// global mutex, so closing a handful of them would delay the report by a
/// quarter of a second. A short-lived helper process (forked twice, so nobody
/// has to reap it) keeps copies of the descriptors; this process closes its own
/// copies at once, and the helper, once told, exits and pays for the release.
/// The helper closes every other descriptor first (stdout pipes see their end
/// when this process exits). Falls back to closing here when `fork` fails.
pub fn close_in_background(fds: Vec<OwnedFd>) {
    if fds.is_empty() {
        return;
    }
    let Ok((done_read, done_write)) = pipe_cloexec() else {
        return drop(fds);
    };
    let mut keep: Vec<libc::c_int> = fds.iter().map(|f| f.as_raw_fd()).collect();
    keep.push(done_read.as_raw_fd());
    keep.sort_unstable();
    // SAFETY: fork has no memory-safety preconditions. Both children only make
    // async-signal-safe calls (fork, close_range, close, read, _exit) on data
    // allocated before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return drop(fds);
    }
    if pid == 0 {
        // SAFETY: see above; never returns.
        unsafe {
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            let mut next: libc::c_uint = 0;
            for &k in &keep {
                let k = k as libc::c_uint;
                if k > next {
                    close_range(next, k - 1);
                }
                next = k + 1;
            }
            close_range(next, libc::c_uint::MAX);
            let mut byte = 0u8;
            while libc::read(done_read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            libc::_exit(0);
        }
    }
    // Reap the first child (it exits at once); the second is nobody's to wait for.
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    drop(fds);
    drop(done_write);
}

/// `close_range(2)` (5.9+), else a loop of `close` up to a bound.
///
/// # Safety
/// Only for a freshly forked child that owns nothing in that range.
unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
    // SAFETY: the syscall takes integers only.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
    if rc != 0 {
        let last = last.min(65_535);
        for fd in first..=last {
            // SAFETY: closing descriptors of this (child) process.
            unsafe { libc::close(fd as libc::c_int) };
        }
    }
}

/// Lowers the calling thread's scheduling priority to nice `nice` (0–19; a
/// thread may always lower its own priority). Unlike `SCHED_IDLE`, which an
/// unprivileged thread can never leave and which may get no CPU for seconds
/// on a busy machine, a niced thread still gets a small share (at nice 10,
/// about a tenth of a nice-0 thread's), so a thread that waits for it is
/// delayed, not stalled. One `setpriority` call.
pub fn lower_this_thread_priority(nice: i32) -> SysResult<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: PRIO_PROCESS with a thread id changes only that thread on Linux.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc != 0 {
        return Err(SysError::last("setpriority"));
    }
    Ok(())
}

/// How [`lowest_priority_for_this_thread`] lowered the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LowPriority {
    /// `SCHED_IDLE`: the thread runs only when a CPU would otherwise idle.
    SchedIdle,
    /// Nice 19, because `SCHED_IDLE` was refused: a small share (about 1.5%
    /// of a nice-0 thread's) when the CPUs are busy.
    Nice19,
}

/// Gives the calling thread the lowest priority it can take: `SCHED_IDLE`
/// (`sched_setscheduler`), or nice 19 if that is refused (a seccomp filter,
/// an old kernel). Either way no thread of normal priority waits for it;
/// with `SCHED_IDLE` it may get no CPU at all while the CPUs are busy, so
/// nothing must wait for it either. Returns which, with the refusal of
/// `SCHED_IDLE` if there was one; fails only if both were refused. One or
/// two system calls.
pub fn lowest_priority_for_this_thread() -> SysResult<(LowPriority, Option<SysError>)> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param
    // (priority 0, the only one SCHED_IDLE takes).
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc == 0 {
        return Ok((LowPriority::SchedIdle, None));
    }
    let refused = SysError::last("sched_setscheduler(SCHED_IDLE)");
    lower_this_thread_priority(19)?;
    Ok((LowPriority::Nice19, Some(refused)))
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), in
/// increasing order: what a process started under `taskset`, a cpuset or a
/// container limit can actually use. One system call.
pub fn usable_cpus() -> SysResult<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is writable and its size is passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(SysError::last("sched_getaffinity"));
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set only, for indices below its size.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts the calling thread to one CPU (`sched_setaffinity`); threads it
/// starts afterwards inherit the restriction. Fails with `EINVAL` for a CPU
/// this process may not use. One system call.
pub fn pin_this_thread(cpu: usize) -> SysResult<()> {
    restrict_this_thread(&[cpu])
}

/// Restricts the calling thread to the CPUs in `cpus` (`sched_setaffinity`);
/// threads it starts afterwards inherit the restriction. Fails with `EINVAL`
/// for an empty list or a CPU this process may not use. One system call.
pub fn restrict_this_thread(cpus: &[usize]) -> SysResult<()> {
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|&c| c >= max) {
        return Err(SysError {
            call: "sched_setaffinity",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: cpu is below the set's size (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid set of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(SysError::last("sched_setaffinity"));
    }
    Ok(())
}

/// Held by the unit tests that install [`ForwardSignals`] (its handlers and
/// statics are the process's): one such test must not redirect or restore
/// another's, and one that signals itself would otherwise die of a default
/// action another test's drop restored.
#[cfg(test)]
pub(crate) static FORWARD_SIGNALS_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The process [`ForwardSignals`] passes signals on to (0: none).
static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The last signal asking to stop that [`ForwardSignals`] caught (0: none).
static STOP_CAUGHT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The signals [`ForwardSignals`] passes on; the first four ask a program to stop.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Whether `signal` asks a program to stop (`SIGTERM`, `SIGHUP`, `SIGINT`, `SIGQUIT`).
fn asks_to_stop(signal: libc::c_int) -> bool {
    FORWARDED[..4].contains(&signal)
}

extern "C" fn forward_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    use std::sync::atomic::Ordering::Relaxed;
    // SAFETY: installed with SA_SIGINFO, so the kernel passes a valid siginfo_t
    // that lives for the handler's run; a null pointer is checked anyway.
    let from_terminal = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
    // The terminal (Ctrl-C, Ctrl-\, a hang-up) signals the whole foreground
    // process group, the child included: passing it on would send it twice.
    let pid = FORWARD_TO.load(Relaxed);
    if pid > 0 && !from_terminal {
        // SAFETY: kill is async-signal-safe and takes integers only.
        unsafe { libc::kill(pid, signal) };
    }
    // Last, so that whoever sees it knows the signal was passed on already.
    if asks_to_stop(signal) {
        STOP_CAUGHT.store(signal, Relaxed);
    }
}

/// Passes `SIGTERM`, `SIGHUP`, `SIGINT`, `SIGQUIT`, `SIGUSR1` and `SIGUSR2`
/// sent to this process on to a child until dropped, so a parent that waits
/// for its command (and is what a service manager or `kill` sees) stays
/// alive to report how the command ended, and the command is stopped or
/// signalled the way it would be had it been started directly.
///
/// A signal the kernel sent (`si_code` `SI_KERNEL`: the terminal's Ctrl-C,
/// Ctrl-\ or hang-up, sent to the whole foreground process group) is not
/// passed on: the child, in this process's group, got it too. A signal that
/// was ignored when this starts (`nohup`'s `SIGHUP`, a background job's
/// `SIGINT`) stays ignored. The child is the one process at a time given to
/// [`ForwardSignals::to`] or [`ForwardSignals::pass_to`]; the last signal
/// asking to stop is kept for [`ForwardSignals::stop_requested`]. Costs six
/// `sigaction` calls each way, and one `kill` per signal.
#[derive(Debug)]
pub struct ForwardSignals {
    /// The dispositions to restore, for the signals this replaced.
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl ForwardSignals {
    /// Starts catching the signals, passing them on to no process until
    /// [`ForwardSignals::pass_to`] names one.
    pub fn catch() -> Self {
        FORWARD_TO.store(0, std::sync::atomic::Ordering::Relaxed);
        STOP_CAUGHT.store(0, std::sync::atomic::Ordering::Relaxed);
        let mut previous = Vec::with_capacity(FORWARDED.len());
        for sig in FORWARDED {
            // SAFETY: an all-zero sigaction is a valid value of this plain C struct.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the current one into `old`.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
                || old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            // SAFETY: as above.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = forward_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            // SAFETY: both structs are valid; the handler only stores to atomics and calls kill.
            unsafe {
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
            previous.push((sig, old));
        }
        ForwardSignals { previous }
    }

    /// Starts passing the signals on to `pid`.
    pub fn to(pid: u32) -> Self {
        let forward = Self::catch();
        forward.pass_to(pid);
        forward
    }

    /// Passes the signals on to `pid` from now on, instead of to the process
    /// named before (0: to none). An atomic store.
    pub fn pass_to(&self, pid: u32) {
        FORWARD_TO.store(pid as i32, std::sync::atomic::Ordering::Relaxed);
    }

    /// The last signal asking to stop (`SIGTERM`, `SIGHUP`, `SIGINT`,
    /// `SIGQUIT`) this process received since [`ForwardSignals::catch`],
    /// passed on or not. An atomic load.
    pub fn stop_requested(&self) -> Option<i32> {
        match STOP_CAUGHT.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            signal => Some(signal),
        }
    }
}

impl Drop for ForwardSignals {
    fn drop(&mut self) {
        FORWARD_TO.store(0, std::sync::atomic::Ordering::Relaxed);
        for (sig, old) in &self.previous {
            // SAFETY: restoring the disposition sigaction returned earlier.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// The name of a signal: `SIGKILL`, `SIGSEGV`, … or `signal N`.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match NAMES.get(signal as usize) {
        Some(name) if signal > 0 => (*name).to_owned(),
        _ => format!("signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    #[test]
    fn runs_a_command_and_reports_its_status() {
        let child = spawn_stopped(&c("/bin/sh"), &[c("sh"), c("-c"), c("exit 7")], false).unwrap();
        let pid = child.release().unwrap().unwrap();
        let (kind, _) = wait(pid).unwrap();
        assert_eq!(kind, ExitKind::Exited(7));
        assert_eq!(kind.shell_status(), 7);
    }

    #[test]
    fn reports_a_signal_death() {
        let child =
            spawn_stopped(&c("/bin/sh"), &[c("sh"), c("-c"), c("kill -9 $$")], false).unwrap();
        let pid = child.release().unwrap().unwrap();
        let (kind, _) = wait(pid).unwrap();
        assert_eq!(
            kind,
            ExitKind::Signaled {
                signal: 9,
                core_dumped: false
            }
        );
        assert_eq!(kind.shell_status(), 137);
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(99), "signal 99");
    }

    #[test]
    fn exec_failure_comes_back_as_errno() {
        let child = spawn_stopped(&c("/nonexistent/program"), &[c("program")], false).unwrap();
        let failed = child.release().unwrap().unwrap_err();
        assert_eq!(failed.errno, libc::ENOENT);
    }

    #[test]
    fn dropping_an_unreleased_child_reaps_it() {
        let child = spawn_stopped(&c("/bin/true"), &[c("true")], false).unwrap();
        let pid = child.pid();
        assert!(exists(pid));
        drop(child);
        assert!(!exists(pid));
    }

    #[test]
    fn closing_in_background_closes_here_at_once() {
        let (r, w) = pipe_cloexec().unwrap();
        let (r2, w2) = pipe_cloexec().unwrap();
        let raw = w.as_raw_fd();
        let identity = |fd: libc::c_int| {
            // SAFETY: fstat on a descriptor number only queries it; `st` is a local.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let rc = unsafe { libc::fstat(fd, &mut st) };
            (rc == 0).then_some((st.st_dev, st.st_ino))
        };
        let pipe = identity(raw);
        assert!(pipe.is_some());
        close_in_background(vec![w, w2]);
        // Our copy is closed at once: the number is free again, or (tests run
        // in parallel threads) already reused for another file, never still the pipe.
        assert_ne!(identity(raw), pipe);
        // The helper exits soon after, and the read ends see end-of-file.
        for fd in [&r, &r2] {
            let mut byte = 0u8;
            // SAFETY: reading one byte into a local from a pipe we own.
            let n = unsafe { libc::read(fd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
            assert_eq!(n, 0);
        }
    }

    /// Sends `signal` to this thread as the kernel or `kill` would: with
    /// `si_code` `SI_KERNEL` (the terminal's way) or `SI_USER`.
    fn signal_self(signal: libc::c_int, code: libc::c_int) {
        // SAFETY: an all-zero siginfo_t is valid; the fields set are plain integers.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        info.si_signo = signal;
        info.si_code = code;
        // SAFETY: rt_tgsigqueueinfo reads `info` only; a non-negative
        // si_code is allowed when a thread signals itself.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                libc::getpid(),
                libc::gettid(),
                signal,
                &info as *const libc::siginfo_t,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }

    /// The one-letter state in `/proc/PID/stat` (`Z` for a zombie).
    fn state(pid: libc::pid_t) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit(") ").next().unwrap().chars().next().unwrap()
    }

    /// Sets `signal` to its default disposition until dropped, restoring the
    /// one before: `ForwardSignals` leaves alone a signal that was ignored
    /// when it started, which `SIGINT` is in a test run as a background job.
    struct DefaultDisposition(libc::c_int, libc::sigaction);

    impl DefaultDisposition {
        fn of(signal: libc::c_int) -> Self {
            // SAFETY: all-zero sigaction structs are valid; SIG_DFL needs no handler.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut default.sa_mask);
                let mut before: libc::sigaction = std::mem::zeroed();
                assert_eq!(libc::sigaction(signal, &default, &mut before), 0);
                DefaultDisposition(signal, before)
            }
        }
    }

    impl Drop for DefaultDisposition {
        fn drop(&mut self) {
            // SAFETY: restoring the disposition sigaction returned.
            unsafe { libc::sigaction(self.0, &self.1, std::ptr::null_mut()) };
        }
    }

    #[test]
    fn signals_are_passed_on_except_the_terminals() {
        let _serial = FORWARD_SIGNALS_TESTS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Dropped after `forward` (declared before it), which restores these.
        let _defaults = [libc::SIGINT, libc::SIGTERM].map(DefaultDisposition::of);
        let child = spawn_stopped(&c("/bin/sleep"), &[c("sleep"), c("60")], false).unwrap();
        let pid = child.release().unwrap().unwrap();
        let forward = ForwardSignals::to(pid as u32);
        assert_eq!(forward.stop_requested(), None);
        // Ctrl-C from a terminal reached the child too: not sent again.
        signal_self(libc::SIGINT, libc::SI_KERNEL);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while forward.stop_requested().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the handler never ran"
            );
            std::thread::yield_now();
        }
        assert_eq!(forward.stop_requested(), Some(libc::SIGINT));
        assert_ne!(state(pid), 'Z', "the terminal's SIGINT was passed on");
        // `kill -TERM` of this process reaches the child.
        signal_self(libc::SIGTERM, libc::SI_USER);
        let (kind, _) = wait(pid).unwrap();
        assert_eq!(
            kind,
            ExitKind::Signaled {
                signal: libc::SIGTERM,
                core_dumped: false
            }
        );
        assert_eq!(forward.stop_requested(), Some(libc::SIGTERM));
    }

    #[test]
    fn rusage_counts_the_childs_faults() {
        let child = spawn_stopped(
            &c("/bin/sh"),
            &[
                c("sh"),
                c("-c"),
                c("head -c 4000000 /dev/zero | cat > /dev/null"),
            ],
            false,
        )
        .unwrap();
        let pid = child.release().unwrap().unwrap();
        let (kind, usage) = wait(pid).unwrap();
        assert_eq!(kind, ExitKind::Exited(0));
        assert!(usage.minor_faults > 0);
        assert!(usage.max_rss_bytes > 0);
    }
}
