//! `pagewise bench queue`: printing for the queue experiment, and the hidden
//! child-process entry point it re-executes the binary with.

use crate::bench::CommonArgs;
use crate::format::{bytes, measured, table};
use crate::output::outln;
use pagewise::copy::Routine;
use pagewise_bench::queue::{self, ChildSpec, Config, RowSpec};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};

/// One-way throughput and latency of pagewise::queue between two processes.
#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// Payload bytes per record (16 B, a sequence number and a timestamp, to 1 MiB).
    #[arg(long, default_value = "128", value_parser = crate::args::size_in(16, 1 << 20))]
    record: u64,
    /// Records in the throughput phase.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    records: u64,
    /// Records in the latency phase.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    latency_records: u64,
    /// Offered rate of the latency phase, records per second (1 to 10^9).
    #[arg(long, default_value_t = 1_000_000.0, value_parser = crate::args::number_in(1.0, 1e9))]
    rate: f64,
    /// The writer's pre-touch window.
    #[arg(long, default_value = "4MiB", value_parser = crate::args::size_in(1, 1 << 30))]
    window: u64,
    /// Directory on tmpfs.
    #[arg(long, default_value = "/dev/shm")]
    tmpfs_dir: PathBuf,
    /// Directory on a disk file system.
    #[arg(long, default_value = "/var/tmp")]
    disk_dir: PathBuf,
    /// Rows to run, comma-separated (floor, tmpfs+pretouch, tmpfs+idle-pretouch, tmpfs, disk+pretouch, disk); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The routine that copies payloads into and out of the file: pagewise or glibc.
    #[arg(long, default_value = "pagewise")]
    copy: Routine,
    #[command(flatten)]
    common: CommonArgs,
}

/// Runs the experiment and prints it.
pub fn run(args: &QueueArgs) -> anyhow::Result<ExitCode> {
    let all = Config::default_rows(&args.tmpfs_dir, &args.disk_dir, args.copy);
    let rows: Vec<RowSpec> = if args.only.is_empty() {
        all
    } else {
        let mut rows = Vec::new();
        for name in &args.only {
            let row = all.iter().find(|r| &r.name == name).ok_or_else(|| {
                let names: Vec<_> = all.iter().map(|r| r.name.as_str()).collect();
                anyhow::anyhow!("unknown row {name:?}: expected one of {}", names.join(", "))
            })?;
            rows.push(row.clone());
        }
        rows
    };
    let config = Config {
        record_bytes: usize::try_from(args.record)?,
        records: args.records,
        latency_records: args.latency_records,
        rate_per_s: args.rate,
        window: args.window,
        trials: args.common.trials as usize,
        rows,
    };
    let spawn = child_spawner()?;
    let report = queue::run(&config, &args.common.progress(), &spawn);
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::bench::print_machine(&report.machine)?;
    outln!(
        "queue: {}-byte records copied with {}, writer and reader in separate processes, {} trials, medians",
        report.record_bytes,
        args.copy.name(),
        report.trials
    )?;
    outln!(
        "throughput: {} records as fast as possible; latency: {} records offered at {:.0}/s, ns from scheduled send to read; pre-touch window {}",
        report.records,
        report.latency_records,
        report.rate_per_s,
        bytes(report.window_bytes)
    )?;
    let mut t = table(&[
        "row",
        "fs",
        "M records/s (min-max)",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max",
        ">1ms ‰",
        "append faults",
    ]);
    for r in &report.rows {
        t.add_row(vec![
            r.name.clone(),
            r.fs.clone(),
            format!(
                "{:.2} ({:.2}-{:.2})",
                r.records_per_s / 1e6,
                r.records_per_s_range[0] / 1e6,
                r.records_per_s_range[1] / 1e6
            ),
            ns(r.p50_ns),
            ns(r.p90_ns),
            ns(r.p99_ns),
            ns(r.p999_ns),
            ns(r.p9999_ns),
            ns(r.max_ns),
            measured(r.over_1ms_per_mille, "no latency phase", |m| {
                format!("{m:.3}")
            }),
            measured(r.append_faults, "not counted", |f| f.to_string()),
        ]);
    }
    outln!("{t}")?;
    for r in &report.rows {
        if let Some(why) = &r.failed {
            outln!(
                "{}: only {} of {} trials ran; then: {why}",
                r.name,
                r.trials,
                report.trials
            )?;
        }
    }
    for r in &report.rows {
        if let Some(why) = &r.faults_note {
            outln!("{}: page faults not counted: {why}", r.name)?;
        }
    }
    for n in &report.not_run {
        outln!("not run: {}: {}", n.name, n.reason)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn ns(v: Option<u64>) -> String {
    measured(v, "no latency phase", |n| n.to_string())
}

/// Starts the children of the queue experiment: this binary, re-executed with
/// the hidden `bench queue-child` subcommand and the spec as JSON.
pub fn child_spawner() -> anyhow::Result<impl Fn(&ChildSpec) -> std::io::Result<Child>> {
    let exe = std::env::current_exe()?;
    Ok(move |spec: &ChildSpec| {
        let json = serde_json::to_string(spec).map_err(std::io::Error::other)?;
        Command::new(&exe)
            .args(["bench", "queue-child", "--spec"])
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
    })
}

/// One side of one phase of `bench queue` (started by it).
#[derive(Debug, clap::Args)]
pub struct ChildArgs {
    /// What to do, as JSON (`pagewise_bench::queue::ChildSpec`).
    #[arg(long)]
    spec: String,
}

/// The child process: runs one side of one phase and reports on stdout.
pub fn child(args: &ChildArgs) -> anyhow::Result<ExitCode> {
    let spec: ChildSpec = serde_json::from_str(&args.spec)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    queue::run_child(&spec, &mut out).map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}
