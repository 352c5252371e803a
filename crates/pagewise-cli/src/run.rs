//! `pagewise run`: start an unmodified program with memory-path fixes applied.

use crate::format::{bytes, usage};
use crate::output::errln;
use crate::preload;
use anyhow::Context;
use pagewise::host::user_cache::{self, Purpose};
use pagewise::launch::huge_text::{self, ReportDir};
use pagewise::launch::keep_heap::{self, HeapTunables};
use pagewise::launch::{self, thp_heap, LaunchError};
use pagewise::text::hot_cache::{self, HotSource};
use pagewise::text::huge::{PerfMaps, RunReport};
use pagewise::text::perfmap::PerfMapWriter;
use std::ffi::OsString;
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
    #[arg(long, value_name = "all|hot:PROFILE", num_args = 0..=1, require_equals = true,
          default_missing_value = "all", value_parser = huge_text_mode)]
    pub(crate) huge_text: Option<String>,
    /// With --huge-text: also move this shared library's text (file name or prefix,
    /// e.g. libc.so.6, libpython); repeatable.
    #[arg(long, value_name = "NAME", value_parser = library_name)]
    huge_text_lib: Vec<String>,
    /// Keep freed memory in glibc's heap instead of unmapping it (see below for the trade-off).
    #[arg(long)]
    pub(crate) keep_heap: bool,
    /// With --keep-heap: extra heap taken at each growth, about the largest block the
    /// program allocates repeatedly (glibc.malloc.top_pad), at most 1 GiB.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = crate::args::size_in(0, keep_heap::MAX_TOP_PAD))]
    keep_heap_pad: u64,
    /// Put glibc's heap on transparent huge pages (glibc.malloc.hugetlb=1): fewer page
    /// faults for programs that write a lot of heap memory (see below for the trade-off).
    #[arg(long)]
    pub(crate) thp_heap: bool,
    /// Print what was set up, on stderr: the tunables before the program starts, and one
    /// line per text range of each process, printed by pagewise as the process's report
    /// arrives, never into the program's own stderr (set PAGEWISE_REPORT=FILE for JSON).
    #[arg(long)]
    report: bool,
    /// The program and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

const RUN_HELP: &str = "\
--huge-text: a preloaded library copies the 2 MiB-aligned part of the executable's text
onto huge pages, makes it executable and moves it over the original with one mremap,
before main and before any other thread exists; any failure leaves the original text
in place. The library is carried inside this binary and written on first use to a
private cache ($XDG_CACHE_HOME/pagewise, else ~/.cache/pagewise, else $TMPDIR/pagewise-UID,
the first that is safe; every pagewise cache uses the same directory);
PAGEWISE_PRELOAD=FILE uses another. Children started by the program (e.g. a compiler
driver's back end) are handled too. pagewise stays as the program's parent: it writes
/tmp/perf-PID.map for each process that moved text (so profilers can name the moved
code), passes SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1 and SIGUSR2 on (not those the
terminal sends the whole process group, such as Ctrl-C), and exits with the program's
status. PAGEWISE_REPORT=FILE writes a JSON report (schema pagewise.run/1: the started
program's, with every process's under \"processes\"); PAGEWISE_PERF_MAP=0 writes no maps.
The processes write their reports into a private directory and never into the program's
stdout or stderr (a parent that captures a child's stderr gets only the child's own):
--report's lines are printed by pagewise, on its stderr, as each report arrives.

--keep-heap: glibc serves blocks above its mmap threshold (adaptive, at most 32 MiB) with
a fresh mmap that the kernel must fault in and zero page by page, and unmaps them on free.
A program that repeatedly allocates, fills and frees large buffers spends most of its time
in the kernel. --keep-heap sets GLIBC_TUNABLES so freed blocks stay in the heap:
mmap_threshold=32MiB (glibc's maximum), mmap_max=0 (larger blocks come from the heap too),
trim_threshold=256GiB (the heap is never given back) and top_pad=--keep-heap-pad
(at most 1 GiB: a larger pad buys nothing, and one the kernel refuses makes every malloc fail).
Trade-off: the process keeps its peak heap resident until it exits (plus fragmentation),
so its RSS no longer falls after a burst. Settings already in GLIBC_TUNABLES are kept.
PAGEWISE_REPORT=FILE writes them as JSON (\"tunables\"), before the program starts.
Programs not linked against glibc (musl, Go, static with another C library) are refused:
the tunables would change nothing (glibc linked statically reads them too); so are
programs that would run in secure mode (set-user-ID or set-group-ID of another user or
group, file capabilities), where glibc ignores them. The program's exit status is
pagewise's exit status.

--thp-heap: a program that writes a lot of fresh heap memory takes a page fault per 4 KiB.
--thp-heap sets GLIBC_TUNABLES glibc.malloc.hugetlb=1 (glibc 2.35 or later): malloc asks
for transparent huge pages on its heap and its large blocks, so one fault maps 2 MiB
(xz -9: 102k minor faults -> about 1k). Trade-off: a huge page is resident as a whole,
so a sparsely written heap can take more RAM; measure with
`pagewise bench run --fix thp-heap -- CMD`. Refused, with the reason, where it would
change nothing: glibc older than 2.35, THP disabled, or a program not linked against
glibc. It combines with --keep-heap.

A script without a #! line runs as `/bin/sh SCRIPT ARGS`, as in a shell: the program
prepared is /bin/sh.";

/// `--huge-text`'s value: `all` or `hot:PROFILE`.
fn huge_text_mode(text: &str) -> Result<String, String> {
    match text.strip_prefix("hot:") {
        Some("") => Err("hot: needs a profile: hot:PROFILE".into()),
        Some(_) => Ok(text.to_owned()),
        None if text == "all" => Ok(text.to_owned()),
        None => Err("expected all or hot:PROFILE".into()),
    }
}

/// `--huge-text-lib`'s value (of `run` and `bench run`): a library's file
/// name or a prefix of it. Empty, or with the `,` that separates the names
/// in `PAGEWISE_HUGE_TEXT_LIBS`, it would name no library, or other ones,
/// without a word, so it is refused. Cost: one pass over the text.
pub(crate) fn library_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("a library name is needed (file name or prefix, e.g. libpython)".into())
    } else if text.contains(',') {
        Err("one library per --huge-text-lib (repeat the option), without ','".into())
    } else {
        Ok(text.to_owned())
    }
}

/// Sets up the environment and replaces this process with the program (or,
/// with --huge-text, starts it and waits). A program that cannot start gives
/// the status a shell would (127 not found, 126 not executable), as
/// `pagewise stat` does.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    start(args).or_else(|err| match err.downcast_ref::<LaunchError>() {
        Some(e) => {
            errln!("pagewise: {e}");
            Ok(ExitCode::from(e.exit_code()))
        }
        None => Err(err),
    })
}

/// [`run`], with a program that cannot start as a [`LaunchError`].
fn start(args: &RunArgs) -> anyhow::Result<ExitCode> {
    // Before "nothing to apply": a library named without --huge-text is that
    // mistake, whether or not another fix is given.
    if !args.huge_text_lib.is_empty() && args.huge_text.is_none() {
        return Err(usage("--huge-text-lib needs --huge-text"));
    }
    if !args.keep_heap && !args.thp_heap && args.huge_text.is_none() {
        return Err(usage(
            "nothing to apply: choose a fix such as --keep-heap, --thp-heap or --huge-text (see 'pagewise run --help')",
        ));
    }
    let program = &args.command[0];
    let path = launch::resolve_program(program.as_ref())?;
    let fixes = Fixes {
        huge_text: args.huge_text.is_some(),
        keep_heap: args.keep_heap,
        thp_heap: args.thp_heap,
    };
    let inspected = check_program(&path, fixes)?;
    // A script without a `#!` line runs as `/bin/sh SCRIPT ARGS…`, as in a
    // shell; `check_program` above inspected that shell.
    let argv: Vec<OsString> = args.command.iter().map(OsString::from).collect();
    let (executable, line) = launch::command_line(&path, &argv);
    let mut command = std::process::Command::new(&executable);
    // argv[0] as the user typed it (or the shell's), like a shell.
    command.arg0(&line[0]).args(&line[1..]);

    let tunables = match args.keep_heap || args.thp_heap {
        true => Some(apply_tunables(&mut command, &inspected, args)),
        false => None,
    };
    if let Some(mode) = &args.huge_text {
        return run_with_huge_text(command, mode, args, &inspected, tunables.as_ref());
    }
    // This process becomes the program: the report is written before, with
    // the pid the program will have.
    let written = match (report_file(), &tunables) {
        (Some(file), Some(tunables)) => {
            let top = RunReport::empty(std::process::id(), tunables.program.clone());
            write_report(
                &file,
                &huge_text::RunSummary {
                    top: &top,
                    processes: &[],
                    preload: None,
                    tunables: Some(tunables),
                },
            );
            Some(file)
        }
        _ => None,
    };
    let error = command.exec();
    // The program never ran: a report describing it would be false.
    if let Some(file) = written {
        let _ = std::fs::remove_file(file);
    }
    Err(if error.kind() == std::io::ErrorKind::NotFound {
        LaunchError::NotFound(program.clone())
    } else {
        LaunchError::NotExecutable { path, error }
    }
    .into())
}

/// The `PAGEWISE_REPORT` file asked for, if any.
fn report_file() -> Option<PathBuf> {
    std::env::var_os("PAGEWISE_REPORT")
        .filter(|f| !f.is_empty())
        .map(PathBuf::from)
}

/// Writes the `PAGEWISE_REPORT` file, or says on stderr why it cannot.
fn write_report(file: &Path, summary: &huge_text::RunSummary<'_>) {
    if let Err(e) = huge_text::write_run_report(file, summary) {
        errln!("pagewise run: {e}");
    }
}

/// The fixes of one `pagewise run` (or of one `bench run` variant), as far
/// as [`check_program`] cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fixes {
    /// `--huge-text` (either mode).
    pub(crate) huge_text: bool,
    /// `--keep-heap`.
    pub(crate) keep_heap: bool,
    /// `--thp-heap`.
    pub(crate) thp_heap: bool,
}

/// The heap fixes in words: what the report calls them, how the refusals of
/// a program without glibc (and in secure mode) name them (the fix and how
/// it works; the flags), and what to do instead.
fn heap_fix_words(
    keep_heap: bool,
    thp_heap: bool,
) -> (&'static str, &'static str, &'static str, &'static str) {
    match (keep_heap, thp_heap) {
        (true, false) => (
            "keep-heap",
            "--keep-heap works through glibc's malloc tunables and",
            "--keep-heap",
            "use pagewise::buffer in the program instead",
        ),
        (false, _) => (
            "thp-heap",
            "--thp-heap works through glibc's malloc tunables and",
            "--thp-heap",
            "use pagewise regions in the program instead",
        ),
        (true, true) => (
            "keep-heap and thp-heap",
            "--keep-heap and --thp-heap work through glibc's malloc tunables and",
            "--keep-heap and --thp-heap",
            "use pagewise::buffer or regions in the program instead",
        ),
    }
}

/// `run`'s decision whether `fixes` can apply to the program at `path` (as
/// [`launch::resolve_program`] found it): every refusal `run` makes before
/// it starts a program, as the error `run` reports (a [`LaunchError`] for a
/// program that cannot start or that the fixes cannot reach). The program
/// must be executable; the one that will really run (after a `#!` line)
/// must read glibc's tunables for the heap fixes (dynamically or statically
/// linked against glibc) and be dynamically linked against glibc for huge
/// text, and must not run in secure mode; `--thp-heap` needs a glibc (the
/// program's own, for a static one) and kernel where it changes something.
/// `bench run` calls it for each fix before anything runs. Returns the
/// program inspected. Costs a `stat`, reads of the program's headers (and
/// its interpreter's name), and a few small reads.
pub(crate) fn check_program(path: &Path, fixes: Fixes) -> anyhow::Result<PathBuf> {
    // Before reading it: a file without execute permission is that error, not "not ELF".
    launch::require_executable(path)?;
    let mut inspected = None;
    if fixes.keep_heap || fixes.thp_heap {
        let (_, fix, flags, instead) = heap_fix_words(fixes.keep_heap, fixes.thp_heap);
        let (program, linkage) = launch::require_glibc_tunables(path, fix, instead)?;
        launch::require_not_secure(
            &program,
            &format!("glibc ignores GLIBC_TUNABLES there, so {flags} would change nothing"),
        )?;
        if fixes.thp_heap {
            thp_heap::check_for(&linkage)
                .map_err(|why| anyhow::anyhow!("--thp-heap would change nothing: {why}"))?;
        }
        inspected = Some(program);
    }
    if fixes.huge_text {
        let program = launch::require_glibc(
            path,
            "--huge-text works through LD_PRELOAD of a glibc library and",
            "call pagewise::text::huge::remap_text early in the program instead",
        )?;
        launch::require_not_secure(
            &program,
            "the loader ignores LD_PRELOAD there, so --huge-text cannot apply",
        )?;
        inspected = Some(program);
    }
    Ok(inspected.unwrap_or_else(|| path.to_owned()))
}

/// Sets `GLIBC_TUNABLES` for `--keep-heap` and `--thp-heap` (one value for
/// both, the user's own settings kept) on the program [`check_program`]
/// accepted (`inspected`, named in the report), and returns what was set.
fn apply_tunables(
    command: &mut std::process::Command,
    inspected: &Path,
    args: &RunArgs,
) -> HeapTunables {
    let (what, _, _, _) = heap_fix_words(args.keep_heap, args.thp_heap);
    let (mut wanted, mut fixes) = (Vec::new(), Vec::new());
    if args.keep_heap {
        wanted.extend(keep_heap::tunables(args.keep_heap_pad));
        fixes.push("keep-heap");
    }
    if args.thp_heap {
        wanted.push(thp_heap::TUNABLE);
        fixes.push("thp-heap");
    }
    let existing = std::env::var("GLIBC_TUNABLES").ok();
    let program = inspected.display().to_string();
    let tunables = HeapTunables::new(fixes, program, &wanted, existing.as_deref());
    let value = &tunables.glibc_tunables;
    command.env("GLIBC_TUNABLES", value);
    if args.report {
        errln!("pagewise run: {what} for {}", inspected.display());
        for t in &tunables.set {
            let shown = if t.name.ends_with("mmap_max") || t.name == thp_heap::TUNABLE.0 {
                t.value.to_string()
            } else {
                bytes(t.value)
            };
            let note = if t.kept_user_value {
                " (kept your GLIBC_TUNABLES value instead)"
            } else {
                ""
            };
            errln!("pagewise run:   {} = {shown}{note}", t.name);
        }
        errln!("pagewise run: GLIBC_TUNABLES={value}");
    }
    tunables
}

/// Starts the program with the preload library and stays as its parent:
/// collects each process's report, writes perf maps from them as they come,
/// then the `PAGEWISE_REPORT` file, and exits with the program's status.
fn run_with_huge_text(
    mut command: std::process::Command,
    mode: &str,
    args: &RunArgs,
    inspected: &Path,
    tunables: Option<&HeapTunables>,
) -> anyhow::Result<ExitCode> {
    let dir = ReportDir::create()?;
    let mut hot_note = None;
    // `all` or `hot:PROFILE` (checked as it was parsed).
    let mode = match mode.strip_prefix("hot:") {
        None => "all".to_owned(),
        Some(profile) => {
            let profile = std::fs::canonicalize(profile)
                .with_context(|| format!("--huge-text=hot:{profile}"))?;
            // Resolved here (or reused from the cache), so the program reads a short
            // list of pages instead of parsing a profile and symbol tables before main.
            // Places passed over are said once, for the preload library below.
            let cache = user_cache::directory(Purpose::Write).map(|c| c.path);
            let (hot, source) = hot_cache::hot_pages(&profile, &args.huge_text_lib, cache)
                .map_err(|e| anyhow::anyhow!(e))?;
            hot_note = Some(match source {
                HotSource::Cached(at) => format!("hot pages reused from {}", at.display()),
                HotSource::Saved(at) => format!("hot pages resolved and saved to {}", at.display()),
                HotSource::NotSaved(why) => format!("hot pages resolved, not cached: {why}"),
            });
            format!("hot-pages:{}", dir.write_hot_pages(&hot)?.display())
        }
    };
    let (library, mut notes) = preload::choose()?;
    notes.extend(hot_note);
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.trim().is_empty() => format!("{}:{existing}", library.path),
        _ => library.path.clone(),
    };
    command
        .env("LD_PRELOAD", &preload)
        .env("PAGEWISE_HUGE_TEXT", &mode)
        .env("PAGEWISE_HUGE_TEXT_LIBS", args.huge_text_lib.join(","))
        .env(huge_text::REPORT_DIR_ENV, dir.path());
    if args.report {
        for note in &notes {
            errln!("pagewise run: {note}");
        }
        errln!(
            "pagewise run: huge text ({mode}) through LD_PRELOAD={preload} ({})",
            library.source
        );
    }
    let perf_maps = (std::env::var("PAGEWISE_PERF_MAP").as_deref() != Ok("0"))
        .then(|| PerfMaps::new(PerfMapWriter::in_tmp()));
    let gatherer = huge_text::Gatherer::new(dir.path(), perf_maps, args.report);
    let program = args.command[0].clone();
    let finished = huge_text::run_program(command, gatherer)
        .with_context(|| format!("cannot start or wait for {program}"))?;
    let (pid, gathered) = (finished.pid, &finished.gathered);
    let report_file = report_file();
    if args.report || report_file.is_some() {
        if let Some(note) = &finished.note {
            errln!("pagewise run: {note}");
        }
    }
    // Fallbacks are said with or without --report.
    for problem in &gathered.problems {
        errln!("pagewise run: {problem}");
    }
    let why_missing = "sent no huge-text report: the preload library did not run in it";
    if gathered.newest_for(pid).is_none() {
        errln!("pagewise run: {program} {why_missing}");
    }
    if let Some(file) = report_file {
        let missing;
        let top = match gathered.newest_for(pid) {
            Some(top) => top,
            // Still written: the other processes' reports and the tunables.
            None => {
                let why = why_missing;
                missing = RunReport {
                    not_applied: Some(why.to_owned()),
                    ..RunReport::empty(pid, inspected.display().to_string())
                };
                &missing
            }
        };
        write_report(
            &file,
            &huge_text::RunSummary {
                top,
                processes: &gathered.reports,
                preload: Some(&library),
                tunables,
            },
        );
    }
    Ok(exit_code(finished.status))
}

/// The program's exit status as pagewise's: its code, or 128+N when signal N killed it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(code.clamp(0, 255) as u8)
}
