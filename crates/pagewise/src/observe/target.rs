//! What `stat` and `text profile` observe, and how it is reached: a command
//! started stopped (forked, perf events opened on its pid with
//! `enable_on_exec`, then released to `exec`) so that no event is missed, or
//! a running process attached to for a window.

use super::address_spaces::AddressSpaces;
use crate::host::{proc_maps, proc_tasks};
use crate::launch::{self, LaunchError};
use crate::sys::process::{self, StoppedChild};
use crate::sys::Errno;
use crate::sys::SysError;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to observe.
#[derive(Debug, Clone)]
pub enum Target {
    /// Run this command (program and arguments).
    Command(Vec<OsString>),
    /// Attach to a running process for a while.
    Pid {
        /// Its pid.
        pid: i32,
        /// How long to watch.
        duration: Duration,
    },
}

/// Why a target could not be started or attached to.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// No command was given.
    #[error("no command to run: give CMD [ARGS] after `--` (or --pid PID)")]
    NoCommand,
    /// The command is not on `PATH` or does not exist.
    #[error("{0}: command not found")]
    NotFound(String),
    /// The command exists but cannot be executed.
    #[error("{path}: cannot execute: {error}")]
    CannotExecute {
        /// The resolved path.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// No process has this pid.
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    /// This process may not look inside that one: it is another user's, or
    /// the kernel keeps it closed (a set-user-ID program, or one that made
    /// itself non-dumpable), or, for root, what confines root here.
    #[error("{}", not_permitted(*.pid, *.owner, *.same_user, *.root))]
    NotPermitted {
        /// The process.
        pid: i32,
        /// Its owner's uid, as `/proc/PID` shows it.
        owner: u32,
        /// Whether that is this process's effective uid.
        same_user: bool,
        /// When this process is root: why root was refused (`None`: not root).
        root: Option<RootRefusal>,
    },
    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] SysError),
}

/// Why the kernel refused root another process: what confines this root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootRefusal {
    /// Root without `CAP_SYS_PTRACE` in its effective capabilities (a
    /// container's default set, `capsh --drop`), which another user's, a
    /// non-dumpable or a more privileged process needs.
    NoSysPtrace,
    /// Root of a user namespace other than the initial one (`unshare
    /// --user`, a rootless container): its capabilities reach only its own
    /// namespace and those below it.
    UserNamespace,
    /// Root with `CAP_SYS_PTRACE` in the initial user namespace: only a
    /// security module (Landlock, SELinux, AppArmor) refuses that.
    SecurityModule,
}

impl RootRefusal {
    /// What confines this process, when it is root and was refused:
    /// reads `/proc/self/status` and `/proc/self/uid_map`.
    pub fn of_this_process() -> RootRefusal {
        if crate::host::self_access::own_sys_ptrace() == Some(false) {
            RootRefusal::NoSysPtrace
        } else if crate::host::self_access::in_initial_user_namespace() == Some(false) {
            RootRefusal::UserNamespace
        } else {
            RootRefusal::SecurityModule
        }
    }
}

/// The message of [`TargetError::NotPermitted`].
fn not_permitted(pid: i32, owner: u32, same_user: bool, root: Option<RootRefusal>) -> String {
    let needs = format!("perf events and /proc/{pid}/maps on it");
    match root {
        Some(RootRefusal::NoSysPtrace) => {
            return format!(
                "pid {pid} is closed to this process although it runs as root: its capabilities \
                 lack CAP_SYS_PTRACE (dropped, as containers do), which {needs} need"
            )
        }
        Some(RootRefusal::UserNamespace) => {
            return format!(
                "pid {pid} is closed to this process although it runs as root: it is root of a \
                 user namespace (/proc/self/uid_map maps only some uids), whose capabilities \
                 reach only the processes of that namespace; run pagewise in pid {pid}'s user \
                 namespace ({needs} need CAP_SYS_PTRACE there)"
            )
        }
        Some(RootRefusal::SecurityModule) => {
            return format!(
                "pid {pid} is closed to this process even as root with CAP_SYS_PTRACE: the \
                 kernel refused /proc/{pid}/maps, so a security module (Landlock, SELinux, \
                 AppArmor) confines pagewise or guards pid {pid}, and would refuse perf events \
                 on it too"
            )
        }
        None => {}
    }
    let why = if same_user {
        format!("pid {pid} is closed to inspection (/proc/{pid}/maps is not readable: a set-user-ID or non-dumpable process)")
    } else {
        format!("pid {pid} belongs to another user (uid {owner})")
    };
    format!(
        "{why}: watching it needs root (perf events and /proc/{pid}/maps on it need CAP_SYS_PTRACE)"
    )
}

impl TargetError {
    /// The exit status a shell would give: 127 not found, 126 not executable, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            TargetError::NotFound(_) => 127,
            TargetError::CannotExecute { .. } => 126,
            TargetError::NoCommand => 2,
            _ => 1,
        }
    }
}

/// A command forked and stopped before `exec`: open the events on
/// [`StoppedCommand::pid`], then [`StoppedCommand::release`] it. Dropping it
/// unreleased kills the child.
#[derive(Debug)]
pub struct StoppedCommand {
    child: StoppedChild,
    path: PathBuf,
}

impl StoppedCommand {
    /// Finds `argv[0]` on `PATH` ([`launch::resolve_program`]) and forks a child
    /// that waits to `exec` it, or [`launch::SCRIPT_SHELL`] with it when it is
    /// a script without a `#!` line ([`launch::command_line`]). One `fork`, a
    /// few `stat`s and a read of four bytes.
    pub fn spawn(argv: &[OsString]) -> Result<StoppedCommand, TargetError> {
        StoppedCommand::spawn_with(argv, false)
    }

    /// [`StoppedCommand::spawn`], and with `stdout_to_stderr` the command's
    /// standard output is this process's standard error (when this
    /// process's stdout carries a report).
    pub fn spawn_with(
        argv: &[OsString],
        stdout_to_stderr: bool,
    ) -> Result<StoppedCommand, TargetError> {
        let name = argv.first().ok_or(TargetError::NoCommand)?;
        let path = launch::resolve_program(name).map_err(|e| match e {
            LaunchError::NotExecutable { path, error } => TargetError::CannotExecute {
                path: path.display().to_string(),
                error,
            },
            _ => TargetError::NotFound(name.to_string_lossy().into_owned()),
        })?;
        let (program, line) = launch::command_line(&path, argv);
        let cpath = CString::new(program.as_os_str().as_bytes())
            .map_err(|_| TargetError::NotFound(name.to_string_lossy().into_owned()))?;
        let args: Vec<CString> = line
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| TargetError::CannotExecute {
                path: path.display().to_string(),
                error: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "argument holds a NUL byte",
                ),
            })?;
        let child = process::spawn_stopped(&cpath, &args, stdout_to_stderr)?;
        Ok(StoppedCommand { child, path })
    }

    /// The child's pid (the program's, once it runs).
    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    /// Lets the child `exec` the program, and says whether the `exec` worked.
    pub fn release(self) -> Result<(), TargetError> {
        match self.child.release()? {
            Ok(_) => Ok(()),
            Err(failed) => {
                let path = self.path.display().to_string();
                Err(if Errno::from_raw(failed.errno) == Errno::NOENT {
                    TargetError::NotFound(path)
                } else {
                    TargetError::CannotExecute {
                        path,
                        error: std::io::Error::from_raw_os_error(failed.errno),
                    }
                })
            }
        }
    }
}

/// The threads of running process `pid`, to open events on each. Refused
/// with [`TargetError::NotPermitted`] when this process may not read the
/// other's mappings (the kernel's ptrace read check, the same one perf
/// events on it need): attaching would count nothing. Costs a `kill(pid, 0)`,
/// opening `/proc/PID/maps` and reading `/proc/PID/task`.
pub fn attach_tasks(pid: i32) -> Result<Vec<i32>, TargetError> {
    if pid <= 0 || !process::exists(pid) {
        return Err(TargetError::NoSuchProcess(pid));
    }
    if let Err(e) = std::fs::File::open(format!("/proc/{pid}/maps")) {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::metadata(format!("/proc/{pid}"))
                .map_err(|_| TargetError::NoSuchProcess(pid))?
                .uid();
            return Err(TargetError::NotPermitted {
                pid,
                owner,
                same_user: owner == crate::sys::libc_info::effective_uid(),
                root: crate::sys::libc_info::is_root().then(RootRefusal::of_this_process),
            });
        }
    }
    proc_tasks::thread_ids(Some(pid)).map_err(|_| TargetError::NoSuchProcess(pid))
}

/// Adds the mappings of `/proc/PID/maps` to `spaces` (those made before
/// attaching, or whose records were lost); the error says why not. One read.
pub fn add_mappings(pid: i32, spaces: &mut AddressSpaces) -> Result<(), String> {
    let entries = proc_maps::read(Some(pid)).map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    spaces.add_maps(pid as u32, &entries);
    Ok(())
}

/// Waits until `duration` has passed since `start`, checking every 50 ms
/// whether the process is still there (`still_there`). Returns whether it
/// went away before the window ended.
pub fn watch_window(
    start: Instant,
    duration: Duration,
    mut still_there: impl FnMut() -> bool,
) -> bool {
    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(50).min(duration));
        if !still_there() {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_unexecutable_commands_are_told_apart() {
        let missing = StoppedCommand::spawn(&["no-such-program-pagewise".into()]).unwrap_err();
        assert_eq!(missing.exit_code(), 127, "{missing}");
        let dir = tempfile::tempdir().unwrap();
        let unexecutable = StoppedCommand::spawn(&[dir.path().into()]).unwrap_err();
        assert_eq!(unexecutable.exit_code(), 126, "{unexecutable}");
        assert!(matches!(
            StoppedCommand::spawn(&[]),
            Err(TargetError::NoCommand)
        ));
    }

    #[test]
    fn a_released_command_runs_and_a_failed_exec_is_reported() {
        let command = StoppedCommand::spawn(&["true".into()]).unwrap();
        let pid = command.pid();
        command.release().unwrap();
        let (exit, _) = process::wait(pid).unwrap();
        assert!(matches!(exit, process::ExitKind::Exited(0)));
        // A file given by path that is not a program: exec refuses it.
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.txt");
        std::fs::write(&data, "not a program").unwrap();
        let command = StoppedCommand::spawn(&[data.into()]).unwrap();
        let err = command.release().unwrap_err();
        assert_eq!(err.exit_code(), 126, "{err}");
    }

    #[test]
    fn a_refused_attach_says_whose_process_it_is() {
        let other = not_permitted(1, 0, false, None);
        assert!(other.starts_with("pid 1 belongs to another user (uid 0): watching it needs root"));
        let own = not_permitted(42, 1000, true, None);
        assert!(own.starts_with("pid 42 is closed to inspection"), "{own}");
        assert!(!own.contains("another user"), "{own}");
    }

    /// Root refused (`stat --pid 1` in a sandbox said "watching it needs
    /// root"): the message says what confines this root instead.
    #[test]
    fn a_refused_attach_as_root_never_asks_for_root() {
        for (refusal, says) in [
            (RootRefusal::NoSysPtrace, "lack CAP_SYS_PTRACE"),
            (RootRefusal::UserNamespace, "root of a user namespace"),
            (RootRefusal::SecurityModule, "security module"),
        ] {
            let text = not_permitted(1, 0, true, Some(refusal));
            assert!(
                text.starts_with("pid 1 is closed to this process"),
                "{text}"
            );
            assert!(text.contains(says), "{text}");
            assert!(!text.contains("needs root"), "{text}");
            assert!(!text.contains('\n'), "one line: {text}");
        }
    }

    #[test]
    fn attaching_needs_a_live_process() {
        let me = std::process::id() as i32;
        assert!(attach_tasks(me).unwrap().contains(&me));
        assert!(matches!(
            attach_tasks(0),
            Err(TargetError::NoSuchProcess(0))
        ));
        let mut spaces = AddressSpaces::new();
        add_mappings(me, &mut spaces).unwrap();
        let here = attaching_needs_a_live_process as *const () as u64;
        assert!(spaces.lookup(me as u32, here).is_some());
        assert!(add_mappings(i32::MAX, &mut spaces)
            .unwrap_err()
            .starts_with(&format!("/proc/{}/maps: ", i32::MAX)));
    }
}
