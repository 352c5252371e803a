//! `pagewise bench first-touch`: printing for the first-touch experiment.

use crate::bench::CommonArgs;
use crate::format::{bytes, measured, table};
use crate::output::outln;
use pagewise_bench::first_touch::{self, Config, Strategy};
use std::process::ExitCode;

/// Allocate SIZE, write it three times per strategy; compare the first pass with the third.
#[derive(Debug, clap::Args)]
pub struct FirstTouchArgs {
    /// Bytes to allocate and write (e.g. 1GiB, 256MiB); at least 2 MiB, one huge
    /// page, the unit every pass writes in.
    #[arg(long, default_value = "1GiB", value_parser = crate::args::size_in(first_touch::MIN_SIZE as u64, crate::args::MAX_BENCH_BYTES))]
    size: u64,
    /// Strategies to run, comma-separated (malloc, mmap, thp, hugetlb-2m, populate,
    /// region-eager, region-background); all by default.
    #[arg(long, value_delimiter = ',', value_parser = parse_strategy)]
    only: Vec<Strategy>,
    /// Worker threads that populate `region-background` [default: one less than the
    /// online CPUs, at least 1; the waiting caller helps too].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: Option<u32>,
    /// Do not grow the hugetlb pool for `hugetlb-2m`, even as root.
    #[arg(long)]
    no_reserve: bool,
    #[command(flatten)]
    common: CommonArgs,
}

fn parse_strategy(name: &str) -> Result<Strategy, String> {
    Strategy::from_name(name).ok_or_else(|| {
        let names: Vec<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
        format!(
            "unknown strategy {name:?}: expected one of {}",
            names.join(", ")
        )
    })
}

/// Runs the experiment and prints it.
pub fn run(args: &FirstTouchArgs) -> anyhow::Result<ExitCode> {
    let size = usize::try_from(args.size)?;
    let config = Config {
        size,
        trials: args.common.trials as usize,
        strategies: if args.only.is_empty() {
            Strategy::ALL.to_vec()
        } else {
            args.only.clone()
        },
        background_threads: args
            .threads
            .map_or_else(|| Config::default().background_threads, |t| t as usize),
        reserve_hugetlb: !args.no_reserve,
    };
    let report = first_touch::run(&config, &args.common.progress());
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::bench::print_machine(&report.machine)?;
    outln!(
        "first touch: {} written 3 times, {}, medians (min-max) in ms",
        bytes(report.size_bytes as u64),
        crate::format::count(report.trials as u64, "trial", "trials")
    )?;
    let mut t = table(&[
        "strategy",
        "alloc",
        "pass 1",
        "pass 2",
        "pass 3",
        "first/warm",
        "total/warm",
        "faults p1/p2/p3",
        "backing",
    ]);
    let range = |median: f64, [lo, hi]: [f64; 2]| format!("{median:.1} ({lo:.1}-{hi:.1})");
    for r in &report.rows {
        t.add_row(vec![
            r.name.to_owned(),
            range(r.alloc_ms, r.alloc_range_ms),
            range(r.pass_ms[0], r.pass_range_ms[0]),
            range(r.pass_ms[1], r.pass_range_ms[1]),
            range(r.pass_ms[2], r.pass_range_ms[2]),
            format!("{:.2}", r.first_over_warm),
            format!("{:.2}", r.total_over_warm),
            [r.faults_pass1, r.faults_pass2, r.faults_pass3]
                .map(|f| measured(f, "not counted", |n| n.to_string()))
                .join("/"),
            r.backing.clone(),
        ]);
    }
    outln!("{t}")?;
    if let Some(why) = &report.faults_note {
        outln!("page faults not counted: {why}")?;
    }
    for r in report.rows.iter().filter(|r| r.note.is_some()) {
        outln!(
            "note: {}: {}",
            r.name,
            r.note.as_deref().unwrap_or_default()
        )?;
    }
    for n in &report.not_run {
        outln!("not run: {}: {}", n.name, n.reason)?;
    }
    Ok(ExitCode::SUCCESS)
}
