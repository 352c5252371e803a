//! Helpers shared by the CLI tests.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The `pagewise` binary under test, as a command to add arguments to.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn pagewise() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("pagewise").unwrap()
}

/// What `pagewise ARGS` prints on stdout, after checking that it succeeded.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn stdout_of(args: &[&str]) -> String {
    let out = pagewise()
        .args(args)
        .assert()
        .success()
        .get_output()
        .clone();
    String::from_utf8(out.stdout).expect("UTF-8 on stdout")
}

/// The preload library for `pagewise run --huge-text`, for tests that want to
/// name it (`PAGEWISE_PRELOAD`): the copy the CLI's build script built to embed
/// (beside the test's pagewise binary, in `pagewise-preload-build`), else one
/// next to the binary when `cargo build --workspace` made it. The binary
/// carries its own, so most tests need none.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn preload_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let bin = assert_cmd::cargo::cargo_bin("pagewise");
        let profile_dir = bin.parent().unwrap();
        let profile = profile_dir.file_name().unwrap();
        let nested = profile_dir.join("pagewise-preload-build");
        let embedded = std::fs::read_dir(&nested)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .map(|target| target.path().join(profile).join("libpagewise_preload.so"))
            .find(|lib| lib.is_file())
            .unwrap_or(nested);
        if embedded.is_file() {
            return embedded;
        }
        let beside = profile_dir.join("libpagewise_preload.so");
        assert!(
            beside.is_file(),
            "no preload library at {} or {}",
            embedded.display(),
            beside.display()
        );
        beside
    })
    .clone()
}

/// A private cache directory for the embedded preload library, shared by the
/// tests of one test binary (`XDG_CACHE_HOME`), so tests never write to the
/// user's own cache.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn test_cache_home() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
        .path()
        .to_owned()
}

/// Checks the `machine` object every `bench … --json` report carries: the
/// same keys in every experiment, filled from this machine where it can be
/// read (vendor and model numbers from `cpuid`, caches from sysfs, kernel).
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn check_machine(report: &serde_json::Value) {
    let m = &report["machine"];
    for key in [
        "vendor",
        "cpu",
        "family",
        "model",
        "stepping",
        "isa",
        "online_cpus",
        "caches",
        "kernel",
        "thp_enabled",
        "hugetlb",
        "glibc",
        "hypervisor",
    ] {
        assert!(m.get(key).is_some(), "machine.{key} missing: {m}");
    }
    for key in ["avx2", "avx512f", "avx512bw", "erms", "fsrm"] {
        assert!(m["isa"][key].is_boolean(), "machine.isa.{key}: {m}");
    }
    assert!(m["online_cpus"].as_u64().unwrap_or(0) >= 1, "{m}");
    assert!(m["caches"].is_array(), "{m}");
    if cfg!(target_arch = "x86_64") {
        assert!(m["vendor"].is_string() && m["family"].is_u64(), "{m}");
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(m["kernel"], release.trim(), "{m}");
}

/// Checks the `machine:` line that heads every experiment's table.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn check_machine_line(stdout: &str) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("machine: "))
        .unwrap_or_else(|| panic!("no machine: line in:\n{stdout}"));
    for part in ["CPUs; kernel ", "; THP ", "; glibc "] {
        assert!(line.contains(part), "{part:?} missing in {line}");
    }
}

/// A copy of the binary that the nobody user can run (the build folder may
/// not be reachable), or why not: it needs root and `setpriv`.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn binary_for_nobody(
) -> Result<(tempfile::TempDir, std::path::PathBuf), (pagewise_testkit::Need, &'static str)> {
    if !pagewise_testkit::is_root() {
        return Err((
            pagewise_testkit::Need::Root,
            "needs root to drop to the nobody user",
        ));
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err((pagewise_testkit::Need::Tool, "setpriv is not installed"));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("pagewise");
    pagewise_testkit::copy_executable(&assert_cmd::cargo::cargo_bin("pagewise"), &bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    Ok((dir, bin))
}

/// `setpriv` as the nobody user, then `bin ARGS` (`bin` from
/// [`binary_for_nobody`]), with a home of its own beside `bin` that goes
/// away with the test's directory.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn as_nobody(bin: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut c = pagewise_testkit::pagewise_as_nobody(bin, bin.parent().unwrap());
    c.args(args);
    c
}

/// The pid a command under test wrote to `file` (`echo $$ > FILE`), once
/// the whole line is there: the command is running. Panics after 60 s.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn pid_written_to(file: &std::path::Path) -> u32 {
    let started = std::time::Instant::now();
    loop {
        match std::fs::read_to_string(file) {
            Ok(pid) if pid.ends_with('\n') => return pid.trim().parse().unwrap(),
            _ => {}
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "the command never wrote its pid to {}",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The real binary as a `std::process::Command`, started through `env
/// --default-signal` so that `SIGINT`, `SIGQUIT` and `SIGHUP` are at their
/// default disposition in it whatever the test inherited: a test run as a
/// background job (`cmd &` in a script, as CI may run) starts with `SIGINT`
/// and `SIGQUIT` ignored, and pagewise keeps a signal ignored that was
/// ignored when it started (as `nohup` asks). `env` execs the binary, so the
/// child's pid is pagewise's. Or why not: `env` lacks the option (coreutils
/// before 8.31).
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn pagewise_with_default_signals(
) -> Result<std::process::Command, (pagewise_testkit::Need, &'static str)> {
    const SIGNALS: &str = "--default-signal=INT,QUIT,HUP";
    let supported = std::process::Command::new("env")
        .args([SIGNALS, "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !supported {
        return Err((
            pagewise_testkit::Need::Tool,
            "env has no --default-signal (coreutils 8.31 or later)",
        ));
    }
    let mut command = std::process::Command::new("env");
    command
        .arg(SIGNALS)
        .arg(assert_cmd::cargo::cargo_bin("pagewise"));
    Ok(command)
}

/// Sends `kill -SIGNAL` (a name: `TERM`, `INT`, …) to process `pid`, or to
/// process group `-pid` when `pid` is negative.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn send_signal(pid: i64, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), "--", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} -- {pid}: {status}");
}

/// Whether process `pid` has ended: gone from /proc, or a zombie that its
/// parent has not reaped yet.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn has_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.contains(") Z "),
        Err(_) => true,
    }
}
