//! CLI test for `pagewise bench itlb` on a small generated program (4 MiB of text,
//! enough for one whole 2 MiB page to move; seconds, not minutes).

use assert_cmd::Command;

mod common;

#[test]
fn tiny_itlb_run_reports_every_variant() {
    let probe = std::process::Command::new("cc")
        .args(["-fuse-ld=gold", "-x", "c", "-", "-o", "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(b"int main(void){return 0;}")?;
            c.wait()
        });
    if !probe.map(|s| s.success()).unwrap_or(false) {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Compiler,
            "cc with gold (binutils) is not available"
        );
    }
    let out = Command::cargo_bin("pagewise")
        .unwrap()
        .args([
            "bench",
            "itlb",
            "--functions",
            "1024",
            "--padding",
            "4KiB",
            "--rounds",
            "100",
            "--trials",
            "1",
            "--json",
            "-q",
        ])
        // The huge-text rows need the preload library.
        .env("PAGEWISE_PRELOAD", common::preload_library())
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "pagewise.bench.itlb/1");
    common::check_machine(&v);
    let names: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["baseline", "huge-text", "ordered", "ordered+huge-text"]
    );
    let rows = v["rows"].as_array().unwrap();
    let baseline = rows[0]["median_s"].as_f64().unwrap();
    for r in rows {
        let median = r["median_s"].as_f64().unwrap();
        assert!(median > 0.0, "{r}");
        assert!(r["footprint_4k_p99"].as_u64().unwrap() >= 1);
        // Each variant's speedup is the baseline's time over its own.
        let speedup = r["speedup"].as_f64().unwrap();
        assert!((speedup - baseline / median).abs() <= 1e-9 * speedup, "{r}");
    }
    assert!(
        v["text_bytes"].as_u64().unwrap() >= 4 << 20,
        "{}",
        v["text_bytes"]
    );
    // Ordering never spreads the hot code over more pages than the baseline.
    assert!(v["rows"][2]["footprint_4k_p99"].as_u64() <= v["rows"][0]["footprint_4k_p99"].as_u64());
}
