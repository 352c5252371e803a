//! The writer's chunk mappings, shared with the pre-toucher.
//!
//! The pre-toucher maps the next chunk before the writer gets there (so that
//! it can populate it), and the writer takes that mapping over when it rolls.
//! Retired mappings are unmapped by the pre-toucher: `munmap` of a populated
//! 64 MiB chunk takes milliseconds and must not happen on the append path.

use super::error::QueueError;
use super::layout::Geometry;
use super::window::Prepare;
use crate::sys::file::{self};
use crate::sys::file_map::{FileAdvice, MapPopulator, WriteMap};
use crate::sys::Errno;
use std::collections::btree_map::{BTreeMap, Entry};
use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug)]
struct Slot {
    /// The mapping, until the writer takes it.
    map: Option<WriteMap>,
    populator: MapPopulator,
}

#[derive(Debug, Default)]
struct Inner {
    slots: BTreeMap<u64, Slot>,
    /// Chunks below this one were left by the writer (retired, or dropped by
    /// retention): a pre-toucher that comes late must not map them again.
    live_from: u64,
    retired: Vec<WriteMap>,
    /// Bytes of `retired[0]` whose page-table entries are already dropped.
    retired_dropped: usize,
}

/// Chunk mappings of one writer.
impl Inner {
    /// Removes the oldest retired mapping (to be dropped, i.e. unmapped, once
    /// the lock is released) and resets the progress of its piecewise drop.
    fn take_oldest_retired(&mut self) -> WriteMap {
        self.retired_dropped = 0;
        self.retired.remove(0)
    }
}

#[derive(Debug)]
pub(crate) struct ChunkMaps {
    path: PathBuf,
    file: Arc<File>,
    geometry: Geometry,
    inner: Mutex<Inner>,
    /// Whether a background thread unmaps retired mappings.
    deferred_unmap: bool,
}

impl ChunkMaps {
    pub(crate) fn new(
        path: PathBuf,
        file: Arc<File>,
        geometry: Geometry,
        deferred_unmap: bool,
    ) -> Self {
        ChunkMaps {
            path,
            file,
            geometry,
            inner: Mutex::new(Inner::default()),
            deferred_unmap,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn map_chunk(&self, c: u64) -> Result<WriteMap, QueueError> {
        let base = self.geometry.chunk_base(c).ok_or_else(|| {
            QueueError::corrupt(
                &self.path,
                u64::MAX,
                format!("chunk {c} lies past any file offset"),
            )
        })?;
        WriteMap::map(&self.file, base, self.geometry.chunk_size as usize, false)
            .map_err(|e| QueueError::sys(&self.path, format!("map chunk {c}"), e))
    }

    fn slot<'a>(&self, inner: &'a mut Inner, c: u64) -> Result<&'a mut Slot, QueueError> {
        match inner.slots.entry(c) {
            Entry::Occupied(o) => Ok(o.into_mut()),
            Entry::Vacant(v) => {
                let map = self.map_chunk(c)?;
                let populator = map.populator();
                Ok(v.insert(Slot {
                    map: Some(map),
                    populator,
                }))
            }
        }
    }

    /// The populator of chunk `c`, mapping the chunk if nobody has yet;
    /// `None` when the writer has already left the chunk (a low-priority
    /// pre-toucher can finish a run long after the writer prepared the same
    /// pieces itself and moved on: mapping the chunk again would keep a
    /// mapping nobody retires).
    pub(crate) fn populator(&self, c: u64) -> Result<Option<MapPopulator>, QueueError> {
        let mut inner = self.lock();
        if c < inner.live_from {
            return Ok(None);
        }
        Ok(Some(self.slot(&mut inner, c)?.populator.clone()))
    }

    /// Whether the writer has left chunk `c`.
    pub(crate) fn left(&self, c: u64) -> bool {
        c < self.lock().live_from
    }

    /// Hands chunk `c`'s writable mapping to the writer (mapping it now if the
    /// pre-toucher has not).
    pub(crate) fn take(&self, c: u64) -> Result<WriteMap, QueueError> {
        let mut inner = self.lock();
        let slot = self.slot(&mut inner, c)?;
        match slot.map.take() {
            Some(m) => Ok(m),
            // Taken before: map it again (only after a failed roll was retried).
            None => self.map_chunk(c),
        }
    }

    /// The writer left chunk `c`: forget its populator and unmap `old` off the
    /// writer's path (or now, without a background thread).
    pub(crate) fn retire(&self, c: u64, old: WriteMap) {
        let mut inner = self.lock();
        inner.slots.remove(&c);
        inner.live_from = inner.live_from.max(c + 1);
        if self.deferred_unmap {
            inner.retired.push(old);
            // A writer that never idles (and has no thread) must not pile them
            // up: beyond two, it unmaps the oldest itself.
            if inner.retired.len() > 2 {
                let oldest = inner.take_oldest_retired();
                drop(inner);
                drop(oldest);
            }
        } else {
            drop(inner);
            drop(old);
        }
    }

    /// Forgets every chunk below `c` (retention dropped them).
    pub(crate) fn forget_below(&self, c: u64) {
        let mut inner = self.lock();
        inner.live_from = inner.live_from.max(c);
        let keep = inner.slots.split_off(&c);
        let dropped = std::mem::replace(&mut inner.slots, keep);
        drop(inner);
        drop(dropped);
    }

    /// Drops the page-table entries of the next 64 KiB of the oldest retired
    /// mapping, or unmaps it once it has none; returns whether there was one.
    pub(crate) fn unmap_retired_step(&self) -> bool {
        let mut inner = self.lock();
        let Some(first) = inner.retired.first() else {
            return false;
        };
        match first.drop_mappings_step(inner.retired_dropped) {
            Some(next) => inner.retired_dropped = next,
            None => {
                let oldest = inner.take_oldest_retired();
                drop(inner);
                drop(oldest);
            }
        }
        true
    }

    /// Unmaps retired mappings (called by the background thread).
    pub(crate) fn unmap_retired(&self) {
        let retired = {
            let mut inner = self.lock();
            inner.retired_dropped = 0;
            std::mem::take(&mut inner.retired)
        };
        drop(retired);
    }
}

/// Allocates (and with `populate`, faults in) pieces of the queue file.
#[derive(Debug)]
pub(crate) struct QueuePrepare {
    maps: Arc<ChunkMaps>,
    populate: bool,
    /// The range `reserve` allocated last (empty: none), which `prepare`
    /// need not allocate again.
    reserved: Mutex<Range<u64>>,
}

impl QueuePrepare {
    /// Prepares pieces of the chunks in `maps`: allocates them, and with
    /// `populate` faults them in.
    pub(crate) fn new(maps: Arc<ChunkMaps>, populate: bool) -> Self {
        QueuePrepare {
            maps,
            populate,
            reserved: Mutex::default(),
        }
    }

    /// Allocates `[offset, offset+len)` of the file.
    fn allocate(&self, offset: u64, len: u64) -> Result<(), QueueError> {
        let m = &self.maps;
        file::allocate(&m.file, offset, len).map_err(|e| match e.errno() {
            Some(Errno::NOSPC) | Some(Errno::FBIG) | Some(Errno::DQUOT) => QueueError::NoSpace {
                path: m.path.clone(),
                offset,
                error: e,
            },
            _ => QueueError::sys(
                &m.path,
                format!("allocate {len} bytes at offset {offset}"),
                e,
            ),
        })
    }

    fn reserved(&self) -> MutexGuard<'_, Range<u64>> {
        self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the writer already left the chunk that holds `offset` (a late
    /// low-priority run): nothing there to allocate or fault in, and a
    /// punched chunk must stay punched.
    fn behind_writer(&self, offset: u64) -> bool {
        self.maps.left(self.maps.geometry.chunk_of(offset))
    }
}

impl Prepare for QueuePrepare {
    fn prepare(&self, offset: u64, len: u64) -> Result<(), QueueError> {
        if self.behind_writer(offset) {
            return Ok(());
        }
        let m = &self.maps;
        let reserved = self.reserved().clone();
        if !(reserved.start <= offset && offset + len <= reserved.end) {
            self.allocate(offset, len)?;
        }
        if self.populate {
            let c = m.geometry.chunk_of(offset);
            let base = m.geometry.chunk_base(c).unwrap_or(u64::MAX);
            let Some(populator) = m.populator(c)? else {
                return Ok(());
            };
            populator
                .advise(
                    (offset - base) as usize,
                    len as usize,
                    FileAdvice::PopulateWrite,
                )
                .map_err(|e| {
                    QueueError::sys(
                        &m.path,
                        format!("populate {len} bytes at offset {offset}"),
                        e,
                    )
                })?;
        }
        Ok(())
    }

    fn housekeeping(&self) {
        self.maps.unmap_retired();
    }

    fn housekeeping_step(&self) -> bool {
        self.maps.unmap_retired_step()
    }

    fn reserve(&self, offset: u64, len: u64) -> Result<bool, QueueError> {
        let range = offset..offset + len;
        if !self.populate || self.behind_writer(offset) || *self.reserved() == range {
            return Ok(false);
        }
        self.allocate(offset, len)?;
        *self.reserved() = range;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::layout::{Geometry, HEADER_LEN, MIN_CHUNK, VERSION};

    #[test]
    fn a_reserved_piece_is_allocated_once_and_populated_by_the_next_prepare() {
        let file = Arc::new(tempfile::tempfile().unwrap());
        let geometry = Geometry {
            version: VERSION,
            chunk_size: MIN_CHUNK,
            flags: 0,
            created_unix_ns: 1,
        };
        let maps = Arc::new(ChunkMaps::new(
            PathBuf::from("q"),
            file.clone(),
            geometry,
            false,
        ));
        let prep = QueuePrepare::new(maps.clone(), true);
        assert!(prep.reserve(HEADER_LEN, 4096).unwrap());
        assert_eq!(file.metadata().unwrap().len(), HEADER_LEN + 4096);
        // The same range again: nothing to do.
        assert!(!prep.reserve(HEADER_LEN, 4096).unwrap());
        prep.prepare(HEADER_LEN, 4096).unwrap();
        assert!(maps.populator(0).unwrap().is_some());
        // Without populate there is no second step to split off.
        let plain = QueuePrepare::new(maps.clone(), false);
        assert!(!plain.reserve(HEADER_LEN + 4096, 4096).unwrap());
        assert_eq!(file.metadata().unwrap().len(), HEADER_LEN + 4096);
        // A chunk the writer left is never allocated again.
        let map = maps.take(0).unwrap();
        maps.retire(0, map);
        assert!(!prep.reserve(HEADER_LEN + 4096, 4096).unwrap());
        assert_eq!(file.metadata().unwrap().len(), HEADER_LEN + 4096);
    }

    #[test]
    fn a_late_preparation_of_a_chunk_the_writer_left_maps_nothing() {
        let file = Arc::new(tempfile::tempfile().unwrap());
        let path = PathBuf::from("q");
        let geometry = Geometry {
            version: VERSION,
            chunk_size: MIN_CHUNK,
            flags: 0,
            created_unix_ns: 1,
        };
        let maps = Arc::new(ChunkMaps::new(path, file.clone(), geometry, false));
        let prep = QueuePrepare::new(maps.clone(), true);
        prep.prepare(HEADER_LEN, 4096).unwrap();
        assert!(maps.populator(0).unwrap().is_some());
        let map = maps.take(0).unwrap();
        maps.retire(0, map);
        assert!(maps.left(0));
        // The late run: succeeds, and neither maps chunk 0 again nor
        // allocates past what was there.
        let len_before = file.metadata().unwrap().len();
        prep.prepare(HEADER_LEN + 4096, 4096).unwrap();
        assert!(maps.populator(0).unwrap().is_none());
        assert!(maps.lock().slots.is_empty(), "chunk 0 mapped again");
        assert_eq!(file.metadata().unwrap().len(), len_before);
        // Chunks ahead still work, and retention's forget moves the line too.
        assert!(maps.populator(1).unwrap().is_some());
        maps.forget_below(3);
        assert!(maps.left(2) && !maps.left(3));
    }
}
