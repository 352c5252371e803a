//! Test support shared by every pagewise test suite (a dev-dependency only).
//!
//! **Skips that show.** A test that cannot check its claim on this machine
//! (no root, no tracefs, no C compiler, a CPU feature missing…) calls
//! [`skip!`] with a [`Need`] and a reason, and returns. The skip is printed as
//! one `SKIP <test>: <need>: <reason>` line straight to the process's standard
//! error (libtest captures only the `print!` family, so the line shows in a
//! plain `cargo test` run even for a test that then passes), and appended to
//! the file named by `PAGEWISE_SKIP_LOG` when that is set. `scripts/test`
//! sets it and prints the count of tests run, skipped (with reasons) and
//! exercised; `.ci/run` fails when a run that had root, tracefs, a compiler,
//! perf events and hugetlb pages still skipped for one of them.
//!
//! **C fixtures.** [`compile_c`] tells "no compiler here" (a skip) from "the
//! compiler rejected the fixture" (a failure: the test panics with the
//! compiler's message), so a broken fixture never passes as a skip.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable naming the file that collects skip lines.
pub const SKIP_LOG_ENV: &str = "PAGEWISE_SKIP_LOG";

/// What a skipped test needed and did not have. The names are stable: the CI
/// script matches on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Running as root (uid 0).
    Root,
    /// tracefs mounted (`/sys/kernel/tracing`), for tracepoints.
    Tracefs,
    /// Free hugetlb pages in a pool.
    Hugetlb,
    /// A 2 MiB hugetlb pool with no free pages (so a fallback path is taken).
    NoHugetlb,
    /// Transparent huge pages not `never`.
    Thp,
    /// A working C compiler (`cc`) or linker feature.
    Compiler,
    /// perf events that open here (software counters, sampling).
    PerfEvents,
    /// A CPU feature this CPU lacks.
    CpuFeature,
    /// A kernel feature this kernel lacks.
    Kernel,
    /// A program that is not installed (setpriv, strace, python3, …).
    Tool,
    /// Anything else; the reason says what.
    Other,
}

impl Need {
    /// The stable name used in skip lines.
    pub fn name(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::Tracefs => "tracefs",
            Need::Hugetlb => "hugetlb",
            Need::NoHugetlb => "no-hugetlb",
            Need::Thp => "thp",
            Need::Compiler => "compiler",
            Need::PerfEvents => "perf-events",
            Need::CpuFeature => "cpu-feature",
            Need::Kernel => "kernel",
            Need::Tool => "tool",
            Need::Other => "other",
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The running test's name: libtest names each test's thread after it.
fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("<unnamed test>")
        .to_owned()
}

/// The test binary's crate-level name (`copy`, `stat`, `pagewise` for unit tests).
fn binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| match n.rsplit_once('-') {
            Some((stem, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => stem.to_owned(),
            _ => n,
        })
        .unwrap_or_default()
}

/// Records that the running test (or one part of it, when `part` is given)
/// did not check its claim. Prefer the [`skip!`] and [`skip_part!`] macros.
pub fn record_skip(need: Need, part: Option<&str>, reason: &str) {
    let test = match part {
        Some(p) => format!("{}::{} [{p}]", binary_name(), current_test()),
        None => format!("{}::{}", binary_name(), current_test()),
    };
    let reason = reason.replace('\n', " ");
    let line = format!("SKIP {test}: {need}: {reason}\n");
    // Straight to fd 2: libtest captures print!/eprint!, not io::stderr().
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(SKIP_LOG_ENV).filter(|v| !v.is_empty()) {
        // One short write in append mode: lines from parallel tests do not interleave.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(format!("{test}\t{need}\t{reason}\n").as_bytes()));
        if let Err(e) = appended {
            panic!(
                "cannot append to {SKIP_LOG_ENV}={}: {e}",
                log.to_string_lossy()
            );
        }
    }
}

/// Skips the rest of the running test: records why and returns from it.
///
/// `skip!(Need::Root, "reserving hugetlb pages needs root")`, or with
/// format arguments after the need.
#[macro_export]
macro_rules! skip {
    ($need:expr, $($arg:tt)+) => {{
        $crate::record_skip($need, None, &format!($($arg)+));
        return;
    }};
}

/// Records that one part of the running test was not checked, and goes on
/// with the rest: `skip_part!("python3", Need::Tool, "/usr/bin/python3 is missing")`.
#[macro_export]
macro_rules! skip_part {
    ($part:expr, $need:expr, $($arg:tt)+) => {{
        $crate::record_skip($need, Some($part), &format!($($arg)+));
    }};
}

/// Builds `libpagewise.so` and `libpagewise.a` of the code under test and
/// returns the folder they are in.
///
/// `cargo test` does not build a crate's cdylib and staticlib, and a copy left
/// in `target/debug` by an earlier `cargo build` may be stale. So this runs
/// `cargo build -p pagewise-ffi --lib` in `workspace`, into a target folder
/// of its own under `build_dir` (the test binary's `target/debug`; the outer
/// `cargo test` holds the lock on `target/`): a no-op when nothing changed, a
/// build of the library and its dependencies the first time. Call it once
/// per test binary ([`ffi_library_dir`] does). The error is cargo's output.
pub fn build_ffi_library(workspace: &Path, build_dir: &Path) -> Result<PathBuf, String> {
    let target = build_dir.join("ffi-for-tests");
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo
        .args([
            "build",
            "--quiet",
            "-p",
            "pagewise-ffi",
            "--lib",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(workspace);
    for inherited in [
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
    ] {
        cargo.env_remove(inherited);
    }
    let out = cargo
        .output()
        .map_err(|e| format!("cannot run {}: {e}", env!("CARGO")))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p pagewise-ffi failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(target.join("debug"))
}

/// The folder holding `libpagewise.so` and `libpagewise.a` of the code under
/// test: [`build_ffi_library`] run once per test binary, for the workspace
/// this crate is in, into the test binary's build folder (`target/debug`:
/// the binary is in its `deps/`). Panics with cargo's output if the build
/// fails.
pub fn ffi_library_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let exe = std::env::current_exe().expect("the test binary's path");
        let build_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary is in target/<profile>/deps");
        build_ffi_library(&workspace, build_dir).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// `setpriv` as user and group 65534 (nobody) without supplementary
/// groups, then `program`. Needs root.
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program);
    c
}

/// [`as_nobody`] for a pagewise binary, with [`home_for_nobody`] in `dir`
/// as `HOME` and no `XDG_CACHE_HOME`: its caches go away with `dir`.
pub fn pagewise_as_nobody(bin: &std::path::Path, dir: &std::path::Path) -> std::process::Command {
    let mut c = as_nobody(bin);
    c.env("HOME", home_for_nobody(dir))
        .env_remove("XDG_CACHE_HOME");
    c
}

/// A home directory for the nobody user (uid 65534) inside `dir` (which
/// nobody must be able to enter): `dir/home-65534`, owned by nobody, mode
/// 0700, made on the first call. Give it as `HOME` to a command a test runs
/// as nobody, so that what pagewise caches for that user (copy plans,
/// symbol lists) goes away with `dir` instead of into `/tmp/pagewise-65534`,
/// the fallback for a user whose home it cannot write. Needs root.
pub fn home_for_nobody(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let home = dir.join("home-65534");
    if !home.is_dir() {
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    home
}

/// Whether this process runs as root (effective uid 0), from `/proc/self/status`.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Whether tracefs is mounted where tracepoint ids can be read.
pub fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
        })
        .unwrap_or(false)
}

/// Why no C compiler can be used here, or `None` when `cc` runs.
pub fn compiler_missing() -> Option<String> {
    match std::process::Command::new("cc")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("`cc --version` exited with {s}")),
        Err(e) => Some(format!("no C compiler (cc): {e}")),
    }
}

/// Writes `source` to `DIR/NAME.c` and compiles it with the system `cc -O1`
/// and `flags` into `DIR/NAME`.
///
/// `Err(reason)` only when there is no compiler at all (the caller skips with
/// [`Need::Compiler`]); a compiler that rejects the fixture is a test failure,
/// so this panics with the compiler's output.
pub fn compile_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Result<PathBuf, String> {
    if let Some(why) = compiler_missing() {
        return Err(why);
    }
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("write {}: {e}", src.display()));
    compile_c_file(&src, &dir.join(name), flags)
}

/// Compiles the C file `src` with `cc -O1 flags` into `out`; see [`compile_c`]
/// for what is an error and what is a panic.
pub fn compile_c_file(src: &Path, out: &Path, flags: &[&str]) -> Result<PathBuf, String> {
    if let Some(why) = compiler_missing() {
        return Err(why);
    }
    compile_with("cc", src, out, flags)
}

/// Compiles `src` with `compiler -O1 flags` into `out` (for C++ fixtures:
/// `g++`). `Err(reason)` when the compiler cannot be started (a skip); a
/// compiler that rejects the file is a test failure (a panic).
pub fn compile_with(
    compiler: &str,
    src: &Path,
    out: &Path,
    flags: &[&str],
) -> Result<PathBuf, String> {
    let output = std::process::Command::new(compiler)
        .args(["-O1", "-o"])
        .arg(out)
        .arg(src)
        .args(flags)
        .output()
        .map_err(|e| format!("no compiler ({compiler}): {e}"))?;
    assert!(
        output.status.success(),
        "{compiler} {flags:?} failed on {} ({}): {}",
        src.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(out.to_path_buf())
}

/// Whether `cc FLAGS` can build and link a trivial program here (for optional
/// toolchain features such as `-static` or `-fuse-ld=gold`): `Err(reason)`
/// when it cannot. Unlike [`compile_c`], a failure here is a skip reason.
pub fn compiler_supports(dir: &Path, flags: &[&str]) -> Result<(), String> {
    if let Some(why) = compiler_missing() {
        return Err(why);
    }
    let src = dir.join("pagewise_probe_flags.c");
    std::fs::write(&src, "int main(void) { return 0; }\n")
        .unwrap_or_else(|e| panic!("write {}: {e}", src.display()));
    let output = std::process::Command::new("cc")
        .arg("-o")
        .arg(dir.join("pagewise_probe_flags"))
        .arg(&src)
        .args(flags)
        .output()
        .map_err(|e| format!("no C compiler (cc): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc {flags:?} cannot build a trivial program here: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Copies the executable `from` to `to` so that it can be run at once (panics
/// when it cannot: a test's set-up failed).
pub fn copy_executable(from: &Path, to: &Path) {
    // Copied by a child process: a descriptor open for writing on the new
    // file in this (multi-threaded) test process would be inherited by a
    // sibling test's fork, and exec of the copy would fail with ETXTBSY
    // until that child execs in turn.
    let status = std::process::Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("cannot run cp: {e}"));
    assert!(
        status.success(),
        "cp {} {} failed: {status}",
        from.display(),
        to.display()
    );
}

/// Whether the program `name` can be started (`name --version` or `--help` runs).
pub fn tool_missing(name: &str) -> Option<String> {
    match std::process::Command::new(name)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(_) => None,
        Err(e) => Some(format!("{name} is not installed: {e}")),
    }
}

/// What `/proc/PID/task/TID` shows of one thread: the system call it is
/// blocked in, its voluntary context switches and how long it has run.
/// Reading another user's thread needs root (or the same user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskState {
    /// The number of the system call the thread is blocked in (202 is
    /// `futex` on x86-64); `None` while it runs.
    pub syscall: Option<u64>,
    /// Times it gave up the CPU to wait (`voluntary_ctxt_switches`).
    pub voluntary_switches: u64,
    /// Nanoseconds it has run on a CPU (`schedstat`).
    pub run_ns: u64,
}

/// `futex` on x86-64.
pub const SYS_FUTEX: u64 = 202;

/// The state of thread `tid` of process `pid`; panics when it cannot be read
/// (the thread is gone).
pub fn task_state(pid: u32, tid: u32) -> TaskState {
    let task = format!("/proc/{pid}/task/{tid}");
    let read = |file: &str| {
        std::fs::read_to_string(format!("{task}/{file}"))
            .unwrap_or_else(|e| panic!("cannot read {task}/{file}: {e}"))
    };
    let syscall = read("syscall")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok());
    let voluntary_switches = read("status")
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no voluntary_ctxt_switches in {task}/status"));
    let run_ns = read("schedstat")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no run time in {task}/schedstat"));
    TaskState {
        syscall,
        voluntary_switches,
        run_ns,
    }
}

/// The calling thread's id (its name under `/proc/self/task`).
pub fn thread_id() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str()?.parse().ok())
        .expect("/proc/thread-self names a thread")
}

/// Waits until thread `tid` of process `pid` is in one `FUTEX_WAIT` that has
/// lasted at least 2 ms: seen there twice, 2 ms apart, with no wake-up in
/// between. A queue reader's short naps last 100 µs, so this is its long
/// sleep, which only a writer's wake ends early. A condition, not a guess
/// at how long a hand-off takes: polls every 2 ms, panics after 60 s.
pub fn wait_until_asleep_in_futex(pid: u32, tid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let before = task_state(pid, tid);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let after = task_state(pid, tid);
        if before.syscall == Some(SYS_FUTEX)
            && after.syscall == Some(SYS_FUTEX)
            && before.voluntary_switches == after.voluntary_switches
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "thread {tid} of process {pid} never slept in a futex for 2 ms: {after:?}"
        );
    }
}

/// Waits until thread `tid` of process `pid` is inside a wait that began
/// after `since` (its state then): asleep in a futex, or having run 2 ms
/// more (spinning). Polls every millisecond, panics after 60 s.
pub fn wait_until_waiting(pid: u32, tid: u32, since: TaskState) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = task_state(pid, tid);
        if now.syscall == Some(SYS_FUTEX) || now.run_ns >= since.run_ns + 2_000_000 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "thread {tid} of process {pid} never waited: {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_names_drop_the_hash() {
        let name = binary_name();
        assert!(!name.is_empty());
        assert_eq!(name, "pagewise_testkit");
    }

    #[test]
    fn a_broken_fixture_fails_rather_than_skips() {
        if let Some(why) = compiler_missing() {
            skip!(Need::Compiler, "{why}");
        }
        let dir = std::env::temp_dir().join(format!("pagewise-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let broken = std::panic::catch_unwind(|| {
            compile_c(&dir, "broken", "int main(void) { return }\n", &[])
        });
        let good = compile_c(&dir, "good", "int main(void) { return 0; }\n", &[]);
        std::fs::remove_dir_all(&dir).ok();
        assert!(broken.is_err(), "a compile error must fail the test");
        assert!(good.is_ok());
    }

    #[test]
    fn skips_are_logged_with_test_need_and_reason() {
        let dir = std::env::temp_dir().join(format!("pagewise-skiplog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        // The variable is read at each skip; this test sets it for itself only
        // through a child process, so other tests' skips are not captured here.
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new(exe)
            .args(["--exact", "tests::child_that_skips", "--include-ignored"])
            .env(SKIP_LOG_ENV, &log)
            .output()
            .unwrap();
        assert!(status.status.success());
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(
            text,
            "pagewise_testkit::tests::child_that_skips\tkernel\twhy 42\n",
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        assert!(String::from_utf8_lossy(&status.stderr)
            .contains("SKIP pagewise_testkit::tests::child_that_skips: kernel: why 42"));
    }

    #[test]
    #[ignore = "run by skips_are_logged_with_test_need_and_reason in a child process"]
    fn child_that_skips() {
        skip!(Need::Kernel, "why {}", 42);
    }
}
