//! `PAGEMAP_SCAN` (Linux 6.7+): ask the kernel which pages of a range are
//! present and which are huge, without root and without reading `smaps`.

use super::{SysError, SysResult};
use std::fs::File;
use std::os::fd::AsRawFd;

/// The page is present in memory.
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
/// The page is backed by a THP or a hugetlb page.
pub const PAGE_IS_HUGE: u64 = 1 << 6;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// A run of pages with the same categories.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageRegion {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// `PAGE_IS_*` bits that matched.
    pub categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong = (3 << 30)
    | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16)
    | ((b'f' as libc::c_ulong) << 8)
    | 16;

/// An open `/proc/self/pagemap`.
#[derive(Debug)]
pub struct Pagemap {
    file: File,
}

impl Pagemap {
    /// Opens `/proc/self/pagemap`. One `open`.
    pub fn open_self() -> SysResult<Pagemap> {
        let file = File::open("/proc/self/pagemap").map_err(|source| SysError {
            call: "open(/proc/self/pagemap)",
            source,
        })?;
        Ok(Pagemap { file })
    }

    /// Lists the runs in `[start, end)` of this process that have any of the
    /// categories in `any_of`, reporting the categories in `report`.
    /// Costs one `ioctl` per 512 runs; the kernel walks the page tables.
    pub fn scan(
        &self,
        start: usize,
        end: usize,
        any_of: u64,
        report: u64,
    ) -> SysResult<Vec<PageRegion>> {
        let mut out = Vec::new();
        let mut buf = vec![PageRegion::default(); 512];
        let mut cursor = start as u64;
        let end = end as u64;
        while cursor < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                start: cursor,
                end,
                vec: buf.as_mut_ptr() as u64,
                vec_len: buf.len() as u64,
                category_anyof_mask: any_of,
                return_mask: report,
                ..Default::default()
            };
            // SAFETY: arg points to a valid pm_scan_arg; vec/vec_len describe `buf`, which the
            // kernel fills with at most vec_len page_region entries.
            let n = unsafe { libc::ioctl(self.file.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if n < 0 {
                return Err(SysError::last("ioctl(PAGEMAP_SCAN)"));
            }
            out.extend_from_slice(&buf[..n as usize]);
            if arg.walk_end <= cursor {
                break;
            }
            cursor = arg.walk_end;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mem::{AnonMapping, MapOptions};

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
    }

    #[test]
    fn scan_sees_touched_pages_only() {
        let pagemap = match Pagemap::open_self() {
            Ok(p) => p,
            Err(e) => {
                pagewise_testkit::skip!(pagewise_testkit::Need::Kernel, "no pagemap: {e}");
            }
        };
        let mut m = AnonMapping::map(8 * 4096, MapOptions::default()).unwrap();
        m.as_mut_slice()[2 * 4096] = 1;
        m.as_mut_slice()[3 * 4096] = 1;
        match pagemap.scan(
            m.addr(),
            m.addr() + m.len(),
            PAGE_IS_PRESENT,
            PAGE_IS_PRESENT,
        ) {
            Ok(regions) => {
                let present: u64 = regions.iter().map(|r| r.end - r.start).sum();
                assert_eq!(present, 2 * 4096, "{regions:?}");
                assert_eq!(regions[0].start, (m.addr() + 2 * 4096) as u64);
            }
            // Kernels before 6.7 do not know the ioctl (ENOTTY); from 6.7 on an EINVAL
            // would mean our struct layout is wrong, which must fail.
            Err(e)
                if e.errno() == Some(crate::sys::Errno::NOTTY)
                    || (e.errno() == Some(crate::sys::Errno::INVAL) && !kernel_at_least(6, 7)) =>
            {
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::Kernel,
                    "kernel lacks PAGEMAP_SCAN: {e}"
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
}
