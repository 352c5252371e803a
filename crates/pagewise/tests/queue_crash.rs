//! Crash tests: a writer process is killed with SIGKILL at random points —
//! half the time by a hook between a record's payload and its commit, half
//! the time by the test at a random moment while the writer is appending (the
//! test waits for a random number of appends to return, then kills at once,
//! long before the writer would stop) — and after each kill a reader must
//! see exactly the records whose append returned, in order, with no partial
//! record, and the next writer must continue the queue.
//!
//! The writer runs in a child process: this test binary re-executed with
//! `PAGEWISE_CRASH_CHILD` set, which makes the same test function play the
//! writer. After every append returns, the child stores how many appends
//! returned in a small shared "ack" file, so the test knows which records must
//! exist.

use pagewise::os::file_map::WriteMap;
use pagewise::queue::{
    inspect, Options, PreTouch, PreTouchMode, Reader, ReaderOptions, Start, Writer,
};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "PAGEWISE_CRASH_CHILD";
const TEST_NAME: &str = "writer_killed_at_random_points_loses_nothing";
const RUNS: u64 = 240;
const CHUNK: u64 = 64 << 10;
/// When the test kills at a random moment, it does so once this many appends
/// at most (a random number up to it) have returned.
const CAP: u64 = 20_000;
/// The writer stops appending after this many (and waits to be killed), so
/// a test that is very late to kill still verifies a bounded queue. Ten
/// times the latest kill point: a kill that comes this late is reported.
const STOP: u64 = 10 * CAP;

fn options() -> Options {
    Options {
        chunk_size: CHUNK,
        pretouch: Some(PreTouch {
            window: 256 << 10,
            max_window: 1 << 20,
            lead: Duration::from_millis(2),
            mode: PreTouchMode::Thread,
        }),
        ..Options::default()
    }
}

/// Record `seq`: its sequence number, then a byte pattern; 0 to ~500 bytes.
fn payload(seq: u64) -> Vec<u8> {
    let len = (seq.wrapping_mul(2_654_435_761) % 500) as usize;
    let mut p: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8 | 1).collect();
    if len >= 8 {
        p[..8].copy_from_slice(&seq.to_le_bytes());
    }
    p
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The child: open the queue as its writer, append from `start`, ack each
/// return; with `stop_at`, die by SIGKILL after writing that record's payload
/// and before its commit.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let (path, ack_path) = (Path::new(parts[0]), Path::new(parts[1]));
    let start: u64 = parts[2].parse().unwrap();
    let stop_at: Option<u64> = parts[3].parse().ok();
    let ack_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ack_path)
        .unwrap();
    let ack = WriteMap::map(&ack_file, 0, 4096, false).unwrap();
    let mut w = Writer::open(path, options()).unwrap();
    println!("PWCRASH started {}", w.position());
    if let Some(stop) = stop_at {
        // The hook runs once per record, after its payload and before its commit.
        let mut commits = start;
        w.set_commit_hook(Some(Box::new(move |_| {
            if commits == stop {
                pagewise::os::process::sigkill(std::process::id() as libc::pid_t).unwrap();
                std::thread::sleep(Duration::from_secs(60));
            }
            commits += 1;
        })));
        for seq in start.. {
            w.append(&payload(seq)).unwrap();
            ack.store_u64(0, seq + 1, Ordering::Release);
        }
    } else {
        // Append until killed; past STOP records just wait (keeps the queue,
        // and the test's verification, bounded).
        for seq in start..start + STOP {
            w.append(&payload(seq)).unwrap();
            ack.store_u64(0, seq + 1, Ordering::Release);
        }
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn writer_killed_at_random_points_loses_nothing() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("q");
    let ack_path = dir.path().join("ack");
    std::fs::write(&ack_path, vec![0u8; 4096]).unwrap();
    let ack_file = std::fs::File::open(&ack_path).unwrap();
    drop(Writer::create(&path, options()).unwrap());
    let data_file = std::fs::File::open(&path).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(std::process::id()));
    let exe = std::env::current_exe().unwrap();
    let mut total = 0u64;
    let mut last = None;
    let mut hook_kills = 0;
    let mut mid_append_kills = 0;
    for run in 0..RUNS {
        let by_hook = run % 2 == 0;
        let stop_at = by_hook.then(|| total + 1 + rng.next() % 3000);
        let spec = format!(
            "{}|{}|{}|{}",
            path.display(),
            ack_path.display(),
            total,
            stop_at.map_or_else(|| "-".to_owned(), |s| s.to_string())
        );
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut started = false;
        let mut line = String::new();
        while lines.read_line(&mut line).unwrap() > 0 {
            if line.contains("PWCRASH started") {
                started = true;
                break;
            }
            line.clear();
        }
        assert!(started, "run {run}: the writer did not start");
        if !by_hook {
            // Kill once a random number of appends returned, a few
            // microseconds later: somewhere inside the append loop.
            let kill_after = total + 1 + rng.next() % CAP;
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut ack = [0u8; 8];
            loop {
                ack_file.read_exact_at(&mut ack, 0).unwrap();
                if u64::from_le_bytes(ack) >= kill_after {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "run {run}: the writer never reached {kill_after} appends"
                );
                std::hint::spin_loop();
            }
            let spin = Instant::now();
            let pause = Duration::from_nanos(rng.next() % 20_000);
            while spin.elapsed() < pause {
                std::hint::spin_loop();
            }
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "run {run}: the writer must die by SIGKILL: {status}"
        );

        let mut ack = [0u8; 8];
        ack_file.read_exact_at(&mut ack, 0).unwrap();
        let acked = u64::from_le_bytes(ack);
        // Every 40 runs check the whole queue; otherwise from the last record seen.
        let full = run % 40 == 39;
        if full {
            let info = inspect(&path).unwrap();
            assert!(
                !info.writer_alive,
                "run {run}: the lock died with the writer"
            );
            assert!(info.problem.is_none(), "run {run}: {:?}", info.problem);
            let extra = u64::from(stop_at.is_none());
            assert!(
                (acked..=acked + extra).contains(&info.records),
                "run {run}: {info:?}"
            );
        }
        let (mut reader, mut n) = match last {
            Some(p) if !full => {
                let options = ReaderOptions {
                    start: Start::At(p),
                    ..ReaderOptions::default()
                };
                (Reader::open_with(&path, options).unwrap(), total - 1)
            }
            _ => (Reader::open(&path).unwrap(), 0),
        };
        while let Some(rec) = reader.next().unwrap() {
            assert_eq!(rec.payload, payload(n), "run {run}: record {n} differs");
            last = Some(rec.position);
            n += 1;
        }
        match stop_at {
            Some(stop) => {
                // Killed between payload and commit of record `stop`: exactly the
                // records before it, and the torn payload is sitting after the end.
                assert_eq!(acked, stop, "run {run}");
                assert_eq!(
                    n, stop,
                    "run {run}: a reader saw {n} records, {stop} appends returned"
                );
                let torn = payload(stop);
                let mut after = vec![0u8; torn.len()];
                data_file
                    .read_exact_at(&mut after, reader.position().0 + 8)
                    .unwrap();
                assert_eq!(
                    after, torn,
                    "run {run}: the hook ran before the payload was written"
                );
                hook_kills += 1;
            }
            None => {
                // The writer had not finished its appends: the kill came
                // while it appended (an ack is stored after each return).
                if acked < total + STOP {
                    mid_append_kills += 1;
                }
                // Killed anywhere: between a commit and its ack the record exists
                // although the ack does not say so yet.
                assert!(
                    n == acked || n == acked + 1,
                    "run {run}: reader saw {n}, {acked} appends returned"
                );
            }
        }
        assert!(n >= total, "run {run}: records were lost");
        total = n;
    }
    assert_eq!(hook_kills, RUNS / 2);
    // Every kill at a random moment landed inside the append loop (the test
    // killed at most CAP appends in, the writer goes on to STOP).
    assert_eq!(mid_append_kills, RUNS / 2);
    // A new writer continues after the last run.
    let mut w = Writer::open(&path, options()).unwrap();
    w.append(&payload(total)).unwrap();
    drop(w);
    let mut reader = Reader::open(&path).unwrap();
    let mut n = 0;
    while reader.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, total + 1);
    eprintln!(
        "{RUNS} SIGKILLs ({hook_kills} between payload and commit, {mid_append_kills} at random moments while appending), {total} records survive"
    );
}
