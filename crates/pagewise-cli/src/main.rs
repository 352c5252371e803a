//! The `pagewise` command: a thin layer that parses arguments, calls the
//! `pagewise` library and prints tables or JSON.

#![forbid(unsafe_code)]

mod bench;
mod doctor;
mod format;
mod plot;
mod preload;
mod progress;
mod queue;
mod run;
mod stat;
mod text;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Make Linux programs fast on the memory path: page faults, TLB misses and copying.
#[derive(Debug, Parser)]
#[command(name = "pagewise", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What this machine offers for memory-path performance, and what to change.
    Doctor(doctor::DoctorArgs),
    /// Run an unmodified program with memory-path fixes applied (`-- CMD ARGS`).
    Run(run::RunArgs),
    /// Hot text: function ordering and footprints from profiles.
    Text {
        #[command(subcommand)]
        command: text::TextCommand,
    },
    /// Run a command (or watch a process) and explain its memory-path cost:
    /// faults by kind and site, mmap churn, page sizes, hot text, findings.
    Stat(stat::StatArgs),
    /// Rerun a claim side by side with its baseline, as ratios, on this machine.
    Bench {
        #[command(subcommand)]
        experiment: bench::Experiment,
    },
    /// A persistent single-writer, many-reader queue file: inspect, tail, append.
    Queue {
        #[command(subcommand)]
        command: queue::QueueCommand,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return format::usage_error(err),
    };
    let result = match cli.command {
        Command::Doctor(args) => doctor::run(&args),
        Command::Stat(args) => stat::run(&args),
        Command::Bench { experiment } => bench::run(&experiment),
        Command::Queue { command } => queue::run(&command),
        Command::Run(args) => run::run(&args),
        Command::Text { command } => text::run(&command),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("pagewise: {}", format::one_line(&err));
            ExitCode::FAILURE
        }
    }
}
