//! CLI tests for `pagewise bench memcpy|memset` and the doctor's copy rows:
//! they run the real binary on tiny size sets so that each takes about a
//! second. They check shapes and invariants, never timings.

use serde_json::Value;

mod common;

use common::pagewise;

/// A small distribution file in the fleet format.
fn fleet_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("fleet.csv");
    std::fs::write(&path, "8:0.5,100:0.25,3000:0.25\n0:1\n1:0.5,64:0.5\n").unwrap();
    path
}

fn run_json(args: &[&str]) -> Value {
    run_json_with(args, &[])
}

/// `run_json` with environment variables set.
fn run_json_with(args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = pagewise()
        .args(args)
        .envs(env.iter().copied())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).expect("valid JSON")
}

fn check_rows(json: &Value, schema: &str, sizes: &[u64]) {
    assert_eq!(json["schema"], schema);
    let with_c = !json["c_library"].is_null();
    common::check_machine(json);
    assert!(json["plan"]["isa"].is_string());
    let rows = json["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        for key in ["gbps", "glibc_gbps", "ratio"] {
            let v = row[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key} in {row}");
        }
        // The ratio is the median of the trials' own ratios: within their
        // range, and with one trial the two sides' GB/s over each other.
        let ratio = row["ratio"].as_f64().unwrap();
        let ratios = &row["ratios"];
        assert_eq!(ratios["median"].as_f64(), Some(ratio), "{row}");
        assert!(ratios["min"].as_f64().unwrap() <= ratio, "{row}");
        assert!(ratios["max"].as_f64().unwrap() >= ratio, "{row}");
        if json["trials"] == 1 {
            let of_gbps = row["gbps"].as_f64().unwrap() / row["glibc_gbps"].as_f64().unwrap();
            assert!((of_gbps - ratio).abs() < 1e-9, "{row}");
        }
        assert!(sizes.contains(&row["bytes"].as_u64().unwrap()), "{row}");
        assert!(row["name"].as_str().unwrap().len() > 3);
        assert_ne!(row["residency"], "cold", "--no-cold was given: {row}");
        if !with_c {
            for key in ["c_entry_gbps", "c_entry_ratio_to_pagewise", "c_entry"] {
                assert!(row[key].is_null(), "{key} without --c-library: {row}");
            }
        }
    }
    // Every size has an aligned row.
    for size in sizes {
        assert!(
            rows.iter()
                .any(|r| r["bytes"] == *size && r["name"].as_str().unwrap().ends_with("aligned")),
            "no aligned row of {size}"
        );
    }
}

#[test]
fn memcpy_json_has_rows_fleet_and_machine() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_file(&dir);
    let json = run_json(&[
        "bench",
        "memcpy",
        "--json",
        "--quiet",
        "--no-end-to-end",
        "--sizes",
        "64,4K",
        "--no-cold",
        "--trials",
        "1",
        "--fleet-calls",
        "2000",
        "--fleet-file",
        fleet.to_str().unwrap(),
    ]);
    check_rows(&json, "pagewise.bench.memcpy/1", &[64, 4096]);
    // Aligned and both misalignments for each size.
    assert_eq!(json["rows"].as_array().unwrap().len(), 6);
    let f = &json["fleet"];
    assert_eq!(f["calls"], 2000);
    for key in ["ns_per_call", "glibc_ns_per_call", "ratio", "mean_bytes"] {
        assert!(f[key].as_f64().unwrap() > 0.0, "{key} in {f}");
    }
    let mean = f["mean_bytes"].as_f64().unwrap();
    assert!(
        (200.0..1800.0).contains(&mean),
        "mean of 8/100/3000 draws: {mean}"
    );
    assert!(f["file"].as_str().unwrap().ends_with("fleet.csv"));
}

#[test]
fn memset_json_has_its_own_schema() {
    let json = run_json(&[
        "bench",
        "memset",
        "--json",
        "-q",
        "--sizes",
        "100,64K",
        "--no-cold",
        "--no-fleet",
        "--trials",
        "1",
    ]);
    check_rows(&json, "pagewise.bench.memset/1", &[100, 65536]);
    assert_eq!(json["rows"].as_array().unwrap().len(), 4);
    assert!(json["fleet"].is_null());
    assert_eq!(json["rows"][1]["src_offset"], 0);
}

#[test]
fn cold_rows_rotate_through_memory() {
    let json = run_json(&[
        "bench",
        "memset",
        "--json",
        "-q",
        "--sizes",
        "1M",
        "--no-hot",
        "--no-misaligned",
        "--no-fleet",
        "--trials",
        "1",
    ]);
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["residency"], "cold");
    assert!(rows[0]["calls"].as_u64().unwrap() > 10);
}

#[test]
fn table_output_names_rows_and_ratio() {
    let out = pagewise()
        .args([
            "bench",
            "memcpy",
            "-q",
            "--no-end-to-end",
            "--sizes",
            "256",
            "--no-cold",
            "--no-fleet",
            "--trials",
            "1",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    for needle in [
        "256 B L1 aligned",
        "src+7 dst+1",
        "ratio",
        "glibc memcpy GB/s",
        "plan",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    common::check_machine_line(&text);
}

/// Without --fleet-file the fleet row runs on the distribution built into
/// the binary: nothing outside it is read.
#[test]
fn the_default_fleet_row_uses_the_builtin_distribution() {
    let empty = tempfile::tempdir().unwrap();
    let out = pagewise()
        .args([
            "bench",
            "memset",
            "--json",
            "-q",
            "--sizes",
            "64",
            "--no-cold",
            "--no-misaligned",
            "--trials",
            "1",
            "--fleet-calls",
            "2000",
        ])
        // An empty working directory: nothing next to the repository is read.
        .current_dir(empty.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let json: Value = serde_json::from_slice(&out).unwrap();
    let f = &json["fleet"];
    assert_eq!(
        f["file"],
        "built in: memset-fleet-distribution.csv (google/fleetbench, Apache-2.0)"
    );
    assert_eq!(f["calls"], 2000);
    assert!(f["mean_bytes"].as_f64().unwrap() > 0.0, "{f}");
}

#[test]
fn bad_fleet_file_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "8:0.5,oops\n0:1\n1:1\n").unwrap();
    let missing = dir.path().join("missing.csv");
    for (file, needle) in [(&bad, "line 1, entry 2"), (&missing, "missing.csv")] {
        let out = pagewise()
            .args([
                "bench",
                "memcpy",
                "-q",
                "--no-end-to-end",
                "--sizes",
                "64",
                "--no-cold",
                "--fleet-file",
            ])
            .arg(file)
            .assert()
            .failure()
            .get_output()
            .clone();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("pagewise: "), "{err}");
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// `--sizes` reads sizes as every other size option does (`--size 1.5M`
/// works elsewhere), and the row is named by the exact size.
#[test]
fn sizes_take_fractions_and_units() {
    let json = run_json(&[
        "bench",
        "memcpy",
        "--json",
        "-q",
        "--sizes",
        "1.5M,4k",
        "--no-cold",
        "--no-misaligned",
        "--no-fleet",
        "--no-end-to-end",
        "--trials",
        "1",
    ]);
    let rows: Vec<(u64, &str)> = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["bytes"].as_u64().unwrap(), r["name"].as_str().unwrap()))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .any(|&(b, n)| b == 4096 && n.starts_with("4 KiB ")),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|&(b, n)| b == 3 << 19 && n.starts_with("1.5 MiB ")),
        "{rows:?}"
    );
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["bench", "memcpy", "--sizes", "0"][..],
        &["bench", "memcpy", "--sizes", "12Q"],
        &["bench", "memset", "--trials", "0"],
    ] {
        pagewise().args(args).assert().code(2);
    }
    // A plot name that is neither .svg nor .png is refused before running.
    let out = pagewise()
        .args(["bench", "memcpy", "-q", "--sizes", "64", "--plot", "x.jpg"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains(".svg or .png"));
}

/// Hot rows only (`--no-cold`) with a size no cache holds: said, not dropped
/// without a word.
#[test]
fn sizes_too_large_for_a_hot_row_are_named() {
    let hot_only = [
        "--no-cold",
        "--no-fleet",
        "--no-end-to-end",
        "--trials",
        "1",
        "-q",
    ];
    for op in ["memcpy", "memset"] {
        let out = pagewise()
            .args(["bench", op, "--sizes", "64G"])
            .args(hot_only)
            .assert()
            .code(1)
            .get_output()
            .clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains("nothing to run: 64 GiB too large to stay in the caches for a hot row")
                && stderr.contains("--no-cold leaves out the cold rows"),
            "{stderr}"
        );
    }
    let json = run_json(
        &[
            &["bench", "memcpy", "--sizes", "64,64G", "--json"][..],
            &hot_only,
        ]
        .concat(),
    );
    assert!(json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["bytes"] == 64));
    let notes = json["notes"].to_string();
    assert!(notes.contains("not measured: 64 GiB too large"), "{notes}");
}

#[test]
fn plots_are_written_as_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    for (op, file, check) in [("memcpy", "copy.svg", "svg"), ("memset", "fill.png", "png")] {
        let path = dir.path().join(file);
        let out = pagewise()
            .args([
                "bench",
                op,
                "-q",
                "--sizes",
                "64,1K",
                "--no-cold",
                "--no-fleet",
                "--no-end-to-end",
                "--trials",
                "1",
                "--plot",
            ])
            .arg(&path)
            .output()
            .unwrap();
        if !out.status.success() {
            // Without a system font plots are refused, and say why.
            let err = String::from_utf8(out.stderr).unwrap();
            assert!(err.contains("TrueType font"), "{err}");
            pagewise_testkit::skip_part!(
                check,
                pagewise_testkit::Need::Tool,
                "no system font: {err}"
            );
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        if check == "svg" {
            let text = String::from_utf8(bytes).unwrap();
            assert!(
                text.contains("<svg") && text.contains("glibc memcpy"),
                "{text:.300}"
            );
        } else {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        }
    }
}

/// `bench memcpy … --plot PATH` with the smallest run: its status and stderr.
fn plot_to(path: &std::path::Path) -> (Option<i32>, String) {
    let out = pagewise()
        .args(["bench", "memcpy", "-q", "--sizes", "64", "--no-cold"])
        .args(["--no-misaligned", "--no-fleet", "--no-end-to-end"])
        .args(["--trials", "1", "--plot"])
        .arg(path)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

/// A plot that cannot be written is refused before the benchmark runs when
/// its folder is missing (or takes no new file), and where the write itself
/// fails afterwards, the error is one line with the cause, not plotters'
/// "backend error: Drawing backend error: …".
#[test]
fn a_plot_that_cannot_be_written_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/x.svg");
    let started = std::time::Instant::now();
    let (status, err) = plot_to(&missing);
    assert_eq!(status, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "pagewise: --plot {}: the folder {} does not exist",
            missing.display(),
            dir.path().join("no/such").display()
        )
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // /proc takes no new file even from root, whom the folder check lets
    // through: the write fails after the run.
    if !pagewise_testkit::is_root() {
        return;
    }
    for name in ["x.svg", "x.png"] {
        let path = std::path::Path::new("/proc").join(name);
        let (status, err) = plot_to(&path);
        if err.contains("TrueType font") {
            pagewise_testkit::skip_part!(name, pagewise_testkit::Need::Tool, "no system font");
            continue;
        }
        assert_eq!(status, Some(1), "{err}");
        assert_eq!(
            err.trim_end(),
            format!(
                "pagewise: cannot write the plot {}: No such file or directory (os error 2)",
                path.display()
            )
        );
    }
}

#[test]
fn doctor_shows_the_copy_plan() {
    let text = common::stdout_of(&["doctor"]);
    for needle in [
        "instruction set",
        "non-temporal from",
        "copy [0 B, ",
        "fill [0 B, ",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let json = run_json(&["doctor", "--json"]);
    let copy = &json["copy"];
    assert!(copy["plan"]["isa"].is_string(), "{copy}");
    let classes = copy["size_classes"].as_array().unwrap();
    assert!(classes.iter().any(|c| c["op"] == "copy"));
    assert!(classes.iter().any(|c| c["op"] == "fill"));
}

#[test]
fn environment_pins_the_plan() {
    let json = run_json_with(
        &["doctor", "--json"],
        &[
            ("PAGEWISE_COPY_ISA", "sse2"),
            ("PAGEWISE_NT_THRESHOLD", "3M"),
        ],
    );
    let plan = &json["copy"]["plan"];
    assert_eq!(plan["isa"], "sse2");
    assert_eq!(plan["isa_source"], "environment");
    assert_eq!(plan["copy_nontemporal"], 3 << 20);
    assert_eq!(plan["nontemporal_source"], "environment");
}

#[test]
fn memcpy_parallel_and_end_to_end_rows() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let json = run_json(&[
        "bench",
        "memcpy",
        "--json",
        "--quiet",
        "--sizes",
        "16M",
        "--no-hot",
        "--no-misaligned",
        "--no-fleet",
        "--trials",
        "1",
        "--parallel",
        "2",
        "--end-to-end-records",
        "20000",
        "--tmpfs-dir",
        shm.path().to_str().unwrap(),
    ]);
    let rows = json["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["16 MiB cold aligned", "16 MiB cold aligned, 2 threads"],
        "{json}"
    );
    assert_eq!(rows[0]["threads"], 1);
    assert_eq!(rows[1]["threads"], 2);
    assert!(rows[1]["gbps"].as_f64().unwrap() > 0.0);
    let e = &json["end_to_end"];
    assert_eq!(e["bytes"], 4096, "{json}");
    assert_eq!(e["records"], 20000);
    for key in ["gbps", "glibc_gbps", "ratio"] {
        assert!(e[key].as_f64().unwrap() > 0.0, "{key} in {e}");
    }
    // The queue files are removed.
    assert!(std::fs::read_dir(shm.path()).unwrap().next().is_none());
}

/// The free functions take a different path for each instruction set; the
/// benchmark checks pagewise's bytes before timing each row (a wrong result is
/// an error), so running it with each set pinned checks those paths end to end.
#[test]
fn every_instruction_set_copies_and_fills_correctly_through_the_free_functions() {
    for isa in ["sse2", "avx2", "avx512"] {
        for op in ["memcpy", "memset"] {
            let mut args = vec![
                "bench",
                op,
                "--sizes",
                "1,8,33,100,129,513,5000,20000",
                "--no-cold",
                "--no-fleet",
                "--trials",
                "1",
                "--json",
                "-q",
            ];
            if op == "memcpy" {
                args.push("--no-end-to-end");
            }
            let json = run_json_with(&args, &[("PAGEWISE_COPY_ISA", isa)]);
            let supported = json["plan"]["isa"] == isa;
            let noted = json["plan"]["notes"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n.as_str().unwrap().contains(isa)));
            assert!(supported || noted, "{isa} {op}: {}", json["plan"]);
            assert_eq!(
                json["rows"].as_array().unwrap().len(),
                8 * 2 + 8 * usize::from(op == "memcpy")
            );
        }
    }
}

/// The `libpagewise.so` of the code under test, built once for this test
/// binary (`cargo test` builds no cdylib).
fn ffi_library() -> std::path::PathBuf {
    pagewise_testkit::ffi_library_dir().join("libpagewise.so")
}

/// `--c-library` adds `pw_copy` / `pw_fill` as a third side of every row
/// (and the fleet row), with its GB/s and its ratio to pagewise's.
#[test]
fn c_library_adds_the_c_entry_point_to_every_row() {
    let lib = ffi_library();
    let lib = lib.to_str().unwrap();
    // One 4 KiB hot row, one trial; the fleet row too when `fleet`.
    let args = |op: &'static str, fleet: bool| {
        let mut args = vec![
            "bench",
            op,
            "--sizes",
            "4K",
            "--no-cold",
            "--no-misaligned",
            "--no-end-to-end",
            "--trials",
            "1",
            "--quiet",
            "--c-library",
            lib,
        ];
        args.extend(if fleet {
            ["--fleet-calls", "2000"].as_slice()
        } else {
            ["--no-fleet"].as_slice()
        });
        args
    };
    for (op, schema, fleet) in [
        ("memcpy", "pagewise.bench.memcpy/1", false),
        ("memset", "pagewise.bench.memset/1", true),
    ] {
        let mut args = args(op, fleet);
        args.push("--json");
        let json = run_json(&args);
        check_rows(&json, schema, &[4096]);
        assert_eq!(json["c_library"]["path"], lib);
        assert_eq!(json["c_library"]["version"], env!("CARGO_PKG_VERSION"));
        for row in json["rows"].as_array().unwrap() {
            let c = row["c_entry_gbps"].as_f64().unwrap_or(f64::NAN);
            assert!(c.is_finite() && c > 0.0, "{op}: {row}");
            // One trial: the median of the trials' ratios is this one's.
            let ratio = c / row["gbps"].as_f64().unwrap();
            assert!((ratio - row["c_entry_ratio_to_pagewise"].as_f64().unwrap()).abs() < 1e-9);
            assert_eq!(row["c_entry"]["median"].as_f64(), Some(c));
        }
        if fleet {
            let f = &json["fleet"];
            let ns = f["c_entry_ns_per_call"].as_f64().unwrap_or(f64::NAN);
            assert!(ns.is_finite() && ns > 0.0, "{f}");
            // One trial, as above.
            let ratio = f["ns_per_call"].as_f64().unwrap() / ns;
            assert!((ratio - f["c_entry_ratio_to_pagewise"].as_f64().unwrap()).abs() < 1e-9);
        } else {
            assert!(json["fleet"].is_null());
        }
    }

    // The table gets the two columns and names the library.
    let out = pagewise()
        .args(args("memcpy", false))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("pw_copy GB/s") && out.contains("C/pagewise"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "pw_copy of {lib} (pw_version {})",
            env!("CARGO_PKG_VERSION")
        )),
        "{out}"
    );
}

/// A library that cannot be loaded, or is not libpagewise, is a one-line
/// error naming it, before any row runs.
#[test]
fn bad_c_library_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_elf = dir.path().join("libnot.so");
    std::fs::write(&not_elf, "not a library").unwrap();
    let missing = dir.path().join("missing.so");
    // A real shared library without pw_copy: the preload library.
    let preload = common::preload_library();
    for (lib, needle) in [
        (&missing, "No such file"),
        (&not_elf, "libnot.so"),
        (&preload, "no symbol pw_copy"),
    ] {
        let out = pagewise()
            .args([
                "bench",
                "memcpy",
                "-q",
                "--no-end-to-end",
                "--no-fleet",
                "--sizes",
                "64",
                "--no-cold",
                "--c-library",
            ])
            .arg(lib)
            .assert()
            .failure()
            .get_output()
            .clone();
        assert!(out.stdout.is_empty(), "rows printed before the error");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("pagewise: "), "{err}");
        assert!(err.contains(needle), "{needle}: {err}");
        assert!(err.contains(lib.to_str().unwrap()), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}
