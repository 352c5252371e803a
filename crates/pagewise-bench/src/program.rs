//! `bench run`: a user's own command, with and without fixes, in paired runs.
//!
//! The command runs as given (the baseline), under each fix (`huge-text`,
//! `huge-text=hot:PROFILE`, `keep-heap`, or several joined with `+`), and
//! with each argument variant (extra arguments after the program name, such
//! as node's own `--use-largepages=on`). Every block runs each variant once,
//! in an order drawn afresh for the block (with one fix, a block is a pair in
//! random order), so drift and a neighbour's load fall on all variants alike
//! and no variant always runs first; the first block (or `warmup` blocks)
//! warms the page cache and is discarded. Each run is timed from `spawn` to
//! `wait4`, and `wait4`'s resource usage gives user and system time, minor
//! and major page faults and peak RSS (of the largest process in the run's
//! tree: a fix's `pagewise run` parent counts, as it would for the user).
//!
//! Each variant is then compared with the baseline (and the fixes with the
//! argument variants) pair by pair: the median of the per-block ratios and a
//! sign-test confidence interval for it ([`crate::paired`]), and a verdict
//! from the wall-time interval. The program's output goes nowhere; its
//! standard error is kept for the error message when a run's exit status
//! differs from the first baseline run's (a fix must not change what the
//! program does) or from an earlier run of the same variant (a program whose
//! status varies on its own cannot be timed).
//!
//! The experiment does not know the `pagewise` command line: the caller
//! passes a [`FixRunner`] that builds the command running a program under
//! fixes.

use crate::paired::{self, Interval, Verdict};
use crate::{Machine, Progress, Summary};
use pagewise::launch;
use pagewise::os::process::{self, ExitKind, ForwardSignals};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The JSON schema of a [`Report`].
pub const SCHEMA: &str = "pagewise.bench.run/1";

/// One fix `pagewise run` can apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "fix")]
pub enum Fix {
    /// Move the program's text (and the named libraries') onto huge pages.
    HugeText {
        /// Move only the pages hot in this profile (`huge-text=hot:PROFILE`).
        hot_profile: Option<PathBuf>,
        /// Shared libraries to move too (file name prefixes).
        libs: Vec<String>,
    },
    /// Keep freed memory in glibc's heap.
    KeepHeap,
    /// Put glibc's heap on transparent huge pages.
    ThpHeap,
}

impl Fix {
    /// Parses one variant's fixes: `huge-text`, `huge-text=hot:PROFILE`,
    /// `keep-heap`, `thp-heap`, or several joined with `+`
    /// (`huge-text+keep-heap`).
    /// Library names for huge text are added by the caller.
    pub fn parse_set(text: &str) -> Result<Vec<Fix>, String> {
        let mut fixes = Vec::new();
        for part in text.split('+') {
            let fix = match part {
                "huge-text" => Fix::HugeText {
                    hot_profile: None,
                    libs: Vec::new(),
                },
                "keep-heap" => Fix::KeepHeap,
                "thp-heap" => Fix::ThpHeap,
                other => match other.strip_prefix("huge-text=hot:") {
                    Some(profile) if !profile.is_empty() => Fix::HugeText {
                        hot_profile: Some(PathBuf::from(profile)),
                        libs: Vec::new(),
                    },
                    _ => {
                        return Err(format!(
                            "unknown fix {other:?}: expected huge-text, huge-text=hot:PROFILE, keep-heap or thp-heap (join several with +)"
                        ))
                    }
                },
            };
            if fixes
                .iter()
                .any(|f| std::mem::discriminant(f) == std::mem::discriminant(&fix))
            {
                return Err(format!("{text:?} names the same fix twice"));
            }
            fixes.push(fix);
        }
        Ok(fixes)
    }
}

/// What a variant runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum VariantKind {
    /// The command as given.
    Baseline,
    /// The command under these fixes.
    Fixes {
        /// The fixes, applied together.
        fixes: Vec<Fix>,
    },
    /// The command with these arguments inserted after the program name.
    Arguments {
        /// The inserted arguments.
        args: Vec<String>,
    },
}

/// One variant of the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Variant {
    /// Its name in the report (`baseline`, `huge-text`, a `--variant` name).
    pub name: String,
    /// What it runs.
    #[serde(flatten)]
    pub kind: VariantKind,
}

/// Builds the command that runs `argv` (program and arguments) under `fixes`,
/// writing `pagewise run`'s JSON report (`pagewise.run/1`) to the given file
/// when a fix makes one (huge text), and writing no perf map unless the
/// caller wants them. The caller owns the command line: the `pagewise`
/// command passes itself with `run --huge-text …`.
pub type FixRunner<'a> = &'a dyn Fn(&[Fix], &[OsString], &Path) -> Command;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// The variants; the first must be the baseline.
    pub variants: Vec<Variant>,
    /// Measured blocks (each runs every variant once).
    pub blocks: usize,
    /// Blocks run first and discarded.
    pub warmup: usize,
    /// Seed of the order inside blocks.
    pub seed: u64,
    /// Confidence level of the intervals (e.g. 0.95).
    pub confidence: f64,
    /// Where the runs' standard error and reports go.
    pub work_dir: PathBuf,
}

/// The six quantities measured for each run, or something per quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Metrics<T> {
    /// Wall seconds, spawn to exit.
    pub wall_s: T,
    /// User CPU seconds (the run's whole process tree).
    pub user_s: T,
    /// System CPU seconds.
    pub sys_s: T,
    /// Page faults served without I/O.
    pub minor_faults: T,
    /// Page faults that needed I/O.
    pub major_faults: T,
    /// Peak resident set of the largest process, bytes.
    pub max_rss_bytes: T,
}

impl<T> Metrics<T> {
    /// Applies `f` to each quantity, with its name.
    pub fn map<U>(&self, mut f: impl FnMut(&'static str, &T) -> U) -> Metrics<U> {
        Metrics {
            wall_s: f("wall_s", &self.wall_s),
            user_s: f("user_s", &self.user_s),
            sys_s: f("sys_s", &self.sys_s),
            minor_faults: f("minor_faults", &self.minor_faults),
            major_faults: f("major_faults", &self.major_faults),
            max_rss_bytes: f("max_rss_bytes", &self.max_rss_bytes),
        }
    }

    fn get(&self, name: &str) -> &T {
        match name {
            "wall_s" => &self.wall_s,
            "user_s" => &self.user_s,
            "sys_s" => &self.sys_s,
            "minor_faults" => &self.minor_faults,
            "major_faults" => &self.major_faults,
            _ => &self.max_rss_bytes,
        }
    }
}

/// One run of one variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    /// What was measured.
    #[serde(flatten)]
    pub metrics: Metrics<f64>,
    /// The exit status as a shell reports it (128+N for signal N).
    pub status: i32,
    /// Bytes of text moved onto huge pages (all processes), for huge-text fixes.
    pub moved_bytes: Option<u64>,
    /// Of those, the bytes on hugetlb pages (which RSS does not count).
    pub moved_hugetlb_bytes: Option<u64>,
}

/// One block: every variant once, in `order`.
#[derive(Debug, Clone, Serialize)]
pub struct Block {
    /// Variant names in the order they ran.
    pub order: Vec<String>,
    /// Whether the block was a discarded warm-up.
    pub warmup: bool,
    /// Runs, in the order of [`Report::variants`] (not the run order).
    pub runs: Vec<Run>,
}

/// A variant's min/median/max over the measured blocks.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    /// The variant.
    #[serde(flatten)]
    pub variant: Variant,
    /// The command line it ran (for fixes, the command the runner built).
    pub argv: Vec<String>,
    /// Median, min and max of each quantity.
    pub metrics: Metrics<Summary>,
    /// Median bytes moved onto huge pages, for huge-text fixes.
    pub moved_bytes: Option<u64>,
    /// Median bytes of those on hugetlb pages.
    pub moved_hugetlb_bytes: Option<u64>,
    /// Why text was not moved, when a huge-text fix moved nothing (from its report).
    pub not_moved: Vec<String>,
}

/// The peak-RSS bound of a huge-text fix: the bytes moved plus 2 MiB.
#[derive(Debug, Clone, Serialize)]
pub struct RssBound {
    /// Median bytes moved.
    pub moved_bytes: u64,
    /// Median bytes moved onto hugetlb pages: RSS does not count them, so
    /// for these the bound checks nothing (the copy's pages are the pool's).
    pub hugetlb_bytes: u64,
    /// The bound on the peak RSS increase: moved bytes + 2 MiB.
    pub bound_bytes: u64,
    /// Median per-pair increase of the peak RSS, with its interval.
    pub increase_bytes: Interval,
    /// Whether the median increase is within the bound.
    pub within: bool,
}

/// One variant against another, pair by pair.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The variant measured.
    pub variant: String,
    /// What it is compared with (`baseline`, or an argument variant).
    pub against: String,
    /// Median per-pair ratio `variant / against` of each quantity with its
    /// interval; `null` where `against` was 0 and `variant` was not, or
    /// where both were 0 in every pair (see [`paired::ratios`]).
    pub ratio: Metrics<Option<Interval>>,
    /// Median per-pair difference `variant − against` with its interval.
    pub difference: Metrics<Interval>,
    /// From the wall-time ratio's interval.
    pub verdict: Verdict,
    /// The verdict in a sentence.
    pub summary: String,
    /// For a huge-text fix against the baseline: peak RSS against its bound.
    pub rss_bound: Option<RssBound>,
}

/// The load averages at the start and end of the run (`/proc/loadavg`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Load {
    /// 1, 5 and 15 minute load averages when the first block started.
    pub start: Option<[f64; 3]>,
    /// The same when the last block ended.
    pub end: Option<[f64; 3]>,
}

impl Load {
    /// `/proc/loadavg` now; `None` when it cannot be read.
    pub fn now() -> Option<[f64; 3]> {
        parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
    }
}

impl Load {
    /// A warning when the 1-minute load average moved by more than one CPU's
    /// worth, or by half, between the start and the end: neighbours came or
    /// went while the runs were taken, so a rerun at a steadier moment is wiser.
    pub fn warning(&self) -> Option<String> {
        let (start, end) = (self.start?[0], self.end?[0]);
        let moved = (end - start).abs();
        (moved > 1.0 || moved > 0.5 * start.max(end).max(0.1)).then(|| {
            format!(
                "the load average moved from {start:.2} to {end:.2} during the runs: other work came or went; rerun when the machine is steadier"
            )
        })
    }
}

fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut words = text.split_whitespace().map(|w| w.parse::<f64>().ok());
    Some([words.next()??, words.next()??, words.next()??])
}

/// This process's own peak resident set (`VmHWM` in `/proc/self/status`).
/// A child started with `posix_spawn` (a `vfork`) or `fork` inherits it as
/// the floor of its `wait4` peak RSS (the kernel charges the address space
/// the child left at `exec`), so peaks at or below it are the harness's.
pub fn own_peak_rss() -> Option<u64> {
    parse_vm_hwm(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The command as given.
    pub command: Vec<String>,
    /// Measured blocks.
    pub blocks_measured: usize,
    /// Warm-up blocks discarded.
    pub warmup: usize,
    /// Seed of the order inside blocks.
    pub seed: u64,
    /// Confidence level asked for.
    pub confidence: f64,
    /// How the intervals are made.
    pub interval_method: &'static str,
    /// The machine.
    pub machine: Machine,
    /// Load averages while it ran.
    pub load: Load,
    /// [`Load::warning`]: the load moved while the runs were taken.
    pub load_warning: Option<String>,
    /// The exit status every run had.
    pub exit_status: i32,
    /// The harness's own peak RSS: `wait4` cannot see a run's peak below it
    /// (see [`own_peak_rss`]); `null` when it could not be read.
    pub rss_floor_bytes: Option<u64>,
    /// The variants, baseline first.
    pub variants: Vec<VariantResult>,
    /// Each non-baseline variant against the baseline, then each fix against
    /// each argument variant.
    pub comparisons: Vec<Comparison>,
    /// Every block, warm-ups first.
    pub blocks: Vec<Block>,
}

/// The interval method, as the report names it.
pub const INTERVAL_METHOD: &str =
    "sign-test interval (order statistics, exact binomial coverage) of the median per-pair value";

/// A xorshift generator: the order inside blocks comes from the seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A random order of `0..n` (Fisher–Yates).
fn shuffled(n: usize, state: &mut u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next(state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// The command line of a variant that does not go through the runner.
fn plain_argv(command: &[OsString], kind: &VariantKind) -> Vec<OsString> {
    let mut argv = vec![command[0].clone()];
    if let VariantKind::Arguments { args } = kind {
        argv.extend(args.iter().map(OsString::from));
    }
    argv.extend(command[1..].iter().cloned());
    argv
}

fn command_of(config: &Config, variant: &Variant, runner: FixRunner<'_>, report: &Path) -> Command {
    match &variant.kind {
        VariantKind::Fixes { fixes } => runner(fixes, &config.command, report),
        kind => {
            let argv = plain_argv(&config.command, kind);
            // A script without a `#!` line runs as `/bin/sh SCRIPT ARGS…`, as in
            // a shell (and under a fix's `pagewise run`); a program that is not
            // found is left for `spawn` to report.
            let argv = match launch::resolve_program(&argv[0]) {
                Ok(path) => launch::command_line(&path, &argv).1,
                Err(_) => argv,
            };
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    }
}

fn shown(command: &Command) -> Vec<String> {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The `PAGEWISE_REPORT` file of a `pagewise run --huge-text`: every process's report.
#[derive(Deserialize)]
struct RunReportFile {
    processes: Vec<pagewise::text::huge::RunReport>,
    /// Why the started program's fix was not applied, at the top level (set
    /// also when it sent no report of its own).
    #[serde(default)]
    not_applied: Option<String>,
}

/// Bytes moved (all processes), those of them on hugetlb pages, and the
/// reasons given for ranges not moved.
fn read_moved(report: &Path) -> Result<(u64, u64, Vec<String>), String> {
    let text = std::fs::read_to_string(report).map_err(|e| {
        format!(
            "the fix wrote no report ({}): {e} (did the preload library run in the program?)",
            report.display()
        )
    })?;
    let file: RunReportFile =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", report.display()))?;
    if let (true, Some(why)) = (file.processes.is_empty(), &file.not_applied) {
        return Err(format!("the fix did not apply to the program: it {why}"));
    }
    let moved = file.processes.iter().map(|p| p.moved_bytes()).sum();
    let hugetlb = file
        .processes
        .iter()
        .flat_map(|p| p.ranges.iter())
        .filter(|r| r.page_kind.as_deref() == Some("hugetlb"))
        .map(|r| r.end.saturating_sub(r.start))
        .sum();
    let mut skipped: Vec<String> = file
        .processes
        .iter()
        .flat_map(|p| p.ranges.iter())
        .filter_map(|r| r.skipped.clone())
        .chain(file.processes.iter().filter_map(|p| p.not_applied.clone()))
        .collect();
    skipped.sort();
    skipped.dedup();
    Ok((moved, hugetlb, skipped))
}

/// ` (its stderr: …)` with the last lines of a run's standard error, or
/// nothing when it wrote none. One read of the file.
fn stderr_note(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        " (its stderr: {})",
        lines[lines.len().saturating_sub(5)..].join(" | ")
    )
}

/// That a signal asking to stop came, as an error ending the experiment.
fn stopped(signal: i32) -> String {
    format!("stopped by {}", process::signal_name(signal))
}

/// Runs one variant once and measures it, passing the signals that
/// `signals` catches on to it; none runs once one of them asked to stop,
/// and a run during which one did is an error.
fn run_once(
    config: &Config,
    variant: &Variant,
    runner: FixRunner<'_>,
    signals: &ForwardSignals,
) -> Result<(Run, Vec<String>), String> {
    if let Some(signal) = signals.stop_requested() {
        return Err(stopped(signal));
    }
    let report = config.work_dir.join("run-report.json");
    let stderr_path = config.work_dir.join("stderr");
    let _ = std::fs::remove_file(&report);
    let stderr = std::fs::File::create(&stderr_path)
        .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
    let mut command = command_of(config, variant, runner, &report);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let started = Instant::now();
    let child = command.spawn().map_err(|e| {
        format!(
            "cannot start {} ({}): {e}",
            command.get_program().to_string_lossy(),
            variant.name
        )
    })?;
    signals.pass_to(child.id());
    let waited = process::wait(child.id() as i32);
    let wall_s = started.elapsed().as_secs_f64();
    // Reaped: its pid may be reused from now on.
    signals.pass_to(0);
    let (exit, usage) = waited.map_err(|e| format!("cannot wait for {}: {e}", variant.name))?;
    if let Some(signal) = signals.stop_requested() {
        return Err(stopped(signal));
    }
    let status = exit.shell_status();
    if let ExitKind::Signaled { signal, .. } = exit {
        return Err(format!(
            "{} was killed by signal {signal}{}",
            variant.name,
            stderr_note(&stderr_path)
        ));
    }
    let huge_text = matches!(&variant.kind, VariantKind::Fixes { fixes }
        if fixes.iter().any(|f| matches!(f, Fix::HugeText { .. })));
    let (moved_bytes, moved_hugetlb_bytes, not_moved) = if huge_text {
        let (moved, hugetlb, skipped) = read_moved(&report)
            .map_err(|e| format!("{}: {e}{}", variant.name, stderr_note(&stderr_path)))?;
        let skipped = if moved == 0 { skipped } else { Vec::new() };
        (Some(moved), Some(hugetlb), skipped)
    } else {
        (None, None, Vec::new())
    };
    let run = Run {
        metrics: Metrics {
            wall_s,
            user_s: usage.user.as_secs_f64(),
            sys_s: usage.sys.as_secs_f64(),
            minor_faults: usage.minor_faults as f64,
            major_faults: usage.major_faults as f64,
            max_rss_bytes: usage.max_rss_bytes as f64,
        },
        status,
        moved_bytes,
        moved_hugetlb_bytes,
    };
    Ok((run, not_moved))
}

fn check_variants(config: &Config) -> Result<(), String> {
    if config.command.is_empty() {
        return Err("no command to run".into());
    }
    match config.variants.first() {
        Some(v) if v.kind == VariantKind::Baseline => {}
        _ => return Err("the first variant must be the baseline".into()),
    }
    if config.variants.len() < 2 {
        return Err("nothing to compare: give a fix (--fix) or a variant (--variant)".into());
    }
    if config.variants[1..]
        .iter()
        .any(|v| v.kind == VariantKind::Baseline)
    {
        return Err("only the first variant may be the baseline".into());
    }
    if let Some(name) = repeated_name(&config.variants) {
        return Err(format!(
            "variant names must be unique and non-empty: {name:?}"
        ));
    }
    if config.blocks == 0 {
        return Err("at least one measured pair is needed".into());
    }
    if !(config.confidence > 0.0 && config.confidence < 1.0) {
        return Err("the confidence level must be between 0 and 1".into());
    }
    Ok(())
}

/// The first variant name that is empty or that an earlier variant has
/// already (`--fix keep-heap` twice, `--variant a= --variant a=-x`), if any:
/// [`run`] refuses such variants, and a caller can check them first. Costs
/// a comparison per pair of variants.
pub fn repeated_name(variants: &[Variant]) -> Option<&str> {
    variants.iter().enumerate().find_map(|(i, v)| {
        (v.name.is_empty() || variants[..i].iter().any(|w| w.name == v.name))
            .then_some(v.name.as_str())
    })
}

/// That the program's exit status varies between runs of one variant.
fn varies(config: &Config, i: usize, first: i32, now: i32) -> String {
    let who = match i {
        0 => "the baseline".to_owned(),
        _ => format!("the variant {}", config.variants[i].name),
    };
    format!(
        "the program's exit status varies between runs of {who} itself ({first}, then {now}): \
         its runs do not all do the same work, so their times cannot be compared{}",
        stderr_note(&config.work_dir.join("stderr"))
    )
}

/// Checks the exit status of a run of variant `i`, just made, against the
/// earlier runs: of the same variant (a program whose status varies on its
/// own cannot be timed), then of the baseline (a variant that changes the
/// status changes what the program does). Before a variant is blamed for a
/// status that differs from the baseline's, each runs [`STATUS_RERUNS`] more
/// times, so that a program whose status varies from run to run is named as
/// such. `statuses` holds each variant's first status.
fn check_status(
    config: &Config,
    runner: FixRunner<'_>,
    signals: &ForwardSignals,
    statuses: &mut [Option<i32>],
    i: usize,
    status: i32,
) -> Result<(), String> {
    match statuses[i] {
        Some(first) if first != status => return Err(varies(config, i, first, status)),
        Some(_) => {}
        None => statuses[i] = Some(status),
    }
    let Some(baseline) = statuses[0] else {
        return Ok(());
    };
    let Some(j) = (1..statuses.len()).find(|&j| statuses[j].is_some_and(|s| s != baseline)) else {
        return Ok(());
    };
    let variant = statuses[j].unwrap_or_default();
    for _ in 0..STATUS_RERUNS {
        for (k, first) in [(0, baseline), (j, variant)] {
            let (again, _) = run_once(config, &config.variants[k], runner, signals)?;
            if again.status != first {
                return Err(varies(config, k, first, again.status));
            }
        }
    }
    Err(format!(
        "{} exited with status {variant} in {runs} runs where the baseline exited with \
         {baseline} in {runs}: the variant changes what the program does, so its times mean \
         nothing{}",
        config.variants[j].name,
        stderr_note(&config.work_dir.join("stderr")),
        runs = STATUS_RERUNS + 1,
    ))
}

/// How many more times the baseline and a variant run, in turn, when their
/// exit statuses differ, before the variant is blamed: a program whose status
/// is a coin flip then shows it with probability 15/16.
const STATUS_RERUNS: usize = 2;

/// Why [`run`] gave no report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The experiment could not be run or its runs cannot be compared; says why.
    #[error("{0}")]
    Failed(String),
    /// A signal asked this process to stop (`SIGTERM`, `SIGHUP`, `SIGINT`,
    /// `SIGQUIT`): the running command got it too and ended, and no more ran.
    #[error("stopped by {} before the runs were done (a run under way got the signal too and has ended); no report", process::signal_name(*signal))]
    Stopped {
        /// The signal's number.
        signal: i32,
    },
}

impl RunError {
    /// The exit status a shell would give: 128+N for a stop by signal N, else 1.
    pub fn exit_status(&self) -> u8 {
        match self {
            RunError::Failed(_) => 1,
            RunError::Stopped { signal } => (128 + signal).clamp(0, 255) as u8,
        }
    }
}

/// Runs the experiment: `warmup` blocks, then `blocks` measured ones.
///
/// Meanwhile `SIGTERM`, `SIGHUP`, `SIGINT` and `SIGQUIT` sent to this
/// process go to the running command ([`ForwardSignals`]; the terminal's
/// Ctrl-C reaches it anyway) and, once it has ended, stop the experiment
/// ([`RunError::Stopped`]), so that the caller can clean up; `SIGUSR1` and
/// `SIGUSR2` are passed on only.
pub fn run(
    config: &Config,
    runner: FixRunner<'_>,
    progress: &dyn Progress,
) -> Result<Report, RunError> {
    let signals = ForwardSignals::catch();
    measure(config, runner, progress, &signals).map_err(|why| match signals.stop_requested() {
        Some(signal) => RunError::Stopped { signal },
        None => RunError::Failed(why),
    })
}

/// [`run`], with what stops it as a sentence.
fn measure(
    config: &Config,
    runner: FixRunner<'_>,
    progress: &dyn Progress,
    signals: &ForwardSignals,
) -> Result<Report, String> {
    check_variants(config)?;
    crate::work_folder(&config.work_dir)?;
    let machine = Machine::describe();
    let load_start = Load::now();
    let mut state = config.seed | 1;
    let n = config.variants.len();
    let total = (config.warmup + config.blocks) * n;
    let mut blocks = Vec::new();
    let mut not_moved: Vec<Vec<String>> = vec![Vec::new(); n];
    // Each variant's first exit status.
    let mut statuses: Vec<Option<i32>> = vec![None; n];
    for b in 0..config.warmup + config.blocks {
        let warmup = b < config.warmup;
        let order = shuffled(n, &mut state);
        let mut runs: Vec<Option<Run>> = vec![None; n];
        for (step, &i) in order.iter().enumerate() {
            let variant = &config.variants[i];
            let label = if warmup {
                format!("warm-up {}/{}: {}", b + 1, config.warmup, variant.name)
            } else {
                format!(
                    "pair {}/{}: {}",
                    b + 1 - config.warmup,
                    config.blocks,
                    variant.name
                )
            };
            progress.update(b * n + step, total, &label);
            let (run, why) = run_once(config, variant, runner, signals)?;
            check_status(config, runner, signals, &mut statuses, i, run.status)?;
            not_moved[i].extend(why);
            runs[i] = Some(run);
        }
        let runs: Vec<Run> = runs.into_iter().flatten().collect();
        blocks.push(Block {
            order: order
                .iter()
                .map(|&i| config.variants[i].name.clone())
                .collect(),
            warmup,
            runs,
        });
    }
    progress.update(total, total, "done");
    let load = Load {
        start: load_start,
        end: Load::now(),
    };
    let measured: Vec<&Block> = blocks.iter().filter(|b| !b.warmup).collect();
    let column = |i: usize, metric: &str| -> Vec<f64> {
        measured
            .iter()
            .map(|b| *b.runs[i].metrics.get(metric))
            .collect()
    };
    let mut variants = Vec::new();
    for (i, v) in config.variants.iter().enumerate() {
        let metrics = Metrics::<()>::names().map(|name, _| {
            Summary::of(&column(i, name)).expect("at least one measured block, no NaN")
        });
        let median_of = |field: fn(&Run) -> Option<u64>| {
            let mut values: Vec<u64> = measured.iter().filter_map(|b| field(&b.runs[i])).collect();
            values.sort_unstable();
            values.get(values.len() / 2).copied()
        };
        let mut why = std::mem::take(&mut not_moved[i]);
        why.sort();
        why.dedup();
        let report = config.work_dir.join("run-report.json");
        variants.push(VariantResult {
            variant: v.clone(),
            argv: shown(&command_of(config, v, runner, &report)),
            metrics,
            moved_bytes: median_of(|r| r.moved_bytes),
            moved_hugetlb_bytes: median_of(|r| r.moved_hugetlb_bytes),
            not_moved: why,
        });
    }
    let mut comparisons = Vec::new();
    for i in 1..n {
        comparisons.push(compare(config, &variants, &column, i, 0)?);
    }
    for (i, v) in config.variants.iter().enumerate().skip(1) {
        if !matches!(v.kind, VariantKind::Fixes { .. }) {
            continue;
        }
        for (j, w) in config.variants.iter().enumerate().skip(1) {
            if matches!(w.kind, VariantKind::Arguments { .. }) {
                comparisons.push(compare(config, &variants, &column, i, j)?);
            }
        }
    }
    Ok(Report {
        schema: SCHEMA,
        command: config
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        blocks_measured: config.blocks,
        warmup: config.warmup,
        seed: config.seed,
        confidence: config.confidence,
        interval_method: INTERVAL_METHOD,
        machine,
        load,
        load_warning: load.warning(),
        exit_status: statuses[0].unwrap_or(0),
        rss_floor_bytes: own_peak_rss(),
        variants,
        comparisons,
        blocks,
    })
}

impl Metrics<()> {
    /// The quantities' names (a `Metrics` to `map` over).
    pub fn names() -> Metrics<()> {
        Metrics {
            wall_s: (),
            user_s: (),
            sys_s: (),
            minor_faults: (),
            major_faults: (),
            max_rss_bytes: (),
        }
    }
}

/// Compares variant `i` with variant `j` over the measured blocks.
fn compare(
    config: &Config,
    variants: &[VariantResult],
    column: &dyn Fn(usize, &str) -> Vec<f64>,
    i: usize,
    j: usize,
) -> Result<Comparison, String> {
    let level = config.confidence;
    let ratio = Metrics::<()>::names().map(|name, _| {
        paired::ratios(&column(i, name), &column(j, name))
            .and_then(|r| paired::median_interval(&r, level))
    });
    let difference = Metrics::<()>::names().map(|name, _| {
        paired::differences(&column(i, name), &column(j, name))
            .and_then(|d| paired::median_interval(&d, level))
    });
    let difference = Metrics {
        wall_s: difference.wall_s.ok_or("no wall times")?,
        user_s: difference.user_s.ok_or("no user times")?,
        sys_s: difference.sys_s.ok_or("no system times")?,
        minor_faults: difference.minor_faults.ok_or("no fault counts")?,
        major_faults: difference.major_faults.ok_or("no fault counts")?,
        max_rss_bytes: difference.max_rss_bytes.ok_or("no peak RSS")?,
    };
    let wall = ratio.wall_s.ok_or("a run took no time")?;
    let verdict = Verdict::of_ratio(&wall, level);
    let (v, against) = (&variants[i].variant.name, &variants[j].variant.name);
    let summary = verdict_sentence(v, against, &wall, verdict, level);
    let rss_bound = match (&variants[i].variant.kind, j) {
        (VariantKind::Fixes { fixes }, 0)
            if fixes.iter().any(|f| matches!(f, Fix::HugeText { .. })) =>
        {
            variants[i].moved_bytes.map(|moved| {
                let bound = moved + (2 << 20);
                RssBound {
                    moved_bytes: moved,
                    hugetlb_bytes: variants[i].moved_hugetlb_bytes.unwrap_or(0),
                    bound_bytes: bound,
                    increase_bytes: difference.max_rss_bytes,
                    within: difference.max_rss_bytes.estimate <= bound as f64,
                }
            })
        }
        _ => None,
    };
    Ok(Comparison {
        variant: v.clone(),
        against: against.clone(),
        ratio,
        difference,
        verdict,
        summary,
        rss_bound,
    })
}

/// The verdict as a sentence: `huge-text against baseline: wall 0.97x (95%
/// interval 0.95-0.99): helped, 3.0% faster`; `level` is the confidence
/// asked for (the interval's own may be lower with too few pairs; one pair
/// gives none, and the sentence says so).
pub fn verdict_sentence(
    variant: &str,
    against: &str,
    wall: &Interval,
    verdict: Verdict,
    level: f64,
) -> String {
    let interval = if wall.confidence > 0.0 {
        format!(
            "{}% interval {:.3}-{:.3}",
            paired::percent(wall.confidence, 1),
            wall.low,
            wall.high
        )
    } else {
        "no interval from 1 pair".to_owned()
    };
    let head = format!(
        "{variant} against {against}: wall {:.3}x ({interval})",
        wall.estimate
    );
    let tail = match verdict {
        Verdict::Helped => format!("helped, {:.1}% faster", (1.0 - wall.estimate) * 100.0),
        Verdict::Hurt => format!("hurt, {:.1}% slower", (wall.estimate - 1.0) * 100.0),
        Verdict::WithinNoise => "within noise: the interval holds 1".to_owned(),
        Verdict::TooFewPairs => format!(
            "too few pairs for a {}% interval: no verdict (give -n {} or more)",
            paired::level_percent(level),
            paired::pairs_needed(level).map_or("more".to_owned(), |n| n.to_string())
        ),
    };
    format!("{head}: {tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixes_parse() {
        assert_eq!(
            Fix::parse_set("huge-text").unwrap(),
            [Fix::HugeText {
                hot_profile: None,
                libs: vec![]
            }]
        );
        assert_eq!(
            Fix::parse_set("huge-text=hot:/tmp/p.data+keep-heap").unwrap(),
            [
                Fix::HugeText {
                    hot_profile: Some("/tmp/p.data".into()),
                    libs: vec![]
                },
                Fix::KeepHeap
            ]
        );
        assert_eq!(
            Fix::parse_set("keep-heap+thp-heap").unwrap(),
            [Fix::KeepHeap, Fix::ThpHeap]
        );
        assert!(Fix::parse_set("huge").unwrap_err().contains("unknown fix"));
        assert!(Fix::parse_set("huge-text=hot:").is_err());
        assert!(Fix::parse_set("keep-heap+keep-heap")
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn shuffles_are_permutations_and_vary() {
        let mut state = 7;
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..50 {
            let o = shuffled(3, &mut state);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2]);
            firsts.insert(o[0]);
        }
        assert_eq!(firsts.len(), 3);
    }

    #[test]
    fn argument_variants_go_after_the_program_name() {
        let command: Vec<OsString> = ["node", "script.js"].map(OsString::from).into();
        let kind = VariantKind::Arguments {
            args: vec!["--use-largepages=on".into()],
        };
        assert_eq!(
            plain_argv(&command, &kind),
            ["node", "--use-largepages=on", "script.js"].map(OsString::from)
        );
        assert_eq!(plain_argv(&command, &VariantKind::Baseline), command);
    }

    #[test]
    fn a_moving_load_is_flagged() {
        let load = |a: f64, b: f64| Load {
            start: Some([a, 0.0, 0.0]),
            end: Some([b, 0.0, 0.0]),
        };
        assert!(load(0.5, 2.0).warning().is_some());
        assert!(load(3.0, 1.5).warning().is_some());
        assert!(load(0.2, 0.3).warning().is_none());
        assert!(load(2.0, 2.4).warning().is_none());
        assert!(Load {
            start: None,
            end: Some([1.0; 3])
        }
        .warning()
        .is_none());
    }

    #[test]
    fn own_peak_rss_is_read() {
        assert_eq!(
            parse_vm_hwm("Name:\tx\nVmHWM:\t  8624 kB\nVmRSS:\t 100 kB\n"),
            Some(8624 * 1024)
        );
        assert_eq!(parse_vm_hwm("VmRSS: 1 kB"), None);
        assert!(own_peak_rss().unwrap() > 0);
    }

    #[test]
    fn loadavg_parses() {
        assert_eq!(
            parse_loadavg("0.52 1.10 2.00 1/300 4242\n"),
            Some([0.52, 1.1, 2.0])
        );
        assert_eq!(parse_loadavg("x"), None);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let base = Variant {
            name: "baseline".into(),
            kind: VariantKind::Baseline,
        };
        let same = Variant {
            name: "same".into(),
            kind: VariantKind::Arguments { args: vec![] },
        };
        let config = |variants: Vec<Variant>| Config {
            command: vec!["true".into()],
            variants,
            blocks: 3,
            warmup: 1,
            seed: 1,
            confidence: 0.95,
            work_dir: PathBuf::from("/nonexistent"),
        };
        assert!(check_variants(&config(vec![base.clone()])).is_err());
        assert!(check_variants(&config(vec![same.clone(), base.clone()])).is_err());
        assert!(check_variants(&config(vec![base.clone(), same.clone(), same.clone()])).is_err());
        check_variants(&config(vec![base, same])).unwrap();
    }

    #[test]
    fn a_report_names_what_moved_or_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let range = |kind: Option<&str>, skipped: Option<&str>| {
            serde_json::json!({"object": "/bin/x", "start": 0, "end": 4194304, "huge_bytes": 0,
                "page_kind": kind, "skipped": skipped})
        };
        let process = |ranges| {
            serde_json::json!({"schema": "pagewise.run/1", "pid": 1, "program": "/bin/x",
                "ranges": ranges, "perf_map": null, "perf_map_note": null, "vma_named": false})
        };
        let write = |processes: serde_json::Value| {
            std::fs::write(
                &path,
                serde_json::json!({"processes": processes}).to_string(),
            )
            .unwrap()
        };
        write(serde_json::json!([process(vec![range(Some("thp"), None)])]));
        assert_eq!(read_moved(&path).unwrap(), (4 << 20, 0, vec![]));
        // Two processes, one on hugetlb pages: counted apart (RSS misses them).
        write(serde_json::json!([
            process(vec![range(Some("thp"), None)]),
            process(vec![range(Some("hugetlb"), None)])
        ]));
        assert_eq!(read_moved(&path).unwrap(), (8 << 20, 4 << 20, vec![]));
        write(serde_json::json!([process(vec![range(
            None,
            Some("too small")
        )])]));
        assert_eq!(
            read_moved(&path).unwrap(),
            (0, 0, vec!["too small".to_owned()])
        );
        assert!(read_moved(&dir.path().join("none.json"))
            .unwrap_err()
            .contains("wrote no report"));
        // The started program sent no report: the top level says why.
        let why = "sent no huge-text report: the preload library did not run in it";
        std::fs::write(
            &path,
            serde_json::json!({"processes": [], "not_applied": why}).to_string(),
        )
        .unwrap();
        assert!(read_moved(&path).unwrap_err().contains(why));
        // A process whose move was not applied gives its reason.
        let mut failed = process(vec![]);
        failed["not_applied"] = serde_json::json!("bad setting");
        write(serde_json::json!([failed]));
        assert_eq!(
            read_moved(&path).unwrap(),
            (0, 0, vec!["bad setting".to_owned()])
        );
    }

    /// A real run of `true` and `sh -c 'exit 3'`: statuses are kept, and a
    /// variant that changes the status is an error.
    #[test]
    fn runs_are_measured_and_a_changed_status_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let never: FixRunner<'_> = &|_, _, _| unreachable!("no fixes in this test");
        let variants = vec![
            Variant {
                name: "baseline".into(),
                kind: VariantKind::Baseline,
            },
            Variant {
                name: "same".into(),
                kind: VariantKind::Arguments { args: vec![] },
            },
        ];
        let mut config = Config {
            command: ["sh", "-c", "exit 3"].map(OsString::from).into(),
            variants,
            blocks: 3,
            warmup: 1,
            seed: 5,
            confidence: 0.95,
            work_dir: dir.path().to_owned(),
        };
        let report = run(&config, never, &crate::NoProgress).unwrap();
        assert_eq!(report.exit_status, 3);
        assert_eq!(report.blocks.len(), 4);
        assert!(report.blocks[0].warmup);
        for b in &report.blocks {
            assert_eq!(b.runs.len(), 2);
            assert!(b.runs.iter().all(|r| r.metrics.wall_s > 0.0));
            assert!(b.runs.iter().all(|r| r.metrics.max_rss_bytes > 0.0));
        }
        assert_eq!(report.comparisons.len(), 1);
        config.variants[1].kind = VariantKind::Arguments {
            args: vec!["-c".into(), "exit 4".into()],
        };
        // `sh -c 'exit 4' -c 'exit 3'`: the inserted script runs and exits 4.
        let err = run(&config, never, &crate::NoProgress)
            .unwrap_err()
            .to_string();
        assert!(err.contains("exited with status 4"), "{err}");
    }

    /// A program whose exit status changes between its own runs is named as
    /// such, for the side it happens on, and never blamed on the other side
    /// (also when the first runs of the two sides differ); a run that wrote
    /// nothing to stderr adds no empty `(its stderr: )`.
    #[test]
    fn a_status_that_varies_on_its_own_is_named_not_blamed_on_the_variant() {
        let dir = tempfile::tempdir().unwrap();
        let never: FixRunner<'_> = &|_, _, _| unreachable!("no fixes in this test");
        // `sh -c FLIP`: exits 0, 1, 0, … (from `start`) on its own runs, counted in a file.
        let flip = |name: &str, start: u32| {
            let counter = dir.path().join(name);
            format!(
                "n=$(cat {c} 2>/dev/null || echo {start}); echo $((n + 1)) > {c}; exit $((n % 2))",
                c = counter.display()
            )
        };
        let config = |command: [String; 3], variant_args: [String; 2]| Config {
            command: command.map(OsString::from).into(),
            variants: vec![
                Variant {
                    name: "baseline".into(),
                    kind: VariantKind::Baseline,
                },
                Variant {
                    name: "other".into(),
                    kind: VariantKind::Arguments {
                        args: variant_args.into(),
                    },
                },
            ],
            blocks: 3,
            warmup: 1,
            seed: 5,
            confidence: 0.95,
            work_dir: dir.path().join("work"),
        };
        let sh = |script: String| ["sh".to_owned(), "-c".to_owned(), script];
        let c = |script: String| ["-c".to_owned(), script];
        let cases = [
            // The baseline flips; the variant (`sh -c 'exit 0' -c FLIP`) always exits 0.
            (
                sh(flip("a", 0)),
                c("exit 0".into()),
                "of the baseline itself (0, then 1)",
            ),
            // The variant flips; the baseline always exits 0.
            (
                sh("exit 0".into()),
                c(flip("b", 0)),
                "of the variant other itself (0, then 1)",
            ),
            // The variant's first run differs from the baseline's; its second shows it flips.
            (
                sh("exit 0".into()),
                c(flip("c", 1)),
                "of the variant other itself (1, then 0)",
            ),
        ];
        for (command, args, expected) in cases {
            let err = run(&config(command, args), never, &crate::NoProgress)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
            assert!(!err.contains("changes what the program does"), "{err}");
            assert!(!err.contains("stderr"), "{err}");
        }
        // What a run writes to stderr is quoted.
        let loud = format!("echo oops >&2; {}", flip("d", 0));
        let err = run(
            &config(sh(loud), c("exit 0".into())),
            never,
            &crate::NoProgress,
        )
        .unwrap_err()
        .to_string();
        assert!(err.ends_with("(its stderr: oops)"), "{err}");
    }
}
