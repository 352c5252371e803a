//! CLI tests for `pagewise text order` and `pagewise text footprint`, on a
//! compiled program with hot functions spread over many pages.

use assert_cmd::Command;

mod common;
use pagewise::text::function_table::FunctionTable;
use std::path::{Path, PathBuf};

const SPREAD: &str = r#"
#include <stdio.h>
#define F(n) __attribute__((noinline)) unsigned f##n(unsigned x) { return x * (n * 2 + 1) + n; } \
    __asm__(".text\n.skip 65536, 0xcc\n");
F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)
int main(int argc, char **argv) { unsigned a = argc; for (unsigned i = 0; i < 1000; i++) a = f8(f5(f1(a))); printf("%u\n", a); return 0; }
"#;

fn build(dir: &Path) -> Result<PathBuf, String> {
    pagewise_testkit::compile_c(dir, "spread", SPREAD, &["-fno-toplevel-reorder"])
}

/// Runs `pagewise text ARGS…`, expects success, returns what it printed.
fn text_out(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = Command::cargo_bin("pagewise")
        .unwrap()
        .arg("text")
        .args(args)
        .assert()
        .success()
        .get_output()
        .clone();
    out.stdout
}

/// Runs `pagewise text ARGS…`, expects success, returns the JSON it printed.
fn text_json(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    serde_json::from_slice(&text_out(args)).unwrap()
}

/// A profile in pagewise's format: main calls f1, f5 and f8, which take the
/// samples, and a C library function, which takes 7 more (their instruction
/// pointer is not in the binary; main is on their stack).
fn profile(dir: &Path, bin: &Path) -> PathBuf {
    let t = FunctionTable::read(bin).unwrap();
    let at = |name: &str| t.functions()[t.by_name(name).unwrap()].vaddr + 1;
    let text = format!(
        "# pagewise-profile 1\n# event cpu-clock\nobject 0 {}\nobject 1 /lib/x86_64-linux-gnu/libc.so.6\nstack 60 0:{:x} 0:{:x}\nstack 30 0:{:x} 0:{:x}\nstack 10 0:{:x} 0:{:x}\nstack 7 1:29d90 0:{:x}\n",
        bin.display(),
        at("f1"),
        at("main"),
        at("f5"),
        at("main"),
        at("f8"),
        at("main"),
        at("main")
    );
    let path = dir.join("p.profile");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn order_groups_the_hot_functions_and_footprint_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let bin = match build(dir.path()) {
        Ok(b) => b,
        Err(why) => pagewise_testkit::skip!(pagewise_testkit::Need::Compiler, "{why}"),
    };
    let prof = profile(dir.path(), &bin);
    let order = dir.path().join("order.txt");
    let summary = text_json(&[
        "order".as_ref(),
        prof.as_os_str(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "-o".as_ref(),
        order.as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(summary["schema"], "pagewise.text.order/1");
    // The samples that ran in the binary, as the footprints count them; the
    // order also weighs the 7 whose stack holds main below the C library.
    assert_eq!(summary["resolved_samples"], 100);
    assert_eq!(summary["before"]["resolved_samples"], 100);
    assert_eq!(summary["after"]["resolved_samples"], 100);
    assert_eq!(summary["call_graph_samples"], 107);
    assert_eq!(summary["total_samples"], 107);
    let functions: Vec<String> = std::fs::read_to_string(&order)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    for f in ["f1", "f5", "f8", "main"] {
        assert!(functions.contains(&f.to_owned()), "{functions:?}");
    }
    assert!(
        !functions.contains(&"f2".to_owned()),
        "cold functions stay out: {functions:?}"
    );
    assert_eq!(summary["before"]["pages_4k"]["p99"], 3);
    assert_eq!(summary["after"]["pages_4k"]["p99"], 1);

    let fp = text_json(&[
        "footprint".as_ref(),
        prof.as_os_str(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "--order".as_ref(),
        order.as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(fp["schema"], "pagewise.text.footprint/1");
    assert_eq!(fp["before"]["resolved_samples"], 100);
    assert_eq!(fp["before"]["pages_4k"]["p50"], 1);
    assert_eq!(fp["before"]["pages_4k"]["p90"], 2);
    assert_eq!(fp["after"]["pages_4k"]["p99"], 1);

    // The table says both counts, and why they differ.
    let order2 = dir.path().join("order2.txt");
    let text = text_out(&[
        "order".as_ref(),
        prof.as_os_str(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "-o".as_ref(),
        order2.as_os_str(),
    ]);
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains(&format!("(100 of 107 samples ran in {}; 7 more ran in other objects called from it, and count for the order)", bin.display())),
        "{text}"
    );

    // gold flavour
    let gold = dir.path().join("gold.txt");
    text_json(&[
        "order".as_ref(),
        "--gold".as_ref(),
        "--json".as_ref(),
        prof.as_os_str(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "-o".as_ref(),
        gold.as_os_str(),
    ]);
    assert!(std::fs::read_to_string(&gold)
        .unwrap()
        .lines()
        .all(|l| l.starts_with(".text.")));
}

#[test]
fn perf_script_profiles_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let bin = match build(dir.path()) {
        Ok(b) => b,
        Err(why) => pagewise_testkit::skip!(pagewise_testkit::Need::Compiler, "{why}"),
    };
    let script = format!(
        "spread 1 [000] 1.0: 250000 cpu-clock:u:\n\t  1129 f1+0x1 ({0})\n\t  1200 main+0x20 ({0})\n\nspread 1 [000] 1.1: 250000 cpu-clock:u:\n\t  1129 f5+0x1 ({0})\n\t  1200 main+0x20 ({0})\n\n",
        bin.display()
    );
    let path = dir.path().join("perf.txt");
    std::fs::write(&path, script).unwrap();
    let fp = text_json(&[
        "footprint".as_ref(),
        path.as_os_str(),
        "--binary".as_ref(),
        bin.as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(fp["before"]["resolved_samples"], 2);
    assert_eq!(fp["before"]["pages_4k"]["p99"], 2);
}

#[test]
fn bad_profiles_and_binaries_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.profile");
    std::fs::write(&bad, "# pagewise-profile 1\nstack x 0:1\n").unwrap();
    let exe = assert_cmd::cargo::cargo_bin("pagewise");
    for (args, expected) in [
        (
            vec![bad.to_str().unwrap(), "--binary", exe.to_str().unwrap()],
            "bad.profile:2: stack needs a count",
        ),
        (
            vec!["/no/such/profile", "--binary", exe.to_str().unwrap()],
            "cannot read /no/such/profile",
        ),
    ] {
        let out = Command::cargo_bin("pagewise")
            .unwrap()
            .args(["text", "footprint"])
            .args(&args)
            .assert()
            .failure()
            .get_output()
            .clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
    let good = dir.path().join("good.profile");
    std::fs::write(
        &good,
        "# pagewise-profile 1\nobject 0 /bin/other\nstack 1 0:10\n",
    )
    .unwrap();
    let out = Command::cargo_bin("pagewise")
        .unwrap()
        .args(["text", "footprint"])
        .arg(&good)
        .arg("--binary")
        .arg(&exe)
        .assert()
        .failure()
        .get_output()
        .clone();
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("no sample of the profile falls in"));
}
