//! Behaviour of `pagewise::queue`: records of every size, chunk boundaries,
//! readers at different positions and before growth, wait strategies, seek,
//! recovery of a torn record, CRCs, retention, a full file system, truncation
//! by another process.

use pagewise::observe::faults_during;
use pagewise::queue::{
    inspect, Options, Position, PreTouch, PreTouchMode, QueueError, Reader, ReaderOptions,
    Retention, Start, Wait, Writer,
};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CHUNK: u64 = 64 << 10;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn small(pretouch: bool) -> Options {
    Options {
        chunk_size: CHUNK,
        pretouch: pretouch.then_some(PreTouch {
            window: 256 << 10,
            max_window: 1 << 20,
            lead: Duration::from_millis(2),
            mode: PreTouchMode::Thread,
        }),
        ..Options::default()
    }
}

/// Child processes of this test binary start only under a read guard of
/// this lock (see [`spawning`]), and a test that checks that a dropped
/// writer's lock is gone holds the write guard ([`no_children`]). A child
/// holds copies of this process's descriptors, a queue file's among them and
/// with it the writer lock, from its fork until its exec: without the guard
/// a sibling test's child could hold the lock of a writer dropped meanwhile.
static CHILDREN: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held while a test starts a child process and waits for it.
fn spawning() -> std::sync::RwLockReadGuard<'static, ()> {
    CHILDREN.read().unwrap_or_else(|e| e.into_inner())
}

/// Held while a test checks that a dropped writer's lock is released: no
/// child process is between its fork and its exec meanwhile.
fn no_children() -> std::sync::RwLockWriteGuard<'static, ()> {
    CHILDREN.write().unwrap_or_else(|e| e.into_inner())
}

/// `Writer::open` right after the previous writer was dropped: the lock is
/// released with the writer, at once.
fn reopen(path: &Path, options: Options) -> Writer {
    let _no_children = no_children();
    Writer::open(path, options).unwrap()
}

/// `Writer::open` that must refuse `path`: its error, once checked that the
/// file is byte for byte as it was.
fn refused_unchanged(path: &Path, options: Options) -> QueueError {
    let before = std::fs::read(path).unwrap();
    let err = {
        let _no_children = no_children();
        Writer::open(path, options).map(|_| ()).unwrap_err()
    };
    assert!(
        std::fs::read(path).unwrap() == before,
        "a refused open changed the file: {err}"
    );
    err
}

/// Counts the page faults `work` takes on the calling thread, after mapping
/// this program's text (so that code run for the first time inside `work`
/// does not fault on its instructions: docs/TESTING.md, "Fault-count
/// tests"); `None` when the counter does not open here.
fn faults_of(work: impl FnOnce()) -> Option<u64> {
    pagewise::host::proc_maps::populate_own_text().expect("map this program's text");
    faults_during(work)
}

/// A payload that encodes its sequence number and has a length that varies with it.
fn payload(seq: u64) -> Vec<u8> {
    let len = (seq * 37 % 300) as usize + 8;
    let mut p = vec![(seq % 251) as u8; len];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p
}

fn read_all(reader: &mut Reader) -> Vec<(Position, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        out.push((r.position, r.payload.to_vec()));
    }
    out
}

/// Reads every record from `reader` and checks that there are `count`, each
/// `payload(i)` in order; returns them.
fn read_payloads_in_order(reader: &mut Reader, count: u64, what: &str) -> Vec<(Position, Vec<u8>)> {
    let all = read_all(reader);
    assert_eq!(all.len() as u64, count, "{what}");
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, (_, p))| *p == payload(i as u64)),
        "{what}: a record differs"
    );
    all
}

#[test]
fn appended_records_read_back_in_order_across_chunks() {
    for pretouch in [false, true] {
        let d = dir();
        let path = d.path().join("q");
        let mut w = Writer::create(&path, small(pretouch)).unwrap();
        let mut positions = Vec::new();
        for seq in 0..2000 {
            positions.push(w.append(&payload(seq)).unwrap());
        }
        assert!(w.position().0 > 4096 + 5 * CHUNK, "spans several chunks");
        let mut r = Reader::open(&path).unwrap();
        let got = read_all(&mut r);
        assert_eq!(got.len(), 2000);
        for (seq, (pos, bytes)) in got.iter().enumerate() {
            assert_eq!(*pos, positions[seq]);
            assert_eq!(*bytes, payload(seq as u64));
        }
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert!(r.next().unwrap().is_none());
    }
}

#[test]
fn records_of_size_zero_and_of_the_maximum_size() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let max = w.max_payload();
    assert_eq!(max as u64, CHUNK - 64 - 8);
    let big: Vec<u8> = (0..max).map(|i| (i % 253) as u8).collect();
    let p0 = w.append(b"").unwrap();
    let p1 = w.append(&big).unwrap();
    let p2 = w.append(b"").unwrap();
    let p3 = w.append(&big).unwrap();
    match w.append(&vec![0u8; max + 1]) {
        Err(QueueError::RecordTooLarge { len, max: m }) => assert_eq!((len, m), (max + 1, max)),
        other => panic!("{other:?}"),
    }
    let mut r = Reader::open(&path).unwrap();
    let got = read_all(&mut r);
    let expect: Vec<(Position, Vec<u8>)> =
        vec![(p0, vec![]), (p1, big.clone()), (p2, vec![]), (p3, big)];
    assert_eq!(got, expect);
    // A maximum record fills a chunk on its own.
    assert_eq!(p1.0, 4096 + CHUNK + 64);
    assert_eq!(p3.0, 4096 + 3 * CHUNK + 64);
}

#[test]
fn a_record_that_would_straddle_a_chunk_goes_to_the_next_one() {
    let d = dir();
    let path = d.path().join("q");
    let options = Options {
        packed_records: true,
        ..small(false)
    };
    let mut w = Writer::create(&path, options).unwrap();
    // Fill the first chunk to 104 bytes before its end.
    let room = CHUNK - 64;
    let first_len = (room - 104 - 8) as usize;
    let a = w.append(&vec![1u8; first_len]).unwrap();
    assert_eq!(w.position().0, 4096 + CHUNK - 104);
    let b = w.append(&[2u8; 200]).unwrap();
    assert_eq!(b.0, 4096 + CHUNK + 64, "moved to the next chunk");
    // A record that fits exactly in the remaining space stays.
    let rest = 4096 + 2 * CHUNK - w.position().0;
    let c = w.append(&vec![3u8; (rest - 8) as usize]).unwrap();
    let d2 = w.append(b"next").unwrap();
    assert_eq!(d2.0, 4096 + 2 * CHUNK + 64);
    let mut r = Reader::open(&path).unwrap();
    let got: Vec<Position> = read_all(&mut r).into_iter().map(|(p, _)| p).collect();
    assert_eq!(got, [a, b, c, d2]);
}

#[test]
fn many_readers_at_different_positions() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let positions: Vec<Position> = (0..500).map(|s| w.append(&payload(s)).unwrap()).collect();
    let mut readers: Vec<(usize, Reader)> = [0usize, 1, 77, 250, 499]
        .iter()
        .map(|&i| {
            let options = ReaderOptions {
                start: Start::At(positions[i]),
                ..ReaderOptions::default()
            };
            (i, Reader::open_with(&path, options).unwrap())
        })
        .collect();
    let mut at_end = Reader::open_with(
        &path,
        ReaderOptions {
            start: Start::End,
            ..ReaderOptions::default()
        },
    )
    .unwrap();
    assert!(at_end.next().unwrap().is_none());
    // Interleave reads: each reader advances at its own pace.
    for round in 0..600 {
        for (k, (next, r)) in readers.iter_mut().enumerate() {
            if round % (k + 1) != 0 {
                continue;
            }
            match r.next().unwrap() {
                Some(rec) => {
                    assert_eq!(rec.position, positions[*next]);
                    assert_eq!(rec.payload, payload(*next as u64));
                    *next += 1;
                }
                None => assert_eq!(*next, 500),
            }
        }
    }
    let tail = w.append(b"tail").unwrap();
    let rec = at_end.next().unwrap().unwrap();
    assert_eq!((rec.position, rec.payload), (tail, &b"tail"[..]));
}

#[test]
fn a_reader_opened_before_growth_follows_the_writer() {
    let d = dir();
    let path = d.path().join("q");
    let w = Writer::create(&path, small(true)).unwrap();
    // The queue is empty: no chunk exists yet beyond what the writer prepared.
    let mut r = Reader::open(&path).unwrap();
    assert!(r.next().unwrap().is_none());
    let writer = std::thread::spawn(move || {
        let mut w = w;
        for seq in 0..20_000u64 {
            w.append(&payload(seq)).unwrap();
        }
        w.position()
    });
    let mut seq = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seq < 20_000 {
        assert!(Instant::now() < deadline, "stalled at {seq}");
        if let Some(rec) = r
            .next_wait(
                Wait::SpinThenYield { spins: 100 },
                Some(Duration::from_millis(100)),
            )
            .unwrap()
        {
            assert_eq!(rec.payload, payload(seq));
            seq += 1;
        }
    }
    let end = writer.join().unwrap();
    assert_eq!(r.position(), end);
    assert!(end.0 > 4096 + 50 * CHUNK, "grew through many chunks");
}

#[test]
fn wait_strategies_return_records_and_time_out() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    for wait in [
        Wait::Spin,
        Wait::SpinThenYield { spins: 10 },
        Wait::Block { spins: 10 },
    ] {
        let mut r = Reader::open_with(
            &path,
            ReaderOptions {
                start: Start::End,
                ..ReaderOptions::default()
            },
        )
        .unwrap();
        let t = Instant::now();
        assert!(r
            .next_wait(wait, Some(Duration::from_millis(30)))
            .unwrap()
            .is_none());
        assert!(t.elapsed() >= Duration::from_millis(30));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            tx.send(pagewise_testkit::thread_id()).unwrap();
            let rec = r
                .next_wait(wait, Some(Duration::from_secs(60)))
                .unwrap()
                .map(|r| r.payload.to_vec());
            (rec, r)
        });
        // The record comes while the reader waits, not before it starts.
        let tid = rx.recv().unwrap();
        let pid = std::process::id();
        pagewise_testkit::wait_until_waiting(pid, tid, pagewise_testkit::task_state(pid, tid));
        w.append(b"wake up").unwrap();
        let (rec, _) = reader.join().unwrap();
        assert_eq!(rec.as_deref(), Some(&b"wake up"[..]), "{wait:?}");
    }
}

#[test]
fn appends_make_no_wake_calls_while_no_reader_sleeps() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let before = w.report().wakes;
    let started = Instant::now();
    for seq in 0..200_000 {
        w.append(&payload(seq % 100)).unwrap();
    }
    let elapsed = started.elapsed();
    let wakes = w.report().wakes - before;
    // At most one FUTEX_WAKE each time the coarse clock (units of ~1 ms)
    // moves on, whatever the number of appends.
    let units = elapsed.as_nanos() as u64 / (1 << 20) + 2;
    assert!(
        wakes <= units,
        "{wakes} wake calls for 200000 appends in {elapsed:?}"
    );
    assert!(w.report().wake_error.is_none());
}

#[test]
fn a_blocked_reader_is_woken_by_the_next_append_not_by_its_timeout() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let mut r = Reader::open(&path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        tx.send(Err(pagewise_testkit::thread_id())).unwrap();
        for _ in 0..5 {
            let rec = r
                .next_wait(Wait::Block { spins: 10 }, Some(Duration::from_secs(60)))
                .unwrap()
                .map(|r| r.payload.to_vec());
            tx.send(Ok(rec)).unwrap();
        }
    });
    let Ok(Err(tid)) = rx.recv() else {
        panic!("the reader did not start")
    };
    for i in 0..5u8 {
        // The reader is in its long sleep (the same FUTEX_WAIT for 2 ms: no
        // short nap lasts that long), which only a wake ends before 250 ms.
        pagewise_testkit::wait_until_asleep_in_futex(std::process::id(), tid);
        let before = w.report();
        w.append(&[i]).unwrap();
        let after = w.report();
        // The append's FUTEX_WAKE found the reader asleep and woke it.
        assert_eq!(after.wakes, before.wakes + 1, "{after:?}");
        assert_eq!(after.woken, before.woken + 1, "{after:?}");
        let rec = rx.recv_timeout(Duration::from_secs(60)).unwrap().unwrap();
        assert_eq!(rec.as_deref(), Some(&[i][..]));
    }
    reader.join().unwrap();
    assert!(w.report().wake_error.is_none());
}

#[test]
fn seek_accepts_record_starts_and_refuses_the_rest() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(false)).unwrap();
    let positions: Vec<Position> = (0..300).map(|s| w.append(&payload(s)).unwrap()).collect();
    let mut r = Reader::open(&path).unwrap();
    r.seek(positions[123]).unwrap();
    assert_eq!(r.next().unwrap().unwrap().payload, payload(123));
    r.seek(w.position()).unwrap();
    assert!(r.next().unwrap().is_none());
    for bad in [
        Position(positions[5].0 + 8),
        Position(positions[5].0 + 3),
        Position(0),
        Position(w.position().0 + 64),
        Position(u64::MAX - 7),
    ] {
        assert!(
            matches!(r.seek(bad), Err(QueueError::InvalidPosition { .. })),
            "{bad}"
        );
    }
}

#[test]
fn reserve_commits_in_place_and_an_abandoned_reservation_leaves_nothing() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    {
        let mut slot = w.reserve(300).unwrap();
        slot.payload().fill(0xAB);
        // Dropped without commit.
    }
    let mut slot = w.reserve(5).unwrap();
    slot.payload().copy_from_slice(b"hello");
    let p = slot.commit();
    let q = w.append(b"after").unwrap();
    let mut r = Reader::open(&path).unwrap();
    let got = read_all(&mut r);
    assert_eq!(got, vec![(p, b"hello".to_vec()), (q, b"after".to_vec())]);
}

#[test]
fn one_writer_at_a_time() {
    let d = dir();
    let path = d.path().join("q");
    let w = Writer::create(&path, small(true)).unwrap();
    assert!(matches!(
        Writer::open(&path, small(true)),
        Err(QueueError::WriterLocked { .. })
    ));
    assert!(matches!(
        Writer::create(&path, small(true)),
        Err(QueueError::Exists { .. })
    ));
    assert!(inspect(&path).unwrap().writer_alive);
    drop(w);
    // Released with the writer, at once (no child holds it: see `CHILDREN`).
    {
        let _no_children = no_children();
        assert!(!inspect(&path).unwrap().writer_alive);
    }
    let mut w = reopen(&path, small(true));
    w.append(b"x").unwrap();
}

#[test]
fn a_read_lock_taken_by_a_reader_does_not_keep_the_writer_out() {
    use pagewise::os::file::{try_lock, LockKind};
    let d = dir();
    let path = d.path().join("q");
    drop(Writer::create(&path, small(false)).unwrap());
    // Read permission is all it takes to hold a read lock on byte 0, which
    // used to be the writer lock: the writer locks `<queue>.lock` now.
    let reader_fd = std::fs::File::open(&path).unwrap();
    assert!(try_lock(&reader_fd, 0, 1, LockKind::Shared).unwrap());
    let mut w = reopen(&path, small(false));
    w.append(b"despite the read lock").unwrap();
    let info = inspect(&path).unwrap();
    // The sign of life on byte 0 is hidden; the lock file (ours) tells.
    assert!(info.read_locked && info.writer_alive, "{info:?}");
    // Still one writer at a time.
    assert!(matches!(
        Writer::open(&path, small(false)),
        Err(QueueError::WriterLocked { .. })
    ));
    drop(w);
    drop(reader_fd);
    let mut w = reopen(&path, small(false));
    w.append(b"after").unwrap();
}

#[test]
fn a_new_writer_continues_after_the_last_record_and_discards_a_torn_one() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    for seq in 0..100 {
        w.append(&payload(seq)).unwrap();
    }
    let end = w.position();
    drop(w);
    // Fake a writer that died after writing a long payload but before its mark.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0x55; 1000], end.0 + 8).unwrap();
    let mut w = reopen(&path, small(true));
    assert_eq!(w.recovery().end, end);
    assert!(w.recovery().torn_record_discarded);
    // A short record in the torn one's place: readers must not see the old bytes.
    w.append(b"short").unwrap();
    w.append(b"shorter").unwrap();
    let mut r = Reader::open(&path).unwrap();
    let got = read_all(&mut r);
    assert_eq!(got.len(), 102);
    assert_eq!(got[100].1, b"short");
    assert_eq!(got[101].1, b"shorter");
    let info = inspect(&path).unwrap();
    assert_eq!(info.records, 102);
    assert_eq!(info.writer_opens, 2);
}

#[test]
fn a_damaged_end_hint_does_not_make_the_next_writer_skip_chunks() {
    let d = dir();
    let path = d.path().join("q");
    // Pre-touch allocates chunks ahead, so the file spans more chunks than hold records.
    let mut w = Writer::create(&path, small(true)).unwrap();
    w.wait_pretouched(3 * CHUNK).unwrap();
    for seq in 0..300 {
        w.append(&payload(seq)).unwrap();
    }
    let end = w.position();
    drop(w);
    let chunks = inspect(&path).unwrap().chunks;
    assert!(chunks > (end.0 - 4096) / CHUNK + 1, "{chunks} chunks");
    // The tail-chunk hint (header offset 128, not checksummed) names the last chunk.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&(chunks - 1).to_le_bytes(), 128).unwrap();
    let mut w = reopen(&path, small(true));
    assert_eq!(w.recovery().end, end);
    let p = w.append(b"continues").unwrap();
    assert_eq!(p, end);
    let got = read_all(&mut Reader::open(&path).unwrap());
    assert_eq!(got.len(), 301);
}

/// A queue with record CRCs holding `records` records, the payload of record
/// `damaged` then damaged in place: its path, options and the positions.
fn crc_queue_with_a_damaged_record(
    d: &tempfile::TempDir,
    records: u64,
    damaged: usize,
) -> (PathBuf, Options, Vec<Position>) {
    let path = d.path().join("q");
    let options = Options {
        record_crc: true,
        ..small(false)
    };
    let mut w = Writer::create(&path, options.clone()).unwrap();
    let p = (0..records)
        .map(|s| w.append(&payload(s)).unwrap())
        .collect::<Vec<_>>();
    drop(w);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xFF], p[damaged].0 + 12).unwrap();
    (path, options, p)
}

#[test]
fn record_crcs_catch_damaged_payloads() {
    let d = dir();
    let (path, options, p) = crc_queue_with_a_damaged_record(&d, 10, 4);
    let mut r = Reader::open(&path).unwrap();
    for _ in 0..4 {
        r.next().unwrap().unwrap();
    }
    match r.next() {
        Err(QueueError::CrcMismatch { position, .. }) => assert_eq!(position, p[4]),
        other => panic!("{other:?}"),
    }
    // Intact records after it: damage, not a torn write. The writer refuses
    // and leaves every byte as it was.
    match refused_unchanged(&path, options.clone()) {
        QueueError::DamagedRecord {
            position,
            intact_after,
            ..
        } => {
            assert_eq!(position, p[4]);
            assert_eq!(intact_after, 5);
        }
        other => panic!("{other:?}"),
    }
    // Asked to, recovery drops it and everything after it, and says how much.
    let w = reopen(
        &path,
        Options {
            discard_damaged: true,
            ..options
        },
    );
    let r = w.recovery();
    assert_eq!(r.crc_failed_at, Some(p[4]));
    assert_eq!((r.discarded_records, r.discarded_intact), (6, 5));
    assert_eq!(w.position(), p[4]);
}

#[test]
fn intact_records_in_later_chunks_count_as_damage_not_a_torn_write() {
    // Recovery walks from the chunk the header's hint names. With the hint
    // one chunk behind (as after a lost header write), damage near the end
    // of that chunk has the next chunk's records after it: they are counted
    // across the padding and the chunk header, so it is not taken for a
    // torn write and the next chunk is not thrown away.
    let d = dir();
    let path = d.path().join("q");
    let options = Options {
        record_crc: true,
        ..small(false)
    };
    let mut w = Writer::create(&path, options.clone()).unwrap();
    let mut p = Vec::new();
    let mut s = 0;
    while w.position().0 < 2 * CHUNK + CHUNK / 2 {
        p.push(w.append(&payload(s)).unwrap());
        s += 1;
    }
    drop(w);
    let last_in_chunk_1 = p.iter().rposition(|q| q.0 < 2 * CHUNK).unwrap();
    assert!(p[last_in_chunk_1].0 > CHUNK);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xFF], p[last_in_chunk_1].0 + 12).unwrap();
    f.write_all_at(&1u64.to_le_bytes(), 128).unwrap();
    let _no_children = no_children();
    match Writer::open(&path, options) {
        Err(QueueError::DamagedRecord {
            position,
            intact_after,
            ..
        }) => {
            assert_eq!(position, p[last_in_chunk_1]);
            assert_eq!(intact_after, (p.len() - last_in_chunk_1 - 1) as u64);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn on_disk_a_bad_crc_past_the_last_flush_is_a_tear_and_before_it_damage() {
    // On a disk file, dirty pages reach the disk in any order: after a power
    // cut a record past the last flush can be torn with later ones intact,
    // and recovery must drop it (as it always has), not refuse. Before the
    // end the last flush made durable nothing can tear: that is damage.
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = d.path().join("q");
    let probe = std::fs::File::create(d.path().join("probe")).unwrap();
    if matches!(
        pagewise::os::file::fs_kind(&probe),
        Ok(pagewise::os::file::FsKind::Tmpfs)
    ) {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Other,
            "the target directory is on tmpfs; this needs a disk file system"
        );
    }
    let options = Options {
        record_crc: true,
        ..small(false)
    };
    let mut w = Writer::create(&path, options.clone()).unwrap();
    let flushed = (0..4)
        .map(|s| w.append(&payload(s)).unwrap())
        .collect::<Vec<_>>();
    w.flush().unwrap();
    let unflushed = (4..10)
        .map(|s| w.append(&payload(s)).unwrap())
        .collect::<Vec<_>>();
    drop(w); // no flush: the last six records are past the durable end
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // Past the durable end, intact records after it: a tear.
    f.write_all_at(&[0xFF], unflushed[2].0 + 12).unwrap();
    let _no_children = no_children();
    let w = Writer::open(&path, options.clone()).unwrap();
    let r = w.recovery();
    assert_eq!(r.crc_failed_at, Some(unflushed[2]));
    assert_eq!((r.discarded_records, r.discarded_intact), (4, 3));
    assert_eq!(w.position(), unflushed[2]);
    drop(w);
    // Before it: damage, refused, the file unchanged.
    f.write_all_at(&[0xFF], flushed[1].0 + 12).unwrap();
    let before = std::fs::read(&path).unwrap();
    match Writer::open(&path, options) {
        Err(QueueError::DamagedRecord {
            position,
            intact_after,
            ..
        }) => {
            assert_eq!(position, flushed[1]);
            assert_eq!(intact_after, 4);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a refused open changed the file"
    );
}

#[test]
fn a_last_record_with_a_bad_crc_is_a_torn_write_and_is_dropped() {
    // A power cut can persist the last record's mark without all of its
    // payload: nothing intact follows it, so recovery drops it without being asked.
    let d = dir();
    let (path, options, p) = crc_queue_with_a_damaged_record(&d, 5, 4);
    let w = reopen(&path, options);
    let r = w.recovery();
    assert_eq!(r.crc_failed_at, Some(p[4]));
    assert_eq!((r.discarded_records, r.discarded_intact), (1, 0));
    assert_eq!(w.position(), p[4]);
}

/// The bytes a record at `pos` of `len` payload bytes takes in a queue made
/// with default options (line-fitting; docs/queue.md, "Record").
fn record_bytes(pos: u64, len: usize, crc: bool) -> u64 {
    pagewise::queue::layout::record_bytes(pos, len as u64, if crc { 4 } else { 0 }, true)
}

#[test]
fn a_file_cut_short_inside_its_last_record_is_recovered_at_every_byte() {
    // What a truncation or an interrupted copy leaves: the last record's
    // mark committed, its bytes cut off. The writer drops it without being
    // asked (as a torn record), says so, and appends after the record
    // before it; every whole record survives. Readers and `inspect` read
    // the whole records and stop at the cut with the same words.
    let d = dir();
    for crc in [false, true] {
        let options = Options {
            record_crc: crc,
            ..small(false)
        };
        let full = d.path().join("full");
        let mut w = Writer::create(&full, options.clone()).unwrap();
        let p = (0..6)
            .map(|s| w.append(&payload(s)).unwrap())
            .collect::<Vec<_>>();
        drop(w);
        let bytes = std::fs::read(&full).unwrap();
        std::fs::remove_file(&full).unwrap();
        let last = p[5].0;
        let end = last + record_bytes(last, payload(5).len(), crc);
        for cut in last..end {
            for discard_damaged in [false, true] {
                let what = format!("crc {crc}, cut at {cut}, discard_damaged {discard_damaged}");
                let q = d.path().join(format!("cut-{crc}-{cut}-{discard_damaged}"));
                std::fs::write(&q, &bytes[..cut as usize]).unwrap();
                let mark_whole = cut >= last + 8;
                // Readers: five records, then the cut (or nothing more, where
                // not even the mark is whole).
                let mut r = Reader::open(&q).unwrap();
                for s in 0..5 {
                    assert_eq!(r.next().unwrap().unwrap().payload, payload(s), "{what}");
                }
                let stop = r.next().map(|rec| rec.map(|rec| rec.position));
                let info = inspect(&q).unwrap();
                assert_eq!(info.records, 5, "{what}");
                if mark_whole {
                    let e = stop.unwrap_err();
                    assert!(
                        matches!(e, QueueError::Corrupt { position, .. } if position == p[5]),
                        "{what}: {e:?}"
                    );
                    let says = format!(
                        "runs past the end of the file ({cut} bytes): the file was cut short inside it"
                    );
                    assert!(e.to_string().contains(&says), "{what}: {e}");
                    assert_eq!(info.problem, Some(e.to_string()), "{what}");
                } else {
                    assert_eq!(stop.unwrap(), None, "{what}");
                    assert_eq!(info.problem, None, "{what}");
                }
                drop(r);
                // The writer drops the cut record, with or without discard_damaged.
                let mut w = reopen(
                    &q,
                    Options {
                        discard_damaged,
                        ..options.clone()
                    },
                );
                let rec = w.recovery().clone();
                assert_eq!(rec.end, p[5], "{what}");
                assert_eq!(rec.cut_record_at, mark_whole.then_some(p[5]), "{what}");
                assert_eq!(
                    (rec.discarded_records, rec.discarded_intact),
                    (u64::from(mark_whole), 0),
                    "{what}"
                );
                assert_eq!(rec.crc_failed_at, None, "{what}");
                // Part of a mark is the bytes of an uncommitted record.
                assert_eq!(
                    rec.torn_record_discarded,
                    cut > last && !mark_whole,
                    "{what}"
                );
                assert_eq!(w.append(b"after the cut").unwrap(), p[5], "{what}");
                drop(w);
                let got = read_all(&mut Reader::open(&q).unwrap());
                let want = (0..5)
                    .map(|s| (p[s as usize], payload(s)))
                    .chain([(p[5], b"after the cut".to_vec())])
                    .collect::<Vec<_>>();
                assert!(
                    got == want,
                    "{what}: read {} records, or other bytes",
                    got.len()
                );
                assert_eq!(inspect(&q).unwrap().problem, None, "{what}");
                std::fs::remove_file(&q).unwrap();
            }
        }
    }
}

#[test]
fn a_length_damaged_shorter_is_refused_not_taken_for_the_end() {
    // Line-fitting records: a 32-byte payload at 4160 takes 64 bytes. Its
    // length damaged to 16 makes it 32 bytes long, so the next mark is
    // looked for at 4192, inside its (zero) payload: the walk would end
    // there with two whole records after it.
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(false)).unwrap();
    assert_eq!(w.append(&[0; 32]).unwrap(), Position(4160));
    assert_eq!(w.append(b"second").unwrap(), Position(4224));
    w.append(b"third").unwrap();
    drop(w);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&16u32.to_le_bytes(), 4160).unwrap();
    let before = std::fs::read(&path).unwrap();
    match Writer::open(&path, small(false)) {
        Err(QueueError::RecordsAfterEnd {
            end,
            found_at,
            intact_after,
            ..
        }) => assert_eq!(
            (end, found_at, intact_after),
            (Position(4192), Position(4224), 2)
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing changed");
    let problem = inspect(&path).unwrap().problem.unwrap_or_default();
    assert!(
        problem.contains("the records end at position 4192")
            && problem.contains("lies at position 4224"),
        "{problem}"
    );
    // Asked to, the writer drops them, says so and appends at the end.
    let options = Options {
        discard_damaged: true,
        ..small(false)
    };
    let mut w = Writer::open(&path, options).unwrap();
    let r = w.recovery().clone();
    assert_eq!(r.records_after_end_at, Some(Position(4224)));
    assert_eq!((r.discarded_records, r.discarded_intact), (2, 2));
    assert!(!r.torn_record_discarded);
    assert_eq!(w.append(b"new").unwrap(), Position(4192));
    drop(w);
    let mut reader = Reader::open(&path).unwrap();
    let got: Vec<Vec<u8>> = read_all(&mut reader).into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, [vec![0; 16], b"new".to_vec()]);
}

#[test]
fn a_length_damaged_past_the_end_of_the_file_with_records_inside_is_refused() {
    // A record running past the end of the file whose bytes hold whole
    // records was not cut short: its length was damaged. Dropping it would
    // drop them, so the writer refuses, changes nothing, and says how to
    // drop them anyway; with discard_damaged it does, and counts them.
    let d = dir();
    for crc in [false, true] {
        let q = d.path().join(format!("q-{crc}"));
        let options = Options {
            record_crc: crc,
            ..small(false)
        };
        let mut w = Writer::create(&q, options.clone()).unwrap();
        let p = (0..6)
            .map(|s| w.append(&payload(s)).unwrap())
            .collect::<Vec<_>>();
        drop(w);
        // The file ends inside the last record; record 2's length (the low
        // 4 bytes of its mark) reaches past that end, not past its chunk.
        let size = p[5].0 + 12;
        let f = std::fs::OpenOptions::new().write(true).open(&q).unwrap();
        f.set_len(size).unwrap();
        let len = (size - p[2].0) as u32 + 100;
        f.write_all_at(&len.to_le_bytes(), p[2].0).unwrap();
        let e = refused_unchanged(&q, options.clone());
        match &e {
            QueueError::DamagedLength {
                position,
                hidden_at,
                intact_after,
                ..
            } => assert_eq!((*position, *hidden_at, *intact_after), (p[2], p[3], 2)),
            other => panic!("crc {crc}: {other:?}"),
        }
        assert!(e.to_string().contains("--discard-damaged"), "{e}");
        let w = reopen(
            &q,
            Options {
                discard_damaged: true,
                ..options
            },
        );
        let r = w.recovery();
        assert_eq!(r.cut_record_at, Some(p[2]));
        // Record 2, the two whole ones inside it, and the cut one.
        assert_eq!((r.discarded_records, r.discarded_intact), (4, 2));
        assert_eq!(w.position(), p[2]);
        drop(w);
        let got = read_all(&mut Reader::open(&q).unwrap());
        assert_eq!(got.len(), 2, "crc {crc}");
    }
}

#[test]
fn a_spinning_reader_at_the_end_gets_records_and_learns_of_a_truncation() {
    // A reader that waits with `Wait::Spin` polls the next mark alone
    // between full looks: a record must still arrive, and a truncation of
    // the file under the mark must still end the wait with `Truncated`,
    // long before the timeout.
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(false)).unwrap();
    w.append(&payload(0)).unwrap();
    let mut r = Reader::open(&path).unwrap();
    assert!(r.next().unwrap().is_some());
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let first = r
            .next_wait(Wait::Spin, Some(Duration::from_secs(20)))
            .map(|rec| rec.map(|rec| rec.payload.to_vec()));
        tx.send(()).unwrap();
        let t = Instant::now();
        let second = r.next_wait(Wait::Spin, Some(Duration::from_secs(20)));
        (first, second.map(|_| ()), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(20));
    w.append(&payload(1)).unwrap();
    rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let (first, second, waited) = waiter.join().unwrap();
    assert_eq!(first.unwrap().unwrap(), payload(1));
    assert!(
        matches!(second, Err(QueueError::Truncated { .. })),
        "{second:?}"
    );
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    drop(w);
}

#[test]
fn retention_drops_old_chunks_and_tells_a_reader_how_far_behind_it_is() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let first = w.append(&payload(0)).unwrap();
    for seq in 1..3000 {
        w.append(&payload(seq)).unwrap();
    }
    // Let the pre-toucher fill its largest window now, so that it allocates
    // nothing between the two measurements of allocated bytes below.
    w.wait_pretouched(1 << 20).unwrap();
    let mut slow = Reader::open(&path).unwrap();
    assert_eq!(slow.next().unwrap().unwrap().position, first);
    let before = inspect(&path).unwrap();
    let report = w
        .retain(Retention {
            max_bytes: Some(3 * CHUNK),
            max_age: None,
        })
        .unwrap();
    assert!(report.dropped_chunks >= 3, "{report:?}");
    assert_eq!(
        report.first_position.0,
        4096 + report.first_chunk * CHUNK + 64
    );
    assert!(w.position().0 - report.first_position.0 >= 3 * CHUNK - 64);
    match slow.next() {
        Err(QueueError::FellBehind {
            position,
            first_available,
            behind_by,
            ..
        }) => {
            assert_eq!(first_available, report.first_position);
            assert_eq!(behind_by, first_available.0 - position.0);
        }
        other => panic!("{other:?}"),
    }
    slow.seek_to_start().unwrap();
    assert_eq!(
        slow.next().unwrap().unwrap().position,
        report.first_position
    );
    let after = inspect(&path).unwrap();
    assert!(after.records < before.records);
    assert_eq!(after.first_position, Some(report.first_position));
    if report.space_freed {
        assert!(after.allocated_bytes < before.allocated_bytes);
    }
    // Age: everything before the current chunk is older than zero seconds.
    let report = w
        .retain(Retention {
            max_bytes: None,
            max_age: Some(Duration::ZERO),
        })
        .unwrap();
    assert_eq!(report.first_chunk, (w.position().0 - 4096) / CHUNK);
    // A new reader starts at the oldest remaining record.
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(r.next().unwrap().unwrap().position, report.first_position);
}

#[test]
fn line_fitting_and_packed_records_are_placed_as_documented_and_kept() {
    for packed in [false, true] {
        let d = dir();
        let path = d.path().join("q");
        let options = Options {
            packed_records: packed,
            ..small(false)
        };
        let mut w = Writer::create(&path, options.clone()).unwrap();
        assert_eq!(w.geometry().line_fitting(), !packed);
        // Records of 0 to 99 bytes, enough to cross several chunks.
        let mut written: Vec<(Position, Vec<u8>)> = Vec::new();
        for seq in 0..4000u64 {
            let len = (seq * 7 % 100) as usize;
            let bytes = vec![(seq % 251) as u8; len];
            let p = w.append(&bytes).unwrap();
            if let Some((last, prev)) = written.last() {
                if (p.0 - 4096) / CHUNK == (last.0 - 4096) / CHUNK {
                    assert_eq!(
                        p.0 - last.0,
                        record_size(last.0, prev.len(), packed),
                        "{seq}"
                    );
                }
            }
            written.push((p, bytes));
        }
        assert!(w.geometry().chunk_of(w.position().0) >= 3, "crossed chunks");
        drop(w);
        let mut r = Reader::open(&path).unwrap();
        assert_eq!(read_all(&mut r), written);
        r.seek(written[7].0).unwrap();
        assert_eq!(r.next().unwrap().unwrap().payload, &written[7].1[..]);
        assert_eq!(inspect(&path).unwrap().line_fitting_records, !packed);
        // The file keeps its layout when reopened with the other asked for.
        let mut w = Writer::open(
            &path,
            Options {
                packed_records: !packed,
                ..options
            },
        )
        .unwrap();
        assert_eq!(w.geometry().line_fitting(), !packed);
        let end = w.position();
        w.append(&[1; 32]).unwrap();
        assert_eq!(w.position().0 - end.0, record_size(end.0, 32, packed));
    }
    // In a line-fitting queue, a run of records of one small size straddles
    // no cache line after its first record, whatever came before it.
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(false)).unwrap();
    for len in [0usize, 8, 20, 32, 56, 100, 3, 40, 1, 50] {
        for k in 0..100 {
            let p = w.append(&vec![7; len]).unwrap();
            let packed = (8 + len as u64).next_multiple_of(8);
            if k > 0 && packed <= 64 {
                assert_eq!(p.0 % packed.next_power_of_two(), 0, "{len} B at {p}");
                assert_eq!(p.0 / 64, (p.0 + packed - 1) / 64, "{len} B at {p}");
            }
        }
    }
}

/// `Options::hand_off` changes where the record's cache lines sit, never a
/// byte: a writer with it, read live by a spinning reader on another
/// thread, leaves the same records at the same positions as one without, in
/// line-fitting and packed queues, through `append` and `reserve`, across
/// chunks.
#[test]
fn a_writer_that_hands_records_off_writes_the_same_records() {
    for packed in [false, true] {
        let d = dir();
        let record = |seq: u64| vec![(seq % 251) as u8; (seq * 13 % 300) as usize];
        let write = |name: &str, hand_off: bool| {
            let path = d.path().join(name);
            let mut w = Writer::create(
                &path,
                Options {
                    packed_records: packed,
                    hand_off,
                    ..small(true)
                },
            )
            .unwrap();
            let mut r = Reader::open(&path).unwrap();
            let writer = std::thread::spawn(move || {
                for seq in 0..3000u64 {
                    let bytes = record(seq);
                    if seq % 3 == 0 {
                        let mut slot = w.reserve(bytes.len()).unwrap();
                        slot.payload().copy_from_slice(&bytes);
                        slot.commit();
                    } else {
                        w.append(&bytes).unwrap();
                    }
                }
                w.position()
            });
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            while got.len() < 3000 {
                assert!(Instant::now() < deadline, "stalled at {}", got.len());
                if let Some(rec) = r
                    .next_wait(Wait::Spin, Some(Duration::from_millis(100)))
                    .unwrap()
                {
                    assert_eq!(rec.payload, record(got.len() as u64));
                    got.push((rec.position, rec.payload.to_vec()));
                }
            }
            let end = writer.join().unwrap();
            assert!(end.0 > 4096 + 5 * CHUNK, "crossed chunks");
            let mut again = Reader::open(&path).unwrap();
            assert!(
                read_all(&mut again) == got,
                "a second reader reads the same"
            );
            (got, end)
        };
        let plain = write("plain", false);
        let handed = write("hand-off", true);
        assert!(
            handed == plain,
            "the same records at the same positions (packed: {packed})"
        );
    }
}

/// The bytes a record at `pos` of `len` payload bytes (no CRC) takes,
/// packed or line-fitting (docs/queue.md, "Record").
fn record_size(pos: u64, len: usize, packed: bool) -> u64 {
    pagewise::queue::layout::record_bytes(pos, len as u64, 0, !packed)
}

#[test]
fn inspect_reports_geometry_and_counts() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let mut bytes = 0;
    for seq in 0..50 {
        bytes += payload(seq).len() as u64;
        w.append(&payload(seq)).unwrap();
    }
    let info = inspect(&path).unwrap();
    assert_eq!(info.schema, "pagewise.queue.inspect/1");
    assert_eq!(info.chunk_size, CHUNK);
    assert_eq!(info.records, 50);
    assert_eq!(info.payload_bytes, bytes);
    assert_eq!(info.end_position, w.position());
    assert!(info.writer_alive);
    assert_eq!(info.last_writer_pid, std::process::id());
    assert!(info.problem.is_none());
}

#[test]
fn inspect_finds_a_length_grown_by_fewer_than_8_bytes() {
    // Without record CRCs, a length of 8 grown by 1 to 7 bytes swallows the
    // next record and ends inside its mark: inspect reads the mark's bytes
    // past the payload's end (in a packed queue: line-fitting records of 16
    // bytes become 32 with such a length, and the test is the same).
    let d = dir();
    let path = d.path().join("q");
    let options = Options {
        packed_records: true,
        ..small(false)
    };
    let mut w = Writer::create(&path, options).unwrap();
    assert_eq!(w.append(b"abcdefgh").unwrap(), Position(4160));
    assert_eq!(w.append(b"hello").unwrap(), Position(4176));
    drop(w);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for k in 1..=7u32 {
        file.write_all_at(&(8 + k).to_le_bytes(), 4160).unwrap();
        let problem = inspect(&path).unwrap().problem.unwrap_or_default();
        assert!(
            problem.contains("holds the mark of a record at position 4176 in its payload"),
            "{k}: {problem}"
        );
    }
    // Line-fitting: three empty records (8 bytes each), then an 8-byte
    // payload at 4184 padded to 4208, then another at 4208. A length grown
    // from 8 to 9 to 24 reaches 4224 and swallows the second one's mark,
    // which lies in the first one's padding, not its payload.
    let path = d.path().join("q2");
    let mut w = Writer::create(&path, small(false)).unwrap();
    for _ in 0..3 {
        w.append(b"").unwrap();
    }
    assert_eq!(w.append(b"abcdefgh").unwrap(), Position(4184));
    assert_eq!(w.append(b"swallow!").unwrap(), Position(4208));
    w.append(b"after").unwrap();
    drop(w);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for len in [9u32, 16, 24] {
        file.write_all_at(&len.to_le_bytes(), 4184).unwrap();
        let problem = inspect(&path).unwrap().problem.unwrap_or_default();
        assert!(
            problem.contains("holds the mark of a record at position 4208"),
            "{len}: {problem}"
        );
    }
}

/// Mounts a small tmpfs for the test and unmounts it on drop.
struct SmallFs {
    dir: tempfile::TempDir,
    /// Its size in bytes.
    size: u64,
}

/// A [`SmallFs`] of `size` bytes, or the test is skipped (it needs root).
macro_rules! small_fs_or_skip {
    ($size:expr) => {
        match SmallFs::mount($size) {
            Ok(fs) => fs,
            Err(e) => {
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::Root,
                    "needs a small tmpfs mount (root): {e}"
                );
            }
        }
    };
}

impl SmallFs {
    fn mount(size: u64) -> Result<SmallFs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let _spawning = spawning();
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "pagewise-test",
            ])
            .arg(dir.path())
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !status.status.success() {
            return Err(format!(
                "mount failed: {}",
                String::from_utf8_lossy(&status.stderr).trim()
            ));
        }
        Ok(SmallFs { dir, size })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system but for about `leave` bytes with a file named
    /// `filler`, and returns that file and its path.
    fn fill(&self, leave: u64) -> (std::fs::File, PathBuf) {
        let path = self.path().join("filler");
        let f = std::fs::File::create(&path).unwrap();
        let mut size = self.size;
        while size > 0 && pagewise::os::file::allocate(&f, 0, size).is_err() {
            size -= 4096;
        }
        f.set_len(size.saturating_sub(leave)).unwrap();
        (f, path)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _spawning = spawning();
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_full_file_system_is_an_error_from_append_not_a_sigbus() {
    let fs = small_fs_or_skip!(1 << 20);
    for pretouch in [true, false] {
        let path: PathBuf = fs.path().join(format!("q{pretouch}"));
        let mut w = Writer::create(&path, small(pretouch)).unwrap();
        let mut ok = Vec::new();
        let err = loop {
            let seq = ok.len() as u64;
            match w.append(&payload(seq)) {
                Ok(p) => ok.push(p),
                Err(e) => break e,
            }
            assert!(ok.len() < 100_000, "never ran out of space");
        };
        assert!(matches!(err, QueueError::NoSpace { .. }), "{err}");
        assert!(err.to_string().contains("No space left on device"), "{err}");
        // Everything whose append returned is there, nothing else.
        let mut r = Reader::open(&path).unwrap();
        let got = read_all(&mut r);
        assert_eq!(got.len(), ok.len());
        assert!(got.iter().zip(&ok).all(|((p, _), q)| p == q));
        // Retention gives space back and appends work again.
        let report = w
            .retain(Retention {
                max_bytes: Some(CHUNK),
                max_age: None,
            })
            .unwrap();
        assert!(report.dropped_chunks > 0);
        w.append(b"after retention").unwrap();
        drop(w);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_create_that_fails_leaves_no_file_behind() {
    let fs = small_fs_or_skip!(256 << 10);
    // Fill the file system, so that even the header cannot be allocated.
    let (f, filler) = fs.fill(0);
    let path = fs.path().join("q");
    match Writer::create(&path, small(false)) {
        Err(QueueError::NoSpace { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(
        !path.exists(),
        "a failed create left {:?} ({} bytes)",
        path,
        std::fs::metadata(&path).map_or(0, |m| m.len())
    );
    let names: Vec<_> = std::fs::read_dir(fs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["filler"], "nothing else is left either");
    drop(f);
    std::fs::remove_file(&filler).unwrap();
    let mut w = Writer::open_or_create(&path, small(false)).unwrap();
    w.append(b"now there is room").unwrap();
}

/// A create whose header fits but whose first chunk does not fails after
/// the queue file has its name: it removes that file and the lock file it
/// made, but never a lock file that was there before.
#[test]
fn a_create_that_fails_after_the_header_leaves_no_file_behind() {
    let fs = small_fs_or_skip!(1 << 20);
    // Fill the file system but for 16 KiB: room for the header page, not
    // for the first piece of the chunk.
    let (f, filler) = fs.fill(16384);
    let path = fs.path().join("q");
    let lock = fs.path().join("q.lock");
    let names = || {
        let mut n: Vec<_> = std::fs::read_dir(fs.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    for pretouch in [false, true] {
        for (how, lock_before) in [
            ("create", false),
            ("open_or_create", false),
            ("create", true),
        ] {
            if lock_before {
                std::fs::File::create(&lock).unwrap();
            }
            let opened = match how {
                "create" => Writer::create(&path, small(pretouch)),
                _ => Writer::open_or_create(&path, small(pretouch)),
            };
            match opened {
                Err(QueueError::NoSpace { offset, .. }) => assert!(
                    offset > 0,
                    "{how}: the header did not fit, which the test means to allow"
                ),
                other => panic!("{how}: {other:?}"),
            }
            let expected: &[&str] = if lock_before {
                &["filler", "q.lock"]
            } else {
                &["filler"]
            };
            assert_eq!(
                names(),
                expected,
                "{how} (pre-touch {pretouch}, lock file before: {lock_before})"
            );
            let _ = std::fs::remove_file(&lock);
        }
    }
    drop(f);
    std::fs::remove_file(&filler).unwrap();
    let mut w = Writer::open_or_create(&path, small(false)).unwrap();
    w.append(b"now there is room").unwrap();
}

#[test]
fn simultaneous_creates_give_one_writer_and_writer_locked() {
    for round in 0..200 {
        let d = dir();
        let path = d.path().join("q");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
        let racers: Vec<_> = (0..3)
            .map(|_| {
                let (path, barrier) = (path.clone(), std::sync::Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let result = Writer::open_or_create(&path, small(false));
                    // Keep a winner's lock until every racer has tried.
                    barrier.wait();
                    result.map(|_| ())
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for r in results {
            match r {
                Ok(()) | Err(QueueError::WriterLocked { .. }) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
    }
}

#[test]
fn truncation_by_another_process_is_a_clear_error() {
    for watch in [true, false] {
        let d = dir();
        let path = d.path().join("q");
        // No pre-toucher: its thread could extend the file again right after
        // the truncation, and the reader would rightly see no truncation.
        let mut w = Writer::create(&path, small(false)).unwrap();
        for seq in 0..500 {
            w.append(&payload(seq)).unwrap();
        }
        let options = ReaderOptions {
            watch_truncation: watch,
            ..ReaderOptions::default()
        };
        let mut r = Reader::open_with(&path, options).unwrap();
        for _ in 0..10 {
            r.next().unwrap().unwrap();
        }
        if watch && r.truncation_check().0 != pagewise::queue::TruncationCheck::Inotify {
            pagewise_testkit::skip_part!(
                "inotify",
                pagewise_testkit::Need::Kernel,
                "inotify unavailable, checking periodically: {:?}",
                r.truncation_check()
            );
        }
        let status = {
            let _spawning = spawning();
            std::process::Command::new("truncate")
                .args(["-s", "8192"])
                .arg(&path)
                .status()
                .unwrap()
        };
        assert!(status.success());
        if watch {
            // The watch thread notices within its wake-up time (the documented window).
            let deadline = Instant::now() + Duration::from_secs(10);
            while !r.truncation_noticed() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(r.truncation_noticed());
        }
        // With the watch the flag is set; without it, every call checks the size.
        match r.next().map(|_| ()) {
            Err(QueueError::Truncated { size, needed, .. }) => {
                assert_eq!(size, 8192);
                assert!(needed > 8192);
            }
            other => panic!("watch={watch}: {other:?}"),
        }
        assert!(r.next().is_err(), "the error sticks");
        drop(w);
    }
}

#[test]
fn truncations_racing_reads_give_truncated_never_sigbus() {
    // The SIGBUS guard: a read of a page past the new end of the file returns
    // an error on the reading thread. Without it this process would die.
    let d = dir();
    let template = d.path().join("template");
    let options = Options {
        chunk_size: 1 << 20,
        ..small(false)
    };
    let mut w = Writer::create(&template, options).unwrap();
    let record = [5u8; 1000];
    while w.position().0 < 6 << 20 {
        w.append(&record).unwrap();
    }
    drop(w);
    let path = d.path().join("q");
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
    let (mut truncated, mut whole) = (0, 0);
    for run in 0..100 {
        std::fs::copy(&template, &path).unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_micros(seed % 3000);
        let options = ReaderOptions {
            // Without the watch, nothing warns the reader: the copy meets the cut.
            watch_truncation: run % 2 == 0,
            ..ReaderOptions::default()
        };
        let mut r = Reader::open_with(&path, options).unwrap();
        let cutter_path = path.clone();
        let cutter = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&cutter_path)
                .unwrap();
            f.set_len(2 << 20).unwrap();
        });
        let mut n = 0;
        let outcome = loop {
            match r.next() {
                Ok(Some(rec)) => {
                    assert_eq!(rec.payload, &record[..], "run {run}: record {n}");
                    n += 1;
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        cutter.join().unwrap();
        match outcome {
            None => whole += 1,
            Some(QueueError::Truncated { size, .. }) => {
                assert_eq!(size, 2 << 20, "run {run}");
                truncated += 1;
            }
            Some(e) => panic!("run {run} after {n} records: {e}"),
        }
    }
    eprintln!("100 races: {truncated} Truncated, {whole} read whole first");
    assert!(truncated > 0, "no truncation landed during a read");
}

#[test]
fn appends_take_no_page_faults_with_pretouch() {
    if faults_during(|| ()).is_none() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    }
    use pagewise::host::thp::{self, FaultMemory};
    let d = dir();
    for pretouch in [true, false] {
        let options = Options {
            chunk_size: 1 << 20,
            ..small(pretouch)
        };
        let record = [7u8; 128];
        let appends = |w: &mut Writer| {
            for _ in 0..40_000 {
                w.append(&record).unwrap();
            }
        };
        // The same appends on a throw-away queue first: the second run
        // reaches no stack or heap for the first time (docs/TESTING.md).
        let mut warm =
            Writer::create(d.path().join(format!("warm-{pretouch}")), options.clone()).unwrap();
        warm.wait_pretouched(256 << 10).unwrap();
        appends(&mut warm);
        drop(warm);
        let mut w = Writer::create(d.path().join(format!("q-{pretouch}")), options).unwrap();
        w.wait_pretouched(256 << 10).unwrap();
        let faults = faults_of(|| appends(&mut w)).unwrap();
        let written = w.position().0 - 4096;
        assert!(written > 5 * (1 << 20), "crossed chunks");
        if pretouch {
            assert_eq!(faults, 0, "{:?}", w.report().window);
        } else {
            // Every page of the file faults once when first written: at
            // least one fault per the largest page shared memory may get here
            // (4 KiB on a tmpfs without huge pages).
            let page = thp::settings(&pagewise::host::SysRoot::live()).largest_fault_page(
                FaultMemory::Shmem {
                    mount_huge: thp::tmpfs_huge_option(d.path()),
                },
            );
            let least = written / page;
            assert!(least >= 2, "{written} bytes in pages of {page}");
            assert!(
                faults >= least,
                "without pre-touch every page faults: {faults} for {written} bytes in pages of {page}"
            );
        }
    }
}

/// Pre-touch without a thread: the writer's `idle_work` prepares the window.
fn idle_only(window: u64) -> Options {
    Options {
        chunk_size: 1 << 20,
        pretouch: Some(PreTouch {
            window,
            max_window: window,
            mode: PreTouchMode::Idle,
            ..PreTouch::default()
        }),
        ..Options::default()
    }
}

#[test]
fn idle_work_prepares_the_window_so_appends_take_no_faults() {
    let d = dir();
    let path = d.path().join("q");
    let window = 256 << 10;
    let mut w = Writer::create(&path, idle_only(window)).unwrap();
    let record = [3u8; 120];
    let mut idle_pieces = 0;
    let mut counted = 0;
    // A paced writer: a burst a little smaller than the window, then idle time.
    for burst in 0..30 {
        while w.idle_work().unwrap() {}
        let before = w.report().window;
        assert_eq!(before.mode, pagewise::queue::PreToucher::Idle);
        let faults = faults_of(|| {
            for _ in 0..1500 {
                w.append(&record).unwrap();
            }
        });
        let after = w.report().window;
        assert_eq!(
            after.pieces_inline, before.pieces_inline,
            "the window was ready: {after:?}"
        );
        // The first burst is the warm-up: it runs the append path through
        // this closure for the first time (docs/TESTING.md).
        if let (Some(f), true) = (faults, burst > 0) {
            assert_eq!(f, 0, "burst {burst}: {after:?}");
            counted += 1;
        }
        idle_pieces = after.pieces_idle;
    }
    if counted == 0 {
        pagewise_testkit::skip_part!(
            "no faults",
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    }
    assert!(w.position().0 > 4 << 20, "crossed chunks");
    assert!(
        idle_pieces >= (4 << 20) / 4096,
        "one page per idle step: {idle_pieces}"
    );
    // Idle work stops once the window is ready and the old chunks are unmapped.
    let mut steps = 0;
    while w.idle_work().unwrap() {
        steps += 1;
        assert!(steps < 10_000, "idle work never ends");
    }
    assert!(!w.idle_work().unwrap());
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(read_all(&mut r).len(), 30 * 1500);
}

#[test]
fn a_writer_that_never_idles_still_appends_across_chunks() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, idle_only(64 << 10)).unwrap();
    for seq in 0..30_000 {
        w.append(&payload(seq)).unwrap();
    }
    assert!(w.position().0 > 4 << 20, "crossed chunks");
    let report = w.report().window;
    assert_eq!(report.pieces_idle, 0);
    assert!(report.pieces_inline > 0);
    let mut r = Reader::open(&path).unwrap();
    read_payloads_in_order(&mut r, 30_000, "inline pieces");
}

#[test]
fn a_live_reader_follows_the_writer_over_many_chunk_boundaries() {
    // The reader takes each finished chunk's mapping down in its idle time.
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(true)).unwrap();
    let total = 20_000u64;
    let reader_path = path.clone();
    let reader = std::thread::spawn(move || {
        let mut r = Reader::open(&reader_path).unwrap();
        for seq in 0..total {
            let rec = r
                .next_wait(Wait::Spin, Some(Duration::from_secs(20)))
                .unwrap()
                .expect("a record within 20 s");
            assert_eq!(rec.payload, payload(seq).as_slice(), "record {seq}");
        }
    });
    for seq in 0..total {
        w.append(&payload(seq)).unwrap();
        if seq % 500 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    reader.join().unwrap();
    assert!(w.position().0 > 4096 + 40 * CHUNK, "crossed many chunks");
}

#[test]
fn both_copy_routines_carry_the_same_bytes() {
    use pagewise::copy::Routine;
    for copy in Routine::ALL {
        let d = dir();
        let path = d.path().join("q");
        let mut w = Writer::create(
            &path,
            Options {
                copy,
                ..small(false)
            },
        )
        .unwrap();
        for seq in 0..500 {
            w.append(&payload(seq)).unwrap();
        }
        let mut r = Reader::open_with(
            &path,
            ReaderOptions {
                copy,
                ..ReaderOptions::default()
            },
        )
        .unwrap();
        read_payloads_in_order(&mut r, 500, &format!("{copy:?}"));
    }
}

#[test]
fn idle_pretouch_reopened_at_an_unaligned_position_crosses_small_chunks() {
    // Inline preparation claims runs of 4 KiB pieces; a writer reopened in the
    // middle of a run's span must still never prepare across a chunk boundary.
    let d = dir();
    let path = d.path().join("q");
    let options = || Options {
        chunk_size: CHUNK,
        ..idle_only(64 << 10)
    };
    let mut seq = 0u64;
    for round in 0..4 {
        let mut w = if round == 0 {
            Writer::create(&path, options()).unwrap()
        } else {
            reopen(&path, options())
        };
        // An odd number of varying records: the next writer opens mid-piece.
        for _ in 0..(round * 131 + 77) {
            w.append(&payload(seq)).unwrap();
            seq += 1;
        }
        // Some idle work, but not all of it, then a burst across chunks.
        for _ in 0..round * 3 {
            w.idle_work().unwrap();
        }
        for _ in 0..600 {
            w.append(&payload(seq)).unwrap();
            seq += 1;
        }
    }
    let mut r = Reader::open(&path).unwrap();
    let all = read_payloads_in_order(&mut r, seq, "reopened writers");
    assert!(
        all.last().unwrap().0 .0 > 4096 + 5 * CHUNK,
        "crossed many chunks"
    );
}

#[test]
fn auto_pretouch_starts_a_thread_only_with_a_cpu_to_spare() {
    use pagewise::queue::{PreToucher, THREAD_MIN_CPUS};
    let cpus = pagewise::os::process::usable_cpus().unwrap();
    assert!(!cpus.is_empty());
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(
        &path,
        Options {
            chunk_size: CHUNK,
            ..Options::default()
        },
    )
    .unwrap();
    let report = w.report().window;
    let expected = if cpus.len() >= THREAD_MIN_CPUS {
        PreToucher::Thread
    } else {
        PreToucher::Idle
    };
    assert_eq!(report.mode, expected, "{report:?}");
    assert!(
        report
            .mode_reason
            .contains(&format!("{} usable CPU", cpus.len())),
        "{report:?}"
    );
    // Idle mode still keeps appends free of page faults: the writer
    // prepares what it needs when it catches up.
    for i in 0..10_000u32 {
        w.append(&i.to_le_bytes()).unwrap();
    }
    let report = w.report().window;
    match expected {
        PreToucher::Idle => assert!(
            report.pieces_inline > 0 && report.pieces_background == 0,
            "{report:?}"
        ),
        _ => assert!(report.pieces_background > 0, "{report:?}"),
    }
    // The choice is in the header for inspect.
    assert_eq!(inspect(&path).unwrap().last_writer_pretouch, Some(expected));
}

/// A writer whose catch-ups are far apart for what they cost (it waits
/// between records, as one that awaits replies does) keeps the cache lead
/// prepared beyond what it needs; its records read back unchanged.
#[test]
fn a_writer_that_waits_between_records_keeps_the_cache_lead_prepared() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(
        &path,
        Options {
            pretouch: Some(PreTouch {
                mode: PreTouchMode::Idle,
                ..PreTouch::default()
            }),
            ..Options::default()
        },
    )
    .unwrap();
    let lead = w.report().window.cache_lead_bytes;
    let piece = w.report().window.piece_bytes;
    let record = [7u8; 56];
    // 64-byte records: a catch-up every 1024 of them, 8 ms of waits between.
    let records = (3 * lead + (1 << 20)) / 64;
    for i in 0..records {
        if i % 128 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        w.append(&record).unwrap();
    }
    let report = w.report().window;
    assert!(report.cache_lead_active, "{report:?}");
    let written = records * 64;
    let prepared = report.pieces_inline * piece;
    assert!(
        prepared >= written + lead - (128 << 10),
        "prepared {prepared} for {written} written and a lead of {lead}: {report:?}"
    );
    assert!(prepared <= written + lead + (256 << 10), "{report:?}");
    drop(w);
    let mut r = Reader::open(&path).unwrap();
    let got = read_all(&mut r);
    assert_eq!(got.len() as u64, records);
    assert!(got.iter().all(|(_, p)| p[..] == record[..]));
}

#[test]
fn an_explicit_pretouch_mode_is_kept_and_reported() {
    use pagewise::queue::PreToucher;
    let d = dir();
    for (mode, expect) in [
        (PreTouchMode::Thread, PreToucher::Thread),
        (PreTouchMode::Idle, PreToucher::Idle),
    ] {
        let path = d.path().join(format!("q-{}", expect.name()));
        let w = Writer::create(
            &path,
            Options {
                chunk_size: CHUNK,
                pretouch: Some(PreTouch {
                    mode,
                    ..PreTouch::default()
                }),
                ..Options::default()
            },
        )
        .unwrap();
        let report = w.report().window;
        assert_eq!(report.mode, expect);
        assert!(report.mode_reason.contains("asked for"), "{report:?}");
        // The cache lead is for the work on the writer's own CPU only.
        match expect {
            PreToucher::Thread => assert_eq!(report.cache_lead_bytes, 0, "{report:?}"),
            _ => assert!(report.cache_lead_bytes >= 64 << 10, "{report:?}"),
        }
        assert!(!report.cache_lead_active, "{report:?}");
        // Said to users of the CLI and C too: no Rust names.
        assert!(!report.mode_reason.contains("::"), "{report:?}");
        assert_eq!(inspect(&path).unwrap().last_writer_pretouch, Some(expect));
    }
    let path = d.path().join("q-off");
    let w = Writer::create(&path, small(false)).unwrap();
    assert_eq!(w.report().window.cache_lead_bytes, 0);
    let reason = w.report().window.mode_reason;
    assert!(
        reason.starts_with("not asked for") && !reason.contains("::"),
        "{reason}"
    );
    drop(w);
    assert_eq!(
        inspect(&path).unwrap().last_writer_pretouch,
        Some(PreToucher::Off)
    );
}

/// Runs `f` on a thread that may use at most two CPUs (so `PreTouchMode::Auto`
/// finds fewer than `THREAD_MIN_CPUS`), as on a 2-CPU machine.
fn on_two_cpus<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let cpus = pagewise::os::process::usable_cpus().unwrap();
            let two = &cpus[..cpus.len().min(2)];
            pagewise::os::process::restrict_this_thread(two).unwrap();
            assert_eq!(
                pagewise::os::process::usable_cpus().unwrap().len(),
                two.len()
            );
            f()
        })
        .join()
        .unwrap()
    })
}

fn auto_options() -> Options {
    Options {
        chunk_size: 1 << 20,
        ..Options::default()
    }
}

#[test]
fn auto_pretouch_on_two_cpus_starts_a_low_priority_thread_for_a_writer_without_idle_time() {
    use pagewise::queue::PreToucher;
    let d = dir();
    let path = d.path().join("q");
    let (report, records) = on_two_cpus(|| {
        let mut w = Writer::create(&path, auto_options()).unwrap();
        let first = w.report().window;
        assert_eq!(first.mode, PreToucher::Idle, "{first:?}");
        assert!(first.follows_pattern && first.switches == 0, "{first:?}");
        // Back to back, never idle: 8 MiB of 120-byte payloads.
        let payload = [7u8; 120];
        let mut records = 0u64;
        while w.position().0 < 8 << 20 {
            w.append(&payload).unwrap();
            records += 1;
        }
        // The thread says how it lowered its priority when it starts.
        let deadline = Instant::now() + Duration::from_secs(20);
        while w.report().window.thread_priority.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let report = w.report().window;
        // The choice is in the header while the writer runs.
        let seen = inspect(&path).unwrap();
        assert_eq!(
            seen.last_writer_pretouch,
            Some(PreToucher::LowPriorityThread)
        );
        assert_eq!(seen.last_writer_pretouch_switches, 1);
        assert!(seen.last_writer_pretouch_since_unix_ns.is_some());
        assert_eq!(
            seen.last_writer_usable_cpus,
            report.usable_cpus.map(|n| n as u32)
        );
        (report, records)
    });
    assert_eq!(report.mode, PreToucher::LowPriorityThread, "{report:?}");
    assert_eq!(report.switches, 1, "{report:?}");
    assert_eq!(report.switch_log.len(), 1);
    assert_eq!(report.switch_log[0].to, PreToucher::LowPriorityThread);
    assert!(
        report.switch_log[0]
            .why
            .contains("caught up with the window 8 times"),
        "{report:?}"
    );
    // It switched within the first MiB, not at the end.
    assert!(
        report.switch_log[0].at_position < 4096 + (1 << 20),
        "{report:?}"
    );
    assert!(report.mode_reason.contains("usable CPUs"), "{report:?}");
    let priority = report.thread_priority.clone().expect("the thread started");
    assert!(
        priority == "SCHED_IDLE" || priority.starts_with("nice 19"),
        "{priority}"
    );
    println!("low-priority pre-toucher: {priority}; {report:?}");
    // Nothing was lost to pieces prepared twice (by the thread and by the
    // writer, which never waits for it).
    let mut r = Reader::open(&path).unwrap();
    let all = read_all(&mut r);
    assert_eq!(all.len() as u64, records);
    assert!(all.iter().all(|(_, p)| p[..] == [7u8; 120][..]));
}

#[test]
fn auto_pretouch_on_two_cpus_stays_in_idle_time_for_a_writer_that_idles() {
    use pagewise::queue::PreToucher;
    let d = dir();
    let path = d.path().join("q");
    let report = on_two_cpus(|| {
        let mut w = Writer::create(&path, auto_options()).unwrap();
        // A paced writer: idle_work while it waits for each record (a few
        // calls: one 4 KiB page each, against 136 bytes per record).
        let payload = [3u8; 120];
        while w.position().0 < 8 << 20 {
            for _ in 0..3 {
                w.idle_work().unwrap();
            }
            w.append(&payload).unwrap();
        }
        w.report().window
    });
    assert_eq!(report.mode, PreToucher::Idle, "{report:?}");
    assert_eq!(report.switches, 0, "{report:?}");
    assert!(report.pieces_idle > 0, "{report:?}");
    // The low-priority thread exists (created asleep at open) but did no work.
    assert_eq!(report.pieces_background, 0, "{report:?}");
    let seen = inspect(&path).unwrap();
    assert_eq!(seen.last_writer_pretouch, Some(PreToucher::Idle));
    assert_eq!(seen.last_writer_pretouch_switches, 0);
}

#[test]
fn auto_pretouch_on_two_cpus_goes_back_to_idle_time_when_the_writer_idles_again() {
    use pagewise::queue::PreToucher;
    let d = dir();
    let path = d.path().join("q");
    let report = on_two_cpus(|| {
        let mut w = Writer::create(&path, auto_options()).unwrap();
        let payload = [5u8; 120];
        while w.report().window.mode != PreToucher::LowPriorityThread {
            assert!(w.position().0 < 4 << 20, "no switch to the thread");
            w.append(&payload).unwrap();
        }
        // Now a paced writer again: idle_work between records.
        for _ in 0..20_000 {
            w.idle_work().unwrap();
            if w.report().window.mode == PreToucher::Idle {
                break;
            }
            w.append(&payload).unwrap();
        }
        w.report().window
    });
    assert_eq!(report.mode, PreToucher::Idle, "{report:?}");
    assert_eq!(report.switches, 2, "{report:?}");
    assert_eq!(report.switch_log[1].to, PreToucher::Idle);
    assert!(
        report.switch_log[1].why.contains("called idle_work"),
        "{report:?}"
    );
    let seen = inspect(&path).unwrap();
    assert_eq!(seen.last_writer_pretouch, Some(PreToucher::Idle));
    assert_eq!(seen.last_writer_pretouch_switches, 2);
}

/// `Reader::prepare` maps in what the file holds ahead of the reader,
/// across chunks: reading it afterwards takes no page fault, where the same
/// reads without it fault on every 64 KiB at least once per chunk. It stops
/// at the file's size and keeps the chunks it mapped until the reader gets
/// there, also after a seek back.
#[test]
fn a_prepared_reader_reads_across_chunks_without_faults() {
    let d = dir();
    let path = d.path().join("q");
    let options = Options {
        chunk_size: 1 << 20,
        ..Options::default()
    };
    let mut w = Writer::create(&path, options).unwrap();
    let record = [3u8; 200];
    let mut count = 0u64;
    while w.position().0 < 4096 + (7 << 19) {
        w.append(&record).unwrap();
        count += 1;
    }
    let written_end = w.position().0;
    let read_all = |r: &mut Reader| {
        let mut n = 0u64;
        while let Some(rec) = r.next().unwrap() {
            assert_eq!(rec.payload, &record[..]);
            n += 1;
        }
        n
    };
    // A warm-up pass on a reader of its own: the measured passes reach no
    // stack or heap for the first time (docs/TESTING.md).
    let mut warm = Reader::open(&path).unwrap();
    assert_eq!(read_all(&mut warm), count);
    drop(warm);

    let mut plain = Reader::open(&path).unwrap();
    let mut n = 0;
    let unprepared = faults_of(|| n = read_all(&mut plain)).unwrap();
    assert_eq!(n, count);
    assert!(
        unprepared >= 4,
        "3.5 chunks read unprepared took only {unprepared} faults"
    );

    let mut r = Reader::open(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let prepared = r.prepare(u64::MAX).unwrap();
    assert!(prepared.0 <= size, "{prepared:?} past the file size {size}");
    assert!(
        prepared.0 >= written_end,
        "{prepared:?} short of {written_end}"
    );
    // A seek back within the first chunk keeps the chunks mapped ahead.
    r.seek_to_start().unwrap();
    let mut n = 0;
    let faults = faults_of(|| n = read_all(&mut r)).unwrap();
    assert_eq!(n, count);
    assert_eq!(
        faults, 0,
        "prepared reads faulted ({unprepared} unprepared)"
    );
}

/// `Reader::prepare` of a range past what the writer has written maps in
/// only what the file holds, and the records appended there later read
/// back whole.
#[test]
fn preparing_past_the_end_stops_at_the_file_size() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(false)).unwrap();
    w.append(b"first").unwrap();
    let mut r = Reader::open(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let to = r.prepare(10 * CHUNK).unwrap();
    assert!(to.0 <= size, "{to:?} past the file size {size}");
    for i in 0..2000u64 {
        w.append(&payload(i)).unwrap();
    }
    assert_eq!(r.next().unwrap().unwrap().payload, b"first");
    for i in 0..2000u64 {
        assert_eq!(r.next().unwrap().unwrap().payload, &payload(i)[..]);
    }
    assert!(r.next().unwrap().is_none());
}

/// A reader that retention left behind cannot prepare: it gets
/// `FellBehind`, as from `next`, instead of filling the punched chunks in
/// again.
#[test]
fn a_reader_behind_retention_cannot_prepare() {
    let d = dir();
    let path = d.path().join("q");
    let mut w = Writer::create(&path, small(false)).unwrap();
    let mut r = Reader::open(&path).unwrap();
    while w.position().0 < 4096 + 4 * CHUNK {
        w.append(&[9u8; 500]).unwrap();
    }
    let report = w
        .retain(Retention {
            max_bytes: Some(CHUNK),
            max_age: None,
        })
        .unwrap();
    assert!(report.dropped_chunks >= 2, "{report:?}");
    match r.prepare(u64::MAX) {
        Err(QueueError::FellBehind { .. }) => {}
        other => panic!("prepare behind retention gave {other:?}"),
    }
    r.seek_to_start().unwrap();
    let to = r.prepare(u64::MAX).unwrap();
    assert!(to.0 >= w.position().0, "{to:?}");
    assert!(r.next().unwrap().is_some());
}
