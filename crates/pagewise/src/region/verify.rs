//! Asks the kernel which pages a range really got: `PAGEMAP_SCAN` where the
//! kernel has it (6.7+), else `/proc/self/smaps`.

use super::Granted;
use crate::host::smaps;
use crate::sys::pagemap::{Pagemap, PAGE_IS_HUGE, PAGE_IS_PRESENT};

/// How a [`Granted`] was established.
pub const BY_PAGEMAP_SCAN: &str = "pagemap_scan";
/// Established from `/proc/self/smaps`.
pub const BY_SMAPS: &str = "smaps";

/// Resident bytes of `[addr, addr+len)` by page size. `hugetlb_page` is the
/// hugetlb page size when the range is a hugetlb mapping.
pub fn granted(addr: usize, len: usize, hugetlb_page: Option<usize>) -> Result<Granted, String> {
    match scan(addr, len, hugetlb_page) {
        Ok(g) => Ok(g),
        Err(scan_error) => from_smaps(addr, len, hugetlb_page)
            .map_err(|e| format!("PAGEMAP_SCAN failed ({scan_error}) and smaps failed ({e})")),
    }
}

fn assign(granted: &mut Granted, hugetlb_page: Option<usize>, huge: u64, base: u64) {
    match hugetlb_page {
        Some(p) if p >= 1 << 30 => granted.hugetlb_1g_bytes = huge + base,
        Some(_) => granted.hugetlb_2m_bytes = huge + base,
        None => {
            granted.thp_bytes = huge;
            granted.base_bytes = base;
        }
    }
}

fn scan(addr: usize, len: usize, hugetlb_page: Option<usize>) -> Result<Granted, String> {
    let pagemap = Pagemap::open_self().map_err(|e| e.to_string())?;
    let regions = pagemap
        .scan(
            addr,
            addr + len,
            PAGE_IS_PRESENT,
            PAGE_IS_PRESENT | PAGE_IS_HUGE,
        )
        .map_err(|e| e.to_string())?;
    let (mut huge, mut base) = (0u64, 0u64);
    for r in regions {
        let bytes = r.end - r.start;
        if r.categories & PAGE_IS_HUGE != 0 {
            huge += bytes;
        } else {
            base += bytes;
        }
    }
    let mut g = Granted {
        verified_by: BY_PAGEMAP_SCAN,
        ..Granted::default()
    };
    assign(&mut g, hugetlb_page, huge, base);
    Ok(g)
}

fn from_smaps(addr: usize, len: usize, hugetlb_page: Option<usize>) -> Result<Granted, String> {
    let entries =
        smaps::entries_overlapping(addr as u64, (addr + len) as u64).map_err(|e| e.to_string())?;
    let mut g = Granted {
        verified_by: BY_SMAPS,
        ..Granted::default()
    };
    let (mut huge, mut base) = (0u64, 0u64);
    for e in entries {
        if hugetlb_page.is_some() {
            huge += e.hugetlb;
        } else {
            huge += e.anon_huge;
            base += e.rss.saturating_sub(e.anon_huge);
        }
    }
    assign(&mut g, hugetlb_page, huge, base);
    Ok(g)
}
