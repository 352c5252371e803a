//! Background population: worker threads fault a mapping in, in order, from
//! its start, while the owner already uses it.
//!
//! Work is handed out in fixed chunks through one counter, so the workers
//! advance together; the *frontier* is the end of the longest fully populated
//! prefix. A waiter first helps (populates unclaimed chunks below the byte it
//! needs), then blocks on a condition variable until the frontier passes it.

use crate::sys::mem::{Advice, Populator};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Bytes a worker populates per claim: large enough to amortise the
/// `madvise` call, small enough that the frontier moves smoothly.
pub const CHUNK: usize = 4 << 20;

#[derive(Debug, Default)]
struct Progress {
    /// Chunks finished, by index.
    done: Vec<bool>,
    /// Number of leading chunks that are all done.
    prefix_chunks: usize,
    /// The first error a worker hit; workers stop after it.
    error: Option<String>,
}

#[derive(Debug)]
struct Shared {
    /// Offset of the first byte to populate within the mapping.
    base: usize,
    /// Bytes to populate from `base`.
    len: usize,
    next_chunk: AtomicUsize,
    cancel: AtomicBool,
    progress: Mutex<Progress>,
    changed: Condvar,
    /// Frontier in bytes, readable without the lock.
    frontier: AtomicUsize,
}

impl Shared {
    fn chunks(&self) -> usize {
        self.len.div_ceil(CHUNK)
    }

    fn finish(&self, chunk: usize, result: Result<(), String>) {
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(()) => {
                p.done[chunk] = true;
                while p.prefix_chunks < p.done.len() && p.done[p.prefix_chunks] {
                    p.prefix_chunks += 1;
                }
                let frontier = (p.prefix_chunks * CHUNK).min(self.len);
                self.frontier.store(frontier, Ordering::Release);
            }
            Err(e) => {
                if p.error.is_none() {
                    p.error = Some(e);
                }
                self.cancel.store(true, Ordering::Relaxed);
            }
        }
        drop(p);
        self.changed.notify_all();
    }
}

/// Populates a mapping in the background; stops and joins its workers on drop.
#[derive(Debug)]
pub struct BackgroundPopulate {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    populator: Populator,
    advice: Advice,
}

impl BackgroundPopulate {
    /// Starts `threads` workers (at least one) populating all of `populator`'s mapping
    /// with `advice` (normally `MADV_POPULATE_WRITE`).
    pub fn start(populator: Populator, threads: usize, advice: Advice) -> std::io::Result<Self> {
        let len = populator.len();
        Self::start_range(populator, 0, len, threads, advice)
    }

    /// Like [`start`](Self::start), for bytes `[base, base+len)` of the mapping only;
    /// frontiers and waits are then relative to `base`.
    pub fn start_range(
        populator: Populator,
        base: usize,
        len: usize,
        threads: usize,
        advice: Advice,
    ) -> std::io::Result<Self> {
        let chunks = len.div_ceil(CHUNK);
        let shared = Arc::new(Shared {
            base,
            len,
            next_chunk: AtomicUsize::new(0),
            cancel: AtomicBool::new(false),
            progress: Mutex::new(Progress {
                done: vec![false; chunks],
                ..Progress::default()
            }),
            changed: Condvar::new(),
            frontier: AtomicUsize::new(0),
        });
        let mut workers = Vec::new();
        for i in 0..threads.clamp(1, chunks.max(1)) {
            let worker_shared = Arc::clone(&shared);
            let worker_populator = populator.clone();
            let handle = std::thread::Builder::new()
                .name(format!("pagewise-populate-{i}"))
                .spawn(move || worker(&worker_shared, &worker_populator, advice));
            match handle {
                Ok(h) => workers.push(h),
                Err(e) => {
                    drop(BackgroundPopulate {
                        shared,
                        workers,
                        populator,
                        advice,
                    });
                    return Err(e);
                }
            }
        }
        Ok(BackgroundPopulate {
            shared,
            workers,
            populator,
            advice,
        })
    }

    /// Whether every chunk is populated (or the work stopped on an error). Lock-free.
    pub fn is_done(&self) -> bool {
        self.frontier() >= self.shared.len || self.shared.cancel.load(Ordering::Relaxed)
    }

    /// Bytes from the start that are populated for sure. Lock-free.
    pub fn frontier(&self) -> usize {
        self.shared.frontier.load(Ordering::Acquire)
    }

    /// Blocks until bytes `[0, n)` are populated, or a worker failed.
    ///
    /// The waiting thread does not just sleep: while chunks below `n` are
    /// still unclaimed it claims and populates them itself (with the same
    /// `madvise`, so it takes no page fault), which puts every core on the
    /// zeroing work when the caller catches up with the frontier.
    pub fn wait_until(&self, n: usize) -> Result<(), String> {
        let n = n.min(self.shared.len);
        if self.frontier() >= n {
            return Ok(());
        }
        let needed_chunks = n.div_ceil(CHUNK);
        loop {
            let next = self.shared.next_chunk.load(Ordering::Relaxed);
            if next >= needed_chunks || self.shared.cancel.load(Ordering::Relaxed) {
                break;
            }
            if self
                .shared
                .next_chunk
                .compare_exchange(next, next + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                populate_chunk(&self.shared, &self.populator, self.advice, next);
            }
        }
        let mut p = self
            .shared
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(e) = &p.error {
                return Err(e.clone());
            }
            if (p.prefix_chunks * CHUNK).min(self.shared.len) >= n {
                return Ok(());
            }
            p = self
                .shared
                .changed
                .wait(p)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

fn populate_chunk(shared: &Shared, populator: &Populator, advice: Advice, chunk: usize) {
    let offset = chunk * CHUNK;
    let len = CHUNK.min(shared.len - offset);
    let offset = shared.base + offset;
    let result = populator
        .advise(offset, len, advice)
        .map_err(|e| format!("background populate at offset {offset}: {e}"));
    shared.finish(chunk, result);
}

fn worker(shared: &Shared, populator: &Populator, advice: Advice) {
    let chunks = shared.chunks();
    while !shared.cancel.load(Ordering::Relaxed) {
        let chunk = shared.next_chunk.fetch_add(1, Ordering::Relaxed);
        if chunk >= chunks {
            return;
        }
        populate_chunk(shared, populator, advice, chunk);
    }
}

impl Drop for BackgroundPopulate {
    fn drop(&mut self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mem::{AnonMapping, MapOptions};

    #[test]
    fn populates_everything_and_reports_the_frontier() {
        let m = AnonMapping::map(3 * CHUNK + 4096, MapOptions::default()).unwrap();
        let bg = BackgroundPopulate::start(m.populator(), 2, Advice::PopulateWrite).unwrap();
        bg.wait_until(CHUNK).unwrap();
        assert!(bg.frontier() >= CHUNK);
        bg.wait_until(usize::MAX).unwrap();
        assert_eq!(bg.frontier(), m.len());
    }

    #[test]
    fn an_error_reaches_waiters() {
        // A hugetlb mapping made with MAP_NORESERVE while the pool is empty cannot be
        // populated: MADV_POPULATE_WRITE fails (it never SIGBUSes), and the waiter must
        // get that error instead of hanging.
        let two_mib = 2 << 20;
        let pool_free = crate::host::hugetlb::available(two_mib);
        if pool_free != 0 {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::NoHugetlb,
                "needs an empty 2 MiB hugetlb pool, found {pool_free} free pages"
            );
        }
        let options = MapOptions {
            hugetlb_page_size: Some(two_mib),
            no_reserve: true,
            populate: false,
        };
        let m = AnonMapping::map(2 * two_mib, options).unwrap();
        let bg = BackgroundPopulate::start(m.populator(), 1, Advice::PopulateWrite).unwrap();
        let err = bg.wait_until(2 * two_mib).unwrap_err();
        assert!(err.contains("background populate at offset 0"), "{err}");
        // The error sticks: a later wait fails the same way.
        assert_eq!(bg.wait_until(1), Err(err));
    }
}
