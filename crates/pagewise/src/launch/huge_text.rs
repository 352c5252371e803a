//! What `pagewise run --huge-text` does around the program it starts.
//!
//! The preloaded library only moves text and says what it moved. Everything
//! else happens in the waiting `pagewise run` parent, off the program's path:
//!
//! - [`ReportDir`]: a private directory (mode 0700, made like `mkdtemp`) that
//!   the library in each process writes its [`RunReport`] into, as
//!   `PID.json` (then `PID.1.json`, … for later `exec`s in the same process),
//!   each appearing whole, never over another name and never through a link
//!   ([`write_process_report`]); the `--huge-text=hot:PROFILE` pages go in
//!   beside them.
//! - [`run_program`] starts the program and waits for it, passing signals on,
//!   while a [`Gatherer`] reads the reports as they appear and writes each
//!   moved process's perf map ([`PerfMaps`]), so profilers can name moved code
//!   while the program still runs and after an `exec` that keeps the pid;
//!   for `--report` it prints each process's lines on the parent's stderr as
//!   the report arrives (the program's own streams are never written to).
//! - [`write_run_report`]: the user's `PAGEWISE_REPORT` file, replaced
//!   atomically, never through a link and never when another user owns it.

use crate::launch::keep_heap::HeapTunables;
use crate::sys::create::{self, NewFile};
use crate::sys::file::{self, Inotify, IN_CLOSE_WRITE, IN_IGNORED};
use crate::text::huge::{perf_map_lines, summary, HotPages, PerfMaps, PreparedMap, RunReport};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The environment variable naming the report directory for the preload library.
pub const REPORT_DIR_ENV: &str = "PAGEWISE_REPORT_DIR";

/// Why the parent side of a huge-text run could not do its part.
#[derive(Debug, thiserror::Error)]
pub enum HugeTextRunError {
    /// The private report directory could not be made or is not private.
    #[error("cannot make a private report directory in {dir}: {why}; set TMPDIR to a directory of your own")]
    ReportDir {
        /// Where it was to be made.
        dir: PathBuf,
        /// What failed.
        why: String,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {error}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file to replace is not this user's own regular file.
    #[error("{path} {why}: not replaced; remove it or choose another report file")]
    Refused {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The hot pages cannot be written down.
    #[error("{0}")]
    HotPages(String),
}

/// A private directory for the reports of one `pagewise run`; removed (with
/// what is in it) on drop.
#[derive(Debug)]
pub struct ReportDir {
    path: PathBuf,
}

impl ReportDir {
    /// Makes a fresh directory `pagewise-run.XXXXXXXXXXXXXXXX` in the temporary
    /// directory (`$TMPDIR`, else `/tmp`) with mode 0700 and checks that it is a
    /// real directory owned by this user that no one else can enter.
    pub fn create() -> Result<ReportDir, HugeTextRunError> {
        let base = std::env::temp_dir();
        let fail = |why: String| HugeTextRunError::ReportDir {
            dir: base.clone(),
            why,
        };
        let path =
            file::create_private_dir(&base, "pagewise-run").map_err(|e| fail(e.to_string()))?;
        let dir = ReportDir { path };
        let meta = std::fs::symlink_metadata(&dir.path).map_err(|e| fail(e.to_string()))?;
        if !meta.is_dir()
            || meta.uid() != create::effective_uid()
            || meta.permissions().mode() & 0o077 != 0
        {
            return Err(fail(format!(
                "{} is not a directory of this user's with mode 0700",
                dir.path.display()
            )));
        }
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the hot pages for `PAGEWISE_HUGE_TEXT=hot-pages:FILE` and returns FILE.
    pub fn write_hot_pages(&self, hot: &[HotPages]) -> Result<PathBuf, HugeTextRunError> {
        let text = HotPages::encode(hot).map_err(HugeTextRunError::HotPages)?;
        let path = self.path.join("hot-pages");
        let write_error = |error| HugeTextRunError::Write {
            path: path.clone(),
            error,
        };
        let new = NewFile::in_dir_of(&path, 0o600).map_err(|e| write_error(e.source))?;
        new.file().write_all(text.as_bytes()).map_err(write_error)?;
        new.link_at(&path).map_err(|e| write_error(e.source))?;
        Ok(path)
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The largest hot-pages file the preload library reads (a 4 KiB page per
/// 13 bytes or so: far more than any text has).
const HOT_PAGES_LIMIT: u64 = 16 << 20;

/// Reads a hot-pages file written by [`ReportDir::write_hot_pages`]: never
/// through a link, never blocking on a FIFO, only a regular file under 16 MiB.
pub fn read_hot_pages(path: &Path) -> Result<Vec<HotPages>, String> {
    let why = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut f = create::open_read_no_follow(path).map_err(|e| why(&e))?;
    let meta = f.metadata().map_err(|e| why(&e))?;
    if !meta.is_file() || meta.len() > HOT_PAGES_LIMIT {
        return Err(why(&"not a regular file under 16 MiB"));
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(|e| why(&e))?;
    HotPages::decode(&text).map_err(|e| why(&e))
}

/// Writes this process's report into the report directory `dir` as
/// `PID.json`, or `PID.N.json` when an earlier program in this process (before
/// an `exec`) took the name: a new file with mode 0600 that appears whole or
/// not at all, never over anything and never through a link ([`NewFile`]).
/// Returns the file. Cost: a few system calls and one write of about 1 KiB.
pub fn write_process_report(dir: &Path, report: &RunReport) -> std::io::Result<PathBuf> {
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    for n in 0..1000u32 {
        let name = match n {
            0 => format!("{}.json", report.pid),
            n => format!("{}.{n}.json", report.pid),
        };
        let path = dir.join(name);
        let new = NewFile::in_dir_of(&path, 0o600).map_err(|e| e.source)?;
        new.file().write_all(&json)?;
        match new.link_at(&path) {
            Ok(_) => return Ok(path),
            Err(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.source),
        }
    }
    Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
}

/// `PID.json` → (PID, 0); `PID.N.json` → (PID, N).
fn report_name(name: &str) -> Option<(u32, u32)> {
    let stem = name.strip_suffix(".json")?;
    let (pid, n) = match stem.split_once('.') {
        Some((pid, n)) => (pid, n.parse().ok()?),
        None => (stem, 0),
    };
    Some((pid.parse().ok()?, n))
}

/// Collects the reports in a [`ReportDir`] and publishes perf maps from them.
#[derive(Debug)]
pub struct Gatherer {
    dir: PathBuf,
    perf_maps: Option<PerfMaps>,
    print: bool,
    done: HashSet<String>,
    newest_image: BTreeMap<u32, u32>,
    reports: Vec<RunReport>,
    problems: Vec<String>,
    /// Reports taken by the background thread whose maps it has not written yet.
    in_flight: Vec<Taken>,
    /// Set when the program has ended: from then on only the caller's thread works.
    stopped: bool,
}

/// A report read from the directory, and whether it gets a perf map (the
/// newest program of its pid does).
#[derive(Debug, Clone)]
struct Taken {
    key: (u32, u32),
    report: RunReport,
    map: bool,
}

impl Gatherer {
    /// Collects from `dir`; writes perf maps with `perf_maps` (none: no maps);
    /// with `print`, prints each report's [`summary`] lines on stderr (this
    /// process's, never the program's) as it reads the report, and a line
    /// for each map it later replaces or removes; without, only the line of
    /// a report whose fix was not applied (a fallback is never silent).
    pub fn new(dir: &Path, perf_maps: Option<PerfMaps>, print: bool) -> Self {
        Gatherer {
            dir: dir.to_owned(),
            perf_maps,
            print,
            done: HashSet::new(),
            newest_image: BTreeMap::new(),
            reports: Vec::new(),
            problems: Vec::new(),
            in_flight: Vec::new(),
            stopped: false,
        }
    }

    /// Reads the reports that are complete and not yet read, in order of pid
    /// and `exec`, and publishes their perf maps (only the newest program of
    /// each pid gets one: it replaces what an earlier program there had). A
    /// report still being written does not parse yet and waits for the next
    /// call; with `last`, it is given up on and named in
    /// [`Gathered::problems`].
    pub fn collect(&mut self, last: bool) {
        for taken in self.take(last) {
            let prepared = prepare(&taken);
            print(&self.settle(taken, prepared));
        }
    }

    /// The fresh complete reports, in order, each marked read, with whether it
    /// gets a perf map. Cheap: reads the small report files.
    fn take(&mut self, last: bool) -> Vec<Taken> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut fresh: Vec<((u32, u32), String)> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| !self.done.contains(name))
            .filter_map(|name| report_name(&name).map(|key| (key, name)))
            .collect();
        fresh.sort();
        let mut parsed: Vec<((u32, u32), RunReport)> = Vec::new();
        for (key, name) in fresh {
            match read_report(&self.dir.join(&name)) {
                Ok(report) => {
                    self.done.insert(name);
                    parsed.push((key, report));
                }
                Err(e) if last => {
                    self.done.insert(name);
                    self.problems.push(e);
                }
                Err(_) => {}
            }
        }
        let mut taken = Vec::with_capacity(parsed.len());
        for (i, ((pid, image), report)) in parsed.iter().cloned().enumerate() {
            let later_in_batch = parsed[i + 1..].iter().any(|((p, _), _)| *p == pid);
            let newest = self.newest_image.get(&pid).is_none_or(|n| image >= *n);
            let map = self.perf_maps.is_some() && !later_in_batch && newest;
            if map {
                self.newest_image.insert(pid, image);
            }
            taken.push(Taken {
                key: (pid, image),
                report,
                map,
            });
        }
        taken
    }

    /// Writes `taken`'s map from its prepared text and keeps its report;
    /// returns the lines to print, its [`summary`] and those of earlier
    /// maps it replaced or removed (printed by the caller once it holds no
    /// lock: a full stderr pipe must not block the other thread).
    fn settle(&mut self, mut taken: Taken, prepared: Option<PreparedMap>) -> Vec<String> {
        self.in_flight.retain(|t| t.key != taken.key);
        let mut gone = Vec::new();
        if let (Some(maps), Some(prepared)) = (&mut self.perf_maps, prepared) {
            maps.write_prepared(&mut taken.report, prepared);
            gone = self.maps_gone(&taken.report);
        } else if self.perf_maps.is_some() && taken.report.moved_bytes() > 0 {
            taken.report.perf_map_note = Some(
                "not written: the process had run another program (exec) by the time \
                 this report was read"
                    .into(),
            );
        }
        let mut lines = Vec::new();
        if self.print {
            lines = summary(&taken.report);
            lines.extend(gone.iter().flat_map(perf_map_lines));
        } else {
            // A fallback is said even without --report.
            lines.extend(crate::text::huge::not_applied_line(&taken.report));
        }
        self.reports.push(taken.report);
        lines
    }

    /// Marks the reports of earlier programs of `newest`'s process whose perf
    /// map is gone now that `newest`'s was published: replaced by its map,
    /// or removed because it moved nothing. Returns copies of those marked.
    fn maps_gone(&mut self, newest: &RunReport) -> Vec<RunReport> {
        let next = &newest.program;
        let why = match &newest.perf_map {
            Some(_) => format!("replaced by the map of {next}, which the process ran next (exec)"),
            None if newest.moved_bytes() == 0 && newest.perf_map_note.is_none() => {
                format!("removed: the process ran {next} next (exec), which moved no text")
            }
            // A map that could not be written or removed: the earlier one may stay.
            None => return Vec::new(),
        };
        let mut gone = Vec::new();
        for earlier in self.reports.iter_mut().filter(|r| r.pid == newest.pid) {
            if let Some(map) = earlier.perf_map.take() {
                earlier.perf_map_removed = Some(format!("{map} {why}"));
                gone.push(earlier.clone());
            }
        }
        gone
    }

    /// Every report read, and the problems met. Reports a background thread
    /// took and had not finished are finished here, on the caller's thread.
    pub fn finish(mut self) -> Gathered {
        self.stopped = true;
        for taken in std::mem::take(&mut self.in_flight) {
            let prepared = prepare(&taken);
            print(&self.settle(taken, prepared));
        }
        self.collect(true);
        self.reports.sort_by_key(|r| {
            // In order of pid and exec, as taken (a pid's reports keep their order).
            r.pid
        });
        Gathered {
            reports: self.reports,
            problems: self.problems,
        }
    }
}

/// Prints `lines` on stderr, if any.
fn print(lines: &[String]) {
    if !lines.is_empty() {
        crate::text::huge::eprint_lines(lines);
    }
}

/// The costly part of publishing `taken` (see [`PerfMaps::prepare`]), which
/// needs no lock; `None` also when it gets no map.
fn prepare(taken: &Taken) -> Option<PreparedMap> {
    taken.map.then(|| PerfMaps::prepare(&taken.report))
}

/// The nice value of the report thread: a tenth of the program's share of a
/// busy CPU, enough to finish a map it started within milliseconds.
const BACKGROUND_NICE: i32 = 10;

/// One round of the background thread: takes the fresh reports (marking them
/// in flight), prepares their maps without holding the lock (the costly part,
/// at the thread's low priority), then writes each one unless the program
/// has ended meanwhile, in which case the caller's [`Gatherer::finish`]
/// does it at its own priority. Returns false once stopped.
fn background_round(shared: &Mutex<Gatherer>) -> bool {
    let taken = match shared.lock() {
        Ok(mut g) if !g.stopped => {
            let taken = g.take(false);
            g.in_flight.extend(taken.iter().cloned());
            taken
        }
        _ => return false,
    };
    for t in taken {
        let prepared = prepare(&t);
        let lines = match shared.lock() {
            Ok(mut g) if !g.stopped => g.settle(t, prepared),
            _ => return false,
        };
        print(&lines);
    }
    true
}

fn read_report(path: &Path) -> Result<RunReport, String> {
    let mut f =
        create::open_read_no_follow(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a complete report: {e}", path.display()))
}

/// What a run's processes reported.
#[derive(Debug, Default)]
pub struct Gathered {
    /// Every report, in order of pid and, within a pid, of `exec`.
    pub reports: Vec<RunReport>,
    /// Report files that could not be read.
    pub problems: Vec<String>,
}

impl Gathered {
    /// The report of the program now running as `pid` (the newest for that pid).
    pub fn newest_for(&self, pid: u32) -> Option<&RunReport> {
        self.reports.iter().rev().find(|r| r.pid == pid)
    }
}

/// Runs `wait` (which waits for the program) while a thread at a low priority
/// (nice [`BACKGROUND_NICE`]) collects reports
/// as they appear (woken by `inotify` when a file in the directory is closed
/// after writing), then collects what is left. Without inotify everything is
/// collected after `wait` returns, and the returned note says so.
///
/// When `wait` returns, the caller's thread does not wait for the background
/// one to finish its work: it marks the gatherer stopped (waiting at most for
/// the thread to leave the lock, which it holds only to read reports and to
/// write a map already prepared) and finishes at its own priority whatever
/// the thread had taken and not yet written ([`Gatherer::finish`]). The thread, when it next
/// runs, sees the mark and ends.
pub fn gather_during<T>(
    gatherer: Gatherer,
    wait: impl FnOnce() -> T,
) -> (T, Gathered, Option<String>) {
    let watch = Inotify::new().and_then(|i| {
        let wd = i.add_watch(&gatherer.dir, IN_CLOSE_WRITE)?;
        Ok((Arc::new(i), wd))
    });
    let (inotify, wd) = match watch {
        Ok(w) => w,
        Err(e) => {
            let result = wait();
            let note = format!("perf maps were written after the program ended: {e}");
            return (result, gatherer.finish(), Some(note));
        }
    };
    let shared = Arc::new(Mutex::new(gatherer));
    {
        let (inotify, shared) = (Arc::clone(&inotify), Arc::clone(&shared));
        std::thread::spawn(move || {
            // Reading symbol tables and writing maps should take little CPU time
            // from the program, yet never stall the caller that may wait for this
            // thread's lock when the program ends (SCHED_IDLE did, for seconds).
            let _ = crate::sys::process::lower_this_thread_priority(BACKGROUND_NICE);
            // A round first, then one per batch of events: the program was
            // started before the watch, and what it reported before then
            // raised no event. After IN_IGNORED the caller collects the rest.
            while background_round(&shared) {
                match inotify.read_events() {
                    Ok(events) if events.iter().all(|e| e.mask & IN_IGNORED == 0) => {}
                    _ => break,
                }
            }
        });
    }
    let result = wait();
    // Removing the watch queues IN_IGNORED, which ends the thread's loop.
    let _ = inotify.remove_watch(wd);
    let gatherer = match shared.lock() {
        Ok(mut g) => {
            // The thread finds a stopped, empty gatherer in its place from now on;
            // this one's own `finish` stops it.
            let mut spent = Gatherer::new(&g.dir, None, false);
            spent.stopped = true;
            std::mem::replace(&mut *g, spent)
        }
        Err(_) => {
            return (
                result,
                Gathered::default(),
                Some("report gathering failed".into()),
            )
        }
    };
    (result, gatherer.finish(), None)
}

/// How a program started by [`run_program`] ended, and what its processes reported.
#[derive(Debug)]
pub struct Finished {
    /// The program's pid.
    pub pid: u32,
    /// How it ended.
    pub status: std::process::ExitStatus,
    /// Every report gathered.
    pub gathered: Gathered,
    /// A fallback taken while gathering (no inotify), to report.
    pub note: Option<String>,
}

/// Starts `command` and waits for it as its parent, while `gatherer` collects
/// reports as they appear ([`gather_during`]). Meanwhile this process passes
/// `SIGTERM`, `SIGHUP`, `SIGINT`, `SIGQUIT`, `SIGUSR1` and `SIGUSR2` on to the
/// program ([`crate::sys::process::ForwardSignals`]; not the terminal's
/// Ctrl-C, which reaches the program anyway), so stopping the parent stops
/// the program. Fails only when the program cannot
/// be started or waited for.
pub fn run_program(
    mut command: std::process::Command,
    gatherer: Gatherer,
) -> std::io::Result<Finished> {
    let mut child = command.spawn()?;
    let pid = child.id();
    let _forward = crate::sys::process::ForwardSignals::to(pid);
    let (status, gathered, note) = gather_during(gatherer, || child.wait());
    Ok(Finished {
        pid,
        status: status?,
        gathered,
        note,
    })
}

/// The preload library a run used, for its report.
#[derive(Debug, Clone, Serialize)]
pub struct PreloadUsed {
    /// Its path.
    pub path: String,
    /// Where it came from: `PAGEWISE_PRELOAD`, `embedded (written to the
    /// cache)`, `embedded (cached)` or `beside the pagewise binary`.
    pub source: String,
}

/// The `PAGEWISE_REPORT` file of a run: the report of the program `pagewise
/// run` started (as it runs at the end, after any `exec`), every process's
/// report, the preload library used and the `GLIBC_TUNABLES` set. Without
/// `--huge-text` the top report considers nothing, `processes` is empty and
/// `preload` is `null`.
#[derive(Debug, Serialize)]
pub struct RunSummary<'a> {
    /// The started program's report (its fields at the top level).
    #[serde(flatten)]
    pub top: &'a RunReport,
    /// Every report, in order of pid and `exec`, the top one included.
    pub processes: &'a [RunReport],
    /// The library preloaded, with `--huge-text`.
    pub preload: Option<&'a PreloadUsed>,
    /// The tunables set, with `--keep-heap` or `--thp-heap`.
    pub tunables: Option<&'a HeapTunables>,
}

/// Writes `summary` as JSON to `path`: under a temporary name in the same
/// directory (created exclusively, never through a link), then renamed over
/// `path`, so a reader sees the old file or the new one, never half. Refuses
/// when `path` is a symbolic link, not a regular file, or owned by another user.
pub fn write_run_report(path: &Path, summary: &RunSummary<'_>) -> Result<(), HugeTextRunError> {
    let json = serde_json::to_vec_pretty(summary).map_err(|e| HugeTextRunError::Write {
        path: path.to_owned(),
        error: std::io::Error::other(e),
    })?;
    replace_own_file(path, &json)
}

/// Replaces (or creates) `path` with `bytes` atomically; see [`write_run_report`].
fn replace_own_file(path: &Path, bytes: &[u8]) -> Result<(), HugeTextRunError> {
    let refuse = |why: String| HugeTextRunError::Refused {
        path: path.to_owned(),
        why,
    };
    let write_error = |error| HugeTextRunError::Write {
        path: path.to_owned(),
        error,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(refuse("is a symbolic link (never followed)".into()))
        }
        Ok(m) if !m.is_file() => return Err(refuse("is not a regular file".into())),
        Ok(m) if m.uid() != create::effective_uid() => {
            return Err(refuse(format!("belongs to user {}", m.uid())))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write_error(e)),
    }
    let new = NewFile::beside(path, 0o666).map_err(|e| write_error(e.source))?;
    new.file().write_all(bytes).map_err(write_error)?;
    new.replace_at(path).map_err(|e| write_error(e.source))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::huge::RangeReport;
    use crate::text::perfmap::PerfMapWriter;

    fn report(pid: u32, program: &str) -> RunReport {
        let mut report = RunReport::empty(pid, program.into());
        report.ranges.push(RangeReport {
            object: program.into(),
            bias: 0,
            start: 0x400000,
            end: 0x600000,
            huge_bytes: 0,
            page_kind: None,
            skipped: Some("test".into()),
            note: None,
            move_micros: None,
        });
        report
    }

    #[test]
    fn report_names_order_execs() {
        assert_eq!(report_name("12.json"), Some((12, 0)));
        assert_eq!(report_name("12.3.json"), Some((12, 3)));
        assert_eq!(report_name("hot-pages"), None);
        assert_eq!(report_name("x.json"), None);
        assert_eq!(report_name(".12.json"), None);
    }

    #[test]
    fn process_reports_are_gathered_in_exec_order() {
        let dir = ReportDir::create().unwrap();
        let meta = std::fs::symlink_metadata(dir.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let first = write_process_report(dir.path(), &report(40, "/bin/sh")).unwrap();
        let second = write_process_report(dir.path(), &report(40, "/bin/app")).unwrap();
        let child = write_process_report(dir.path(), &report(41, "/bin/cc1")).unwrap();
        assert!(first.ends_with("40.json") && second.ends_with("40.1.json"));
        assert!(child.ends_with("41.json"));
        // An incomplete report waits; at the end it is named as a problem.
        std::fs::write(dir.path().join("42.json"), "{\"schema\": ").unwrap();
        let mut g = Gatherer::new(dir.path(), None, false);
        g.collect(false);
        assert_eq!(g.reports.len(), 3);
        let gathered = g.finish();
        assert_eq!(gathered.newest_for(40).unwrap().program, "/bin/app");
        assert_eq!(gathered.reports.len(), 3);
        assert_eq!(gathered.problems.len(), 1, "{:?}", gathered.problems);
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists(), "the report directory is removed");
    }

    #[test]
    fn a_fix_not_applied_is_said_without_report_and_nothing_else_is() {
        let mut g = Gatherer::new(Path::new("/nonexistent"), None, false);
        let taken = |report| Taken {
            key: (70, 0),
            report,
            map: false,
        };
        let mut failed = RunReport::not_applied("bad setting".into());
        failed.pid = 70;
        failed.program = "/bin/app".into();
        let lines = g.settle(taken(failed), None);
        assert_eq!(
            lines,
            ["pagewise[70] app: huge text not applied: bad setting"]
        );
        assert!(g.settle(taken(report(70, "/bin/app")), None).is_empty());
    }

    #[test]
    fn a_report_never_goes_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("50.json")).unwrap();
        let written = write_process_report(dir.path(), &report(50, "/bin/x")).unwrap();
        assert!(written.ends_with("50.1.json"));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[test]
    fn the_run_report_replaces_only_a_plain_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let top = report(60, "/bin/app");
        let preload = PreloadUsed {
            path: "/x.so".into(),
            source: "test".into(),
        };
        let summary = RunSummary {
            top: &top,
            processes: std::slice::from_ref(&top),
            preload: Some(&preload),
            tunables: None,
        };
        let path = dir.path().join("r.json");
        std::fs::write(&path, "old").unwrap();
        write_run_report(&path, &summary).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["pid"], 60);
        assert_eq!(v["processes"][0]["program"], "/bin/app");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_run_report(&link, &summary).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let names = crate::sys::file::names_in(dir.path());
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    /// A report directory holding one report of `pid` (this test binary,
    /// text moved), the directory its perf map goes to, a gatherer of both,
    /// and the name of the function the map must hold.
    fn gatherer_with_a_moved_report(pid: u32) -> (ReportDir, tempfile::TempDir, Gatherer, String) {
        let dir = ReportDir::create().unwrap();
        let maps_dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let (moved, function) = moved_report(pid, exe.to_str().unwrap());
        write_process_report(dir.path(), &moved).unwrap();
        let maps = PerfMaps::new(PerfMapWriter::in_dir(maps_dir.path()));
        let gatherer = Gatherer::new(dir.path(), Some(maps), false);
        (dir, maps_dir, gatherer, function)
    }

    /// A report written before the watch was set (the program starts first)
    /// raises no event; its map must still be written while the program runs,
    /// not only when it ends.
    #[test]
    fn a_report_written_before_gathering_starts_gets_its_map_during_the_run() {
        let (_dir, maps_dir, gatherer, _) = gatherer_with_a_moved_report(81);
        let map = maps_dir.path().join("perf-81.map");
        let (seen_during_run, gathered, note) = gather_during(gatherer, || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !map.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            map.exists()
        });
        assert_eq!(note, None, "inotify is needed for this test");
        assert!(
            seen_during_run,
            "the map was not written while the program ran"
        );
        assert_eq!(gathered.reports.len(), 1);
    }

    #[test]
    fn reports_a_stopped_background_thread_took_are_finished_by_the_caller() {
        let (_dir, _maps_dir, gatherer, function) = gatherer_with_a_moved_report(80);
        let shared = Mutex::new(gatherer);
        // The background thread takes the report, then loses the CPU before writing.
        {
            let mut g = shared.lock().unwrap();
            let taken = g.take(false);
            assert_eq!(taken.len(), 1);
            g.in_flight.extend(taken);
        }
        let mut g = shared.into_inner().unwrap();
        g.stopped = true;
        let stopped = Mutex::new(g);
        assert!(
            !background_round(&stopped),
            "a stopped gatherer ends the thread"
        );
        let gathered = stopped.into_inner().unwrap().finish();
        assert_eq!(gathered.reports.len(), 1, "{:?}", gathered.reports);
        let map = gathered.reports[0].perf_map.clone();
        let map = map.unwrap_or_else(|| panic!("{:?}", gathered.reports[0].perf_map_note));
        let text = std::fs::read_to_string(map).unwrap();
        assert!(text.contains(&function), "{function} not in the map");
    }

    /// A report of `pid` running `program` that moved the 2 MiB page of this
    /// test binary's text holding one of its functions, so that a map has a
    /// symbol to name; and that function's name.
    fn moved_report(pid: u32, program: &str) -> (RunReport, String) {
        let exe = std::env::current_exe().unwrap();
        let table = crate::text::function_table::FunctionTable::read(&exe).unwrap();
        let f = &table.functions()[table.functions().len() / 2];
        let mut moved = report(pid, program);
        moved.ranges[0].object = exe.display().to_string();
        moved.ranges[0].start = f.vaddr & !0x1f_ffff;
        moved.ranges[0].end = moved.ranges[0].start + (2 << 20);
        moved.ranges[0].page_kind = Some("thp".into());
        moved.ranges[0].skipped = None;
        (moved, f.name.clone())
    }

    /// When a process runs another program (`exec`), the map of the one
    /// before is replaced or, when the next moves nothing, removed: the
    /// earlier report then says so instead of naming a file that is gone
    /// or now names another program's code.
    #[test]
    fn a_map_gone_after_an_exec_is_said_in_the_earlier_report() {
        let dir = ReportDir::create().unwrap();
        let maps_dir = tempfile::tempdir().unwrap();
        let maps = PerfMaps::new(PerfMapWriter::in_dir(maps_dir.path()));
        let mut g = Gatherer::new(dir.path(), Some(maps), false);
        let mut step = |report: &RunReport| {
            write_process_report(dir.path(), report).unwrap();
            g.collect(false);
            g.reports.clone()
        };
        let reports = step(&moved_report(90, "/bin/first").0);
        let map = reports[0].perf_map.clone().expect("a map");
        let reports = step(&moved_report(90, "/bin/second").0);
        assert_eq!(reports[0].perf_map, None);
        let replaced = reports[0].perf_map_removed.clone().unwrap();
        assert_eq!(
            replaced,
            format!("{map} replaced by the map of /bin/second, which the process ran next (exec)")
        );
        assert_eq!(reports[1].perf_map.as_deref(), Some(map.as_str()));
        let reports = step(&report(90, "/bin/true"));
        assert!(!Path::new(&map).exists());
        assert_eq!(reports[1].perf_map, None);
        let removed = reports[1].perf_map_removed.clone().unwrap();
        assert_eq!(
            removed,
            format!("{map} removed: the process ran /bin/true next (exec), which moved no text")
        );
        let lines = crate::text::huge::summary(&reports[1]);
        assert!(
            lines.contains(&format!("pagewise[90] second: perf map {removed}")),
            "{lines:#?}"
        );
        assert_eq!(
            (reports[2].perf_map.as_ref(), reports[0].perf_map.as_ref()),
            (None, None)
        );
        // Two programs of one process read together: the first, gone already,
        // gets no map, and says why.
        write_process_report(dir.path(), &moved_report(91, "/bin/first").0).unwrap();
        write_process_report(dir.path(), &report(91, "/bin/true")).unwrap();
        g.collect(false);
        let first = g.reports.iter().find(|r| r.pid == 91).unwrap();
        assert_eq!(first.perf_map, None);
        assert!(first
            .perf_map_note
            .as_ref()
            .unwrap()
            .contains("not written"));
    }

    #[test]
    fn the_newest_program_of_a_pid_owns_its_perf_map() {
        let dir = ReportDir::create().unwrap();
        let maps_dir = tempfile::tempdir().unwrap();
        let mut moved = report(70, "/nonexistent/app");
        moved.ranges[0].page_kind = Some("thp".into());
        moved.ranges[0].skipped = None;
        write_process_report(dir.path(), &moved).unwrap();
        let mut g = Gatherer::new(
            dir.path(),
            Some(PerfMaps::new(PerfMapWriter::in_dir(maps_dir.path()))),
            false,
        );
        g.collect(false);
        // The object has no readable symbols: said, and no map.
        let note = g.reports[0].perf_map_note.clone().unwrap();
        assert!(note.contains("/nonexistent/app"), "{note}");
        assert!(g.reports[0].perf_map.is_none());
    }
}
