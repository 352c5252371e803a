//! Another local user against a root queue: with read permission only (and
//! write permission on the directory, as in `/dev/shm`), user nobody must not
//! be able to stop or damage a writer or a reader, whatever it truncates,
//! writes, chmods or plants beside the queue. Also: files the queue creates
//! never get more permission than the user asked for.
//!
//! Tests that need a second user run its commands with
//! `setpriv --reuid=65534 --regid=65534 --clear-groups` and are skipped, with
//! the reason printed, when that does not work here.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::pagewise;

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("pagewise")
}

/// A directory like `/dev/shm`: everyone may create files in it (sticky).
fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// `setpriv … PROGRAM` as user and group 65534 (nobody), or why that is not
/// possible here.
fn as_nobody(program: &str) -> Result<std::process::Command, String> {
    static CHECK: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    CHECK
        .get_or_init(|| {
            if effective_uid() != 0 {
                return Err("not running as root".into());
            }
            let out = pagewise_testkit::as_nobody("id")
                .arg("-u")
                .output()
                .map_err(|e| format!("cannot run setpriv: {e}"))?;
            if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() != "65534" {
                return Err(format!(
                    "setpriv does not switch to user 65534: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(())
        })
        .clone()?;
    Ok(pagewise_testkit::as_nobody(program))
}

fn effective_uid() -> u32 {
    // The owner of a file this process just created is its effective user.
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().metadata().unwrap().uid()
}

macro_rules! nobody_or_skip {
    ($program:expr) => {
        match as_nobody($program) {
            Ok(c) => c,
            Err(reason) => {
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::Root,
                    "needs a second user (root and setpriv): {reason}"
                );
            }
        }
    };
}

/// Runs `program args…` as nobody; returns whether it succeeded.
fn nobody_runs(program: &str, args: &[&str], path: &Path) -> bool {
    as_nobody(program)
        .unwrap()
        .args(args)
        .arg(path)
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// `pagewise queue append Q` fed through a pipe, one line at a time.
struct Appender {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Appender {
    fn start(q: &Path) -> Appender {
        let mut child = std::process::Command::new(bin())
            .args(["queue", "append"])
            .arg(q)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        Appender { child, stdin }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin and returns the exit status and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let out = self.child.wait_with_output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// `pagewise queue tail --follow Q`, read a line at a time with a deadline.
struct Follower {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Follower {
    fn start(mut cmd: std::process::Command, q: &Path) -> Follower {
        let mut child = cmd
            .args(["queue", "tail", "--follow"])
            .arg(q)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    fn expect(&mut self, line: &str, within: Duration) {
        match self.lines.recv_timeout(within) {
            Ok(got) => assert_eq!(got, line),
            Err(e) => panic!(
                "the follower printed no {line:?} within {within:?} ({e}); exit status: {:?}",
                self.child.try_wait()
            ),
        }
    }

    /// Waits until the follower sleeps in its long `FUTEX_WAIT` for the
    /// next record (its main thread reads the queue).
    fn wait_until_asleep(&self) {
        let pid = self.child.id();
        pagewise_testkit::wait_until_asleep_in_futex(pid, pid);
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `pagewise queue append Q` under `umask`, feeding it `input`;
/// returns whether it succeeded.
fn append_with_umask(umask: &str, q: &Path, input: &str) -> bool {
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(format!(r#"umask {umask} && exec "$0" queue append "$1""#))
        .arg(bin())
        .arg(q);
    feed(sh, input.as_bytes())
}

/// Runs `cmd` with `input` on its stdin; returns whether it succeeded.
fn feed(mut cmd: std::process::Command, input: &[u8]) -> bool {
    let mut child = cmd.stdin(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait().unwrap().success()
}

/// Waits until `inspect` counts `n` records.
fn wait_for_records(q: &Path, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = pagewise()
            .args(["queue", "inspect", "--json"])
            .arg(q)
            .output()
            .unwrap();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            if v["records"] == n {
                return;
            }
        }
        assert!(Instant::now() < deadline, "never saw {n} records in {q:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn files_beside_the_queue_never_get_more_permission_than_the_queue() {
    let d = shared_dir();
    let q = d.path().join("q");
    assert!(append_with_umask("077", &q, "a\nb\n"));
    // A follower blocks while the writer appends: whatever wake machinery
    // there is exists now.
    let mut tail = Follower::start(std::process::Command::new(bin()), &q);
    tail.expect("a", Duration::from_secs(20));
    tail.expect("b", Duration::from_secs(20));
    let mut w = Appender::start(&q);
    w.send("c");
    tail.expect("c", Duration::from_secs(20));
    for entry in std::fs::read_dir(d.path()).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        assert_eq!(
            meta.mode() & 0o077,
            0,
            "{:?} has mode {:o} although the umask is 077",
            entry.path(),
            meta.mode() & 0o7777
        );
    }
    let (status, err) = w.finish();
    assert!(status.success(), "{err}");
}

#[test]
fn another_user_cannot_stop_a_writer_or_a_follower() {
    let _ = nobody_or_skip!("true");
    let d = shared_dir();
    let q = d.path().join("q");
    let mut w = Appender::start(&q);
    w.send("one");
    wait_for_records(&q, 1);
    let mut tail = Follower::start(std::process::Command::new(bin()), &q);
    tail.expect("one", Duration::from_secs(20));
    // Everything nobody may try with read permission on the queue and write
    // permission on the directory. Some of it fails (that is the point); none
    // of it may stop the root writer or the root follower.
    let wait = q.with_file_name("q.wait");
    assert!(
        !nobody_runs("truncate", &["-s", "0"], &q),
        "nobody truncated the queue"
    );
    assert!(
        !nobody_runs("chmod", &["666"], &q),
        "nobody changed the mode"
    );
    let _ = nobody_runs("truncate", &["-s", "0"], &wait);
    let _ = nobody_runs("truncate", &["-s", "1"], &wait);
    let _ = nobody_runs("chmod", &["666"], &wait);
    w.send("two");
    tail.expect("two", Duration::from_secs(20));
    let _ = nobody_runs("truncate", &["-s", "0"], &wait);
    w.send("three");
    tail.expect("three", Duration::from_secs(20));
    assert!(tail.alive(), "the follower died");
    let (status, err) = w.finish();
    assert!(status.success(), "the writer died: {status}: {err}");
    assert!(err.contains("appended 3 records"), "{err}");
    wait_for_records(&q, 3);
}

#[test]
fn a_side_file_planted_by_another_user_is_not_adopted() {
    let mut plant = nobody_or_skip!("sh");
    let d = shared_dir();
    let q = d.path().join("q");
    let wait = d.path().join("q.wait");
    // Before the queue exists, nobody plants what the writer used to create:
    // a 4 KiB wait file with the right magic, writable by all.
    let status = plant
        .arg("-c")
        .arg(r#"umask 0 && { printf PGWQWAIT; head -c 4088 /dev/zero; } > "$0""#)
        .arg(&wait)
        .status()
        .unwrap();
    assert!(status.success());
    let planted = std::fs::read(&wait).unwrap();
    let mut w = Appender::start(&q);
    w.send("one");
    wait_for_records(&q, 1);
    let mut tail = Follower::start(std::process::Command::new(bin()), &q);
    tail.expect("one", Duration::from_secs(20));
    // The follower is asleep now; nothing of it may be in nobody's file.
    tail.wait_until_asleep();
    assert!(
        std::fs::read(&wait).unwrap() == planted,
        "a root process wrote to a file another user owns"
    );
    assert!(nobody_runs("truncate", &["-s", "0"], &wait));
    w.send("two");
    tail.expect("two", Duration::from_secs(20));
    let (status, err) = w.finish();
    assert!(status.success(), "the writer died: {status}: {err}");
}

#[test]
fn a_reader_with_read_permission_only_is_woken_by_the_writer() {
    let nobody = nobody_or_skip!(bin().to_str().unwrap());
    let d = shared_dir();
    let q = d.path().join("q");
    let mut w = Appender::start(&q);
    w.send("one");
    wait_for_records(&q, 1);
    let mut tail = Follower::start(nobody, &q);
    tail.expect("one", Duration::from_secs(20));
    for line in ["two", "three"] {
        // The record comes while the reader sleeps, so it must be woken.
        tail.wait_until_asleep();
        w.send(line);
        tail.expect(line, Duration::from_secs(20));
    }
    let (status, err) = w.finish();
    assert!(status.success(), "{err}");
}

/// Appends `lines` to `q` with the CLI; returns the exit status and stderr.
fn append_lines(q: &Path, lines: &str) -> (bool, String) {
    let out = pagewise()
        .args(["queue", "append"])
        .arg(q)
        .write_stdin(lines.to_owned())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_link_planted_at_the_queue_path_is_not_followed() {
    let mut plant = nobody_or_skip!("ln");
    let d = shared_dir();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("roots-queue");
    assert!(append_lines(&target, "root's record\n").0);
    std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = std::fs::read(&target).unwrap();
    // nobody points the name root is about to use at root's own queue.
    let q = d.path().join("q");
    assert!(plant
        .arg("-s")
        .arg(&target)
        .arg(&q)
        .status()
        .unwrap()
        .success());
    let (ok, err) = append_lines(&q, "meant for a new queue\n");
    assert!(!ok, "root wrote through nobody's link");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        std::fs::read(&target).unwrap() == before,
        "the target changed"
    );
}

#[test]
fn a_queue_owned_by_another_user_is_refused_for_writing_but_readable() {
    let mut nobody = nobody_or_skip!(bin().to_str().unwrap());
    let d = shared_dir();
    let q = d.path().join("q");
    // nobody creates the queue root would otherwise have created.
    nobody.args(["queue", "append"]).arg(&q);
    assert!(feed(nobody, b"nobody's\n"));
    assert_eq!(std::fs::metadata(&q).unwrap().uid(), 65534);
    let (ok, err) = append_lines(&q, "root's\n");
    assert!(
        !ok,
        "root wrote to a queue nobody owns (and can truncate under it)"
    );
    assert!(err.contains("owned by user 65534"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let out = pagewise().args(["queue", "tail"]).arg(&q).output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, b"nobody's\n");
}

#[test]
fn a_new_queue_gets_the_mode_asked_for_minus_the_umask() {
    let d = shared_dir();
    let q = d.path().join("q");
    assert!(append_with_umask("027", &q, "x\n"));
    let meta = std::fs::metadata(&q).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!(meta.uid(), effective_uid());
    // The queue and its lock file: no temporary name is left.
    let mut names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["q", "q.lock"]);
}

/// A process of user nobody holding a POSIX read lock (`F_SETLK`,
/// `F_RDLCK`) on byte 0 of `q` — what any user who can read the queue can
/// take — until its stdin closes. Perl, because it is the one scripting
/// language another user can run here.
struct ReadLockHolder {
    child: Child,
}

impl ReadLockHolder {
    fn start(mut perl: std::process::Command, q: &Path) -> ReadLockHolder {
        let script = r#"use Fcntl qw(F_SETLK F_RDLCK SEEK_SET); $| = 1;
open(my $f, "<", $ARGV[0]) or die "open: $!";
my $l = pack("s s x4 q q i x4", F_RDLCK, SEEK_SET, 0, 1, 0);
fcntl($f, F_SETLK, $l) or die "lock: $!";
print "locked\n"; <STDIN>;"#;
        let mut child = perl
            .arg("-e")
            .arg(script)
            .arg(q)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "locked\n", "nobody could not take the read lock");
        ReadLockHolder { child }
    }
}

impl Drop for ReadLockHolder {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn a_read_lock_held_by_another_user_stops_no_writer() {
    let perl = nobody_or_skip!("perl");
    let d = shared_dir();
    let q = d.path().join("q");
    assert!(append_lines(&q, "one\n").0);
    // Between two writers, nobody (who may read the queue, mode 0644) takes
    // a read lock on byte 0: that used to keep every later writer out. (A
    // running writer holds the byte exclusively, so the lock waits for a gap.)
    let held = ReadLockHolder::start(perl, &q);
    let mut w = Appender::start(&q);
    w.send("two");
    wait_for_records(&q, 2);
    let out = pagewise()
        .args(["queue", "inspect", "--json"])
        .arg(&q)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The sign of life on byte 0 is hidden; root can open the lock file.
    assert_eq!(v["read_locked"], true, "{v}");
    assert_eq!(v["writer_alive"], true, "{v}");
    w.send("three");
    wait_for_records(&q, 3);
    let (status, err) = w.finish();
    assert!(
        status.success(),
        "a read lock held by user nobody stopped the writer: {status}: {err}"
    );
    drop(held);
}

#[test]
fn a_lock_file_planted_by_another_user_is_refused() {
    let mut link = nobody_or_skip!("ln");
    let d = shared_dir();
    let q = d.path().join("q");
    let lock = d.path().join("q.lock");
    let elsewhere = d.path().join("roots-file");
    std::fs::write(&elsewhere, b"root's bytes").unwrap();
    // A symbolic link at the lock file's name: never followed.
    assert!(link
        .arg("-s")
        .arg(&elsewhere)
        .arg(&lock)
        .status()
        .unwrap()
        .success());
    let (ok, err) = append_lines(&q, "x\n");
    assert!(!ok, "root wrote with a lock file nobody planted as a link");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"root's bytes");
    assert!(!q.exists(), "a queue was created anyway");
    std::fs::remove_file(&lock).unwrap();
    // A regular lock file nobody owns (and could hold a lock on).
    assert!(nobody_runs("touch", &[], &lock));
    assert_eq!(std::fs::metadata(&lock).unwrap().uid(), 65534);
    let (ok, err) = append_lines(&q, "x\n");
    assert!(!ok, "root used a lock file nobody owns");
    assert!(err.contains("owned by user 65534"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Without it, the queue is made and its lock file is private.
    std::fs::remove_file(&lock).unwrap();
    assert!(append_lines(&q, "x\n").0);
    let meta = std::fs::symlink_metadata(&lock).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.mode() & 0o777, 0o600);
}
