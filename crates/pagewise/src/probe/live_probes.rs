//! Live probes: try each kernel feature on a scratch mapping, and open each
//! perf counter and tracepoint pagewise uses, instead of guessing from the
//! kernel version.

use super::{NamedProbe, ProbeResult};
use crate::sys::mem::{Advice, AnonMapping, MapOptions};
use crate::sys::pagemap::{Pagemap, PAGE_IS_PRESENT};
use crate::sys::perf::{self, Counter, CounterSpec, EventType};
use crate::sys::Errno;
use crate::sys::{prctl, SysError};

const TWO_MIB: usize = 2 << 20;

fn errno_result(error: &SysError, unsupported: &[Errno], why_unsupported: &str) -> ProbeResult {
    match error.errno() {
        Some(e) if unsupported.contains(&e) => {
            ProbeResult::unavailable(format!("{why_unsupported} ({error})"))
        }
        _ => ProbeResult::failed(error.to_string()),
    }
}

/// `MADV_POPULATE_WRITE` on two fresh pages.
pub fn populate_write() -> ProbeResult {
    let m = match AnonMapping::map(2 * 4096, MapOptions::default()) {
        Ok(m) => m,
        Err(e) => return ProbeResult::failed(e.to_string()),
    };
    match m.advise(0, m.len(), Advice::PopulateWrite) {
        Ok(()) => ProbeResult::works("populated a scratch mapping"),
        Err(e) => errno_result(&e, &[Errno::INVAL], "kernel older than 5.14"),
    }
}

/// `MADV_COLLAPSE` on a touched, 2 MiB-aligned scratch range.
pub fn collapse() -> ProbeResult {
    let m = match AnonMapping::map_aligned(TWO_MIB, TWO_MIB, MapOptions::default()) {
        Ok(m) => m,
        Err(e) => return ProbeResult::failed(e.to_string()),
    };
    if let Err(e) = m.advise(0, TWO_MIB, Advice::PopulateWrite) {
        return ProbeResult::failed(format!("could not populate the scratch range: {e}"));
    }
    match m.advise(0, TWO_MIB, Advice::Collapse) {
        Ok(()) => ProbeResult::works("collapsed a 2 MiB scratch range"),
        Err(e) => match e.errno() {
            Some(Errno::INVAL) => {
                ProbeResult::unavailable(format!("kernel older than 6.1 or THP never ({e})"))
            }
            Some(Errno::AGAIN) | Some(Errno::NOMEM) => ProbeResult::works(format!(
                "supported, but no huge page was free just now ({e})"
            )),
            _ => ProbeResult::failed(e.to_string()),
        },
    }
}

/// `PAGEMAP_SCAN` over a scratch mapping with one touched page.
pub fn pagemap_scan() -> ProbeResult {
    let pagemap = match Pagemap::open_self() {
        Ok(p) => p,
        Err(e) => return ProbeResult::failed(e.to_string()),
    };
    let mut m = match AnonMapping::map(4 * 4096, MapOptions::default()) {
        Ok(m) => m,
        Err(e) => return ProbeResult::failed(e.to_string()),
    };
    m.as_mut_slice()[0] = 1;
    match pagemap.scan(
        m.addr(),
        m.addr() + m.len(),
        PAGE_IS_PRESENT,
        PAGE_IS_PRESENT,
    ) {
        Ok(regions) if regions.len() == 1 => ProbeResult::works("scanned a scratch mapping"),
        Ok(regions) => ProbeResult::failed(format!("unexpected answer: {regions:?}")),
        Err(e) => errno_result(&e, &[Errno::NOTTY, Errno::INVAL], "kernel older than 6.7"),
    }
}

/// `PR_SET_VMA_ANON_NAME` on a scratch mapping, confirmed in `/proc/self/maps`.
pub fn vma_anon_name() -> ProbeResult {
    let m = match AnonMapping::map(4096, MapOptions::default()) {
        Ok(m) => m,
        Err(e) => return ProbeResult::failed(e.to_string()),
    };
    if let Err(e) = prctl::set_vma_anon_name(m.addr(), m.len(), "pagewise-probe") {
        return errno_result(
            &e,
            &[Errno::INVAL],
            "kernel without CONFIG_ANON_VMA_NAME (5.17+)",
        );
    }
    let named = crate::host::proc_maps::read(None)
        .unwrap_or_default()
        .iter()
        .any(|e| e.start == m.addr() as u64 && e.path.as_deref() == Some("[anon:pagewise-probe]"));
    if named {
        ProbeResult::works("named a scratch mapping")
    } else {
        ProbeResult::failed("prctl succeeded but the name is not in /proc/self/maps")
    }
}

/// `MAP_HUGETLB` with one page size: first whether the kernel accepts the size
/// (`MAP_NORESERVE`, nothing is touched), then, when the pool has a free page,
/// a reserved mapping populated for real.
pub fn map_hugetlb(page_size: usize, free_pages: Option<u64>) -> ProbeResult {
    let probe = MapOptions {
        hugetlb_page_size: Some(page_size),
        no_reserve: true,
        populate: false,
    };
    if let Err(e) = AnonMapping::map(page_size, probe) {
        return errno_result(
            &e,
            &[Errno::INVAL],
            "the kernel does not offer this page size",
        );
    }
    if free_pages == Some(0) {
        return ProbeResult::unavailable(
            "the kernel offers this size, but the pool has no free page (reserve some)",
        );
    }
    let real = MapOptions {
        no_reserve: false,
        ..probe
    };
    match AnonMapping::map(page_size, real) {
        Ok(m) => match m.advise(0, page_size, Advice::PopulateWrite) {
            Ok(()) => ProbeResult::works("mapped and populated one page"),
            Err(e) => ProbeResult::failed(format!("mapped, but could not populate: {e}")),
        },
        Err(e) if e.errno() == Some(Errno::NOMEM) => {
            ProbeResult::unavailable("the pool has no free page (ENOMEM at mmap)")
        }
        Err(e) => ProbeResult::failed(e.to_string()),
    }
}

fn counter_probe(name: &str, spec: CounterSpec, needs_nonzero: bool) -> NamedProbe {
    let result = match Counter::open(&spec, 0) {
        Ok(counter) => {
            // Work that every event here counts: an mmap call, 64 page faults, cycles.
            // (A Vec could come from already-faulted heap memory and count nothing.)
            if let Ok(mut scratch) = AnonMapping::map(64 * 4096, MapOptions::default()) {
                for page in scratch.as_mut_slice().chunks_mut(4096) {
                    page[0] = 1;
                }
            }
            match counter.read() {
                Ok(0) if needs_nonzero => {
                    ProbeResult::unavailable("opens, but counted nothing (no PMU behind it)")
                }
                Ok(n) => ProbeResult::works(format!("counted {n}")),
                Err(e) => ProbeResult::failed(e.to_string()),
            }
        }
        Err(e) => match e.errno() {
            Some(Errno::NOENT) | Some(Errno::OPNOTSUPP) | Some(Errno::NODEV) => {
                ProbeResult::unavailable(format!("not supported here ({e})"))
            }
            Some(Errno::ACCES) | Some(Errno::PERM) => {
                ProbeResult::unavailable(format!("not permitted by perf_event_paranoid ({e})"))
            }
            _ => ProbeResult::failed(e.to_string()),
        },
    };
    NamedProbe {
        name: name.to_owned(),
        result,
    }
}

/// Opens each hardware counter pagewise uses, counting user mode only.
pub fn hardware_counters() -> Vec<NamedProbe> {
    let user = |event_type, config| CounterSpec {
        exclude_kernel: true,
        ..CounterSpec::new(event_type, config)
    };
    vec![
        counter_probe(
            "cycles",
            user(EventType::Hardware, perf::HW_CPU_CYCLES),
            true,
        ),
        counter_probe(
            "instructions",
            user(EventType::Hardware, perf::HW_INSTRUCTIONS),
            true,
        ),
        counter_probe(
            "dTLB-load-misses",
            user(
                EventType::HwCache,
                perf::hw_cache_read_miss(perf::HW_CACHE_DTLB),
            ),
            false,
        ),
        counter_probe(
            "iTLB-load-misses",
            user(
                EventType::HwCache,
                perf::hw_cache_read_miss(perf::HW_CACHE_ITLB),
            ),
            false,
        ),
    ]
}

/// Opens the software counters `pagewise stat` relies on.
pub fn software_counters() -> Vec<NamedProbe> {
    let user = |config| CounterSpec {
        exclude_kernel: true,
        ..CounterSpec::new(EventType::Software, config)
    };
    vec![
        counter_probe("page-faults", user(perf::SW_PAGE_FAULTS), true),
        counter_probe("minor-faults", user(perf::SW_PAGE_FAULTS_MIN), true),
        counter_probe("major-faults", user(perf::SW_PAGE_FAULTS_MAJ), false),
        counter_probe("task-clock", user(perf::SW_TASK_CLOCK), true),
    ]
}

/// Opens a tracepoint counter by its tracefs id, or explains why it cannot.
/// A `syscalls:` tracepoint is opened for user mode only, as `stat` may open
/// it without privilege (its events carry the caller's user registers, so
/// they still count; `perf_event_paranoid` 2 allows it); others count
/// kernel mode too (`exceptions:page_fault_user` fires in the kernel).
pub fn tracepoint(name: &str, id: Result<u64, String>) -> NamedProbe {
    match id {
        Ok(id) => {
            let spec = CounterSpec {
                exclude_kernel: name.starts_with("syscalls:"),
                ..CounterSpec::new(EventType::Tracepoint, id)
            };
            counter_probe(name, spec, false)
        }
        Err(why) => NamedProbe {
            name: name.to_owned(),
            result: ProbeResult::not_tried(why),
        },
    }
}
