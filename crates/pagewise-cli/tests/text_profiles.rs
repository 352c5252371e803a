//! CLI tests for the profiles users already have: `perf.data` (read through
//! `perf script`) and pprof profiles written by a real producer (Go's
//! runtime/pprof, the format Parca and Pyroscope export), through `text
//! order`, `text merge` with weights, and `run --huge-text=hot:`.

use assert_cmd::Command;
use pagewise_testkit::{skip, Need};
use std::path::{Path, PathBuf};

/// Three of eight functions 64 KiB apart are called. Each loops, so that
/// timer samples land inside it: with a one-multiply body, a KVM guest's
/// cpu-clock samples all landed on the return addresses in `main`.
const SPREAD: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#define F(n) __attribute__((noinline)) unsigned f##n(unsigned x) { \
    for (int i = 0; i < 200; i++) { x = x * (n * 2 + 1) + n; __asm__ volatile("" : "+r"(x)); } \
    return x; } \
    __asm__(".text\n.skip 65536, 0xcc\n");
F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)
int main(int argc, char **argv) { unsigned a = argc; long n = argc > 1 ? atol(argv[1]) : 1000;
  for (long i = 0; i < n; i++) a = f8(f5(f1(a))); printf("%u\n", a); return 0; }
"#;

mod common;
use common::pagewise;

fn stdout_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.assert().success().get_output().clone();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Records `program ARGS` with `perf record -e cpu-clock` (call chains with
/// `-g`) into `out`, or says why it cannot. `-N`: perf would otherwise copy
/// every binary it saw into the user's build-id cache (`~/.debug`), which
/// grew by the test's fixtures on every run.
fn perf_record(out: &Path, call_chains: bool, program: &[&str]) -> Result<(), String> {
    let mut c = std::process::Command::new("perf");
    c.args(["record", "-q", "-N", "-e", "cpu-clock", "-F", "2000", "-o"])
        .arg(out);
    if call_chains {
        c.arg("-g");
    }
    let o = c
        .arg("--")
        .args(program)
        .output()
        .map_err(|e| format!("perf is not installed: {e}"))?;
    if !o.status.success() || !out.is_file() {
        return Err(format!(
            "perf record cannot sample here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

fn total_samples(profile: &Path) -> u64 {
    pagewise::text::profile::Profile::read(profile)
        .unwrap()
        .total()
}

#[test]
fn perf_data_files_are_read_through_perf_script() {
    let dir = tempfile::tempdir().unwrap();
    let bin = match pagewise_testkit::compile_c(
        dir.path(),
        "spread",
        SPREAD,
        &["-fno-toplevel-reorder", "-fno-omit-frame-pointer"],
    ) {
        Ok(b) => b,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let bin_str = bin.to_str().unwrap();
    let chains = dir.path().join("chains.data");
    let flat = dir.path().join("flat.data");
    for (file, call_chains) in [(&chains, true), (&flat, false)] {
        if let Err(why) = perf_record(file, call_chains, &[bin_str, "1000000"]) {
            skip!(Need::Tool, "{why}");
        }
    }
    let order = dir.path().join("order.txt");
    let summary = stdout_json(
        pagewise()
            .args(["text", "order"])
            .arg(&chains)
            .arg(&flat)
            .arg("--binary")
            .arg(&bin)
            .arg("-o")
            .arg(&order)
            .arg("--json"),
    );
    assert_eq!(summary["schema"], "pagewise.text.order/1");
    let resolved = summary["resolved_samples"].as_u64().unwrap();
    assert!(resolved > 100, "{summary}");
    let functions = std::fs::read_to_string(&order).unwrap();
    for f in ["f1", "f5", "f8"] {
        assert!(functions.lines().any(|l| l == f), "{f} not in {functions}");
    }

    // Weights: the file counted twice has twice its samples in the merge.
    let once = dir.path().join("once.profile");
    let twice = dir.path().join("twice.profile");
    pagewise()
        .args(["text", "merge"])
        .arg(&chains)
        .arg("-o")
        .arg(&once)
        .assert()
        .success();
    pagewise()
        .args(["text", "merge"])
        .arg(format!("{}:2", chains.display()))
        .arg("-o")
        .arg(&twice)
        .assert()
        .success();
    assert_eq!(total_samples(&twice), 2 * total_samples(&once));

    // A perf.data file is a hot-text profile too.
    let out = pagewise()
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .env("PAGEWISE_PERF_MAP", "0")
        .arg("run")
        .arg(format!("--huge-text=hot:{}", chains.display()))
        .args(["--", bin_str, "1000"])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

#[test]
fn a_damaged_profile_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pb.gz");
    std::fs::write(&bad, [0x1f, 0x8b, 0x08, 0x00, 0x01]).unwrap();
    let out = pagewise()
        .args(["text", "merge"])
        .arg(&bad)
        .args(["-o", "/dev/null"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("gzip"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = pagewise()
        .args(["text", "merge", "x.profile:zero", "-o", "/dev/null"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("positive number"));
}

/// Weights whose products pass 2^64 − 1 (the most a profile holds) are a
/// one-line error before anything is written, with or without
/// `--normalize`; what fits is written and reads back.
#[test]
fn sample_counts_past_two_to_the_64_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.profile");
    std::fs::write(
        &p,
        "# pagewise-profile 1\nobject 0 /bin/true\nstack 3 0:10\nstack 2 0:20\n",
    )
    .unwrap();
    let weighted = |w: &str| format!("{}:{w}", p.display());
    let merged = dir.path().join("m.profile");
    let one_line_error = |args: &[String]| {
        let out = pagewise().args(args).assert().code(1).get_output().clone();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("more than 2^64 - 1"), "{err}");
        assert!(out.stdout.is_empty());
    };
    let m = merged.display().to_string();
    for normalize in [&[][..], &["--normalize".to_owned()]] {
        let mut args = vec!["text".to_owned(), "merge".to_owned()];
        args.extend([weighted("3e18"), weighted("3e18"), "-o".into(), m.clone()]);
        args.extend(normalize.iter().cloned());
        one_line_error(&args);
        assert!(!merged.exists(), "written anyway");
    }
    one_line_error(&[
        "text".into(),
        "footprint".into(),
        weighted("1e308"),
        "--binary".into(),
        "/bin/true".into(),
    ]);
    // 5 samples × 3e18 fit: written, and read back by pagewise itself.
    pagewise()
        .args(["text", "merge", &weighted("3e18"), "-o", &m])
        .assert()
        .success();
    assert_eq!(total_samples(&merged), 15_000_000_000_000_000_000);
    pagewise()
        .args(["text", "merge", &m, "-o", "/dev/null"])
        .assert()
        .success();
}

const GO_PROGRAM: &str = r#"package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

//go:noinline
func hot(x uint64) uint64 { return x*2654435761 + 7 }

//go:noinline
func warm(x uint64) uint64 { return (x ^ 0x5bd1e995) >> 3 }

func main() {
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	pprof.StartCPUProfile(f)
	var acc uint64
	for i := uint64(0); i < 300000000; i++ {
		acc = warm(hot(acc + i))
	}
	pprof.StopCPUProfile()
	f.Close()
	fmt.Println(acc)
}
"#;

/// Builds the Go program and runs it, returning (binary, its pprof CPU profile).
fn go_profile(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    std::fs::write(dir.join("main.go"), GO_PROGRAM).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("go.mod"), "module goprof\n\ngo 1.21\n").map_err(|e| e.to_string())?;
    let bin = dir.join("goprof");
    let built = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(dir)
        .env("GOFLAGS", "-mod=mod")
        .output()
        .map_err(|e| format!("go is not installed: {e}"))?;
    if !built.status.success() {
        return Err(format!(
            "go build failed: {}",
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    let profile = dir.join("cpu.pb.gz");
    let ran = std::process::Command::new(&bin)
        .arg(&profile)
        .output()
        .map_err(|e| e.to_string())?;
    if !ran.status.success() {
        return Err(format!("the Go program failed: {ran:?}"));
    }
    Ok((bin, profile))
}

#[test]
fn pprof_profiles_from_go_order_its_binary() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, profile) = match go_profile(dir.path()) {
        Ok(x) => x,
        Err(why) => skip!(Need::Tool, "{why}"),
    };
    // Resolved by address: the profile's mapping names the binary, which is here.
    let order = dir.path().join("go.order");
    let summary = stdout_json(
        pagewise()
            .args(["text", "order"])
            .arg(&profile)
            .arg("--binary")
            .arg(&bin)
            .arg("-o")
            .arg(&order)
            .arg("--json"),
    );
    let total = summary["total_samples"].as_u64().unwrap();
    assert!(total > 10, "{summary}");
    // Every stack is the binary's; a leaf may still be outside it (the vDSO).
    assert_eq!(summary["call_graph_samples"].as_u64().unwrap(), total);
    let resolved = summary["resolved_samples"].as_u64().unwrap();
    assert!(resolved > 0 && resolved <= total, "{summary}");
    let functions = std::fs::read_to_string(&order).unwrap();
    assert!(
        functions.lines().any(|l| l == "main.main"),
        "main.main not in {functions}"
    );
    // pagewise's format keeps link-time addresses: `text merge` writes them.
    let merged = dir.path().join("go.profile");
    pagewise()
        .args(["text", "merge"])
        .arg(&profile)
        .arg("-o")
        .arg(&merged)
        .assert()
        .success();
    let text = std::fs::read_to_string(&merged).unwrap();
    assert!(text.contains("# event pprof samples/count"), "{text}");
    assert!(
        text.contains(&format!("object 0 {}", bin.display())),
        "{text}"
    );

    // On another host: the binary is elsewhere under the same name, and
    // --binary stands in for it (its build ID matches the profile's).
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("goprof");
    std::fs::copy(&bin, &copy).unwrap();
    std::fs::remove_file(&bin).unwrap();
    let out = pagewise()
        .args(["text", "order"])
        .arg(&profile)
        .arg("--binary")
        .arg(&copy)
        .arg("-o")
        .arg(&order)
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .clone();
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["call_graph_samples"].as_u64().unwrap(), total);
    assert_eq!(again["resolved_samples"].as_u64().unwrap(), resolved);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
