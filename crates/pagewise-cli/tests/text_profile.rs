//! CLI tests for `pagewise text profile`: a started command and a running process.

use assert_cmd::Command;
use pagewise::text::profile::{Location, Profile};

const BUSY: &str = "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done";

/// Why sampling events cannot be opened here, if they cannot.
fn sampling_unavailable() -> Option<String> {
    let ok = pagewise::observe::profile_sampler::sample_profile(
        &pagewise::observe::Target::Command(vec!["true".into()]),
        1_000_000,
    );
    match ok {
        Err(pagewise::observe::profile_sampler::ProfileError::Open(e)) => {
            Some(format!("sampling events cannot be opened here: {e}"))
        }
        _ => None,
    }
}

#[test]
fn profiles_a_command_and_keeps_its_exit_status() {
    if let Some(why) = sampling_unavailable() {
        pagewise_testkit::skip!(pagewise_testkit::Need::PerfEvents, "{why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sh.profile");
    let script = format!("{BUSY}; exit 3");
    Command::cargo_bin("pagewise")
        .unwrap()
        .args(["text", "profile", "--frequency", "5000", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .assert()
        .code(3);
    let profile = Profile::read(&out).unwrap();
    assert!(profile.total() > 0);
    assert_eq!(profile.event, "cpu-clock");
    let in_shell = profile.stacks.iter().any(|(_, s)| match &s[0] {
        Location::Address { object, .. } => {
            object.ends_with("sh") || object.ends_with("dash") || object.contains("libc")
        }
        _ => false,
    });
    assert!(
        in_shell,
        "no sample resolved in the shell or libc: {:?}",
        &profile.stacks[..profile.stacks.len().min(3)]
    );
}

#[test]
fn profiles_a_running_process() {
    if let Some(why) = sampling_unavailable() {
        pagewise_testkit::skip!(pagewise_testkit::Need::PerfEvents, "{why}");
    }
    let mut child = std::process::Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pid.profile");
    let result = Command::cargo_bin("pagewise")
        .unwrap()
        .args([
            "text",
            "profile",
            "--seconds",
            "0.5",
            "--pid",
            &child.id().to_string(),
            "-o",
        ])
        .arg(&out)
        .assert()
        .success()
        .get_output()
        .clone();
    let _ = child.kill();
    let _ = child.wait();
    let profile = Profile::read(&out).unwrap();
    assert!(
        profile.total() > 10,
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(profile
        .stacks
        .iter()
        .any(|(_, s)| matches!(s[0], Location::Address { .. })));
}

#[test]
fn missing_command_exits_127() {
    Command::cargo_bin("pagewise")
        .unwrap()
        .args([
            "text",
            "profile",
            "-o",
            "/dev/null",
            "--",
            "no-such-command-pagewise",
        ])
        .assert()
        .code(127);
    let out = Command::cargo_bin("pagewise")
        .unwrap()
        .args(["text", "profile"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8(out.stderr)
            .unwrap()
            .trim_end()
            .lines()
            .count(),
        1
    );
}

/// Runs `pagewise text profile OPTIONS -- sh -c 'touch ran; exit 3'` and
/// checks that it was refused before the command ran: status `code`, one
/// line on stderr containing `needle`, no `ran` file.
fn refused_before_running(options: &[&std::ffi::OsStr], code: i32, needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = Command::cargo_bin("pagewise")
        .unwrap()
        .args(["text", "profile"])
        .args(options)
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}; exit 3", ran.display()))
        .assert()
        .code(code)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{options:?}: {err}");
    assert!(!ran.exists(), "{options:?}: the command ran");
}

/// `--seconds` is the window of `--pid`: with a command it is a usage error
/// (status 2, one line), and the command does not run.
#[test]
fn seconds_without_pid_is_a_usage_error_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("p.profile");
    refused_before_running(
        &[
            "--seconds".as_ref(),
            "3".as_ref(),
            "-o".as_ref(),
            output.as_ref(),
        ],
        2,
        "--seconds applies only with --pid",
    );
    assert!(!output.exists());
}

/// `--pid` of a process that is not there is one line, said first: not
/// "sampling process …" before it, and the `-o` file is neither made nor
/// emptied.
#[test]
fn a_missing_pid_is_said_first_and_touches_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("kept.profile");
    std::fs::write(&kept, "an earlier profile").unwrap();
    let new = dir.path().join("new.profile");
    // Above any pid_max: never a process.
    let pid = i32::MAX.to_string();
    for output in [&kept, &new] {
        let out = Command::cargo_bin("pagewise")
            .unwrap()
            .args(["text", "profile", "--pid", &pid, "--seconds", "1", "-o"])
            .arg(output)
            .assert()
            .code(1)
            .get_output()
            .clone();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err, format!("pagewise: no process with pid {pid}\n"));
    }
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        "an earlier profile"
    );
    assert!(!new.exists());
}

/// An `-o` path that cannot be written (in a missing directory, or a
/// directory) is one line and status 1 before the command starts.
#[test]
fn unwritable_output_fails_before_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    for path in [dir.path().join("missing/p.profile"), dir.path().to_owned()] {
        refused_before_running(
            &["-o".as_ref(), path.as_ref()],
            1,
            &format!("cannot write {}", path.display()),
        );
    }
}
