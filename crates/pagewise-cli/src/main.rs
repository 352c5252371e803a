//! The `pagewise` command: a thin layer that parses arguments, calls the
//! `pagewise` library and prints tables or JSON.

#![forbid(unsafe_code)]
// Output goes through output::outln!/errln!, which cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

mod args;
mod bench;
mod doctor;
mod format;
mod output;
mod plot;
mod preload;
mod progress;
mod queue;
mod run;
mod stat;
mod text;
mod tune;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;

/// Make Linux programs fast on the memory path: page faults, TLB misses and copying.
#[derive(Debug, clap::Parser)]
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
    /// Measure which copy and fill kernels are fastest on this machine and
    /// cache the plan (later processes load it).
    Tune(tune::TuneArgs),
    /// A persistent single-writer, many-reader queue file: inspect, tail, append.
    Queue {
        #[command(subcommand)]
        command: queue::QueueCommand,
    },
}

/// Lets every option that takes a value, in `cmd` and its subcommands, take
/// a negative number as that value (`-n -1`), so that the option's own
/// value parser refuses it with its range (one usage line, as for `-n=-1`)
/// instead of clap calling it an unexpected argument. Only what reads as a
/// number: a flag after an option is still a flag.
fn negative_numbers(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        if arg.get_action().takes_values() && !arg.is_positional() {
            arg.allow_negative_numbers(true)
        } else {
            arg
        }
    })
    .mut_subcommands(negative_numbers)
}

/// Parses a command line (`args[0]` is the program) as `pagewise` does.
fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut matches = negative_numbers(Cli::command()).try_get_matches_from(args)?;
    Cli::from_arg_matches_mut(&mut matches)
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(err) => {
            let command = format::subcommand_of(&Cli::command(), args.get(1..).unwrap_or(&[]));
            return format::usage_error(err, &command);
        }
    };
    let result = match cli.command {
        Command::Doctor(args) => doctor::run(&args),
        Command::Stat(args) => stat::run(&args),
        Command::Bench { experiment } => bench::run(&experiment),
        Command::Queue { command } => queue::run(&command),
        Command::Run(args) => run::run(&args),
        Command::Text { command } => text::run(&command),
        Command::Tune(args) => tune::run(&args),
    };
    let flushed = output::flush_out();
    match (result, flushed) {
        (Err(err), _) => match err
            .chain()
            .find_map(|e| e.downcast_ref::<output::OutputError>())
        {
            Some(out) => output::exit_status(out),
            None => {
                output::errln!("pagewise: {}", format::one_line(&err));
                match err.chain().any(|e| e.is::<format::UsageError>()) {
                    true => ExitCode::from(format::USAGE_STATUS),
                    false => ExitCode::FAILURE,
                }
            }
        },
        (Ok(_), Err(out)) => output::exit_status(&out),
        (Ok(code), Ok(())) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Cli};
    use clap::CommandFactory;

    /// Options whose values are text or paths, not numbers.
    const TEXT_OPTIONS: &[&str] = &[
        "binary",
        "c-library",
        "copy",
        "dir",
        "disk-dir",
        "flame",
        "fleet-file",
        "fix",
        "huge-text",
        "huge-text-lib",
        "mode",
        "only",
        "order",
        "output",
        "plot",
        "spec",
        "tmpfs-dir",
        "variant",
        "work-dir",
    ];
    /// Options that take a byte size (bounded, some above 4 GiB).
    const SIZE_OPTIONS: &[&str] = &[
        "chunk-size",
        "keep-heap-pad",
        "max-bytes",
        "max-cluster",
        "max-size",
        "max-window",
        "min-size",
        "padding",
        "record",
        "size",
        "sizes",
        "window",
    ];
    /// Numeric options where every value of the type is valid.
    const UNBOUNDED: &[(&str, &str)] = &[("seed", "every 64-bit number is a seed")];

    /// Every subcommand that runs something, with its path of names.
    fn leaves(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
        if !cmd.has_subcommands() {
            out.push((path, cmd.clone()));
            return;
        }
        for sub in cmd.get_subcommands() {
            let mut p = path.clone();
            p.push(sub.get_name().to_owned());
            leaves(sub, p, out);
        }
    }

    /// Each option that takes a number refuses a value out of its range as
    /// it is parsed (a usage error naming the option, exit status 2), so no
    /// huge, negative or non-finite number reaches a command; a count, rate
    /// or time above 2^32 − 1 neither. A negative number is the option's
    /// value also when given apart (`--pairs -1`), refused by its parser,
    /// not taken for an unknown option. A new numeric option without bounds
    /// fails here.
    #[test]
    fn every_numeric_option_refuses_huge_negative_and_non_finite_values() {
        let mut all = Vec::new();
        leaves(&Cli::command(), vec![], &mut all);
        let mut checked = 0;
        for (path, cmd) in &all {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else {
                    continue;
                };
                if arg.is_positional()
                    || !arg.get_action().takes_values()
                    || TEXT_OPTIONS.contains(&long)
                    || UNBOUNDED.iter().any(|(name, _)| *name == long)
                {
                    continue;
                }
                let huge_count = (!SIZE_OPTIONS.contains(&long)).then_some("4294967295");
                let values = ["18446744073709551615", "-1", "1e30", "NaN", "inf", ""];
                let joined = values
                    .into_iter()
                    .chain(huge_count)
                    .map(|bad| vec![format!("--{long}={bad}")]);
                let apart = ["-1", "-2.5", "-1e3"].map(|bad| vec![format!("--{long}"), bad.into()]);
                for given in joined.chain(apart) {
                    let argv = std::iter::once("pagewise".to_owned())
                        .chain(path.iter().cloned())
                        .chain(given.iter().cloned());
                    let kind = parse(argv).map(|_| ()).map_err(|e| e.kind());
                    assert!(
                        matches!(
                            kind,
                            Err(clap::error::ErrorKind::ValueValidation
                                | clap::error::ErrorKind::InvalidValue)
                        ),
                        "pagewise {} {}: {kind:?}, not a refused value",
                        path.join(" "),
                        given.join(" ")
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} numeric options found");
    }
}
