//! `pagewise run`: start an unmodified program with memory-path fixes applied.

use crate::format::bytes;
use anyhow::{bail, Context};
use pagewise::launch::{self, keep_heap, Linkage};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// Arguments of `pagewise run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = KEEP_HEAP_HELP)]
pub struct RunArgs {
    /// Keep freed memory in glibc's heap instead of unmapping it (see below for the trade-off).
    #[arg(long)]
    keep_heap: bool,
    /// With --keep-heap: extra heap taken at each growth, about the largest block the
    /// program allocates repeatedly (glibc.malloc.top_pad).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = crate::format::parse_size_arg)]
    keep_heap_pad: u64,
    /// Print what was set up, on stderr, before the program starts.
    #[arg(long)]
    report: bool,
    /// The program and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

const KEEP_HEAP_HELP: &str = "\
--keep-heap: glibc serves blocks above its mmap threshold (adaptive, at most 32 MiB) with
a fresh mmap that the kernel must fault in and zero page by page, and unmaps them on free.
A program that repeatedly allocates, fills and frees large buffers spends most of its time
in the kernel. --keep-heap sets GLIBC_TUNABLES so freed blocks stay in the heap:
mmap_threshold=32MiB (glibc's maximum), mmap_max=0 (larger blocks come from the heap too),
trim_threshold=256GiB (the heap is never given back) and top_pad=--keep-heap-pad.
Trade-off: the process keeps its peak heap resident until it exits (plus fragmentation),
so its RSS no longer falls after a burst. Settings already in GLIBC_TUNABLES are kept.
Programs not dynamically linked against glibc (musl, static) are refused: the tunables
would change nothing. The program's exit status is pagewise's exit status.";

/// Sets up the environment and replaces this process with the program.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    if !args.keep_heap {
        bail!("nothing to apply: choose a fix such as --keep-heap (see 'pagewise run --help')");
    }
    let program = &args.command[0];
    let path = match launch::resolve_program(program) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("pagewise: {e}");
            return Ok(ExitCode::from(127));
        }
    };
    let mut command = std::process::Command::new(&path);
    command.args(&args.command[1..]);
    // argv[0] as the user typed it, like a shell.
    command.arg0(program);

    let (inspected, linkage) = launch::inspect_program(&path)?;
    match linkage {
        Linkage::Glibc { .. } => {}
        Linkage::Musl { .. } => {
            return Err(launch::LaunchError::NotGlibc {
                path: inspected,
                what: "linked against musl".into(),
            }
            .into())
        }
        Linkage::Static => {
            return Err(launch::LaunchError::NotGlibc {
                path: inspected,
                what: "statically linked".into(),
            }
            .into())
        }
        Linkage::Other { interpreter } => {
            return Err(launch::LaunchError::NotGlibc {
                path: inspected,
                what: format!("linked with an unknown loader ({interpreter})"),
            }
            .into())
        }
    }
    let existing = std::env::var("GLIBC_TUNABLES").ok();
    let (value, decided) = keep_heap::glibc_tunables_env(existing.as_deref(), args.keep_heap_pad);
    command.env("GLIBC_TUNABLES", &value);
    if args.report {
        eprintln!("pagewise run: keep-heap for {}", inspected.display());
        for t in &decided {
            let shown = if t.name.ends_with("mmap_max") {
                t.value.to_string()
            } else {
                bytes(t.value)
            };
            let note = if t.kept_user_value {
                " (kept your GLIBC_TUNABLES value instead)"
            } else {
                ""
            };
            eprintln!("pagewise run:   {} = {shown}{note}", t.name);
        }
        eprintln!("pagewise run: GLIBC_TUNABLES={value}");
    }
    let error = command.exec();
    Err(error).with_context(|| format!("cannot start {program}"))
}
