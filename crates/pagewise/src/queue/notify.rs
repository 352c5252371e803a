//! Waking readers that block.
//!
//! Readers map the queue read-only, so they cannot tell the writer in the
//! queue file that they sleep. A small side file, `<queue>.wait`, holds one
//! word a sleeping reader can write: the `CLOCK_MONOTONIC` deadline until
//! which some reader may be asleep (0: nobody). The writer loads that word
//! after each commit; only when it is non-zero does it bump the futex word in
//! the queue header and call `FUTEX_WAKE`. A reader re-arms the deadline for
//! each sleep slice (at most 10 ms), so the word of a reader that was killed
//! expires by itself and the writer clears it on its next append.
//!
//! The side file holds nothing of the queue's data: the worst a reader can do
//! through it is make the writer issue needless wakes. Readers that cannot
//! open it for writing still block, by sleeping on the futex in slices of at
//! most 1 ms (reported by `Reader::blocking`).

use crate::sys::file::set_mode;
use crate::sys::file_map::WriteMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

const MAGIC: [u8; 8] = *b"PGWQWAIT";
const LEN: u64 = 4096;
const OFF_WAIT_UNTIL: usize = 64;

/// The side file's path: the queue's path with `.wait` appended.
pub fn wait_path(queue: &Path) -> PathBuf {
    let mut p = queue.as_os_str().to_owned();
    p.push(".wait");
    PathBuf::from(p)
}

/// A mapping of the side file.
#[derive(Debug)]
pub(crate) struct WaitFile {
    map: WriteMap,
}

fn map_checked(file: &File) -> Result<WriteMap, String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len < LEN {
        return Err(format!("{len} bytes, expected {LEN}"));
    }
    let map = WriteMap::map(file, 0, LEN as usize, false).map_err(|e| e.to_string())?;
    let mut magic = [0u8; 8];
    map.copy_out(0, &mut magic);
    if magic != MAGIC {
        return Err("not a pagewise wait file".into());
    }
    Ok(map)
}

impl WaitFile {
    /// Opens or creates the side file for a writer. A new file gets write
    /// permission wherever `queue_mode` grants read permission, so that every
    /// reader can register.
    pub(crate) fn for_writer(queue: &Path, queue_mode: u32) -> Result<WaitFile, String> {
        let path = wait_path(queue);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(queue_mode & 0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        if len == 0 {
            file.set_len(LEN).map_err(|e| e.to_string())?;
            let map = WriteMap::map(&file, 0, LEN as usize, false).map_err(|e| e.to_string())?;
            map.write(0, &MAGIC);
            let mode = (queue_mode & 0o666) | ((queue_mode & 0o444) >> 1);
            set_mode(&file, mode).map_err(|e| e.to_string())?;
        }
        Ok(WaitFile {
            map: map_checked(&file).map_err(|e| format!("{}: {e}", path.display()))?,
        })
    }

    /// Opens the side file for a reader, if it exists and is writable.
    pub(crate) fn for_reader(queue: &Path) -> Result<WaitFile, String> {
        let path = wait_path(queue);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(WaitFile {
            map: map_checked(&file).map_err(|e| format!("{}: {e}", path.display()))?,
        })
    }

    /// The registered deadline (0: no reader asleep). One relaxed load.
    #[inline]
    pub(crate) fn deadline(&self) -> u64 {
        self.map
            .load_u64(OFF_WAIT_UNTIL, Ordering::Relaxed)
            .unwrap_or(0)
    }

    /// Clears `seen` if it is still the deadline (the writer, once it passed).
    pub(crate) fn clear(&self, seen: u64) {
        let _ = self.map.compare_exchange_u64(OFF_WAIT_UNTIL, seen, 0);
    }

    /// Raises the deadline to at least `until` (a reader about to sleep). Sequentially
    /// consistent, so the reader's next look at the queue cannot be ordered before it.
    pub(crate) fn register(&self, until: u64) {
        let mut current = self.deadline();
        while current < until {
            match self
                .map
                .compare_exchange_u64(OFF_WAIT_UNTIL, current, until)
            {
                Some(Ok(_)) | None => return,
                Some(Err(now)) => current = now,
            }
        }
    }
}
