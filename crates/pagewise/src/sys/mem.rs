//! Anonymous memory mappings: `mmap`, `munmap`, `madvise`, `mlock`, `mbind`.
//!
//! [`AnonMapping`] owns a range of address space and unmaps it on drop. Its
//! contents are reachable only through `&self`/`&mut self` slices, so ordinary
//! borrow rules keep access sound. A [`Populator`] is a second handle to the
//! same range that can only ask the kernel to fault pages in; it never reads or
//! writes the bytes, so it may run on another thread while the owner writes.

use super::{SysError, SysResult};
use std::ptr::NonNull;
use std::sync::Arc;

/// `MADV_POPULATE_WRITE` (Linux 5.14).
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// `MADV_POPULATE_READ` (Linux 5.14).
const MADV_POPULATE_READ: libc::c_int = 22;
/// `MADV_COLLAPSE` (Linux 6.1).
const MADV_COLLAPSE: libc::c_int = 25;
/// Shift of the page-size field in `mmap` flags for `MAP_HUGETLB`.
const MAP_HUGE_SHIFT: u32 = 26;

/// How to map anonymous memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapOptions {
    /// Back the mapping with hugetlb pages of this size (bytes, a power of two),
    /// or ordinary pages when `None`.
    pub hugetlb_page_size: Option<usize>,
    /// `MAP_NORESERVE`: do not reserve hugetlb pages or swap up front. With
    /// hugetlb this turns an empty pool into a SIGBUS on touch, so pagewise only
    /// uses it to probe whether a page size exists.
    pub no_reserve: bool,
    /// `MAP_POPULATE`: fault everything in during `mmap` (best effort).
    pub populate: bool,
}

/// Non-destructive `madvise` advice: none of these change the bytes a process
/// reads back, so they are safe on memory that others are using.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_HUGEPAGE`: eligible for transparent huge pages.
    HugePage,
    /// `MADV_NOHUGEPAGE`: never use transparent huge pages here.
    NoHugePage,
    /// `MADV_POPULATE_WRITE`: fault in writable pages now (reports errors).
    PopulateWrite,
    /// `MADV_POPULATE_READ`: fault in readable pages now.
    PopulateRead,
    /// `MADV_COLLAPSE`: collapse into transparent huge pages synchronously.
    Collapse,
    /// `MADV_DONTFORK`: children do not inherit the range.
    DontFork,
    /// `MADV_WIPEONFORK`: children see the range zero-filled.
    WipeOnFork,
    /// `MADV_WILLNEED`: read ahead.
    WillNeed,
    /// `MADV_SEQUENTIAL`: aggressive read-ahead, early reclaim.
    Sequential,
}

impl Discard {
    fn raw(self) -> (libc::c_int, &'static str) {
        match self {
            Discard::DontNeed => (libc::MADV_DONTNEED, "madvise(MADV_DONTNEED)"),
            Discard::Free => (libc::MADV_FREE, "madvise(MADV_FREE)"),
        }
    }
}

impl Advice {
    fn raw(self) -> libc::c_int {
        match self {
            Advice::HugePage => libc::MADV_HUGEPAGE,
            Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
            Advice::PopulateWrite => MADV_POPULATE_WRITE,
            Advice::PopulateRead => MADV_POPULATE_READ,
            Advice::Collapse => MADV_COLLAPSE,
            Advice::DontFork => libc::MADV_DONTFORK,
            Advice::WipeOnFork => libc::MADV_WIPEONFORK,
            Advice::WillNeed => libc::MADV_WILLNEED,
            Advice::Sequential => libc::MADV_SEQUENTIAL,
        }
    }

    fn call_name(self) -> &'static str {
        match self {
            Advice::HugePage => "madvise(MADV_HUGEPAGE)",
            Advice::NoHugePage => "madvise(MADV_NOHUGEPAGE)",
            Advice::PopulateWrite => "madvise(MADV_POPULATE_WRITE)",
            Advice::PopulateRead => "madvise(MADV_POPULATE_READ)",
            Advice::Collapse => "madvise(MADV_COLLAPSE)",
            Advice::DontFork => "madvise(MADV_DONTFORK)",
            Advice::WipeOnFork => "madvise(MADV_WIPEONFORK)",
            Advice::WillNeed => "madvise(MADV_WILLNEED)",
            Advice::Sequential => "madvise(MADV_SEQUENTIAL)",
        }
    }
}

/// Destructive advice: the pages' contents are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// `MADV_DONTNEED`: free now; the next touch reads zeros.
    DontNeed,
    /// `MADV_FREE`: free lazily under memory pressure; contents undefined until written.
    Free,
}

/// The owned address range; unmapped when the last handle goes.
#[derive(Debug)]
struct RawRange {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: RawRange is only an address and a length; all access to the bytes goes through
// AnonMapping's borrow-checked slices, and the kernel calls made through shared handles
// (madvise populate/advice, munmap on last drop) are thread-safe.
unsafe impl Send for RawRange {}
// SAFETY: see Send above; &RawRange exposes no byte access.
unsafe impl Sync for RawRange {}

impl RawRange {
    fn madvise(
        &self,
        offset: usize,
        len: usize,
        advice: libc::c_int,
        call: &'static str,
    ) -> SysResult<()> {
        check_subrange(self.len, offset, len, call)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: [addr+offset, +len) lies inside a mapping this process owns (checked above),
        // and callers only pass advice that the type system allows on this handle.
        let rc = unsafe { libc::madvise(self.addr.as_ptr().add(offset).cast(), len, advice) };
        if rc != 0 {
            return Err(SysError::last(call));
        }
        Ok(())
    }
}

impl Drop for RawRange {
    fn drop(&mut self) {
        // SAFETY: the range was returned by mmap and nothing refers to it any more
        // (this is the last handle).
        unsafe {
            libc::munmap(self.addr.as_ptr().cast(), self.len);
        }
    }
}

fn check_subrange(total: usize, offset: usize, len: usize, call: &'static str) -> SysResult<()> {
    match offset.checked_add(len) {
        Some(end) if end <= total => Ok(()),
        _ => Err(SysError {
            call,
            source: std::io::Error::from_raw_os_error(libc::ERANGE),
        }),
    }
}

/// An anonymous private mapping, readable and writable, unmapped on drop.
#[derive(Debug)]
pub struct AnonMapping {
    range: Arc<RawRange>,
    hugetlb_page_size: Option<usize>,
}

impl AnonMapping {
    /// Maps `len` bytes (`len` > 0; rounded up by the kernel to the page size in use).
    ///
    /// Costs one `mmap`; with `populate` also the faults for every page.
    pub fn map(len: usize, options: MapOptions) -> SysResult<Self> {
        if len == 0 {
            return Err(SysError {
                call: "mmap",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if let Some(page) = options.hugetlb_page_size {
            if !page.is_power_of_two() {
                return Err(SysError {
                    call: "mmap(MAP_HUGETLB)",
                    source: std::io::Error::from_raw_os_error(libc::EINVAL),
                });
            }
            flags |= libc::MAP_HUGETLB | ((page.trailing_zeros() as libc::c_int) << MAP_HUGE_SHIFT);
        }
        if options.no_reserve {
            flags |= libc::MAP_NORESERVE;
        }
        if options.populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address cannot alias anything.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(SysError::last(if options.hugetlb_page_size.is_some() {
                "mmap(MAP_HUGETLB)"
            } else {
                "mmap"
            }));
        }
        let addr = NonNull::new(addr.cast::<u8>()).ok_or_else(|| SysError {
            call: "mmap",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        Ok(AnonMapping {
            range: Arc::new(RawRange { addr, len }),
            hugetlb_page_size: options.hugetlb_page_size,
        })
    }

    /// The hugetlb page size, when this is a hugetlb mapping.
    pub fn hugetlb_page_size(&self) -> Option<usize> {
        self.hugetlb_page_size
    }

    /// Start address of the mapping.
    pub fn addr(&self) -> usize {
        self.range.addr.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.range.len
    }

    /// Whether the mapping is empty (never true: zero-length maps are refused).
    pub fn is_empty(&self) -> bool {
        self.range.len == 0
    }

    /// The bytes, read-only.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is mapped readable for as long as `self.range` lives, and `&self`
        // excludes any `&mut` view handed out by this owner.
        unsafe { std::slice::from_raw_parts(self.range.addr.as_ptr(), self.range.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the range is mapped writable; `&mut self` makes this the only view, and
        // Populator handles never access the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.range.addr.as_ptr(), self.range.len) }
    }

    /// Applies non-destructive advice to `[offset, offset+len)`. One `madvise`.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> SysResult<()> {
        self.range
            .madvise(offset, len, advice.raw(), advice.call_name())
    }

    /// Drops the contents of `[offset, offset+len)`; needs `&mut` because it changes
    /// what later reads return. One `madvise`.
    pub fn discard(&mut self, offset: usize, len: usize, how: Discard) -> SysResult<()> {
        let (raw, name) = how.raw();
        self.range.madvise(offset, len, raw, name)
    }

    /// Locks the whole mapping in memory (`mlock`), faulting it in.
    pub fn lock(&self) -> SysResult<()> {
        // SAFETY: the range is a live mapping owned by this process.
        let rc = unsafe { libc::mlock(self.range.addr.as_ptr().cast(), self.range.len) };
        if rc != 0 {
            return Err(SysError::last("mlock"));
        }
        Ok(())
    }

    /// Binds the mapping's future pages to NUMA node `node` (`mbind(MPOL_BIND)`).
    pub fn bind_to_node(&self, node: u32) -> SysResult<()> {
        const MPOL_BIND: libc::c_long = 2;
        let bits = libc::c_ulong::BITS as usize;
        let mut mask = vec![0 as libc::c_ulong; node as usize / bits + 1];
        mask[node as usize / bits] |= 1 << (node as usize % bits);
        // SAFETY: mbind reads `mask` (maxnode bits) and changes only the policy of a range
        // this process owns.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.range.addr.as_ptr(),
                self.range.len,
                MPOL_BIND,
                mask.as_ptr(),
                // The kernel reads maxnode - 1 bits: pass one more, as libnuma does.
                (mask.len() * bits + 1) as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if rc != 0 {
            return Err(SysError::last("mbind"));
        }
        Ok(())
    }

    /// Maps `len` bytes (a multiple of `align`, a power of two) starting at an
    /// `align`-aligned address: over-maps by `align` and trims both ends.
    /// Used for THP-eligible memory (2 MiB alignment). One `mmap`, up to two `munmap`s.
    pub fn map_aligned(len: usize, align: usize, options: MapOptions) -> SysResult<Self> {
        let invalid = || SysError {
            call: "mmap",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        if !align.is_power_of_two() || !len.is_multiple_of(align) {
            return Err(invalid());
        }
        let over = len.checked_add(align).ok_or_else(invalid)?;
        let mapping = AnonMapping::map(over, options)?;
        let offset = mapping.addr().next_multiple_of(align) - mapping.addr();
        mapping.trim(offset, len)
    }

    /// Keeps only `[offset, offset+len)` and unmaps the rest (used to trim an
    /// over-sized mapping to an aligned window). `offset` and `len` must be
    /// multiples of the mapping's page size (`EINVAL` otherwise). Costs up to
    /// two `munmap` calls.
    pub fn trim(self, offset: usize, len: usize) -> SysResult<Self> {
        check_subrange(self.range.len, offset, len, "munmap")?;
        let page = self.hugetlb_page_size.unwrap_or_else(super::base_page_size);
        if !offset.is_multiple_of(page) || !len.is_multiple_of(page) || len == 0 {
            return Err(SysError {
                call: "munmap",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let hugetlb_page_size = self.hugetlb_page_size;
        let range = Arc::try_unwrap(self.range).map_err(|_| SysError {
            call: "munmap",
            source: std::io::Error::from_raw_os_error(libc::EBUSY),
        })?;
        let base = range.addr.as_ptr();
        let total = range.len;
        let tail = total - offset - len;
        // SAFETY: the head and tail lie inside the mapping we own exclusively (try_unwrap
        // succeeded) and are page-aligned (checked above); nothing refers to them.
        let (head_rc, tail_rc) = unsafe {
            let head_rc = if offset > 0 {
                libc::munmap(base.cast(), offset)
            } else {
                0
            };
            let tail_rc = if tail > 0 {
                libc::munmap(base.add(offset + len).cast(), tail)
            } else {
                0
            };
            (head_rc, tail_rc)
        };
        if head_rc != 0 || tail_rc != 0 {
            // Keep owning the whole range so Drop unmaps what is left.
            let error = SysError::last("munmap");
            drop(range);
            return Err(error);
        }
        std::mem::forget(range);
        // SAFETY: base + offset is inside the original non-null mapping.
        let addr = unsafe { NonNull::new_unchecked(base.add(offset)) };
        Ok(AnonMapping {
            range: Arc::new(RawRange { addr, len }),
            hugetlb_page_size,
        })
    }

    /// Takes sole ownership of the range as a raw `(address, length)` that is
    /// no longer unmapped on drop: for a mapping about to be moved by
    /// `mremap`. Fails with `EBUSY` (returning the mapping) while a
    /// [`Populator`] shares it. The caller must unmap or hand on the range.
    pub(crate) fn into_raw(self) -> Result<(usize, usize), (Self, SysError)> {
        let hugetlb_page_size = self.hugetlb_page_size;
        match Arc::try_unwrap(self.range) {
            Ok(range) => {
                let raw = (range.addr.as_ptr() as usize, range.len);
                std::mem::forget(range);
                Ok(raw)
            }
            Err(shared) => Err((
                AnonMapping {
                    range: shared,
                    hugetlb_page_size,
                },
                SysError {
                    call: "mremap",
                    source: std::io::Error::from_raw_os_error(libc::EBUSY),
                },
            )),
        }
    }

    /// A handle that can populate this mapping from another thread.
    pub fn populator(&self) -> Populator {
        Populator {
            range: Arc::clone(&self.range),
        }
    }
}

/// Faults in pages of an [`AnonMapping`] without touching its bytes.
///
/// Keeps the address range mapped while it lives, so it is safe to send to a
/// worker thread.
#[derive(Debug, Clone)]
pub struct Populator {
    range: Arc<RawRange>,
}

impl Populator {
    /// Applies non-destructive advice (typically [`Advice::PopulateWrite`]) to a subrange.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> SysResult<()> {
        self.range
            .madvise(offset, len, advice.raw(), advice.call_name())
    }

    /// Length of the whole mapping.
    pub fn len(&self) -> usize {
        self.range.len
    }

    /// Whether the mapping is empty (never true).
    pub fn is_empty(&self) -> bool {
        self.range.len == 0
    }
}

/// Address space reserved up front (`PROT_NONE`, nothing committed) whose
/// leading part is committed (made readable and writable) as it grows.
///
/// Committing changes protection only; pages are still faulted in on first
/// touch unless populated. Unmapped on drop.
#[derive(Debug)]
pub struct Reservation {
    range: Arc<RawRange>,
    committed: usize,
}

impl Reservation {
    /// Reserves `len` bytes (> 0) aligned to `align` (a power of two, at least
    /// the base page size). One `mmap` and up to two `munmap`s; no memory is
    /// committed, so it counts against no overcommit limit.
    pub fn reserve(len: usize, align: usize) -> SysResult<Reservation> {
        let invalid = |call| SysError {
            call,
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        if len == 0 || !align.is_power_of_two() {
            return Err(invalid("mmap(PROT_NONE)"));
        }
        let over = len
            .checked_add(align)
            .ok_or_else(|| invalid("mmap(PROT_NONE)"))?;
        // SAFETY: a fresh inaccessible anonymous mapping at a kernel-chosen address.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(SysError::last("mmap(PROT_NONE)"));
        }
        let base = addr as usize;
        let start = base.next_multiple_of(align);
        let head = start - base;
        let tail = over - head - len;
        // SAFETY: head and tail are inside the mapping just made and nothing refers to them.
        unsafe {
            if head > 0 {
                libc::munmap(addr, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        let addr = NonNull::new(start as *mut u8).ok_or_else(|| invalid("mmap(PROT_NONE)"))?;
        Ok(Reservation {
            range: Arc::new(RawRange { addr, len }),
            committed: 0,
        })
    }

    /// Start address.
    #[cfg(test)]
    pub fn addr(&self) -> usize {
        self.range.addr.as_ptr() as usize
    }

    /// Bytes reserved.
    pub fn reserved(&self) -> usize {
        self.range.len
    }

    /// Bytes committed (readable and writable) from the start.
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// Makes `[0, new_committed)` readable and writable. `new_committed` must be
    /// a multiple of the base page size and within the reservation; shrinking is
    /// not done here (see [`discard`](Self::discard)). One `mprotect`.
    pub fn commit(&mut self, new_committed: usize) -> SysResult<()> {
        check_subrange(self.range.len, 0, new_committed, "mprotect")?;
        if new_committed <= self.committed {
            return Ok(());
        }
        let grow = new_committed - self.committed;
        // SAFETY: the range lies inside our reservation and is not yet accessible, so no
        // reference to it exists; making it RW cannot invalidate anything.
        let rc = unsafe {
            libc::mprotect(
                self.range.addr.as_ptr().add(self.committed).cast(),
                grow,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(SysError::last("mprotect"));
        }
        self.committed = new_committed;
        Ok(())
    }

    /// The committed bytes, read-only.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [addr, addr+committed) is mapped readable; &self excludes &mut views.
        unsafe { std::slice::from_raw_parts(self.range.addr.as_ptr(), self.committed) }
    }

    /// The committed bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: [addr, addr+committed) is mapped writable; &mut self makes this unique.
        unsafe { std::slice::from_raw_parts_mut(self.range.addr.as_ptr(), self.committed) }
    }

    /// Non-destructive advice on a committed subrange. One `madvise`.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice) -> SysResult<()> {
        check_subrange(self.committed, offset, len, advice.call_name())?;
        self.range
            .madvise(offset, len, advice.raw(), advice.call_name())
    }

    /// Non-destructive advice on the whole reservation, committed or not
    /// (e.g. `MADV_HUGEPAGE` before anything is committed). One `madvise`.
    pub fn advise_all(&self, advice: Advice) -> SysResult<()> {
        self.range
            .madvise(0, self.range.len, advice.raw(), advice.call_name())
    }

    /// Drops the contents of a committed subrange, which stays committed and
    /// reads back as zeros (`DontNeed`) or undefined-until-written (`Free`).
    pub fn discard(&mut self, offset: usize, len: usize, how: Discard) -> SysResult<()> {
        check_subrange(self.committed, offset, len, "madvise")?;
        let (raw, name) = how.raw();
        self.range.madvise(offset, len, raw, name)
    }

    /// A handle that can populate committed pages from another thread.
    pub fn populator(&self) -> Populator {
        Populator {
            range: Arc::clone(&self.range),
        }
    }

    /// Moves the committed pages, without copying them, to the start of a new
    /// reservation of `new_len` bytes (`mremap(MREMAP_MAYMOVE|MREMAP_FIXED)`),
    /// and releases the old reservation. Fails with `EBUSY` while a
    /// [`Populator`] of this reservation is alive. On failure the old
    /// reservation is returned unharmed inside the error path's `Err`.
    pub fn move_to_larger(
        self,
        new_len: usize,
        align: usize,
    ) -> Result<Reservation, (Reservation, SysError)> {
        if new_len < self.committed {
            let err = SysError {
                call: "mremap",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            };
            return Err((self, err));
        }
        let mut target = match Reservation::reserve(new_len, align) {
            Ok(t) => t,
            Err(e) => return Err((self, e)),
        };
        if self.committed == 0 {
            return Ok(target);
        }
        let committed = self.committed;
        let range = match Arc::try_unwrap(self.range) {
            Ok(r) => r,
            Err(shared) => {
                let err = SysError {
                    call: "mremap",
                    source: std::io::Error::from_raw_os_error(libc::EBUSY),
                };
                return Err((
                    Reservation {
                        range: shared,
                        committed,
                    },
                    err,
                ));
            }
        };
        // SAFETY: the source is our committed (RW) range, owned exclusively (try_unwrap); the
        // destination lies inside the fresh reservation `target`, which MREMAP_FIXED replaces.
        // On success the pages now live at the target and the source range is unmapped.
        let moved = unsafe {
            libc::mremap(
                range.addr.as_ptr().cast(),
                committed,
                committed,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                target.range.addr.as_ptr().cast::<libc::c_void>(),
            )
        };
        if moved == libc::MAP_FAILED {
            let err = SysError::last("mremap");
            return Err((
                Reservation {
                    range: Arc::new(range),
                    committed,
                },
                err,
            ));
        }
        // The committed part moved away; unmap what is left of the old reservation.
        let old_base = range.addr.as_ptr();
        let old_len = range.len;
        std::mem::forget(range);
        if old_len > committed {
            // SAFETY: the uncommitted tail of the old reservation is still ours and unused.
            unsafe {
                libc::munmap(old_base.add(committed).cast(), old_len - committed);
            }
        }
        target.committed = committed;
        Ok(target)
    }
}

/// A zeroed block from the C heap (`calloc`), freed with `free` on drop.
///
/// Above glibc's mmap threshold this is a fresh `mmap` that glibc does not
/// touch (it knows the pages are zero), so it faults exactly like `malloc`:
/// that is what benchmarks compare against.
#[derive(Debug)]
pub struct CHeapBlock {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the block is exclusively owned and fully initialised (calloc zeroes, malloc_filled
// writes every byte); glibc's free may be called from any thread.
unsafe impl Send for CHeapBlock {}

impl CHeapBlock {
    /// Allocates `len` zeroed bytes. One `calloc` call.
    pub fn calloc(len: usize) -> SysResult<CHeapBlock> {
        // SAFETY: calloc has no preconditions; the result is checked for NULL.
        let ptr = unsafe { libc::calloc(len.max(1), 1) };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| SysError {
            call: "calloc",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        Ok(CHeapBlock { ptr, len })
    }

    /// Allocates `len` bytes (> 0) with `malloc` and fills them with `byte`
    /// (`memset`): the "malloc a buffer and fill it" step of a workload.
    pub fn malloc_filled(len: usize, byte: u8) -> SysResult<CHeapBlock> {
        // SAFETY: malloc has no preconditions; the result is checked for NULL.
        let ptr = unsafe { libc::malloc(len.max(1)) };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| SysError {
            call: "malloc",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        // SAFETY: ptr points to at least len writable bytes; writing initialises them all.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), byte, len) };
        Ok(CHeapBlock { ptr, len })
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: calloc returned len zero-initialised bytes owned by self; &mut self is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, read-only.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above, shared borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for CHeapBlock {
    fn drop(&mut self) {
        // SAFETY: ptr came from calloc and is freed exactly once.
        unsafe { libc::free(self.ptr.as_ptr().cast()) }
    }
}

/// Maps the pages of `[addr, addr+len)` of this process readable now
/// (`MADV_POPULATE_READ`, Linux 5.14), whatever owns the range: a file's
/// pages come from the page cache (read from disk if they are not there).
/// It never changes what the range holds or how it is mapped, so it is safe
/// on any range; a range that is not mapped, or is not readable, is an error
/// (`ENOMEM`, `EFAULT`, `EINVAL`). One `madvise`, plus the faults it takes
/// on the caller's behalf.
pub fn populate_read_range(addr: usize, len: usize) -> SysResult<()> {
    // SAFETY: MADV_POPULATE_READ only faults pages in as a read would; it
    // reads and writes no byte of the range and changes no mapping, so no
    // Rust object's contents or validity can change.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_READ) };
    if rc != 0 {
        return Err(SysError::last("madvise(MADV_POPULATE_READ)"));
    }
    Ok(())
}

/// Whether a protection word (as `mmap` takes it and perf's MMAP2 records
/// report it) includes `PROT_EXEC`.
pub fn prot_is_executable(prot: u32) -> bool {
    prot & libc::PROT_EXEC as u32 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_write_and_read_back() {
        let mut m = AnonMapping::map(3 * 4096, MapOptions::default()).unwrap();
        m.as_mut_slice()[5000] = 7;
        assert_eq!(m.as_slice()[5000], 7);
        assert_eq!(m.as_slice()[0], 0);
    }

    #[test]
    fn heap_block_is_zeroed_and_writable() {
        let mut b = CHeapBlock::calloc(1 << 20).unwrap();
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[1000] = 3;
        assert_eq!(b.as_slice()[1000], 3);
    }

    #[test]
    fn reservation_commits_and_moves_without_copying() {
        let mut r = Reservation::reserve(64 << 20, 2 << 20).unwrap();
        assert_eq!(r.addr() % (2 << 20), 0);
        assert_eq!(r.as_slice().len(), 0);
        r.commit(8192).unwrap();
        r.as_mut_slice()[8191] = 5;
        let old = r.addr();
        let moved = r.move_to_larger(128 << 20, 2 << 20).unwrap();
        assert_ne!(moved.addr(), old);
        assert_eq!(moved.committed(), 8192);
        assert_eq!(moved.as_slice()[8191], 5);
        assert_eq!(moved.reserved(), 128 << 20);
    }

    #[test]
    fn reservation_refuses_to_commit_past_its_end() {
        let mut r = Reservation::reserve(1 << 20, 4096).unwrap();
        assert_eq!(
            r.commit(2 << 20).unwrap_err().errno(),
            Some(crate::sys::Errno::RANGE)
        );
    }

    #[test]
    fn malloc_filled_fills() {
        let b = CHeapBlock::malloc_filled(1 << 20, 0x5a).unwrap();
        assert!(b.as_slice().iter().all(|&x| x == 0x5a));
    }

    #[test]
    fn zero_length_is_refused() {
        let err = AnonMapping::map(0, MapOptions::default()).unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::INVAL));
    }

    #[test]
    fn advice_out_of_range_is_refused() {
        let m = AnonMapping::map(4096, MapOptions::default()).unwrap();
        let err = m.advise(0, 8192, Advice::WillNeed).unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::RANGE));
    }

    #[test]
    fn trim_keeps_the_window_contents() {
        let mut m = AnonMapping::map(4 * 4096, MapOptions::default()).unwrap();
        m.as_mut_slice()[4096] = 42;
        let kept = m.trim(4096, 2 * 4096).unwrap();
        assert_eq!(kept.len(), 8192);
        assert_eq!(kept.as_slice()[0], 42);
    }

    #[test]
    fn trim_refuses_unaligned_windows() {
        let m = AnonMapping::map(3 * 4096, MapOptions::default()).unwrap();
        assert_eq!(
            m.trim(100, 4096).unwrap_err().errno(),
            Some(crate::sys::Errno::INVAL)
        );
        let m = AnonMapping::map(3 * 4096, MapOptions::default()).unwrap();
        assert_eq!(
            m.trim(4096, 100).unwrap_err().errno(),
            Some(crate::sys::Errno::INVAL)
        );
    }

    #[test]
    fn map_aligned_is_aligned() {
        let m = AnonMapping::map_aligned(4 << 20, 2 << 20, MapOptions::default()).unwrap();
        assert_eq!(m.addr() % (2 << 20), 0);
        assert_eq!(m.len(), 4 << 20);
        assert!(AnonMapping::map_aligned(3 << 20, 2 << 20, MapOptions::default()).is_err());
    }

    #[test]
    fn into_raw_refuses_while_shared() {
        let m = AnonMapping::map(4096, MapOptions::default()).unwrap();
        let p = m.populator();
        let (m, err) = m.into_raw().unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::BUSY));
        drop(p);
        let (addr, len) = m.into_raw().unwrap();
        assert_eq!(len, 4096);
        // SAFETY: test cleanup of the range we just took ownership of.
        unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    }

    #[test]
    fn discard_zeroes_pages() {
        let mut m = AnonMapping::map(4096, MapOptions::default()).unwrap();
        m.as_mut_slice()[10] = 1;
        m.discard(0, 4096, Discard::DontNeed).unwrap();
        assert_eq!(m.as_slice()[10], 0);
    }

    #[test]
    fn populator_outlives_owner_safely() {
        let m = AnonMapping::map(8192, MapOptions::default()).unwrap();
        let p = m.populator();
        drop(m);
        // The range stays mapped until the populator goes.
        p.advise(0, 8192, Advice::WillNeed).unwrap();
    }
}
