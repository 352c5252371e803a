//! Helpers shared by the CLI tests.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The preload library for `pagewise run --huge-text`: next to the test's
/// pagewise binary when `cargo build --workspace` made it, else built once
/// here into a separate target folder (cargo test does not build cdylibs).
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn preload_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let bin = assert_cmd::cargo::cargo_bin("pagewise");
        let beside = bin.parent().unwrap().join("libpagewise_preload.so");
        if beside.is_file() {
            return beside;
        }
        let target = bin
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("preload-for-tests");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "pagewise-preload", "--target-dir"])
            .arg(&target)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo");
        assert!(status.success(), "building pagewise-preload failed");
        target.join("debug").join("libpagewise_preload.so")
    })
    .clone()
}

/// Checks the `machine` object every `bench … --json` report carries: the
/// same keys in every experiment, filled from this machine where it can be
/// read (vendor and model numbers from `cpuid`, caches from sysfs, kernel).
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn check_machine(report: &serde_json::Value) {
    let m = &report["machine"];
    for key in [
        "vendor",
        "cpu",
        "family",
        "model",
        "stepping",
        "isa",
        "online_cpus",
        "caches",
        "kernel",
        "thp_enabled",
        "hugetlb",
        "glibc",
        "hypervisor",
    ] {
        assert!(m.get(key).is_some(), "machine.{key} missing: {m}");
    }
    for key in ["avx2", "avx512f", "avx512bw", "erms", "fsrm"] {
        assert!(m["isa"][key].is_boolean(), "machine.isa.{key}: {m}");
    }
    assert!(m["online_cpus"].as_u64().unwrap_or(0) >= 1, "{m}");
    assert!(m["caches"].is_array(), "{m}");
    if cfg!(target_arch = "x86_64") {
        assert!(m["vendor"].is_string() && m["family"].is_u64(), "{m}");
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(m["kernel"], release.trim(), "{m}");
}

/// Checks the `machine:` line that heads every experiment's table.
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn check_machine_line(stdout: &str) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("machine: "))
        .unwrap_or_else(|| panic!("no machine: line in:\n{stdout}"));
    for part in ["CPUs; kernel ", "; THP ", "; glibc "] {
        assert!(line.contains(part), "{part:?} missing in {line}");
    }
}
