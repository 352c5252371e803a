//! `pagewise tune`: measures the copy plan on this machine and caches it.

use crate::format::{bytes, table};
use crate::output::{outln, OutputError};
use crate::progress::StderrProgress;
use pagewise::copy::cache;
use pagewise::copy::tune::{self, Options, Report};
use pagewise::probe::MachineReport;
use std::process::ExitCode;

/// Arguments of `pagewise tune`.
#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// Print JSON (schema `pagewise.tune/1`) instead of tables.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// Rounds per class (each candidate once per round; medians of these).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(3..=50))]
    rounds: u64,
    /// Largest size measured (its class covers every larger size), with an
    /// optional K/M/G suffix. Needs about three times this much memory.
    #[arg(long, default_value = "512M",
          value_parser = crate::args::size_in(1 << 20, crate::args::MAX_BENCH_BYTES))]
    max_bytes: u64,
    /// Measure and print, but do not write the plan to the cache.
    #[arg(long)]
    no_save: bool,
}

struct Adapter(StderrProgress);

impl tune::Progress for Adapter {
    fn update(&self, done: usize, total: usize, what: &str) {
        pagewise_bench::Progress::update(&self.0, done, total, what);
    }
}

/// Runs `pagewise tune`.
pub fn run(args: &TuneArgs) -> anyhow::Result<ExitCode> {
    // Chosen (and made) now: a cache that could not be written is refused
    // now, not after measuring.
    let cache_dir = match args.no_save {
        true => None,
        false => Some(cache::directory()?),
    };
    let machine = MachineReport::probe();
    let level = |l: u32| {
        machine
            .cpu
            .caches
            .iter()
            .filter(|c| c.level == l && c.kind != "Instruction")
            .map(|c| c.size_bytes as usize)
            .max()
    };
    let llc = machine
        .cpu
        .caches
        .iter()
        .map(|c| c.size_bytes as usize)
        .max();
    let mut options = Options::for_caches(level(2).unwrap_or(1 << 20), llc.unwrap_or(32 << 20));
    options.rounds = args.rounds as usize;
    options.max_bytes = usize::try_from(args.max_bytes)?;
    options.glibc_nontemporal = machine
        .glibc
        .non_temporal_threshold_bytes
        .map(|b| b as usize);
    let progress = Adapter(StderrProgress::new(args.quiet || args.json));
    let mut report = tune::tune(&options, &progress)?;
    drop(progress);
    if llc.is_none() {
        report
            .notes
            .push("cache sizes not readable: classes placed assuming L2 1 MiB, LLC 32 MiB".into());
    }
    if options.glibc_nontemporal.is_none() {
        report.notes.push(
            "glibc's non-temporal threshold not readable: the temporal tables call glibc only \
             below the L2 size"
                .into(),
        );
    }
    if let Some(dir) = cache_dir {
        let path = cache::save_to(&dir.path, &report.tuned)?;
        report.cache_file = Some(path.display().to_string());
        report.notes.extend(
            dir.passed_over
                .iter()
                .map(|why| format!("cache: passed over {why}")),
        );
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_human(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(r: &Report) -> Result<(), OutputError> {
    let mut t = table(&[
        "table",
        "sizes from",
        "placement",
        "chosen",
        "score",
        "default",
        "score",
        "glibc",
    ]);
    for c in &r.choices {
        t.add_row(vec![
            format!("{:?}", c.table).to_lowercase(),
            bytes(c.class_from as u64),
            c.placement.name().to_owned(),
            if c.hot_evicted {
                format!("{} (hot evicted: kept)", c.chosen)
            } else {
                c.chosen.clone()
            },
            format!("{:.2}", c.score),
            c.default.clone(),
            format!("{:.2}", c.default_score),
            format!("{:.2}", c.glibc_score),
        ]);
    }
    outln!("{t}")?;
    outln!(
        "score: median ratio to a direct glibc call in the worst of the class's cells (hot and \
         cold, at its first size up to 2 MiB and at four times that); a choice other than the \
         default beat it by the margin in one cell and was not behind in any (never where the \
         hot data was evicted while timed: \"hot evicted: kept\"); the smallest sizes: {}; the \
         copy loop: \
         {} vectors per iteration ({})",
        r.tuned.tables.small.name(),
        r.tuned.tables.loop_block.name(),
        r.loop_block
            .iter()
            .map(|t| format!("{} {:.2}", t.candidate, t.ratio.median))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    outln!("measured in {:.1} s", r.seconds)?;
    match &r.cache_file {
        Some(p) => outln!("plan written to {p}: later processes on this machine use it")?,
        None => outln!("plan not saved (--no-save)")?,
    }
    for n in &r.notes {
        outln!("note: {n}")?;
    }
    Ok(())
}
