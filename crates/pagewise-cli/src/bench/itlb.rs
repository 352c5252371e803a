//! `pagewise bench itlb`: printing for the iTLB experiment.

use crate::bench::CommonArgs;
use crate::format::{bytes, table, usage_unless};
use crate::output::outln;
use anyhow::{anyhow, Context};
use pagewise::observe::{profile_sampler, Target};
use pagewise::text::profile::Profile;
use pagewise_bench::itlb::{self, Config, Shape};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Generate a large-text program; time baseline, huge-text, ordered and ordered+huge-text.
#[derive(Debug, clap::Args)]
pub struct ItlbArgs {
    /// Leaf functions in the generated program.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(16..=65536))]
    functions: u32,
    /// Filler after each leaf function (total text is about functions x padding,
    /// at most 1 GiB).
    #[arg(long, default_value = "8KiB", value_parser = crate::args::size_in(0, 1 << 20))]
    padding: u64,
    /// Zipf exponent of the call frequencies (0 to 10).
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::number_in(0.0, 10.0))]
    zipf: f64,
    /// Rounds of the driver loop per timed run.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    rounds: u64,
    /// Seed of the generated program.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Folder for the source, builds, profiles and order file, created if
    /// missing (its parent must exist) [default: a temporary folder].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

fn profile_with_pagewise(program: &Path, args: &[String]) -> Result<Profile, String> {
    let mut argv = vec![program.as_os_str().to_owned()];
    argv.extend(args.iter().map(OsString::from));
    // 10 kHz: enough samples from a run of a second or two.
    let sampled = profile_sampler::sample_profile(&Target::Command(argv), 100_000)
        .map_err(|e| e.to_string())?;
    Ok(sampled.profile)
}

/// Runs a program with huge text for the experiment: `exe` (this binary)
/// with `run --huge-text --`, the report in `PAGEWISE_REPORT` and no perf
/// map file (`PAGEWISE_PERF_MAP=0`), the preload library's settings.
fn huge_text_runner(exe: PathBuf) -> impl Fn(&Path, &[String], &Path) -> Command {
    move |program, args, report| {
        let mut command = Command::new(&exe);
        command.args(huge_text_argv(program, args));
        command
            .env("PAGEWISE_REPORT", report)
            .env("PAGEWISE_PERF_MAP", "0");
        command
    }
}

/// The arguments of `pagewise run --huge-text -- PROGRAM ARGS`, after the
/// program name.
fn huge_text_argv(program: &Path, args: &[String]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = ["run", "--huge-text", "--"].map(OsString::from).into();
    argv.push(program.into());
    argv.extend(args.iter().map(OsString::from));
    argv
}

/// Runs the experiment and prints it.
pub fn run(args: &ItlbArgs) -> anyhow::Result<ExitCode> {
    // The generated program is linked with the small code model: text must stay well below 2 GiB.
    let text = u64::from(args.functions) * args.padding;
    usage_unless(text <= 1 << 30, || {
        format!(
            "--functions x --padding must be at most 1 GiB of text, not {}",
            bytes(text)
        )
    })?;
    // A fresh private folder (the benchmark compiles and runs programs from it).
    // The temporary folder (if any) is removed when `_temp` drops at the end.
    let (work_dir, _temp) = match &args.work_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::tempdir().context("cannot create a temporary folder")?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let config = Config {
        shape: Shape {
            functions: args.functions as usize,
            padding: usize::try_from(args.padding)?,
            zipf: args.zipf,
            ..Shape::default()
        }
        .with_seed(args.seed),
        rounds: args.rounds,
        profile_rounds: args.rounds,
        trials: args.common.trials as usize,
        work_dir: work_dir.clone(),
    };
    let exe = std::env::current_exe().context("cannot find the pagewise binary")?;
    let huge_text = huge_text_runner(exe);
    let report = itlb::run(
        &config,
        &profile_with_pagewise,
        &huge_text,
        &args.common.progress(),
    )
    .map_err(|e| anyhow!(e))?;
    if args.common.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::bench::print_machine(&report.machine)?;
    outln!(
        "itlb: {} functions over {} of text, Zipf {}, {}, {}, medians (min-max)",
        report.shape.functions,
        bytes(report.text_bytes),
        report.shape.zipf,
        crate::format::count(report.rounds as u64, "round", "rounds"),
        crate::format::count(report.trials as u64, "trial", "trials")
    )?;
    let mut t = table(&[
        "variant",
        "loop s",
        "speedup",
        "4 KiB pages @99%",
        "2 MiB pages @99%",
    ]);
    for r in &report.rows {
        t.add_row(vec![
            r.name.to_owned(),
            format!(
                "{:.3} ({:.3}-{:.3})",
                r.median_s, r.range_s[0], r.range_s[1]
            ),
            format!("{:.2}x", r.speedup),
            r.footprint_4k_p99.to_string(),
            r.footprint_2m_p99.to_string(),
        ]);
    }
    outln!("{t}")?;
    outln!(
        "order: {} hot functions (C3); predicted 4 KiB pages @99% after ordering, from symbol sizes: {}",
        report.ordered_functions, report.predicted_ordered_footprint_4k_p99
    )?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The huge-text command line, as the experiment builds it, parses back
    /// into `pagewise run --huge-text` of the same program and arguments.
    #[test]
    fn huge_text_argv_parses_back_into_run_huge_text() {
        let args = ["100".to_owned()];
        let argv = std::iter::once(OsString::from("pagewise"))
            .chain(huge_text_argv(Path::new("/tmp/itlb-baseline"), &args));
        let cli = crate::parse(argv).unwrap();
        let crate::Command::Run(run) = cli.command else {
            panic!("not the run command: {cli:?}");
        };
        assert_eq!(run.huge_text.as_deref(), Some("all"), "{run:?}");
        assert_eq!(run.command, ["/tmp/itlb-baseline", "100"]);
    }
}
