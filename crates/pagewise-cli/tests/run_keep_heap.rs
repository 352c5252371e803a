//! CLI tests for `pagewise run --keep-heap` and `--thp-heap`, and `pagewise bench heap-churn`.
//! Fixtures are compiled with the system C compiler; tests skip with a reason without one.

mod common;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use common::pagewise;

const CHURN: &str = include_str!("fixtures/churn_count.c");
const HEAP_TOUCH: &str = include_str!("fixtures/heap_touch_faults.c");

#[test]
fn keep_heap_stops_the_mmaps_in_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let bin = match pagewise_testkit::compile_c(dir.path(), "churn", CHURN, &[]) {
        Ok(b) => b,
        Err(why) => pagewise_testkit::skip!(pagewise_testkit::Need::Compiler, "{why}"),
    };
    let (plain, kept) = printed_plain_and_under(&bin, "--keep-heap");
    assert_eq!(plain, 10, "glibc maps every 48 MiB block by default");
    assert_eq!(kept, 0, "with --keep-heap no block should be a fresh mmap");
}

/// The number a fixture prints, run on its own and under `pagewise run FIX`,
/// both without the caller's `GLIBC_TUNABLES`.
fn printed_plain_and_under(bin: &Path, fix: &str) -> (u64, u64) {
    let number = |out: &[u8]| -> u64 { String::from_utf8_lossy(out).trim().parse().unwrap() };
    let plain = std::process::Command::new(bin)
        .env_remove("GLIBC_TUNABLES")
        .output()
        .unwrap();
    let fixed = pagewise()
        .args(["run", fix, "--"])
        .arg(bin)
        .env_remove("GLIBC_TUNABLES")
        .assert()
        .success()
        .get_output()
        .clone();
    (number(&plain.stdout), number(&fixed.stdout))
}

/// The output of `pagewise ARGS` with `GLIBC_TUNABLES` set to `tunables`
/// (and `PAGEWISE_REPORT` to `report`, if given), after checking that it succeeded.
fn run_with_tunables(args: &[&str], tunables: &str, report: Option<&Path>) -> std::process::Output {
    let mut cmd = pagewise();
    cmd.args(args).env("GLIBC_TUNABLES", tunables);
    if let Some(report) = report {
        cmd.env("PAGEWISE_REPORT", report);
    }
    cmd.assert().success().get_output().clone()
}

#[test]
fn report_shows_the_environment() {
    let out = run_with_tunables(
        &[
            "run",
            "--keep-heap",
            "--keep-heap-pad",
            "128MiB",
            "--report",
            "--",
            "true",
        ],
        "glibc.malloc.trim_threshold=1",
        None,
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("glibc.malloc.top_pad = 128 MiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("kept your GLIBC_TUNABLES value"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "GLIBC_TUNABLES=glibc.malloc.trim_threshold=1:glibc.malloc.mmap_threshold=33554432"
        ),
        "{stderr}"
    );
}

/// `PAGEWISE_REPORT=FILE` with `--keep-heap` or `--thp-heap` alone writes
/// the report, with the tunables `--report` prints (before, no file at all),
/// before pagewise becomes the program: its pid is the program's.
#[test]
fn the_json_report_is_written_without_huge_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut fixes = vec![("--keep-heap", 4)];
    match pagewise::launch::thp_heap::check_here() {
        Ok(()) => fixes.push(("--thp-heap", 1)),
        Err(why) => {
            pagewise_testkit::skip_part!("--thp-heap", pagewise_testkit::Need::Thp, "{why}")
        }
    }
    for (fix, count) in fixes {
        let report = dir.path().join(format!("{fix}.json"));
        let echo = ["run", fix, "--", "sh", "-c", "echo $$ \"$GLIBC_TUNABLES\""];
        let out = run_with_tunables(&echo, "glibc.malloc.top_pad=1", Some(&report));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let (pid, tunables) = stdout.trim_end().split_once(' ').unwrap();
        let text = std::fs::read_to_string(&report)
            .unwrap_or_else(|e| panic!("{fix}: no report at {}: {e}", report.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema"], "pagewise.run/1", "{v:#}");
        assert_eq!(v["pid"].to_string(), pid, "{v:#}");
        assert!(v["program"].as_str().unwrap().ends_with("sh"), "{v:#}");
        assert_eq!(v["processes"], serde_json::json!([]), "{v:#}");
        assert!(v["preload"].is_null(), "{v:#}");
        let t = &v["tunables"];
        assert_eq!(t["fixes"], serde_json::json!([&fix[2..]]), "{v:#}");
        assert_eq!(t["glibc_tunables"], tunables, "{v:#}");
        let set = t["set"].as_array().unwrap();
        assert_eq!(set.len(), count, "{v:#}");
        for s in set {
            let kept = s["name"] == "glibc.malloc.top_pad";
            assert_eq!(s["kept_user_value"], kept, "{s}");
            assert!(s["value"].is_u64(), "{s}");
        }
    }
}

/// A program that cannot be started after the report was written (here
/// `ETXTBSY`: the file is open for writing) leaves no report describing it.
#[test]
fn a_program_that_fails_to_start_leaves_no_report() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    std::fs::copy("/bin/true", &prog).unwrap();
    let _writer = std::fs::OpenOptions::new().write(true).open(&prog).unwrap();
    let report = dir.path().join("report.json");
    let out = pagewise()
        .env("PAGEWISE_REPORT", &report)
        .args(["run", "--keep-heap", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(
        !report.exists(),
        "a report of a program that never ran: {stderr}"
    );
}

#[test]
fn exit_status_is_the_programs() {
    pagewise()
        .args(["run", "--keep-heap", "--", "sh", "-c", "exit 7"])
        .assert()
        .code(7);
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("pagewise"))
        .args(["run", "--keep-heap", "--", "sh", "-c", "kill -9 $$"])
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "pagewise becomes the program, so its signal is ours"
    );
}

#[test]
fn missing_command_exits_127() {
    let out = pagewise()
        .args(["run", "--keep-heap", "--", "no-such-command-pagewise"])
        .assert()
        .code(127)
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim(),
        "pagewise: no-such-command-pagewise: command not found"
    );
}

#[test]
fn no_fix_and_no_command_are_usage_errors() {
    // No fix, no command, a bad --huge-text value: each one line and the
    // usage status, 2 (--huge-text-lib's mistakes: huge_text.rs).
    for args in [
        &["run", "--", "true"][..],
        &["run", "--keep-heap"],
        &["run", "--huge-text=foo", "--", "true"],
        &["run", "--huge-text=hot:", "--", "true"],
    ] {
        let out = pagewise().args(args).assert().code(2).get_output().clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("pagewise: "), "{args:?}: {stderr}");
    }
}

fn assert_refused(bin: &Path, expected: &str) {
    let out = pagewise()
        .args(["run", "--keep-heap", "--"])
        .arg(bin)
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(expected), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

/// Programs whose C library is not glibc are refused (a static one without
/// glibc, one with musl's loader); a static glibc program (static and
/// static-pie) is not: glibc linked in reads GLIBC_TUNABLES too, and
/// --keep-heap stops its mmaps as it does a dynamic program's. It was
/// refused as "statically linked".
#[test]
fn static_glibc_programs_take_the_tunables_and_other_c_libraries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for flags in [&["-static"][..], &["-static-pie"]] {
        match pagewise_testkit::compiler_supports(dir.path(), flags) {
            Ok(()) => {
                let bin = pagewise_testkit::compile_c(dir.path(), "churn", CHURN, flags)
                    .unwrap_or_else(|why| panic!("{why}"));
                let (plain, kept) = printed_plain_and_under(&bin, "--keep-heap");
                assert_eq!((plain, kept), (10, 0), "{flags:?}");
            }
            Err(why) => {
                pagewise_testkit::skip_part!(flags[0], pagewise_testkit::Need::Compiler, "{why}")
            }
        }
    }
    let bare =
        "void _start(void) { __asm__ volatile(\"mov $60, %eax; xor %edi, %edi; syscall\"); }\n";
    let cases = [
        (
            "static",
            bare,
            &["-static", "-nostdlib", "-nostartfiles"][..],
            "statically linked, not against glibc",
        ),
        (
            "musl",
            "int main(void) { return 0; }\n",
            &["-Wl,--dynamic-linker=/lib/ld-musl-x86_64.so.1"][..],
            "linked against musl",
        ),
    ];
    for (name, src, flags, expected) in cases {
        match pagewise_testkit::compiler_supports(dir.path(), flags) {
            Ok(()) => {
                let bin = pagewise_testkit::compile_c(dir.path(), name, src, flags)
                    .unwrap_or_else(|why| panic!("{why}"));
                assert_refused(&bin, expected)
            }
            Err(why) => {
                pagewise_testkit::skip_part!(name, pagewise_testkit::Need::Compiler, "{why}")
            }
        }
    }
}

#[test]
fn heap_churn_bench_json() {
    let out = pagewise()
        .args([
            "bench",
            "heap-churn",
            "--threads",
            "2",
            "--max-size",
            "4MiB",
            "--min-size",
            "64KiB",
            "--iterations",
            "8",
            "--warmup",
            "2",
            "--trials",
            "1",
            "--json",
            "-q",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "pagewise.bench.heap-churn/1");
    common::check_machine(&v);
    let names: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["glibc", "keep-heap", "buffer"]);
    let rows = v["rows"].as_array().unwrap();
    let glibc_gbps = rows[0]["gbps"].as_f64().unwrap();
    let counted = pagewise::observe::thread_page_fault_counter().is_ok();
    for r in rows {
        let gbps = r["gbps"].as_f64().unwrap();
        assert!(gbps > 0.0, "{r}");
        // Each row's speedup is its throughput over the glibc row's.
        let speedup = r["speedup"].as_f64().unwrap();
        assert!((speedup - gbps / glibc_gbps).abs() <= 1e-9 * speedup, "{r}");
        // CPU times are measured (getrusage works here); faults are counted
        // where the page-faults event opens, and null (not 0) where not.
        // (getrusage counts in scheduler ticks: a run this short may take 0.)
        assert!(r["user_s"].is_f64() && r["sys_s"].is_f64(), "{r}");
        assert_eq!(r["faults_per_iter"].is_f64(), counted, "{r}");
        // mmap counts need tracepoints: a number, or null with the reason.
        assert!(
            r["mmaps_per_iter"].is_f64() || v["map_calls_note"].is_string(),
            "{r}"
        );
    }
    assert!(v["cpu_note"].is_null(), "{}", v["cpu_note"]);
    if counted {
        // The Buffer was reserved and faulted in at the largest size before
        // the measured loop: it takes no fault there.
        assert_eq!(rows[2]["faults_per_iter"], 0.0, "{}", rows[2]);
    } else {
        assert!(v["faults_note"].is_string(), "{v:#}");
    }
    assert!(v["rows"][1]["glibc_tunables"]
        .as_str()
        .unwrap()
        .contains("top_pad=4194304"));
}

#[test]
fn heap_churn_rejects_bad_sizes() {
    let out = pagewise()
        .args([
            "bench",
            "heap-churn",
            "--min-size",
            "8MiB",
            "--max-size",
            "1MiB",
        ])
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("--min-size"), "{stderr}");
}

/// `--thp-heap` where it can work: the program's 64 MiB malloc block is
/// written with a small fraction of the faults (one per 2 MiB page the kernel
/// grants instead of one per 4 KiB), with `--keep-heap` in the same
/// `GLIBC_TUNABLES`; where it cannot (old glibc, THP off), refused with the
/// reason.
#[test]
fn thp_heap_cuts_the_faults_of_a_malloc_heap() {
    let echo = [
        "run",
        "--thp-heap",
        "--keep-heap",
        "--",
        "sh",
        "-c",
        "echo \"$GLIBC_TUNABLES\"",
    ];
    if let Err(why) = pagewise::launch::thp_heap::check_here() {
        let out = pagewise().args(echo).assert().code(1).get_output().clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains("--thp-heap would change nothing"),
            "{stderr}"
        );
        pagewise_testkit::skip!(pagewise_testkit::Need::Thp, "{why}");
    }
    let out = pagewise()
        .args(echo)
        .env("GLIBC_TUNABLES", "glibc.cpu.x86_rep_movsb_threshold=4096")
        .assert()
        .success()
        .get_output()
        .clone();
    let tunables = String::from_utf8(out.stdout).unwrap();
    assert!(
        tunables.starts_with("glibc.cpu.x86_rep_movsb_threshold=4096:")
            && tunables.contains("glibc.malloc.mmap_max=0")
            && tunables.trim_end().ends_with("glibc.malloc.hugetlb=1"),
        "{tunables}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = match pagewise_testkit::compile_c(dir.path(), "touch", HEAP_TOUCH, &[]) {
        Ok(b) => b,
        Err(why) => pagewise_testkit::skip!(pagewise_testkit::Need::Compiler, "{why}"),
    };
    let (plain, huge) = printed_plain_and_under(&bin, "--thp-heap");
    assert!(plain >= 16_000, "64 MiB of 4 KiB pages: {plain} faults");
    // Where the kernel has no 2 MiB page free it falls back to 4 KiB ones;
    // most of 32 huge pages is plenty on any machine this runs on.
    assert!(
        huge * 8 < plain,
        "{huge} faults with --thp-heap, {plain} without"
    );
}
