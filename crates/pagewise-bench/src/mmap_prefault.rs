//! The mmap-prefault experiment: write SIZE through a shared file mapping in
//! fixed-size records, after each way of getting the pages ready, and compare
//! the total time (prefault included), the page faults the write loop takes,
//! and how much of the file is resident along the way.
//!
//! Every method writes with the same loop (one bounds-checked copy per
//! record, front to back); the `pagewise-window` method adds what a queue
//! writer does per record: publish its position to the pre-toucher and, when
//! it reaches the prepared frontier, wait for it or prepare the next piece
//! itself. Faults are counted for the writing thread only.

use crate::{median_count, FaultCounter, Machine, Progress, Summary};
use pagewise::file_window::FileWindow;
use pagewise::os::file::{self, FsKind};
use pagewise::os::file_map::{FileAdvice, WriteMap};
use pagewise::queue::PreTouch;
use pagewise::region::Granted;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The JSON schema of a [`Report`].
pub const SCHEMA: &str = "pagewise.bench.mmap-prefault/1";

/// A way of getting the file's pages ready before (or while) writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// `ftruncate` to size, map, write: a fault per page.
    Plain,
    /// `fallocate` the whole file first.
    Fallocate,
    /// `MAP_POPULATE`.
    Populate,
    /// `MAP_POPULATE`, then `MADV_WILLNEED`.
    PopulateWillneed,
    /// `MAP_POPULATE`, then `MADV_SEQUENTIAL`.
    PopulateSequential,
    /// `fallocate`, then `MAP_POPULATE`.
    FallocatePopulate,
    /// `fallocate`, `MAP_POPULATE`, `MADV_WILLNEED`.
    FallocatePopulateWillneed,
    /// `MADV_WILLNEED` only.
    Willneed,
    /// `MADV_SEQUENTIAL` only.
    Sequential,
    /// Write one byte per page before the loop.
    ManualPrefault,
    /// `MADV_WILLNEED`, then write one byte per page.
    ManualPrefaultWillneed,
    /// The queue's pre-toucher: a background thread keeps a window ahead of
    /// the writer allocated and populated.
    PagewiseWindow,
}

impl Method {
    /// Every method, in report order.
    pub const ALL: [Method; 12] = [
        Method::Plain,
        Method::Fallocate,
        Method::Populate,
        Method::PopulateWillneed,
        Method::PopulateSequential,
        Method::FallocatePopulate,
        Method::FallocatePopulateWillneed,
        Method::Willneed,
        Method::Sequential,
        Method::ManualPrefault,
        Method::ManualPrefaultWillneed,
        Method::PagewiseWindow,
    ];

    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Plain => "plain",
            Method::Fallocate => "fallocate",
            Method::Populate => "populate",
            Method::PopulateWillneed => "populate+willneed",
            Method::PopulateSequential => "populate+sequential",
            Method::FallocatePopulate => "fallocate+populate",
            Method::FallocatePopulateWillneed => "fallocate+populate+willneed",
            Method::Willneed => "willneed",
            Method::Sequential => "sequential",
            Method::ManualPrefault => "manual-prefault",
            Method::ManualPrefaultWillneed => "manual-prefault+willneed",
            Method::PagewiseWindow => "pagewise-window",
        }
    }

    /// Parses a row name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the method faults the whole file in before the loop.
    pub fn full_prefault(self) -> bool {
        matches!(
            self,
            Method::Populate
                | Method::PopulateWillneed
                | Method::PopulateSequential
                | Method::FallocatePopulate
                | Method::FallocatePopulateWillneed
                | Method::ManualPrefault
                | Method::ManualPrefaultWillneed
        )
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes to write (default 256 MiB).
    pub size: usize,
    /// Bytes per record (default 128).
    pub record_bytes: usize,
    /// Directory for the file (default `/dev/shm`).
    pub dir: PathBuf,
    /// Trials per method, interleaved (default 5).
    pub trials: usize,
    /// Methods to run, in order.
    pub methods: Vec<Method>,
    /// The pre-toucher's window for `pagewise-window`.
    pub window: PreTouch,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            size: 256 << 20,
            record_bytes: 128,
            dir: PathBuf::from("/dev/shm"),
            trials: 5,
            methods: Method::ALL.to_vec(),
            window: PreTouch::default(),
        }
    }
}

/// One method's results over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Method name.
    pub name: &'static str,
    /// Median total time, ms: preparation plus the write loop.
    pub ms: f64,
    /// Min and max of the total time.
    pub ms_range: [f64; 2],
    /// Median of the preparation before the loop, ms.
    pub prefault_ms: f64,
    /// Median total time over `plain`'s median total time.
    pub vs_plain: Option<f64>,
    /// Median page faults of the writing thread in the write loop; `None`
    /// (null) when a trial's count is missing (`faults_note` says why).
    pub write_loop_faults: Option<u64>,
    /// The most file bytes resident (allocated, on tmpfs) at any sample,
    /// largest over the trials; `None` when the file's size could not be
    /// read (`resident_note` says why).
    pub peak_resident_bytes: Option<u64>,
    /// The most resident bytes beyond what had been written, at any sample
    /// (every 1 MiB written), largest over the trials; `None` as above.
    pub peak_ahead_bytes: Option<u64>,
    /// The pages the mapping had after the first trial's write loop, by
    /// size; `None` when the kernel could not be asked.
    pub granted: Option<Granted>,
    /// `pagewise-window` only: the largest window the pre-toucher used.
    pub peak_window_bytes: Option<u64>,
    /// Trials run.
    pub trials: usize,
}

/// A method that could not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotRun {
    /// Method name.
    pub name: &'static str,
    /// Why.
    pub reason: String,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Bytes written per trial.
    pub size_bytes: usize,
    /// Bytes per record.
    pub record_bytes: usize,
    /// Directory of the file.
    pub dir: String,
    /// Its file system.
    pub fs: String,
    /// Trials per method.
    pub trials: usize,
    /// Whether every page-fault count was measured.
    pub faults_counted: bool,
    /// Why some page-fault counts are missing (`null` in the rows), if any are.
    pub faults_note: Option<String>,
    /// Why some resident sizes are missing, if any are.
    pub resident_note: Option<String>,
    /// Why the program's text could not be faulted in before the trials,
    /// if it could not: the first run of a rare path in a write loop (the
    /// writer catching up with the pre-toucher) may then fault on its code,
    /// and those faults are in `write_loop_faults`.
    pub text_note: Option<String>,
    /// The pre-toucher's configured window.
    pub window_bytes: u64,
    /// Its largest adaptive window.
    pub max_window_bytes: u64,
    /// The machine.
    pub machine: Machine,
    /// Results.
    pub rows: Vec<Row>,
    /// Methods that did not run.
    pub not_run: Vec<NotRun>,
}

struct Trial {
    total_s: f64,
    prefault_s: f64,
    faults: Option<u64>,
    /// Peak resident and peak ahead, or why the file's size could not be read.
    peaks: Result<(u64, u64), String>,
    peak_window: Option<u64>,
    granted: Option<Granted>,
}

/// Bytes of the file allocated (resident, on tmpfs).
fn allocated(file: &File) -> Result<u64, String> {
    file.metadata()
        .map(|m| m.blocks() * 512)
        .map_err(|e| format!("fstat of the file failed: {e}"))
}

/// The largest resident size and lead over the writer at the samples taken.
struct Peaks(Result<(u64, u64), String>);

impl Peaks {
    fn sample(&mut self, file: &File, written: usize) {
        let Ok((resident, ahead)) = &mut self.0 else {
            return;
        };
        match allocated(file) {
            Ok(now) => {
                *resident = (*resident).max(now);
                *ahead = (*ahead).max(now.saturating_sub(written as u64));
            }
            Err(e) => self.0 = Err(e),
        }
    }
}

fn run_trial(
    method: Method,
    config: &Config,
    path: &Path,
    counter: &FaultCounter,
) -> Result<Trial, String> {
    let size = config.size;
    let err = |what: &str, e: &dyn std::fmt::Display| format!("{}: {what}: {e}", method.name());
    let _ = std::fs::remove_file(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| err("create the file", &e))?;
    let start = Instant::now();
    let falloc = matches!(
        method,
        Method::Fallocate | Method::FallocatePopulate | Method::FallocatePopulateWillneed
    );
    if falloc {
        file::allocate(&file, 0, size as u64).map_err(|e| err("fallocate", &e))?;
    } else if method != Method::PagewiseWindow {
        file.set_len(size as u64)
            .map_err(|e| err("ftruncate", &e))?;
    }
    let populate = matches!(
        method,
        Method::Populate
            | Method::PopulateWillneed
            | Method::PopulateSequential
            | Method::FallocatePopulate
            | Method::FallocatePopulateWillneed
    );
    let map = WriteMap::map(&file, 0, size, populate).map_err(|e| err("mmap", &e))?;
    let advice = match method {
        Method::PopulateWillneed
        | Method::FallocatePopulateWillneed
        | Method::Willneed
        | Method::ManualPrefaultWillneed => Some(FileAdvice::WillNeed),
        Method::PopulateSequential | Method::Sequential => Some(FileAdvice::Sequential),
        _ => None,
    };
    if let Some(a) = advice {
        map.advise(0, size, a).map_err(|e| err("madvise", &e))?;
    }
    if matches!(
        method,
        Method::ManualPrefault | Method::ManualPrefaultWillneed
    ) {
        let page = pagewise::os::base_page_size();
        for off in (0..size).step_by(page) {
            map.write(off, &[0]);
        }
    }
    let window = if method == Method::PagewiseWindow {
        Some(
            FileWindow::start(path, &file, &map, size as u64, config.window)
                .map_err(|e| err("start the pre-toucher", &e))?,
        )
    } else {
        None
    };
    // As `Writer::open` does: the first piece is ready before the first append.
    let mut ready = 0u64;
    if let Some(w) = &window {
        let first = (config.record_bytes as u64).max(1);
        ready = w.wait_ready(first).map_err(|e| err("pre-touch", &e))?;
    }
    let prefault_s = start.elapsed().as_secs_f64();

    let record = vec![0xA5u8; config.record_bytes];
    crate::grow_stack();
    let step = config.record_bytes;
    const SAMPLE: usize = 1 << 20;
    let mut next_sample = SAMPLE;
    let mut peaks = Peaks(Ok((0, 0)));
    let before = counter.reading();
    let mut off = 0;
    while off + step <= size {
        if let Some(w) = &window {
            let end = (off + step) as u64;
            if end > ready {
                ready = w.wait_ready(end).map_err(|e| err("pre-touch", &e))?;
            }
            w.note(off as u64);
        }
        map.write(off, &record);
        off += step;
        if off >= next_sample {
            peaks.sample(&file, off);
            next_sample += SAMPLE;
        }
    }
    let faults = counter.since(before);
    let total_s = start.elapsed().as_secs_f64();
    let peak_window = window.as_ref().map(|w| w.report().peak_window_bytes);
    drop(window);
    peaks.sample(&file, off);
    let granted = pagewise::region::granted_for(map.addr(), map.len(), None).ok();
    drop(map);
    drop(file);
    let _ = std::fs::remove_file(path);
    Ok(Trial {
        total_s,
        prefault_s,
        faults,
        peaks: peaks.0,
        peak_window,
        granted,
    })
}

/// Runs the experiment. Takes roughly `trials × methods × size / (1 GB/s)`.
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
    // The write loops count every fault of the writing thread: map the code
    // in first, so that a path run for the first time inside a loop (the
    // writer preparing a piece itself) does not fault on its instructions.
    let text_note = pagewise::host::proc_maps::populate_own_text()
        .err()
        .map(|e| format!("the program's text was not faulted in first: {e}"));
    let path = config
        .dir
        .join(format!("pagewise-mmap-prefault-{}", std::process::id()));
    let fs = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .ok()
        .and_then(|f| file::fs_kind(&f).ok())
        .map_or_else(|| "unknown".to_owned(), FsKind::name);
    let _ = std::fs::remove_file(&path);
    let mut trials: Vec<Vec<Trial>> = config.methods.iter().map(|_| Vec::new()).collect();
    let mut failures: Vec<Option<String>> = vec![None; config.methods.len()];
    let total = config.trials * config.methods.len();
    let mut done = 0;
    for trial in 0..config.trials {
        for (i, &method) in config.methods.iter().enumerate() {
            progress.update(
                done,
                total,
                &format!("trial {}/{}: {}", trial + 1, config.trials, method.name()),
            );
            done += 1;
            if failures[i].is_some() {
                continue;
            }
            match run_trial(method, config, &path, &counter) {
                Ok(t) => trials[i].push(t),
                Err(e) => failures[i] = Some(e),
            }
        }
    }
    progress.update(total, total, "done");
    let _ = std::fs::remove_file(&path);

    let mut rows = Vec::new();
    let mut not_run = Vec::new();
    let mut resident_note = None;
    for (i, &method) in config.methods.iter().enumerate() {
        let t = &trials[i];
        if t.is_empty() {
            not_run.push(NotRun {
                name: method.name(),
                reason: failures[i].take().unwrap_or_else(|| "no trials".into()),
            });
            continue;
        }
        let ms = |f: &dyn Fn(&Trial) -> f64| {
            Summary::of(&t.iter().map(|x| f(x) * 1e3).collect::<Vec<_>>())
        };
        let (Some(total), Some(prefault)) = (ms(&|x| x.total_s), ms(&|x| x.prefault_s)) else {
            not_run.push(NotRun {
                name: method.name(),
                reason: "a trial's time is not a number".into(),
            });
            continue;
        };
        let peaks: Result<Vec<(u64, u64)>, String> = t.iter().map(|x| x.peaks.clone()).collect();
        let (peak_resident_bytes, peak_ahead_bytes) = match peaks {
            Ok(p) => (p.iter().map(|x| x.0).max(), p.iter().map(|x| x.1).max()),
            Err(why) => {
                resident_note.get_or_insert(why);
                (None, None)
            }
        };
        rows.push(Row {
            name: method.name(),
            ms: total.median,
            ms_range: [total.min, total.max],
            prefault_ms: prefault.median,
            vs_plain: None,
            write_loop_faults: median_count(t.iter().map(|x| x.faults)),
            peak_resident_bytes,
            peak_ahead_bytes,
            granted: t[0].granted.clone(),
            peak_window_bytes: t.iter().filter_map(|x| x.peak_window).max(),
            trials: t.len(),
        });
    }
    if let Some(plain) = rows.iter().find(|r| r.name == "plain").map(|r| r.ms) {
        for r in &mut rows {
            r.vs_plain = Some(r.ms / plain);
        }
    }
    Report {
        schema: SCHEMA,
        size_bytes: config.size,
        record_bytes: config.record_bytes,
        dir: config.dir.display().to_string(),
        fs,
        trials: config.trials,
        faults_counted: counter.missing().is_none(),
        faults_note: counter.missing(),
        resident_note,
        text_note,
        window_bytes: config.window.window,
        max_window_bytes: config.window.max_window,
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
        for m in Method::ALL {
            assert_eq!(Method::from_name(m.name()), Some(m));
        }
        assert_eq!(Method::from_name("nope"), None);
    }

    #[test]
    fn a_small_run_reports_every_method() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let config = Config {
            size: 8 << 20,
            record_bytes: 128,
            dir: dir.path().to_owned(),
            trials: 1,
            methods: Method::ALL.to_vec(),
            window: PreTouch {
                window: 1 << 20,
                max_window: 2 << 20,
                lead: std::time::Duration::from_millis(1),
                mode: pagewise::queue::PreTouchMode::Thread,
            },
        };
        let report = run(&config, &NoProgress);
        assert_eq!(report.schema, SCHEMA);
        assert!(report.not_run.is_empty(), "{:?}", report.not_run);
        assert_eq!(report.rows.len(), Method::ALL.len());
        let by = |n: &str| report.rows.iter().find(|r| r.name == n).unwrap();
        assert_eq!(report.resident_note, None);
        for r in &report.rows {
            assert!(
                r.ms > 0.0 && r.peak_resident_bytes.unwrap() >= 8 << 20,
                "{r:?}"
            );
        }
        // The window never holds more than the written bytes plus its largest window
        // plus one piece in flight (a background piece is an eighth of the window).
        let w = by("pagewise-window");
        let piece = config.window.window / 8;
        assert!(w.peak_ahead_bytes.unwrap() <= (2 << 20) + piece, "{w:?}");
        assert!(by("fallocate").peak_ahead_bytes.unwrap() >= (8 << 20) - (1 << 20));
        // After the loop all 8 MiB are mapped, on whatever pages the file got.
        let plain = by("plain");
        let granted = plain
            .granted
            .as_ref()
            .expect("the kernel said what it granted");
        assert_eq!(granted.total(), 8 << 20, "{plain:?}");
        if report.faults_counted {
            assert_eq!(w.write_loop_faults, Some(0), "{w:?}");
            // At least one fault per page the file got (per the largest
            // small folio shared memory may use here, for the pages the
            // page tables do not show as huge).
            use pagewise::host::thp::{self, FaultMemory};
            let small = thp::settings(&pagewise::host::SysRoot::live()).largest_small_fault_page(
                FaultMemory::Shmem {
                    mount_huge: thp::tmpfs_huge_option(dir.path()),
                },
            );
            let least = granted.fewest_faults(small);
            assert!(least >= 4, "{granted:?}");
            assert!(
                plain.write_loop_faults.unwrap() >= least,
                "{plain:?}: {least}"
            );
        } else {
            assert!(report.rows.iter().all(|r| r.write_loop_faults.is_none()));
            pagewise_testkit::skip_part!(
                "fault counts",
                pagewise_testkit::Need::PerfEvents,
                "{}",
                report.faults_note.as_deref().unwrap_or("no reason given")
            );
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "the file is removed"
        );
    }

    #[test]
    fn a_failed_fault_count_is_null_not_zero() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let config = Config {
            size: 1 << 20,
            dir: dir.path().to_owned(),
            trials: 2,
            methods: vec![Method::Plain],
            ..Config::default()
        };
        // The first trial is counted, the second's last read fails.
        let counter = FaultCounter::new(Ok(crate::tests::Replay::boxed(vec![
            Ok(7),
            Ok(263),
            Ok(263),
            Err("read(perf event): Bad file descriptor".into()),
        ])));
        let report = run_counting(&config, &NoProgress, counter);
        assert_eq!(report.rows[0].trials, 2);
        // One trial's count is missing: the median is not taken over the other.
        assert_eq!(report.rows[0].write_loop_faults, None);
        assert!(!report.faults_counted);
        assert!(report
            .faults_note
            .as_deref()
            .unwrap()
            .contains("Bad file descriptor"));
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["rows"][0]["write_loop_faults"].is_null(), "{json:#}");
    }
}
