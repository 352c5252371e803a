//! The writer lock: an exclusive lock on a private side file,
//! `<queue>.lock` (mode 0600, owned by the writer's user).
//!
//! The lock used to be a byte-range lock on the queue file itself. Any
//! process that can *read* the queue can take a read lock on that byte, and
//! a read lock there kept every writer out: a denial of service by any user
//! with read permission. Nobody but its owner can open a 0600 file, so nobody
//! else can hold a lock on it.
//!
//! The writer still takes an exclusive lock on byte 0 of the queue file
//! when it can, as a sign of life that readers of other users can test
//! (taking a write lock needs write permission, so no reader can fake it),
//! and it refuses to start while another process holds that byte
//! exclusively (a writer of an older pagewise). A read lock there no longer
//! matters to a writer.

use super::error::QueueError;
use super::layout::{lock_holder, LOCK_LEN, LOCK_START};
use crate::sys::create;
use crate::sys::file::{self, LockKind};
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The writer's lock file of the queue at `queue`: `<queue>.lock`. It stays
/// beside the queue after the writer exits (removing it while another
/// writer may be opening it would let two writers in); remove it with the
/// queue, when no writer runs.
pub fn lock_path(queue: &Path) -> PathBuf {
    let mut p = queue.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// The writer lock, held for as long as this value lives; the kernel drops
/// it when the process dies, however it dies.
///
/// Until [`WriterLock::keep`] is called, dropping it undoes what the open
/// that took it made: the queue file, if that open created it (see
/// [`WriterLock::made_queue`]), and the lock file, if that open created it.
/// Both are removed while the lock is still held, and only while their
/// names still name the files this open made: a file that was there before
/// is never removed.
#[derive(Debug)]
pub(crate) struct WriterLock {
    _lock_file: File,
    path: PathBuf,
    /// Device and inode of the lock file, when this open created it.
    created: Option<(u64, u64)>,
    /// Device and inode of the queue file, when this open created it.
    queue: Option<(PathBuf, (u64, u64))>,
    /// The open succeeded: nothing is removed on drop.
    kept: bool,
}

impl WriterLock {
    /// Notes that the open holding this lock created the queue file at
    /// `path` (whose metadata is `meta`): a failed open removes it.
    pub(crate) fn made_queue(&mut self, path: &Path, meta: &std::fs::Metadata) {
        self.queue = Some((path.to_owned(), file_id(meta)));
    }

    /// The open succeeded: keep the files it made.
    pub(crate) fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for WriterLock {
    /// After a failed open, removes the queue file and the lock file it
    /// created, in that order, then lets go. Safe while locked: a writer
    /// that opened either before it went finds, once it has the lock, that
    /// the file no longer has the name, and tries again (see [`lock`] and
    /// `Writer::open`).
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Some((queue, id)) = &self.queue {
            if names(queue, *id) {
                let _ = std::fs::remove_file(queue);
            }
        }
        if let Some(id) = self.created {
            if names(&self.path, id) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A file's device and inode.
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// Whether `path` names the file whose device and inode are `id`.
fn names(path: &Path, id: (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| file_id(&m) == id)
}

/// Whether `path` still names the file `file` is open on (device and inode).
pub(super) fn still_named(path: &Path, file: &std::fs::Metadata) -> bool {
    names(path, file_id(file))
}

/// Opens (or creates) the lock file and checks it is a regular file this
/// user owns with one link: a planted symbolic link, another user's file, a
/// FIFO or a hard link to some other file is refused.
fn open_lock_file(queue: &Path) -> Result<(File, std::fs::Metadata, bool), QueueError> {
    let path = lock_path(queue);
    let refused = |reason: String| QueueError::Refused {
        path: path.clone(),
        reason,
    };
    let me = create::effective_uid();
    // What is wrong with what has the name, if anything: asked of the open
    // file, or of the name when the open failed (in a sticky directory the
    // kernel refuses, with `EACCES`, to let root follow or create through
    // another user's link or file: `fs.protected_symlinks`, `protected_regular`).
    let wrong = |meta: &std::fs::Metadata| {
        if meta.file_type().is_symlink() {
            Some("the writer's lock file is a symbolic link, which pagewise never follows: another user may have planted it; remove it".to_owned())
        } else if meta.uid() != me {
            Some(format!(
                "the writer's lock file is owned by user {}, not by this user ({me}), who could keep every writer out with it: remove it",
                meta.uid()
            ))
        } else if !meta.file_type().is_file() {
            Some(format!(
                "the writer's lock file is {}, not a regular file: remove it",
                create::kind_of(meta)
            ))
        } else {
            None
        }
    };
    let (file, created) = match create::open_or_create_private(&path) {
        Ok(opened) => opened,
        Err(e) => {
            return Err(
                match std::fs::symlink_metadata(&path)
                    .ok()
                    .and_then(|m| wrong(&m))
                {
                    Some(reason) => refused(reason),
                    None => QueueError::sys(&path, "open the writer's lock file", e),
                },
            )
        }
    };
    let meta = file
        .metadata()
        .map_err(QueueError::io(&path, "stat the writer's lock file"))?;
    if let Some(reason) = wrong(&meta) {
        return Err(refused(reason));
    }
    if meta.nlink() != 1 {
        return Err(refused(format!(
            "the writer's lock file has {} links: it may be another file's name; remove it",
            meta.nlink()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        // Ours, but others may open it: only this user should.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(QueueError::io(&path, "make the writer's lock file private"))?;
    }
    Ok((file, meta, created))
}

/// How long a new writer waits for the writer locks (the lock file's, then
/// byte 0 of the queue file) while another open file still holds one. The
/// locks are open-file-description locks: they last while anything refers
/// to the open file, so a writer that was just dropped can hold them a
/// moment longer (its mappings, or a child that another thread forked
/// before it closed and that has not yet reached `exec`, where the
/// close-on-exec descriptors go). Such holders let go within this time; a
/// live writer does not, and the new writer gets `WriterLocked`. (Seen
/// without the wait: `bench queue --rtt`'s in-process test, whose sides
/// open writers on files just created and closed while other tests spawn
/// processes, failed with `WriterLocked` in 1 of 20–80 runs as user nobody.)
const CLOSING_WRITER_WAIT: Duration = Duration::from_millis(100);

/// Takes the writer lock of the queue at `queue`, whose open file is
/// `queue_file`: the lock file first, then (when no reader's read lock is in
/// the way) byte 0 of the queue file as a sign of life. Fails with
/// [`QueueError::WriterLocked`] when another writer holds either,
/// [`QueueError::Refused`] for a lock file that is not this user's own
/// regular file. Costs an `open`, two `stat`s and two or three `fcntl` calls
/// (and up to [`CLOSING_WRITER_WAIT`] while a closing writer lets go).
pub(crate) fn lock(queue: &Path, queue_file: &File) -> Result<WriterLock, QueueError> {
    let path = lock_path(queue);
    let locked = |e| QueueError::sys(queue, "lock the writer's lock file", e);
    let writer_locked = || QueueError::WriterLocked {
        path: queue.to_owned(),
    };
    // Ok after a short sleep while the deadline has not passed; then the
    // lock is another writer's.
    let deadline = Instant::now() + CLOSING_WRITER_WAIT;
    let wait_for_closing_writer = || {
        if Instant::now() >= deadline {
            return Err(writer_locked());
        }
        std::thread::sleep(Duration::from_micros(200));
        Ok(())
    };
    // A failed open removes the lock file it made while it holds the lock;
    // a writer that opened that file just before locks a file with no name.
    // Then it tries the name again (a new file, or another's lock).
    let mut tries = 0;
    let (lock_file, created) = loop {
        let (lock_file, meta, created) = open_lock_file(queue)?;
        if !file::try_lock(&lock_file, LOCK_START, LOCK_LEN, LockKind::Exclusive).map_err(locked)? {
            wait_for_closing_writer()?;
            continue;
        }
        if still_named(&path, &meta) {
            break (lock_file, created.then(|| file_id(&meta)));
        }
        tries += 1;
        if tries == 8 {
            return Err(writer_locked());
        }
    };
    // From here on, a failure removes the lock file if this call made it.
    let lock = WriterLock {
        _lock_file: lock_file,
        path,
        created,
        queue: None,
        kept: false,
    };
    // With the lock file held, no other writer is live; a writer that was
    // just dropped may still hold byte 0 (see CLOSING_WRITER_WAIT).
    loop {
        match file::try_lock(queue_file, LOCK_START, LOCK_LEN, LockKind::Exclusive) {
            Ok(true) => break,
            Ok(false) => match lock_holder(queue_file) {
                // Only a read lock (any reader may take one): the writer runs
                // anyway; `inspect` then tells liveness from the lock file
                // where it can.
                Ok(Some(LockKind::Shared)) => break,
                _ => wait_for_closing_writer()?,
            },
            Err(e) => return Err(QueueError::sys(queue, "lock the queue for writing", e)),
        }
    }
    Ok(lock)
}

/// Whether a writer holds the lock file of the queue at `queue` now, or
/// `None` when this user cannot open it (it is private to the writer's
/// user) or there is none. Never creates anything. An `open` and an `fcntl`.
pub(crate) fn lock_file_held(queue: &Path) -> Option<bool> {
    let file = create::open_read_no_follow(&lock_path(queue)).ok()?;
    if !file.metadata().ok()?.file_type().is_file() {
        return None;
    }
    lock_holder(&file)
        .ok()
        .map(|h| h == Some(LockKind::Exclusive))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_is_named_after_the_queue() {
        assert_eq!(
            lock_path(Path::new("/dev/shm/q")),
            Path::new("/dev/shm/q.lock")
        );
        assert_eq!(lock_path(Path::new("q.x")), Path::new("q.x.lock"));
    }

    #[test]
    fn a_second_lock_is_refused_and_the_lock_file_is_private() {
        let d = tempfile::tempdir().unwrap();
        let q = d.path().join("q");
        let f = File::create(&q).unwrap();
        let mut held = lock(&q, &f).unwrap();
        held.keep();
        let again = File::open(&q).unwrap();
        assert!(matches!(
            lock(&q, &again),
            Err(QueueError::WriterLocked { .. })
        ));
        assert_eq!(lock_file_held(&q), Some(true));
        let mode = std::fs::metadata(lock_path(&q)).unwrap().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        drop(held);
        assert_eq!(lock_file_held(&q), Some(false));
    }

    #[test]
    fn a_failed_open_removes_only_the_files_it_made() {
        let d = tempfile::tempdir().unwrap();
        let q = d.path().join("q");
        let f = File::create(&q).unwrap();
        // Made by this lock, not kept: the lock file and the queue go.
        let mut made = lock(&q, &f).unwrap();
        made.made_queue(&q, &f.metadata().unwrap());
        drop(made);
        assert!(!lock_path(&q).exists());
        assert!(!q.exists());
        // A lock file and a queue that were there before stay.
        let f = File::create(&q).unwrap();
        File::create(lock_path(&q)).unwrap();
        drop(lock(&q, &f).unwrap());
        assert!(lock_path(&q).exists());
        assert!(q.exists());
        // Kept: nothing goes.
        std::fs::remove_file(lock_path(&q)).unwrap();
        let mut kept = lock(&q, &f).unwrap();
        kept.made_queue(&q, &f.metadata().unwrap());
        kept.keep();
        drop(kept);
        assert!(lock_path(&q).exists());
        assert!(q.exists());
    }

    #[test]
    fn a_link_at_the_lock_files_name_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let q = d.path().join("q");
        let f = File::create(&q).unwrap();
        let target = d.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, lock_path(&q)).unwrap();
        match lock(&q, &f) {
            Err(e @ QueueError::Refused { .. }) => {
                assert!(e.to_string().contains("symbolic link"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!target.exists(), "the link was followed");
    }
}
