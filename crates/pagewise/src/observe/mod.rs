//! Observing memory from the kernel's side: which page sizes a range really
//! got, how much of it is resident.

pub mod smaps;

use crate::sys::perf::{self, Counter, CounterSpec, EventType};
use crate::sys::SysResult;

/// A counter of the calling thread's page faults (the `page-faults` software
/// event), kernel-side faults included when running as root. One
/// `perf_event_open`; reading it is one `read`.
pub fn thread_page_fault_counter() -> SysResult<Counter> {
    let spec = CounterSpec {
        exclude_kernel: !crate::sys::libc_info::is_root(),
        ..CounterSpec::new(EventType::Software, perf::SW_PAGE_FAULTS)
    };
    Counter::open(&spec, 0)
}

/// Page faults the calling thread takes while `work` runs, or `None` when
/// the counter cannot be opened here.
pub fn faults_during(work: impl FnOnce()) -> Option<u64> {
    let counter = thread_page_fault_counter().ok()?;
    let before = counter.read().ok()?;
    work();
    Some(counter.read().ok()?.saturating_sub(before))
}
