//! `/proc/PID/smaps`: per-mapping resident sizes and page sizes.

/// The fields of one smaps entry that tell which pages a mapping got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmapsEntry {
    /// First byte of the mapping.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Path or `[heap]`/`[anon:name]`, empty for plain anonymous memory.
    pub name: String,
    /// `Rss`, bytes.
    pub rss_bytes: u64,
    /// `AnonHugePages`: bytes backed by PMD-sized transparent huge pages.
    pub anon_huge_bytes: u64,
    /// `KernelPageSize`: the page size of the mapping (2 MiB for hugetlb; 4 KiB for THP).
    pub kernel_page_bytes: u64,
    /// `Private_Hugetlb` + `Shared_Hugetlb`: bytes of hugetlb pages mapped.
    pub hugetlb_bytes: u64,
}

fn kb_field(value: &str) -> Option<u64> {
    let mut parts = value.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        _ => None,
    }
}

fn header(line: &str) -> Option<SmapsEntry> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    if perms.len() != 4 {
        return None;
    }
    // offset, device, inode, then the optional name (which may contain spaces).
    let name = fields.skip(3).collect::<Vec<_>>().join(" ");
    Some(SmapsEntry {
        start,
        end,
        name,
        ..SmapsEntry::default()
    })
}

/// Parses smaps text into entries. Unknown or malformed lines are skipped.
pub fn parse(text: &str) -> Vec<SmapsEntry> {
    let mut entries: Vec<SmapsEntry> = Vec::new();
    for line in text.lines() {
        if let Some(entry) = header(line) {
            entries.push(entry);
            continue;
        }
        let Some(current) = entries.last_mut() else {
            continue;
        };
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Some(bytes) = kb_field(value) else {
            continue;
        };
        match key {
            "Rss" => current.rss_bytes = bytes,
            "AnonHugePages" => current.anon_huge_bytes = bytes,
            "KernelPageSize" => current.kernel_page_bytes = bytes,
            "Private_Hugetlb" | "Shared_Hugetlb" => current.hugetlb_bytes += bytes,
            _ => {}
        }
    }
    entries
}

/// The entries of this process that overlap `[start, end)`.
/// Costs one read of `/proc/self/smaps` (the kernel walks every mapping).
pub fn entries_overlapping(start: u64, end: u64) -> std::io::Result<Vec<SmapsEntry>> {
    let text = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(parse(&text)
        .into_iter()
        .filter(|e| e.start < end && e.end > start)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "\
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 
Size:            1048576 kB
KernelPageSize:        4 kB
Rss:             1048576 kB
AnonHugePages:   1046528 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr mr mw me ac hg
7f0040000000-7f0040200000 rw-p 00000000 00:0f 1234   /anon_hugepage (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
AnonHugePages:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    2048 kB
";

    #[test]
    fn parses_thp_and_hugetlb_entries() {
        let e = parse(SAMPLE);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].start, 0x7f00_0000_0000);
        assert_eq!(e[0].end, 0x7f00_4000_0000);
        assert_eq!(e[0].name, "");
        assert_eq!(e[0].anon_huge_bytes, 1046528 * 1024);
        assert_eq!(e[0].kernel_page_bytes, 4096);
        assert_eq!(e[1].name, "/anon_hugepage (deleted)");
        assert_eq!(e[1].kernel_page_bytes, 2 << 20);
        assert_eq!(e[1].hugetlb_bytes, 2 << 20);
    }

    #[test]
    fn live_smaps_has_this_mapping() {
        let v = vec![1u8; 1 << 20];
        let addr = v.as_ptr() as u64;
        let found = entries_overlapping(addr, addr + 1).unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].rss_bytes > 0);
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC{0,400}") {
            let _ = parse(&text);
        }

        #[test]
        fn parse_reads_back_generated_fields(start in 0u64..1 << 40, pages in 1u64..1000, rss in 0u64..1 << 30, huge in 0u64..1 << 30) {
            let end = start + pages * 4096;
            let text = format!("{start:x}-{end:x} rw-p 00000000 00:00 0\nRss: {rss} kB\nAnonHugePages: {huge} kB\n");
            let e = parse(&text);
            prop_assert_eq!(e.len(), 1);
            prop_assert_eq!(e[0].start, start);
            prop_assert_eq!(e[0].end, end);
            prop_assert_eq!(e[0].rss_bytes, rss * 1024);
            prop_assert_eq!(e[0].anon_huge_bytes, huge * 1024);
        }
    }
}
