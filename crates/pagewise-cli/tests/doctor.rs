//! CLI tests for `pagewise doctor` and argument errors: they run the real binary.

use std::os::unix::fs::PermissionsExt;

mod common;
use common::pagewise;

#[test]
fn doctor_prints_tables_and_advice() {
    let out = pagewise()
        .arg("doctor")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    for needle in [
        "hugetlb",
        "THP",
        "MADV_POPULATE_WRITE",
        "perf_event_paranoid",
        "glibc",
        "RLIMIT_MEMLOCK",
    ] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
}

#[test]
fn doctor_json_holds_every_field() {
    let out = pagewise()
        .args(["doctor", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(v["schema"], "pagewise.doctor/1");
    // Every field is there; a null one is a value doctor could not read,
    // which it then lists in `not_read` (tracefs is null when not mounted).
    let not_read = v["not_read"].as_array().unwrap();
    let has = |pointer: &str| {
        let value = v
            .pointer(pointer)
            .unwrap_or_else(|| panic!("missing {pointer} in {v:#}"));
        if pointer == "/perf/tracefs" {
            assert_eq!(
                value.is_string(),
                pagewise_testkit::tracefs_mounted(),
                "{value}"
            );
        } else if value.is_null() {
            assert!(
                !not_read.is_empty(),
                "{pointer} is null and nothing is listed as not read"
            );
        }
    };
    for p in [
        "/kernel/release",
        "/hugetlb",
        "/thp/enabled",
        "/thp/defrag",
        "/thp/shmem_enabled",
        "/thp/khugepaged_max_ptes_none",
        "/thp/sizes",
        "/thp/disabled_for_process",
        "/features/madv_populate_write/status",
        "/features/madv_collapse/status",
        "/features/pagemap_scan/status",
        "/features/vma_anon_name/status",
        "/features/map_hugetlb",
        "/perf/paranoid",
        "/perf/tracefs",
        "/perf/hardware",
        "/perf/software",
        "/perf/tracepoints",
        "/cpu/model",
        "/cpu/avx2",
        "/cpu/avx512f",
        "/cpu/erms",
        "/cpu/fsrm",
        "/cpu/caches",
        "/cpu/numa_nodes",
        "/glibc/version",
        "/glibc/mmap_threshold_tunable",
        "/glibc/non_temporal_threshold_bytes",
        "/limits/memlock_soft_bytes",
        "/limits/overcommit_memory",
        "/advice",
        "/not_read",
    ] {
        has(p);
    }
    let pools = v["hugetlb"].as_array().unwrap();
    for pool in pools {
        for key in ["page_size_bytes", "total", "free", "reserved", "surplus"] {
            assert!(pool[key].is_u64(), "pool lacks {key}: {pool}");
        }
        assert!(pool["free"].as_u64() <= pool["total"].as_u64(), "{pool}");
    }
    assert_eq!(
        v["features"]["map_hugetlb"].as_array().unwrap().len(),
        pools.len()
    );
    let names: Vec<&str> = v["perf"]["hardware"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "cycles",
            "instructions",
            "dTLB-load-misses",
            "iTLB-load-misses"
        ]
    );
    for advice in v["advice"].as_array().unwrap() {
        assert!(advice["finding"].as_str().is_some_and(|f| !f.is_empty()));
    }
}

fn assert_one_line_usage_error(args: &[&str]) {
    let out = pagewise().args(args).assert().code(2).get_output().clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr:?}"
    );
    assert!(stderr.starts_with("pagewise: "), "{stderr:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn unknown_subcommand_is_one_line_error() {
    assert_one_line_usage_error(&["frobnicate"]);
}

#[test]
fn unknown_flag_is_one_line_error() {
    assert_one_line_usage_error(&["doctor", "--no-such-flag"]);
}

#[test]
fn help_and_version_succeed() {
    pagewise().arg("--help").assert().success();
    pagewise().arg("--version").assert().success();
}

#[test]
fn doctor_runs_unprivileged_and_says_what_it_could_not_read() {
    if !pagewise_testkit::is_root() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Root,
            "needs root to drop to the nobody user"
        );
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        pagewise_testkit::skip!(pagewise_testkit::Need::Tool, "setpriv is not installed");
    }
    // Copy the binary where nobody can execute it (the build folder may not be reachable).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("pagewise");
    pagewise_testkit::copy_executable(&assert_cmd::cargo::cargo_bin("pagewise"), &bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["root"], false);
    // Unprivileged, the counters still open in user-only mode or are marked with a reason.
    for p in v["perf"]["software"].as_array().unwrap() {
        assert!(p["status"].is_string() && p["detail"].is_string());
    }
    // Text output also works and prints the same sections.
    let text = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .arg("doctor")
        .output()
        .unwrap();
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("unprivileged user"));
}
