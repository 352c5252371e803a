//! `libpagewise_preload.so`: loaded with `LD_PRELOAD` by `pagewise run`, it
//! applies the fixes the environment asks for in a constructor that runs
//! before the program's `main`, while the process has one thread.
//!
//! It does only the move and says what it moved: no file of the program is
//! read, no symbol is parsed, nothing large is allocated. The perf map that
//! names the moved code is written by the `pagewise run` parent from the
//! report (object, load bias, ranges).
//!
//! Environment (set by `pagewise run`; children inherit it):
//!
//! | variable | meaning |
//! |---|---|
//! | `PAGEWISE_HUGE_TEXT` | `all`, or `hot-pages:FILE` to move only the 2 MiB pages holding the hot code listed in FILE (written by `pagewise run` from a profile) |
//! | `PAGEWISE_HUGE_TEXT_LIBS` | comma-separated library names to move too (`libc.so.6`, `libpython`) |
//! | `PAGEWISE_REPORT_DIR` | the private directory to write this process's `pagewise.run/1` report into (`PID.json`) |
//! | `PAGEWISE_REPORT_STDERR` | `1`: print a summary line per range on stderr |
//! | `PAGEWISE_FAIL_AT` | test hook: `map`, `copy`, `protect` or `remap` fails on purpose |
//!
//! Nothing here may disturb the program: every failure is reported and the
//! program runs on with its original text.

#![deny(unsafe_code)]
// Printing must never panic inside someone else's program: huge::eprint_lines.
#![deny(clippy::print_stderr, clippy::print_stdout)]

use pagewise::launch::huge_text::{self as run_side, REPORT_DIR_ENV};
use pagewise::os::text::MoveStep;
use pagewise::text::huge::{self, HugeTextOptions, RunReport};

fn publish(report: &RunReport) {
    if std::env::var("PAGEWISE_REPORT_STDERR").as_deref() == Ok("1") {
        huge::eprint_lines(&huge::summary(report));
    }
    if let Some(dir) = std::env::var_os(REPORT_DIR_ENV).filter(|d| !d.is_empty()) {
        let dir = std::path::Path::new(&dir);
        match run_side::write_process_report(dir, report) {
            Ok(_) => {}
            // The run that asked for reports is over (a daemon's child outlived
            // pagewise run): nobody is listening, so say nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => huge::eprint_lines(&[format!(
                "pagewise[{}]: cannot write the report into {}: {e}",
                report.pid,
                dir.display()
            )]),
        }
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
    // A panic must never cross into the program: catch it and report.
    let outcome = std::panic::catch_unwind(|| match options_from_env(&mode) {
        Ok(options) => publish(&huge::remap_text(&options)),
        Err(e) => huge::eprint_lines(&[format!(
            "pagewise[{}]: huge text not applied: {e}",
            std::process::id()
        )]),
    });
    if outcome.is_err() {
        // Outside catch_unwind: this line must not be able to panic (eprintln!
        // panics when stderr cannot be written, which would abort the program).
        huge::eprint_lines(&[format!(
            "pagewise[{}]: huge text not applied: internal error",
            std::process::id()
        )]);
    }
}

// The one piece of link-level plumbing outside the sys layer: a pointer in
// `.init_array` is how a preloaded library runs code before `main`.
#[allow(unsafe_code)]
#[used]
#[link_section = ".init_array"]
static PAGEWISE_PRELOAD_INIT: extern "C" fn() = pagewise_preload_init;
