//! Moving the 2 MiB-aligned part of executable text onto huge pages.
//!
//! Used by `pagewise run --huge-text` (through the `pagewise-preload`
//! library, before `main`) and callable directly, early in `main`, by
//! programs that link pagewise ([`remap_text`]). For each executable
//! `PT_LOAD` segment of the chosen objects: round its start up and its end
//! down to 2 MiB; if at least one 2 MiB page remains, copy it onto hugetlb
//! memory (when a 2 MiB pool has room) or THP, make it R+X, and move it over
//! the original with one `mremap`. A failure at any step leaves the original
//! text in place. Then: verify with the kernel, name the range.
//!
//! The move itself reads no file but `/proc/self/maps` and small `/sys`
//! files, parses no symbols and allocates little, so it costs what the copy
//! costs. The perf map that names the moved code for profilers is made from
//! the [`RunReport`] by [`PerfMaps`], off the program's path: by the
//! `pagewise run` parent for a preloaded program, in process for
//! [`remap_text`] with `perf_map` set.

use super::function_table::{self, LoadedSection, SectionKind};
use super::perfmap::{self, PerfMapWriter};
use crate::host::proc_maps::{self, MapsEntry};
use crate::host::user_cache::{self, FileStamp, Purpose, UserCacheError};
use crate::host::{hugetlb, proc_tasks, thp};
use crate::sys::dl::{self, LoadedObject};
use crate::sys::text::{self, HugeKind, MoveStep};
use crate::sys::Errno;
use crate::sys::{self as rawsys};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The JSON schema of a [`RunReport`].
pub const SCHEMA: &str = "pagewise.run/1";
const HUGE: u64 = 2 << 20;

/// What to move.
#[derive(Debug, Clone, Default)]
pub struct HugeTextOptions {
    /// Shared libraries to move too, matched against the file name (`libc.so.6`,
    /// or a prefix such as `libpython`).
    pub libs: Vec<String>,
    /// When set, only the 2 MiB pages (by runtime address) in this list are moved:
    /// the pages that hold the profile's hot functions.
    pub hot_pages: Option<Vec<HotPages>>,
    /// Fault injection for tests: fail before this step.
    pub fail_at: Option<MoveStep>,
    /// Write `/tmp/perf-PID.map` for moved ranges, in this process, after the
    /// move (reads the symbol tables of the moved objects). The preload leaves
    /// this off: `pagewise run` writes the map from the report instead.
    pub perf_map: bool,
}

/// Hot 2 MiB pages of one object, as link-time virtual addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotPages {
    /// File name of the object (`""` or the executable's name for the main program).
    pub object: String,
    /// Link-time addresses of hot code; their 2 MiB pages are moved.
    pub addresses: Vec<u64>,
}

impl HotPages {
    /// The text form `pagewise run` hands to the preload library: per object one
    /// line, the hex start addresses of its hot 4 KiB pages (sorted, each once:
    /// load biases are whole 4 KiB pages, so that is all the move needs), a tab,
    /// and the object's name. Fails for a name holding a line break.
    pub fn encode(list: &[HotPages]) -> Result<String, String> {
        let mut text = String::new();
        for hot in list {
            if hot.object.contains(['\n', '\r']) {
                return Err(format!("object name {:?} holds a line break", hot.object));
            }
            let mut pages: Vec<u64> = hot.addresses.iter().map(|a| a & !0xfff).collect();
            pages.sort_unstable();
            pages.dedup();
            let pages: Vec<String> = pages.iter().map(|p| format!("{p:x}")).collect();
            text.push_str(&pages.join(" "));
            text.push('\t');
            text.push_str(&hot.object);
            text.push('\n');
        }
        Ok(text)
    }

    /// Parses [`HotPages::encode`]'s text form. One pass; a malformed line is an error.
    pub fn decode(text: &str) -> Result<Vec<HotPages>, String> {
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|line| {
                let (pages, object) = line
                    .split_once('\t')
                    .ok_or_else(|| format!("hot pages line without a tab: {line:?}"))?;
                let addresses = pages
                    .split_ascii_whitespace()
                    .map(|p| u64::from_str_radix(p, 16).map_err(|e| format!("{p:?}: {e}")))
                    .collect::<Result<Vec<u64>, String>>()?;
                Ok(HotPages {
                    object: object.to_owned(),
                    addresses,
                })
            })
            .collect()
    }
}

/// One range considered for moving.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RangeReport {
    /// The object's path.
    pub object: String,
    /// The object's load bias: its link-time address = runtime address - bias.
    #[serde(default)]
    pub bias: u64,
    /// First byte of the 2 MiB-aligned range (runtime address); for a
    /// segment skipped whole, of the segment itself.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    /// Bytes the kernel reports on huge pages there after the move.
    pub huge_bytes: u64,
    /// `hugetlb` or `thp` when moved.
    pub page_kind: Option<String>,
    /// Why it was not moved, when it was not.
    pub skipped: Option<String>,
    /// Anything else about a move worth knowing (a step that could not be taken).
    #[serde(default)]
    pub note: Option<String>,
    /// How long the move took, in microseconds (mapping and faulting in the
    /// huge pages, the copy, the remap): what it cost the program's start.
    #[serde(default)]
    pub move_micros: Option<u64>,
}

impl RangeReport {
    /// The range `[start, end)` of `object` (load bias `bias`) as it is
    /// considered, before anything is moved or skipped.
    fn considered(object: &str, bias: u64, start: u64, end: u64) -> RangeReport {
        RangeReport {
            object: object.to_owned(),
            bias,
            start,
            end,
            huge_bytes: 0,
            page_kind: None,
            skipped: None,
            note: None,
            move_micros: None,
        }
    }
}

/// Everything one process did, as `PAGEWISE_REPORT` JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The process.
    pub pid: u32,
    /// Its executable.
    pub program: String,
    /// Ranges considered, moved or skipped.
    pub ranges: Vec<RangeReport>,
    /// The perf map written, if any.
    pub perf_map: Option<String>,
    /// Why no perf map was written, when ranges moved but none was.
    pub perf_map_note: Option<String>,
    /// The map this process's program had, and why it is gone: the process
    /// then ran another program (`exec`), whose map replaced it or which
    /// moved nothing, so it was removed. `perf_map` is then `null`.
    #[serde(default)]
    pub perf_map_removed: Option<String>,
    /// Whether the moved ranges carry a `PR_SET_VMA_ANON_NAME` name.
    pub vma_named: bool,
    /// The libraries asked for ([`HugeTextOptions::libs`], `--huge-text-lib`)
    /// that match no library loaded in this process at the move (one opened
    /// later with `dlopen` is never moved).
    #[serde(default)]
    pub libs_not_found: Vec<String>,
    /// Why nothing was considered in this process, when nothing was: a bad
    /// setting, an internal error.
    #[serde(default)]
    pub not_applied: Option<String>,
}

impl RunReport {
    /// The report of process `pid` running `program` before anything is
    /// considered: no ranges, no perf map.
    pub fn empty(pid: u32, program: String) -> RunReport {
        RunReport {
            schema: SCHEMA.to_owned(),
            pid,
            program,
            ranges: Vec::new(),
            perf_map: None,
            perf_map_note: None,
            perf_map_removed: None,
            vma_named: false,
            libs_not_found: Vec::new(),
            not_applied: None,
        }
    }

    /// The report of this process when nothing could be considered, and why.
    pub fn not_applied(why: String) -> RunReport {
        RunReport {
            not_applied: Some(why),
            ..RunReport::empty(std::process::id(), exe_path())
        }
    }

    /// Bytes moved onto huge pages in total.
    pub fn moved_bytes(&self) -> u64 {
        self.ranges
            .iter()
            .filter(|r| r.page_kind.is_some())
            .map(|r| r.end - r.start)
            .sum()
    }
}

fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn object_path(object: &LoadedObject) -> String {
    if object.name.is_empty() {
        exe_path()
    } else {
        object.name.clone()
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Threads of this process, or `None` when `/proc/self/task` cannot be read.
fn threads_running() -> Option<usize> {
    proc_tasks::thread_ids(None).ok().map(|t| t.len())
}

/// Why `[start, end)` must not be moved, if it must not: it has to be private,
/// file-backed, read+execute text from end to end, and hold none of the code
/// that does the move.
fn unmovable(start: u64, end: u64, maps: &[MapsEntry]) -> Option<String> {
    let mover = text::move_to_huge as *const () as u64;
    if (start..end).contains(&mover) {
        return Some("holds pagewise's own moving code".into());
    }
    let mut cursor = start;
    for m in maps.iter().filter(|m| m.end > start && m.start < end) {
        if m.start > cursor {
            return Some(format!("{cursor:#x}-{:#x} is not mapped", m.start));
        }
        if !(m.is_private_text() && m.is_file()) {
            return Some(format!(
                "{:#x}-{:#x} is not private file-backed r-x text ({})",
                m.start,
                m.end,
                m.path.as_deref().unwrap_or("anonymous")
            ));
        }
        cursor = cursor.max(m.end);
    }
    (cursor < end).then(|| format!("{cursor:#x}-{end:#x} is not mapped"))
}

/// Splits `[start, end)` around the 2 MiB page that holds the moving code, so
/// a program that links pagewise can move the rest of its text.
fn around_mover(start: u64, end: u64) -> Vec<(u64, u64)> {
    let mover = text::move_to_huge as *const () as u64 / HUGE * HUGE;
    if !(start..end).contains(&mover) {
        return vec![(start, end)];
    }
    [(start, mover), (mover + HUGE, end)]
        .into_iter()
        .filter(|(a, b)| b > a)
        .collect()
}

/// One executable segment of an object as loaded (runtime addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TextSegment {
    /// The segment's first byte.
    start: u64,
    /// One past its last byte in the file.
    end: u64,
    /// Its 2 MiB-aligned interior, `[aligned_start, aligned_end)` (empty when
    /// no whole 2 MiB page lies inside).
    aligned_start: u64,
    aligned_end: u64,
    /// Its size in memory, for messages.
    memsz: u64,
}

/// The executable segments of one object, each with its aligned interior.
fn text_segments(object: &LoadedObject) -> Vec<TextSegment> {
    object
        .segments
        .iter()
        .filter(|s| s.executable && !s.writable)
        .map(|s| {
            let start = object.bias + s.vaddr;
            let end = start + s.filesz.min(s.memsz);
            let aligned_start = start.next_multiple_of(HUGE);
            let aligned_end = (end / HUGE * HUGE).max(aligned_start);
            TextSegment {
                start,
                end,
                aligned_start,
                aligned_end,
                memsz: s.memsz,
            }
        })
        .collect()
}

/// A run of 2 MiB pages left where it is, and why.
type LeftRun = (u64, u64, String);

/// Splits 2 MiB-aligned `runs` (runtime addresses) into the runs worth
/// moving, the 2 MiB pages that hold some code of a section of kind
/// [`SectionKind::Code`], and the runs left, with why: the names of the cold
/// code and data sections they hold. `sections` are link-time (runtime =
/// link-time + `bias`); with none known, everything is worth moving.
fn worth_moving(
    runs: &[(u64, u64)],
    sections: &[LoadedSection],
    bias: u64,
) -> (Vec<(u64, u64)>, Vec<LeftRun>) {
    if sections.is_empty() {
        return (runs.to_vec(), Vec::new());
    }
    let mut moved: Vec<(u64, u64)> = Vec::new();
    let mut left: Vec<LeftRun> = Vec::new();
    for &(start, end) in runs {
        for page in (start..end).step_by(HUGE as usize) {
            let page_end = page + HUGE;
            let within: Vec<&LoadedSection> = sections
                .iter()
                .filter(|s| {
                    let s_start = s.vaddr.saturating_add(bias);
                    s_start < page_end && s_start.saturating_add(s.size) > page
                })
                .collect();
            if within.iter().any(|s| s.kind == SectionKind::Code) {
                add_page(&mut moved, page);
                continue;
            }
            let why = left_because(&within);
            match left.last_mut() {
                Some((_, e, w)) if *e == page && *w == why => *e = page_end,
                _ => left.push((page, page_end, why)),
            }
        }
    }
    (moved, left)
}

/// Why pages holding only `sections` (none of them ordinary code) stay.
fn left_because(sections: &[&LoadedSection]) -> String {
    let names = |kind: SectionKind| -> Vec<&str> {
        let mut n: Vec<&str> = sections
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.name.as_str())
            .collect();
        n.dedup();
        n
    };
    let (cold, data) = (names(SectionKind::ColdCode), names(SectionKind::Data));
    let mut parts = Vec::new();
    if !cold.is_empty() {
        parts.push(format!(
            "code its toolchain's profile found cold ({})",
            cold.join(", ")
        ));
    }
    if !data.is_empty() {
        parts.push(format!("data, not code ({})", data.join(", ")));
    }
    if parts.is_empty() {
        return "no section: padding between sections".to_owned();
    }
    let hint = match cold.is_empty() {
        true => "",
        false => "; --huge-text=hot:PROFILE moves what of it runs",
    };
    format!("holds only {}{hint}", parts.join(" and "))
}

/// Splits `[start, end)` into the runs of 2 MiB pages that hold hot addresses.
fn hot_runs(start: u64, end: u64, bias: u64, hot: &[u64]) -> Vec<(u64, u64)> {
    let mut pages: Vec<u64> = hot
        .iter()
        .filter_map(|a| a.checked_add(bias))
        .map(|a| a / HUGE * HUGE)
        .filter(|p| *p >= start && *p < end)
        .collect();
    pages.sort_unstable();
    pages.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for p in pages {
        add_page(&mut runs, p);
    }
    runs
}

/// Adds the 2 MiB page at `page` to `runs` (in address order): it extends
/// the last run when it follows it, else starts a new one.
fn add_page(runs: &mut Vec<(u64, u64)>, page: u64) {
    match runs.last_mut() {
        Some((_, end)) if *end == page => *end = page + HUGE,
        _ => runs.push((page, page + HUGE)),
    }
}

fn choose_kind(pages: u64) -> Result<HugeKind, String> {
    if hugetlb::available(HUGE as usize) >= pages {
        return Ok(HugeKind::Hugetlb);
    }
    let thp = thp::enabled_mode();
    if matches!(thp.as_deref(), Some("never") | None) {
        return Err("THP is never and no 2 MiB hugetlb pool has room".into());
    }
    if rawsys::prctl::thp_disabled().unwrap_or(false) {
        return Err("THP is disabled for this process (PR_SET_THP_DISABLE) and no 2 MiB hugetlb pool has room".into());
    }
    Ok(HugeKind::Thp)
}

/// Bytes on huge pages in `[start, end)`, from the kernel.
fn huge_bytes_now(start: u64, end: u64, kind: HugeKind) -> u64 {
    let hugetlb = (kind == HugeKind::Hugetlb).then_some(HUGE as usize);
    crate::region::granted_for(start as usize, (end - start) as usize, hugetlb)
        .map(|g| g.hugetlb_2m_bytes + g.thp_bytes)
        .unwrap_or(0)
}

/// Moves the executable's text (and `options.libs`) onto huge pages. Call it
/// before starting other threads and from code outside the moved range (the
/// pagewise library itself is never moved). Never fails: everything that did
/// not happen is in the report with its reason.
///
/// Cost: the copy of the moved bytes; reads `/proc/self/maps`, a few `/sys`
/// files and 4 KiB of `/proc/self/pagemap` per 2 MiB moved; no file of the
/// program, no symbols. With `options.perf_map` it then reads the moved
/// objects' symbol tables to write the perf map.
pub fn remap_text(options: &HugeTextOptions) -> RunReport {
    let objects = dl::loaded_objects();
    let threads = threads_running();
    let maps = proc_maps::read(None).unwrap_or_default();
    let mut report = RunReport::empty(std::process::id(), exe_path());
    report.libs_not_found = libs_not_found(&objects, &options.libs);
    let mut all_named = true;
    for (index, object) in objects.iter().enumerate() {
        let path = object_path(object);
        let name = file_name(&path).to_owned();
        if !is_chosen(&name, index == 0, &options.libs) {
            continue;
        }
        // The C library and the loader run the move itself (memcpy, mprotect, mremap).
        let runs_the_move = ["libc.so", "libc-", "ld-linux", "ld64.so"]
            .iter()
            .any(|p| name.starts_with(p));
        let hot = options.hot_pages.as_ref().map(|hot| {
            hot.iter()
                .filter(|h| h.object == name || (index == 0 && h.object.is_empty()))
                .flat_map(|h| h.addresses.iter().copied())
                .collect::<Vec<u64>>()
        });
        // When moving everything, a library's pages that hold no code worth
        // moving (code its toolchain marked cold, such as BOLT's original text, or
        // data the linker put in the executable segment) stay where they are. The
        // executable's file is not read here, so its text moves whole.
        let (sections, sections_note) = match (index, &hot) {
            (0, _) | (_, Some(_)) => (Vec::new(), None),
            _ => match function_table::loaded_sections(Path::new(&path)) {
                Ok(sections) => (sections, None),
                Err(e) => (
                    Vec::new(),
                    Some(format!("sections not known ({e}): moved whole")),
                ),
            },
        };
        for segment in text_segments(object) {
            let (start, end) = (segment.aligned_start, segment.aligned_end);
            let range = RangeReport::considered(&path, object.bias, start, end);
            let refusal = refusal(runs_the_move, threads);
            match candidate_runs(&range, segment.memsz, refusal, object.bias, hot.as_deref()) {
                // Skipped whole: the segment's own range (its aligned
                // interior may be empty, which says nothing).
                Err(why) => report.ranges.push(RangeReport {
                    start: segment.start,
                    end: segment.end,
                    skipped: Some(why),
                    ..range
                }),
                Ok(runs) => {
                    let (runs, left) = worth_moving(&runs, &sections, object.bias);
                    for (run_start, run_end, why) in left {
                        report.ranges.push(RangeReport {
                            start: run_start,
                            end: run_end,
                            skipped: Some(why),
                            ..range.clone()
                        });
                    }
                    for (run_start, run_end) in runs {
                        let run = RangeReport {
                            start: run_start,
                            end: run_end,
                            note: sections_note.clone(),
                            ..range.clone()
                        };
                        let moved = move_run(run, &name, &maps, options.fail_at, &mut all_named);
                        report.ranges.push(moved);
                    }
                }
            }
        }
    }
    report.vma_named = report.moved_bytes() > 0 && all_named;
    if options.perf_map {
        PerfMaps::new(PerfMapWriter::in_tmp()).publish(&mut report);
    }
    report
}

/// The names in `libs` that no library among `objects` (the executable,
/// first, left out) matches by file-name prefix, as [`is_chosen`] matches.
fn libs_not_found(objects: &[LoadedObject], libs: &[String]) -> Vec<String> {
    libs.iter()
        .filter(|lib| {
            !objects
                .iter()
                .skip(1)
                .any(|o| file_name(&o.name).starts_with(lib.as_str()))
        })
        .cloned()
        .collect()
}

/// Whether the object named `name` (a file name) is one whose text the move
/// considers: a program's own executable (`main`), or a library whose name
/// starts with one of `libs`; never the preload library itself.
pub fn is_chosen(name: &str, main: bool, libs: &[String]) -> bool {
    (main || libs.iter().any(|l| name.starts_with(l.as_str())))
        && !name.starts_with("libpagewise_preload")
}

/// Why no text of this object may move now, if none may.
fn refusal(runs_the_move: bool, threads: Option<usize>) -> Option<String> {
    match threads {
        _ if runs_the_move => {
            Some("the C library and the dynamic loader run the move itself".to_owned())
        }
        None => Some("cannot count this process's threads (/proc/self/task)".to_owned()),
        Some(n) if n > 1 => Some(format!(
            "{n} threads already run; text is only moved while there is one"
        )),
        Some(_) => None,
    }
}

/// The runs of `range` to move: all of it (around the moving code), or with a
/// profile only its hot 2 MiB pages; else why nothing of it moves.
fn candidate_runs(
    range: &RangeReport,
    memsz: u64,
    refusal: Option<String>,
    bias: u64,
    hot: Option<&[u64]>,
) -> Result<Vec<(u64, u64)>, String> {
    let (start, end) = (range.start, range.end);
    // A refusal first: it holds whatever the size (the C library is
    // refused, not "too small").
    if let Some(why) = refusal {
        return Err(why);
    }
    if end - start < HUGE {
        return Err(format!(
            "the 2 MiB-aligned part of its {} KiB of text is under 2 MiB",
            memsz.div_ceil(1024)
        ));
    }
    let Some(hot) = hot else {
        return Ok(around_mover(start, end));
    };
    let runs: Vec<(u64, u64)> = hot_runs(start, end, bias, hot)
        .into_iter()
        .flat_map(|(a, b)| around_mover(a, b))
        .collect();
    if runs.is_empty() {
        return Err("the profile has no hot code in this range".into());
    }
    Ok(runs)
}

/// Moves one run onto huge pages and names it (`all_named` turns false when
/// the name is refused); the returned report says what happened or why not.
fn move_run(
    mut r: RangeReport,
    name: &str,
    maps: &[MapsEntry],
    fail_at: Option<MoveStep>,
    all_named: &mut bool,
) -> RangeReport {
    let (start, end) = (r.start, r.end);
    if let Some(why) = unmovable(start, end, maps) {
        r.skipped = Some(why);
        return r;
    }
    let kind = match choose_kind((end - start) / HUGE) {
        Ok(kind) => kind,
        Err(why) => {
            r.skipped = Some(why);
            return r;
        }
    };
    let began = std::time::Instant::now();
    let moved = text::move_to_huge(start as usize, (end - start) as usize, kind, fail_at);
    r.move_micros = Some(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
    let stats = match moved {
        Ok(stats) => stats,
        Err(e) => {
            r.skipped = Some(move_failure(&e));
            return r;
        }
    };
    r.page_kind = Some(
        match kind {
            HugeKind::Hugetlb => "hugetlb",
            HugeKind::Thp => "thp",
        }
        .to_owned(),
    );
    r.huge_bytes = huge_bytes_now(start, end, kind);
    if stats.pagemap_unreadable {
        r.note = Some(
            "/proc/self/pagemap is unreadable, so the original pages the copy read \
             stayed mapped until the remap (peak RSS up to twice the moved bytes)"
                .into(),
        );
    }
    let label = format!("pagewise-text:{name}");
    if rawsys::prctl::set_vma_anon_name(start as usize, (end - start) as usize, &label).is_err() {
        *all_named = false;
    }
    r
}

/// Why a move failed, in words; the original text stays in place.
fn move_failure(e: &text::MoveError) -> String {
    match (e.step, e.error.errno()) {
        (MoveStep::Protect, Some(Errno::ACCES) | Some(Errno::PERM)) => format!(
            "a W^X policy refused making the copy executable ({})",
            e.error
        ),
        _ => format!(
            "the {} step failed: {}; the original text stays",
            e.step.name(),
            e.error
        ),
    }
}

/// What [`PerfMaps::prepare`] makes of a report: `None` when nothing moved,
/// else the map's text and notes on what could not be cached, or why there is
/// no map.
pub type PreparedMap = Option<Result<(String, Vec<String>), String>>;

/// Writes the perf maps of moved code from [`RunReport`]s: the symbols of
/// each moved range (from its object's symbol table) at their runtime
/// addresses, in `/tmp/perf-PID.map`, replacing a map this writer wrote
/// earlier for the same pid (a process that ran `exec`) and nothing else.
/// What it costs (per report, one pass over each moved object's symbol and
/// string tables, and the map's text) is paid by whoever calls it: the
/// `pagewise run` parent, never the moved program before `main`.
#[derive(Debug)]
pub struct PerfMaps {
    writer: PerfMapWriter,
}

impl PerfMaps {
    /// Maps written with `writer`.
    pub fn new(writer: PerfMapWriter) -> Self {
        PerfMaps { writer }
    }

    /// Writes (or replaces, or removes when nothing moved) the perf map of the
    /// process `report` describes and records the outcome in its `perf_map`
    /// and `perf_map_note`. A report that moved nothing after one of the same
    /// pid that did (an `exec`) removes the earlier map, which no longer fits.
    pub fn publish(&mut self, report: &mut RunReport) {
        let text = PerfMaps::prepare(report);
        self.write_prepared(report, text);
    }

    /// The costly half of [`PerfMaps::publish`], which needs no writer and
    /// may run on any thread: the map's text (one pass over each moved
    /// object's symbol and string tables), or why there is none; `None` when
    /// nothing moved.
    pub fn prepare(report: &RunReport) -> PreparedMap {
        (report.moved_bytes() > 0).then(|| moved_symbols_text(report))
    }

    /// The cheap half of [`PerfMaps::publish`]: writes (or removes) the map
    /// from what [`PerfMaps::prepare`] gave for `report`, and records the outcome.
    pub fn write_prepared(&mut self, report: &mut RunReport, prepared: PreparedMap) {
        report.perf_map = None;
        report.perf_map_note = None;
        let text = match prepared {
            None => {
                if let Err(e) = self.writer.remove(report.pid) {
                    report.perf_map_note = Some(e.to_string());
                }
                return;
            }
            Some(Err(e)) => {
                report.perf_map_note = Some(e);
                return;
            }
            Some(Ok((text, notes))) => {
                if !notes.is_empty() {
                    report.perf_map_note = Some(notes.join("; "));
                }
                text
            }
        };
        let path = self.writer.path(report.pid);
        match self.writer.write_text(report.pid, &text) {
            Ok(()) => report.perf_map = Some(path.display().to_string()),
            Err(e) => {
                report.perf_map_note = Some(format!("{}: {e} (not overwritten)", path.display()))
            }
        }
    }
}

/// The perf map text of the functions overlapping the moved ranges of
/// `report`, at runtime addresses, and notes on what could not be cached.
/// Each object's functions come from [`moved_symbols`] (cached per user),
/// moved by the object's load bias.
fn moved_symbols_text(report: &RunReport) -> Result<(String, Vec<String>), String> {
    let mut by_object: HashMap<&str, Vec<&RangeReport>> = HashMap::new();
    for r in report.ranges.iter().filter(|r| r.page_kind.is_some()) {
        by_object.entry(r.object.as_str()).or_default().push(r);
    }
    let (mut text, mut notes) = (String::new(), Vec::new());
    for (object, ranges) in by_object {
        let bias = ranges[0].bias;
        let link_time: Vec<(u64, u64)> = ranges
            .iter()
            .map(|r| (r.start.wrapping_sub(r.bias), r.end.wrapping_sub(r.bias)))
            .collect();
        let (lines, not_cached) = moved_symbols(
            object,
            &link_time,
            user_cache::directory(Purpose::Write).map(|c| c.path),
        )?;
        perfmap::rebase_into(&mut text, &lines, bias);
        if let Some(why) = not_cached {
            notes.push(format!("{object}'s functions not cached: {why}"));
        }
    }
    Ok((text, notes))
}

/// Removes from `dir` the cached lists of moved symbols other than `keep`
/// (the one just written) that can never be used again: those whose object
/// file is gone or has changed since (another build or version of it, by
/// path, device, inode, size and modification time); then, beyond
/// [`MAX_MOVED_SYMBOL_LISTS`], the least recently used. Only files named as
/// this cache names them are looked at ([`is_moved_symbols_name`]), and only
/// their first line is read (the key); one whose first line is not such a
/// key is left to the bound. Best effort ([`user_cache::prune`]): one
/// directory read, and per list an `lstat`, an `open`, a read of at most
/// [`MOVED_SYMBOLS_KEY_LIMIT`] bytes and a `stat` of its object.
fn remove_stale_symbols(dir: &Path, keep: &str, max_lists: usize) -> Vec<PathBuf> {
    let gone = |f: &user_cache::CacheFile| {
        let Ok(Some((line, _))) =
            user_cache::read_first_line(dir, &f.name, MOVED_SYMBOLS_KEY_LIMIT)
        else {
            return false;
        };
        line.strip_prefix(MOVED_SYMBOLS_HEADER)
            .and_then(|key| serde_json::from_str::<FileStamp>(key).ok())
            .is_some_and(|stamp| !stamp.still_holds())
    };
    user_cache::prune(dir, is_moved_symbols_name, keep, max_lists, gone)
}

/// The cache file name of the list of `object`'s functions under `key` (its
/// stamp): `functions-<object's hash>-<key's hash>.json`.
fn moved_symbols_name(object: &str, key: &str) -> String {
    let object_prefix = user_cache::file_name("functions", object);
    user_cache::file_name(object_prefix.trim_end_matches(".json"), key)
}

/// Whether `name` is a cached list of moved symbols: `functions-<16 hex
/// digits>-<16 hex digits>.json` (the object's hash, then its build's; see
/// [`moved_symbols_name`]).
fn is_moved_symbols_name(name: &str) -> bool {
    name.strip_prefix("functions-")
        .and_then(|rest| rest.strip_suffix(".json"))
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(object, build)| user_cache::is_hash(object) && user_cache::is_hash(build))
}

/// The most cached lists of moved symbols kept (one per build of each object
/// moved: a program and its libraries make several); beyond it, writing a new
/// one removes the least recently used.
const MAX_MOVED_SYMBOL_LISTS: usize = 64;

/// The longest first line (header and key) read when looking for stale lists:
/// the key is a path of at most `PATH_MAX` bytes, escaped, and four numbers.
const MOVED_SYMBOLS_KEY_LIMIT: u64 = 32 << 10;

/// The first line of a cached list of moved symbols, before its key.
const MOVED_SYMBOLS_HEADER: &str = "# pagewise moved-symbols 1 ";

/// The largest cached list read (a perf map line per function).
const MOVED_SYMBOLS_LIMIT: u64 = 256 << 20;

/// The perf map lines, at link-time addresses, of the functions of `object`
/// that overlap the link-time `ranges`. All of the object's functions are
/// cached in `dir` per build of the file (path, device, inode, size,
/// modification time), whatever the ranges, since a library's load bias, and
/// so the link-time span of its 2 MiB-aligned ranges, changes from run to
/// run: a later run reads the list and keeps the lines in its ranges. Without
/// a usable entry, one pass over the object's symbol and string tables makes
/// it, and writing it removes the lists that can never be used again
/// ([`remove_stale_symbols`]). Returns the lines and, when the list could not
/// be cached, why.
fn moved_symbols(
    object: &str,
    ranges: &[(u64, u64)],
    dir: Result<PathBuf, UserCacheError>,
) -> Result<(String, Option<String>), String> {
    let key = serde_json::to_string(&FileStamp::of(object)).map_err(|e| e.to_string())?;
    let header = format!("{MOVED_SYMBOLS_HEADER}{key}\n");
    let name = moved_symbols_name(object, &key);
    let in_ranges = |lines: &str| {
        let mut kept = String::new();
        for (start, size, name) in lines.lines().filter_map(perfmap::line_fields) {
            let end = start.saturating_add(size);
            if ranges.iter().any(|(a, b)| start < *b && end > *a) {
                perfmap::push_line(&mut kept, start, size, name);
            }
        }
        kept
    };
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => return Ok((in_ranges(&all_functions(object)?), Some(e.to_string()))),
    };
    if let Ok(Some((text, path))) = user_cache::read(&dir, &name, MOVED_SYMBOLS_LIMIT) {
        match text.strip_prefix(&header) {
            Some(lines) => {
                // The mark pruning goes by: lists in use are the last removed.
                user_cache::mark_used(&path);
                return Ok((in_ranges(lines), None));
            }
            // Damaged (or, with a vanishingly small chance, another key's): made again.
            None => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let lines = all_functions(object)?;
    // Another process may be writing the same entry: the first complete one stays.
    let not_cached = user_cache::write_once(&dir, &name, format!("{header}{lines}").as_bytes())
        .err()
        .map(|e| e.to_string());
    // Even when this one could not be written: room is what it may have lacked.
    remove_stale_symbols(&dir, &name, MAX_MOVED_SYMBOL_LISTS);
    Ok((in_ranges(&lines), not_cached))
}

/// Every function of `object` as perf map lines at link-time addresses, in
/// address order: one pass over its symbol and string tables.
fn all_functions(object: &str) -> Result<String, String> {
    let mut functions: Vec<(u64, u64, String)> = Vec::new();
    function_table::visit_functions(Path::new(object), |vaddr, size, name| {
        functions.push((vaddr, size, name.to_owned()));
    })
    .map_err(|e| e.to_string())?;
    functions.sort_unstable();
    functions.dedup_by_key(|f| f.0);
    let mut lines = String::new();
    for (vaddr, size, name) in &functions {
        perfmap::push_line(&mut lines, *vaddr, *size, name);
    }
    Ok(lines)
}

/// Prints `lines` on stderr with one `write`, so they never interleave with
/// what other processes sharing the stream (the program, its children) write.
pub fn eprint_lines(lines: &[String]) {
    use std::io::Write;
    let mut text = lines.join("\n");
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// What the summary says of a `--huge-text-lib` name that matched no library.
pub const LIB_NOT_FOUND: &str =
    "no such library in this process (at start-up; one opened later is never moved)";

/// The line saying that huge text was not applied in `report`'s process and
/// why, if it was not: printed whether or not `--report` was asked for, as
/// every fallback is.
pub fn not_applied_line(report: &RunReport) -> Option<String> {
    report.not_applied.as_ref().map(|why| {
        format!(
            "pagewise[{}] {}: huge text not applied: {why}",
            report.pid,
            file_name(&report.program)
        )
    })
}

/// A one-line-per-range summary for humans (`--report`).
pub fn summary(report: &RunReport) -> Vec<String> {
    let mut lines = Vec::new();
    let program = file_name(&report.program);
    for r in &report.ranges {
        let object = file_name(&r.object);
        let what = match (&r.page_kind, &r.skipped) {
            (Some(kind), _) => format!(
                "moved {} MiB onto {kind} pages{}, {} MiB huge per smaps",
                (r.end - r.start) >> 20,
                r.move_micros
                    .map(|us| format!(" in {:.1} ms", us as f64 / 1000.0))
                    .unwrap_or_default(),
                r.huge_bytes >> 20
            ),
            (None, Some(why)) => format!("skipped: {why}"),
            (None, None) => "not moved".into(),
        };
        lines.push(format!(
            "pagewise[{}] {program}: {object} {:#x}-{:#x}: {what}",
            report.pid, r.start, r.end
        ));
    }
    if let Some(line) = not_applied_line(report) {
        lines.push(line);
    } else if report.ranges.is_empty() {
        lines.push(format!(
            "pagewise[{}] {program}: no executable text to consider",
            report.pid
        ));
    }
    for lib in &report.libs_not_found {
        lines.push(format!(
            "pagewise[{}] {program}: --huge-text-lib {lib}: {LIB_NOT_FOUND}",
            report.pid
        ));
    }
    lines.extend(perf_map_lines(report));
    lines
}

/// The lines of [`summary`] about `report`'s perf map: the map written, why
/// none was, why it is gone.
pub fn perf_map_lines(report: &RunReport) -> Vec<String> {
    let (pid, program) = (report.pid, file_name(&report.program));
    let mut lines = Vec::new();
    if let Some(map) = &report.perf_map {
        lines.push(format!("pagewise[{pid}] {program}: perf map {map}"));
    }
    if let Some(note) = &report.perf_map_note {
        lines.push(format!("pagewise[{pid}] {program}: perf map: {note}"));
    }
    if let Some(removed) = &report.perf_map_removed {
        lines.push(format!("pagewise[{pid}] {program}: perf map {removed}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_library_is_refused_whatever_its_size() {
        const M: u64 = 1 << 20;
        let range = |start: u64, end: u64| RangeReport::considered("libc.so.6", 0, start, end);
        let refused = refusal(true, Some(1));
        // Under 2 MiB: still "refused", not "too small".
        let why = candidate_runs(&range(0, 0), 1400 * 1024, refused.clone(), 0, None);
        assert_eq!(
            why,
            Err("the C library and the dynamic loader run the move itself".into())
        );
        let why = candidate_runs(&range(2 * M, 6 * M), 4 * M, refused, 0, None);
        assert!(why.unwrap_err().contains("run the move itself"));
        // Not refused and under 2 MiB: too small.
        let why = candidate_runs(&range(0, 0), 1400 * 1024, None, 0, None);
        assert!(why.unwrap_err().contains("under 2 MiB"));
    }

    #[test]
    fn only_pages_holding_ordinary_code_are_worth_moving() {
        const M: u64 = 1 << 20;
        let section = |name: &str, vaddr: u64, size: u64, kind: SectionKind| LoadedSection {
            name: name.into(),
            vaddr,
            size,
            kind,
        };
        let sections = [
            section(".bolt.org.text", 2 * M, 9 * M, SectionKind::ColdCode),
            section(".text", 11 * M, 6 * M, SectionKind::Code),
            section(".text.cold", 17 * M, 5 * M, SectionKind::ColdCode),
            section(".eh_frame", 22 * M, 4 * M, SectionKind::Data),
        ];
        // Link-time 2-28 MiB at a bias of 0x1000_0000.
        let bias = 0x1000_0000;
        let (moved, left) = worth_moving(&[(bias + 2 * M, bias + 28 * M)], &sections, bias);
        // 10-12 and 16-18 hold some .text: moved with it.
        assert_eq!(moved, [(bias + 10 * M, bias + 18 * M)]);
        let left: Vec<(u64, u64, &str)> = left
            .iter()
            .map(|(a, b, w)| (a - bias, b - bias, w.as_str()))
            .collect();
        assert_eq!(left.len(), 4, "{left:#?}");
        assert_eq!((left[0].0, left[0].1), (2 * M, 10 * M));
        assert!(
            left[0].2.contains("found cold (.bolt.org.text)"),
            "{}",
            left[0].2
        );
        assert!(left[1].2.contains("found cold (.text.cold)") && !left[1].2.contains("data"));
        // 20-22 holds the end of .text.cold and (from 22) nothing else; 22-26 data.
        assert_eq!((left[2].0, left[2].1), (22 * M, 26 * M));
        assert!(
            left[2].2.contains("data, not code (.eh_frame)"),
            "{}",
            left[2].2
        );
        assert_eq!((left[3].0, left[3].1), (26 * M, 28 * M));
        assert!(left[3].2.contains("padding"), "{}", left[3].2);
        // No sections known: everything moves.
        let (all, none) = worth_moving(&[(2 * M, 6 * M)], &[], 0);
        assert_eq!((all, none.len()), (vec![(2 * M, 6 * M)], 0));
    }

    #[test]
    fn an_objects_functions_are_cached_per_build_and_filtered_by_the_ranges() {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let table = function_table::FunctionTable::read(Path::new(exe)).unwrap();
        let f = &table.functions()[table.functions().len() / 2];
        let ranges = [(f.vaddr, f.vaddr + f.size)];
        let cache = tempfile::tempdir().unwrap();
        let cache_dir = cache.path().join("pagewise");
        let dir = || Ok(cache_dir.clone());
        let (first, not_cached) = moved_symbols(exe, &ranges, dir()).unwrap();
        assert_eq!(not_cached, None);
        assert!(first.starts_with(&format!("{:x} ", f.vaddr)), "{first}");
        assert!(first.contains(&f.name));
        assert!(
            first.lines().count() < 10,
            "only the functions in the range: {first}"
        );
        let files = || crate::sys::file::names_in(&cache_dir);
        assert_eq!(files().len(), 1, "saved");
        // Planted content under the same key is what later calls read: proof
        // that they use the cache, with any ranges (a library's load bias moves
        // its link-time ranges from run to run).
        let entry = cache_dir.join(&files()[0]);
        let text = std::fs::read_to_string(&entry).unwrap();
        let header = text.lines().next().unwrap();
        std::fs::write(
            &entry,
            format!("{header}\n10 4 marker_a\n9000 8 marker_b\n"),
        )
        .unwrap();
        let (cached, _) = moved_symbols(exe, &[(0, 0x20)], dir()).unwrap();
        assert_eq!(cached, "10 4 marker_a\n");
        let (cached, _) = moved_symbols(exe, &[(0x9004, 0x9005)], dir()).unwrap();
        assert_eq!(cached, "9000 8 marker_b\n");
        assert_eq!(files().len(), 1);
        // A damaged entry is made again.
        std::fs::write(&entry, "# something else\n").unwrap();
        let (again, _) = moved_symbols(exe, &ranges, dir()).unwrap();
        assert_eq!(again, first);
        // An entry for an older build of the object (another stamp) is removed
        // when a new entry is written; entries of other objects stay.
        let stale_stamp = format!("{{\"path\":{exe:?},\"identity\":[1,2,3,4]}}");
        let prefix = user_cache::file_name("functions", exe);
        let stale_name = format!("{}-0000000000000000.json", prefix.trim_end_matches(".json"));
        std::fs::write(
            cache_dir.join(&stale_name),
            format!("{MOVED_SYMBOLS_HEADER}{stale_stamp}\n10 4 old\n"),
        )
        .unwrap();
        std::fs::write(cache_dir.join("other.json"), "x").unwrap();
        std::fs::remove_file(&entry).unwrap();
        moved_symbols(exe, &ranges, dir()).unwrap();
        let names = files();
        assert!(!names.contains(&stale_name), "{names:?}");
        assert!(names.contains(&"other.json".to_owned()), "{names:?}");
        assert_eq!(names.len(), 2, "{names:?}");
        // No cache: the lines still come, with the reason they were not cached.
        let (lines, why) = moved_symbols(
            exe,
            &ranges,
            Err(UserCacheError::NoUsableDirectory(vec!["/x: denied".into()])),
        )
        .unwrap();
        assert_eq!(lines, first);
        assert!(why
            .unwrap()
            .contains("no usable cache directory: /x: denied"));
        // Rebased by the load bias.
        let mut text = String::new();
        perfmap::rebase_into(&mut text, "10 4 marker_a\n", 0x1000);
        assert_eq!(text, "1010 4 marker_a\n");
    }

    /// Writing a list removes the lists of objects that are gone or have
    /// changed, whatever object they are for, and only files of this cache
    /// (a link named like one is neither followed nor removed); beyond the
    /// bound, the least recently used go. Before, only the written object's
    /// own older lists were removed: those of deleted or rebuilt programs
    /// stayed for ever.
    #[test]
    fn writing_a_list_prunes_lists_of_objects_gone_or_changed() {
        use std::os::unix::fs::PermissionsExt;
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let root = tempfile::tempdir().unwrap();
        let cache_dir = root.path().join("pagewise");
        user_cache::prepare(&cache_dir).unwrap();
        let object = |name: &str| {
            let path = root.path().join(name);
            std::fs::write(&path, name).unwrap();
            path.to_str().unwrap().to_owned()
        };
        // A list as moved_symbols writes it, for `object` as it is now.
        let plant = |object: &str| {
            let key = serde_json::to_string(&FileStamp::of(object)).unwrap();
            let name = moved_symbols_name(object, &key);
            let path = cache_dir.join(&name);
            std::fs::write(&path, format!("{MOVED_SYMBOLS_HEADER}{key}\n10 4 f\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            name
        };
        let (gone, changed, same) = (object("gone"), object("changed"), object("same"));
        let gone_list = plant(&gone);
        let changed_list = plant(&changed);
        let same_list = plant(&same);
        std::fs::remove_file(&gone).unwrap();
        std::fs::write(&changed, "rebuilt, longer").unwrap();
        // Not lists of this cache, or not readable as one: left as they are.
        let damaged = "functions-0123456789abcdef-0123456789abcdef.json";
        std::fs::write(cache_dir.join(damaged), "# something else\n").unwrap();
        let outside = root.path().join("outside");
        let gone_key = format!("{{\"path\":{gone:?},\"identity\":[1,2,3,4]}}");
        std::fs::write(&outside, format!("{MOVED_SYMBOLS_HEADER}{gone_key}\n")).unwrap();
        let link = "functions-fedcba9876543210-fedcba9876543210.json";
        std::os::unix::fs::symlink(&outside, cache_dir.join(link)).unwrap();
        let unrelated = ["functions-x.json", "hot-pages-0123456789abcdef.json"];
        for name in unrelated {
            let path = cache_dir.join(name);
            std::fs::write(&path, format!("{MOVED_SYMBOLS_HEADER}{gone_key}\n")).unwrap();
        }
        let names = || crate::sys::file::names_in(&cache_dir);
        assert_eq!(names().len(), 7);

        moved_symbols(exe, &[(0, 1)], Ok(cache_dir.clone())).unwrap();
        let after = names();
        assert!(!after.contains(&gone_list), "{after:?}");
        assert!(!after.contains(&changed_list), "{after:?}");
        for kept in [&same_list, damaged, link, unrelated[0], unrelated[1]] {
            assert!(after.iter().any(|n| n == kept), "{kept} removed: {after:?}");
        }
        assert_eq!(after.len(), 6, "{after:?}");
        assert!(std::fs::read_to_string(&outside).unwrap().contains(&gone));
        let exe_key = serde_json::to_string(&FileStamp::of(exe)).unwrap();
        let exe_list = moved_symbols_name(exe, &exe_key);
        assert!(after.contains(&exe_list), "{after:?}");

        // Reading a list marks it used.
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let age = |name: &str| {
            std::fs::metadata(cache_dir.join(name))
                .unwrap()
                .modified()
                .unwrap()
        };
        for name in [&same_list, &exe_list] {
            let f = std::fs::File::open(cache_dir.join(name)).unwrap();
            f.set_modified(long_ago).unwrap();
        }
        moved_symbols(exe, &[(0, 1)], Ok(cache_dir.clone())).unwrap();
        assert!(age(&exe_list) > long_ago);
        assert_eq!(age(&same_list), long_ago);

        // A bound of 2 lists: the one kept and the most recently used other
        // (the damaged one, written after `same` was last used) stay.
        let removed = remove_stale_symbols(&cache_dir, &exe_list, 2);
        assert_eq!(removed, [cache_dir.join(&same_list)]);
        let after = names();
        assert!(after.contains(&exe_list) && after.iter().any(|n| n == damaged));
        assert_eq!(after.len(), 5, "{after:?}");
    }

    #[test]
    fn hot_runs_merge_adjacent_pages() {
        let start = 0x400000;
        let end = 0x1000000;
        let hot = [0x400010, 0x5fffff, 0x600000, 0xa00000, 0x2000000];
        assert_eq!(
            hot_runs(start, end, 0, &hot),
            vec![(0x400000, 0x800000), (0xa00000, 0xc00000)]
        );
        assert_eq!(
            hot_runs(start, end, 0x100000, &[0x300000]),
            vec![(0x400000, 0x600000)]
        );
        assert!(hot_runs(start, end, 0, &[]).is_empty());
    }

    fn entry(start: u64, end: u64, perms: &str, path: &str) -> MapsEntry {
        proc_maps::parse_line(&format!(
            "{start:x}-{end:x} {perms} 00000000 08:02 {} {path}",
            if path.is_empty() { 0 } else { 1234 }
        ))
        .expect("a valid maps line")
    }

    #[test]
    fn only_private_file_backed_text_is_movable() {
        let text = [entry(0x400000, 0x800000, "r-xp", "/bin/app")];
        assert_eq!(unmovable(0x400000, 0x800000, &text), None);
        let gap = [
            entry(0x400000, 0x500000, "r-xp", "/bin/app"),
            entry(0x600000, 0x800000, "r-xp", "/bin/app"),
        ];
        assert!(unmovable(0x400000, 0x800000, &gap)
            .unwrap()
            .contains("not mapped"));
        let writable = [entry(0x400000, 0x800000, "rwxp", "/bin/app")];
        assert!(unmovable(0x400000, 0x800000, &writable)
            .unwrap()
            .contains("not private file-backed"));
        let anon = [entry(0x400000, 0x800000, "r-xp", "")];
        assert!(unmovable(0x400000, 0x800000, &anon).is_some());
        assert!(unmovable(0x400000, 0x800000, &[])
            .unwrap()
            .contains("not mapped"));
        let mover = text::move_to_huge as *const () as u64 / HUGE * HUGE;
        let own = [entry(mover, mover + HUGE, "r-xp", "/bin/app")];
        assert!(unmovable(mover, mover + HUGE, &own)
            .unwrap()
            .contains("own moving code"));
    }

    #[test]
    fn runs_split_around_the_moving_code() {
        let mover = text::move_to_huge as *const () as u64 / HUGE * HUGE;
        assert_eq!(
            around_mover(mover - 2 * HUGE, mover + 3 * HUGE),
            vec![(mover - 2 * HUGE, mover), (mover + HUGE, mover + 3 * HUGE)]
        );
        assert_eq!(around_mover(mover, mover + HUGE), vec![]);
        assert_eq!(
            around_mover(mover + HUGE, mover + 2 * HUGE),
            vec![(mover + HUGE, mover + 2 * HUGE)]
        );
    }

    /// A segment skipped whole is reported with its own range, not with its
    /// 2 MiB-aligned interior, which for a small one is empty
    /// (`0xc00000-0xc00000: skipped: … under 2 MiB`).
    #[test]
    fn a_segment_skipped_whole_is_reported_with_its_own_range() {
        // This process runs test threads, so every segment of the executable is skipped whole.
        let report = remap_text(&HugeTextOptions::default());
        let exe = &dl::loaded_objects()[0];
        let segments = text_segments(exe);
        assert!(!segments.is_empty());
        for seg in segments {
            let r = report
                .ranges
                .iter()
                .find(|r| r.start == seg.start)
                .unwrap_or_else(|| panic!("no range at {:#x}: {:#?}", seg.start, report.ranges));
            assert_eq!(r.end, seg.end, "{r:?}");
            assert!(r.skipped.is_some() && r.end > r.start, "{r:?}");
            let line = format!("{:#x}-{:#x}: skipped: ", seg.start, seg.end);
            assert!(summary(&report).iter().any(|l| l.contains(&line)), "{line}");
        }
        // A segment with no whole 2 MiB page inside has an empty interior.
        let small = LoadedObject {
            name: "small".into(),
            bias: 0x40_0000,
            segments: vec![dl::Segment {
                vaddr: 0x80_1000,
                memsz: 0x2000,
                filesz: 0x2000,
                offset: 0x1000,
                executable: true,
                writable: false,
            }],
        };
        let seg = text_segments(&small)[0];
        assert_eq!((seg.start, seg.end), (0xc0_1000, 0xc0_3000));
        assert_eq!(seg.aligned_start, seg.aligned_end);
    }

    /// A `--huge-text-lib` name that matches no loaded library is said, in
    /// the report and its summary, instead of being ignored in silence.
    #[test]
    fn a_library_name_that_matches_nothing_is_reported() {
        let libs = ["libnonexistent".to_owned(), "libc.so".to_owned()];
        let report = remap_text(&HugeTextOptions {
            libs: libs.to_vec(),
            ..Default::default()
        });
        assert_eq!(report.libs_not_found, ["libnonexistent"]);
        let lines = summary(&report);
        let said = format!(": --huge-text-lib libnonexistent: {LIB_NOT_FOUND}");
        assert!(lines.iter().any(|l| l.ends_with(&said)), "{lines:#?}");
        assert!(
            !lines.iter().any(|l| l.contains("lib libc.so")),
            "{lines:#?}"
        );
        // The executable is no library: its name matches none.
        let objects = dl::loaded_objects();
        let exe = exe_path();
        let own_name = file_name(&exe).to_owned();
        assert_eq!(
            libs_not_found(&objects, std::slice::from_ref(&own_name)),
            [own_name]
        );
    }

    #[test]
    fn small_test_binary_is_skipped_with_a_reason() {
        // This test binary's text may or may not reach 2 MiB aligned; either way the
        // report must explain every range it did not move, and this process has
        // several test threads, so nothing may be moved.
        let report = remap_text(&HugeTextOptions::default());
        assert!(!report.ranges.is_empty());
        for r in &report.ranges {
            assert!(r.page_kind.is_none());
            assert!(r.skipped.is_some());
        }
    }
}
