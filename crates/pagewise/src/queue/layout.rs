//! The file format, byte by byte (docs/queue.md has the same tables).
//!
//! ```text
//! file   = header (4096 bytes) , chunk 0 , chunk 1 , …      chunk c at 4096 + c × chunk_size
//! chunk  = chunk header (64 bytes) , records … , [pad]
//! record = mark (u64) , payload (len bytes) , [crc32 (u32)] , zeros to its size
//! ```
//!
//! A record's size is `8 + len + crc` rounded up to a multiple of 8; in a
//! queue with [`FLAG_LINE_FITTING`] (the default for new queues) a record of
//! at most 64 such bytes is padded further, so that it ends on a multiple
//! of its size class, 16, 32 or 64 (see [`record_bytes`]).
//!
//! All integers are little-endian. Positions are file offsets of record marks,
//! so they stay valid across restarts and after retention punches out old
//! chunks (the file keeps its size; dropped chunks become holes).

use super::error::QueueError;
use crate::sys::create;
use crate::sys::file::{self, LockKind};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The first eight bytes of every queue file.
pub const MAGIC: [u8; 8] = *b"PGWQUEUE";
/// The format version this build writes. Version 2 added check bits to the
/// first-chunk word; version 1 files are still read and written (without
/// them).
pub const VERSION: u32 = 2;
/// The oldest format version this build reads and writes.
pub const OLDEST_VERSION: u32 = 1;
/// Bytes before chunk 0.
pub const HEADER_LEN: u64 = 4096;
/// Bytes at the start of each chunk before its first record.
pub const CHUNK_HEADER_LEN: u64 = 64;
/// The mark that starts every record.
pub const MARK_LEN: u64 = 8;
/// Smallest chunk.
pub const MIN_CHUNK: u64 = 64 << 10;
/// Largest chunk.
pub const MAX_CHUNK: u64 = 1 << 30;
/// Default chunk size.
pub const DEFAULT_CHUNK: u64 = 64 << 20;
/// Header flag: every record carries a CRC-32 after its payload.
pub const FLAG_RECORD_CRC: u32 = 1;
/// Header flag: line-fitting records. A record whose size (rounded to 8)
/// is at most 64 bytes is padded to end on a multiple of the next power of
/// two (its class: 8, 16, 32 or 64), so that in a run of records of one
/// class only the first can straddle a cache line. Set for new
/// queues unless `Options::packed_records`; files made before it existed
/// have it clear and stay packed. Builds that do not know it refuse the file.
pub const FLAG_LINE_FITTING: u32 = 2;
/// Flags this build understands.
pub const KNOWN_FLAGS: u32 = FLAG_RECORD_CRC | FLAG_LINE_FITTING;

// Immutable header fields (covered by the header checksum).
pub(crate) const OFF_VERSION: usize = 8;
pub(crate) const OFF_HEADER_LEN: usize = 12;
pub(crate) const OFF_CHUNK_SIZE: usize = 16;
pub(crate) const OFF_FLAGS: usize = 24;
pub(crate) const OFF_CREATED: usize = 32;
pub(crate) const OFF_HEADER_CRC: usize = 56;
/// Bytes covered by the header checksum.
pub(crate) const CHECKED_LEN: usize = 56;
// Mutable header fields, each on its own cache line; written only by the writer.
/// First chunk still in the file (retention moves it forward), u64; from
/// version 2 with check bits (see [`first_chunk_word`]).
pub(crate) const OFF_FIRST_CHUNK: usize = 64;
/// The chunk the writer was last in (a hint for finding the end), u64.
pub(crate) const OFF_TAIL_CHUNK: usize = 128;
/// The wake word, u64 (see `notify`): the futex word readers sleep on (low
/// 32 bits, +1 per commit), an eager flag and a coarse time.
pub(crate) const OFF_WAKE: usize = 192;
/// Process id of the writer that last opened the queue, u32.
pub(crate) const OFF_WRITER_PID: usize = 256;
/// How many times a writer opened the queue, u64.
pub(crate) const OFF_WRITER_OPENS: usize = 264;
/// What prepares the file ahead of the writer that last opened the queue,
/// u32 (see `PreToucher::code`; 0: an earlier pagewise did not say).
pub(crate) const OFF_WRITER_PRETOUCH: usize = 272;
/// How many times that writer switched its pre-toucher (`PreTouchMode::Auto`
/// following the writer's pattern), u32; 0 from an earlier pagewise.
pub(crate) const OFF_WRITER_PRETOUCH_SWITCHES: usize = 276;
/// When that writer's current pre-toucher started (its open, or its last
/// switch), ns since the Unix epoch, u64; 0 from an earlier pagewise.
pub(crate) const OFF_WRITER_PRETOUCH_SINCE: usize = 280;
/// The usable CPUs `PreTouchMode::Auto` found when that writer opened, u32;
/// 0 when the mode was asked for, unknown, or from an earlier pagewise.
pub(crate) const OFF_WRITER_USABLE_CPUS: usize = 288;
/// The end of the records the last `Writer::flush` made durable (the queue
/// position it flushed up to), u64, stored after the records' `msync` and
/// flushed with the header; 0 when no flush recorded it (an earlier
/// pagewise). Records before it cannot have been torn by a power cut.
pub(crate) const OFF_FLUSHED_END: usize = 320;

/// The writer lock: an exclusive open-file-description lock on this byte
/// range (the first byte of the file), held by the one writer. The kernel
/// drops it when the writer's process dies.
pub(crate) const LOCK_START: u64 = 0;
/// Length of the writer lock's byte range.
pub(crate) const LOCK_LEN: u64 = 1;

/// Chunk header: magic.
pub const CHUNK_MAGIC: [u8; 8] = *b"PGWCHUNK";
pub(crate) const CHUNK_OFF_INDEX: usize = 8;
pub(crate) const CHUNK_OFF_CREATED: usize = 16;

/// Mark bit 63: the record is committed.
pub(crate) const MARK_COMMITTED: u64 = 1 << 63;
const KIND_SHIFT: u32 = 60;
const KIND_MASK: u64 = 0x7;
const KIND_DATA: u64 = 0;
const KIND_PAD: u64 = 1;
const TAG_SHIFT: u32 = 32;
const TAG_MASK: u64 = 0x0FFF_FFFF;
const LEN_MASK: u64 = 0xFFFF_FFFF;

/// The fixed parameters of a queue, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Format version ([`OLDEST_VERSION`] to [`VERSION`]).
    pub version: u32,
    /// Bytes per chunk (a power of two, 64 KiB to 1 GiB).
    pub chunk_size: u64,
    /// Header flags ([`FLAG_RECORD_CRC`], [`FLAG_LINE_FITTING`]).
    pub flags: u32,
    /// When the queue was created, ns since the Unix epoch.
    pub created_unix_ns: u64,
}

impl Geometry {
    /// The geometry of a new queue of this version with `chunk_size` bytes
    /// per chunk, with `record_crc` a CRC-32 on every record, with
    /// `line_fitting` small records padded to fit cache lines
    /// ([`FLAG_LINE_FITTING`]), created at `created_unix_ns`. Free.
    pub fn new_queue(
        chunk_size: u64,
        record_crc: bool,
        line_fitting: bool,
        created_unix_ns: u64,
    ) -> Geometry {
        let crc = if record_crc { FLAG_RECORD_CRC } else { 0 };
        let fitting = if line_fitting { FLAG_LINE_FITTING } else { 0 };
        Geometry {
            version: VERSION,
            chunk_size,
            flags: crc | fitting,
            created_unix_ns,
        }
    }

    /// Whether small records are padded to fit cache lines
    /// ([`FLAG_LINE_FITTING`]); `false`: packed to multiples of 8.
    #[inline]
    pub fn line_fitting(&self) -> bool {
        self.flags & FLAG_LINE_FITTING != 0
    }

    /// Whether records carry a CRC-32.
    #[inline]
    pub fn record_crc(&self) -> bool {
        self.flags & FLAG_RECORD_CRC != 0
    }

    /// File offset of chunk `c`; `None` on overflow.
    pub fn chunk_base(&self, c: u64) -> Option<u64> {
        c.checked_mul(self.chunk_size)?.checked_add(HEADER_LEN)
    }

    /// The chunk holding file offset `pos` (which must be at least [`HEADER_LEN`]).
    pub fn chunk_of(&self, pos: u64) -> u64 {
        (pos.saturating_sub(HEADER_LEN)) / self.chunk_size
    }

    /// Position of the first record of chunk `c`.
    pub fn first_record(&self, c: u64) -> Option<u64> {
        self.chunk_base(c)?.checked_add(CHUNK_HEADER_LEN)
    }

    /// Bytes after the payload: 4 with record CRCs, else 0.
    #[inline]
    pub fn trailer_len(&self) -> u64 {
        if self.record_crc() {
            4
        } else {
            0
        }
    }

    /// The largest payload one record can carry.
    #[inline]
    pub fn max_payload(&self) -> usize {
        let room = self.chunk_size - CHUNK_HEADER_LEN - MARK_LEN - self.trailer_len();
        room.min(LEN_MASK) as usize
    }

    /// Bytes the record at position `pos` with `len` payload bytes takes,
    /// mark and padding included: the next record starts at `pos` plus
    /// this. Free.
    #[inline]
    pub fn record_size(&self, pos: u64, len: u64) -> u64 {
        record_bytes(pos, len, self.trailer_len(), self.line_fitting())
    }

    /// Validates a geometry for a new queue.
    pub fn check_new(chunk_size: u64) -> Result<(), String> {
        if !chunk_size.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk_size) {
            return Err(format!(
                "chunk size {chunk_size} must be a power of two from {MIN_CHUNK} (64 KiB) to {MAX_CHUNK} (1 GiB)"
            ));
        }
        Ok(())
    }
}

/// Bytes the record at position `pos` (a multiple of 8) with `len` payload
/// bytes and a `trailer` (0, or 4 for a CRC) takes: mark, payload and
/// trailer rounded up to a multiple of 8 (`packed`) and, with
/// `line_fitting` and `packed` at most 64, padded on to the next multiple
/// of its class, `packed` rounded up to a power of two (8, 16, 32 or 64):
/// so a run of records of one class, after the first, starts each on a
/// multiple of the class and none straddles a cache line. Why: the round
/// trip of small records is bounded by the cache lines that move between
/// the writer's and the reader's cores, and a 40-byte record (a 32-byte
/// payload) packed at multiples of 8 lies across two lines half the time.
/// Larger records stay packed: measured, padding them to 32 or 64 bytes
/// made 128-byte payloads slower (docs/queue.md, "Line-fitting records").
/// Never crosses a chunk's end that `pos + packed` does not (chunks end on
/// 64-byte multiples). Free.
#[inline]
pub fn record_bytes(pos: u64, len: u64, trailer: u64, line_fitting: bool) -> u64 {
    let packed = (MARK_LEN + len + trailer + 7) & !7;
    if line_fitting && packed <= 64 {
        let class = packed.next_power_of_two();
        ((pos + packed + class - 1) & !(class - 1)) - pos
    } else {
        packed
    }
}

/// Bits of the first-chunk word that hold the chunk; the 24 above hold the check.
const FIRST_CHUNK_BITS: u32 = 40;

/// The 24 check bits of the first-chunk word for chunk `c`: the top bits of
/// the CRC-32 of its 8 little-endian bytes.
fn first_chunk_check(c: u64) -> u64 {
    u64::from(crc32fast::hash(&c.to_le_bytes()) >> 8)
}

/// The first-chunk word for chunk `c` in a file of format `version`: from
/// version 2 the chunk (bits 0–39) and check bits (40–63), so that a changed
/// word is found out instead of silently hiding records; in version 1 the
/// chunk alone.
pub(crate) fn first_chunk_word(version: u32, c: u64) -> u64 {
    if version >= 2 {
        (c & ((1 << FIRST_CHUNK_BITS) - 1)) | (first_chunk_check(c) << FIRST_CHUNK_BITS)
    } else {
        c
    }
}

/// The chunk a first-chunk word names; `Err` says why the word is damaged.
pub(crate) fn decode_first_chunk(version: u32, raw: u64) -> Result<u64, String> {
    if version < 2 {
        return Ok(raw);
    }
    let c = raw & ((1 << FIRST_CHUNK_BITS) - 1);
    if raw >> FIRST_CHUNK_BITS != first_chunk_check(c) {
        return Err(format!(
            "the first-chunk word {raw:#018x} fails its check: the header is damaged (it would hide or invent records)"
        ));
    }
    Ok(c)
}

/// What a mark word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Zero: nothing committed here yet.
    Empty,
    /// A committed record with this many payload bytes.
    Data(u32),
    /// Committed padding: the rest of the chunk (this many bytes after the mark) is unused.
    Pad(u32),
}

/// The 28-bit tag that ties a mark to its position, so stray bytes are not
/// taken for a record.
#[inline]
fn tag(pos: u64) -> u64 {
    (pos >> 3) & TAG_MASK
}

/// The mark of a committed data record at `pos`.
#[inline]
pub(crate) fn data_mark(pos: u64, len: u32) -> u64 {
    MARK_COMMITTED | (KIND_DATA << KIND_SHIFT) | (tag(pos) << TAG_SHIFT) | u64::from(len)
}

/// The mark of committed padding at `pos` covering `rest` bytes after the mark.
pub(crate) fn pad_mark(pos: u64, rest: u32) -> u64 {
    MARK_COMMITTED | (KIND_PAD << KIND_SHIFT) | (tag(pos) << TAG_SHIFT) | u64::from(rest)
}

/// Decodes the mark word found at `pos`; `Err` says why it is not a valid mark.
#[inline]
pub fn decode_mark(raw: u64, pos: u64) -> Result<Mark, String> {
    if raw == 0 {
        return Ok(Mark::Empty);
    }
    if raw & MARK_COMMITTED == 0 {
        return Err(format!("mark {raw:#018x} has no commit bit"));
    }
    if (raw >> TAG_SHIFT) & TAG_MASK != tag(pos) {
        return Err(format!("mark {raw:#018x} belongs to another position"));
    }
    let len = (raw & LEN_MASK) as u32;
    match (raw >> KIND_SHIFT) & KIND_MASK {
        KIND_DATA => Ok(Mark::Data(len)),
        KIND_PAD => Ok(Mark::Pad(len)),
        kind => Err(format!("mark {raw:#018x} has unknown kind {kind}")),
    }
}

/// Why a data mark at some position is not a record: its length (`len`
/// payload bytes) runs past the end of its chunk, which no writer makes. The
/// one wording for readers, `inspect` and recovery.
pub(crate) fn past_its_chunk(len: u32) -> String {
    format!("a record of {len} bytes runs past the end of its chunk")
}

/// Why a data mark at some position is not a whole record: its length
/// (`len` payload bytes) runs past the end of the file (`size` bytes), though
/// not past its chunk. A writer never commits a mark before its record's
/// bytes are allocated, so the file was cut short inside it (a truncation,
/// an interrupted copy) or the length is damaged. The one wording for
/// readers, `inspect` and recovery; it says what a writer does with it.
pub(crate) fn past_the_file(len: u32, size: u64) -> String {
    format!(
        "a record of {len} bytes runs past the end of the file ({size} bytes): the file was cut short inside it (a truncation, or an interrupted copy), or its length is damaged; a writer opening the queue drops it (pagewise queue append)"
    )
}

/// The file offset of the first 8-byte word of `bytes` (read from file
/// offset `start`, a multiple of 8) that is a committed data or padding mark
/// for its own offset, if any; a last word shorter than 8 bytes is none. A
/// mark carries 28 bits of its own position and a commit bit, so other bytes
/// pass for one about once in 2^31 words. Costs a pass over `bytes`.
pub(crate) fn first_mark_in(start: u64, bytes: &[u8]) -> Option<u64> {
    bytes.chunks_exact(8).enumerate().find_map(|(i, word)| {
        let at = start + 8 * i as u64;
        let raw = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        matches!(decode_mark(raw, at), Ok(Mark::Data(_) | Mark::Pad(_))).then_some(at)
    })
}

/// The CRC-32 stored after a payload: over the mark's bytes, then the payload.
pub fn record_crc(mark: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&mark.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Builds the header page of a new queue.
pub(crate) fn encode_header(g: &Geometry) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&g.version.to_le_bytes());
    h[OFF_HEADER_LEN..OFF_HEADER_LEN + 4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[OFF_CHUNK_SIZE..OFF_CHUNK_SIZE + 8].copy_from_slice(&g.chunk_size.to_le_bytes());
    h[OFF_FLAGS..OFF_FLAGS + 4].copy_from_slice(&g.flags.to_le_bytes());
    h[OFF_CREATED..OFF_CREATED + 8].copy_from_slice(&g.created_unix_ns.to_le_bytes());
    let crc = crc32fast::hash(&h[..CHECKED_LEN]);
    h[OFF_HEADER_CRC..OFF_HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    h[OFF_FIRST_CHUNK..OFF_FIRST_CHUNK + 8]
        .copy_from_slice(&first_chunk_word(g.version, 0).to_le_bytes());
    h
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The header's mutable fields as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderState {
    /// First chunk still in the file.
    pub first_chunk: u64,
    /// Chunk the writer was last in (hint).
    pub tail_chunk: u64,
    /// Pid of the writer that last opened the queue.
    pub writer_pid: u32,
    /// Writer opens so far.
    pub writer_opens: u64,
    /// The last writer's pre-touch mode code (0: not recorded).
    pub writer_pretouch: u32,
    /// Its pre-toucher switches so far (0 also from an earlier pagewise).
    pub writer_pretouch_switches: u32,
    /// When its current pre-toucher started, ns since the Unix epoch (0: not recorded).
    pub writer_pretouch_since_unix_ns: u64,
    /// The usable CPUs its `PreTouchMode::Auto` found (0: not recorded).
    pub writer_usable_cpus: u32,
    /// The end of the records last flushed to disk (0: not recorded).
    pub flushed_end: u64,
}

/// Validates the header page (at least [`HEADER_LEN`] bytes) and returns the geometry.
pub fn decode_header(path: &Path, h: &[u8]) -> Result<(Geometry, HeaderState), QueueError> {
    let bad = |reason: String| QueueError::BadHeader {
        path: path.to_owned(),
        reason,
    };
    if (h.len() as u64) < HEADER_LEN {
        return Err(QueueError::TooShort {
            path: path.to_owned(),
            size: h.len() as u64,
            needed: HEADER_LEN,
        });
    }
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&h[..8]);
    if magic != MAGIC {
        return Err(QueueError::NotAQueue {
            path: path.to_owned(),
            found: magic,
        });
    }
    let version = u32_at(h, OFF_VERSION);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(QueueError::UnsupportedVersion {
            path: path.to_owned(),
            found: version,
            supported: VERSION,
        });
    }
    let stored = u32_at(h, OFF_HEADER_CRC);
    let computed = crc32fast::hash(&h[..CHECKED_LEN]);
    if stored != computed {
        return Err(QueueError::HeaderChecksum {
            path: path.to_owned(),
            stored,
            computed,
        });
    }
    let header_len = u32_at(h, OFF_HEADER_LEN);
    if u64::from(header_len) != HEADER_LEN {
        return Err(bad(format!(
            "header length {header_len}, expected {HEADER_LEN}"
        )));
    }
    let chunk_size = u64_at(h, OFF_CHUNK_SIZE);
    Geometry::check_new(chunk_size).map_err(bad)?;
    let flags = u32_at(h, OFF_FLAGS);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(bad(format!(
            "unknown flags {:#x}: written by a newer pagewise",
            flags & !KNOWN_FLAGS
        )));
    }
    let g = Geometry {
        version,
        chunk_size,
        flags,
        created_unix_ns: u64_at(h, OFF_CREATED),
    };
    let state = HeaderState {
        first_chunk: decode_first_chunk(version, u64_at(h, OFF_FIRST_CHUNK)).map_err(bad)?,
        tail_chunk: u64_at(h, OFF_TAIL_CHUNK),
        writer_pid: u32_at(h, OFF_WRITER_PID),
        writer_opens: u64_at(h, OFF_WRITER_OPENS),
        writer_pretouch: u32_at(h, OFF_WRITER_PRETOUCH),
        writer_pretouch_switches: u32_at(h, OFF_WRITER_PRETOUCH_SWITCHES),
        writer_pretouch_since_unix_ns: u64_at(h, OFF_WRITER_PRETOUCH_SINCE),
        writer_usable_cpus: u32_at(h, OFF_WRITER_USABLE_CPUS),
        flushed_end: u64_at(h, OFF_FLUSHED_END),
    };
    Ok((g, state))
}

/// Opens `path` for a reader: read-only, never blocking (a FIFO opens and is
/// refused), and only a regular file. One `open` and one `fstat`.
pub(crate) fn open_for_reading(path: &Path) -> Result<File, QueueError> {
    Ok(checked_open(path, create::open_for_reading(path))?.0)
}

/// Finishes opening `path` as a queue: an open error becomes a
/// [`QueueError`] (naming what the path is if it is not a regular file), and
/// anything but a regular file is refused. Returns the file and its metadata.
pub(crate) fn checked_open(
    path: &Path,
    opened: crate::sys::SysResult<File>,
) -> Result<(File, std::fs::Metadata), QueueError> {
    let file = opened.map_err(|e| match std::fs::metadata(path) {
        Ok(m) if !m.file_type().is_file() => not_a_file(path, &m),
        _ => QueueError::Io {
            path: path.to_owned(),
            what: "open the queue",
            error: e.source,
        },
    })?;
    let meta = file
        .metadata()
        .map_err(QueueError::io(path, "stat the queue"))?;
    if !meta.file_type().is_file() {
        return Err(not_a_file(path, &meta));
    }
    Ok((file, meta))
}

/// The error for a path that names something other than a regular file.
pub(crate) fn not_a_file(path: &Path, meta: &std::fs::Metadata) -> QueueError {
    QueueError::NotAFile {
        path: path.to_owned(),
        kind: create::FileKind::of(meta),
    }
}

/// Reads and validates the header with `pread` (safe against a short file);
/// returns the geometry, the mutable fields and the file size. Costs an
/// `fstat` and a 4 KiB `pread`.
pub(crate) fn read_header(
    path: &Path,
    file: &File,
) -> Result<(Geometry, HeaderState, u64), QueueError> {
    let size = file
        .metadata()
        .map_err(QueueError::io(path, "stat the queue"))?
        .len();
    if size < HEADER_LEN {
        return Err(QueueError::TooShort {
            path: path.to_owned(),
            size,
            needed: HEADER_LEN,
        });
    }
    let mut h = vec![0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut h, 0)
        .map_err(QueueError::io(path, "read the header"))?;
    let (g, state) = decode_header(path, &h)?;
    Ok((g, state, size))
}

/// Who holds the writer lock's byte now: a writer (`Exclusive`), some other
/// process with a read lock (`Shared`), which keeps writers out, or nobody.
/// One `fcntl` call; works on a read-only descriptor.
pub(crate) fn lock_holder(file: &File) -> Result<Option<LockKind>, crate::sys::SysError> {
    file::conflicting_lock(file, LOCK_START, LOCK_LEN, LockKind::Exclusive)
}

/// The chunks a file of `size` bytes holds at least partly.
pub fn chunks_in(g: &Geometry, size: u64) -> u64 {
    size.saturating_sub(HEADER_LEN).div_ceil(g.chunk_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first record's position in chunk 0 (a multiple of 64).
    const P: u64 = HEADER_LEN + CHUNK_HEADER_LEN;

    /// A packed geometry (as every file from before line-fitting records).
    fn geometry(crc: bool) -> Geometry {
        Geometry::new_queue(MIN_CHUNK, crc, false, 7)
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let g = geometry(true);
        let h = encode_header(&g);
        let p = Path::new("q");
        assert_eq!(decode_header(p, &h).unwrap().0, g);
        let mut bad = h.clone();
        bad[OFF_CHUNK_SIZE] ^= 1;
        assert!(matches!(
            decode_header(p, &bad),
            Err(QueueError::HeaderChecksum { .. })
        ));
        let mut bad = h.clone();
        bad[0] = b'X';
        assert!(matches!(
            decode_header(p, &bad),
            Err(QueueError::NotAQueue { .. })
        ));
        let mut bad = h.clone();
        bad[OFF_VERSION] = 3;
        assert!(matches!(
            decode_header(p, &bad),
            Err(QueueError::UnsupportedVersion { found: 3, .. })
        ));
        assert!(matches!(
            decode_header(p, &h[..100]),
            Err(QueueError::TooShort { .. })
        ));
        // The first-chunk word carries its own check: a changed word is damage.
        let mut bad = h.clone();
        bad[OFF_FIRST_CHUNK] = 1;
        assert!(matches!(
            decode_header(p, &bad),
            Err(QueueError::BadHeader { reason, .. }) if reason.contains("first-chunk word")
        ));
        let mut ok = h.clone();
        ok[OFF_FIRST_CHUNK..OFF_FIRST_CHUNK + 8]
            .copy_from_slice(&first_chunk_word(VERSION, 3).to_le_bytes());
        assert_eq!(decode_header(p, &ok).unwrap().1.first_chunk, 3);
        // Version 1 has no check bits: the word is the chunk.
        let v1 = encode_header(&Geometry { version: 1, ..g });
        let mut v1_3 = v1.clone();
        v1_3[OFF_FIRST_CHUNK] = 3;
        assert_eq!(decode_header(p, &v1_3).unwrap().1.first_chunk, 3);
        assert_eq!(decode_header(p, &v1).unwrap().0.version, 1);
    }

    #[test]
    fn first_chunk_words_round_trip_and_catch_changes() {
        for c in [0u64, 1, 2, 1000, (1 << 40) - 1] {
            let w = first_chunk_word(VERSION, c);
            assert_eq!(decode_first_chunk(VERSION, w), Ok(c));
            for bit in 0..64 {
                assert!(
                    decode_first_chunk(VERSION, w ^ (1 << bit)).is_err(),
                    "{c} bit {bit}"
                );
            }
        }
        assert_eq!(first_chunk_word(1, 5), 5);
        assert_eq!(decode_first_chunk(1, 5), Ok(5));
    }

    #[test]
    fn marks_round_trip_and_reject_strays() {
        let pos = HEADER_LEN + CHUNK_HEADER_LEN + 8 * 1000;
        assert_eq!(decode_mark(data_mark(pos, 0), pos), Ok(Mark::Data(0)));
        assert_eq!(
            decode_mark(data_mark(pos, u32::MAX), pos),
            Ok(Mark::Data(u32::MAX))
        );
        assert_eq!(decode_mark(pad_mark(pos, 16), pos), Ok(Mark::Pad(16)));
        assert_eq!(decode_mark(0, pos), Ok(Mark::Empty));
        assert!(decode_mark(data_mark(pos, 5), pos + 8).is_err());
        assert!(decode_mark(data_mark(pos, 5) & !MARK_COMMITTED, pos).is_err());
        assert!(decode_mark(data_mark(pos, 5) | (5 << KIND_SHIFT), pos).is_err());
    }

    #[test]
    fn sizes_are_multiples_of_eight() {
        let g = geometry(false);
        assert_eq!(g.record_size(P, 0), 8);
        assert_eq!(g.record_size(P, 1), 16);
        assert_eq!(g.record_size(P, 128), 136);
        let g = geometry(true);
        assert_eq!(g.record_size(P, 0), 16);
        assert_eq!(g.record_size(P, 4), 16);
        assert_eq!(g.record_size(P, 128), 144);
        assert_eq!(g.max_payload() as u64, MIN_CHUNK - 64 - 8 - 4);
        assert_eq!(g.record_size(P, g.max_payload() as u64), MIN_CHUNK - 64);
    }

    #[test]
    fn line_fitting_pads_small_records_to_their_class_and_round_trips() {
        for crc in [false, true] {
            let g = Geometry::new_queue(MIN_CHUNK, crc, true, 7);
            assert!(g.line_fitting());
            assert_eq!(g.record_crc(), crc);
            assert_eq!(
                decode_header(Path::new("q"), &encode_header(&g)).unwrap().0,
                g
            );
            let packed = Geometry::new_queue(MIN_CHUNK, crc, false, 7);
            for len in 0..200u64 {
                for pos in (P..P + 128).step_by(8) {
                    let (fit, pack) = (g.record_size(pos, len), packed.record_size(pos, len));
                    assert_eq!(pack % 8, 0);
                    assert!(fit >= pack, "{len} at {pos}");
                    if pack <= 64 {
                        let class = pack.next_power_of_two();
                        assert_eq!((pos + fit) % class, 0, "{len} at {pos}: ends on its class");
                        assert!(fit < pack + class, "{len} at {pos}: no more than needed");
                        if pos % class == 0 {
                            assert_eq!(fit, class, "{len} at {pos}: aligned, one class");
                            assert_eq!(pos / 64, (pos + fit - 1) / 64, "within a line");
                        }
                    } else {
                        assert_eq!(fit, pack, "{len}: large records stay packed");
                    }
                }
            }
            assert_eq!(g.record_size(P, g.max_payload() as u64), MIN_CHUNK - 64);
        }
        let g = Geometry::new_queue(MIN_CHUNK, false, true, 7);
        let sizes: Vec<u64> = [0, 8, 16, 24, 32, 56, 57, 128]
            .map(|l| g.record_size(P, l))
            .into();
        assert_eq!(sizes, [8, 16, 32, 32, 64, 64, 72, 136]);
        // Off a class boundary, a small record pads to the next one.
        assert_eq!(g.record_size(P + 8, 32), 56);
        assert_eq!(g.record_size(P + 48, 8), 16);
        assert_eq!(g.record_size(P + 8, 128), 136);
        // A small record that ends the chunk's space stays inside it.
        let last = P + MIN_CHUNK - CHUNK_HEADER_LEN - 40;
        assert_eq!(
            last + g.record_size(last, 32),
            P + MIN_CHUNK - CHUNK_HEADER_LEN
        );
        // Files from before the flag read as packed.
        assert!(!geometry(false).line_fitting());
        assert_eq!(KNOWN_FLAGS & !(FLAG_RECORD_CRC | FLAG_LINE_FITTING), 0);
    }
}
