//! A persistent queue in a shared file mapping: one writer process appends
//! records, any number of reader processes read them, each at its own pace,
//! live or later, across restarts. As fast as shared memory (an append is a
//! copy and a release store; a read is an acquire load and a copy) and as
//! safe as a log (one writer at a time, crash recovery, typed errors for
//! every bad file).
//!
//! ```no_run
//! use pagewise::queue::{Options, Reader, Wait, Writer};
//! use std::time::Duration;
//!
//! let mut writer = Writer::open_or_create("/dev/shm/orders.q", Options::default())?;
//! let position = writer.append(b"order 1")?;
//! let mut slot = writer.reserve(16)?;           // zero-copy
//! slot.payload().copy_from_slice(b"order 2 .......");
//! slot.commit();
//! writer.flush()?;                               // durable (on a disk file)
//!
//! let mut reader = Reader::open("/dev/shm/orders.q")?;
//! while let Some(record) = reader.next_wait(Wait::Block { spins: 1000 }, Some(Duration::from_millis(10)))? {
//!     println!("{}: {:?}", record.position, record.payload);
//! }
//! # let _ = position;
//! # Ok::<(), pagewise::queue::QueueError>(())
//! ```
//!
//! How it works (docs/queue.md has the byte-level layout):
//!
//! - **Layout.** A 4 KiB header (magic, version, chunk size, flags, header
//!   checksum, and a few words only the writer changes), then chunks of a
//!   fixed size (64 MiB by default). A record never straddles a chunk: when
//!   one does not fit, the writer commits padding and moves on.
//! - **Commit protocol.** A record is an 8-byte mark, the payload, an
//!   optional CRC-32 and padding to 8 bytes. The writer writes the payload,
//!   then the mark (commit bit, kind, a tag derived from the position, and
//!   the length) with one release store. Readers load the mark with acquire
//!   and stop at zero; a non-zero mark that does not decode is corruption.
//! - **One writer.** An open-file-description lock on byte 0, which the kernel
//!   drops when the writer's process dies.
//! - **Waking.** Readers that block sleep on a futex word in the header,
//!   which works on their read-only mapping: a reader needs read permission
//!   only and writes nowhere. The writer calls `FUTEX_WAKE` only when a
//!   reader may be asleep, which it tells from a coarse clock and from
//!   whether its last wake found a sleeper (docs/queue.md, "Waking readers").
//! - **Growth.** The file grows by `fallocate`, a piece at a time, before the
//!   writer gets there: a full file system is an error from `append`, never a
//!   SIGBUS. Readers follow by mapping each chunk when they reach it.
//! - **Pre-touch.** A background thread keeps a window ahead of the writer
//!   allocated and faulted in (`MADV_POPULATE_WRITE`), adapting its size to
//!   the write rate, so appends take no page fault while the file is never
//!   populated whole.
//! - **Recovery.** A new writer walks to the first uncommitted mark and
//!   zeroes everything after it: a torn record is discarded, readers never
//!   see part of one. A last record the file was cut short inside (a
//!   truncation, an interrupted copy) is discarded the same way.
//! - **Retention.** `Writer::retain` drops whole chunks by size or age
//!   (punching holes); a reader left in a dropped chunk gets
//!   [`QueueError::FellBehind`] saying how far behind it is.
//! - **Truncation.** Readers never read past the file size they last saw
//!   and watch the file with inotify; a truncation by another process is
//!   reported as [`QueueError::Truncated`]. A read that races the truncation
//!   itself faults (SIGBUS) inside pagewise's guarded read routines, and a
//!   handler turns that into the same error on the reading thread. The
//!   writer's stores are not guarded: only processes with write permission
//!   can truncate, so keep the file's mode tight.

mod error;
mod inspect;
pub mod layout;
mod lock;
mod maps;
mod notify;
mod pattern;
mod reader;
mod recovery;
mod window;
mod writer;

pub use crate::sys::create::FileKind;
pub use error::QueueError;
pub use inspect::{inspect, Inspection, SCHEMA as INSPECT_SCHEMA};
pub use layout::Geometry;
pub use lock::lock_path;
pub use notify::wait_path;
pub use reader::{Reader, ReaderOptions, Record, Start, TruncationCheck, Wait};
pub use recovery::Recovery;
pub use window::{
    PreTouch, PreTouchMode, PreTouchSwitch, PreToucher, WindowReport, SWITCH_LOG, THREAD_MIN_CPUS,
};
pub(crate) use window::{Prepare, Resolved, Window};
pub use writer::{Options, Reservation, RetainReport, Retention, Writer, WriterReport};

/// Where a record is: its byte offset in the queue file. Positions grow
/// with every append, survive restarts, and stay valid until retention
/// drops the record's chunk.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Position(pub u64);

impl Position {
    /// The raw file offset.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
