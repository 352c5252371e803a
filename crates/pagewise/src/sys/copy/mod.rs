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

#[cfg(target_arch = "x86_64")]
mod x86;

use serde::Serialize;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// An instruction set with its own copy and fill kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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
    pub fn code(self) -> u8 {
        match self {
            Isa::Sse2 => 1,
            Isa::Avx2 => 2,
            Isa::Avx512 => 3,
        }
    }

    /// The instruction set of a [`Isa::code`]; `None` for 0 or an unknown code.
    #[inline(always)]
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

/// Where a kernel switches strategy for sizes above its loop-free range
/// ([`Isa::small_max`]); sizes at or below it ignore these.
///
/// Non-temporal stores win over `rep movsb`, which wins over the vector loop.
/// The fields are atomics so that a shared `Thresholds` can be changed while
/// other threads copy (each call reads them once, with relaxed loads: plain
/// moves on x86-64), and so that kernels take them by reference.
#[derive(Debug)]
pub struct Thresholds {
    /// `min(rep_min, nontemporal_min)`: below it, the plain loop.
    special_min: AtomicUsize,
    rep_min: AtomicUsize,
    rep_max: AtomicUsize,
    nontemporal_min: AtomicUsize,
    /// The loop runs backwards when `(dst - src) mod 4096` is below this.
    backward_below: AtomicUsize,
    /// The instruction set whose kernels [`fast_copy`] and [`fast_fill`] may
    /// run with these thresholds ([`Isa::code`]; 0: none): set only by
    /// [`enable_fast_path`], which needs a [`Kernel`] (the proof that the CPU
    /// has them). Kept here, beside the values the kernels read, so the fast
    /// path needs one address.
    fast_isa: AtomicU8,
}

impl Thresholds {
    /// Sizes in `rep.0..rep.1` use `rep movsb` / `rep stosb` (`None`: never);
    /// sizes from `nontemporal` up use non-temporal stores (`None`: never).
    pub const fn new(rep: Option<(usize, usize)>, nontemporal: Option<usize>) -> Thresholds {
        let (lo, hi) = match rep {
            Some(r) => r,
            None => (usize::MAX, usize::MAX),
        };
        let nt = match nontemporal {
            Some(n) => n,
            None => usize::MAX,
        };
        Thresholds {
            special_min: AtomicUsize::new(if lo < nt { lo } else { nt }),
            rep_min: AtomicUsize::new(lo),
            rep_max: AtomicUsize::new(hi),
            nontemporal_min: AtomicUsize::new(nt),
            backward_below: AtomicUsize::new(DEFAULT_BACKWARD_BELOW),
            fast_isa: AtomicU8::new(0),
        }
    }

    /// Sets the `rep` range and the non-temporal threshold, as [`Thresholds::new`]
    /// does (the backward-loop tuning is kept). Calls racing with it may see a
    /// mix of the old and new values, each of which is a valid choice.
    pub fn assign(&self, rep: Option<(usize, usize)>, nontemporal: Option<usize>) {
        let fresh = Thresholds::new(rep, nontemporal);
        for (to, from) in [
            (&self.rep_min, &fresh.rep_min),
            (&self.rep_max, &fresh.rep_max),
            (&self.nontemporal_min, &fresh.nontemporal_min),
            (&self.special_min, &fresh.special_min),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The `rep` range, if any.
    pub fn rep(&self) -> Option<(usize, usize)> {
        let lo = self.rep_min.load(Ordering::Relaxed);
        let hi = self.rep_max.load(Ordering::Relaxed);
        (lo < hi).then_some((lo, hi))
    }

    /// The non-temporal threshold, if any.
    pub fn nontemporal(&self) -> Option<usize> {
        match self.nontemporal_min.load(Ordering::Relaxed) {
            usize::MAX => None,
            n => Some(n),
        }
    }

    /// Changes the non-temporal threshold (`None`: never); calls that start
    /// afterwards see it.
    pub fn set_nontemporal(&self, bytes: Option<usize>) {
        let nt = bytes.unwrap_or(usize::MAX);
        // A call racing with this may use the old or the new threshold (or the
        // plain loop once): every choice copies correctly.
        self.nontemporal_min.store(nt, Ordering::Relaxed);
        self.special_min
            .store(nt.min(self.rep_min()), Ordering::Relaxed);
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

    #[inline(always)]
    fn special_min(&self) -> usize {
        self.special_min.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn rep_min(&self) -> usize {
        self.rep_min.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn rep_max(&self) -> usize {
        self.rep_max.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn nontemporal_min(&self) -> usize {
        self.nontemporal_min.load(Ordering::Relaxed)
    }
}

/// A copy of the values; the fast-path permission ([`enable_fast_path`]) is not copied.
impl Clone for Thresholds {
    fn clone(&self) -> Thresholds {
        let t = Thresholds::new(self.rep(), self.nontemporal());
        t.set_backward_below(self.backward_below());
        t
    }
}

/// The copy loop runs backwards when the destination is less than this many
/// bytes ahead of the source modulo 4 KiB, the same offset included (measured:
/// 5–20% faster there for L1-resident sizes); forwards, its loads would wait on
/// the stores it has just made to addresses with the same low 12 bits (4K
/// aliasing).
pub const DEFAULT_BACKWARD_BELOW: usize = 2048;

/// The non-temporal copy's layout, for reports: 4 KiB pages copied side by
/// side, and bytes copied from each before moving to the next.
pub const NONTEMPORAL_STREAMS: (usize, usize) = (x86::STREAMS, x86::VISIT);

/// Lets [`fast_copy`] and [`fast_fill`] run `kernel` with `t`. Call it after
/// `t` holds its values.
pub fn enable_fast_path(kernel: Kernel, t: &Thresholds) {
    t.fast_isa.store(kernel.isa.code(), Ordering::Release);
}

/// Copies `src` into `dst` (`min` of the lengths) with the kernel allowed for
/// `t` ([`enable_fast_path`]) and returns `true`; returns `false` and does
/// nothing if none is. Always inlined: one load and a few compares, then
/// what [`Kernel::copy`] does.
#[inline(always)]
pub fn fast_copy(dst: &mut [u8], src: &[u8], t: &Thresholds) -> bool {
    match Isa::from_code(t.fast_isa.load(Ordering::Acquire)) {
        // SAFETY: only `enable_fast_path` stores a code, and only the code of a
        // `Kernel`, which proves the CPU has that instruction set.
        Some(isa) => unsafe { copy_with(isa, dst, src, t) },
        None => return false,
    }
    true
}

/// Fills `dst` as [`fast_copy`] copies.
#[inline(always)]
pub fn fast_fill(dst: &mut [u8], byte: u8, t: &Thresholds) -> bool {
    match Isa::from_code(t.fast_isa.load(Ordering::Acquire)) {
        // SAFETY: as in `fast_copy`.
        Some(isa) => unsafe { fill_with(isa, dst, byte, t) },
        None => return false,
    }
    true
}

/// Copies `min(dst.len(), src.len())` bytes with `isa`'s kernels: with
/// AVX-512 a direct call of its kernel (sizes up to 512 bytes are a leaf
/// there); with AVX2 or SSE2, sizes up to 32 bytes in place and a direct call
/// for larger ones.
///
/// # Safety
/// The CPU must support `isa` (as a [`Kernel`] for it proves).
#[inline(always)]
unsafe fn copy_with(isa: Isa, dst: &mut [u8], src: &[u8], t: &Thresholds) {
    #[cfg(target_arch = "x86_64")]
    {
        let n = dst.len().min(src.len());
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        // SAFETY (all three calls): the caller guarantees `isa`; both slices
        // hold at least n bytes and cannot overlap (one is borrowed mutably);
        // the `copy_gt16` kernels get n > 32.
        if isa == Isa::Avx512 {
            return unsafe { x86::avx512_small::copy_any(d, s, n, t) };
        }
        if copy_small(dst, src) {
            return;
        }
        match isa {
            Isa::Avx512 | Isa::Avx2 => unsafe { x86::avx2::copy_gt16(d, s, n, t) },
            Isa::Sse2 => unsafe { x86::sse2::copy_gt16(d, s, n, t) },
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
        let (d, n) = (dst.as_mut_ptr(), dst.len());
        // SAFETY: as in `copy_with`; dst holds n bytes, n > 128 for `fill_gt16`.
        if isa == Isa::Avx512 {
            return unsafe { x86::avx512_small::fill_any(d, byte, n, t) };
        }
        if fill_small(dst, byte) {
            return;
        }
        match isa {
            Isa::Avx512 | Isa::Avx2 => unsafe { x86::avx2::fill_gt16(d, byte, n, t) },
            Isa::Sse2 => unsafe { x86::sse2::fill_gt16(d, byte, n, t) },
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
/// a call through a function pointer).
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
    /// sizes up to 32 bytes in place and a direct call for larger ones.
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

/// Copies `src` into `dst` when they hold at most 32 bytes (`min` of the two
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

/// glibc's `memset` on a slice. Never inlined (see [`glibc_memcpy`]).
#[inline(never)]
pub fn glibc_memset(dst: &mut [u8], byte: u8) {
    // SAFETY: dst holds dst.len() writable bytes.
    unsafe {
        libc::memset(dst.as_mut_ptr().cast(), i32::from(byte), dst.len());
    }
}
