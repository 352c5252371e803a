//! Turns a [`MachineReport`] into advice: one line per limitation, with the
//! exact command that lifts it where one exists.

use super::{MachineReport, ProbeStatus};
use crate::host::hugetlb::HugetlbPool;
use crate::host::thp::Thp;
use crate::host::tracefs;
use crate::units::format_bytes;
use serde::Serialize;

/// One finding that limits a pagewise capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// The capability it limits: `regions`, `huge-text`, `stat`, `buffer`, `queue`.
    pub capability: &'static str,
    /// What is wrong, in one line.
    pub finding: String,
    /// The exact command that fixes it, when there is one.
    pub fix: Option<String>,
}

fn push(out: &mut Vec<Advice>, capability: &'static str, finding: String, fix: Option<String>) {
    out.push(Advice {
        capability,
        finding,
        fix,
    });
}

const TWO_MIB: u64 = 2 << 20;
const ONE_GIB: u64 = 1 << 30;

/// Computes the advice for a report. Pure; order is most important first.
pub fn advise(report: &MachineReport) -> Vec<Advice> {
    let mut out = Vec::new();
    thp_advice(&mut out, &report.thp);
    pool_advice(&mut out, &report.hugetlb);
    feature_advice(&mut out, report);
    perf_advice(&mut out, report);
    limits_advice(&mut out, report);
    out
}

/// THP switched off system-wide, defrag never, or disabled for this process.
fn thp_advice(out: &mut Vec<Advice>, thp: &Thp) {
    if thp.enabled.as_deref() == Some("never") {
        push(
            out,
            "regions",
            "transparent huge pages are off (enabled = never): regions, buffers and huge text fall back to 4 KiB pages unless a hugetlb pool has room".into(),
            Some("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled".into()),
        );
    } else if thp.defrag.as_deref() == Some("never") {
        push(
            out,
            "regions",
            "THP defrag is never: MADV_HUGEPAGE regions get 4 KiB pages whenever memory is fragmented".into(),
            Some("echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag".into()),
        );
    }
    if thp.disabled_for_process == Some(true) {
        push(
            out,
            "regions",
            "THP is disabled for this process (PR_SET_THP_DISABLE, inherited from its parent): huge pages only from hugetlb".into(),
            None,
        );
    }
}

/// Empty or full 2 MiB pools, and no 1 GiB pool.
fn pool_advice(out: &mut Vec<Advice>, pools: &[HugetlbPool]) {
    if let Some(pool) = pools.iter().find(|p| p.page_size_bytes == TWO_MIB) {
        match (pool.total, pool.available()) {
            (Some(0), _) => push(
                out,
                "regions",
                "no 2 MiB hugetlb pages are reserved: regions and huge text use THP, which the kernel may not grant".into(),
                Some("sysctl vm.nr_hugepages=512".into()),
            ),
            (Some(total), Some(0)) => push(
                out,
                "regions",
                format!("all {total} reserved 2 MiB hugetlb pages are in use"),
                Some(format!("sysctl vm.nr_hugepages={}", total + 512)),
            ),
            _ => {}
        }
    }
    if let Some(pool) = pools.iter().find(|p| p.page_size_bytes == ONE_GIB) {
        if pool.total == Some(0) {
            push(
                out,
                "regions",
                "no 1 GiB hugetlb pages are reserved: regions of 1 GiB and more use 2 MiB pages (at boot: hugepagesz=1G hugepages=N)".into(),
                Some("echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages".into()),
            );
        }
    }
}

/// What the tracepoints `stat` uses need, for this user and for others.
///
/// Root's `stat` needs nothing: where tracefs is not mounted it reads it
/// through a private mount of its own. Any other user's needs tracefs
/// mounted and readable by a group of theirs (mounted plainly it is root's
/// alone, mode 0700: `gid=` and `mode=0750` lift that): the advice, for root
/// as for anyone, is a group `tracing` of its own, never the user's primary
/// group (which may be shared by many, as `nogroup` is), and, for the fault
/// kinds and faults inside system calls, which count kernel events,
/// `perf_event_paranoid` at most 1 or CAP_PERFMON. The mmap calls (the
/// `syscalls` tracepoints of one's own processes) need only the readable
/// tracefs. Returns whether it advised lowering `perf_event_paranoid`.
fn tracefs_advice(out: &mut Vec<Advice>, report: &MachineReport) -> bool {
    let perf = &report.perf;
    let paranoid_too = match perf.paranoid {
        Some(level) if level > tracefs::UNPRIVILEGED_PARANOID => format!(
            ", and `{}` for their fault kinds ({})",
            tracefs::KERNEL_EVENTS_FIX,
            tracefs::KERNEL_EVENTS_ALTERNATIVE
        ),
        _ => String::new(),
    };
    if report.root {
        if perf.tracefs.is_none() {
            push(
                out,
                "stat",
                format!(
                    "tracefs is not mounted: stat run as root reads it through a private mount \
                     of its own, so root needs nothing; for other users' stat to see fault kinds \
                     and mmap calls, mount it readable by a group of theirs (then `usermod -aG \
                     tracing USER`){paranoid_too}"
                ),
                Some(tracefs::group_access_command(None)),
            );
        }
        return false;
    }
    // A group of its own for every user (their primary group may be a
    // shared one such as nogroup), as root's advice says.
    let unreadable = match (&perf.tracefs, perf.tracefs_readable) {
        (None, _) => Some((
            format!(
                "tracefs is not mounted: stat run as you gets no fault kinds and no mmap calls \
                 (only root's stat can mount it privately); {}",
                tracefs::JOIN_TRACING_GROUP
            ),
            None,
        )),
        (Some(point), Some(false)) => Some((
            format!(
                "tracefs at {point} is root's alone (mounted with mode 0700): stat run as you \
                 gets no fault kinds and no mmap calls; {}",
                tracefs::JOIN_TRACING_GROUP
            ),
            Some(point.as_str()),
        )),
        _ => None,
    };
    if let Some((finding, point)) = unreadable {
        push(
            out,
            "stat",
            finding,
            Some(tracefs::group_access_command(point)),
        );
    }
    let fault_kinds_work = perf
        .tracepoints
        .iter()
        .any(|t| t.name == "exceptions:page_fault_user" && t.result.status == ProbeStatus::Works);
    match perf.paranoid {
        Some(level) if level > tracefs::UNPRIVILEGED_PARANOID && !fault_kinds_work => {
            push(
                out,
                "stat",
                format!(
                    "perf_event_paranoid is {level}: only root may count kernel events, so stat \
                     run as you gets no fault kinds, no faults inside system calls and no kernel \
                     samples, even with tracefs readable ({})",
                    tracefs::KERNEL_EVENTS_ALTERNATIVE
                ),
                Some(tracefs::KERNEL_EVENTS_FIX.to_owned()),
            );
            true
        }
        _ => false,
    }
}

/// Kernel features regions and huge text fall back without.
fn feature_advice(out: &mut Vec<Advice>, report: &MachineReport) {
    if report.features.madv_populate_write.status == ProbeStatus::Unavailable {
        push(
            out,
            "regions",
            "MADV_POPULATE_WRITE is missing (kernel before 5.14): eager regions populate with a slower touch loop".into(),
            None,
        );
    }
    if report.features.vma_anon_name.status == ProbeStatus::Unavailable {
        push(
            out,
            "huge-text",
            "anonymous VMA names are missing (CONFIG_ANON_VMA_NAME): moved text shows as plain anonymous memory in /proc/PID/maps".into(),
            None,
        );
    }
}

/// What keeps `stat` from counting or tracing.
fn perf_advice(out: &mut Vec<Advice>, report: &MachineReport) {
    // Lowering perf_event_paranoid to 1 for kernel events lifts the limit on
    // software events too: one line, not two.
    let kernel_events_advised = tracefs_advice(out, report);
    if let Some(level) = report.perf.paranoid.filter(|_| !kernel_events_advised) {
        let software_blocked = report
            .perf
            .software
            .iter()
            .any(|s| s.result.status == ProbeStatus::Unavailable);
        if level > 2 || (software_blocked && !report.root) {
            push(
                out,
                "stat",
                format!("perf_event_paranoid is {level}: software events such as page-faults cannot be counted"),
                Some("sysctl kernel.perf_event_paranoid=2".into()),
            );
        }
    }
    let hardware = &report.perf.hardware;
    if !hardware.is_empty()
        && hardware
            .iter()
            .all(|h| h.result.status != ProbeStatus::Works)
    {
        push(
            out,
            "stat",
            "no hardware counters (cycles, TLB misses) here: stat reports faults, time and sampled footprints, not TLB misses; a VM needs its hypervisor to expose the PMU".into(),
            None,
        );
    }
}

/// Overcommit policy and the memlock limit.
fn limits_advice(out: &mut Vec<Advice>, report: &MachineReport) {
    if report.limits.overcommit_memory == Some(2) {
        push(
            out,
            "buffer",
            "overcommit_memory is 2 (strict): reserving address space for large buffers and queues may fail".into(),
            Some("sysctl vm.overcommit_memory=0".into()),
        );
    }
    if !report.root {
        memlock_advice(out, &report.limits);
    }
}

/// The locked memory pagewise advises an unprivileged user to be allowed.
const MEMLOCK_WANTED: u64 = 64 << 20;

/// A soft `RLIMIT_MEMLOCK` below [`MEMLOCK_WANTED`], with the fix this user
/// can apply: raise the soft limit to the hard one when that is enough, else
/// have root raise the hard one (`ulimit -l` above it fails).
fn memlock_advice(out: &mut Vec<Advice>, limits: &super::Limits) {
    let Some(soft) = limits.memlock_soft_bytes.filter(|&s| s < MEMLOCK_WANTED) else {
        return;
    };
    // Sizes as doctor's limits row shows them; `ulimit -l` counts KiB.
    let kib = |b: u64| b >> 10;
    let low = format!(
        "RLIMIT_MEMLOCK is {}: locked regions larger than that fail",
        format_bytes(soft)
    );
    let (finding, fix) = match (limits.memlock_hard_unlimited, limits.memlock_hard_bytes) {
        (Some(true), _) => (low, "ulimit -l unlimited".to_owned()),
        (Some(false), Some(hard)) if hard >= MEMLOCK_WANTED => (
            format!("{low}; the hard limit allows {}", format_bytes(hard)),
            format!("ulimit -l {}", kib(hard)),
        ),
        (Some(false), Some(hard)) => (
            format!(
                "{low}, and the hard limit ({}) keeps this user from raising it: only root can",
                format_bytes(hard)
            ),
            "as root: prlimit --memlock=unlimited --pid PID for a running shell or process; \
             for new logins `USER hard memlock unlimited` (and `soft`) in \
             /etc/security/limits.conf; for a systemd service LimitMEMLOCK=infinity"
                .to_owned(),
        ),
        _ => (
            format!("{low} (the hard limit was not read)"),
            "ulimit -l unlimited (as root when the hard limit is lower)".to_owned(),
        ),
    };
    push(out, "regions", finding, Some(fix));
}
