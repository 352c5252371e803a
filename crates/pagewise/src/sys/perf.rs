//! `perf_event_open`: counting events ([`Counter`]) and general events with
//! sampling into a mapped ring buffer ([`Event`], [`RingBuffer`]) — hardware,
//! software and tracepoint events, per task or per CPU, inherited by the
//! target's threads and children.

use super::{SysError, SysResult};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

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
    ///
    /// Never inlined: a reading before a measured loop and one after it run
    /// the same code, so the second cannot take a page fault (counted by a
    /// page-fault counter) for code the first never executed.
    #[inline(never)]
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

/// `PERF_SAMPLE_IP`: the instruction pointer.
pub const SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`: process and thread id.
pub const SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`: a timestamp (perf clock, nanoseconds).
pub const SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ADDR`: the data address (the faulting address for page faults).
pub const SAMPLE_ADDR: u64 = 1 << 3;
/// `PERF_SAMPLE_ID`: the event id (after the time; pagewise uses [`SAMPLE_IDENTIFIER`]).
pub const SAMPLE_ID: u64 = 1 << 6;
/// `PERF_SAMPLE_STREAM_ID`: the id of the event that owns the ring.
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_PERIOD`: the sample period (how many events the sample stands for).
pub const SAMPLE_PERIOD: u64 = 1 << 8;
/// `PERF_SAMPLE_CALLCHAIN`: the frame-pointer call chain.
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
/// `PERF_SAMPLE_CPU`: the CPU number.
pub const SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_RAW`: the tracepoint's record.
pub const SAMPLE_RAW: u64 = 1 << 10;
/// `PERF_SAMPLE_STACK_USER`: a copy of the top of the user stack.
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
/// `PERF_SAMPLE_IDENTIFIER`: the event id, first in every sample.
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;

const FLAG_EXCLUDE_USER: u64 = 1 << 4;
const FLAG_MMAP: u64 = 1 << 8;
const FLAG_COMM: u64 = 1 << 9;
const FLAG_FREQ: u64 = 1 << 10;
const FLAG_TASK: u64 = 1 << 13;
const FLAG_WATERMARK: u64 = 1 << 14;
const FLAG_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
const FLAG_EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
const FLAG_MMAP_DATA: u64 = 1 << 17;
const FLAG_MMAP2: u64 = 1 << 23;
const FLAG_COMM_EXEC: u64 = 1 << 24;
const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
const FLAG_BUILD_ID: u64 = 1 << 34;

/// `PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING`.
const READ_FORMAT_TIMES: u64 = 1 | 2;
/// `PERF_FORMAT_LOST` (6.0+): samples lost because the ring buffer was full.
const READ_FORMAT_LOST: u64 = 1 << 4;

/// `_IO('$', 3)`.
const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;
/// `_IO('$', 5)`.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// `_IOW('$', 6, char *)`.
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
/// `_IOR('$', 7, u64 *)`.
const PERF_EVENT_IOC_ID: libc::c_ulong = 0x8008_2407;

/// Everything pagewise sets in a `perf_event_attr`, for counting or sampling.
///
/// `sample_period == 0` makes a counting event. Side-band records
/// (`mmap_records`) describe mappings, `exec`s, forks and exits of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventAttr {
    /// Event family.
    pub event_type: EventType,
    /// Event id within the family (a tracepoint id for tracepoints).
    pub config: u64,
    /// A sample every this many events (nanoseconds for clock events); 0 counts only.
    /// With `freq`, samples per second instead.
    pub sample_period: u64,
    /// `sample_period` is a frequency: the kernel adjusts the period at every tick
    /// to take about that many samples per second.
    pub freq: bool,
    /// `PERF_SAMPLE_*` bits: what each sample holds.
    pub sample_type: u64,
    /// Bytes of user stack to copy with [`SAMPLE_STACK_USER`] (a multiple of 8).
    pub sample_stack_user: u32,
    /// Deepest call chain to record (0 = the system default).
    pub sample_max_stack: u16,
    /// Count only user mode (needed when `perf_event_paranoid` >= 2 without privilege).
    pub exclude_kernel: bool,
    /// Count only kernel mode (for example page faults taken inside system calls).
    pub exclude_user: bool,
    /// Leave kernel frames out of call chains.
    pub exclude_callchain_kernel: bool,
    /// Leave user frames out of call chains (kernel-only stacks).
    pub exclude_callchain_user: bool,
    /// Follow threads and children created after opening.
    pub inherit: bool,
    /// Start disabled; enable with [`Event::enable`] or at `exec`.
    pub disabled: bool,
    /// Enable automatically when the target calls `exec`.
    pub enable_on_exec: bool,
    /// Emit `PERF_RECORD_MMAP2` (code and data mappings), `COMM`, `FORK` and `EXIT` records,
    /// each ending with the sample id (`sample_id_all`: the `TID`, `TIME`, `CPU` and
    /// `IDENTIFIER` fields that `sample_type` holds), so that records from the
    /// rings of different CPUs can be put in time order.
    pub side_band: bool,
    /// Put build ids instead of device and inode in `MMAP2` records (5.12+).
    pub build_id: bool,
    /// Wake a poller once this many bytes are in the ring buffer (0: every sample).
    pub wakeup_watermark: u32,
    /// Let [`Event::read`] report the samples lost to a full ring buffer (6.0+).
    pub read_lost: bool,
}

impl EventAttr {
    /// A counting event for `config` in `event_type`: enabled, user and kernel.
    pub fn counting(event_type: EventType, config: u64) -> Self {
        EventAttr {
            event_type,
            config,
            sample_period: 0,
            freq: false,
            sample_type: 0,
            sample_stack_user: 0,
            sample_max_stack: 0,
            exclude_kernel: false,
            exclude_user: false,
            exclude_callchain_kernel: false,
            exclude_callchain_user: false,
            inherit: false,
            disabled: false,
            enable_on_exec: false,
            side_band: false,
            build_id: false,
            wakeup_watermark: 0,
            read_lost: false,
        }
    }

    fn raw(&self) -> PerfEventAttr {
        let mut flags = FLAG_EXCLUDE_HV;
        let set = |flags: &mut u64, on: bool, bit: u64| {
            if on {
                *flags |= bit;
            }
        };
        set(&mut flags, self.disabled, FLAG_DISABLED);
        set(&mut flags, self.inherit, FLAG_INHERIT);
        set(&mut flags, self.exclude_kernel, FLAG_EXCLUDE_KERNEL);
        set(&mut flags, self.exclude_user, FLAG_EXCLUDE_USER);
        set(&mut flags, self.enable_on_exec, FLAG_ENABLE_ON_EXEC);
        set(
            &mut flags,
            self.exclude_callchain_kernel,
            FLAG_EXCLUDE_CALLCHAIN_KERNEL,
        );
        set(
            &mut flags,
            self.exclude_callchain_user,
            FLAG_EXCLUDE_CALLCHAIN_USER,
        );
        set(
            &mut flags,
            self.side_band,
            FLAG_MMAP
                | FLAG_MMAP_DATA
                | FLAG_MMAP2
                | FLAG_COMM
                | FLAG_COMM_EXEC
                | FLAG_TASK
                | FLAG_SAMPLE_ID_ALL,
        );
        set(&mut flags, self.build_id, FLAG_BUILD_ID);
        set(&mut flags, self.freq, FLAG_FREQ);
        set(&mut flags, self.wakeup_watermark > 0, FLAG_WATERMARK);
        PerfEventAttr {
            type_: self.event_type.raw(),
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: self.config,
            sample_period: self.sample_period,
            sample_type: self.sample_type,
            read_format: READ_FORMAT_TIMES | if self.read_lost { READ_FORMAT_LOST } else { 0 },
            flags,
            wakeup_events: self.wakeup_watermark,
            sample_stack_user: self.sample_stack_user,
            sample_max_stack: self.sample_max_stack,
            ..Default::default()
        }
    }
}

/// A count with the time the event was enabled and actually counting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountValue {
    /// The raw count.
    pub value: u64,
    /// Nanoseconds the event was enabled.
    pub enabled_ns: u64,
    /// Nanoseconds it was on the PMU (less than enabled when multiplexed).
    pub running_ns: u64,
    /// Samples lost because the ring buffer was full (with [`EventAttr::read_lost`]).
    pub lost: Option<u64>,
}

impl CountValue {
    /// The count scaled up for multiplexing (`value * enabled / running`).
    pub fn scaled(&self) -> u64 {
        if self.running_ns == 0 || self.running_ns >= self.enabled_ns {
            self.value
        } else {
            (self.value as u128 * self.enabled_ns as u128 / self.running_ns as u128) as u64
        }
    }
}

/// An open perf event (counting or sampling); closed on drop.
#[derive(Debug)]
pub struct Event {
    fd: OwnedFd,
    read_lost: bool,
}

impl Event {
    /// Opens an event for task `pid` (0 = this thread, -1 = every task on `cpu`)
    /// on `cpu` (-1 = any CPU). One `perf_event_open` call.
    ///
    /// Sampling across threads and children with a ring buffer needs one event
    /// per CPU: the kernel refuses to map an inherited event opened with `cpu == -1`.
    pub fn open(attr: &EventAttr, pid: libc::pid_t, cpu: i32) -> SysResult<Event> {
        Event::open_with_group(attr, pid, cpu, -1)
    }

    /// Opens an event as a member of `leader`'s group: it counts only while
    /// the leader is enabled, so one enable or disable of the leader switches
    /// the whole group (one system call, one cross-CPU call at most, however
    /// many members). One `perf_event_open` call.
    pub fn open_in_group(
        attr: &EventAttr,
        pid: libc::pid_t,
        cpu: i32,
        leader: &Event,
    ) -> SysResult<Event> {
        Event::open_with_group(attr, pid, cpu, leader.fd.as_raw_fd())
    }

    fn open_with_group(
        attr: &EventAttr,
        pid: libc::pid_t,
        cpu: i32,
        group_fd: libc::c_int,
    ) -> SysResult<Event> {
        let raw = attr.raw();
        // SAFETY: raw is a fully initialised perf_event_attr whose `size` field matches its
        // layout; the kernel only reads it. group_fd is -1 or a perf event we hold open.
        // The returned fd is checked before use.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &raw as *const PerfEventAttr,
                pid,
                cpu as libc::c_int,
                group_fd,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(SysError::last("perf_event_open"));
        }
        // SAFETY: fd is a freshly opened descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(Event {
            fd,
            read_lost: attr.read_lost,
        })
    }

    /// Reads the count, its enabled/running times and (with `read_lost`) the
    /// lost samples. One `read` call.
    pub fn read(&self) -> SysResult<CountValue> {
        let mut values = [0u64; 4];
        let want = if self.read_lost { 4 } else { 3 } * std::mem::size_of::<u64>();
        // SAFETY: reading at most `want` <= 32 bytes into an array of four u64 that we own;
        // the read format (times, and lost when asked) fixes the size the kernel writes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), values.as_mut_ptr().cast(), want) };
        if n != want as isize {
            return Err(SysError::last("read(perf event)"));
        }
        Ok(CountValue {
            value: values[0],
            enabled_ns: values[1],
            running_ns: values[2],
            lost: self.read_lost.then_some(values[3]),
        })
    }

    /// The kernel's id for this event, as found in [`SAMPLE_IDENTIFIER`].
    pub fn id(&self) -> SysResult<u64> {
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer, which points to ours.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                PERF_EVENT_IOC_ID as _,
                &mut id as *mut u64,
            )
        };
        if rc != 0 {
            return Err(SysError::last("ioctl(PERF_EVENT_IOC_ID)"));
        }
        Ok(id)
    }

    /// Sends this event's samples to `target`'s ring buffer (same CPU required).
    pub fn set_output(&self, target: &Event) -> SysResult<()> {
        // SAFETY: SET_OUTPUT takes an fd by value; both fds are live perf events.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                PERF_EVENT_IOC_SET_OUTPUT as _,
                target.fd.as_raw_fd() as libc::c_ulong,
            )
        };
        if rc != 0 {
            return Err(SysError::last("ioctl(PERF_EVENT_IOC_SET_OUTPUT)"));
        }
        Ok(())
    }

    /// Sets a tracepoint filter such as `error_code & 2` (kernel filter syntax).
    pub fn set_filter(&self, filter: &str) -> SysResult<()> {
        let c = std::ffi::CString::new(filter).map_err(|_| SysError {
            call: "ioctl(PERF_EVENT_IOC_SET_FILTER)",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        })?;
        // SAFETY: the kernel reads a NUL-terminated string through the pointer, which
        // stays valid for the duration of the call.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                PERF_EVENT_IOC_SET_FILTER as _,
                c.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(SysError::last("ioctl(PERF_EVENT_IOC_SET_FILTER)"));
        }
        Ok(())
    }

    /// Starts counting (`PERF_EVENT_IOC_ENABLE`).
    pub fn enable(&self) -> SysResult<()> {
        simple_ioctl(
            &self.fd,
            PERF_EVENT_IOC_ENABLE,
            "ioctl(PERF_EVENT_IOC_ENABLE)",
        )
    }

    /// Stops counting (`PERF_EVENT_IOC_DISABLE`).
    pub fn disable(&self) -> SysResult<()> {
        simple_ioctl(
            &self.fd,
            PERF_EVENT_IOC_DISABLE,
            "ioctl(PERF_EVENT_IOC_DISABLE)",
        )
    }

    /// Sets the count to zero (`PERF_EVENT_IOC_RESET`).
    pub fn reset(&self) -> SysResult<()> {
        simple_ioctl(
            &self.fd,
            PERF_EVENT_IOC_RESET,
            "ioctl(PERF_EVENT_IOC_RESET)",
        )
    }
}

impl From<Event> for OwnedFd {
    fn from(e: Event) -> OwnedFd {
        e.fd
    }
}

impl AsFd for Event {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn simple_ioctl(fd: &OwnedFd, request: libc::c_ulong, call: &'static str) -> SysResult<()> {
    // SAFETY: these requests take no argument pointer; the fd is a live perf event.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, 0) };
    if rc != 0 {
        return Err(SysError::last(call));
    }
    Ok(())
}

/// Offsets in `struct perf_event_mmap_page`.
const MMAP_PAGE_DATA_HEAD: usize = 1024;
const MMAP_PAGE_DATA_TAIL: usize = 1032;
const MMAP_PAGE_DATA_OFFSET: usize = 1040;
const MMAP_PAGE_DATA_SIZE: usize = 1048;

/// The mapped ring buffer of a sampling event: the kernel writes records,
/// [`RingBuffer::read_into`] copies them out and frees the space.
///
/// When the reader falls behind, the kernel drops records and writes a
/// `PERF_RECORD_LOST` record saying how many.
#[derive(Debug)]
pub struct RingBuffer {
    base: std::ptr::NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping belongs to this value alone; the kernel is the only other writer
// and synchronises through data_head/data_tail, so moving it to another thread is sound.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Maps `event`'s buffer with `data_pages` pages of data (a power of two) plus
    /// the control page. One `mmap`; costs `data_pages` pages of locked memory
    /// (counted against `perf_event_mlock_kb` for unprivileged users).
    pub fn map(event: &Event, data_pages: usize) -> SysResult<RingBuffer> {
        if !data_pages.is_power_of_two() {
            return Err(SysError {
                call: "mmap(perf ring buffer)",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let page = super::base_page_size();
        let map_len = (data_pages + 1) * page;
        // SAFETY: mapping a perf event fd with a fresh address; the result is checked. The
        // kernel requires PROT_WRITE to let us move data_tail (overwrite mode is not used).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                event.fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(SysError::last("mmap(perf ring buffer)"));
        }
        let base = std::ptr::NonNull::new(ptr.cast::<u8>()).expect("mmap never returns NULL");
        // SAFETY: the control page is mapped and at least 4 KiB long; the kernel wrote these
        // fields before mmap returned and never changes them afterwards.
        let (off, size) = unsafe {
            (
                std::ptr::read_volatile(base.as_ptr().add(MMAP_PAGE_DATA_OFFSET).cast::<u64>()),
                std::ptr::read_volatile(base.as_ptr().add(MMAP_PAGE_DATA_SIZE).cast::<u64>()),
            )
        };
        let (data_offset, data_size) = if size == 0 {
            // Kernels before 4.1 leave these zero; the data follows the control page.
            (page, data_pages * page)
        } else {
            (off as usize, size as usize)
        };
        Ok(RingBuffer {
            base,
            map_len,
            data_offset,
            data_size,
        })
    }

    fn head(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: data_head is an 8-byte aligned u64 inside the mapped control page, which
        // lives as long as self; the kernel updates it atomically.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(MMAP_PAGE_DATA_HEAD)
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    fn tail(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: as for head(); data_tail is written only by us and read by the kernel.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(MMAP_PAGE_DATA_TAIL)
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    /// Bytes waiting to be read.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        head.wrapping_sub(tail) as usize
    }

    /// Appends every complete record written so far to `out` and gives the
    /// space back to the kernel. Returns the number of bytes appended.
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> usize {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        let len = head.wrapping_sub(tail) as usize;
        if len == 0 {
            return 0;
        }
        let len = len.min(self.data_size);
        let start = (tail as usize) & (self.data_size - 1);
        let first = len.min(self.data_size - start);
        // SAFETY: [data_offset, data_offset + data_size) is mapped; start + first <=
        // data_size and len - first <= start, so both copies stay inside the data area,
        // which the kernel does not write between tail and head until we move the tail.
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, len - first));
        }
        // Everything has been copied out before the kernel may reuse the space.
        fence(Ordering::Release);
        self.tail()
            .store(tail.wrapping_add(len as u64), Ordering::Release);
        len
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: base/map_len describe the mapping made in map(); nothing borrows it now.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

/// Online CPU numbers, from `/sys/devices/system/cpu/online` (for example `0-3,6`).
/// Falls back to `0..available_parallelism` when the file cannot be read.
pub fn online_cpus() -> Vec<i32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpu_list(&t))
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as i32).collect()
        })
}

/// Parses a kernel CPU list such as `0-3,6`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<i32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i32, i32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
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
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::PerfEvents,
                    "software counters unavailable here: {e}"
                );
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

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert!(!online_cpus().is_empty());
    }

    #[test]
    fn ring_buffer_receives_samples_of_this_thread() {
        let attr = EventAttr {
            sample_period: 1,
            sample_type: SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_ADDR,
            exclude_kernel: true,
            disabled: true,
            ..EventAttr::counting(EventType::Software, SW_PAGE_FAULTS)
        };
        let event = match Event::open(&attr, 0, -1) {
            Ok(e) => e,
            Err(e) => {
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::PerfEvents,
                    "software sampling unavailable here: {e}"
                );
            }
        };
        let mut ring = RingBuffer::map(&event, 8).unwrap();
        let id = event.id().unwrap();
        event.enable().unwrap();
        let mut pages = crate::sys::mem::AnonMapping::map(16 * 4096, Default::default()).unwrap();
        for chunk in pages.as_mut_slice().chunks_mut(4096) {
            chunk[0] = 1;
        }
        event.disable().unwrap();
        assert!(event.read().unwrap().value >= 16);
        let mut out = Vec::new();
        ring.read_into(&mut out);
        // Walk the records: every PERF_RECORD_SAMPLE (9) starts with our id.
        let (mut at, mut samples) = (0, 0);
        while at + 8 <= out.len() {
            let kind = u32::from_ne_bytes(out[at..at + 4].try_into().unwrap());
            let size = u16::from_ne_bytes(out[at + 6..at + 8].try_into().unwrap()) as usize;
            if kind == 9 {
                let got = u64::from_ne_bytes(out[at + 8..at + 16].try_into().unwrap());
                assert_eq!(got, id);
                let addr = u64::from_ne_bytes(out[at + 32..at + 40].try_into().unwrap()) as usize;
                if (pages.addr()..pages.addr() + pages.len()).contains(&addr) {
                    samples += 1;
                }
            }
            assert!(size >= 8);
            at += size;
        }
        assert_eq!(samples, 16, "one sample per touched page");
        assert_eq!(ring.pending(), 0);
    }
}
