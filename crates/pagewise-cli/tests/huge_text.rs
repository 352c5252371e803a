//! CLI tests for `pagewise run --huge-text`: real programs (a PIE and a
//! non-PIE C program with 6 MiB of text, a Rust binary, python3, a compiler
//! driver and its back end), checked against plain runs and the kernel's smaps.

use assert_cmd::Command;
use pagewise::text::perfmap::PerfMap;
use pagewise_testkit::{skip, Need};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod common;

/// Tests that touch the hugetlb pool or run many processes take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pagewise binary with the preload library it carries, cached in a test
/// directory (not the user's cache).
fn pagewise() -> Command {
    let mut c = Command::cargo_bin("pagewise").unwrap();
    c.env_remove("PAGEWISE_PRELOAD")
        .env_remove("PAGEWISE_REPORT")
        .env("XDG_CACHE_HOME", common::test_cache_home());
    c
}

const BIG_TEXT: &str = include_str!("fixtures/big_text.c");

fn build_fixture(dir: &Path, name: &str, pie: bool) -> Result<PathBuf, String> {
    let position = if pie { "-pie" } else { "-no-pie" };
    pagewise_testkit::compile_c(dir, name, BIG_TEXT, &["-fno-toplevel-reorder", position])
}

/// The big-text fixture built in `$dir`, or the test is skipped: when no
/// huge pages can take a move here, or there is no C compiler.
macro_rules! movable_fixture {
    ($dir:expr, $name:expr, $pie:expr) => {{
        if no_huge_pages() {
            skip!(Need::Thp, "THP is never and no hugetlb pool has room");
        }
        match build_fixture($dir, $name, $pie) {
            Ok(b) => b,
            Err(why) => skip!(Need::Compiler, "{why}"),
        }
    }};
}

/// A copy of pagewise that the nobody user can run, in a folder of its own
/// ([`common::binary_for_nobody`]), or the test is skipped.
macro_rules! binary_for_nobody {
    () => {
        match common::binary_for_nobody() {
            Ok(found) => found,
            Err((need, why)) => skip!(need, "{why}"),
        }
    };
}

/// Whether neither THP nor a hugetlb pool can take a move here.
fn no_huge_pages() -> bool {
    pagewise::host::thp::enabled_mode().as_deref() == Some("never")
        && pagewise::host::hugetlb::available(2 << 20) < 2
}

struct Outcome {
    stdout: String,
    stderr: String,
    report: serde_json::Value,
}

/// The perf maps a run wrote stay in /tmp by design (for `perf report`
/// afterwards); a test's go when its outcome does, even when it fails.
impl Drop for Outcome {
    fn drop(&mut self) {
        remove_perf_maps(&self.report);
    }
}

/// Removes the perf maps named in a run report: the program's and each
/// process's.
fn remove_perf_maps(report: &serde_json::Value) {
    let processes = report["processes"].as_array().into_iter().flatten();
    for map in std::iter::once(report)
        .chain(processes)
        .filter_map(|r| r["perf_map"].as_str())
    {
        let _ = std::fs::remove_file(map);
    }
}

fn run_huge(program: &[&str], extra_env: &[(&str, &str)], flags: &[&str]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut cmd = pagewise();
    cmd.arg("run").args(flags).arg("--").args(program);
    cmd.env("PAGEWISE_REPORT", &report);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = cmd.assert().success().get_output().clone();
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report at {}: {e}", report.display()));
    Outcome {
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        report: serde_json::from_str(&text).unwrap(),
    }
}

fn plain_stdout(program: &[&str]) -> String {
    let out = std::process::Command::new(program[0])
        .args(&program[1..])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn moved_ranges(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    report["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["page_kind"].is_null())
        .collect()
}

fn check_moved_and_identical(bin: &Path) {
    let program = [bin.to_str().unwrap()];
    let expected = plain_stdout(&program);
    let outcome = run_huge(
        &program,
        &[("SHOW_SMAPS", "1"), ("SHOW_ADDR", "1")],
        &["--huge-text", "--report"],
    );
    assert_eq!(outcome.stdout, expected, "output differs from a plain run");
    assert_eq!(outcome.report["schema"], "pagewise.run/1");
    let moved = moved_ranges(&outcome.report);
    assert_eq!(moved.len(), 1, "{:#}", outcome.report);
    let r = moved[0];
    // The fixture's text is 6 MiB and 1 KiB from a page boundary: its 2 MiB-aligned
    // interior is 4 MiB, or 6 MiB when the loader puts its start on a 2 MiB
    // boundary (the kernel sometimes does for large PIE segments).
    let moved_bytes = r["end"].as_u64().unwrap() - r["start"].as_u64().unwrap();
    assert!(
        moved_bytes == 4 << 20 || moved_bytes == 6 << 20,
        "moved {moved_bytes} bytes: {r}"
    );
    assert_eq!(r["huge_bytes"].as_u64().unwrap(), moved_bytes, "{r}");
    // What the move cost the start is timed: at least the copy's time, so never 0.
    assert!(r["move_micros"].as_u64().unwrap() > 0, "{r}");
    // The program's own view of its smaps (hot_function lies in the moved range).
    let huge_line = outcome.stderr.lines().any(|l| {
        l.starts_with("AnonHugePages:") && l.contains("4096 kB")
            || l.starts_with("KernelPageSize:") && l.contains("2048 kB")
    });
    assert!(
        huge_line,
        "smaps of the running program shows no huge pages:\n{}",
        outcome.stderr
    );
    assert!(
        outcome
            .stderr
            .contains(&format!("moved {} MiB onto", moved_bytes >> 20))
            && outcome.stderr.contains(" ms, "),
        "{}",
        outcome.stderr
    );
    // The perf map names hot_function at the address the program printed.
    let addr_line = outcome
        .stderr
        .lines()
        .find(|l| l.starts_with("hot_function="))
        .unwrap();
    let addr = u64::from_str_radix(
        addr_line
            .split(['=', ' '])
            .nth(1)
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert!(
        (r["start"].as_u64().unwrap()..r["end"].as_u64().unwrap()).contains(&addr),
        "hot_function {addr:#x} outside the moved range {r}"
    );
    let map_path = outcome.report["perf_map"]
        .as_str()
        .expect("perf map written");
    let map = PerfMap::read(Path::new(map_path)).unwrap();
    let _ = std::fs::remove_file(map_path);
    assert_eq!(
        map.lookup(addr + 2).map(|s| s.name.as_str()),
        Some("hot_function")
    );
}

fn fixture_moves(pie: bool) {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = movable_fixture!(dir.path(), "big", pie);
    check_moved_and_identical(&bin);
}

#[test]
fn pie_program_moves_onto_huge_pages() {
    fixture_moves(true);
}

#[test]
fn non_pie_program_moves_onto_huge_pages() {
    fixture_moves(false);
}

#[test]
fn hugetlb_is_used_when_a_pool_has_room() {
    let _s = serial();
    if !pagewise_testkit::is_root() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Root,
            "reserving hugetlb pages needs root"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = match build_fixture(dir.path(), "big_pie", true) {
        Ok(b) => b,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let reservation = pagewise::region::PoolReservation::ensure_available(2 << 20, 2).unwrap();
    if pagewise::host::hugetlb::available(2 << 20) < 2 {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Hugetlb,
            "the kernel granted only {} pages",
            reservation.obtained()
        );
    }
    let program = [bin.to_str().unwrap()];
    let outcome = run_huge(&program, &[("SHOW_SMAPS", "1")], &["--huge-text"]);
    assert_eq!(outcome.stdout, plain_stdout(&program));
    let moved = moved_ranges(&outcome.report);
    assert_eq!(moved[0]["page_kind"], "hugetlb", "{:#}", outcome.report);
    assert!(
        outcome.stderr.contains("KernelPageSize:     2048 kB"),
        "{}",
        outcome.stderr
    );
}

#[test]
fn each_failed_step_leaves_a_working_program() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = movable_fixture!(dir.path(), "big_pie", true);
    let program = [bin.to_str().unwrap()];
    let expected = plain_stdout(&program);
    for step in ["map", "copy", "protect", "remap"] {
        let outcome = run_huge(&program, &[("PAGEWISE_FAIL_AT", step)], &["--huge-text"]);
        assert_eq!(outcome.stdout, expected, "step {step}");
        let ranges = outcome.report["ranges"].as_array().unwrap();
        let skipped = ranges
            .iter()
            .find(|r| r["end"].as_u64() > r["start"].as_u64())
            .unwrap();
        assert!(skipped["page_kind"].is_null());
        let why = skipped["skipped"].as_str().unwrap();
        assert!(why.contains(&format!("the {step} step failed")), "{why}");
        assert!(outcome.report["perf_map"].is_null());
    }
}

#[test]
fn rust_binary_and_python_skip_cleanly_when_text_is_small() {
    let _s = serial();
    let pagewise_bin = assert_cmd::cargo::cargo_bin("pagewise");
    let rust = [pagewise_bin.to_str().unwrap(), "--version"];
    let outcome = run_huge(&rust, &[], &["--huge-text"]);
    assert_eq!(outcome.stdout, plain_stdout(&rust));
    for r in outcome.report["ranges"].as_array().unwrap() {
        let moved = !r["page_kind"].is_null();
        let small = r["skipped"]
            .as_str()
            .is_some_and(|s| s.contains("under 2 MiB"));
        assert!(moved || small, "{r}");
    }
    let python = ["/usr/bin/python3", "-c", "print(sum(range(10)))"];
    if !Path::new(python[0]).exists() {
        pagewise_testkit::skip_part!(
            "python3",
            pagewise_testkit::Need::Tool,
            "/usr/bin/python3 is missing"
        );
        return;
    }
    let outcome = run_huge(&python, &[], &["--huge-text"]);
    assert_eq!(outcome.stdout, "45\n");
    for r in outcome.report["ranges"].as_array().unwrap() {
        assert!(!r["page_kind"].is_null() || r["skipped"].is_string(), "{r}");
    }
}

#[test]
fn children_of_the_program_are_handled() {
    let _s = serial();
    let cc1 = std::process::Command::new("gcc")
        .arg("-print-prog-name=cc1")
        .output();
    let Ok(cc1) = cc1 else {
        skip!(Need::Compiler, "gcc is not installed");
    };
    let cc1 = String::from_utf8_lossy(&cc1.stdout).trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x.c");
    std::fs::write(&src, "int answer(void) { return 42; }\n").unwrap();
    let obj = dir.path().join("x.o");
    let report = dir.path().join("r.json");
    pagewise()
        .args(["run", "--huge-text", "--", "gcc", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .env("PAGEWISE_REPORT", &report)
        .assert()
        .success();
    assert!(obj.is_file());
    // FILE holds the driver's report, and every process's under "processes".
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let reports = v["processes"].as_array().unwrap();
    let back_end = reports
        .iter()
        .find(|r| {
            r["program"].as_str() == Some(cc1.as_str())
                || r["program"].as_str().is_some_and(|p| p.ends_with("/cc1"))
        })
        .unwrap_or_else(|| panic!("no report from cc1 among {reports:#?}"));
    let moved = moved_ranges(back_end);
    assert!(!moved.is_empty(), "cc1 was not moved: {back_end:#}");
    assert!(moved[0]["huge_bytes"].as_u64().unwrap() >= 2 << 20);
    // The parent wrote cc1's perf map from its report, after cc1 moved (or says
    // why not: a cc1 stripped of its dynamic symbols too has nothing to name).
    match back_end["perf_map"].as_str() {
        Some(map) => assert!(!PerfMap::read(Path::new(map)).unwrap().symbols().is_empty()),
        None => assert!(
            back_end["perf_map_note"].is_string(),
            "no perf map and no reason: {back_end:#}"
        ),
    }
    remove_perf_maps(&v);
    // Nothing else was written beside FILE (no FILE.PID any more).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("r.json"))
        .collect();
    assert_eq!(names, ["r.json"]);
}

#[test]
fn hot_profile_limits_the_move_to_hot_pages() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = match build_fixture(dir.path(), "big_pie", true) {
        Ok(b) => b,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let table = pagewise::text::function_table::FunctionTable::read(&bin).unwrap();
    let hot = &table.functions()[table.by_name("hot_function").unwrap()];
    let profile = dir.path().join("hot.profile");
    std::fs::write(
        &profile,
        format!(
            "# pagewise-profile 1\n# event cpu-clock\nobject 0 {}\nstack 100 0:{:x}\n",
            bin.display(),
            hot.vaddr + 1
        ),
    )
    .unwrap();
    let flag = format!("--huge-text=hot:{}", profile.display());
    let program = [bin.to_str().unwrap()];
    let cache = dir.path().join("cache");
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    // The first run resolves the profile and caches the pages; the second reuses them.
    for (run, said) in [
        (1, "hot pages resolved and saved to"),
        (2, "hot pages reused from"),
    ] {
        let outcome = run_huge(&program, &env, &[flag.as_str(), "--report"]);
        assert!(
            outcome.stderr.contains(said),
            "run {run}: {}",
            outcome.stderr
        );
        assert_eq!(outcome.stdout, plain_stdout(&program));
        let moved = moved_ranges(&outcome.report);
        assert_eq!(moved.len(), 1, "run {run}: {:#}", outcome.report);
        assert_eq!(
            moved[0]["end"].as_u64().unwrap() - moved[0]["start"].as_u64().unwrap(),
            2 << 20
        );
    }
}

/// A library whose toolchain marked part of its text cold (BOLT's
/// `.bolt.org.text`): moving everything leaves those 2 MiB pages, says why,
/// and the program's output is the same.
#[test]
fn cold_sections_of_a_library_stay_where_they_are() {
    let _s = serial();
    if no_huge_pages() {
        skip!(Need::Thp, "THP is never and no hugetlb pool has room");
    }
    let dir = tempfile::tempdir().unwrap();
    let lib_src = include_str!("fixtures/cold_text_lib.c");
    let lib_out = dir.path().join("libcoldtext.so");
    let lib_c = dir.path().join("cold_text_lib.c");
    std::fs::write(&lib_c, lib_src).unwrap();
    if let Err(why) = pagewise_testkit::compile_c_file(&lib_c, &lib_out, &["-shared", "-fPIC"]) {
        skip!(Need::Compiler, "{why}");
    }
    let dir_flag = format!("-L{}", dir.path().display());
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    let bin = pagewise_testkit::compile_c(
        dir.path(),
        "cold_text_main",
        include_str!("fixtures/cold_text_main.c"),
        &[dir_flag.as_str(), "-lcoldtext", rpath.as_str()],
    )
    .unwrap();
    let program = [bin.to_str().unwrap()];
    let outcome = run_huge(
        &program,
        &[],
        &["--huge-text", "--huge-text-lib", "libcoldtext"],
    );
    assert_eq!(outcome.stdout, plain_stdout(&program));
    let ranges = outcome.report["ranges"].as_array().unwrap();
    let lib: Vec<&serde_json::Value> = ranges
        .iter()
        .filter(|r| r["object"].as_str().unwrap().ends_with("libcoldtext.so"))
        .collect();
    let bytes = |r: &serde_json::Value| r["end"].as_u64().unwrap() - r["start"].as_u64().unwrap();
    let cold: u64 = lib
        .iter()
        .filter(|r| {
            r["skipped"]
                .as_str()
                .is_some_and(|s| s.contains("found cold (.bolt.org.text)"))
        })
        .map(|r| bytes(r))
        .sum();
    let moved: u64 = lib
        .iter()
        .filter(|r| !r["page_kind"].is_null())
        .map(|r| bytes(r))
        .sum();
    // 6 MiB of cold code hold 2 whole 2 MiB pages at least; 5 MiB of ordinary
    // code hold at least one, and no page with ordinary code is left.
    assert!(cold >= 4 << 20, "cold bytes left {cold}: {lib:#?}");
    assert!(moved >= 2 << 20, "moved {moved}: {lib:#?}");
    assert!(moved + cold <= 12 << 20, "{lib:#?}");
}

#[test]
fn bad_huge_text_arguments_are_one_line_errors() {
    let out = pagewise()
        .args(["run", "--huge-text=warm", "--", "true"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("expected all or hot:PROFILE"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1);
    let out = pagewise()
        .args(["run", "--huge-text=hot:/no/such/profile", "--", "true"])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8(out.stderr)
            .unwrap()
            .trim_end()
            .lines()
            .count(),
        1
    );
    let out = pagewise()
        .args(["run", "--huge-text", "--", "true"])
        .env("PAGEWISE_PRELOAD", "/no/such/lib.so")
        .assert()
        .failure()
        .get_output()
        .clone();
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("PAGEWISE_PRELOAD"));
}

/// `--huge-text-lib` without `--huge-text` says so, beside another fix too
/// (not "nothing to apply"); an empty name, or one with the `,` that
/// separates the names given to the preload library, is refused (by `bench
/// run` as well): each a one-line usage error before anything runs.
#[test]
fn huge_text_lib_needs_huge_text_and_one_library_name() {
    let needs = "pagewise: --huge-text-lib needs --huge-text";
    let cases: [(&[&str], &str); 6] = [
        (&["run", "--huge-text-lib", "libc", "--", "true"], needs),
        (
            &[
                "run",
                "--keep-heap",
                "--huge-text-lib",
                "libc",
                "--",
                "true",
            ],
            needs,
        ),
        (
            &["run", "--huge-text", "--huge-text-lib", "", "--", "true"],
            "a library name is needed",
        ),
        (
            &["run", "--huge-text", "--huge-text-lib=", "--", "true"],
            "a library name is needed",
        ),
        (
            &[
                "run",
                "--huge-text",
                "--huge-text-lib",
                "libc,libm",
                "--",
                "true",
            ],
            "one library per --huge-text-lib",
        ),
        (
            &[
                "bench",
                "run",
                "--fix",
                "huge-text",
                "--huge-text-lib",
                "",
                "--",
                "true",
            ],
            "a library name is needed",
        ),
    ];
    for (args, message) in cases {
        let out = pagewise().args(args).assert().code(2).get_output().clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("pagewise: "), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The processes of the program never write into its stdout or stderr:
/// a parent that captures a child's stderr gets only what the child wrote,
/// and the `--report` lines of every process (one whose stderr is captured
/// or discarded, one where the move could not apply) reach pagewise's own
/// stderr. Before, each process printed its lines into its own stderr.
#[test]
fn report_lines_never_go_into_the_programs_streams() {
    let _s = serial();
    let script = r#"out=$(sh -c 'echo child' 2>&1); echo "captured=[$out]"
sh -c 'exit 0' 2>/dev/null
err=$(PAGEWISE_HUGE_TEXT=bogus sh -c 'exit 0' 2>&1); echo "bogus=[$err]""#;
    let outcome = run_huge(&["sh", "-c", script], &[], &["--huge-text", "--report"]);
    assert_eq!(outcome.stdout, "captured=[child]\nbogus=[]\n");
    let processes = outcome.report["processes"].as_array().unwrap();
    assert!(processes.len() >= 4, "{:#}", outcome.report);
    for p in processes {
        let pid = p["pid"].as_u64().unwrap();
        assert!(
            outcome.stderr.contains(&format!("pagewise[{pid}] ")),
            "no line of {pid}: {}",
            outcome.stderr
        );
    }
    let bogus = processes
        .iter()
        .find(|p| p["not_applied"].is_string())
        .unwrap_or_else(|| panic!("{:#}", outcome.report));
    let program = Path::new(bogus["program"].as_str().unwrap());
    let shell = program.file_name().unwrap().to_string_lossy();
    let line = format!(
        "pagewise[{}] {shell}: huge text not applied: PAGEWISE_HUGE_TEXT=\"bogus\"",
        bogus["pid"]
    );
    assert!(outcome.stderr.contains(&line), "{}", outcome.stderr);
}

/// With `--huge-text` and the heap fixes, the JSON report holds the
/// tunables `--report` prints, beside the processes' reports (before, they
/// were left out).
#[test]
fn the_json_report_holds_the_tunables_beside_huge_text() {
    let mut flags = vec!["--huge-text", "--keep-heap"];
    if pagewise::launch::thp_heap::check_here().is_ok() {
        flags.push("--thp-heap");
    }
    let outcome = run_huge(&["sh", "-c", "echo \"$GLIBC_TUNABLES\""], &[], &flags);
    let tunables = &outcome.report["tunables"];
    assert_eq!(
        tunables["glibc_tunables"].as_str(),
        Some(outcome.stdout.trim_end()),
        "{:#}",
        outcome.report
    );
    let fixes: Vec<&str> = flags[1..].iter().map(|f| &f[2..]).collect();
    assert_eq!(tunables["fixes"], serde_json::json!(fixes));
    let set = tunables["set"].as_array().unwrap();
    assert!(
        set.iter().any(|t| t["name"] == "glibc.malloc.mmap_max"),
        "{set:#?}"
    );
    assert!(!outcome.report["processes"].as_array().unwrap().is_empty());
    assert!(outcome.report["preload"]["path"].is_string());
    // A program the library did not run in still gets its report, saying so
    // (before: no file, and a line saying it was not written).
    let dir = tempfile::tempdir().unwrap();
    let not_a_library = dir.path().join("not-a-library.so");
    std::fs::write(&not_a_library, "text\n").unwrap();
    let preload = not_a_library.to_str().unwrap();
    let outcome = run_huge(&["true"], &[("PAGEWISE_PRELOAD", preload)], &flags);
    let report = &outcome.report;
    assert!(
        report["not_applied"]
            .as_str()
            .is_some_and(|s| s.contains("the preload library did not run in it")),
        "{report:#}"
    );
    assert_eq!(report["processes"], serde_json::json!([]), "{report:#}");
    assert!(
        report["tunables"]["glibc_tunables"].is_string(),
        "{report:#}"
    );
}

/// A `--huge-text-lib` that matches no library of a process is said for
/// that process, on `--report` and in the JSON report; before, it was
/// ignored in silence.
#[test]
fn a_huge_text_lib_that_matches_nothing_is_reported() {
    let outcome = run_huge(
        &["sh", "-c", "exit 0"],
        &[],
        &[
            "--huge-text",
            "--huge-text-lib",
            "libnonexistent",
            "--huge-text-lib",
            "libc.so",
            "--report",
        ],
    );
    let line = "--huge-text-lib libnonexistent: no such library in this process";
    let pid = outcome.report["pid"].as_u64().unwrap();
    assert!(
        outcome
            .stderr
            .lines()
            .any(|l| l.starts_with(&format!("pagewise[{pid}] ")) && l.contains(line)),
        "{}",
        outcome.stderr
    );
    assert!(
        !outcome.stderr.contains("lib libc.so:"),
        "{}",
        outcome.stderr
    );
    assert_eq!(
        outcome.report["libs_not_found"],
        serde_json::json!(["libnonexistent"]),
        "{:#}",
        outcome.report
    );
}

const MDWE_WRAPPER: &str = r#"
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    (void)argc;
    if (prctl(65 /* PR_SET_MDWE */, 1 /* PR_MDWE_REFUSE_EXEC_GAIN */, 0, 0, 0) != 0) { perror("PR_SET_MDWE"); return 125; }
    execv(argv[1], argv + 1);
    perror("execv");
    return 127;
}
"#;

#[test]
fn a_w_x_policy_is_reported_and_the_program_runs() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = match build_fixture(dir.path(), "big_pie", true) {
        Ok(b) => b,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let wrapper = match pagewise_testkit::compile_c(dir.path(), "mdwe", MDWE_WRAPPER, &[]) {
        Ok(b) => b,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let probe = std::process::Command::new(&wrapper)
        .arg("/bin/true")
        .status()
        .unwrap();
    if probe.code() == Some(125) {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Kernel,
            "this kernel has no PR_SET_MDWE"
        );
    }
    let report = dir.path().join("r.json");
    let out = pagewise()
        .args(["run", "--huge-text", "--"])
        .arg(&wrapper)
        .arg(&bin)
        .env("PAGEWISE_REPORT", &report)
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        plain_stdout(&[bin.to_str().unwrap()])
    );
    // The wrapper execs the fixture in the same process, which rewrites the report.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let skipped: Vec<&str> = v["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["skipped"].as_str())
        .collect();
    assert!(
        skipped.iter().any(|s| s.contains("W^X policy refused")),
        "{v:#}"
    );
    assert!(moved_ranges(&v).is_empty());
}

#[test]
fn an_existing_perf_map_is_left_alone_and_reported() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = movable_fixture!(dir.path(), "big_pie", true);
    // The program is sh: it creates the map file for its own pid, then execs
    // the fixture in the same process, whose map is then the one refused.
    let planted = dir.path().join("planted");
    let script = format!(
        "echo planted > /tmp/perf-$$.map; echo $$ > {}; exec {}",
        planted.display(),
        bin.display()
    );
    let report = dir.path().join("r.json");
    pagewise()
        .args(["run", "--huge-text", "--", "sh", "-c", &script])
        .env("PAGEWISE_REPORT", &report)
        .assert()
        .success();
    let pid = std::fs::read_to_string(&planted).unwrap().trim().to_owned();
    let map_path = format!("/tmp/perf-{pid}.map");
    let content = std::fs::read_to_string(&map_path).unwrap();
    let _ = std::fs::remove_file(&map_path);
    assert_eq!(content, "planted\n", "the existing file was overwritten");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(v["perf_map"].is_null());
    assert!(
        v["perf_map_note"]
            .as_str()
            .unwrap()
            .contains("not overwritten"),
        "{v:#}"
    );
}

#[test]
fn static_programs_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    if let Err(why) = pagewise_testkit::compiler_supports(dir.path(), &["-static"]) {
        skip!(Need::Compiler, "{why}");
    }
    let bin = pagewise_testkit::compile_c(
        dir.path(),
        "s",
        "int main(void) { return 0; }\n",
        &["-static"],
    )
    .unwrap_or_else(|why| panic!("{why}"));
    let out = pagewise()
        .args(["run", "--huge-text", "--"])
        .arg(&bin)
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("statically linked") && stderr.contains("--huge-text"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1);
}

/// Secure mode as the kernel decides it (glibc then ignores LD_PRELOAD
/// and GLIBC_TUNABLES) refuses every fix in one line, and only secure mode
/// does: root running a set-user-ID-root program is not in it (it was
/// refused for --huge-text), while --keep-heap claimed to apply to a
/// set-user-ID program of another user.
#[test]
fn programs_in_secure_mode_are_refused_and_only_they() {
    use std::os::unix::fs::{chown, PermissionsExt};
    let _s = serial();
    let (dir, bin) = binary_for_nobody!();
    let program = dir.path().join("true");
    pagewise_testkit::copy_executable(Path::new("/bin/true"), &program);
    let set = |owner: u32, group: u32, mode: u32| {
        // chown clears the set-ID bits: the mode comes after it.
        chown(&program, Some(owner), Some(group)).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let mut fixes = vec!["--huge-text", "--keep-heap"];
    if pagewise::launch::thp_heap::check_here().is_ok() {
        fixes.push("--thp-heap");
    }
    let run = |fix: &str| pagewise().args(["run", fix, "--"]).arg(&program).assert();
    let refused = |fix: &str, why: &str| {
        let out = run(fix).code(1).get_output().clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        let said = format!("{} runs in secure mode ({why}): ", program.display());
        assert!(
            stderr.starts_with("pagewise: ") && stderr.contains(&said) && stderr.contains(fix),
            "{fix}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    };
    set(0, 0, 0o4755);
    for fix in &fixes {
        run(fix).success();
    }
    set(65534, 0, 0o4755);
    for fix in &fixes {
        refused(fix, "set-user-ID, owned by uid 65534, and you are uid 0");
    }
    set(0, 65534, 0o2755);
    for fix in &fixes {
        refused(fix, "set-group-ID, group gid 65534, and your gid is 0");
    }
    // Without the group execute bit, set-group-ID means mandatory locking.
    set(0, 65534, 0o2745);
    run("--keep-heap").success();
    set(0, 0, 0o755);
    let setcap = std::process::Command::new("setcap")
        .args(["cap_net_raw+ep"])
        .arg(&program)
        .status();
    if !setcap.is_ok_and(|s| s.success()) {
        pagewise_testkit::skip_part!(
            "file capabilities",
            Need::Tool,
            "setcap is missing or cannot set capabilities here"
        );
        return;
    }
    // Root is not in secure mode for capabilities; another user is.
    run("--keep-heap").success();
    let out = common::as_nobody(&bin, &["run", "--keep-heap", "--"])
        .arg(&program)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "runs in secure mode (file capabilities in security.capability, and you are not root)"
        ),
        "{stderr}"
    );
}

#[test]
fn the_embedded_library_goes_to_a_private_cache_once() {
    let _s = serial();
    // A copy of the binary with nothing beside it, and a home of its own.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("pagewise");
    pagewise_testkit::copy_executable(&assert_cmd::cargo::cargo_bin("pagewise"), &bin);
    let home = dir.path().join("home");
    let run = |report: &Path| {
        let out = Command::new(&bin)
            .args(["run", "--huge-text", "--report", "--", "/bin/true"])
            .env_remove("PAGEWISE_PRELOAD")
            .env_remove("XDG_CACHE_HOME")
            .env("HOME", &home)
            .env("PAGEWISE_REPORT", report)
            .assert()
            .success()
            .get_output()
            .clone();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
        (String::from_utf8(out.stderr).unwrap(), report)
    };
    let (stderr, first) = run(&dir.path().join("r1.json"));
    assert!(
        stderr.contains("embedded (written to the cache now)"),
        "{stderr}"
    );
    let cache = home.join(".cache").join("pagewise");
    let libs: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(libs.len(), 1, "{libs:?}");
    assert_eq!(first["preload"]["path"], libs[0].display().to_string());
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cache), 0o700);
    assert_eq!(mode(&libs[0]) & 0o022, 0);
    let size = std::fs::metadata(&libs[0]).unwrap().len();
    assert!(size < 2 << 20, "the preload library is {size} bytes");
    let (stderr, second) = run(&dir.path().join("r2.json"));
    assert!(stderr.contains("embedded (cached)"), "{stderr}");
    assert_eq!(second["preload"]["source"], "embedded (cached)");
    // A changed copy is never used: it is replaced.
    std::fs::write(&libs[0], b"not a library").unwrap();
    let (stderr, _) = run(&dir.path().join("r3.json"));
    assert!(stderr.contains("written to the cache now"), "{stderr}");
    assert_eq!(std::fs::metadata(&libs[0]).unwrap().len(), size);
}

/// As a user whose home cannot hold a cache (nobody, whose home is
/// /nonexistent), every cache falls back to the same private directory in
/// the temporary one: the preload library and the moved text's functions
/// (for the perf map) both go to `$TMPDIR/pagewise-65534`, made 0700, and no
/// run says a cache could not be used.
#[test]
fn without_a_usable_home_every_cache_falls_back_to_one_private_directory() {
    let _s = serial();
    let (dir, bin) = binary_for_nobody!();
    let program = movable_fixture!(dir.path(), "big_text_pie", true);
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let run = || {
        let out = common::as_nobody(&bin, &["run", "--huge-text", "--report", "--"])
            .arg(&program)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("PAGEWISE_PRELOAD")
            .env_remove("PAGEWISE_PERF_MAP")
            .env("HOME", "/nonexistent")
            .env("TMPDIR", &tmp)
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{stderr}");
        for line in stderr.lines() {
            if let Some(map) = line.split("perf map ").nth(1) {
                let _ = std::fs::remove_file(map.trim());
            }
        }
        stderr
    };
    let stderr = run();
    assert!(stderr.contains("moved"), "nothing moved: {stderr}");
    assert!(stderr.contains("passed over"), "{stderr}");
    assert!(!stderr.contains("not cached"), "{stderr}");
    let cache = tmp.join("pagewise-65534");
    let meta = std::fs::symlink_metadata(&cache).unwrap();
    assert!(meta.is_dir());
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o700));
    let names: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for prefix in ["libpagewise_preload-", "functions-"] {
        assert!(
            names.iter().any(|n| n.starts_with(prefix)),
            "no {prefix}* in {names:?}"
        );
    }
    // The next run finds both there.
    let stderr = run();
    assert!(stderr.contains("embedded (cached)"), "{stderr}");
    assert!(!stderr.contains("not cached"), "{stderr}");
}

#[test]
fn child_reports_never_follow_planted_links() {
    let _s = serial();
    // Another user plants FILE.PID links for the pids to come and a link at
    // FILE itself (issue 15.2); every process of the run has a report.
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let report = dir.path().join("r.json");
    let last_pid: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0);
    for pid in last_pid + 1..last_pid + 400 {
        let _ = std::os::unix::fs::symlink(&victim, dir.path().join(format!("r.json.{pid}")));
    }
    std::os::unix::fs::symlink(&victim, &report).unwrap();
    let run = || {
        pagewise()
            .args(["run", "--huge-text", "--", "sh", "-c"])
            .arg("ls / >/dev/null; ls / >/dev/null")
            .env("PAGEWISE_REPORT", &report)
            .assert()
            .success()
            .get_output()
            .clone()
    };
    let out = run();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("symbolic link"), "{stderr}");
    // With a plain path the report gathers the shell and both children.
    std::fs::remove_file(&report).unwrap();
    run();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(v["processes"].as_array().unwrap().len() >= 3, "{v:#}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

fn hot_function_address(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("hot_function="))
        .filter_map(|l| u64::from_str_radix(l.split(' ').next()?.trim_start_matches("0x"), 16).ok())
        .collect()
}

#[test]
fn the_perf_map_follows_an_exec_that_keeps_the_pid() {
    let _s = serial();
    if no_huge_pages() {
        skip!(Need::Thp, "THP is never and no hugetlb pool has room");
    }
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = match (
        build_fixture(dir.path(), "first", true),
        build_fixture(dir.path(), "second", false),
    ) {
        (Ok(first), Ok(second)) => (first, second),
        (Err(why), _) | (_, Err(why)) => skip!(Need::Compiler, "{why}"),
    };
    // `first` moves its text, then execs `second` (as rustup execs rustc), which
    // moves its own at other addresses: the map must end up naming second's code.
    let outcome = run_huge(
        &[first.to_str().unwrap()],
        &[("SHOW_ADDR", "1"), ("EXEC_NEXT", second.to_str().unwrap())],
        &["--huge-text"],
    );
    let addresses = hot_function_address(&outcome.stderr);
    assert_eq!(addresses.len(), 2, "{}", outcome.stderr);
    let processes = outcome.report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{:#}", outcome.report);
    assert_eq!(processes[0]["pid"], processes[1]["pid"]);
    assert_eq!(outcome.report["program"], second.display().to_string());
    let map_path = outcome.report["perf_map"]
        .as_str()
        .unwrap_or_else(|| panic!("no perf map after the exec: {:#}", outcome.report));
    let map = PerfMap::read(Path::new(map_path)).unwrap();
    let _ = std::fs::remove_file(map_path);
    assert_eq!(
        map.lookup(addresses[1]).map(|s| s.name.as_str()),
        Some("hot_function")
    );
    assert!(
        map.lookup(addresses[0]).is_none(),
        "the first program's map is still there"
    );
}

/// A program that moves its text and then execs one that moves nothing
/// (`/bin/true`): the map is removed (by design), and the first program's
/// report says so instead of naming a file that is gone.
#[test]
fn a_perf_map_removed_after_an_exec_is_not_named_as_written() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let first = movable_fixture!(dir.path(), "first", true);
    let outcome = run_huge(
        &[first.to_str().unwrap()],
        // Exec only once the first map is written: otherwise, on a busy
        // machine, both reports can be read together and the first map is
        // (rightly) never written, the case the gatherer's unit tests cover.
        &[
            ("EXEC_NEXT", "/bin/true"),
            ("EXEC_AFTER", "/tmp/perf-%d.map"),
        ],
        &["--huge-text", "--report"],
    );
    let processes = outcome.report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{:#}", outcome.report);
    let moved = &processes[0];
    assert!(!moved_ranges(moved).is_empty(), "{moved:#}");
    let pid = moved["pid"].as_u64().unwrap();
    let map = format!("/tmp/perf-{pid}.map");
    assert!(!Path::new(&map).exists());
    assert!(moved["perf_map"].is_null(), "{moved:#}");
    let removed = moved["perf_map_removed"].as_str().unwrap();
    assert!(
        removed.starts_with(&format!("{map} removed: ")) && removed.contains("moved no text"),
        "{removed}"
    );
    assert!(
        outcome.stderr.contains(&format!("perf map {removed}")),
        "{}",
        outcome.stderr
    );
}

#[test]
fn no_read_of_the_executable_before_main() {
    let _s = serial();
    let strace = Path::new("/usr/bin/strace");
    if !strace.exists() {
        skip!(Need::Tool, "/usr/bin/strace is missing");
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = movable_fixture!(dir.path(), "big", true);
    let trace = dir.path().join("trace");
    let report = dir.path().join("r.json");
    let probe = std::process::Command::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "/bin/true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        skip!(Need::Tool, "strace cannot trace here (ptrace refused?)");
    }
    let out = std::process::Command::new(strace)
        .args([
            "-ff",
            "-qq",
            "-e",
            "trace=open,openat,openat2,read,pread64,execve",
            "-o",
        ])
        .arg(&trace)
        .arg(assert_cmd::cargo::cargo_bin("pagewise"))
        .args(["run", "--huge-text", "--"])
        .arg(&bin)
        .env("XDG_CACHE_HOME", common::test_cache_home())
        .env("PAGEWISE_REPORT", &report)
        .env_remove("PAGEWISE_PRELOAD")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(!moved_ranges(&v).is_empty(), "nothing moved: {v:#}");
    remove_perf_maps(&v);
    // The program's own trace (-ff writes one file per pid): from its execve on,
    // nothing may open its executable (the parent reads it for the perf map).
    let pid = v["pid"].as_u64().unwrap();
    let calls = std::fs::read_to_string(format!("{}.{pid}", trace.display())).unwrap();
    let after_exec = calls
        .lines()
        .skip_while(|l| !l.starts_with("execve("))
        .collect::<Vec<_>>();
    assert!(
        !after_exec.is_empty(),
        "no execve in the program's trace:\n{calls}"
    );
    let exe = bin.display().to_string();
    let opened: Vec<&&str> = after_exec
        .iter()
        .skip(1)
        .filter(|l| l.starts_with("open") && (l.contains(&exe) || l.contains("/exe\"")))
        .collect();
    assert!(
        opened.is_empty(),
        "the program opened its own executable: {opened:#?}"
    );
    // And no large read: the move reads /proc files and pagemap, nothing more.
    let big_reads: Vec<&&str> = after_exec
        .iter()
        .filter(|l| l.starts_with("read(") || l.starts_with("pread64("))
        .filter(|l| {
            l.rsplit(" = ")
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 1 << 20)
        })
        .collect();
    assert!(big_reads.is_empty(), "large reads: {big_reads:#?}");
}

#[test]
fn peak_rss_grows_by_at_most_the_moved_bytes_and_2_mib() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = movable_fixture!(dir.path(), "big", true);
    let hwm = |stderr: &str| -> u64 {
        let line = stderr
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .unwrap_or_else(|| panic!("no VmHWM in {stderr}"));
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    // The baseline is the same run with the preload library loaded but the move
    // failing at its first step: what is measured is what the move adds.
    let unmoved = run_huge(
        &[bin.to_str().unwrap()],
        &[
            ("SHOW_HWM", "1"),
            ("PAGEWISE_PERF_MAP", "0"),
            ("PAGEWISE_FAIL_AT", "map"),
        ],
        &["--huge-text"],
    );
    assert!(moved_ranges(&unmoved.report).is_empty());
    let without = hwm(&unmoved.stderr);
    let outcome = run_huge(
        &[bin.to_str().unwrap()],
        &[("SHOW_HWM", "1"), ("PAGEWISE_PERF_MAP", "0")],
        &["--huge-text"],
    );
    let moved: u64 = moved_ranges(&outcome.report)
        .iter()
        .map(|r| r["end"].as_u64().unwrap() - r["start"].as_u64().unwrap())
        .sum();
    assert!(moved > 0, "{:#}", outcome.report);
    let with = hwm(&outcome.stderr);
    assert!(
        with <= without + moved + (2 << 20),
        "peak RSS {with} with the move, {without} with the move failing at once, {moved} bytes moved"
    );
}

#[test]
fn the_parent_passes_on_exit_status_and_signals() {
    let status = |script: &str| {
        pagewise()
            .args(["run", "--huge-text", "--", "sh", "-c", script])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(status("exit 7"), Some(7));
    assert_eq!(status("kill -TERM $$"), Some(128 + 15));
    // SIGTERM to pagewise reaches the program (as it would had it been started
    // directly), and pagewise ends with the program's status.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut parent = std::process::Command::new(assert_cmd::cargo::cargo_bin("pagewise"))
        .args(["run", "--huge-text", "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 30", pid_file.display()))
        .env("XDG_CACHE_HOME", common::test_cache_home())
        .env_remove("PAGEWISE_PRELOAD")
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let program = common::pid_written_to(&pid_file);
    assert_ne!(program, parent.id(), "the program runs as a child");
    common::send_signal(parent.id().into(), "TERM");
    let status = parent.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15));
    assert!(started.elapsed().as_secs() < 20);
    assert!(
        common::has_ended(program),
        "the program outlived the signal"
    );
}

/// Preloaded by hand (no report directory), the library says on the
/// program's stderr why it could not apply; when that cannot be written
/// (here /dev/full), the program must still run and exit as it would (an
/// `eprintln!` there panicked and aborted it: exit 134).
#[test]
fn an_unwritable_stderr_never_stops_the_program() {
    let lib = common::preload_library();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let status = std::process::Command::new("/bin/true")
        .env("LD_PRELOAD", &lib)
        .env("PAGEWISE_HUGE_TEXT", "not-a-mode")
        .stderr(full)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
}
