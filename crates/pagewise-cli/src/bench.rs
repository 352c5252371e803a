//! `pagewise bench <experiment>`: reruns each claim side by side with its baseline.

use crate::progress::StderrProgress;
use std::process::ExitCode;

/// Options every experiment takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Trials per row; medians and min–max are taken over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub trials: u32,
    /// Print JSON (schema `pagewise.bench.<experiment>/1`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

impl CommonArgs {
    /// The progress display these options ask for.
    pub fn progress(&self) -> StderrProgress {
        StderrProgress::new(self.quiet)
    }
}

/// The experiments.
#[derive(Debug, clap::Subcommand)]
pub enum Experiment {
    /// Allocate, write three times: what the first touch costs per allocation strategy.
    FirstTouch(crate::bench_first_touch::FirstTouchArgs),
    /// Write through a shared file mapping: what each way of prefaulting costs.
    MmapPrefault(crate::bench_mmap_prefault::MmapPrefaultArgs),
    /// pagewise::queue between two processes: throughput, latency, faults.
    Queue(crate::bench_queue::QueueArgs),
    /// One side of `bench queue` (internal).
    #[command(hide = true)]
    QueueChild(crate::bench_queue::ChildArgs),
    /// Threads that malloc, fill and free large buffers: glibc vs keep-heap vs Buffer.
    HeapChurn(crate::bench_heap_churn::HeapChurnArgs),
    /// One heap-churn worker process (internal).
    #[command(hide = true)]
    HeapChurnWorker(crate::bench_heap_churn::WorkerArgs),
}

/// Runs one experiment.
pub fn run(experiment: &Experiment) -> anyhow::Result<ExitCode> {
    match experiment {
        Experiment::FirstTouch(args) => crate::bench_first_touch::run(args),
        Experiment::MmapPrefault(args) => crate::bench_mmap_prefault::run(args),
        Experiment::Queue(args) => crate::bench_queue::run(args),
        Experiment::QueueChild(args) => crate::bench_queue::child(args),
        Experiment::HeapChurn(args) => crate::bench_heap_churn::run(args),
        Experiment::HeapChurnWorker(args) => crate::bench_heap_churn::worker(args),
    }
}
