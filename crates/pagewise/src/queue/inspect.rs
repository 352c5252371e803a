//! A read-only look at a queue file: geometry, records, writer liveness.

use super::error::QueueError;
use super::layout::{self, lock_holder, HEADER_LEN};
use super::reader::{Reader, ReaderOptions, Start};
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
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Largest payload per record.
    pub max_payload: usize,
    /// Whether records carry CRCs.
    pub record_crc: bool,
    /// When the queue was created, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// File size (dropped chunks stay as holes).
    pub file_size: u64,
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
/// record still in it. Costs a read of all records (a copy of each payload).
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
    loop {
        match reader.next() {
            Ok(Some(r)) => {
                records += 1;
                payload_bytes += r.payload.len() as u64;
                first_position.get_or_insert(r.position);
                last_position = Some(r.position);
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
    let uncommitted = problem.is_none()
        && file.read_exact_at(&mut after, end_position.0).is_ok()
        && after.iter().any(|&b| b != 0);
    let holder = lock_holder(file).map_err(|e| QueueError::sys(path, "test the writer lock", e))?;
    let fs =
        crate::sys::file::fs_kind(file).map_or_else(|e| format!("unknown ({e})"), |k| k.name());
    Ok(Inspection {
        schema: SCHEMA,
        path: path.display().to_string(),
        version: g.version,
        chunk_size: g.chunk_size,
        max_payload: g.max_payload(),
        record_crc: g.record_crc(),
        created_unix_ns: g.created_unix_ns,
        file_size: size,
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
