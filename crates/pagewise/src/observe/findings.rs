//! Findings: one-line diagnoses with their evidence and remedy, ordered by
//! an estimate of what each costs the run. The rules and thresholds are
//! documented in docs/stat.md; every rule is a pure function of the report.

use super::report::{
    ChurnSite, Counts, FaultKinds, Finding, FindingKind, Hardware, PageSizes, Site, Syscalls,
    TextFootprint,
};
use crate::units::format_bytes as bytes;

/// Upper bound of the kernel time one 4 KiB first-touch fault costs, including
/// zeroing the page: measured on the development VM at 1.5–2.5 µs (4 KiB touch
/// ≈ 1.5–2.5 GB/s end to end). The estimate is capped by the measured sys time.
pub const FAULT_COST_S: f64 = 2.5e-6;
/// Kernel time a 4 KiB fault costs beyond zeroing — what a huge page saves per
/// 4 KiB when it replaces 512 faults with one.
pub const FAULT_OVERHEAD_S: f64 = 0.5e-6;
/// Share of the user time in code beyond the iTLB reach assumed lost to iTLB
/// misses when no PMU measures them (published gains of huge text plus function
/// ordering: 2–15%).
pub const ITLB_LOSS_SHARE: f64 = 0.10;
/// Lower bound of what one major fault costs (a page-cache miss served from a fast disk).
pub const MAJOR_FAULT_MIN_S: f64 = 20e-6;
/// Upper bound of what one major fault is charged from the time spent off CPU.
pub const MAJOR_FAULT_MAX_S: f64 = 10e-3;
/// A finding is reported when its estimated cost is at least this share of the wall time…
pub const MIN_COST_SHARE: f64 = 0.02;
/// …and at least this many seconds.
pub const MIN_COST_S: f64 = 0.002;

/// Heap churn needs at least this many heap mappings unmapped again…
pub const HEAP_CHURN_MIN_CYCLES: u64 = 3;
/// …and at least this many bytes mapped beyond the live peak.
pub const HEAP_CHURN_MIN_BYTES: u64 = 16 << 20;
/// File faults need at least this many major faults.
pub const FILE_FAULTS_MIN_MAJORS: u64 = 8;

/// Whether the calls could make a heap-churn finding (then its site is worth naming).
pub fn heap_churn_possible(s: &Syscalls) -> bool {
    s.heap_cycles >= HEAP_CHURN_MIN_CYCLES && s.heap_remapped_bytes >= HEAP_CHURN_MIN_BYTES
}

/// Everything the rules look at.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// Times and counts.
    pub counts: &'a Counts,
    /// Fault kinds, when tracefs was available.
    pub kinds: Option<&'a FaultKinds>,
    /// mmap-family calls, when the tracepoints were available.
    pub syscalls: Option<&'a Syscalls>,
    /// Page sizes.
    pub page_sizes: Option<&'a PageSizes>,
    /// Hot text.
    pub text: Option<&'a TextFootprint>,
    /// Hardware counters.
    pub hardware: &'a Hardware,
    /// The top fault site (with `--sites`).
    pub top_fault_site: Option<&'a Site>,
    /// The top site of heap churn.
    pub top_churn_site: Option<&'a ChurnSite>,
    /// The top site of major faults.
    pub top_major_site: Option<&'a Site>,
    /// Sampled major faults by the file mapped at the faulting address, most first.
    pub major_files: &'a [(String, u64)],
    /// Whether swap is in use on this machine (major faults on anonymous memory).
    pub swap_active: Option<bool>,
}

/// `1234567` -> `1,234,567`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

fn at(function: &str, file: &Option<String>, line: Option<u32>) -> String {
    match (file, line) {
        (Some(f), Some(l)) => {
            let short = f.rsplit('/').next().unwrap_or(f);
            format!("{function} ({short}:{l})")
        }
        _ => function.to_owned(),
    }
}

/// Every finding whose cost passes the thresholds, most costly first.
pub fn findings(e: &Evidence<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = [
        first_touch_and_churn(e),
        text_footprint(e).into_iter().collect(),
        file_faults(e).into_iter().collect(),
        thp_not_granted(e).into_iter().collect(),
    ]
    .into_iter()
    .flatten()
    .filter(|f| f.cost_s >= MIN_COST_S && f.cost_s >= MIN_COST_SHARE * e.counts.wall_s)
    .collect();
    out.sort_by(|a, b| b.cost_s.total_cmp(&a.cost_s));
    out
}

/// Anonymous first-touch faults: write faults to absent pages (plus faults
/// inside system calls, which write into fresh buffers), else all minor faults.
fn anon_faults(e: &Evidence<'_>) -> (u64, &'static str) {
    match e.kinds {
        Some(k) => (
            k.write_absent + e.counts.syscall_faults.unwrap_or(0),
            "write faults to absent pages",
        ),
        None => (
            e.counts.minor_faults,
            "minor faults (fault kinds unavailable)",
        ),
    }
}

fn first_touch_and_churn(e: &Evidence<'_>) -> Vec<Finding> {
    let c = e.counts;
    let (faults, what) = anon_faults(e);
    if faults < 256 {
        return vec![];
    }
    let fault_time = c.sys_s.min(faults as f64 * FAULT_COST_S);
    // "Dominates sys time": most of the kernel time is explained by these faults.
    if fault_time < 0.5 * c.sys_s {
        return vec![];
    }
    let remapped_pages = e.syscalls.map_or(0, |s| s.heap_remapped_bytes / 4096);
    let churn_share = (remapped_pages as f64 / faults as f64).min(1.0);
    let mut out = vec![];
    let touch_cost = fault_time * (1.0 - churn_share);
    let site = e
        .top_fault_site
        .map(|s| format!("; top site {}", at(&s.function, &s.file, s.line)))
        .unwrap_or_default();
    out.push(Finding {
        kind: FindingKind::FirstTouch,
        summary: format!(
            "first-touch: {} page faults map and zero {} of fresh memory, about {} of {} kernel time",
            count(faults),
            bytes(faults * 4096),
            secs(fault_time),
            secs(c.sys_s)
        ),
        evidence: format!(
            "{} {what}; sys {:.2} s, user {:.2} s, wall {:.2} s; {} faults/s{site}",
            count(faults),
            c.sys_s,
            c.user_s,
            c.wall_s,
            count(c.faults_per_s.round() as u64)
        ),
        remedy: "map the memory once and fault it in off the critical path: pagewise regions \
                 (huge pages, MADV_POPULATE_WRITE, background populate), prefault at start-up, \
                 or reuse buffers instead of allocating fresh memory"
            .to_owned(),
        cost_s: touch_cost,
    });
    if let Some(s) = e.syscalls {
        if heap_churn_possible(s) {
            let (place, sizes) = match e.top_churn_site {
                Some(cs) => (
                    at(&cs.function, &cs.file, cs.line),
                    cs.sizes
                        .iter()
                        .take(3)
                        .map(|&b| bytes(b))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                None => (String::new(), String::new()),
            };
            let site = if place.is_empty() {
                String::new()
            } else {
                format!(" from {place}")
            };
            let sizes_part = if sizes.is_empty() {
                String::new()
            } else {
                format!(" of {sizes}")
            };
            let buffer = match (sizes.is_empty(), place.is_empty()) {
                (false, false) => format!("the {sizes} buffer in {place}"),
                (false, true) => format!("the {sizes} buffer"),
                (true, false) => format!("the buffer in {place}"),
                (true, true) => "the buffer".to_owned(),
            };
            out.push(Finding {
                kind: FindingKind::HeapChurn,
                summary: format!(
                    "heap-churn: {} heap mappings{sizes_part}{site} were unmapped and mapped again, \
                     so {} was faulted and zeroed again",
                    count(s.heap_cycles),
                    bytes(s.heap_remapped_bytes)
                ),
                evidence: format!(
                    "mmap {} calls ({}), munmap {} calls; {} heap mappings unmapped; {} mapped beyond \
                     the peak live; about {:.0}% of the first-touch faults",
                    count(s.mmap.calls),
                    bytes(s.mmap.bytes),
                    count(s.munmap.calls),
                    count(s.heap_cycles),
                    bytes(s.heap_remapped_bytes),
                    churn_share * 100.0
                ),
                remedy: format!(
                    "`pagewise run --keep-heap -- CMD` (raises glibc's mmap and trim thresholds so \
                     freed blocks stay mapped), or allocate {buffer} once and reuse it \
                     (`pagewise::buffer::Buffer` reserves the largest size once and keeps its pages)"
                ),
                cost_s: fault_time * churn_share,
            });
        }
    }
    out
}

fn text_footprint(e: &Evidence<'_>) -> Option<Finding> {
    let t = e.text?;
    if t.samples < 100 {
        return None;
    }
    let hot_bytes = t.pages_4k.p90 * 4096;
    let reach = t.itlb.reach_4k();
    if hot_bytes <= reach {
        return None;
    }
    let c = e.counts;
    let (cost, how) = match (e.hardware.itlb_misses, e.hardware.cycles) {
        (Some(misses), Some(cycles)) if cycles > 0 => {
            // About 20 cycles per miss that hits the second-level TLB or a cached walk.
            let cpu_s = c.user_s + c.sys_s;
            let s = (misses as f64 * 20.0 / cycles as f64 * cpu_s).min(c.user_s);
            (s, format!("{} iTLB misses measured", count(misses)))
        }
        _ => (
            c.user_s * t.beyond_reach_share * ITLB_LOSS_SHARE,
            format!(
                "estimated: {:.0}% of {:.0}% user time beyond the reach (no PMU to count iTLB misses)",
                ITLB_LOSS_SHARE * 100.0,
                t.beyond_reach_share * 100.0
            ),
        ),
    };
    let top_object = t
        .objects
        .first()
        .map(|(o, n)| {
            format!(
                "; hottest object {o} ({:.0}% of samples)",
                *n as f64 * 100.0 / t.samples as f64
            )
        })
        .unwrap_or_default();
    Some(Finding {
        kind: FindingKind::TextFootprint,
        summary: format!(
            "text-footprint: hot code spans {} 4 KiB pages ({}) for 90% of samples, {:.1}x the iTLB reach of {}",
            count(t.pages_4k.p90),
            bytes(hot_bytes),
            hot_bytes as f64 / reach as f64,
            bytes(reach)
        ),
        evidence: format!(
            "{} user samples at {} Hz; 4 KiB pages for 50/90/99%: {}/{}/{}; 2 MiB pages: {}/{}/{}; \
             iTLB {} x 4 KiB, {} x 2 MiB ({}); {how}{top_object}",
            count(t.samples),
            t.frequency_hz,
            t.pages_4k.p50,
            t.pages_4k.p90,
            t.pages_4k.p99,
            t.pages_2m.p50,
            t.pages_2m.p90,
            t.pages_2m.p99,
            t.itlb.entries_4k,
            t.itlb.entries_2m,
            t.itlb.source.split(':').next().unwrap_or(""),
        ),
        remedy: format!(
            "`pagewise run --huge-text -- CMD` ({} 2 MiB pages cover 90% of samples, against {} 2 MiB \
             iTLB entries), and order hot functions together (-ffunction-sections with a linker \
             --symbol-ordering-file from a profile)",
            t.pages_2m.p90, t.itlb.entries_2m
        ),
        cost_s: cost,
    })
}

fn file_faults(e: &Evidence<'_>) -> Option<Finding> {
    let c = e.counts;
    let majors = c.major_faults;
    if majors < FILE_FAULTS_MIN_MAJORS {
        return None;
    }
    let sampled: u64 = e.major_files.iter().map(|(_, n)| n).sum();
    let file_sampled: u64 = e
        .major_files
        .iter()
        .filter(|(f, _)| f.starts_with('/') && !f.starts_with("//anon"))
        .map(|(_, n)| n)
        .sum();
    // On file mappings: shown by the samples, or implied when there is no swap.
    let on_files = if sampled > 0 {
        file_sampled * 2 >= sampled
    } else {
        e.swap_active == Some(false)
    };
    if !on_files {
        return None;
    }
    let off_cpu = (c.wall_s - c.user_s - c.sys_s).max(0.0);
    let cost =
        (majors as f64 * MAJOR_FAULT_MIN_S).max(off_cpu.min(majors as f64 * MAJOR_FAULT_MAX_S));
    let top_file = e
        .major_files
        .first()
        .filter(|(f, _)| f.starts_with('/'))
        .map(|(f, _)| f.clone());
    let site = e
        .top_major_site
        .map(|s| format!("; top site {}", at(&s.function, &s.file, s.line)))
        .unwrap_or_default();
    let files = if sampled > 0 {
        format!(
            "{} of {} sampled on file mappings{}",
            count(file_sampled),
            count(sampled),
            top_file
                .as_deref()
                .map(|f| format!(", most in {f}"))
                .unwrap_or_default()
        )
    } else {
        "no swap is active, so they are file-backed".to_owned()
    };
    Some(Finding {
        kind: FindingKind::FileFaults,
        summary: format!(
            "file-faults: {} major faults waited for file reads{}, about {} off CPU",
            count(majors),
            top_file
                .as_deref()
                .map(|f| format!(" of {f}"))
                .unwrap_or_default(),
            secs(off_cpu)
        ),
        evidence: format!(
            "{} major faults ({files}); wall {:.2} s, on CPU {:.2} s{site}",
            count(majors),
            c.wall_s,
            c.user_s + c.sys_s
        ),
        remedy: "read the data ahead of the hot path: keep the file on tmpfs or in page cache, \
                 fallocate it, prefetch with madvise(MADV_WILLNEED / MADV_POPULATE_READ), \
                 posix_fadvise(POSIX_FADV_WILLNEED) or readahead(2), or map it with MAP_POPULATE"
            .to_owned(),
        cost_s: cost,
    })
}

fn thp_not_granted(e: &Evidence<'_>) -> Option<Finding> {
    let p = e.page_sizes?;
    let asked = p.peak_asked_huge_bytes;
    let granted = p.peak_asked_huge_granted_bytes;
    if asked < 4 << 20 || granted * 2 >= asked {
        return None;
    }
    let missing = asked - granted;
    let advised = e
        .syscalls
        .map(|s| {
            format!(
                "; madvise(MADV_HUGEPAGE) on {}",
                bytes(s.madv_hugepage_bytes)
            )
        })
        .unwrap_or_default();
    Some(Finding {
        kind: FindingKind::ThpNotGranted,
        summary: format!(
            "thp-not-granted: {} resident in MADV_HUGEPAGE ranges, only {} of it on huge pages",
            bytes(asked),
            bytes(granted)
        ),
        evidence: format!(
            "peak in 'hg' mappings: {} resident, {} AnonHugePages ({:.0}%){advised}; {} snapshots every {} ms",
            bytes(asked),
            bytes(granted),
            granted as f64 * 100.0 / asked as f64,
            p.samples,
            p.interval_ms
        ),
        remedy: "check THP enabled/defrag with `pagewise doctor`, align the ranges to 2 MiB, \
                 populate with MADV_POPULATE_WRITE after MADV_HUGEPAGE, or use pagewise regions \
                 (hugetlb, then THP, with the fallback reported)"
            .to_owned(),
        cost_s: (missing / 4096) as f64 * FAULT_OVERHEAD_S,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::report::Coverage;

    fn counts(wall: f64, user: f64, sys: f64, minor: u64, major: u64) -> Counts {
        Counts {
            wall_s: wall,
            user_s: user,
            sys_s: sys,
            minor_faults: minor,
            major_faults: major,
            faults_per_s: (minor + major) as f64 / wall,
            syscall_faults: Some(0),
            ..Counts::default()
        }
    }

    fn evidence<'a>(c: &'a Counts, hw: &'a Hardware) -> Evidence<'a> {
        Evidence {
            counts: c,
            kinds: None,
            syscalls: None,
            page_sizes: None,
            text: None,
            hardware: hw,
            top_fault_site: None,
            top_churn_site: None,
            top_major_site: None,
            major_files: &[],
            swap_active: Some(false),
        }
    }

    #[test]
    fn number_formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(262144), "262,144");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(bytes(1 << 30), "1 GiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn a_big_memset_is_first_touch() {
        let c = counts(0.66, 0.06, 0.60, 262_200, 0);
        let hw = Hardware::default();
        let kinds = FaultKinds {
            write_absent: 262_150,
            read_absent: 40,
            fetch_absent: 10,
            protection: 0,
            samples: 5000,
            samples_by_kind: [4990, 8, 2, 0],
        };
        let site = Site {
            function: "touch_buffer".into(),
            file: Some("/x/a.c".into()),
            line: Some(4),
            object: "/x/a".into(),
            faults: 262_000,
            share: 0.99,
            via: Some("__memset_avx2_unaligned_erms".into()),
            callers: vec![],
        };
        let e = Evidence {
            kinds: Some(&kinds),
            top_fault_site: Some(&site),
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::FirstTouch);
        assert!(
            f[0].evidence.contains("touch_buffer (a.c:4)"),
            "{}",
            f[0].evidence
        );
        assert!(f[0].summary.contains("262,150"), "{}", f[0].summary);
        assert!((f[0].cost_s - 0.60).abs() < 1e-9, "capped by sys time");
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn repeated_big_mallocs_are_heap_churn_first() {
        let c = counts(2.0, 0.3, 1.6, 655_400, 0);
        let hw = Hardware::default();
        let sys = Syscalls {
            heap_cycles: 40,
            heap_remapped_bytes: 39 * (64 << 20),
            ..Syscalls::default()
        };
        let cs = ChurnSite {
            function: "churn".into(),
            file: Some("b.c".into()),
            line: Some(9),
            via: Some("malloc".into()),
            cycles: 40,
            bytes: 40 * (64 << 20),
            sizes: vec![(64 << 20) + 4096],
            callers: vec![],
        };
        let e = Evidence {
            syscalls: Some(&sys),
            top_churn_site: Some(&cs),
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::HeapChurn, "{f:#?}");
        assert!(f[0].summary.contains("churn (b.c:9)"));
        assert!(f[0].summary.contains("64.0 MiB"), "{}", f[0].summary);
        assert!(f[0].remedy.contains("--keep-heap"));
        assert_eq!(f[1].kind, FindingKind::FirstTouch);
        assert!(f[0].cost_s > f[1].cost_s);
    }

    #[test]
    fn no_faults_no_findings() {
        let c = counts(1.0, 0.99, 0.01, 100, 0);
        let hw = Hardware::default();
        assert!(findings(&evidence(&c, &hw)).is_empty());
    }

    #[test]
    fn spread_hot_text_is_text_footprint() {
        let c = counts(2.0, 1.9, 0.05, 3000, 0);
        let hw = Hardware::default();
        let t = TextFootprint {
            samples: 8000,
            frequency_hz: 4000,
            pages_4k: Coverage {
                p50: 1100,
                p90: 2000,
                p99: 2250,
            },
            pages_2m: Coverage {
                p50: 3,
                p90: 5,
                p99: 5,
            },
            itlb: crate::observe::hot_text::itlb(&Default::default()),
            beyond_reach_share: 0.94,
            objects: vec![("/x/c".into(), 7900)],
        };
        let e = Evidence {
            text: Some(&t),
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::TextFootprint);
        assert!(f[0].remedy.contains("--huge-text"));
        assert!(
            f[0].summary.contains("2,000 4 KiB pages"),
            "{}",
            f[0].summary
        );
        // Small hot text: nothing.
        let small = TextFootprint {
            pages_4k: Coverage {
                p50: 2,
                p90: 10,
                p99: 30,
            },
            ..t.clone()
        };
        let e = Evidence {
            text: Some(&small),
            ..evidence(&c, &hw)
        };
        assert!(findings(&e).is_empty());
    }

    #[test]
    fn major_faults_on_a_file_are_file_faults() {
        let c = counts(1.2, 0.1, 0.3, 5000, 2048);
        let hw = Hardware::default();
        let files = vec![
            ("/data/big.dat".to_owned(), 2000),
            ("//anon".to_owned(), 48),
        ];
        let e = Evidence {
            major_files: &files,
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::FileFaults);
        assert!(f[0].summary.contains("/data/big.dat"));
        assert!((f[0].cost_s - 0.8).abs() < 1e-9);
        // Major faults on anonymous memory (swap) are not file faults.
        let anon = vec![("//anon".to_owned(), 2000)];
        let e = Evidence {
            major_files: &anon,
            ..evidence(&c, &hw)
        };
        assert!(findings(&e)
            .iter()
            .all(|f| f.kind != FindingKind::FileFaults));
    }

    #[test]
    fn huge_pages_asked_but_not_given() {
        let c = counts(1.0, 0.5, 0.45, 131_072, 0);
        let hw = Hardware::default();
        let p = PageSizes {
            samples: 10,
            interval_ms: 100,
            peak_asked_huge_bytes: 512 << 20,
            peak_asked_huge_granted_bytes: 8 << 20,
            ..PageSizes::default()
        };
        let e = Evidence {
            page_sizes: Some(&p),
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert!(
            f.iter().any(|f| f.kind == FindingKind::ThpNotGranted),
            "{f:#?}"
        );
        let granted = PageSizes {
            peak_asked_huge_granted_bytes: 500 << 20,
            ..p
        };
        let e = Evidence {
            page_sizes: Some(&granted),
            ..evidence(&c, &hw)
        };
        assert!(findings(&e)
            .iter()
            .all(|f| f.kind != FindingKind::ThpNotGranted));
    }
}
