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
//!
//! A committed record that runs past the end of the file (not past its
//! chunk) is what a file cut short leaves: a truncation, an interrupted
//! copy. No writer commits a mark before its record's bytes are allocated,
//! so no crash of the writer leaves one, and nothing whole can follow it:
//! it is dropped like a torn record ([`Recovery::cut_record_at`]). Unless
//! the marks of whole records lie inside its bytes: then its length was
//! damaged, and dropping it would drop them too, so recovery refuses
//! ([`QueueError::DamagedLength`]) unless `Options::discard_damaged`.

use super::error::QueueError;
use super::layout::{self, decode_mark, Geometry, HeaderState, Mark, MARK_LEN};
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
    /// A committed record that runs past the end of the file, where the
    /// file was cut short (a truncation, an interrupted copy): discarded,
    /// with whatever lay inside its bytes (the queue now ends at its
    /// position, [`Recovery::end`]).
    pub cut_record_at: Option<Position>,
    /// A committed record whose CRC failed and that was discarded with
    /// everything after it: on a disk file past the end the last flush made
    /// durable (a power cut can have torn it), or anywhere with
    /// `Options::discard_damaged`.
    pub crc_failed_at: Option<Position>,
    /// The first committed mark found after the end (the next mark being 0)
    /// where no crash can have left a gap, discarded with everything after
    /// it (only with `Options::discard_damaged`; else
    /// [`QueueError::RecordsAfterEnd`]): a length before it was damaged.
    pub records_after_end_at: Option<Position>,
    /// Records with a committed mark from the end on that were discarded:
    /// the one whose CRC failed and those after it, the one the file was
    /// cut short inside and those whose marks lay inside it, or those after
    /// the end (the last two only with `Options::discard_damaged`); 0 when
    /// only the bytes of an uncommitted record were.
    pub discarded_records: u64,
    /// Of those, the ones whose own CRC was sound (without record CRCs, the
    /// whole ones); a record the file was cut short inside is never one.
    pub discarded_intact: u64,
    /// Records walked to find the end (from the chunk the header's hint names).
    pub records_scanned: u64,
}

/// Finds the end of the committed records and discards what lies after it.
/// Costs a walk over the records of the chunk the header's hint names (about
/// a millisecond per 64 MiB chunk) and a hole punch after the end.
///
/// A record whose CRC fails with intact records after it is
/// [`QueueError::DamagedRecord`], and a record running past the end of the
/// file with whole records inside it [`QueueError::DamagedLength`], and
/// nothing is changed, unless `discard_damaged`; counting what follows costs
/// a read of those records (for a record past the end, of its bytes that
/// the file holds).
pub(crate) fn recover(
    path: &Path,
    file: &File,
    g: &Geometry,
    state: HeaderState,
    size: u64,
    discard_damaged: bool,
) -> Result<Recovery, QueueError> {
    let (end, scan) = find_end(path, file, g, state, size)?;
    let after = match (scan.crc_failed_at, scan.cut) {
        (Some(at), _) => records_from(file, g, at.0, size),
        (None, Some(cut)) => {
            let inside = inside_cut(path, file, g, cut, size)?;
            if inside.after.intact > 0 && !discard_damaged {
                return Err(QueueError::DamagedLength {
                    path: path.to_owned(),
                    position: end,
                    len: cut.len,
                    hidden_at: Position(inside.hidden_at),
                    intact_after: inside.after.intact,
                });
            }
            After {
                committed: 1 + inside.after.committed,
                intact: inside.after.intact,
            }
        }
        (None, None) => After::default(),
    };
    // Whether a power cut can have torn the file at `pos`: on a disk file,
    // past the end the last flush made durable.
    let in_memory = matches!(file::fs_kind(file), Ok(file::FsKind::Tmpfs));
    let tearable = |pos: u64| !in_memory && pos >= state.flushed_end;
    if let Some(at) = scan.crc_failed_at {
        if after.intact > 0 && !tearable(at.0) && !discard_damaged {
            return Err(QueueError::DamagedRecord {
                path: path.to_owned(),
                position: at,
                intact_after: after.intact,
            });
        }
    }
    // The page after the end, read once: a committed mark in it is a gap
    // inside the records; non-zero bytes in it, a torn record.
    let probe = page_after(path, file, end.0, size)?;
    let mut after = after;
    let mut records_after_end_at = None;
    if scan.crc_failed_at.is_none() && scan.cut.is_none() && !tearable(end.0) {
        if let Some(found) = layout::first_mark_in(end.0, &probe) {
            let beyond = records_from(file, g, found, size);
            if beyond.intact > 0 {
                if !discard_damaged {
                    return Err(QueueError::RecordsAfterEnd {
                        path: path.to_owned(),
                        end,
                        found_at: Position(found),
                        intact_after: beyond.intact,
                    });
                }
                records_after_end_at = Some(Position(found));
                after = beyond;
            }
        }
    }
    let torn = probe.iter().any(|&b| b != 0);
    discard_after(path, file, end.0, size)?;
    Ok(Recovery {
        end,
        // After a cut record the bytes there are its own, committed.
        torn_record_discarded: torn && scan.cut.is_none() && records_after_end_at.is_none(),
        records_after_end_at,
        cut_record_at: scan.cut.map(|_| end),
        crc_failed_at: scan.crc_failed_at,
        discarded_records: after.committed,
        discarded_intact: after.intact,
        records_scanned: scan.records,
    })
}

/// What lies inside the bytes the file holds of a record it was cut short
/// inside: the first mark there, and the records from it on.
struct Inside {
    /// The first mark inside the record (its end when there is none).
    hidden_at: u64,
    /// The records from that mark on (none when there is no mark).
    after: After,
}

/// Looks for a mark inside the bytes of the record `cut` that the file
/// holds (`pread`s of up to 64 KiB, then [`records_from`] the first mark
/// found): with none, or none that starts a whole record, the file was cut
/// short inside the record; with whole records there, its length was
/// damaged.
fn inside_cut(
    path: &Path,
    file: &File,
    g: &Geometry,
    cut: Cut,
    size: u64,
) -> Result<Inside, QueueError> {
    const BLOCK: u64 = 64 << 10;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut at = cut.pos + MARK_LEN;
    while at + MARK_LEN <= size {
        let n = (size - at).min(BLOCK) / MARK_LEN * MARK_LEN;
        let block = &mut buf[..n as usize];
        file.read_exact_at(block, at)
            .map_err(QueueError::io(path, "read a record cut short"))?;
        if let Some(hidden_at) = layout::first_mark_in(at, block) {
            return Ok(Inside {
                hidden_at,
                after: records_from(file, g, hidden_at, size),
            });
        }
        at += n;
    }
    Ok(Inside {
        hidden_at: size,
        after: After::default(),
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
/// failed or the file ends inside a record); a mark that does not decode or
/// cannot be read, padding that does not reach the end of its chunk, or a
/// record running past its chunk ends the walk, and a record running past
/// the file ends it counted (not intact).
fn records_from(file: &File, g: &Geometry, from: u64, size: u64) -> After {
    let mut after = After::default();
    let mut buf = Vec::new();
    let read_mark = |pos| {
        let mut word = [0u8; 8];
        file.read_exact_at(&mut word, pos)
            .map(|()| u64::from_le_bytes(word))
    };
    for rec in Walk::new(g, size, from, read_mark) {
        match rec {
            Ok(rec) => {
                after.committed += 1;
                if record_intact(file, g, rec.pos, rec.raw, rec.len, &mut buf) == Some(true) {
                    after.intact += 1;
                }
            }
            // A record the file ends inside: committed, never intact.
            Err(Stop::Cut(_)) => {
                after.committed += 1;
                break;
            }
            Err(Stop::Load(_) | Stop::Corrupt { .. }) => break,
        }
    }
    after
}

/// A committed record a [`Walk`] found.
struct Record {
    /// Its position (the offset of its mark).
    pos: u64,
    /// Its mark word.
    raw: u64,
    /// Its payload length.
    len: u32,
}

/// A committed record that runs past the end of the file (not past its
/// chunk): the file was cut short inside it, or its length is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    /// Its position.
    pos: u64,
    /// Its payload length, as its mark says.
    len: u32,
}

/// Why a [`Walk`] stopped before the end of the records.
enum Stop<E> {
    /// The mark word could not be loaded (the loader's error).
    Load(E),
    /// The word at `position` is not a mark the walk can step over.
    Corrupt { position: u64, reason: String },
    /// The record there runs past the end of the file.
    Cut(Cut),
}

/// The one walk over the records of a queue file: from the position of a
/// record, it yields each committed record as its mark says, checks that
/// padding reaches the end of its chunk and that a record fits in its chunk
/// and the file, and steps over chunk ends to the next chunk's first record.
/// It ends (`None`, with `pos` the end) at a zero mark or where the
/// file has no room for a mark, and yields [`Stop`] at a mark it cannot
/// step over or a record the file ends inside (a caller that goes on gets
/// the same again). Costs one `load` per record and per padding; the
/// payloads are not read.
struct Walk<'g, L> {
    g: &'g Geometry,
    size: u64,
    /// Gives the mark word at a position (8-aligned, with 8 bytes of the file there).
    load: L,
    /// Where the next mark is; at the end, the end.
    pos: u64,
    /// The end of the chunk the walk is in.
    chunk_end: u64,
}

impl<'g, L> Walk<'g, L> {
    fn new(g: &'g Geometry, size: u64, from: u64, load: L) -> Self {
        Walk {
            g,
            size,
            load,
            pos: from,
            chunk_end: g.chunk_base(g.chunk_of(from) + 1).unwrap_or(u64::MAX),
        }
    }
}

impl<E, L: FnMut(u64) -> Result<u64, E>> Iterator for Walk<'_, L> {
    type Item = Result<Record, Stop<E>>;

    fn next(&mut self) -> Option<Self::Item> {
        let corrupt = |position, reason: String| Some(Err(Stop::Corrupt { position, reason }));
        loop {
            // At a chunk's end the walk goes on at the next chunk's first
            // record, before the file's size is checked: a full last chunk
            // ends the records at that first record, not at the chunk's end.
            if self.pos == self.chunk_end {
                let c = self.g.chunk_of(self.pos);
                let Some(first) = self.g.first_record(c) else {
                    return corrupt(u64::MAX, "chunk index overflows".into());
                };
                self.pos = first;
                self.chunk_end = self.g.chunk_base(c + 1).unwrap_or(u64::MAX);
            }
            let pos = self.pos;
            if pos.saturating_add(MARK_LEN) > self.size {
                return None;
            }
            let raw = match (self.load)(pos) {
                Ok(raw) => raw,
                Err(e) => return Some(Err(Stop::Load(e))),
            };
            match decode_mark(raw, pos) {
                Ok(Mark::Empty) => return None,
                Ok(Mark::Pad(rest)) => {
                    if u64::from(rest) != self.chunk_end - pos - MARK_LEN {
                        return corrupt(
                            pos,
                            "padding that does not reach the end of the chunk".into(),
                        );
                    }
                    self.pos = self.chunk_end;
                }
                Ok(Mark::Data(len)) => {
                    let rec = self.g.record_size(pos, u64::from(len));
                    if pos + rec > self.chunk_end {
                        return corrupt(pos, layout::past_its_chunk(len));
                    }
                    if pos + rec > self.size {
                        return Some(Err(Stop::Cut(Cut { pos, len })));
                    }
                    self.pos = pos + rec;
                    return Some(Ok(Record { pos, raw, len }));
                }
                Err(reason) => return corrupt(pos, reason),
            }
        }
    }
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
    /// The record the file ends inside, where the walk stopped.
    cut: Option<Cut>,
}

/// Walks the records from the chunk the header's hint names to the first
/// position that holds no committed record, a record whose CRC fails, or a
/// record the file ends inside.
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
    let from = g
        .first_record(c)
        .ok_or_else(|| QueueError::corrupt(path, u64::MAX, "chunk index overflows"))?;
    let mut scan = Scan::default();
    let mut buf = Vec::new();
    let mut walk = Walk::new(g, size, from, chunk_marks(path, file, g, size));
    for rec in walk.by_ref() {
        let rec = match rec {
            Ok(rec) => rec,
            Err(Stop::Cut(cut)) => {
                scan.cut = Some(cut);
                return Ok((Position(cut.pos), scan));
            }
            Err(Stop::Load(e)) => return Err(e),
            Err(Stop::Corrupt { position, reason }) => {
                return Err(QueueError::corrupt(path, position, reason))
            }
        };
        match record_intact(file, g, rec.pos, rec.raw, rec.len, &mut buf) {
            None => return Err(QueueError::unreadable(path, file, rec.pos, size)),
            Some(false) => {
                scan.crc_failed_at = Some(Position(rec.pos));
                return Ok((Position(rec.pos), scan));
            }
            Some(true) => {}
        }
        scan.records += 1;
    }
    Ok((Position(walk.pos), scan))
}

/// A loader of mark words for a [`Walk`] that maps the chunk it is in (one
/// `mmap` per chunk, the previous one unmapped first) and loads each mark
/// from the map, so a walk over a chunk costs no system call per record.
fn chunk_marks<'a>(
    path: &'a Path,
    file: &'a File,
    g: &'a Geometry,
    size: u64,
) -> impl FnMut(u64) -> Result<u64, QueueError> + 'a {
    let mut mapped: Option<(u64, ReadMap)> = None;
    move |pos| {
        let c = g.chunk_of(pos);
        let base = g
            .chunk_base(c)
            .ok_or_else(|| QueueError::corrupt(path, pos, "chunk index overflows"))?;
        let map = match &mut mapped {
            Some((at, map)) if *at == base => map,
            slot => {
                *slot = None;
                let map = ReadMap::map(file, base, g.chunk_size as usize)
                    .map_err(|e| QueueError::sys(path, format!("map chunk {c}"), e))?;
                &mut slot.insert((base, map)).1
            }
        };
        map.load_u64((pos - base) as usize, Ordering::Acquire)
            .ok_or_else(|| QueueError::unreadable(path, file, pos, size))
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

/// Up to one page of the file from `end` (nothing at or past its size).
fn page_after(path: &Path, file: &File, end: u64, size: u64) -> Result<Vec<u8>, QueueError> {
    let page = crate::sys::base_page_size() as u64;
    let mut probe = vec![0u8; page.min(size.saturating_sub(end)) as usize];
    file.read_exact_at(&mut probe, end)
        .map_err(QueueError::io(path, "read after the end"))?;
    Ok(probe)
}

/// Zeroes everything from `end` to the end of the file: the bytes of a torn
/// record, and anything a lost write on disk left behind.
fn discard_after(path: &Path, file: &File, end: u64, size: u64) -> Result<(), QueueError> {
    if end >= size {
        return Ok(());
    }
    let page = crate::sys::base_page_size() as u64;
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
    Ok(())
}
