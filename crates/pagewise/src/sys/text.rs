//! Moving a range of executable text onto huge pages without ever leaving the
//! process without code.
//!
//! The copy is built elsewhere (huge-page memory, written, then made R+X) and
//! moved over the original in one `mremap(MREMAP_MAYMOVE | MREMAP_FIXED)`.
//! Until that last call succeeds the original mapping is untouched; if any
//! step fails the copy is unmapped and the program runs on as before.

use super::mem::{Advice, AnonMapping, MapOptions};
use super::SysError;

const HUGE: usize = 2 << 20;

/// Which huge pages back the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugeKind {
    /// A 2 MiB hugetlb mapping (reserved at `mmap`).
    Hugetlb,
    /// Anonymous memory advised `MADV_HUGEPAGE`, populated while writable.
    Thp,
}

/// The steps of a move, in order; a failure names the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStep {
    /// Map the huge-page memory for the copy.
    Map,
    /// Copy the text into it.
    Copy,
    /// Make the copy read + execute (refused under W^X policies such as MDWE).
    Protect,
    /// Move the copy over the original text.
    Remap,
}

impl MoveStep {
    /// Lower-case name: `map`, `copy`, `protect`, `remap`.
    pub fn name(self) -> &'static str {
        match self {
            MoveStep::Map => "map",
            MoveStep::Copy => "copy",
            MoveStep::Protect => "protect",
            MoveStep::Remap => "remap",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<MoveStep> {
        [
            MoveStep::Map,
            MoveStep::Copy,
            MoveStep::Protect,
            MoveStep::Remap,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

/// A failed move: where, and the error. The original text is in place.
#[derive(Debug)]
pub struct MoveError {
    /// The step that failed.
    pub step: MoveStep,
    /// The error (errno `ECANCELED` for an injected failure).
    pub error: SysError,
}

/// What a successful move did besides the move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoveStats {
    /// `/proc/self/pagemap` could not be opened, so nothing was dropped: the
    /// original pages the copy touched stayed mapped until the remap.
    pub pagemap_unreadable: bool,
}

const BASE: usize = 4096;
const PAGES_PER_HUGE: usize = HUGE / BASE;
/// The copy goes this many bytes at a time, dropping what it faulted in after
/// each piece, so the original pages it maps stay few (a quarter MiB, plus the
/// kernel's fault-around of 64 KiB).
const PIECE: usize = 256 << 10;
/// pagemap entry bits: the page is present, or swapped out.
const PM_PRESENT: u64 = 1 << 63;
const PM_SWAPPED: u64 = 1 << 62;

/// Which 4 KiB pages of a range of this process were mapped (present or
/// swapped) before the copy, from `/proc/self/pagemap`: one bit per page
/// (3.2 KiB for 100 MiB), read before anything is copied, because the kernel
/// maps a whole large folio of the page cache (and a 64 KiB fault-around
/// window) on one fault, which spills into the pages ahead.
struct PagesMapped {
    start: usize,
    bits: Vec<u64>,
}

impl PagesMapped {
    /// Reads the entries of `[start, start+len)`, 4 KiB of them (2 MiB of
    /// range) per `pread`.
    fn read(pagemap: &std::fs::File, start: usize, len: usize) -> std::io::Result<PagesMapped> {
        use std::os::unix::fs::FileExt;
        let pages = len / BASE;
        let mut bits = vec![0u64; pages.div_ceil(64)];
        let mut raw = [0u8; PAGES_PER_HUGE * 8];
        for first in (0..pages).step_by(PAGES_PER_HUGE) {
            let count = PAGES_PER_HUGE.min(pages - first);
            let buf = &mut raw[..count * 8];
            pagemap.read_exact_at(buf, ((start / BASE + first) * 8) as u64)?;
            for (i, entry) in buf.chunks_exact(8).enumerate() {
                let entry = u64::from_ne_bytes(entry.try_into().unwrap_or([0; 8]));
                if entry & (PM_PRESENT | PM_SWAPPED) != 0 {
                    let page = first + i;
                    bits[page / 64] |= 1 << (page % 64);
                }
            }
        }
        Ok(PagesMapped { start, bits })
    }

    fn was_mapped(&self, page: usize) -> bool {
        self.bits[page / 64] & (1 << (page % 64)) != 0
    }

    /// Drops the pages `pages` (indexes from the range's start) that were not
    /// mapped before the copy (the copy faulted them in; dropping pages that
    /// are not mapped now costs only the page-table walk). Best effort: a
    /// failure only leaves pages mapped until the remap.
    fn release_newly_mapped(&self, pages: std::ops::Range<usize>) {
        let mut page = pages.start;
        while page < pages.end {
            if self.was_mapped(page) {
                page += 1;
                continue;
            }
            let first = page;
            while page < pages.end && !self.was_mapped(page) {
                page += 1;
            }
            let (addr, len) = (self.start + first * BASE, (page - first) * BASE);
            // SAFETY: [addr, addr+len) is private file-backed text of this process whose
            // pages were not mapped before the copy read them: they are clean file pages,
            // so dropping them only makes a later access fault them in again, identical.
            unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        }
    }
}

fn check(step: MoveStep, fail_at: Option<MoveStep>) -> Result<(), MoveError> {
    if fail_at == Some(step) {
        return Err(MoveError {
            step,
            error: SysError {
                call: "injected failure (PAGEWISE_FAIL_AT)",
                source: std::io::Error::from_raw_os_error(libc::ECANCELED),
            },
        });
    }
    Ok(())
}

fn at(step: MoveStep) -> impl Fn(SysError) -> MoveError {
    move |error| MoveError { step, error }
}

/// Moves `[start, start+len)` — 2 MiB-aligned, a whole number of 2 MiB pages,
/// inside a readable executable mapping of this process — onto huge pages.
///
/// Crate-internal on purpose: it replaces whatever is mapped at `start`, so
/// only `text::huge`, which first checks that the range is private file-backed
/// r-x text, that this function's own code is outside it and that the process
/// has one thread, may call it. `fail_at` injects a failure before a step.
///
/// The copy goes 256 KiB at a time. Which pages of the original were mapped
/// is read from `/proc/self/pagemap` first; after each piece, the pages the
/// copy faulted in (in the piece and up to 2 MiB ahead of it, since a fault
/// maps a whole large folio of the page cache) are dropped again
/// (`MADV_DONTNEED`). They are clean file pages that stay in the page cache,
/// so the process holds the copy plus at most one fault's worth of the
/// original beyond what it held before, never the original twice. Pages that
/// were mapped before are left alone (one may hold a private change such as a
/// debugger's breakpoint, which `MADV_DONTNEED` would discard if the move then
/// failed).
///
/// Cost: one huge-page mapping, one copy of `len` bytes, three system calls,
/// a 4 KiB `pread` of `/proc/self/pagemap` per 2 MiB into a bitmap of one bit
/// per 4 KiB page, and one `madvise` call (or a few) per 256 KiB.
pub(crate) fn move_to_huge(
    start: usize,
    len: usize,
    kind: HugeKind,
    fail_at: Option<MoveStep>,
) -> Result<MoveStats, MoveError> {
    if !start.is_multiple_of(HUGE) || !len.is_multiple_of(HUGE) || len == 0 {
        return Err(MoveError {
            step: MoveStep::Map,
            error: SysError {
                call: "move_to_huge",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            },
        });
    }
    check(MoveStep::Map, fail_at)?;
    let mut copy = match kind {
        HugeKind::Hugetlb => AnonMapping::map(
            len,
            MapOptions {
                hugetlb_page_size: Some(HUGE),
                no_reserve: false,
                populate: false,
            },
        )
        .map_err(at(MoveStep::Map))?,
        HugeKind::Thp => {
            let aligned = AnonMapping::map_aligned(len, HUGE, MapOptions::default())
                .map_err(at(MoveStep::Map))?;
            aligned
                .advise(0, len, Advice::HugePage)
                .map_err(at(MoveStep::Map))?;
            aligned
        }
    };

    check(MoveStep::Copy, fail_at)?;
    // Fault the huge pages in while writable, then fill them.
    copy.advise(0, len, Advice::PopulateWrite)
        .map_err(at(MoveStep::Copy))?;
    let pagemap = std::fs::File::open("/proc/self/pagemap").ok();
    let mapped_before = pagemap
        .as_ref()
        .and_then(|p| PagesMapped::read(p, start, len).ok());
    for offset in (0..len).step_by(PIECE) {
        // SAFETY: the caller guarantees [start, start+len) is mapped readable text of this
        // process; reading it races with nothing since code is not written at run time.
        let text = unsafe { std::slice::from_raw_parts((start + offset) as *const u8, PIECE) };
        copy.as_mut_slice()[offset..offset + PIECE].copy_from_slice(text);
        if let Some(mapped) = &mapped_before {
            // This piece, and whatever the faults mapped ahead of it (a large folio).
            let ahead = (offset + PIECE + HUGE).min(len);
            mapped.release_newly_mapped(offset / BASE..ahead / BASE);
        }
    }
    let stats = MoveStats {
        pagemap_unreadable: mapped_before.is_none(),
    };

    check(MoveStep::Protect, fail_at)?;
    // SAFETY: the copy is our own mapping; no Rust reference to it outlives this point
    // (the slice above is gone), so making it read-only is sound.
    let rc = unsafe {
        libc::mprotect(
            copy.addr() as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_EXEC,
        )
    };
    if rc != 0 {
        return Err(MoveError {
            step: MoveStep::Protect,
            error: SysError::last("mprotect(PROT_READ|PROT_EXEC)"),
        });
    }

    check(MoveStep::Remap, fail_at)?;
    // Own the copy's range outright before mremap takes it away (no other handle can
    // then unmap the address later).
    let (source, _) = copy.into_raw().map_err(|(copy, error)| {
        drop(copy);
        MoveError {
            step: MoveStep::Remap,
            error,
        }
    })?;
    // SAFETY: the copy is byte-identical, executable text; MREMAP_FIXED atomically replaces
    // [start, start+len) with it, so every instruction stays valid. The crate-internal callers
    // check that the range is private file-backed r-x text, that the moving code is outside it
    // and that the process has one thread.
    let moved = unsafe {
        libc::mremap(
            source as *mut libc::c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            start as *mut libc::c_void,
        )
    };
    if moved == libc::MAP_FAILED {
        let error = SysError::last("mremap(MREMAP_FIXED)");
        // SAFETY: the copy is still ours (mremap failed) and nothing refers to it.
        unsafe { libc::munmap(source as *mut libc::c_void, len) };
        return Err(MoveError {
            step: MoveStep::Remap,
            error,
        });
    }
    Ok(stats)
}
