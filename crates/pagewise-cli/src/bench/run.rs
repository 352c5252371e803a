//! `pagewise bench run`: a user's own command with and without a fix, in
//! randomised pairs (the experiment is `pagewise_bench::program`).

use crate::format::{bytes, table, unbroken, usage, usage_unless};
use crate::output::{errln, outln, OutputError};
use anyhow::{anyhow, Context};
use pagewise_bench::paired::Interval;
use pagewise_bench::program::{self, Config, Fix, Report, Variant, VariantKind};
use pagewise_bench::Summary;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Run a command with and without a fix, in alternating pairs, and say whether the fix helped.
#[derive(Debug, clap::Args)]
#[command(after_long_help = RUN_HELP)]
pub struct BenchRunArgs {
    /// A fix to measure: huge-text, huge-text=hot:PROFILE, keep-heap, thp-heap, or several joined
    /// with + (huge-text+keep-heap); repeatable, each is its own variant.
    #[arg(long = "fix", value_name = "FIX")]
    fixes: Vec<String>,
    /// With a huge-text fix: also move this shared library's text (file name prefix,
    /// e.g. libpython, librustc_driver); repeatable.
    #[arg(long, value_name = "NAME", value_parser = crate::run::library_name)]
    huge_text_lib: Vec<String>,
    /// Another variant: NAME=ARGS runs the command with ARGS (split at spaces) inserted
    /// after the program name, e.g. 'largepages=--use-largepages=on' for node;
    /// 'same=' runs the command unchanged (a no-op to see the noise); repeatable.
    #[arg(long = "variant", value_name = "NAME=ARGS")]
    variants: Vec<String>,
    /// Measured pairs (blocks of one run per variant).
    #[arg(short = 'n', long = "pairs", visible_alias = "trials", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pairs: u32,
    /// Pairs run first and discarded (page cache, first-use costs).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=100))]
    warmup: u32,
    /// Seed of the order inside pairs [default: from the clock].
    #[arg(long)]
    seed: Option<u64>,
    /// Confidence level of the intervals, between 0 and 1.
    #[arg(long, default_value_t = 0.95, value_parser = parse_confidence)]
    confidence: f64,
    /// Let huge-text runs write /tmp/perf-PID.map files, as a plain `pagewise run` does
    /// (off by default: a benchmark would leave one per run).
    #[arg(long)]
    perf_maps: bool,
    /// Folder for the runs' stderr and reports, created if missing (its parent
    /// must exist) [default: a temporary folder].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Print JSON (schema pagewise.bench.run/1) instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// The program and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

const RUN_HELP: &str = "\
Each pair runs the command once as given and once per variant, in an order drawn afresh
for every pair; the first pair (--warmup) is discarded. Each run is timed from start to
exit; user and system time, page faults and peak RSS come from wait4 (the largest
process of the run: a fix's `pagewise run` parent counts, as it would for you). The
program's output is discarded; every run must exit with the first baseline run's status
(a status that varies between runs of one variant, the baseline included, is said to).

For each variant against the baseline: the median of the per-pair ratios with a sign-test
confidence interval (order statistics, exact for any distribution of the noise), and a
verdict from the wall time: helped (the whole interval below 1), hurt (above 1) or within
noise. For huge-text, the peak RSS increase is checked against the bytes moved + 2 MiB.

SIGTERM, SIGHUP, SIGINT or SIGQUIT (kill, Ctrl-C) goes to the run under way; when it has
ended, bench run removes its temporary folder and exits with 128+N and one line.";

/// A confidence level: a number strictly between 0 and 1.
fn parse_confidence(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(level) if level > 0.0 && level < 1.0 => Ok(level),
        _ => Err("a level between 0 and 1, e.g. 0.95".to_owned()),
    }
}

fn parse_variant(text: &str) -> anyhow::Result<Variant> {
    let (name, args) = text
        .split_once('=')
        .ok_or_else(|| usage(format!("--variant {text:?}: expected NAME=ARGS")))?;
    usage_unless(!name.is_empty() && name != "baseline", || {
        format!("--variant {text:?}: the name must be non-empty and not 'baseline'")
    })?;
    Ok(Variant {
        name: name.to_owned(),
        kind: VariantKind::Arguments {
            args: args.split_whitespace().map(str::to_owned).collect(),
        },
    })
}

fn variants(args: &BenchRunArgs) -> anyhow::Result<Vec<Variant>> {
    let mut list = vec![Variant {
        name: "baseline".into(),
        kind: VariantKind::Baseline,
    }];
    let mut any_huge_text = false;
    for text in &args.fixes {
        let mut fixes = Fix::parse_set(text).map_err(|e| usage(format!("--fix: {e}")))?;
        for fix in &mut fixes {
            if let Fix::HugeText { libs, hot_profile } = fix {
                any_huge_text = true;
                libs.clone_from(&args.huge_text_lib);
                if let Some(p) = hot_profile {
                    *p = std::fs::canonicalize(&*p)
                        .with_context(|| format!("--fix {text}: {}", p.display()))?;
                    // Read once here, so a damaged profile is refused before
                    // anything runs, not reported from inside the first run.
                    pagewise::text::profile::Profile::read(p)
                        .map_err(|e| anyhow!("--fix {text}: {e}"))?;
                }
            }
        }
        list.push(Variant {
            name: text.clone(),
            kind: VariantKind::Fixes { fixes },
        });
    }
    usage_unless(args.huge_text_lib.is_empty() || any_huge_text, || {
        "--huge-text-lib needs a huge-text fix".into()
    })?;
    for text in &args.variants {
        list.push(parse_variant(text)?);
    }
    usage_unless(list.len() > 1, || {
        "nothing to compare: give --fix (e.g. --fix huge-text) or --variant NAME=ARGS".into()
    })?;
    if let Some(name) = program::repeated_name(&list) {
        return Err(usage(format!(
            "variant names must be unique: {name:?} is given twice (a --fix is named by its text, a --variant by its NAME)"
        )));
    }
    refuse_unfit_program(&args.command, &list)?;
    Ok(list)
}

/// Refuses, before anything runs, a program that `pagewise run` would
/// refuse under one of the fix variants (a static program for huge text, a
/// musl or static non-glibc one for the heap fixes, one in secure mode, a
/// machine where thp-heap changes nothing): with `pagewise run`'s own reason ([`crate::run::check_program`],
/// the one decision), where the runs would otherwise all fail afterwards.
/// Costs what that check costs, once per fix variant.
fn refuse_unfit_program(command: &[OsString], variants: &[Variant]) -> anyhow::Result<()> {
    let mut path = None;
    for v in variants {
        let VariantKind::Fixes { fixes } = &v.kind else {
            continue;
        };
        let path = match &path {
            Some(p) => p,
            None => path.insert(
                pagewise::launch::resolve_program(&command[0])
                    .map_err(|e| anyhow!("--fix {}: {e}", v.name))?,
            ),
        };
        let has = |f: fn(&Fix) -> bool| fixes.iter().any(f);
        let wanted = crate::run::Fixes {
            huge_text: has(|f| matches!(f, Fix::HugeText { .. })),
            keep_heap: has(|f| matches!(f, Fix::KeepHeap)),
            thp_heap: has(|f| matches!(f, Fix::ThpHeap)),
        };
        crate::run::check_program(path, wanted)
            .map_err(|e| anyhow!("--fix {}: {}", v.name, crate::format::one_line(&e)))?;
    }
    Ok(())
}

/// The arguments of `pagewise run FLAGS -- ARGV` for `fixes`, after the program name.
fn fix_argv(fixes: &[Fix], argv: &[OsString]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec!["run".into()];
    for fix in fixes {
        match fix {
            Fix::HugeText { hot_profile, libs } => {
                out.push(match hot_profile {
                    Some(p) => {
                        let mut flag = OsString::from("--huge-text=hot:");
                        flag.push(p);
                        flag
                    }
                    None => "--huge-text".into(),
                });
                for lib in libs {
                    out.push("--huge-text-lib".into());
                    out.push(lib.into());
                }
            }
            Fix::KeepHeap => out.push("--keep-heap".into()),
            Fix::ThpHeap => out.push("--thp-heap".into()),
        }
    }
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

/// Runs a command under fixes: `exe` (this binary) with `run FLAGS --`, the
/// report in `PAGEWISE_REPORT`, and no perf maps unless asked for.
fn fix_runner(exe: PathBuf, perf_maps: bool) -> impl Fn(&[Fix], &[OsString], &Path) -> Command {
    move |fixes, argv, report| {
        let mut command = Command::new(&exe);
        command
            .args(fix_argv(fixes, argv))
            .env("PAGEWISE_REPORT", report);
        if !perf_maps {
            command.env("PAGEWISE_PERF_MAP", "0");
        }
        command
    }
}

/// Runs the experiment and prints it.
pub fn run(args: &BenchRunArgs) -> anyhow::Result<ExitCode> {
    let (work_dir, _temp) = match &args.work_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::tempdir().context("cannot create a temporary folder")?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let config = Config {
        command: args.command.clone(),
        variants: variants(args)?,
        blocks: args.pairs as usize,
        warmup: args.warmup as usize,
        seed,
        confidence: args.confidence,
        work_dir,
    };
    let exe = std::env::current_exe().context("cannot find the pagewise binary")?;
    let runner = fix_runner(exe, args.perf_maps);
    let progress = crate::progress::StderrProgress::new(args.quiet);
    let report = program::run(&config, &runner, &progress);
    drop(progress);
    let report = match report {
        Ok(report) => report,
        // One line, and the status of a stop by that signal; returning
        // removes the temporary work folder.
        Err(stop @ program::RunError::Stopped { .. }) => {
            errln!("pagewise: bench run: {stop}");
            return Ok(ExitCode::from(stop.exit_status()));
        }
        Err(e) => return Err(anyhow!(e)),
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_report(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn load_text(load: Option<[f64; 3]>) -> String {
    load.map_or("?".to_owned(), |l| {
        format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
    })
}

fn summary_text(s: &Summary, value: impl Fn(f64) -> String) -> String {
    format!("{} ({}-{})", value(s.median), value(s.min), value(s.max))
}

/// A ratio with its interval, `0.980x` alone where one pair gives none, and
/// `n/a` where there is no ratio (0 on the baseline's side, or on both).
fn ratio_text(r: &Option<Interval>) -> String {
    r.as_ref()
        .map_or("n/a".to_owned(), |i| match i.confidence > 0.0 {
            true => format!("{:.3}x ({:.3}-{:.3})", i.estimate, i.low, i.high),
            false => format!("{:.3}x", i.estimate),
        })
}

fn signed_bytes(value: f64) -> String {
    let sign = if value < 0.0 { "-" } else { "+" };
    format!("{sign}{}", bytes(value.abs() as u64))
}

fn print_report(report: &Report) -> Result<(), OutputError> {
    crate::bench::print_machine(&report.machine)?;
    outln!(
        "load average (1/5/15 min): {} at the start, {} at the end",
        load_text(report.load.start),
        load_text(report.load.end)
    )?;
    if let Some(warning) = &report.load_warning {
        outln!("{warning}")?;
    }
    outln!(
        "bench run: {}: {} pairs after {} warm-up, medians (min-max), exit status {}",
        report.command.join(" "),
        report.blocks_measured,
        report.warmup,
        report.exit_status
    )?;
    let mut t = table(&[
        "variant",
        "wall s",
        "user s",
        "sys s",
        "minor faults",
        "major faults",
        "peak RSS",
        "text moved",
    ]);
    for v in &report.variants {
        let m = &v.metrics;
        let secs = |x: f64| format!("{x:.3}");
        let count = |x: f64| format!("{x:.0}");
        // A size and its unit stay on one line when the table wraps.
        let size = |x: f64| unbroken(&bytes(x as u64));
        t.add_row(vec![
            v.variant.name.clone(),
            summary_text(&m.wall_s, secs),
            summary_text(&m.user_s, secs),
            summary_text(&m.sys_s, secs),
            summary_text(&m.minor_faults, count),
            summary_text(&m.major_faults, count),
            summary_text(&m.max_rss_bytes, size),
            v.moved_bytes
                .map_or("-".to_owned(), |b| unbroken(&bytes(b))),
        ]);
    }
    outln!("{t}")?;
    if let Some(floor) = report.rss_floor_bytes {
        if report
            .variants
            .iter()
            .any(|v| v.metrics.max_rss_bytes.min <= floor as f64)
        {
            outln!(
                "peak RSS: some runs show {} or less, this harness's own peak, which wait4 reports as the floor of a child's: their real peak was lower",
                bytes(floor)
            )?;
        }
    }
    for v in &report.variants {
        if v.moved_bytes == Some(0) {
            outln!(
                "{}: no text was moved: {}",
                v.variant.name,
                v.not_moved.join("; ")
            )?;
        }
    }
    outln!(
        "per-pair ratios, median ({}% interval): {}",
        pagewise_bench::paired::level_percent(report.confidence),
        program::INTERVAL_METHOD
    )?;
    for c in &report.comparisons {
        outln!("{}", c.summary)?;
        let r = &c.ratio;
        outln!(
            "  user {}, sys {}, minor faults {}, major faults {}, peak RSS {} ({})",
            ratio_text(&r.user_s),
            ratio_text(&r.sys_s),
            ratio_text(&r.minor_faults),
            ratio_text(&r.major_faults),
            ratio_text(&r.max_rss_bytes),
            signed_bytes(c.difference.max_rss_bytes.estimate),
        )?;
        if let Some(b) = &c.rss_bound {
            outln!(
                "  peak RSS increase {} (interval {} to {}) against the bound {} ({} moved + 2 MiB): {}",
                signed_bytes(b.increase_bytes.estimate),
                signed_bytes(b.increase_bytes.low),
                signed_bytes(b.increase_bytes.high),
                bytes(b.bound_bytes),
                bytes(b.moved_bytes),
                if b.within { "within" } else { "over" }
            )?;
            if b.hugetlb_bytes > 0 {
                outln!(
                    "  {} of the moved bytes are on hugetlb pages, which RSS does not count: the bound checks only the rest",
                    bytes(b.hugetlb_bytes)
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fix's command line, as the runner builds it, parses back into
    /// `pagewise run` with the same flags and command.
    #[test]
    fn fix_argv_parses_back_into_run() {
        let fixes = [
            Fix::HugeText {
                hot_profile: Some("/tmp/p.data".into()),
                libs: vec!["libpython".into()],
            },
            Fix::KeepHeap,
            Fix::ThpHeap,
        ];
        let argv = std::iter::once(OsString::from("pagewise"))
            .chain(fix_argv(&fixes, &["node".into(), "-e".into(), "1".into()]));
        let cli = crate::parse(argv).unwrap();
        let crate::Command::Run(run) = cli.command else {
            panic!("not the run command: {cli:?}");
        };
        assert_eq!(run.huge_text.as_deref(), Some("hot:/tmp/p.data"));
        assert_eq!(run.command, ["node", "-e", "1"]);
        assert!(run.keep_heap && run.thp_heap);
        let plain = fix_argv(
            &[Fix::HugeText {
                hot_profile: None,
                libs: vec![],
            }],
            &["x".into()],
        );
        assert_eq!(plain, ["run", "--huge-text", "--", "x"].map(OsString::from));
    }

    #[test]
    fn variants_parse() {
        let v = parse_variant("largepages=--use-largepages=on --jitless").unwrap();
        assert_eq!(v.name, "largepages");
        assert_eq!(
            v.kind,
            VariantKind::Arguments {
                args: vec!["--use-largepages=on".into(), "--jitless".into()]
            }
        );
        let same = parse_variant("same=").unwrap();
        assert_eq!(same.kind, VariantKind::Arguments { args: vec![] });
        assert!(parse_variant("noequals").is_err());
        assert!(parse_variant("baseline=x").is_err());
    }
}
