//! `pagewise text …`: function ordering and hot-text footprints from profiles.

use crate::format::{table, usage};
use crate::output::{errln, outln, OutputError};
use anyhow::Context;
use pagewise::host::user_files;
use pagewise::observe::profile_sampler::{self, ProfileError};
use pagewise::observe::Target;
use pagewise::text::function_table::FunctionTable;
use pagewise::text::order::{self, OrderOptions};
use pagewise::text::profile::{locate_as_named, merge_sources, Profile, ProfileSource};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Subcommands of `pagewise text`.
#[derive(Debug, clap::Subcommand)]
pub enum TextCommand {
    /// Sample user instruction pointers with call chains (cpu-clock) into a profile.
    Profile(ProfileArgs),
    /// Compute a hot-function order (C3 call-chain clustering) for the linker.
    Order(OrderArgs),
    /// Pages of 4 KiB and 2 MiB that hold 50/90/99% of the samples, now and after an order.
    Footprint(FootprintArgs),
    /// Merge profiles (any format, from many hosts, weighted) into one pagewise profile.
    Merge(MergeArgs),
}

/// Profiles to read and merge: `FILE[:WEIGHT]` in any format pagewise reads.
#[derive(Debug, clap::Args)]
pub struct ProfileInputs {
    /// Profiles: pagewise's format, `perf script` output, perf.data, or pprof
    /// (profile.pb.gz from Parca, Pyroscope, Go); FILE:WEIGHT counts a file's samples
    /// WEIGHT times. Several are merged.
    #[arg(required = true, value_name = "FILE[:WEIGHT]")]
    profiles: Vec<String>,
    /// Scale every profile to the same total before its weight applies (hosts that
    /// sampled longer then count no more than their weight says).
    #[arg(long)]
    normalize: bool,
}

/// `pagewise text merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    #[command(flatten)]
    inputs: ProfileInputs,
    /// Where to write the merged profile (pagewise's format).
    #[arg(short, long)]
    output: PathBuf,
}

/// `pagewise text order`.
#[derive(Debug, clap::Args)]
pub struct OrderArgs {
    #[command(flatten)]
    inputs: ProfileInputs,
    /// The binary whose functions are ordered (with its symbol table).
    #[arg(long)]
    binary: PathBuf,
    /// Where to write the order file.
    #[arg(short, long)]
    output: PathBuf,
    /// Write gold's --section-ordering-file format (.text.SYMBOL) instead of
    /// ld.lld's --symbol-ordering-file (SYMBOL).
    #[arg(long)]
    gold: bool,
    /// Largest cluster in bytes (4 KiB to 1 GiB).
    #[arg(long, default_value = "2MiB", value_parser = crate::args::size_in(4 << 10, 1 << 30))]
    max_cluster: u64,
    /// Print a JSON summary (schema pagewise.text.order/1).
    #[arg(long)]
    json: bool,
}

/// `pagewise text footprint`.
#[derive(Debug, clap::Args)]
pub struct FootprintArgs {
    #[command(flatten)]
    inputs: ProfileInputs,
    /// The binary the samples are in.
    #[arg(long)]
    binary: PathBuf,
    /// An order file: also report the footprint after applying it (from symbol sizes).
    #[arg(long)]
    order: Option<PathBuf>,
    /// JSON (schema pagewise.text.footprint/1).
    #[arg(long)]
    json: bool,
}

/// Reads and merges the profiles; a pprof profile's files are looked for
/// where it names them, and `binary` stands in for any of the same file name.
/// Notes on what was read by name instead of address go to stderr.
fn merged(inputs: &ProfileInputs, binary: Option<&Path>) -> anyhow::Result<Profile> {
    let sources = inputs
        .profiles
        .iter()
        .map(|arg| ProfileSource::parse(arg).map_err(usage))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let locate = |object: &str| match binary {
        Some(b) if order::same_object(object, b) => Some(b.to_owned()),
        _ => locate_as_named(object),
    };
    let (profile, notes) = merge_sources(&sources, inputs.normalize, &locate)?;
    for note in notes {
        errln!("pagewise: {note}");
    }
    Ok(profile)
}

fn load(inputs: &ProfileInputs, binary: &Path) -> anyhow::Result<(Profile, FunctionTable)> {
    let merged = merged(inputs, Some(binary))?;
    let table = FunctionTable::read(binary)?;
    Ok((merged, table))
}

fn run_merge(args: &MergeArgs) -> anyhow::Result<ExitCode> {
    let profile = merged(&args.inputs, None)?;
    std::fs::write(&args.output, profile.to_text())
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    errln!(
        "pagewise: {} samples in {} distinct stacks from {} profiles written to {}",
        profile.total(),
        profile.stacks.len(),
        args.inputs.profiles.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct OrderSummary<'a> {
    schema: &'static str,
    output: &'a Path,
    functions: usize,
    clusters: usize,
    /// Samples whose instruction pointer is in the binary: the footprints'
    /// (and `text footprint`'s) `resolved_samples`.
    resolved_samples: u64,
    /// Samples with any frame in the binary, which the order is built from.
    call_graph_samples: u64,
    total_samples: u64,
    before: order::Footprint,
    after: order::Footprint,
}

#[derive(Serialize)]
struct FootprintReport {
    schema: &'static str,
    binary: String,
    before: order::Footprint,
    after: Option<order::Footprint>,
}

/// Runs a `text` subcommand.
pub fn run(command: &TextCommand) -> anyhow::Result<ExitCode> {
    match command {
        TextCommand::Profile(args) => run_profile(args),
        TextCommand::Order(args) => run_order(args),
        TextCommand::Footprint(args) => run_footprint(args),
        TextCommand::Merge(args) => run_merge(args),
    }
}

fn no_samples_check(resolved: u64, binary: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        resolved > 0,
        "no sample of the profile falls in {} (profiled a different binary, or a stripped one? for `perf script` output of C++ or Rust code, use `perf script --no-demangle`)",
        binary.display()
    );
    Ok(())
}

fn run_order(args: &OrderArgs) -> anyhow::Result<ExitCode> {
    let (profile, table) = load(&args.inputs, &args.binary)?;
    let options = OrderOptions {
        max_cluster_bytes: args.max_cluster,
        ..OrderOptions::default()
    };
    let computed = order::c3(&profile, &table, &args.binary, &options);
    no_samples_check(computed.call_graph_samples, &args.binary)?;
    user_files::write_output(
        &args.output,
        order::order_file(&computed, args.gold).as_bytes(),
    )
    .with_context(|| format!("cannot write {}", args.output.display()))?;
    let before = order::footprint(&profile, &table, &args.binary, None);
    let after = order::footprint(&profile, &table, &args.binary, Some(&computed.functions));
    if args.json {
        let summary = OrderSummary {
            schema: "pagewise.text.order/1",
            output: &args.output,
            functions: computed.functions.len(),
            clusters: computed.clusters,
            resolved_samples: before.resolved_samples,
            call_graph_samples: computed.call_graph_samples,
            total_samples: computed.total_samples,
            before,
            after,
        };
        outln!("{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        // The stacks with the binary below another object's code (libc
        // called from it) count for the order, not for the footprints.
        let called_out = computed
            .call_graph_samples
            .saturating_sub(before.resolved_samples);
        outln!(
            "wrote {} hot functions in {} clusters to {} ({} of {} samples ran in {}{})",
            computed.functions.len(),
            computed.clusters,
            args.output.display(),
            before.resolved_samples,
            computed.total_samples,
            args.binary.display(),
            match called_out {
                0 => String::new(),
                n => format!(
                    "; {n} more ran in other objects called from it, and count for the order"
                ),
            }
        )?;
        print_footprints(&before, Some(&after))?;
        outln!(
            "link with -ffunction-sections and {} {}",
            if args.gold {
                "gold's --section-ordering-file"
            } else {
                "ld.lld --symbol-ordering-file"
            },
            args.output.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_footprints(
    before: &order::Footprint,
    after: Option<&order::Footprint>,
) -> Result<(), OutputError> {
    let mut t = table(&["layout", "4 KiB pages 50/90/99%", "2 MiB pages 50/90/99%"]);
    let row = |f: &order::Footprint| {
        vec![
            format!("{}/{}/{}", f.pages_4k.p50, f.pages_4k.p90, f.pages_4k.p99),
            format!("{}/{}/{}", f.pages_2m.p50, f.pages_2m.p90, f.pages_2m.p99),
        ]
    };
    let mut first = vec!["as built".to_owned()];
    first.extend(row(before));
    t.add_row(first);
    if let Some(after) = after {
        let mut second = vec!["ordered".to_owned()];
        second.extend(row(after));
        t.add_row(second);
    }
    outln!("{t}")
}

fn run_footprint(args: &FootprintArgs) -> anyhow::Result<ExitCode> {
    let (profile, table) = load(&args.inputs, &args.binary)?;
    let before = order::footprint(&profile, &table, &args.binary, None);
    no_samples_check(before.resolved_samples, &args.binary)?;
    let after = match &args.order {
        Some(path) => {
            let text = user_files::read_input_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Some(order::footprint(
                &profile,
                &table,
                &args.binary,
                Some(&order::read_order_file(&text)),
            ))
        }
        None => None,
    };
    if args.json {
        let report = FootprintReport {
            schema: "pagewise.text.footprint/1",
            binary: args.binary.display().to_string(),
            before,
            after,
        };
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        outln!(
            "{} samples ran in {}",
            before.resolved_samples,
            args.binary.display()
        )?;
        print_footprints(&before, after.as_ref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `pagewise text profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// Where to write the profile.
    #[arg(short, long, default_value = "pagewise.profile")]
    output: PathBuf,
    /// Samples per second of CPU time per thread.
    #[arg(long, default_value_t = 999, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    frequency: u64,
    /// Profile this running process instead of starting a command.
    #[arg(long, conflicts_with = "command", value_parser = clap::value_parser!(i32).range(1..))]
    pid: Option<i32>,
    /// With --pid: how long to sample, in seconds (default 10, at most a day).
    #[arg(long, requires = "pid",
          value_parser = crate::args::seconds_up_to(crate::args::MAX_WINDOW_SECONDS))]
    seconds: Option<f64>,
    /// The command to start and profile, after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    command: Vec<OsString>,
}

/// Says why the command or process could not be profiled, in one line, and
/// gives the status for it (127 not found, 126 not executable, else 1).
fn target_failed(e: &pagewise::observe::TargetError) -> ExitCode {
    errln!("pagewise: {e}");
    ExitCode::from(e.exit_code().clamp(1, 255) as u8)
}

/// Samples a command or a process into a profile file; exits with the command's status.
pub fn run_profile(args: &ProfileArgs) -> anyhow::Result<ExitCode> {
    if args.pid.is_none() && args.seconds.is_some() {
        return Err(crate::format::usage(crate::stat::SECONDS_WITHOUT_PID));
    }
    let seconds = crate::args::window_seconds(args.seconds);
    // A pid that is not there (or not this user's to watch) is said first,
    // before the output file is made (an existing one is left as it is) or
    // "sampling process …" is printed.
    if let Some(pid) = args.pid {
        if let Err(e) = pagewise::observe::target::attach_tasks(pid) {
            return Ok(target_failed(&e));
        }
    }
    let target = match args.pid {
        Some(pid) => Target::Pid {
            pid,
            duration: std::time::Duration::from_secs_f64(seconds),
        },
        None => Target::Command(args.command.clone()),
    };
    // Made before anything runs: a bad path is an error now, not after the run.
    let mut output = crate::output::open_output(&args.output)?;
    if matches!(target, Target::Pid { .. }) {
        errln!(
            "pagewise: sampling process {} for {} s",
            args.pid.unwrap_or(0),
            seconds
        );
    }
    let sampled = match profile_sampler::sample_profile(&target, 1_000_000_000 / args.frequency) {
        Ok(s) => s,
        Err(ProfileError::Target(e)) => return Ok(target_failed(&e)),
        Err(e) => return Err(e.into()),
    };
    std::io::Write::write_all(&mut output, sampled.profile.to_text().as_bytes())
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    errln!(
        "pagewise: {} samples in {} distinct stacks written to {}{}",
        sampled.profile.total(),
        sampled.profile.stacks.len(),
        args.output.display(),
        if sampled.lost > 0 {
            format!(" ({} samples lost: lower --frequency)", sampled.lost)
        } else {
            String::new()
        }
    );
    Ok(match sampled.exit {
        Some(pagewise::os::process::ExitKind::Exited(code)) => {
            ExitCode::from(code.clamp(0, 255) as u8)
        }
        Some(pagewise::os::process::ExitKind::Signaled { signal, .. }) => {
            errln!("pagewise: the command was killed by signal {signal}");
            ExitCode::from((128 + signal).clamp(0, 255) as u8)
        }
        None => ExitCode::SUCCESS,
    })
}
