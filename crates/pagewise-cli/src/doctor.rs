//! `pagewise doctor`: prints the machine report as tables or JSON.

use crate::format::{bytes, or_unread, table};
use crate::output::{outln, OutputError};
use pagewise::copy::{Choices, SizeRange, Source};
use pagewise::host::hugetlb::HugetlbPool;
use pagewise::host::thp::Thp;
use pagewise::probe::{
    Cpu, Features, Glibc, Limits, MachineReport, NamedProbe, Perf, ProbeResult, ProbeStatus,
};
use std::process::ExitCode;

/// Arguments of `pagewise doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print JSON (schema `pagewise.doctor/1`) instead of tables.
    #[arg(long)]
    json: bool,
}

/// Probes the machine and prints the report.
pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let report = MachineReport::probe();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_human(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn status(result: &ProbeResult) -> String {
    let word = match result.status {
        ProbeStatus::Works => "works",
        ProbeStatus::Unavailable => "unavailable",
        ProbeStatus::Failed => "FAILED",
        ProbeStatus::NotTried => "not tried",
    };
    format!("{word}: {}", result.detail)
}

fn flag(on: bool) -> &'static str {
    if on {
        "yes"
    } else {
        "no"
    }
}

fn probes(rows: &mut Vec<[String; 3]>, area: &str, list: &[NamedProbe]) {
    for p in list {
        rows.push([area.into(), p.name.clone(), status(&p.result)]);
    }
}

/// Size range `[from, to)`: the upper end excluded.
fn size_range(range: &SizeRange) -> String {
    match range.to {
        Some(to) => format!("[{}, {})", bytes(range.from as u64), bytes(to as u64)),
        None => format!("[{}, ∞)", bytes(range.from as u64)),
    }
}

/// The `copy` rows: where the plan came from (measured, cached or default,
/// and when), instruction set, thresholds, and the kernel per size class.
fn copy_rows(rows: &mut Vec<[String; 3]>, copy: Option<&Choices>) {
    let Some(c) = copy else {
        rows.push(["copy".into(), "plan".into(), "not probed".into()]);
        return;
    };
    let p = &c.plan;
    let mut row = |item: String, value: String| rows.push(["copy".into(), item, value]);
    let when = p.measured_at.map_or(String::new(), |t| {
        let age = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .saturating_sub(t);
        format!(" at Unix time {t} ({} h ago)", age / 3600)
    });
    let file = p
        .cache_file
        .as_deref()
        .map_or(String::new(), |f| format!(", {f}"));
    row(
        "plan".into(),
        format!(
            "{}{when}{file}; machine key {}; defaults for {}",
            p.describe_source(p.tables_source),
            p.key.cpu(),
            p.cpu_kind.describe()
        ),
    );
    row(
        "instruction set".into(),
        format!("{} ({})", p.isa.name(), p.isa_source.describe()),
    );
    let nt = |t: Option<usize>| t.map_or("never".to_owned(), |t| bytes(t as u64));
    row(
        "non-temporal from".into(),
        format!(
            "copy {}, fill {} ({}{})",
            nt(p.copy_nontemporal()),
            nt(p.fill_nontemporal()),
            p.describe_source(p.nontemporal_source),
            match (p.nontemporal_source, p.llc_bytes) {
                (Source::Default, Some(llc)) =>
                    format!(", from the last-level cache {}", bytes(llc)),
                _ => String::new(),
            }
        ),
    );
    for class in &c.size_classes {
        row(
            format!("{} {}", class.op, size_range(&class.sizes)),
            class.kernel.clone(),
        );
    }
    for note in &p.notes {
        row("note".into(), note.clone());
    }
}

/// The rows of the machine table: area, item, value.
type Rows = Vec<[String; 3]>;

fn add_row(rows: &mut Rows, area: &str, item: &str, value: String) {
    rows.push([area.into(), item.into(), value]);
}

fn print_human(r: &MachineReport) -> Result<(), OutputError> {
    let mut rows: Rows = Vec::new();
    kernel_rows(&mut rows, r);
    hugetlb_rows(&mut rows, &r.hugetlb);
    thp_rows(&mut rows, &r.thp);
    feature_rows(&mut rows, &r.features);
    perf_rows(&mut rows, &r.perf);
    cpu_rows(&mut rows, &r.cpu);
    glibc_rows(&mut rows, &r.glibc);
    limits_rows(&mut rows, &r.limits);
    copy_rows(&mut rows, r.copy.as_ref());
    print_tables(r, rows)
}

/// The kernel release and who the probe ran as.
fn kernel_rows(rows: &mut Rows, r: &MachineReport) {
    add_row(
        rows,
        "kernel",
        "release",
        or_unread(r.kernel.release.as_deref()),
    );
    add_row(
        rows,
        "kernel",
        "running as",
        if r.root {
            "root".into()
        } else {
            "unprivileged user".into()
        },
    );
}

/// One row per hugetlb pool.
fn hugetlb_rows(rows: &mut Rows, pools: &[HugetlbPool]) {
    for pool in pools {
        add_row(
            rows,
            "hugetlb",
            &format!("{} pages", bytes(pool.page_size_bytes)),
            format!(
                "total {}, free {}, reserved {}, surplus {}",
                or_unread(pool.total),
                or_unread(pool.free),
                or_unread(pool.reserved),
                or_unread(pool.surplus)
            ),
        );
    }
    if pools.is_empty() {
        add_row(
            rows,
            "hugetlb",
            "pools",
            "none found (kernel without hugetlbfs?)".into(),
        );
    }
}

/// THP modes, the mTHP sizes in use and the per-process switch.
fn thp_rows(rows: &mut Rows, t: &Thp) {
    add_row(rows, "THP", "enabled", or_unread(t.enabled.as_deref()));
    add_row(rows, "THP", "defrag", or_unread(t.defrag.as_deref()));
    add_row(
        rows,
        "THP",
        "shmem_enabled",
        or_unread(t.shmem_enabled.as_deref()),
    );
    add_row(
        rows,
        "THP",
        "khugepaged max_ptes_none",
        or_unread(t.khugepaged_max_ptes_none),
    );
    let sizes: Vec<String> = t
        .sizes
        .iter()
        .filter(|s| s.enabled.as_deref().is_some_and(|m| m != "never"))
        .map(|s| {
            format!(
                "{} ({})",
                bytes(s.size_bytes),
                s.enabled.as_deref().unwrap_or("?")
            )
        })
        .collect();
    add_row(
        rows,
        "THP",
        "sizes enabled",
        if sizes.is_empty() {
            "none".into()
        } else {
            sizes.join(", ")
        },
    );
    add_row(
        rows,
        "THP",
        "disabled for this process",
        t.disabled_for_process
            .map_or("(not readable)".into(), |d| flag(d).to_owned()),
    );
}

/// The kernel features, tried for real.
fn feature_rows(rows: &mut Rows, f: &Features) {
    add_row(
        rows,
        "feature",
        "MADV_POPULATE_WRITE",
        status(&f.madv_populate_write),
    );
    add_row(rows, "feature", "MADV_COLLAPSE", status(&f.madv_collapse));
    add_row(rows, "feature", "PAGEMAP_SCAN", status(&f.pagemap_scan));
    add_row(
        rows,
        "feature",
        "PR_SET_VMA_ANON_NAME",
        status(&f.vma_anon_name),
    );
    for p in &f.map_hugetlb {
        add_row(
            rows,
            "feature",
            &format!("MAP_HUGETLB {}", bytes(p.page_size_bytes)),
            status(&p.result),
        );
    }
}

/// perf access: paranoid level, tracefs, and each counter and tracepoint.
fn perf_rows(rows: &mut Rows, p: &Perf) {
    add_row(rows, "perf", "perf_event_paranoid", or_unread(p.paranoid));
    let tracefs = match (&p.tracefs, p.tracefs_readable) {
        (None, _) => "not mounted".to_owned(),
        (Some(point), Some(false)) => format!("{point} (not readable by this user)"),
        (Some(point), _) => point.clone(),
    };
    add_row(rows, "perf", "tracefs", tracefs);
    probes(rows, "perf", &p.hardware);
    probes(rows, "perf", &p.software);
    probes(rows, "perf", &p.tracepoints);
}

/// The CPU: model, count, features, caches, NUMA nodes.
fn cpu_rows(rows: &mut Rows, c: &Cpu) {
    let caches: Vec<String> = c
        .caches
        .iter()
        .map(|k| {
            format!(
                "L{} {} {}",
                k.level,
                k.kind.to_lowercase(),
                bytes(k.size_bytes)
            )
        })
        .collect();
    add_row(rows, "cpu", "model", or_unread(c.model.as_deref()));
    add_row(rows, "cpu", "online CPUs", c.online_cpus.to_string());
    add_row(
        rows,
        "cpu",
        "features",
        format!(
            "AVX2 {}, AVX-512 {}, ERMS {}, FSRM {}, 1 GiB pages {}",
            flag(c.avx2),
            flag(c.avx512f),
            flag(c.erms),
            flag(c.fsrm),
            flag(c.pdpe1gb)
        ),
    );
    add_row(rows, "cpu", "caches", caches.join(", "));
    add_row(rows, "cpu", "NUMA nodes", numa_nodes(&c.numa_nodes));
}

/// glibc's version, its `malloc` tunables and its x86 string thresholds:
/// one row for each glibc item of the JSON report (the mmap threshold row
/// shows what the tunable means in effect).
fn glibc_rows(rows: &mut Rows, glibc: &Glibc) {
    add_row(
        rows,
        "glibc",
        "version",
        glibc.version.clone().unwrap_or_else(|| "not glibc".into()),
    );
    add_row(
        rows,
        "glibc",
        "malloc mmap threshold",
        or_unread(glibc.mmap_threshold_effective.as_deref()),
    );
    add_row(
        rows,
        "glibc",
        "malloc trim threshold",
        or_unread(glibc.trim_threshold_effective.as_deref()),
    );
    add_row(
        rows,
        "glibc",
        "non-temporal copy threshold",
        or_unread(glibc.non_temporal_threshold_bytes.map(bytes)),
    );
    add_row(
        rows,
        "glibc",
        "rep movsb threshold",
        or_unread(glibc.rep_movsb_threshold_bytes.map(bytes)),
    );
    add_row(
        rows,
        "glibc",
        "rep stosb threshold",
        or_unread(glibc.rep_stosb_threshold_bytes.map(bytes)),
    );
}

/// Process limits and VM policy.
fn limits_rows(rows: &mut Rows, limits: &Limits) {
    add_row(rows, "limits", "RLIMIT_MEMLOCK", {
        let shown = |unlimited: Option<bool>, n: Option<u64>| match (unlimited, n) {
            (Some(true), _) => "unlimited".to_owned(),
            (_, Some(n)) => bytes(n),
            _ => "(not readable)".to_owned(),
        };
        format!(
            "{} (hard limit {})",
            shown(limits.memlock_unlimited, limits.memlock_soft_bytes),
            shown(limits.memlock_hard_unlimited, limits.memlock_hard_bytes)
        )
    });
    add_row(
        rows,
        "limits",
        "overcommit_memory",
        limits
            .overcommit_memory
            .map_or("(not readable)".into(), |m| {
                let meaning = match m {
                    0 => "heuristic",
                    1 => "always",
                    2 => "strict",
                    _ => "unknown",
                };
                format!("{m} ({meaning})")
            }),
    );
}

/// Prints the machine table, then the advice and what could not be read.
fn print_tables(r: &MachineReport, rows: Rows) -> Result<(), OutputError> {
    let mut machine = table(&["area", "item", "value"]);
    for [a, i, v] in rows {
        machine.add_row(vec![a, i, v]);
    }
    outln!("{machine}")?;

    if !r.advice.is_empty() {
        let mut advice = table(&["for", "finding", "fix"]);
        for a in &r.advice {
            advice.add_row(vec![
                a.capability.to_owned(),
                a.finding.clone(),
                a.fix.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        outln!("\nAdvice\n{advice}")?;
    }
    if !r.not_read.is_empty() {
        outln!("\nNot readable here ({}):", r.not_read.len())?;
        for n in &r.not_read {
            outln!("  {}: {}", n.path, n.reason)?;
        }
    }
    Ok(())
}

/// The NUMA nodes row: how many, then their ids ("1 node (id 0)"), so that a
/// lone id is not read as a count of nodes.
fn numa_nodes(ids: &[u32]) -> String {
    let list = ids
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    match ids.len() {
        0 => "(not readable)".into(),
        1 => format!("1 node (id {list})"),
        n => format!("{n} nodes (ids {list})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_nodes_say_how_many_then_which() {
        assert_eq!(numa_nodes(&[]), "(not readable)");
        assert_eq!(numa_nodes(&[0]), "1 node (id 0)");
        assert_eq!(numa_nodes(&[0, 1]), "2 nodes (ids 0, 1)");
    }
}
