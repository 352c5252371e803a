//! `pagewise run`: start an unmodified program with memory-path fixes applied.

use crate::format::bytes;
use anyhow::{bail, Context};
use pagewise::launch::{self, keep_heap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `pagewise run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = RUN_HELP)]
pub struct RunArgs {
    /// Move the 2 MiB-aligned part of the program's text onto huge pages before main
    /// (hugetlb when a pool has room, else THP). `--huge-text=hot:PROFILE` moves only
    /// the 2 MiB pages holding the profile's hot code. Children inherit it.
    #[arg(long, value_name = "all|hot:PROFILE", num_args = 0..=1, require_equals = true, default_missing_value = "all")]
    pub(crate) huge_text: Option<String>,
    /// With --huge-text: also move this shared library's text (file name or prefix,
    /// e.g. libc.so.6, libpython); repeatable.
    #[arg(long, value_name = "NAME")]
    huge_text_lib: Vec<String>,
    /// Keep freed memory in glibc's heap instead of unmapping it (see below for the trade-off).
    #[arg(long)]
    keep_heap: bool,
    /// With --keep-heap: extra heap taken at each growth, about the largest block the
    /// program allocates repeatedly (glibc.malloc.top_pad).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = crate::format::parse_size_arg)]
    keep_heap_pad: u64,
    /// Print what was set up, on stderr: the tunables before the program starts, and one
    /// line per text range from each process (set PAGEWISE_REPORT=FILE for JSON).
    #[arg(long)]
    report: bool,
    /// The program and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

const RUN_HELP: &str = "\
--huge-text: a preloaded library (libpagewise_preload.so, next to the pagewise binary)
copies the 2 MiB-aligned part of the executable's text onto huge pages, makes it
executable and moves it over the original with one mremap, before main and before any
other thread exists; any failure leaves the original text in place. It writes
/tmp/perf-PID.map so profilers can still name the moved code. Children started by the
program (e.g. a compiler driver's back end) are handled too. PAGEWISE_REPORT=FILE
writes a JSON report (schema pagewise.run/1; a child's goes to FILE.PID).

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
    if !args.keep_heap && args.huge_text.is_none() {
        bail!("nothing to apply: choose a fix such as --keep-heap or --huge-text (see 'pagewise run --help')");
    }
    if !args.huge_text_lib.is_empty() && args.huge_text.is_none() {
        bail!("--huge-text-lib needs --huge-text");
    }
    let program = &args.command[0];
    let path = match launch::resolve_program(program.as_ref()) {
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

    if args.keep_heap {
        apply_keep_heap(&mut command, &path, args)?;
    }
    if let Some(mode) = &args.huge_text {
        let inspected = launch::require_glibc(
            &path,
            "--huge-text works through LD_PRELOAD of a glibc library and",
            "call pagewise::text::huge::remap_text early in the program instead",
        )?;
        refuse_setid(&inspected)?;
        apply_huge_text(&mut command, mode, args)?;
    }
    let error = command.exec();
    Err(error).with_context(|| format!("cannot start {program}"))
}

fn apply_keep_heap(
    command: &mut std::process::Command,
    path: &Path,
    args: &RunArgs,
) -> anyhow::Result<()> {
    let inspected = launch::require_glibc(
        path,
        "--keep-heap works through glibc's malloc tunables and",
        "use pagewise::buffer in the program instead",
    )?;
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
    Ok(())
}

/// Set-user-ID and set-group-ID programs run in secure mode, where the loader
/// ignores `LD_PRELOAD` from another directory: say so instead of doing nothing.
fn refuse_setid(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .permissions()
        .mode();
    anyhow::ensure!(
        mode & 0o6000 == 0,
        "{} is set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it, so --huge-text cannot apply",
        path.display()
    );
    Ok(())
}

/// Where the preload library is: `PAGEWISE_PRELOAD`, else next to this binary.
fn preload_library() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PAGEWISE_PRELOAD") {
        let path = PathBuf::from(path);
        anyhow::ensure!(
            path.is_file(),
            "PAGEWISE_PRELOAD={} is not a file",
            path.display()
        );
        return Ok(path);
    }
    let exe = std::env::current_exe().context("cannot find the pagewise binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let path = dir.join("libpagewise_preload.so");
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: build it with `cargo build --release --workspace` (or point PAGEWISE_PRELOAD at it)",
        path.display()
    );
    Ok(path)
}

fn apply_huge_text(
    command: &mut std::process::Command,
    mode: &str,
    args: &RunArgs,
) -> anyhow::Result<()> {
    let mode = match mode {
        "all" => "all".to_owned(),
        other => {
            let profile = other.strip_prefix("hot:").ok_or_else(|| {
                anyhow::anyhow!("--huge-text={other}: expected all or hot:PROFILE")
            })?;
            let profile = std::fs::canonicalize(profile)
                .with_context(|| format!("--huge-text=hot:{profile}"))?;
            // Fail here, in one line, rather than in the program's constructor.
            pagewise::text::hot_pages_from_profile(&profile).map_err(|e| anyhow::anyhow!(e))?;
            format!("hot:{}", profile.display())
        }
    };
    let library = preload_library()?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.trim().is_empty() => format!("{}:{existing}", library.display()),
        _ => library.display().to_string(),
    };
    command
        .env("LD_PRELOAD", &preload)
        .env("PAGEWISE_HUGE_TEXT", &mode)
        .env("PAGEWISE_HUGE_TEXT_LIBS", args.huge_text_lib.join(","))
        .env("PAGEWISE_TOP_PID", std::process::id().to_string());
    if args.report {
        command.env("PAGEWISE_REPORT_STDERR", "1");
        eprintln!("pagewise run: huge text ({mode}) through LD_PRELOAD={preload}");
    }
    Ok(())
}
