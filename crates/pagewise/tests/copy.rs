//! Correctness of `pagewise::copy` against `copy_from_slice` and `fill`, for
//! every kernel this CPU runs (each instruction set; vector loop, `rep` and
//! non-temporal stores forced on at every size).
//!
//! Buffers sit between `PROT_NONE` guard pages (`pagewise::os::guard`): a read
//! or write past either end of a slice placed against a guard page kills the
//! test with SIGSEGV. Inside the mapping, the 4 KiB of canary bytes on each
//! side of the destination must come back unchanged, so a stray write near it
//! is caught too (every kernel block is far smaller). (The
//! kernels load from the source at exactly the offsets they store to in the
//! destination, so the write checks cover their reads as well; the guard
//! pages catch reads past the ends directly.)

use pagewise::copy::{self, Class, Copier, Isa, LoopBlock, Plan, Small, Strategy};
use pagewise::os::guard::GuardedBuffer;
use proptest::prelude::*;

const CANARY: u8 = 0xc3;

/// A named copier configuration.
struct Config {
    name: String,
    copier: Copier,
}

/// Every kernel path on every instruction set this CPU supports: each
/// strategy at every size above the loop-free ones (the loop of each width,
/// `rep`, non-temporal stores with one, four and 32 streams, glibc), with
/// every way of doing the smallest AVX-512 copies (inline masked moves,
/// guarded masked moves in the leaf, plain moves), and the plan detected
/// here.
fn configs() -> Vec<Config> {
    let base = Plan::detect();
    let mut out = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| !i.is_supported()) {
        // No emulator (such as Intel SDE) is available here to run them anyway.
        pagewise_testkit::skip_part!(
            isa.name(),
            pagewise_testkit::Need::CpuFeature,
            "this CPU cannot run the {} kernels, so they are not tested here",
            isa.name()
        );
    }
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let mut strategies: Vec<Strategy> = Isa::ALL
            .into_iter()
            .filter(|w| w.is_supported())
            .map(|isa| Strategy::Loop { isa })
            .collect();
        strategies.extend([
            Strategy::Rep,
            Strategy::NonTemporal { streams: 1 },
            Strategy::NonTemporal { streams: 4 },
            Strategy::NonTemporal { streams: 32 },
            Strategy::Glibc,
        ]);
        let smalls: &[Small] = if isa == Isa::Avx512 {
            &Small::ALL
        } else {
            &[Small::Plain]
        };
        for &small in smalls {
            let mut with_small = base.clone();
            with_small.tables.small = small;
            for &s in &strategies {
                out.push(Config {
                    name: format!("{}/{small:?}/{}", isa.name(), s.label()),
                    copier: Copier::new(&with_small.with_only(isa, s))
                        .expect("supported instruction set"),
                });
            }
        }
        // The copy loop with four vectors per iteration (the other `LoopBlock`).
        let mut four = base.clone();
        four.tables.small = smalls[0];
        four.tables.loop_block = LoopBlock::Four;
        out.push(Config {
            name: format!("{}/loop of four", isa.name()),
            copier: Copier::new(&four.with_only(isa, Strategy::Loop { isa }))
                .expect("supported instruction set"),
        });
        // One class that differs at a single placement: the AVX-512 kernel
        // keeps the other placements on its inline loop past that class's
        // start, and sends this one to the table from there.
        for (p, other) in [(1, Strategy::Rep), (2, Strategy::Glibc)] {
            let mut split = base.clone();
            split.isa = isa;
            split.tables.small = smalls[0];
            let loop_ = Strategy::Loop { isa };
            let mut by_placement = [loop_; 3];
            by_placement[p] = other;
            for table in [&mut split.tables.copy, &mut split.tables.copy_temporal] {
                *table = vec![
                    Class {
                        from: 0,
                        by_placement: [loop_; 3],
                    },
                    Class {
                        from: 1000,
                        by_placement,
                    },
                    Class {
                        from: 3000,
                        by_placement: [Strategy::Rep; 3],
                    },
                ];
            }
            out.push(Config {
                name: format!(
                    "{}/placement {p} from 1000 B: {}",
                    isa.name(),
                    other.label()
                ),
                copier: Copier::new(&split).expect("supported instruction set"),
            });
        }
        let detected = Plan {
            isa,
            ..base.clone()
        };
        out.push(Config {
            name: format!("{}/detected", isa.name()),
            copier: Copier::new(&detected).expect("supported instruction set"),
        });
    }
    assert!(out.len() >= 8, "SSE2 kernels always exist");
    out
}

/// The configurations of [`configs`] that force non-temporal stores (1, 4
/// and 32 streams on each instruction set).
fn nontemporal_configs() -> Vec<Config> {
    let nontemporal: Vec<Config> = configs()
        .into_iter()
        .filter(|c| c.name.contains("/nt "))
        .collect();
    assert!(
        nontemporal.len() >= 3,
        "every instruction set has non-temporal kernels"
    );
    nontemporal
}

/// A source pattern where every byte differs from its neighbours and from the
/// canary, so that shifted or dropped bytes show.
fn pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = ((i * 7 + seed as usize) % 251) as u8;
        if *b == CANARY {
            *b = 0;
        }
    }
}

/// Guarded source and destination buffers, reused across cases.
struct Bench {
    src: GuardedBuffer,
    dst: GuardedBuffer,
    /// As long as `dst`, all canaries (compared with `==`, which is fast even
    /// in debug builds).
    canaries: Vec<u8>,
}

/// Canary bytes checked on each side of the destination.
const WINDOW: usize = 4096;

/// Where a case puts its slices.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// `offset` bytes after the leading guard page.
    Head(usize),
    /// Ending right at the trailing guard page.
    Tail,
}

impl Place {
    fn start(self, len: usize, n: usize) -> usize {
        match self {
            Place::Head(offset) => offset,
            Place::Tail => len - n,
        }
    }
}

impl Bench {
    fn new(max: usize) -> Bench {
        let mut src = GuardedBuffer::new(max + 64).unwrap();
        pattern(src.as_mut_slice(), 0);
        let dst = GuardedBuffer::new(max + 64).unwrap();
        let mut bench = Bench {
            src,
            canaries: vec![CANARY; dst.len()],
            dst,
        };
        bench.dst.as_mut_slice().fill(CANARY);
        bench
    }

    /// The canary window around `[d, d + n)`.
    fn window(&self, d: usize, n: usize) -> (usize, usize) {
        (
            d.saturating_sub(WINDOW),
            (d + n + WINDOW).min(self.dst.len()),
        )
    }

    /// Panics if a byte in the window outside `[d, d + n)` changed; then
    /// restores the whole window.
    fn check_canaries(&mut self, d: usize, n: usize, what: &str) {
        let (lo, hi) = self.window(d, n);
        let whole = self.dst.as_slice();
        assert!(
            whole[lo..d] == self.canaries[lo..d] && whole[d + n..hi] == self.canaries[d + n..hi],
            "{what}: stray write around [{d}, {}) (n = {n})",
            d + n
        );
        self.dst.as_mut_slice()[lo..hi].fill(CANARY);
    }

    /// Copies `n` bytes with `c` and checks the result and the canaries.
    fn check_copy(&mut self, c: &Copier, n: usize, src_at: Place, dst_at: Place, what: &str) {
        self.check_copy_with(|d, s| c.copy(d, s).unwrap(), n, src_at, dst_at, what);
    }

    /// Copies `n` bytes with `copy` and checks the result and the canaries.
    fn check_copy_with(
        &mut self,
        copy: impl Fn(&mut [u8], &[u8]),
        n: usize,
        src_at: Place,
        dst_at: Place,
        what: &str,
    ) {
        let s = src_at.start(self.src.len(), n);
        let d = dst_at.start(self.dst.len(), n);
        let src = &self.src.as_slice()[s..s + n];
        let dst = &mut self.dst.as_mut_slice()[d..d + n];
        copy(dst, src);
        assert!(
            self.dst.as_slice()[d..d + n] == self.src.as_slice()[s..s + n],
            "{what}: wrong bytes copying {n} (src at {s}, dst at {d})"
        );
        self.check_canaries(d, n, &format!("{what} copy"));
    }

    /// Fills `n` bytes with `c` and checks the result and the canaries.
    fn check_fill(&mut self, c: &Copier, n: usize, dst_at: Place, byte: u8, what: &str) {
        self.check_fill_with(|d, b| c.fill(d, b), n, dst_at, byte, what);
    }

    /// Fills `n` bytes with `fill` and checks the result and the canaries.
    fn check_fill_with(
        &mut self,
        fill: impl Fn(&mut [u8], u8),
        n: usize,
        dst_at: Place,
        byte: u8,
        what: &str,
    ) {
        let d = dst_at.start(self.dst.len(), n);
        let byte = if byte == CANARY { !byte } else { byte };
        fill(&mut self.dst.as_mut_slice()[d..d + n], byte);
        let want = vec![byte; n];
        assert!(
            self.dst.as_slice()[d..d + n] == want[..],
            "{what}: wrong bytes filling {n} at {d}"
        );
        self.check_canaries(d, n, &format!("{what} fill"));
    }
}

#[test]
fn every_size_up_to_4096_on_every_kernel() {
    let mut b = Bench::new(4096 + 64);
    for cfg in configs() {
        for n in 0..=4096 {
            // Against the trailing guard page (overruns fault), and a few bytes
            // after the leading one (underruns fault), with alignments that
            // vary with n.
            b.check_copy(&cfg.copier, n, Place::Tail, Place::Tail, &cfg.name);
            b.check_copy(
                &cfg.copier,
                n,
                Place::Head(0),
                Place::Head(n % 64),
                &cfg.name,
            );
            b.check_fill(&cfg.copier, n, Place::Tail, n as u8, &cfg.name);
            b.check_fill(&cfg.copier, n, Place::Head(n % 61), 0, &cfg.name);
        }
    }
}

/// Sizes on both sides of every size-class edge of every instruction set.
fn edge_sizes() -> Vec<usize> {
    let mut sizes = vec![0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17];
    for edge in [
        32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384, 24576,
    ] {
        sizes.extend([edge - 1, edge, edge + 1]);
    }
    sizes.extend([100, 1000, 3000, 5000, 20_000, 65_536 + 13]);
    sizes
}

#[test]
fn every_alignment_pair_on_every_kernel() {
    let sizes = edge_sizes();
    let max = *sizes.iter().max().unwrap();
    let mut b = Bench::new(max + 128);
    for cfg in configs() {
        for sa in 0..64 {
            for da in 0..64 {
                // Every pair sees the small sizes and a rotating share of the rest.
                let rotating = sizes[(sa * 64 + da) % sizes.len()];
                for n in [0, 1, 7, 17, 33, 65, 129, 257, 513, 1100, rotating] {
                    b.check_copy(&cfg.copier, n, Place::Head(sa), Place::Head(da), &cfg.name);
                }
            }
            for &n in &sizes {
                b.check_fill(&cfg.copier, n, Place::Head(sa), sa as u8, &cfg.name);
            }
        }
        for &n in &sizes {
            b.check_copy(&cfg.copier, n, Place::Tail, Place::Tail, &cfg.name);
            b.check_copy(&cfg.copier, n, Place::Head(0), Place::Tail, &cfg.name);
            b.check_copy(&cfg.copier, n, Place::Tail, Place::Head(0), &cfg.name);
        }
    }
}

/// Destinations whose first or last vector would cross a page boundary: the
/// loops then copy and fill those ends with smaller stores inside one vector
/// block (a store across a page is slow on Zen 4), and the AVX-512 leaf's own
/// loop hands such copies to them.
#[test]
fn ends_across_a_page_boundary_on_every_kernel() {
    let sizes = [513, 1000, 2560, 4095, 4096, 4097, 5000, 8192, 10_000];
    let mut b = Bench::new(2 * 4096 + 10_000);
    for cfg in configs() {
        for &n in &sizes {
            for k in 1..=64 {
                // The destination starts k bytes before a page boundary; then
                // it ends k bytes after one.
                let head: usize = 4096 - k;
                let tail = (4096 + k - n % 4096) % 4096;
                for d in [head, tail] {
                    // The last: the destination 6 bytes ahead, backwards.
                    for s in [0, 7, d % 64, d.saturating_sub(6)] {
                        b.check_copy(&cfg.copier, n, Place::Head(s), Place::Head(d), &cfg.name);
                    }
                    b.check_fill(&cfg.copier, n, Place::Head(d), k as u8, &cfg.name);
                }
            }
        }
    }
}

/// Destinations a little ahead of and behind their sources modulo 4 KiB: the
/// cases where the loop runs backwards and `rep movsb` is avoided.
#[test]
fn near_aliasing_distances_on_every_kernel() {
    let mut b = Bench::new(3 * 4096 + 20_000);
    for cfg in configs() {
        for dist in [
            1usize, 6, 63, 64, 200, 1023, 1024, 1500, 2047, 2048, 3000, 4095,
        ] {
            for n in [300, 600, 1500, 5000, 20_000] {
                b.check_copy(
                    &cfg.copier,
                    n,
                    Place::Head(64),
                    Place::Head(64 + dist),
                    &cfg.name,
                );
                b.check_copy(
                    &cfg.copier,
                    n,
                    Place::Head(64 + dist),
                    Place::Head(64),
                    &cfg.name,
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random sizes up to 1 MiB, random alignments, random kernels.
    #[test]
    fn random_sizes_alignments_and_kernels(
        n in prop_oneof![0usize..=4096, 4097usize..=(1 << 20)],
        sa in 0usize..64,
        da in 0usize..64,
        k in any::<prop::sample::Index>(),
        tail in any::<bool>(),
        byte in any::<u8>(),
    ) {
        thread_local! {
            static BENCH: std::cell::RefCell<Bench> = std::cell::RefCell::new(Bench::new((1 << 20) + 128));
            static CONFIGS: Vec<Config> = configs();
        }
        CONFIGS.with(|configs| {
            let cfg = &configs[k.index(configs.len())];
            BENCH.with(|b| {
                let mut b = b.borrow_mut();
                let (s, d) = if tail {
                    (Place::Tail, Place::Tail)
                } else {
                    (Place::Head(sa), Place::Head(da))
                };
                b.check_copy(&cfg.copier, n, s, d, &cfg.name);
                b.check_fill(&cfg.copier, n, d, byte, &cfg.name);
            });
        });
    }
}

/// The free `copy` takes its own way above 256 bytes (the process entry,
/// which jumps to the kernel of the process-wide plan, and with AVX2 copies
/// up to 512 bytes itself, forwards or, with the destination a little
/// ahead, backwards): every size up to 4 KiB, at the edges of guarded
/// buffers, misaligned, the destination behind, ahead of and level with
/// the source.
#[test]
fn the_free_copy_at_every_size_up_to_4096() {
    let mut bench = Bench::new(4096 + 64);
    let places = [
        (Place::Head(0), Place::Head(0)),
        (Place::Head(7), Place::Head(1)),
        (Place::Head(1), Place::Head(7)),
        (Place::Head(5), Place::Head(5)),
        (Place::Head(1), Place::Tail),
        (Place::Tail, Place::Head(63)),
    ];
    for n in 0..=4096 {
        for (src_at, dst_at) in places {
            bench.check_copy_with(|d, s| copy::copy(d, s).unwrap(), n, src_at, dst_at, "copy");
        }
    }
}

/// The free `copy` at every class edge above 4 KiB, and at every alignment
/// of the destination against a source 7 bytes in: its process entry (the
/// AVX-512 leaf or the AVX2 entry) takes `rep movsb` itself in the table's
/// direct window, aligning the destination first, and hands the rest,
/// guarded distances included, to the kernel.
#[test]
fn the_free_copy_at_large_edge_sizes_and_every_destination_alignment() {
    let sizes: Vec<usize> = edge_sizes().into_iter().filter(|&n| n >= 4095).collect();
    let max = *sizes.iter().max().unwrap();
    let mut bench = Bench::new(max + 128);
    let copy = |d: &mut [u8], s: &[u8]| copy::copy(d, s).unwrap();
    for &n in &sizes {
        for da in 0..64 {
            bench.check_copy_with(copy, n, Place::Head(7), Place::Head(da), "copy");
        }
        for (src_at, dst_at) in [
            (Place::Head(1), Place::Tail),
            (Place::Tail, Place::Head(63)),
            (Place::Tail, Place::Tail),
        ] {
            bench.check_copy_with(copy, n, src_at, dst_at, "copy");
        }
    }
}

/// The free `fill` (the fast path of the process-wide plan, which with
/// AVX2 or SSE2 fills up to 128 bytes in place): every size up to 4 KiB, at
/// the edges of guarded buffers and misaligned.
#[test]
fn the_free_fill_at_every_size_up_to_4096() {
    let mut bench = Bench::new(4096 + 64);
    for n in 0..=4096 {
        for dst_at in [Place::Head(0), Place::Head(1), Place::Head(63), Place::Tail] {
            bench.check_fill_with(copy::fill, n, dst_at, n as u8, "fill");
            bench.check_fill_with(copy::fill_temporal, n, dst_at, !(n as u8), "fill_temporal");
        }
    }
}

#[test]
fn copy_status_is_zero_after_a_copy_and_einval_for_unequal_lengths() {
    let src: Vec<u8> = (0..1000u32).map(|i| (i % 249) as u8).collect();
    for n in [0, 1, 100, 256, 257, 999] {
        let mut dst = vec![0u8; n];
        assert_eq!(copy::copy_status(&mut dst, &src[1..n + 1]), 0, "n = {n}");
        assert_eq!(dst, &src[1..n + 1]);
        let mut longer = vec![7u8; n + 1];
        assert_eq!(copy::copy_status(&mut longer, &src[..n]), -libc::EINVAL);
        assert!(
            longer.iter().all(|&b| b == 7),
            "wrote on a refusal (n = {n})"
        );
    }
}

#[test]
fn global_functions_match_the_standard_library() {
    let src: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    for n in [0, 1, 31, 32, 33, 500, 4096, 99_999] {
        let mut a = vec![0u8; n];
        let mut b = vec![0u8; n];
        copy::copy(&mut a, &src[..n]).unwrap();
        b.copy_from_slice(&src[..n]);
        assert_eq!(a, b);
        copy::copy_temporal(&mut a, &src[1..n + 1]).unwrap();
        assert_eq!(a, &src[1..n + 1]);
        copy::fill(&mut a, 9);
        assert!(a.iter().all(|&x| x == 9));
        copy::fill_temporal(&mut a, 10);
        assert!(a.iter().all(|&x| x == 10));
    }
}

#[test]
fn large_copies_and_fills_use_nontemporal_stores_correctly() {
    // Twice the detected threshold, capped: the non-temporal path of the global
    // functions, then the temporal variant at the same size.
    let plan = Plan::current();
    let n = plan
        .copy_nontemporal()
        .unwrap_or(32 << 20)
        .saturating_mul(2)
        .min(96 << 20)
        + 13;
    let mut src = vec![0u8; n];
    pattern(&mut src, 5);
    let mut dst = vec![1u8; n + 3];
    copy::copy(&mut dst[3..], &src).unwrap();
    assert!(dst[3..] == src[..], "non-temporal copy");
    assert_eq!(&dst[..3], &[1, 1, 1]);
    copy::copy_temporal(&mut dst[..n], &src).unwrap();
    assert!(dst[..n] == src[..], "temporal copy");
    copy::fill(&mut dst[1..], 0xab);
    assert!(dst[1..].iter().all(|&b| b == 0xab));
    assert_eq!(dst[0], src[0]);
}

#[test]
fn length_mismatch_is_an_error_and_writes_nothing() {
    let src = [1u8; 10];
    let mut dst = [0u8; 9];
    let err = copy::copy(&mut dst, &src).unwrap_err();
    assert_eq!((err.dst, err.src), (9, 10));
    assert!(err.to_string().contains("equal lengths"));
    assert_eq!(dst, [0u8; 9]);
    let err = copy::copy_temporal(&mut dst, &src[..3]).unwrap_err();
    assert_eq!((err.dst, err.src), (9, 3));
    let c = Copier::new(&Plan::current()).unwrap();
    assert!(c.copy(&mut dst, &src).is_err());
    assert_eq!(dst, [0u8; 9]);
}

#[test]
fn unsupported_instruction_sets_are_refused() {
    for isa in Isa::ALL {
        let plan = Plan {
            isa,
            ..Plan::detect()
        };
        assert_eq!(Copier::new(&plan).is_ok(), isa.is_supported(), "{isa:?}");
    }
}

#[test]
fn threshold_changes_show_in_the_plan() {
    let c = Copier::new(&Plan::current()).unwrap();
    c.set_nontemporal_threshold(Some(12345));
    assert_eq!(c.nontemporal_thresholds(), (Some(12345), Some(12345)));
    c.set_nontemporal_threshold(None);
    assert_eq!(c.nontemporal_thresholds(), (None, None));
    // The global copier: change and restore (other tests copy meanwhile, which
    // is fine: thresholds only choose between correct kernels).
    let before = Plan::current();
    let snapshot = copy::global_copier().clone();
    copy::set_nontemporal_threshold(Some(1 << 20));
    let now = Plan::current();
    assert_eq!(now.copy_nontemporal(), Some(1 << 20));
    assert_eq!(now.fill_nontemporal(), Some(1 << 20));
    assert_eq!(now.nontemporal_source, copy::Source::Api);
    assert_eq!(
        copy::global_copier().nontemporal_thresholds(),
        (Some(1 << 20), Some(1 << 20))
    );
    // A clone of the process copier is a snapshot: it keeps the old values.
    assert_eq!(
        snapshot.nontemporal_thresholds(),
        (before.copy_nontemporal(), before.fill_nontemporal())
    );
    copy::set_nontemporal_threshold(before.copy_nontemporal());
    assert_eq!(
        Plan::current().copy_nontemporal(),
        before.copy_nontemporal()
    );
}

#[test]
fn size_classes_cover_every_size_once() {
    let plan = Plan::current();
    for op in ["copy", "fill"] {
        let classes: Vec<_> = plan
            .size_classes()
            .into_iter()
            .filter(|c| c.op == op)
            .collect();
        assert_eq!(classes[0].sizes.from, 0);
        for w in classes.windows(2) {
            assert_eq!(w[0].sizes.to, Some(w[1].sizes.from), "{op}: {classes:?}");
        }
        assert_eq!(classes.last().unwrap().sizes.to, None, "{op}: {classes:?}");
    }
}

#[test]
fn nontemporal_streams_start_on_source_pages_at_every_common_alignment() {
    // The non-temporal copy runs single vectors until the source is at the start
    // of a page (or, when source and destination differ modulo 64, as near it
    // as a 64-aligned destination allows), then copies 1, 4 or 32 pages side by
    // side: sizes around those boundaries, offsets that put the source just
    // before, at and after a page boundary.
    let chunk = 32 * 4096;
    let mut src = vec![0u8; 3 * chunk + 3 * 4096];
    pattern(&mut src, 11);
    let mut dst = vec![0u8; src.len()];
    let page_of = |p: *const u8| p as usize & 4095;
    for config in &nontemporal_configs() {
        for src_off in [0usize, 64, 4096 - 64, 4096 - 128 + 5, 1] {
            // The same offset modulo 64 (streams on pages), and ones that differ.
            for delta in [0usize, 7, 63] {
                for n in [chunk - 64, chunk, chunk + 4096, 2 * chunk + 4031] {
                    let s_start = src_off + (4096 - page_of(src.as_ptr())) % 4096;
                    let d_start = (4096 - page_of(dst.as_ptr())) % 4096 + (src_off + delta) % 64;
                    let s = &src[s_start..s_start + n];
                    dst.fill(0xEE);
                    config
                        .copier
                        .copy(&mut dst[d_start..d_start + n], s)
                        .unwrap();
                    let case = format!("{} src+{src_off} delta {delta} n {n}", config.name);
                    // Nothing outside [d_start, d_start + n) was written.
                    let untouched = |dst: &[u8], what: &str| {
                        assert!(
                            dst[..d_start].iter().all(|&b| b == 0xEE),
                            "{case}: {what} wrote before"
                        );
                        assert!(
                            dst[d_start + n..].iter().all(|&b| b == 0xEE),
                            "{case}: {what} wrote after"
                        );
                    };
                    assert!(dst[d_start..d_start + n] == *s, "{case}: bytes differ");
                    untouched(&dst, "copy");
                    // The fill streams from the destination's page boundaries.
                    config.copier.fill(&mut dst[d_start..d_start + n], 0x5A);
                    assert!(
                        dst[d_start..d_start + n].iter().all(|&b| b == 0x5A),
                        "{case}: fill"
                    );
                    untouched(&dst, "fill");
                }
            }
        }
    }
}

#[test]
fn parallel_copy_and_fill_match_the_serial_ones() {
    // Sizes on both sides of PARALLEL_MIN, odd lengths and offsets, and thread
    // counts from 0 (taken as 1) to more than this machine has.
    let big = copy::PARALLEL_MIN * 3 + 4095 + 13;
    let mut src = vec![0u8; big + 64];
    pattern(&mut src, 3);
    let mut dst = vec![0u8; big + 64];
    for &(n, s_off, d_off) in &[
        (copy::PARALLEL_MIN - 1, 0usize, 0usize),
        (copy::PARALLEL_MIN, 7, 1),
        (big, 5, 9),
    ] {
        for threads in [0usize, 2, 64] {
            dst.fill(0xEE);
            copy::copy_parallel(&mut dst[d_off..d_off + n], &src[s_off..s_off + n], threads)
                .unwrap();
            let case = format!("n {n} src+{s_off} dst+{d_off} threads {threads}");
            assert!(dst[d_off..d_off + n] == src[s_off..s_off + n], "{case}");
            assert!(dst[..d_off].iter().all(|&b| b == 0xEE), "{case}: before");
            assert!(dst[d_off + n..].iter().all(|&b| b == 0xEE), "{case}: after");
            copy::fill_parallel(&mut dst[d_off..d_off + n], 0x42, threads);
            assert!(
                dst[d_off..d_off + n].iter().all(|&b| b == 0x42),
                "{case}: fill"
            );
            assert!(
                dst[d_off + n..].iter().all(|&b| b == 0xEE),
                "{case}: fill after"
            );
        }
    }
    let err = copy::copy_parallel(&mut dst[..10], &src[..11], 2).unwrap_err();
    assert_eq!((err.dst, err.src), (10, 11));
}

#[test]
fn nontemporal_copy_with_the_destination_just_ahead_modulo_2_mib() {
    // A destination less than 32 pages ahead of the source modulo 2 MiB makes
    // the non-temporal copy visit its streams from the last one down.
    let chunk = 32 * 4096;
    let span = 2 << 20;
    let mut buf = vec![0u8; 2 * span + 4 * chunk];
    let base = (4096 - (buf.as_ptr() as usize & 4095)) % 4096;
    for config in &nontemporal_configs() {
        for ahead in [
            64usize,
            4096 + 7,
            12 << 10,
            chunk - 4096,
            chunk - 64,
            chunk + 64,
        ] {
            for n in [chunk, 2 * chunk + 4031] {
                let (low, high) = buf.split_at_mut(base + span);
                let src = &mut low[base..base + n];
                pattern(src, ahead as u8);
                high[..ahead + n].fill(0xEE);
                let dst = &mut high[ahead..ahead + n];
                config.copier.copy(dst, src).unwrap();
                let case = format!("{} ahead {ahead} n {n}", config.name);
                assert!(*dst == *src, "{case}: bytes differ");
                assert!(
                    high[..ahead].iter().all(|&b| b == 0xEE),
                    "{case}: wrote before"
                );
                assert_eq!(high[ahead + n], 0, "{case}: wrote after");
                high[..ahead + n].fill(0);
            }
        }
    }
}

/// With `PAGEWISE_COPY_ISA` set (the pinned-ISA runs in `.ci/run`), the free
/// functions must run that instruction set, not fall back to another one;
/// without it, the widest one this CPU supports.
#[test]
fn the_pinned_instruction_set_is_the_one_that_runs() {
    let plan = copy::Plan::current();
    let running = copy::global_copier().isa();
    assert_eq!(running, plan.isa);
    match std::env::var(copy::ENV_ISA) {
        Ok(pinned) if !pinned.is_empty() => {
            assert_eq!(
                running.name(),
                pinned,
                "{} = {pinned} but {} runs: {:?}",
                copy::ENV_ISA,
                running.name(),
                plan.notes
            );
        }
        _ => {
            let widest = Isa::ALL
                .into_iter()
                .rfind(|i| i.is_supported())
                .expect("SSE2 is always supported");
            assert_eq!(running, widest);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Differential test against glibc: the same random bytes copied (or
    /// filled) at random sizes, offsets and source-to-destination distances
    /// (both in one buffer, the destination just before, just after or far
    /// from the source, never overlapping: safe slices cannot, and no
    /// pagewise API promises memmove semantics) give the same buffer with
    /// every copier configuration as with glibc's `memcpy`/`memset`.
    #[test]
    fn same_result_as_glibc(
        size_log in 0u32..21,
        size_frac in 0usize..1 << 20,
        src_at in 0usize..4096,
        gap in prop_oneof![0usize..256, 0usize..70_000],
        dst_first in any::<bool>(),
        config in 0usize..64,
        byte in any::<u8>(),
    ) {
        let n = size_frac % (1usize << size_log).max(1);
        let configs = configs_cached();
        let c = &configs[config % configs.len()];
        let len = src_at + 2 * n + gap + 64;
        let mut ours = vec![0u8; len];
        pattern(&mut ours, (n % 251) as u8);
        let mut theirs = ours.clone();
        let (s, d) = if dst_first { (src_at + n + gap, src_at) } else { (src_at, src_at + n + gap) };
        for (buf, glibc) in [(&mut ours, false), (&mut theirs, true)] {
            let (lo, hi) = buf.split_at_mut(s.max(d));
            let (src, dst): (&[u8], &mut [u8]) = if s < d {
                (&lo[s..s + n], &mut hi[..n])
            } else {
                (&hi[..n], &mut lo[d..d + n])
            };
            if glibc {
                pagewise::os::copy::glibc_memcpy(dst, src);
            } else {
                c.copier.copy(dst, src).unwrap();
            }
        }
        prop_assert!(ours == theirs, "copy {} bytes, src {} dst {}: {}", n, s, d, c.name);
        let mut ours2 = ours.clone();
        c.copier.fill(&mut ours2[d..d + n], byte);
        pagewise::os::copy::glibc_memset(&mut theirs[d..d + n], byte);
        prop_assert!(ours2 == theirs, "fill {} bytes at {}: {}", n, d, c.name);
    }
}

/// [`configs`] built once for the property test's many cases.
fn configs_cached() -> &'static [Config] {
    static CONFIGS: std::sync::OnceLock<Vec<Config>> = std::sync::OnceLock::new();
    CONFIGS.get_or_init(configs)
}
