//! `pagewise doctor`: prints the machine report as tables or JSON.

use crate::format::{bytes, or_unread, table};
use pagewise::copy::{Choices, SizeRange, Source, COPY_LLC_DIVISOR, FILL_LLC_DIVISOR};
use pagewise::probe::{MachineReport, NamedProbe, ProbeResult, ProbeStatus};
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
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report);
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

fn source(s: Source) -> &'static str {
    match s {
        Source::Detected => "detected",
        Source::Environment => "from the environment",
        Source::Api => "set by the program",
        Source::Default => "default: not detectable",
    }
}

/// The `copy` rows: instruction set, thresholds, kernel per size class.
fn copy_rows(rows: &mut Vec<[String; 3]>, copy: Option<&Choices>) {
    let Some(c) = copy else {
        rows.push(["copy".into(), "plan".into(), "not probed".into()]);
        return;
    };
    let p = &c.plan;
    let mut row = |item: String, value: String| rows.push(["copy".into(), item, value]);
    row(
        "instruction set".into(),
        format!("{} ({})", p.isa.name(), source(p.isa_source)),
    );
    let nt = |t: Option<usize>| t.map_or("never".to_owned(), |t| bytes(t as u64));
    row(
        "non-temporal from".into(),
        format!(
            "copy {}, fill {} ({}{})",
            nt(p.copy_nontemporal),
            nt(p.fill_nontemporal),
            source(p.nontemporal_source),
            match (p.nontemporal_source, p.llc_bytes) {
                (Source::Detected, Some(llc)) => format!(
                    ": last-level cache {} / {COPY_LLC_DIVISOR} and / {FILL_LLC_DIVISOR}",
                    bytes(llc)
                ),
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

fn print_human(r: &MachineReport) {
    let mut rows: Vec<[String; 3]> = Vec::new();
    let mut row =
        |area: &str, item: &str, value: String| rows.push([area.into(), item.into(), value]);

    row("kernel", "release", or_unread(r.kernel.release.as_deref()));
    row(
        "kernel",
        "running as",
        if r.root {
            "root".into()
        } else {
            "unprivileged user".into()
        },
    );
    for pool in &r.hugetlb {
        row(
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
    if r.hugetlb.is_empty() {
        row(
            "hugetlb",
            "pools",
            "none found (kernel without hugetlbfs?)".into(),
        );
    }
    let t = &r.thp;
    row("THP", "enabled", or_unread(t.enabled.as_deref()));
    row("THP", "defrag", or_unread(t.defrag.as_deref()));
    row(
        "THP",
        "shmem_enabled",
        or_unread(t.shmem_enabled.as_deref()),
    );
    row(
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
    row(
        "THP",
        "sizes enabled",
        if sizes.is_empty() {
            "none".into()
        } else {
            sizes.join(", ")
        },
    );
    row(
        "THP",
        "disabled for this process",
        t.disabled_for_process
            .map_or("(not readable)".into(), |d| flag(d).to_owned()),
    );

    let f = &r.features;
    row(
        "feature",
        "MADV_POPULATE_WRITE",
        status(&f.madv_populate_write),
    );
    row("feature", "MADV_COLLAPSE", status(&f.madv_collapse));
    row("feature", "PAGEMAP_SCAN", status(&f.pagemap_scan));
    row("feature", "PR_SET_VMA_ANON_NAME", status(&f.vma_anon_name));
    for p in &f.map_hugetlb {
        row(
            "feature",
            &format!("MAP_HUGETLB {}", bytes(p.page_size_bytes)),
            status(&p.result),
        );
    }

    row("perf", "perf_event_paranoid", or_unread(r.perf.paranoid));
    row(
        "perf",
        "tracefs",
        r.perf
            .tracefs
            .clone()
            .unwrap_or_else(|| "not mounted".into()),
    );
    let c = &r.cpu;
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
    let glibc = &r.glibc;
    let limits = &r.limits;
    probes(&mut rows, "perf", &r.perf.hardware);
    probes(&mut rows, "perf", &r.perf.software);
    probes(&mut rows, "perf", &r.perf.tracepoints);

    let mut row =
        |area: &str, item: &str, value: String| rows.push([area.into(), item.into(), value]);
    row("cpu", "model", or_unread(c.model.as_deref()));
    row("cpu", "online CPUs", c.online_cpus.to_string());
    row(
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
    row("cpu", "caches", caches.join(", "));
    row(
        "cpu",
        "NUMA nodes",
        if c.numa_nodes.is_empty() {
            "(not readable)".into()
        } else {
            c.numa_nodes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    row(
        "glibc",
        "version",
        glibc.version.clone().unwrap_or_else(|| "not glibc".into()),
    );
    row(
        "glibc",
        "malloc mmap threshold",
        or_unread(glibc.mmap_threshold_effective.as_deref()),
    );
    row(
        "glibc",
        "non-temporal copy threshold",
        glibc
            .non_temporal_threshold_bytes
            .map_or("(not readable)".into(), bytes),
    );
    row(
        "glibc",
        "rep movsb threshold",
        glibc
            .rep_movsb_threshold_bytes
            .map_or("(not readable)".into(), bytes),
    );
    row(
        "limits",
        "RLIMIT_MEMLOCK",
        match (limits.memlock_unlimited, limits.memlock_soft_bytes) {
            (Some(true), _) => "unlimited".into(),
            (_, Some(n)) => bytes(n),
            _ => "(not readable)".into(),
        },
    );
    row(
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

    copy_rows(&mut rows, r.copy.as_ref());

    let mut machine = table(&["area", "item", "value"]);
    for [a, i, v] in rows {
        machine.add_row(vec![a, i, v]);
    }
    println!("{machine}");

    if !r.advice.is_empty() {
        let mut advice = table(&["for", "finding", "fix"]);
        for a in &r.advice {
            advice.add_row(vec![
                a.capability.to_owned(),
                a.finding.clone(),
                a.fix.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        println!("\nAdvice\n{advice}");
    }
    if !r.not_read.is_empty() {
        println!("\nNot readable here ({}):", r.not_read.len());
        for n in &r.not_read {
            println!("  {}: {}", n.path, n.reason);
        }
    }
}
