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

use super::Thresholds;
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

/// Below this distance (modulo 4 KiB) of the destination ahead of the source,
/// the vector loop runs backwards: forwards, its loads would wait on the stores
/// it has just made to addresses with the same low 12 bits (4K aliasing).
const BACKWARD_BELOW: usize = 2048;

/// Below this distance (modulo 4 KiB) of the destination ahead of the source,
/// `rep movsb` falls into a slow mode on recent Intel cores (measured: up to
/// ten times slower with the two buffers on transparent huge pages); the
/// vector loop is used instead.
const REP_MOVSB_UNSAFE_BELOW: usize = 1024;

/// Whether `dst` is ahead of `src` by `1..limit` bytes modulo 4 KiB.
#[inline(always)]
fn dst_shortly_ahead(dst: *mut u8, src: *const u8, limit: usize) -> bool {
    let ahead = (dst as usize).wrapping_sub(src as usize) & 4095;
    ahead != 0 && ahead < limit
}

/// Whether `rep movsb` runs at full speed for these pointers.
#[inline(always)]
fn rep_movsb_is_safe(dst: *mut u8, src: *const u8) -> bool {
    !dst_shortly_ahead(dst, src, REP_MOVSB_UNSAFE_BELOW)
}

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
/// the intrinsics are that width's unaligned load and store, aligned store,
/// non-temporal store and byte broadcast.
macro_rules! vector_kernels {
    (
        $(#[$doc:meta])*
        $name:ident, feature = $feat:literal, width = $w:literal, vector = $v:ty,
        loadu = $loadu:path, storeu = $storeu:path, store = $store:path,
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

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn sta(p: *mut u8, v: $v) {
                $store(p.cast(), v)
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
            /// gets its own copy and reaches it with a direct call.
            #[target_feature(enable = $feat)]
            #[inline]
            pub(in crate::sys::copy) unsafe fn copy_gt16(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
            ) {
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
                if n >= t.nontemporal_min() {
                    copy_nontemporal(dst, src, n)
                } else if n >= t.rep_min() && n < t.rep_max() && rep_movsb_is_safe(dst, src) {
                    copy_rep(dst, src, n)
                } else {
                    copy_loop(dst, src, n)
                }
            }

            /// Vector loop with aligned temporal stores (`n > 8 W`). When the
            /// destination sits a little above the source modulo 4 KiB, loads would
            /// falsely wait for the stores just made (4K aliasing): the loop then
            /// runs backwards.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_loop(dst: *mut u8, src: *const u8, n: usize) {
                let head = ld(src);
                let t0 = ld(src.add(n - 4 * W));
                let t1 = ld(src.add(n - 3 * W));
                let t2 = ld(src.add(n - 2 * W));
                let t3 = ld(src.add(n - W));
                if dst_shortly_ahead(dst, src, BACKWARD_BELOW) {
                    return copy_loop_backward(dst, src, n, head, [t0, t1, t2, t3]);
                }
                let skew = W - (dst as usize & (W - 1));
                let mut d = dst.add(skew);
                let mut s = src.add(skew);
                let end = dst.add(n - B);
                while d < end {
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
                stu(dst.add(n - 4 * W), t0);
                stu(dst.add(n - 3 * W), t1);
                stu(dst.add(n - 2 * W), t2);
                stu(dst.add(n - W), t3);
                stu(dst, head);
            }

            /// The loop from the end down, with the last store aligned; the first
            /// four vectors and the last one are stored unaligned.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_loop_backward(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                head: $v,
                tail: [$v; 4],
            ) {
                let h1 = ld(src.add(W));
                let h2 = ld(src.add(2 * W));
                let h3 = ld(src.add(3 * W));
                // End of the aligned part: dst + n rounded down to W.
                let end = (dst as usize + n) & !(W - 1);
                let mut d = end as *mut u8;
                let mut s = src.add(end - dst as usize);
                let start = dst.add(B);
                while d > start {
                    d = d.sub(B);
                    s = s.sub(B);
                    let a = ld(s.add(3 * W));
                    let b = ld(s.add(2 * W));
                    let c = ld(s.add(W));
                    let e = ld(s);
                    sta(d.add(3 * W), a);
                    sta(d.add(2 * W), b);
                    sta(d.add(W), c);
                    sta(d, e);
                }
                stu(dst, head);
                stu(dst.add(W), h1);
                stu(dst.add(2 * W), h2);
                stu(dst.add(3 * W), h3);
                stu(dst.add(n - 4 * W), tail[0]);
                stu(dst.add(n - 3 * W), tail[1]);
                stu(dst.add(n - 2 * W), tail[2]);
                stu(dst.add(n - W), tail[3]);
            }

            /// `rep movsb` with the destination aligned to 64 (`n > 8 W >= 128`).
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_rep(dst: *mut u8, src: *const u8, n: usize) {
                let skew = 64 - (dst as usize & 63);
                copy_first_64(dst, src);
                rep_movsb(dst.add(skew), src.add(skew), n - skew);
            }

            /// Non-temporal stores with the destination aligned to 64 (`n > 8 W`),
            /// then `sfence`.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, n: usize) {
                let skew = 64 - (dst as usize & 63);
                let mut d = dst.add(skew);
                let mut s = src.add(skew);
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

            /// Fills `n > 16` bytes (`#[inline]`: see `copy_gt16`).
            #[target_feature(enable = $feat)]
            #[inline]
            pub(in crate::sys::copy) unsafe fn fill_gt16(
                dst: *mut u8,
                byte: u8,
                n: usize,
                t: &Thresholds,
            ) {
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
                if n >= t.nontemporal_min() {
                    fill_nontemporal(dst, v, n)
                } else if n >= t.rep_min() && n < t.rep_max() {
                    let skew = 64 - (dst as usize & 63);
                    fill_first_64(dst, v);
                    rep_stosb(dst.add(skew), byte, n - skew);
                } else {
                    fill_loop(dst, v, n)
                }
            }

            /// Vector loop with aligned temporal stores (`n > 8 W`).
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_loop(dst: *mut u8, v: $v, n: usize) {
                let skew = W - (dst as usize & (W - 1));
                let mut d = dst.add(skew);
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
                stu(dst, v);
            }

            /// Non-temporal stores with the destination aligned to 64 (`n > 8 W`),
            /// then `sfence`.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_nontemporal(dst: *mut u8, v: $v, n: usize) {
                let skew = 64 - (dst as usize & 63);
                let mut d = dst.add(skew);
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
    sse2, feature = "sse2", width = 16, vector = __m128i,
    loadu = _mm_loadu_si128, storeu = _mm_storeu_si128, store = _mm_store_si128,
    stream = _mm_stream_si128, splat = _mm_set1_epi8
}

vector_kernels! {
    /// 32-byte AVX2 kernels.
    avx2, feature = "avx2", width = 32, vector = __m256i,
    loadu = _mm256_loadu_si256, storeu = _mm256_storeu_si256, store = _mm256_store_si256,
    stream = _mm256_stream_si256, splat = _mm256_set1_epi8
}

vector_kernels! {
    /// 64-byte AVX-512 kernels.
    avx512, feature = "avx512f", width = 64, vector = __m512i,
    loadu = _mm512_loadu_si512, storeu = _mm512_storeu_si512, store = _mm512_store_si512,
    stream = _mm512_stream_si512, splat = _mm512_set1_epi8
}
