//! `/proc/PID/smaps` (and `smaps_rollup`): the resident bytes of each mapping
//! by page size, which tell 4 KiB pages, transparent huge pages and hugetlb
//! pages apart. [`parse`] is pure and tested against fixture text and with
//! property tests; [`read`] and [`entries_overlapping`] read the live file
//! (the kernel walks the page tables of every mapping: milliseconds per GiB).

use super::proc_maps::{self, MapsEntry};

/// One mapping of `/proc/PID/smaps` with the sizes that tell page sizes apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmapsEntry {
    /// The header line.
    pub map: MapsEntry,
    /// `Rss`: resident bytes (hugetlb pages are not included).
    pub rss: u64,
    /// `AnonHugePages`: anonymous bytes on transparent huge pages.
    pub anon_huge: u64,
    /// `FilePmdMapped`: file bytes mapped with PMD (2 MiB) entries.
    pub file_pmd: u64,
    /// `ShmemPmdMapped`: shared-memory bytes mapped with PMD entries.
    pub shmem_pmd: u64,
    /// `Private_Hugetlb` + `Shared_Hugetlb`: hugetlb bytes.
    pub hugetlb: u64,
    /// `KernelPageSize`: the page size of the mapping (2 MiB or 1 GiB for hugetlb).
    pub kernel_page_size: u64,
    /// `THPeligible`: whether THP may back the mapping.
    pub thp_eligible: Option<bool>,
    /// Two-letter `VmFlags` (`hg` = `MADV_HUGEPAGE`, `nh` = `MADV_NOHUGEPAGE`, `ht` = hugetlb).
    pub vm_flags: Vec<String>,
}

impl SmapsEntry {
    fn new(map: MapsEntry) -> Self {
        SmapsEntry {
            map,
            rss: 0,
            anon_huge: 0,
            file_pmd: 0,
            shmem_pmd: 0,
            hugetlb: 0,
            kernel_page_size: 4096,
            thp_eligible: None,
            vm_flags: vec![],
        }
    }

    /// Whether `VmFlags` holds `flag`.
    pub fn has_flag(&self, flag: &str) -> bool {
        self.vm_flags.iter().any(|f| f == flag)
    }

    /// Resident bytes on base (4 KiB) pages: `Rss` minus the PMD-mapped parts.
    pub fn base_page_bytes(&self) -> u64 {
        self.rss
            .saturating_sub(self.anon_huge + self.file_pmd + self.shmem_pmd)
    }

    /// Resident bytes on transparent huge pages (anonymous, file or shmem).
    pub fn thp_bytes(&self) -> u64 {
        self.anon_huge + self.file_pmd + self.shmem_pmd
    }
}

/// `Key:   123 kB` -> bytes.
fn kb_value(value: &str) -> Option<u64> {
    let mut parts = value.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        _ => None,
    }
}

/// Parses `/proc/PID/smaps` or `/proc/PID/smaps_rollup` (one entry, named `[rollup]`).
pub fn parse(text: &str) -> Vec<SmapsEntry> {
    let mut out: Vec<SmapsEntry> = Vec::new();
    for line in text.lines() {
        // A header line starts with a hex range; field lines start with a capitalised key.
        if let Some(map) = line
            .as_bytes()
            .first()
            .filter(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            .and_then(|_| proc_maps::parse_line(line))
        {
            out.push(SmapsEntry::new(map));
            continue;
        }
        let Some(entry) = out.last_mut() else {
            continue;
        };
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "Rss" => entry.rss = kb_value(value).unwrap_or(0),
            "AnonHugePages" => entry.anon_huge = kb_value(value).unwrap_or(0),
            "FilePmdMapped" => entry.file_pmd = kb_value(value).unwrap_or(0),
            "ShmemPmdMapped" => entry.shmem_pmd = kb_value(value).unwrap_or(0),
            "Private_Hugetlb" | "Shared_Hugetlb" => {
                entry.hugetlb += kb_value(value).unwrap_or(0);
            }
            "KernelPageSize" => entry.kernel_page_size = kb_value(value).unwrap_or(4096),
            "THPeligible" => entry.thp_eligible = Some(value.trim() == "1"),
            "VmFlags" => {
                entry.vm_flags = value.split_whitespace().map(str::to_owned).collect();
            }
            _ => {}
        }
    }
    out
}

/// Resident bytes of a process by page size, summed over its mappings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PageSizeTotals {
    /// Bytes on base (4 KiB) pages.
    pub base_bytes: u64,
    /// Bytes on transparent huge pages (anonymous, file and shmem PMD mappings).
    pub thp_bytes: u64,
    /// Bytes on hugetlb pages.
    pub hugetlb_bytes: u64,
    /// Resident bytes in `MADV_HUGEPAGE` (`hg`) mappings.
    pub asked_huge_bytes: u64,
    /// Of those, bytes on huge pages.
    pub asked_huge_granted_bytes: u64,
}

impl PageSizeTotals {
    /// Sums the entries of one smaps file.
    pub fn of(entries: &[SmapsEntry]) -> PageSizeTotals {
        let mut t = PageSizeTotals::default();
        for e in entries {
            t.base_bytes += e.base_page_bytes();
            t.thp_bytes += e.thp_bytes();
            t.hugetlb_bytes += e.hugetlb;
            if e.has_flag("hg") {
                t.asked_huge_bytes += e.rss;
                t.asked_huge_granted_bytes += e.thp_bytes();
            }
        }
        t
    }

    /// Adds another process's totals.
    pub fn add(&mut self, other: &PageSizeTotals) {
        self.base_bytes += other.base_bytes;
        self.thp_bytes += other.thp_bytes;
        self.hugetlb_bytes += other.hugetlb_bytes;
        self.asked_huge_bytes += other.asked_huge_bytes;
        self.asked_huge_granted_bytes += other.asked_huge_granted_bytes;
    }

    /// All resident bytes.
    pub fn total(&self) -> u64 {
        self.base_bytes + self.thp_bytes + self.hugetlb_bytes
    }
}

/// The smaps entries of process `pid` (`None`: this process). One read of the
/// file, which walks every page table of the process.
pub fn read(pid: Option<i32>) -> std::io::Result<Vec<SmapsEntry>> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/smaps"),
        None => "/proc/self/smaps".to_owned(),
    };
    Ok(parse(&std::fs::read_to_string(path)?))
}

/// The entries of this process that overlap `[start, end)`.
/// Costs one read of `/proc/self/smaps` (the kernel walks every mapping).
pub fn entries_overlapping(start: u64, end: u64) -> std::io::Result<Vec<SmapsEntry>> {
    Ok(read(None)?
        .into_iter()
        .filter(|e| e.map.start < end && e.map.end > start)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SMAPS: &str = "\
7f0000000000-7f0040001000 rw-p 00000000 00:00 0 
Size:            1048580 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:              524288 kB
AnonHugePages:    413696 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac sd hg 
7f2000000000-7f2040000000 rw-s 00000000 00:10 99                         /anon_hugepage (deleted)
Size:            1048576 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
AnonHugePages:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:   65536 kB
THPeligible:           0
VmFlags: rd wr sh mr mw me ms de ht sd 
5638c49f7000-5638c49fd000 r-xp 00002000 fe:00 247278                     /usr/bin/head
Rss:                  24 kB
FilePmdMapped:         0 kB
VmFlags: rd ex mr mw me sd 
";

    #[test]
    fn smaps_entries_and_totals() {
        let e = parse(SMAPS);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].rss, 524288 * 1024);
        assert_eq!(e[0].anon_huge, 413696 * 1024);
        assert_eq!(e[0].base_page_bytes(), (524288 - 413696) * 1024);
        assert_eq!(e[0].thp_eligible, Some(true));
        assert!(e[0].has_flag("hg"));
        assert_eq!(e[1].hugetlb, 65536 * 1024);
        assert_eq!(e[1].kernel_page_size, 2 << 20);
        assert!(e[1].has_flag("ht"));
        assert!(e[1].map.deleted);
        assert_eq!(e[2].rss, 24 * 1024);
        let t = PageSizeTotals::of(&e);
        assert_eq!(t.base_bytes, (524288 - 413696 + 24) * 1024);
        assert_eq!(t.thp_bytes, 413696 * 1024);
        assert_eq!(t.hugetlb_bytes, 65536 * 1024);
        assert_eq!(t.asked_huge_bytes, 524288 * 1024);
        assert_eq!(t.asked_huge_granted_bytes, 413696 * 1024);
        assert_eq!(
            t.total(),
            t.base_bytes + t.thp_bytes + t.hugetlb_bytes,
            "total is the sum"
        );
    }

    #[test]
    fn smaps_rollup_is_one_entry() {
        let rollup = "\
561a2428d000-7fffaf3b6000 ---p 00000000 00:00 0                          [rollup]
Rss:                1696 kB
Pss:                 290 kB
AnonHugePages:      2048 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
";
        let e = parse(rollup);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].map.path.as_deref(), Some("[rollup]"));
        // More huge bytes than Rss (a racy read) never underflows.
        assert_eq!(e[0].base_page_bytes(), 0);
        assert_eq!(e[0].thp_bytes(), 2048 * 1024);
    }

    #[test]
    fn live_smaps_has_this_mapping() {
        let v = vec![1u8; 1 << 20];
        let addr = v.as_ptr() as u64;
        let found = entries_overlapping(addr, addr + 1).unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].rss > 0);
    }

    proptest! {
        #[test]
        fn smaps_totals_add_up(rss in proptest::collection::vec((0u64..1<<30, 0u64..1<<30, 0u64..1<<20, any::<bool>()), 0..20)) {
            let mut text = String::new();
            let mut want_base = 0;
            let mut want_thp = 0;
            let mut want_hugetlb = 0;
            for (i, (rss_kb, huge_kb, hugetlb_kb, hg)) in rss.iter().enumerate() {
                let huge_kb = huge_kb.min(rss_kb);
                text += &format!("{:x}-{:x} rw-p 00000000 00:00 0 \n", i * 0x1000_0000, i * 0x1000_0000 + 0x1000);
                text += &format!("Rss: {rss_kb} kB\nAnonHugePages: {huge_kb} kB\nPrivate_Hugetlb: {hugetlb_kb} kB\n");
                text += if *hg { "VmFlags: rd wr hg \n" } else { "VmFlags: rd wr \n" };
                want_base += (rss_kb - huge_kb) * 1024;
                want_thp += huge_kb * 1024;
                want_hugetlb += hugetlb_kb * 1024;
            }
            let entries = parse(&text);
            prop_assert_eq!(entries.len(), rss.len());
            let t = PageSizeTotals::of(&entries);
            prop_assert_eq!(t.base_bytes, want_base);
            prop_assert_eq!(t.thp_bytes, want_thp);
            prop_assert_eq!(t.hugetlb_bytes, want_hugetlb);
            prop_assert!(t.asked_huge_granted_bytes <= t.asked_huge_bytes);
        }

        #[test]
        fn smaps_never_panics(text in "\\PC{0,400}") {
            let _ = parse(&text);
        }
    }
}
