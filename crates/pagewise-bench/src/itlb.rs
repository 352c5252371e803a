//! The iTLB experiment: a generated C program with tens of MiB of text whose
//! hot functions are small, Zipf-distributed and spread over thousands of
//! 4 KiB pages, built as is and in a profile-guided order, each run with and
//! without huge text.
//!
//! The program: `functions` tiny leaf functions, each followed by `padding`
//! bytes of filler in its own section (so a linker order can pack the hot
//! functions together), and `drivers` functions that each make
//! `calls_per_driver` direct calls to leaves drawn from a Zipf distribution
//! over a shuffled list (the hot ones land anywhere in the text). `main` runs
//! every driver `rounds` times (its first argument) and reports the loop's own
//! time on stderr (`loop_ns N`) and a checksum on stdout, unless given a
//! second argument. Everything is derived from `seed`, so runs are reproducible.
//!
//! Steps: generate → build `baseline` (cc -O2 -fno-omit-frame-pointer
//! -ffunction-sections, gold,
//! 2 MiB segment alignment) → profile it → order with C3 → build `ordered`
//! (gold `--section-ordering-file`) → profile it → time `baseline`,
//! `huge-text`, `ordered`, `ordered+huge-text`, interleaved trial by trial.

use crate::{Machine, Progress, Summary};
use pagewise::text::function_table::FunctionTable;
use pagewise::text::order::{self, OrderOptions};
use pagewise::text::profile::Profile;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The JSON schema of a [`Report`].
pub const SCHEMA: &str = "pagewise.bench.itlb/1";

/// The generated program's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shape {
    /// Leaf functions.
    pub functions: usize,
    /// Filler bytes after each leaf (its own section).
    pub padding: usize,
    /// Zipf exponent of the leaves' call frequencies.
    pub zipf: f64,
    /// Driver functions.
    pub drivers: usize,
    /// Direct calls per driver.
    pub calls_per_driver: usize,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            functions: 4096,
            padding: 8192,
            zipf: 1.0,
            drivers: 64,
            calls_per_driver: 256,
            seed: 42,
        }
    }
}

impl Shape {
    /// The same shape with another seed.
    pub fn with_seed(self, seed: u64) -> Shape {
        Shape { seed, ..self }
    }
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Writes the C source of the program.
pub fn generate(shape: &Shape) -> String {
    let mut rng = Rng(shape.seed);
    let n = shape.functions.max(1);
    // Hotness rank -> function index: the hot ones are scattered over the text.
    let mut rank_to_fn: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i + 1);
        rank_to_fn.swap(i, j);
    }
    let weights: Vec<f64> = (0..n)
        .map(|k| 1.0 / ((k + 1) as f64).powf(shape.zipf))
        .collect();
    let mut cumulative = Vec::with_capacity(n);
    let mut sum = 0.0;
    for w in &weights {
        sum += w;
        cumulative.push(sum);
    }
    let mut src = String::from("#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n\n");
    for i in 0..n {
        let mul = (rng.next() as u32) | 1;
        let add = rng.next() as u32;
        let _ = writeln!(
            src,
            "__attribute__((noinline)) unsigned f{i}(unsigned x) {{ return x * {mul}u + {add}u; }}"
        );
        let _ = writeln!(
            src,
            "__asm__(\".pushsection .text.pad{i},\\\"ax\\\",@progbits\\n.skip {}, 0xcc\\n.popsection\\n\");",
            shape.padding
        );
    }
    for d in 0..shape.drivers {
        let _ = write!(
            src,
            "__attribute__((noinline)) unsigned d{d}(unsigned x) {{"
        );
        for _ in 0..shape.calls_per_driver {
            let target = rng.unit() * sum;
            let rank = cumulative.partition_point(|&c| c < target).min(n - 1);
            let _ = write!(src, " x = f{}(x);", rank_to_fn[rank]);
        }
        src.push_str(" return x; }\n");
    }
    src.push_str(
        "int main(int argc, char **argv) {\n  unsigned x = (unsigned)argc;\n  long rounds = argc > 1 ? atol(argv[1]) : 1000;\n  struct timespec a, b;\n  clock_gettime(CLOCK_MONOTONIC, &a);\n  for (long r = 0; r < rounds; r++) {",
    );
    for d in 0..shape.drivers {
        let _ = write!(src, " x = d{d}(x);");
    }
    src.push_str(
        " }\n  clock_gettime(CLOCK_MONOTONIC, &b);\n  if (argc > 2) return (int)(x & 0); /* quiet: profiling runs */\n  fprintf(stderr, \"loop_ns %ld\\n\", (long)((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec)));\n  printf(\"%u\\n\", x);\n  return 0;\n}\n",
    );
    src
}

/// Compiles `source` into `output` with cc -O2 -ffunction-sections, gold and
/// 2 MiB segment alignment (so the hot start of an ordered text is a whole
/// huge page); `order_file` adds gold's `--section-ordering-file`.
pub fn build(source: &Path, output: &Path, order_file: Option<&Path>) -> Result<(), String> {
    let mut cc = Command::new("cc");
    cc.args([
        "-O2",
        "-fno-omit-frame-pointer",
        "-ffunction-sections",
        "-fno-toplevel-reorder",
        "-fuse-ld=gold",
        "-Wl,-zmax-page-size=0x200000",
    ]);
    if let Some(order) = order_file {
        cc.arg(format!("-Wl,--section-ordering-file={}", order.display()));
    }
    cc.arg("-o").arg(output).arg(source);
    let out = cc.output().map_err(|e| format!("cannot run cc: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let hint = if stderr.contains("gold") {
            " (install binutils, which provides ld.gold)"
        } else {
            ""
        };
        return Err(format!(
            "cc failed{hint}: {}",
            stderr.lines().last().unwrap_or("").trim()
        ));
    }
    Ok(())
}

/// The section ordering file for gold: the C3 order as `.text.NAME`, then the
/// filler sections, so the hot functions start the text.
pub fn gold_order_file(order: &order::Order) -> String {
    let mut text = order::order_file(order, true);
    text.push_str(".text.pad*\n");
    text
}

/// Builds the command that runs `program` with `args` and its hot text moved
/// onto huge pages, writing the `pagewise.run/1` report of the move to the
/// given file, and writing no perf map file. The caller owns the command line:
/// the `pagewise` command passes itself with `run --huge-text`.
pub type HugeTextRunner<'a> = &'a dyn Fn(&Path, &[String], &Path) -> Command;

/// Runs a built program (through `huge_text` when given) and returns its
/// loop time in seconds. A huge-text run must really have moved text
/// (checked in its report), or it is an error, not a row.
fn time_once(
    huge_text: Option<HugeTextRunner<'_>>,
    program: &Path,
    rounds: u64,
    work_dir: &Path,
) -> Result<f64, String> {
    let report = work_dir.join("huge-text-report.json");
    let args = [rounds.to_string()];
    let mut cmd = match huge_text {
        Some(runner) => {
            let _ = std::fs::remove_file(&report);
            runner(program, &args, &report)
        }
        None => {
            let mut c = Command::new(program);
            c.args(&args);
            c
        }
    };
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if huge_text.is_some() {
        check_moved(&report)?;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ns: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("loop_ns ")?.trim().parse().ok())
        .ok_or_else(|| format!("{} printed no loop_ns: {stderr}", program.display()))?;
    Ok(ns / 1e9)
}

/// Reads a `pagewise.run/1` report and fails unless some text moved.
fn check_moved(report: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(report)
        .map_err(|e| format!("no huge-text report ({}): {e}", report.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("bad huge-text report: {e}"))?;
    let ranges = v["ranges"]
        .as_array()
        .ok_or("the huge-text report has no ranges")?;
    let moved = ranges
        .iter()
        .filter(|r| !r["page_kind"].is_null())
        .map(|r| {
            r["huge_bytes"]
                .as_u64()
                .ok_or_else(|| format!("a moved range without huge_bytes: {r}"))
        })
        .sum::<Result<u64, String>>()?;
    if moved == 0 {
        let reasons: Vec<&str> = ranges
            .iter()
            .filter_map(|r| r["skipped"].as_str())
            .collect();
        return Err(format!(
            "--huge-text moved nothing onto huge pages: {}",
            reasons.join("; ")
        ));
    }
    Ok(())
}

/// Samples one run of a program (with its arguments) and returns its profile.
pub type Profiler<'a> = &'a dyn Fn(&Path, &[String]) -> Result<Profile, String>;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The program's shape.
    pub shape: Shape,
    /// Rounds of all drivers per timed run.
    pub rounds: u64,
    /// Rounds while profiling.
    pub profile_rounds: u64,
    /// Timed trials per variant.
    pub trials: usize,
    /// Where sources, binaries and profiles go.
    pub work_dir: PathBuf,
}

/// One variant's result.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `baseline`, `huge-text`, `ordered`, `ordered+huge-text`.
    pub name: &'static str,
    /// Median loop time, seconds.
    pub median_s: f64,
    /// Min and max loop time.
    pub range_s: [f64; 2],
    /// Baseline median / this median.
    pub speedup: f64,
    /// Distinct 4 KiB pages holding 99% of the samples of this build.
    pub footprint_4k_p99: usize,
    /// Distinct 2 MiB pages holding 99% of the samples of this build.
    pub footprint_2m_p99: usize,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The program's shape.
    pub shape: Shape,
    /// Text bytes of the baseline build.
    pub text_bytes: u64,
    /// Rounds per timed run.
    pub rounds: u64,
    /// Trials per variant.
    pub trials: usize,
    /// Hot functions in the order.
    pub ordered_functions: usize,
    /// Footprint of the baseline profile after the order, predicted from symbol sizes.
    pub predicted_ordered_footprint_4k_p99: usize,
    /// The machine.
    pub machine: Machine,
    /// One row per variant.
    pub rows: Vec<Row>,
}

/// Bytes from the first function's start to the last one's end.
fn text_bytes(table: &FunctionTable) -> u64 {
    let f = table.functions();
    match (f.first(), f.last()) {
        (Some(a), Some(b)) => (b.vaddr + b.size).saturating_sub(a.vaddr),
        _ => 0,
    }
}

/// Runs the experiment. `profile` samples a run of a program (with its
/// arguments) and returns its profile; the CLI passes pagewise's profiler.
/// `huge_text` runs the `huge-text` rows.
pub fn run(
    config: &Config,
    profile: Profiler<'_>,
    huge_text: HugeTextRunner<'_>,
    progress: &dyn Progress,
) -> Result<Report, String> {
    let machine = Machine::describe();
    crate::work_folder(&config.work_dir)?;
    let steps = 5 + config.trials * 4;
    let source = config.work_dir.join("itlb.c");
    let baseline = config.work_dir.join("itlb-baseline");
    let ordered = config.work_dir.join("itlb-ordered");
    let order_path = config.work_dir.join("itlb.order");

    progress.update(0, steps, "generate and build baseline");
    std::fs::write(&source, generate(&config.shape)).map_err(|e| e.to_string())?;
    build(&source, &baseline, None)?;
    // A second argument keeps the program quiet while it is profiled.
    let args = vec![config.profile_rounds.to_string(), "quiet".to_owned()];

    progress.update(1, steps, "profile baseline");
    let base_profile = profile(&baseline, &args)?;
    std::fs::write(
        config.work_dir.join("baseline.profile"),
        base_profile.to_text(),
    )
    .map_err(|e| e.to_string())?;
    let base_table = FunctionTable::read(&baseline).map_err(|e| e.to_string())?;

    progress.update(2, steps, "order (C3) and build ordered");
    let computed = order::c3(
        &base_profile,
        &base_table,
        &baseline,
        &OrderOptions::default(),
    );
    if computed.call_graph_samples == 0 {
        return Err("the baseline profile has no sample in the program".into());
    }
    let predicted = order::footprint(
        &base_profile,
        &base_table,
        &baseline,
        Some(&computed.functions),
    );
    std::fs::write(&order_path, gold_order_file(&computed)).map_err(|e| e.to_string())?;
    build(&source, &ordered, Some(&order_path))?;

    progress.update(3, steps, "profile ordered");
    let ordered_profile = profile(&ordered, &args)?;
    std::fs::write(
        config.work_dir.join("ordered.profile"),
        ordered_profile.to_text(),
    )
    .map_err(|e| e.to_string())?;
    let ordered_table = FunctionTable::read(&ordered).map_err(|e| e.to_string())?;
    let base_fp = order::footprint(&base_profile, &base_table, &baseline, None);
    let ordered_fp = order::footprint(&ordered_profile, &ordered_table, &ordered, None);

    let variants: [(&'static str, &Path, bool); 4] = [
        ("baseline", &baseline, false),
        ("huge-text", &baseline, true),
        ("ordered", &ordered, false),
        ("ordered+huge-text", &ordered, true),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut done = 4;
    for trial in 0..config.trials {
        for (i, (name, program, huge)) in variants.iter().enumerate() {
            progress.update(
                done,
                steps,
                &format!("trial {}/{}: {name}", trial + 1, config.trials),
            );
            done += 1;
            times[i].push(time_once(
                huge.then_some(huge_text),
                program,
                config.rounds,
                &config.work_dir,
            )?);
        }
    }
    progress.update(steps, steps, "done");
    let summaries: Vec<Summary> = times
        .iter()
        .map(|t| Summary::of(t).ok_or("no trials"))
        .collect::<Result<_, _>>()?;
    let base_median = summaries[0].median;
    let rows = variants
        .iter()
        .zip(&summaries)
        .map(|((name, _, _), s)| {
            let fp = if name.starts_with("ordered") {
                &ordered_fp
            } else {
                &base_fp
            };
            Row {
                name,
                median_s: s.median,
                range_s: [s.min, s.max],
                speedup: base_median / s.median,
                footprint_4k_p99: fp.pages_4k.p99,
                footprint_2m_p99: fp.pages_2m.p99,
            }
        })
        .collect();
    Ok(Report {
        schema: SCHEMA,
        shape: config.shape,
        text_bytes: text_bytes(&base_table),
        rounds: config.rounds,
        trials: config.trials,
        ordered_functions: computed.functions.len(),
        predicted_ordered_footprint_4k_p99: predicted.pages_4k.p99,
        machine,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_reproducible_and_shaped() {
        let shape = Shape {
            functions: 50,
            padding: 64,
            drivers: 3,
            calls_per_driver: 10,
            ..Shape::default()
        };
        let a = generate(&shape);
        assert_eq!(a, generate(&shape));
        assert_eq!(
            a.matches("__attribute__((noinline)) unsigned f").count(),
            50
        );
        assert_eq!(a.matches(".text.pad").count(), 50);
        assert_eq!(a.matches("unsigned d").count(), 3);
        assert_ne!(a, generate(&Shape { seed: 7, ..shape }));
    }

    #[test]
    fn zipf_makes_low_ranks_hot() {
        let shape = Shape {
            functions: 1000,
            padding: 16,
            drivers: 10,
            calls_per_driver: 1000,
            ..Shape::default()
        };
        let src = generate(&shape);
        let mut counts = std::collections::HashMap::<&str, usize>::new();
        for call in src.split(" x = ").skip(1) {
            if let Some(name) = call.split('(').next().filter(|n| n.starts_with('f')) {
                *counts.entry(name).or_default() += 1;
            }
        }
        let mut sorted: Vec<usize> = counts.values().copied().collect();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        // With s = 1 over 1000 functions the hottest takes about 1/H(1000) = 13%.
        assert!(sorted[0] > 800 && sorted[0] < 2000, "{}", sorted[0]);
        assert!(sorted.len() > 300);
    }

    #[test]
    fn a_report_with_nothing_moved_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("r.json");
        std::fs::write(
            &report,
            r#"{"ranges": [{"page_kind": null, "huge_bytes": 0, "skipped": "THP is never"}]}"#,
        )
        .unwrap();
        assert!(check_moved(&report).unwrap_err().contains("THP is never"));
        std::fs::write(
            &report,
            r#"{"ranges": [{"page_kind": "thp", "huge_bytes": 2097152, "skipped": null}]}"#,
        )
        .unwrap();
        check_moved(&report).unwrap();
        assert!(check_moved(&dir.path().join("missing.json")).is_err());
    }

    #[test]
    fn a_small_program_builds_with_gold_and_runs() {
        let dir = tempfile::tempdir().unwrap();
        let shape = Shape {
            functions: 20,
            padding: 4096,
            drivers: 2,
            calls_per_driver: 20,
            ..Shape::default()
        };
        let src = dir.path().join("t.c");
        std::fs::write(&src, generate(&shape)).unwrap();
        let bin = dir.path().join("t");
        if let Err(e) = build(&src, &bin, None) {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Compiler,
                "cannot build with cc and gold here: {e}"
            );
        }
        let t = time_once(None, &bin, 10, dir.path()).unwrap();
        assert!(t > 0.0);
        let table = FunctionTable::read(&bin).unwrap();
        assert!(table.by_name("f19").is_some());
    }
}
