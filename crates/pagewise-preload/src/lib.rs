//! `libpagewise_preload.so`: loaded with `LD_PRELOAD` by `pagewise run`, it
//! applies the fixes the environment asks for in a constructor that runs
//! before the program's `main`, while the process has one thread.
//!
//! It does only the move and says what it moved: no file of the program is
//! read, no symbol is parsed, nothing large is allocated. The perf map that
//! names the moved code is written by the `pagewise run` parent from the
//! report (object, load bias, ranges).
//!
//! It never writes into the program's standard output or error (a parent
//! that captures a child's stderr would get pagewise's lines in its data):
//! everything it has to say, failures included, goes into the report, and
//! the `pagewise run` parent prints the `--report` lines from the reports on
//! its own stderr.
//!
//! Environment (set by `pagewise run`; children inherit it):
//!
//! | variable | meaning |
//! |---|---|
//! | `PAGEWISE_HUGE_TEXT` | `all`, or `hot-pages:FILE` to move only the 2 MiB pages holding the hot code listed in FILE (written by `pagewise run` from a profile) |
//! | `PAGEWISE_HUGE_TEXT_LIBS` | comma-separated library names to move too (`libc.so.6`, `libpython`) |
//! | `PAGEWISE_REPORT_DIR` | the private directory to write this process's `pagewise.run/1` report into (`PID.json`) |
//! | `PAGEWISE_FAIL_AT` | test hook: `map`, `copy`, `protect` or `remap` fails on purpose |
//!
//! Nothing here may disturb the program: every failure is reported and the
//! program runs on with its original text. A report that cannot be written
//! (the directory is gone, or the process now runs as another user) is
//! lost: there is nowhere else to say it but the program's own stderr. Only
//! without `PAGEWISE_REPORT_DIR` (the library preloaded by hand) does a
//! failure to apply go to stderr, the one place left.

#![deny(unsafe_code)]
// Printing must never panic inside someone else's program: huge::eprint_lines.
#![deny(clippy::print_stderr, clippy::print_stdout)]

use pagewise::launch::huge_text::{self as run_side, REPORT_DIR_ENV};
use pagewise::os::text::MoveStep;
use pagewise::text::huge::{self, HugeTextOptions, RunReport};

fn publish(report: &RunReport) {
    match std::env::var_os(REPORT_DIR_ENV).filter(|d| !d.is_empty()) {
        // The parent prints it (and a report that cannot be written is lost:
        // the run that asked for it is over, or this process may not write there).
        Some(dir) => {
            let _ = run_side::write_process_report(std::path::Path::new(&dir), report);
        }
        None if report.not_applied.is_some() => huge::eprint_lines(&huge::summary(report)),
        None => {}
    }
}

fn options_from_env(mode: &str) -> Result<HugeTextOptions, String> {
    let hot_pages = match mode {
        "all" | "1" | "" => None,
        other => match other.strip_prefix("hot-pages:") {
            Some(file) => Some(run_side::read_hot_pages(std::path::Path::new(file))?),
            None => {
                return Err(format!(
                    "PAGEWISE_HUGE_TEXT={other:?}: expected all or hot-pages:FILE (set by pagewise run)"
                ))
            }
        },
    };
    Ok(HugeTextOptions {
        libs: std::env::var("PAGEWISE_HUGE_TEXT_LIBS")
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        hot_pages,
        fail_at: std::env::var("PAGEWISE_FAIL_AT")
            .ok()
            .as_deref()
            .and_then(MoveStep::from_name),
        perf_map: false,
    })
}

extern "C" fn pagewise_preload_init() {
    let Ok(mode) = std::env::var("PAGEWISE_HUGE_TEXT") else {
        return;
    };
    // A panic must never cross into the program: catch it and report it.
    // Silently: the default hook would print it on the program's stderr.
    // (The hook is this library's own standard library's, not the program's.)
    std::panic::set_hook(Box::new(|_| {}));
    let report = std::panic::catch_unwind(|| match options_from_env(&mode) {
        Ok(options) => huge::remap_text(&options),
        Err(e) => RunReport::not_applied(e),
    })
    .unwrap_or_else(|_| RunReport::not_applied("internal error".into()));
    let _ = std::panic::catch_unwind(|| publish(&report));
}

// The one piece of link-level plumbing outside the sys layer: a pointer in
// `.init_array` is how a preloaded library runs code before `main`.
#[allow(unsafe_code)]
#[used]
#[link_section = ".init_array"]
static PAGEWISE_PRELOAD_INIT: extern "C" fn() = pagewise_preload_init;
