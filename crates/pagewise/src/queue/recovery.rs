//! Crash recovery: what a new writer does before its first append. It finds
//! the end of the committed records (walking from the chunk the header's hint
//! names) and zeroes everything after it, so the bytes of a torn record
//! (payload written, mark not) can never be taken for a record later.
//!
//! With record CRCs, a committed record whose CRC fails ends the queue when
//! a power cut can have torn it: on a disk file, past the end the last
//! flush made durable (the header's flushed-end word), dirty pages reach the
//! disk in any order, so a record can be torn with records after it intact.
//! Where nothing can tear it — on tmpfs (memory: a committed mark always has
//! its whole payload before it), or before the durable end — a bad CRC with
//! intact records after it is damage: recovery refuses
//! ([`QueueError::DamagedRecord`]) rather than drop those records, unless
//! the writer was opened with `Options::discard_damaged`.

use super::error::QueueError;
use super::layout::{self, decode_mark, Geometry, HeaderState, Mark, CHUNK_HEADER_LEN, MARK_LEN};
use super::Position;
use crate::sys::file;
use crate::sys::file_map::ReadMap;
use crate::sys::Errno;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;

/// What a writer found when it opened the queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// Where the next record goes: just past the last committed record.
    pub end: Position,
    /// Whether bytes of an uncommitted (torn) record were found after the
    /// end and discarded.
    pub torn_record_discarded: bool,
    /// A committed record whose CRC failed and that was discarded with
    /// everything after it: on a disk file past the end the last flush made
    /// durable (a power cut can have torn it), or anywhere with
    /// `Options::discard_damaged`.
    pub crc_failed_at: Option<Position>,
    /// Records with a committed mark from the end on that were discarded:
    /// the one whose CRC failed and those after it (0 when only the bytes of
    /// an uncommitted record were).
    pub discarded_records: u64,
    /// Of those, the ones whose own CRC was sound.
    pub discarded_intact: u64,
    /// Records walked to find the end (from the chunk the header's hint names).
    pub records_scanned: u64,
}

/// Finds the end of the committed records and discards what lies after it.
/// Costs a walk over the records of the chunk the header's hint names (about
/// a millisecond per 64 MiB chunk) and a hole punch after the end.
///
/// A record whose CRC fails with intact records after it is
/// [`QueueError::DamagedRecord`] and nothing is changed, unless
/// `discard_damaged`; counting what follows costs a read of those records.
pub(crate) fn recover(
    path: &Path,
    file: &File,
    g: &Geometry,
    state: HeaderState,
    size: u64,
    discard_damaged: bool,
) -> Result<Recovery, QueueError> {
    let (end, scan) = find_end(path, file, g, state, size)?;
    let after = match scan.crc_failed_at {
        Some(at) => records_from(file, g, at.0, size),
        None => After::default(),
    };
    if let Some(at) = scan.crc_failed_at {
        let in_memory = matches!(file::fs_kind(file), Ok(file::FsKind::Tmpfs));
        let tearable = !in_memory && at.0 >= state.flushed_end;
        if after.intact > 0 && !tearable && !discard_damaged {
            return Err(QueueError::DamagedRecord {
                path: path.to_owned(),
                position: at,
                intact_after: after.intact,
            });
        }
    }
    let torn = discard_after(path, file, end.0, size)?;
    Ok(Recovery {
        end,
        torn_record_discarded: torn,
        crc_failed_at: scan.crc_failed_at,
        discarded_records: after.committed,
        discarded_intact: after.intact,
        records_scanned: scan.records,
    })
}

/// Records with a committed mark from a position on.
#[derive(Debug, Default, PartialEq, Eq)]
struct After {
    /// Records whose mark decodes as a record, the first included.
    committed: u64,
    /// Of those, the ones whose CRC matches their bytes.
    intact: u64,
}

/// Walks the records from `from` (the start of a record) as their marks
/// say, across padding into later chunks, to the first position that holds
/// no committed record, and counts them. One `pread` per mark and per
/// record (the walk can reach the end of the file: it runs only when a CRC
/// failed); a mark that does not decode, padding that does not reach the
/// end of its chunk, or a record running past its chunk or the file ends
/// the walk.
fn records_from(file: &File, g: &Geometry, from: u64, size: u64) -> After {
    let mut after = After::default();
    let mut buf = Vec::new();
    let mut pos = from;
    while pos.saturating_add(MARK_LEN) <= size {
        let mut word = [0u8; 8];
        if file.read_exact_at(&mut word, pos).is_err() {
            break;
        }
        let raw = u64::from_le_bytes(word);
        let chunk_end = g.chunk_base(g.chunk_of(pos) + 1).unwrap_or(u64::MAX);
        match decode_mark(raw, pos) {
            Ok(Mark::Data(len)) => {
                let rec = g.record_size(u64::from(len));
                if pos + rec > chunk_end || pos + rec > size {
                    break;
                }
                after.committed += 1;
                if record_intact(file, g, pos, raw, len, &mut buf) == Some(true) {
                    after.intact += 1;
                }
                pos += rec;
                if pos == chunk_end {
                    pos = g.first_record(g.chunk_of(pos)).unwrap_or(u64::MAX);
                }
            }
            Ok(Mark::Pad(rest)) if u64::from(rest) + MARK_LEN == chunk_end - pos => {
                match g.first_record(g.chunk_of(pos) + 1) {
                    Some(next) => pos = next,
                    None => break,
                }
            }
            Ok(Mark::Pad(_)) => break,
            Ok(Mark::Empty) | Err(_) => break,
        }
    }
    after
}

/// Whether the record at `pos` with mark `raw` has a CRC matching its bytes
/// (always, in a queue without record CRCs); `None` when they cannot be
/// read. Reads the payload and the CRC into `buf` with one `pread`.
fn record_intact(
    file: &File,
    g: &Geometry,
    pos: u64,
    raw: u64,
    len: u32,
    buf: &mut Vec<u8>,
) -> Option<bool> {
    if !g.record_crc() {
        return Some(true);
    }
    let len = len as usize;
    buf.resize(len + 4, 0);
    file.read_exact_at(buf, pos + MARK_LEN).ok()?;
    let (payload, stored) = buf.split_at(len);
    let stored: [u8; 4] = stored.try_into().expect("4 bytes");
    Some(layout::record_crc(raw, payload) == u32::from_le_bytes(stored))
}

#[derive(Debug, Default)]
struct Scan {
    records: u64,
    crc_failed_at: Option<Position>,
}

/// Walks the records from the chunk the header's hint names to the first
/// position that holds no committed record.
fn find_end(
    path: &Path,
    file: &File,
    g: &Geometry,
    state: HeaderState,
    size: u64,
) -> Result<(Position, Scan), QueueError> {
    let chunks = layout::chunks_in(g, size);
    let first = state.first_chunk;
    if first > chunks {
        return Err(QueueError::BadHeader {
            path: path.to_owned(),
            reason: format!("first chunk {first} is past the end of the file ({chunks} chunks)"),
        });
    }
    let mut c = state
        .tail_chunk
        .clamp(first, chunks.saturating_sub(1).max(first));
    // The hint is not checksummed: step back while the hinted chunk holds no
    // committed first record, so a damaged hint cannot leave a gap of chunks
    // that readers would never cross.
    while c > first && !first_record_committed(file, g, c, size) {
        c -= 1;
    }
    let mut scan = Scan::default();
    let mut buf = Vec::new();
    loop {
        let base = g
            .chunk_base(c)
            .ok_or_else(|| QueueError::corrupt(path, u64::MAX, "chunk index overflows"))?;
        let mut pos = base + CHUNK_HEADER_LEN;
        if pos + MARK_LEN > size {
            return Ok((Position(pos), scan));
        }
        let map = ReadMap::map(file, base, g.chunk_size as usize)
            .map_err(|e| QueueError::sys(path, format!("map chunk {c}"), e))?;
        let chunk_end = base + g.chunk_size;
        loop {
            if pos == chunk_end {
                break;
            }
            if pos + MARK_LEN > size {
                return Ok((Position(pos), scan));
            }
            let off = (pos - base) as usize;
            let Some(raw) = map.load_u64(off, Ordering::Acquire) else {
                return Err(QueueError::unreadable(path, file, pos, size));
            };
            match decode_mark(raw, pos) {
                Ok(Mark::Empty) => return Ok((Position(pos), scan)),
                Ok(Mark::Pad(rest)) => {
                    if u64::from(rest) != chunk_end - pos - MARK_LEN {
                        return Err(QueueError::corrupt(
                            path,
                            pos,
                            "padding that does not reach the end of the chunk",
                        ));
                    }
                    break;
                }
                Ok(Mark::Data(len)) => {
                    let rec = g.record_size(u64::from(len));
                    if pos + rec > chunk_end || pos + rec > size {
                        return Err(QueueError::corrupt(path, pos, format!("a record of {len} bytes runs past the end of its chunk or the file")));
                    }
                    match record_intact(file, g, pos, raw, len, &mut buf) {
                        None => return Err(QueueError::unreadable(path, file, pos, size)),
                        Some(false) => {
                            scan.crc_failed_at = Some(Position(pos));
                            return Ok((Position(pos), scan));
                        }
                        Some(true) => {}
                    }
                    scan.records += 1;
                    pos += rec;
                }
                Err(reason) => return Err(QueueError::corrupt(path, pos, reason)),
            }
        }
        c += 1;
    }
}

/// Whether chunk `c` starts with a committed record or padding (one `pread`).
fn first_record_committed(file: &File, g: &Geometry, c: u64, size: u64) -> bool {
    let Some(pos) = g.first_record(c) else {
        return false;
    };
    if pos.saturating_add(MARK_LEN) > size {
        return false;
    }
    let mut word = [0u8; 8];
    file.read_exact_at(&mut word, pos).is_ok()
        && matches!(
            decode_mark(u64::from_le_bytes(word), pos),
            Ok(Mark::Data(_) | Mark::Pad(_))
        )
}

/// Zeroes everything from `end` to the end of the file: the bytes of a torn
/// record, and anything a lost write on disk left behind. Returns whether
/// there were non-zero bytes right after `end` (a torn record).
fn discard_after(path: &Path, file: &File, end: u64, size: u64) -> Result<bool, QueueError> {
    if end >= size {
        return Ok(false);
    }
    let page = crate::sys::base_page_size() as u64;
    let mut probe = vec![0u8; (page.min(size - end)) as usize];
    file.read_exact_at(&mut probe, end)
        .map_err(QueueError::io(path, "read after the end"))?;
    let torn = probe.iter().any(|&b| b != 0);
    let page_end = end.next_multiple_of(page).min(size);
    let zeros = vec![0u8; (page_end - end) as usize];
    file.write_all_at(&zeros, end)
        .map_err(QueueError::io(path, "zero a torn record"))?;
    if page_end < size {
        match file::punch_hole(file, page_end, size - page_end) {
            Ok(()) => {}
            Err(e) if e.errno() == Some(Errno::OPNOTSUPP) => {
                // No hole punching: write zeros (bounded by the previous writer's window).
                let block = vec![0u8; 1 << 20];
                let mut at = page_end;
                while at < size {
                    let n = (size - at).min(block.len() as u64) as usize;
                    file.write_all_at(&block[..n], at)
                        .map_err(QueueError::io(path, "zero after the end"))?;
                    at += n as u64;
                }
            }
            Err(e) => return Err(QueueError::sys(path, "discard bytes after the end", e)),
        }
    }
    Ok(torn)
}
