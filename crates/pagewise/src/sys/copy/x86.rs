//! x86-64 copy and fill kernels: raw pointers, vector intrinsics, `rep movsb` /
//! `rep stosb`.
//!
//! Every kernel has the same contract, stated once here instead of on each
//! function:
//!
//! - `dst` is valid for writes of `n` bytes, `src` (for copies) is valid for
//!   reads of `n` bytes, and the two ranges do not overlap;
//! - a kernel compiled with `#[target_feature]` is only called when the CPU has
//!   the feature (the [`super::Kernel`] constructor checks it);
//! - the `*_gt16` entry points need `n > 16`; the small helpers say their range.
//!
//! Shape of every copy and fill (the size classes are in `crate::copy`):
//!
//! - `n <= 8 W` (W = vector width): overlapping head and tail moves, no loop;
//! - larger: one unaligned head vector, a loop of four aligned stores per
//!   iteration with the destination aligned to W, and four unaligned tail
//!   vectors that end exactly at `dst + n`; or `rep movsb`/`rep stosb` with the
//!   destination aligned to 64; or the same loop with non-temporal stores,
//!   destination aligned to a cache line and an `sfence` before returning.
//!
//! Where head or tail moves overlap the loop's stores they write the same bytes
//! again, so the order of the stores never changes the result.

use super::{Placement, Strategy, Thresholds};
use core::arch::asm;
use core::arch::x86_64::*;

/// Copies `n <= 16` bytes with two overlapping scalar moves (or one byte).
#[inline(always)]
pub(super) unsafe fn copy_le16(dst: *mut u8, src: *const u8, n: usize) {
    if n >= 8 {
        let a = src.cast::<u64>().read_unaligned();
        let b = src.add(n - 8).cast::<u64>().read_unaligned();
        dst.cast::<u64>().write_unaligned(a);
        dst.add(n - 8).cast::<u64>().write_unaligned(b);
    } else if n >= 4 {
        let a = src.cast::<u32>().read_unaligned();
        let b = src.add(n - 4).cast::<u32>().read_unaligned();
        dst.cast::<u32>().write_unaligned(a);
        dst.add(n - 4).cast::<u32>().write_unaligned(b);
    } else if n >= 2 {
        let a = src.cast::<u16>().read_unaligned();
        let b = src.add(n - 2).cast::<u16>().read_unaligned();
        dst.cast::<u16>().write_unaligned(a);
        dst.add(n - 2).cast::<u16>().write_unaligned(b);
    } else if n == 1 {
        *dst = *src;
    }
}

/// Fills `n <= 16` bytes with two overlapping scalar stores (or one byte).
#[inline(always)]
pub(super) unsafe fn fill_le16(dst: *mut u8, byte: u8, n: usize) {
    let v = u64::from(byte) * 0x0101_0101_0101_0101;
    if n >= 8 {
        dst.cast::<u64>().write_unaligned(v);
        dst.add(n - 8).cast::<u64>().write_unaligned(v);
    } else if n >= 4 {
        dst.cast::<u32>().write_unaligned(v as u32);
        dst.add(n - 4).cast::<u32>().write_unaligned(v as u32);
    } else if n >= 2 {
        dst.cast::<u16>().write_unaligned(v as u16);
        dst.add(n - 2).cast::<u16>().write_unaligned(v as u16);
    } else if n == 1 {
        *dst = byte;
    }
}

/// Copies `16 <= n <= 32` bytes with two overlapping 16-byte moves (SSE2, baseline).
#[inline(always)]
pub(super) unsafe fn copy_16_32(dst: *mut u8, src: *const u8, n: usize) {
    let a = _mm_loadu_si128(src.cast());
    let b = _mm_loadu_si128(src.add(n - 16).cast());
    _mm_storeu_si128(dst.cast(), a);
    _mm_storeu_si128(dst.add(n - 16).cast(), b);
}

/// Fills `16 <= n <= 32` bytes with two overlapping 16-byte stores (SSE2, baseline).
#[inline(always)]
pub(super) unsafe fn fill_16_32(dst: *mut u8, byte: u8, n: usize) {
    let v = _mm_set1_epi8(byte as i8);
    _mm_storeu_si128(dst.cast(), v);
    _mm_storeu_si128(dst.add(n - 16).cast(), v);
}

/// Fills `32 <= n <= 64` bytes with four overlapping 16-byte stores (SSE2,
/// baseline: no dispatch needed).
#[inline(always)]
pub(super) unsafe fn fill_32_64_sse2(dst: *mut u8, byte: u8, n: usize) {
    let v = _mm_set1_epi8(byte as i8);
    _mm_storeu_si128(dst.cast(), v);
    _mm_storeu_si128(dst.add(16).cast(), v);
    _mm_storeu_si128(dst.add(n - 32).cast(), v);
    _mm_storeu_si128(dst.add(n - 16).cast(), v);
}

/// Fills `64 <= n <= 128` bytes with eight overlapping 16-byte stores (SSE2).
#[inline(always)]
pub(super) unsafe fn fill_64_128_sse2(dst: *mut u8, byte: u8, n: usize) {
    let v = _mm_set1_epi8(byte as i8);
    let e = dst.add(n - 64);
    _mm_storeu_si128(dst.cast(), v);
    _mm_storeu_si128(dst.add(16).cast(), v);
    _mm_storeu_si128(dst.add(32).cast(), v);
    _mm_storeu_si128(dst.add(48).cast(), v);
    _mm_storeu_si128(e.cast(), v);
    _mm_storeu_si128(e.add(16).cast(), v);
    _mm_storeu_si128(e.add(32).cast(), v);
    _mm_storeu_si128(e.add(48).cast(), v);
}

/// Copies `32 <= n <= 64` bytes with two overlapping 32-byte moves.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn copy_32_64(dst: *mut u8, src: *const u8, n: usize) {
    let a = _mm256_loadu_si256(src.cast());
    let b = _mm256_loadu_si256(src.add(n - 32).cast());
    _mm256_storeu_si256(dst.cast(), a);
    _mm256_storeu_si256(dst.add(n - 32).cast(), b);
}

/// Fills `32 <= n <= 64` bytes with two overlapping 32-byte stores.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn fill_32_64(dst: *mut u8, byte: u8, n: usize) {
    let v = _mm256_set1_epi8(byte as i8);
    _mm256_storeu_si256(dst.cast(), v);
    _mm256_storeu_si256(dst.add(n - 32).cast(), v);
}

/// Copies with source and destination at the same page offset run the loop
/// backwards below this size (see `copy_loop`).
const SAME_OFFSET_BACKWARD_BELOW: usize = 2048;

/// Copies `n` bytes with unaligned vector moves at the given offsets (`"0"`,
/// `"64"`, `"{n} - 64"`, …), all loads before the first store, in the given
/// registers (zmm16 and up have no legacy-SSE form, so using them needs no
/// `vzeroupper`). The offsets must cover `[0, n)` and stay inside it.
macro_rules! moves_from_both_ends {
    ($dst:expr, $src:expr, $n:expr, $width:tt; $($reg:tt @ $off:tt),+ $(,)?) => {
        asm!(
            $(concat!("vmovdqu64 ", $reg, ", ", $width, " ptr [{src} + ", $off, "]"),)+
            $(concat!("vmovdqu64 ", $width, " ptr [{dst} + ", $off, "], ", $reg),)+
            src = in(reg) $src,
            dst = in(reg) $dst,
            n = in(reg) $n,
            $(out($reg) _,)+
            options(nostack, preserves_flags)
        )
    };
}

/// AVX-512 copy and fill of any size: below 64 bytes with one masked load and
/// store (no size-dependent branch, so calls of varying sizes do not
/// mispredict), up to 512 with two, four or eight overlapping moves, larger
/// ones by the general kernel.
pub(super) mod avx512_small {
    use super::*;

    /// The low `n` bits set (`n <= 64`).
    #[target_feature(enable = "bmi2")]
    #[inline]
    fn low_bits(n: usize) -> u64 {
        // `bzhi` keeps every bit for an index of 64 or more.
        _bzhi_u64(u64::MAX, n as u32)
    }

    /// Copies `n` bytes (any `n`). Sizes up to 512 bytes are a leaf that saves
    /// no registers and uses only zmm16 and up; larger ones continue in the
    /// general kernel.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,bmi2")]
    #[inline]
    pub(in crate::sys::copy) unsafe fn copy_any<const MASKED: bool>(
        dst: *mut u8,
        src: *const u8,
        n: usize,
        t: &Thresholds,
    ) {
        // Exactly 64 bytes take the unmasked pair below (one vector twice):
        // measured faster than a masked move with all lanes on.
        if n < 64 {
            if n > 32 {
                // Two overlapping 32-byte moves: measured a cycle faster than
                // a masked move at a fixed size (0.91 against 1.0 of glibc).
                return moves_from_both_ends!(dst, src, n, "ymmword";
                    "ymm16" @ "0", "ymm17" @ "{n} - 32");
            }
            // A masked load waits for any earlier store to an address with the
            // same low 12 bits to finish (4K aliasing), which hurts when the
            // destination sits within 64 bytes of the source modulo 4 KiB (as
            // when the same offsets of two page-aligned buffers are copied
            // again and again): those take the scalar moves instead, and
            // so does every size when the plan chose plain moves.
            if !MASKED || ((dst as usize).wrapping_sub(src as usize).wrapping_add(64) & 4095) < 128
            {
                return match n {
                    0..=16 => copy_le16(dst, src, n),
                    _ => copy_16_32(dst, src, n),
                };
            }
            // Lanes past `n` are masked off: neither read nor written, and they
            // cannot fault (masked lanes suppress faults). zmm16 and up have
            // no legacy-SSE form, so using them needs no `vzeroupper` on return
            // (glibc does the same).
            asm!(
                "kmovq k1, {mask}",
                "vmovdqu8 zmm16 {{k1}} {{z}}, zmmword ptr [{src}]",
                "vmovdqu8 zmmword ptr [{dst}] {{k1}}, zmm16",
                mask = in(reg) low_bits(n),
                src = in(reg) src,
                dst = in(reg) dst,
                out("k1") _,
                out("zmm16") _,
                options(nostack, preserves_flags)
            );
            return;
        }
        // Vectors from each end, every load before the first store.
        if n <= 128 {
            return moves_from_both_ends!(dst, src, n, "zmmword";
                "zmm16" @ "0", "zmm17" @ "{n} - 64");
        }
        if n <= 256 {
            return moves_from_both_ends!(dst, src, n, "zmmword";
                "zmm16" @ "0", "zmm17" @ "64", "zmm18" @ "{n} - 128", "zmm19" @ "{n} - 64");
        }
        if n <= 512 {
            return moves_from_both_ends!(dst, src, n, "zmmword";
                "zmm16" @ "0", "zmm17" @ "64", "zmm18" @ "128", "zmm19" @ "192",
                "zmm20" @ "{n} - 256", "zmm21" @ "{n} - 192", "zmm22" @ "{n} - 128",
                "zmm23" @ "{n} - 64");
        }
        super::avx512::copy_gt16(dst, src, n, t)
    }

    /// Fills `n` bytes (any `n`): up to 512 bytes as a leaf in zmm16 (no
    /// `vzeroupper`, see `copy_any`), larger ones by the general kernel.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,bmi2")]
    #[inline]
    pub(in crate::sys::copy) unsafe fn fill_any<const MASKED: bool>(
        dst: *mut u8,
        byte: u8,
        n: usize,
        t: &Thresholds,
    ) {
        // Exactly 64 bytes take the unmasked pair below, as in `copy_any`.
        if !MASKED && n < 64 {
            return match n {
                0..=16 => fill_le16(dst, byte, n),
                17..=32 => fill_16_32(dst, byte, n),
                _ => fill_32_64(dst, byte, n),
            };
        }
        if n < 64 {
            // Bytes past `n` are masked off: they are neither written nor can
            // they fault (AVX-512 masked stores suppress faults on masked lanes).
            asm!(
                "vpbroadcastb zmm16, {byte:e}",
                "kmovq k1, {mask}",
                "vmovdqu8 zmmword ptr [{dst}] {{k1}}, zmm16",
                byte = in(reg) u32::from(byte),
                mask = in(reg) low_bits(n),
                dst = in(reg) dst,
                out("k1") _,
                out("zmm16") _,
                options(nostack, preserves_flags)
            );
            return;
        }
        if n <= 512 {
            // One vector at each end, then two more and four more as the size
            // needs (overlapping where it is not a multiple of 64).
            asm!(
                "vpbroadcastb zmm16, {byte:e}",
                "vmovdqu64 zmmword ptr [{dst}], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + {n} - 64], zmm16",
                "cmp {n}, 128",
                "jbe 2f",
                "vmovdqu64 zmmword ptr [{dst} + 64], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + {n} - 128], zmm16",
                "cmp {n}, 256",
                "jbe 2f",
                "vmovdqu64 zmmword ptr [{dst} + 128], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + 192], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + {n} - 256], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + {n} - 192], zmm16",
                "2:",
                byte = in(reg) u32::from(byte),
                dst = in(reg) dst,
                n = in(reg) n,
                out("zmm16") _,
                options(nostack)
            );
            return;
        }
        if n <= FILL_LEAF_MAX && dst as usize & 63 == 0 && n < t.special_min(Placement::Aligned) {
            // An aligned destination takes glibc's shape, four vectors at each
            // end and aligned blocks of four between them (measured: 1.00 of
            // glibc at 1 KiB, against 0.93-0.94 for the general loop, which
            // starts its blocks at the first byte and has no head). A
            // misaligned one is faster in the general loop (1.09-1.27 of
            // glibc at 1000 B - 2 KiB, against 1.00 in this shape).
            asm!(
                "vpbroadcastb zmm16, {byte:e}",
                "lea {end}, [{dst} + {n} - 256]",
                "vmovdqu64 zmmword ptr [{dst}], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + 64], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + 128], zmm16",
                "vmovdqu64 zmmword ptr [{dst} + 192], zmm16",
                "vmovdqu64 zmmword ptr [{end}], zmm16",
                "vmovdqu64 zmmword ptr [{end} + 64], zmm16",
                "vmovdqu64 zmmword ptr [{end} + 128], zmm16",
                "vmovdqu64 zmmword ptr [{end} + 192], zmm16",
                "lea {p}, [{dst} + 256]",
                "and {p}, -64",
                "cmp {p}, {end}",
                "jae 3f",
                "2:",
                "vmovdqa64 zmmword ptr [{p}], zmm16",
                "vmovdqa64 zmmword ptr [{p} + 64], zmm16",
                "vmovdqa64 zmmword ptr [{p} + 128], zmm16",
                "vmovdqa64 zmmword ptr [{p} + 192], zmm16",
                "add {p}, 256",
                "cmp {p}, {end}",
                "jb 2b",
                "3:",
                byte = in(reg) u32::from(byte),
                dst = in(reg) dst,
                n = in(reg) n,
                end = out(reg) _,
                p = out(reg) _,
                out("zmm16") _,
                options(nostack)
            );
            return;
        }
        super::avx512::fill_gt16(dst, byte, n, t)
    }
}

/// Aligned fills up to this size are a leaf in `fill_any`; above it the
/// general kernel (loop, `rep stosb` or non-temporal stores) takes over.
const FILL_LEAF_MAX: usize = 2048;

/// Bytes per page-sized stream of the non-temporal copy.
const PAGE: usize = 4096;
/// Bytes copied from one page before moving to the next.
const VISIT: usize = 128;
/// The span over which the non-temporal copy's streams can collide: measured
/// on the development VM (256 MiB copies, THP buffers), a destination 4–64 KiB
/// ahead of the source modulo 2 MiB cost 20–30% with the streams visited in
/// ascending order; 132 KiB or 1 MiB ahead did not.
const NT_ALIAS_SPAN: usize = 2 << 20;

/// `rep movsb` of `n` bytes.
#[inline(always)]
unsafe fn rep_movsb(dst: *mut u8, src: *const u8, n: usize) {
    // The direction flag is clear on entry to any function (System V ABI), so the
    // copy runs forwards; the instruction leaves the flags alone.
    asm!(
        "rep movsb",
        inout("rcx") n => _,
        inout("rdi") dst => _,
        inout("rsi") src => _,
        options(nostack, preserves_flags)
    );
}

/// `rep stosb` of `n` bytes of `byte`.
#[inline(always)]
unsafe fn rep_stosb(dst: *mut u8, byte: u8, n: usize) {
    asm!(
        "rep stosb",
        inout("rcx") n => _,
        inout("rdi") dst => _,
        in("al") byte,
        options(nostack, preserves_flags)
    );
}

/// Defines one instruction set's kernels. `$w` is the vector width in bytes;
/// the intrinsics are that width's unaligned load and store, non-temporal store
/// and byte broadcast.
macro_rules! vector_kernels {
    (
        $(#[$doc:meta])*
        $name:ident, feature = $feat:literal, entry = #[$entry:meta], width = $w:literal, vector = $v:ty,
        loadu = $loadu:path, storeu = $storeu:path,
        stream = $stream:path, splat = $splat:path
    ) => {
        $(#[$doc])*
        pub(super) mod $name {
            use super::*;

            /// Vector width in bytes.
            const W: usize = $w;
            /// Bytes per loop iteration.
            const B: usize = 4 * W;

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn ld(p: *const u8) -> $v {
                $loadu(p.cast())
            }

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn stu(p: *mut u8, v: $v) {
                $storeu(p.cast(), v)
            }

            /// Aligned store, volatile: the loops are made of these, and LLVM
            /// would otherwise turn a fill loop into a call to the C library's
            /// `memset` (the very routine it is measured against). Volatile
            /// stores still compile to one aligned vector store each.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn sta(p: *mut u8, v: $v) {
                debug_assert_eq!(p as usize % W, 0);
                core::ptr::write_volatile(p.cast::<$v>(), v)
            }

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn stnt(p: *mut u8, v: $v) {
                $stream(p.cast(), v)
            }

            /// Copies the first 64 bytes (`n >= 64`).
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_first_64(dst: *mut u8, src: *const u8) {
                let mut i = 0;
                while i < 64 {
                    stu(dst.add(i), ld(src.add(i)));
                    i += W;
                }
            }

            /// Copies `n > 16` bytes. `#[inline]` so that each caller's code unit
            /// gets its own copy and reaches it with a direct call (the vector
            /// features keep it from being inlined into callers without them);
            /// SSE2's is `#[inline(never)]`, or it would be inlined and bloat
            /// every caller's fast path.
            #[target_feature(enable = $feat)]
            #[$entry]
            pub(in crate::sys::copy) unsafe fn copy_gt16(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
            ) {
                if n > 8 * W {
                    // A few ALU operations, one load and one compare to the
                    // loop, the common case.
                    let p = Placement::of_copy(dst as usize, src as usize);
                    if n < t.special_min(p) {
                        return copy_loop(dst, src, n, t);
                    }
                    return copy_large(dst, src, n, t, p);
                }
                if n <= 2 * W {
                    if W >= 32 && n <= 32 {
                        return copy_16_32(dst, src, n);
                    }
                    if W == 64 && n <= 64 {
                        return copy_32_64(dst, src, n);
                    }
                    let a = ld(src);
                    let b = ld(src.add(n - W));
                    stu(dst, a);
                    stu(dst.add(n - W), b);
                    return;
                }
                if n <= 4 * W {
                    let a = ld(src);
                    let b = ld(src.add(W));
                    let c = ld(src.add(n - 2 * W));
                    let d = ld(src.add(n - W));
                    stu(dst, a);
                    stu(dst.add(W), b);
                    stu(dst.add(n - 2 * W), c);
                    stu(dst.add(n - W), d);
                    return;
                }
                if n <= 8 * W {
                    let a = ld(src);
                    let b = ld(src.add(W));
                    let c = ld(src.add(2 * W));
                    let d = ld(src.add(3 * W));
                    let e = ld(src.add(n - 4 * W));
                    let f = ld(src.add(n - 3 * W));
                    let g = ld(src.add(n - 2 * W));
                    let h = ld(src.add(n - W));
                    stu(dst, a);
                    stu(dst.add(W), b);
                    stu(dst.add(2 * W), c);
                    stu(dst.add(3 * W), d);
                    stu(dst.add(n - 4 * W), e);
                    stu(dst.add(n - 3 * W), f);
                    stu(dst.add(n - 2 * W), g);
                    stu(dst.add(n - W), h);
                    return;
                }
            }

            /// Sizes from the first threshold up (`n > 8 W`). Out of line: the
            /// non-temporal copy needs registers that the caller would
            /// otherwise save and restore on every call, small ones included.
            #[target_feature(enable = $feat)]
            #[inline(never)]
            unsafe fn copy_large(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
                p: Placement,
            ) {
                match t.strategy(n, p) {
                    Some(Strategy::Rep) if !t.rep_guarded(dst, src, n) => copy_rep(dst, src, n),
                    Some(Strategy::NonTemporal { streams }) => {
                        copy_nontemporal(dst, src, n, usize::from(streams))
                    }
                    Some(Strategy::Glibc) => super::super::glibc_memcpy_raw(dst, src, n),
                    // Another width's loop needs more than its own eight vectors.
                    Some(Strategy::Loop { isa }) if isa.vector_bytes() != W && n > isa.small_max() => {
                        super::super::copy_loop_of(isa, dst, src, n, t)
                    }
                    _ => copy_loop(dst, src, n, t),
                }
            }

            /// The vector loop, out of line, for [`super::super::copy_loop_of`]
            /// (`n > 8 W`).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            pub(in crate::sys::copy) unsafe fn copy_loop_entry(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
            ) {
                copy_loop(dst, src, n, t)
            }

            /// Vector loop with aligned temporal stores (`n > 8 W`). When the
            /// destination sits less than `t.backward_below()` bytes above the
            /// source modulo 4 KiB, loads would falsely wait for the stores just
            /// made (4K aliasing): the loop then runs backwards.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_loop(dst: *mut u8, src: *const u8, n: usize, t: &Thresholds) {
                let ahead = (dst as usize).wrapping_sub(src as usize) & 4095;
                // The same page offset goes backwards only while the copy is
                // small enough to be in L1 anyway: backwards, the hardware
                // prefetchers help less when the data comes from memory.
                if ahead < t.backward_below() && (ahead != 0 || n < SAME_OFFSET_BACKWARD_BELOW) {
                    return copy_loop_backward(dst, src, n);
                }
                let head = ld(src);
                let last = ld(src.add(n - W));
                // An aligned destination starts the loop at its first byte (the
                // head store then rewrites the same bytes, and is skipped).
                let misalign = dst as usize & (W - 1);
                let skew = (W - misalign) & (W - 1);
                let mut d = dst.add(skew);
                let mut s = src.add(skew);
                // The last W-aligned address: everything from `d` to it takes
                // aligned stores (eight vectors per iteration, then at most one
                // block of four and three single vectors); one unaligned vector
                // at each end covers the rest (two split stores at most when the
                // destination is misaligned).
                let end = dst.add(((dst as usize + n) & !(W - 1)) - dst as usize);
                while (end as usize) - (d as usize) >= 2 * B {
                    let a = ld(s);
                    let b = ld(s.add(W));
                    let c = ld(s.add(2 * W));
                    let e = ld(s.add(3 * W));
                    let f = ld(s.add(4 * W));
                    let g = ld(s.add(5 * W));
                    let h = ld(s.add(6 * W));
                    let i = ld(s.add(7 * W));
                    sta(d, a);
                    sta(d.add(W), b);
                    sta(d.add(2 * W), c);
                    sta(d.add(3 * W), e);
                    sta(d.add(4 * W), f);
                    sta(d.add(5 * W), g);
                    sta(d.add(6 * W), h);
                    sta(d.add(7 * W), i);
                    d = d.add(2 * B);
                    s = s.add(2 * B);
                }
                if (end as usize) - (d as usize) >= B {
                    let a = ld(s);
                    let b = ld(s.add(W));
                    let c = ld(s.add(2 * W));
                    let e = ld(s.add(3 * W));
                    sta(d, a);
                    sta(d.add(W), b);
                    sta(d.add(2 * W), c);
                    sta(d.add(3 * W), e);
                    d = d.add(B);
                    s = s.add(B);
                }
                while d < end {
                    sta(d, ld(s));
                    d = d.add(W);
                    s = s.add(W);
                }
                // Skipped when the destination ends on a vector boundary: the
                // loop wrote those bytes (one store in 16 fewer at 1 KiB).
                if (dst as usize + n) & (W - 1) != 0 {
                    stu(dst.add(n - W), last);
                }
                if misalign != 0 {
                    stu(dst, head);
                }
            }

            /// The loop from the end down (`n > 8 W`): blocks of four aligned
            /// vectors, then the first four vectors and the last one, which are
            /// loaded before any store (glibc's shape). Against the earlier
            /// loop with a single-vector tail, measured in a direct A/B on
            /// the development VM (600 B – 2 KiB, same-offset and near-offset
            /// buffers, three runs): its worst ratio to glibc went from
            /// 0.85–0.89 to 0.92–1.00.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_loop_backward(dst: *mut u8, src: *const u8, n: usize) {
                let h0 = ld(src);
                let h1 = ld(src.add(W));
                let h2 = ld(src.add(2 * W));
                let h3 = ld(src.add(3 * W));
                let last = ld(src.add(n - W));
                // The aligned block that ends just below the last vector, then
                // down while a block starts above the four head vectors
                // (`n > 8 W`, so the first block starts above them too).
                let mut off = (((dst as usize) + n - B - 1) & !(W - 1)) - dst as usize;
                loop {
                    let d = dst.add(off);
                    let s = src.add(off);
                    let a = ld(s.add(3 * W));
                    let b = ld(s.add(2 * W));
                    let c = ld(s.add(W));
                    let e = ld(s);
                    sta(d.add(3 * W), a);
                    sta(d.add(2 * W), b);
                    sta(d.add(W), c);
                    sta(d, e);
                    if off <= B {
                        break;
                    }
                    off -= B;
                }
                stu(dst, h0);
                stu(dst.add(W), h1);
                stu(dst.add(2 * W), h2);
                stu(dst.add(3 * W), h3);
                stu(dst.add(n - W), last);
            }

            /// `rep movsb` with the destination aligned to 64 (`n > 8 W >= 128`):
            /// a first vector covers the bytes up to the boundary.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_rep(dst: *mut u8, src: *const u8, n: usize) {
                let skew = (64 - (dst as usize & 63)) & 63;
                if skew != 0 {
                    copy_first_64(dst, src);
                }
                rep_movsb(dst.add(skew), src.add(skew), n - skew);
            }

            /// Non-temporal stores with the destination aligned to 64 (`n > 8 W`),
            /// then `sfence`. Whole runs of [`STREAMS`] pages are copied a block
            /// from each page in turn: several concurrent streams keep more
            /// cache-line fills in flight than one (the hardware prefetcher
            /// follows each page separately), which is what limits a single
            /// core's copy bandwidth from memory.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, n: usize, streams: usize) {
                // Streams must follow the source's pages: the hardware
                // prefetcher tracks each 4 KiB page, and a stream that
                // straddles two pages gets less help (a 64-byte skew on
                // page-aligned buffers cost ~15% at 1 GiB). The destination
                // must be 64-aligned for the stores; when the source has the
                // same alignment, single vectors run up to its page boundary.
                let skew = (64 - (dst as usize & 63)) & 63;
                let mut d = dst.add(skew);
                let mut s = src.add(skew);
                let stop = dst.add(n);
                let chunk = streams * PAGE;
                if (s as usize) & 63 == 0 {
                    let to_page = (PAGE - (s as usize & (PAGE - 1))) & (PAGE - 1);
                    if (stop as usize) - (d as usize) >= to_page + chunk {
                        let page_start = d.add(to_page);
                        while d < page_start {
                            stnt(d, ld(s));
                            d = d.add(W);
                            s = s.add(W);
                        }
                    }
                }
                // A destination a little ahead of the source (modulo the
                // span over which the core compares addresses) would have
                // stream k's stores land where a later stream's loads read:
                // the loads then wait for them. Visiting the streams from the
                // last one down reads those addresses before they are written.
                let ahead = (d as usize).wrapping_sub(s as usize) & (NT_ALIAS_SPAN - 1);
                let down = ahead != 0 && ahead < chunk;
                while (stop as usize) - (d as usize) >= chunk {
                    let mut off = 0;
                    while off < PAGE {
                        let mut i = 0;
                        while i < streams {
                            let k = if down { streams - 1 - i } else { i };
                            let sp = s.add(k * PAGE + off);
                            let dp = d.add(k * PAGE + off);
                            let mut v = 0;
                            while v < VISIT {
                                stnt(dp.add(v), ld(sp.add(v)));
                                v += W;
                            }
                            i += 1;
                        }
                        off += VISIT;
                    }
                    d = d.add(chunk);
                    s = s.add(chunk);
                }
                let end = dst.add(n - B);
                while d <= end {
                    let a = ld(s);
                    let b = ld(s.add(W));
                    let c = ld(s.add(2 * W));
                    let e = ld(s.add(3 * W));
                    stnt(d, a);
                    stnt(d.add(W), b);
                    stnt(d.add(2 * W), c);
                    stnt(d.add(3 * W), e);
                    d = d.add(B);
                    s = s.add(B);
                }
                _mm_sfence();
                // The ragged ends, with ordinary stores that may rewrite bytes the
                // loop already wrote (with the same values).
                let t0 = ld(src.add(n - 4 * W));
                let t1 = ld(src.add(n - 3 * W));
                let t2 = ld(src.add(n - 2 * W));
                let t3 = ld(src.add(n - W));
                stu(dst.add(n - 4 * W), t0);
                stu(dst.add(n - 3 * W), t1);
                stu(dst.add(n - 2 * W), t2);
                stu(dst.add(n - W), t3);
                copy_first_64(dst, src);
            }

            /// Fills the first 64 bytes (`n >= 64`).
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_first_64(dst: *mut u8, v: $v) {
                let mut i = 0;
                while i < 64 {
                    stu(dst.add(i), v);
                    i += W;
                }
            }

            /// Fills `n > 16` bytes (inlining: see `copy_gt16`).
            #[target_feature(enable = $feat)]
            #[$entry]
            pub(in crate::sys::copy) unsafe fn fill_gt16(
                dst: *mut u8,
                byte: u8,
                n: usize,
                t: &Thresholds,
            ) {
                if n > 8 * W {
                    let p = Placement::of_fill(dst as usize);
                    if n < t.special_min(p) {
                        return fill_loop(dst, $splat(byte as i8), n);
                    }
                    return fill_large(dst, byte, n, t, p);
                }
                if n <= 2 * W {
                    if W >= 32 && n <= 32 {
                        return fill_16_32(dst, byte, n);
                    }
                    if W == 64 && n <= 64 {
                        return fill_32_64(dst, byte, n);
                    }
                }
                let v = $splat(byte as i8);
                if n <= 2 * W {
                    stu(dst, v);
                    stu(dst.add(n - W), v);
                    return;
                }
                if n <= 4 * W {
                    stu(dst, v);
                    stu(dst.add(W), v);
                    stu(dst.add(n - 2 * W), v);
                    stu(dst.add(n - W), v);
                    return;
                }
                if n <= 8 * W {
                    stu(dst, v);
                    stu(dst.add(W), v);
                    stu(dst.add(2 * W), v);
                    stu(dst.add(3 * W), v);
                    stu(dst.add(n - 4 * W), v);
                    stu(dst.add(n - 3 * W), v);
                    stu(dst.add(n - 2 * W), v);
                    stu(dst.add(n - W), v);
                    return;
                }
            }

            /// Sizes from the first threshold up (`n > 8 W`). Out of line, as
            /// `copy_large`; it broadcasts the byte itself, as a vector argument
            /// would go through the stack.
            #[target_feature(enable = $feat)]
            #[inline(never)]
            unsafe fn fill_large(dst: *mut u8, byte: u8, n: usize, t: &Thresholds, p: Placement) {
                let v = $splat(byte as i8);
                match t.strategy(n, p) {
                    Some(Strategy::Rep) => fill_rep(dst, byte, n),
                    Some(Strategy::NonTemporal { streams }) => {
                        fill_nontemporal(dst, v, n, usize::from(streams))
                    }
                    Some(Strategy::Glibc) => super::super::glibc_memset_raw(dst, byte, n),
                    Some(Strategy::Loop { isa }) if isa.vector_bytes() != W && n > isa.small_max() => {
                        super::super::fill_loop_of(isa, dst, byte, n)
                    }
                    _ => fill_loop(dst, v, n),
                }
            }

            /// The vector loop, out of line, for [`super::super::fill_loop_of`]
            /// (`n > 8 W`).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            pub(in crate::sys::copy) unsafe fn fill_loop_entry(dst: *mut u8, byte: u8, n: usize) {
                fill_loop(dst, $splat(byte as i8), n)
            }

            /// `rep stosb` over the whole range. Aligning the destination first
            /// (one vector store, then `rep stosb` from the next 64-byte
            /// boundary) measured 0.95–0.99 of glibc's plain `rep stosb` on
            /// 4 KiB fills one byte past a boundary, 1.00–1.01 without.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_rep(dst: *mut u8, byte: u8, n: usize) {
                rep_stosb(dst, byte, n);
            }

            /// Vector loop with aligned temporal stores (`n > 8 W`).
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_loop(dst: *mut u8, v: $v, n: usize) {
                // An aligned destination starts the loop at its first byte and
                // needs no separate head store.
                let misalign = dst as usize & (W - 1);
                if misalign != 0 {
                    stu(dst, v);
                }
                let mut d = dst.add((W - misalign) & (W - 1));
                let end = dst.add(n - B);
                while d < end {
                    sta(d, v);
                    sta(d.add(W), v);
                    sta(d.add(2 * W), v);
                    sta(d.add(3 * W), v);
                    d = d.add(B);
                }
                stu(dst.add(n - 4 * W), v);
                stu(dst.add(n - 3 * W), v);
                stu(dst.add(n - 2 * W), v);
                stu(dst.add(n - W), v);
            }

            /// Non-temporal stores with the destination aligned to 64 (`n > 8 W`),
            /// then `sfence`.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_nontemporal(dst: *mut u8, v: $v, n: usize, streams: usize) {
                let skew = (64 - (dst as usize & 63)) & 63;
                let mut d = dst.add(skew);
                let stop = dst.add(n);
                // Pages side by side as in the copy (about 5% more bytes per
                // second than one stream at 1 GiB on the Intel VM), from a
                // page boundary.
                let chunk = streams * PAGE;
                let to_page = (PAGE - (d as usize & (PAGE - 1))) & (PAGE - 1);
                if (stop as usize) - (d as usize) >= to_page + chunk {
                    let page_start = d.add(to_page);
                    while d < page_start {
                        stnt(d, v);
                        d = d.add(W);
                    }
                    while (stop as usize) - (d as usize) >= chunk {
                        let mut off = 0;
                        while off < PAGE {
                            let mut k = 0;
                            while k < streams {
                                let dp = d.add(k * PAGE + off);
                                let mut i = 0;
                                while i < VISIT {
                                    stnt(dp.add(i), v);
                                    i += W;
                                }
                                k += 1;
                            }
                            off += VISIT;
                        }
                        d = d.add(chunk);
                    }
                }
                let end = dst.add(n - B);
                while d <= end {
                    stnt(d, v);
                    stnt(d.add(W), v);
                    stnt(d.add(2 * W), v);
                    stnt(d.add(3 * W), v);
                    d = d.add(B);
                }
                _mm_sfence();
                stu(dst.add(n - 4 * W), v);
                stu(dst.add(n - 3 * W), v);
                stu(dst.add(n - 2 * W), v);
                stu(dst.add(n - W), v);
                fill_first_64(dst, v);
            }
        }
    };
}

vector_kernels! {
    /// 16-byte SSE2 kernels (every x86-64 CPU).
    sse2, feature = "sse2", entry = #[inline(never)], width = 16, vector = __m128i,
    loadu = _mm_loadu_si128, storeu = _mm_storeu_si128,
    stream = _mm_stream_si128, splat = _mm_set1_epi8
}

vector_kernels! {
    /// 32-byte AVX2 kernels.
    avx2, feature = "avx2", entry = #[inline], width = 32, vector = __m256i,
    loadu = _mm256_loadu_si256, storeu = _mm256_storeu_si256,
    stream = _mm256_stream_si256, splat = _mm256_set1_epi8
}

vector_kernels! {
    /// 64-byte AVX-512 kernels.
    avx512, feature = "avx512f,avx512bw", entry = #[inline], width = 64, vector = __m512i,
    loadu = _mm512_loadu_si512, storeu = _mm512_storeu_si512,
    stream = _mm512_stream_si512, splat = _mm512_set1_epi8
}
