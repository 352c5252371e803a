//! Copy and fill that use the whole memory bus.
//!
//! [`copy`] and [`fill`] are drop-in replacements for `copy_from_slice` and
//! `slice.fill(byte)` that pick, once per process, the best kernel this CPU
//! offers (AVX-512, AVX2 or SSE2, with `rep movsb`/`rep stosb` where the CPU
//! makes that the fastest choice), and that switch to non-temporal stores for
//! sizes too large to stay in the cache: those skip the read-for-ownership that
//! ordinary stores pay, so large copies and fills move up to twice the bytes
//! per second. [`copy_temporal`] and [`fill_temporal`] never use non-temporal
//! stores: use them when the destination is read right after.
//!
//! Size classes (see [`Plan`] and `docs/copy.md`):
//!
//! - **small** (up to eight vectors: 512 bytes with AVX-512): overlapping head
//!   and tail moves, no loop;
//! - **medium**: a vector loop with aligned stores, or `rep movsb` where the
//!   plan says so;
//! - **large** (from [`Plan::copy_nontemporal`] / [`Plan::fill_nontemporal`],
//!   derived from the last-level cache size): non-temporal stores with the destination aligned to a cache line,
//!   and a store fence before returning.
//!
//! The threshold can be set with the `PAGEWISE_NT_THRESHOLD` environment
//! variable (bytes, `K`/`M`/`G` suffixes, or `never`) or with
//! [`set_nontemporal_threshold`]. [`Plan::current`] says what was chosen and
//! why; `pagewise doctor` prints it.
//!
//! ```
//! let src = vec![7u8; 1000];
//! let mut dst = vec![0u8; 1000];
//! pagewise::copy::copy(&mut dst, &src).unwrap();
//! pagewise::copy::fill(&mut dst[..10], 0);
//! assert_eq!(&dst[..11], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
//! ```

pub mod cache;
mod plan;
pub mod tune;

pub use crate::sys::copy::{Class, Isa, LoopBlock, Placement, RepGuard, Small, Strategy};
pub use cache::{MachineKey, Tuned};
pub use plan::{
    default_tables, merge, overlay, set_nontemporal, Choices, CpuKind, Inputs, Plan, PlanError,
    SizeClass, SizeRange, Source, Table, Tables, TuneCache, Vendor, COPY_LLC_DIVISOR, ENV_ISA,
    ENV_NT_THRESHOLD, ENV_PLAN, ENV_REP_MOVSB, ENV_REP_STOSB, FILL_LLC_DIVISOR,
};

use crate::sys::copy::{Kernel, ThresholdSet, Thresholds, PROCESS};
use std::sync::OnceLock;

/// `copy` was given slices of different lengths; nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "copy needs equal lengths: the destination holds {dst} bytes, the source {src} \
     (slice one of them to the length you mean)"
)]
pub struct LengthMismatch {
    /// Destination length.
    pub dst: usize,
    /// Source length.
    pub src: usize,
}

/// The instruction set asked for is not available on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this CPU does not support {}: choose a narrower instruction set", .0.name())]
pub struct Unsupported(pub Isa);

/// A copy/fill engine with an explicit configuration.
///
/// The free functions ([`copy`], [`fill`], …) use one built from
/// [`Plan::current`]; build your own to pin an instruction set or thresholds
/// (tests use this to run every kernel at every size).
#[derive(Debug)]
pub struct Copier {
    kernel: Kernel,
    sets: Sets,
    /// The plan's tables, from which [`Copier::set_nontemporal_threshold`]
    /// rebuilds the non-temporal ones.
    tables: Tables,
}

impl ThresholdSet {
    /// Sets every table from `tables`.
    fn assign(&self, tables: &Tables) {
        let guards = &tables.rep_guards;
        self.copy.assign(&tables.copy, guards);
        self.copy_temporal.assign(&tables.copy_temporal, guards);
        self.copy.set_small(tables.small);
        self.copy_temporal.set_small(tables.small);
        self.copy.set_loop_block(tables.loop_block);
        self.copy_temporal.set_loop_block(tables.loop_block);
        self.fill.assign(&tables.fill, &[]);
        self.fill_temporal.assign(&tables.fill_temporal, &[]);
    }

    fn pick(&self, op: Op, stores: Stores) -> &Thresholds {
        match (op, stores) {
            (Op::Copy, Stores::Default) => &self.copy,
            (Op::Copy, Stores::Temporal) => &self.copy_temporal,
            (Op::Fill, Stores::Default) => &self.fill,
            (Op::Fill, Stores::Temporal) => &self.fill_temporal,
        }
    }
}

/// Where a copier keeps its thresholds.
#[derive(Debug)]
enum Sets {
    /// Its own.
    Own(Box<ThresholdSet>),
    /// [`PROCESS`]: the process-wide copier's, which the free functions read
    /// from a static (no indirection on their fast path).
    Process,
}

impl Clone for Copier {
    /// A copier with the same kernel and a snapshot of the thresholds (a
    /// clone of the process-wide copier no longer follows it).
    fn clone(&self) -> Copier {
        Copier {
            kernel: self.kernel,
            sets: Sets::Own(Box::new(self.sets().clone())),
            tables: self.tables.clone(),
        }
    }
}

impl Copier {
    /// A copier that follows `plan`; fails when the plan's instruction set is
    /// not available here.
    pub fn new(plan: &Plan) -> Result<Copier, Unsupported> {
        let kernel = Kernel::new(plan.isa).ok_or(Unsupported(plan.isa))?;
        let unsupported = Table::ALL
            .iter()
            .flat_map(|t| plan.tables.get(*t))
            .flat_map(|c| c.by_placement)
            .find_map(|s| match s {
                Strategy::Loop { isa } if !isa.is_supported() => Some(isa),
                _ => None,
            });
        if let Some(isa) = unsupported {
            return Err(Unsupported(isa));
        }
        let set = ThresholdSet::unset();
        set.assign(&plan.tables);
        Ok(Copier {
            kernel,
            sets: Sets::Own(Box::new(set)),
            tables: plan.tables.clone(),
        })
    }

    fn sets(&self) -> &ThresholdSet {
        match &self.sets {
            Sets::Own(set) => set,
            Sets::Process => &PROCESS.set,
        }
    }

    /// Copies `src` into `dst`, which must have the same length; otherwise
    /// returns [`LengthMismatch`] and writes nothing.
    pub fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<(), LengthMismatch> {
        check(dst, src)?;
        self.kernel.copy(dst, src, &self.sets().copy);
        Ok(())
    }

    /// Like [`Copier::copy`] but with temporal stores at every size.
    pub fn copy_temporal(&self, dst: &mut [u8], src: &[u8]) -> Result<(), LengthMismatch> {
        check(dst, src)?;
        self.kernel.copy(dst, src, &self.sets().copy_temporal);
        Ok(())
    }

    /// Sets every byte of `dst` to `byte`.
    pub fn fill(&self, dst: &mut [u8], byte: u8) {
        self.kernel.fill(dst, byte, &self.sets().fill);
    }

    /// Like [`Copier::fill`] but with temporal stores at every size.
    pub fn fill_temporal(&self, dst: &mut [u8], byte: u8) {
        self.kernel.fill(dst, byte, &self.sets().fill_temporal);
    }

    /// Changes the size from which [`Copier::copy`] and [`Copier::fill`] use
    /// non-temporal stores (`None`: never), also while other threads use it.
    pub fn set_nontemporal_threshold(&self, bytes: Option<usize>) {
        let mut tables = self.tables.clone();
        plan::set_nontemporal(&mut tables, bytes);
        self.sets()
            .copy
            .assign(&tables.copy, &self.tables.rep_guards);
        self.sets().fill.assign(&tables.fill, &[]);
    }

    /// The non-temporal thresholds in force for copy and fill (`None`: never):
    /// the first size whose aligned placement uses non-temporal stores.
    pub fn nontemporal_thresholds(&self) -> (Option<usize>, Option<usize>) {
        let first = |t: &Thresholds| {
            t.classes()
                .iter()
                .find(|c| c.by_placement[Placement::Aligned as usize].is_nontemporal())
                .map(|c| c.from)
        };
        (first(&self.sets().copy), first(&self.sets().fill))
    }

    /// Tuning: the copy loop runs backwards when the destination is less than
    /// `bytes` ahead of the source modulo 4 KiB (0: never).
    pub fn set_backward_below(&self, bytes: usize) {
        self.sets().copy.set_backward_below(bytes);
        self.sets().copy_temporal.set_backward_below(bytes);
    }

    /// The instruction set in use.
    pub fn isa(&self) -> Isa {
        self.kernel.isa()
    }
}

#[inline]
fn check(dst: &[u8], src: &[u8]) -> Result<(), LengthMismatch> {
    if dst.len() == src.len() {
        Ok(())
    } else {
        Err(LengthMismatch {
            dst: dst.len(),
            src: src.len(),
        })
    }
}

/// The process-wide plan and the copier built from it.
struct Global {
    plan: Plan,
    copier: Copier,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

/// The global plan and copier: after the first call, one load and a branch.
#[inline]
fn global() -> &'static Global {
    match GLOBAL.get() {
        Some(g) => g,
        None => init_global(),
    }
}

#[cold]
#[inline(never)]
fn init_global() -> &'static Global {
    GLOBAL.get_or_init(|| {
        let plan = Plan::detect();
        // The detected plan only names instruction sets that this CPU has;
        // SSE2 is part of x86-64.
        let kernel = Kernel::new(plan.isa)
            .or_else(|| Kernel::new(Isa::Sse2))
            .expect("SSE2 is part of x86-64");
        PROCESS.assign(&plan.tables);
        crate::sys::copy::streams::time_process_streams(&plan.timed_streams());
        // After the thresholds: the fast path reads them once it is on.
        for t in [
            &PROCESS.copy,
            &PROCESS.copy_temporal,
            &PROCESS.fill,
            &PROCESS.fill_temporal,
        ] {
            crate::sys::copy::enable_fast_path(kernel, t);
        }
        Global {
            copier: Copier {
                kernel,
                sets: Sets::Process,
                tables: plan.tables.clone(),
            },
            plan,
        }
    })
}

/// Bytes of large copies the process copier times before it chooses its
/// non-temporal stream count, at the least (32 segments of 4 MiB per
/// candidate; untimed segments come on top).
pub const STREAM_TRIAL_BYTES: usize = crate::sys::copy::streams::SAMPLES
    * crate::sys::copy::streams::SEGMENT
    * crate::sys::copy::streams::MAX_CANDIDATES;

/// How many pages the process copier's non-temporal copies interleave, once
/// it has chosen by timing them ([`Plan::timed_streams`]); `None` while it
/// still times, and when the plan fixes the count. One relaxed load.
pub fn nontemporal_streams_chosen() -> Option<u8> {
    crate::sys::copy::streams::process_streams_chosen()
}

/// The copier behind [`copy`] and [`fill`].
#[inline]
pub fn global_copier() -> &'static Copier {
    &global().copier
}

/// Which of a copier's threshold sets a call uses.
#[derive(Clone, Copy)]
enum Stores {
    Default,
    Temporal,
}

/// Copy or fill, for [`ThresholdSet::pick`].
#[derive(Clone, Copy)]
enum Op {
    Copy,
    Fill,
}

/// The free functions' path before the fast path is on: the first call of the
/// process, which detects the plan.
#[inline(never)]
fn copy_slow(dst: &mut [u8], src: &[u8], stores: Stores) {
    let c = global_copier();
    c.kernel.copy(dst, src, c.sets().pick(Op::Copy, stores));
}

/// Builds the process-wide copier: what the process entry of large copies
/// ([`crate::sys::copy::copy_process_large`]) calls on the first copy of the
/// process, before it has a fast path to jump to.
extern "sysv64-unwind" fn prepare_process_copier() {
    global();
}

/// As [`copy_slow`], for fills.
#[inline(never)]
fn fill_slow(dst: &mut [u8], byte: u8, stores: Stores) {
    let c = global_copier();
    c.kernel.fill(dst, byte, c.sets().pick(Op::Fill, stores));
}

// The free functions are always inlined and small: with AVX-512 they reach
// their kernel with one load of a static, a compare and a direct call, with
// the thresholds in a static too; every size goes to the kernel, whose masked
// moves make copies up to 32 bytes and fills below 64 branch-free (calls of
// varying sizes never mispredict there). With AVX2 or SSE2 they copy up to
// 64 bytes (fill up to 128) in place and jump to the kernel for larger sizes.
// The first call of the process, which detects the plan, goes out of line.

/// Copies `src` into `dst` with the best kernel for this CPU and size.
///
/// The lengths must be equal; otherwise returns [`LengthMismatch`] and writes
/// nothing. Sizes from [`Plan::copy_nontemporal`] up use non-temporal
/// stores, which leave the destination out of the cache: use
/// [`copy_temporal`] when it is read right after.
#[inline(always)]
pub fn copy(dst: &mut [u8], src: &[u8]) -> Result<(), LengthMismatch> {
    check(dst, src)?;
    if crate::sys::copy::copy_process_large(dst, src, prepare_process_copier).is_none() {
        copy_small(dst, src);
    }
    Ok(())
}

/// [`copy`] for a caller that passes a C status on: returns 0 after the
/// copy, or `-EINVAL` (nothing written) when the lengths differ. Copies
/// above 256 bytes end in a jump to the kernel, which returns the 0 itself,
/// so the caller can end in a jump too (`pw_copy` does).
#[inline(always)]
pub fn copy_status(dst: &mut [u8], src: &[u8]) -> i32 {
    if check(dst, src).is_err() {
        return -crate::sys::Errno::INVAL.raw();
    }
    if let Some(zero) = crate::sys::copy::copy_process_large(dst, src, prepare_process_copier) {
        return zero as i32;
    }
    copy_small(dst, src);
    0
}

/// [`copy`] up to 256 bytes: the inline fast path.
#[inline(always)]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    if !crate::sys::copy::fast_copy(dst, src, &PROCESS.copy) {
        copy_slow(dst, src, Stores::Default);
    }
}

/// Like [`copy`], but keeps temporal stores at every size, so the destination
/// ends up in the cache: for data that is read right after the copy.
#[inline(always)]
pub fn copy_temporal(dst: &mut [u8], src: &[u8]) -> Result<(), LengthMismatch> {
    check(dst, src)?;
    if !crate::sys::copy::fast_copy(dst, src, &PROCESS.copy_temporal) {
        copy_slow(dst, src, Stores::Temporal);
    }
    Ok(())
}

/// Sets every byte of `dst` to `byte` with the best kernel for this CPU and
/// size; non-temporal stores from [`Plan::fill_nontemporal`] up.
#[inline(always)]
pub fn fill(dst: &mut [u8], byte: u8) {
    if !crate::sys::copy::fast_fill(dst, byte, &PROCESS.fill) {
        fill_slow(dst, byte, Stores::Default);
    }
}

/// Like [`fill`], but keeps temporal stores at every size.
#[inline(always)]
pub fn fill_temporal(dst: &mut [u8], byte: u8) {
    if !crate::sys::copy::fast_fill(dst, byte, &PROCESS.fill_temporal) {
        fill_slow(dst, byte, Stores::Temporal);
    }
}

/// Below this many bytes [`copy_parallel`] and [`fill_parallel`] stay on the
/// calling thread: starting a helper thread costs tens of microseconds.
pub const PARALLEL_MIN: usize = 16 << 20;

/// Splits `len` bytes into `parts` pieces whose starts are multiples of
/// 4 KiB (so each piece's non-temporal streams start on page boundaries).
fn parallel_split(len: usize, parts: usize) -> Vec<usize> {
    let per = (len / parts).next_multiple_of(4096);
    let mut sizes = Vec::with_capacity(parts);
    let mut left = len;
    while left > 0 {
        let n = per.min(left);
        sizes.push(n);
        left -= n;
    }
    sizes
}

/// How many threads a parallel call uses: at most `threads`, at most the
/// CPUs this process may run on, and 1 below [`PARALLEL_MIN`].
fn parallel_threads(len: usize, threads: usize) -> usize {
    if len < PARALLEL_MIN {
        return 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    threads.clamp(1, cpus)
}

/// Like [`copy`], with the work split over up to `threads` threads: the
/// caller's and `threads - 1` scoped helpers, each copying a 4 KiB-aligned
/// part. One core cannot keep enough cache-line fills in flight to use the
/// memory bus; two on the development VM copy 1 GiB about twice as fast as
/// one. Costs a thread start per helper (tens of microseconds), so sizes
/// below [`PARALLEL_MIN`] and machines with one usable CPU stay on the
/// calling thread. It takes CPUs the caller may need for other work: use it
/// where a large copy is the critical path.
pub fn copy_parallel(dst: &mut [u8], src: &[u8], threads: usize) -> Result<(), LengthMismatch> {
    check(dst, src)?;
    let threads = parallel_threads(dst.len(), threads);
    if threads == 1 {
        return copy(dst, src);
    }
    in_parts(dst, Some(src), threads, |d, s| {
        let equal = copy(d, s);
        debug_assert!(equal.is_ok(), "both parts have the same length");
    });
    Ok(())
}

/// Like [`fill`], with the work split over up to `threads` threads as in
/// [`copy_parallel`] (same costs and limits). Two threads fill 1 GiB about
/// three times as fast as glibc's `memset` on the development VM.
pub fn fill_parallel(dst: &mut [u8], byte: u8, threads: usize) {
    let threads = parallel_threads(dst.len(), threads);
    if threads == 1 {
        return fill(dst, byte);
    }
    in_parts(dst, None, threads, |d, _| fill(d, byte));
}

/// Runs `work` on matching 4 KiB-aligned parts of `dst` and `src` (empty
/// parts when there is no source): the first part on this thread, the
/// others on scoped threads, one each.
fn in_parts(
    dst: &mut [u8],
    src: Option<&[u8]>,
    threads: usize,
    work: impl Fn(&mut [u8], &[u8]) + Sync,
) {
    global_copier();
    let sizes = parallel_split(dst.len(), threads);
    std::thread::scope(|scope| {
        let work = &work;
        let mut dst = dst;
        let mut src = src;
        let mut mine = None;
        for (k, n) in sizes.into_iter().enumerate() {
            let (d, rest) = std::mem::take(&mut dst).split_at_mut(n);
            dst = rest;
            let s = match src {
                Some(all) => {
                    let (s, rest) = all.split_at(n);
                    src = Some(rest);
                    s
                }
                None => &[][..],
            };
            if k == 0 {
                mine = Some((d, s));
            } else {
                scope.spawn(move || work(d, s));
            }
        }
        if let Some((d, s)) = mine {
            work(d, s);
        }
    });
}

/// A copy routine a caller can choose where pagewise moves bytes for it (the
/// queue's appends and reads, the benchmarks' baselines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Routine {
    /// [`copy`]: this module's kernels.
    #[default]
    Pagewise,
    /// glibc's `memcpy`, called through a never-inlined function.
    Glibc,
}

impl Routine {
    /// Both routines, baseline first.
    pub const ALL: [Routine; 2] = [Routine::Glibc, Routine::Pagewise];

    /// `pagewise` or `glibc`.
    pub fn name(self) -> &'static str {
        match self {
            Routine::Pagewise => "pagewise",
            Routine::Glibc => "glibc",
        }
    }

    /// Does the routine's one-time set-up now (pagewise: detect the CPU and
    /// read the cache sizes, a few microseconds and some page faults), so
    /// that its first copy on a hot path does not pay for it, and returns
    /// [`Routine::function`].
    pub fn prepare(self) -> fn(&mut [u8], &[u8]) {
        if self == Routine::Pagewise {
            global_copier();
        }
        self.function()
    }

    /// The routine as a function of two equal-length slices (a longer side is
    /// cut to the shorter one's length). Costs one indirect call per use.
    pub fn function(self) -> fn(&mut [u8], &[u8]) {
        match self {
            Routine::Pagewise => copy_prefix,
            Routine::Glibc => crate::sys::copy::glibc_memcpy,
        }
    }

    /// Copies `dst.len()` bytes at `offset` of a shared file mapping into
    /// `dst` with this routine (one call of it); `false`, and nothing copied,
    /// when the range is not inside the mapping. For bytes a protocol has
    /// published and never writes again (the reader saw them committed with
    /// an acquire load), as the queue reader copies records out: bytes that
    /// another process writes during the call come out torn.
    #[inline]
    pub fn copy_out(
        self,
        map: &crate::sys::file_map::ReadMap,
        offset: usize,
        dst: &mut [u8],
    ) -> bool {
        map.copy_out_with(offset, dst, self.function())
    }
}

impl std::str::FromStr for Routine {
    type Err = String;

    fn from_str(s: &str) -> Result<Routine, String> {
        match s {
            "pagewise" => Ok(Routine::Pagewise),
            "glibc" => Ok(Routine::Glibc),
            _ => Err(format!(
                "unknown copy routine {s:?}: use `pagewise` or `glibc`"
            )),
        }
    }
}

/// [`copy`] of the common prefix, never inlined: the same contract as
/// [`crate::sys::copy::glibc_memcpy`], so the two can stand in for each other.
#[inline(never)]
pub(crate) fn copy_prefix(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let equal = copy(&mut dst[..n], &src[..n]);
    debug_assert!(equal.is_ok(), "both sides were cut to {n} bytes");
}

/// Changes the size from which [`copy`] and [`fill`] use non-temporal stores,
/// for the whole process (one size for both); `None` turns them off. Takes
/// effect for calls that start after it returns; overrides
/// `PAGEWISE_NT_THRESHOLD`.
pub fn set_nontemporal_threshold(bytes: Option<usize>) {
    global_copier().set_nontemporal_threshold(bytes);
}

impl Plan {
    /// The plan the free functions follow, with thresholds changed by
    /// [`set_nontemporal_threshold`] reflected (their source becomes
    /// [`Source::Api`]). The first call detects the plan (a few microseconds plus
    /// reading the cache sizes from sysfs).
    pub fn current() -> Plan {
        let g = global();
        let mut plan = g.plan.clone();
        let (copy, fill) = (PROCESS.copy.classes(), PROCESS.fill.classes());
        if (&copy, &fill) != (&plan.tables.copy, &plan.tables.fill) {
            plan.tables.copy = copy;
            plan.tables.fill = fill;
            plan.nontemporal_source = Source::Api;
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::Routine;

    #[test]
    fn the_free_functions_follow_the_process_copier() {
        use super::{global_copier, Plan, PROCESS};
        let plan = Plan::current();
        let global = global_copier();
        assert_eq!(
            global.nontemporal_thresholds(),
            (plan.copy_nontemporal(), plan.fill_nontemporal())
        );
        assert_eq!(PROCESS.copy.classes(), plan.tables.copy);
        // Once the plan is detected the fast path is on, whatever the
        // instruction set, and copies.
        let mut dst = [0u8; 40];
        let src: Vec<u8> = (1..=40).collect();
        assert!(crate::sys::copy::fast_copy(&mut dst, &src, &PROCESS.copy));
        assert_eq!(dst[..], src[..]);
        assert!(crate::sys::copy::fast_fill(&mut dst, 9, &PROCESS.fill));
        assert!(dst.iter().all(|&b| b == 9));
        // The process copier reads the statics (changing them is tested in
        // tests/copy.rs, outside this binary's other tests); a clone is a
        // snapshot with its own.
        let snapshot = global.clone();
        assert!(matches!(snapshot.sets, super::Sets::Own(_)));
        assert_eq!(
            snapshot.nontemporal_thresholds(),
            global.nontemporal_thresholds()
        );
    }

    #[test]
    fn routines_parse_by_name_and_copy_the_common_prefix() {
        for r in Routine::ALL {
            assert_eq!(r.name().parse::<Routine>(), Ok(r));
            let src: Vec<u8> = (0..=255).collect();
            let mut dst = vec![0u8; 300];
            r.function()(&mut dst, &src);
            assert_eq!(&dst[..256], &src[..], "{r:?}");
            assert!(
                dst[256..].iter().all(|&b| b == 0),
                "{r:?} wrote past the source"
            );
        }
        let err = "memcpy".parse::<Routine>().unwrap_err();
        assert!(err.contains("pagewise") && err.contains("glibc"), "{err}");
        assert_eq!(Routine::default(), Routine::Pagewise);
    }

    #[test]
    fn parallel_parts_cover_the_buffer_on_page_boundaries() {
        for (len, parts) in [
            (1 << 30, 2),
            ((1 << 30) + 4095, 2),
            ((16 << 20) + 1, 3),
            (4097, 4),
        ] {
            let sizes = super::parallel_split(len, parts);
            assert_eq!(sizes.iter().sum::<usize>(), len, "{len} in {parts}");
            assert!(sizes.len() <= parts, "{sizes:?}");
            let mut start = 0;
            for n in &sizes {
                assert!(start % 4096 == 0, "{sizes:?}");
                start += n;
            }
        }
    }
}
