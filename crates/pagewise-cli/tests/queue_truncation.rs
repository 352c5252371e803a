//! A queue truncated while `pagewise queue tail` reads it: the reader must
//! stop with a one-line `Truncated` error (or finish first), never die of
//! SIGBUS. The truncation lands at a random moment of the read, 100 times.
//! (Before the SIGBUS guard, 3 of 6 such runs died of SIGBUS.)

use assert_cmd::Command;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn truncating_a_queue_under_tail_never_kills_it() {
    let d = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let template = d.path().join("template");
    // ~16 MiB of records in 1 MiB chunks.
    let line = "x".repeat(1000) + "\n";
    Command::cargo_bin("pagewise")
        .unwrap()
        .args(["queue", "append", "--chunk-size", "1MiB"])
        .arg(&template)
        .write_stdin(line.repeat(16 << 10))
        .assert()
        .success();
    let bin = assert_cmd::cargo::cargo_bin("pagewise");
    let q = d.path().join("q");
    let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ u64::from(std::process::id()));
    let (mut truncated, mut finished) = (0, 0);
    for run in 0..100 {
        std::fs::copy(&template, &q).unwrap();
        let tail = std::process::Command::new(&bin)
            .args(["queue", "tail", "--raw"])
            .arg(&q)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(20_000)));
        let cut = std::fs::OpenOptions::new().write(true).open(&q).unwrap();
        cut.set_len(3 << 20).unwrap();
        let out = tail.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            None,
            "run {run}: tail died of signal {:?}: {err}",
            out.status.signal()
        );
        if out.status.success() {
            finished += 1;
        } else {
            // Truncated under the reader; or before it reached (or opened)
            // that part of the file, which then ends inside a record.
            assert!(
                err.starts_with("pagewise: ")
                    && (err.contains("truncated") || err.contains("past the end of the file")),
                "run {run}: {err}"
            );
            assert_eq!(err.trim_end().lines().count(), 1, "run {run}: {err}");
            truncated += 1;
        }
    }
    eprintln!("100 runs: {truncated} stopped with Truncated, {finished} finished first");
    assert!(
        truncated >= 10,
        "the truncation rarely landed during the read"
    );
}
