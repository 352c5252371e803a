//! `.ci/run` refuses to run when what the privileged tests need is missing,
//! instead of going green with them skipped. `--preflight-only` changes
//! nothing on the machine; `PAGEWISE_CI_SIMULATE` makes it act as if a
//! precondition were missing.

use pagewise_testkit::{skip, skip_part, Need};
use std::path::PathBuf;
use std::process::Command;

fn ci_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/run")
}

fn preflight(simulate: &str) -> std::process::Output {
    Command::new("bash")
        .arg(ci_script())
        .arg("--preflight-only")
        .env("PAGEWISE_CI_SIMULATE", simulate)
        .output()
        .expect("run bash")
}

#[test]
fn each_missing_precondition_fails_the_preflight_with_its_name() {
    if let Some(why) = pagewise_testkit::tool_missing("bash") {
        skip!(Need::Tool, "{why}");
    }
    for (simulate, named) in [
        ("no-root", "missing root"),
        ("no-tracefs", "missing tracefs"),
        ("no-hugetlb", "missing 2 MiB hugetlb pools"),
        ("no-cc", "missing a C compiler"),
        ("no-perf", "missing perf events"),
    ] {
        let out = preflight(simulate);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{simulate}: {stderr}");
        assert!(stderr.contains(named), "{simulate}: {stderr}");
        assert!(stderr.contains("refusing to run"), "{simulate}: {stderr}");
    }
}

#[test]
fn the_preflight_passes_where_everything_is_there() {
    if !pagewise_testkit::is_root() {
        skip!(Need::Root, "the preflight expects root");
    }
    let out = preflight("");
    if out.status.success() {
        assert!(String::from_utf8_lossy(&out.stdout).contains("== preflight"));
    } else {
        // Root, but this machine lacks tracefs, hugetlb or a compiler: the
        // refusal must name it (checked above); nothing more to check here.
        skip_part!(
            "pass",
            Need::Other,
            "this machine lacks a CI precondition: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
