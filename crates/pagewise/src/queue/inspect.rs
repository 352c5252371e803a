//! A read-only look at a queue file: geometry, records, writer liveness.

use super::error::QueueError;
use super::layout::{self, lock_holder, HEADER_LEN};
use super::reader::{Reader, ReaderOptions, Start, AFTER_PAYLOAD_MAX};
use super::window::PreToucher;
use super::Position;
use crate::sys::file::LockKind;
use serde::Serialize;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

/// The JSON schema of an [`Inspection`].
pub const SCHEMA: &str = "pagewise.queue.inspect/1";

/// What [`inspect`] found.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The file.
    pub path: String,
    /// Format version.
    pub version: u32,
    /// Bytes per chunk. Deprecated name, kept for schema `/1`: use
    /// [`Inspection::chunk_size_bytes`], the same number.
    pub chunk_size: u64,
    /// Bytes per chunk.
    pub chunk_size_bytes: u64,
    /// Largest payload per record, in bytes. Deprecated name, kept for
    /// schema `/1`: use [`Inspection::max_payload_bytes`], the same number.
    pub max_payload: usize,
    /// Largest payload per record, in bytes.
    pub max_payload_bytes: usize,
    /// Whether records carry CRCs.
    pub record_crc: bool,
    /// Whether records of up to 64 bytes are padded to end on a multiple
    /// of 16, 32 or 64 bytes (line-fitting; `false`: packed to multiples of
    /// 8, as in every queue made before this field).
    pub line_fitting_records: bool,
    /// When the queue was created, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// File size in bytes (dropped chunks stay as holes). Deprecated name,
    /// kept for schema `/1`: use [`Inspection::file_size_bytes`], the same number.
    pub file_size: u64,
    /// File size in bytes (dropped chunks stay as holes).
    pub file_size_bytes: u64,
    /// Bytes the file system has allocated for it.
    pub allocated_bytes: u64,
    /// The file system (`tmpfs`, `ext4`, …).
    pub fs: String,
    /// First chunk still in the queue (earlier ones were dropped by retention).
    pub first_chunk: u64,
    /// Chunks the file spans (including dropped ones).
    pub chunks: u64,
    /// Committed records still in the queue.
    pub records: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// Position of the oldest record.
    pub first_position: Option<Position>,
    /// Position of the newest record.
    pub last_position: Option<Position>,
    /// Where the next record will go.
    pub end_position: Position,
    /// Whether a writer holds the lock now: its sign of life on byte 0 of
    /// the queue file, or its lock file `<queue>.lock` (which only the
    /// writer's user can open). False when a reader's read lock on byte 0
    /// hid the sign of life and this user cannot open the lock file.
    pub writer_alive: bool,
    /// Whether a process that is not a writer holds a read lock on byte 0
    /// of the queue file. It does not keep writers out (they lock
    /// `<queue>.lock`); it only hides a writer's sign of life from users
    /// who cannot open the lock file.
    pub read_locked: bool,
    /// Process id of the writer that last opened the queue.
    pub last_writer_pid: u32,
    /// How many times a writer opened the queue.
    pub writer_opens: u64,
    /// What prepares (or prepared, when it has gone) the file ahead of the
    /// writer that last opened the queue: `thread`, `idle` (the writer's
    /// idle time), `low-priority-thread` (started because the writer showed
    /// no idle time on a machine with no CPU to spare) or `off`; null when
    /// that writer did not record it (an earlier pagewise).
    pub last_writer_pretouch: Option<PreToucher>,
    /// How many times that writer switched between idle-time work and the
    /// low-priority thread (`PreTouchMode::Auto` following its pattern).
    pub last_writer_pretouch_switches: u32,
    /// When that writer's current pre-toucher started (its open, or its
    /// last switch), ns since the Unix epoch; null when not recorded.
    pub last_writer_pretouch_since_unix_ns: Option<u64>,
    /// The usable CPUs `PreTouchMode::Auto` found when that writer opened;
    /// null when the mode was asked for, the CPUs were unknown, or the
    /// writer did not record them.
    pub last_writer_usable_cpus: Option<u32>,
    /// Non-zero bytes right after the end: a writer is filling a record, or
    /// one died mid-record (the next writer discards them).
    pub uncommitted_bytes_after_end: bool,
    /// A problem that stopped the walk (corruption), if any.
    pub problem: Option<String>,
}

/// Reads a queue without changing it: validates the header and walks every
/// record still in it. Costs a read of all records (a copy of each payload
/// and of the 0 to 7 bytes after it, to its next multiple of 8).
pub fn inspect(path: impl AsRef<Path>) -> Result<Inspection, QueueError> {
    let path = path.as_ref();
    let mut reader = Reader::open_with(
        path,
        ReaderOptions {
            start: Start::Beginning,
            verify_crc: true,
            watch_truncation: false,
            ..ReaderOptions::default()
        },
    )?;
    let (g, state, _) = layout::read_header(path, reader.file_for_inspect())?;
    let mut records = 0u64;
    let mut payload_bytes = 0u64;
    let mut first_position = None;
    let mut last_position = None;
    let mut problem = None;
    let mut after = [0u8; AFTER_PAYLOAD_MAX];
    loop {
        match reader.next_and_after(&mut after) {
            Ok(Some((r, n))) => {
                records += 1;
                payload_bytes += r.payload.len() as u64;
                first_position.get_or_insert(r.position);
                last_position = Some(r.position);
                if let Some(hidden) = mark_inside(r.position, r.payload, &after[..n]) {
                    problem = Some(format!(
                        "{}: the record at position {} ({} bytes) holds the mark of a record at position {hidden} in its payload: its length was probably damaged, and the records from {hidden} on are hidden in it",
                        path.display(),
                        r.position,
                        r.payload.len()
                    ));
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                problem = Some(e.to_string());
                break;
            }
        }
    }
    let end_position = reader.position();
    let file = reader.file_for_inspect();
    let meta = file
        .metadata()
        .map_err(QueueError::io(path, "stat the queue"))?;
    let size = meta.len();
    let mut after = vec![0u8; 4096.min(size.saturating_sub(end_position.0)) as usize];
    let read_after = file.read_exact_at(&mut after, end_position.0).is_ok();
    if let (None, true) = (&problem, read_after) {
        if let Some(found) = layout::first_mark_in(end_position.0, &after) {
            problem = Some(format!(
                "{}: the records end at position {end_position} (its mark is 0), but a committed record's mark lies at position {found} after it: a length before it was probably damaged to be shorter (or a power cut tore the file there), and the records from {found} on are unreachable",
                path.display()
            ));
        }
    }
    let uncommitted = problem.is_none() && read_after && after.iter().any(|&b| b != 0);
    let holder = lock_holder(file).map_err(|e| QueueError::sys(path, "test the writer lock", e))?;
    let fs =
        crate::sys::file::fs_kind(file).map_or_else(|e| format!("unknown ({e})"), |k| k.name());
    Ok(Inspection {
        schema: SCHEMA,
        path: path.display().to_string(),
        version: g.version,
        chunk_size: g.chunk_size,
        chunk_size_bytes: g.chunk_size,
        max_payload: g.max_payload(),
        max_payload_bytes: g.max_payload(),
        record_crc: g.record_crc(),
        line_fitting_records: g.line_fitting(),
        created_unix_ns: g.created_unix_ns,
        file_size: size,
        file_size_bytes: size,
        allocated_bytes: meta.blocks() * 512,
        fs,
        first_chunk: state.first_chunk,
        chunks: layout::chunks_in(&g, size.max(HEADER_LEN)),
        records,
        payload_bytes,
        first_position,
        last_position,
        end_position,
        writer_alive: holder == Some(LockKind::Exclusive)
            || super::lock::lock_file_held(path) == Some(true),
        read_locked: holder == Some(LockKind::Shared),
        last_writer_pid: state.writer_pid,
        writer_opens: state.writer_opens,
        last_writer_pretouch: PreToucher::from_code(state.writer_pretouch),
        last_writer_pretouch_switches: state.writer_pretouch_switches,
        last_writer_pretouch_since_unix_ns: (state.writer_pretouch_since_unix_ns != 0)
            .then_some(state.writer_pretouch_since_unix_ns),
        last_writer_usable_cpus: (state.writer_usable_cpus != 0)
            .then_some(state.writer_usable_cpus),
        uncommitted_bytes_after_end: uncommitted,
        problem,
    })
}

/// The position of a valid record or padding mark inside the record at
/// `position`, if there is one: the sign of a length damaged to be longer
/// than it was (the records after it then lie inside it). Marks are 8-byte
/// aligned, so the candidates start at 8-byte steps from the payload's
/// start, through the payload and on through `after`, the bytes between the
/// payload and the record's end (a length grown by a few bytes, or grown
/// into a line-fitting record's padding, swallows a mark there); a last
/// word cut short by the record's end is no candidate. A mark carries 28
/// bits of its own position and a commit bit, so payload bytes pass for one
/// at their own offset about once in 2^31 8-byte words. Costs a pass over
/// the payload.
fn mark_inside(position: Position, payload: &[u8], after: &[u8]) -> Option<u64> {
    let start = position.0 + layout::MARK_LEN;
    if let Some(at) = layout::first_mark_in(start, payload) {
        return Some(at);
    }
    let whole = payload.len() / 8 * 8;
    let mut tail = [0u8; 8 + AFTER_PAYLOAD_MAX];
    let inside = &payload[whole..];
    let n = inside.len() + after.len().min(AFTER_PAYLOAD_MAX);
    tail[..inside.len()].copy_from_slice(inside);
    tail[inside.len()..n].copy_from_slice(&after[..n - inside.len()]);
    layout::first_mark_in(start + whole as u64, &tail[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_for_its_own_position_inside_a_payload_is_found() {
        let position = Position(4160);
        // Records at 4160 (5 bytes: 16 in all) and 4176, as a length damaged
        // from 5 to 48 would make them look: one payload.
        let mut payload = vec![0u8; 48];
        payload[..5].copy_from_slice(b"hello");
        payload[8..16].copy_from_slice(&layout::data_mark(4176, 5).to_le_bytes());
        assert_eq!(mark_inside(position, &payload, &[]), Some(4176));
        // The same mark at another offset belongs to another position: not a sign.
        let mut shifted = vec![0u8; 48];
        shifted[16..24].copy_from_slice(&layout::data_mark(4176, 5).to_le_bytes());
        assert_eq!(mark_inside(position, &shifted, &[]), None);
        assert_eq!(mark_inside(position, &[0xFF; 64], &[]), None);
        assert_eq!(mark_inside(position, b"short", &[0; 3]), None);
    }

    #[test]
    fn a_mark_past_the_payload_end_is_found_for_a_length_grown_by_1_to_7() {
        // Records at 4160 (8 bytes: 16 in all) and 4176 (5 bytes), as the
        // file holds them from 4168 on; a length grown from 8 to 8 + k puts
        // the mark at 4176 across the payload's end: k bytes inside, 8 - k
        // after.
        let position = Position(4160);
        let mut file = [0u8; 32];
        file[..8].copy_from_slice(b"abcdefgh");
        file[8..16].copy_from_slice(&layout::data_mark(4176, 5).to_le_bytes());
        file[16..21].copy_from_slice(b"hello");
        for k in 1..=7 {
            let (payload, after) = file.split_at(8 + k);
            assert_eq!(
                mark_inside(position, payload, &after[..8 - k]),
                Some(4176),
                "{k}"
            );
            // Without the bytes after the payload (the file ends) it is no candidate.
            assert_eq!(mark_inside(position, payload, &after[..7 - k]), None, "{k}");
        }
    }
}
