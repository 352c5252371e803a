//! Memory fenced by inaccessible pages, for tests that must catch a stray read
//! or write the moment it happens.
//!
//! [`GuardedBuffer`] maps `[guard page][usable pages][guard page]` with the
//! guard pages `PROT_NONE`: touching a byte before or after the usable range
//! raises `SIGSEGV` instead of silently corrupting a neighbour.

use super::{SysError, SysResult};
use std::ptr::NonNull;

/// A writable buffer with an inaccessible page on each side.
///
/// The usable length is a whole number of pages; place a slice at its very end
/// ([`GuardedBuffer::tail`]) to catch overruns, or at its very start
/// ([`GuardedBuffer::head`]) to catch underruns.
#[derive(Debug)]
pub struct GuardedBuffer {
    /// Start of the whole mapping (the leading guard page).
    base: NonNull<u8>,
    /// Length of the whole mapping.
    mapped: usize,
    /// Usable bytes, starting one page after `base`.
    len: usize,
}

// SAFETY: the buffer owns its mapping; access to the bytes goes through
// borrow-checked slices.
unsafe impl Send for GuardedBuffer {}
// SAFETY: `&GuardedBuffer` only hands out shared slices.
unsafe impl Sync for GuardedBuffer {}

impl GuardedBuffer {
    /// Maps at least `len` usable bytes (rounded up to whole pages, at least one)
    /// between two guard pages. The bytes start zeroed. Costs one `mmap` and one
    /// `mprotect`.
    pub fn new(len: usize) -> SysResult<GuardedBuffer> {
        let page = super::base_page_size();
        let usable = len.max(1).div_ceil(page) * page;
        let mapped = usable + 2 * page;
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address aliases nothing.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(SysError::last("mmap"));
        }
        let base = NonNull::new(addr.cast::<u8>()).ok_or_else(|| SysError {
            call: "mmap",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        let buffer = GuardedBuffer {
            base,
            mapped,
            len: usable,
        };
        // SAFETY: [base + page, + usable) lies inside the mapping just made.
        let rc = unsafe {
            libc::mprotect(
                base.as_ptr().add(page).cast(),
                usable,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(SysError::last("mprotect"));
        }
        Ok(buffer)
    }

    /// Usable length in bytes (a multiple of the page size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no usable bytes (never true).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first usable byte: one guard page after the start of the mapping.
    fn start(&self) -> *mut u8 {
        let guard = (self.mapped - self.len) / 2;
        // SAFETY: base + one page is inside the mapping (it has at least three pages).
        unsafe { self.base.as_ptr().add(guard) }
    }

    /// All usable bytes, read-only.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the usable range is mapped readable while `self` lives, and `&self`
        // excludes every `&mut` view.
        unsafe { std::slice::from_raw_parts(self.start(), self.len) }
    }

    /// All usable bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the usable range is mapped writable; `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.start(), self.len) }
    }

    /// The last `n` usable bytes: the byte after the slice is a guard page.
    /// `None` when `n` exceeds [`GuardedBuffer::len`].
    pub fn tail(&mut self, n: usize) -> Option<&mut [u8]> {
        let len = self.len;
        self.as_mut_slice().get_mut(len.checked_sub(n)?..)
    }

    /// `n` usable bytes starting `offset` bytes after the leading guard page.
    /// `None` when they do not fit.
    pub fn head(&mut self, offset: usize, n: usize) -> Option<&mut [u8]> {
        let end = offset.checked_add(n)?;
        self.as_mut_slice().get_mut(offset..end)
    }
}

impl Drop for GuardedBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping came from mmap in `new` and no slice outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_bytes_are_whole_pages_and_zeroed() {
        let page = crate::sys::base_page_size();
        let mut g = GuardedBuffer::new(10).unwrap();
        assert_eq!(g.len(), page);
        assert!(g.as_slice().iter().all(|&b| b == 0));
        g.as_mut_slice()[page - 1] = 5;
        assert_eq!(g.tail(1).unwrap(), &[5]);
        assert!(g.tail(page + 1).is_none());
        assert!(g.head(page, 1).is_none());
        assert_eq!(g.head(0, page).unwrap().len(), page);
    }

    #[test]
    fn guard_pages_are_inaccessible() {
        // Ask the kernel rather than touching them (that would kill the test).
        let g = GuardedBuffer::new(1).unwrap();
        let page = crate::sys::base_page_size();
        let before = g.as_slice().as_ptr() as usize - page;
        let after = g.as_slice().as_ptr() as usize + g.len();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let perms = |addr: usize| {
            maps.lines()
                .find_map(|l| {
                    let mut f = l.split_whitespace();
                    let (lo, hi) = f.next()?.split_once('-')?;
                    let (lo, hi) = (
                        usize::from_str_radix(lo, 16).ok()?,
                        usize::from_str_radix(hi, 16).ok()?,
                    );
                    (lo <= addr && addr < hi).then(|| f.next().unwrap().to_owned())
                })
                .unwrap()
        };
        assert_eq!(perms(before), "---p");
        assert_eq!(perms(after), "---p");
        assert_eq!(perms(after - 1), "rw-p");
    }
}
