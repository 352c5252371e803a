//! Temporarily growing a hugetlb pool, for benchmarks and tests run as root.

use std::io;

/// Holds extra pages in a hugetlb pool and gives them back on drop.
///
/// Writing `nr_hugepages` needs root. The kernel may grant fewer pages than
/// asked when memory is fragmented; [`obtained`](PoolReservation::obtained) says how many.
#[derive(Debug)]
pub struct PoolReservation {
    path: String,
    original_total: u64,
    obtained: u64,
}

fn nr_hugepages_path(page_size: usize) -> String {
    format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
        page_size / 1024
    )
}

fn read_total(path: &str) -> io::Result<u64> {
    let text = std::fs::read_to_string(path)?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: not a number: {text:?}"),
        )
    })
}

impl PoolReservation {
    /// Makes sure at least `pages` pages of `page_size` bytes are free and
    /// unreserved, growing the pool by the shortfall. Costs two sysfs writes;
    /// the kernel may compact memory to find the pages (milliseconds to seconds).
    pub fn ensure_available(page_size: usize, pages: u64) -> io::Result<PoolReservation> {
        let path = nr_hugepages_path(page_size);
        let original_total = read_total(&path)?;
        let available = crate::host::hugetlb::available(page_size);
        let shortfall = pages.saturating_sub(available);
        if shortfall > 0 {
            std::fs::write(&path, (original_total + shortfall).to_string())?;
        }
        let obtained = read_total(&path)?.saturating_sub(original_total);
        Ok(PoolReservation {
            path,
            original_total,
            obtained,
        })
    }

    /// Pages added to the pool by this reservation.
    pub fn obtained(&self) -> u64 {
        self.obtained
    }
}

impl Drop for PoolReservation {
    fn drop(&mut self) {
        if self.obtained > 0 {
            let _ = std::fs::write(&self.path, self.original_total.to_string());
        }
    }
}
