//! Fixture tests: fake `/proc` and `/sys` trees, including missing and unreadable files.

use super::*;
use crate::host::thp::MthpSize;
use std::fs;
use std::path::Path;

fn write(root: &Path, path: &str, text: &str) {
    let full = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(full.parent().unwrap()).unwrap();
    fs::write(full, text).unwrap();
}

/// A tree like this development VM: 2 MiB and 1 GiB pools, THP madvise.
fn typical_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "/proc/sys/kernel/osrelease", "6.18.44-test\n");
    for (size, total, free, resv, surplus) in [
        ("2048kB", "16", "10", "4", "0"),
        ("1048576kB", "0", "0", "0", "0"),
    ] {
        let d = format!("/sys/kernel/mm/hugepages/hugepages-{size}");
        write(r, &format!("{d}/nr_hugepages"), total);
        write(r, &format!("{d}/free_hugepages"), free);
        write(r, &format!("{d}/resv_hugepages"), resv);
        write(r, &format!("{d}/surplus_hugepages"), surplus);
    }
    let t = "/sys/kernel/mm/transparent_hugepage";
    write(r, &format!("{t}/enabled"), "always [madvise] never\n");
    write(
        r,
        &format!("{t}/defrag"),
        "always defer defer+madvise [madvise] never\n",
    );
    write(
        r,
        &format!("{t}/shmem_enabled"),
        "always within_size advise [never] deny force\n",
    );
    write(r, &format!("{t}/khugepaged/max_ptes_none"), "511\n");
    write(r, &format!("{t}/hpage_pmd_size"), "2097152\n");
    write(
        r,
        &format!("{t}/hugepages-2048kB/enabled"),
        "always [inherit] madvise never\n",
    );
    write(
        r,
        &format!("{t}/hugepages-64kB/enabled"),
        "always inherit madvise [never]\n",
    );
    write(r, "/proc/sys/kernel/perf_event_paranoid", "2\n");
    write(
        r,
        "/proc/mounts",
        "proc /proc proc rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n",
    );
    write(
        r,
        "/proc/cpuinfo",
        "processor\t: 0\nmodel name\t: Test CPU @ 2.0GHz\n",
    );
    let c = "/sys/devices/system/cpu/cpu0/cache";
    for (i, level, kind, size) in [
        (0, "1", "Data", "48K"),
        (1, "1", "Instruction", "32K"),
        (2, "2", "Unified", "2048K"),
        (3, "3", "Unified", "107520K"),
    ] {
        write(r, &format!("{c}/index{i}/level"), level);
        write(r, &format!("{c}/index{i}/type"), kind);
        write(r, &format!("{c}/index{i}/size"), size);
    }
    write(r, "/sys/devices/system/node/node0/cpulist", "0-1");
    write(r, "/sys/devices/system/node/online", "0");
    write(r, "/proc/sys/vm/overcommit_memory", "0\n");
    dir
}

#[test]
fn reads_a_typical_tree() {
    let dir = typical_tree();
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    assert_eq!(report.schema, "pagewise.doctor/1");
    assert_eq!(report.kernel.release.as_deref(), Some("6.18.44-test"));
    assert_eq!(report.hugetlb.len(), 2);
    let two = &report.hugetlb[0];
    assert_eq!(two.page_size_bytes, 2 << 20);
    assert_eq!(
        (two.total, two.free, two.reserved, two.surplus),
        (Some(16), Some(10), Some(4), Some(0))
    );
    assert_eq!(two.available(), Some(6));
    assert_eq!(report.hugetlb[1].page_size_bytes, 1 << 30);
    assert_eq!(report.thp.enabled.as_deref(), Some("madvise"));
    assert_eq!(report.thp.defrag.as_deref(), Some("madvise"));
    assert_eq!(report.thp.shmem_enabled.as_deref(), Some("never"));
    assert_eq!(report.thp.khugepaged_max_ptes_none, Some(511));
    assert_eq!(report.thp.pmd_size_bytes, Some(2 << 20));
    assert_eq!(
        report.thp.sizes,
        vec![
            MthpSize {
                size_bytes: 64 << 10,
                enabled: Some("never".into()),
                shmem_enabled: None,
            },
            MthpSize {
                size_bytes: 2 << 20,
                enabled: Some("inherit".into()),
                shmem_enabled: None,
            },
        ]
    );
    assert_eq!(report.perf.paranoid, Some(2));
    assert_eq!(report.perf.tracefs.as_deref(), Some("/sys/kernel/tracing"));
    assert_eq!(report.cpu.model.as_deref(), Some("Test CPU @ 2.0GHz"));
    assert_eq!(report.cpu.caches.len(), 4);
    assert_eq!(
        report.cpu.caches[3],
        Cache {
            level: 3,
            kind: "Unified".into(),
            size_bytes: 107520 << 10
        }
    );
    assert_eq!(report.cpu.numa_nodes, vec![0]);
    assert_eq!(report.limits.overcommit_memory, Some(0));
    assert!(report.not_read.is_empty(), "{:?}", report.not_read);
    assert_eq!(
        report.features.madv_populate_write.status,
        ProbeStatus::NotTried
    );
}

#[test]
fn advice_for_an_empty_pool_names_the_sysctl() {
    let dir = typical_tree();
    write(
        dir.path(),
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        "0",
    );
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    let fixes: Vec<_> = report
        .advice
        .iter()
        .filter_map(|a| a.fix.as_deref())
        .collect();
    assert!(fixes.contains(&"sysctl vm.nr_hugepages=512"), "{fixes:?}");
    assert!(fixes
        .iter()
        .any(|f| f.contains("hugepages-1048576kB/nr_hugepages")));
}

#[test]
fn advice_for_a_full_pool_grows_it() {
    let dir = typical_tree();
    write(
        dir.path(),
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "4",
    );
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    let fixes: Vec<_> = report
        .advice
        .iter()
        .filter_map(|a| a.fix.as_deref())
        .collect();
    assert!(fixes.contains(&"sysctl vm.nr_hugepages=528"), "{fixes:?}");
}

#[test]
fn thp_never_and_no_tracefs_are_advised() {
    let dir = typical_tree();
    write(
        dir.path(),
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise [never]",
    );
    write(dir.path(), "/proc/mounts", "proc /proc proc rw 0 0\n");
    write(dir.path(), "/proc/sys/vm/overcommit_memory", "2");
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    assert_eq!(report.thp.enabled.as_deref(), Some("never"));
    assert_eq!(report.perf.tracefs, None);
    let fixes: Vec<_> = report
        .advice
        .iter()
        .filter_map(|a| a.fix.as_deref())
        .collect();
    assert!(fixes.contains(&"echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"));
    // Not root: mounted readable by a group (a plain mount is root's alone),
    // and kernel events allowed for the fault kinds.
    assert!(
        fixes.iter().any(
            |f| f.starts_with("groupadd -f tracing && mount -t tracefs -o gid=")
                && f.ends_with(",mode=0750 nodev /sys/kernel/tracing")
        ),
        "{fixes:?}"
    );
    assert!(
        fixes.contains(&"sysctl kernel.perf_event_paranoid=1"),
        "{fixes:?}"
    );
    assert!(fixes.contains(&"sysctl vm.overcommit_memory=0"));
}

/// The memlock advice fits the limits the user has: `ulimit -l` up to the
/// hard limit when that is enough, else what root must change (a `ulimit -l`
/// above the hard limit fails for an unprivileged user).
#[test]
fn memlock_advice_fits_the_hard_limit() {
    let dir = typical_tree();
    let mut report = MachineReport::from_files(&SysRoot::at(dir.path()));
    report.root = false;
    let advice_for = |report: &mut MachineReport, soft: Option<u64>, hard: Option<u64>| {
        report.limits = Limits {
            memlock_soft_bytes: soft,
            memlock_unlimited: Some(soft.is_none()),
            memlock_hard_bytes: hard,
            memlock_hard_unlimited: Some(hard.is_none()),
            ..Limits::default()
        };
        advise(report)
            .into_iter()
            .find(|a| a.finding.contains("RLIMIT_MEMLOCK"))
    };
    let mib = |n: u64| Some(n << 20);
    let fix = |a: Option<Advice>| a.and_then(|a| a.fix).unwrap_or_default();
    assert_eq!(
        fix(advice_for(&mut report, mib(8), None)),
        "ulimit -l unlimited"
    );
    assert_eq!(
        fix(advice_for(&mut report, mib(8), mib(128))),
        "ulimit -l 131072"
    );
    // Sizes as the limits row shows them (`8 MiB`), not `8192 KiB` beside it.
    let stuck = advice_for(&mut report, mib(8), mib(8)).unwrap();
    assert!(
        stuck.finding.starts_with("RLIMIT_MEMLOCK is 8 MiB:")
            && stuck.finding.contains("hard limit (8 MiB)"),
        "{stuck:?}"
    );
    let enough = advice_for(&mut report, mib(8), mib(128)).unwrap();
    assert!(
        enough.finding.contains("the hard limit allows 128 MiB"),
        "{enough:?}"
    );
    let fix = stuck.fix.unwrap();
    assert!(!fix.contains("ulimit"), "{fix}");
    for needed in [
        "as root",
        "limits.conf",
        "memlock",
        "prlimit",
        "LimitMEMLOCK=",
    ] {
        assert!(fix.contains(needed), "{needed} missing: {fix}");
    }
    // Enough already, or root: nothing to advise.
    assert!(advice_for(&mut report, mib(64), mib(64)).is_none());
    assert!(advice_for(&mut report, None, None).is_none());
    report.root = true;
    assert!(advice_for(&mut report, mib(8), mib(8)).is_none());
}

/// The stat lines of the advice for `report`, as (finding, fix).
fn stat_advice(report: &MachineReport) -> Vec<(String, Option<String>)> {
    advice::advise(report)
        .into_iter()
        .filter(|a| a.capability == "stat" && !a.finding.contains("hardware counters"))
        .map(|a| (a.finding, a.fix))
        .collect()
}

fn probe(name: &str, result: ProbeResult) -> NamedProbe {
    NamedProbe {
        name: name.to_owned(),
        result,
    }
}

#[test]
fn tracefs_advice_says_what_root_and_other_users_need() {
    let dir = typical_tree();
    let mut report = MachineReport::from_files(&SysRoot::at(dir.path()));
    // Root, tracefs mounted: nothing to say.
    report.root = true;
    assert_eq!(stat_advice(&report), vec![]);
    // Root, not mounted: root's stat mounts it privately; other users need a
    // group mount and paranoid 1.
    report.perf.tracefs = None;
    let advice = stat_advice(&report);
    assert_eq!(advice.len(), 1, "{advice:?}");
    let (finding, fix) = &advice[0];
    assert!(
        finding.contains("private mount") && finding.contains("root needs nothing"),
        "{finding}"
    );
    assert!(
        finding.contains("`sysctl kernel.perf_event_paranoid=1`"),
        "{finding}"
    );
    assert!(!finding.contains("cannot classify"), "{finding}");
    assert_eq!(
        fix.as_deref(),
        Some("groupadd -f tracing && mount -t tracefs -o gid=$(getent group tracing | cut -d: -f3),mode=0750 nodev /sys/kernel/tracing")
    );
    // A user, tracefs mounted root-only: a remount for the group `tracing`
    // (not their own primary group, which may be a shared one such as
    // nogroup), and kernel events, which paranoid 2 keeps from them.
    report.root = false;
    report.gid = Some(65534);
    report.perf.tracefs = Some("/sys/kernel/tracing".into());
    report.perf.tracefs_readable = Some(false);
    let advice = stat_advice(&report);
    assert!(
        advice[0].0.contains("usermod -aG tracing USER"),
        "{advice:?}"
    );
    let fixes: Vec<_> = advice.into_iter().filter_map(|a| a.1).collect();
    assert_eq!(
        fixes,
        [
            "groupadd -f tracing && mount -o remount,gid=$(getent group tracing | cut -d: -f3),mode=0750 /sys/kernel/tracing",
            "sysctl kernel.perf_event_paranoid=1"
        ]
    );
    // Not mounted: the same group, with a mount.
    report.perf.tracefs = None;
    let fixes: Vec<_> = stat_advice(&report)
        .into_iter()
        .filter_map(|a| a.1)
        .collect();
    assert_eq!(
        fixes[0],
        "groupadd -f tracing && mount -t tracefs -o gid=$(getent group tracing | cut -d: -f3),mode=0750 nodev /sys/kernel/tracing"
    );
    report.perf.tracefs = Some("/sys/kernel/tracing".into());
    // Readable, and the fault-kind tracepoint counts (CAP_PERFMON, or
    // paranoid 1): nothing left to do.
    report.perf.tracefs_readable = Some(true);
    report.perf.tracepoints = vec![
        probe(
            "exceptions:page_fault_user",
            ProbeResult::works("counted 64"),
        ),
        probe("syscalls:sys_enter_mmap", ProbeResult::works("counted 1")),
    ];
    assert_eq!(stat_advice(&report), vec![]);
    // Readable but refused by paranoid 2: only the kernel events.
    report.perf.tracepoints[0].result = ProbeResult::unavailable("not permitted");
    let advice = stat_advice(&report);
    assert_eq!(advice.len(), 1, "{advice:?}");
    assert!(advice[0].0.contains("no fault kinds"), "{advice:?}");
    report.perf.paranoid = Some(1);
    assert_eq!(stat_advice(&report), vec![]);
}

#[test]
fn missing_files_are_reported_not_guessed() {
    let dir = typical_tree();
    fs::remove_dir_all(dir.path().join("sys/kernel/mm/transparent_hugepage")).unwrap();
    fs::remove_file(
        dir.path()
            .join("sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages"),
    )
    .unwrap();
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    assert_eq!(report.thp.enabled, None);
    assert!(report.thp.sizes.is_empty());
    assert_eq!(report.hugetlb[0].reserved, None);
    let missing: Vec<_> = report
        .not_read
        .iter()
        .map(|n| (n.path.as_str(), n.reason.as_str()))
        .collect();
    assert!(
        missing.contains(&("/sys/kernel/mm/transparent_hugepage/enabled", "missing")),
        "{missing:?}"
    );
    assert!(missing.contains(&(
        "/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages",
        "missing"
    )));
}

#[test]
fn unreadable_files_are_reported_not_guessed() {
    // A folder where a file should be fails to read for root too (EISDIR).
    let dir = typical_tree();
    let paranoid = dir.path().join("proc/sys/kernel/perf_event_paranoid");
    fs::remove_file(&paranoid).unwrap();
    fs::create_dir(&paranoid).unwrap();
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    assert_eq!(report.perf.paranoid, None);
    let entry = report
        .not_read
        .iter()
        .find(|n| n.path == "/proc/sys/kernel/perf_event_paranoid")
        .expect("recorded");
    assert_ne!(entry.reason, "missing");
}

#[test]
fn garbage_values_are_reported() {
    let dir = typical_tree();
    write(
        dir.path(),
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise never",
    );
    write(
        dir.path(),
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        "lots",
    );
    let report = MachineReport::from_files(&SysRoot::at(dir.path()));
    assert_eq!(report.thp.enabled, None);
    assert_eq!(report.hugetlb[0].total, None);
    assert!(report
        .not_read
        .iter()
        .any(|n| n.reason.contains("no [selected] mode")));
    assert!(report
        .not_read
        .iter()
        .any(|n| n.reason.contains("not a number")));
}

#[test]
fn live_probe_reads_this_machine() {
    let report = MachineReport::probe();
    assert!(report.kernel.release.is_some());
    assert!(report.cpu.online_cpus >= 1);
    assert!(!report.cpu.caches.is_empty());
    // Every probe ran: none is left as "live probes were not run".
    assert_ne!(
        report.features.madv_populate_write.status,
        ProbeStatus::NotTried
    );
    assert_eq!(report.perf.hardware.len(), 4);
    assert_eq!(report.perf.software.len(), 4);
    assert_eq!(report.features.map_hugetlb.len(), report.hugetlb.len());
}

#[test]
fn setting_any_malloc_fixer_turns_both_thresholds_fixed() {
    assert_eq!(effective_threshold(0, &[], MMAP_DYNAMIC), MMAP_DYNAMIC);
    assert_eq!(effective_threshold(0, &[], TRIM_DYNAMIC), TRIM_DYNAMIC);
    // trim_threshold set alone: the mmap threshold stays at its start, fixed.
    let set = ["glibc.malloc.trim_threshold"];
    assert_eq!(
        effective_threshold(0, &set, MMAP_DYNAMIC),
        "fixed at 128 KiB: GLIBC_TUNABLES sets glibc.malloc.trim_threshold, which turns the adaptation off"
    );
    assert_eq!(
        effective_threshold(1 << 20, &set, TRIM_DYNAMIC),
        "fixed at 1 MiB by GLIBC_TUNABLES (no adaptation)"
    );
}
