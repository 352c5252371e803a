//! `pagewise stat` held to real programs whose memory-path problem is known,
//! each run in every state a user's machine can be in: tracefs mounted,
//! tracefs not mounted (pagewise reads it through a private mount), and an
//! unprivileged user (no tracepoints: findings inferred from counts, samples
//! and mmap records). The expected first finding must hold in each.
//!
//! The states are made for the command only (a private mount namespace, or
//! `setpriv`); the machine's own mounts are left as they are. Parts that need
//! a tool this machine lacks (python3, node, gzip, xz, c++, root) are skipped
//! with the reason printed.

mod stat_support;

use pagewise_testkit::Need;
use serde_json::Value;
use stat_support::{
    assert_churn_inferred_as_the_state_says, assert_first, assert_first_memory_finding, first_kind,
    fixture, fixture_in_every_state, in_every_state, kinds, remove_perf_map, stat_in,
    world_executable, world_readable, Shared, State, STATES,
};
use std::path::{Path, PathBuf};
use std::process::Command;

fn tool(name: &str) -> Option<String> {
    pagewise_testkit::tool_missing(name)
}

#[test]
fn first_touch_fixture_in_every_state() {
    fixture_in_every_state("first_touch", &[], &["256"], "first-touch", |state, v| {
        let f = &v["findings"][0];
        match state {
            State::Unprivileged => assert!(f["inferred_from"].is_string(), "{f:#}"),
            _ => assert!(f["inferred_from"].is_null(), "{f:#}"),
        }
        // How the cost was obtained is in the report.
        let c = &v["costs"];
        assert!(c["fault_s"].as_f64().unwrap() > 0.0, "{c:#}");
        assert!(
            ["measured", "cached", "assumed"].contains(&c["source"].as_str().unwrap()),
            "{c:#}"
        );
        // Every field is there, `null` where it could not be measured.
        let costs = c.as_object().unwrap();
        for key in [
            "rewrite_4k_s",
            "fault_overhead_s",
            "kernel_samples",
            "kernel_fault_samples",
        ] {
            assert!(costs.contains_key(key), "{key} missing: {c:#}");
        }
    });
}

#[test]
fn heap_churn_fixture_in_every_state() {
    fixture_in_every_state("heap_churn", &[], &["16"], "heap-churn", |state, v| {
        assert_churn_inferred_as_the_state_says(state, v);
        if state == State::Unprivileged {
            let r = &v["mapping_records"];
            assert!(r["remapped"].as_u64().unwrap() >= 12, "{r:#}");
        }
    });
}

#[test]
fn text_footprint_fixture_in_every_state() {
    fixture_in_every_state(
        "text_footprint",
        &[],
        &["25000"],
        "text-footprint",
        |_, _| {},
    );
}

#[test]
fn file_faults_fixture_in_every_state() {
    let d = match fixture("file_faults") {
        Ok(path) => path,
        Err(why) => pagewise_testkit::skip!(Need::Compiler, "{why}"),
    };
    let shared = Shared::new();
    let d = shared.program(&d);
    // On the target disk (not tmpfs), so that dropping it from the page cache
    // makes the reads wait for the disk.
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = disk.path().join("data.bin");
    let data = data.to_str().unwrap();
    for state in STATES {
        let prepared = Command::new(&d)
            .args(["prepare", data, "32"])
            .status()
            .unwrap();
        assert!(prepared.success());
        if state == State::Unprivileged && !world_readable(Path::new(data)) {
            pagewise_testkit::skip_part!(
                state.name(),
                Need::Other,
                "the data file under the target folder is not readable by other users"
            );
            continue;
        }
        let v = match stat_in(state, &shared, &[], &[d.to_str().unwrap(), "read", data]) {
            Ok(v) => v,
            Err((need, why)) => {
                pagewise_testkit::skip_part!(state.name(), need, "{why}");
                continue;
            }
        };
        let majors = v["counts"]["major_faults"].as_u64().unwrap();
        if majors < 1000 {
            pagewise_testkit::skip_part!(
                state.name(),
                Need::Other,
                "the page cache kept the file ({majors} major faults)"
            );
            continue;
        }
        eprintln!(
            "file_faults: {}: first finding {}",
            state.name(),
            first_kind(&v)
        );
        assert_first(state, &v, "file-faults");
    }
}

/// A Python interpreter every state can run: the one on PATH when the
/// unprivileged user can run it too, else the system's.
fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && world_executable(&path) {
        return Some(path);
    }
    let system = PathBuf::from("/usr/bin/python3");
    world_executable(&system).then_some(system)
}

const PYTHON_CHURN: &str = "\
import sys

def churn(rounds, size):
    total = 0
    for i in range(rounds):
        buf = bytearray(size)             # a fresh 64 MiB block from malloc: a fresh mmap
        buf[::4096] = b'\\x01' * (size // 4096)   # touch every page
        total += buf[size // 2]
    return total

print(churn(int(sys.argv[1]), 64 << 20))
";

#[test]
fn python_bytearray_churn_is_heap_churn() {
    let Some(py) = python() else {
        pagewise_testkit::skip!(Need::Tool, "no python3 that every user can run");
    };
    let shared = Shared::new();
    let script = shared.write("churn.py", PYTHON_CHURN.as_bytes());
    let version = Command::new(&py).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    in_every_state(
        &shared,
        &["--sites"],
        &[py.to_str().unwrap(), script.to_str().unwrap(), "12"],
        |state, v| {
            assert_first(state, v, "heap-churn");
            assert_churn_inferred_as_the_state_says(state, v);
            // The site is an interpreter frame, and the report says which.
            let rt = v["sites"][0]["interpreter"].as_str().unwrap_or("");
            assert!(rt.starts_with("CPython"), "{:#}", v["sites"][0]);
            if version.starts_with("Python 3.11") || version.starts_with("Python 3.10") {
                assert!(rt.contains("3.12+"), "{version}: {rt}");
            }
        },
    );
}

#[test]
fn python_3_12_perf_trampolines_name_the_script_function_where_unwinding_reaches_them() {
    // `-X perf` needs Python 3.12+; the python3 on PATH may be older, and a
    // newer one may be installed with pyenv beside it.
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    let mut candidates: Vec<String> = ["python3.13", "python3.12", "python3"]
        .map(str::to_owned)
        .to_vec();
    if let Some(Ok(versions)) = pyenv.map(|root| std::fs::read_dir(root.join("versions"))) {
        let mut found: Vec<String> = versions
            .flatten()
            .map(|e| e.path().join("bin").join("python3"))
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        found.sort();
        candidates.extend(found.into_iter().rev());
    }
    let found = candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import sys; sys.exit(sys.version_info < (3, 12))"])
            .status()
            .is_ok_and(|s| s.success())
    });
    let Some(py) = found else {
        let v = Command::new("python3").arg("--version").output();
        let v = v.map_or_else(
            |e| e.to_string(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        );
        pagewise_testkit::skip!(
            Need::Tool,
            "no Python 3.12+ on PATH or in pyenv ({v}): `-X perf` (perf-map trampolines) is 3.12+"
        );
    };
    let shared = Shared::new();
    let script = shared.write("churn.py", PYTHON_CHURN.as_bytes());
    let v = match stat_in(
        State::Unmounted,
        &shared,
        &["--sites"],
        &[&py, "-X", "perf", script.to_str().unwrap(), "8"],
    ) {
        Ok(v) => v,
        Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
    };
    remove_perf_map(&v);
    assert_eq!(first_kind(&v), "heap-churn", "{:#}", v["findings"]);
    let site = &v["sites"][0];
    if site["script"].is_null() {
        // Frame-pointer unwinding cannot pass through an interpreter built
        // without frame pointers; the report says how to get them.
        let rt = site["interpreter"].as_str().unwrap_or("");
        assert!(rt.contains("frame pointers"), "{site:#}");
    } else {
        assert_eq!(site["script"]["function"], "churn", "{site:#}");
    }
}

const NODE_CHURN: &str = "\
function churn(rounds, size) {
  let total = 0;
  for (let i = 0; i < rounds; i++) {
    const buf = Buffer.alloc(size, 1); // a fresh 48 MiB block each time
    total += buf[size >> 1];
  }
  return total;
}
console.log(churn(Number(process.argv[2]), 48 << 20));
";

#[test]
fn node_buffer_churn_is_heap_churn_and_names_the_script_function() {
    if let Some(why) = tool("node") {
        pagewise_testkit::skip!(Need::Tool, "{why}");
    }
    let shared = Shared::new();
    let script = shared.write("churn.js", NODE_CHURN.as_bytes());
    in_every_state(
        &shared,
        &["--sites"],
        &[
            "node",
            "--perf-basic-prof",
            "--interpreted-frames-native-stack",
            script.to_str().unwrap(),
            "12",
        ],
        |state, v| {
            remove_perf_map(v);
            assert_first_memory_finding(state, v, "heap-churn");
            assert_churn_inferred_as_the_state_says(state, v);
            let site = &v["sites"][0];
            assert!(
                site["interpreter"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("node"),
                "{site:#}"
            );
            // node wrote /tmp/perf-PID.map: the script's own function is named.
            assert_eq!(site["script"]["function"], "churn", "{site:#}");
            assert!(
                site["script"]["file"]
                    .as_str()
                    .unwrap_or("")
                    .ends_with("churn.js"),
                "{site:#}"
            );
        },
    );
    // Without the flag the site says how to see the script's functions.
    let state = if pagewise_testkit::is_root() {
        State::Unmounted
    } else {
        State::Unprivileged
    };
    let v = match stat_in(
        state,
        &shared,
        &["--sites"],
        &["node", script.to_str().unwrap(), "6"],
    ) {
        Ok(v) => v,
        Err((need, why)) => {
            pagewise_testkit::skip_part!("without --perf-basic-prof", need, "{why}");
            return;
        }
    };
    let rt = v["sites"][0]["interpreter"].as_str().unwrap_or("");
    assert!(rt.contains("--perf-basic-prof"), "{:#}", v["sites"][0]);
}

#[test]
fn touching_a_large_fresh_buffer_once_is_first_touch() {
    // dd reads 256 MiB into a fresh buffer: every fault is taken inside read().
    if let Some(why) = tool("dd") {
        pagewise_testkit::skip!(Need::Tool, "{why}");
    }
    let shared = Shared::new();
    in_every_state(
        &shared,
        &[],
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"],
        |state, v| {
            assert_first(state, v, "first-touch");
        },
    );
}

/// `bytes` of incompressible data in the shared folder.
fn random_file(shared: &Shared, name: &str, bytes: usize) -> PathBuf {
    let mut data = vec![0u8; bytes];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_ne_bytes()[..chunk.len()]);
    }
    shared.write(name, &data)
}

#[test]
fn gzip_has_no_memory_finding() {
    if let Some(why) = tool("gzip") {
        pagewise_testkit::skip!(Need::Tool, "{why}");
    }
    let shared = Shared::new();
    let data = random_file(&shared, "random.bin", 30 << 20);
    in_every_state(
        &shared,
        &[],
        &["gzip", "-9", "-c", "-k", data.to_str().unwrap()],
        |state, v| {
            assert!(
                kinds(v).is_empty(),
                "{}: a program with no memory-path problem got {:#}",
                state.name(),
                v["findings"]
            );
        },
    );
}

#[test]
fn xz_first_finding_is_first_touch_or_none() {
    if let Some(why) = tool("xz") {
        pagewise_testkit::skip!(Need::Tool, "{why}");
    }
    let shared = Shared::new();
    let data = random_file(&shared, "random.bin", 8 << 20);
    in_every_state(
        &shared,
        &[],
        &["xz", "-9e", "-T1", "-c", "-k", data.to_str().unwrap()],
        |state, v| {
            // It faults in its dictionary once: a small first-touch share is
            // right, silence is acceptable, anything else is wrong.
            let first = first_kind(v);
            assert!(
                first == "first-touch" || first == "none",
                "{}: {:#}",
                state.name(),
                v["findings"]
            );
        },
    );
}

#[test]
fn a_cpp_program_is_first_touch_and_its_sites_fit_one_line() {
    let t = match fixture("template_fill") {
        Ok(path) => path,
        Err(why) => pagewise_testkit::skip!(Need::Compiler, "{why}"),
    };
    let shared = Shared::new();
    let t = shared.program(&t);
    let t = t.to_str().unwrap();
    in_every_state(&shared, &["--sites"], &[t, "256"], |state, v| {
        assert_first(state, v, "first-touch");
        // JSON keeps the full name, templates and all.
        let full = v["sites"][0]["function"].as_str().unwrap();
        assert!(
            full.contains("grid::Tensor<") && full.contains("fill_with"),
            "{full}"
        );
    });
    // The human sites table: one line per site, short names, at most 120 columns.
    let out = stat_support::pagewise()
        .args(["stat", "--sites", "--", t, "256"])
        .assert()
        .success()
        .get_output()
        .stderr
        .clone();
    let text = String::from_utf8_lossy(&out);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("fault sites"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(!table.is_empty(), "{text}");
    for line in &table {
        assert!(
            line.chars().count() <= 120,
            "{} columns: {line}",
            line.len()
        );
    }
    assert!(
        table[0].contains("grid::Tensor::fill_with (template_fill.cpp:"),
        "{}",
        table[0]
    );
}

#[test]
fn attaching_to_a_churning_process_gives_the_same_finding_as_running_it() {
    let b = match fixture("heap_churn") {
        Ok(path) => path,
        Err(why) => pagewise_testkit::skip!(Need::Compiler, "{why}"),
    };
    let shared = Shared::new();
    let b = shared.program(&b);
    for state in STATES {
        // A long churn loop, as the user the state runs as; watched for one second.
        let mut spawn = if state == State::Unprivileged && pagewise_testkit::is_root() {
            pagewise_testkit::as_nobody(&b)
        } else {
            Command::new(&b)
        };
        let mut child = spawn
            .arg("100000")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let pid = child.id().to_string();
        let result = stat_in(state, &shared, &["--pid", &pid, "--seconds", "1"], &[]);
        let alive = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        let _ = child.wait();
        let v: Value = match result {
            Ok(v) => v,
            Err((need, why)) => {
                pagewise_testkit::skip_part!(state.name(), need, "{why}");
                continue;
            }
        };
        assert!(alive, "observing must not stop the process");
        eprintln!(
            "heap_churn --pid: {}: first finding {}",
            state.name(),
            first_kind(&v)
        );
        assert_eq!(v["target"]["exited_early"], false);
        assert_first(state, &v, "heap-churn");
        assert_churn_inferred_as_the_state_says(state, &v);
    }
}
