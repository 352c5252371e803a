//! Copy and fill kernels behind a safe, checked interface.
//!
//! The kernels themselves (vector intrinsics, pointer arithmetic, `rep movsb`)
//! are in `x86`. This module hands them out only through [`Kernel`], which can
//! be built only for an instruction set the CPU has, and whose methods take
//! slices: `&mut [u8]` and `&[u8]` cannot overlap, and the length used is
//! checked against both. Which kernel to use at which size is decided above this
//! layer, in [`crate::copy`]; here the decision arrives as [`Thresholds`].
//!
//! It also wraps glibc's `memcpy` and `memset`, the baselines of
//! `pagewise bench memcpy` and `pagewise bench memset`.

pub mod streams;
#[cfg(target_arch = "x86_64")]
mod x86;

use serde::Serialize;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// An instruction set with its own copy and fill kernels.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// 16-byte SSE2 vectors (every x86-64 CPU).
    Sse2,
    /// 32-byte AVX2 vectors.
    Avx2,
    /// 64-byte AVX-512 vectors (AVX-512 Foundation and Byte/Word: the byte
    /// broadcast of `fill` needs BW; Vector Length, for the 32-byte moves in
    /// ymm16 and up; and BMI2, whose `bzhi` makes the masks of the small
    /// sizes).
    Avx512,
}

impl Isa {
    /// Every instruction set, narrowest first.
    pub const ALL: [Isa; 3] = [Isa::Sse2, Isa::Avx2, Isa::Avx512];

    /// Vector width in bytes.
    pub fn vector_bytes(self) -> usize {
        match self {
            Isa::Sse2 => 16,
            Isa::Avx2 => 32,
            Isa::Avx512 => 64,
        }
    }

    /// Largest size copied or filled by overlapping head and tail moves, with no
    /// loop (eight vectors).
    pub fn small_max(self) -> usize {
        8 * self.vector_bytes()
    }

    /// A non-zero code for the instruction set (0 means none), for atomics.
    pub const fn code(self) -> u8 {
        match self {
            Isa::Sse2 => 1,
            Isa::Avx2 => 2,
            Isa::Avx512 => 3,
        }
    }

    /// The instruction set of a [`Isa::code`]; `None` for 0 or an unknown
    /// code. (The fast path compares the code itself; this decodes the
    /// table's strategies, off the fast path.)
    pub fn from_code(code: u8) -> Option<Isa> {
        match code {
            1 => Some(Isa::Sse2),
            2 => Some(Isa::Avx2),
            3 => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// Lower-case name: `sse2`, `avx2`, `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Sse2 => "sse2",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Whether this CPU (and the OS, which must save the vector registers) supports it.
    pub fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Isa::Sse2 => true,
                Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
                Isa::Avx512 => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512bw")
                        && std::arch::is_x86_feature_detected!("avx512vl")
                        && std::arch::is_x86_feature_detected!("bmi2")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

/// How one size class of copies or fills is served above the loop-free sizes
/// ([`Isa::small_max`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// A vector loop of this instruction set with ordinary (temporal) stores.
    Loop {
        /// Its instruction set.
        isa: Isa,
    },
    /// `rep movsb` (copy) or `rep stosb` (fill).
    Rep,
    /// Non-temporal stores, `streams` 4 KiB pages side by side (a power of
    /// two from 1 to 64), then `sfence`.
    NonTemporal {
        /// Pages copied or filled side by side.
        streams: u8,
    },
    /// glibc's `memcpy` / `memset`.
    Glibc,
}

impl Strategy {
    /// Stream counts the non-temporal kernels take.
    pub const STREAMS: [u8; 7] = [1, 2, 4, 8, 16, 32, 64];

    /// Whether its stores bypass the cache.
    pub fn is_nontemporal(self) -> bool {
        matches!(self, Strategy::NonTemporal { .. })
    }

    /// Short name: `loop avx512`, `rep`, `nt 2`, `glibc`.
    pub fn label(self) -> String {
        match self {
            Strategy::Loop { isa } => format!("loop {}", isa.name()),
            Strategy::Rep => "rep".into(),
            Strategy::NonTemporal { streams } => format!("nt {streams}"),
            Strategy::Glibc => "glibc".into(),
        }
    }

    /// Whether this CPU can run it (the instruction set of a loop; `rep`
    /// runs everywhere, if slowly without ERMS).
    pub fn is_supported(self) -> bool {
        match self {
            Strategy::Loop { isa } => isa.is_supported(),
            Strategy::NonTemporal { streams } => Strategy::STREAMS.contains(&streams),
            Strategy::Rep | Strategy::Glibc => true,
        }
    }

    /// A non-zero code (0: unset), for atomics.
    fn code(self) -> u8 {
        match self {
            Strategy::Loop { isa } => 0x10 | isa.code(),
            Strategy::Rep => 0x20,
            Strategy::NonTemporal { streams } => 0x40 | streams.trailing_zeros() as u8,
            Strategy::Glibc => 0x80,
        }
    }
}

/// What a copy's or fill's pointers look like, for choosing its strategy:
/// the index into [`Class::by_placement`].
///
/// Copies are classed by the distance `d = (dst - src) mod 4096`: `Aligned`
/// when `d` is a multiple of 64 (every load and store can be aligned
/// together), `Near` when the destination is 1–63 bytes ahead (loads
/// falsely wait for the stores just made, and `rep movsb` has a slow mode
/// there on some CPUs), `Other` otherwise. Fills by the destination: `Aligned`
/// on a 64-byte boundary, `Other` not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Co-aligned (copy) or 64-byte aligned (fill).
    Aligned = 0,
    /// The destination 1–63 bytes ahead of the source modulo 4 KiB (copy only).
    Near = 1,
    /// Anything else.
    Other = 2,
}

impl Placement {
    /// Every placement, in index order.
    pub const ALL: [Placement; 3] = [Placement::Aligned, Placement::Near, Placement::Other];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Aligned => "aligned",
            Placement::Near => "near",
            Placement::Other => "other",
        }
    }

    /// The placement of a copy from `src` to `dst`.
    #[inline(always)]
    pub fn of_copy(dst: usize, src: usize) -> Placement {
        let d = dst.wrapping_sub(src) & 4095;
        if d & 63 == 0 {
            Placement::Aligned
        } else if d < 64 {
            Placement::Near
        } else {
            Placement::Other
        }
    }

    /// The placement of a fill of `dst`.
    #[inline(always)]
    pub fn of_fill(dst: usize) -> Placement {
        if dst & 63 == 0 {
            Placement::Aligned
        } else {
            Placement::Other
        }
    }
}

/// Sizes from `from` up to the next class's `from` and the strategy for each
/// [`Placement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Class {
    /// Smallest size of the class.
    pub from: usize,
    /// Strategy for each placement, indexed by [`Placement`] as `usize`.
    pub by_placement: [Strategy; 3],
}

/// `rep movsb` is avoided (the vector loop runs instead) when the destination
/// is `1..below` bytes ahead of the source modulo `span` and the size is
/// below `up_to`: its slow modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RepGuard {
    /// A power of two.
    pub span: usize,
    /// Distances `1..below` are avoided.
    pub below: usize,
    /// Only for sizes below this (`usize::MAX`: all).
    pub up_to: usize,
}

/// Most classes a [`Thresholds`] holds.
pub const MAX_CLASSES: usize = 16;
/// Most [`RepGuard`]s a [`Thresholds`] holds.
pub const MAX_GUARDS: usize = 2;

/// The strategy table one kind of call follows: size classes, each with a
/// strategy per [`Placement`], and the `rep movsb` guards.
///
/// The fields are atomics so that a shared `Thresholds` can be changed while
/// other threads copy (each call reads what it needs with relaxed loads: plain
/// moves on x86-64; a call racing with a change may see a mix of old and new
/// entries, each of which copies correctly), and so that kernels take them by
/// reference. Sizes above the loop-free range and below `inline_below` take
/// the kernel's own vector loop inline, after one load and one compare (no
/// placement check, no table walk); larger ones walk the table out of line.
#[derive(Debug)]
#[repr(C)]
pub struct Thresholds {
    /// `[from (aligned), from (near), from (other), to, mask, below - 1,
    /// mask, below - 1]`: sizes in `[from, to)` of their placement take `rep
    /// movsb` (`rep stosb`), and at most two guards (`span - 1` and `below -
    /// 1`; `0` and `usize::MAX` for none) apply to every size there. The
    /// kernels look here before they walk the table (see
    /// [`Thresholds::rep_direct`]); `to` is 0 when no class is `rep` at
    /// every placement. First: the table ends its page
    /// ([`ProcessPage`]), so the fields after it keep the page offsets they
    /// had before it was added (4K aliasing with the copies' own stores).
    rep_direct: [AtomicUsize; 8],
    /// AVX-512 copies of at most 32 bytes take scalar moves instead of one
    /// masked move when `(dst - src + 64) mod 4096` is below this (see
    /// [`Small`]): 0 never, 128 when the destination is within 64 bytes of
    /// the source modulo 4 KiB, `usize::MAX` always.
    small_scalar_below: AtomicUsize,
    /// The first size whose strategy is not the inline loop, at any placement.
    inline_below: AtomicUsize,
    /// Per placement, the first size whose strategy is not the inline loop:
    /// the AVX-512 kernel looks here, from `inline_below` up only, before it
    /// walks the table (so a class that differs at one placement does not
    /// send the others out of line).
    special_min: [AtomicUsize; 3],
    /// Class `i` covers `[from[i], from[i + 1])`; unused entries hold `usize::MAX`.
    from: [AtomicUsize; MAX_CLASSES],
    codes: [[AtomicU8; 3]; MAX_CLASSES],
    /// `[span, below, up_to]` of each guard; a span of 0 means none.
    guards: [[AtomicUsize; 3]; MAX_GUARDS],
    /// The loop runs backwards when `(dst - src) mod 4096` is below this.
    backward_below: AtomicUsize,
    /// The kernel [`fast_copy`] and [`fast_fill`] may run with these
    /// thresholds ([`Isa::code`]; 0: none): set only by
    /// [`enable_fast_path`], which needs a [`Kernel`] (the proof that the CPU
    /// has its instructions). Kept here, beside the values the kernels read,
    /// so the fast path needs one address.
    fast_isa: AtomicU8,
    /// How the AVX-512 kernel enters a copy for the [`Small`] choice: an
    /// [`Avx512Entry`] code (never 0).
    avx512_copy: AtomicUsize,
    /// `avx512_copy` once [`enable_fast_path`] allowed the AVX-512 kernel,
    /// 0 before: the fast path's first and, with AVX-512, only test (a
    /// compare chain on `fast_isa` put the AVX-512 case third, two
    /// branches more on every call).
    fast_avx512: AtomicUsize,
    /// The copy loop takes eight vectors per iteration from this size up
    /// (then at most one block of four), four below it ([`LoopBlock`]).
    wide_loop_from: AtomicUsize,
}

/// The thresholds of the four kinds of call of one copier. `copy` last and
/// `fill` before it: see [`ProcessPage`].
#[derive(Debug, Clone)]
#[repr(C)]
pub struct ThresholdSet {
    /// [`crate::copy::copy_temporal`]'s.
    pub copy_temporal: Thresholds,
    /// [`crate::copy::fill_temporal`]'s.
    pub fill_temporal: Thresholds,
    /// [`crate::copy::fill`]'s.
    pub fill: Thresholds,
    /// [`crate::copy::copy`]'s.
    pub copy: Thresholds,
}

impl ThresholdSet {
    /// Empty tables (the loop at every size), to be filled by the copy layer.
    pub const fn unset() -> ThresholdSet {
        ThresholdSet {
            copy_temporal: Thresholds::unset(),
            fill_temporal: Thresholds::unset(),
            fill: Thresholds::unset(),
            copy: Thresholds::unset(),
        }
    }
}

/// Bytes before the [`ThresholdSet`] in [`ProcessPage`].
const PROCESS_PAD: usize = 4096 - std::mem::size_of::<ThresholdSet>();

/// A 4 KiB page whose last bytes hold the process-wide [`ThresholdSet`].
///
/// Every copy and fill reads its thresholds, and a load waits for an
/// earlier store to an address with the same low 12 bits (4K aliasing)
/// until the store's whole address is known. Buffers very often start on a
/// page (mmap, large mallocs, huge pages), so a copy of `n` bytes from one
/// stores to page offsets `[0, n)`: thresholds at the end of a page stay out
/// of the way of every such copy up to about 3.7 KiB (`copy`'s) or 3.4 KiB
/// (`fill`'s). Measured on the Zen 5 guest in a C harness, a load at a page
/// offset the previous call had just stored to made a hot 512-byte copy 12%
/// slower.
#[repr(C, align(4096))]
pub struct ProcessPage {
    _before: [u8; PROCESS_PAD],
    /// The thresholds.
    pub set: ThresholdSet,
}

impl std::ops::Deref for ProcessPage {
    type Target = ThresholdSet;

    fn deref(&self) -> &ThresholdSet {
        &self.set
    }
}

/// The thresholds of the process-wide copier (set when it is built), which
/// the free functions of [`crate::copy`] read. Here, in the sys layer, so
/// that the process entry of large copies ([`copy_process_large`]) reads it
/// at a fixed address, without the load of its address from the GOT that
/// every other crate's code needs; at the end of its page ([`ProcessPage`]).
pub static PROCESS: ProcessPage = ProcessPage {
    _before: [0; PROCESS_PAD],
    set: ThresholdSet::unset(),
};

/// Copies `src` into `dst` with the process-wide copier when they hold more
/// than [`PROCESS_LARGE_ABOVE`] bytes (`min` of the two lengths) and returns
/// `Some(0)`; returns `None` and does nothing for smaller sizes. On the first
/// copy of the process, before the copier exists, calls `prepare` (which
/// must build it) and copies with whatever fast path that enabled.
///
/// Costs a compare, then a jump to an entry that reads [`PROCESS`] at a
/// fixed address and jumps straight to the kernel of this CPU: measured on
/// the Zen 5 guest, the inline fast path's loads of the thresholds' address
/// (from the GOT, in every crate but this one) and of its entry pointer,
/// then a jump through that pointer, made a hot 512-byte copy 12-15%
/// slower than the kernel called directly. The 0 comes back from the
/// kernel, so a caller that returns it (`pw_copy`) can end in a jump too.
#[inline(always)]
pub fn copy_process_large(
    dst: &mut [u8],
    src: &[u8],
    prepare: extern "sysv64-unwind" fn(),
) -> Option<u32> {
    let n = dst.len().min(src.len());
    if n <= PROCESS_LARGE_ABOVE {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: both slices hold at least n > 256 bytes and cannot overlap
        // (one is borrowed mutably); the entry checks which kernel the CPU
        // was proven to have before it jumps to one.
        Some(unsafe {
            x86::avx512_leaf::copy_process_large(dst.as_mut_ptr(), src.as_ptr(), n, prepare)
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = prepare;
        None
    }
}

/// Above this many bytes [`copy_process_large`] takes a copy.
pub const PROCESS_LARGE_ABOVE: usize = 256;

/// The first copy of the process through [`copy_process_large`]: builds the
/// copier with `prepare`, then copies with the fast path it enabled (SSE2's
/// kernel, part of x86-64, if it enabled none). Returns 0, as the kernels.
///
/// # Safety
/// As the kernels: `dst` valid for `n` writes, `src` for `n` reads, no overlap.
#[cfg(target_arch = "x86_64")]
unsafe extern "sysv64-unwind" fn copy_process_first(
    dst: *mut u8,
    src: *const u8,
    n: usize,
    prepare: extern "sysv64-unwind" fn(),
) -> u32 {
    prepare();
    // SAFETY: passed on from the caller (the entry got them from two slices).
    let (d, s) = unsafe {
        (
            std::slice::from_raw_parts_mut(dst, n),
            std::slice::from_raw_parts(src, n),
        )
    };
    if !fast_copy(d, s, &PROCESS.copy) {
        // SAFETY: SSE2 is part of x86-64.
        unsafe { copy_with(Isa::Sse2, d, s, &PROCESS.copy) }
    }
    0
}

/// How the AVX-512 kernel enters a copy, as `Thresholds::avx512_copy`
/// holds it (non-zero: 0 in `fast_avx512` means the fast path is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
enum Avx512Entry {
    /// Every size through `x86::avx512_leaf::copy_guarded` (but 0 bytes,
    /// inline: the code is also the size the inline path starts to leave).
    Guarded = 1,
    /// Up to 128 bytes inline in the caller ([`Small::Masked`]), larger
    /// sizes straight to `x86::avx512_leaf::copy_129_512`. The code is the
    /// first size that leaves the inline path, so that one compare of the
    /// size against it decides (the test `entry == InlineSmall && n <= 128`
    /// took five instructions more).
    InlineSmall = 129,
}

impl Avx512Entry {
    /// The entry for `small`.
    const fn of(small: Small) -> Avx512Entry {
        match small {
            Small::Masked => Avx512Entry::InlineSmall,
            Small::MaskedGuarded | Small::Plain => Avx512Entry::Guarded,
        }
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const UNSET: AtomicUsize = AtomicUsize::new(usize::MAX);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NO_CODE: [AtomicU8; 3] = [AtomicU8::new(0), AtomicU8::new(0), AtomicU8::new(0)];
#[allow(clippy::declare_interior_mutable_const)]
const NO_GUARD: [AtomicUsize; 3] = [ZERO, ZERO, ZERO];

impl Thresholds {
    /// An empty table: every size takes the kernel's own loop. Fill it with
    /// [`Thresholds::assign`].
    pub const fn unset() -> Thresholds {
        Thresholds {
            small_scalar_below: AtomicUsize::new(Small::MaskedGuarded.scalar_below()),
            inline_below: UNSET,
            special_min: [UNSET; 3],
            from: [UNSET; MAX_CLASSES],
            codes: [NO_CODE; MAX_CLASSES],
            guards: [NO_GUARD; MAX_GUARDS],
            backward_below: AtomicUsize::new(DEFAULT_BACKWARD_BELOW),
            fast_isa: AtomicU8::new(0),
            avx512_copy: AtomicUsize::new(Avx512Entry::of(Small::MaskedGuarded) as usize),
            fast_avx512: AtomicUsize::new(0),
            wide_loop_from: AtomicUsize::new(LoopBlock::Eight.wide_from()),
            rep_direct: [ZERO, ZERO, ZERO, ZERO, ZERO, UNSET, ZERO, UNSET],
        }
    }

    /// A table with `classes` and `guards` (see [`Thresholds::assign`]).
    pub fn new(classes: &[Class], guards: &[RepGuard]) -> Thresholds {
        let t = Thresholds::unset();
        t.assign(classes, guards);
        t
    }

    /// Sets the table: `classes` sorted by `from`, the first from 0 (at most
    /// [`MAX_CLASSES`]; further ones are dropped), and the `rep movsb` guards
    /// (at most [`MAX_GUARDS`]). A strategy this CPU cannot run is replaced by
    /// the SSE2 loop (callers check first; this keeps the kernels sound). The
    /// inline loop serves the sizes before the first class whose strategy, at
    /// any placement, differs from the first class's loop. The backward-loop
    /// tuning and the small-size choice are kept.
    pub fn assign(&self, classes: &[Class], guards: &[RepGuard]) {
        let classes = &classes[..classes.len().min(MAX_CLASSES)];
        let inline = classes.first().map(|c| c.by_placement);
        let mut special = [usize::MAX; 3];
        for (i, slot) in self.from.iter().enumerate() {
            let Some(c) = classes.get(i) else {
                slot.store(usize::MAX, Ordering::Relaxed);
                continue;
            };
            for p in 0..3 {
                let mut s = c.by_placement[p];
                if !s.is_supported() {
                    s = Strategy::Loop { isa: Isa::Sse2 };
                }
                self.codes[i][p].store(s.code(), Ordering::Relaxed);
                let is_inline =
                    matches!(s, Strategy::Loop { .. }) && inline.is_some_and(|first| first[p] == s);
                if !is_inline && special[p] == usize::MAX {
                    special[p] = if i == 0 { 0 } else { c.from };
                }
            }
            slot.store(if i == 0 { 0 } else { c.from }, Ordering::Relaxed);
        }
        for (g, slot) in self.guards.iter().enumerate() {
            let v = guards
                .get(g)
                .filter(|g| g.span.is_power_of_two())
                .map_or([0, 0, 0], |g| [g.span, g.below, g.up_to]);
            for k in 0..3 {
                slot[k].store(v[k], Ordering::Relaxed);
            }
        }
        for (slot, value) in self.special_min.iter().zip(special) {
            slot.store(value, Ordering::Relaxed);
        }
        let first = special.into_iter().min().unwrap_or(usize::MAX);
        self.inline_below.store(first, Ordering::Relaxed);
        for (slot, value) in self
            .rep_direct
            .iter()
            .zip(rep_direct_window(classes, &self.guards()))
        {
            slot.store(value, Ordering::Relaxed);
        }
    }

    /// How AVX-512 copies of at most 32 bytes are done (other instruction
    /// sets ignore it). An empty table ([`Thresholds::unset`]) holds
    /// [`Small::MaskedGuarded`] until a plan sets its own.
    pub fn set_small(&self, small: Small) {
        self.small_scalar_below
            .store(small.scalar_below(), Ordering::Relaxed);
        let entry = Avx512Entry::of(small) as usize;
        self.avx512_copy.store(entry, Ordering::Relaxed);
        // Only a fast path already allowed the AVX-512 kernel follows.
        let _ = self
            .fast_avx512
            .fetch_update(Ordering::Release, Ordering::Relaxed, |e| {
                (e != 0).then_some(entry)
            });
    }

    /// Sets how many vectors the copy loop moves per iteration. One store.
    pub fn set_loop_block(&self, block: LoopBlock) {
        self.wide_loop_from
            .store(block.wide_from(), Ordering::Relaxed);
    }

    /// See [`Thresholds::set_loop_block`].
    pub fn loop_block(&self) -> LoopBlock {
        LoopBlock::of_wide_from(self.wide_loop_from())
    }

    /// Copies of at least this many bytes take the eight-vector loop.
    #[inline(always)]
    pub(super) fn wide_loop_from(&self) -> usize {
        self.wide_loop_from.load(Ordering::Relaxed)
    }

    /// See [`Thresholds::set_small`].
    pub fn small(&self) -> Small {
        Small::of_scalar_below(self.small_scalar_below.load(Ordering::Relaxed))
    }

    /// The table as assigned (unsupported strategies as replaced).
    pub fn classes(&self) -> Vec<Class> {
        let mut out = Vec::new();
        for i in 0..MAX_CLASSES {
            let from = self.from[i].load(Ordering::Relaxed);
            if from == usize::MAX {
                break;
            }
            let by = [0, 1, 2].map(|p| decode(self.codes[i][p].load(Ordering::Relaxed)));
            out.push(Class {
                from,
                by_placement: by,
            });
        }
        out
    }

    /// The `rep movsb` guards in force.
    pub fn guards(&self) -> Vec<RepGuard> {
        self.guards
            .iter()
            .map(|g| [0, 1, 2].map(|k| g[k].load(Ordering::Relaxed)))
            .filter(|g| g[0] != 0)
            .map(|[span, below, up_to]| RepGuard { span, below, up_to })
            .collect()
    }

    /// The copy loop runs backwards when the destination is less than
    /// `bytes` ahead of the source modulo 4 KiB (0: never). Default
    /// [`DEFAULT_BACKWARD_BELOW`].
    pub fn set_backward_below(&self, bytes: usize) {
        self.backward_below.store(bytes, Ordering::Relaxed);
    }

    /// See [`Thresholds::set_backward_below`].
    #[inline(always)]
    pub fn backward_below(&self) -> usize {
        self.backward_below.load(Ordering::Relaxed)
    }

    /// Sizes below this take the kernel's own loop inline (one load: no
    /// placement check and no table walk below the first special class).
    #[inline(always)]
    fn inline_below(&self) -> usize {
        self.inline_below.load(Ordering::Relaxed)
    }

    /// The first size whose strategy at placement `p` is not the inline loop.
    #[inline(always)]
    fn special_min(&self, p: Placement) -> usize {
        self.special_min[p as usize].load(Ordering::Relaxed)
    }

    /// The strategy for `n` bytes at placement `p` (a table walk; `None` when
    /// the table is empty).
    #[inline(always)]
    fn strategy(&self, n: usize, p: Placement) -> Option<Strategy> {
        let mut code = 0;
        for i in 0..MAX_CLASSES {
            if self.from[i].load(Ordering::Relaxed) > n {
                break;
            }
            code = self.codes[i][p as usize].load(Ordering::Relaxed);
        }
        decode_opt(code)
    }

    /// Whether `n` bytes from `src` to `dst` at placement `p` take `rep
    /// movsb` with no table walk: `n` in the first class that is `rep` at
    /// every placement, or in the classes just before it that are `rep` at
    /// `p`, and no guard against these pointers (a fill passes `dst` as
    /// `src`: a distance of 0 is never guarded). Seven loads from one or
    /// two lines and a few compares. Why: the walk and the guards' loads and branches just
    /// before `rep movsb` cost 3-4 ns a call (AVX2 pinned on an Emerald
    /// Rapids guest, hot aligned copies through `pw_copy` in a C loop: 8 KiB
    /// 42.8 ns against 39.0 ns for a `rep movsb` straight after the loop's
    /// size test, plain `rep movsb` 37.6 ns).
    #[inline(always)]
    fn rep_direct(&self, dst: *mut u8, src: *const u8, n: usize, p: Placement) -> bool {
        let w = &self.rep_direct;
        let (from, to) = (
            w[p as usize].load(Ordering::Relaxed),
            w[3].load(Ordering::Relaxed),
        );
        let (mask0, below0) = (w[4].load(Ordering::Relaxed), w[5].load(Ordering::Relaxed));
        let (mask1, below1) = (w[6].load(Ordering::Relaxed), w[7].load(Ordering::Relaxed));
        let ahead = (dst as usize).wrapping_sub(src as usize);
        // A guard holds off `rep movsb` at distances 1..below: `a - 1` below
        // `below - 1`; a distance of 0 wraps to the largest value.
        let free0 = (ahead & mask0).wrapping_sub(1) >= below0;
        let free1 = (ahead & mask1).wrapping_sub(1) >= below1;
        n >= from && n < to && free0 & free1
    }

    /// Whether a `rep movsb` guard says to avoid it for these pointers and size.
    #[inline(always)]
    fn rep_guarded(&self, dst: *mut u8, src: *const u8, n: usize) -> bool {
        self.guards.iter().any(|g| {
            let span = g[0].load(Ordering::Relaxed);
            span != 0 && n < g[2].load(Ordering::Relaxed) && {
                let ahead = (dst as usize).wrapping_sub(src as usize) & (span - 1);
                ahead != 0 && ahead < g[1].load(Ordering::Relaxed)
            }
        })
    }
}

/// The `rep_direct` words of a table (see [`Thresholds::rep_direct`]): the
/// first class that is `rep` at every placement, reaching back at each
/// placement over the classes before it that are `rep` there, cut where a
/// guard stops applying so that every guard left applies to the whole
/// window; empty when there is no such class or more than [`MAX_GUARDS`]
/// would apply.
fn rep_direct_window(classes: &[Class], guards: &[RepGuard]) -> [usize; 8] {
    const EMPTY: [usize; 8] = [0, 0, 0, 0, 0, usize::MAX, 0, usize::MAX];
    let start = |i: usize| if i == 0 { 0 } else { classes[i].from };
    let Some(i) = classes
        .iter()
        .position(|c| c.by_placement.iter().all(|s| *s == Strategy::Rep))
    else {
        return EMPTY;
    };
    let mut from = [start(i); 3];
    for (p, f) in from.iter_mut().enumerate() {
        for j in (0..i).rev() {
            if classes[j].by_placement[p] != Strategy::Rep {
                break;
            }
            *f = start(j);
        }
    }
    let lowest = from.into_iter().min().unwrap_or(0);
    let mut to = classes.get(i + 1).map_or(usize::MAX, |c| c.from);
    let active: Vec<&RepGuard> = guards.iter().filter(|g| g.up_to > lowest).collect();
    for g in &active {
        to = to.min(g.up_to);
    }
    if active.len() > MAX_GUARDS || from.iter().any(|&f| f >= to) {
        return EMPTY;
    }
    let mut out = [from[0], from[1], from[2], to, 0, usize::MAX, 0, usize::MAX];
    for (k, g) in active.iter().enumerate() {
        out[4 + 2 * k] = g.span - 1;
        out[5 + 2 * k] = g.below.wrapping_sub(1);
    }
    out
}

fn decode_opt(code: u8) -> Option<Strategy> {
    match code {
        0x11..=0x13 => Isa::from_code(code & 0xf).map(|isa| Strategy::Loop { isa }),
        0x20 => Some(Strategy::Rep),
        0x40..=0x46 => Some(Strategy::NonTemporal {
            streams: 1 << (code & 0xf),
        }),
        0x80 => Some(Strategy::Glibc),
        _ => None,
    }
}

fn decode(code: u8) -> Strategy {
    decode_opt(code).unwrap_or(Strategy::Loop { isa: Isa::Sse2 })
}

/// A copy of the values; the fast-path permission ([`enable_fast_path`]) is not copied.
impl Clone for Thresholds {
    fn clone(&self) -> Thresholds {
        let t = Thresholds::new(&self.classes(), &self.guards());
        t.set_backward_below(self.backward_below());
        t.set_small(self.small());
        t.set_loop_block(self.loop_block());
        t
    }
}

/// The copy loop runs backwards when the destination is less than this many
/// bytes ahead of the source modulo 4 KiB, the same offset included (measured:
/// 5–20% faster there for L1-resident sizes); forwards, its loads would wait on
/// the stores it has just made to addresses with the same low 12 bits (4K
/// aliasing).
pub const DEFAULT_BACKWARD_BELOW: usize = 2048;

/// How many vectors the copy loop (513 B up to the first class that is not
/// the loop) moves per iteration. Machine-dependent: on the Zen 5 guest four
/// copied 1 KiB aligned at 1.04 of glibc against 0.93-0.94 for eight; on the
/// machine of 2026-11-21 eight took 1 KiB from 0.90 to 0.97. `pagewise tune`
/// measures both; without a measurement, eight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopBlock {
    /// Eight vectors per iteration, then at most one block of four.
    #[default]
    Eight,
    /// Four vectors per iteration.
    Four,
}

impl LoopBlock {
    /// Every choice.
    pub const ALL: [LoopBlock; 2] = [LoopBlock::Eight, LoopBlock::Four];

    /// The value of [`Thresholds`]' `wide_loop_from` for this choice.
    const fn wide_from(self) -> usize {
        match self {
            LoopBlock::Eight => 0,
            LoopBlock::Four => usize::MAX,
        }
    }

    fn of_wide_from(v: usize) -> LoopBlock {
        if v == usize::MAX {
            LoopBlock::Four
        } else {
            LoopBlock::Eight
        }
    }

    /// Lower-case name: `eight`, `four`.
    pub fn name(self) -> &'static str {
        match self {
            LoopBlock::Eight => "eight",
            LoopBlock::Four => "four",
        }
    }
}

/// How the AVX-512 kernel copies its smallest sizes (fills below 64 bytes
/// always take one masked store: they load nothing, so nothing can alias).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Small {
    /// Inline in the caller, with no call: up to 32 bytes one masked 32-byte
    /// load and store at any distance between the pointers, 33-63 two
    /// 32-byte moves, 64-128 two 64-byte moves. Measured on the Zen 5 guest:
    /// a masked load is no slower there when the destination is a few bytes
    /// from the source modulo 4 KiB; on an Emerald Rapids guest the 4K
    /// aliasing [`Small::MaskedGuarded`] avoids cost less than its call
    /// (`pagewise tune`'s small cases: worst ratio to glibc 1.14 against 0.67).
    /// Every CPU's default.
    Masked,
    /// In the kernel's leaf: up to 32 bytes one masked 64-byte move, except
    /// when the destination is within 64 bytes of the source modulo 4 KiB,
    /// where scalar and 16-byte moves run (on Intel a masked load waits for
    /// an earlier store to the same low 12 address bits to complete); 33-63
    /// two 32-byte moves.
    MaskedGuarded,
    /// As [`Small::MaskedGuarded`], with scalar and 16-byte moves (a branch
    /// per size range) at every distance.
    Plain,
}

impl Small {
    /// Every choice.
    pub const ALL: [Small; 3] = [Small::Masked, Small::MaskedGuarded, Small::Plain];

    /// The value of [`Thresholds`]' `small_scalar_below` for this choice.
    const fn scalar_below(self) -> usize {
        match self {
            Small::Masked => 0,
            Small::MaskedGuarded => 128,
            Small::Plain => usize::MAX,
        }
    }

    fn of_scalar_below(v: usize) -> Small {
        match v {
            0 => Small::Masked,
            usize::MAX => Small::Plain,
            _ => Small::MaskedGuarded,
        }
    }

    /// Lower-case name: `masked`, `masked_guarded`, `plain`.
    pub fn name(self) -> &'static str {
        match self {
            Small::Masked => "masked",
            Small::MaskedGuarded => "masked_guarded",
            Small::Plain => "plain",
        }
    }
}

/// Lets [`fast_copy`] and [`fast_fill`] run `kernel` with `t`. Call it after
/// `t` holds its values.
pub fn enable_fast_path(kernel: Kernel, t: &Thresholds) {
    t.fast_isa.store(kernel.isa.code(), Ordering::Release);
    if kernel.isa == Isa::Avx512 {
        t.fast_avx512
            .store(t.avx512_copy.load(Ordering::Relaxed), Ordering::Release);
    }
}

/// Copies `src` into `dst` (`min` of the lengths) with the kernel allowed for
/// `t` ([`enable_fast_path`]) and returns `true`; returns `false` and does
/// nothing if none is. Always inlined: one load and a few compares, then
/// what [`Kernel::copy`] does.
#[inline(always)]
pub fn fast_copy(dst: &mut [u8], src: &[u8], t: &Thresholds) -> bool {
    let entry = t.fast_avx512.load(Ordering::Acquire);
    if entry != 0 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: only `enable_fast_path` and `set_small` store a
            // non-zero code here, an `Avx512Entry`, and only after a
            // `Kernel` proved the CPU has AVX-512.
            unsafe { avx512_copy(dst, src, t, entry) };
            return true;
        }
    }
    // SAFETY: only `enable_fast_path` stores a code, and only the code of a
    // `Kernel`, which proves the CPU has that instruction set.
    unsafe { narrow_copy(dst, src, t, || t.fast_isa.load(Ordering::Acquire)) }
}

/// Copies without AVX-512 (the fast path, and [`Kernel::copy`] for AVX2
/// and SSE2): up to 32 bytes in place with plain and 16-byte moves, which
/// need no instruction set and no plan; larger sizes a jump to the kernel of
/// the instruction set `code()` gives (an [`Isa::code`]; AVX2's tested
/// first; read only for those sizes), except that without AVX2 up to 64
/// bytes stay in place (four 16-byte moves). Returns `false`, having done
/// nothing, when that code is neither AVX2's nor SSE2's (no fast path yet).
///
/// With AVX2, 33-64 bytes are the kernel's two 32-byte moves: the four
/// 16-byte moves in place, three taken jumps from the entry, ran those
/// copies at 0.90-0.95 of glibc's two 32-byte moves, the kernel at
/// 1.13-1.24 (AVX2 pinned on both sides on an Emerald Rapids guest,
/// 2026-12-04; docs/copy.md).
///
/// Each size is a compare or two from the entry. The path this replaced
/// tested the instruction set (a chain of compares), then the size
/// (another), then the instruction set again: six taken branches on the
/// way to a 33-byte copy, which ran at 0.70 of glibc's with AVX2 on both
/// sides (see docs/copy.md).
///
/// # Safety
/// `code()` is 0 or the code of an instruction set this CPU has.
#[inline(always)]
unsafe fn narrow_copy(
    dst: &mut [u8],
    src: &[u8],
    t: &Thresholds,
    code: impl FnOnce() -> u8,
) -> bool {
    let n = dst.len().min(src.len());
    if n <= 32 {
        return copy_small(dst, src);
    }
    let code = code();
    #[cfg(target_arch = "x86_64")]
    {
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        // SAFETY (both calls): the caller guarantees the CPU has the
        // instruction set of `code`; both slices hold n > 32 bytes (n > 64
        // for SSE2's) and cannot overlap (one is borrowed mutably).
        if code == Isa::Avx2.code() {
            unsafe { x86::avx2::copy_gt16(d, s, n, t) };
            return true;
        }
        if n <= 64 {
            return copy_small(dst, src);
        }
        if code == Isa::Sse2.code() {
            unsafe { x86::sse2::copy_gt16(d, s, n, t) };
            return true;
        }
    }
    // AVX-512 takes `fast_avx512`; anything else means no fast path yet.
    let _ = code;
    false
}

/// Fills `dst` as [`fast_copy`] copies.
#[inline(always)]
pub fn fast_fill(dst: &mut [u8], byte: u8, t: &Thresholds) -> bool {
    if t.fast_avx512.load(Ordering::Acquire) != 0 {
        #[cfg(target_arch = "x86_64")]
        {
            // Not inline, unlike copies: measured on the Zen 5 guest, a fill
            // of up to 128 bytes inline in the caller ran at 0.87-0.90 of
            // glibc's, through the leaf at 1.00.
            // SAFETY: as in `fast_copy` (AVX-512 is allowed); dst holds its
            // length.
            unsafe { x86::avx512_leaf::fill(dst.as_mut_ptr(), byte, dst.len(), t) };
            return true;
        }
    }
    // SAFETY: as in `fast_copy`.
    unsafe { narrow_fill(dst, byte, t, || t.fast_isa.load(Ordering::Acquire)) }
}

/// Fills without AVX-512, as [`narrow_copy`] copies: up to 128 bytes in
/// place, larger sizes a jump to the kernel of `code()`'s instruction set.
///
/// # Safety
/// As [`narrow_copy`].
#[inline(always)]
unsafe fn narrow_fill(dst: &mut [u8], byte: u8, t: &Thresholds, code: impl FnOnce() -> u8) -> bool {
    let (d, n) = (dst.as_mut_ptr(), dst.len());
    if n <= 128 {
        return fill_small(dst, byte);
    }
    let code = code();
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (both calls): as in `narrow_copy`; dst holds n > 128 bytes.
        if code == Isa::Avx2.code() {
            unsafe { x86::avx2::fill_gt16(d, byte, n, t) };
            return true;
        }
        if code == Isa::Sse2.code() {
            unsafe { x86::sse2::fill_gt16(d, byte, n, t) };
            return true;
        }
    }
    let _ = code;
    false
}

/// Copies with the AVX-512 kernel entered as `entry` (an [`Avx512Entry`]
/// code) says: up to 128 bytes inline with [`Avx512Entry::InlineSmall`],
/// otherwise a direct call of the leaf. The fast path and [`Kernel::copy`]
/// both come here, so the tests of copiers cover the fast path's code.
///
/// # Safety
/// The CPU has AVX-512 F, BW, VL and BMI2; `entry` is an [`Avx512Entry`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn avx512_copy(dst: &mut [u8], src: &[u8], t: &Thresholds, entry: usize) {
    let n = dst.len().min(src.len());
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    // Each inline size class is at most one taken jump from the entry:
    // 64-128 B falls through, 33-63 B and up to 32 B take one jump each.
    // LLVM lets the first case of an `if` fall through, so without the
    // hint the smallest sizes took none and 64-128 B took two, which cost
    // those copies 2 cycles (0.67 ns) in a C replica of this dispatch on an
    // Emerald Rapids guest and left them at 0.86-0.97x glibc in `bench
    // memcpy`, where up to 32 B had 1.27-2.0x to spare (docs/copy.md).
    // SAFETY (all five calls): AVX-512 as the caller guarantees; both slices
    // hold n bytes and cannot overlap (one is borrowed mutably); each inline
    // copy gets the sizes it needs (n < entry <= 129); `copy_129_512` is
    // called only for n > 128 as it needs, `copy_guarded` takes any size.
    unsafe {
        if n < entry {
            if n <= 32 {
                // Not rare: a layout hint only (out of line, one jump).
                std::hint::cold_path();
                x86::copy_masked_le32(d, s, n);
            } else if n >= 64 {
                x86::copy_64_128_inline(d, s, n);
            } else {
                x86::copy_32_64_inline(d, s, n);
            }
        } else if entry == Avx512Entry::InlineSmall as usize {
            // Direct calls, not a call through a stored pointer: measured on
            // the Zen 5 guest, the indirect jump cost a 512-byte copy 15% (a
            // replica of the leaf in a C harness: 243 GB/s called directly,
            // 208 through a pointer; glibc 188).
            x86::avx512_leaf::copy_129_512(d, s, n, t);
        } else {
            x86::avx512_leaf::copy_guarded(d, s, n, t);
        }
    }
}

/// Copies `min(dst.len(), src.len())` bytes with `isa`'s kernels: with
/// AVX-512 a direct call of its kernel (sizes up to 512 bytes are a leaf
/// there, laid out by hand); with AVX2 or SSE2, [`narrow_copy`]: sizes up
/// to 32 bytes (64 with SSE2) in place and a direct call for larger ones.
///
/// # Safety
/// The CPU must support `isa` (as a [`Kernel`] for it proves).
#[inline(always)]
unsafe fn copy_with(isa: Isa, dst: &mut [u8], src: &[u8], t: &Thresholds) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the caller guarantees `isa`; `avx512_copy` only ever
        // holds an `Avx512Entry`; without AVX-512 the narrow path runs
        // `isa`'s kernel (it has one, so it copies).
        unsafe {
            if isa == Isa::Avx512 {
                avx512_copy(dst, src, t, t.avx512_copy.load(Ordering::Relaxed));
            } else {
                narrow_copy(dst, src, t, || isa.code());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, t);
        let n = dst.len().min(src.len());
        dst[..n].copy_from_slice(&src[..n]);
    }
}

/// Fills `dst` with `isa`'s kernels, as [`copy_with`] copies (in place up to
/// 128 bytes for AVX2 and SSE2).
///
/// # Safety
/// The CPU must support `isa`.
#[inline(always)]
unsafe fn fill_with(isa: Isa, dst: &mut [u8], byte: u8, t: &Thresholds) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as in `copy_with`; dst holds its length.
        unsafe {
            if isa == Isa::Avx512 {
                x86::avx512_leaf::fill(dst.as_mut_ptr(), byte, dst.len(), t);
            } else {
                narrow_fill(dst, byte, t, || isa.code());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, t);
        dst.fill(byte);
    }
}

/// The copy and fill kernels of one instruction set that this CPU supports.
///
/// Only [`Kernel::new`] makes one, after checking the CPU, so holding a
/// `Kernel` proves its instructions can run. Calls dispatch with a `match` on
/// the instruction set (a well-predicted branch and a direct call, cheaper than
/// a call through a function pointer). How the AVX-512 kernel does its
/// smallest copies is part of the [`Thresholds`] ([`Thresholds::set_small`]),
/// so that every choice runs the same code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    isa: Isa,
}

impl Kernel {
    /// The kernels for `isa`, or `None` when this CPU lacks it. Costs a cached
    /// feature lookup.
    pub fn new(isa: Isa) -> Option<Kernel> {
        isa.is_supported().then_some(Kernel { isa })
    }

    /// The instruction set.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Copies `src` into `dst`; copies `min(dst.len(), src.len())` bytes (callers
    /// check that the lengths are equal). With AVX-512 a direct call of its
    /// kernel (sizes up to 512 bytes are a leaf there); with AVX2 or SSE2,
    /// sizes up to 32 bytes (64 with SSE2) in place and a direct call for
    /// larger ones.
    #[inline]
    pub fn copy(&self, dst: &mut [u8], src: &[u8], t: &Thresholds) {
        // SAFETY: a `Kernel` exists only for an instruction set the CPU has.
        unsafe { copy_with(self.isa, dst, src, t) }
    }

    /// Sets every byte of `dst` to `byte`, as [`Kernel::copy`] copies (with
    /// AVX-512, sizes below 64 bytes take one masked store and no
    /// size-dependent branch; otherwise sizes up to 128 bytes in place).
    #[inline]
    pub fn fill(&self, dst: &mut [u8], byte: u8, t: &Thresholds) {
        // SAFETY: as in `copy`.
        unsafe { fill_with(self.isa, dst, byte, t) }
    }
}

/// Runs the vector loop of `isa` for `n > 8 W` bytes (`W` its width): the
/// table's out-of-line path reaches loops of other widths through it.
///
/// # Safety
/// As the `x86` kernels: `dst`/`src` valid for `n` bytes, not overlapping, and
/// the CPU has `isa` ([`Thresholds::assign`] stores only supported loops).
#[cfg(target_arch = "x86_64")]
unsafe fn copy_loop_of(isa: Isa, dst: *mut u8, src: *const u8, n: usize, t: &Thresholds) {
    // SAFETY: passed on from the caller.
    unsafe {
        match isa {
            Isa::Avx512 => x86::avx512::copy_loop_entry(dst, src, n, t),
            Isa::Avx2 => x86::avx2::copy_loop_entry(dst, src, n, t),
            Isa::Sse2 => x86::sse2::copy_loop_entry(dst, src, n, t),
        }
    }
}

/// As [`copy_loop_of`], for fills.
///
/// # Safety
/// As [`copy_loop_of`].
#[cfg(target_arch = "x86_64")]
unsafe fn fill_loop_of(isa: Isa, dst: *mut u8, byte: u8, n: usize) {
    // SAFETY: passed on from the caller.
    unsafe {
        match isa {
            Isa::Avx512 => x86::avx512::fill_loop_entry(dst, byte, n),
            Isa::Avx2 => x86::avx2::fill_loop_entry(dst, byte, n),
            Isa::Sse2 => x86::sse2::fill_loop_entry(dst, byte, n),
        }
    }
}

/// Copies `src` into `dst` when they hold at most 64 bytes (`min` of the two
/// lengths), without a loop, and returns `true`; returns `false` and does
/// nothing for larger sizes.
#[inline(always)]
fn copy_small(dst: &mut [u8], src: &[u8]) -> bool {
    let n = dst.len().min(src.len());
    #[cfg(target_arch = "x86_64")]
    {
        if n <= 16 {
            // SAFETY: both slices hold at least n bytes and cannot overlap; n <= 16.
            unsafe { x86::copy_le16(dst.as_mut_ptr(), src.as_ptr(), n) };
            return true;
        }
        if n <= 32 {
            // SAFETY: as above, with 16 < n <= 32 (SSE2 is part of x86-64).
            unsafe { x86::copy_16_32(dst.as_mut_ptr(), src.as_ptr(), n) };
            return true;
        }
        if n <= 64 {
            // SAFETY: as above, with 32 < n <= 64 (SSE2 is part of x86-64).
            unsafe { x86::copy_32_64_sse2(dst.as_mut_ptr(), src.as_ptr(), n) };
            return true;
        }
    }
    let _ = n;
    false
}

/// Fills `dst` when it holds at most 128 bytes, without a loop, and returns
/// `true`; returns `false` and does nothing for larger sizes.
#[inline(always)]
fn fill_small(dst: &mut [u8], byte: u8) -> bool {
    let n = dst.len();
    #[cfg(target_arch = "x86_64")]
    {
        if n <= 16 {
            // SAFETY: dst holds n <= 16 bytes.
            unsafe { x86::fill_le16(dst.as_mut_ptr(), byte, n) };
            return true;
        }
        if n <= 32 {
            // SAFETY: dst holds 16 < n <= 32 bytes (SSE2 is part of x86-64).
            unsafe { x86::fill_16_32(dst.as_mut_ptr(), byte, n) };
            return true;
        }
        if n <= 64 {
            // SAFETY: dst holds 32 < n <= 64 bytes (SSE2 is part of x86-64).
            unsafe { x86::fill_32_64_sse2(dst.as_mut_ptr(), byte, n) };
            return true;
        }
        if n <= 128 {
            // SAFETY: dst holds 64 < n <= 128 bytes (SSE2 is part of x86-64).
            unsafe { x86::fill_64_128_sse2(dst.as_mut_ptr(), byte, n) };
            return true;
        }
    }
    let _ = (n, byte);
    false
}

/// glibc's `memcpy` on two slices of equal length (the shorter length otherwise).
///
/// Never inlined, so the compiler cannot replace the call with its own code:
/// this is the baseline the benchmarks compare against.
#[inline(never)]
pub fn glibc_memcpy(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    // SAFETY: both slices hold at least n bytes, and a `&mut` and a `&` slice
    // cannot overlap, as memcpy requires.
    unsafe {
        libc::memcpy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), n);
    }
}

/// glibc's `memcpy` on raw pointers, for the table's [`Strategy::Glibc`].
///
/// # Safety
/// `dst` valid for writes and `src` for reads of `n` bytes, not overlapping.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn glibc_memcpy_raw(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: passed on from the caller.
    unsafe {
        libc::memcpy(dst.cast(), src.cast(), n);
    }
}

/// glibc's `memset` on raw pointers, for the table's [`Strategy::Glibc`].
///
/// # Safety
/// `dst` valid for writes of `n` bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn glibc_memset_raw(dst: *mut u8, byte: u8, n: usize) {
    // SAFETY: passed on from the caller.
    unsafe {
        libc::memset(dst.cast(), i32::from(byte), n);
    }
}

/// glibc's `memset` on a slice. Never inlined (see [`glibc_memcpy`]).
#[inline(never)]
pub fn glibc_memset(dst: &mut [u8], byte: u8) {
    // SAFETY: dst holds dst.len() writable bytes.
    unsafe {
        libc::memset(dst.as_mut_ptr().cast(), i32::from(byte), dst.len());
    }
}

/// Writes back and drops from every cache level the lines that hold `bytes`
/// (`clflushopt` on each 64-byte line, or `clflush` on a CPU without it,
/// then `mfence`), so that the next access to them comes from memory: what
/// "cold" benchmark rows need when the bytes one timed walk touches fit in
/// the last-level cache. Costs a memory write per dirty line; `clflush`
/// also waits for each line in turn, `clflushopt` does not.
pub fn flush_from_caches(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if !bytes.is_empty() {
        static HAS_CLFLUSHOPT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let opt = *HAS_CLFLUSHOPT.get_or_init(|| super::cpu::cpu_features().clflushopt);
        let start = bytes.as_ptr() as usize & !63;
        let end = bytes.as_ptr() as usize + bytes.len();
        for line in (start..end).step_by(64) {
            // SAFETY: `line` starts a cache line that holds a byte of
            // `bytes`, which is mapped; a flush reads nothing and changes no
            // data. `clflush` is SSE2, part of x86-64; `clflushopt` runs
            // only where CPUID says the CPU has it.
            unsafe {
                if opt {
                    core::arch::asm!("clflushopt [{}]", in(reg) line, options(nostack, preserves_flags));
                } else {
                    core::arch::x86_64::_mm_clflush(line as *const u8);
                }
            }
        }
        // SAFETY: a fence has no operands; it orders the flushes before the
        // accesses that follow.
        unsafe { core::arch::x86_64::_mm_mfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushing_lines_from_the_caches_keeps_their_bytes() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let before = bytes.clone();
        // Unaligned starts, a part of one line, lines across a page, nothing.
        for (start, len) in [(0, 10_000), (3, 61), (4090, 20), (1, 0), (9_999, 1)] {
            flush_from_caches(&bytes[start..start + len]);
        }
        flush_from_caches(&[]);
        assert_eq!(bytes, before);
    }

    fn class(from: usize, by_placement: [Strategy; 3]) -> Class {
        Class { from, by_placement }
    }

    /// A table in the shape of the Intel AVX-512 defaults: the loop, then
    /// `rep movsb` everywhere, then non-temporal stores; a guard against
    /// destinations 1..1024 bytes ahead modulo 1 MiB at every size and one
    /// modulo 4 KiB up to 512 KiB.
    fn rep_table() -> Thresholds {
        let l = Strategy::Loop { isa: Isa::Avx512 };
        Thresholds::new(
            &[
                class(0, [l; 3]),
                class(24 << 10, [Strategy::Rep; 3]),
                class(64 << 20, [Strategy::NonTemporal { streams: 8 }; 3]),
            ],
            &[
                RepGuard {
                    span: 1 << 20,
                    below: 1024,
                    up_to: usize::MAX,
                },
                RepGuard {
                    span: 4096,
                    below: 1024,
                    up_to: 512 << 10,
                },
            ],
        )
    }

    fn direct_words(t: &Thresholds) -> Vec<usize> {
        t.rep_direct
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect()
    }

    #[test]
    fn the_direct_rep_window_is_cut_where_a_guard_stops() {
        let t = rep_table();
        let words = direct_words(&t);
        assert_eq!(
            words,
            [
                24 << 10,
                24 << 10,
                24 << 10,
                512 << 10,
                (1 << 20) - 1,
                1023,
                4095,
                1023
            ],
            "from the rep class to the 4 KiB guard's end, both guards in it"
        );
        // No class that is rep at every placement: an empty window.
        let l = Strategy::Loop { isa: Isa::Avx2 };
        let t = Thresholds::new(&[class(0, [l; 3]), class(8192, [l, Strategy::Rep, l])], &[]);
        let p = Placement::of_copy(0x10000, 0x20000);
        assert!(!t.rep_direct(0x10000 as *mut u8, 0x20000 as *const u8, 9000, p));
        assert_eq!(t.strategy(9000, p), Some(l));
        // A rep class with no guard: the window runs to the next class.
        let t = Thresholds::new(&[class(0, [l; 3]), class(8192, [Strategy::Rep; 3])], &[]);
        let other = Placement::Other;
        assert!(t.rep_direct(0x10001 as *mut u8, 0x20000 as *const u8, 8192, other));
        assert!(t.rep_direct(
            0x10001 as *mut u8,
            0x10000 as *const u8,
            usize::MAX - 1,
            other
        ));
        assert!(!t.rep_direct(0x10001 as *mut u8, 0x20000 as *const u8, 8191, other));
        // Classes just before it that are rep at one placement: that
        // placement's window starts there, the others' at the shared class.
        let r = Strategy::Rep;
        let t = Thresholds::new(
            &[
                class(0, [l; 3]),
                class(4096, [l, r, r]),
                class(6144, [r; 3]),
            ],
            &[],
        );
        let words = direct_words(&t);
        assert_eq!(
            words,
            [6144, 4096, 4096, usize::MAX, 0, usize::MAX, 0, usize::MAX]
        );
        assert!(t.rep_direct(0x10001 as *mut u8, 0x20000 as *const u8, 4096, other));
        assert!(!t.rep_direct(
            0x10000 as *mut u8,
            0x20000 as *const u8,
            4096,
            Placement::Aligned
        ));
    }

    proptest::proptest! {
        /// The direct way takes `rep movsb` only where the table walk and the
        /// guards would have taken it too.
        #[test]
        fn the_direct_rep_way_agrees_with_the_table_and_the_guards(
            n in 0usize..(2 << 20),
            src in 0usize..(4 << 20),
            dst in 0usize..(4 << 20),
        ) {
            let t = rep_table();
            let (d, s) = (dst as *mut u8, src as *const u8);
            let by_table = t.strategy(n, Placement::of_copy(dst, src)) == Some(Strategy::Rep)
                && !t.rep_guarded(d, s, n);
            let direct = t.rep_direct(d, s, n, Placement::of_copy(dst, src));
            proptest::prop_assert!(!direct || by_table, "direct without the table: n {} dst-src {}", n, dst.wrapping_sub(src));
            // Inside the window, the two agree exactly.
            if ((24 << 10)..(512 << 10)).contains(&n) {
                proptest::prop_assert_eq!(direct, by_table);
            }
        }
    }

    #[test]
    fn each_placement_leaves_the_inline_loop_at_its_own_first_special_class() {
        let l = Strategy::Loop { isa: Isa::Avx512 };
        let t = Thresholds::new(
            &[
                class(0, [l; 3]),
                class(2048, [l, l, Strategy::Rep]),
                class(8192, [Strategy::Glibc, l, Strategy::Rep]),
                class(1 << 20, [Strategy::NonTemporal { streams: 1 }; 3]),
            ],
            &[],
        );
        assert_eq!(t.inline_below(), 2048, "the first special class anywhere");
        let special: Vec<usize> = t
            .special_min
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect();
        assert_eq!(special, [8192, 1 << 20, 2048]);
        // A table that never leaves the loop has no special class at all.
        let t = Thresholds::new(&[class(0, [l; 3])], &[]);
        assert_eq!(t.inline_below(), usize::MAX);
        // A first class that is not the loop is special from size 0.
        let t = Thresholds::new(&[class(0, [Strategy::Glibc, l, l])], &[]);
        assert_eq!(t.special_min[0].load(Ordering::Relaxed), 0);
        assert_eq!(t.special_min[1].load(Ordering::Relaxed), usize::MAX);
        assert_eq!(t.inline_below(), 0);
    }
}
