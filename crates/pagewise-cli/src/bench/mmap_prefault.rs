//! `pagewise bench mmap-prefault`: printing for the mmap-prefault experiment.

use crate::bench::CommonArgs;
use crate::format::{bytes, measured, table, usage_unless};
use crate::output::outln;
use pagewise::queue::PreTouch;
use pagewise_bench::mmap_prefault::{self, Config, Method};
use std::path::PathBuf;
use std::process::ExitCode;

/// Write SIZE through a shared file mapping in records, per prefault method.
#[derive(Debug, clap::Args)]
pub struct MmapPrefaultArgs {
    /// Bytes to write (e.g. 256MiB).
    #[arg(long, default_value = "256MiB", value_parser = crate::args::size_in(1, crate::args::MAX_BENCH_BYTES))]
    size: u64,
    /// Bytes per record.
    #[arg(long, default_value = "128", value_parser = crate::args::size_in(1, 1 << 30))]
    record: u64,
    /// Directory for the file (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Methods to run, comma-separated; all by default.
    #[arg(long, value_delimiter = ',', value_parser = parse_method)]
    only: Vec<Method>,
    /// The pre-toucher's window for `pagewise-window`.
    #[arg(long, default_value = "4MiB", value_parser = crate::args::size_in(1, 1 << 30))]
    window: u64,
    /// The largest window its rate adaptation may use.
    #[arg(long, default_value = "64MiB", value_parser = crate::args::size_in(1, 1 << 30))]
    max_window: u64,
    #[command(flatten)]
    common: CommonArgs,
}

fn parse_method(name: &str) -> Result<Method, String> {
    Method::from_name(name).ok_or_else(|| {
        let names: Vec<_> = Method::ALL.iter().map(|m| m.name()).collect();
        format!(
            "unknown method {name:?}: expected one of {}",
            names.join(", ")
        )
    })
}

/// Runs the experiment and prints it.
pub fn run(args: &MmapPrefaultArgs) -> anyhow::Result<ExitCode> {
    let size = usize::try_from(args.size)?;
    let record = usize::try_from(args.record)?;
    usage_unless(size >= record, || {
        "--size must be at least one --record".into()
    })?;
    let window = PreTouch {
        window: args.window,
        max_window: args.max_window,
        ..PreTouch::default()
    };
    window.check().map_err(anyhow::Error::msg)?;
    let config = Config {
        size,
        record_bytes: record,
        dir: args.dir.clone(),
        trials: args.common.trials as usize,
        methods: if args.only.is_empty() {
            Method::ALL.to_vec()
        } else {
            args.only.clone()
        },
        window,
    };
    let report = mmap_prefault::run(&config, &args.common.progress());
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::bench::print_machine(&report.machine)?;
    outln!(
        "mmap prefault: {} in {}-byte records through a shared mapping on {} ({}), {}, medians (min-max)",
        bytes(report.size_bytes as u64),
        report.record_bytes,
        report.dir,
        report.fs,
        crate::format::count(report.trials as u64, "trial", "trials")
    )?;
    let mut t = table(&[
        "method",
        "total ms",
        "prefault ms",
        "vs plain",
        "write-loop faults",
        "peak resident",
        "peak ahead of writer",
    ]);
    for r in &report.rows {
        t.add_row(vec![
            r.name.to_owned(),
            format!("{:.1} ({:.1}-{:.1})", r.ms, r.ms_range[0], r.ms_range[1]),
            format!("{:.1}", r.prefault_ms),
            r.vs_plain.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
            measured(r.write_loop_faults, "not counted", |n| n.to_string()),
            measured(r.peak_resident_bytes, "not read", bytes),
            measured(r.peak_ahead_bytes, "not read", bytes),
        ]);
    }
    outln!("{t}")?;
    if let Some(w) = report.rows.iter().find(|r| r.name == "pagewise-window") {
        let best = report
            .rows
            .iter()
            .filter(|r| Method::from_name(r.name).is_some_and(Method::full_prefault))
            .min_by(|a, b| a.ms.total_cmp(&b.ms));
        if let Some(best) = best {
            outln!(
                "pagewise-window: {:.2}x the best full prefault ({}), window up to {} (configured {}-{})",
                w.ms / best.ms,
                best.name,
                measured(w.peak_window_bytes, "no window report", bytes),
                bytes(report.window_bytes),
                bytes(report.max_window_bytes)
            )?;
        }
    }
    if let Some(why) = &report.faults_note {
        outln!("page faults not counted: {why}")?;
    }
    if let Some(why) = &report.text_note {
        outln!("note: {why}")?;
    }
    if let Some(why) = &report.resident_note {
        outln!("resident sizes not read: {why}")?;
    }
    for n in &report.not_run {
        outln!("not run: {}: {}", n.name, n.reason)?;
    }
    Ok(ExitCode::SUCCESS)
}
