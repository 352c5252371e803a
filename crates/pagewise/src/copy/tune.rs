//! Measuring a plan on this machine: what `pagewise tune` runs.
//!
//! For every size class and [`Placement`] of copy and fill, [`tune`] times
//! each candidate [`Strategy`] (the vector loop of every instruction set the
//! CPU has, `rep movsb`/`rep stosb`, non-temporal stores with 1, 2, 4, … 32
//! streams, and glibc's `memcpy`/`memset`) through pagewise's own dispatch,
//! on hot buffers (where the class fits in the caches) and on cold ones.
//! glibc is also timed directly, as the yardstick: every time is turned into
//! a ratio to the direct glibc call of the same round, and a candidate's
//! score in a cell is the median of its ratios. Candidates are interleaved
//! round by round (the order rotating), so that a busy neighbour slows all
//! of them alike.
//!
//! **The defaults stay unless something is clearly better.** The incumbent
//! of every class and placement is what the defaults for this CPU
//! ([`super::default_tables`]) run there. A challenger replaces it only if
//! it dominates it: in some cell measured (hot or cold, at the class's
//! sizes) its speed over the incumbent's, round by round (they ran side by
//! side), has a median of at least `1 +` [`Options::margin`] and is above 1
//! in at least four rounds of five, and in no cell is that median below
//! `1 - margin / 2`; of several such challengers, the one with the best
//! worst score wins. The tuned tables are the default tables with only those
//! classes changed. Candidates within the noise of each other (on a shared
//! machine, ±10% and more from one round to the next) thus leave the
//! defaults in place, and a tuned plan is no slower than the defaults
//! wherever it differs from them, at the sizes measured. The smallest sizes
//! ([`Small`]) and the loop's block ([`LoopBlock`]), choices for the whole
//! machine, go by the best worst case instead (`best_worst`).
//!
//! The cost is dominated by the largest class (copies of [`Options::max_bytes`]
//! from memory): about a minute with the defaults, which is why a process
//! never tunes by itself (see `docs/copy.md`).

use super::cache::{MachineKey, Tuned, SCHEMA};
use super::plan::{default_tables, overlay_placement, strategy_at, Plan, Table};
use super::{Copier, Isa, LoopBlock, Placement, Small, Strategy};
use crate::sys::copy::{flush_from_caches, glibc_memcpy, glibc_memset, Class};
use crate::sys::mem::{Advice, AnonMapping, MapOptions};
use serde::Serialize;
use std::hint::black_box;
use std::time::Instant;

/// JSON schema of a `pagewise tune` report.
pub const TUNE_SCHEMA: &str = "pagewise.tune/1";

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rounds per class (each candidate once per round); at least 3.
    pub rounds: usize,
    /// The largest size measured (the last class's representative).
    pub max_bytes: usize,
    /// A challenger must beat the default strategy of a class by this
    /// fraction, in the median of every cell, to replace it.
    pub margin: f64,
    /// glibc's own non-temporal threshold, if known: the temporal tables do
    /// not call glibc at or above it (glibc would stream there).
    pub glibc_nontemporal: Option<usize>,
    /// Cache sizes: L2 and last level (rows are hot where they fit).
    pub l2_bytes: usize,
    /// Last-level cache.
    pub llc_bytes: usize,
}

impl Options {
    /// Defaults for this machine's caches.
    pub fn for_caches(l2_bytes: usize, llc_bytes: usize) -> Options {
        Options {
            rounds: 5,
            max_bytes: 512 << 20,
            margin: 0.05,
            glibc_nontemporal: None,
            l2_bytes,
            llc_bytes,
        }
    }
}

/// Progress of a long measurement: `done` of `total` steps, and what runs.
pub trait Progress {
    /// Called before each step.
    fn update(&self, done: usize, total: usize, what: &str);
}

/// Median, min and max of a candidate's ratios to glibc over the rounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ratio {
    /// Median over the rounds.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Ratio {
    fn of(values: &mut [f64]) -> Ratio {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        Ratio {
            median: if n == 0 {
                f64::NAN
            } else if n % 2 == 1 {
                values[n / 2]
            } else {
                (values[n / 2 - 1] + values[n / 2]) / 2.0
            },
            min: values.first().copied().unwrap_or(f64::NAN),
            max: values.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// One candidate in one cell (size, residency, placement).
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// The candidate (`loop avx512`, `rep`, `nt 1`, `glibc`).
    pub candidate: String,
    /// Its GB/s (10^9 B/s), median over the rounds.
    pub gbps: f64,
    /// Its speed over direct glibc's, per round.
    pub ratio: Ratio,
    /// Its GB/s in each round, in order (rounds pair candidates: they ran
    /// side by side).
    pub rounds: Vec<f64>,
}

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// `copy` or `fill`.
    pub op: &'static str,
    /// First size of the class.
    pub class_from: usize,
    /// The size measured.
    pub bytes: usize,
    /// `hot` or `cold`.
    pub residency: &'static str,
    /// The placement.
    pub placement: Placement,
    /// Direct glibc, GB/s (median).
    pub glibc_gbps: f64,
    /// Every candidate.
    pub timings: Vec<Timing>,
    /// Hot cells: whether the data stayed in the cache while they were
    /// timed (direct glibc at least [`HOT_OVER_COLD_MIN`] times its cold
    /// speed, after one retry); `None` for cold cells. On a shared machine a
    /// neighbour can evict the "hot" buffers, and a hot cell that measured
    /// memory once let non-temporal fills win at 8 MiB, where with the data
    /// in the cache they run at a third of glibc's speed.
    pub stayed_in_cache: Option<bool>,
}

/// The choice for one class and placement, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    /// Which table.
    pub table: Table,
    /// First size of the class.
    pub class_from: usize,
    /// The placement.
    pub placement: Placement,
    /// The strategy chosen.
    pub chosen: String,
    /// Its score: the median ratio to direct glibc at its worst residency.
    pub score: f64,
    /// What the defaults run here (the incumbent).
    pub default: String,
    /// The default's score.
    pub default_score: f64,
    /// The glibc candidate's score.
    pub glibc_score: f64,
    /// The class's hot data did not stay in the cache while it was timed
    /// (see [`Cell::stayed_in_cache`]): the default was kept unchallenged.
    pub hot_evicted: bool,
}

/// A `pagewise tune` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`TUNE_SCHEMA`].
    pub schema: &'static str,
    /// The plan measured, as cached.
    pub tuned: Tuned,
    /// Every cell's timings.
    pub cells: Vec<Cell>,
    /// Every choice.
    pub choices: Vec<Choice>,
    /// How the smallest sizes were decided (AVX-512 only): ratio to glibc of
    /// masked and plain moves, worst over the sizes tried.
    pub small: Vec<Timing>,
    /// How the copy loop's block was decided: each [`LoopBlock`]'s worst
    /// ratio to glibc over 1 KiB and 2 KiB hot copies at every placement.
    pub loop_block: Vec<Timing>,
    /// Seconds the measurement took.
    pub seconds: f64,
    /// Where the plan was written, if it was.
    pub cache_file: Option<String>,
    /// Anything worth knowing, one sentence each.
    pub notes: Vec<String>,
}

/// Why tuning failed.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Buffers could not be mapped.
    #[error("cannot map {bytes} bytes for measuring: {error} (lower --max-bytes or free memory)")]
    Map {
        /// How much.
        bytes: usize,
        /// The failed call (in the message, not as `source()`: said once).
        error: crate::sys::SysError,
    },
    /// A candidate produced wrong bytes (a bug: please report it).
    #[error("candidate {candidate} produced wrong bytes at {bytes} B")]
    WrongResult {
        /// The candidate.
        candidate: String,
        /// The size.
        bytes: usize,
    },
}

/// Copy class starts above the loop-free sizes, and the size measured for each.
fn grid(small_max: usize, max_bytes: usize) -> Vec<(usize, usize)> {
    let starts = [
        small_max + 1,
        2 << 10,
        8 << 10,
        32 << 10,
        128 << 10,
        512 << 10,
        2 << 20,
        8 << 20,
        32 << 20,
        128 << 20,
    ];
    let reps = [
        1 << 10,
        4 << 10,
        16 << 10,
        64 << 10,
        256 << 10,
        1 << 20,
        4 << 20,
        16 << 20,
        64 << 20,
        512 << 20,
    ];
    starts
        .into_iter()
        .zip(reps)
        .filter(|&(from, _)| from <= max_bytes)
        .map(|(from, rep)| (from, rep.min(max_bytes).max(from)))
        .collect()
}

/// Classes starting at or below this are also measured at their first size.
const EDGE_MAX: usize = 2 << 20;

/// The sizes a class `[from, …)` represented by `n` is measured at: `n`, and
/// `from` too up to [`EDGE_MAX`]. A class is one choice for a range of sizes
/// four times wide, and hot copies change character inside it (on a Zen 4
/// guest the SSE2 loop ran hot 16 KiB copies at 0.58 of glibc and 64 KiB ones
/// at 1.00), so a choice must hold at the range's low end as well. Above
/// 2 MiB copies run at memory speed and the two ends agree.
fn class_sizes(from: usize, n: usize) -> Vec<usize> {
    if from < n && from <= EDGE_MAX {
        vec![n, from]
    } else {
        vec![n]
    }
}

/// How far the destination buffer starts past the source buffer, modulo
/// [`DST_ALIAS_SPAN`].
///
/// With the two at the same offset modulo 2 MiB (which is what the kernel
/// gives two mappings whose lengths are multiples of 2 MiB: it aligns them
/// for transparent huge pages), each call's loads wait for the previous
/// call's stores to the same hot buffers: 100-byte copies took 7 ns per call
/// on both sides, whatever the size, instead of 1.4–2.8 ns with the
/// destination a few pages further on (measured with a throw-away harness,
/// both routines); and `rep movsb` falls into its slow mode on rows whose
/// destination is a few bytes ahead. A whole number of pages keeps every
/// row's alignment and its source-to-destination distance modulo 4 KiB.
pub const DST_SHIFT: usize = 12 << 10;

/// The span over which the two buffers' placement is fixed (see
/// [`DST_SHIFT`]): the huge-page size, a multiple of the 1 MiB over which
/// `rep movsb` compares addresses.
pub const DST_ALIAS_SPAN: usize = 2 << 20;

/// The source and destination buffers that `tune` and `bench memcpy`/`memset`
/// time copies and fills in: page-aligned, faulted in before any timing, on
/// THP where asked and the kernel gives it, the destination [`DST_SHIFT`]
/// past the source modulo [`DST_ALIAS_SPAN`] wherever the kernel placed the
/// two mappings. Costs two mappings (`len` and `len` + 2 MiB) and writing
/// both once.
pub struct TimingBuffers {
    src: AnonMapping,
    /// Holds the destination buffer at `dst_start`.
    dst: AnonMapping,
    dst_start: usize,
    len: usize,
    /// Cold walks that touch fewer bytes than this start from flushed lines
    /// ([`TimingBuffers::start_cold_walk`]); 0 until told the LLC.
    flush_walks_below: usize,
}

impl TimingBuffers {
    /// Maps, advises and faults in the buffers: the destination zeroed, the
    /// source (with `with_source`; else a one-page stand-in, for fills)
    /// holding a pattern of period 251 in which misplaced bytes show. A
    /// failed mapping is returned with its size.
    pub fn new(
        len: usize,
        with_source: bool,
        huge_pages: bool,
    ) -> Result<TimingBuffers, (usize, crate::sys::SysError)> {
        let map = |len: usize| {
            let m = AnonMapping::map(len, MapOptions::default()).map_err(|e| (len, e))?;
            if huge_pages {
                // Best effort: without THP both sides simply run on 4 KiB pages.
                let _ = m.advise(0, len, Advice::HugePage);
            }
            Ok(m)
        };
        let mut dst = map(len + DST_ALIAS_SPAN)?;
        dst.as_mut_slice().fill(0);
        let mut src = map(if with_source { len } else { 4096 })?;
        if with_source {
            let template: Vec<u8> = (0..251u8).collect();
            for chunk in src.as_mut_slice().chunks_mut(template.len()) {
                chunk.copy_from_slice(&template[..chunk.len()]);
            }
        }
        let wanted = (src.as_slice().as_ptr() as usize + DST_SHIFT) % DST_ALIAS_SPAN;
        let base = dst.as_mut_slice().as_ptr() as usize;
        let dst_start = (wanted + DST_ALIAS_SPAN - base % DST_ALIAS_SPAN) % DST_ALIAS_SPAN;
        Ok(TimingBuffers {
            src,
            dst,
            dst_start,
            len,
            flush_walks_below: 0,
        })
    }

    /// Tells the buffers the last-level cache's size: from then on
    /// [`TimingBuffers::start_cold_walk`] flushes a walk that touches less
    /// than twice it. Builder-style; costs nothing.
    pub fn with_llc(mut self, llc_bytes: usize) -> TimingBuffers {
        self.flush_walks_below = llc_bytes.saturating_mul(2);
        self
    }

    /// Call before a cold walk of `n`-byte calls at `starts` (source and
    /// destination offsets, as in [`TimingBuffers::slices`]; the source
    /// only `with_source`): when the walk touches fewer bytes than twice the
    /// LLC ([`TimingBuffers::with_llc`]), flushes its lines from every cache
    /// level, since a large LLC keeps a walk of small calls (a few MiB) from
    /// the walk before, and "cold" would time LLC hits. Returns whether it
    /// flushed. Costs a memory write per dirty line and a few ns per clean
    /// one (tens of ms for the largest walk it flushes).
    pub fn start_cold_walk(
        &mut self,
        starts: impl Iterator<Item = (usize, usize)> + Clone,
        n: usize,
        with_source: bool,
    ) -> bool {
        let sides = if with_source { 2 } else { 1 };
        let touched = starts
            .clone()
            .count()
            .saturating_mul(n)
            .saturating_mul(sides);
        if touched >= self.flush_walks_below {
            return false;
        }
        let (dst, src) = self.slices();
        for (s, d) in starts {
            flush_from_caches(&dst[d..d + n]);
            if with_source {
                flush_from_caches(&src[s..s + n]);
            }
        }
        true
    }

    /// The destination (`len` bytes) and the source buffer.
    pub fn slices(&mut self) -> (&mut [u8], &[u8]) {
        (
            &mut self.dst.as_mut_slice()[self.dst_start..][..self.len],
            self.src.as_slice(),
        )
    }
}

/// [`TimingBuffers::new`] for `tune`: on THP, a failure as [`TuneError::Map`].
fn buffers(len: usize, with_source: bool, llc_bytes: usize) -> Result<TimingBuffers, TuneError> {
    TimingBuffers::new(len, with_source, true)
        .map(|b| b.with_llc(llc_bytes))
        .map_err(|(bytes, error)| TuneError::Map { bytes, error })
}

/// A candidate as something to time.
#[derive(Clone, Copy)]
enum Runner<'a> {
    Pagewise(&'a Copier),
    Glibc,
}

/// `(src, dst)` offsets from 4 KiB boundaries of a placement's representative.
fn offsets(op: Op, p: Placement) -> (usize, usize) {
    match (op, p) {
        (_, Placement::Aligned) => (0, 0),
        (Op::Copy, Placement::Near) => (1, 7),
        (Op::Copy, Placement::Other) => (7, 1),
        (Op::Fill, _) => (0, 1),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Copy,
    Fill,
}

/// Bytes a hot measurement moves, and a cold one at most.
const HOT_BYTES: usize = 8 << 20;
const COLD_BYTES: usize = 64 << 20;
/// Distance between cold calls, at least: past what prefetchers follow
/// (plus a page, see [`cold_block_starts`]).
const COLD_STRIDE: usize = 64 << 10;

/// Where the calls of a cold walk of `n`-byte calls start in a pool of
/// `pool` bytes (add the placement's offsets, under a page): at most
/// `max_calls` blocks, each with a page of room for offsets, at least 68 KiB
/// apart: past what the prefetchers follow, and a page off a multiple of
/// 64 KiB, so that successive blocks fall into different L2 sets. At a bare
/// 64 KiB stride every block fell into the same one or two sets, and a cold
/// 8-byte fill took 38-40 ns instead of 17 on an Emerald Rapids guest, its
/// time set by those conflicts rather than by memory. Used by `tune` and by
/// `bench memcpy`/`memset`. Costs one allocation.
pub fn cold_block_starts(n: usize, pool: usize, max_calls: usize) -> Vec<usize> {
    let stride = (n + 4096).next_multiple_of(4096).max(COLD_STRIDE + 4096);
    let fit = (pool.saturating_sub(4096) / stride).max(1);
    (0..fit.min(max_calls.max(1))).map(|k| k * stride).collect()
}

/// Times `runner` on `n` bytes: GB/s. Hot: the same buffers `reps` times
/// (best of two runs); cold: one call per block, blocks spread over the pool.
fn time_one(
    op: Op,
    runner: Runner<'_>,
    bufs: &mut TimingBuffers,
    n: usize,
    hot: bool,
    at: (usize, usize),
) -> f64 {
    let call = |d: &mut [u8], s: &[u8]| match (op, runner) {
        (Op::Copy, Runner::Pagewise(c)) => {
            let _ = c.copy(d, s);
        }
        (Op::Copy, Runner::Glibc) => glibc_memcpy(d, s),
        (Op::Fill, Runner::Pagewise(c)) => c.fill(d, black_box(0x5a)),
        (Op::Fill, Runner::Glibc) => glibc_memset(d, black_box(0x5a)),
    };
    let src_for = |_: &[u8], s: usize| -> usize {
        if op == Op::Copy {
            s
        } else {
            0
        }
    };
    if hot {
        let (dst, src) = black_box(bufs.slices());
        let (s, d) = at;
        let reps = (HOT_BYTES / n).clamp(4, 1 << 16);
        let s0 = src_for(src, s);
        let slen = if op == Op::Copy { n } else { 0 };
        let mut best = 0.0f64;
        for _ in 0..2 {
            for _ in 0..reps.min(8) {
                call(&mut dst[d..d + n], &src[s0..s0 + slen]);
            }
            let t = Instant::now();
            for _ in 0..reps {
                call(&mut dst[d..d + n], &src[s0..s0 + slen]);
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
            }
            best = best.max((reps * n) as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9);
        }
        best
    } else {
        let pool = bufs.slices().0.len();
        let blocks = cold_block_starts(n, pool, (COLD_BYTES / n).clamp(1, 4096));
        // The best of two passes up to a few MiB (a pass the scheduler
        // interrupted does not count); larger ones take long enough.
        let passes = if n <= 4 << 20 { 2 } else { 1 };
        let mut best = 0.0f64;
        let starts = blocks.iter().map(|&b| (b + at.0, b + at.1));
        for _ in 0..passes {
            bufs.start_cold_walk(starts.clone(), n, op == Op::Copy);
            let (dst, src) = black_box(bufs.slices());
            let t = Instant::now();
            for (s, d) in starts.clone() {
                let s0 = src_for(src, s);
                let slen = if op == Op::Copy { n } else { 0 };
                call(&mut dst[d..d + n], &src[s0..s0 + slen]);
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
            }
            let bytes = blocks.len() * n;
            best = best.max(bytes as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9);
        }
        best
    }
}

/// Checks one call of `copier` for right bytes.
fn verify(op: Op, copier: &Copier, bufs: &mut TimingBuffers, n: usize, at: (usize, usize)) -> bool {
    let (dst, src) = bufs.slices();
    let d = &mut dst[at.1..at.1 + n];
    match op {
        Op::Copy => {
            let s = &src[at.0..at.0 + n];
            d.fill(0xee);
            let _ = copier.copy(d, s);
            d == s
        }
        Op::Fill => {
            d.fill(0);
            copier.fill(d, 0x5a);
            d.iter().all(|&b| b == 0x5a)
        }
    }
}

/// How much faster than cold a hot cell's direct glibc must run for its
/// data to count as having stayed in the cache. Measured on the Zen 5 guest
/// (`bench memcpy|memset`, 1-10 MB): hot/cold 3x for copies, 4x for fills,
/// more for smaller sizes.
pub const HOT_OVER_COLD_MIN: f64 = 1.25;

/// Whether a hot measurement at `hot_gbps` (direct glibc) saw the cache,
/// against the same size cold at `cold_gbps` (a speed that is not a number
/// counts as not: the default is then kept).
fn stayed_in_cache(hot_gbps: f64, cold_gbps: f64) -> bool {
    hot_gbps >= HOT_OVER_COLD_MIN * cold_gbps
}

/// The candidates of one cell and their copiers.
fn candidates(base: &Plan, n: usize, erms: bool) -> Vec<(Strategy, Copier)> {
    let mut out = Vec::new();
    let mut add = |s: Strategy| {
        if let Ok(c) = Copier::new(&base.with_only(base.isa, s)) {
            out.push((s, c));
        }
    };
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        add(Strategy::Loop { isa });
    }
    if erms {
        add(Strategy::Rep);
    }
    if n >= 256 << 10 {
        for streams in [1u8, 2, 4, 8, 16, 32] {
            add(Strategy::NonTemporal { streams });
        }
    }
    add(Strategy::Glibc);
    out
}

/// Measures one cell: every candidate and direct glibc, `rounds` times,
/// interleaved. Returns the timings (candidates in order) and direct glibc.
#[allow(clippy::too_many_arguments)]
fn measure_cell(
    op: Op,
    cands: &[(Strategy, Copier)],
    bufs: &mut TimingBuffers,
    n: usize,
    hot: bool,
    p: Placement,
    rounds: usize,
) -> Result<(Vec<Timing>, f64), TuneError> {
    let at = offsets(op, p);
    for (s, c) in cands {
        if !verify(op, c, bufs, n, at) {
            return Err(TuneError::WrongResult {
                candidate: s.label(),
                bytes: n,
            });
        }
    }
    let k = cands.len() + 1;
    let mut speeds = vec![Vec::with_capacity(rounds); k];
    for r in 0..rounds {
        for j in 0..k {
            // Rotate the order every round; the last slot is direct glibc.
            let i = (j + r) % k;
            let runner = cands
                .get(i)
                .map_or(Runner::Glibc, |(_, c)| Runner::Pagewise(c));
            speeds[i].push(time_one(op, runner, bufs, n, hot, at));
        }
    }
    let glibc = speeds[k - 1].clone();
    let mut glibc_sorted = glibc.clone();
    let glibc_gbps = Ratio::of(&mut glibc_sorted).median;
    let timings = cands
        .iter()
        .enumerate()
        .map(|(i, (s, _))| {
            let mut ratios: Vec<f64> = speeds[i].iter().zip(&glibc).map(|(a, b)| a / b).collect();
            let mut gb = speeds[i].clone();
            Timing {
                candidate: s.label(),
                gbps: Ratio::of(&mut gb).median,
                ratio: Ratio::of(&mut ratios),
                rounds: speeds[i].clone(),
            }
        })
        .collect();
    Ok((timings, glibc_gbps))
}

/// A candidate's timing in each of `cells`; `None` unless it was measured
/// in all of them.
fn timings<'c>(cells: &[&'c Cell], s: Strategy) -> Option<Vec<&'c Timing>> {
    let label = s.label();
    let v: Vec<&Timing> = cells
        .iter()
        .filter_map(|c| c.timings.iter().find(|t| t.candidate == label))
        .collect();
    (!v.is_empty() && v.len() == cells.len()).then_some(v)
}

/// The worst (smallest) of a candidate's median ratios to glibc.
fn worst_score(t: &[&Timing]) -> f64 {
    t.iter()
        .map(|t| t.ratio.median)
        .fold(f64::INFINITY, f64::min)
}

/// The noise of a cell: half the spread of the glibc candidate's ratios to
/// direct glibc over the rounds (the same routine timed twice per round),
/// or 0 when glibc was not a candidate there.
fn noise(cell: &Cell) -> f64 {
    cell.timings
        .iter()
        .find(|t| t.candidate == Strategy::Glibc.label())
        .map_or(0.0, |t| (t.ratio.max - t.ratio.min) / 2.0)
}

/// Whether a challenger beats an incumbent beyond the noise, cell by cell
/// (the same cells, in order, with each cell's required `margins`): in
/// every cell its speed over the incumbent's, round by round (they ran side
/// by side), has a median of at least `1 + margin` and is above 1 in at
/// least four rounds of five.
fn clearly_better(challenger: &[&Timing], incumbent: &[&Timing], margins: &[f64]) -> bool {
    challenger.len() == incumbent.len()
        && challenger.len() == margins.len()
        && !challenger.is_empty()
        && challenger
            .iter()
            .zip(incumbent)
            .zip(margins)
            .all(|((c, i), margin)| {
                let mut q = speed_over(c, i);
                let wins = q.iter().filter(|&&q| q > 1.0).count();
                !q.is_empty() && Ratio::of(&mut q).median >= 1.0 + margin && wins * 5 >= q.len() * 4
            })
}

/// A challenger's speed over an incumbent's, round by round (they ran side
/// by side in each round).
fn speed_over(challenger: &Timing, incumbent: &Timing) -> Vec<f64> {
    challenger
        .rounds
        .iter()
        .zip(&incumbent.rounds)
        .map(|(c, i)| c / i)
        .collect()
}

/// Whether a challenger is worth taking over an incumbent, cell by cell (the
/// same cells, in order, with each cell's `margins`): [`clearly_better`] in
/// at least one cell and, in every cell, not behind by more than `tolerance`
/// (the median, over the rounds, of its speed over the incumbent's is at
/// least `1 - tolerance`; a fixed tolerance, not one that grows with a
/// cell's noise: in doubt the incumbent stays). Asking for a clear win in
/// every cell kept the default where a challenger was as fast hot and 7-20%
/// faster cold (on a Zen 4 guest: `rep` at 16 KiB, the SSE2 loop at 64 KiB,
/// both aligned).
fn dominates(
    challenger: &[&Timing],
    incumbent: &[&Timing],
    margins: &[f64],
    tolerance: f64,
) -> bool {
    let cells = || challenger.iter().zip(incumbent).zip(margins);
    challenger.len() == incumbent.len()
        && challenger.len() == margins.len()
        && cells().any(|((c, i), m)| clearly_better(&[c], &[i], &[*m]))
        && cells().all(|((c, i), _)| {
            let mut q = speed_over(c, i);
            !q.is_empty() && Ratio::of(&mut q).median >= 1.0 - tolerance
        })
}

/// What one class and placement gets: `(chosen, its worst score, the
/// incumbent's worst score, the glibc candidate's worst score)`, scores
/// being median ratios to direct glibc. The incumbent is `default` (or
/// glibc, when the default is not `allowed` or was not measured); of the
/// allowed challengers that [`dominates`] it, the one with the best worst
/// score replaces it. The margin a cell asks for is `margin` or its
/// [`noise`], whichever is larger.
fn choose(
    cells: &[&Cell],
    strategies: &[Strategy],
    default: Strategy,
    allowed: impl Fn(Strategy) -> bool,
    margin: f64,
) -> (Strategy, f64, f64, f64) {
    let glibc = timings(cells, Strategy::Glibc).map_or(f64::NAN, |t| worst_score(&t));
    let margins: Vec<f64> = cells.iter().map(|c| noise(c).max(margin)).collect();
    let incumbent = [default, Strategy::Glibc]
        .into_iter()
        .filter(|s| allowed(*s))
        .find_map(|s| timings(cells, s).map(|t| (s, t)));
    let Some((incumbent, inc)) = incumbent else {
        // Nothing to defend: the best allowed candidate.
        let best = strategies
            .iter()
            .copied()
            .filter(|s| allowed(*s))
            .filter_map(|s| timings(cells, s).map(|t| (s, worst_score(&t))))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        return match best {
            Some((s, v)) => (s, v, f64::NAN, glibc),
            None => (default, f64::NAN, f64::NAN, glibc),
        };
    };
    let best = strategies
        .iter()
        .copied()
        .filter(|s| *s != incumbent && allowed(*s))
        .filter_map(|s| timings(cells, s).map(|t| (s, t)))
        .filter(|(_, t)| dominates(t, &inc, &margins, margin / 2.0))
        .max_by(|a, b| worst_score(&a.1).total_cmp(&worst_score(&b.1)));
    match best {
        Some((s, t)) => (s, worst_score(&t), worst_score(&inc), glibc),
        None => (incumbent, worst_score(&inc), worst_score(&inc), glibc),
    }
}

/// Measures the AVX-512 copy of the smallest sizes with every [`Small`]
/// choice, against glibc, over fixed sizes hot (at a distance between the
/// pointers where Intel's 4K aliasing would strike and at one where it would
/// not) and from memory, and over a mix of sizes; chooses by
/// [`best_worst`]. Returns the choice and each choice's worst ratio to glibc.
fn tune_small(
    base: &Plan,
    default: Small,
    rounds: usize,
    margin: f64,
    llc_bytes: usize,
) -> Result<(Small, Vec<Timing>), TuneError> {
    let mut bufs = buffers(64 << 20, true, llc_bytes)?;
    let Some(copiers) = copiers_of(base, &Small::ALL, |plan, small| plan.tables.small = small)
    else {
        return Ok((default, Vec::new()));
    };
    // A fixed mix of sizes 1-128 (calls of varying sizes mispredict branches).
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mix: Vec<usize> = (0..4096)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            1 + (seed % 128) as usize
        })
        .collect();
    const ALIASED: (usize, usize) = (64, 64 + 4096 * 3);
    const APART: (usize, usize) = (64, 64 + 4096 * 3 + 1000);
    let mut cases: Vec<Case> = Vec::new();
    for n in [8usize, 13, 32, 48, 100] {
        cases.push(Case::One(n, true, ALIASED));
        cases.push(Case::One(n, true, APART));
    }
    cases.push(Case::One(8, false, (7, 1)));
    cases.push(Case::One(32, false, (7, 1)));
    cases.push(Case::Mix(mix));
    Ok(pick_variant(
        &copiers,
        &cases,
        &mut bufs,
        default,
        rounds,
        margin,
        Small::name,
    ))
}

/// Measures the copy loop with four and with eight vectors per iteration
/// ([`LoopBlock`]) against glibc, hot, at 1 KiB and 2 KiB (where the
/// iteration count is small enough for the shape to show) and every
/// placement; chooses by [`best_worst`]. Returns the choice and each
/// choice's worst ratio to glibc.
fn tune_loop_block(
    base: &Plan,
    default: LoopBlock,
    rounds: usize,
    margin: f64,
    llc_bytes: usize,
) -> Result<(LoopBlock, Vec<Timing>), TuneError> {
    let mut bufs = buffers(64 << 20, true, llc_bytes)?;
    let Some(copiers) = copiers_of(base, &LoopBlock::ALL, |plan, block| {
        plan.tables.loop_block = block;
    }) else {
        return Ok((default, Vec::new()));
    };
    let cases: Vec<Case> = [1024usize, 2048]
        .into_iter()
        .flat_map(|n| {
            Placement::ALL
                .into_iter()
                .map(move |p| Case::One(n, true, offsets(Op::Copy, p)))
        })
        .collect();
    Ok(pick_variant(
        &copiers,
        &cases,
        &mut bufs,
        default,
        rounds,
        margin,
        LoopBlock::name,
    ))
}

/// A copier of `base` with each of `variants` set into it by `set`; `None`
/// when one cannot be built (then nothing is measured).
fn copiers_of<V: Copy>(
    base: &Plan,
    variants: &[V],
    set: impl Fn(&mut Plan, V),
) -> Option<Vec<(V, Copier)>> {
    variants
        .iter()
        .map(|&v| {
            let mut plan = base.clone();
            set(&mut plan, v);
            Copier::new(&plan).ok().map(|c| (v, c))
        })
        .collect()
}

/// One measurement of [`pick_variant`]: `n` bytes hot or cold at offsets
/// `(src, dst)`, or a mix of sizes.
enum Case {
    One(usize, bool, (usize, usize)),
    Mix(Vec<usize>),
}

/// Times every copier of `variants` and glibc on each of `cases`, `rounds`
/// times interleaved, and chooses by [`best_worst`]. Returns the choice and
/// each variant's worst ratio to glibc.
fn pick_variant<V: Copy + PartialEq>(
    variants: &[(V, Copier)],
    cases: &[Case],
    bufs: &mut TimingBuffers,
    default: V,
    rounds: usize,
    margin: f64,
    name: fn(V) -> &'static str,
) -> (V, Vec<Timing>) {
    let time = |runner: Runner<'_>, case: &Case, bufs: &mut TimingBuffers| match case {
        Case::One(n, hot, at) => time_one(Op::Copy, runner, bufs, *n, *hot, *at),
        Case::Mix(mix) => time_mix(Op::Copy, runner, bufs, mix),
    };
    // Per variant, its worst median ratio to glibc over the cases so far.
    let mut worst_ratio = vec![f64::INFINITY; variants.len()];
    for case in cases {
        let mut speeds = vec![Vec::new(); variants.len()];
        let mut glibc = Vec::new();
        for _ in 0..rounds {
            glibc.push(time(Runner::Glibc, case, bufs));
            for (slot, (_, c)) in variants.iter().enumerate() {
                speeds[slot].push(time(Runner::Pagewise(c), case, bufs));
            }
        }
        for (worst, speeds) in worst_ratio.iter_mut().zip(&speeds) {
            let mut ratios: Vec<f64> = speeds.iter().zip(&glibc).map(|(a, b)| a / b).collect();
            *worst = worst.min(Ratio::of(&mut ratios).median);
        }
    }
    let worst: Vec<(V, f64)> = variants
        .iter()
        .zip(worst_ratio)
        .map(|((v, _), w)| (*v, w))
        .collect();
    let chosen = best_worst(default, &worst, margin);
    let timings = worst
        .iter()
        .map(|&(v, w)| Timing {
            candidate: name(v).to_owned(),
            gbps: f64::NAN,
            ratio: Ratio {
                median: w,
                min: w,
                max: w,
            },
            rounds: Vec::new(),
        })
        .collect();
    (chosen, timings)
}

/// The variant whose worst ratio to glibc over every case is the best, if
/// that beats `default`'s worst by at least `margin` (relative); else
/// `default`. A variant is a whole-machine choice that shows in some cases
/// and not in others (the small-copy shapes differ below 128 bytes and not at
/// 100-byte copies through the leaf, say), so asking it to win every case
/// would keep a default that is far behind glibc somewhere: on the Zen 4
/// guest `masked` had a worst ratio of 0.99 and the default 0.71, and the
/// default stayed.
fn best_worst<V: Copy + PartialEq>(default: V, worst: &[(V, f64)], margin: f64) -> V {
    let Some(&(_, default_worst)) = worst.iter().find(|(v, _)| *v == default) else {
        return default;
    };
    worst
        .iter()
        .filter(|(v, w)| *v != default && *w >= default_worst * (1.0 + margin))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(default, |&(v, _)| v)
}

/// Times a mix of small calls (sizes from `mix`, placed apart in L1): bytes/ns.
fn time_mix(op: Op, runner: Runner<'_>, bufs: &mut TimingBuffers, mix: &[usize]) -> f64 {
    let (dst, src) = bufs.slices();
    let (dst, src) = black_box((dst, src));
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let mut bytes = 0;
        for (i, &n) in mix.iter().enumerate() {
            let at = (i % 64) * 64 + (i % 7);
            let d = &mut dst[8192 + at..8192 + at + n];
            match (op, runner) {
                (Op::Copy, Runner::Pagewise(c)) => {
                    let _ = c.copy(d, &src[at + 3..at + 3 + n]);
                }
                (Op::Copy, Runner::Glibc) => glibc_memcpy(d, &src[at + 3..at + 3 + n]),
                (Op::Fill, Runner::Pagewise(c)) => c.fill(d, 7),
                (Op::Fill, Runner::Glibc) => glibc_memset(d, 7),
            }
            bytes += n;
        }
        best = best.max(bytes as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9);
    }
    best
}

/// Measures every class and placement and returns the report (not yet
/// saved: see [`super::cache::save`]).
pub fn tune(options: &Options, progress: &dyn Progress) -> Result<Report, TuneError> {
    let started = Instant::now();
    let mut base = Plan::detect();
    let isa = base.isa;
    // The incumbents: what this CPU runs without a measured plan (never a
    // cached plan: tuning again starts from the defaults).
    let defaults = default_tables(base.cpu_kind, isa, base.erms, base.llc_bytes);
    base.tables = defaults.clone();
    let mut notes = Vec::new();
    if base.isa_source == super::Source::Environment {
        notes.push(format!(
            "instruction set pinned to {} by the environment",
            isa.name()
        ));
    }
    let rounds = options.rounds.max(3);
    let grid = grid(isa.small_max(), options.max_bytes);
    let pool = (4 * options.llc_bytes).next_power_of_two().max(64 << 20);
    let largest = grid.last().map_or(0, |g| g.1);
    let mut cells = Vec::new();
    let total = grid.len() * 2 + 2;
    let mut step = 0;

    progress.update(step, total, "small sizes: masked or plain moves");
    let (small, small_timings) = if isa == Isa::Avx512 {
        tune_small(
            &base,
            defaults.small,
            rounds,
            options.margin,
            options.llc_bytes,
        )?
    } else {
        (defaults.small, Vec::new())
    };
    base.tables.small = small;
    step += 1;
    progress.update(
        step,
        total,
        "copy loop: four or eight vectors per iteration",
    );
    let (loop_block, loop_block_timings) = tune_loop_block(
        &base,
        defaults.loop_block,
        rounds,
        options.margin,
        options.llc_bytes,
    )?;
    base.tables.loop_block = loop_block;
    step += 1;

    let mut choices = Vec::new();
    for op in [Op::Copy, Op::Fill] {
        let name = if op == Op::Copy { "copy" } else { "fill" };
        let mut bufs = buffers(
            pool.max(largest + (4 << 20)),
            op == Op::Copy,
            options.llc_bytes,
        )?;
        let placements: &[Placement] = if op == Op::Copy {
            &Placement::ALL
        } else {
            &[Placement::Aligned, Placement::Other]
        };
        let footprint = |n: usize| if op == Op::Copy { 2 * n } else { n };
        for &(from, n) in &grid {
            progress.update(step, total, &format!("{name} {} B", n));
            step += 1;
            let cands = candidates(&base, n, base.erms);
            let strategies: Vec<Strategy> = cands.iter().map(|(s, _)| *s).collect();
            let mut class_cells = Vec::new();
            for m in class_sizes(from, n) {
                let hot = footprint(m) <= options.llc_bytes / 3;
                for &p in placements {
                    let cell =
                        |residency, (timings, glibc_gbps): (Vec<Timing>, f64), stayed| Cell {
                            op: name,
                            class_from: from,
                            bytes: m,
                            residency,
                            placement: p,
                            glibc_gbps,
                            timings,
                            stayed_in_cache: stayed,
                        };
                    // Cold first: the hot cell is checked against it.
                    let cold = measure_cell(op, &cands, &mut bufs, m, false, p, rounds)?;
                    let cold_gbps = cold.1;
                    if hot {
                        let mut measured = measure_cell(op, &cands, &mut bufs, m, true, p, rounds)?;
                        if !stayed_in_cache(measured.1, cold_gbps) {
                            // Once more: a neighbour may have passed.
                            measured = measure_cell(op, &cands, &mut bufs, m, true, p, rounds)?;
                        }
                        let stayed = stayed_in_cache(measured.1, cold_gbps);
                        class_cells.push(cell("hot", measured, Some(stayed)));
                    }
                    class_cells.push(cell("cold", cold, None));
                }
            }
            let (nt_table, temporal_table) = if op == Op::Copy {
                (Table::Copy, Table::CopyTemporal)
            } else {
                (Table::Fill, Table::FillTemporal)
            };
            let next_from = grid.iter().map(|g| g.0).find(|&f| f > from);
            let glibc_streams = options.glibc_nontemporal.unwrap_or(options.l2_bytes)
                <= next_from.unwrap_or(usize::MAX).saturating_sub(1);
            for table in [nt_table, temporal_table] {
                for p in Placement::ALL {
                    // Fills have no near placement: it follows the other one.
                    let measured = if op == Op::Fill && p == Placement::Near {
                        Placement::Other
                    } else {
                        p
                    };
                    let of_p: Vec<&Cell> = class_cells
                        .iter()
                        .filter(|c| c.placement == measured)
                        .collect();
                    let allowed = |s: Strategy| match s {
                        Strategy::NonTemporal { .. } => table.allows_nontemporal(),
                        Strategy::Glibc => table.allows_nontemporal() || !glibc_streams,
                        _ => true,
                    };
                    let default =
                        strategy_at(defaults.get(table), n, p).unwrap_or(Strategy::Loop { isa });
                    let evicted = of_p.iter().any(|c| c.stayed_in_cache == Some(false));
                    let (s, score, default_score, glibc_score) = if evicted {
                        // The hot cells measured memory, not the cache: no
                        // challenger may replace the default on them.
                        let (_, _, default_score, glibc_score) =
                            choose(&of_p, &strategies, default, allowed, options.margin);
                        (default, default_score, default_score, glibc_score)
                    } else {
                        choose(&of_p, &strategies, default, allowed, options.margin)
                    };
                    choices.push(Choice {
                        table,
                        class_from: from,
                        placement: p,
                        chosen: s.label(),
                        score,
                        default: default.label(),
                        default_score,
                        glibc_score,
                        hot_evicted: evicted,
                    });
                }
            }
            cells.extend(class_cells);
        }
    }
    // The tables: the defaults, with the classes where a challenger won
    // changed (for that placement only).
    let mut rebuilt = defaults.clone();
    rebuilt.small = small;
    rebuilt.loop_block = loop_block;
    let starts: Vec<usize> = grid.iter().map(|g| g.0).collect();
    for c in &choices {
        if c.chosen == c.default {
            continue;
        }
        let to = starts
            .iter()
            .copied()
            .find(|&f| f > c.class_from)
            .unwrap_or(usize::MAX);
        let s = strategy_of_label(&c.chosen, isa);
        let measured_default = strategy_of_label(&c.default, isa);
        // Only where the defaults run what was measured against: a class
        // measured at one size can hold a boundary of the defaults (fills
        // switch to non-temporal stores at half the LLC, inside the 8-32 MiB
        // class measured at 16 MiB), and a challenger that beat the
        // non-temporal default there must not replace `rep` on the sizes
        // that still fit in the cache (measured: non-temporal fills of 8 MiB
        // hot in the cache at 0.33 of glibc).
        for (from, upto) in runs_of(
            defaults.get(c.table),
            c.class_from,
            to,
            c.placement,
            measured_default,
        ) {
            overlay_placement(rebuilt.get_mut(c.table), from, upto, c.placement, s);
        }
    }
    // The kernels read at most MAX_CLASSES classes per table (further ones
    // would be dropped without a word): a tuned table past that keeps the
    // defaults, and says so.
    for table in Table::ALL {
        let classes = rebuilt.get(table).len();
        if classes > crate::sys::copy::MAX_CLASSES {
            *rebuilt.get_mut(table) = defaults.get(table).clone();
            notes.push(format!(
                "{table:?}: the tuned table had {classes} size classes, more than the \
                 {} the kernels hold; it keeps the defaults",
                crate::sys::copy::MAX_CLASSES
            ));
        }
    }
    progress.update(total, total, "done");
    let measured_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(Report {
        schema: TUNE_SCHEMA,
        tuned: Tuned {
            schema: SCHEMA.into(),
            key: MachineKey::current(),
            measured_at,
            isa,
            tables: rebuilt,
        },
        cells,
        choices,
        small: small_timings,
        loop_block: loop_block_timings,
        seconds: started.elapsed().as_secs_f64(),
        cache_file: None,
        notes,
    })
}

/// The sub-ranges of `[from, to)` where `table` runs `strategy` at `p`.
fn runs_of(
    table: &[Class],
    from: usize,
    to: usize,
    p: Placement,
    strategy: Strategy,
) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, c) in table.iter().enumerate() {
        let end = table.get(i + 1).map_or(usize::MAX, |next| next.from);
        let (lo, hi) = (c.from.max(from), end.min(to));
        if lo >= hi || c.by_placement[p as usize] != strategy {
            continue;
        }
        match runs.last_mut() {
            Some(last) if last.1 == lo => last.1 = hi,
            _ => runs.push((lo, hi)),
        }
    }
    runs
}

/// The strategy a [`Strategy::label`] names.
fn strategy_of_label(label: &str, isa: Isa) -> Strategy {
    let mut all: Vec<Strategy> = Isa::ALL.iter().map(|&isa| Strategy::Loop { isa }).collect();
    all.extend([Strategy::Rep, Strategy::Glibc]);
    all.extend(Strategy::STREAMS.map(|streams| Strategy::NonTemporal { streams }));
    all.into_iter()
        .find(|s| s.label() == label)
        .unwrap_or(Strategy::Loop { isa })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_blocks_are_far_apart_in_the_pool_and_spread_over_the_l2_sets() {
        let pool = 256 << 20;
        let b = cold_block_starts(33, pool, 1 << 20);
        assert!(b.len() > 3000);
        assert!(b.windows(2).all(|w| w[1] - w[0] >= 64 << 10));
        assert!(b.iter().all(|&s| s + 4096 <= pool));
        // Modulo 128 KiB (an L2 of 2 MiB, 16 ways) the first 32 all differ.
        let sets: std::collections::BTreeSet<usize> =
            b.iter().take(32).map(|s| s % (128 << 10)).collect();
        assert_eq!(sets.len(), 32);
        assert_eq!(cold_block_starts(33, pool, 10).len(), 10);
        assert_eq!(
            cold_block_starts(1 << 30, (1 << 30) + (4 << 20), 1).len(),
            1
        );
    }

    #[test]
    fn a_cold_walk_is_flushed_only_when_the_llc_could_hold_it() {
        let mut bufs = TimingBuffers::new(4 << 20, true, false).unwrap();
        let starts = || (0..16).map(|k| (k * 65_536 + 7, k * 65_536 + 1));
        // Not told the LLC: never flushed.
        assert!(!bufs.start_cold_walk(starts(), 33, true));
        // 16 calls of 33 B from source and destination: 1,056 bytes,
        // flushed below twice the LLC.
        let mut bufs = bufs.with_llc(529);
        assert!(bufs.start_cold_walk(starts(), 33, true));
        let mut bufs = bufs.with_llc(528);
        assert!(!bufs.start_cold_walk(starts(), 33, true));
        // A fill's walk counts the destination only.
        assert!(bufs.start_cold_walk(starts(), 33, false));
        // Flushing moves no byte: the source still holds its pattern, the
        // destination its zeros.
        let (dst, src) = bufs.slices();
        assert!(dst.iter().all(|&b| b == 0));
        assert!(src.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn the_grid_starts_above_the_loop_free_sizes_and_stops_at_the_largest() {
        let g = grid(512, 512 << 20);
        assert_eq!(g[0], (513, 1024));
        assert_eq!(g.last(), Some(&(128 << 20, 512 << 20)));
        assert!(g.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 >= w[0].0));
        let g = grid(256, 100 << 10);
        assert_eq!(g.last(), Some(&(32 << 10, 64 << 10)));
    }

    #[test]
    fn a_challenger_replaces_the_default_only_where_the_default_runs_what_was_measured() {
        let nt = Strategy::NonTemporal { streams: 1 };
        let table = vec![
            Class {
                from: 0,
                by_placement: [Strategy::Loop { isa: Isa::Sse2 }; 3],
            },
            Class {
                from: 8 << 10,
                by_placement: [Strategy::Rep; 3],
            },
            Class {
                from: 16 << 20,
                by_placement: [nt, nt, Strategy::Rep],
            },
        ];
        let class = (8 << 20, 32 << 20);
        assert_eq!(
            runs_of(&table, class.0, class.1, Placement::Aligned, nt),
            vec![(16 << 20, 32 << 20)],
            "rep below 16 MiB stays"
        );
        assert_eq!(
            runs_of(&table, class.0, class.1, Placement::Other, Strategy::Rep),
            vec![(8 << 20, 32 << 20)],
            "one run across the default's boundary when both sides are the same"
        );
        assert!(runs_of(&table, 0, 4096, Placement::Aligned, nt).is_empty());
    }

    #[test]
    fn a_hot_cell_counts_as_cached_only_when_clearly_faster_than_cold() {
        assert!(stayed_in_cache(140.0, 34.0));
        assert!(stayed_in_cache(1.25 * 20.0, 20.0));
        assert!(!stayed_in_cache(24.0, 20.0), "about memory speed: evicted");
        assert!(!stayed_in_cache(f64::NAN, 20.0));
        assert!(!stayed_in_cache(30.0, f64::NAN));
    }

    fn cell(residency: &'static str, timings: &[(&str, f64)]) -> Cell {
        Cell {
            op: "copy",
            class_from: 4096,
            bytes: 8192,
            residency,
            placement: Placement::Aligned,
            glibc_gbps: 10.0,
            stayed_in_cache: (residency == "hot").then_some(true),
            timings: timings
                .iter()
                .map(|&(c, r)| Timing {
                    candidate: c.into(),
                    gbps: r * 10.0,
                    ratio: Ratio {
                        median: r,
                        min: r,
                        max: r,
                    },
                    rounds: vec![r * 10.0; 5],
                })
                .collect(),
        }
    }

    #[test]
    fn the_default_stays_unless_a_challenger_is_clearly_better() {
        let all = [
            Strategy::Loop { isa: Isa::Sse2 },
            Strategy::Rep,
            Strategy::NonTemporal { streams: 1 },
            Strategy::Glibc,
        ];
        let loop_ = Strategy::Loop { isa: Isa::Sse2 };
        // rep beats the loop by more than the margin hot and cold: it
        // replaces it (nt 1 is far ahead cold but behind hot).
        let hot = cell(
            "hot",
            &[
                ("loop sse2", 0.9),
                ("rep", 1.0),
                ("nt 1", 0.3),
                ("glibc", 0.97),
            ],
        );
        let cold = cell(
            "cold",
            &[
                ("loop sse2", 1.0),
                ("rep", 1.1),
                ("nt 1", 1.5),
                ("glibc", 0.98),
            ],
        );
        let (s, score, default_score, _) = choose(&[&hot, &cold], &all, loop_, |_| true, 0.05);
        assert_eq!((s, score, default_score), (Strategy::Rep, 1.0, 0.9));
        // Within the margin: the default stays, even if another is ahead.
        let hot = cell("hot", &[("loop sse2", 1.0), ("rep", 1.04), ("glibc", 0.99)]);
        let (s, _, _, _) = choose(&[&hot], &all, loop_, |_| true, 0.05);
        assert_eq!(s, loop_);
        // Far better in one cell, slower in the other: the default stays.
        let hot = cell("hot", &[("loop sse2", 1.3), ("rep", 1.2)]);
        let cold = cell("cold", &[("loop sse2", 0.8), ("rep", 1.5)]);
        let (s, _, _, _) = choose(&[&hot, &cold], &all, loop_, |_| true, 0.05);
        assert_eq!(s, loop_);
        // As fast hot (within half the margin) and clearly faster cold: it
        // replaces the default (the Zen 4 guest's 16 KiB aligned copies).
        let hot = cell("hot", &[("loop sse2", 0.94), ("rep", 0.95)]);
        let cold = cell("cold", &[("loop sse2", 0.96), ("rep", 1.03)]);
        let (s, _, _, _) = choose(&[&hot, &cold], &all, loop_, |_| true, 0.05);
        assert_eq!(s, Strategy::Rep);
        // Behind by more than half the margin hot: the default stays.
        let hot = cell("hot", &[("loop sse2", 1.0), ("rep", 0.97)]);
        let (s, _, _, _) = choose(&[&hot, &cold], &all, loop_, |_| true, 0.05);
        assert_eq!(s, loop_);
        // Even in every cell: the default stays.
        let hot = cell("hot", &[("loop sse2", 1.0), ("rep", 1.0)]);
        let cold = cell("cold", &[("loop sse2", 1.0), ("rep", 1.04)]);
        let (s, _, _, _) = choose(&[&hot, &cold], &all, loop_, |_| true, 0.05);
        assert_eq!(s, loop_);
        // A default that is not allowed in this table (non-temporal stores
        // in a temporal one) gives way to glibc as the incumbent.
        let nt = Strategy::NonTemporal { streams: 1 };
        let hot = cell("hot", &[("nt 1", 1.5), ("glibc", 1.0), ("loop sse2", 1.02)]);
        let (s, _, _, _) = choose(&[&hot], &all, nt, |s| !s.is_nontemporal(), 0.05);
        assert_eq!(s, Strategy::Glibc);
    }

    #[test]
    fn classes_up_to_2_mib_are_measured_at_both_ends() {
        assert_eq!(class_sizes(513, 1024), vec![1024, 513]);
        assert_eq!(class_sizes(2 << 20, 4 << 20), vec![4 << 20, 2 << 20]);
        assert_eq!(class_sizes(8 << 20, 16 << 20), vec![16 << 20]);
        // A class whose representative is its first size (a small --max-bytes).
        assert_eq!(class_sizes(4096, 4096), vec![4096]);
        for (from, n) in grid(512, 1 << 30) {
            assert!(class_sizes(from, n).iter().all(|&m| m >= from && m <= n));
        }
    }

    #[test]
    fn a_variant_replaces_the_default_when_its_worst_case_is_clearly_better() {
        // The Zen 4 guest's small-copy shapes (worst ratios to glibc).
        let small = [
            (Small::Masked, 0.99),
            (Small::MaskedGuarded, 0.71),
            (Small::Plain, 0.71),
        ];
        assert_eq!(
            best_worst(Small::MaskedGuarded, &small, 0.05),
            Small::Masked
        );
        assert_eq!(best_worst(Small::Masked, &small, 0.05), Small::Masked);
        // Within the margin the default stays (the loop blocks there: 0.97, 0.98).
        let block = [(LoopBlock::Eight, 0.969), (LoopBlock::Four, 0.978)];
        assert_eq!(best_worst(LoopBlock::Eight, &block, 0.05), LoopBlock::Eight);
        // An unmeasured default stays.
        assert_eq!(best_worst(Small::Plain, &small[..1], 0.05), Small::Plain);
        // Of several that clear the margin, the best worst case.
        let three = [(1, 0.5), (2, 0.8), (3, 0.9)];
        assert_eq!(best_worst(1, &three, 0.05), 3);
        // NaN (not measured) never wins.
        assert_eq!(best_worst(1, &[(1, 0.5), (2, f64::NAN)], 0.05), 1);
    }

    #[test]
    fn clearly_better_needs_the_margin_in_most_rounds_of_every_cell() {
        let t = |rounds: &[f64]| Timing {
            candidate: "x".into(),
            gbps: 0.0,
            ratio: Ratio {
                median: 1.0,
                min: 1.0,
                max: 1.0,
            },
            rounds: rounds.to_vec(),
        };
        let base = t(&[10.0; 5]);
        let ahead = t(&[11.0, 11.0, 11.0, 11.0, 9.0]);
        assert!(clearly_better(&[&ahead], &[&base], &[0.05]));
        // Not when the cell is noisier than the lead.
        assert!(!clearly_better(&[&ahead], &[&base], &[0.2]));
        // Ahead in the median, but only in three rounds of five: noise.
        let lucky = t(&[12.0, 12.0, 12.0, 9.0, 9.0]);
        assert!(!clearly_better(&[&lucky], &[&base], &[0.05]));
        // Ahead in one cell only.
        assert!(!clearly_better(
            &[&ahead, &base],
            &[&base, &base],
            &[0.05, 0.05]
        ));
        assert!(!clearly_better(&[], &[], &[]));
    }

    #[test]
    fn the_strategy_at_a_size_is_its_class_s() {
        let l = Strategy::Loop { isa: Isa::Avx2 };
        let t = vec![
            Class {
                from: 0,
                by_placement: [l; 3],
            },
            Class {
                from: 24 << 10,
                by_placement: [Strategy::Rep, l, Strategy::Rep],
            },
        ];
        assert_eq!(strategy_at(&t, 16 << 10, Placement::Aligned), Some(l));
        assert_eq!(
            strategy_at(&t, 64 << 10, Placement::Aligned),
            Some(Strategy::Rep)
        );
        assert_eq!(strategy_at(&t, 64 << 10, Placement::Near), Some(l));
    }

    #[test]
    fn labels_name_their_strategies() {
        for s in [
            Strategy::Loop { isa: Isa::Avx2 },
            Strategy::Rep,
            Strategy::NonTemporal { streams: 8 },
            Strategy::Glibc,
        ] {
            assert_eq!(strategy_of_label(&s.label(), Isa::Sse2), s);
        }
    }
}

/// One candidate's speed on the limit measurement.
#[derive(Debug, Clone, Serialize)]
pub struct LimitTiming {
    /// The candidate (`loop avx512`, `rep`, `nt 4`, `glibc`).
    pub candidate: String,
    /// GB/s: median, min, max over the rounds.
    pub gbps: Ratio,
}

/// The best one core reaches on `n` bytes from memory (aligned, one call per
/// round): every candidate strategy and direct glibc, `rounds` times,
/// interleaved; returns each one's GB/s, fastest first. Maps `2 n` (copy) or
/// `n` (fill) bytes plus a few MiB.
pub fn limit(copy: bool, n: usize, rounds: usize) -> Result<Vec<LimitTiming>, TuneError> {
    let op = if copy { Op::Copy } else { Op::Fill };
    let base = Plan::detect();
    let cands = candidates(&base, n.max(256 << 10), base.erms);
    // One call of `n` bytes from memory: no walk to flush (LLC 0).
    let mut bufs = buffers(n + (4 << 20), copy, 0)?;
    let k = cands.len() + 1;
    let mut speeds = vec![Vec::new(); k];
    for r in 0..rounds.max(1) {
        for j in 0..k {
            let i = (j + r) % k;
            let runner = cands
                .get(i)
                .map_or(Runner::Glibc, |(_, c)| Runner::Pagewise(c));
            speeds[i].push(time_one(op, runner, &mut bufs, n, false, (0, 0)));
        }
    }
    let mut out: Vec<LimitTiming> = speeds
        .iter_mut()
        .enumerate()
        .map(|(i, v)| LimitTiming {
            candidate: cands
                .get(i)
                .map_or("glibc (direct)".to_owned(), |(s, _)| s.label()),
            gbps: Ratio::of(v),
        })
        .collect();
    out.sort_by(|a, b| b.gbps.median.total_cmp(&a.gbps.median));
    Ok(out)
}
