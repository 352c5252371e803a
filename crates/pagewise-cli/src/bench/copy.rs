//! `pagewise bench memcpy` and `pagewise bench memset`: arguments, the fleet
//! file, and printing (table, JSON, plot). The experiment is in
//! `pagewise_bench::memcpy`.

use crate::bench::CommonArgs;
use crate::format::{bytes, table};
use crate::output::{outln, OutputError};
use pagewise_bench::fleet::FleetDistribution;
use pagewise_bench::memcpy::{self, Op, Options, Report};
use pagewise_bench::Summary;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `bench memcpy` and `bench memset`.
#[derive(Debug, Clone, clap::Args)]
pub struct CopyArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Fixed sizes to run, comma-separated, with optional K/M/G suffixes
    /// (default: powers of two from 8 B to 1 GiB and some odd sizes).
    #[arg(long, value_delimiter = ',', value_parser = parse_size_arg)]
    pub sizes: Option<Vec<usize>>,
    /// Skip the cold rows (they map a few hundred MiB to a few GiB).
    #[arg(long)]
    pub no_cold: bool,
    /// Skip the hot rows.
    #[arg(long)]
    pub no_hot: bool,
    /// Skip the misaligned rows.
    #[arg(long)]
    pub no_misaligned: bool,
    /// Skip the fleet-distribution row.
    #[arg(long)]
    pub no_fleet: bool,
    /// The size distribution of the fleet row, in Fleetbench's format (default:
    /// Fleetbench's <memcpy|memset>-fleet-distribution.csv, built in).
    #[arg(long, value_name = "FILE")]
    pub fleet_file: Option<PathBuf>,
    /// Calls per fleet trial.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub fleet_calls: u64,
    /// Do not ask for transparent huge pages on the buffers.
    #[arg(long)]
    pub no_huge_pages: bool,
    /// Also run every cold size from 16 MiB with pagewise's `copy_parallel` /
    /// `fill_parallel` on N threads (glibc's side stays on one thread).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub parallel: u64,
    /// memcpy only: skip the end-to-end row (the queue experiment with 4 KiB
    /// records, copied by each routine).
    #[arg(long)]
    pub no_end_to_end: bool,
    /// Records per end-to-end trial.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub end_to_end_records: u64,
    /// Directory on tmpfs for the end-to-end row's queue file.
    #[arg(long, default_value = "/dev/shm")]
    pub tmpfs_dir: PathBuf,
    /// Also draw GB/s by size for both routines into FILE (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Load this libpagewise.so and add a third side to every row (not the
    /// rows of --parallel): its `pw_copy` (memcpy) or `pw_fill` (memset),
    /// called in the same loop through a wrapper that calls its dlsym
    /// pointer, and interleaved with the other two. Its column `C/pagewise` is the median of each
    /// trial's C entry GB/s over pagewise's (as `ratio`): the in-process A/B
    /// of the C entry point against calling pagewise from Rust.
    #[arg(long, value_name = "PATH")]
    pub c_library: Option<PathBuf>,
}

/// A size as every other size option reads it (`1.5M`, `4K`, `100`), from
/// 1 byte to [`crate::args::MAX_BENCH_BYTES`].
fn parse_size_arg(text: &str) -> Result<usize, String> {
    let n = crate::args::size_in(1, crate::args::MAX_BENCH_BYTES)(text)?;
    usize::try_from(n).map_err(|_| format!("{text:?} is too large"))
}

/// Runs the experiment and prints it.
pub fn run(op: Op, args: &CopyArgs) -> anyhow::Result<ExitCode> {
    if let Some(plot) = &args.plot {
        crate::plot::check_path(plot)?;
    }
    let (fleet, fleet_file) = if args.no_fleet {
        (None, None)
    } else if let Some(path) = &args.fleet_file {
        let file = path.canonicalize().unwrap_or_else(|_| path.clone());
        (
            Some(FleetDistribution::load(path)?),
            Some(file.to_string_lossy().into_owned()),
        )
    } else {
        let builtin = op.builtin_fleet();
        (
            Some(FleetDistribution::builtin(&builtin)?),
            Some(builtin.label()),
        )
    };
    let options = Options {
        trials: args.common.trials,
        sizes: args.sizes.clone().unwrap_or_else(Options::default_sizes),
        hot: !args.no_hot,
        cold: !args.no_cold,
        misaligned: !args.no_misaligned,
        fleet,
        fleet_file,
        fleet_calls: args.fleet_calls as usize,
        huge_pages: !args.no_huge_pages,
        parallel: args.parallel as usize,
        c_library: args.c_library.clone(),
        ..Options::default()
    };
    let mut report = {
        let progress = args.common.progress();
        memcpy::run(op, &options, &progress)?
    };
    if op == Op::Memcpy && !args.no_end_to_end {
        let progress = args.common.progress();
        let signals = pagewise::os::process::ForwardSignals::catch();
        let spawn = crate::bench::queue::child_spawner(&signals)?;
        match memcpy::end_to_end(
            args.common.trials as usize,
            args.end_to_end_records,
            &args.tmpfs_dir,
            &progress,
            &spawn,
        ) {
            Ok(row) => report.end_to_end = Some(row),
            Err(e) => report.notes.push(format!("end-to-end row not run: {e}")),
        }
        if let Some(signal) = signals.stop_requested() {
            return Ok(crate::bench::queue::stopped(signal));
        }
    }
    if let Some(path) = &args.plot {
        crate::plot::draw(path, op, &report)?;
    }
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_human(op, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The C entry point of `op`.
fn c_entry_name(op: Op) -> &'static str {
    match op {
        Op::Memcpy => "pw_copy",
        Op::Memset => "pw_fill",
    }
}

fn range(s: &Summary, digits: usize) -> String {
    format!(
        "{:.digits$} ({:.digits$}–{:.digits$})",
        s.median, s.min, s.max
    )
}

fn print_human(op: Op, r: &Report) -> Result<(), OutputError> {
    crate::bench::print_machine(&r.machine)?;
    let ours = match op {
        Op::Memcpy => "pagewise copy GB/s",
        Op::Memset => "pagewise fill GB/s",
    };
    let theirs = format!("glibc {} GB/s", op.name());
    let entry = c_entry_name(op);
    let c_gbps = format!("{entry} GB/s");
    let mut header = vec!["row", "bytes", ours, &theirs, "ratio"];
    if r.c_library.is_some() {
        header.extend([c_gbps.as_str(), "C/pagewise"]);
    }
    let mut t = table(&header);
    for row in &r.rows {
        let mut cells = vec![
            row.name.clone(),
            row.bytes.to_string(),
            range(&row.pagewise, 2),
            range(&row.glibc, 2),
            range(&row.ratios, 2),
        ];
        if r.c_library.is_some() {
            cells.push(row.c_entry.as_ref().map_or("-".into(), |s| range(s, 2)));
            cells.push(
                row.c_entry_ratio_to_pagewise
                    .map_or("-".into(), |x| format!("{x:.3}")),
            );
        }
        t.add_row(cells);
    }
    outln!(
        "{} against glibc, {} each, interleaved; medians (min–max); ratio: the median of each trial's ratio, above 1: pagewise faster",
        op.name(),
        crate::format::count(r.trials as u64, "trial", "trials")
    )?;
    if let Some(c) = &r.c_library {
        outln!(
            "C entry point: {entry} of {} (pw_version {}), through its dlsym pointer, interleaved with both; C/pagewise: the median of each trial's ratio, below 1: the C entry is slower",
            c.path,
            c.version
        )?;
    }
    if !r.rows.is_empty() {
        outln!("{t}")?;
    }
    if let Some(f) = &r.fleet {
        let c_ns = format!("{} ns/call", c_entry_name(op));
        let mut header = vec![
            "row",
            "calls",
            "mean bytes",
            "pagewise ns/call",
            "glibc ns/call",
            "ratio",
        ];
        let mut cells = vec![
            f.name.clone(),
            f.calls.to_string(),
            format!("{:.1}", f.mean_bytes),
            range(&f.pagewise, 2),
            range(&f.glibc, 2),
            range(&f.ratios, 2),
        ];
        if let (Some(c), Some(ratio)) = (&f.c_entry, f.c_entry_ratio_to_pagewise) {
            header.extend([c_ns.as_str(), "C/pagewise"]);
            cells.extend([range(c, 2), format!("{ratio:.3}")]);
        }
        let mut t = table(&header);
        t.add_row(cells);
        outln!(
            "\nFleet distribution ({})",
            f.file.as_deref().unwrap_or("?")
        )?;
        outln!("{t}")?;
        if f.overlap_probability_ignored > 0.0 {
            outln!(
                "(calls marked overlapping, {:.4}% of the file, run without overlap)",
                f.overlap_probability_ignored * 100.0
            )?;
        }
    }
    if let Some(l) = &r.limit {
        let pagewise = r
            .rows
            .iter()
            .find(|row| row.bytes == l.bytes && row.src_offset == 0 && row.dst_offset == 0);
        outln!(
            "\nLimit: {} {:.1} GB/s, fastest of every candidate ({}){}",
            l.name,
            l.gbps,
            l.best,
            pagewise.map_or(String::new(), |row| format!(
                "; pagewise {:.2} and glibc {:.2} of it",
                row.gbps / l.gbps,
                row.glibc_gbps / l.gbps
            ))
        )?;
        let all: Vec<String> = l
            .candidates
            .iter()
            .map(|c| format!("{} {:.1}", c.candidate, c.gbps.median))
            .collect();
        outln!("  candidates (GB/s): {}", all.join(", "))?;
    }
    if let Some(e) = &r.end_to_end {
        let mut t = table(&["row", "bytes", "pagewise GB/s", "glibc GB/s", "ratio"]);
        let rate = |r: &[f64; 3], bytes: usize| {
            let g = |x: f64| x * bytes as f64 / 1e9;
            format!("{:.2} ({:.2}–{:.2})", g(r[0]), g(r[1]), g(r[2]))
        };
        t.add_row(vec![
            e.name.clone(),
            e.bytes.to_string(),
            rate(&e.records_per_s, e.bytes),
            rate(&e.glibc_records_per_s, e.bytes),
            format!("{:.2}", e.ratio),
        ]);
        outln!(
            "\nEnd to end: bench queue's throughput phase (tmpfs, pre-touch), {} records per trial, payload copied in by the writer and out by the reader",
            e.records
        )?;
        outln!("{t}")?;
    }
    let p = &r.plan;
    outln!(
        "\npagewise plan: {} kernels; non-temporal stores from {} (copy), {} (fill) ({:?}); huge pages on buffers: {}",
        p.isa.name(),
        p.copy_nontemporal()
            .map_or("never".to_owned(), |t| bytes(t as u64)),
        p.fill_nontemporal()
            .map_or("never".to_owned(), |t| bytes(t as u64)),
        p.nontemporal_source,
        if r.huge_pages { "asked" } else { "no" }
    )?;
    for note in &r.notes {
        outln!("note: {note}")?;
    }
    Ok(())
}
