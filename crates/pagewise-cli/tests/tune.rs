//! `pagewise tune` run as a user would: it measures a plan, writes it to a
//! private cache, and the next process (here `doctor`) uses it; with
//! `PAGEWISE_PLAN=default` or `--no-save` it does not.

use assert_cmd::Command;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A small, fast tune (sizes up to 1 MiB, 3 rounds): seconds, not a minute.
const QUICK: [&str; 6] = ["tune", "--json", "--quiet", "--rounds", "3", "--max-bytes"];

fn pagewise(cache_home: &Path) -> Command {
    let mut c = Command::cargo_bin("pagewise").unwrap();
    c.env("XDG_CACHE_HOME", cache_home)
        .env_remove("PAGEWISE_PLAN");
    c
}

fn json(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}", String::from_utf8_lossy(out));
    })
}

/// The stdout of `pagewise doctor ARGS`, with `PAGEWISE_PLAN` set to
/// `plan_variable` (or unset).
fn doctor(cache_home: &Path, plan_variable: Option<&str>, args: &[&str]) -> Vec<u8> {
    let mut c = pagewise(cache_home);
    if let Some(value) = plan_variable {
        c.env("PAGEWISE_PLAN", value);
    }
    let out = c.arg("doctor").args(args).assert().success();
    out.get_output().stdout.clone()
}

fn doctor_plan(cache_home: &Path, plan_variable: Option<&str>) -> Value {
    json(&doctor(cache_home, plan_variable, &["--json"]))["copy"]["plan"].clone()
}

#[test]
fn a_measured_plan_is_cached_privately_and_used_by_the_next_process() {
    let home = tempfile::tempdir().unwrap();
    let out = pagewise(home.path())
        .args(QUICK)
        .arg("1M")
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["schema"], "pagewise.tune/1");
    let choices = v["choices"].as_array().unwrap();
    assert!(!choices.is_empty(), "{v:#}");
    for c in choices {
        // Every cell was measured: a chosen strategy with a positive score.
        assert!(c["chosen"].as_str().is_some_and(|s| !s.is_empty()), "{c}");
        assert!(c["score"].as_f64().is_some_and(|s| s > 0.0), "{c}");
        assert!(c["glibc_score"].as_f64().is_some_and(|s| s > 0.0), "{c}");
    }
    let file = Path::new(v["cache_file"].as_str().expect("the plan was saved"));
    let dir = home.path().join("pagewise");
    assert_eq!(file.parent(), Some(dir.as_path()));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(file), 0o600);

    let plan = doctor_plan(home.path(), None);
    assert_eq!(plan["tables_source"], "cached", "{plan:#}");
    assert_eq!(plan["cache_file"], v["cache_file"], "{plan:#}");
    // PAGEWISE_PLAN=default sets the measured plan aside, and says so.
    let plan = doctor_plan(home.path(), Some("default"));
    assert_eq!(plan["tables_source"], "default", "{plan:#}");
    assert!(plan["cache_file"].is_null(), "{plan:#}");
    assert_eq!(plan["set_aside"], v["cache_file"], "{plan:#}");
    let text = String::from_utf8(doctor(home.path(), Some("default"), &[])).unwrap();
    assert!(text.contains("a measured plan exists"), "{text}");
    assert!(!text.contains("not measured here"), "{text}");
    // Any other value is ignored, and said to be.
    let plan = doctor_plan(home.path(), Some("bogus"));
    assert_eq!(plan["tables_source"], "cached", "{plan:#}");
    let notes = plan["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.starts_with("PAGEWISE_PLAN=\"bogus\" ignored"))),
        "{notes:?}"
    );
}

#[test]
fn no_save_measures_and_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let out = pagewise(home.path())
        .args(QUICK)
        .args(["1M", "--no-save"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert!(v["cache_file"].is_null(), "{v:#}");
    assert!(!v["choices"].as_array().unwrap().is_empty());
    assert!(!home.path().join("pagewise").exists());
    assert_eq!(doctor_plan(home.path(), None)["tables_source"], "default");
}

/// A cache folder others can write is passed over, said to be, and never
/// written into; the plan goes to the next safe place (here the private one
/// in the temporary folder), and with no safe place at all `tune` refuses at
/// once, in one line, before measuring.
#[test]
fn an_unsafe_cache_folder_is_passed_over_and_no_safe_place_is_refused_at_once() {
    use std::os::unix::fs::MetadataExt;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("pagewise");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // HOME cannot hold a cache; the private temporary folder is open to others.
    let not_a_home = home.path().join("a-file");
    std::fs::write(&not_a_home, "").unwrap();
    let tmp = home.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let uid = std::fs::metadata(&tmp).unwrap().uid();
    let private = tmp.join(format!("pagewise-{uid}"));
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tune = || {
        let mut c = pagewise(home.path());
        c.env("HOME", &not_a_home).env("TMPDIR", &tmp);
        c
    };
    let started = std::time::Instant::now();
    // The default sizes: measuring them would take most of a minute.
    let out = tune()
        .args(["tune", "--json", "--quiet"])
        .assert()
        .failure();
    // Refused before measuring anything (generous for a loaded machine).
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no usable cache directory"), "{stderr}");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = tune().args(QUICK).arg("1M").assert().success();
    let v = json(&out.get_output().stdout);
    let file = Path::new(v["cache_file"].as_str().expect("the plan was saved"));
    assert_eq!(file.parent(), Some(private.as_path()));
    let notes = v["notes"].to_string();
    assert!(notes.contains("passed over cache"), "{notes}");
    assert!(notes.contains("writable by group or others"), "{notes}");
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "written into the unsafe folder"
    );
}
