//! hugetlb pools: how many pages of each huge page size the kernel holds in
//! reserve (`/sys/kernel/mm/hugepages/hugepages-*kB/`), and how many a new
//! mapping could still take. The readers take a [`SysRoot`] so fixture trees
//! can stand in for `/`; the live shortcuts read the machine.

use super::kernel_files::SysRoot;
use serde::Serialize;

const HUGEPAGES: &str = "/sys/kernel/mm/hugepages";

/// One hugetlb pool (one page size).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HugetlbPool {
    /// Page size in bytes.
    pub page_size_bytes: u64,
    /// `nr_hugepages`: pages in the pool.
    pub total: Option<u64>,
    /// `free_hugepages`: pages not in use (reserved ones included).
    pub free: Option<u64>,
    /// `resv_hugepages`: free pages promised to existing mappings.
    pub reserved: Option<u64>,
    /// `surplus_hugepages`: pages above `nr_hugepages` from overcommit.
    pub surplus: Option<u64>,
}

impl HugetlbPool {
    /// Pages that a new mapping could still reserve: free minus reserved.
    pub fn available(&self) -> Option<u64> {
        Some(self.free?.saturating_sub(self.reserved.unwrap_or(0)))
    }
}

/// Bytes in a sysfs huge page folder name: `hugepages-2048kB` -> 2 MiB.
pub fn parse_dir_bytes(name: &str) -> Option<u64> {
    let kib = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

/// The hugetlb pools below `root`, smallest page size first. Files that
/// cannot be read are noted in `root` and left `None`.
/// Costs a directory listing and four small file reads per pool.
pub fn pools_at(root: &SysRoot) -> Vec<HugetlbPool> {
    let Some(entries) = root.list(HUGEPAGES) else {
        return vec![];
    };
    let mut pools: Vec<HugetlbPool> = entries
        .iter()
        .filter_map(|name| {
            let size = parse_dir_bytes(name)?;
            let dir = format!("{HUGEPAGES}/{name}");
            Some(HugetlbPool {
                page_size_bytes: size,
                total: root.read_u64(&format!("{dir}/nr_hugepages")),
                free: root.read_u64(&format!("{dir}/free_hugepages")),
                reserved: root.read_u64(&format!("{dir}/resv_hugepages")),
                surplus: root.read_u64(&format!("{dir}/surplus_hugepages")),
            })
        })
        .collect();
    pools.sort_by_key(|p| p.page_size_bytes);
    pools
}

/// The hugetlb pools of the live machine, smallest page size first.
/// Costs a directory listing and four small file reads per pool.
pub fn pools() -> Vec<HugetlbPool> {
    pools_at(&SysRoot::live())
}

/// The live hugetlb pool of one page size, if the kernel has it.
pub fn pool(page_size: usize) -> Option<HugetlbPool> {
    pools()
        .into_iter()
        .find(|p| p.page_size_bytes == page_size as u64)
}

/// Pages of `page_size` that a new mapping could reserve now (free minus
/// reserved); 0 when there is no such pool or it cannot be read.
pub fn available(page_size: usize) -> u64 {
    pool(page_size).and_then(|p| p.available()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugepage_folders() {
        assert_eq!(parse_dir_bytes("hugepages-2048kB"), Some(2 << 20));
        assert_eq!(parse_dir_bytes("hugepages-1048576kB"), Some(1 << 30));
        assert_eq!(parse_dir_bytes("hugepages-64kB"), Some(64 << 10));
        assert_eq!(parse_dir_bytes("hugepages-xkB"), None);
        assert_eq!(parse_dir_bytes("enabled"), None);
    }

    #[test]
    fn available_is_free_minus_reserved() {
        let pool = HugetlbPool {
            page_size_bytes: 2 << 20,
            total: Some(16),
            free: Some(10),
            reserved: Some(4),
            surplus: Some(0),
        };
        assert_eq!(pool.available(), Some(6));
        let unread = HugetlbPool { free: None, ..pool };
        assert_eq!(unread.available(), None);
        assert_eq!(available(3 << 10), 0, "no pool of 3 KiB pages");
    }
}
