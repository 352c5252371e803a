//! `pagewise bench <experiment>`: reruns each claim side by side with its baseline.

mod copy;
mod first_touch;
mod heap_churn;
mod itlb;
mod mmap_prefault;
mod queue;
mod run;

use crate::output::{outln, OutputError};
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
    // Used by the bench experiments that are being written on another branch.
    pub fn progress(&self) -> StderrProgress {
        StderrProgress::new(self.quiet)
    }
}

/// Prints the `machine:` line that heads every experiment's table: the
/// processor, instruction sets, caches, CPUs, kernel, THP mode and glibc the
/// results were measured on (the same as the JSON's `machine` object).
pub fn print_machine(machine: &pagewise_bench::Machine) -> Result<(), OutputError> {
    outln!("machine: {}", machine.summary())
}

/// The experiments.
#[derive(Debug, clap::Subcommand)]
pub enum Experiment {
    /// Allocate, write three times: what the first touch costs per allocation strategy.
    FirstTouch(crate::bench::first_touch::FirstTouchArgs),
    /// Write through a shared file mapping: what each way of prefaulting costs.
    MmapPrefault(crate::bench::mmap_prefault::MmapPrefaultArgs),
    /// pagewise::queue between two processes: throughput, latency, faults.
    Queue(crate::bench::queue::QueueArgs),
    /// One side of `bench queue` (internal).
    #[command(hide = true)]
    QueueChild(crate::bench::queue::ChildArgs),
    /// One side of `bench queue --rtt` (internal).
    #[command(hide = true)]
    QueueRttChild(crate::bench::queue::RttChildArgs),
    /// Threads that malloc, fill and free large buffers: glibc vs keep-heap vs Buffer.
    HeapChurn(crate::bench::heap_churn::HeapChurnArgs),
    /// A large-text program: baseline vs huge text vs function order vs both.
    Itlb(crate::bench::itlb::ItlbArgs),
    /// One heap-churn worker process (internal).
    #[command(hide = true)]
    HeapChurnWorker(crate::bench::heap_churn::WorkerArgs),
    /// pagewise::copy::copy against glibc memcpy: fixed sizes hot and cold,
    /// aligned and misaligned, and a real size distribution.
    Memcpy(crate::bench::copy::CopyArgs),
    /// pagewise::copy::fill against glibc memset: fixed sizes hot and cold,
    /// aligned and misaligned, and a real size distribution.
    Memset(crate::bench::copy::CopyArgs),
    /// Your own command with and without a fix (`-- CMD ARGS`), in randomised pairs:
    /// did the fix help, hurt, or stay within noise?
    Run(crate::bench::run::BenchRunArgs),
}

/// Runs one experiment.
pub fn run(experiment: &Experiment) -> anyhow::Result<ExitCode> {
    use pagewise_bench::memcpy::Op;
    match experiment {
        Experiment::FirstTouch(args) => crate::bench::first_touch::run(args),
        Experiment::MmapPrefault(args) => crate::bench::mmap_prefault::run(args),
        Experiment::Queue(args) => crate::bench::queue::run(args),
        Experiment::QueueChild(args) => crate::bench::queue::child(args),
        Experiment::QueueRttChild(args) => crate::bench::queue::rtt_child(args),
        Experiment::HeapChurn(args) => crate::bench::heap_churn::run(args),
        Experiment::Itlb(args) => crate::bench::itlb::run(args),
        Experiment::HeapChurnWorker(args) => crate::bench::heap_churn::worker(args),
        Experiment::Memcpy(args) => crate::bench::copy::run(Op::Memcpy, args),
        Experiment::Memset(args) => crate::bench::copy::run(Op::Memset, args),
        Experiment::Run(args) => crate::bench::run::run(args),
    }
}
