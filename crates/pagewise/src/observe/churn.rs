//! Memory-mapping system calls: counts, length histograms, and heap churn —
//! anonymous mappings (what `malloc` makes above its mmap threshold) that are
//! unmapped and mapped again, so the kernel faults and zeroes them every time.

use super::record::Mmap2;
use super::report::{Bucket, MappingRecords, Syscalls};
use std::collections::{BTreeMap, HashMap};

/// One observed system call (entry, or the return of `mmap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// `mmap` entered.
    Mmap {
        /// Length.
        len: u64,
        /// `PROT_*`.
        prot: u64,
        /// `MAP_*`.
        flags: u64,
    },
    /// `mmap` returned (an address, or `-errno`).
    MmapRet {
        /// The return value.
        ret: i64,
    },
    /// `munmap` entered.
    Munmap {
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// `brk` entered.
    Brk,
    /// `madvise` entered.
    Madvise {
        /// Length.
        len: u64,
        /// `MADV_*` value.
        behavior: u64,
    },
}

/// A system call with who made it, when, and from which stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// perf timestamp, ns.
    pub time: u64,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// What.
    pub kind: CallKind,
    /// Index of the caller's stack in the collector's stack table.
    pub stack: Option<u32>,
}

const MAP_SHARED: u64 = 0x01;
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_NORESERVE: u64 = 0x4000;
const MAP_STACK: u64 = 0x20000;
const PROT_WRITE: u64 = 0x2;
/// `MADV_HUGEPAGE`.
pub const MADV_HUGEPAGE: u64 = 14;
/// Smallest mapping counted as heap: below glibc's smallest mmap threshold
/// (128 KiB) malloc never maps.
const MIN_HEAP_MAPPING: u64 = 64 << 10;

/// Whether an `mmap` looks like `malloc` asking for memory: anonymous,
/// private, writable, not a thread stack, not a reservation.
pub fn heap_like(len: u64, prot: u64, flags: u64) -> bool {
    flags & MAP_ANONYMOUS != 0
        && flags & MAP_SHARED == 0
        && flags & (MAP_STACK | MAP_NORESERVE) == 0
        && prot & PROT_WRITE != 0
        && len >= MIN_HEAP_MAPPING
}

/// Churn attributed to one stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackChurn {
    /// Heap-like mappings from this stack that were unmapped again.
    pub cycles: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Lengths and how often each was seen.
    pub sizes: HashMap<u64, u64>,
}

/// The result of [`analyse`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChurnAnalysis {
    /// Counts, histograms and churn totals.
    pub stats: Syscalls,
    /// Churn by the stack that made the mapping.
    pub by_stack: HashMap<u32, StackChurn>,
    /// `mmap` calls that returned no matching result (lost records); churn is a lower bound then.
    pub unmatched: u64,
}

/// `len` rounded up to whole 4 KiB pages (lengths come from the program, so they
/// may be absurd: saturate rather than overflow).
fn page_round(len: u64) -> u64 {
    len.checked_next_multiple_of(4096).unwrap_or(u64::MAX)
}

fn histogram(lengths: &[u64]) -> Vec<Bucket> {
    let mut buckets: BTreeMap<u32, u64> = BTreeMap::new();
    for &len in lengths {
        let k = 63 - len.max(1).leading_zeros();
        *buckets.entry(k).or_default() += 1;
    }
    buckets
        .into_iter()
        .map(|(k, count)| Bucket {
            from: 1u64 << k,
            to: if k >= 63 { u64::MAX } else { 1u64 << (k + 1) },
            count,
        })
        .collect()
}

/// Counts the calls, builds the length histograms and finds heap churn.
/// Sorts `calls` by time first (they arrive per CPU).
pub fn analyse(calls: &mut [Call]) -> ChurnAnalysis {
    calls.sort_by_key(|c| c.time);
    let mut out = ChurnAnalysis::default();
    let mut mmap_lens = vec![];
    let mut munmap_lens = vec![];
    // Per thread: the mmap entered but not yet returned.
    let mut pending: HashMap<u32, (u64, bool, Option<u32>)> = HashMap::new();
    // Per process: live heap-like mappings (start -> length, stack), live bytes, peak.
    let mut live: HashMap<u32, BTreeMap<u64, (u64, Option<u32>)>> = HashMap::new();
    let mut live_bytes: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut heap_total = 0u64;
    for c in calls.iter() {
        match c.kind {
            CallKind::Mmap { len, prot, flags } => {
                out.stats.mmap.calls += 1;
                out.stats.mmap.bytes = out.stats.mmap.bytes.saturating_add(len);
                mmap_lens.push(len);
                if pending
                    .insert(c.tid, (len, heap_like(len, prot, flags), c.stack))
                    .is_some()
                {
                    out.unmatched += 1;
                }
            }
            CallKind::MmapRet { ret } => {
                let Some((len, heap, stack)) = pending.remove(&c.tid) else {
                    continue;
                };
                // -4095..-1 are errors.
                if !heap || (-4095..0).contains(&ret) {
                    continue;
                }
                let pages = page_round(len);
                live.entry(c.pid)
                    .or_default()
                    .insert(ret as u64, (pages, stack));
                let (bytes, peak) = live_bytes.entry(c.pid).or_default();
                *bytes = bytes.saturating_add(pages);
                *peak = (*peak).max(*bytes);
                heap_total = heap_total.saturating_add(pages);
            }
            CallKind::Munmap { addr, len } => {
                out.stats.munmap.calls += 1;
                out.stats.munmap.bytes = out.stats.munmap.bytes.saturating_add(len);
                munmap_lens.push(len);
                let Some(maps) = live.get_mut(&c.pid) else {
                    continue;
                };
                if let Some((pages, stack)) = maps.remove(&addr) {
                    out.stats.heap_cycles += 1;
                    if let Some((bytes, _)) = live_bytes.get_mut(&c.pid) {
                        *bytes = bytes.saturating_sub(pages);
                    }
                    if let Some(stack) = stack {
                        let s = out.by_stack.entry(stack).or_default();
                        s.cycles += 1;
                        s.bytes += pages;
                        *s.sizes.entry(pages).or_default() += 1;
                    }
                    // A partial unmap leaves the rest mapped.
                    let unmapped = page_round(len);
                    if unmapped < pages {
                        maps.insert(addr + unmapped, (pages - unmapped, stack));
                        if let Some((bytes, _)) = live_bytes.get_mut(&c.pid) {
                            *bytes += pages - unmapped;
                        }
                    }
                }
            }
            CallKind::Brk => out.stats.brk.calls += 1,
            CallKind::Madvise { len, behavior } => {
                out.stats.madvise.calls += 1;
                out.stats.madvise.bytes = out.stats.madvise.bytes.saturating_add(len);
                if behavior == MADV_HUGEPAGE {
                    out.stats.madv_hugepage_bytes =
                        out.stats.madv_hugepage_bytes.saturating_add(len);
                }
            }
        }
    }
    out.unmatched += pending.len() as u64;
    let peaks = live_bytes
        .values()
        .fold(0u64, |acc, (_, peak)| acc.saturating_add(*peak));
    out.stats.heap_remapped_bytes = heap_total.saturating_sub(peaks);
    out.stats.mmap.histogram = histogram(&mmap_lens);
    out.stats.munmap.histogram = histogram(&munmap_lens);
    out
}

/// Smallest anonymous mapping whose `MMAP2` record counts towards heap
/// churn inferred without tracepoints. Smaller ranges are re-committed in
/// place by managed runtimes (V8 and CPython manage 256 KiB pages with
/// `mprotect`/`mmap`), and a record cannot tell that from a fresh mapping.
/// glibc's malloc makes mappings this large for blocks of 1 MiB and more.
pub const MIN_RECORDED_HEAP_MAPPING: u64 = 1 << 20;

/// Heap-like mappings seen in perf `MMAP2` records (`//anon`, private,
/// readable and writable, at least [`MIN_RECORDED_HEAP_MAPPING`]): the
/// evidence for heap churn when the `mmap`/`munmap` tracepoints are not
/// available. A mapping can only be made where nothing is mapped, so a record
/// with the same process, address and length as an earlier one means the
/// range was unmapped and mapped again. The kernel reports a new mapping
/// merged with a neighbour as the merged range, so lengths can be larger than
/// what `malloc` asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemapRecords {
    /// Records seen per (pid, address, length).
    seen: HashMap<(u32, u64, u64), u64>,
    /// Heap-like records in all.
    records: u64,
    /// Their bytes in all.
    bytes: u64,
}

const PROT_READ_WRITE: u32 = 0x3;

impl RemapRecords {
    /// Notes one `MMAP2` record (any record: the rest are ignored).
    pub fn note(&mut self, m: &Mmap2) {
        let anonymous = m.filename == "//anon" || m.filename.is_empty();
        let private = m.flags & MAP_SHARED as u32 == 0;
        if anonymous
            && private
            && m.prot & PROT_READ_WRITE == PROT_READ_WRITE
            && m.len >= MIN_RECORDED_HEAP_MAPPING
        {
            self.records += 1;
            self.bytes = self.bytes.saturating_add(m.len);
            *self.seen.entry((m.pid, m.addr, m.len)).or_default() += 1;
        }
    }

    /// What the records show: how many ranges were mapped again, their bytes
    /// and most common lengths.
    pub fn summary(&self) -> MappingRecords {
        let mut remapped = 0;
        let mut remapped_bytes = 0u64;
        let mut by_len: HashMap<u64, u64> = HashMap::new();
        for (&(_, _, len), &n) in &self.seen {
            if n > 1 {
                remapped += n - 1;
                remapped_bytes = remapped_bytes.saturating_add(len.saturating_mul(n - 1));
                *by_len.entry(len).or_default() += n - 1;
            }
        }
        let mut sizes: Vec<(u64, u64)> = by_len.into_iter().collect();
        sizes.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        MappingRecords {
            heap_records: self.records,
            heap_bytes: self.bytes,
            remapped,
            remapped_bytes,
            sizes: sizes.into_iter().take(3).map(|(len, _)| len).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: u64 = 3;
    const ANON_PRIVATE: u64 = 0x22;

    fn call(time: u64, kind: CallKind, stack: Option<u32>) -> Call {
        Call {
            time,
            pid: 1,
            tid: 1,
            kind,
            stack,
        }
    }

    #[test]
    fn a_malloc_free_loop_is_churn() {
        let len = (64 << 20) + 4096;
        let mut calls = vec![];
        for i in 0..10u64 {
            let addr = 0x7f00_0000_0000 + (i % 2) * 0x1000_0000;
            // Out of order on purpose: analyse sorts by time.
            calls.push(call(
                i * 10 + 2,
                CallKind::MmapRet { ret: addr as i64 },
                None,
            ));
            calls.push(call(
                i * 10 + 1,
                CallKind::Mmap {
                    len,
                    prot: RW,
                    flags: ANON_PRIVATE,
                },
                Some(5),
            ));
            calls.push(call(i * 10 + 3, CallKind::Munmap { addr, len }, Some(6)));
        }
        let a = analyse(&mut calls);
        assert_eq!(a.stats.mmap.calls, 10);
        assert_eq!(a.stats.munmap.calls, 10);
        assert_eq!(a.stats.heap_cycles, 10);
        assert_eq!(a.stats.heap_remapped_bytes, 9 * len);
        assert_eq!(a.by_stack[&5].cycles, 10);
        assert_eq!(a.by_stack[&5].sizes[&len], 10);
        assert_eq!(
            a.stats.mmap.histogram,
            vec![Bucket {
                from: 64 << 20,
                to: 128 << 20,
                count: 10
            }]
        );
        assert_eq!(a.unmatched, 0);
    }

    #[test]
    fn one_big_mapping_is_not_churn() {
        let len = 1 << 30;
        let mut calls = vec![
            call(
                1,
                CallKind::Mmap {
                    len,
                    prot: RW,
                    flags: ANON_PRIVATE,
                },
                None,
            ),
            call(
                2,
                CallKind::MmapRet {
                    ret: 0x7f00_0000_0000,
                },
                None,
            ),
            call(
                3,
                CallKind::Munmap {
                    addr: 0x7f00_0000_0000,
                    len,
                },
                None,
            ),
        ];
        let a = analyse(&mut calls);
        assert_eq!(a.stats.heap_cycles, 1);
        assert_eq!(a.stats.heap_remapped_bytes, 0);
    }

    #[test]
    fn failed_shared_and_stack_mappings_are_not_heap() {
        assert!(!heap_like(1 << 20, RW, 0x21)); // shared
        assert!(!heap_like(1 << 20, 0, ANON_PRIVATE)); // PROT_NONE reservation
        assert!(!heap_like(1 << 20, RW, ANON_PRIVATE | MAP_STACK));
        assert!(!heap_like(4096, RW, ANON_PRIVATE)); // too small for malloc's mmap
        assert!(heap_like(1 << 20, RW, ANON_PRIVATE));
        let mut calls = vec![
            call(
                1,
                CallKind::Mmap {
                    len: 1 << 20,
                    prot: RW,
                    flags: ANON_PRIVATE,
                },
                None,
            ),
            call(2, CallKind::MmapRet { ret: -12 }, None),
            call(
                3,
                CallKind::Madvise {
                    len: 4 << 20,
                    behavior: MADV_HUGEPAGE,
                },
                None,
            ),
            call(4, CallKind::Brk, None),
        ];
        let a = analyse(&mut calls);
        assert_eq!(a.stats.heap_cycles, 0);
        assert_eq!(a.stats.madv_hugepage_bytes, 4 << 20);
        assert_eq!(a.stats.brk.calls, 1);
        assert_eq!(a.stats.madvise.calls, 1);
    }

    #[test]
    fn absurd_lengths_do_not_overflow() {
        let mut calls = vec![
            call(
                1,
                CallKind::Mmap {
                    len: u64::MAX,
                    prot: RW,
                    flags: ANON_PRIVATE,
                },
                None,
            ),
            call(2, CallKind::MmapRet { ret: 0x1000 }, None),
            call(
                3,
                CallKind::Munmap {
                    addr: 0x1000,
                    len: u64::MAX - 1,
                },
                None,
            ),
            call(
                4,
                CallKind::Mmap {
                    len: u64::MAX,
                    prot: RW,
                    flags: ANON_PRIVATE,
                },
                None,
            ),
        ];
        let a = analyse(&mut calls);
        assert_eq!(a.stats.mmap.bytes, u64::MAX);
        assert_eq!(a.stats.heap_cycles, 1);
    }

    #[test]
    fn histogram_buckets_are_powers_of_two() {
        let h = histogram(&[0, 1, 4095, 4096, 4097, 8191, 1 << 40]);
        let pairs: Vec<(u64, u64)> = h.iter().map(|b| (b.from, b.count)).collect();
        assert_eq!(pairs, vec![(1, 2), (2048, 1), (4096, 3), (1 << 40, 1)]);
    }

    fn record(pid: u32, addr: u64, len: u64, prot: u32, name: &str) -> Mmap2 {
        Mmap2 {
            pid,
            tid: pid,
            addr,
            len,
            pgoff: addr,
            prot,
            flags: 2,
            build_id: None,
            filename: name.to_owned(),
            time: None,
        }
    }

    #[test]
    fn the_same_anonymous_range_recorded_again_was_mapped_again() {
        let mut r = RemapRecords::default();
        let big = 64 << 20;
        for i in 0..5 {
            // Two buffers alternating between two addresses, as when the new one
            // is made before the old one is freed.
            r.note(&record(
                1,
                0x7f00_0000_0000 + (i % 2) * big,
                big,
                3,
                "//anon",
            ));
        }
        // A growing range (brk, or merging with a neighbour) is not a re-map.
        for len in [2 << 20, 3 << 20, 4 << 20] {
            r.note(&record(1, 0x5500_0000_0000, len, 3, "//anon"));
        }
        // Small, read-only, file-backed, or another process: ignored or kept apart.
        r.note(&record(1, 0x1000, 256 << 10, 3, "//anon"));
        r.note(&record(1, 0x1000, 256 << 10, 3, "//anon"));
        r.note(&record(1, 0x7e00_0000_0000, big, 1, "//anon"));
        r.note(&record(1, 0x7e00_0000_0000, big, 1, "//anon"));
        r.note(&record(1, 0x7d00_0000_0000, big, 3, "/data/file"));
        r.note(&record(1, 0x7d00_0000_0000, big, 3, "/data/file"));
        r.note(&record(2, 0x7f00_0000_0000, big, 3, "//anon"));
        let s = r.summary();
        assert_eq!(s.heap_records, 9);
        assert_eq!(s.heap_bytes, 6 * big + (9 << 20));
        assert_eq!(s.remapped, 3);
        assert_eq!(s.remapped_bytes, 3 * big);
        assert_eq!(s.sizes, vec![big]);
    }
}
