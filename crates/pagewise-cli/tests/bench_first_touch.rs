//! CLI tests for `pagewise bench first-touch`, on a small size so they run in seconds.

mod common;

use common::pagewise;

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
    let counted = v["faults_counted"] == true;
    assert_eq!(
        counted,
        pagewise::observe::thread_page_fault_counter().is_ok()
    );
    for row in v["rows"].as_array().unwrap() {
        // Times are measured, so positive, and the ratios are theirs.
        let alloc = row["alloc_ms"].as_f64().unwrap();
        let pass: Vec<f64> = (0..3)
            .map(|i| row["pass_ms"][i].as_f64().unwrap())
            .collect();
        assert!(alloc > 0.0 && pass.iter().all(|&p| p > 0.0), "{row}");
        let first_over_warm = row["first_over_warm"].as_f64().unwrap();
        assert!(
            (first_over_warm - pass[0] / pass[2]).abs() < 1e-9 * first_over_warm,
            "{row}"
        );
        let total_over_warm = row["total_over_warm"].as_f64().unwrap();
        let total = row["total_ms"].as_f64().unwrap();
        assert!(
            (total_over_warm - total / pass[2]).abs() < 1e-9 * total_over_warm,
            "{row}"
        );
        // Faults: counts where the event opens here, null (not 0) where not.
        for pass in ["faults_pass1", "faults_pass2", "faults_pass3"] {
            assert_eq!(row[pass].is_u64(), counted, "{pass}: {row}");
        }
        // What the kernel gave: all 16 MiB resident after the first pass,
        // described by page size.
        let backing = row["backing"].as_str().unwrap();
        assert!(!backing.starts_with("unknown"), "{row}");
        let granted = &row["granted"];
        let total_bytes: u64 = [
            "hugetlb_1g_bytes",
            "hugetlb_2m_bytes",
            "thp_bytes",
            "base_bytes",
        ]
        .iter()
        .map(|k| granted[k].as_u64().unwrap())
        .sum();
        assert!(total_bytes >= 16 << 20, "{row}");
    }
    if !counted {
        assert!(v["faults_note"].is_string(), "{v:#}");
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

/// Below one 2 MiB page (the unit each pass writes in, and the page `thp` and
/// `hugetlb-2m` map) the rows compare unlike things: refused before anything
/// runs, naming the minimum. Before, `--size 1` ran and printed ratios.
#[test]
fn sizes_under_one_huge_page_are_refused() {
    for size in ["0", "1", "4KiB", "2097151"] {
        let stderr = one_line_error(&["bench", "first-touch", "--size", size]);
        assert!(
            stderr.contains("must be at least 2 MiB"),
            "{size}: {stderr}"
        );
        assert!(stderr.contains("--size"), "{size}: {stderr}");
    }
}
