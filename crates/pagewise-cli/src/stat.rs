//! `pagewise stat`: runs a command (or watches a process) and explains its
//! memory-path cost. The work is in `pagewise::observe`; this file parses the
//! arguments and prints the report.
//!
//! Like `perf stat` and `time`, the report goes to stderr (or `--output FILE`)
//! so the command's own stdout stays untouched; `--output -` puts it on stdout
//! and the command's stdout on stderr, so that stdout holds the report alone.

use crate::format::{bytes, table};
use crate::output::{errln, open_output, write_out};
use pagewise::host::user_files::create_output_noting_new;
use pagewise::observe::{
    self,
    findings::count,
    names::{clip, short_name},
    ChurnSite, Costs, Counts, FaultKinds, Finding, Hardware, Location, MappingRecords, PageSizes,
    Site, Skipped, StatOptions, StatReport, Syscalls, Target, TextFootprint, TracepointSource,
};
use pagewise::units::format_byte_list;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `pagewise stat`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The report goes to stderr (or --output), so CMD's stdout is left alone.\n\
                  For JSON to pipe into a program: --json -o - (the report alone on stdout; CMD's stdout goes to stderr).\n\
                  Exit status: CMD's (128+N when a signal N killed it); 127 when CMD is not found.\n\
                  SIGTERM, SIGHUP and SIGINT sent to pagewise go to CMD; the report follows when it ends."
)]
pub struct StatArgs {
    /// Print JSON (schema `pagewise.stat/1`) instead of tables.
    #[arg(long)]
    json: bool,
    /// Also sample every page fault with its stack and report the top call sites
    /// (and where heap mmap/munmap churn comes from).
    #[arg(long)]
    sites: bool,
    /// Write a flame graph of page-fault stacks to this SVG file (implies --sites).
    #[arg(long, value_name = "FILE.svg")]
    flame: Option<PathBuf>,
    /// Shortest time between page-size snapshots (/proc/PID/smaps), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    interval: u64,
    /// Write the report to FILE instead of stderr; `-` is stdout, and CMD's
    /// own stdout then goes to stderr.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Observe the running process PID instead of starting CMD.
    #[arg(long, value_name = "PID", conflicts_with = "command",
          value_parser = clap::value_parser!(i32).range(1..))]
    pid: Option<i32>,
    /// With --pid: seconds to observe it (default 10, at most a day).
    #[arg(long, value_name = "N", requires = "pid",
          value_parser = crate::args::seconds_up_to(crate::args::MAX_WINDOW_SECONDS))]
    seconds: Option<f64>,
    /// How many call sites to list.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    top: u32,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    command: Vec<OsString>,
}

/// The `--output` path that means stdout.
const STDOUT: &str = "-";

/// Why `--seconds` without `--pid` is refused. clap's `requires` cannot say
/// it: `--pid` conflicts with CMD, and clap takes a required argument that
/// conflicts with one present as satisfied.
pub const SECONDS_WITHOUT_PID: &str =
    "--seconds applies only with --pid (a command runs until it exits)";

/// Runs `pagewise stat`; the exit status is the command's.
pub fn run(args: &StatArgs) -> anyhow::Result<ExitCode> {
    if args.pid.is_none() && args.seconds.is_some() {
        return Err(crate::format::usage(SECONDS_WITHOUT_PID));
    }
    let target = match args.pid {
        Some(pid) => Target::Pid {
            pid,
            duration: Duration::from_secs_f64(crate::args::window_seconds(args.seconds)),
        },
        None => Target::Command(args.command.clone()),
    };
    // The files are made before anything runs: a bad path is an error now,
    // not after the program ran (which would lose its status and the report).
    let to_stdout = args.output.as_deref() == Some(STDOUT.as_ref());
    let output = match &args.output {
        Some(path) if !to_stdout => Some(open_output(path)?),
        _ => None,
    };
    // Only a file this run made may be removed again: the path may name a
    // file the user keeps, or a device (`--flame /dev/full`).
    let (flame, flame_made) = match args.flame.as_deref() {
        Some(path) => {
            let (file, made) = create_output_noting_new(path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            (Some(file), made)
        }
        None => (None, None),
    };
    let unmake_flame = || {
        if let (Some(path), Some(made)) = (&args.flame, flame_made) {
            // Made before the run for nothing: no empty SVG is left behind.
            made.remove(path);
        }
    };
    let options = StatOptions {
        target,
        sites: args.sites || args.flame.is_some(),
        interval: Duration::from_millis(args.interval),
        site_limit: args.top as usize,
        stdout_to_stderr: to_stdout,
    };
    let progress = args.pid.map(|pid| {
        crate::progress::WindowProgress::new(format!(
            "observing process {pid} for {} s, then analysing",
            crate::args::window_seconds(args.seconds)
        ))
    });
    let report = observe::stat(&options);
    drop(progress);
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            unmake_flame();
            errln!("pagewise: stat: {e}");
            return Ok(ExitCode::from(e.exit_code().clamp(1, 255) as u8));
        }
    };
    let mut notes = vec![];
    if let (Some(path), Some(file)) = (&args.flame, &flame) {
        match write_flame(&report, file) {
            Ok(()) => notes.push(format!("flame graph of fault stacks: {}", path.display())),
            Err(e) => {
                unmake_flame();
                notes.push(format!("no flame graph: {e}"));
            }
        }
    }
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        human(&report, &notes)
    };
    match (output, &args.output) {
        (Some(mut file), Some(path)) => file
            .write_all(text.as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        _ if to_stdout => write_out(format_args!("{text}"))?,
        _ => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
    if args.json {
        // Notes that are not in the JSON still reach a human.
        for n in &notes {
            errln!("pagewise: {n}");
        }
    }
    let status = report.exit.as_ref().map_or(0, |e| e.status);
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}

fn write_flame(report: &StatReport, file: &std::fs::File) -> anyhow::Result<()> {
    if report.folded_fault_stacks.is_empty() {
        anyhow::bail!("no fault stacks were sampled (see 'not measured')");
    }
    let lines: Vec<String> = report
        .folded_fault_stacks
        .iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect();
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "pagewise stat: page-fault stacks".to_owned();
    opts.count_name = "faults".to_owned();
    let mut w = std::io::BufWriter::new(file);
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut w)
        .map_err(|e| anyhow::anyhow!("flame graph: {e}"))?;
    w.flush()?;
    Ok(())
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), count)
}

fn human(r: &StatReport, notes: &[String]) -> String {
    let mut out = String::new();
    write_heading(&mut out, r);
    write_counts(&mut out, &r.counts);
    if let Some(k) = &r.fault_kinds {
        write_fault_kinds(&mut out, k);
    }
    if let Some(s) = &r.syscalls {
        write_syscalls(&mut out, s);
    } else if let Some(m) = &r.mapping_records {
        write_mapping_records(&mut out, m);
    }
    if let Some(p) = &r.page_sizes {
        write_page_sizes(&mut out, p, r.counts.max_rss_bytes);
    }
    if let Some(x) = &r.text {
        write_hot_text(&mut out, x);
    }
    write_hardware(&mut out, &r.hardware);
    write_sources(&mut out, &r.costs, &r.tracepoints);
    write_findings(&mut out, &r.findings);
    if let Some(sites) = &r.sites {
        write_fault_sites(&mut out, sites);
    }
    if let Some(sites) = &r.mmap_sites {
        write_churn_sites(&mut out, sites);
    }
    if !r.skipped.is_empty() {
        write_skipped(&mut out, &r.skipped);
    }
    for n in notes {
        let _ = writeln!(out, "\n{n}");
    }
    out
}

/// The first line: who was observed and how it ended.
fn write_heading(out: &mut String, r: &StatReport) {
    let who = match &r.target.command {
        Some(cmd) => format!("{} (pid {})", cmd.join(" "), r.target.pid),
        None => format!("pid {}", r.target.pid),
    };
    let how = match (&r.exit, r.target.exited_early) {
        (Some(e), _) => match (&e.signal_name, e.code) {
            (Some(name), _) => format!("killed by {name} (status {})", e.status),
            (None, Some(code)) => format!("exited with status {code}"),
            _ => String::new(),
        },
        (None, Some(true)) => "exited before the window ended".to_owned(),
        (None, _) => format!(
            "observed for {:.1} s",
            r.target.window_s.unwrap_or(r.counts.wall_s)
        ),
    };
    let _ = writeln!(out, "\npagewise stat: {who} {how}\n");
}

/// The counts table: times, faults, context switches, peak RSS.
fn write_counts(out: &mut String, c: &Counts) {
    let mut t = table(&["counts", "value", "note"]);
    t.add_row(vec![
        "wall".into(),
        format!("{:.3} s", c.wall_s),
        String::new(),
    ]);
    t.add_row(vec![
        "user".into(),
        format!("{:.3} s", c.user_s),
        time_note(&c.time_source),
    ]);
    t.add_row(vec![
        "sys".into(),
        format!("{:.3} s", c.sys_s),
        String::new(),
    ]);
    t.add_row(vec![
        "minor faults".into(),
        count(c.minor_faults),
        format!("from {}", c.fault_source),
    ]);
    t.add_row(vec![
        "major faults".into(),
        count(c.major_faults),
        String::new(),
    ]);
    t.add_row(vec![
        "faults / s".into(),
        count(c.faults_per_s.round() as u64),
        String::new(),
    ]);
    t.add_row(vec![
        "user-mode faults".into(),
        opt(c.user_mode_faults),
        String::new(),
    ]);
    t.add_row(vec![
        "faults in system calls".into(),
        opt(c.syscall_faults),
        "page faults the kernel took on the program's behalf".into(),
    ]);
    t.add_row(vec![
        "context switches".into(),
        count(c.context_switches),
        String::new(),
    ]);
    if let Some(rss) = c.max_rss_bytes {
        t.add_row(vec![
            "peak RSS".into(),
            bytes(rss),
            "of the largest process (getrusage), not a sum".into(),
        ]);
    }
    if let (Some(processes), Some(programs)) = (c.processes, c.programs) {
        t.add_row(vec![
            "processes".into(),
            count(processes),
            if programs > processes {
                format!("running {} programs (exec)", count(programs))
            } else {
                String::new()
            },
        ]);
    }
    let _ = writeln!(out, "{t}");
}

/// Where user and sys time come from, for the counts table.
fn time_note(source: &str) -> String {
    match source {
        "cpu-clock" => "with the children it started (perf cpu-clock, split by samples)".into(),
        "/proc/PID/stat" => "the process alone, not its children (/proc/PID/stat)".into(),
        other => format!("from {other}"),
    }
}

/// User-mode faults by kind, with the range and the samples behind each.
fn write_fault_kinds(out: &mut String, k: &FaultKinds) {
    let total = k.total().max(1) as f64;
    let range_head = format!("range ({:.0}%)", k.confidence * 100.0);
    let mut t = table(&[
        "user-mode faults by kind",
        "faults",
        &range_head,
        "share",
        "counted",
    ]);
    for (i, (name, n)) in [
        ("write to absent page (first touch)", k.write_absent),
        ("read of absent page", k.read_absent),
        ("instruction fetch", k.fetch_absent),
        ("protection / copy-on-write", k.protection),
    ]
    .into_iter()
    .enumerate()
    {
        let (low, high) = (k.low_by_kind[i], k.high_by_kind[i]);
        t.add_row(vec![
            name.into(),
            if k.exact {
                count(n)
            } else {
                format!("~{}", count(n))
            },
            if low == high {
                "exact".to_owned()
            } else {
                format!("{}–{}", count(low), count(high))
            },
            format!("{:.1}%", n as f64 * 100.0 / total),
            count(k.samples_by_kind[i]),
        ]);
    }
    let how = if k.exact {
        "every fault was counted by kind".to_owned()
    } else {
        format!(
            "{} faults counted by kind in {} windows (the first 20 ms, then a short one at a \
             random place in every cycle), the other {} split as those windows were; each range holds the true \
             count with {:.0}% confidence",
            count(k.samples),
            count(k.windows),
            count(k.total().saturating_sub(k.samples)),
            k.confidence * 100.0
        )
    };
    let _ = writeln!(out, "\n{t}\ntotal exact; {how}");
}

/// mmap, munmap, brk and madvise calls with their lengths.
fn write_syscalls(out: &mut String, s: &Syscalls) {
    let mut t = table(&["call", "calls", "bytes", "lengths"]);
    let hist = |h: &[observe::Bucket]| {
        h.iter()
            .map(|b| format!("{}–{}: {}", bytes(b.from), bytes(b.to), count(b.count)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    t.add_row(vec![
        "mmap".into(),
        count(s.mmap.calls),
        bytes(s.mmap.bytes),
        hist(&s.mmap.histogram),
    ]);
    t.add_row(vec![
        "munmap".into(),
        count(s.munmap.calls),
        bytes(s.munmap.bytes),
        hist(&s.munmap.histogram),
    ]);
    t.add_row(vec![
        "brk".into(),
        count(s.brk.calls),
        "-".into(),
        String::new(),
    ]);
    t.add_row(vec![
        "madvise".into(),
        count(s.madvise.calls),
        bytes(s.madvise.bytes),
        format!("MADV_HUGEPAGE: {}", bytes(s.madv_hugepage_bytes)),
    ]);
    let _ = writeln!(out, "\n{t}");
    let _ = writeln!(
        out,
        "heap mappings unmapped again: {}; mapped beyond the live peak: {}",
        count(s.heap_cycles),
        bytes(s.heap_remapped_bytes)
    );
}

/// Heap-like mappings seen in perf mmap records (without the mmap tracepoints).
fn write_mapping_records(out: &mut String, m: &MappingRecords) {
    let sizes = format_byte_list(&m.sizes);
    let _ = writeln!(
        out,
        "\nanonymous mappings of 1 MiB or more (perf mmap records): {}; the same range mapped again: {}{}",
        count(m.heap_records),
        count(m.remapped),
        if m.remapped > 0 {
            format!(" ({} in ranges of {sizes})", bytes(m.remapped_bytes))
        } else {
            String::new()
        }
    );
}

/// How the fault cost and the tracepoints were obtained.
fn write_sources(out: &mut String, c: &Costs, t: &TracepointSource) {
    let kernel = match (c.kernel_samples, c.kernel_fault_samples) {
        (Some(total), Some(in_handler)) => format!(
            "; {} of {} kernel samples of the run were in the page-fault handler ({:.0}%)",
            count(in_handler),
            count(total),
            in_handler as f64 * 100.0 / total.max(1) as f64
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "\nfault cost ({}): {}{kernel}; the run's fault time comes from the {}",
        c.source,
        c.detail,
        if c.fault_time_from == "kernel-samples" {
            "kernel samples"
        } else {
            "calibrated cost"
        }
    );
    let _ = writeln!(out, "tracepoints ({}): {}", t.source, t.detail);
}

/// Peak resident bytes by page size; with a warning when the snapshots
/// plainly missed the run's peak (`max_rss`, exact, from `getrusage`: the
/// largest process's, which a snapshot that caught it holds at least).
fn write_page_sizes(out: &mut String, p: &PageSizes, max_rss: Option<u64>) {
    let mut t = table(&["page size (peak resident)", "bytes"]);
    t.add_row(vec!["4 KiB".into(), bytes(p.peak_4k_bytes)]);
    t.add_row(vec!["THP (2 MiB)".into(), bytes(p.peak_thp_bytes)]);
    t.add_row(vec!["hugetlb".into(), bytes(p.peak_hugetlb_bytes)]);
    t.add_row(vec!["all".into(), bytes(p.peak_total_bytes)]);
    if p.peak_asked_huge_bytes > 0 {
        t.add_row(vec![
            "in MADV_HUGEPAGE ranges / on huge pages".into(),
            format!(
                "{} / {}",
                bytes(p.peak_asked_huge_bytes),
                bytes(p.peak_asked_huge_granted_bytes)
            ),
        ]);
    }
    let _ = writeln!(
        out,
        "\n{t}\n{} of /proc/PID/smaps, every {} ms",
        snapshots(p.samples),
        p.interval_ms
    );
    if let Some(warning) = missed_peak(p, max_rss) {
        let _ = writeln!(out, "{warning}");
    }
}

/// A line saying that the page-size split is not the run's peak, when the
/// largest snapshot holds less than half of the largest process's exact
/// peak RSS (a run shorter than the interval, or one whose memory came and
/// went between snapshots). Pure.
fn missed_peak(p: &PageSizes, max_rss: Option<u64>) -> Option<String> {
    let rss = max_rss.filter(|&rss| rss > 0)?;
    (p.peak_total_bytes.saturating_mul(2) < rss).then(|| {
        format!(
            "warning: the largest of {} holds {} of the largest process's peak RSS of {} \
             (getrusage, exact): the split above missed the peak (snapshots are at least \
             100 times a read of smaps apart, so a short run gets one or two)",
            snapshots(p.samples),
            bytes(p.peak_total_bytes),
            bytes(rss)
        )
    })
}

/// "1 snapshot", "2 snapshots".
fn snapshots(n: u64) -> String {
    format!("{n} snapshot{}", if n == 1 { "" } else { "s" })
}

/// The hot-text footprint against the iTLB.
fn write_hot_text(out: &mut String, x: &TextFootprint) {
    let _ = writeln!(
        out,
        "\nhot text: {} user-mode samples at {} Hz; 4 KiB pages for 50/90/99% of samples: {}/{}/{}; \
         2 MiB pages: {}/{}/{}; iTLB reach {} ({} x 4 KiB, {})",
        count(x.samples),
        x.frequency_hz,
        x.pages_4k.p50,
        x.pages_4k.p90,
        x.pages_4k.p99,
        x.pages_2m.p50,
        x.pages_2m.p90,
        x.pages_2m.p99,
        bytes(x.itlb.reach_4k()),
        x.itlb.entries_4k,
        x.itlb.source
    );
}

/// The hardware counters, or why there are none.
fn write_hardware(out: &mut String, h: &Hardware) {
    if h.available {
        let _ = writeln!(
            out,
            "\nhardware: cycles {}, instructions {}, dTLB misses {}, iTLB misses {}",
            opt(h.cycles),
            opt(h.instructions),
            opt(h.dtlb_misses),
            opt(h.itlb_misses)
        );
    } else {
        let _ = writeln!(
            out,
            "\nhardware counters (cycles, instructions, dTLB/iTLB misses): unavailable: {}",
            h.reason.as_deref().unwrap_or("unknown")
        );
    }
}

/// The findings, most costly first.
fn write_findings(out: &mut String, findings: &[Finding]) {
    if findings.is_empty() {
        let _ = writeln!(
            out,
            "\nfindings: none above the thresholds (see docs/stat.md)"
        );
    } else {
        let _ = writeln!(out, "\nfindings (most costly first):");
        for (i, f) in findings.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}. {} [~{:.3} s]\n   evidence: {}\n   remedy: {}",
                i + 1,
                f.summary,
                f.cost_s,
                f.evidence,
                f.remedy
            );
            if let Some(from) = &f.inferred_from {
                let _ = writeln!(out, "   inferred from: {from}");
            }
        }
    }
}

/// Width of a site line: one line per site, whatever the names.
const SITE_LINE: usize = 120;

/// `function (file:line)` with the short name and the file's base name.
fn located(function: &str, file: &Option<String>, line: Option<u32>) -> String {
    let name = short_name(function);
    let base = |f: &String| f.rsplit('/').next().unwrap_or(f).to_owned();
    match (file, line) {
        (Some(f), Some(l)) => format!("{name} ({}:{l})", base(f)),
        (Some(f), None) => format!("{name} ({})", base(f)),
        _ => name,
    }
}

/// The rest of a site line after its counts: the site, its runtime and
/// script function, the library function it went through and its callers.
fn site_text(
    function: &str,
    file: &Option<String>,
    line: Option<u32>,
    interpreter: &Option<String>,
    script: &Option<Location>,
    via: &Option<String>,
    callers: &[Location],
) -> String {
    let mut text = located(function, file, line);
    if let Some(rt) = interpreter {
        // The runtime's name; the advice that follows goes under the table.
        let name = rt.split([';', '(']).next().unwrap_or(rt).trim();
        let _ = write!(text, " [{name}]");
    }
    if let Some(s) = script {
        let _ = write!(text, " script {}", located(&s.function, &s.file, s.line));
    }
    if let Some(v) = via {
        let _ = write!(text, " via {}", short_name(v));
    }
    for c in callers.iter().take(4) {
        let _ = write!(text, " < {}", short_name(&c.function));
    }
    text
}

/// One line per site: the counts right-aligned, then [`site_text`] cut to
/// fit, after [`LIBRARY_ONLY`] when the site is not the program's own code.
fn site_line(counts: &str, own_code: bool, text: &str) -> String {
    let room = SITE_LINE.saturating_sub(counts.chars().count());
    let text = if own_code {
        clip(text, room)
    } else {
        clip(&format!("{LIBRARY_ONLY} {text}"), room)
    };
    format!("{counts}{text}")
}

/// Marks a site whose stack has no frame in the program's own code.
const LIBRARY_ONLY: &str = "[library only]";

/// What [`LIBRARY_ONLY`] means, under a table that has such a row, in
/// lines no wider than the table's ([`SITE_LINE`]).
fn write_library_only_note(out: &mut String, any: bool) {
    if any {
        let _ = writeln!(
            out,
            "note: {LIBRARY_ONLY}: no frame of the stack is in the program's own code (a library's own thread, or a\n\
             library built without frame pointers, where the stack walk stopped): the row is its innermost frame, shown\n\
             as name+0xoffset where a library without a symbol table exports no function"
        );
    }
}

/// The runtimes' advice (how to see script functions), once each.
fn write_runtime_notes<'a>(out: &mut String, labels: impl Iterator<Item = &'a Option<String>>) {
    let mut seen: Vec<&str> = vec![];
    for label in labels.flatten() {
        if label.contains(';') && !seen.contains(&label.as_str()) {
            seen.push(label);
            let _ = writeln!(out, "note: {label}");
        }
    }
}

/// The fault sites (`--sites`), one line each.
fn write_fault_sites(out: &mut String, sites: &[Site]) {
    let _ = writeln!(
        out,
        "\nfault sites (first frame in the program's own code, else {LIBRARY_ONLY}; short names, \
         full names in --json):\n\
         {:>11} {:>6}  site (file:line) [runtime] script … via library function < callers",
        "faults", "share"
    );
    for s in sites {
        let counts = format!("{:>11} {:>5.1}%  ", count(s.faults), s.share * 100.0);
        let text = site_text(
            &s.function,
            &s.file,
            s.line,
            &s.interpreter,
            &s.script,
            &s.via,
            &s.callers,
        );
        let _ = writeln!(out, "{}", site_line(&counts, s.own_code, &text));
    }
    write_library_only_note(out, sites.iter().any(|s| !s.own_code));
    write_runtime_notes(out, sites.iter().map(|s| &s.interpreter));
}

/// Heap mappings unmapped again, by site (`--sites`), one line each.
fn write_churn_sites(out: &mut String, sites: &[ChurnSite]) {
    if sites.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nheap mappings unmapped again, by site (first frame in the program's own code, else \
         {LIBRARY_ONLY}):\n\
         {:>7} {:>10}  site (file:line) [runtime] … sizes: …",
        "cycles", "bytes"
    );
    for s in sites {
        let counts = format!("{:>7} {:>10}  ", count(s.cycles), bytes(s.bytes));
        let sizes = format_byte_list(&s.sizes);
        let text = format!(
            "{} sizes: {sizes}",
            site_text(
                &s.function,
                &s.file,
                s.line,
                &s.interpreter,
                &s.script,
                &s.via,
                &s.callers
            )
        );
        let _ = writeln!(out, "{}", site_line(&counts, s.own_code, &text));
    }
    write_library_only_note(out, sites.iter().any(|s| !s.own_code));
    write_runtime_notes(out, sites.iter().map(|s| &s.interpreter));
}

/// What could not be measured here, and why.
fn write_skipped(out: &mut String, skipped: &[Skipped]) {
    let _ = writeln!(out, "\nnot measured here:");
    for s in skipped {
        let _ = writeln!(out, "- {}: {}", s.what, s.why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_that_missed_the_peak_says_so_and_one_snapshot_is_singular() {
        let p = PageSizes {
            samples: 1,
            interval_ms: 100,
            peak_4k_bytes: 4 << 20,
            peak_total_bytes: 4 << 20,
            ..PageSizes::default()
        };
        let mut out = String::new();
        write_page_sizes(&mut out, &p, Some(100 << 20));
        assert!(out.contains("1 snapshot of /proc/PID/smaps"), "{out}");
        assert!(
            out.contains(
                "warning: the largest of 1 snapshot holds 4 MiB of the largest process's peak RSS of 100 MiB"
            ),
            "{out}"
        );
        // Half the peak or more, or no exact peak: no warning.
        assert_eq!(missed_peak(&p, Some(8 << 20)), None);
        assert_eq!(missed_peak(&p, None), None);
        assert!(missed_peak(&p, Some((8 << 20) + 1)).is_some());
    }

    /// xz's sites were all `libc.so.6+0x…` or `liblzma…+0x…` under a header
    /// that said "first frame in the program's own code": such rows are
    /// marked, and a note under the table says what they are.
    #[test]
    fn a_site_with_no_own_code_frame_is_marked_and_explained() {
        let site = |function: &str, own_code| Site {
            function: function.to_owned(),
            own_code,
            file: None,
            line: None,
            object: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            faults: 4037,
            share: 0.421,
            via: None,
            callers: vec![],
            interpreter: None,
            script: None,
        };
        let mut out = String::new();
        write_fault_sites(
            &mut out,
            &[site("libc.so.6+0x16db75", false), site("compress", true)],
        );
        let row = |name: &str| {
            out.lines()
                .find(|l| l.contains(name))
                .unwrap_or_else(|| panic!("no row for {name}: {out}"))
                .to_owned()
        };
        assert!(
            row("libc.so.6+0x16db75").ends_with("42.1%  [library only] libc.so.6+0x16db75"),
            "{out}"
        );
        assert!(row("compress").ends_with("42.1%  compress"), "{out}");
        assert!(out.contains("own code, else [library only];"), "{out}");
        assert!(
            out.contains(
                "note: [library only]: no frame of the stack is in the program's own code"
            ),
            "{out}"
        );
        for line in out.lines() {
            assert!(line.chars().count() <= SITE_LINE, "{line}");
        }
        // Only own-code rows: no note.
        let mut out = String::new();
        write_fault_sites(&mut out, &[site("compress", true)]);
        assert!(!out.contains("note: [library only]"), "{out}");
    }

    #[test]
    fn a_cpp_site_fits_one_line_with_its_short_name() {
        let long = "v8::internal::FactoryBase<v8::internal::Factory>::NewFixedArrayWithFiller(\
                    v8::internal::Handle<v8::internal::Map>, int, \
                    v8::internal::Handle<v8::internal::HeapObject>, v8::internal::AllocationType)";
        let caller = Location {
            function: long.to_owned(),
            file: None,
            line: None,
        };
        let site = Site {
            function: long.to_owned(),
            own_code: true,
            file: Some("/build/v8/src/heap/factory-base.cc".into()),
            line: Some(120),
            object: "/usr/bin/node".into(),
            faults: 196_607,
            share: 0.99,
            via: Some("__memset_avx2_unaligned_erms".into()),
            callers: vec![caller.clone(), caller.clone(), caller],
            interpreter: Some("node (V8); its script functions are hidden: run …".into()),
            script: None,
        };
        let mut out = String::new();
        write_fault_sites(&mut out, &[site]);
        let lines: Vec<&str> = out.lines().collect();
        let row = lines
            .iter()
            .find(|l| l.contains("196,607"))
            .expect("a row for the site");
        assert!(row.chars().count() <= SITE_LINE, "{row}");
        assert!(
            row.contains(
                "v8::internal::FactoryBase::NewFixedArrayWithFiller (factory-base.cc:120) [node"
            ),
            "{row}"
        );
        assert!(
            row.ends_with('…'),
            "the callers are cut, not wrapped: {row}"
        );
        assert!(
            out.contains("note: node (V8); its script functions are hidden"),
            "{out}"
        );
    }
}
