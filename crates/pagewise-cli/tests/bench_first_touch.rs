//! CLI tests for `pagewise bench first-touch`, on a small size so they run in seconds.

use assert_cmd::Command;

mod common;

fn pagewise() -> Command {
    Command::cargo_bin("pagewise").unwrap()
}

#[test]
fn json_has_the_schema_and_every_strategy() {
    let out = pagewise()
        .args([
            "bench",
            "first-touch",
            "--size",
            "16MiB",
            "--trials",
            "1",
            "--json",
            "--no-reserve",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], "pagewise.bench.first-touch/1");
    assert_eq!(v["size_bytes"], 16 << 20);
    let mut names: Vec<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    // A strategy either ran or says why not.
    names.extend(
        v["not_run"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned()),
    );
    names.sort();
    let mut expected = [
        "malloc",
        "mmap",
        "thp",
        "hugetlb-2m",
        "populate",
        "region-eager",
        "region-background",
    ];
    expected.sort();
    assert_eq!(names, expected);
    for row in v["rows"].as_array().unwrap() {
        for key in [
            "first_over_warm",
            "total_over_warm",
            "faults_pass1",
            "alloc_ms",
            "pass_ms",
            "backing",
        ] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
        assert!(row["first_over_warm"].as_f64().unwrap() > 0.0);
    }
    for n in v["not_run"].as_array().unwrap() {
        assert!(!n["reason"].as_str().unwrap().is_empty());
    }
    common::check_machine(&v);
}

#[test]
fn table_output_and_progress() {
    let out = pagewise()
        .args([
            "bench",
            "first-touch",
            "--size",
            "8MiB",
            "--trials",
            "1",
            "--only",
            "mmap,region-eager",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("mmap") && stdout.contains("region-eager"),
        "{stdout}"
    );
    assert!(stdout.contains("first/warm"));
    common::check_machine_line(&stdout);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("[2/2] done"),
        "no progress on stderr: {stderr}"
    );
}

fn one_line_error(args: &[&str]) -> String {
    let out = pagewise().args(args).assert().code(2).get_output().clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn bad_values_are_one_line_errors() {
    assert!(one_line_error(&["bench", "first-touch", "--size", "lots"]).contains("not a size"));
    assert!(
        one_line_error(&["bench", "first-touch", "--only", "bogus"]).contains("unknown strategy")
    );
    assert!(one_line_error(&["bench", "first-touch", "--trials", "0"]).contains("--trials"));
    assert!(one_line_error(&["bench", "no-such-experiment"]).contains("no-such-experiment"));
}

#[test]
fn zero_size_is_refused() {
    let out = pagewise()
        .args(["bench", "first-touch", "--size", "0"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("at least 1 B"), "{stderr}");
}
