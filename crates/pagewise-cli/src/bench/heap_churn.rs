//! `pagewise bench heap-churn` and its hidden worker.

use crate::args::size_in;
use crate::bench::CommonArgs;
use crate::format::{bytes, measured, table, usage, usage_unless};
use crate::output::outln;
use anyhow::{anyhow, Context};
use pagewise_bench::heap_churn::{self, Config, WorkerMode, Workload};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The workload's shape, shared by the experiment and its worker.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadArgs {
    /// Threads that allocate, fill and free.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
    /// Smallest buffer.
    #[arg(long, default_value = "256KiB", value_parser = size_in(1, 1 << 30))]
    min_size: u64,
    /// Largest buffer (at most 1 GiB: each thread holds one).
    #[arg(long, default_value = "64MiB", value_parser = size_in(1, 1 << 30))]
    max_size: u64,
    /// Measured iterations per thread.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: u32,
    /// Warm-up iterations per thread, not measured.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    warmup: u32,
}

impl WorkloadArgs {
    fn workload(&self) -> anyhow::Result<Workload> {
        let w = Workload {
            threads: self.threads as usize,
            min_size: usize::try_from(self.min_size)?,
            max_size: usize::try_from(self.max_size)?,
            iterations: self.iterations as usize,
            warmup: self.warmup as usize,
        };
        usage_unless(w.min_size <= w.max_size, || {
            "--min-size must be at most --max-size".into()
        })?;
        Ok(w)
    }
}

/// Threads allocate, fill and free buffers of varying size: glibc vs keep-heap vs Buffer.
#[derive(Debug, clap::Args)]
pub struct HeapChurnArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    common: CommonArgs,
}

/// One worker process (started by `bench heap-churn`; prints one JSON result).
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// `malloc` or `buffer`.
    #[arg(long)]
    mode: String,
    #[command(flatten)]
    workload: WorkloadArgs,
}

/// Runs the experiment and prints it.
pub fn run(args: &HeapChurnArgs) -> anyhow::Result<ExitCode> {
    let config = Config {
        workload: args.workload.workload()?,
        trials: args.common.trials as usize,
    };
    let exe =
        std::env::current_exe().context("cannot find the pagewise binary to start workers")?;
    let spawn = worker_spawner(exe);
    let report =
        heap_churn::run(&config, &spawn, &args.common.progress()).map_err(|e| anyhow!(e))?;
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::bench::print_machine(&report.machine)?;
    let w = &report.workload;
    outln!(
        "heap churn: {} x {} of malloc/fill/free, {}-{}, {}, medians",
        crate::format::count(w.threads as u64, "thread", "threads"),
        crate::format::count(w.iterations as u64, "iteration", "iterations"),
        bytes(w.min_size as u64),
        bytes(w.max_size as u64),
        crate::format::count(report.trials as u64, "trial", "trials")
    )?;
    let mut t = table(&[
        "row",
        "GB/s (min-max)",
        "speedup",
        "faults/iter",
        "mmap+munmap/iter",
        "user s",
        "sys s",
    ]);
    for r in &report.rows {
        t.add_row(vec![
            r.name.to_owned(),
            format!(
                "{:.2} ({:.2}-{:.2})",
                r.gbps, r.gbps_range[0], r.gbps_range[1]
            ),
            format!("{:.2}x", r.speedup),
            measured(r.faults_per_iter, "not counted", |f| format!("{f:.2}")),
            measured(r.mmaps_per_iter, "not counted", |m| format!("{m:.2}")),
            measured(r.user_s, "not measured", |s| format!("{s:.2}")),
            measured(r.sys_s, "not measured", |s| format!("{s:.2}")),
        ]);
    }
    outln!("{t}")?;
    if let Some(why) = &report.faults_note {
        outln!("page faults not counted: {why}")?;
    }
    if let Some(why) = &report.cpu_note {
        outln!("CPU times not measured: {why}")?;
    }
    if let Some(note) = &report.map_calls_note {
        outln!("{note}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts the workers of the experiment: `exe` (this binary) re-executed
/// with the hidden `bench heap-churn-worker` command, with the flags that
/// [`WorkerArgs`] parses.
fn worker_spawner(exe: PathBuf) -> impl Fn(WorkerMode, &Workload) -> Command {
    move |mode, workload| {
        let mut command = Command::new(&exe);
        command.args(worker_argv(mode, workload));
        command
    }
}

/// The arguments of one worker, after the program name.
fn worker_argv(mode: WorkerMode, w: &Workload) -> Vec<String> {
    let mut argv: Vec<String> = ["bench", "heap-churn-worker", "--mode", mode.name()]
        .map(String::from)
        .into();
    for (flag, value) in [
        ("--threads", w.threads),
        ("--min-size", w.min_size),
        ("--max-size", w.max_size),
        ("--iterations", w.iterations),
        ("--warmup", w.warmup),
    ] {
        argv.push(flag.to_owned());
        argv.push(value.to_string());
    }
    argv
}

/// Runs one worker and prints its JSON result.
pub fn worker(args: &WorkerArgs) -> anyhow::Result<ExitCode> {
    let mode = match args.mode.as_str() {
        "malloc" => WorkerMode::Malloc,
        "buffer" => WorkerMode::Buffer,
        other => {
            return Err(usage(format!(
                "unknown worker mode {other:?}: expected malloc or buffer"
            )))
        }
    };
    let result =
        heap_churn::run_worker(mode, &args.workload.workload()?).map_err(|e| anyhow!(e))?;
    outln!("{}", serde_json::to_string(&result)?)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker's command line, as the experiment builds it, parses back
    /// into the same mode and workload: the flag names are in step.
    #[test]
    fn worker_argv_parses_back_into_the_same_worker() {
        let workload = Workload {
            threads: 3,
            min_size: 4096,
            max_size: 3 << 20,
            iterations: 7,
            warmup: 2,
        };
        for mode in [WorkerMode::Malloc, WorkerMode::Buffer] {
            let argv = std::iter::once("pagewise".to_owned()).chain(worker_argv(mode, &workload));
            let cli = crate::parse(argv).unwrap();
            let crate::Command::Bench {
                experiment: crate::bench::Experiment::HeapChurnWorker(args),
            } = cli.command
            else {
                panic!("not the worker command: {cli:?}");
            };
            assert_eq!(args.mode, mode.name());
            assert_eq!(args.workload.workload().unwrap(), workload);
        }
    }
}
