//! CLI tests for `pagewise bench run`: a small real program (the 6 MiB-text C
//! fixture) with and without `--fix huge-text`, and the same command as a
//! no-op variant, which must come out within noise.

use assert_cmd::Command;
use pagewise_testkit::{skip, Need};

mod common;

const BIG_TEXT: &str = include_str!("fixtures/big_text.c");

fn pagewise() -> Command {
    let mut c = Command::cargo_bin("pagewise").unwrap();
    c.env_remove("PAGEWISE_PRELOAD")
        .env_remove("PAGEWISE_REPORT")
        .env("XDG_CACHE_HOME", common::test_cache_home());
    c
}

#[test]
fn a_fix_and_a_no_op_in_randomised_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = match pagewise_testkit::compile_c(
        dir.path(),
        "big_text",
        BIG_TEXT,
        &["-fno-toplevel-reorder", "-no-pie"],
    ) {
        Ok(b) => b,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let pairs = 12;
    // At 99% with 12 pairs the interval is the whole range of the ratios: a
    // no-op falls outside it only when all 12 land on one side (2 in 4096).
    let out = pagewise()
        .args(["bench", "run", "--fix", "huge-text", "--variant", "same="])
        .args([
            "-n",
            &pairs.to_string(),
            "--confidence",
            "0.99",
            "--seed",
            "3",
        ])
        .args(["--json", "-q", "--"])
        .arg(&bin)
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "pagewise.bench.run/1");
    common::check_machine(&v);
    assert_eq!(v["exit_status"], 0);
    assert_eq!(v["blocks_measured"], pairs);
    assert!(v["load"]["start"].is_array(), "{}", v["load"]);
    // A sentence when the load moved during the runs, else null; never absent.
    assert!(
        v["load_warning"].is_null() || v["load_warning"].is_string(),
        "{}",
        v["load_warning"]
    );
    let names: Vec<&str> = v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["baseline", "huge-text", "same"]);
    assert_eq!(v["variants"][1]["kind"], "fixes");
    assert_eq!(v["variants"][2]["argv"][0], bin.to_str().unwrap());
    for m in [
        "wall_s",
        "user_s",
        "sys_s",
        "minor_faults",
        "major_faults",
        "max_rss_bytes",
    ] {
        let s = &v["variants"][0]["metrics"][m];
        assert!(
            s["min"].as_f64().unwrap() <= s["median"].as_f64().unwrap(),
            "{m}: {s}"
        );
        assert!(
            s["median"].as_f64().unwrap() <= s["max"].as_f64().unwrap(),
            "{m}: {s}"
        );
    }

    // Pairing: one warm-up block, then `pairs` blocks; each runs every
    // variant once, in an order that changes from block to block.
    let blocks = v["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), pairs + 1);
    assert_eq!(blocks[0]["warmup"], true);
    let mut orders = std::collections::HashSet::new();
    for b in &blocks[1..] {
        assert_eq!(b["warmup"], false);
        let mut order: Vec<&str> = b["order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        orders.insert(order.clone());
        order.sort_unstable();
        assert_eq!(order, ["baseline", "huge-text", "same"]);
        assert_eq!(b["runs"].as_array().unwrap().len(), 3);
        assert!(b["runs"][0]["wall_s"].as_f64().unwrap() > 0.0);
    }
    assert!(orders.len() > 1, "the order never changed: {orders:?}");

    // The no-op against the baseline is within noise, and its ratios bracket 1.
    let comparisons = v["comparisons"].as_array().unwrap();
    let same = comparisons
        .iter()
        .find(|c| c["variant"] == "same" && c["against"] == "baseline")
        .unwrap();
    assert_eq!(same["verdict"], "within-noise", "{same}");
    let wall = &same["ratio"]["wall_s"];
    assert!(wall["low"].as_f64().unwrap() <= 1.0 && wall["high"].as_f64().unwrap() >= 1.0);
    assert!(wall["confidence"].as_f64().unwrap() >= 0.99);
    assert!(same["rss_bound"].is_null());
    // The fix is compared with the baseline and with the argument variant.
    let fix = comparisons
        .iter()
        .find(|c| c["variant"] == "huge-text" && c["against"] == "baseline")
        .unwrap();
    assert!(["helped", "hurt", "within-noise"].contains(&fix["verdict"].as_str().unwrap()));
    assert!(comparisons
        .iter()
        .any(|c| c["variant"] == "huge-text" && c["against"] == "same"));

    let moved = v["variants"][1]["moved_bytes"].as_u64().unwrap();
    if moved == 0 {
        eprintln!(
            "huge-text moved nothing here ({}): the RSS bound is not checked",
            v["variants"][1]["not_moved"]
        );
        return;
    }
    assert!(moved >= 2 << 20);
    let bound = &fix["rss_bound"];
    assert_eq!(bound["moved_bytes"].as_u64().unwrap(), moved);
    assert_eq!(bound["bound_bytes"].as_u64().unwrap(), moved + (2 << 20));
    // What of it went to hugetlb pages, which RSS does not count, is said apart.
    let on_hugetlb = v["variants"][1]["moved_hugetlb_bytes"].as_u64().unwrap();
    assert_eq!(bound["hugetlb_bytes"].as_u64().unwrap(), on_hugetlb);
    assert!(on_hugetlb <= moved);
    assert!(bound["within"].is_boolean());
}

#[test]
fn the_table_says_the_verdict_in_words() {
    let out = pagewise()
        .args(["bench", "run", "--variant", "same=", "-n", "3", "-q", "--"])
        .args(["sh", "-c", "exit 0"])
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("machine: "), "{text}");
    assert!(text.contains("load average"), "{text}");
    assert!(text.contains("same against baseline: wall"), "{text}");
    // Three pairs cannot make a 95% interval (the sign test needs 6): the
    // table says so instead of a verdict.
    assert!(
        text.contains("too few pairs for a 95% interval: no verdict (give -n 6 or more)"),
        "{text}"
    );
    assert!(
        !["helped", "hurt", "within noise"]
            .iter()
            .any(|w| text.contains(w)),
        "{text}"
    );
}

/// The statistics read right at the edges: one pair gives no interval
/// (and says so, not "0.0% interval"), a level such as 0.999999 keeps its
/// digits (not "100%"), a quantity that is 0 on both sides is `n/a` (as
/// where the baseline's is 0), and a size in the table keeps its unit on
/// its line when a cell wraps.
#[test]
fn one_pair_fine_levels_zeros_and_sizes_read_right() {
    let run = |args: &[&str]| {
        let out = pagewise()
            .args(["bench", "run", "--variant", "same=", "-q"])
            .args(args)
            .args(["--", "sh", "-c", "exit 0"])
            .assert()
            .success()
            .get_output()
            .clone();
        String::from_utf8(out.stdout).unwrap()
    };
    let one = run(&["-n", "1"]);
    assert!(one.contains("wall "), "{one}");
    assert!(one.contains("(no interval from 1 pair)"), "{one}");
    assert!(!one.contains("0.0% interval"), "{one}");
    assert!(one.contains("minor faults "), "{one}");
    // `sh -c` takes no major fault from the page cache: 0 and 0, no ratio.
    assert!(one.contains("major faults n/a"), "{one}");
    assert!(!one.contains("1.000x (1.000-1.000)"), "{one}");
    // A size and its unit are one word for the table (a non-breaking space).
    assert!(one.contains("\u{a0}MiB"), "{one}");
    for line in one.lines().filter(|l| l.starts_with('│')) {
        assert!(
            !line.split([' ', '│']).any(|w| w.starts_with("MiB")),
            "a unit apart from its value: {one}"
        );
    }
    let fine = run(&["-n", "2", "--confidence", "0.999999"]);
    assert!(fine.contains("median (99.9999% interval)"), "{fine}");
    assert!(
        fine.contains("too few pairs for a 99.9999% interval: no verdict (give -n 21 or more)"),
        "{fine}"
    );
    assert!(!fine.contains("100%"), "{fine}");
}

/// Bad input is refused with one line on stderr that says what is wrong,
/// before anything runs: a usage error (a bad fix, variant or option) with
/// status 2, a file, program or folder that is not there with status 1.
#[test]
fn bad_input_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.profile");
    std::fs::write(&damaged, [0x08u8, 0xff, 0xff, 0x1e, 0x00]).unwrap();
    let damaged_fix = format!("huge-text=hot:{}", damaged.display());
    let work_file = dir.path().join("a-file");
    std::fs::write(&work_file, "").unwrap();
    let work_file = work_file.to_str().unwrap();
    // A mistyped --work-dir creates no tree of folders.
    let typo = dir.path().join("typo/work");
    let typo = typo.to_str().unwrap();
    let cases: [(&[&str], &str, i32); 12] = [
        (
            &["--fix", "huge-text=hot:/nonexistent/profile", "--", "true"],
            "/nonexistent/profile",
            1,
        ),
        (
            &["--fix", "keep-heap+keep-heap", "--", "true"],
            "the same fix twice",
            2,
        ),
        (
            &["--fix", "keep-heap", "--fix", "keep-heap", "--", "true"],
            "variant names must be unique: \"keep-heap\" is given twice",
            2,
        ),
        (
            &["--variant", "a=", "--variant", "a=-x", "--", "true"],
            "variant names must be unique: \"a\" is given twice",
            2,
        ),
        (
            &[
                "--fix",
                "keep-heap",
                "--variant",
                "keep-heap=-x",
                "--",
                "true",
            ],
            "\"keep-heap\" is given twice",
            2,
        ),
        (&["--variant", "noequals", "--", "true"], "NAME=ARGS", 2),
        (
            &[
                "--huge-text-lib",
                "libc",
                "--variant",
                "same=",
                "--",
                "true",
            ],
            "needs a huge-text fix",
            2,
        ),
        (
            &["--variant", "same=", "--confidence", "1.5", "--", "true"],
            "--confidence",
            2,
        ),
        (
            &[
                "--variant",
                "same=",
                "-n",
                "2",
                "--",
                "/nonexistent/program",
            ],
            "cannot start",
            1,
        ),
        (
            &["--fix", &damaged_fix, "--", "true"],
            "not a pprof profile",
            1,
        ),
        (
            &["--work-dir", work_file, "--variant", "same=", "--", "true"],
            "not a folder",
            1,
        ),
        (
            &["--work-dir", typo, "--variant", "same=", "--", "true"],
            "typo does not exist",
            1,
        ),
    ];
    for (args, expected, status) in cases {
        let out = pagewise()
            .args(["bench", "run", "-q"])
            .args(args)
            .assert()
            .code(status)
            .get_output()
            .clone();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(!dir.path().join("typo").exists());
}

/// `bench run --fix FIX -- BIN` fails at once with one line that starts
/// with `--fix FIX:` and holds `expected`, before `marker` is made by a run.
fn assert_refused_up_front(
    bin: &std::path::Path,
    fix: &str,
    expected: &str,
    marker: &std::path::Path,
) {
    let out = pagewise()
        .args([
            "bench", "run", "-q", "-n", "1", "--warmup", "0", "--fix", fix,
        ])
        .arg("--")
        .arg(bin)
        .assert()
        .code(1)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{fix}: {err}");
    assert!(
        err.starts_with(&format!("pagewise: --fix {fix}: ")) && err.contains(expected),
        "{fix}: {err}"
    );
    for after_the_runs in ["wrote no report", "changes what the program does"] {
        assert!(!err.contains(after_the_runs), "{fix}: {err}");
    }
    assert!(!marker.exists(), "{fix}: the program ran");
    assert!(out.stdout.is_empty());
}

/// A fix that `pagewise run` refuses for the program (huge text for a
/// static program, every fix for one static without glibc, as a Go program
/// is, the heap fixes for a musl one) is refused by bench run
/// up front, with run's own reason, in one line: not after every run, as
/// "the fix wrote no report" or "the variant changes what the program does".
#[test]
fn a_fix_run_refuses_for_the_program_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    // The static program leaves a mark when it runs, so a run is seen.
    let marker = dir.path().join("ran");
    let marking = format!(
        "#include <stdio.h>\nint main(void) {{ FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f); return 0; }}\n",
        marker.display()
    );
    match pagewise_testkit::compiler_supports(dir.path(), &["-static"]) {
        Ok(()) => {
            let bin = pagewise_testkit::compile_c(dir.path(), "static", &marking, &["-static"])
                .unwrap_or_else(|why| panic!("{why}"));
            for fix in ["huge-text", "huge-text+keep-heap"] {
                assert_refused_up_front(&bin, fix, "statically linked", &marker);
            }
        }
        Err(why) => {
            pagewise_testkit::skip_part!("static", pagewise_testkit::Need::Compiler, "{why}")
        }
    }
    // Static without glibc (as a Go program is): no glibc to read tunables.
    let bare = ["-static", "-nostdlib"];
    match pagewise_testkit::compiler_supports(dir.path(), &bare) {
        Ok(()) => {
            let source = "void _start(void) { __asm__ volatile(\"mov $60, %eax\\n xor %edi, %edi\\n syscall\"); }\n";
            let bin = pagewise_testkit::compile_c(dir.path(), "bare", source, &bare)
                .unwrap_or_else(|why| panic!("{why}"));
            for fix in ["keep-heap", "thp-heap", "huge-text"] {
                assert_refused_up_front(&bin, fix, "statically linked, not against glibc", &marker);
            }
        }
        Err(why) => pagewise_testkit::skip_part!("bare", pagewise_testkit::Need::Compiler, "{why}"),
    }
    let musl = ["-Wl,--dynamic-linker=/lib/ld-musl-x86_64.so.1"];
    match pagewise_testkit::compiler_supports(dir.path(), &musl) {
        Ok(()) => {
            let bin = pagewise_testkit::compile_c(
                dir.path(),
                "musl",
                "int main(void) { return 0; }\n",
                &musl,
            )
            .unwrap_or_else(|why| panic!("{why}"));
            for fix in ["thp-heap", "keep-heap", "keep-heap+thp-heap"] {
                assert_refused_up_front(&bin, fix, "linked against musl", &marker);
            }
        }
        Err(why) => pagewise_testkit::skip_part!("musl", pagewise_testkit::Need::Compiler, "{why}"),
    }
}

#[test]
fn a_variant_that_changes_the_exit_status_is_an_error() {
    let out = pagewise()
        .args([
            "bench",
            "run",
            "--variant",
            "other=-c false",
            "-n",
            "2",
            "-q",
        ])
        .args(["--", "sh", "-c", "exit 3"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("exited with status"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn nothing_to_compare_is_refused() {
    let out = pagewise()
        .args(["bench", "run", "-q", "--", "true"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("nothing to compare"), "{err}");
    let out = pagewise()
        .args(["bench", "run", "--fix", "huge-txt", "--", "true"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("unknown fix"));
}

/// A signal to `pagewise bench run` reaches the run under way, and bench run
/// stops: one line, the status of a stop by that signal (128+N), nothing
/// left running and nothing left in TMPDIR (its temporary work folder is
/// removed). SIGTERM to it alone, as a service manager sends it, and SIGINT
/// to its whole process group, as Ctrl-C does.
#[test]
fn a_signal_stops_the_runs_and_removes_the_work_folder() {
    use std::os::unix::process::CommandExt;
    for (signal, number, whole_group) in [("TERM", 15, false), ("INT", 2, true)] {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let pid_file = dir.path().join("pid");
        let bench = match common::pagewise_with_default_signals() {
            Ok(command) => command,
            Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
        }
        .args(["bench", "run", "--fix", "keep-heap", "-n", "2", "-q"])
        .args(["--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 60", pid_file.display()))
        .env("TMPDIR", &tmp)
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
        let command = common::pid_written_to(&pid_file);
        let target = i64::from(bench.id());
        common::send_signal(if whole_group { -target } else { target }, signal);
        let out = bench.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + number), "SIG{signal}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "SIG{signal}: {err}");
        assert!(
            lines[0].starts_with(&format!("pagewise: bench run: stopped by SIG{signal} ")),
            "{err}"
        );
        assert!(
            common::has_ended(command),
            "SIG{signal}: the run outlived bench run"
        );
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "SIG{signal}: left in TMPDIR: {left:?}");
    }
}
