//! Shared (`MAP_SHARED`) mappings of files, and word-sized atomic access to
//! them: the memory other processes see.
//!
//! Three handles share one mapped range, which is unmapped when the last
//! of them goes:
//!
//! - [`ReadMap`]: mapped `PROT_READ`; loads, copies out, futex waits.
//! - [`WriteMap`]: mapped `PROT_READ | PROT_WRITE`; also stores and writes.
//!   Not `Clone`: one owner writes.
//! - [`MapPopulator`]: may only ask the kernel to fault pages in or apply advice;
//!   it never reads or writes the bytes, so it can run on another thread.
//!
//! Every access is bounds-checked against the mapping and word accesses are
//! alignment-checked; out-of-range or misaligned requests return `None`/`false`
//! instead of touching memory. What bounds checks cannot see is the file
//! behind the mapping: an access to a page past the file's current end (the
//! file was truncated) raises SIGBUS. The loads and copies out
//! (`load_u64`, `load_u32`, `copy_out`) go through [`super::sigbus`], which
//! catches that and returns `None`/`false` too; the caller tells the two
//! apart by the file's size. Stores, [`ReadMap::copy_out_with`] (the routine
//! sees a slice) and [`WriteMap::slice_mut`] are not guarded: a truncation
//! under them kills the process, so writers keep their files to themselves.
//!
//! The bytes are shared with other processes, so Rust references to them are
//! never handed out except [`WriteMap::slice_mut`], which borrows the only
//! writable handle mutably. Words that other processes read concurrently are
//! accessed only through atomics; other bytes are copied with
//! `copy_nonoverlapping` after an acquire load has ordered them (the
//! publication protocol of the caller makes those bytes immutable by then).

use super::{SysError, SysResult};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `MADV_POPULATE_READ` (Linux 5.14).
const MADV_POPULATE_READ: libc::c_int = 22;
/// `MADV_POPULATE_WRITE` (Linux 5.14).
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Non-destructive advice for a file mapping. `madvise` advice values are
/// exclusive, not flags: each call replaces the range's previous advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAdvice {
    /// `MADV_NORMAL`.
    Normal,
    /// `MADV_WILLNEED`: start reading the range in.
    WillNeed,
    /// `MADV_SEQUENTIAL`: aggressive read-ahead, early reclaim.
    Sequential,
    /// `MADV_POPULATE_READ`: map the pages readable now (reports errors).
    PopulateRead,
    /// `MADV_POPULATE_WRITE`: allocate and map the pages writable now; on a
    /// shared mapping this dirties them. Errors (`ENOMEM`, `EFAULT` past the
    /// end of the file) are returned, never raised as SIGBUS.
    PopulateWrite,
    /// `MADV_DONTNEED`: drop this process's page-table entries for the range.
    /// On a shared file mapping the file keeps its bytes; the next access
    /// maps them again (a page fault). Lets a large mapping be taken down in
    /// small steps before its `munmap`, which is then cheap.
    DropMappings,
}

impl FileAdvice {
    fn raw(self) -> (libc::c_int, &'static str) {
        match self {
            FileAdvice::Normal => (libc::MADV_NORMAL, "madvise(MADV_NORMAL)"),
            FileAdvice::WillNeed => (libc::MADV_WILLNEED, "madvise(MADV_WILLNEED)"),
            FileAdvice::Sequential => (libc::MADV_SEQUENTIAL, "madvise(MADV_SEQUENTIAL)"),
            FileAdvice::PopulateRead => (MADV_POPULATE_READ, "madvise(MADV_POPULATE_READ)"),
            FileAdvice::PopulateWrite => (MADV_POPULATE_WRITE, "madvise(MADV_POPULATE_WRITE)"),
            FileAdvice::DropMappings => (libc::MADV_DONTNEED, "madvise(MADV_DONTNEED)"),
        }
    }
}

/// Bytes per step of [`ReadMap::drop_mappings_step`] / [`WriteMap::drop_mappings_step`]:
/// small enough for a latency path (64 KiB of populated pages, one or two
/// microseconds; 1 MiB took tens, which a record arriving meanwhile waited for).
pub const DROP_STEP: usize = 64 << 10;

/// The mapped range; unmapped when the last handle drops.
#[derive(Debug)]
struct RawMap {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: RawMap is an address and a length. All byte access goes through bounds-checked
// methods that use atomics or copies (see the module doc); munmap and madvise are
// thread-safe.
unsafe impl Send for RawMap {}
// SAFETY: as above; &RawMap exposes no references to the bytes.
unsafe impl Sync for RawMap {}

impl Drop for RawMap {
    fn drop(&mut self) {
        // SAFETY: the range came from mmap and no handle refers to it any more.
        unsafe {
            libc::munmap(self.addr.as_ptr().cast(), self.len);
        }
    }
}

fn erange(call: &'static str) -> SysError {
    SysError {
        call,
        source: std::io::Error::from_raw_os_error(libc::ERANGE),
    }
}

impl RawMap {
    fn map(
        file: &File,
        offset: u64,
        len: usize,
        writable: bool,
        populate: bool,
    ) -> SysResult<RawMap> {
        let call = if writable {
            "mmap(MAP_SHARED, PROT_WRITE)"
        } else {
            "mmap(MAP_SHARED, PROT_READ)"
        };
        if len == 0 {
            return Err(SysError {
                call,
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let offset = libc::off_t::try_from(offset).map_err(|_| erange(call))?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let mut flags = libc::MAP_SHARED;
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a new mapping at a kernel-chosen address aliases nothing in this process;
        // the fd is open for the access requested (the kernel checks).
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                file.as_raw_fd(),
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(SysError::last(call));
        }
        let addr = NonNull::new(addr.cast::<u8>()).ok_or_else(|| erange(call))?;
        // Before anyone reads the mapping, so that the first read is not the one that installs it.
        super::sigbus::install();
        Ok(RawMap { addr, len })
    }

    /// The address of `[offset, offset+size)` if it lies inside the mapping and
    /// `offset` is a multiple of `align`.
    #[inline]
    fn at(&self, offset: usize, size: usize, align: usize) -> Option<*mut u8> {
        let end = offset.checked_add(size)?;
        if end > self.len || !offset.is_multiple_of(align) {
            return None;
        }
        // SAFETY: offset <= len, so the result stays inside (or one past) the mapping.
        Some(unsafe { self.addr.as_ptr().add(offset) })
    }

    /// `order` documents the caller's intent: the guarded load is one aligned
    /// `mov`, which on x86-64 is atomic and has acquire (and, since stores
    /// that need it are `SeqCst`, sequentially consistent) semantics, and the
    /// call is opaque to the compiler.
    #[inline]
    fn load_u64(&self, offset: usize, _order: Ordering) -> Option<u64> {
        let p = self.at(offset, 8, 8)?;
        // SAFETY: p is 8-aligned and inside the live mapping; every pagewise access to this
        // word is atomic (one aligned load or store); other processes follow the same protocol.
        unsafe { super::sigbus::load_u64(p.cast()) }
    }

    #[inline]
    fn load_u32(&self, offset: usize, _order: Ordering) -> Option<u32> {
        let p = self.at(offset, 4, 4)?;
        // SAFETY: as load_u64, for a 4-aligned word.
        unsafe { super::sigbus::load_u32(p.cast()) }
    }

    #[inline]
    fn copy_out(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(p) = self.at(offset, dst.len(), 1) else {
            return false;
        };
        // SAFETY: [p, p+len) is inside the live mapping and readable; dst is a distinct
        // buffer we own. The caller ordered these bytes with an acquire load.
        unsafe { super::sigbus::copy(dst, p) }
    }

    #[inline]
    fn copy_out_with(&self, offset: usize, dst: &mut [u8], routine: fn(&mut [u8], &[u8])) -> bool {
        let Some(p) = self.at(offset, dst.len(), 1) else {
            return false;
        };
        // SAFETY: [p, p+len) is inside the live mapping and readable for the duration of
        // the call (the mapping outlives &self). The only callers (crate-internal: the
        // queue reader, and `copy::Routine::copy_out`, which takes only pagewise's own two
        // routines and serves the benchmark's floor reader) pass bytes they saw published
        // with an acquire load and that their protocol never writes again, so the shared
        // view is not mutated while borrowed. dst is a distinct buffer we own.
        let src = unsafe { std::slice::from_raw_parts(p.cast_const(), dst.len()) };
        routine(dst, src);
        true
    }

    /// One step of taking the mapping down: drops the page-table entries of
    /// the next `step` bytes from `done`. `Some(new done)` while bytes
    /// remain; `None` when none do or the call failed: the caller then drops
    /// the handle (the `munmap`, cheap once no entries are left).
    fn drop_mappings_step(&self, done: usize, step: usize) -> Option<usize> {
        let len = step.max(1).min(self.len.saturating_sub(done));
        if len == 0 || self.madvise(done, len, FileAdvice::DropMappings).is_err() {
            return None;
        }
        Some(done + len)
    }

    fn madvise(&self, offset: usize, len: usize, advice: FileAdvice) -> SysResult<()> {
        let (raw, call) = advice.raw();
        if len == 0 {
            return Ok(());
        }
        let p = self.at(offset, len, 1).ok_or_else(|| erange(call))?;
        loop {
            // SAFETY: [p, p+len) lies inside a mapping this process owns; the advice values
            // allowed here never change the bytes a process reads back (every mapping here is
            // MAP_SHARED of a file, so even MADV_DONTNEED only drops page-table entries).
            let rc = unsafe { libc::madvise(p.cast(), len, raw) };
            if rc == 0 {
                return Ok(());
            }
            let err = SysError::last(call);
            // MADV_POPULATE_* return EINTR when a signal arrives; retrying is documented.
            if err.errno() != Some(crate::sys::Errno::INTR) {
                return Err(err);
            }
        }
    }

    fn resident_bytes(&self, offset: usize, len: usize) -> SysResult<u64> {
        let page = super::base_page_size();
        if !offset.is_multiple_of(page) {
            return Err(erange("mincore"));
        }
        let p = self.at(offset, len, 1).ok_or_else(|| erange("mincore"))?;
        let pages = len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: the range is inside our mapping (page-aligned start checked above); vec has
        // one byte per page as mincore requires.
        let rc = unsafe { libc::mincore(p.cast(), len, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(SysError::last("mincore"));
        }
        Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
    }

    fn futex_wait(
        &self,
        offset: usize,
        expected: u32,
        timeout: Option<Duration>,
    ) -> SysResult<bool> {
        let p = self
            .at(offset, 4, 4)
            .ok_or_else(|| erange("futex(FUTEX_WAIT)"))?;
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: p is a 4-aligned word inside a live shared mapping; FUTEX_WAIT (shared, not
        // PRIVATE, so other processes mapping the same file page can wake us) only reads it.
        // ts_ptr is null or points to a timespec that outlives the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                p,
                libc::FUTEX_WAIT,
                expected,
                ts_ptr,
                0usize,
                0u32,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let err = SysError::last("futex(FUTEX_WAIT)");
        match err.errno() {
            Some(crate::sys::Errno::AGAIN) | Some(crate::sys::Errno::INTR) => Ok(true),
            Some(crate::sys::Errno::TIMEDOUT) => Ok(false),
            _ => Err(err),
        }
    }

    fn futex_wake(&self, offset: usize, count: u32) -> SysResult<u32> {
        let p = self
            .at(offset, 4, 4)
            .ok_or_else(|| erange("futex(FUTEX_WAKE)"))?;
        // SAFETY: p is a 4-aligned word inside a live shared mapping; FUTEX_WAKE does not
        // access it beyond resolving its key.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                p,
                libc::FUTEX_WAKE,
                count.min(i32::MAX as u32),
                0usize,
                0usize,
                0u32,
            )
        };
        if rc < 0 {
            return Err(SysError::last("futex(FUTEX_WAKE)"));
        }
        Ok(rc as u32)
    }
}

/// A read-only shared mapping of part of a file.
#[derive(Debug, Clone)]
pub struct ReadMap {
    raw: Arc<RawMap>,
}

impl ReadMap {
    /// Maps `len` bytes of `file` from `offset` (page-aligned) with `PROT_READ`.
    /// The range may extend past the end of the file; touching pages past
    /// the end raises SIGBUS, so callers only read below a size they checked.
    /// One `mmap` call.
    pub fn map(file: &File, offset: u64, len: usize) -> SysResult<ReadMap> {
        Ok(ReadMap {
            raw: Arc::new(RawMap::map(file, offset, len, false, false)?),
        })
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Whether the mapping is empty (never: zero-length maps are refused).
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Atomically loads the 8-aligned `u64` at `offset`; `None` if out of
    /// range or misaligned, or if the page lies past the end of the file
    /// (SIGBUS caught). A call of a few instructions.
    #[inline]
    pub fn load_u64(&self, offset: usize, order: Ordering) -> Option<u64> {
        self.raw.load_u64(offset, order)
    }

    /// Atomically loads the 4-aligned `u32` at `offset`; `None` as for
    /// [`ReadMap::load_u64`].
    #[inline]
    pub fn load_u32(&self, offset: usize, order: Ordering) -> Option<u32> {
        self.raw.load_u32(offset, order)
    }

    /// Copies `dst.len()` bytes from `offset` into `dst` (guarded; see
    /// [`super::sigbus::copy`]);
    /// `false` if the range is not inside the mapping (nothing copied) or
    /// reaches a page past the end of the file (SIGBUS caught; part copied).
    #[inline]
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> bool {
        self.raw.copy_out(offset, dst)
    }

    /// Start address (for reports; not dereferenceable from safe code).
    pub fn addr(&self) -> usize {
        self.raw.addr.as_ptr() as usize
    }

    /// Like `copy_out`, with the copy done by `routine` (for example
    /// [`crate::copy::Routine::function`]); one call of it. Crate-only: the
    /// routine sees the mapped bytes as a shared slice, which is sound only
    /// for bytes no process writes while it runs (the queue's committed
    /// records, the benchmark's published slots). Outside the crate,
    /// [`crate::copy::Routine::copy_out`] offers it with pagewise's own routines.
    #[inline]
    pub(crate) fn copy_out_with(
        &self,
        offset: usize,
        dst: &mut [u8],
        routine: fn(&mut [u8], &[u8]),
    ) -> bool {
        self.raw.copy_out_with(offset, dst, routine)
    }

    /// Applies advice to `[offset, offset+len)`. One `madvise` call.
    pub fn advise(&self, offset: usize, len: usize, advice: FileAdvice) -> SysResult<()> {
        self.raw.madvise(offset, len, advice)
    }

    /// Takes the mapping down by one step (see [`FileAdvice::DropMappings`]):
    /// drops the page-table entries of the next `step` bytes from `done`
    /// (one `madvise`: a microsecond or two for [`DROP_STEP`], about 60 ns
    /// more per mapped 4 KiB page) and returns the new `done`, or `None`
    /// when nothing is left or the call failed — then drop the handle, whose
    /// `munmap` is cheap. Unmapping a large populated mapping at once takes
    /// about a millisecond; this spreads it over idle time.
    pub fn drop_mappings_step(&self, done: usize, step: usize) -> Option<usize> {
        self.raw.drop_mappings_step(done, step)
    }

    /// Sleeps while the `u32` at `offset` equals `expected`, until woken or
    /// `timeout` passes (`FUTEX_WAIT`, shared). Returns `false` on timeout,
    /// `true` when woken, when the value differed, or on a signal.
    pub fn futex_wait(
        &self,
        offset: usize,
        expected: u32,
        timeout: Option<Duration>,
    ) -> SysResult<bool> {
        self.raw.futex_wait(offset, expected, timeout)
    }
}

/// A read-write shared mapping of part of a file, owned by one writer.
#[derive(Debug)]
pub struct WriteMap {
    raw: Arc<RawMap>,
}

impl WriteMap {
    /// Asks the CPU to fetch the cache line holding `offset` for writing
    /// (`prefetchw`), ahead of a store there; nothing if out of range. A hint:
    /// never faults, changes no byte.
    #[inline]
    pub fn prefetch_for_write(&self, offset: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(p) = self.raw.at(offset, 1, 1) {
            // SAFETY: prefetchw reads and writes nothing; it cannot fault.
            unsafe {
                std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = offset;
    }

    /// Asks the CPU to move the cache lines of `[offset, offset+len)` from
    /// this core's private caches to the shared last-level cache
    /// (`cldemote`), so that another core's next read of them is served
    /// there instead of by a snoop of this core; nothing if out of range. A
    /// hint: never faults, changes no byte; a no-op on CPUs without it (it is
    /// encoded in the hint-NOP space).
    #[inline]
    pub fn demote(&self, offset: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(p) = self.raw.at(offset, len, 1).filter(|_| len > 0) {
            let first = p as usize & !63;
            let end = p as usize + len;
            let mut line = first;
            while line < end {
                // SAFETY: cldemote reads and writes nothing; it cannot fault.
                unsafe {
                    std::arch::asm!("cldemote [{0}]", in(reg) line, options(nostack, preserves_flags, readonly));
                }
                line += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (offset, len);
    }

    /// Maps `len` bytes of `file` from `offset` (page-aligned) with
    /// `PROT_READ | PROT_WRITE`; `populate` adds `MAP_POPULATE` (best effort,
    /// errors are not reported). The file must be open for writing.
    /// One `mmap` call.
    pub fn map(file: &File, offset: u64, len: usize, populate: bool) -> SysResult<WriteMap> {
        Ok(WriteMap {
            raw: Arc::new(RawMap::map(file, offset, len, true, populate)?),
        })
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Whether the mapping is empty (never: zero-length maps are refused).
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Start address (for reports; not dereferenceable from safe code).
    pub fn addr(&self) -> usize {
        self.raw.addr.as_ptr() as usize
    }

    /// Atomically loads the 8-aligned `u64` at `offset`; `None` as for
    /// [`ReadMap::load_u64`].
    #[inline]
    pub fn load_u64(&self, offset: usize, order: Ordering) -> Option<u64> {
        self.raw.load_u64(offset, order)
    }

    /// Atomically loads the 4-aligned `u32` at `offset`; `None` as for
    /// [`ReadMap::load_u64`].
    #[inline]
    pub fn load_u32(&self, offset: usize, order: Ordering) -> Option<u32> {
        self.raw.load_u32(offset, order)
    }

    /// The 8-aligned `u64` at `offset` as an atomic; `None` if out of range or
    /// misaligned.
    #[inline]
    fn word_u64(&self, offset: usize) -> Option<&AtomicU64> {
        let p = self.raw.at(offset, 8, 8)?;
        // SAFETY: p is 8-aligned inside the writable mapping, which lives as
        // long as `self`; all access to the word is atomic.
        Some(unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// As [`WriteMap::word_u64`], for the 4-aligned `u32` at `offset`.
    #[inline]
    fn word_u32(&self, offset: usize) -> Option<&AtomicU32> {
        let p = self.raw.at(offset, 4, 4)?;
        // SAFETY: as word_u64, for a 4-aligned word.
        Some(unsafe { AtomicU32::from_ptr(p.cast()) })
    }

    /// Atomically stores the 8-aligned `u64` at `offset`; `false` if out of range
    /// or misaligned (nothing stored).
    #[inline]
    pub fn store_u64(&self, offset: usize, value: u64, order: Ordering) -> bool {
        self.word_u64(offset)
            .map(|w| w.store(value, order))
            .is_some()
    }

    /// Stores the 8-aligned `u64` at `offset` and then acts as a full
    /// barrier: no later load of this thread is performed before the store is
    /// visible to every other (what a store followed by
    /// `fence(Ordering::SeqCst)` does). On x86-64 it is one locked exchange
    /// (`xchg`): about 5 ns on the Zen 5 development VM, where `mfence`, the
    /// fence's instruction, costs about 19 ns. `false` if out of range or
    /// misaligned (nothing stored, no barrier).
    #[inline]
    pub fn store_u64_then_full_fence(&self, offset: usize, value: u64) -> bool {
        let Some(word) = self.word_u64(offset) else {
            return false;
        };
        if cfg!(target_arch = "x86_64") {
            // A locked instruction drains the store buffer and orders every
            // later load after it (Intel SDM vol. 3 §9.2.3, AMD APM vol. 2
            // §7.4.2): a full barrier, as the fence below.
            word.swap(value, Ordering::SeqCst);
        } else {
            word.store(value, Ordering::Release);
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        true
    }

    /// Atomically stores the 4-aligned `u32` at `offset`; `false` if out of range.
    #[inline]
    pub fn store_u32(&self, offset: usize, value: u32, order: Ordering) -> bool {
        self.word_u32(offset)
            .map(|w| w.store(value, order))
            .is_some()
    }

    /// Atomically adds to the 4-aligned `u32` at `offset` (wrapping) and returns
    /// the previous value; `None` if out of range.
    #[inline]
    pub fn fetch_add_u32(&self, offset: usize, value: u32, order: Ordering) -> Option<u32> {
        Some(self.word_u32(offset)?.fetch_add(value, order))
    }

    /// Atomically replaces the 8-aligned `u64` at `offset` with `new` if it
    /// equals `current`; `None` if out of range, else the `compare_exchange` result.
    #[inline]
    pub fn compare_exchange_u64(
        &self,
        offset: usize,
        current: u64,
        new: u64,
    ) -> Option<Result<u64, u64>> {
        Some(self.word_u64(offset)?.compare_exchange(
            current,
            new,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ))
    }

    /// Copies `src` to `offset`; `false` (nothing written) if it does not fit.
    /// Plain stores: publish them to other processes with a later release store.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        let Some(p) = self.raw.at(offset, src.len(), 1) else {
            return false;
        };
        // SAFETY: [p, p+len) is inside the live writable mapping; src is our own buffer and
        // cannot overlap a mapping we never hand out references to.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        true
    }

    /// Like `write`, with the copy done by `routine` (one call of it);
    /// `false` if out of range. Takes `&mut self`: the bytes are handed to the
    /// routine as a mutable slice (see [`WriteMap::slice_mut`]).
    #[inline]
    pub fn write_with(&mut self, offset: usize, src: &[u8], routine: fn(&mut [u8], &[u8])) -> bool {
        match self.slice_mut(offset, src.len()) {
            Some(dst) => {
                routine(dst, src);
                true
            }
            None => false,
        }
    }

    /// Zeroes `[offset, offset+len)`; `false` (nothing written) if out of range.
    pub fn zero(&self, offset: usize, len: usize) -> bool {
        let Some(p) = self.raw.at(offset, len, 1) else {
            return false;
        };
        // SAFETY: as write.
        unsafe { std::ptr::write_bytes(p, 0, len) };
        true
    }

    /// Copies bytes out, like [`ReadMap::copy_out`].
    #[inline]
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> bool {
        self.raw.copy_out(offset, dst)
    }

    /// A mutable view of `[offset, offset+len)`, borrowed from the only
    /// writable handle. Other processes must not write these bytes (the queue's
    /// writer lock ensures that among pagewise users); `None` if out of range.
    #[inline]
    pub fn slice_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let p = self.raw.at(offset, len, 1)?;
        // SAFETY: the range is inside the live writable mapping, `&mut self` is the only
        // handle that can write, populators never touch bytes, and readers in this process
        // use separate mappings and only read bytes that were published to them.
        Some(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// Applies advice to `[offset, offset+len)`. One `madvise` call.
    pub fn advise(&self, offset: usize, len: usize, advice: FileAdvice) -> SysResult<()> {
        self.raw.madvise(offset, len, advice)
    }

    /// Takes the mapping down by one step (see [`FileAdvice::DropMappings`]):
    /// drops the page-table entries of the next [`DROP_STEP`] bytes from
    /// `done` (one `madvise`, a microsecond or two) and returns the new `done`, or `None`
    /// when nothing is left or the call failed — then drop the handle, whose
    /// `munmap` is cheap. Unmapping a large populated mapping at once takes
    /// about a millisecond; this spreads it over idle time.
    pub fn drop_mappings_step(&self, done: usize) -> Option<usize> {
        self.raw.drop_mappings_step(done, DROP_STEP)
    }

    /// Writes dirty pages of `[offset, offset+len)` back to the file and waits
    /// (`msync(MS_SYNC)`). `offset` is rounded down to a page. One system call.
    pub fn sync(&self, offset: usize, len: usize) -> SysResult<()> {
        let page = super::base_page_size();
        let start = offset - offset % page;
        let len = len + (offset - start);
        if len == 0 {
            return Ok(());
        }
        let p = self.raw.at(start, len, 1).ok_or_else(|| erange("msync"))?;
        // SAFETY: a page-aligned range inside our mapping; msync does not change its contents.
        let rc = unsafe { libc::msync(p.cast(), len, libc::MS_SYNC) };
        if rc != 0 {
            return Err(SysError::last("msync"));
        }
        Ok(())
    }

    /// Bytes of `[offset, offset+len)` (page-aligned `offset`) whose pages are
    /// in memory (`mincore`). One system call.
    pub fn resident_bytes(&self, offset: usize, len: usize) -> SysResult<u64> {
        self.raw.resident_bytes(offset, len)
    }

    /// Wakes up to `count` processes sleeping on the `u32` at `offset`
    /// (`FUTEX_WAKE`, shared); returns how many woke. One system call.
    pub fn futex_wake(&self, offset: usize, count: u32) -> SysResult<u32> {
        self.raw.futex_wake(offset, count)
    }

    /// A handle that can populate or advise this mapping from another thread.
    pub fn populator(&self) -> MapPopulator {
        MapPopulator {
            raw: Arc::clone(&self.raw),
        }
    }
}

/// Applies advice to a [`WriteMap`]'s range without touching its bytes; keeps
/// the range mapped while it lives.
#[derive(Debug, Clone)]
pub struct MapPopulator {
    raw: Arc<RawMap>,
}

impl MapPopulator {
    /// Applies advice (typically [`FileAdvice::PopulateWrite`]) to a subrange.
    pub fn advise(&self, offset: usize, len: usize, advice: FileAdvice) -> SysResult<()> {
        self.raw.madvise(offset, len, advice)
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Whether the mapping is empty (never).
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::fs::OpenOptions;

    /// A new file of `len` bytes (zeros) in a new temporary directory.
    pub(crate) fn temp_file(len: u64) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("m"))
            .unwrap();
        file.set_len(len).unwrap();
        (dir, file)
    }

    #[test]
    fn writes_are_seen_by_a_second_mapping() {
        let (_dir, file) = temp_file(8192);
        let w = WriteMap::map(&file, 0, 8192, false).unwrap();
        let r = ReadMap::map(&file, 0, 8192).unwrap();
        assert!(w.write(4104, b"hello"));
        assert!(w.store_u64(4096, 42, Ordering::Release));
        assert_eq!(r.load_u64(4096, Ordering::Acquire), Some(42));
        assert!(w.store_u64_then_full_fence(4096, 43));
        assert_eq!(r.load_u64(4096, Ordering::Acquire), Some(43));
        let mut buf = [0u8; 5];
        assert!(r.copy_out(4104, &mut buf));
        assert_eq!(&buf, b"hello");
    }

    #[test]
    fn out_of_range_and_misaligned_accesses_are_refused() {
        let (_dir, file) = temp_file(4096);
        let w = WriteMap::map(&file, 0, 4096, false).unwrap();
        assert_eq!(w.load_u64(4096, Ordering::Relaxed), None);
        assert_eq!(w.load_u64(4, Ordering::Relaxed), None);
        assert_eq!(w.load_u64(usize::MAX - 3, Ordering::Relaxed), None);
        assert!(!w.store_u64(4090, 1, Ordering::Relaxed));
        assert!(!w.store_u64_then_full_fence(4090, 1));
        assert!(!w.store_u64_then_full_fence(4092, 1));
        assert_eq!(w.load_u64(4088, Ordering::Relaxed), Some(0));
        assert!(!w.write(4095, b"ab"));
        let mut big = vec![0u8; 4097];
        assert!(!w.copy_out(0, &mut big));
        let err = w.advise(0, 8192, FileAdvice::WillNeed).unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::RANGE));
    }

    /// A write prefetch and a demotion are hints: they change no byte, and
    /// neither a page past the end of the file (where a load raises SIGBUS)
    /// nor an offset outside the mapping makes them fault.
    #[test]
    fn write_prefetch_and_demotion_change_nothing_and_never_fault() {
        let (_dir, file) = temp_file(4096);
        let w = WriteMap::map(&file, 0, 8192, false).unwrap();
        assert!(w.write(64, b"kept"));
        for offset in [0, 64, 100, 4095, 4096, 6000, 8191, 8192, usize::MAX] {
            w.prefetch_for_write(offset);
        }
        for (offset, len) in [
            (0, 4096),
            (64, 8),
            (100, 200),
            (4095, 1),
            (4096, 10),
            (8000, 192),
            (8191, 1),
            (8192, 1),
            (usize::MAX, 1),
            (0, usize::MAX),
        ] {
            w.demote(offset, len);
        }
        let mut buf = [0u8; 4];
        assert!(w.copy_out(64, &mut buf));
        assert_eq!(&buf, b"kept");
        assert_eq!(w.load_u64(0, Ordering::Relaxed), Some(0));
        assert_eq!(
            file.metadata().unwrap().len(),
            4096,
            "the file did not grow"
        );
    }

    #[test]
    fn populate_write_makes_pages_resident() {
        let (_dir, file) = temp_file(64 * 4096);
        let w = WriteMap::map(&file, 0, 64 * 4096, false).unwrap();
        w.advise(0, 16 * 4096, FileAdvice::PopulateWrite).unwrap();
        assert!(w.resident_bytes(0, 16 * 4096).unwrap() == 16 * 4096);
    }

    #[test]
    fn futex_wait_times_out_and_sees_changes() {
        let (_dir, file) = temp_file(4096);
        let w = WriteMap::map(&file, 0, 4096, false).unwrap();
        let r = ReadMap::map(&file, 0, 4096).unwrap();
        // Value differs: returns at once.
        assert!(r.futex_wait(0, 1, Some(Duration::from_secs(5))).unwrap());
        // Value equal: times out.
        assert!(!r.futex_wait(0, 0, Some(Duration::from_millis(5))).unwrap());
        let waiter =
            std::thread::spawn(move || r.futex_wait(0, 0, Some(Duration::from_secs(30))).unwrap());
        while !waiter.is_finished() {
            w.fetch_add_u32(0, 1, Ordering::SeqCst);
            w.futex_wake(0, u32::MAX).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(waiter.join().unwrap());
    }
}
