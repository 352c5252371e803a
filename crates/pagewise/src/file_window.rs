//! The queue writer's pre-toucher, for any file written front to back
//! through a shared mapping: a background thread keeps a window ahead of the
//! writer allocated (`fallocate`) and faulted in (`MADV_POPULATE_WRITE`), so
//! the writes take no page fault and never meet a full file system as a
//! SIGBUS, without populating the whole file first.
//!
//! It is the mechanism behind [`crate::queue::Writer`]'s fault-free appends,
//! without the queue's file format; `pagewise bench mmap-prefault` compares it
//! with the other ways of prefaulting a file.

use crate::queue::{PreTouch, PreToucher, Prepare, QueueError, Resolved, Window, WindowReport};
use crate::sys::file;
use crate::sys::file_map::{FileAdvice, MapPopulator, WriteMap};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A pre-toucher over `[0, size)` of one file. Dropping it stops the thread.
#[derive(Debug)]
pub struct FileWindow {
    window: Window,
}

/// Allocates and populates one piece of the file.
struct FilePrepare {
    path: PathBuf,
    file: File,
    populator: MapPopulator,
    size: u64,
}

impl Prepare for FilePrepare {
    fn prepare(&self, offset: u64, len: u64) -> Result<(), QueueError> {
        if offset >= self.size {
            return Ok(());
        }
        let len = len.min(self.size - offset);
        let fail = |what: &str, error| QueueError::Sys {
            path: self.path.clone(),
            what: format!("{what} at {offset}"),
            error,
        };
        file::allocate(&self.file, offset, len).map_err(|e| fail("allocate", e))?;
        self.populator
            .advise(offset as usize, len as usize, FileAdvice::PopulateWrite)
            .map_err(|e| fail("populate", e))
    }
}

impl FileWindow {
    /// Starts the pre-toucher thread (`pagewise-pretouch`) for `file`, mapped
    /// from offset 0 by `map`, written up to `size` bytes; the window is
    /// sized by `pretouch` (its `mode` is ignored: there is always a
    /// thread). `path` only names the file in errors. Costs a thread and a
    /// duplicated file descriptor; nothing is prepared until the first
    /// [`FileWindow::wait_ready`] or the thread's first step.
    pub fn start(
        path: &Path,
        file: &File,
        map: &WriteMap,
        size: u64,
        pretouch: PreTouch,
    ) -> Result<FileWindow, QueueError> {
        let prep = FilePrepare {
            path: path.to_owned(),
            file: file.try_clone().map_err(|error| QueueError::Io {
                path: path.to_owned(),
                what: "duplicate the file descriptor for the pre-toucher",
                error,
            })?,
            populator: map.populator(),
            size,
        };
        let window = Window::start(
            0,
            pretouch.piece(true),
            0,
            pretouch,
            Box::new(prep),
            Resolved {
                mode: PreToucher::Thread,
                reason: "FileWindow always runs the thread".into(),
                usable_cpus: None,
                adaptive: false,
            },
            0,
        )?;
        Ok(FileWindow { window })
    }

    /// Returns once `[0, need)` is prepared, with the end of the prepared
    /// prefix; prepares pieces on the calling thread while any it needs is
    /// unclaimed (a system call, not a page fault). An error from preparing
    /// a piece (for example `ENOSPC`) is returned.
    pub fn wait_ready(&self, need: u64) -> Result<u64, QueueError> {
        self.window.wait_ready(need)
    }

    /// Publishes how far the writer has written, so the window moves ahead
    /// of it. One relaxed store: call it per write.
    #[inline]
    pub fn note(&self, written: u64) {
        self.window.note(written);
    }

    /// What the pre-toucher did so far (pieces, window sizes, last error).
    pub fn report(&self) -> WindowReport {
        self.window.report()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn prepares_ahead_of_the_writer_and_not_past_the_end() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let path = dir.path().join("file");
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let size = 4usize << 20;
        let map = WriteMap::map(&file, 0, size, false).unwrap();
        let pretouch = PreTouch {
            window: 1 << 20,
            max_window: 1 << 20,
            ..PreTouch::default()
        };
        let window = FileWindow::start(&path, &file, &map, size as u64, pretouch).unwrap();
        let ready = window.wait_ready(1).unwrap();
        assert!(ready >= 1, "{ready}");
        let allocated = || file.metadata().unwrap().blocks() * 512;
        assert!(
            allocated() >= ready.min(size as u64),
            "{} < {ready}",
            allocated()
        );
        // Write everything front to back; the window follows and stops at the end.
        let mut off = 0u64;
        while off < size as u64 {
            window.wait_ready(off + 4096).unwrap();
            window.note(off);
            assert!(map.write(off as usize, &[1u8; 4096]));
            off += 4096;
        }
        let report = window.report();
        assert_eq!(report.mode, PreToucher::Thread, "{report:?}");
        assert_eq!(report.last_error, None);
        drop(window);
        // All of it, and no piece (128 KiB for this window) past the end; a disk
        // file system may count a few blocks of metadata.
        let allocated = allocated();
        assert!(
            allocated >= size as u64 && allocated < size as u64 + (128 << 10),
            "{allocated}"
        );
    }
}
