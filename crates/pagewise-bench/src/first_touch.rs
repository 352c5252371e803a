//! The first-touch experiment: allocate SIZE, write all of it three times, and
//! see how much more the first pass costs than the third, per allocation
//! strategy.
//!
//! Every strategy writes with the same code (2 MiB `fill`s, front to back);
//! only `region-background` waits for its workers' frontier before each
//! chunk, which is how a caller "runs behind the frontier". Page faults are
//! counted for the calling thread only (background workers' population is
//! not a fault on the caller's path).

use crate::{median_count, FaultCounter, Machine, Progress, Summary};
use pagewise::os::mem::{Advice, AnonMapping, CHeapBlock, MapOptions};
use pagewise::region::{Granted, PageSize, PoolReservation, Populate, Region, RegionBuilder};
use pagewise::units::format_bytes;
use serde::Serialize;
use std::time::Instant;

/// The JSON schema of a [`Report`].
pub const SCHEMA: &str = "pagewise.bench.first-touch/1";

const MIB2: usize = 2 << 20;

/// The smallest size whose first pass means the same thing for every
/// strategy: one 2 MiB page. Each pass writes in 2 MiB `fill`s, and `thp` and
/// `hugetlb-2m` map whole 2 MiB pages, so below it their first touch zeroes a
/// whole 2 MiB page for a write of a fraction of it, while the region rows
/// fall back to 4 KiB pages (no huge page fits): the rows compare unlike
/// things, and a pass of a few bytes or pages times little more than the
/// clock reads around it, so the ratios to the third pass are noise.
pub const MIN_SIZE: usize = MIB2;

/// An allocation strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// `malloc` (as `calloc`, which above the mmap threshold is the same fresh `mmap`).
    Malloc,
    /// `mmap`, 4 KiB pages, faulted on touch.
    Mmap,
    /// `mmap` aligned to 2 MiB with `MADV_HUGEPAGE`, faulted on touch.
    Thp,
    /// `mmap(MAP_HUGETLB)` with 2 MiB pages, faulted on touch.
    Hugetlb2m,
    /// `mmap(MAP_POPULATE)`: faulted inside `mmap`.
    Populate,
    /// A pagewise region, Auto pages, populated before it is returned.
    RegionEager,
    /// A pagewise region, Auto pages, populated by background workers.
    RegionBackground,
}

impl Strategy {
    /// Every strategy, in report order.
    pub const ALL: [Strategy; 7] = [
        Strategy::Malloc,
        Strategy::Mmap,
        Strategy::Thp,
        Strategy::Hugetlb2m,
        Strategy::Populate,
        Strategy::RegionEager,
        Strategy::RegionBackground,
    ];

    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Malloc => "malloc",
            Strategy::Mmap => "mmap",
            Strategy::Thp => "thp",
            Strategy::Hugetlb2m => "hugetlb-2m",
            Strategy::Populate => "populate",
            Strategy::RegionEager => "region-eager",
            Strategy::RegionBackground => "region-background",
        }
    }

    /// Parses a row name.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes to allocate and write (default 1 GiB; at least [`MIN_SIZE`]
    /// for the comparison to mean anything).
    pub size: usize,
    /// Trials per strategy (default 5), interleaved across strategies.
    pub trials: usize,
    /// Strategies to run, in order.
    pub strategies: Vec<Strategy>,
    /// Worker threads for `region-background`.
    pub background_threads: usize,
    /// When running as root with too small a 2 MiB pool, grow it for the
    /// `hugetlb-2m` trials and give the pages back after each.
    pub reserve_hugetlb: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            size: 1 << 30,
            trials: 5,
            strategies: Strategy::ALL.to_vec(),
            // The caller helps populate when it catches up, so one worker per
            // remaining CPU keeps every core busy without oversubscribing.
            background_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1))
                .max(1),
            reserve_hugetlb: true,
        }
    }
}

/// One strategy's results over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Strategy name.
    pub name: &'static str,
    /// Median time of the allocation call, ms (min–max in `alloc_range_ms`).
    pub alloc_ms: f64,
    /// Min and max of the allocation time, ms.
    pub alloc_range_ms: [f64; 2],
    /// Median time of each of the three passes, ms.
    pub pass_ms: [f64; 3],
    /// Min and max of each pass, ms.
    pub pass_range_ms: [[f64; 2]; 3],
    /// Median of allocation + first pass, ms.
    pub total_ms: f64,
    /// Median first pass / median third pass.
    pub first_over_warm: f64,
    /// Median (allocation + first pass) / median third pass.
    pub total_over_warm: f64,
    /// Median page faults of the calling thread in pass 1; `None` (null) when
    /// a trial's count is missing (the report's `faults_note` says why).
    pub faults_pass1: Option<u64>,
    /// Median page faults in pass 2.
    pub faults_pass2: Option<u64>,
    /// Median page faults in pass 3.
    pub faults_pass3: Option<u64>,
    /// Write throughput of the third pass, GB/s (10^9 bytes/s).
    pub warm_gbps: f64,
    /// What the memory really was, from the kernel, after the first trial's
    /// first pass: e.g. `thp 1024 MiB`, `hugetlb-2m 1024 MiB`, `4k 1024 MiB`.
    pub backing: String,
    /// The same in bytes per page size; `None` (null) when the kernel could
    /// not be asked (`backing` says why).
    pub granted: Option<Granted>,
    /// Trials run.
    pub trials: usize,
    /// Why fewer trials than asked ran, when a later trial failed.
    pub note: Option<String>,
}

/// A strategy that could not run here, and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotRun {
    /// Strategy name.
    pub name: &'static str,
    /// Why it did not run.
    pub reason: String,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Bytes written per pass.
    pub size_bytes: usize,
    /// Trials per strategy.
    pub trials: usize,
    /// Whether every page-fault count was measured (the `page-faults`
    /// software event opened and every read succeeded).
    pub faults_counted: bool,
    /// Why some page-fault counts are missing (`null` in the rows), if any are.
    pub faults_note: Option<String>,
    /// The machine.
    pub machine: Machine,
    /// Results, one per strategy that ran.
    pub rows: Vec<Row>,
    /// Strategies that did not run.
    pub not_run: Vec<NotRun>,
}

/// The memory under test, kept alive through the three passes.
enum Memory {
    Heap(CHeapBlock),
    Mapped(AnonMapping),
    Region(Region),
}

impl Memory {
    fn bytes(&mut self, size: usize) -> &mut [u8] {
        match self {
            Memory::Heap(b) => &mut b.as_mut_slice()[..size],
            Memory::Mapped(m) => &mut m.as_mut_slice()[..size],
            Memory::Region(r) => &mut r[..size],
        }
    }

    fn wait(&self, end: usize) -> Result<(), String> {
        match self {
            Memory::Region(r) => r.wait_populated(end).map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// What the kernel granted, and its description (which says why when
    /// the kernel could not be asked).
    fn backing(&self, size: usize) -> (String, Option<Granted>) {
        let granted = match self {
            Memory::Region(r) => {
                let b = r.backing();
                return (describe(&b.granted, Some(b.page_size)), Some(b.granted));
            }
            Memory::Heap(b) => {
                pagewise::region::granted_for(b.as_slice().as_ptr() as usize, size, None)
            }
            Memory::Mapped(m) => {
                let hugetlb = m.hugetlb_page_size();
                pagewise::region::granted_for(m.addr(), m.len(), hugetlb)
            }
        };
        match granted {
            Ok(g) => (describe(&g, None), Some(g)),
            Err(e) => (format!("unknown ({e})"), None),
        }
    }
}

fn describe(g: &pagewise::region::Granted, chosen: Option<PageSize>) -> String {
    let mut parts = Vec::new();
    for (name, bytes) in [
        ("hugetlb-1g", g.hugetlb_1g_bytes),
        ("hugetlb-2m", g.hugetlb_2m_bytes),
        ("thp", g.thp_bytes),
        ("4k", g.base_bytes),
    ] {
        if bytes > 0 {
            parts.push(format!("{name} {}", format_bytes(bytes)));
        }
    }
    let mut text = if parts.is_empty() {
        "nothing resident".to_owned()
    } else {
        parts.join(" + ")
    };
    if let Some(page) = chosen {
        text = format!("{text} (region chose {})", page.name());
    }
    text
}

fn allocate(strategy: Strategy, config: &Config) -> Result<Memory, String> {
    let size = config.size;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", strategy.name());
    Ok(match strategy {
        Strategy::Malloc => Memory::Heap(CHeapBlock::calloc(size).map_err(|e| err(&e))?),
        Strategy::Mmap => {
            Memory::Mapped(AnonMapping::map(size, MapOptions::default()).map_err(|e| err(&e))?)
        }
        Strategy::Thp => {
            let rounded = size.next_multiple_of(MIB2);
            let m = AnonMapping::map_aligned(rounded, MIB2, MapOptions::default())
                .map_err(|e| err(&e))?;
            m.advise(0, rounded, Advice::HugePage)
                .map_err(|e| err(&e))?;
            Memory::Mapped(m)
        }
        Strategy::Hugetlb2m => {
            let options = MapOptions {
                hugetlb_page_size: Some(MIB2),
                no_reserve: false,
                populate: false,
            };
            Memory::Mapped(
                AnonMapping::map(size.next_multiple_of(MIB2), options).map_err(|e| err(&e))?,
            )
        }
        Strategy::Populate => {
            let options = MapOptions {
                populate: true,
                ..MapOptions::default()
            };
            Memory::Mapped(AnonMapping::map(size, options).map_err(|e| err(&e))?)
        }
        Strategy::RegionEager => Memory::Region(
            RegionBuilder::new(size)
                .populate(Populate::Eager)
                .build()
                .map_err(|e| err(&e))?,
        ),
        Strategy::RegionBackground => Memory::Region(
            RegionBuilder::new(size)
                .populate(Populate::Background {
                    threads: config.background_threads,
                })
                .build()
                .map_err(|e| err(&e))?,
        ),
    })
}

struct Trial {
    alloc_s: f64,
    pass_s: [f64; 3],
    faults: [Option<u64>; 3],
}

fn run_trial(
    strategy: Strategy,
    config: &Config,
    counter: &FaultCounter,
    backing: &mut Option<(String, Option<Granted>)>,
) -> Result<Trial, String> {
    let start = Instant::now();
    let mut memory = allocate(strategy, config)?;
    let alloc_s = start.elapsed().as_secs_f64();
    let mut pass_s = [0.0; 3];
    let mut faults = [None; 3];
    for pass in 0..3 {
        let before = counter.reading();
        let start = Instant::now();
        let mut offset = 0;
        while offset < config.size {
            let end = (offset + MIB2).min(config.size);
            memory.wait(end)?;
            memory.bytes(config.size)[offset..end].fill(pass as u8 + 1);
            offset = end;
        }
        pass_s[pass] = start.elapsed().as_secs_f64();
        faults[pass] = counter.since(before);
        if pass == 0 && backing.is_none() {
            *backing = Some(memory.backing(config.size));
        }
    }
    std::hint::black_box(memory.bytes(config.size)[config.size - 1]);
    Ok(Trial {
        alloc_s,
        pass_s,
        faults,
    })
}

/// Why `hugetlb-2m` cannot run, or the reservation that lets it.
fn hugetlb_for_trial(config: &Config) -> Result<Option<PoolReservation>, String> {
    let needed = config.size.div_ceil(MIB2) as u64;
    let free = pagewise::host::hugetlb::available(MIB2);
    if free >= needed {
        return Ok(None);
    }
    if !config.reserve_hugetlb {
        return Err(format!(
            "the 2 MiB pool has {free} free pages, needs {needed}, and --no-reserve keeps it as it is: `sysctl vm.nr_hugepages={needed}` first, or leave out --no-reserve"
        ));
    }
    if !pagewise::os::libc_info::is_root() {
        return Err(format!(
            "the 2 MiB pool has {free} free pages, needs {needed}: run as root, or `sysctl vm.nr_hugepages={needed}`"
        ));
    }
    let reservation = PoolReservation::ensure_available(MIB2, needed)
        .map_err(|e| format!("could not grow the 2 MiB pool: {e}"))?;
    let now_free = pagewise::host::hugetlb::available(MIB2);
    if now_free < needed {
        return Err(format!(
            "the kernel granted only {now_free} of {needed} 2 MiB pages (memory fragmented?)"
        ));
    }
    Ok(Some(reservation))
}

/// Runs the experiment. Takes roughly `trials × strategies × 4 × size / (2 GB/s)`.
pub fn run(config: &Config, progress: &dyn Progress) -> Report {
    run_counting(
        config,
        progress,
        FaultCounter::new(crate::open_thread_fault_counter()),
    )
}

/// [`run`], counting page faults with `counter` (the tests pass one that fails).
fn run_counting(config: &Config, progress: &dyn Progress, counter: FaultCounter) -> Report {
    let machine = Machine::describe();
    let mut trials: Vec<Vec<Trial>> = config.strategies.iter().map(|_| Vec::new()).collect();
    let mut backings: Vec<Option<(String, Option<Granted>)>> = vec![None; config.strategies.len()];
    let mut failures: Vec<Option<String>> = vec![None; config.strategies.len()];
    let total = config.trials * config.strategies.len();
    let mut done = 0;
    for trial in 0..config.trials {
        for (i, &strategy) in config.strategies.iter().enumerate() {
            progress.update(
                done,
                total,
                &format!("trial {}/{}: {}", trial + 1, config.trials, strategy.name()),
            );
            done += 1;
            if failures[i].is_some() {
                continue;
            }
            let reservation = if strategy == Strategy::Hugetlb2m {
                match hugetlb_for_trial(config) {
                    Ok(r) => r,
                    Err(e) => {
                        failures[i] = Some(e);
                        continue;
                    }
                }
            } else {
                None
            };
            match run_trial(strategy, config, &counter, &mut backings[i]) {
                Ok(t) => trials[i].push(t),
                Err(e) => failures[i] = Some(e),
            }
            drop(reservation);
        }
    }
    progress.update(total, total, "done");

    let mut rows = Vec::new();
    let mut not_run = Vec::new();
    for (i, &strategy) in config.strategies.iter().enumerate() {
        let t = &trials[i];
        let failure = failures[i].take();
        if t.is_empty() {
            if let Some(reason) = failure {
                not_run.push(NotRun {
                    name: strategy.name(),
                    reason,
                });
            }
            continue;
        }
        let note = failure.map(|reason| {
            format!(
                "stopped after {} of {} trials: {reason}",
                t.len(),
                config.trials
            )
        });
        let ms = |f: &dyn Fn(&Trial) -> f64| {
            Summary::of(&t.iter().map(|x| f(x) * 1e3).collect::<Vec<_>>())
        };
        let (Some(alloc), Some(p1), Some(p2), Some(p3), Some(total)) = (
            ms(&|x| x.alloc_s),
            ms(&|x| x.pass_s[0]),
            ms(&|x| x.pass_s[1]),
            ms(&|x| x.pass_s[2]),
            ms(&|x| x.alloc_s + x.pass_s[0]),
        ) else {
            not_run.push(NotRun {
                name: strategy.name(),
                reason: "a trial's time is not a number".into(),
            });
            continue;
        };
        // Every trial that ran read the backing after its first pass.
        let (backing, granted) = backings[i]
            .take()
            .unwrap_or_else(|| ("unknown (not read)".to_owned(), None));
        rows.push(Row {
            name: strategy.name(),
            alloc_ms: alloc.median,
            alloc_range_ms: [alloc.min, alloc.max],
            pass_ms: [p1.median, p2.median, p3.median],
            pass_range_ms: [[p1.min, p1.max], [p2.min, p2.max], [p3.min, p3.max]],
            total_ms: total.median,
            first_over_warm: p1.median / p3.median,
            total_over_warm: total.median / p3.median,
            faults_pass1: median_count(t.iter().map(|x| x.faults[0])),
            faults_pass2: median_count(t.iter().map(|x| x.faults[1])),
            faults_pass3: median_count(t.iter().map(|x| x.faults[2])),
            warm_gbps: config.size as f64 / (p3.median / 1e3) / 1e9,
            backing,
            granted,
            trials: t.len(),
            note,
        });
    }
    let faults_note = counter.missing();
    Report {
        schema: SCHEMA,
        size_bytes: config.size,
        trials: config.trials,
        faults_counted: faults_note.is_none(),
        faults_note,
        machine,
        rows,
        not_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::from_name(s.name()), Some(s));
        }
        assert_eq!(Strategy::from_name("nope"), None);
    }

    #[test]
    fn a_small_run_reports_every_strategy_that_can_run() {
        let config = Config {
            size: 16 << 20,
            trials: 2,
            strategies: vec![
                Strategy::Malloc,
                Strategy::Mmap,
                Strategy::RegionEager,
                Strategy::RegionBackground,
            ],
            background_threads: 1,
            reserve_hugetlb: false,
        };
        let report = run(&config, &NoProgress);
        assert_eq!(report.schema, SCHEMA);
        assert!(report.not_run.is_empty(), "{:?}", report.not_run);
        let names: Vec<_> = report.rows.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            ["malloc", "mmap", "region-eager", "region-background"]
        );
        for row in &report.rows {
            assert_eq!(row.trials, 2);
            assert!(row.pass_ms.iter().all(|&p| p > 0.0));
            assert!(!row.backing.is_empty());
        }
        let by_name = |n: &str| report.rows.iter().find(|r| r.name == n).unwrap();
        // After pass 1 all 16 MiB of the mapping are resident, on whatever
        // pages the kernel chose (4 KiB, or THP in `always` mode).
        let mmap = by_name("mmap");
        let granted = mmap
            .granted
            .as_ref()
            .expect("the kernel said what it granted");
        assert_eq!(granted.total(), 16 << 20, "{mmap:?}");
        if report.faults_counted {
            // At least one fault per page granted (per the largest small
            // folio the kernel may use for the rest, where multi-size THP is on).
            let thp = pagewise::host::thp::settings(&pagewise::host::SysRoot::live());
            let small = thp.largest_small_fault_page(pagewise::host::thp::FaultMemory::Anon {
                asked_huge: false,
            });
            let least = granted.fewest_faults(small);
            assert!(least >= 8, "{granted:?}");
            assert!(mmap.faults_pass1.unwrap() >= least, "{mmap:?}: {least}");
            assert_eq!(mmap.faults_pass3, Some(0));
            assert_eq!(by_name("region-eager").faults_pass1, Some(0));
            assert_eq!(by_name("region-background").faults_pass1, Some(0));
        } else {
            assert!(report.rows.iter().all(|r| r.faults_pass1.is_none()));
            pagewise_testkit::skip_part!(
                "fault counts",
                pagewise_testkit::Need::PerfEvents,
                "{}",
                report.faults_note.as_deref().unwrap_or("no reason given")
            );
        }
    }

    #[test]
    fn a_failed_fault_count_is_null_not_zero_or_wrapped() {
        use crate::tests::Replay;
        let config = Config {
            size: 2 << 20,
            trials: 1,
            strategies: vec![Strategy::Mmap],
            background_threads: 1,
            reserve_hugetlb: false,
        };
        // Pass 1 counted; pass 2's second read fails; pass 3's count goes backwards.
        let counter = FaultCounter::new(Ok(Replay::boxed(vec![
            Ok(100),
            Ok(612),
            Ok(612),
            Err("read(perf event): Input/output error".into()),
            Ok(700),
            Ok(650),
        ])));
        let report = run_counting(&config, &NoProgress, counter);
        let row = &report.rows[0];
        assert_eq!(row.faults_pass1, Some(512));
        assert_eq!(row.faults_pass2, None);
        assert_eq!(row.faults_pass3, None);
        assert!(!report.faults_counted);
        let note = report.faults_note.as_deref().unwrap();
        assert!(note.contains("Input/output error"), "{note}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rows"][0]["faults_pass1"], 512);
        assert!(json["rows"][0]["faults_pass2"].is_null(), "{json:#}");
        assert!(json["rows"][0]["faults_pass3"].is_null(), "{json:#}");

        // A counter that never opened: every count null, and the reason.
        let closed = FaultCounter::new(Err("perf_event_open: EACCES".into()));
        let report = run_counting(&config, &NoProgress, closed);
        assert_eq!(report.rows[0].faults_pass1, None);
        assert_eq!(
            report.faults_note.as_deref(),
            Some("perf_event_open: EACCES")
        );
    }

    #[test]
    fn hugetlb_without_a_pool_or_root_is_reported_not_run() {
        let free = pagewise::host::hugetlb::available(MIB2);
        if free > 0 {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::NoHugetlb,
                "a 2 MiB pool has free pages here"
            );
        }
        let config = Config {
            size: 8 << 20,
            trials: 1,
            strategies: vec![Strategy::Hugetlb2m],
            background_threads: 1,
            reserve_hugetlb: false,
        };
        let report = run(&config, &NoProgress);
        assert!(report.rows.is_empty());
        assert_eq!(report.not_run.len(), 1);
        assert!(
            report.not_run[0].reason.contains("free pages"),
            "{:?}",
            report.not_run
        );
    }
}
