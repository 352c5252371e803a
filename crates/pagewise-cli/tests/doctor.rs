//! CLI tests for `pagewise doctor` and argument errors: they run the real binary.

mod common;
use common::{pagewise, stdout_of};

#[test]
fn doctor_prints_tables_and_advice() {
    let text = stdout_of(&["doctor"]);
    for needle in [
        "hugetlb",
        "THP",
        "MADV_POPULATE_WRITE",
        "perf_event_paranoid",
        "glibc",
        "RLIMIT_MEMLOCK",
    ] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
}

#[test]
fn doctor_json_holds_every_field() {
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(&["doctor", "--json"])).expect("valid JSON");
    assert_eq!(v["schema"], "pagewise.doctor/1");
    // Every field is there; a null one is a value doctor could not read,
    // which it then lists in `not_read` (tracefs is null when not mounted).
    let not_read = v["not_read"].as_array().unwrap();
    let has = |pointer: &str| {
        let value = v
            .pointer(pointer)
            .unwrap_or_else(|| panic!("missing {pointer} in {v:#}"));
        if pointer == "/perf/tracefs" {
            assert_eq!(
                value.is_string(),
                pagewise_testkit::tracefs_mounted(),
                "{value}"
            );
        } else if value.is_null() {
            assert!(
                !not_read.is_empty(),
                "{pointer} is null and nothing is listed as not read"
            );
        }
    };
    for p in [
        "/kernel/release",
        "/hugetlb",
        "/thp/enabled",
        "/thp/defrag",
        "/thp/shmem_enabled",
        "/thp/khugepaged_max_ptes_none",
        "/thp/sizes",
        "/thp/disabled_for_process",
        "/features/madv_populate_write/status",
        "/features/madv_collapse/status",
        "/features/pagemap_scan/status",
        "/features/vma_anon_name/status",
        "/features/map_hugetlb",
        "/perf/paranoid",
        "/perf/tracefs",
        "/perf/hardware",
        "/perf/software",
        "/perf/tracepoints",
        "/cpu/model",
        "/cpu/avx2",
        "/cpu/avx512f",
        "/cpu/erms",
        "/cpu/fsrm",
        "/cpu/caches",
        "/cpu/numa_nodes",
        "/glibc/version",
        "/glibc/mmap_threshold_tunable",
        "/glibc/non_temporal_threshold_bytes",
        "/limits/memlock_soft_bytes",
        "/limits/memlock_hard_unlimited",
        "/limits/overcommit_memory",
        "/advice",
        "/not_read",
    ] {
        has(p);
    }
    let pools = v["hugetlb"].as_array().unwrap();
    for pool in pools {
        for key in ["page_size_bytes", "total", "free", "reserved", "surplus"] {
            assert!(pool[key].is_u64(), "pool lacks {key}: {pool}");
        }
        assert!(pool["free"].as_u64() <= pool["total"].as_u64(), "{pool}");
    }
    assert_eq!(
        v["features"]["map_hugetlb"].as_array().unwrap().len(),
        pools.len()
    );
    let names: Vec<&str> = v["perf"]["hardware"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "cycles",
            "instructions",
            "dTLB-load-misses",
            "iTLB-load-misses"
        ]
    );
    for advice in v["advice"].as_array().unwrap() {
        assert!(advice["finding"].as_str().is_some_and(|f| !f.is_empty()));
    }
}

/// The rows of one area of the `doctor` machine table, item to value (the
/// first line of the value when it wraps).
fn table_rows(text: &str, area: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .trim_matches(|c: char| c == '│' || c.is_whitespace())
                .split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .collect();
            match cells[..] {
                [a, item, ref value @ ..] if a == area => Some((item.to_owned(), value.join(" "))),
                _ => None,
            }
        })
        .collect()
}

/// Every glibc item of the JSON report has its row in the table, and a row
/// reads "(not readable)" exactly when its JSON value is null: a key added
/// to the JSON without a row, or a row dropped, fails here.
#[test]
fn doctor_table_has_a_row_for_every_glibc_item() {
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(&["doctor", "--json"])).expect("valid JSON");
    let text = stdout_of(&["doctor"]);
    let rows = table_rows(&text, "glibc");
    // The JSON key, and the table row that shows it.
    let row_of = |key: &str| match key {
        "version" => "version",
        "mmap_threshold_tunable" | "mmap_threshold_effective" => "malloc mmap threshold",
        "trim_threshold_tunable" | "trim_threshold_effective" => "malloc trim threshold",
        "non_temporal_threshold_bytes" => "non-temporal copy threshold",
        "rep_movsb_threshold_bytes" => "rep movsb threshold",
        "rep_stosb_threshold_bytes" => "rep stosb threshold",
        other => panic!("glibc.{other} is in the JSON but this test knows no row for it"),
    };
    let glibc = v["glibc"].as_object().expect("a glibc object");
    assert!(!glibc.is_empty());
    for (key, value) in glibc {
        let item = row_of(key);
        let shown = rows
            .get(item)
            .unwrap_or_else(|| panic!("no glibc row {item:?} for glibc.{key} in:\n{text}"));
        let unread = match key.as_str() {
            "version" => "not glibc",
            _ => "(not readable)",
        };
        assert_eq!(
            shown == unread,
            value.is_null(),
            "glibc.{key} is {value} but its row {item:?} shows {shown:?}"
        );
    }
}

fn assert_one_line_usage_error(args: &[&str]) {
    let out = pagewise().args(args).assert().code(2).get_output().clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr:?}"
    );
    assert!(stderr.starts_with("pagewise: "), "{stderr:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn unknown_subcommand_is_one_line_error() {
    assert_one_line_usage_error(&["frobnicate"]);
}

#[test]
fn unknown_flag_is_one_line_error() {
    assert_one_line_usage_error(&["doctor", "--no-such-flag"]);
}

/// `pagewise` alone, or a command without its subcommand, prints the usage
/// (on stderr, as clap does) with the usage status, not as an error line.
#[test]
fn a_missing_command_prints_the_usage_with_status_2() {
    for args in [&[][..], &["bench"], &["queue"], &["text"]] {
        let out = pagewise().args(args).assert().code(2).get_output().clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!stderr.starts_with("pagewise: "), "{args:?}: {stderr}");
        assert!(stderr.contains("Usage: pagewise"), "{args:?}: {stderr}");
        assert!(stderr.contains("Commands:"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// A value or combination of arguments a command checks itself is a usage
/// error too: one line, status 2, as clap's own.
#[test]
fn usage_errors_found_after_parsing_exit_2() {
    for args in [
        &["queue", "append", "--chunk-size", "3MiB", "/nonexistent/q"][..],
        &["run", "--huge-text=foo", "--", "true"],
        &["run", "--", "true"],
        &["bench", "run", "--", "true"],
        &["text", "merge", "x.profile:zero", "-o", "/dev/null"],
    ] {
        assert_one_line_usage_error(args);
    }
}

#[test]
fn help_and_version_succeed() {
    pagewise().arg("--help").assert().success();
    pagewise().arg("--version").assert().success();
}

#[test]
fn doctor_runs_unprivileged_and_says_what_it_could_not_read() {
    let (_dir, bin) = match common::binary_for_nobody() {
        Ok(found) => found,
        Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
    };
    let out = common::as_nobody(&bin, &["doctor", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["root"], false);
    // Unprivileged, the counters still open in user-only mode or are marked with a reason.
    for p in v["perf"]["software"].as_array().unwrap() {
        assert!(p["status"].is_string() && p["detail"].is_string());
    }
    // Text output also works and prints the same sections.
    let text = common::as_nobody(&bin, &["doctor"]).output().unwrap();
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("unprivileged user"));
}

/// The copy plan's notes in a `doctor --json` report.
fn plan_notes(report: &serde_json::Value) -> Vec<String> {
    report["copy"]["plan"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

/// Without a measured plan, doctor suggests `pagewise tune` and says where
/// its plan goes; for a user without any usable cache directory (nobody,
/// with HOME and TMPDIR where it may not write), it says a plan could not
/// be saved instead of suggesting a tune whose result would be lost.
#[test]
fn tune_is_suggested_only_where_its_plan_can_be_saved() {
    let (dir, bin) = match common::binary_for_nobody() {
        Ok(found) => found,
        Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
    };
    let v = json_of(
        &common::as_nobody(&bin, &["doctor", "--json"])
            .env_remove("XDG_CACHE_HOME")
            .env_remove("PAGEWISE_PLAN")
            .env("HOME", "/nonexistent")
            .env("TMPDIR", "/nonexistent")
            .output()
            .unwrap(),
    );
    let notes = plan_notes(&v);
    let no_plan = notes
        .iter()
        .find(|n| n.starts_with("no measured plan"))
        .unwrap_or_else(|| panic!("{notes:?}"));
    assert!(!no_plan.contains("run `pagewise tune`"), "{notes:?}");
    assert!(no_plan.contains("could not save"), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("passed over")), "{notes:?}");
    // Where a cache can be made, the note says where the plan would go.
    let cache = dir.path().join("cache");
    let v = json_of(
        &pagewise()
            .args(["doctor", "--json"])
            .env_remove("PAGEWISE_PLAN")
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap(),
    );
    let notes = plan_notes(&v);
    let saved_in = format!("saved in {}", cache.join("pagewise").display());
    assert!(
        notes
            .iter()
            .any(|n| n.contains("run `pagewise tune`") && n.contains(&saved_in)),
        "{notes:?}"
    );
}

/// Unprivileged with a low memlock limit: the fix fits the hard limit
/// (`ulimit -l` up to it, or what root must change when it is too low).
#[test]
fn memlock_advice_fits_the_users_hard_limit() {
    let (_dir, bin) = match common::binary_for_nobody() {
        Ok(found) => found,
        Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
    };
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        pagewise_testkit::skip!(pagewise_testkit::Need::Tool, "prlimit is not installed");
    }
    // `None` when this root cannot set the limits (no CAP_SYS_RESOURCE to
    // raise a hard limit, as in some containers).
    let memlock_fix = |soft: u64, hard: &str| -> Option<String> {
        let doctor = common::as_nobody(&bin, &["doctor", "--json"]);
        let out = std::process::Command::new("prlimit")
            .arg(format!("--memlock={soft}:{hard}"))
            .arg("--")
            .arg(doctor.get_program())
            .args(doctor.get_args())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("failed to set") {
            return None;
        }
        assert!(out.status.success(), "{stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["limits"]["memlock_soft_bytes"], soft, "{:#}", v["limits"]);
        let fix = v["advice"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["finding"].as_str().unwrap().contains("RLIMIT_MEMLOCK"))
            .map(|a| a["fix"].as_str().unwrap().to_owned());
        Some(fix.expect("no memlock advice"))
    };
    for (hard, expected) in [
        ("unlimited", "ulimit -l unlimited"),
        ("134217728", "ulimit -l 131072"),
    ] {
        match memlock_fix(8 << 20, hard) {
            Some(fix) => assert_eq!(fix, expected),
            None => pagewise_testkit::skip_part!(
                hard,
                pagewise_testkit::Need::Other,
                "root here cannot raise the hard memlock limit (no CAP_SYS_RESOURCE)"
            ),
        }
    }
    // Lowering a hard limit needs no privilege (unless it is lower already).
    for soft in [4 << 20, 8 << 20] {
        match memlock_fix(soft, "8388608") {
            Some(stuck) => assert!(
                stuck.starts_with("as root") && !stuck.contains("ulimit"),
                "{stuck}"
            ),
            None => pagewise_testkit::skip_part!(
                "8 MiB",
                pagewise_testkit::Need::Other,
                "the hard memlock limit is below 8 MiB here"
            ),
        }
    }
}

/// The JSON report of a run that succeeded.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The stat lines of doctor's advice in a `doctor --json` report, as
/// (finding, fix).
fn stat_advice(report: &serde_json::Value) -> Vec<(String, String)> {
    report["advice"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["capability"] == "stat")
        .map(|a| {
            (
                a["finding"].as_str().unwrap().to_owned(),
                a["fix"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// As root with tracefs not mounted (in a private mount namespace), doctor
/// probes the tracepoints the way stat reads them (a private mount) and says
/// that root needs nothing, and what other users need: not that stat cannot
/// classify faults.
#[test]
fn without_tracefs_root_is_told_stat_mounts_it_privately() {
    if !pagewise_testkit::is_root() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Root,
            "unmounting tracefs needs root"
        );
    }
    if let Some(why) = pagewise_testkit::tool_missing("unshare") {
        pagewise_testkit::skip!(pagewise_testkit::Need::Tool, "{why}");
    }
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "grep -E ' (tracefs|debugfs) ' /proc/mounts | cut -d' ' -f2 | sort -r | \
             while read m; do umount \"$m\" || exit 97; done; exec \"$@\"",
        )
        .arg("sh")
        .arg(assert_cmd::cargo::cargo_bin("pagewise"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v = json_of(&out);
    assert!(v["perf"]["tracefs"].is_null(), "{:#}", v["perf"]);
    for t in v["perf"]["tracepoints"].as_array().unwrap() {
        assert_eq!(t["status"], "works", "{t:#}");
        assert!(
            t["detail"].as_str().unwrap().contains("private mount"),
            "{t:#}"
        );
    }
    let advice = stat_advice(&v);
    let (finding, fix) = advice
        .iter()
        .find(|(f, _)| f.contains("tracefs"))
        .unwrap_or_else(|| panic!("no tracefs advice: {advice:?}"));
    assert!(
        finding.contains("private mount") && finding.contains("root needs nothing"),
        "{finding}"
    );
    assert!(!finding.contains("cannot classify"), "{finding}");
    assert!(
        fix.contains("mount -t tracefs -o gid=") && fix.contains(",mode=0750 nodev"),
        "{fix}"
    );
}

/// As the user nobody with tracefs not mounted, or mounted plainly (root's
/// alone, mode 0700), doctor says so and gives the mount or remount that lets
/// a group `tracing` of its own read it (never nobody's primary group,
/// `nogroup`, which many share; the same group root's doctor names), and
/// (perf_event_paranoid 2) the setting that lets it count the fault kinds:
/// what was found to work for nobody on this kernel.
#[test]
fn unprivileged_is_told_how_to_read_tracefs_and_count_kernel_events() {
    let (_dir, bin) = match common::binary_for_nobody() {
        Ok(found) => found,
        Err((need, why)) => pagewise_testkit::skip!(need, "{why}"),
    };
    let mounted = pagewise_testkit::tracefs_mounted();
    let root_only = mounted
        && std::fs::metadata("/sys/kernel/tracing")
            .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o077 == 0);
    if mounted && !root_only {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Tracefs,
            "tracefs is mounted here readable by others, not the states this checks"
        );
    }
    let v = json_of(
        &common::as_nobody(&bin, &["doctor", "--json"])
            .output()
            .unwrap(),
    );
    let group = "groupadd -f tracing && ";
    let gid = "gid=$(getent group tracing | cut -d: -f3),mode=0750";
    let expected = if root_only {
        assert_eq!(v["perf"]["tracefs_readable"], false, "{:#}", v["perf"]);
        format!("{group}mount -o remount,{gid} /sys/kernel/tracing")
    } else {
        assert!(v["perf"]["tracefs"].is_null(), "{:#}", v["perf"]);
        format!("{group}mount -t tracefs -o {gid} nodev /sys/kernel/tracing")
    };
    let advice = stat_advice(&v);
    let fixes: Vec<String> = advice.iter().map(|a| a.1.clone()).collect();
    assert!(fixes.contains(&expected), "{fixes:?}");
    assert!(!fixes.iter().any(|f| f.contains("gid=65534")), "{fixes:?}");
    assert!(
        advice
            .iter()
            .any(|(finding, _)| finding.contains("usermod -aG tracing USER")),
        "{advice:?}"
    );
    let paranoid: i64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if paranoid > 1 {
        assert!(
            fixes.contains(&"sysctl kernel.perf_event_paranoid=1".to_owned()),
            "{fixes:?}"
        );
    }
    assert!(
        !fixes.iter().any(|f| f.contains("paranoid=-1")),
        "{fixes:?}"
    );
}
