//! Parsers for the text files `pagewise stat` reads while a program runs:
//! `/proc/PID/maps`, `/proc/PID/smaps` (and `smaps_rollup`), `/proc/PID/stat`
//! and tracefs event `format` files. Pure functions, tested against fixture
//! text and with property tests.

use std::collections::HashMap;

/// Access bits of a mapping (`r-xp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Perms {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// `MAP_SHARED` (`s`) rather than private (`p`).
    pub shared: bool,
}

impl Perms {
    /// Parses the four-character field of a maps line.
    pub fn parse(text: &str) -> Option<Perms> {
        let b = text.as_bytes();
        if b.len() != 4 {
            return None;
        }
        let flag = |c: u8, on: u8| match c {
            c if c == on => Some(true),
            b'-' => Some(false),
            _ => None,
        };
        Some(Perms {
            read: flag(b[0], b'r')?,
            write: flag(b[1], b'w')?,
            exec: flag(b[2], b'x')?,
            shared: match b[3] {
                b's' => true,
                b'p' => false,
                _ => return None,
            },
        })
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Access bits.
    pub perms: Perms,
    /// Offset into the file.
    pub offset: u64,
    /// Inode of the file (0 for anonymous memory).
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `[stack]`, `[anon:name]`), if any,
    /// without a ` (deleted)` suffix.
    pub path: Option<String>,
    /// The file was deleted after it was mapped.
    pub deleted: bool,
}

impl MapsEntry {
    /// Whether a regular file backs the mapping (not `[heap]`, `[vdso]`, anonymous…).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.as_deref().is_some_and(|p| p.starts_with('/'))
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the range is empty (never true for the kernel's own files).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text, 16).ok()
}

/// Parses one maps line: `start-end perms offset dev inode [path]`.
/// Paths may contain spaces; they run to the end of the line.
pub fn maps_line(line: &str) -> Option<MapsEntry> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (word, tail) = trimmed.split_at(end);
        rest = tail;
        (!word.is_empty()).then_some(word)
    };
    let range = field()?;
    let perms = Perms::parse(field()?)?;
    let offset = hex(field()?)?;
    let dev = field()?;
    if !dev.contains(':') {
        return None;
    }
    let inode: u64 = field()?.parse().ok()?;
    let (start, end) = range.split_once('-')?;
    let (start, end) = (hex(start)?, hex(end)?);
    if end < start {
        return None;
    }
    let path = rest.trim_start();
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(MapsEntry {
        start,
        end,
        perms,
        offset,
        inode,
        path: (!path.is_empty()).then(|| path.to_owned()),
        deleted,
    })
}

/// Parses a whole `/proc/PID/maps`; lines that do not parse are skipped.
pub fn maps(text: &str) -> Vec<MapsEntry> {
    text.lines().filter_map(maps_line).collect()
}

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
pub fn smaps(text: &str) -> Vec<SmapsEntry> {
    let mut out: Vec<SmapsEntry> = Vec::new();
    for line in text.lines() {
        // A header line starts with a hex range; field lines start with a capitalised key.
        if let Some(map) = line
            .as_bytes()
            .first()
            .filter(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            .and_then(|_| maps_line(line))
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

/// The fields of `/proc/PID/stat` that `pagewise stat --pid` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// Minor faults of the process (all threads, living and dead).
    pub minor_faults: u64,
    /// Major faults.
    pub major_faults: u64,
    /// User time in clock ticks.
    pub utime_ticks: u64,
    /// System time in clock ticks.
    pub stime_ticks: u64,
    /// Number of threads.
    pub threads: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn proc_stat(text: &str) -> Option<ProcStat> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    let get = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        minor_faults: get(10)?,
        major_faults: get(12)?,
        utime_ticks: get(14)?,
        stime_ticks: get(15)?,
        threads: get(20)?,
    })
}

/// Where a field sits in a tracepoint record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Byte offset from the start of the record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Signed integer.
    pub signed: bool,
}

/// Parses a tracefs `format` file: field name -> position. The name is the
/// last word of the declaration (`unsigned long address` -> `address`).
pub fn trace_format(text: &str) -> HashMap<String, FieldSpec> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(decl) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = decl.split(';').map(str::trim);
        let Some(decl) = parts.next() else { continue };
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for part in parts {
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("signed:") {
                signed = v == "1";
            }
        }
        // `char comm[16]` -> `comm`.
        let name = decl
            .rsplit(' ')
            .next()
            .unwrap_or(decl)
            .split('[')
            .next()
            .unwrap_or("");
        if let (Some(offset), Some(size), false) = (offset, size, name.is_empty()) {
            out.insert(
                name.to_owned(),
                FieldSpec {
                    offset,
                    size,
                    signed,
                },
            );
        }
    }
    out
}

/// Reads an integer field from a raw tracepoint record, sign-extending signed fields.
pub fn raw_field(record: &[u8], spec: FieldSpec) -> Option<u64> {
    let bytes = record.get(spec.offset..spec.offset + spec.size)?;
    let v = match spec.size {
        1 => {
            let v = bytes[0];
            if spec.signed {
                v as i8 as i64 as u64
            } else {
                v as u64
            }
        }
        2 => {
            let v = u16::from_ne_bytes(bytes.try_into().ok()?);
            if spec.signed {
                v as i16 as i64 as u64
            } else {
                v as u64
            }
        }
        4 => {
            let v = u32::from_ne_bytes(bytes.try_into().ok()?);
            if spec.signed {
                v as i32 as i64 as u64
            } else {
                v as u64
            }
        }
        8 => u64::from_ne_bytes(bytes.try_into().ok()?),
        _ => return None,
    };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAPS: &str = "\
5638c49f5000-5638c49f7000 r--p 00000000 fe:00 247278                     /usr/bin/head
5638c49f7000-5638c49fd000 r-xp 00002000 fe:00 247278                     /usr/bin/head
7f0000000000-7f0040001000 rw-p 00000000 00:00 0 
7f1a2b000000-7f1a2b200000 r-xp 00000000 00:1f 1234                       /tmp/my app/lib x.so (deleted)
7ffc1c3e0000-7ffc1c401000 rw-p 00000000 00:00 0                          [stack]
7ffc1c5f6000-7ffc1c5f8000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn maps_lines() {
        let m = maps(MAPS);
        assert_eq!(m.len(), 7);
        assert_eq!(m[1].start, 0x5638c49f7000);
        assert_eq!(m[1].offset, 0x2000);
        assert!(m[1].perms.exec && m[1].perms.read && !m[1].perms.write);
        assert_eq!(m[1].path.as_deref(), Some("/usr/bin/head"));
        assert!(m[1].is_file());
        assert_eq!(m[2].path, None);
        assert!(!m[2].is_file());
        assert_eq!(m[2].len(), 0x40001000);
        assert_eq!(m[3].path.as_deref(), Some("/tmp/my app/lib x.so"));
        assert!(m[3].deleted);
        assert_eq!(m[4].path.as_deref(), Some("[stack]"));
        assert!(!m[5].is_file());
        assert!(m[6].perms.exec && !m[6].perms.read);
    }

    #[test]
    fn bad_maps_lines_are_refused() {
        for bad in [
            "",
            "zzzz-0000 r-xp 0 fe:00 1 /x",
            "1000-0500 r-xp 0 fe:00 1 /x",
            "1000-2000 rwxq 0 fe:00 1 /x",
            "1000-2000 r-xp 0 fe00 1 /x",
            "1000-2000 r-xp",
        ] {
            assert_eq!(maps_line(bad), None, "{bad:?}");
        }
    }

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
        let e = smaps(SMAPS);
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
        let e = smaps(rollup);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].map.path.as_deref(), Some("[rollup]"));
        // More huge bytes than Rss (a racy read) never underflows.
        assert_eq!(e[0].base_page_bytes(), 0);
        assert_eq!(e[0].thp_bytes(), 2048 * 1024);
    }

    #[test]
    fn proc_stat_fields() {
        let text = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194304 262210 0 3 0 \
                    7 61 0 0 20 0 1 0 12345 1086935040 262270 18446744073709551615 \
                    1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = proc_stat(text).unwrap();
        assert_eq!(s.minor_faults, 262210);
        assert_eq!(s.major_faults, 3);
        assert_eq!(s.utime_ticks, 7);
        assert_eq!(s.stime_ticks, 61);
        assert_eq!(s.threads, 1);
        assert_eq!(proc_stat("garbage"), None);
    }

    const FORMAT: &str = "\
name: page_fault_user
ID: 190
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:unsigned long address;	offset:8;	size:8;	signed:0;
	field:unsigned long ip;	offset:16;	size:8;	signed:0;
	field:unsigned long error_code;	offset:24;	size:8;	signed:0;
	field:char comm[16];	offset:32;	size:16;	signed:0;
	field:long ret;	offset:48;	size:8;	signed:1;

print fmt: \"address=%ps ip=%ps error_code=0x%lx\", (void *)REC->address
";

    #[test]
    fn tracefs_format_fields() {
        let f = trace_format(FORMAT);
        assert_eq!(
            f["error_code"],
            FieldSpec {
                offset: 24,
                size: 8,
                signed: false
            }
        );
        assert_eq!(f["common_pid"].size, 4);
        assert!(f["common_pid"].signed);
        assert_eq!(f["comm"].size, 16);
        assert!(f["ret"].signed);
        let mut record = vec![0u8; 56];
        record[24..32].copy_from_slice(&6u64.to_ne_bytes());
        record[4..8].copy_from_slice(&(-5i32).to_ne_bytes());
        record[48..56].copy_from_slice(&(-12i64).to_ne_bytes());
        assert_eq!(raw_field(&record, f["error_code"]), Some(6));
        assert_eq!(raw_field(&record, f["common_pid"]), Some(-5i64 as u64));
        assert_eq!(raw_field(&record, f["ret"]).map(|v| v as i64), Some(-12));
        assert_eq!(raw_field(&record[..20], f["error_code"]), None);
    }

    fn maps_entry() -> impl Strategy<Value = (u64, u64, String, u64, u64, Option<String>, bool)> {
        (
            0u64..(1 << 47),
            0u64..(1 << 40),
            "[r-][w-][x-][ps]",
            0u64..(1 << 40),
            0u64..u64::MAX,
            proptest::option::of("(/[a-zA-Z0-9_. -]{1,20}){1,4}|\\[[a-z]{1,8}\\]"),
            any::<bool>(),
        )
            .prop_map(|(start, len, perms, off, inode, path, del)| {
                (start, start + len, perms, off, inode, path, del)
            })
    }

    proptest! {
        #[test]
        fn maps_line_round_trips((start, end, perms, off, inode, path, deleted) in maps_entry()) {
            let path_field = match &path {
                Some(p) if deleted => format!("{p} (deleted)"),
                Some(p) => p.clone(),
                None => String::new(),
            };
            let line = format!("{start:x}-{end:x} {perms} {off:08x} fe:01 {inode}                {path_field}");
            let e = maps_line(&line).expect("a well-formed line parses");
            prop_assert_eq!(e.start, start);
            prop_assert_eq!(e.end, end);
            prop_assert_eq!(e.offset, off);
            prop_assert_eq!(e.inode, inode);
            let want_path = path.clone().map(|p| p.trim_start().to_owned()).filter(|p| !p.is_empty());
            prop_assert_eq!(e.path.clone(), want_path);
            prop_assert_eq!(e.deleted, deleted && path.as_deref().is_some_and(|p| !p.trim().is_empty()));
            prop_assert_eq!(e.perms.exec, perms.as_bytes()[2] == b'x');
        }

        #[test]
        fn maps_line_never_panics(line in "\\PC{0,120}") {
            let _ = maps_line(&line);
        }

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
            let entries = smaps(&text);
            prop_assert_eq!(entries.len(), rss.len());
            let t = PageSizeTotals::of(&entries);
            prop_assert_eq!(t.base_bytes, want_base);
            prop_assert_eq!(t.thp_bytes, want_thp);
            prop_assert_eq!(t.hugetlb_bytes, want_hugetlb);
            prop_assert!(t.asked_huge_granted_bytes <= t.asked_huge_bytes);
        }

        #[test]
        fn smaps_never_panics(text in "\\PC{0,400}") {
            let _ = smaps(&text);
        }
    }
}
