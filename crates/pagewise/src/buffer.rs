//! A growable byte buffer that keeps its pages.
//!
//! `malloc` above glibc's mmap threshold maps fresh memory that the kernel
//! faults in and zeroes page by page, and `free` unmaps it again: a loop that
//! allocates, fills and frees a large buffer pays for every page on every
//! iteration. A [`Buffer`] reserves address space for its largest expected
//! size once (nothing is committed or touched), commits pages as it grows,
//! and keeps them when it is cleared or shrunk, so after the first pass a
//! reuse costs no page fault at all.
//!
//! ```
//! use pagewise::buffer::Buffer;
//! use std::io::Write;
//! let mut buf = Buffer::new(64 << 20)?;          // reserve 64 MiB, commit nothing
//! for round in 0..3u8 {
//!     buf.clear();                                // keeps the pages
//!     buf.resize(16 << 20, round)?;               // faults only in round 0
//!     write!(buf, "round {round}")?;
//! }
//! assert_eq!(buf.report().moves, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::region::background::BackgroundPopulate;
use crate::sys::mem::{Advice, Discard, Reservation};
use crate::sys::SysError;
use serde::Serialize;
use std::ops::{Deref, DerefMut};

const BASE_PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;
/// Smallest commit step without huge pages: a few pages per `mprotect`.
const SMALL_GRANULE: usize = 64 << 10;

/// How growth is faulted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pretouch {
    /// Pages fault in when first written (once per page for the buffer's life).
    #[default]
    None,
    /// Each growth is populated (`MADV_POPULATE_WRITE`) before the call returns.
    Eager,
    /// Each growth is populated by a background thread while the caller writes.
    Background,
}

/// Why a buffer operation failed. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The requested length does not fit the address space.
    #[error("capacity overflow: {requested} bytes cannot be addressed (the limit is isize::MAX)")]
    CapacityOverflow {
        /// The length that was asked for.
        requested: u128,
    },
    /// Reserving address space failed.
    #[error("could not reserve {bytes} bytes of address space: {error} (check `ulimit -v` and vm.overcommit_memory)")]
    Reserve {
        /// Bytes asked for.
        bytes: usize,
        /// The failing call.
        error: SysError,
    },
    /// Committing pages failed (strict overcommit or memory limits).
    #[error("could not commit memory: {0} (vm.overcommit_memory=2 or a memory limit?)")]
    Commit(SysError),
    /// Moving the pages to a larger reservation failed; the buffer is unchanged.
    #[error("could not grow past the reserved maximum: {0}")]
    Move(SysError),
    /// Populating failed.
    #[error("could not populate new pages: {0}")]
    Populate(String),
    /// Releasing unused pages failed.
    #[error("could not release unused pages: {0}")]
    Release(SysError),
}

impl From<BufferError> for std::io::Error {
    fn from(e: BufferError) -> Self {
        let kind = match e {
            BufferError::CapacityOverflow { .. } => std::io::ErrorKind::InvalidInput,
            _ => std::io::ErrorKind::OutOfMemory,
        };
        std::io::Error::new(kind, e)
    }
}

/// Options for [`Buffer::with_options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferOptions {
    /// Bytes of address space to reserve up front.
    pub max_capacity: usize,
    /// Ask for transparent huge pages (`MADV_HUGEPAGE`, 2 MiB-aligned reservation
    /// and 2 MiB commit steps).
    pub huge_pages: bool,
    /// How growth is faulted in.
    pub pretouch: Pretouch,
}

/// A snapshot of a buffer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BufferReport {
    /// Bytes in use.
    pub len: usize,
    /// Bytes committed (readable and writable, kept across `clear`).
    pub committed: usize,
    /// Bytes of address space reserved.
    pub reserved: usize,
    /// How many times growth passed the reservation and moved the pages
    /// (`mremap`); the first reservation of a zero-capacity buffer is not a move.
    pub moves: u32,
    /// Whether THP was requested.
    pub huge_pages: bool,
    /// The pre-touch mode.
    pub pretouch: Pretouch,
}

/// A growable byte buffer over reserved address space that keeps its pages.
///
/// Costs: creating it is one `mmap` of inaccessible address space; growth
/// commits in steps (one `mprotect` each, doubling); `clear`, `truncate`
/// and shrinking cost nothing and keep the pages; growing past the reserved
/// maximum moves the pages once with `mremap` (no copy) and is reported.
#[derive(Debug)]
pub struct Buffer {
    // Background jobs go first so they are joined before the reservation is unmapped.
    background: Vec<BackgroundPopulate>,
    reservation: Option<Reservation>,
    len: usize,
    options: BufferOptions,
    moves: u32,
}

impl Buffer {
    /// A buffer that can grow to `max_capacity` bytes without moving; 4 KiB
    /// pages, no pre-touch. `max_capacity` may be 0 (the first write then reserves).
    pub fn new(max_capacity: usize) -> Result<Buffer, BufferError> {
        Self::with_options(BufferOptions {
            max_capacity,
            huge_pages: false,
            pretouch: Pretouch::None,
        })
    }

    /// A buffer with explicit options. The first buffer of a process also
    /// sets up `pagewise::copy` (CPU detection, a few microseconds), so that
    /// no fill or copy into the buffer pays for it later.
    pub fn with_options(options: BufferOptions) -> Result<Buffer, BufferError> {
        // The copy and fill detect the CPU on first use: do it here, not in
        // the first `resize` or write.
        crate::copy::global_copier();
        let mut buffer = Buffer {
            background: Vec::new(),
            reservation: None,
            len: 0,
            options,
            moves: 0,
        };
        if options.max_capacity > 0 {
            buffer.reservation = Some(buffer.reserve_space(options.max_capacity)?);
        }
        Ok(buffer)
    }

    fn granule(&self) -> usize {
        if self.options.huge_pages {
            HUGE_PAGE
        } else {
            SMALL_GRANULE
        }
    }

    fn reserve_space(&self, bytes: usize) -> Result<Reservation, BufferError> {
        let rounded = round_up(bytes, self.granule())?;
        let align = if self.options.huge_pages {
            HUGE_PAGE
        } else {
            BASE_PAGE
        };
        let reservation =
            Reservation::reserve(rounded, align).map_err(|source| BufferError::Reserve {
                bytes: rounded,
                error: source,
            })?;
        if self.options.huge_pages {
            reservation
                .advise_all(Advice::HugePage)
                .map_err(BufferError::Commit)?;
        }
        Ok(reservation)
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes that can be used without committing more memory.
    pub fn capacity(&self) -> usize {
        self.reservation.as_ref().map_or(0, Reservation::committed)
    }

    /// Bytes the buffer can grow to without moving.
    pub fn max_capacity(&self) -> usize {
        self.reservation.as_ref().map_or(0, Reservation::reserved)
    }

    /// The current state, including how often growth had to move the pages.
    pub fn report(&self) -> BufferReport {
        BufferReport {
            len: self.len,
            committed: self.capacity(),
            reserved: self.max_capacity(),
            moves: self.moves,
            huge_pages: self.options.huge_pages,
            pretouch: self.options.pretouch,
        }
    }

    /// Makes room for `additional` more bytes: commits (and pre-touches) as
    /// needed, or moves once to a reservation twice as large when the
    /// maximum is passed.
    pub fn reserve(&mut self, additional: usize) -> Result<(), BufferError> {
        let needed = self
            .len
            .checked_add(additional)
            .ok_or(BufferError::CapacityOverflow {
                requested: self.len as u128 + additional as u128,
            })?;
        if needed > isize::MAX as usize {
            return Err(BufferError::CapacityOverflow {
                requested: needed as u128,
            });
        }
        if needed <= self.capacity() {
            return Ok(());
        }
        if needed > self.max_capacity() {
            self.grow_reservation(needed)?;
        }
        let reservation = self.reservation.as_mut().expect("reserved above");
        let old = reservation.committed();
        let doubled = old.saturating_mul(2).max(needed);
        let target = round_up(
            doubled,
            if self.options.huge_pages {
                HUGE_PAGE
            } else {
                SMALL_GRANULE
            },
        )?
        .min(reservation.reserved());
        let target = target.max(round_up(needed, BASE_PAGE)?);
        reservation.commit(target).map_err(BufferError::Commit)?;
        self.pretouch_growth(old, target)
    }

    fn grow_reservation(&mut self, needed: usize) -> Result<(), BufferError> {
        let new_max = needed.max(self.max_capacity().saturating_mul(2));
        let new_max = round_up(new_max, self.granule())?;
        // Pre-touch workers hold the old range; finish them before moving it.
        self.background.clear();
        let Some(old) = self.reservation.take() else {
            // A zero-capacity buffer reserves on first growth: nothing moves.
            self.reservation = Some(self.reserve_space(new_max)?);
            return Ok(());
        };
        let align = if self.options.huge_pages {
            HUGE_PAGE
        } else {
            BASE_PAGE
        };
        match old.move_to_larger(new_max, align) {
            Ok(moved) => {
                // Keep the moved pages first: a failed advice below must not lose them.
                self.moves += 1;
                let moved = self.reservation.insert(moved);
                if self.options.huge_pages {
                    moved
                        .advise_all(Advice::HugePage)
                        .map_err(BufferError::Commit)?;
                }
                Ok(())
            }
            Err((unchanged, e)) => {
                self.reservation = Some(unchanged);
                Err(BufferError::Move(e))
            }
        }
    }

    fn pretouch_growth(&mut self, from: usize, to: usize) -> Result<(), BufferError> {
        let Some(reservation) = self.reservation.as_ref() else {
            return Ok(());
        };
        if to <= from {
            return Ok(());
        }
        match self.options.pretouch {
            Pretouch::None => Ok(()),
            Pretouch::Eager => reservation
                .advise(from, to - from, Advice::PopulateWrite)
                .map_err(|e| BufferError::Populate(e.to_string())),
            Pretouch::Background => {
                self.background.retain(|job| !job.is_done());
                let job = BackgroundPopulate::start_range(
                    reservation.populator(),
                    from,
                    to - from,
                    1,
                    Advice::PopulateWrite,
                )
                .map_err(|e| BufferError::Populate(e.to_string()))?;
                self.background.push(job);
                Ok(())
            }
        }
    }

    /// Appends one byte.
    pub fn push(&mut self, byte: u8) -> Result<(), BufferError> {
        self.extend_from_slice(&[byte])
    }

    /// Appends bytes (copied with [`crate::copy::copy`]).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), BufferError> {
        self.reserve(bytes.len())?;
        let start = self.len;
        let reservation = self.reservation.as_mut().expect("reserved");
        let equal = crate::copy::copy(
            &mut reservation.as_mut_slice()[start..start + bytes.len()],
            bytes,
        );
        debug_assert!(
            equal.is_ok(),
            "the destination was cut to the source's length"
        );
        self.len += bytes.len();
        Ok(())
    }

    /// Sets the length to `new_len`, filling new bytes with `value`
    /// ([`crate::copy::fill`]: non-temporal stores for fills larger than
    /// about half the last-level cache); shrinking keeps the pages.
    pub fn resize(&mut self, new_len: usize, value: u8) -> Result<(), BufferError> {
        if new_len > self.len {
            self.reserve(new_len - self.len)?;
            let start = self.len;
            let reservation = self.reservation.as_mut().expect("reserved");
            crate::copy::fill(&mut reservation.as_mut_slice()[start..new_len], value);
        }
        self.len = new_len;
        Ok(())
    }

    /// Shortens to `len` bytes (no effect if already shorter); keeps the pages.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Empties the buffer; keeps the pages, so refilling takes no page fault.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Gives back the physical pages past the current length (rounded up to
    /// a page) with `MADV_DONTNEED` (freed now) or `MADV_FREE` (freed under
    /// memory pressure). They stay committed: regrowing faults them in again.
    pub fn release_unused(&mut self, how: Discard) -> Result<(), BufferError> {
        // Background pre-touch of the range would race with releasing it.
        self.background.clear();
        let Some(reservation) = self.reservation.as_mut() else {
            return Ok(());
        };
        // With huge pages, keep whole 2 MiB pages so the last one is not split.
        let page = if self.options.huge_pages {
            HUGE_PAGE
        } else {
            BASE_PAGE
        };
        let keep = round_up(self.len, page)?.min(reservation.committed());
        let unused = reservation.committed() - keep;
        if unused > 0 {
            reservation
                .discard(keep, unused, how)
                .map_err(BufferError::Release)?;
        }
        Ok(())
    }

    /// The bytes in use.
    pub fn as_slice(&self) -> &[u8] {
        match &self.reservation {
            Some(r) => &r.as_slice()[..self.len],
            None => &[],
        }
    }

    /// The bytes in use, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len;
        match &mut self.reservation {
            Some(r) => &mut r.as_mut_slice()[..len],
            None => &mut [],
        }
    }
}

fn round_up(n: usize, to: usize) -> Result<usize, BufferError> {
    n.checked_next_multiple_of(to)
        .filter(|&r| r <= isize::MAX as usize)
        .ok_or(BufferError::CapacityOverflow {
            requested: n as u128,
        })
}

impl Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.extend_from_slice(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.extend_from_slice(buf)?;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_within_the_reservation_without_moving() {
        let mut b = Buffer::new(8 << 20).unwrap();
        assert_eq!(b.capacity(), 0);
        b.resize(3 << 20, 7).unwrap();
        assert!(b.capacity() >= 3 << 20);
        assert_eq!(b.max_capacity(), 8 << 20);
        assert_eq!(b.report().moves, 0);
        assert!(b.iter().all(|&x| x == 7));
    }

    #[test]
    fn clear_keeps_committed_pages() {
        let mut b = Buffer::new(4 << 20).unwrap();
        b.resize(1 << 20, 1).unwrap();
        let committed = b.capacity();
        b.clear();
        assert_eq!(b.len(), 0);
        assert_eq!(b.capacity(), committed);
    }

    #[test]
    fn growth_past_the_maximum_moves_once_and_keeps_contents() {
        let mut b = Buffer::new(1 << 20).unwrap();
        b.extend_from_slice(b"hello").unwrap();
        b.resize(3 << 20, 9).unwrap();
        let r = b.report();
        assert_eq!(r.moves, 1);
        assert!(r.reserved >= 3 << 20);
        assert_eq!(&b[..5], b"hello");
        assert_eq!(b[(3 << 20) - 1], 9);
    }

    #[test]
    fn zero_capacity_buffer_works() {
        let mut b = Buffer::new(0).unwrap();
        assert!(b.is_empty());
        assert_eq!(b.as_slice(), b"");
        b.push(1).unwrap();
        assert_eq!(b.as_slice(), [1]);
        assert_eq!(b.report().moves, 0, "the first reservation is not a move");
        assert!(b.max_capacity() > 0);
    }

    #[test]
    fn capacity_overflow_is_a_clear_error() {
        let mut b = Buffer::new(4096).unwrap();
        b.push(0).unwrap();
        let err = b.reserve(usize::MAX).unwrap_err();
        assert!(matches!(err, BufferError::CapacityOverflow { .. }), "{err}");
        assert!(err.to_string().contains("capacity overflow"));
        let err = b.reserve(isize::MAX as usize).unwrap_err();
        assert!(matches!(err, BufferError::CapacityOverflow { .. }), "{err}");
        assert_eq!(
            b.as_slice(),
            [0],
            "a failed reserve leaves the buffer as it was"
        );
    }

    #[test]
    fn release_unused_zeroes_the_tail_but_keeps_commit() {
        let mut b = Buffer::new(1 << 20).unwrap();
        b.resize(512 << 10, 3).unwrap();
        b.truncate(4096);
        let committed = b.capacity();
        b.release_unused(Discard::DontNeed).unwrap();
        assert_eq!(b.capacity(), committed);
        b.resize(8192, 0xff).unwrap();
        assert_eq!(b[4095], 3);
        assert_eq!(b[4096], 0xff);
    }

    #[test]
    fn pretouch_modes_populate_growth() {
        for pretouch in [Pretouch::Eager, Pretouch::Background] {
            let mut b = Buffer::with_options(BufferOptions {
                max_capacity: 32 << 20,
                huge_pages: true,
                pretouch,
            })
            .unwrap();
            b.resize(20 << 20, 1).unwrap();
            assert_eq!(b.len(), 20 << 20);
            assert!(b.iter().all(|&x| x == 1));
        }
    }
}
