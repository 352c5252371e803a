//! `perf_event_open` for counting events (hardware, software, tracepoints).

use super::{SysError, SysResult};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `PERF_TYPE_*`: the family of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `PERF_TYPE_HARDWARE`: PMU generalized events (cycles, instructions).
    Hardware,
    /// `PERF_TYPE_SOFTWARE`: kernel-counted events (page faults, clocks).
    Software,
    /// `PERF_TYPE_TRACEPOINT`: a tracefs event, by id.
    Tracepoint,
    /// `PERF_TYPE_HW_CACHE`: PMU cache and TLB events.
    HwCache,
}

impl EventType {
    fn raw(self) -> u32 {
        match self {
            EventType::Hardware => 0,
            EventType::Software => 1,
            EventType::Tracepoint => 2,
            EventType::HwCache => 3,
        }
    }
}

/// `PERF_COUNT_HW_CPU_CYCLES`.
pub const HW_CPU_CYCLES: u64 = 0;
/// `PERF_COUNT_HW_INSTRUCTIONS`.
pub const HW_INSTRUCTIONS: u64 = 1;
/// `PERF_COUNT_SW_CPU_CLOCK`.
pub const SW_CPU_CLOCK: u64 = 0;
/// `PERF_COUNT_SW_TASK_CLOCK`.
pub const SW_TASK_CLOCK: u64 = 1;
/// `PERF_COUNT_SW_PAGE_FAULTS`.
pub const SW_PAGE_FAULTS: u64 = 2;
/// `PERF_COUNT_SW_CONTEXT_SWITCHES`.
pub const SW_CONTEXT_SWITCHES: u64 = 3;
/// `PERF_COUNT_SW_PAGE_FAULTS_MIN`.
pub const SW_PAGE_FAULTS_MIN: u64 = 5;
/// `PERF_COUNT_SW_PAGE_FAULTS_MAJ`.
pub const SW_PAGE_FAULTS_MAJ: u64 = 6;

/// The `PERF_TYPE_HW_CACHE` config for read misses of a cache id
/// (`PERF_COUNT_HW_CACHE_DTLB` = 3, `PERF_COUNT_HW_CACHE_ITLB` = 4).
pub const fn hw_cache_read_miss(cache_id: u64) -> u64 {
    const OP_READ: u64 = 0;
    const RESULT_MISS: u64 = 1;
    cache_id | (OP_READ << 8) | (RESULT_MISS << 16)
}
/// `PERF_COUNT_HW_CACHE_DTLB`.
pub const HW_CACHE_DTLB: u64 = 3;
/// `PERF_COUNT_HW_CACHE_ITLB`.
pub const HW_CACHE_ITLB: u64 = 4;

/// `struct perf_event_attr`, `PERF_ATTR_SIZE_VER8` (136 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `_IO('$', 0)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// `_IO('$', 1)`.
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_INHERIT: u64 = 1 << 1;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;

/// What to count and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterSpec {
    /// Event family.
    pub event_type: EventType,
    /// Event id within the family (a tracepoint id for tracepoints).
    pub config: u64,
    /// Count only user mode (needed when `perf_event_paranoid` >= 2 without privilege).
    pub exclude_kernel: bool,
    /// Follow threads and children created after opening.
    pub inherit: bool,
    /// Start disabled; enable with [`Counter::enable`] or at `exec`.
    pub disabled: bool,
    /// Enable automatically when the target calls `exec`.
    pub enable_on_exec: bool,
}

impl CounterSpec {
    /// A counter for `config` in `event_type`, enabled at once, user and kernel.
    pub fn new(event_type: EventType, config: u64) -> Self {
        CounterSpec {
            event_type,
            config,
            exclude_kernel: false,
            inherit: false,
            disabled: false,
            enable_on_exec: false,
        }
    }
}

/// An open perf counter; closed on drop.
#[derive(Debug)]
pub struct Counter {
    fd: OwnedFd,
}

impl Counter {
    /// Opens a counter for process `pid` (0 = this process) on any CPU.
    /// One `perf_event_open` call.
    pub fn open(spec: &CounterSpec, pid: libc::pid_t) -> SysResult<Counter> {
        let mut attr = PerfEventAttr {
            type_: spec.event_type.raw(),
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: spec.config,
            ..Default::default()
        };
        let mut flags = FLAG_EXCLUDE_HV;
        if spec.disabled {
            flags |= FLAG_DISABLED;
        }
        if spec.inherit {
            flags |= FLAG_INHERIT;
        }
        if spec.exclude_kernel {
            flags |= FLAG_EXCLUDE_KERNEL;
        }
        if spec.enable_on_exec {
            flags |= FLAG_ENABLE_ON_EXEC;
        }
        attr.flags = flags;
        // SAFETY: attr is a fully initialised perf_event_attr whose `size` field matches its
        // layout; the kernel only reads it. The returned fd is checked before use.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                pid,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(SysError::last("perf_event_open"));
        }
        // SAFETY: fd is a freshly opened descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(Counter { fd })
    }

    /// Starts counting (`PERF_EVENT_IOC_ENABLE`).
    pub fn enable(&self) -> SysResult<()> {
        self.ioctl(PERF_EVENT_IOC_ENABLE, "ioctl(PERF_EVENT_IOC_ENABLE)")
    }

    /// Stops counting (`PERF_EVENT_IOC_DISABLE`).
    pub fn disable(&self) -> SysResult<()> {
        self.ioctl(PERF_EVENT_IOC_DISABLE, "ioctl(PERF_EVENT_IOC_DISABLE)")
    }

    fn ioctl(&self, request: libc::c_ulong, call: &'static str) -> SysResult<()> {
        // SAFETY: enable/disable take no argument pointer; the fd is a live perf event.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, 0) };
        if rc != 0 {
            return Err(SysError::last(call));
        }
        Ok(())
    }

    /// Reads the current count. One `read` call.
    pub fn read(&self) -> SysResult<u64> {
        let mut value = 0u64;
        // SAFETY: reading 8 bytes into a u64 we own from a counter fd.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut value as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if n != std::mem::size_of::<u64>() as isize {
            return Err(SysError::last("read(perf counter)"));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_has_the_ver8_size() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 136);
    }

    #[test]
    fn software_page_fault_counter_counts_touches() {
        let spec = CounterSpec {
            exclude_kernel: true,
            ..CounterSpec::new(EventType::Software, SW_PAGE_FAULTS)
        };
        let counter = match Counter::open(&spec, 0) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: software counters unavailable here: {e}");
                return;
            }
        };
        let before = counter.read().unwrap();
        let mut pages = crate::sys::mem::AnonMapping::map(64 * 4096, Default::default()).unwrap();
        for chunk in pages.as_mut_slice().chunks_mut(4096) {
            chunk[0] = 1;
        }
        let after = counter.read().unwrap();
        assert!(after - before >= 64, "counted {} faults", after - before);
    }
}
