//! `libpagewise_preload.so`: loaded with `LD_PRELOAD` by `pagewise run`, it
//! applies the fixes the environment asks for in a constructor that runs
//! before the program's `main`, while the process has one thread.
//!
//! Environment (set by `pagewise run`; children inherit it):
//!
//! | variable | meaning |
//! |---|---|
//! | `PAGEWISE_HUGE_TEXT` | `all`, or `hot:PROFILE` to move only the 2 MiB pages holding the profile's hot code |
//! | `PAGEWISE_HUGE_TEXT_LIBS` | comma-separated library names to move too (`libc.so.6`, `libpython`) |
//! | `PAGEWISE_REPORT` | write the `pagewise.run/1` JSON report here (children: `FILE.PID`) |
//! | `PAGEWISE_REPORT_STDERR` | `1`: print a summary line per range on stderr |
//! | `PAGEWISE_TOP_PID` | the pid of the process `pagewise run` started |
//! | `PAGEWISE_FAIL_AT` | test hook: `map`, `copy`, `protect` or `remap` fails on purpose |
//!
//! Nothing here may disturb the program: every failure is reported and the
//! program runs on with its original text.

#![deny(unsafe_code)]

use pagewise::sys::text::MoveStep;
use pagewise::text::huge::{self, HugeTextOptions, RunReport};

fn report_path(pid: u32) -> Option<String> {
    let base = std::env::var("PAGEWISE_REPORT")
        .ok()
        .filter(|p| !p.is_empty())?;
    let top = std::env::var("PAGEWISE_TOP_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok());
    Some(if top == Some(pid) || top.is_none() {
        base
    } else {
        format!("{base}.{pid}")
    })
}

fn publish(report: &RunReport) {
    if std::env::var("PAGEWISE_REPORT_STDERR").as_deref() == Ok("1") {
        for line in huge::summary(report) {
            eprintln!("{line}");
        }
    }
    if let Some(path) = report_path(report.pid) {
        if let Ok(json) = serde_json::to_string_pretty(report) {
            if let Err(e) = std::fs::write(&path, json) {
                eprintln!("pagewise[{}]: cannot write report {path}: {e}", report.pid);
            }
        }
    }
}

fn options_from_env(mode: &str) -> Result<HugeTextOptions, String> {
    let hot_pages = match mode {
        "all" | "1" | "" => None,
        other => match other.strip_prefix("hot:") {
            Some(profile) => Some(pagewise::text::hot_pages_from_profile(
                std::path::Path::new(profile),
            )?),
            None => {
                return Err(format!(
                    "PAGEWISE_HUGE_TEXT={other:?}: expected all or hot:PROFILE"
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
        perf_map: true,
    })
}

extern "C" fn pagewise_preload_init() {
    let Ok(mode) = std::env::var("PAGEWISE_HUGE_TEXT") else {
        return;
    };
    // A panic must never cross into the program: catch it and report.
    let outcome = std::panic::catch_unwind(|| match options_from_env(&mode) {
        Ok(options) => publish(&huge::remap_text(&options)),
        Err(e) => eprintln!(
            "pagewise[{}]: huge text not applied: {e}",
            std::process::id()
        ),
    });
    if outcome.is_err() {
        eprintln!(
            "pagewise[{}]: huge text not applied: internal error",
            std::process::id()
        );
    }
}

// The one piece of link-level plumbing outside the sys layer: a pointer in
// `.init_array` is how a preloaded library runs code before `main`.
#[allow(unsafe_code)]
#[used]
#[link_section = ".init_array"]
static PAGEWISE_PRELOAD_INIT: extern "C" fn() = pagewise_preload_init;
