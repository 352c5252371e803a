//! CLI tests for `pagewise queue inspect|tail|append` and small runs of
//! `pagewise bench mmap-prefault` and `pagewise bench queue`, with the real binary.

use assert_cmd::Command;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;

use common::pagewise;

fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn inspect_json(path: &Path) -> serde_json::Value {
    inspect_json_exiting(path, 0)
}

/// The "writer's pre-touch" row of `queue inspect`'s table of `path`.
fn pretouch_row(path: &Path) -> String {
    let out = pagewise()
        .args(["queue", "inspect"])
        .arg(path)
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("writer's pre-touch"))
        .expect("a pre-touch row");
    line.to_owned()
}

/// `queue inspect --json` of `path`, which must exit with `code` (1 when it
/// finds a problem).
fn inspect_json_exiting(path: &Path, code: i32) -> serde_json::Value {
    let out = pagewise()
        .args(["queue", "inspect", "--json"])
        .arg(path)
        .assert()
        .code(code)
        .get_output()
        .clone();
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Runs a `bench … --json` command and checks what every such report shares:
/// success, the schema, no row left unrun. Returns the report and its row names.
fn bench_report(cmd: &mut Command, schema: &str) -> (serde_json::Value, Vec<String>) {
    let out = cmd.assert().success().get_output().clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], schema);
    common::check_machine(&v);
    assert_eq!(
        v["not_run"].as_array().unwrap().len(),
        0,
        "{}",
        v["not_run"]
    );
    let names = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    (v, names)
}

#[test]
fn append_then_tail_round_trips_every_byte() {
    let d = shm_dir();
    let q = d.path().join("q");
    // Escaped lines decode: a newline, a tab, a backslash, a NUL and an invalid byte.
    let out = pagewise()
        .args(["queue", "append", "--chunk-size", "64KiB"])
        .arg(&q)
        .write_stdin("first\nsecond line\\nwith\\ttab \\\\ \\u{0} \\xff\n\nlast")
        .assert()
        .success()
        .get_output()
        .clone();
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("appended 4 records"), "{said}");
    let v = inspect_json(&q);
    assert_eq!(v["schema"], "pagewise.queue.inspect/1");
    assert_eq!(v["records"], 4);
    assert_eq!(v["chunk_size"], 64 << 10);
    assert_eq!(v["writer_alive"], false);
    assert_eq!(v["problem"], serde_json::Value::Null);
    // Escaped output is one line per record and decodes back to the same bytes.
    let out = pagewise()
        .args(["queue", "tail"])
        .arg(&q)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(
        text,
        "first\nsecond line\\nwith\\ttab \\\\ \\u{0} \\xff\n\nlast\n"
    );
    let copy = d.path().join("copy");
    pagewise()
        .args(["queue", "append"])
        .arg(&copy)
        .write_stdin(text.clone())
        .assert()
        .success();
    let out = pagewise()
        .args(["queue", "tail"])
        .arg(&copy)
        .assert()
        .success();
    assert_eq!(out.get_output().stdout, text.as_bytes());
    // --raw writes the bytes themselves.
    let out = pagewise()
        .args(["queue", "tail", "--raw"])
        .arg(&q)
        .assert()
        .success();
    assert_eq!(
        out.get_output().stdout,
        b"first\nsecond line\nwith\ttab \\ \0 \xff\n\nlast\n"
    );
}

#[test]
fn append_raw_takes_lines_as_they_are() {
    let d = shm_dir();
    let q = d.path().join("q");
    pagewise()
        .args(["queue", "append", "--raw"])
        .arg(&q)
        .write_stdin(&b"C:\\path\\n\n\xfe\xff\n"[..])
        .assert()
        .success();
    let out = pagewise()
        .args(["queue", "tail", "--raw", "--positions"])
        .arg(&q)
        .assert()
        .success();
    let stdout = out.get_output().stdout.clone();
    let lines: Vec<&[u8]> = stdout.split(|&b| b == b'\n').collect();
    assert_eq!(lines.len(), 3, "{stdout:?}");
    let (pos, payload) = lines[0].split_at(lines[0].iter().position(|&b| b == b'\t').unwrap());
    assert_eq!(std::str::from_utf8(pos).unwrap(), (4096 + 64).to_string());
    assert_eq!(payload, b"\tC:\\path\\n");
    assert!(lines[1].ends_with(b"\t\xfe\xff"));
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    let d = shm_dir();
    let q = d.path().join("q");
    let out = pagewise()
        .args(["queue", "append"])
        .arg(&q)
        .write_stdin("ok\nC:\\path\nnever\n")
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("pagewise: line 2: \\p is not an escape"),
        "{err}"
    );
    assert!(err.contains("1 record was appended before it"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(inspect_json(&q)["records"], 1);

    // A damaged mark: inspect reports it and exits 1; tail stops with a one-line error.
    pagewise()
        .args(["queue", "append"])
        .arg(&q)
        .write_stdin("two\nthree\n")
        .assert()
        .success();
    let mut bytes = std::fs::read(&q).unwrap();
    let second = 4096 + 64 + 16; // after the 8-byte mark and 2 bytes of "ok", padded to 16
    assert_eq!(&bytes[second + 8..second + 11], b"two");
    bytes[second + 4] ^= 0x40; // the tag: the mark no longer matches its position
    std::fs::write(&q, &bytes).unwrap();
    let v = inspect_json_exiting(&q, 1);
    assert_eq!(v["records"], 1);
    let problem = v["problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("corrupt record at position {second}")),
        "{problem}"
    );
    let out = pagewise()
        .args(["queue", "tail"])
        .arg(&q)
        .assert()
        .failure()
        .get_output()
        .clone();
    assert_eq!(out.stdout, b"ok\n");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("pagewise: ") && err.contains("belongs to another position"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    let not_a_queue = d.path().join("text");
    std::fs::write(&not_a_queue, vec![b'x'; 8192]).unwrap();
    for cmd in [["queue", "inspect"], ["queue", "tail"]] {
        let out = pagewise()
            .args(cmd)
            .arg(&not_a_queue)
            .assert()
            .failure()
            .get_output()
            .clone();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("pagewise: "), "{err}");
        assert!(err.contains("not a pagewise queue"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let out = pagewise()
        .args(["queue", "tail"])
        .arg(d.path().join("missing"))
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("pagewise: ") && err.contains("No such file"),
        "{err}"
    );
}

#[test]
fn tail_follow_prints_records_as_they_are_appended() {
    let d = shm_dir();
    let q = d.path().join("q");
    pagewise()
        .args(["queue", "append"])
        .arg(&q)
        .write_stdin("before\n")
        .assert()
        .success();
    let bin = assert_cmd::cargo::cargo_bin("pagewise");
    let mut tail = std::process::Command::new(&bin)
        .args(["queue", "tail", "--follow"])
        .arg(&q)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(tail.stdout.take().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line, "before\n");
    let started = Instant::now();
    pagewise()
        .args(["queue", "append"])
        .arg(&q)
        .write_stdin("after 1\nafter 2\n")
        .assert()
        .success();
    for expected in ["after 1\n", "after 2\n"] {
        line.clear();
        lines.read_line(&mut line).unwrap();
        assert_eq!(line, expected);
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    // Still following: it has not exited.
    assert!(tail.try_wait().unwrap().is_none());
    // Its reader goes away (as `| head -1` exits) and no record comes: it
    // ends by itself, quietly, with the status a closed pipe gives.
    drop(lines);
    let closed = Instant::now();
    let status = loop {
        if let Some(s) = tail.try_wait().unwrap() {
            break s;
        }
        if closed.elapsed() > Duration::from_secs(20) {
            tail.kill().unwrap();
            panic!("tail --follow still runs 20 s after its output was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(141), "{status:?}");
}

#[test]
fn bench_mmap_prefault_json_has_every_method() {
    let (v, names) = bench_report(
        pagewise().args([
            "bench",
            "mmap-prefault",
            "--size",
            "4MiB",
            "--window",
            "1MiB",
            "--max-window",
            "2MiB",
            "--trials",
            "1",
            "--json",
            "-q",
        ]),
        "pagewise.bench.mmap-prefault/1",
    );
    assert_eq!(v["size_bytes"], 4 << 20);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(
        names,
        [
            "plain",
            "fallocate",
            "populate",
            "populate+willneed",
            "populate+sequential",
            "fallocate+populate",
            "fallocate+populate+willneed",
            "willneed",
            "sequential",
            "manual-prefault",
            "manual-prefault+willneed",
            "pagewise-window"
        ]
    );
    for r in rows {
        assert!(r["ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["peak_resident_bytes"].as_u64().unwrap() >= 4 << 20, "{r}");
    }
    // The program's text was mapped before the loops, so a path the writer
    // runs for the first time inside one (catching up with the pre-toucher on
    // a busy machine) takes no fault on its code.
    assert!(v["text_note"].is_null(), "{}", v["text_note"]);
    let by = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap();
    if v["faults_counted"] == true {
        assert!(rows.iter().all(|r| r["write_loop_faults"].is_u64()));
        assert_eq!(by("pagewise-window")["write_loop_faults"], 0);
        assert_eq!(by("populate")["write_loop_faults"], 0);
        // Writing a file faulted in by nobody takes at least one fault per
        // page it got: 4 KiB pages on a tmpfs without huge pages, fewer with them.
        let plain = by("plain");
        let least = fewest_faults(&plain["granted"], Path::new("/dev/shm"));
        assert!(least >= 2, "{plain}");
        assert!(
            plain["write_loop_faults"].as_u64().unwrap() >= least,
            "{plain}: at least {least}"
        );
    } else {
        // Not counted is null with the reason, never 0.
        assert!(rows.iter().all(|r| r["write_loop_faults"].is_null()));
        let why = v["faults_note"].as_str().unwrap();
        pagewise_testkit::skip_part!("fault columns", pagewise_testkit::Need::PerfEvents, "{why}");
    }
}

/// The fewest faults that can have brought in the pages a report's
/// `granted` object lists for a file on the tmpfs at `dir`
/// (`pagewise::region::Granted::fewest_faults`).
fn fewest_faults(granted: &serde_json::Value, dir: &Path) -> u64 {
    use pagewise::host::thp::{self, FaultMemory};
    let bytes = |k: &str| {
        granted[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {granted}"))
    };
    let g = pagewise::region::Granted {
        hugetlb_1g_bytes: bytes("hugetlb_1g_bytes"),
        hugetlb_2m_bytes: bytes("hugetlb_2m_bytes"),
        thp_bytes: bytes("thp_bytes"),
        base_bytes: bytes("base_bytes"),
        verified_by: "the report",
    };
    assert_eq!(
        g.total(),
        4 << 20,
        "all 4 MiB are mapped after the loop: {granted}"
    );
    let small = thp::settings(&pagewise::host::SysRoot::live()).largest_small_fault_page(
        FaultMemory::Shmem {
            mount_huge: thp::tmpfs_huge_option(dir),
        },
    );
    g.fewest_faults(small)
}

#[test]
fn bench_queue_json_has_the_rows_asked_for() {
    let disk = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let tmpfs = shm_dir();
    let (v, names) = bench_report(
        pagewise()
            .args([
                "bench",
                "queue",
                "--records",
                "50000",
                "--latency-records",
                "20000",
                "--rate",
                "200000",
                "--trials",
                "1",
                "--json",
                "-q",
                "--only",
                "tmpfs+pretouch,tmpfs,disk+pretouch,floor,tmpfs+idle-pretouch",
                "--copy",
                "glibc",
                "--tmpfs-dir",
            ])
            .arg(tmpfs.path())
            .arg("--disk-dir")
            .arg(disk.path()),
        "pagewise.bench.queue/1",
    );
    assert_eq!(v["record_bytes"], 128);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(
        names,
        [
            "tmpfs+pretouch",
            "tmpfs",
            "disk+pretouch",
            "floor",
            "tmpfs+idle-pretouch"
        ]
    );
    let modes: Vec<&str> = rows
        .iter()
        .map(|r| r["pretouch_mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["auto", "off", "background", "off", "idle"]);
    // Queue rows say what pre-touched and why; the floor has no queue.
    let how = rows[0]["pretouch_throughput"].as_str().unwrap();
    assert!(how.contains("auto:"), "{how}");
    assert!(rows[0]["pretouch_latency"].as_str().is_some());
    assert!(rows[3]["pretouch_throughput"].is_null());
    assert_eq!(rows[3]["transport"], "floor");
    assert!(rows.iter().all(|r| r["copy"] == "glibc"));
    // The children count faults as this process would.
    let counted = pagewise::observe::thread_page_fault_counter().is_ok();
    for r in rows {
        assert!(r["records_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["writer_records_per_s"].as_f64().unwrap() > 0.0, "{r}");
        let p50 = r["p50_ns"].as_u64().unwrap();
        let p99 = r["p99_ns"].as_u64().unwrap();
        let p999 = r["p999_ns"].as_u64().unwrap();
        let max = r["max_ns"].as_u64().unwrap();
        assert!(p50 > 0 && p50 <= p99 && p99 <= p999 && p999 <= max, "{r}");
        // Records over 1 ms, per thousand of the 20,000 latency records: a
        // whole number of records, none when the slowest took under 1 ms, and
        // the slowest over 1 ms when any did (the histogram's max is at least
        // the largest latency recorded).
        let per_mille = r["over_1ms_per_mille"].as_f64().unwrap();
        let over = per_mille * 20_000.0 / 1000.0;
        assert!(
            (0.0..=20_000.0).contains(&over) && (over - over.round()).abs() < 1e-6,
            "{r}"
        );
        if max < 1_000_000 {
            assert_eq!(per_mille, 0.0, "{r}");
        }
        if per_mille > 0.0 {
            assert!(max > 1_000_000, "{r}");
        }
        // Faults: a count where the page-faults event opens, else null and why.
        if counted {
            assert!(r["append_faults"].is_u64(), "{r}");
            assert!(r["append_faults_throughput"].as_u64() <= r["append_faults"].as_u64());
        } else {
            assert!(r["append_faults"].is_null(), "{r}");
            assert!(r["faults_note"].is_string(), "{r}");
        }
    }
    // The queue files are removed.
    assert!(std::fs::read_dir(tmpfs.path()).unwrap().next().is_none());
    assert!(std::fs::read_dir(disk.path()).unwrap().next().is_none());
    if rows[0]["append_faults"].is_u64() {
        // Whether the pre-toucher stays ahead of the writer is a matter of timing on a
        // shared machine (the benchmark reports it); the test checks the mechanism:
        // with pre-touch the append loop faults far less than without.
        let with = rows[0]["append_faults"].as_u64().unwrap();
        let without = rows[1]["append_faults"].as_u64().unwrap();
        assert!(without > 0, "{}", rows[1]);
        assert!(
            with * 10 < without,
            "pre-touch {with} faults vs {without} without"
        );
    }
}

#[test]
fn append_refuses_a_line_longer_than_any_record_before_reading_it_all() {
    let d = shm_dir();
    let q = d.path().join("q");
    // /dev/zero has no newline: the first line never ends. Under a 400 MB
    // address-space limit, reading it whole aborts; the cap stops at 64 KiB.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 400000 && exec "$0" queue append --chunk-size 64KiB "$1" < /dev/zero"#)
        .arg(assert_cmd::cargo::cargo_bin("pagewise"))
        .arg(&q)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("pagewise: line 1 is longer than"), "{err}");
    assert!(err.contains("65464 bytes"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // With --raw too, and a long line after good ones.
    let mut input = b"a\nb\n".to_vec();
    input.extend(vec![b'z'; 70_000]);
    input.extend(b"\nnever\n");
    let out = pagewise()
        .args(["queue", "append", "--raw", "--chunk-size", "64KiB"])
        .arg(&q)
        .write_stdin(input)
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("pagewise: line 3 is longer than"), "{err}");
    assert!(err.contains("2 records were appended before it"), "{err}");
    assert_eq!(inspect_json(&q)["records"], 2);
}

/// An append to a new path whose first line is refused (too long, a bad
/// escape) creates nothing: no queue file, no lock file. A path whose folder
/// is missing is refused before stdin is read. Empty input still makes an
/// empty queue, and a first line that fits makes the queue as before.
#[test]
fn a_refused_first_line_leaves_no_new_queue_behind() {
    let d = shm_dir();
    let q = d.path().join("q");
    let long = "z".repeat(70_000);
    for (flags, stdin, says) in [
        (
            &["--chunk-size", "64KiB"][..],
            long.as_str(),
            "line 1 is longer than",
        ),
        (
            &["--raw", "--chunk-size", "64KiB"],
            long.as_str(),
            "line 1 is longer than",
        ),
        (&[], "C:\\path\n", "line 1: \\p"),
    ] {
        let err = append_stderr(&q, flags, stdin, false);
        assert!(err.contains(says), "{flags:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert!(left.is_empty(), "{flags:?}: left behind: {left:?}");
    }
    let nowhere = d.path().join("no/such/folder/q");
    let out = pagewise()
        .args(["queue", "append"])
        .arg(&nowhere)
        .write_stdin("x\n")
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not exist"), "{err}");
    assert!(!d.path().join("no").exists());
    append_stderr(&q, &[], "", true);
    assert_eq!(inspect_json(&q)["records"], 0);
    let fresh = d.path().join("fresh");
    append_stderr(&fresh, &[], "a\nb\n", true);
    assert_eq!(inspect_json(&fresh)["records"], 2);
}

/// `inspect` gives the sizes with `_bytes` names (the first names stay, the
/// same numbers), and words the last writer's pre-touch so that `off`
/// reads right: when the mode was set, not when an "off" one "started".
#[test]
fn inspect_names_sizes_in_bytes_and_words_the_pre_touch_mode() {
    let d = shm_dir();
    let q = d.path().join("q");
    append_stderr(&q, &["--chunk-size", "64KiB"], "a\n", true);
    let v = inspect_json(&q);
    assert_eq!(v["schema"], "pagewise.queue.inspect/1");
    assert_eq!(v["chunk_size_bytes"], 65536);
    assert_eq!(v["max_payload_bytes"], 65464);
    assert!(v["file_size_bytes"].as_u64().unwrap() > 65536, "{v}");
    for name in ["chunk_size", "max_payload", "file_size"] {
        assert_eq!(v[name], v[format!("{name}_bytes")], "{name}");
    }
    assert_eq!(v["last_writer_pretouch"], "off");
    let line = pretouch_row(&q);
    assert!(
        line.contains("off (the last writer's, set ") && line.contains(" s ago; no writer now)"),
        "{line}"
    );
    assert!(!line.contains("started"), "{line}");
}

#[test]
fn a_fifo_or_a_directory_is_refused_at_once() {
    let d = shm_dir();
    let fifo = d.path().join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    for (path, says) in [(&fifo, "a FIFO"), (&d.path().to_owned(), "a directory")] {
        for cmd in [
            &["queue", "inspect"][..],
            &["queue", "tail"],
            &["queue", "tail", "--follow"],
            &["queue", "append"],
        ] {
            let out = pagewise()
                .args(cmd)
                .arg(path)
                .write_stdin("x\n")
                .timeout(Duration::from_secs(10))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{cmd:?} {path:?}: {err}");
            assert!(err.contains(says), "{cmd:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
}

/// Runs `pagewise queue append FLAGS Q` with `stdin`, asserts its exit
/// status (success or failure) and returns its stderr.
fn append_stderr(q: &Path, flags: &[&str], stdin: &str, succeeds: bool) -> String {
    let mut cmd = pagewise();
    cmd.args(["queue", "append"])
        .args(flags)
        .arg(q)
        .write_stdin(stdin);
    let assert = cmd.assert();
    let assert = if succeeds {
        assert.success()
    } else {
        assert.failure()
    };
    String::from_utf8_lossy(&assert.get_output().stderr).into_owned()
}

#[test]
fn settings_for_a_new_queue_are_not_silently_ignored_on_an_existing_one() {
    let d = shm_dir();
    let q = d.path().join("q");
    pagewise()
        .args(["queue", "append", "--chunk-size", "64KiB"])
        .arg(&q)
        .write_stdin("one\n")
        .assert()
        .success();
    for flags in [&["--crc"][..], &["--chunk-size", "1MiB"], &["--packed"]] {
        let err = append_stderr(&q, flags, "two\n", false);
        assert!(
            err.contains(
                "already exists with 64 KiB chunks, without record CRCs, line-fitting records"
            ),
            "{flags:?}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // The same settings again are fine.
    pagewise()
        .args(["queue", "append", "--chunk-size", "64KiB"])
        .arg(&q)
        .write_stdin("two\n")
        .assert()
        .success();
    assert_eq!(inspect_json(&q)["records"], 2);
}

#[test]
fn packed_records_are_chosen_at_creation_and_shown_by_inspect() {
    let d = shm_dir();
    // Two records of 32-byte lines: 40 bytes packed, 64 line-fitting.
    let line = "x".repeat(32);
    for (flags, second, layout) in [
        (&[][..], 4096 + 64 + 64, "line-fitting"),
        (&["--packed"][..], 4096 + 64 + 40, "packed"),
    ] {
        let q = d.path().join(layout);
        pagewise()
            .args(["queue", "append"])
            .args(flags)
            .arg(&q)
            .write_stdin(format!("{line}\n{line}\n"))
            .assert()
            .success();
        let info = inspect_json(&q);
        assert_eq!(info["line_fitting_records"], layout == "line-fitting");
        assert_eq!(info["last_position"], second, "{layout}");
        let table = succeeding_stdout(&["queue", "inspect"], &q);
        assert!(table.contains("record sizes"), "{table}");
        assert!(table.contains(layout), "{table}");
        let (ok, out, _) = tail(&q);
        assert_eq!((ok, out), (true, format!("{line}\n{line}\n")));
    }
}

#[test]
fn a_damaged_first_chunk_word_is_reported_not_hidden() {
    let d = shm_dir();
    let q = d.path().join("q");
    pagewise()
        .args(["queue", "append", "--chunk-size", "64KiB"])
        .arg(&q)
        .write_stdin("one\ntwo\n")
        .assert()
        .success();
    let mut bytes = std::fs::read(&q).unwrap();
    // The first chunk still in the queue (header offset 64): 1 would hide chunk 0.
    bytes[64] ^= 1;
    std::fs::write(&q, &bytes).unwrap();
    for cmd in [["queue", "inspect"], ["queue", "tail"]] {
        let out = pagewise()
            .args(cmd)
            .arg(&q)
            .assert()
            .failure()
            .get_output()
            .clone();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("first-chunk word"), "{cmd:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn refusing_a_file_that_is_no_queue_leaves_no_lock_file() {
    let d = shm_dir();
    for (name, bytes) in [
        ("empty", &b""[..]),
        ("text", &b"hello\n"[..]),
        ("noise", &[0x5Au8; 8192][..]),
    ] {
        let q = d.path().join(name);
        std::fs::write(&q, bytes).unwrap();
        append_stderr(&q, &[], "x\n", false);
        let lock = d.path().join(format!("{name}.lock"));
        assert!(
            !lock.exists(),
            "{name}: refused, yet {} was made",
            lock.display()
        );
        assert_eq!(std::fs::read(&q).unwrap(), bytes, "{name}: changed");
    }
}

#[test]
fn inspect_finds_a_length_damaged_to_swallow_the_records_after_it() {
    // Without record CRCs a length made longer reads as one record holding
    // the next ones; inspect sees their marks inside it and says so.
    let d = shm_dir();
    let q = d.path().join("q");
    append_stderr(&q, &[], "hello\nworld\nthree\n", true);
    let mut bytes = std::fs::read(&q).unwrap();
    // The first record's mark is at 4160; its length is the low 4 bytes.
    assert_eq!(&bytes[4160..4164], &5u32.to_le_bytes());
    bytes[4160] = 48;
    std::fs::write(&q, &bytes).unwrap();
    let out = pagewise()
        .args(["queue", "inspect"])
        .arg(&q)
        .assert()
        .failure()
        .get_output()
        .clone();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("holds the mark of a record at position 4176 in its payload"),
        "{text}"
    );
}

/// `queue append` of queue `q` (without `--discard-damaged`) must refuse:
/// one line that `says` and how to recover, and the file unchanged.
fn append_refused(q: &Path, says: &str) {
    let before = std::fs::read(q).unwrap();
    let err = append_stderr(q, &[], "new\n", false);
    assert!(err.contains(says), "{err}");
    assert!(err.contains("--discard-damaged"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        std::fs::read(q).unwrap() == before,
        "the refused append changed the file"
    );
}

#[test]
fn append_refuses_records_hidden_after_a_length_damaged_shorter() {
    // Line-fitting: a 32-byte line at 4160 takes 64 bytes; its length made
    // 16 ends the walk at 4192, inside its own zero bytes, with two records
    // after it.
    let d = shm_dir();
    let q = d.path().join("q");
    let zeros = "\\x00".repeat(32);
    append_stderr(&q, &[], &format!("{zeros}\nsecond\nthird\n"), true);
    let mut bytes = std::fs::read(&q).unwrap();
    assert_eq!(&bytes[4160..4164], &32u32.to_le_bytes());
    bytes[4160] = 16;
    std::fs::write(&q, &bytes).unwrap();
    append_refused(&q, "the records end at position 4192, but the marks of 2 intact records lie after it, from position 4224 on");
    let problem = inspect_json_exiting(&q, 1)["problem"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(problem.contains("lies at position 4224"), "{problem}");
    let err = append_stderr(&q, &["--discard-damaged"], "new\n", true);
    assert!(
        err.contains("recovery dropped 2 records from position 4192 on (2 of them intact): the records ended there with more after them"),
        "{err}"
    );
    assert!(err.contains("appended 1 record, at position 4192"), "{err}");
}

#[test]
fn append_refuses_a_damaged_crc_queue_and_discards_only_when_asked() {
    let d = shm_dir();
    let q = d.path().join("q");
    pagewise()
        .args(["queue", "append", "--crc"])
        .arg(&q)
        .write_stdin("one\ntwo\nthree\nfour\n")
        .assert()
        .success();
    let mut bytes = std::fs::read(&q).unwrap();
    let at = bytes.windows(3).position(|w| w == b"two").unwrap();
    bytes[at] ^= 0xFF;
    std::fs::write(&q, &bytes).unwrap();
    // "three" and "four" are intact: the append refuses, one line, nothing changed.
    append_refused(
        &q,
        "fails its CRC check and 2 intact records follow it; no crash tears a record there",
    );
    // Asked to, it drops the damaged record and the two after it, and says so.
    let err = append_stderr(&q, &["--discard-damaged"], "five\n", true);
    assert!(err.contains("appended 1 record, at position"), "{err}");
    assert!(
        err.contains("recovery dropped 3 records from position")
            && err.contains("(2 of them intact)"),
        "{err}"
    );
    assert_eq!(succeeding_stdout(&["queue", "tail"], &q), "one\nfive\n");
}

/// The standard output of `pagewise ARGS PATH`, which must succeed.
fn succeeding_stdout(args: &[&str], path: &Path) -> String {
    let out = pagewise().args(args).arg(path).assert().success();
    String::from_utf8_lossy(&out.get_output().stdout).into_owned()
}

/// `pagewise queue tail PATH`: its status, standard output and standard error.
fn tail(path: &Path) -> (bool, String, String) {
    let out = pagewise()
        .args(["queue", "tail"])
        .arg(path)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn append_continues_a_queue_cut_short_inside_its_last_record() {
    // What `head -c 4200 Q > T` (an interrupted copy) or a truncation
    // leaves: three records, the third cut partway through.
    let d = shm_dir();
    let q = d.path().join("q");
    let second = "b".repeat(40);
    append_stderr(
        &q,
        &["--packed"],
        &format!("first\n{second}\nthe third record\n"),
        true,
    );
    // Records (packed) at 4160 (5 bytes: 16 in all), 4176 (40: 48) and 4224 (16: 24).
    let v = inspect_json(&q);
    assert_eq!(
        (v["last_position"].as_u64(), v["end_position"].as_u64()),
        (Some(4224), Some(4248))
    );
    let bytes = std::fs::read(&q).unwrap();
    let t = d.path().join("t");
    std::fs::write(&t, &bytes[..4236]).unwrap();
    // `tail` and `inspect` read the two whole records and name the cut in the same words.
    let (ok, out, tail_err) = tail(&t);
    assert_eq!((ok, out), (false, format!("first\n{second}\n")));
    let tail_err = tail_err.trim_end().to_owned();
    assert_eq!(tail_err.lines().count(), 1, "{tail_err}");
    assert!(
        tail_err.contains("corrupt record at position 4224: a record of 16 bytes runs past the end of the file (4236 bytes): the file was cut short inside it"),
        "{tail_err}"
    );
    let v = inspect_json_exiting(&t, 1);
    assert_eq!(v["records"], 2);
    assert_eq!(
        Some(format!("pagewise: {}", v["problem"].as_str().unwrap())),
        Some(tail_err)
    );
    // `append` drops the cut record without being asked, says so, and
    // appends after the second; with --discard-damaged the same.
    for flags in [&[][..], &["--discard-damaged"]] {
        let t2 = d.path().join("t2");
        std::fs::copy(&t, &t2).unwrap();
        let err = append_stderr(&t2, flags, "new\n", true);
        assert!(
            err.contains("recovery dropped 1 record from position 4224 on (0 of them intact): the file ends inside the record there (it was cut short"),
            "{flags:?}: {err}"
        );
        assert!(
            err.contains("appended 1 record, at position 4224"),
            "{flags:?}: {err}"
        );
        let (ok, out, _) = tail(&t2);
        assert_eq!((ok, out), (true, format!("first\n{second}\nnew\n")));
        assert_eq!(inspect_json(&t2)["problem"], serde_json::Value::Null);
    }
    // A length damaged to run past the end, with a whole record inside it,
    // is no cut: refused, one line saying how to recover, nothing changed.
    let mut damaged = bytes[..4236].to_vec();
    damaged[4160] = 200;
    std::fs::write(&t, &damaged).unwrap();
    append_refused(&t, "the record at position 4160 (200 bytes) runs past the end of the file, but the mark of 1 intact record lies inside it, from position 4176 on");
    let err = append_stderr(&t, &["--discard-damaged"], "new\n", true);
    assert!(
        err.contains("recovery dropped 3 records from position 4160 on (1 of them intact)"),
        "{err}"
    );
    assert_eq!(tail(&t).1, "new\n");
}

#[test]
fn bench_queue_rtt_json_has_a_floor_and_a_queue_row_per_size() {
    let tmpfs = shm_dir();
    let (v, names) = bench_report(
        pagewise()
            .args([
                "bench",
                "queue",
                "--rtt",
                "--round-trips",
                "5000",
                "--warmup",
                "500",
                "--rtt-sizes",
                "32,4KiB",
                "--trials",
                "1",
                "--only",
                "floor,queue,queue+no-pretouch,queue+prepared,queue+hand-off",
                "--json",
                "-q",
                "--tmpfs-dir",
            ])
            .arg(tmpfs.path()),
        "pagewise.bench.queue/1",
    );
    // The one-way rows do not run with --rtt.
    assert!(names.is_empty(), "{names:?}");
    let rtt = &v["rtt"];
    assert_eq!(rtt["not_run"].as_array().unwrap().len(), 0, "{rtt}");
    assert_eq!(rtt["fs"], "tmpfs", "{rtt}");
    let rows = rtt["rows"].as_array().unwrap();
    let cells: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["record_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [32, 4096]
        .into_iter()
        .flat_map(|b| {
            [
                "floor",
                "queue",
                "queue+no-pretouch",
                "queue+prepared",
                "queue+hand-off",
            ]
            .map(|n| (n.to_owned(), b))
        })
        .collect();
    assert_eq!(cells, want);
    for r in rows {
        let p: Vec<u64> = [
            "p50_ns", "p90_ns", "p99_ns", "p999_ns", "p9999_ns", "max_ns",
        ]
        .iter()
        .map(|k| r[k].as_u64().unwrap())
        .collect();
        assert!(p[0] > 0 && p.windows(2).all(|w| w[0] <= w[1]), "{r}");
        assert_eq!(r["round_trips"], 5000, "{r}");
        assert_eq!(r["warmup"], 500, "{r}");
        assert_eq!(r["trial_p50_ns"].as_array().unwrap().len(), 1, "{r}");
        assert!(r["slow_round_trips"].as_u64().unwrap() <= 5000, "{r}");
        assert_eq!(r["slow_ns"], 20_000, "{r}");
        let queue = r["name"] != "floor";
        assert_eq!(r["pretouch"].is_string(), queue, "{r}");
        if r["name"] == "queue+no-pretouch" {
            assert!(r["pretouch"].as_str().unwrap().starts_with("off"), "{r}");
        }
    }
    // Every file is removed, lock files included.
    assert!(std::fs::read_dir(tmpfs.path()).unwrap().next().is_none());
}

#[test]
fn bench_queue_rtt_refuses_an_unknown_row_and_a_bad_pin() {
    let out = pagewise()
        .args(["bench", "queue", "--rtt", "--only", "aeron", "-q"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown --rtt row \"aeron\""), "{err}");
    assert!(err.contains("queue+idle-work"), "{err}");
    let out = pagewise()
        .args(["bench", "queue", "--rtt", "--pin", "0", "-q"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--pin takes two CPUs"), "{err}");
    // Settings that would make every row fail or crawl are refused before
    // any runs, in one line, with the usage status.
    for (args, want) in [
        (&["--pin", "0,0"][..], "two different CPUs"),
        (
            &["--pin", "0,1023"][..],
            "CPU 1023 is not one this process may run on",
        ),
        (&["--warmup", "1"][..], "warm-up of at least 2 round trips"),
    ] {
        let mut cmd = pagewise();
        cmd.args(["bench", "queue", "--rtt", "-q", "--trials", "1"])
            .args(args);
        let err = refused_in_one_line(&mut cmd, 2);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Runs `cmd`, which must exit with `status` and one line on stderr; that line.
fn refused_in_one_line(cmd: &mut Command, status: i32) -> String {
    let out = cmd
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .code(status)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    err
}

#[test]
fn bench_queue_checks_its_folder_before_any_row_runs() {
    let tmpfs = shm_dir();
    let file = tmpfs.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let missing = tmpfs.path().join("missing");
    let tmpfs_dir = tmpfs.path().to_str().unwrap();
    let one_way = ["bench", "queue", "-q", "--trials", "1", "--only", "tmpfs"];
    for (extra, want) in [
        (
            vec!["--tmpfs-dir", file.to_str().unwrap()],
            "is not a folder",
        ),
        (
            vec!["--tmpfs-dir", missing.to_str().unwrap()],
            "No such file",
        ),
        // 2 M records of 1 MiB: 2 TiB, more than any tmpfs here holds.
        (
            vec!["--tmpfs-dir", tmpfs_dir, "--record", "1MiB"],
            "free: ask for fewer records",
        ),
    ] {
        let err = refused_in_one_line(pagewise().args(one_way).args(&extra), 1);
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let err = refused_in_one_line(
        pagewise()
            .args(["bench", "queue", "--rtt", "-q", "--tmpfs-dir"])
            .arg(&missing),
        1,
    );
    assert!(err.contains("No such file"), "{err}");
    // Nothing was left behind: only the file this test made.
    let left: Vec<_> = std::fs::read_dir(tmpfs.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn inspect_shows_the_low_priority_pre_toucher_and_its_switch() {
    use pagewise::queue::{Options, PreToucher, Writer};
    let d = shm_dir();
    let q = d.path().join("q");
    // A writer on at most two CPUs that never idles: PreTouchMode::Auto
    // starts the low-priority thread. It stays open while inspect runs.
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let path = q.clone();
    let writer = std::thread::spawn(move || {
        let cpus = pagewise::os::process::usable_cpus().unwrap();
        pagewise::os::process::restrict_this_thread(&cpus[..cpus.len().min(2)]).unwrap();
        let mut w = Writer::create(
            &path,
            Options {
                chunk_size: 1 << 20,
                ..Options::default()
            },
        )
        .unwrap();
        while w.position().0 < 4 << 20 {
            w.append(&[1u8; 120]).unwrap();
        }
        tx.send(w.report().window).unwrap();
        let _ = done_rx.recv_timeout(Duration::from_secs(60));
    });
    let report = rx.recv().unwrap();
    assert_eq!(report.mode, PreToucher::LowPriorityThread, "{report:?}");
    let v = inspect_json(&q);
    assert_eq!(v["last_writer_pretouch"], "low-priority-thread");
    assert_eq!(v["last_writer_pretouch_switches"], 1);
    assert!(v["last_writer_pretouch_since_unix_ns"].as_u64().unwrap() > 0);
    assert_eq!(
        v["last_writer_usable_cpus"].as_u64(),
        report.usable_cpus.map(|n| n as u64)
    );
    let line = pretouch_row(&q);
    assert!(line.contains("low-priority-thread"), "{line}");
    assert!(line.contains("1 switch"), "{line}");
    assert!(line.contains("usable CPU"), "{line}");
    done_tx.send(()).unwrap();
    writer.join().unwrap();
}

/// A signal to `pagewise bench queue` stops it: its children end, its queue
/// files are removed, and it exits with one line and 128+N. SIGTERM to it
/// alone (as `timeout` or a service manager sends it) and SIGINT to its
/// whole process group (Ctrl-C); one-way and `--rtt`.
#[test]
fn a_signal_stops_bench_queue_and_removes_its_files() {
    use std::os::unix::process::CommandExt;
    let one_way: &[&str] = &[
        "--only",
        "tmpfs+pretouch",
        "--records",
        "100000",
        "--latency-records",
        "1000",
        "--rate",
        "10",
    ];
    let rtt: &[&str] = &[
        "--rtt",
        "--rtt-sizes",
        "32",
        "--round-trips",
        "100000000",
        "--warmup",
        "1000",
    ];
    for (mode, signal, number, whole_group) in [
        (one_way, "TERM", 15, false),
        (one_way, "INT", 2, true),
        (rtt, "TERM", 15, false),
        (rtt, "INT", 2, true),
    ] {
        let dir = shm_dir();
        let bench = match common::pagewise_with_default_signals() {
            Ok(command) => command,
            Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
        }
        .args(["bench", "queue", "-q", "--trials", "1", "--tmpfs-dir"])
        .arg(dir.path())
        .args(mode)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
        // Until the trial's files exist: the children are running.
        let started = std::time::Instant::now();
        while std::fs::read_dir(dir.path()).unwrap().count() == 0 {
            assert!(started.elapsed().as_secs() < 30, "no queue file appeared");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let target = i64::from(bench.id());
        common::send_signal(if whole_group { -target } else { target }, signal);
        let out = bench.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(128 + number),
            "SIG{signal} {mode:?}: {err}"
        );
        assert_eq!(
            err.trim_end(),
            format!("pagewise: bench: stopped by SIG{signal}; its files are removed"),
            "{mode:?}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "SIG{signal} {mode:?}: left: {left:?}");
    }
}
