//! C and Rust share one queue across processes: a C writer (built with the
//! flags `pkg-config` gives for the installed library) appends 1 M records
//! that the Rust `Reader` and `pagewise queue tail` read back exactly, and a
//! Rust writer appends 1 M records that a C reader reads back exactly.

mod common;

use common::{build_c, record, run_ok, scratch};
use pagewise::queue::{Options, Reader, Wait, Writer};
use pagewise_testkit::{skip, skip_part, Need};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const RECORDS: u64 = 1_000_000;

#[test]
fn a_c_writer_and_rust_readers_agree_on_a_million_records() {
    let dir = scratch();
    let writer = match build_c(dir.path(), "writer_1m", &[]) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let queue = dir.path().join("c-to-rust.q");
    let q = queue.to_str().unwrap();
    // The writer runs while the Rust reader follows it live.
    let mut child = Command::new(&writer)
        .args([q, &RECORDS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = loop {
        match Reader::open(&queue) {
            Ok(r) => break r,
            Err(_) if child.try_wait().unwrap().is_none() => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("the C writer made no readable queue: {e}"),
        }
    };
    for i in 0..RECORDS {
        let rec = reader
            .next_wait(Wait::Block { spins: 100 }, Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap_or_else(|| panic!("record {i} did not arrive"));
        assert_eq!(rec.payload, record(i).as_slice(), "record {i}");
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        reader.next().unwrap().is_none(),
        "a record past the last one"
    );

    // `pagewise queue tail --raw`: one line per record, the bytes as they are.
    let cli = common::build_dir().join("pagewise");
    if !cli.is_file() {
        skip_part!(
            "queue tail",
            Need::Tool,
            "{} is not built (cargo test --workspace builds it)",
            cli.display()
        );
        return;
    }
    let mut tail = Command::new(&cli)
        .args(["queue", "tail", "--raw", q])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).split(b'\n');
    for i in 0..RECORDS {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("tail stopped before record {i}"))
            .unwrap();
        assert_eq!(line, record(i), "tail, record {i}");
    }
    assert!(
        lines.next().is_none(),
        "tail printed more than {RECORDS} records"
    );
    assert!(tail.wait().unwrap().success());
}

#[test]
fn a_rust_writer_and_a_c_reader_agree_on_a_million_records() {
    let dir = scratch();
    let reader = match build_c(dir.path(), "reader_1m", &[]) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let queue = dir.path().join("rust-to-c.q");
    let mut writer = Writer::create(&queue, Options::default()).unwrap();
    // The C reader starts on the empty queue and follows the writer live.
    let child = Command::new(&reader)
        .args([queue.to_str().unwrap(), &RECORDS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for i in 0..RECORDS {
        writer.append(&record(i)).unwrap();
    }
    writer.flush().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "C reader: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("read {RECORDS}\n")
    );
    drop(writer);
    // The same file read by the C reader again, after the writer is gone.
    let again = run_ok(&reader, &[queue.to_str().unwrap(), &RECORDS.to_string()]);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        format!("read {RECORDS}\n")
    );
}
