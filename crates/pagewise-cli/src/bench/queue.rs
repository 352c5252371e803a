//! `pagewise bench queue`: printing for the queue experiment, and the hidden
//! child-process entry point it re-executes the binary with.

use crate::bench::CommonArgs;
use crate::format::{bytes, measured, table, usage};
use crate::output::outln;
use pagewise::copy::Routine;
use pagewise::os::process::{signal_name, ForwardSignals};
use pagewise_bench::queue::rtt::{self, RttChildSpec, RttConfig, RttKind, RttReport};
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
    /// Rows to run, comma-separated (floor, tmpfs+pretouch (default options), tmpfs+thread-pretouch, tmpfs+idle-pretouch, tmpfs, disk+pretouch, disk); all by default.
    /// With --rtt: floor, queue, queue+idle-work, queue+thread, queue+no-pretouch, queue+unguarded, queue+prepared, queue+hand-off; floor, queue, queue+prepared and queue+hand-off by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Round-trip latency instead of one-way: ping-pong over two queues in
    /// --tmpfs-dir between two processes, one record in flight, timed by the
    /// ping side on one clock; the `floor` row does the same over two
    /// pre-faulted mapped files with no queue logic.
    #[arg(long)]
    rtt: bool,
    /// With --rtt: payload sizes, comma-separated (16 B to 1 MiB each).
    #[arg(long, value_delimiter = ',', default_value = "32,128,1024,4096", value_parser = crate::args::size_in(16, 1 << 20))]
    rtt_sizes: Vec<u64>,
    /// With --rtt: measured round trips per trial (fewer for large records: a queue holds at most 1 GiB).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    round_trips: u64,
    /// With --rtt: round trips before the measured ones, not recorded.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    warmup: u64,
    /// With --rtt: pin the ping and the pong process to these two CPUs (e.g. 0,1).
    #[arg(long, value_delimiter = ',', num_args = 1, value_parser = clap::value_parser!(u16).range(0..1024))]
    pin: Vec<u16>,
    /// The routine that copies payloads into and out of the file: pagewise or glibc.
    #[arg(long, default_value = "pagewise")]
    copy: Routine,
    #[command(flatten)]
    common: CommonArgs,
}

/// Runs the experiment and prints it.
pub fn run(args: &QueueArgs) -> anyhow::Result<ExitCode> {
    if args.rtt {
        return run_rtt(args);
    }
    let all = Config::default_rows(&args.tmpfs_dir, &args.disk_dir, args.copy);
    let rows: Vec<RowSpec> = if args.only.is_empty() {
        all
    } else {
        let mut rows = Vec::new();
        for name in &args.only {
            let row = all.iter().find(|r| &r.name == name).ok_or_else(|| {
                let names: Vec<_> = all.iter().map(|r| r.name.as_str()).collect();
                usage(format!(
                    "unknown row {name:?}: expected one of {}",
                    names.join(", ")
                ))
            })?;
            if !rows.iter().any(|r: &RowSpec| r.name == row.name) {
                rows.push(row.clone());
            }
        }
        rows
    };
    let config = one_way_config(args, rows)?;
    queue::check_folders(&config).map_err(anyhow::Error::msg)?;
    let signals = ForwardSignals::catch();
    let spawn = child_spawner(&signals)?;
    let report = queue::run(&config, &args.common.progress(), &spawn);
    if let Some(signal) = signals.stop_requested() {
        return Ok(stopped(signal));
    }
    let status = rows_status(report.not_run.len());
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(status);
    }
    crate::bench::print_machine(&report.machine)?;
    outln!(
        "queue: {}-byte records copied with {}, writer and reader in separate processes, {}, medians",
        report.record_bytes,
        args.copy.name(),
        crate::format::count(report.trials as u64, "trial", "trials")
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
                "{} ({}-{})",
                millions(r.records_per_s),
                millions(r.records_per_s_range[0]),
                millions(r.records_per_s_range[1])
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
        if let Some(how) = &r.pretouch_throughput {
            outln!("{}: pre-touch, throughput phase: {how}", r.name)?;
        }
        if let Some(how) = &r.pretouch_latency {
            outln!("{}: pre-touch, latency phase: {how}", r.name)?;
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
    Ok(status)
}

/// Exit status 1 when a row did not run (its reason is in the report), so
/// that scripts see a run that measured less than it was asked to.
fn rows_status(not_run: usize) -> ExitCode {
    if not_run == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn one_way_config(args: &QueueArgs, rows: Vec<RowSpec>) -> anyhow::Result<Config> {
    Ok(Config {
        record_bytes: usize::try_from(args.record)?,
        records: args.records,
        latency_records: args.latency_records,
        rate_per_s: args.rate,
        window: args.window,
        trials: args.common.trials as usize,
        rows,
    })
}

/// `bench queue --rtt`: the round-trip rows, printed or as JSON.
fn run_rtt(args: &QueueArgs) -> anyhow::Result<ExitCode> {
    let kinds = if args.only.is_empty() {
        RttKind::DEFAULT.to_vec()
    } else {
        args.only
            .iter()
            .map(|name| {
                RttKind::by_name(name).ok_or_else(|| {
                    let names: Vec<_> = RttKind::ALL.iter().map(|k| k.name()).collect();
                    usage(format!(
                        "unknown --rtt row {name:?}: expected one of {}",
                        names.join(", ")
                    ))
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let mut kinds = kinds;
    dedup_keeping_order(&mut kinds);
    let mut sizes = args
        .rtt_sizes
        .iter()
        .map(|&s| usize::try_from(s))
        .collect::<Result<Vec<_>, _>>()?;
    dedup_keeping_order(&mut sizes);
    let pin = match args.pin.as_slice() {
        [] => None,
        [a, b] => Some([usize::from(*a), usize::from(*b)]),
        other => {
            return Err(usage(format!(
                "--pin takes two CPUs (ping,pong), not {}",
                other.len()
            )))
        }
    };
    let rtt_config = RttConfig {
        sizes,
        warmup: args.warmup,
        round_trips: args.round_trips,
        pin,
        dir: args.tmpfs_dir.clone(),
        kinds,
        copy: args.copy,
        trials: args.common.trials as usize,
    };
    rtt::check_settings(&rtt_config).map_err(usage)?;
    rtt::check_folder(&rtt_config).map_err(anyhow::Error::msg)?;
    let config = one_way_config(args, Vec::new())?;
    let signals = ForwardSignals::catch();
    let spawn = rtt_child_spawner(&signals)?;
    let report = queue::run_rtt(&config, &rtt_config, &args.common.progress(), &spawn);
    if let Some(signal) = signals.stop_requested() {
        return Ok(stopped(signal));
    }
    let status = rows_status(report.rtt.as_ref().map_or(0, |r| r.not_run.len()));
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(status);
    }
    crate::bench::print_machine(&report.machine)?;
    if let Some(r) = &report.rtt {
        print_rtt(r, args.copy)?;
    }
    Ok(status)
}

fn print_rtt(r: &RttReport, copy: Routine) -> anyhow::Result<()> {
    outln!(
        "queue round trip: ping → pong → ping over two files in {} ({}), one record in flight, payloads copied with {}; {} after {} of warm-up, {}, medians; CPUs {}",
        r.dir,
        r.fs,
        copy.name(),
        crate::format::count(r.round_trips, "round trip", "round trips"),
        r.warmup,
        crate::format::count(r.trials as u64, "trial", "trials"),
        r.pin
            .map_or_else(|| "not pinned".to_owned(), |[a, b]| format!("{a} (ping) and {b} (pong)"))
    )?;
    let mut t = table(&[
        "row",
        "bytes",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max",
        "p50 per trial",
        "one-way p50",
        "faults",
        "preempted",
        "slept",
        "slow",
        "pre-touch",
    ]);
    for row in &r.rows {
        let count = |v: Option<u64>| v.map_or_else(|| "n/a".to_owned(), |n| n.to_string());
        t.add_row(vec![
            row.name.clone(),
            row.record_bytes.to_string(),
            row.p50_ns.to_string(),
            row.p90_ns.to_string(),
            row.p99_ns.to_string(),
            row.p999_ns.to_string(),
            row.p9999_ns.to_string(),
            row.max_ns.to_string(),
            row.trial_p50_ns
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join("/"),
            row.one_way_p50_ns.to_string(),
            count(row.faults),
            count(row.switches_involuntary),
            count(row.switches_voluntary),
            row.slow_round_trips.to_string(),
            row.pretouch
                .as_deref()
                .and_then(|p| p.split_whitespace().next())
                .unwrap_or("-")
                .to_owned(),
        ]);
    }
    outln!("{t}")?;
    outln!(
        "ns; faults, preempted (involuntary context switches) and slept (voluntary) of both measuring threads in the measured round trips; slow: round trips over {} µs",
        rtt::SLOW_NS / 1000
    )?;
    for row in &r.rows {
        if let Some(why) = &row.faults_note {
            outln!(
                "{} at {} B: page faults not counted: {why}",
                row.name,
                row.record_bytes
            )?;
        }
    }
    // Large records run fewer round trips than asked (a queue holds at most 1 GiB).
    let mut cut: Vec<(usize, u64, u64)> = r
        .rows
        .iter()
        .filter(|row| (row.round_trips, row.warmup) != (r.round_trips, r.warmup))
        .map(|row| (row.record_bytes, row.round_trips, row.warmup))
        .collect();
    cut.dedup();
    for (bytes, round_trips, warmup) in cut {
        outln!(
            "at {bytes} B: {} after {warmup} of warm-up (a queue holds at most 1 GiB)",
            crate::format::count(round_trips, "round trip", "round trips")
        )?;
    }
    for n in &r.not_run {
        outln!("not run: {} at {} B: {}", n.name, n.record_bytes, n.reason)?;
    }
    Ok(())
}

/// One side of the `bench queue --rtt` ping-pong (started by it).
#[derive(Debug, clap::Args)]
pub struct RttChildArgs {
    /// What to do, as JSON (`pagewise_bench::queue::rtt::RttChildSpec`).
    #[arg(long)]
    spec: String,
}

/// The ping or pong process: runs its side and reports on stdout.
pub fn rtt_child(args: &RttChildArgs) -> anyhow::Result<ExitCode> {
    run_child_spec(&args.spec, rtt::run_child)
}

/// Records per second in millions, two decimals, or three significant
/// digits below 0.1 M (1 MiB records move a few thousand a second).
fn millions(per_s: f64) -> String {
    let m = per_s / 1e6;
    if m >= 0.1 || m == 0.0 {
        format!("{m:.2}")
    } else {
        let decimals = (2.0 - m.log10().floor()).clamp(0.0, 9.0) as usize;
        format!("{m:.decimals$}")
    }
}

/// Drops the later copies of values given twice (`--only floor,floor`).
fn dedup_keeping_order<T: PartialEq + Copy>(v: &mut Vec<T>) {
    let mut kept = Vec::with_capacity(v.len());
    for &x in v.iter() {
        if !kept.contains(&x) {
            kept.push(x);
        }
    }
    *v = kept;
}

fn ns(v: Option<u64>) -> String {
    measured(v, "no latency phase", |n| n.to_string())
}

/// Starts the children of the queue experiment: this binary, re-executed with
/// the hidden `bench queue-child` subcommand and the spec as JSON.
pub fn child_spawner(
    signals: &ForwardSignals,
) -> anyhow::Result<impl Fn(&ChildSpec) -> std::io::Result<Child> + '_> {
    spawner("queue-child", signals)
}

/// Starts the ping and pong processes of `bench queue --rtt`: this binary,
/// re-executed with the hidden `bench queue-rtt-child` subcommand.
fn rtt_child_spawner(
    signals: &ForwardSignals,
) -> anyhow::Result<impl Fn(&RttChildSpec) -> std::io::Result<Child> + '_> {
    spawner("queue-rtt-child", signals)
}

/// Starts this binary as `bench SUBCOMMAND --spec JSON`, stdout piped. A
/// signal asking this process to stop goes on to the child started last
/// (the terminal's Ctrl-C reaches every child anyway); once one has come,
/// no child starts, so the experiment ends at once, each trial removing its
/// files as it fails, and the caller exits with [`stopped`].
fn spawner<'a, S: serde::Serialize>(
    subcommand: &'static str,
    signals: &'a ForwardSignals,
) -> anyhow::Result<impl Fn(&S) -> std::io::Result<Child> + 'a> {
    let exe = std::env::current_exe()?;
    Ok(move |spec: &S| {
        if let Some(signal) = signals.stop_requested() {
            return Err(std::io::Error::other(format!(
                "stopped by {}",
                signal_name(signal)
            )));
        }
        let json = serde_json::to_string(spec).map_err(std::io::Error::other)?;
        let child = Command::new(&exe)
            .args(["bench", subcommand, "--spec"])
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        signals.pass_to(child.id());
        Ok(child)
    })
}

/// One line, and the status of a stop by `signal` (128+N): the experiment
/// ended early and removed its files.
pub(crate) fn stopped(signal: i32) -> ExitCode {
    crate::output::errln!(
        "pagewise: bench: stopped by {}; its files are removed",
        signal_name(signal)
    );
    ExitCode::from((128 + signal).clamp(0, 255) as u8)
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
    run_child_spec(&args.spec, queue::run_child)
}

/// Parses a child's JSON spec and runs `body` with it, writing to stdout.
fn run_child_spec<S: serde::de::DeserializeOwned>(
    json: &str,
    body: fn(&S, &mut dyn std::io::Write) -> Result<(), String>,
) -> anyhow::Result<ExitCode> {
    let spec: S = serde_json::from_str(json)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    body(&spec, &mut out).map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millions_keep_three_digits_below_a_tenth() {
        assert_eq!(millions(11_150_000.0), "11.15");
        assert_eq!(millions(100_000.0), "0.10");
        assert_eq!(millions(17_600.0), "0.0176");
        assert_eq!(millions(950.0), "0.000950");
        assert_eq!(millions(0.0), "0.00");
    }

    #[test]
    fn values_given_twice_are_kept_once_in_their_first_place() {
        let mut v = vec![32, 128, 32, 4096, 128];
        dedup_keeping_order(&mut v);
        assert_eq!(v, [32, 128, 4096]);
    }
}
