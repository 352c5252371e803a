//! Findings: one-line diagnoses with their evidence and remedy, ordered by
//! an estimate of what each costs the run. The rules and thresholds are
//! documented in docs/stat.md; every rule is a pure function of the report.

use super::names::short_name;
use super::report::{
    ChurnSite, Costs, Counts, FaultKinds, Finding, FindingKind, Hardware, MappingRecords,
    PageSizes, Site, Syscalls, TextFootprint,
};
use crate::units::{format_byte_list, format_bytes as bytes};

// Every constant below is a policy threshold (when a finding is worth
// reporting) or a documented assumption; none is a cost measured on one
// machine. docs/stat.md lists each with why it holds on any machine. The
// cost of a page fault comes from the machine: the run's own kernel samples
// or a calibration (`Costs`).

/// Share of the user time in code beyond the iTLB reach assumed lost to iTLB
/// misses when no PMU measures them (published gains of huge text plus function
/// ordering: 2–15%).
pub const ITLB_LOSS_SHARE: f64 = 0.10;
/// Cycles assumed per iTLB miss when the PMU counts misses but not their cost
/// (a miss that hits the second-level TLB or a cached page walk).
pub const ITLB_MISS_CYCLES: f64 = 20.0;
/// Lower bound of what one major fault costs (a page-cache miss served from a fast disk).
pub const MAJOR_FAULT_MIN_S: f64 = 20e-6;
/// Upper bound of what one major fault is charged from the time spent off CPU.
pub const MAJOR_FAULT_MAX_S: f64 = 10e-3;
/// A finding is reported when its estimated cost is at least this share of
/// the program's time ([`program_time`])…
pub const MIN_COST_SHARE: f64 = 0.02;
/// …and at least this many seconds.
pub const MIN_COST_S: f64 = 0.002;

/// First touch needs at least this many anonymous first-touch faults.
pub const FIRST_TOUCH_MIN_FAULTS: u64 = 256;
/// The sampled share of system time in the page-fault handler is used when
/// at least this many kernel samples (20 ms of system time at 1 kHz) back it;
/// otherwise the calibrated fault cost is.
pub const MIN_KERNEL_SAMPLES: u64 = 20;
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
    /// Fault kinds, when the fault-kind tracepoint was available.
    pub kinds: Option<&'a FaultKinds>,
    /// mmap-family calls, when the tracepoints were available.
    pub syscalls: Option<&'a Syscalls>,
    /// Heap-like mappings in perf mmap records (heap churn without tracepoints).
    pub mapping_records: Option<&'a MappingRecords>,
    /// Page sizes.
    pub page_sizes: Option<&'a PageSizes>,
    /// Hot text.
    pub text: Option<&'a TextFootprint>,
    /// Hardware counters.
    pub hardware: &'a Hardware,
    /// What a fault costs here, and the run's kernel samples.
    pub costs: &'a Costs,
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

/// `1.4 µs` (or ns below a microsecond).
pub fn micros(s: f64) -> String {
    if s >= 1e-6 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.0} ns", s * 1e9)
    }
}

fn at(function: &str, file: &Option<String>, line: Option<u32>) -> String {
    let function = short_name(function);
    match (file, line) {
        (Some(f), Some(l)) => {
            let short = f.rsplit('/').next().unwrap_or(f);
            format!("{function} ({short}:{l})")
        }
        _ => function,
    }
}

/// The time a finding's cost is compared with: the wall time, or the CPU
/// time (user + sys) when that is less. On a loaded machine a program waits
/// for a CPU and its wall time stretches, while what a finding costs it does
/// not; against the CPU time the same program gets the same findings there.
pub fn program_time(c: &Counts) -> f64 {
    let cpu = c.user_s + c.sys_s;
    if cpu > 0.0 {
        c.wall_s.min(cpu)
    } else {
        c.wall_s
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
    .filter(|f| f.cost_s >= MIN_COST_S && f.cost_s >= MIN_COST_SHARE * program_time(e.counts))
    .collect();
    out.sort_by(|a, b| b.cost_s.total_cmp(&a.cost_s));
    out
}

/// A number that rests on the estimated split of fault kinds, as findings
/// quote it: `~N (95% range L–H)`, or plain `N` without a range (exact).
pub fn hedged(n: u64, range: Option<(u64, u64)>, show: impl Fn(u64) -> String) -> String {
    match range {
        Some((low, high)) => format!("~{} (95% range {}–{})", show(n), show(low), show(high)),
        None => show(n),
    }
}

/// Anonymous first-touch faults: write faults to absent pages (plus faults
/// inside system calls, which write into fresh buffers), else all minor
/// faults; with what they are, their range when the split of kinds was
/// estimated, and from what they were inferred when the kinds were not
/// measured.
struct AnonFaults {
    faults: u64,
    range: Option<(u64, u64)>,
    what: String,
    inferred: Option<String>,
}

fn anon_faults(e: &Evidence<'_>) -> AnonFaults {
    match e.kinds {
        Some(k) => {
            let (n, low, high) = k.write_absent_range();
            let syscall = e.counts.syscall_faults.unwrap_or(0);
            let sampled = if k.exact {
                "every fault counted by kind".to_owned()
            } else {
                format!(
                    "{} faults counted by kind in {} windows, the rest split as they were",
                    count(k.samples),
                    count(k.windows)
                )
            };
            AnonFaults {
                faults: n + syscall,
                range: (!k.exact).then_some((low + syscall, high + syscall)),
                what: format!("write faults to absent pages ({sampled})"),
                inferred: None,
            }
        }
        None => AnonFaults {
            faults: e.counts.minor_faults,
            range: None,
            what: "minor faults".to_owned(),
            inferred: Some(
                "minor fault counts: the fault kinds (exceptions:page_fault_user) were not \
                 available, so every minor fault is taken for a first touch"
                    .to_owned(),
            ),
        },
    }
}

/// The run's time in `faults` first-touch faults, and how it was estimated:
/// the sampled share of system time in the page-fault handler (scaled to
/// these faults' share of all faults), else faults times the calibrated
/// cost, at most the system time.
fn fault_time(e: &Evidence<'_>, faults: u64) -> (f64, String) {
    let c = e.counts;
    let costs = e.costs;
    if let (Some(total), Some(in_handler)) = (costs.kernel_samples, costs.kernel_fault_samples) {
        if total >= MIN_KERNEL_SAMPLES {
            let share = in_handler as f64 / total as f64;
            let all = (c.minor_faults + c.major_faults).max(faults).max(1);
            let time = c.sys_s * share * faults as f64 / all as f64;
            return (
                time,
                format!(
                    "{:.0}% of {} kernel samples in the page-fault handler",
                    share * 100.0,
                    count(total)
                ),
            );
        }
    }
    (
        c.sys_s.min(faults as f64 * costs.fault_s),
        format!(
            "{} per fault ({} here), at most the sys time",
            micros(costs.fault_s),
            costs.source
        ),
    )
}

/// The resident peak the memory faulted in is compared with, and how many
/// address spaces could each have held that much. A run of several
/// processes faults each one's memory in once, and the sum of their peaks
/// is not known (`getrusage` keeps the largest, not the sum); it is at most
/// the programs that ran times the largest peak, and only what was faulted
/// beyond that must have been released and faulted again.
struct Peak {
    /// The largest process's peak RSS (`getrusage`), else the page-size
    /// snapshots' peak (`--pid`: summed over the live processes, so at
    /// least any one process's at that snapshot).
    bytes: u64,
    /// Processes and programs that ran (`None`: sampling did not open, so
    /// the fork and exec records that count them were not read).
    census: Option<(u64, u64)>,
}

impl Peak {
    fn of(e: &Evidence<'_>) -> Option<Peak> {
        let c = e.counts;
        let bytes = c
            .max_rss_bytes
            .or(e.page_sizes.map(|p| p.peak_total_bytes))
            .filter(|&b| b > 0)?;
        Some(Peak {
            bytes,
            census: c.processes.zip(c.programs),
        })
    }

    /// Programs that ran, when more than one.
    fn several(&self) -> Option<u64> {
        self.census.map(|(_, programs)| programs).filter(|&n| n > 1)
    }

    /// The most memory the run can have faulted in without faulting any of
    /// it again: every program's address space up to the peak, once.
    fn once(&self) -> u64 {
        self.bytes.saturating_mul(self.several().unwrap_or(1))
    }

    /// "15 processes", "19 programs in 15 processes".
    fn runs(&self) -> String {
        match self.census {
            Some((processes, programs)) if programs > processes => {
                format!(
                    "{} programs in {} processes",
                    count(programs),
                    count(processes)
                )
            }
            Some((processes, _)) => format!("{} processes", count(processes)),
            None => "an unknown number of processes".to_owned(),
        }
    }

    /// The peak as the evidence quotes it: "a peak RSS of 61.5 MiB", or with
    /// several programs "15 processes of at most 61.5 MiB peak RSS each
    /// (922.5 MiB in all)".
    fn words(&self) -> String {
        match self.several() {
            None => format!("a peak RSS of {}", bytes(self.bytes)),
            Some(_) => format!(
                "{} of at most {} peak RSS each ({} in all)",
                self.runs(),
                bytes(self.bytes),
                bytes(self.once())
            ),
        }
    }
}

/// What the memory faulted in shows against the resident peak, for the
/// first-touch evidence: memory released and faulted again only when it is
/// more than twice what the programs that ran could hold once.
fn faulted_against_peak(e: &Evidence<'_>, faulted: u64) -> String {
    let Some(peak) = Peak::of(e) else {
        return String::new();
    };
    let again = faulted > 2 * peak.once();
    let faulted = bytes(faulted);
    match (peak.census, peak.several()) {
        (Some(_), None) if again => format!(
            "; {faulted} faulted in against {}: memory was released and faulted again",
            peak.words()
        ),
        (None, _) if again => format!(
            "; {faulted} faulted in against {} (the largest process's): if the command ran \
             one process, memory was released and faulted again (how many ran is not known: \
             sampling did not open)",
            peak.words()
        ),
        (_, Some(_)) if again => format!(
            "; {faulted} faulted in by {}, more than twice what they could hold at once: \
             memory was released and faulted again",
            peak.words()
        ),
        (_, Some(_)) => format!(
            "; {faulted} faulted in by {}: each may have faulted its own memory in once, so \
             this does not show memory faulted again",
            peak.words()
        ),
        _ => format!("; peak RSS {}", bytes(peak.bytes)),
    }
}

/// Memory mapped, faulted and zeroed again, found one way or the other.
struct Churn {
    /// Share of the first-touch faults it accounts for.
    share: f64,
    /// Whether it makes a finding.
    reported: bool,
    summary: String,
    evidence: String,
    /// The buffer, for the remedy.
    buffer: String,
    inferred_from: Option<String>,
}

/// Heap churn from the mmap/munmap tracepoints; `quoted` is the first-touch
/// fault count as the evidence quotes it ([`hedged`]).
fn churn_from_calls(e: &Evidence<'_>, s: &Syscalls, faults: u64, quoted: &str) -> Churn {
    let remapped_pages = s.heap_remapped_bytes / 4096;
    let share = (remapped_pages as f64 / faults as f64).min(1.0);
    let (place, sizes) = match e.top_churn_site {
        Some(cs) => (
            at(&cs.function, &cs.file, cs.line),
            format_byte_list(&cs.sizes[..cs.sizes.len().min(3)]),
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
    Churn {
        share,
        reported: heap_churn_possible(s),
        summary: format!(
            "heap-churn: {} heap mappings{sizes_part}{site} were unmapped and mapped again, \
             so {} was faulted and zeroed again",
            count(s.heap_cycles),
            bytes(s.heap_remapped_bytes)
        ),
        evidence: format!(
            "mmap {} calls ({}), munmap {} calls; {} heap mappings unmapped; {} mapped beyond \
             the peak live; about {:.0}% of the {quoted} first-touch faults",
            count(s.mmap.calls),
            bytes(s.mmap.bytes),
            count(s.munmap.calls),
            count(s.heap_cycles),
            bytes(s.heap_remapped_bytes),
            share * 100.0
        ),
        buffer,
        inferred_from: None,
    }
}

/// Heap churn inferred without tracepoints. Perf `MMAP2` records of the same
/// anonymous range made again show that heap-like mappings churn; how much is
/// the memory faulted in beyond what the programs that ran could hold once
/// ([`Peak::once`]: it must have been released and faulted again), at most
/// the bytes of all heap-like mappings recorded.
/// Counting only the ranges recorded again at the same address would miss the
/// mappings the kernel placed elsewhere the next time.
fn churn_from_records(
    e: &Evidence<'_>,
    r: &MappingRecords,
    (faults, quoted): (u64, &str),
    faulted: u64,
) -> Option<Churn> {
    if r.remapped == 0 {
        return None;
    }
    let peak = Peak::of(e);
    let beyond_peak = faulted.saturating_sub(peak.as_ref().map_or(0, Peak::once));
    // Every repeat is a heap-like mapping, so all of them bound what was faulted again.
    let remapped = beyond_peak.min(r.heap_bytes);
    let share = (remapped as f64 / 4096.0 / faults as f64).min(1.0);
    let sizes = format_byte_list(&r.sizes);
    let site = e.top_fault_site.map(|s| at(&s.function, &s.file, s.line));
    let buffer = match &site {
        Some(place) => format!("the buffer first touched in {place}"),
        None => "the buffer".to_owned(),
    };
    Some(Churn {
        share,
        reported: r.remapped >= HEAP_CHURN_MIN_CYCLES && remapped >= HEAP_CHURN_MIN_BYTES,
        summary: format!(
            "heap-churn (inferred): anonymous ranges of {sizes} were mapped again {} times at \
             the same addresses, so about {} was faulted and zeroed again",
            count(r.remapped),
            bytes(remapped)
        ),
        evidence: format!(
            "{} of {} heap-like mapping records (1 MiB or more) repeat an earlier range; {} \
             faulted in ({quoted} faults) against {}; about {:.0}% of the first-touch \
             faults{}",
            count(r.remapped),
            count(r.heap_records),
            bytes(faulted),
            peak.map_or_else(|| "an unknown peak RSS".to_owned(), |p| p.words()),
            share * 100.0,
            site.map(|s| format!("; top fault site {s}"))
                .unwrap_or_default()
        ),
        buffer,
        inferred_from: Some(
            "perf mmap records (the same anonymous range mapped again), fault counts and the \
             peak RSS: the mmap/munmap tracepoints were not available"
                .to_owned(),
        ),
    })
}

fn first_touch_and_churn(e: &Evidence<'_>) -> Vec<Finding> {
    let c = e.counts;
    let AnonFaults {
        faults,
        range,
        what,
        inferred,
    } = anon_faults(e);
    if faults < FIRST_TOUCH_MIN_FAULTS {
        return vec![];
    }
    let (fault_time, how) = fault_time(e, faults);
    let faulted = faults.saturating_mul(4096);
    let quoted = hedged(faults, range, count);
    let churn = match (e.syscalls, e.mapping_records) {
        (Some(s), _) => Some(churn_from_calls(e, s, faults, &quoted)),
        (None, Some(r)) => churn_from_records(e, r, (faults, &quoted), faulted),
        (None, None) => None,
    };
    let churn_share = churn.as_ref().map_or(0.0, |ch| ch.share);
    let site = e
        .top_fault_site
        .map(|s| format!("; top site {}", at(&s.function, &s.file, s.line)))
        .unwrap_or_default();
    let rss = faulted_against_peak(e, faulted);
    let mut out = vec![Finding {
        kind: FindingKind::FirstTouch,
        summary: format!(
            "first-touch: {} page faults map and zero {} of fresh memory, about {} of {} kernel time",
            quoted,
            hedged(faults, range, |n| bytes(n.saturating_mul(4096))),
            secs(fault_time),
            secs(c.sys_s)
        ),
        evidence: format!(
            "{} {what}; sys {:.2} s, user {:.2} s, wall {:.2} s; {} faults/s; fault time from \
             {how}{rss}{site}",
            quoted,
            c.sys_s,
            c.user_s,
            c.wall_s,
            count(c.faults_per_s.round() as u64)
        ),
        remedy: "map the memory once and fault it in off the critical path: pagewise regions \
                 (huge pages, MADV_POPULATE_WRITE, background populate), prefault at start-up, \
                 or reuse buffers instead of allocating fresh memory; for a program you cannot \
                 change whose memory comes from glibc's malloc, `pagewise run --thp-heap -- CMD` \
                 (one fault per 2 MiB huge page; prove it with `pagewise bench run --fix \
                 thp-heap -- CMD`)"
            .to_owned(),
        cost_s: fault_time * (1.0 - churn_share),
        inferred_from: inferred,
    }];
    if let Some(ch) = churn.filter(|ch| ch.reported) {
        out.push(Finding {
            kind: FindingKind::HeapChurn,
            summary: ch.summary,
            evidence: ch.evidence,
            remedy: format!(
                "`pagewise run --keep-heap -- CMD` (raises glibc's mmap and trim thresholds so \
                 freed blocks stay mapped), or allocate {} once and reuse it \
                 (`pagewise::buffer::Buffer` reserves the largest size once and keeps its pages)",
                ch.buffer
            ),
            cost_s: fault_time * churn_share,
            inferred_from: ch.inferred_from,
        });
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
            let cpu_s = c.user_s + c.sys_s;
            let s = (misses as f64 * ITLB_MISS_CYCLES / cycles as f64 * cpu_s).min(c.user_s);
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
        inferred_from: None,
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
        inferred_from: None,
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
    // Unknown only when the calibration failed: then the whole (assumed) fault cost.
    let overhead = e.costs.fault_overhead_s.unwrap_or(e.costs.fault_s);
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
            "peak in 'hg' mappings: {} resident, {} AnonHugePages ({:.0}%){advised}; {} snapshots \
             every {} ms; a 4 KiB fault costs {} beyond zeroing the page here ({}), what a huge \
             page saves per 4 KiB",
            bytes(asked),
            bytes(granted),
            granted as f64 * 100.0 / asked as f64,
            p.samples,
            p.interval_ms,
            micros(overhead),
            e.costs.source
        ),
        remedy: "check THP enabled/defrag with `pagewise doctor`, align the ranges to 2 MiB, \
                 populate with MADV_POPULATE_WRITE after MADV_HUGEPAGE, or use pagewise regions \
                 (hugetlb, then THP, with the fallback reported)"
            .to_owned(),
        cost_s: (missing / 4096) as f64 * overhead,
        inferred_from: None,
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

    /// A calibrated fault cost for the tests (any machine's would do).
    fn costs() -> &'static Costs {
        static COSTS: std::sync::OnceLock<Costs> = std::sync::OnceLock::new();
        COSTS.get_or_init(|| Costs {
            fault_s: 2.5e-6,
            rewrite_4k_s: Some(0.5e-6),
            fault_overhead_s: Some(2.0e-6),
            source: "measured".into(),
            fault_time_from: "calibration".into(),
            ..Costs::default()
        })
    }

    fn evidence<'a>(c: &'a Counts, hw: &'a Hardware) -> Evidence<'a> {
        Evidence {
            counts: c,
            kinds: None,
            syscalls: None,
            mapping_records: None,
            page_sizes: None,
            text: None,
            hardware: hw,
            costs: costs(),
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
            low_by_kind: [261_000, 8, 2, 0],
            high_by_kind: [262_190, 1_200, 300, 150],
            windows: 40,
            confidence: 0.95,
            exact: false,
        };
        let site = Site {
            function: "touch_buffer".into(),
            own_code: true,
            file: Some("/x/a.c".into()),
            line: Some(4),
            object: "/x/a".into(),
            faults: 262_000,
            share: 0.99,
            via: Some("__memset_avx2_unaligned_erms".into()),
            callers: vec![],
            interpreter: None,
            script: None,
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
        // The count rests on the sampled split: said with its range, in
        // faults and in bytes.
        assert!(
            f[0].summary
                .contains("~262,150 (95% range 261,000–262,190) page faults"),
            "{}",
            f[0].summary
        );
        assert!(
            f[0].summary
                .contains("~1.0 GiB (95% range 1019.5 MiB–1.0 GiB)"),
            "{}",
            f[0].summary
        );
        assert!(f[0].evidence.contains("40 windows"), "{}", f[0].evidence);
        assert!((f[0].cost_s - 0.60).abs() < 1e-9, "capped by sys time");
        assert_eq!(f.len(), 1);
        assert!(f[0].inferred_from.is_none(), "the kinds were measured");
        // Without the kinds: every minor fault, and it says so.
        let e = Evidence {
            top_fault_site: Some(&site),
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::FirstTouch);
        assert!(f[0]
            .inferred_from
            .as_deref()
            .unwrap()
            .contains("minor fault"));
    }

    #[test]
    fn kernel_samples_give_the_fault_time_of_the_run() {
        // A fault costs 6.5 µs here, far more than the calibration says: the
        // kernel samples still put 95% of the sys time in the fault handler.
        let c = counts(1.8, 0.05, 1.7, 262_200, 0);
        let hw = Hardware::default();
        let sampled = Costs {
            kernel_samples: Some(6800),
            kernel_fault_samples: Some(6460),
            fault_time_from: "kernel-samples".into(),
            ..costs().clone()
        };
        let e = Evidence {
            costs: &sampled,
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::FirstTouch);
        assert!((f[0].cost_s - 1.7 * 0.95).abs() < 1e-6, "{}", f[0].cost_s);
        assert!(
            f[0].evidence.contains("95% of 6,800 kernel samples"),
            "{}",
            f[0].evidence
        );
        // Too few kernel samples: the calibration, capped by the sys time.
        let few = Costs {
            kernel_samples: Some(5),
            kernel_fault_samples: Some(5),
            ..sampled.clone()
        };
        let e = Evidence {
            costs: &few,
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert!(
            (f[0].cost_s - 262_200.0 * 2.5e-6).abs() < 1e-6,
            "{}",
            f[0].cost_s
        );
    }

    #[test]
    fn a_small_first_touch_share_is_still_reported_when_it_passes_the_thresholds() {
        // xz -9e: mostly user time, a dictionary faulted in once.
        let c = counts(6.0, 5.3, 0.5, 180_000, 0);
        let hw = Hardware::default();
        let f = findings(&evidence(&c, &hw));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].kind, FindingKind::FirstTouch);
        assert!((f[0].cost_s - 0.45).abs() < 1e-6, "{}", f[0].cost_s);
    }

    #[test]
    fn heap_churn_is_inferred_from_mapping_records_without_tracepoints() {
        // Python: a fresh 64 MiB bytearray 20 times; each record is the merged
        // range of two buffers (129 MiB).
        let mut c = counts(0.9, 0.15, 0.7, 20 * 16_400, 0);
        c.max_rss_bytes = Some(140 << 20);
        let hw = Hardware::default();
        let records = MappingRecords {
            heap_records: 21,
            heap_bytes: 21 * (129 << 20),
            remapped: 19,
            remapped_bytes: 19 * (129 << 20),
            sizes: vec![129 << 20],
        };
        let e = Evidence {
            mapping_records: Some(&records),
            ..evidence(&c, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::HeapChurn, "{f:#?}");
        assert!(
            f[0].summary.starts_with("heap-churn (inferred)"),
            "{}",
            f[0].summary
        );
        assert!(f[0]
            .inferred_from
            .as_deref()
            .unwrap()
            .contains("mmap records"));
        assert!(f[0].remedy.contains("--keep-heap"));
        // Bounded by what was faulted beyond the resident peak, not the merged lengths.
        assert!(f[0].summary.contains("1.1 GiB"), "{}", f[0].summary);
        // The same faults over 20 processes of at most 140 MiB each: each may
        // have faulted its own memory in once, however many ranges repeat.
        let several = Counts {
            processes: Some(20),
            programs: Some(20),
            ..c.clone()
        };
        let e = Evidence {
            mapping_records: Some(&records),
            ..evidence(&several, &hw)
        };
        assert!(
            findings(&e)
                .iter()
                .all(|f| f.kind != FindingKind::HeapChurn),
            "{:#?}",
            findings(&e)
        );
        // node's Buffer churn: only 5 of 17 records land on an earlier range (the
        // rest were placed elsewhere), but 585 MiB was faulted against a 230 MiB
        // peak, so most of the faults were memory faulted again.
        let mut node = counts(1.0, 0.3, 0.59, 149_834, 0);
        node.max_rss_bytes = Some(230 << 20);
        let node_records = MappingRecords {
            heap_records: 17,
            heap_bytes: 17 * (48 << 20),
            remapped: 5,
            remapped_bytes: 5 * (48 << 20),
            sizes: vec![48 << 20],
        };
        let e = Evidence {
            mapping_records: Some(&node_records),
            ..evidence(&node, &hw)
        };
        let f = findings(&e);
        assert_eq!(f[0].kind, FindingKind::HeapChurn, "{f:#?}");
        assert!(f[0].summary.contains("355.3 MiB"), "{}", f[0].summary);
        // A range recorded again without faulting it again (mprotect toggles): no churn.
        let idle = counts(0.9, 0.8, 0.05, 3000, 0);
        let e = Evidence {
            mapping_records: Some(&records),
            ..evidence(&idle, &hw)
        };
        assert!(findings(&e)
            .iter()
            .all(|f| f.kind != FindingKind::HeapChurn));
    }

    /// `make -j2` of four g++ compiles: 228 MiB faulted in by 15 processes,
    /// the largest with a peak RSS of 61.5 MiB. It said "memory was released
    /// and faulted again"; each process faulting its own memory in once
    /// explains it, and with one process the same numbers still say so.
    #[test]
    fn faults_of_several_processes_are_compared_with_each_ones_peak() {
        let mut make = counts(2.1, 1.6, 0.3, 58_400, 14);
        make.max_rss_bytes = Some(64_450_560);
        make.processes = Some(15);
        make.programs = Some(15);
        let hw = Hardware::default();
        let evidence_of = |c: &Counts| {
            let f = findings(&evidence(c, &hw));
            assert_eq!(f[0].kind, FindingKind::FirstTouch, "{f:#?}");
            f[0].evidence.clone()
        };
        let text = evidence_of(&make);
        assert!(!text.contains("faulted again:"), "{text}");
        assert!(!text.contains("released"), "{text}");
        assert!(
            text.contains(
                "228.1 MiB faulted in by 15 processes of at most 61.5 MiB peak RSS each \
                 (922.0 MiB in all): each may have faulted its own memory in once"
            ),
            "{text}"
        );
        // A shell's `exec` runs a second program in one process: counted.
        let exec = Counts {
            programs: Some(17),
            ..make.clone()
        };
        assert!(
            evidence_of(&exec).contains("by 17 programs in 15 processes of at most"),
            "{}",
            evidence_of(&exec)
        );
        // One process: the same faults are memory faulted again.
        let one = Counts {
            processes: Some(1),
            programs: Some(1),
            ..make.clone()
        };
        assert!(
            evidence_of(&one).contains(
                "228.1 MiB faulted in against a peak RSS of 61.5 MiB: memory was released and \
                 faulted again"
            ),
            "{}",
            evidence_of(&one)
        );
        // Several processes, far more faulted than they could hold: faulted again.
        let small = Counts {
            processes: Some(2),
            programs: Some(2),
            max_rss_bytes: Some(16 << 20),
            ..make.clone()
        };
        assert!(
            evidence_of(&small).contains(
                "by 2 processes of at most 16 MiB peak RSS each (32 MiB in all), more than twice \
                 what they could hold at once: memory was released and faulted again"
            ),
            "{}",
            evidence_of(&small)
        );
        // Not counted (no sampling): said as a condition, not a conclusion.
        let unknown = Counts {
            processes: None,
            programs: None,
            ..make
        };
        assert!(
            evidence_of(&unknown).contains("if the command ran one process, memory was released"),
            "{}",
            evidence_of(&unknown)
        );
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
            own_code: true,
            file: Some("b.c".into()),
            line: Some(9),
            via: Some("malloc".into()),
            cycles: 40,
            bytes: 40 * (64 << 20),
            sizes: vec![(64 << 20) + 4096],
            callers: vec![],
            interpreter: None,
            script: None,
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
    fn a_loaded_machine_stretching_the_wall_time_does_not_hide_a_finding() {
        // Hot text beyond the iTLB reach, 9% of the user time; the program got a
        // quarter of a CPU, so the wall time is four times the CPU time.
        let idle = counts(1.0, 0.95, 0.05, 3000, 0);
        let loaded = counts(4.0, 0.95, 0.05, 3000, 0);
        assert_eq!(program_time(&idle), 1.0);
        assert_eq!(program_time(&loaded), 1.0);
        let waiting = counts(10.0, 0.0, 0.0, 10, 0);
        assert_eq!(
            program_time(&waiting),
            10.0,
            "no CPU time known: the wall time"
        );
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
