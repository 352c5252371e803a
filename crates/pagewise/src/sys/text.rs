//! Moving a range of executable text onto huge pages without ever leaving the
//! process without code.
//!
//! The copy is built elsewhere (huge-page memory, written, then made R+X) and
//! moved over the original in one `mremap(MREMAP_MAYMOVE | MREMAP_FIXED)`.
//! Until that last call succeeds the original mapping is untouched; if any
//! step fails the copy is unmapped and the program runs on as before.

use super::mem::{Advice, AnonMapping, MapOptions};
use super::{SysError, SysResult};

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
/// The caller must make sure no other thread runs code in the range while it
/// is copied and that the code doing the move lives outside it; pagewise calls
/// this from a library constructor before `main`, when the process has one
/// thread. `fail_at` injects a failure before a step (for tests).
///
/// Cost: one huge-page mapping, one copy of `len` bytes, three system calls.
pub fn move_to_huge(
    start: usize,
    len: usize,
    kind: HugeKind,
    fail_at: Option<MoveStep>,
) -> Result<(), MoveError> {
    if start % HUGE != 0 || len % HUGE != 0 || len == 0 {
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
            let over =
                AnonMapping::map(len + HUGE, MapOptions::default()).map_err(at(MoveStep::Map))?;
            let offset = over.addr().next_multiple_of(HUGE) - over.addr();
            let aligned = over.trim(offset, len).map_err(at(MoveStep::Map))?;
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
    // SAFETY: the caller guarantees [start, start+len) is mapped readable text of this
    // process; reading it races with nothing since code is not written at run time.
    let text = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
    copy.as_mut_slice().copy_from_slice(text);

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
    let source = copy.addr();
    // SAFETY: the copy is byte-identical, executable text; MREMAP_FIXED atomically replaces
    // [start, start+len) with it, so every instruction stays valid. The caller guarantees the
    // running code and other threads are outside the range.
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
        return Err(MoveError {
            step: MoveStep::Remap,
            error: SysError::last("mremap(MREMAP_FIXED)"),
        });
    }
    // The pages now live at `start`; the copy's old range is already unmapped by mremap.
    copy.forget_moved();
    Ok(())
}

/// Whether `addr` lies in a mapping with execute permission (reads `/proc/self/maps`).
pub fn is_executable_address(addr: usize) -> SysResult<bool> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|source| SysError {
        call: "read(/proc/self/maps)",
        source,
    })?;
    Ok(maps.lines().any(|line| {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            return false;
        };
        let Some((a, b)) = range.split_once('-') else {
            return false;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            return false;
        };
        (a..b).contains(&addr) && perms.as_bytes().get(2) == Some(&b'x')
    }))
}
