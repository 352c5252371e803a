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

/// Copies `32 <= n <= 64` bytes with four overlapping 16-byte moves, all
/// loads first (SSE2, baseline: no dispatch needed).
#[inline(always)]
pub(super) unsafe fn copy_32_64_sse2(dst: *mut u8, src: *const u8, n: usize) {
    let a = _mm_loadu_si128(src.cast());
    let b = _mm_loadu_si128(src.add(16).cast());
    let c = _mm_loadu_si128(src.add(n - 32).cast());
    let d = _mm_loadu_si128(src.add(n - 16).cast());
    _mm_storeu_si128(dst.cast(), a);
    _mm_storeu_si128(dst.add(16).cast(), b);
    _mm_storeu_si128(dst.add(n - 32).cast(), c);
    _mm_storeu_si128(dst.add(n - 16).cast(), d);
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

/// Whether a `w`-byte access at `addr` crosses a 4 KiB page boundary. Such a
/// store costs several times an ordinary one on the Zen 4 guest: the one
/// unaligned vector that ended a whole-page copy to `dst+1` made the
/// 4 KiB copy 0.82 of glibc, 1.18 without it (`bench memcpy --sizes 4K`).
#[inline(always)]
fn crosses_page(addr: usize, w: usize) -> bool {
    addr & 4095 > 4096 - w
}

/// Copies with source and destination at the same page offset run the loop
/// backwards below this size (see `copy_loop`).
const SAME_OFFSET_BACKWARD_BELOW: usize = 2048;
// AVX2's process entry copies 257-512 bytes backwards whenever the
// destination is less than `backward_below` ahead, co-aligned included,
// which agrees with `copy_loop` only while this holds.
const _: () = assert!(SAME_OFFSET_BACKWARD_BELOW > 512);

/// Copies `n <= 32` bytes with one masked 32-byte load and store, inline in
/// the caller (the fast path with [`super::Small::Masked`]): lanes past `n`
/// are neither read nor written and cannot fault. Needs AVX-512 BW and VL
/// and BMI2 at run time; the assembler needs no target feature, and the
/// registers it uses are declared clobbered.
///
/// 32 bytes rather than 64: a masked access still touches every cache line
/// its whole width spans. Measured on the Zen 5 guest, copies of 8-33 bytes
/// from memory with a 64-byte window (which crosses into the next line from
/// 7 bytes in) took 20-29 ns against glibc's 15.
///
/// Both lines are prefetched first: a masked access that misses the TLB
/// is slow to start its page walk (on the Zen 5 guest, 8-byte copies spread
/// over 4 GiB of 2 MiB pages took 44-52 ns with masked moves alone, 33 with
/// the prefetches, glibc 28-39), and a prefetch starts it at once. A
/// prefetch never faults, so the dangling pointers of empty slices are
/// harmless; on data in L1 it costs two instructions.
#[inline(always)]
pub(super) unsafe fn copy_masked_le32(dst: *mut u8, src: *const u8, n: usize) {
    asm!(
        "prefetcht0 byte ptr [{src}]",
        "prefetcht0 byte ptr [{dst}]",
        "mov {mask:e}, -1",
        "bzhi {mask:e}, {mask:e}, {n:e}",
        "kmovd k1, {mask:e}",
        "vmovdqu8 ymm16 {{k1}} {{z}}, ymmword ptr [{src}]",
        "vmovdqu8 ymmword ptr [{dst}] {{k1}}, ymm16",
        mask = out(reg) _,
        n = in(reg) n,
        src = in(reg) src,
        dst = in(reg) dst,
        out("k1") _,
        out("zmm16") _,
        options(nostack, preserves_flags)
    );
}

/// Copies `32 <= n <= 64` bytes with two overlapping 32-byte moves, both
/// loads first, inline in the caller (as [`copy_masked_le32`]).
#[inline(always)]
pub(super) unsafe fn copy_32_64_inline(dst: *mut u8, src: *const u8, n: usize) {
    asm!(
        "vmovdqu64 ymm16, ymmword ptr [{src}]",
        "vmovdqu64 ymm17, ymmword ptr [{src} + {n} - 32]",
        "vmovdqu64 ymmword ptr [{dst}], ymm16",
        "vmovdqu64 ymmword ptr [{dst} + {n} - 32], ymm17",
        n = in(reg) n,
        src = in(reg) src,
        dst = in(reg) dst,
        out("zmm16") _,
        out("zmm17") _,
        options(nostack, preserves_flags)
    );
}

/// Copies `64 <= n <= 128` bytes with two overlapping 64-byte moves, both
/// loads first, inline in the caller (as [`copy_masked_le64`]).
#[inline(always)]
pub(super) unsafe fn copy_64_128_inline(dst: *mut u8, src: *const u8, n: usize) {
    asm!(
        "vmovdqu64 zmm16, zmmword ptr [{src}]",
        "vmovdqu64 zmm17, zmmword ptr [{src} + {n} - 64]",
        "vmovdqu64 zmmword ptr [{dst}], zmm16",
        "vmovdqu64 zmmword ptr [{dst} + {n} - 64], zmm17",
        n = in(reg) n,
        src = in(reg) src,
        dst = in(reg) dst,
        out("zmm16") _,
        out("zmm17") _,
        options(nostack, preserves_flags)
    );
}

/// The index of a copy's [`Placement`](super::Placement) into `r8` (`rdi` =
/// dst, `rsi` = src; clobbers `eax` and the flags): 0 when the distance
/// modulo 4 KiB is a multiple of 64, 1 when it is below 64, 2 otherwise, as
/// `Placement::of_copy` decides. One text for the two entries that compare
/// the size with that placement's first special class: the AVX-512 leaf and
/// the AVX2 process entry.
macro_rules! placement_index_asm {
    () => {
        "mov eax, edi
         sub eax, esi
         and eax, 4095
         xor r8d, r8d
         test eax, 63
         jz 73f
         mov r8d, 1
         cmp eax, 64
         jb 73f
         mov r8d, 2
         73:"
    };
}

/// `rep movsb` for a copy inside the table's direct window
/// ([`Thresholds::rep_direct`](super::Thresholds): this placement's start,
/// the end, and two guards, each free when `(ahead & mask) - 1 >= below -
/// 1`), as the kernel's `copy_rep` does it: a 64-byte aligned destination
/// straight, any other after `$load_head` (the first 64 bytes into
/// registers), from its next 64-byte boundary, then `$store_head` (them to
/// `[r9]`, the destination); returns 0. Outside the window it falls
/// through to label 30. Needs `r8` = the placement index
/// ([`placement_index_asm`]), `rcx` = the thresholds and `{rep_direct}` the
/// window's offset in them; clobbers rax, rcx, r9 and the flags. One text
/// for the two entries that reach `rep movsb`: through the kernel's
/// `copy_large`, two calls and the window tested again, a hot 4 KiB copy
/// from src+7 to dst+1 took 36.1 ns with AVX2 against 34.4 here (bare
/// `rep movsb` 31.8, glibc 32.2; Emerald Rapids guest).
macro_rules! rep_direct_asm {
    ($load_head:literal, $store_head:literal) => {
        concat!(
            "cmp rdx, qword ptr [rcx + {rep_direct} + r8 * 8]
             jb 30f
             cmp rdx, qword ptr [rcx + {rep_direct} + 24]
             jae 30f
             mov rax, rdi
             sub rax, rsi
             mov r9, rax
             and r9, qword ptr [rcx + {rep_direct} + 32]
             sub r9, 1
             cmp r9, qword ptr [rcx + {rep_direct} + 40]
             jb 30f
             and rax, qword ptr [rcx + {rep_direct} + 48]
             sub rax, 1
             cmp rax, qword ptr [rcx + {rep_direct} + 56]
             jb 30f
             test dil, 63
             jnz 31f
             mov rcx, rdx
             rep movsb
             xor eax, eax
             ret
             31:
             ",
            $load_head,
            "
             mov r9, rdi
             mov eax, edi
             and eax, 63
             mov ecx, 64
             sub ecx, eax
             add rdi, rcx
             add rsi, rcx
             neg rcx
             add rcx, rdx
             rep movsb
             ",
            $store_head,
            "
             xor eax, eax
             ret
             30:"
        )
    };
}

/// The copy of 257-512 bytes (`rdi` = dst, `rsi` = src, `rdx` = n): four
/// vectors from each end, every load before the first store; `eax` = 0 after.
/// One text in the two places it runs from: [`avx512_leaf::copy_process_large`]
/// (`pagewise::copy::copy` and `pw_copy`), with no taken branch before it,
/// and [`avx512_leaf::copy_129_512`] (a `Copier`'s kernel), one branch past
/// its 129-256 B case. With the process entry jumping to the leaf and the
/// leaf to this block, the hot 512-byte aligned copy ran 0.91 of glibc's.
macro_rules! copy_257_512_asm {
    () => {
        "vmovdqu64 zmm16, zmmword ptr [rsi]
         vmovdqu64 zmm17, zmmword ptr [rsi + 64]
         vmovdqu64 zmm18, zmmword ptr [rsi + 128]
         vmovdqu64 zmm19, zmmword ptr [rsi + 192]
         vmovdqu64 zmm20, zmmword ptr [rsi + rdx - 256]
         vmovdqu64 zmm21, zmmword ptr [rsi + rdx - 192]
         vmovdqu64 zmm22, zmmword ptr [rsi + rdx - 128]
         vmovdqu64 zmm23, zmmword ptr [rsi + rdx - 64]
         vmovdqu64 zmmword ptr [rdi], zmm16
         vmovdqu64 zmmword ptr [rdi + 64], zmm17
         vmovdqu64 zmmword ptr [rdi + 128], zmm18
         vmovdqu64 zmmword ptr [rdi + 192], zmm19
         vmovdqu64 zmmword ptr [rdi + rdx - 256], zmm20
         vmovdqu64 zmmword ptr [rdi + rdx - 192], zmm21
         vmovdqu64 zmmword ptr [rdi + rdx - 128], zmm22
         vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm23
         xor eax, eax
         ret"
    };
}

/// The copy of 257-512 bytes with AVX2 (`rdi` = dst, `rsi` = src, `rdx` =
/// n): eight 32-byte vectors from each end in all sixteen `ymm` registers,
/// every load before the first store, then `vzeroupper`; `eax` = 0 after.
/// The process entry runs it for a 32-byte aligned destination with no
/// taken branch after its instruction-set test, where `copy_gt16` had a
/// call of the vector loop behind four: with AVX2 on both sides, aligned
/// 300-512 B ran at 0.73-0.85 of glibc's. (To a misaligned destination its
/// split stores lost to the loop's aligned ones.)
macro_rules! copy_257_512_avx2_asm {
    () => {
        "vmovdqu ymm0, ymmword ptr [rsi]
         vmovdqu ymm1, ymmword ptr [rsi + 32]
         vmovdqu ymm2, ymmword ptr [rsi + 64]
         vmovdqu ymm3, ymmword ptr [rsi + 96]
         vmovdqu ymm4, ymmword ptr [rsi + 128]
         vmovdqu ymm5, ymmword ptr [rsi + 160]
         vmovdqu ymm6, ymmword ptr [rsi + 192]
         vmovdqu ymm7, ymmword ptr [rsi + 224]
         vmovdqu ymm8, ymmword ptr [rsi + rdx - 256]
         vmovdqu ymm9, ymmword ptr [rsi + rdx - 224]
         vmovdqu ymm10, ymmword ptr [rsi + rdx - 192]
         vmovdqu ymm11, ymmword ptr [rsi + rdx - 160]
         vmovdqu ymm12, ymmword ptr [rsi + rdx - 128]
         vmovdqu ymm13, ymmword ptr [rsi + rdx - 96]
         vmovdqu ymm14, ymmword ptr [rsi + rdx - 64]
         vmovdqu ymm15, ymmword ptr [rsi + rdx - 32]
         vmovdqu ymmword ptr [rdi], ymm0
         vmovdqu ymmword ptr [rdi + 32], ymm1
         vmovdqu ymmword ptr [rdi + 64], ymm2
         vmovdqu ymmword ptr [rdi + 96], ymm3
         vmovdqu ymmword ptr [rdi + 128], ymm4
         vmovdqu ymmword ptr [rdi + 160], ymm5
         vmovdqu ymmword ptr [rdi + 192], ymm6
         vmovdqu ymmword ptr [rdi + 224], ymm7
         vmovdqu ymmword ptr [rdi + rdx - 256], ymm8
         vmovdqu ymmword ptr [rdi + rdx - 224], ymm9
         vmovdqu ymmword ptr [rdi + rdx - 192], ymm10
         vmovdqu ymmword ptr [rdi + rdx - 160], ymm11
         vmovdqu ymmword ptr [rdi + rdx - 128], ymm12
         vmovdqu ymmword ptr [rdi + rdx - 96], ymm13
         vmovdqu ymmword ptr [rdi + rdx - 64], ymm14
         vmovdqu ymmword ptr [rdi + rdx - 32], ymm15
         vzeroupper
         xor eax, eax
         ret"
    };
}

/// The copy of 257-384 bytes with AVX2, as [`copy_257_512_avx2_asm`] with
/// six vectors from each end, the six from the end stored first. With AVX2
/// on both sides (Sapphire Rapids-class guest, 2026-12-03, six alternating
/// processes each, `bench memcpy --sizes 260,300,320,350,384
/// --no-misaligned`), against the sixteen-vector copy: hot aligned 260 B
/// 0.73-0.76 of glibc -> 0.90, 300 B 0.88-0.91 -> 1.10, 350 B 0.92 -> 1.10;
/// cold 320-384 B 0.87-0.92 -> 1.00-1.15. Storing the front six first put
/// cold 300 B at 0.69-0.84 (0.90-0.92 before).
macro_rules! copy_257_384_avx2_asm {
    () => {
        "vmovdqu ymm0, ymmword ptr [rsi]
         vmovdqu ymm1, ymmword ptr [rsi + 32]
         vmovdqu ymm2, ymmword ptr [rsi + 64]
         vmovdqu ymm3, ymmword ptr [rsi + 96]
         vmovdqu ymm4, ymmword ptr [rsi + 128]
         vmovdqu ymm5, ymmword ptr [rsi + 160]
         vmovdqu ymm10, ymmword ptr [rsi + rdx - 192]
         vmovdqu ymm11, ymmword ptr [rsi + rdx - 160]
         vmovdqu ymm12, ymmword ptr [rsi + rdx - 128]
         vmovdqu ymm13, ymmword ptr [rsi + rdx - 96]
         vmovdqu ymm14, ymmword ptr [rsi + rdx - 64]
         vmovdqu ymm15, ymmword ptr [rsi + rdx - 32]
         vmovdqu ymmword ptr [rdi + rdx - 192], ymm10
         vmovdqu ymmword ptr [rdi + rdx - 160], ymm11
         vmovdqu ymmword ptr [rdi + rdx - 128], ymm12
         vmovdqu ymmword ptr [rdi + rdx - 96], ymm13
         vmovdqu ymmword ptr [rdi + rdx - 64], ymm14
         vmovdqu ymmword ptr [rdi + rdx - 32], ymm15
         vmovdqu ymmword ptr [rdi], ymm0
         vmovdqu ymmword ptr [rdi + 32], ymm1
         vmovdqu ymmword ptr [rdi + 64], ymm2
         vmovdqu ymmword ptr [rdi + 96], ymm3
         vmovdqu ymmword ptr [rdi + 128], ymm4
         vmovdqu ymmword ptr [rdi + 160], ymm5
         vzeroupper
         xor eax, eax
         ret"
    };
}

/// The forward copy of 257-512 bytes to a misaligned destination with AVX2
/// (`rdi` = dst, `rsi` = src, `rdx` = n, `r8` = dst + n - 128): the first
/// vector and the last four loaded before any store, blocks of four
/// aligned stores from the first 32-byte boundary above `dst` while they
/// start below `r8`, then the last four and the first. glibc's shape, with
/// no branch on the way but the loop's; `eax` = 0 after.
macro_rules! copy_misaligned_257_512_avx2_asm {
    () => {
        "vmovdqu ymm0, ymmword ptr [rsi]
         vmovdqu ymm1, ymmword ptr [rsi + rdx - 128]
         vmovdqu ymm2, ymmword ptr [rsi + rdx - 96]
         vmovdqu ymm3, ymmword ptr [rsi + rdx - 64]
         vmovdqu ymm4, ymmword ptr [rsi + rdx - 32]
         sub rsi, rdi
         lea r10, [rdi + 32]
         and r10, -32
         8:
         vmovdqu ymm5, ymmword ptr [r10 + rsi]
         vmovdqu ymm6, ymmword ptr [r10 + rsi + 32]
         vmovdqu ymm7, ymmword ptr [r10 + rsi + 64]
         vmovdqu ymm8, ymmword ptr [r10 + rsi + 96]
         vmovdqa ymmword ptr [r10], ymm5
         vmovdqa ymmword ptr [r10 + 32], ymm6
         vmovdqa ymmword ptr [r10 + 64], ymm7
         vmovdqa ymmword ptr [r10 + 96], ymm8
         add r10, 128
         cmp r10, r8
         jb 8b
         vmovdqu ymmword ptr [r8], ymm1
         vmovdqu ymmword ptr [r8 + 32], ymm2
         vmovdqu ymmword ptr [r8 + 64], ymm3
         vmovdqu ymmword ptr [r8 + 96], ymm4
         vmovdqu ymmword ptr [rdi], ymm0
         vzeroupper
         xor eax, eax
         ret"
    };
}

/// The backward copy of 257-512 bytes to a misaligned destination with
/// AVX2 (`rdi` = dst, `rsi` = src, `rdx` = n), for a destination a little
/// ahead of the source modulo 4 KiB: the first four vectors and the last
/// loaded before any store, blocks of four aligned stores from the highest
/// that ends below the last vector down while they start above `dst`, then
/// the first four and the last. glibc's shape; `eax` = 0 after.
macro_rules! copy_backward_257_512_avx2_asm {
    () => {
        "vmovdqu ymm0, ymmword ptr [rsi]
         vmovdqu ymm1, ymmword ptr [rsi + 32]
         vmovdqu ymm2, ymmword ptr [rsi + 64]
         vmovdqu ymm3, ymmword ptr [rsi + 96]
         vmovdqu ymm4, ymmword ptr [rsi + rdx - 32]
         sub rsi, rdi
         lea r10, [rdi + rdx - 129]
         and r10, -32
         8:
         vmovdqu ymm5, ymmword ptr [r10 + rsi + 96]
         vmovdqu ymm6, ymmword ptr [r10 + rsi + 64]
         vmovdqu ymm7, ymmword ptr [r10 + rsi + 32]
         vmovdqu ymm8, ymmword ptr [r10 + rsi]
         vmovdqa ymmword ptr [r10 + 96], ymm5
         vmovdqa ymmword ptr [r10 + 64], ymm6
         vmovdqa ymmword ptr [r10 + 32], ymm7
         vmovdqa ymmword ptr [r10], ymm8
         sub r10, 128
         cmp rdi, r10
         jb 8b
         vmovdqu ymmword ptr [rdi], ymm0
         vmovdqu ymmword ptr [rdi + 32], ymm1
         vmovdqu ymmword ptr [rdi + 64], ymm2
         vmovdqu ymmword ptr [rdi + 96], ymm3
         vmovdqu ymmword ptr [rdi + rdx - 32], ymm4
         vzeroupper
         xor eax, eax
         ret"
    };
}

/// The AVX-512 kernel's entry points for copies and fills of any size.
///
/// Copies and fills of up to 512 bytes are **leaves** written in assembly:
/// no stack, no saved registers, vectors in zmm16 and up (which have no
/// legacy-SSE form, so they need no `vzeroupper`; glibc does the same), and
/// a layout fixed by hand rather than left to the compiler. At these sizes a
/// call costs a handful of cycles, and what decides it is the branches on
/// its way: measured on the Zen 5 guest (`bench memcpy`, hot rows and the
/// fleet row), the same masked move ran at 1.50 ns per call behind two
/// compares and at 1.25 behind one; a compare chain that put the AVX-512
/// case third in the caller cost as much again; and splitting a mix of
/// sizes at 32 bytes before 64 cost 0.3 ns per fleet call in
/// mispredictions. Hence: the rarest sizes leave first, the common case
/// falls through, and every entry sits on a 64-byte boundary.
///
/// With [`super::Small::Masked`] the fast path copies up to 128 bytes inline
/// in the caller (see `super::avx512_copy`) and enters at [`copy_129_512`];
/// otherwise [`copy_guarded`] takes every size: the shape measured on the
/// Intel VM, up to 32 bytes one masked 64-byte move except when the
/// destination is within 64 bytes of the source modulo 4 KiB (Intel's 4K
/// aliasing makes a masked load wait for an earlier store to the same low
/// 12 address bits), where scalar and 16-byte moves run; 33-63 bytes two
/// overlapping 32-byte moves. Both continue into [`copy_64_512`], vectors
/// from each end, and from 513 bytes into a vector loop in the same assembly
/// or, from the table's first special class, the general kernel.
pub(super) mod avx512_leaf {
    use super::*;
    use core::arch::naked_asm;
    use core::mem::offset_of;

    /// Copies `n` bytes (any `n`): up to 32 bytes one masked move unless the
    /// pointers alias (see the module), 33-63 two 32-byte moves.
    ///
    /// # Safety
    /// As [`copy_masked`].
    #[unsafe(naked)]
    pub(in crate::sys::copy) unsafe extern "sysv64" fn copy_guarded(
        dst: *mut u8,
        src: *const u8,
        n: usize,
        t: &Thresholds,
    ) {
        // As `copy_masked`; also clobbers r8, r9 and ymm17.
        naked_asm!(
            ".p2align 6",
            // Sizes from 64 up first: the rarest, so that a mix of sizes
            // mispredicts the fewest branches.
            "cmp rdx, 64",
            "jae {big}",
            "cmp rdx, 32",
            "ja 3f",
            // Scalar moves when (dst - src + 64) mod 4096 < small_scalar_below.
            "mov eax, edi",
            "sub eax, esi",
            "add eax, 64",
            "and eax, 4095",
            "cmp rax, qword ptr [rcx + {scalar_below}]",
            "jb 20f",
            "mov rax, -1",
            "bzhi rax, rax, rdx",
            "kmovq k1, rax",
            "vmovdqu8 zmm16 {{k1}} {{z}}, zmmword ptr [rsi]",
            "vmovdqu8 zmmword ptr [rdi] {{k1}}, zmm16",
            "ret",
            ".p2align 4",
            "3:",
            "vmovdqu64 ymm16, ymmword ptr [rsi]",
            "vmovdqu64 ymm17, ymmword ptr [rsi + rdx - 32]",
            "vmovdqu64 ymmword ptr [rdi], ymm16",
            "vmovdqu64 ymmword ptr [rdi + rdx - 32], ymm17",
            "ret",
            // At most 32 bytes without a mask: two overlapping moves of 16,
            // 8 or 4 bytes, or the first, middle and last of 1-3.
            ".p2align 4",
            "20:",
            "cmp rdx, 16",
            "ja 23f",
            "cmp rdx, 8",
            "jb 21f",
            "mov rax, qword ptr [rsi]",
            "mov r8, qword ptr [rsi + rdx - 8]",
            "mov qword ptr [rdi], rax",
            "mov qword ptr [rdi + rdx - 8], r8",
            "ret",
            "21:",
            "cmp rdx, 4",
            "jb 22f",
            "mov eax, dword ptr [rsi]",
            "mov r8d, dword ptr [rsi + rdx - 4]",
            "mov dword ptr [rdi], eax",
            "mov dword ptr [rdi + rdx - 4], r8d",
            "ret",
            "22:",
            "test rdx, rdx",
            "je 24f",
            "mov r9, rdx",
            "shr r9, 1",
            "movzx eax, byte ptr [rsi]",
            "movzx r8d, byte ptr [rsi + rdx - 1]",
            "movzx r9d, byte ptr [rsi + r9]",
            "mov byte ptr [rdi], al",
            "mov byte ptr [rdi + rdx - 1], r8b",
            "mov rax, rdx",
            "shr rax, 1",
            "mov byte ptr [rdi + rax], r9b",
            "24:",
            "ret",
            "23:",
            "vmovdqu64 xmm16, xmmword ptr [rsi]",
            "vmovdqu64 xmm17, xmmword ptr [rsi + rdx - 16]",
            "vmovdqu64 xmmword ptr [rdi], xmm16",
            "vmovdqu64 xmmword ptr [rdi + rdx - 16], xmm17",
            "ret",
            big = sym copy_64_512,
            scalar_below = const offset_of!(Thresholds, small_scalar_below),
        )
    }

    /// Copies `n >= 64` bytes: up to 128 with two vectors, one from each
    /// end, larger sizes in [`copy_129_512`].
    ///
    /// # Safety
    /// As [`copy_masked`], with `n >= 64`.
    #[unsafe(naked)]
    unsafe extern "sysv64" fn copy_64_512(dst: *mut u8, src: *const u8, n: usize, t: &Thresholds) {
        // Clobbers zmm16, zmm17.
        naked_asm!(
            ".p2align 6",
            "cmp rdx, 128",
            "ja {big}",
            "vmovdqu64 zmm16, zmmword ptr [rsi]",
            "vmovdqu64 zmm17, zmmword ptr [rsi + rdx - 64]",
            "vmovdqu64 zmmword ptr [rdi], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm17",
            "ret",
            big = sym copy_129_512,
        )
    }

    /// Copies `n > 128` bytes: up to 512 with four or eight vectors from
    /// both ends, every load before the first store; larger sizes in
    /// [`copy_above_512`]. Returns with `eax` = 0 (the process entry passes that
    /// on as `pw_copy`'s status). The fast path with [`super::super::Small::Masked`]
    /// calls it directly (it does smaller sizes inline).
    ///
    /// # Safety
    /// As [`copy_masked`], with `n > 128`.
    #[unsafe(naked)]
    pub(in crate::sys::copy) unsafe extern "sysv64" fn copy_129_512(
        dst: *mut u8,
        src: *const u8,
        n: usize,
        t: &Thresholds,
    ) {
        // Clobbers zmm16-zmm23, and above 512 bytes what `copy_above_512` does.
        naked_asm!(
            ".p2align 6",
            "cmp rdx, 256",
            "ja 6f",
            "vmovdqu64 zmm16, zmmword ptr [rsi]",
            "vmovdqu64 zmm17, zmmword ptr [rsi + 64]",
            "vmovdqu64 zmm18, zmmword ptr [rsi + rdx - 128]",
            "vmovdqu64 zmm19, zmmword ptr [rsi + rdx - 64]",
            "vmovdqu64 zmmword ptr [rdi], zmm16",
            "vmovdqu64 zmmword ptr [rdi + 64], zmm17",
            "vmovdqu64 zmmword ptr [rdi + rdx - 128], zmm18",
            "vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm19",
            "xor eax, eax",
            "ret",
            // 257-512 B and from 513 B each start a 64-byte line (measured
            // on an Emerald Rapids guest, 2026-12-02, `bench memcpy --sizes
            // 300,512,600,1000,1K,2K --no-cold`, alternating with the build
            // before, six runs: 600 B-1 KiB L1 aligned 0.84-1.00 of glibc
            // before, 0.91-1.06 after, 1.02-1.06 in five of six; the fleet
            // row 1.67-1.87 against 1.86-1.90, within its trials' spread).
            ".p2align 6",
            "6:",
            "cmp rdx, 512",
            "ja {above_512}",
            copy_257_512_asm!(),
            above_512 = sym copy_above_512,
        )
    }

    /// Copies `n > 512` bytes: the vector loop up to the table's first
    /// special class, the table from there. Returns with `eax` = 0, as
    /// [`copy_129_512`]. Its own function (each 64-byte aligned) so that
    /// the process entry and the leaf both jump straight here, one taken
    /// branch instead of three (a hot 1 KiB aligned copy went from 0.95 to
    /// 0.92 of glibc's with one more).
    ///
    /// # Safety
    /// As [`copy_masked`], with `n > 512`.
    #[unsafe(naked)]
    unsafe extern "sysv64" fn copy_above_512(
        dst: *mut u8,
        src: *const u8,
        n: usize,
        t: &Thresholds,
    ) -> u32 {
        // Clobbers r8-r10 and zmm16-zmm28.
        naked_asm!(
            ".p2align 6",
            "cmp rdx, qword ptr [rcx + {inline_below}]",
            "jae 13f",
            // Backwards when the destination is less than backward_below
            // bytes ahead of the source modulo 4 KiB (at the same offset
            // only below 2 KiB), as `copy_loop`.
            "14:",
            "mov eax, edi",
            "sub eax, esi",
            "and eax, 4095",
            "cmp rax, qword ptr [rcx + {backward_below}]",
            "jae 8f",
            "test eax, eax",
            "jnz 9f",
            "cmp rdx, {same_offset_backward_below}",
            "jb 9f",
            // Forwards: the first vector and the last four are loaded first;
            // aligned blocks from the first 64-byte boundary past dst, of
            // eight vectors while eight fit (with the plan's `LoopBlock::Eight`)
            // and then of four; then those five. Blocks of four only made a
            // hot 2 KiB copy at the same page offset 0.94 of glibc's, eight
            // 1.00 (Sapphire Rapids-class guest, 2026-12-03). The eight go
            // as two halves of four loads then four stores: all eight loads
            // first put cold 10,000 B copies one byte apart at 0.85-1.04 of
            // glibc (1.03-1.06 with blocks of four), halves at 0.91-1.07.
            ".p2align 4",
            "8:",
            // An unaligned store across a page (a page boundary under the
            // last four vectors or under the first): the general kernel,
            // whose loop stores around it (see `crosses_page`).
            // (The last byte less than 255 bytes past a page boundary; the
            // first less than 64 bytes before one.)
            "lea eax, [rdi + rdx - 1]",
            "and eax, 4095",
            "cmp eax, 255",
            "jb 16f",
            "mov eax, edi",
            "and eax, 4095",
            "cmp eax, 4096 - 64",
            "ja 16f",
            "vmovdqu64 zmm16, zmmword ptr [rsi]",
            "vmovdqu64 zmm17, zmmword ptr [rsi + rdx - 64]",
            "vmovdqu64 zmm18, zmmword ptr [rsi + rdx - 128]",
            "vmovdqu64 zmm19, zmmword ptr [rsi + rdx - 192]",
            "vmovdqu64 zmm20, zmmword ptr [rsi + rdx - 256]",
            "lea r8, [rdi + rdx - 256]",
            "mov r9, rdi",
            "sub rsi, rdi",
            "or rdi, 63",
            "inc rdi",
            "add rsi, rdi",
            "lea r10, [r8 - 256]",
            "cmp rdi, r10",
            "jae 12f",
            "cmp rdx, qword ptr [rcx + {wide_loop_from}]",
            "jb 12f",
            ".p2align 4",
            "10:",
            "vmovdqu64 zmm21, zmmword ptr [rsi]",
            "vmovdqu64 zmm22, zmmword ptr [rsi + 64]",
            "vmovdqu64 zmm23, zmmword ptr [rsi + 128]",
            "vmovdqu64 zmm24, zmmword ptr [rsi + 192]",
            "vmovdqa64 zmmword ptr [rdi], zmm21",
            "vmovdqa64 zmmword ptr [rdi + 64], zmm22",
            "vmovdqa64 zmmword ptr [rdi + 128], zmm23",
            "vmovdqa64 zmmword ptr [rdi + 192], zmm24",
            "vmovdqu64 zmm25, zmmword ptr [rsi + 256]",
            "vmovdqu64 zmm26, zmmword ptr [rsi + 320]",
            "vmovdqu64 zmm27, zmmword ptr [rsi + 384]",
            "vmovdqu64 zmm28, zmmword ptr [rsi + 448]",
            "add rsi, 512",
            "vmovdqa64 zmmword ptr [rdi + 256], zmm25",
            "vmovdqa64 zmmword ptr [rdi + 320], zmm26",
            "vmovdqa64 zmmword ptr [rdi + 384], zmm27",
            "vmovdqa64 zmmword ptr [rdi + 448], zmm28",
            "add rdi, 512",
            "cmp rdi, r10",
            "jb 10b",
            "12:",
            "cmp rdi, r8",
            "jae 17f",
            ".p2align 4",
            "18:",
            "vmovdqu64 zmm21, zmmword ptr [rsi]",
            "vmovdqu64 zmm22, zmmword ptr [rsi + 64]",
            "vmovdqu64 zmm23, zmmword ptr [rsi + 128]",
            "vmovdqu64 zmm24, zmmword ptr [rsi + 192]",
            "add rsi, 256",
            "vmovdqa64 zmmword ptr [rdi], zmm21",
            "vmovdqa64 zmmword ptr [rdi + 64], zmm22",
            "vmovdqa64 zmmword ptr [rdi + 128], zmm23",
            "vmovdqa64 zmmword ptr [rdi + 192], zmm24",
            "add rdi, 256",
            "cmp rdi, r8",
            "jb 18b",
            "17:",
            "vmovdqu64 zmmword ptr [r8 + 192], zmm17",
            "vmovdqu64 zmmword ptr [r8 + 128], zmm18",
            "vmovdqu64 zmmword ptr [r8 + 64], zmm19",
            "vmovdqu64 zmmword ptr [r8], zmm20",
            "vmovdqu64 zmmword ptr [r9], zmm16",
            "xor eax, eax",
            "ret",
            // Backwards: the first four vectors and the last one are loaded
            // first; aligned blocks of four from the end down while a block
            // starts above the first four; then those five.
            "9:",
            // As forwards: the last vector, or the first four.
            "lea eax, [rdi + rdx - 1]",
            "and eax, 4095",
            "cmp eax, 63",
            "jb 16f",
            "test edi, 63",
            "jz 19f",
            "mov eax, edi",
            "and eax, 4095",
            "cmp eax, 4096 - 256",
            "ja 16f",
            "19:",
            "vmovdqu64 zmm16, zmmword ptr [rsi]",
            "vmovdqu64 zmm17, zmmword ptr [rsi + 64]",
            "vmovdqu64 zmm18, zmmword ptr [rsi + 128]",
            "vmovdqu64 zmm19, zmmword ptr [rsi + 192]",
            "vmovdqu64 zmm20, zmmword ptr [rsi + rdx - 64]",
            "lea r8, [rdi + rdx - 257]",
            "and r8, -64",
            "sub rsi, rdi",
            "add rsi, r8",
            ".p2align 6",
            "11:",
            "vmovdqu64 zmm21, zmmword ptr [rsi + 192]",
            "vmovdqu64 zmm22, zmmword ptr [rsi + 128]",
            "vmovdqu64 zmm23, zmmword ptr [rsi + 64]",
            "vmovdqu64 zmm24, zmmword ptr [rsi]",
            "sub rsi, 256",
            "vmovdqa64 zmmword ptr [r8 + 192], zmm21",
            "vmovdqa64 zmmword ptr [r8 + 128], zmm22",
            "vmovdqa64 zmmword ptr [r8 + 64], zmm23",
            "vmovdqa64 zmmword ptr [r8], zmm24",
            "sub r8, 256",
            "cmp r8, rdi",
            "ja 11b",
            "vmovdqu64 zmmword ptr [rdi], zmm16",
            "vmovdqu64 zmmword ptr [rdi + 64], zmm17",
            "vmovdqu64 zmmword ptr [rdi + 128], zmm18",
            "vmovdqu64 zmmword ptr [rdi + 192], zmm19",
            "vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm20",
            "xor eax, eax",
            "ret",
            // From the first special class at any placement: this
            // placement's own first special class decides.
            "13:",
            placement_index_asm!(),
            "cmp rdx, qword ptr [rcx + {special_min} + r8 * 8]",
            "jb 14b",
            rep_direct_asm!(
                "vmovdqu64 zmm16, zmmword ptr [rsi]",
                "vmovdqu64 zmmword ptr [r9], zmm16"
            ),
            "jmp {large}",
            // An unaligned store would cross a page: the general kernel's
            // loop, straight (below this placement's first special class,
            // as every size here is, the table would choose it). Through
            // `copy_large`, its direct `rep movsb` window and then the
            // table walk, a hot 4 KiB copy from src+7 to dst+1 took 33.7 ns
            // instead of 32.7 (0.95 of glibc instead of 0.98).
            "16:",
            "jmp {loop_crossing_page}",
            inline_below = const offset_of!(Thresholds, inline_below),
            wide_loop_from = const offset_of!(Thresholds, wide_loop_from),
            special_min = const offset_of!(Thresholds, special_min),
            backward_below = const offset_of!(Thresholds, backward_below),
            same_offset_backward_below = const SAME_OFFSET_BACKWARD_BELOW,
            large = sym copy_large,
            loop_crossing_page = sym super::avx512::copy_loop,
            rep_direct = const offset_of!(Thresholds, rep_direct),
        )
    }

    /// The process entry of large copies (see
    /// [`super::super::copy_process_large`]): reads
    /// [`super::super::PROCESS`] at a fixed address (`rip`-relative; hidden,
    /// so the library still links into a shared object) and jumps to the
    /// kernel its fast path allows, with `rcx` set to its `copy` thresholds:
    /// with AVX-512 it copies up to 512 bytes itself (the leaf's text, no
    /// taken branch) and jumps to [`copy_above_512`] above; with AVX2 it
    /// copies up to 512 bytes itself when that is below the table's first
    /// special class (a measured plan may start one at 257 bytes; the
    /// defaults never do): to a 32-byte aligned destination
    /// straight-line (`copy_257_384_avx2_asm`, `copy_257_512_avx2_asm`), to
    /// a misaligned one in glibc's loop shape, forwards
    /// (`copy_misaligned_257_512_avx2_asm`) or, with the destination a
    /// little ahead of the source modulo 4 KiB, backwards
    /// (`copy_backward_257_512_avx2_asm`), unless an unaligned store would
    /// cross a page; it jumps to AVX2's `copy_loop` for those and the
    /// other sizes below the table's first special class, runs `rep movsb`
    /// itself in the table's direct window ([`Thresholds::rep_direct`]), and
    /// jumps to its `copy_gt16` for the rest; with SSE2 to SSE2's `copy_gt16`. Before any fast
    /// path is on, jumps to `copy_process_first` with `prepare` still in
    /// `rcx`. Returns 0 (each kernel it jumps to does).
    ///
    /// # Safety
    /// As every kernel (see the module), with `n > 256`.
    #[unsafe(naked)]
    pub(in crate::sys::copy) unsafe extern "sysv64-unwind" fn copy_process_large(
        dst: *mut u8,
        src: *const u8,
        n: usize,
        prepare: extern "sysv64-unwind" fn(),
    ) -> u32 {
        // The fast path's fields are set only by `enable_fast_path`, after a
        // `Kernel` proved the CPU has that instruction set.
        naked_asm!(
            ".hidden {process}",
            ".p2align 5",
            "cmp qword ptr [rip + {process} + {fast_avx512}], 0",
            "je 2f",
            "lea rcx, [rip + {process} + {copy}]",
            "cmp rdx, 512",
            "ja {avx512_above_512}",
            copy_257_512_asm!(),
            "2:",
            "movzx eax, byte ptr [rip + {process} + {fast_isa}]",
            "cmp eax, {avx2_code}",
            "jne 3f",
            "lea rcx, [rip + {process} + {copy}]",
            "cmp rdx, 512",
            "ja 5f",
            // A measured plan may have a class of its own from 257 bytes.
            "cmp rdx, qword ptr [rcx + {inline_below}]",
            "jae 5f",
            "test dil, 31",
            "jnz 7f",
            "cmp rdx, 384",
            "jbe 6f",
            copy_257_512_avx2_asm!(),
            "6:",
            copy_257_384_avx2_asm!(),
            // A misaligned destination, 257-512 bytes: forward in
            // glibc's shape unless the loop would run backwards (the
            // destination a little ahead of the source modulo 4 KiB) or
            // an unaligned store would cross a page.
            "7:",
            "mov rax, rdi",
            "sub rax, rsi",
            "and eax, 4095",
            "cmp rax, qword ptr [rcx + {backward_below}]",
            "jb 9f",
            "mov eax, edi",
            "and eax, 4095",
            "cmp eax, 4064",
            "ja 5f",
            "lea r8, [rdi + rdx - 128]",
            "mov eax, r8d",
            "and eax, 4095",
            "cmp eax, 3968",
            "ja 5f",
            copy_misaligned_257_512_avx2_asm!(),
            // Backwards, unless an unaligned store would cross a page.
            "9:",
            "mov eax, edi",
            "and eax, 4095",
            "cmp eax, 3968",
            "ja 5f",
            "lea rax, [rdi + rdx - 32]",
            "and eax, 4095",
            "cmp eax, 4064",
            "ja 5f",
            copy_backward_257_512_avx2_asm!(),
            // Above 512 bytes or misaligned: straight to the loop below the
            // table's first special class (its one compare), the kernel's
            // table above it.
            "5:",
            "cmp rdx, qword ptr [rcx + {inline_below}]",
            "jb {avx2_loop}",
            // From the first special class at any placement: this
            // placement's own decides, as in the AVX-512 leaf (so a class
            // that is `rep` only between differently aligned buffers does
            // not send co-aligned copies out of line).
            placement_index_asm!(),
            "cmp rdx, qword ptr [rcx + {special_min} + r8 * 8]",
            "jb {avx2_loop}",
            // `rep movsb` here in the table's direct window (falling
            // through to 30 outside it), not in the kernel's `copy_large`.
            rep_direct_asm!(
                "vmovdqu ymm0, ymmword ptr [rsi]
                 vmovdqu ymm1, ymmword ptr [rsi + 32]",
                "vmovdqu ymmword ptr [r9], ymm0
                 vmovdqu ymmword ptr [r9 + 32], ymm1
                 vzeroupper"
            ),
            "jmp {avx2}",
            "3:",
            "cmp eax, {sse2_code}",
            "jne 4f",
            "lea rcx, [rip + {process} + {copy}]",
            "jmp {sse2}",
            "4:",
            "jmp {first}",
            process = sym super::super::PROCESS,
            copy = const offset_of!(super::super::ProcessPage, set)
                + offset_of!(super::super::ThresholdSet, copy),
            fast_avx512 = const offset_of!(super::super::ProcessPage, set)
                + offset_of!(super::super::ThresholdSet, copy)
                + offset_of!(Thresholds, fast_avx512),
            fast_isa = const offset_of!(super::super::ProcessPage, set)
                + offset_of!(super::super::ThresholdSet, copy)
                + offset_of!(Thresholds, fast_isa),
            avx2_code = const super::super::Isa::Avx2.code(),
            sse2_code = const super::super::Isa::Sse2.code(),
            avx512_above_512 = sym copy_above_512,
            avx2 = sym super::avx2::copy_gt16_sysv,
            avx2_loop = sym super::avx2::copy_loop,
            inline_below = const offset_of!(Thresholds, inline_below),
            special_min = const offset_of!(Thresholds, special_min),
            rep_direct = const offset_of!(Thresholds, rep_direct),
            backward_below = const offset_of!(Thresholds, backward_below),
            sse2 = sym super::sse2::copy_gt16_sysv,
            first = sym super::super::copy_process_first,
        )
    }

    /// Copies `n > 512` bytes from the table's first special class up.
    #[target_feature(enable = "avx512f,avx512bw")]
    ///
    /// Returns 0, as the leaf does (see [`copy_129_512`]).
    unsafe extern "sysv64" fn copy_large(
        dst: *mut u8,
        src: *const u8,
        n: usize,
        t: &Thresholds,
    ) -> u32 {
        // SAFETY: passed on from the leaf, with n > 512 = 8 vectors.
        unsafe { super::avx512::copy_large(dst, src, n, t) };
        0
    }

    /// Fills `n` bytes (any `n`): below 64 bytes one masked store (it loads
    /// nothing, so nothing can alias), 64-128 bytes two overlapping stores,
    /// larger sizes in [`fill_gt128`].
    ///
    /// glibc's shape: the sizes below 64 take the jump and 64-128 falls
    /// through. With the masked store falling through and 64-128 bytes in
    /// the next function (a jump to another 64-byte line), the 64, 100 and
    /// 128 B rows of `bench memset` ran at 0.87-0.88 of glibc in every run
    /// (one cycle more per call) while those below 64 B ran 1.14; measured
    /// on a Sapphire Rapids-class guest (family 6 model 167), 2026-12-02,
    /// six alternating processes each, `bench memset --sizes
    /// 8,33,64,100,128,200,256 --no-cold --trials 3`: every row 1.00-1.12
    /// after, the fleet row level (0.996 against 0.998). Two masked stores
    /// with no branch below 128 bytes lifted the fleet row to 1.07 but cost
    /// the fixed sizes up to 22% (masked stores across a line are slow), so
    /// they were not kept.
    ///
    /// # Safety
    /// As [`copy_masked`].
    #[unsafe(naked)]
    pub(in crate::sys::copy) unsafe extern "sysv64" fn fill(
        dst: *mut u8,
        byte: u8,
        n: usize,
        t: &Thresholds,
    ) {
        // rdi = dst, sil = byte, rdx = n, rcx = t. Clobbers rax, k1, zmm16.
        naked_asm!(
            ".p2align 6",
            "vpbroadcastb zmm16, esi",
            "cmp rdx, 64",
            "jb 2f",
            "cmp rdx, 128",
            "ja {big}",
            "vmovdqu64 zmmword ptr [rdi], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm16",
            "ret",
            // Bytes past `n` are masked off: neither written, nor can they fault.
            "2:",
            "mov rax, -1",
            "bzhi rax, rax, rdx",
            "kmovq k1, rax",
            "vmovdqu8 zmmword ptr [rdi] {{k1}}, zmm16",
            "ret",
            big = sym fill_gt128,
        )
    }

    /// Fills `n > 128` bytes: up to 512 with four or eight overlapping
    /// stores from both ends; up to [`FILL_LEAF_MAX`] in glibc's shape, four
    /// vectors at the start, aligned blocks of four, four vectors at the
    /// end, in that order; larger sizes in the general kernel.
    ///
    /// One function: when this was measured, a 1 KiB fill took four
    /// branches before its first store, one of them (from [`fill`]) to
    /// another function, where it had taken five, three of them through a
    /// function per size range and into a fourth for 513 B - 2 KiB (since
    /// 2026-12-02 [`fill`] adds one untaken compare, below 64 bytes).
    /// `bench memset` (Emerald Rapids guest, 2026-12-02, three alternating
    /// runs each): 1 KiB L1 aligned 0.74-0.88
    /// of glibc before, 0.85-1.01 after. Each block up to 512 B starts a
    /// 64-byte line: packed one after the other, the 129-256 B block
    /// straddled one, and those fills ran 0.91-1.02 of glibc against
    /// 1.04-1.08 before the merge; aligned, 1.00-1.11.
    ///
    /// Why this shape for 513 B - 2 KiB: aligned destinations ran 1.00 of
    /// glibc at 1 KiB, against 0.93-0.94 for the general loop, which starts
    /// its blocks at the first byte and has no head. Misaligned ones (Zen 5
    /// guest, `bench memset` with its shared timed loop, two runs): 1.00 of
    /// glibc at 600-2048 B one byte past a boundary, where the general loop
    /// ran 0.93-0.96 at 600, 1000 and 1500 B (and 1.09-1.17 at 1 and 2 KiB).
    /// The stores go in ascending order, the tail last as in glibc: with the
    /// tail stored before the middle, cold fills (destination not cached) of
    /// 600 B-2 KiB ran 0.75-0.96 of glibc on an Emerald Rapids guest,
    /// ascending 0.93-1.02 (three alternating runs of `bench memset --sizes
    /// 600,1000,1500,2K`); hot ones did not change.
    ///
    /// The first two vectors are stored before any compare, at every size
    /// (as glibc does): behind the compare and the taken branch to the
    /// 257-512 B block, cold aligned fills of 300 and 512 B ran 0.73-0.86
    /// of glibc, with them first 0.99-1.02 (Sapphire Rapids-class guest,
    /// 2026-12-03, six alternating processes of `bench memset --sizes
    /// 129,200,256,300,512,3000,4K --trials 3`; fleet 1.003 -> 1.010). The
    /// larger blocks skip those two, and the general loop (above 2 KiB) is
    /// handed the rest. Comparing against 512 first and storing after it
    /// fixed the cold rows too, but put the fleet row at 0.995-0.997. The
    /// cost: hot aligned fills of 3000 B and 4 KiB went from 1.28 and 1.11
    /// of glibc to 1.24 and 1.07.
    ///
    /// # Safety
    /// As [`copy_masked`], with `n > 128` and zmm16 holding `byte` in
    /// every lane.
    #[unsafe(naked)]
    unsafe extern "sysv64" fn fill_gt128(dst: *mut u8, byte: u8, n: usize, t: &Thresholds) {
        // zmm16 holds the byte in every lane (`fill` broadcast it); sil
        // still holds it for the general kernel. Clobbers rax, r8.
        naked_asm!(
            ".p2align 6",
            "vmovdqu64 zmmword ptr [rdi], zmm16",
            "vmovdqu64 zmmword ptr [rdi + 64], zmm16",
            "cmp rdx, 256",
            "ja 5f",
            "vmovdqu64 zmmword ptr [rdi + rdx - 128], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm16",
            "ret",
            ".p2align 6",
            "5:",
            "cmp rdx, 512",
            "ja 6f",
            "vmovdqu64 zmmword ptr [rdi + 128], zmm16",
            "vmovdqu64 zmmword ptr [rdi + 192], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 256], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 192], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 128], zmm16",
            "vmovdqu64 zmmword ptr [rdi + rdx - 64], zmm16",
            "ret",
            ".p2align 4",
            "6:",
            "cmp rdx, qword ptr [rcx + {inline_below}]",
            "jae 7f",
            "8:",
            "cmp rdx, {leaf_max}",
            "ja 9f",
            "lea r8, [rdi + rdx - 256]",
            "vmovdqu64 zmmword ptr [rdi + 128], zmm16",
            "vmovdqu64 zmmword ptr [rdi + 192], zmm16",
            "lea rax, [rdi + 256]",
            "and rax, -64",
            "cmp rax, r8",
            "jae 4f",
            ".p2align 4",
            "3:",
            "vmovdqa64 zmmword ptr [rax], zmm16",
            "vmovdqa64 zmmword ptr [rax + 64], zmm16",
            "vmovdqa64 zmmword ptr [rax + 128], zmm16",
            "vmovdqa64 zmmword ptr [rax + 192], zmm16",
            "add rax, 256",
            "cmp rax, r8",
            "jb 3b",
            "4:",
            "vmovdqu64 zmmword ptr [r8], zmm16",
            "vmovdqu64 zmmword ptr [r8 + 64], zmm16",
            "vmovdqu64 zmmword ptr [r8 + 128], zmm16",
            "vmovdqu64 zmmword ptr [r8 + 192], zmm16",
            "ret",
            // Above the leaf: the general loop, after the 128 bytes stored.
            "9:",
            "add rdi, 128",
            "sub rdx, 128",
            "jmp {vector_loop}",
            // From the first special class at any placement: this
            // placement's own (0 for a 64-byte aligned destination, 2
            // otherwise; see `Placement::of_fill`).
            "7:",
            "xor eax, eax",
            "test dil, 63",
            "setnz al",
            "add eax, eax",
            "cmp rdx, qword ptr [rcx + {special_min} + rax * 8]",
            "jb 8b",
            "jmp {large}",
            inline_below = const offset_of!(Thresholds, inline_below),
            special_min = const offset_of!(Thresholds, special_min),
            leaf_max = const FILL_LEAF_MAX,
            large = sym fill_large,
            vector_loop = sym fill_loop,
        )
    }

    /// Fills the rest of a fill of more than `FILL_LEAF_MAX` bytes below the
    /// table's first special class, after the leaf stored its first 128
    /// (`n > FILL_LEAF_MAX - 128`; as [`copy_loop`]).
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe extern "sysv64" fn fill_loop(dst: *mut u8, byte: u8, n: usize, _t: &Thresholds) {
        // SAFETY: passed on from the leaf, with n > 512 = 8 vectors.
        unsafe { super::avx512::fill_loop(dst, byte, n) }
    }

    /// Fills `n > 512` bytes from the table's first special class up.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe extern "sysv64" fn fill_large(dst: *mut u8, byte: u8, n: usize, t: &Thresholds) {
        // SAFETY: passed on from the leaf, with n > 512 = 8 vectors.
        unsafe { super::avx512::fill_large(dst, byte, n, t) }
    }
}

/// Fills up to this size below the table's first special class take glibc's
/// shape in the AVX-512 leaf; above it the general kernel (loop, `rep stosb`
/// or non-temporal stores) takes over.
const FILL_LEAF_MAX: usize = 2048;

/// How far ahead of its stores the AVX-512 fill loop prefetches its lines
/// for writing (two blocks of four vectors).
const FILL_PREFETCH_AHEAD: usize = 512;

/// Bytes per page-sized stream of the non-temporal copy.
const PAGE: usize = 4096;
/// Bytes copied from one page before moving to the next.
const VISIT: usize = 128;
/// The span over which the non-temporal copy's streams can collide: measured
/// on the development VM (256 MiB copies, THP buffers), a destination 4–64 KiB
/// ahead of the source modulo 2 MiB cost 20–30% with the streams visited in
/// ascending order; 132 KiB or 1 MiB ahead did not.
const NT_ALIAS_SPAN: usize = 2 << 20;

/// Bytes from `addr` to the next page boundary (0 when `addr` is on one).
#[inline(always)]
fn bytes_to_page(addr: usize) -> usize {
    (PAGE - (addr & (PAGE - 1))) & (PAGE - 1)
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

            /// [`copy_gt16`] with the C calling convention, for the jump of
            /// [`super::avx512_leaf::copy_process_large`] (with AVX-512,
            /// unused); returns 0, which the entry passes on.
            ///
            /// # Safety
            /// As [`copy_gt16`].
            #[target_feature(enable = $feat)]
            #[allow(dead_code)]
            pub(in crate::sys::copy) unsafe extern "sysv64" fn copy_gt16_sysv(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
            ) -> u32 {
                // SAFETY: passed on from the caller.
                unsafe { copy_gt16(dst, src, n, t) };
                0
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
                    return copy_above_small(dst, src, n, t);
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

            /// Copies `n > 8 W` bytes: one load and one compare to the inline
            /// loop (the common case: no placement check, no table walk),
            /// the table out of line from its first special class.
            #[target_feature(enable = $feat)]
            #[inline]
            pub(in crate::sys::copy) unsafe fn copy_above_small(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
            ) {
                if n < t.inline_below() {
                    copy_loop(dst, src, n, t);
                    return;
                }
                if n < t.special_min(Placement::of_copy(dst as usize, src as usize)) {
                    copy_loop(dst, src, n, t);
                    return;
                }
                copy_large(dst, src, n, t)
            }

            /// Sizes from the first special class up (`n > 8 W`). Out of
            /// line: the non-temporal copy needs registers that the caller
            /// would otherwise save and restore on every call, small ones
            /// included. `#[cold]` keeps it there: rustc does not pass
            /// `#[inline(never)]` on to LLVM for `#[target_feature]`
            /// functions (seen with 1.95: inlined, it made the loop's
            /// caller save six registers, +1 ns on a 1000-byte copy).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            #[cold]
            pub(in crate::sys::copy) unsafe fn copy_large(dst: *mut u8, src: *const u8, n: usize, t: &Thresholds) {
                if t.rep_direct(dst, src, n, Placement::of_copy(dst as usize, src as usize)) {
                    return copy_rep(dst, src, n);
                }
                copy_by_table(dst, src, n, t)
            }

            /// [`copy_large`] by the table: the strategy of `n`'s class at
            /// this placement. Out of line (`#[cold]`, as `copy_large`), so
            /// that the loop and the non-temporal copy keep the code and
            /// registers they had before `copy_large` looked at the direct
            /// `rep movsb` window first (inlined, a guarded 24 KiB copy
            /// through the loop ran 0.86 -> 0.74 of glibc).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            #[cold]
            unsafe fn copy_by_table(dst: *mut u8, src: *const u8, n: usize, t: &Thresholds) {
                let p = Placement::of_copy(dst as usize, src as usize);
                match t.strategy(n, p) {
                    Some(Strategy::Rep) if !t.rep_guarded(dst, src, n) => copy_rep(dst, src, n),
                    Some(Strategy::NonTemporal { streams }) => {
                        // The process copier's count may be chosen by timing.
                        let is_process = core::ptr::eq(t, &super::super::PROCESS.copy);
                        super::super::streams::copy_nontemporal_chosen(
                            dst,
                            src,
                            n,
                            usize::from(streams),
                            is_process,
                            // SAFETY: `d` and `s` are `dst` and `src` moved
                            // on together, `len` within the `n` bytes both
                            // hold (see `copy_nontemporal_chosen`); the CPU
                            // has these instructions (this function runs).
                            |d, s, len, k| unsafe { copy_nontemporal(d, s, len, k) },
                        )
                    }
                    Some(Strategy::Glibc) => super::super::glibc_memcpy_raw(dst, src, n),
                    // Another width's loop needs more than its own eight vectors.
                    Some(Strategy::Loop { isa }) if isa.vector_bytes() != W && n > isa.small_max() => {
                        super::super::copy_loop_of(isa, dst, src, n, t)
                    }
                    _ => {
                        copy_loop(dst, src, n, t);
                    }
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
                copy_loop(dst, src, n, t);
            }

            /// Vector loop with aligned temporal stores (`n > 8 W`). When the
            /// destination sits less than `t.backward_below()` bytes above the
            /// source modulo 4 KiB, loads would falsely wait for the stores just
            /// made (4K aliasing): the loop then runs backwards. Returns 0,
            /// with the C calling convention: AVX2's process entry jumps
            /// here (see `avx512_leaf::copy_process_large`), with no call
            /// of it inside another function.
            #[target_feature(enable = $feat)]
            #[inline]
            pub(in crate::sys::copy) unsafe extern "sysv64" fn copy_loop(
                dst: *mut u8,
                src: *const u8,
                n: usize,
                t: &Thresholds,
            ) -> u32 {
                let ahead = (dst as usize).wrapping_sub(src as usize) & 4095;
                // The same page offset goes backwards only while the copy is
                // small enough to be in L1 anyway: backwards, the hardware
                // prefetchers help less when the data comes from memory.
                if ahead < t.backward_below() && (ahead != 0 || n < SAME_OFFSET_BACKWARD_BELOW) {
                    copy_loop_backward(dst, src, n);
                    return 0;
                }
                // A misaligned destination takes glibc's shape (measured
                // with AVX2 only; an aligned one ran no faster in it, and the
                // AVX-512 loop is in assembly up to the table's classes).
                if W <= 32
                    && dst as usize & (W - 1) != 0
                    && !crosses_page(dst as usize, W)
                    && ((dst as usize + n) & (W - 1) == 0 || !crosses_page(dst as usize + n - B, B))
                {
                    copy_loop_forward_ends_first(dst, src, n, t);
                    return 0;
                }
                // The last vector is loaded before any store, as glibc does:
                // loaded after the loop, it shares its low 12 address bits
                // with the loop's last stores whenever the destination sits
                // a little below the source modulo 4 KiB, and waits for them
                // (4K aliasing). With AVX2, 257-512 B `src+7 dst+1` ran at
                // 0.42-0.68 of glibc's so. Not loaded when the tail goes
                // in pieces (its unaligned vector would cross a page), as
                // a 4 KiB copy to `dst+1` does: that load, across the
                // source's page boundary too, took a hot 4 KiB copy from
                // src+7 to dst+1 from 30 to 33 ns (0.97 of glibc, 1.07
                // without; Emerald Rapids guest). A prefetch of the last
                // line keeps what it did for a cold source (cold 0.90
                // without it, 0.96 with, 0.97 loaded). AVX-512 only: the
                // same test in the AVX2 loop, never true at its misaligned
                // sizes here, put a hot aligned 2 KiB copy at 0.92 instead
                // of 1.03 (code layout; pinned AVX2 on the same guest).
                let tail = (dst as usize + n) & (W - 1);
                let tail_in_pieces = W == 64 && tail != 0 && crosses_page(dst as usize + n - W, W);
                let last = if tail_in_pieces {
                    _mm_prefetch::<_MM_HINT_T0>(src.add(n - 1) as *const i8);
                    None
                } else {
                    Some(ld(src.add(n - W)))
                };
                // An aligned destination starts the loop at its first byte (the
                // head store then rewrites the same bytes, and is skipped).
                let misalign = dst as usize & (W - 1);
                let skew = (W - misalign) & (W - 1);
                if misalign != 0 {
                    if crosses_page(dst as usize, W) {
                        copy_below_w(dst, src, skew);
                    } else {
                        stu(dst, ld(src));
                    }
                }
                let mut d = dst.add(skew);
                let mut s = src.add(skew);
                // The last W-aligned address: everything from `d` to it takes
                // aligned stores (eight or four vectors per iteration, then
                // blocks of four and at most three single vectors); one unaligned vector
                // at each end covers the rest (two split stores at most when the
                // destination is misaligned).
                let end = dst.add(((dst as usize + n) & !(W - 1)) - dst as usize);
                // Eight vectors per iteration where the plan says so (see
                // `LoopBlock`), then blocks of four.
                let wide = n >= t.wide_loop_from();
                while wide && (end as usize) - (d as usize) >= 2 * B {
                    copy_8_aligned(d, s);
                    d = d.add(2 * B);
                    s = s.add(2 * B);
                }
                while (end as usize) - (d as usize) >= B {
                    copy_4_aligned(d, s);
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
                if tail != 0 {
                    match last {
                        Some(last) if !crosses_page(dst as usize + n - W, W) => stu(dst.add(n - W), last),
                        _ => copy_below_w(d, s, tail),
                    }
                }
                0
            }

            /// Copies eight vectors to an aligned `d` (`2 B` bytes): all
            /// eight loads, then the stores.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_8_aligned(d: *mut u8, s: *const u8) {
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
            }

            /// Copies four vectors to an aligned `d` (`B` bytes): the loads,
            /// then the stores.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_4_aligned(d: *mut u8, s: *const u8) {
                let a = ld(s);
                let b = ld(s.add(W));
                let c = ld(s.add(2 * W));
                let e = ld(s.add(3 * W));
                sta(d, a);
                sta(d.add(W), b);
                sta(d.add(2 * W), c);
                sta(d.add(3 * W), e);
            }

            /// The forward loop in glibc's shape for a misaligned `dst`
            /// (`n > 8 W`, no unaligned store of it crosses a page): the
            /// first vector and the last four are loaded before any store
            /// and stored after the loop, whose blocks of four aligned
            /// vectors run from the first boundary above `dst` while they
            /// start below the last four (the final block may write some of
            /// their bytes first).
            ///
            /// Against [`copy_loop`]'s own shape (a head store first, then
            /// blocks of four and up to three single vectors, each a taken
            /// branch, to the last boundary), with AVX2 pinned on both
            /// sides (2026-12-03, Sapphire Rapids-class guest): see
            /// docs/copy.md.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_loop_forward_ends_first(dst: *mut u8, src: *const u8, n: usize, t: &Thresholds) {
                let head = ld(src);
                let e0 = ld(src.add(n - 4 * W));
                let e1 = ld(src.add(n - 3 * W));
                let e2 = ld(src.add(n - 2 * W));
                let e3 = ld(src.add(n - W));
                // Offsets from dst: its first W boundary, and where the last
                // four vectors start.
                let mut off = W - (dst as usize & (W - 1));
                let stop = n - B;
                let wide = n >= t.wide_loop_from();
                while wide && off + B < stop {
                    copy_8_aligned(dst.add(off), src.add(off));
                    off += 2 * B;
                }
                while off < stop {
                    copy_4_aligned(dst.add(off), src.add(off));
                    off += B;
                }
                stu(dst.add(n - 4 * W), e0);
                stu(dst.add(n - 3 * W), e1);
                stu(dst.add(n - 2 * W), e2);
                stu(dst.add(n - W), e3);
                stu(dst, head);
            }

            /// Copies `len < W` bytes that lie inside one W-aligned block, with
            /// stores of at most 32 bytes that stay inside it: none crosses a
            /// page, as the one unaligned W-byte store it replaces would.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_below_w(d: *mut u8, s: *const u8, len: usize) {
                if len > 32 {
                    copy_32_64(d, s, len)
                } else if len > 16 {
                    copy_16_32(d, s, len)
                } else {
                    copy_le16(d, s, len)
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
                // Above the first (highest) block: 1 to W bytes, from a W boundary.
                let top = off + B;
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
                // `[dst, dst + off)` is left, 0 < off <= B, `dst + off` on a W boundary.
                let misalign = dst as usize & (W - 1);
                if misalign != 0 && crosses_page(dst as usize, B) {
                    let skew = W - misalign;
                    let mut o = skew;
                    while o < off {
                        sta(dst.add(o), ld(src.add(o)));
                        o += W;
                    }
                    copy_below_w(dst, src, skew);
                } else {
                    stu(dst, h0);
                    stu(dst.add(W), h1);
                    stu(dst.add(2 * W), h2);
                    stu(dst.add(3 * W), h3);
                }
                if n - top < W && crosses_page(dst as usize + n - W, W) {
                    copy_below_w(dst.add(top), src.add(top), n - top);
                } else {
                    stu(dst.add(n - W), last);
                }
            }

            /// `rep movsb` with the destination aligned to 64 (`n > 8 W >= 128`):
            /// a first vector covers the bytes up to the boundary. The
            /// misaligned case is out of line so that the direct path of
            /// [`copy_large`] stays a few compares and the instruction. With
            /// the first 64 bytes held in registers across `rep movsb`
            /// (glibc's order) inline instead, `copy_large` set up an
            /// aligned stack frame on every call and a hot 8 KiB copy to a
            /// destination one byte past a line took 53 ns against 49.5
            /// (AVX2 pinned, through `pw_copy` in a C loop); out of line,
            /// as before.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn copy_rep(dst: *mut u8, src: *const u8, n: usize) {
                if dst as usize & 63 == 0 {
                    rep_movsb(dst, src, n);
                } else {
                    copy_rep_misaligned(dst, src, n);
                }
            }

            /// [`copy_rep`] for a destination off a 64-byte boundary.
            #[target_feature(enable = $feat)]
            #[inline(never)]
            unsafe fn copy_rep_misaligned(dst: *mut u8, src: *const u8, n: usize) {
                let skew = 64 - (dst as usize & 63);
                copy_first_64(dst, src);
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
                // must be 64-aligned for the stores, so single vectors run
                // until the source is as near the start of a page as that
                // allows (its offset within a line; 0 when co-aligned).
                let skew = (64 - (dst as usize & 63)) & 63;
                let mut d = dst.add(skew);
                let mut s = src.add(skew);
                let stop = dst.add(n);
                let chunk = streams * PAGE;
                // `d` is 64-aligned, so moving both by whole lines until the
                // source's line starts a page leaves the source at its
                // offset within that line.
                let to_page = bytes_to_page(s as usize & !63);
                if (stop as usize) - (d as usize) >= to_page + chunk {
                    let page_start = d.add(to_page);
                    while d < page_start {
                        stnt(d, ld(s));
                        d = d.add(W);
                        s = s.add(W);
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
                    return fill_above_small(dst, byte, n, t);
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

            /// Fills `n > 8 W` bytes, as [`copy_above_small`] copies.
            #[target_feature(enable = $feat)]
            #[inline]
            pub(in crate::sys::copy) unsafe fn fill_above_small(
                dst: *mut u8,
                byte: u8,
                n: usize,
                t: &Thresholds,
            ) {
                if n < t.inline_below() {
                    return fill_loop(dst, byte, n);
                }
                fill_large(dst, byte, n, t)
            }

            /// Sizes from the first special class up (`n > 8 W`). Out of
            /// line (and `#[cold]`), as `copy_large`; it broadcasts the byte
            /// itself, as a vector argument would go through the stack.
            #[target_feature(enable = $feat)]
            #[inline(never)]
            #[cold]
            pub(in crate::sys::copy) unsafe fn fill_large(dst: *mut u8, byte: u8, n: usize, t: &Thresholds) {
                if t.rep_direct(dst, dst, n, Placement::of_fill(dst as usize)) {
                    return fill_rep(dst, byte, n);
                }
                fill_by_table(dst, byte, n, t)
            }

            /// [`fill_large`] by the table (out of line, as [`copy_by_table`]).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            #[cold]
            unsafe fn fill_by_table(dst: *mut u8, byte: u8, n: usize, t: &Thresholds) {
                let v = $splat(byte as i8);
                let p = Placement::of_fill(dst as usize);
                match t.strategy(n, p) {
                    Some(Strategy::Rep) => fill_rep(dst, byte, n),
                    Some(Strategy::NonTemporal { streams }) => {
                        fill_nontemporal(dst, v, n, usize::from(streams))
                    }
                    Some(Strategy::Glibc) => super::super::glibc_memset_raw(dst, byte, n),
                    Some(Strategy::Loop { isa }) if isa.vector_bytes() != W && n > isa.small_max() => {
                        super::super::fill_loop_of(isa, dst, byte, n)
                    }
                    _ => fill_loop(dst, byte, n),
                }
            }

            /// The vector loop, out of line, for [`super::super::fill_loop_of`]
            /// (`n > 8 W`).
            #[target_feature(enable = $feat)]
            #[inline(never)]
            pub(in crate::sys::copy) unsafe fn fill_loop_entry(dst: *mut u8, byte: u8, n: usize) {
                fill_loop(dst, byte, n)
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
            pub(in crate::sys::copy) unsafe fn fill_loop(dst: *mut u8, byte: u8, n: usize) {
                let v = $splat(byte as i8);
                // An aligned destination starts the loop at its first byte and
                // needs no separate head store.
                let misalign = dst as usize & (W - 1);
                let skew = (W - misalign) & (W - 1);
                if misalign != 0 {
                    if crosses_page(dst as usize, W) {
                        fill_below_w(dst, byte, skew);
                    } else {
                        stu(dst, v);
                    }
                }
                let mut d = dst.add(skew);
                let end = dst.add(n - B);
                // Each block asks for the lines two blocks ahead, for
                // writing (`prefetchw`), while they lie inside the fill:
                // a store that misses waits for its line's read in the
                // store buffer's order, a prefetch starts it at once.
                // Emerald Rapids guest, `bench memset --sizes
                // 2100,3000,4096,6144,8192,9000`, six alternating processes:
                // cold fills 0.88-1.34 of glibc's `rep stosb` before,
                // 1.24-1.72 after; hot ones level.
                if W == 64 && n > FILL_PREFETCH_AHEAD + B {
                    let ahead_end = dst.add(n - FILL_PREFETCH_AHEAD - B);
                    while d < ahead_end {
                        for line in (0..B).step_by(64) {
                            _mm_prefetch::<_MM_HINT_ET0>(d.add(FILL_PREFETCH_AHEAD + line) as *const i8);
                        }
                        sta(d, v);
                        sta(d.add(W), v);
                        sta(d.add(2 * W), v);
                        sta(d.add(3 * W), v);
                        d = d.add(B);
                    }
                }
                while d < end {
                    sta(d, v);
                    sta(d.add(W), v);
                    sta(d.add(2 * W), v);
                    sta(d.add(3 * W), v);
                    d = d.add(B);
                }
                let stop = dst as usize + n;
                if stop & (W - 1) != 0 && (stop - 1) & !4095 > stop - B {
                    // A page boundary under the four unaligned end stores: one
                    // of them would cross it. Aligned stores up to the last W
                    // boundary instead, then the rest inside one block.
                    while d as usize + W <= stop {
                        sta(d, v);
                        d = d.add(W);
                    }
                    fill_below_w(d, byte, stop - d as usize);
                    return;
                }
                stu(dst.add(n - 4 * W), v);
                stu(dst.add(n - 3 * W), v);
                stu(dst.add(n - 2 * W), v);
                stu(dst.add(n - W), v);
            }

            /// Fills `len < W` bytes that lie inside one W-aligned block, as
            /// [`copy_below_w`] copies them.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn fill_below_w(d: *mut u8, byte: u8, len: usize) {
                if len > 32 {
                    fill_32_64(d, byte, len)
                } else if len > 16 {
                    fill_16_32(d, byte, len)
                } else {
                    fill_le16(d, byte, len)
                }
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
                let to_page = bytes_to_page(d as usize);
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
    /// 64-byte AVX-512 kernels (entered through `avx512_leaf`, which does
    /// the sizes up to eight vectors itself: the `_gt16` entries go unused).
    avx512, feature = "avx512f,avx512bw", entry = #[allow(dead_code)], width = 64, vector = __m512i,
    loadu = _mm512_loadu_si512, storeu = _mm512_storeu_si512,
    stream = _mm512_stream_si512, splat = _mm512_set1_epi8
}
