//! Corrupted and foreign files fed to `Reader::open`, `Reader::next`,
//! `inspect` and `Writer::open`: every outcome is a record or a typed error,
//! never a panic, an out-of-bounds read or a SIGBUS. With record CRCs on,
//! every record a reader does return is one the writer wrote, at the position
//! it was written.

use pagewise::queue::{inspect, Options, Position, QueueError, Reader, Writer};
use proptest::prelude::*;
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

const CHUNK: u64 = 64 << 10;
/// Byte offset of the header checksum, and the bytes it covers (docs/queue.md).
const HEADER_CRC_AT: usize = 56;
/// The first-chunk word (docs/queue.md): its own check bits from version 2.
const FIRST_CHUNK_AT: usize = 64;
/// The header's mutable words: first chunk, chunk hint, wake word, writer pid, opens.
const HEADER_WORDS: [usize; 5] = [FIRST_CHUNK_AT, 128, 192, 256, 264];

fn payload(seq: u64) -> Vec<u8> {
    let len = (seq * 53 % 700) as usize;
    (0..len).map(|i| (seq as usize * 7 + i) as u8).collect()
}

/// Writer options for the sample's geometry (an existing queue keeps its own).
/// Queues with record CRCs are made packed, those without line-fitting, so
/// that the damage tests cover both record layouts.
fn options(crc: bool) -> Options {
    Options {
        chunk_size: CHUNK,
        record_crc: crc,
        packed_records: crc,
        pretouch: None,
        ..Options::default()
    }
}

/// A valid queue of about three chunks, its bytes and its records by position.
struct Sample {
    bytes: Vec<u8>,
    records: HashMap<Position, Vec<u8>>,
}

fn sample(crc: bool) -> &'static Sample {
    static PLAIN: OnceLock<Sample> = OnceLock::new();
    static CRC: OnceLock<Sample> = OnceLock::new();
    (if crc { &CRC } else { &PLAIN }).get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let mut w = Writer::create(&path, options(crc)).unwrap();
        let mut records = HashMap::new();
        for seq in 0..420 {
            let p = w.append(&payload(seq)).unwrap();
            records.insert(p, payload(seq));
        }
        drop(w);
        Sample {
            bytes: std::fs::read(&path).unwrap(),
            records,
        }
    })
}

#[derive(Debug, Clone)]
enum Damage {
    /// XOR one byte.
    Flip { at: usize, with: u8 },
    /// Overwrite an 8-byte-aligned word (hits marks and header fields whole).
    Word { at: usize, value: u64 },
    /// Overwrite a word with a small number (lengths, chunk indexes).
    SmallWord { at: usize, value: u64 },
    /// Overwrite one of the header's mutable words (with a small number or
    /// anything): the first-chunk word above all.
    HeaderWord { which: usize, value: u64 },
}

impl Damage {
    /// Whether it changes only bytes of the header page.
    fn in_header(&self, len: usize) -> bool {
        match *self {
            Damage::Flip { at, .. } => place(at, len) < 4096,
            Damage::Word { at, .. } | Damage::SmallWord { at, .. } => place(at, len) & !7 < 4096,
            Damage::HeaderWord { .. } => true,
        }
    }
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, with)| Damage::Flip { at, with }),
        (any::<usize>(), any::<u64>()).prop_map(|(at, value)| Damage::Word { at, value }),
        (any::<usize>(), 0..200_000u64).prop_map(|(at, value)| Damage::SmallWord { at, value }),
        (any::<usize>(), prop_oneof![0..8u64, any::<u64>()])
            .prop_map(|(which, value)| Damage::HeaderWord { which, value }),
    ]
}

/// Where damage lands: mostly the header and the first records of each
/// chunk, where one changed byte matters most; anywhere otherwise.
fn place(at: usize, len: usize) -> usize {
    let hot = [
        0usize,
        4096,
        4096 + CHUNK as usize,
        4096 + 2 * CHUNK as usize,
    ];
    match at % 4 {
        0 => at / 4 % len,
        k => (hot[k] + (at / 4) % 2048).min(len - 1),
    }
}

fn apply(bytes: &mut Vec<u8>, damages: &[Damage], fix_header_crc: bool, cut: Option<usize>) {
    let len = bytes.len();
    for d in damages {
        match *d {
            Damage::Flip { at, with } => bytes[place(at, len)] ^= with,
            Damage::Word { at, value } | Damage::SmallWord { at, value } => {
                let at = place(at, len) & !7;
                if at + 8 <= len {
                    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
                }
            }
            Damage::HeaderWord { which, value } => {
                let at = HEADER_WORDS[which % HEADER_WORDS.len()];
                bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
        }
    }
    if fix_header_crc && bytes.len() >= 4096 {
        let crc = crc32fast::hash(&bytes[..HEADER_CRC_AT]);
        bytes[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    if let Some(cut) = cut {
        bytes.truncate(cut % (len + 1));
    }
}

/// The bytes a record at `pos` of `len` payload bytes takes in a queue made
/// with [`options`] (docs/queue.md, "Record").
fn record_bytes(pos: u64, len: usize, crc: bool) -> u64 {
    pagewise::queue::layout::record_bytes(pos, len as u64, if crc { 4 } else { 0 }, !crc)
}

/// Records as read: position and payload.
type Records = Vec<(Position, Vec<u8>)>;

/// Reads everything a reader gives; returns the records and how it ended.
fn read_through(path: &Path) -> Result<(Records, Option<QueueError>), QueueError> {
    let mut reader = Reader::open(path)?;
    let mut got = Vec::new();
    // More calls than records: a reader must stop, not loop.
    for _ in 0..2000 {
        match reader.next() {
            Ok(Some(r)) => got.push((r.position, r.payload.to_vec())),
            Ok(None) => return Ok((got, None)),
            Err(e) => return Ok((got, Some(e))),
        }
    }
    panic!("the reader returned more records than the file can hold");
}

/// A valid queue cut short at `cut_at` bytes, and nothing else (a
/// truncation, an interrupted copy), at `path`: a writer opens it without
/// being asked to discard anything, drops at most the record the cut went
/// through, and every record wholly before the cut survives, followed by
/// the one it appends.
fn cut_short_keeps_every_whole_record(
    path: &Path,
    crc: bool,
    cut_at: usize,
) -> Result<(), TestCaseError> {
    let mut whole = sample(crc)
        .records
        .iter()
        .filter(|(p, b)| p.0 + record_bytes(p.0, b.len(), crc) <= cut_at as u64)
        .map(|(p, b)| (*p, b.clone()))
        .collect::<Records>();
    whole.sort();
    let (before, _) = read_through(path).unwrap();
    prop_assert!(
        before == whole,
        "cut at {}: a reader read {} records, {} expected",
        cut_at,
        before.len(),
        whole.len()
    );
    let mut w = Writer::open(path, options(false))
        .map_err(|e| TestCaseError::fail(format!("cut at {cut_at}: {e}")))?;
    let r = w.recovery().clone();
    prop_assert_eq!(r.crc_failed_at, None);
    prop_assert!(
        r.discarded_records <= 1 && r.discarded_intact == 0,
        "{:?}",
        r
    );
    let p = w.append(b"after recovery").unwrap();
    drop(w);
    whole.push((p, b"after recovery".to_vec()));
    let (got, end) = read_through(path).unwrap();
    prop_assert!(end.is_none(), "cut at {}: {:?}", cut_at, end);
    prop_assert!(
        got == whole,
        "cut at {}: {} records read, {} expected",
        cut_at,
        got.len(),
        whole.len()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_queue_cut_short_anywhere_keeps_every_whole_record(
        crc in any::<bool>(),
        cut in any::<usize>(),
    ) {
        let len = sample(crc).bytes.len();
        let cut_at = 4096 + cut % (len - 4096 + 1);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let path = dir.path().join("q");
        std::fs::write(&path, &sample(crc).bytes[..cut_at]).unwrap();
        cut_short_keeps_every_whole_record(&path, crc, cut_at)?;
    }

    #[test]
    fn damaged_files_give_records_or_typed_errors(
        crc in any::<bool>(),
        damages in prop::collection::vec(damage(), 0..6),
        fix_header_crc in any::<bool>(),
        cut in prop::option::weighted(0.2, any::<usize>()),
    ) {
        let sample = sample(crc);
        let mut bytes = sample.bytes.clone();
        apply(&mut bytes, &damages, fix_header_crc, cut);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let path = dir.path().join("q");
        std::fs::write(&path, &bytes).unwrap();

        // Damage to the header alone, its checksum left as it was, never hides
        // records silently: it is refused, reported, or changes nothing readers see.
        let header_only = !fix_header_crc
            && cut.is_none()
            && damages.iter().all(|d| d.in_header(sample.bytes.len()));
        if header_only {
            let seen = match (read_through(&path), inspect(&path)) {
                (Ok((got, None)), Ok(info)) if info.problem.is_none() => Some((got.len(), info.records)),
                _ => None,
            };
            if let Some((read, counted)) = seen {
                prop_assert_eq!(read, sample.records.len(), "records hidden from a reader");
                prop_assert_eq!(counted, sample.records.len() as u64, "records hidden from inspect");
            }
        }
        match read_through(&path) {
            Ok((got, _end)) => {
                let mut last = None;
                for (position, bytes) in &got {
                    prop_assert!(last < Some(*position), "positions grow");
                    last = Some(*position);
                    if crc {
                        prop_assert_eq!(sample.records.get(position), Some(bytes), "at {}", position);
                    }
                }
                if damages.is_empty() && cut.is_none() {
                    prop_assert_eq!(got.len(), sample.records.len());
                }
            }
            Err(e) => {
                // Refused at open: a typed error that names the file.
                prop_assert!(e.to_string().contains(&*path.to_string_lossy()), "{}", e);
            }
        }
        let _ = inspect(&path);
        let cut_at = cut.map(|c| c % (sample.bytes.len() + 1)).filter(|&c| c >= 4096);
        if let (true, Some(cut_at)) = (damages.is_empty(), cut_at) {
            cut_short_keeps_every_whole_record(&path, crc, cut_at)?;
        } else if let Ok(mut w) = Writer::open(&path, options(false)) {
            // A writer either refuses the file or recovers it into a queue that takes appends.
            let p = w.append(b"after recovery");
            drop(w);
            if let Ok(p) = p {
                let mut r = Reader::open(&path).unwrap();
                r.seek(p).unwrap();
                let rec = r.next().unwrap().unwrap();
                prop_assert_eq!(rec.payload, &b"after recovery"[..]);
            }
        }
    }
}

#[test]
fn a_changed_first_chunk_word_is_refused_not_obeyed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    for value in [1u64, 2, 1 << 40, u64::MAX] {
        let mut bytes = sample(false).bytes.clone();
        bytes[FIRST_CHUNK_AT..FIRST_CHUNK_AT + 8].copy_from_slice(&value.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        for err in [Reader::open(&path).map(|_| ()), inspect(&path).map(|_| ())] {
            match err {
                Err(QueueError::BadHeader { reason, .. }) => {
                    assert!(reason.contains("first-chunk word"), "{reason}")
                }
                other => panic!("{value}: {other:?}"),
            }
        }
        assert!(matches!(
            Writer::open(&path, options(false)),
            Err(QueueError::BadHeader { .. })
        ));
    }
}

#[test]
fn version_1_files_are_read_and_written_without_the_check() {
    // A version 1 file: version 1, the first-chunk word the chunk itself.
    let mut bytes = sample(true).bytes.clone();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..HEADER_CRC_AT]);
    bytes[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    bytes[FIRST_CHUNK_AT..FIRST_CHUNK_AT + 8].copy_from_slice(&0u64.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    std::fs::write(&path, &bytes).unwrap();
    let (got, end) = read_through(&path).unwrap();
    assert!(end.is_none(), "{end:?}");
    assert_eq!(got.len(), sample(true).records.len());
    let info = inspect(&path).unwrap();
    assert_eq!((info.version, info.problem), (1, None));
    // A writer appends, and retention writes the word as version 1 has it.
    let mut w = Writer::open(&path, options(true)).unwrap();
    w.append(b"after").unwrap();
    let kept = w
        .retain(pagewise::queue::Retention {
            max_bytes: Some(1),
            max_age: None,
        })
        .unwrap();
    assert!(kept.first_chunk > 0);
    drop(w);
    let word = std::fs::read(&path).unwrap()[FIRST_CHUNK_AT..FIRST_CHUNK_AT + 8].to_vec();
    assert_eq!(word, kept.first_chunk.to_le_bytes());
    assert_eq!(inspect(&path).unwrap().first_chunk, kept.first_chunk);
}

#[test]
fn foreign_and_short_files_are_refused_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let cases: [(&[u8], &str); 3] = [
        (b"", "too short"),
        (&[0u8; 100], "too short"),
        (&[b'x'; 8192], "not a pagewise queue"),
    ];
    for (bytes, says) in cases {
        std::fs::write(&path, bytes).unwrap();
        let err = Reader::open(&path).unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
        let err = Writer::open(&path, Options::default()).unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    }
    // A valid header with a chunk size that is not a power of two.
    let mut bytes = sample(false).bytes[..8192].to_vec();
    bytes[16..24].copy_from_slice(&(CHUNK + 1).to_le_bytes());
    let crc = crc32fast::hash(&bytes[..HEADER_CRC_AT]);
    bytes[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match Reader::open(&path) {
        Err(QueueError::BadHeader { reason, .. }) => {
            assert!(reason.contains("power of two"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn paths_that_are_not_regular_files_are_not_a_file_with_their_kind() {
    use pagewise::queue::FileKind;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let mkfifo = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(mkfifo.unwrap().success(), "mkfifo {}", fifo.display());
    let cases = [
        (dir.path(), FileKind::Directory, "a directory"),
        (fifo.as_path(), FileKind::Fifo, "a FIFO"),
        (
            Path::new("/dev/null"),
            FileKind::CharDevice,
            "a character device",
        ),
    ];
    for (path, want, says) in cases {
        let errors = [
            Reader::open(path).map(|_| ()).unwrap_err(),
            Writer::open(path, options(false)).map(|_| ()).unwrap_err(),
            Writer::open_or_create(path, options(false))
                .map(|_| ())
                .unwrap_err(),
            inspect(path).map(|_| ()).unwrap_err(),
        ];
        for err in errors {
            match &err {
                QueueError::NotAFile { kind, .. } => assert_eq!(*kind, want, "{err}"),
                other => panic!("{}: {other:?}", path.display()),
            }
            assert_eq!(
                err.to_string(),
                format!(
                    "{}: {says}, not a regular file, so not a queue",
                    path.display()
                )
            );
        }
    }
    assert!(
        !pagewise::queue::lock_path(&fifo).exists(),
        "a refused file left a lock file"
    );
}
