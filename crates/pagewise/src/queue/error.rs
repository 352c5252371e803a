//! The queue's typed errors. Each message names the file or position and says
//! what to do. Nothing in the queue panics on a bad file: every problem with
//! the bytes on disk is one of these.

use super::{FileKind, Position};
use crate::sys::SysError;
use std::path::PathBuf;

/// Everything that can go wrong with a queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A system call failed.
    #[error("{path}: could not {what}: {error}")]
    Sys {
        /// The queue file.
        path: PathBuf,
        /// What pagewise was doing, e.g. `"map chunk 3"`.
        what: String,
        /// The failing call and its errno.
        error: SysError,
    },
    /// Opening or reading the file failed.
    #[error("{path}: could not {what}: {error}")]
    Io {
        /// The queue file.
        path: PathBuf,
        /// What pagewise was doing.
        what: &'static str,
        /// The error from the standard library.
        error: std::io::Error,
    },
    /// `Writer::create` found a file already there.
    #[error("{path}: already exists; open it instead of creating it, or remove it first")]
    Exists {
        /// The queue file.
        path: PathBuf,
    },
    /// The path names a file pagewise refuses to write as a queue (a
    /// symbolic link, or another user's file), or a writer's lock file it
    /// refuses to use.
    #[error("{path}: {reason}")]
    Refused {
        /// The path given.
        path: PathBuf,
        /// What it is and what to do instead.
        reason: String,
    },
    /// The path names something that is not a regular file (a directory, a
    /// FIFO, a device, a socket), so not a queue.
    #[error("{path}: {kind}, not a regular file, so not a queue")]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it names.
        kind: FileKind,
    },
    /// Another writer holds the queue's lock.
    #[error("{path}: another writer holds the queue (one writer at a time; the lock is released when that process exits)")]
    WriterLocked {
        /// The queue file.
        path: PathBuf,
    },
    /// The file is shorter than the header.
    #[error("{path}: {size} bytes is too short for a queue (the header alone is {needed} bytes): truncated, or not a queue")]
    TooShort {
        /// The queue file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// Bytes needed.
        needed: u64,
    },
    /// The file does not start with the queue magic.
    #[error("{path}: not a pagewise queue (bad magic {})", hex(.found))]
    NotAQueue {
        /// The file.
        path: PathBuf,
        /// The first eight bytes.
        found: [u8; 8],
    },
    /// A format version this build does not read.
    #[error("{path}: queue format version {found}, this pagewise reads version {supported}: use a matching pagewise")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version supported.
        supported: u32,
    },
    /// The header's checksum does not match its contents.
    #[error("{path}: header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the header is damaged")]
    HeaderChecksum {
        /// The file.
        path: PathBuf,
        /// Stored checksum.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// A header field is out of range.
    #[error("{path}: bad header: {reason}")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// Which field and why.
        reason: String,
    },
    /// Options that cannot make a queue.
    #[error("invalid queue options: {0}")]
    InvalidOptions(String),
    /// A record or the space around it is malformed.
    #[error("{path}: corrupt record at position {position}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        position: Position,
        /// What is wrong.
        reason: String,
    },
    /// A record's CRC does not match its bytes.
    #[error("{path}: record at position {position} fails its CRC check (stored {stored:#010x}, computed {computed:#010x}): the bytes are damaged")]
    CrcMismatch {
        /// The file.
        path: PathBuf,
        /// Where.
        position: Position,
        /// Stored CRC.
        stored: u32,
        /// CRC of the bytes read.
        computed: u32,
    },
    /// Recovery found a committed record whose CRC fails with intact records
    /// after it, where no crash can have torn it (on tmpfs, or before the
    /// end the last flush made durable): the bytes were damaged in place.
    /// The writer did not open and nothing was changed.
    #[error("{path}: the record at position {position} fails its CRC check and {intact_after} intact {} it; no crash tears a record there (tmpfs, or before the last flush), so the file was damaged: nothing was changed. A reader still reads the records before it; to drop it and everything after it, open the writer with discard_damaged (pagewise queue append --discard-damaged)", plural(.intact_after, "record follows", "records follow"))]
    DamagedRecord {
        /// The file.
        path: PathBuf,
        /// The record whose CRC fails.
        position: Position,
        /// Records after it whose CRCs are sound.
        intact_after: u64,
    },
    /// Recovery found the committed records ending (the next mark is 0) with
    /// the mark of a committed record after that position in the same page,
    /// where no crash can have left such a gap (on tmpfs, or before the end
    /// the last flush made durable): a length before it was probably
    /// damaged to be shorter, so the walk looked for the next mark in the
    /// padding or payload of a record, and dropping what follows would drop
    /// whole records. The writer did not open and nothing was changed.
    #[error("{path}: the records end at position {end}, but the {} of {intact_after} intact {} after it, from position {found_at} on: a length before it was probably damaged, not a record torn by a crash, so nothing was changed. A reader still reads the records before it; to drop everything from there on, open the writer with discard_damaged (pagewise queue append --discard-damaged)", plural(.intact_after, "mark", "marks"), plural(.intact_after, "record lies", "records lie"))]
    RecordsAfterEnd {
        /// The file.
        path: PathBuf,
        /// Where the walk found the next mark 0.
        end: Position,
        /// The first committed mark after it.
        found_at: Position,
        /// Whole records from there on (with record CRCs, those whose CRC is sound).
        intact_after: u64,
    },
    /// Recovery found the file ending inside a committed record (it runs
    /// past the end of the file), and inside that record's bytes the marks
    /// of records that are whole: its length was probably damaged, and
    /// dropping it would drop those records too. The writer did not open
    /// and nothing was changed. (A record the file was merely cut short
    /// inside is dropped without this: see [`Recovery::cut_record_at`].)
    ///
    /// [`Recovery::cut_record_at`]: super::Recovery::cut_record_at
    #[error("{path}: the record at position {position} ({len} bytes) runs past the end of the file, but the {} of {intact_after} intact {} inside it, from position {hidden_at} on: its length was probably damaged, not the file cut short, so nothing was changed. A reader still reads the records before it; to drop it and everything after it, open the writer with discard_damaged (pagewise queue append --discard-damaged)", plural(.intact_after, "mark", "marks"), plural(.intact_after, "record lies", "records lie"))]
    DamagedLength {
        /// The file.
        path: PathBuf,
        /// The record that runs past the end of the file.
        position: Position,
        /// Its payload length, as its mark says.
        len: u32,
        /// The first mark found inside it.
        hidden_at: Position,
        /// Whole records from there on (with record CRCs, those whose CRC is sound).
        intact_after: u64,
    },
    /// The payload is larger than a chunk can hold.
    #[error("a record of {len} bytes does not fit in a chunk (at most {max} bytes): use a larger chunk size")]
    RecordTooLarge {
        /// Payload length asked for.
        len: usize,
        /// Largest payload.
        max: usize,
    },
    /// The file system is full (`ENOSPC`) or a size limit was hit (`EFBIG`):
    /// the record was not appended.
    #[error("{path}: no space to grow the queue at offset {offset}: {error}; free space on its file system, or drop old chunks (retention)")]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// The file offset that could not be allocated.
        offset: u64,
        /// `fallocate`'s error.
        error: SysError,
    },
    /// Another process truncated the file under the reader.
    #[error("{path}: the file was truncated to {size} bytes while in use (the queue needs at least {needed}); someone with write permission shrank it")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The size now.
        size: u64,
        /// The size the reader had seen and relies on.
        needed: u64,
    },
    /// Retention dropped the chunk this reader was in.
    #[error("{path}: the reader at position {position} fell behind: retention dropped everything before position {first_available} ({behind_by} bytes ahead of it); seek to the start to continue")]
    FellBehind {
        /// The file.
        path: PathBuf,
        /// The reader's position.
        position: Position,
        /// The first position still in the queue.
        first_available: Position,
        /// How far behind, in bytes of file offset.
        behind_by: u64,
    },
    /// A position that is not the start of a record in this queue.
    #[error("{path}: position {position} is not usable: {reason}")]
    InvalidPosition {
        /// The file.
        path: PathBuf,
        /// The position given.
        position: Position,
        /// Why.
        reason: String,
    },
    /// The background pre-toucher could not be started.
    #[error("could not start the pre-touch thread: {0}")]
    Thread(std::io::Error),
}

/// Bytes as lowercase hex, two digits each, no separators: `50475751`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `one` when `n` is 1, else `many`.
fn plural(n: &u64, one: &'static str, many: &'static str) -> &'static str {
    if *n == 1 {
        one
    } else {
        many
    }
}

impl QueueError {
    /// A function turning an `io::Error` from `what` on `path` into [`QueueError::Io`].
    pub(crate) fn io<'a>(
        path: &'a std::path::Path,
        what: &'static str,
    ) -> impl FnOnce(std::io::Error) -> QueueError + 'a {
        move |error| QueueError::Io {
            path: path.to_owned(),
            what,
            error,
        }
    }

    /// The error for a read of a queue mapping that returned nothing: the
    /// file shrank below `needed` bytes (the SIGBUS guard caught the fault),
    /// or, if it did not, `pos` lies outside the mapping.
    #[cold]
    pub(crate) fn unreadable(
        path: &std::path::Path,
        file: &std::fs::File,
        pos: u64,
        needed: u64,
    ) -> QueueError {
        match file.metadata() {
            Ok(m) if m.len() < needed => QueueError::Truncated {
                path: path.to_owned(),
                size: m.len(),
                needed,
            },
            Ok(_) => QueueError::corrupt(path, pos, "outside its chunk"),
            Err(e) => QueueError::io(path, "stat the queue")(e),
        }
    }

    pub(crate) fn sys(
        path: &std::path::Path,
        what: impl Into<String>,
        error: SysError,
    ) -> QueueError {
        QueueError::Sys {
            path: path.to_owned(),
            what: what.into(),
            error,
        }
    }

    pub(crate) fn corrupt(
        path: &std::path::Path,
        position: u64,
        reason: impl Into<String>,
    ) -> QueueError {
        QueueError::Corrupt {
            path: path.to_owned(),
            position: Position(position),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages reach C and CLI users too: no hint names a Rust API.
    #[test]
    fn hints_name_no_rust_api() {
        let path = PathBuf::from("/dev/shm/q");
        let errors = [
            QueueError::NoSpace {
                path: path.clone(),
                offset: 4096,
                error: SysError {
                    call: "fallocate",
                    source: std::io::Error::from_raw_os_error(28),
                },
            },
            QueueError::Exists { path },
        ];
        for e in errors {
            let text = e.to_string();
            assert!(!text.contains("::"), "{text}");
        }
    }

    /// Bytes are printed as hex, counts with the right number.
    #[test]
    fn messages_read_as_text() {
        let path = PathBuf::from("q");
        let magic = QueueError::NotAQueue {
            path: path.clone(),
            found: [0x0d, 0xc2, 0x0b, 0x87, 0x2f, 0x2d, 0x57, 0xcf],
        };
        assert_eq!(
            magic.to_string(),
            "q: not a pagewise queue (bad magic 0dc20b872f2d57cf)"
        );
        let record = |intact_after| QueueError::DamagedRecord {
            path: path.clone(),
            position: Position(4160),
            intact_after,
        };
        assert!(record(1)
            .to_string()
            .contains(" and 1 intact record follows it;"));
        assert!(record(2)
            .to_string()
            .contains(" and 2 intact records follow it;"));
        let length = |intact_after| QueueError::DamagedLength {
            path: path.clone(),
            position: Position(4160),
            len: 200,
            hidden_at: Position(4176),
            intact_after,
        };
        assert!(length(1)
            .to_string()
            .contains("but the mark of 1 intact record lies inside it, from"));
        assert!(length(3)
            .to_string()
            .contains("but the marks of 3 intact records lie inside it, from"));
    }
}
