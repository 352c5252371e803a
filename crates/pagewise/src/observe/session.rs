//! Opening the perf events on a target (counting and sampling), and the
//! threads that run beside it: the ring-buffer reader, the page-size sampler
//! and the switch of the fault-kind counters.

use super::address_spaces::AddressSpaces;
use super::collect::{Collector, Sampled, TpFields};
use super::kinds::{self, KindWindow};
use super::report::{Hardware, MappingPages, Skipped};
use crate::host::proc_maps::MapsEntry;
use crate::host::smaps::{self, PageSizeTotals};
use crate::host::tracefs::{self, Tracepoint, Tracepoints};
use crate::sys::clock;
use crate::sys::perf::{
    self, Event, EventAttr, EventType, RingBuffer, SAMPLE_ADDR, SAMPLE_CALLCHAIN,
    SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_RAW, SAMPLE_STACK_USER, SAMPLE_TID, SAMPLE_TIME,
};
use crate::sys::poll;
use crate::sys::Errno;
use crate::sys::SysError;
use std::collections::{BTreeSet, HashMap};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What this machine and privilege level allow.
#[derive(Debug, Clone)]
pub struct Env {
    /// Running as root.
    pub root: bool,
    /// `kernel.perf_event_paranoid`.
    pub paranoid: Option<i64>,
    /// Online CPUs.
    pub cpus: Vec<i32>,
}

impl Env {
    /// Reads `/proc` and asks the kernel. A few file reads.
    pub fn probe() -> Env {
        Env {
            root: crate::sys::libc_info::is_root(),
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|t| t.trim().parse().ok()),
            cpus: perf::online_cpus(),
        }
    }

    fn paranoid_text(&self) -> String {
        match self.paranoid {
            Some(p) => format!("perf_event_paranoid={p}"),
            None => "perf_event_paranoid unknown".to_owned(),
        }
    }

    /// Why a perf event could not be opened, in words.
    pub fn explain(&self, err: &SysError) -> String {
        match err.errno() {
            Some(Errno::ACCES) | Some(Errno::PERM) => format!(
                "not permitted ({}, {}): run as root, or let users other than root count \
                 kernel events: `{}` ({})",
                err,
                self.paranoid_text(),
                tracefs::KERNEL_EVENTS_FIX,
                tracefs::KERNEL_EVENTS_ALTERNATIVE
            ),
            Some(Errno::NOENT) | Some(Errno::OPNOTSUPP) | Some(Errno::NODEV) => {
                format!("not supported by this kernel or machine ({err})")
            }
            _ => err.to_string(),
        }
    }
}

/// The tracepoints `stat` uses: the fault kinds, faults in kernel mode, and
/// the mmap family of system calls.
pub const TRACEPOINTS: [&str; 7] = [
    "exceptions:page_fault_user",
    "exceptions:page_fault_kernel",
    "syscalls:sys_enter_mmap",
    "syscalls:sys_exit_mmap",
    "syscalls:sys_enter_munmap",
    "syscalls:sys_enter_brk",
    "syscalls:sys_enter_madvise",
];

/// Looks up [`TRACEPOINTS`] (through a private mount when tracefs is not
/// mounted; see [`tracefs::lookup`]). A few file reads, or a fork.
pub fn lookup_tracepoints() -> Tracepoints {
    tracefs::lookup(&TRACEPOINTS)
}

/// Faults inside system calls: a counting event on
/// `exceptions:page_fault_kernel`, which only faults taken in kernel mode
/// reach, else a kernel-mode page-fault counter, which the kernel checks on
/// every fault (about 2.5% of a fault-bound run on the AMD VM).
fn open_kernel_faults(
    c: &mut Counters,
    env: &Env,
    plan: &Plan,
    tracepoints: &Tracepoints,
    skipped: &mut Vec<Skipped>,
) {
    let tp_error = match tracepoints.get("exceptions:page_fault_kernel") {
        Ok(tp) => match open_on_tasks(&base(EventType::Tracepoint, tp.id, plan), plan, -1) {
            Ok(evs) => {
                c.events
                    .extend(evs.into_iter().map(|e| (Count::KernelFaults, e)));
                return;
            }
            Err(e) => env.explain(&e),
        },
        Err(why) => why,
    };
    let counter = EventAttr {
        exclude_user: true,
        ..base(EventType::Software, perf::SW_PAGE_FAULTS, plan)
    };
    match open_on_tasks(&counter, plan, -1) {
        Ok(evs) => {
            c.events
                .extend(evs.into_iter().map(|e| (Count::KernelFaults, e)));
            skipped.push(Skipped {
                what: "faults inside system calls through exceptions:page_fault_kernel".to_owned(),
                why: format!(
                    "{tp_error}; counted with a kernel-mode page-fault counter instead, \
                     which costs a little on every fault"
                ),
            });
        }
        Err(e) => skipped.push(Skipped {
            what: "faults inside system calls".to_owned(),
            why: format!(
                "{} (and exceptions:page_fault_kernel: {tp_error})",
                env.explain(&e)
            ),
        }),
    }
}

/// The counting events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Count {
    /// All page faults.
    Faults,
    /// Minor faults.
    Minor,
    /// Major faults.
    Major,
    /// Context switches.
    Switches,
    /// Page faults in kernel mode (inside system calls).
    KernelFaults,
    /// Cycles.
    Cycles,
    /// Instructions.
    Instructions,
    /// dTLB load misses.
    DtlbMisses,
    /// iTLB load misses.
    ItlbMisses,
}

/// Open counting events, one per task per kind.
#[derive(Debug, Default)]
pub struct Counters {
    events: Vec<(Count, Event)>,
    /// Only user mode could be counted (unprivileged with `perf_event_paranoid` >= 2).
    pub user_only: bool,
}

impl Counters {
    /// Closes the counters without waiting for the kernel (see
    /// [`crate::sys::process::close_in_background`]).
    pub fn close(self) {
        close_events(self.into_events());
    }

    /// The events, to be closed together with others.
    pub fn into_events(self) -> Vec<Event> {
        self.events.into_iter().map(|(_, e)| e).collect()
    }

    /// Sums each kind over its tasks (scaled for multiplexing).
    pub fn read(&self) -> HashMap<Count, u64> {
        let mut out = HashMap::new();
        for (kind, ev) in &self.events {
            if let Ok(v) = ev.read() {
                *out.entry(*kind).or_insert(0) += v.scaled();
            }
        }
        out
    }

    /// Stops every counter (`--pid` mode, at the end of the window).
    pub fn disable(&self) {
        for (_, ev) in &self.events {
            let _ = ev.disable();
        }
    }
}

/// Which tasks to open events on and how.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Thread ids (one for a fresh command; every thread for `--pid`).
    pub tasks: Vec<i32>,
    /// Enable at `exec` (a stopped child) rather than at once.
    pub on_exec: bool,
    /// Sample every fault with its stack.
    pub sites: bool,
}

fn base(event_type: EventType, config: u64, plan: &Plan) -> EventAttr {
    EventAttr {
        inherit: true,
        disabled: plan.on_exec,
        enable_on_exec: plan.on_exec,
        ..EventAttr::counting(event_type, config)
    }
}

fn open_on_tasks(attr: &EventAttr, plan: &Plan, cpu: i32) -> Result<Vec<Event>, SysError> {
    plan.tasks
        .iter()
        .map(|&t| Event::open(attr, t, cpu))
        .collect()
}

/// Opens the counting events; whatever cannot be opened goes to `skipped`
/// (or `hardware.reason`).
pub fn open_counters(
    env: &Env,
    plan: &Plan,
    tracepoints: &Tracepoints,
    skipped: &mut Vec<Skipped>,
    hardware: &mut Hardware,
) -> Counters {
    let mut c = Counters::default();
    let sw = |config| base(EventType::Software, config, plan);
    // Every event that counts faults costs time on every fault (about 2.5% of a
    // fault-bound run each on the AMD VM), so only what cannot be had for free.
    // A command's minor and major faults come from getrusage, which the kernel
    // keeps anyway; a process attached to (--pid) is counted by perf, since
    // /proc/PID/stat leaves out the children it starts. The first counter
    // opened in all modes tells whether perf may count kernel mode here; when
    // it may not, user mode only.
    let first = if plan.on_exec {
        (Count::Switches, perf::SW_CONTEXT_SWITCHES)
    } else {
        (Count::Minor, perf::SW_PAGE_FAULTS_MIN)
    };
    match open_on_tasks(&sw(first.1), plan, -1) {
        Ok(evs) => c.events.extend(evs.into_iter().map(|e| (first.0, e))),
        Err(e) if matches!(e.errno(), Some(Errno::ACCES) | Some(Errno::PERM)) => {
            c.user_only = true;
            skipped.push(Skipped {
                what: "kernel-mode perf counts".to_owned(),
                why: format!(
                    "{}; perf counts user mode only: fault totals come from getrusage, \
                     and faults inside system calls are those totals minus the user-mode count",
                    env.explain(&e)
                ),
            });
        }
        Err(e) => skipped.push(Skipped {
            what: "perf software counters".to_owned(),
            why: format!("{}; fault totals come from getrusage", env.explain(&e)),
        }),
    }
    let user_only = c.user_only;
    let user = |mut a: EventAttr| {
        a.exclude_kernel = user_only;
        a
    };
    let add = |c: &mut Counters, kind: Count, attr: EventAttr| -> Result<(), SysError> {
        let evs = open_on_tasks(&attr, plan, -1)?;
        c.events.extend(evs.into_iter().map(|e| (kind, e)));
        Ok(())
    };
    let mut list = vec![];
    if !plan.on_exec {
        list.push((Count::Major, perf::SW_PAGE_FAULTS_MAJ));
    }
    if user_only || !plan.on_exec {
        list.push((Count::Switches, perf::SW_CONTEXT_SWITCHES));
    }
    if user_only {
        // User-mode faults; the totals come from getrusage.
        list.push((Count::Faults, perf::SW_PAGE_FAULTS));
    }
    for (kind, config) in list {
        let _ = add(&mut c, kind, user(sw(config)));
    }
    if !user_only {
        open_kernel_faults(&mut c, env, plan, tracepoints, skipped);
    }
    // Hardware counters: all or nothing is not required; cycles decides availability.
    let hw = |config| user(base(EventType::Hardware, config, plan));
    let cache = |id| user(base(EventType::HwCache, perf::hw_cache_read_miss(id), plan));
    match add(&mut c, Count::Cycles, hw(perf::HW_CPU_CYCLES)) {
        Ok(()) => {
            hardware.available = true;
            let _ = add(&mut c, Count::Instructions, hw(perf::HW_INSTRUCTIONS));
            let _ = add(&mut c, Count::DtlbMisses, cache(perf::HW_CACHE_DTLB));
            let _ = add(&mut c, Count::ItlbMisses, cache(perf::HW_CACHE_ITLB));
        }
        Err(e) => {
            hardware.available = false;
            hardware.reason = Some(match e.errno() {
                Some(Errno::NOENT) | Some(Errno::OPNOTSUPP) | Some(Errno::NODEV) => format!(
                    "no hardware PMU is exposed here (perf_event_open(cycles): {}); \
                     virtual machines often have none",
                    e.source
                ),
                _ => env.explain(&e),
            });
        }
    }
    c
}

/// Sample period of the `cpu-clock` event, in nanoseconds: 1 kHz. Each
/// sample is a timer interrupt, a VM exit in a virtual machine: at perf's
/// default 4 kHz the timer alone cost about 4% of a fault-bound run on the AMD
/// VM, at 1 kHz under 1%. 1,000 samples a second of CPU time still give the
/// 100 a text footprint needs within 0.1 s, and the 20 kernel samples the
/// fault time needs within 20 ms of system time.
pub const CLOCK_PERIOD_NS: u64 = 1_000_000;

/// The sampling events and their ring buffers (one per CPU).
pub struct Sampling {
    events: Vec<Event>,
    rings: Vec<RingBuffer>,
    leaders: Vec<usize>,
    /// Event id -> kind and `sample_type`.
    pub ids: HashMap<u64, (Sampled, u64)>,
    /// Tracepoint fields.
    pub fields: TpFields,
    /// The fault-kind counters with their kind (the order of [`kinds::kind_filter`]).
    kind_counters: Vec<(usize, Event)>,
    /// How the tracepoint ids and formats were read, or why none could be.
    pub tracepoints: Result<tracefs::Access, String>,
    /// Processes stopped before `exec` (a command's): their exec starts
    /// their first program ([`super::collect::Census::expect_exec`]).
    pub expect_exec: Vec<u32>,
    /// The `cpu-clock` leaders are `events[..clock_events]`.
    clock_events: usize,
    /// Whether they sample kernel mode too.
    kernel_clock: bool,
}

fn attr_for(
    kind: Sampled,
    config: (EventType, u64),
    plan: &Plan,
    user_only: bool,
    read_lost: bool,
) -> EventAttr {
    let mut a = base(config.0, config.1, plan);
    a.sample_period = 1;
    a.exclude_kernel = user_only;
    a.exclude_callchain_kernel = true;
    a.sample_max_stack = 64;
    a.read_lost = read_lost;
    match kind {
        Sampled::CpuClock => {
            a.sample_period = CLOCK_PERIOD_NS;
            // The time stamps the side-band records too (see `EventAttr::side_band`).
            a.sample_type = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME;
            a.exclude_kernel = true;
            a.side_band = true;
        }
        Sampled::CallStacks => {
            // The caller sets the period.
            a.sample_type =
                SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CALLCHAIN;
            a.exclude_kernel = true;
            a.side_band = true;
            a.sample_max_stack = 127;
        }
        Sampled::Faults => {
            a.sample_type = SAMPLE_IDENTIFIER
                | SAMPLE_IP
                | SAMPLE_TID
                | SAMPLE_ADDR
                | SAMPLE_CALLCHAIN
                | SAMPLE_STACK_USER;
            // The caller of a frameless leaf (memset) is at the stack pointer.
            a.sample_stack_user = 128;
        }
        Sampled::MajorFaults => {
            a.sample_type = SAMPLE_IDENTIFIER
                | SAMPLE_IP
                | SAMPLE_TID
                | SAMPLE_ADDR
                | SAMPLE_CALLCHAIN
                | SAMPLE_STACK_USER;
            a.sample_stack_user = 512;
        }
        Sampled::EnterMmap => {
            a.sample_type = SAMPLE_IDENTIFIER
                | SAMPLE_TID
                | SAMPLE_TIME
                | SAMPLE_RAW
                | SAMPLE_CALLCHAIN
                | SAMPLE_STACK_USER;
            a.sample_stack_user = 2048;
        }
        Sampled::ExitMmap | Sampled::EnterMunmap | Sampled::EnterMadvise => {
            a.sample_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_RAW;
        }
        Sampled::EnterBrk => {
            a.sample_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME;
        }
    }
    a
}

/// Makes the `cpu-clock` leader sample kernel mode too, with the kernel stack
/// only (user-mode samples keep just their instruction pointer): where the
/// program's system time goes. One timer for both modes: a second
/// `cpu-clock` event for the kernel would double the timer interrupts, which
/// cost a VM exit each.
fn sample_kernel_too(a: &mut EventAttr) {
    a.exclude_kernel = false;
    a.sample_type |= SAMPLE_CALLCHAIN;
    a.exclude_callchain_kernel = false;
    a.exclude_callchain_user = true;
}

/// What the kernel-stack samples measure, in `skipped` when they cannot be taken.
pub const KERNEL_CLOCK_WHAT: &str =
    "the share of system time in the page-fault handler (kernel cpu-clock samples)";

/// Opens the sampling events: per CPU, a user-mode `cpu-clock` leader that owns
/// the ring buffer and emits the side-band records, and the other events
/// redirected into it. A kind that cannot be opened everywhere is dropped and
/// reported in `skipped`. `None` when not even the leaders open.
pub fn open_sampling(
    env: &Env,
    plan: &Plan,
    user_only: bool,
    looked_up: &Tracepoints,
    skipped: &mut Vec<Skipped>,
) -> Option<Sampling> {
    // Data pages per ring: 1 MiB for clock samples, calls and mappings; 16 MiB for
    // fault samples (a fault every microsecond or two). Unprivileged users may lock
    // only perf_event_mlock_kb (516 KiB) per CPU, then RLIMIT_MEMLOCK.
    let (pages, fault_pages) = if env.root { (256, 4096) } else { (64, 64) };
    let mut s = Sampling::empty();
    let clock = (EventType::Software, perf::SW_CPU_CLOCK);
    let mut lead = attr_for(Sampled::CpuClock, clock, plan, user_only, true);
    lead.build_id = true;
    if !user_only {
        sample_kernel_too(&mut lead);
    }
    // Leaders: (cpu, index of the ring-owning event).
    let owner = match open_leaders(&mut s, Sampled::CpuClock, &mut lead, env, plan, pages) {
        Ok(owner) => owner,
        Err(e) if !lead.exclude_kernel => {
            // The kernel may not be sampled here after all: user mode only.
            skipped.push(Skipped {
                what: KERNEL_CLOCK_WHAT.to_owned(),
                why: format!(
                    "{}; the fault time comes from the calibrated fault cost",
                    env.explain(&e)
                ),
            });
            s = Sampling::empty();
            lead = attr_for(Sampled::CpuClock, clock, plan, user_only, lead.read_lost);
            lead.build_id = true;
            match open_leaders(&mut s, Sampled::CpuClock, &mut lead, env, plan, pages) {
                Ok(owner) => owner,
                Err(e) => return fail_sampling(env, &e, skipped),
            }
        }
        Err(e) => return fail_sampling(env, &e, skipped),
    };
    s.clock_events = s.events.len();
    s.kernel_clock = !lead.exclude_kernel;
    s.tracepoints = match (&looked_up.access, TRACEPOINTS.map(|n| looked_up.get(n))) {
        (Some(access), found) if found.iter().any(Result::is_ok) => Ok(access.clone()),
        (_, found) => Err(found
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| "no tracepoint could be read".to_owned())),
    };
    let tps = syscall_tracepoints(looked_up, skipped);
    if let Some(id) = fault_kind_tracepoint(looked_up, skipped) {
        match open_kind_counters(id, plan) {
            Ok(counters) => s.kind_counters = counters,
            Err(e) => skipped.push(Skipped {
                what: FAULT_KINDS_WHAT.to_owned(),
                why: env.explain(&e),
            }),
        }
    }
    set_syscall_fields(&mut s.fields, &tps);
    let groups = sampled_groups(plan, &tps);
    let flags = (user_only, lead.read_lost);
    for (group, what) in groups {
        match open_group(&group, &owner, plan, flags, fault_pages, &s.events) {
            Ok(opened) => s.add(opened),
            Err(e) => {
                if what.starts_with("mmap") {
                    s.fields = TpFields::default();
                }
                skipped.push(Skipped {
                    what: what.to_owned(),
                    why: env.explain(&e),
                });
            }
        }
    }
    if plan.on_exec {
        s.expect_exec = plan.tasks.iter().map(|&t| t as u32).collect();
    }
    Some(s)
}

/// The `syscalls` tracepoints of the mmap family, all or none: a partial set
/// would miscount. Why they cannot be used goes to `skipped`.
fn syscall_tracepoints(
    looked_up: &Tracepoints,
    skipped: &mut Vec<Skipped>,
) -> Vec<(Sampled, Tracepoint)> {
    let syscalls = [
        (Sampled::EnterMmap, "syscalls:sys_enter_mmap"),
        (Sampled::ExitMmap, "syscalls:sys_exit_mmap"),
        (Sampled::EnterMunmap, "syscalls:sys_enter_munmap"),
        (Sampled::EnterBrk, "syscalls:sys_enter_brk"),
        (Sampled::EnterMadvise, "syscalls:sys_enter_madvise"),
    ];
    let mut tps = vec![];
    let mut tp_error = None;
    for (kind, name) in syscalls {
        match looked_up.get(name) {
            Ok(tp) => tps.push((kind, tp.clone())),
            Err(e) => {
                tp_error.get_or_insert(e);
            }
        }
    }
    if let Some(why) = tp_error {
        skipped.push(Skipped {
            what: "mmap, munmap, brk and madvise calls (syscalls tracepoints)".to_owned(),
            why,
        });
        tps.clear();
    }
    tps
}

/// What the fault-kind counters measure, in `skipped` when they cannot.
const FAULT_KINDS_WHAT: &str = "fault kinds (exceptions:page_fault_user)";

/// The id of `exceptions:page_fault_user` when its format has the
/// `error_code` field the kinds are filtered on; why it cannot be used goes
/// to `skipped`.
fn fault_kind_tracepoint(looked_up: &Tracepoints, skipped: &mut Vec<Skipped>) -> Option<u64> {
    let why = match looked_up.get("exceptions:page_fault_user") {
        Ok(tp) if tp.fields.contains_key("error_code") => return Some(tp.id),
        Ok(_) => "its format has no error_code field".to_owned(),
        Err(why) => why,
    };
    skipped.push(Skipped {
        what: FAULT_KINDS_WHAT.to_owned(),
        why,
    });
    None
}

/// One counting event per fault kind on `exceptions:page_fault_user` (id
/// `tp`), each filtered to its kind's `error_code` bits
/// ([`kinds::kind_filter`]), per task, inherited by threads and children.
/// Each task's four are a group led by its kind-0 counter, which alone is
/// switched ([`KindSwitch`]); it is enabled at `exec` (a command) or at once
/// (`--pid`). Returned with their kind, each group leader first. All or
/// none: a partial set would miscount.
fn open_kind_counters(tp: u64, plan: &Plan) -> Result<Vec<(usize, Event)>, SysError> {
    let lead = base(EventType::Tracepoint, tp, plan);
    let member = EventAttr {
        disabled: false,
        enable_on_exec: false,
        ..lead
    };
    let mut out = vec![];
    for &task in &plan.tasks {
        let leader = Event::open(&lead, task, -1)?;
        leader.set_filter(&kinds::kind_filter(0))?;
        let members = (1..4)
            .map(|kind| {
                let ev = Event::open_in_group(&member, task, -1, &leader)?;
                ev.set_filter(&kinds::kind_filter(kind))?;
                Ok((kind, ev))
            })
            .collect::<Result<Vec<_>, SysError>>()?;
        out.push((0, leader));
        out.extend(members);
    }
    Ok(out)
}

/// Puts the argument fields of the system-call tracepoints in `fields`.
fn set_syscall_fields(fields: &mut TpFields, tps: &[(Sampled, Tracepoint)]) {
    let f = |tp: &Tracepoint, name: &str| tp.fields.get(name).copied();
    for (kind, tp) in tps {
        match kind {
            Sampled::EnterMmap => {
                if let (Some(a), Some(b), Some(c)) = (f(tp, "len"), f(tp, "prot"), f(tp, "flags")) {
                    fields.mmap = Some((a, b, c));
                }
            }
            Sampled::ExitMmap => fields.mmap_ret = f(tp, "ret"),
            Sampled::EnterMunmap => {
                if let (Some(a), Some(b)) = (f(tp, "addr"), f(tp, "len")) {
                    fields.munmap = Some((a, b));
                }
            }
            Sampled::EnterMadvise => {
                if let (Some(a), Some(b)) = (f(tp, "len_in"), f(tp, "behavior")) {
                    fields.madvise = Some((a, b));
                }
            }
            _ => {}
        }
    }
}

/// The sampled events beside the clock leaders, in groups that open on every
/// CPU and task or not at all (a partial set would miscount): major faults,
/// every fault with `--sites`, and the system calls. Fault samples get rings
/// of their own, so that a flood of them never crowds out the calls, clock
/// samples and mappings.
fn sampled_groups(plan: &Plan, tps: &[(Sampled, Tracepoint)]) -> Vec<Group<'static>> {
    let mut groups: Vec<Group<'static>> = vec![(
        vec![(
            Sampled::MajorFaults,
            (EventType::Software, perf::SW_PAGE_FAULTS_MAJ),
        )],
        "major fault sites",
    )];
    if plan.sites {
        groups.push((
            vec![(Sampled::Faults, (EventType::Software, perf::SW_PAGE_FAULTS))],
            "fault sites",
        ));
    }
    if !tps.is_empty() {
        groups.push((
            tps.iter()
                .map(|(k, tp)| (*k, (EventType::Tracepoint, tp.id)))
                .collect(),
            "mmap, munmap, brk and madvise calls (syscalls tracepoints)",
        ));
    }
    groups
}

/// Maps the ring buffer of `event` with `pages` data pages, halving them
/// while the kernel refuses with `EPERM` (the unprivileged mlock limit).
fn map_ring(event: &Event, pages: usize) -> Result<RingBuffer, SysError> {
    let mut size = pages;
    loop {
        match RingBuffer::map(event, size) {
            Ok(r) => return Ok(r),
            Err(e) if size > 8 && e.errno() == Some(Errno::PERM) => size /= 2,
            Err(e) => return Err(e),
        }
    }
}

/// Opens `attr` (events of `kind`) on every CPU and task into `s`: per CPU,
/// the first task's event owns a ring buffer of `pages` data pages and the
/// other tasks' events write into it. Kernels that refuse the build-id or
/// lost-count bits (before 5.12 and 6.0) get the events without them, and
/// `attr` says so afterwards. Returns each CPU with the index of its ring's owner.
fn open_leaders(
    s: &mut Sampling,
    kind: Sampled,
    attr: &mut EventAttr,
    env: &Env,
    plan: &Plan,
    pages: usize,
) -> Result<Vec<(i32, usize)>, SysError> {
    let mut owner: Vec<(i32, usize)> = vec![];
    for &cpu in &env.cpus {
        for (n, &task) in plan.tasks.iter().enumerate() {
            let ev = match Event::open(attr, task, cpu) {
                Ok(ev) => ev,
                Err(e) if (attr.build_id || attr.read_lost) && e.errno() == Some(Errno::INVAL) => {
                    attr.build_id = false;
                    attr.read_lost = false;
                    Event::open(attr, task, cpu)?
                }
                Err(e) => return Err(e),
            };
            if n == 0 {
                s.rings.push(map_ring(&ev, pages)?);
                owner.push((cpu, s.events.len()));
                s.leaders.push(s.events.len());
            } else {
                let to = owner.last().expect("leader first").1;
                ev.set_output(&s.events[to])?;
            }
            if let Ok(id) = ev.id() {
                s.ids.insert(id, (kind, attr.sample_type));
            }
            s.events.push(ev);
        }
    }
    Ok(owner)
}

/// Data pages of each ring buffer of [`open_profile_sampling`] (512 KiB).
const PROFILE_RING_PAGES: usize = 128;

/// Opens the sampling events of `pagewise text profile`: user-mode
/// `cpu-clock` every `period_ns` of CPU time with the user call chain, one
/// ring buffer per CPU, following `plan`'s tasks and their children.
pub fn open_profile_sampling(env: &Env, plan: &Plan, period_ns: u64) -> Result<Sampling, SysError> {
    let clock = (EventType::Software, perf::SW_CPU_CLOCK);
    let mut attr = attr_for(Sampled::CallStacks, clock, plan, true, true);
    attr.sample_period = period_ns;
    let mut s = Sampling::empty();
    open_leaders(
        &mut s,
        Sampled::CallStacks,
        &mut attr,
        env,
        plan,
        PROFILE_RING_PAGES,
    )?;
    Ok(s)
}

type Opened = (Sampled, u64, Event, Option<RingBuffer>);
/// Event kinds that open together, and what they measure.
type Group<'a> = (Vec<(Sampled, (EventType, u64))>, &'a str);

fn open_group(
    group: &[(Sampled, (EventType, u64))],
    owner: &[(i32, usize)],
    plan: &Plan,
    (user_only, read_lost): (bool, bool),
    pages: usize,
    leaders: &[Event],
) -> Result<Vec<Opened>, SysError> {
    let mut out: Vec<Opened> = vec![];
    for &(kind, config) in group {
        let attr = attr_for(kind, config, plan, user_only, read_lost);
        for &(cpu, leader) in owner {
            // Fault samples: the first event on each CPU owns a ring.
            let mut own_ring: Option<usize> = None;
            for &task in &plan.tasks {
                let ev = Event::open(&attr, task, cpu)?;
                let mut ring = None;
                if kind == Sampled::Faults {
                    match own_ring {
                        None => {
                            ring = Some(map_ring(&ev, pages)?);
                            own_ring = Some(out.len());
                        }
                        Some(i) => ev.set_output(&out[i].2)?,
                    }
                } else {
                    ev.set_output(&leaders[leader])?;
                }
                out.push((kind, attr.sample_type, ev, ring));
            }
        }
    }
    Ok(out)
}

/// Closes perf events without waiting for the kernel's tracepoint teardown.
pub fn close_events(events: Vec<Event>) {
    crate::sys::process::close_in_background(events.into_iter().map(Into::into).collect());
}

fn fail_sampling(env: &Env, e: &SysError, skipped: &mut Vec<Skipped>) -> Option<Sampling> {
    skipped.push(Skipped {
        what: "sampling (hot text, sites, mmap calls)".to_owned(),
        why: env.explain(e),
    });
    None
}

impl Sampling {
    /// Takes in the events of a group that opened.
    fn add(&mut self, opened: Vec<Opened>) {
        for (kind, sample_type, ev, ring) in opened {
            if let Ok(id) = ev.id() {
                self.ids.insert(id, (kind, sample_type));
            }
            if let Some(ring) = ring {
                self.rings.push(ring);
                self.leaders.push(self.events.len());
            }
            self.events.push(ev);
        }
    }

    fn empty() -> Sampling {
        Sampling {
            events: vec![],
            rings: vec![],
            leaders: vec![],
            ids: HashMap::new(),
            fields: TpFields::default(),
            kind_counters: vec![],
            tracepoints: Err("not looked up".to_owned()),
            expect_exec: vec![],
            clock_events: 0,
            kernel_clock: false,
        }
    }

    /// Whether the system-call events are open.
    pub fn has(&self, kind: Sampled) -> bool {
        self.ids.values().any(|(k, _)| *k == kind)
    }
}

/// Resident page sizes over the run.
#[derive(Debug, Default, Clone)]
pub struct PageSamples {
    /// Snapshots that read at least one process.
    pub samples: u64,
    /// Peak of each field over the snapshots.
    pub peak: PageSizeTotals,
    /// Peak of the total resident bytes.
    pub peak_total: u64,
    /// Largest mappings in the snapshot with the highest total.
    pub top_mappings: Vec<MappingPages>,
    /// Executable file mappings seen, per process (for symbolization).
    pub exec_maps: HashMap<u32, Vec<MapsEntry>>,
    /// Why smaps could not be read, if it never could.
    pub error: Option<String>,
}

fn snapshot(pids: &BTreeSet<u32>, out: &mut PageSamples) {
    let mut total = PageSizeTotals::default();
    let mut read_any = false;
    let mut by_name: HashMap<String, MappingPages> = HashMap::new();
    for &pid in pids {
        let entries = match smaps::read(Some(pid as i32)) {
            Ok(entries) => entries,
            Err(e) => {
                if out.samples == 0 && Errno::of(&e) != Some(Errno::NOENT) {
                    out.error.get_or_insert(format!("/proc/{pid}/smaps: {e}"));
                }
                continue;
            }
        };
        if entries.is_empty() {
            continue;
        }
        read_any = true;
        total.add(&PageSizeTotals::of(&entries));
        let seen = out.exec_maps.entry(pid).or_default();
        for e in &entries {
            let name = e.map.path.clone().unwrap_or_else(|| "[anon]".to_owned());
            let m = by_name.entry(name.clone()).or_insert_with(|| MappingPages {
                name,
                size_bytes: 0,
                base_bytes: 0,
                thp_bytes: 0,
                hugetlb_bytes: 0,
            });
            m.size_bytes += e.map.len();
            m.base_bytes += e.base_page_bytes();
            m.thp_bytes += e.thp_bytes();
            m.hugetlb_bytes += e.hugetlb;
            if e.map.perms.exec && e.map.is_file() && !seen.contains(&e.map) {
                seen.push(e.map.clone());
            }
        }
    }
    if !read_any {
        return;
    }
    out.samples += 1;
    let p = &mut out.peak;
    p.base_bytes = p.base_bytes.max(total.base_bytes);
    p.thp_bytes = p.thp_bytes.max(total.thp_bytes);
    p.hugetlb_bytes = p.hugetlb_bytes.max(total.hugetlb_bytes);
    if total.asked_huge_bytes > p.asked_huge_bytes {
        p.asked_huge_bytes = total.asked_huge_bytes;
        p.asked_huge_granted_bytes = total.asked_huge_granted_bytes;
    }
    if total.total() >= out.peak_total {
        out.peak_total = total.total();
        let mut top: Vec<MappingPages> = by_name.into_values().collect();
        top.sort_by_key(|m| std::cmp::Reverse(m.base_bytes + m.thp_bytes + m.hugetlb_bytes));
        top.truncate(5);
        out.top_mappings = top;
    }
}

/// The page-size sampler waits at least this many times as long as its last
/// `/proc/PID/smaps` read took before the next one.
pub const SMAPS_BACKOFF: u32 = 100;

/// The threads that run beside the program.
pub struct Running {
    stop: Arc<AtomicBool>,
    /// Wakes the page-size sampler when the run ends.
    stop_signal: Arc<(Mutex<bool>, Condvar)>,
    /// Dropping it wakes the reader's `poll`.
    wake: Option<UnixStream>,
    go: Arc<AtomicBool>,
    reader: Option<JoinHandle<(Collector, Vec<Event>)>>,
    pager: Option<JoinHandle<PageSamples>>,
    switcher: Option<JoinHandle<(Vec<KindWindow>, Vec<Event>)>>,
}

/// The set of live processes the reader and the page-size sampler share,
/// starting with `pid`.
pub fn live_set(pid: i32) -> Arc<Mutex<BTreeSet<u32>>> {
    Arc::new(Mutex::new(BTreeSet::from([pid as u32])))
}

/// Starts the reader (when sampling is open) and, with an `interval`, the
/// page-size sampler. The sampler waits for [`Running::go`] so that it never
/// reads the stopped child before `exec` (it would see pagewise's own pages).
pub fn start(
    sampling: Option<Sampling>,
    spaces: AddressSpaces,
    live: Arc<Mutex<BTreeSet<u32>>>,
    interval: Option<Duration>,
) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_signal = Arc::new((Mutex::new(false), Condvar::new()));
    let go = Arc::new(AtomicBool::new(false));
    let (wake, wake_reader) = match UnixStream::pair() {
        Ok((a, b)) => (Some(a), Some(b)),
        Err(_) => (None, None),
    };
    let mut switcher = None;
    let reader = sampling.map(|mut s| {
        let stop = stop.clone();
        let kinds = std::mem::take(&mut s.kind_counters);
        if !kinds.is_empty() {
            switcher = Some(kind_switcher(kinds, go.clone(), stop_signal.clone()));
        }
        let mut collector = Collector::new(
            std::mem::take(&mut s.ids),
            s.fields.clone(),
            spaces,
            live.clone(),
        );
        for &pid in &s.expect_exec {
            collector.census.expect_exec(pid);
        }
        std::thread::Builder::new()
            .name("pagewise-reader".into())
            .spawn(move || read_loop(s, collector, &stop, wake_reader.as_ref()))
            .expect("spawn reader thread")
    });
    let pager =
        interval.map(|interval| page_sampler(live, interval, go.clone(), stop_signal.clone()));
    Running {
        stop,
        stop_signal,
        wake,
        go,
        reader,
        pager,
        switcher,
    }
}

/// Sleeps until `until` or the end of the run (`signal`); true when the run
/// is over.
fn wait_until(signal: &(Mutex<bool>, Condvar), until: Instant) -> bool {
    let (lock, cvar) = signal;
    let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
    while !*stopped {
        let now = Instant::now();
        if now >= until {
            return false;
        }
        stopped = cvar
            .wait_timeout(stopped, until - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}

/// Waits until the program runs ([`Running::go`]), looking every
/// millisecond; false when the run ended first.
fn wait_for_go(go: &AtomicBool, signal: &(Mutex<bool>, Condvar)) -> bool {
    while !go.load(Ordering::Acquire) {
        if wait_until(signal, Instant::now() + Duration::from_millis(1)) {
            return false;
        }
    }
    true
}

/// The fault-kind switcher thread: switches the counters as
/// [`kinds::Schedule`] says from [`Running::go`] until the run ends, and
/// hands back the windows and the counters (to be closed with the other
/// events). A thread of its own, so that the reader's work on a burst of
/// records never delays a switch: it does a few system calls per switch
/// and sleeps in between.
fn kind_switcher(
    counters: Vec<(usize, Event)>,
    go: Arc<AtomicBool>,
    signal: Arc<(Mutex<bool>, Condvar)>,
) -> JoinHandle<(Vec<KindWindow>, Vec<Event>)> {
    std::thread::Builder::new()
        .name("pagewise-kinds".into())
        .spawn(move || {
            let mut kinds = KindSwitch::new(counters);
            let mut windows = vec![];
            if wait_for_go(&go, &signal) {
                loop {
                    let next = kinds.switch(&mut windows);
                    if wait_until(&signal, Instant::now() + next) {
                        break;
                    }
                }
            }
            kinds.stop(&mut windows);
            let events = kinds.events.into_iter().map(|(_, ev)| ev).collect();
            (windows, events)
        })
        .expect("spawn fault-kind thread")
}

/// The page-size sampler thread: a `/proc/PID/smaps` snapshot of every live
/// process at most every `interval`, from [`Running::go`] until the run ends.
fn page_sampler(
    live: Arc<Mutex<BTreeSet<u32>>>,
    interval: Duration,
    go: Arc<AtomicBool>,
    signal: Arc<(Mutex<bool>, Condvar)>,
) -> JoinHandle<PageSamples> {
    std::thread::Builder::new()
        .name("pagewise-smaps".into())
        .spawn(move || {
            let mut out = PageSamples::default();
            if !wait_for_go(&go, &signal) {
                return out;
            }
            loop {
                let pids = live.lock().map(|l| l.clone()).unwrap_or_default();
                let started = Instant::now();
                let cpu_before = clock::thread_cpu_ns();
                snapshot(&pids, &mut out);
                // Reading smaps walks the page tables (about 15 ms for 1 GiB of
                // 4 KiB pages) and takes the same page-table locks as the
                // program's faults: back off so that it costs at most 1% of a
                // CPU. By this thread's CPU time, not the wall clock: a read
                // preempted for 5 ms on a busy machine would otherwise put
                // the next one 0.5 s away, and a program that fills 1 GiB in
                // 0.5 s got one snapshot, taken before it began (CI,
                // 2026-12-05).
                let took = Duration::from_nanos(clock::thread_cpu_ns().saturating_sub(cpu_before));
                if wait_until(&signal, started + interval.max(took * SMAPS_BACKOFF)) {
                    return out;
                }
            }
        })
        .expect("spawn smaps thread")
}

/// The fault-kind counters, switched on and off by the reader as
/// [`kinds::Schedule`] says; each time they go off, what they counted
/// becomes a [`KindWindow`].
struct KindSwitch {
    events: Vec<(usize, Event)>,
    schedule: kinds::Schedule,
    /// Since when the counters are on, if they are.
    on_since: Option<Instant>,
    start: Option<Instant>,
    /// Faults counted by kind up to the last window.
    counted: [u64; 4],
}

impl KindSwitch {
    fn new(events: Vec<(usize, Event)>) -> KindSwitch {
        let groups = events.iter().filter(|(kind, _)| *kind == 0).count();
        KindSwitch {
            schedule: kinds::Schedule::new(groups, kinds::seed()),
            events,
            // Enabled at exec, or when attaching: on since the program runs
            // (the first switch).
            on_since: None,
            start: None,
            counted: [0; 4],
        }
    }

    /// Switches the counters as the schedule says, from the first call (the
    /// program runs), recording a window each time they go off; how long
    /// until the next switch.
    fn switch(&mut self, windows: &mut Vec<KindWindow>) -> Duration {
        let start = *self.start.get_or_insert_with(|| {
            let now = Instant::now();
            self.on_since = Some(now);
            now
        });
        let (want_on, next) = self.schedule.at(start.elapsed());
        if want_on != self.on_since.is_some() {
            // The group leaders switch their groups.
            for (_, ev) in self.events.iter().filter(|(kind, _)| *kind == 0) {
                let _ = if want_on { ev.enable() } else { ev.disable() };
            }
            if want_on {
                self.on_since = Some(Instant::now());
            } else {
                self.close(windows);
            }
        }
        next
    }

    /// Stops the counters at the end, closing the window that was open.
    fn stop(&mut self, windows: &mut Vec<KindWindow>) {
        for (_, ev) in self.events.iter().filter(|(kind, _)| *kind == 0) {
            let _ = ev.disable();
        }
        // Before the first switch the counters were on since exec, but no
        // window began: a run that ended before it gets one of no length.
        if self.on_since.is_some() || self.start.is_none() {
            self.close(windows);
        }
    }

    /// Records what the disabled counters counted since the last window
    /// (their children's counts included).
    fn close(&mut self, windows: &mut Vec<KindWindow>) {
        let mut total = [0u64; 4];
        for (kind, ev) in &self.events {
            if let Ok(v) = ev.read() {
                total[*kind] += v.value;
            }
        }
        let on_for = self.on_since.take().map_or(Duration::ZERO, |t| t.elapsed());
        let faults = std::array::from_fn(|k| total[k].saturating_sub(self.counted[k]));
        self.counted = std::array::from_fn(|k| self.counted[k].max(total[k]));
        windows.push(KindWindow {
            faults,
            on_for,
            census: windows.is_empty(),
        });
    }
}

fn read_loop(
    mut s: Sampling,
    mut collector: Collector,
    stop: &AtomicBool,
    wake: Option<&UnixStream>,
) -> (Collector, Vec<Event>) {
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); s.rings.len()];
    let mut disabled = false;
    // Ring owners still worth polling: an event hangs up once the task it follows
    // and all its children have exited, and would then make poll return at once.
    let mut polled: Vec<usize> = s.leaders.clone();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if stopping && !disabled {
            // A process we attached to keeps running: stop its samples so the
            // last drain ends.
            for ev in &s.events {
                let _ = ev.disable();
            }
            disabled = true;
        }
        if !stopping {
            let timeout = Duration::from_millis(if wake.is_some() { 100 } else { 10 });
            let mut fds: Vec<_> = polled.iter().map(|&i| s.events[i].as_fd()).collect();
            // The wake socket ends the wait as soon as the run is over.
            fds.extend(wake.map(|w| w.as_fd()));
            if let Ok(ready) = poll::poll_readable(&fds, timeout) {
                let hung: Vec<usize> = polled
                    .iter()
                    .zip(&ready)
                    .filter(|(_, r)| r.hung_up && !r.readable)
                    .map(|(&i, _)| i)
                    .collect();
                polled.retain(|i| !hung.contains(i));
            }
        }
        let mut got = 0;
        for (ring, buf) in s.rings.iter_mut().zip(bufs.iter_mut()) {
            buf.clear();
            got += ring.read_into(buf);
        }
        if got > 0 {
            collector.consume(&bufs);
        }
        if stopping && got == 0 {
            break;
        }
    }
    // The kernel reports a loss in the ring only when a later record fits, so
    // the losses at the very end come from the events' own lost counts.
    let lost: u64 = s
        .events
        .iter()
        .filter_map(|ev| ev.read().ok())
        .map(|v| v.lost.unwrap_or(0))
        .sum();
    collector.lost = collector.lost.max(lost);
    // The clock leaders count the CPU time of the tasks and the children
    // they started (disabled now, so it ends where the samples end).
    if s.clock_events > 0 {
        collector.clock_ns = s.events[..s.clock_events]
            .iter()
            .map(|ev| ev.read().map(|v| v.value))
            .sum::<Result<u64, _>>()
            .ok();
        collector.kernel_clock = s.kernel_clock;
    }
    // The rings go now; the events are closed by the caller, off the critical path.
    drop(s.rings);
    (collector, s.events)
}

impl Running {
    /// The program has exec'd: page-size snapshots may start.
    pub fn go(&self) {
        self.go.store(true, Ordering::Release);
    }

    /// Stops both threads after a last drain and returns what they gathered.
    /// The sampling events are closed in the background.
    pub fn finish(self) -> (Option<Collector>, PageSamples) {
        let (collector, pages, events) = self.finish_keeping_events();
        close_events(events);
        (collector, pages)
    }

    /// Like [`Running::finish`], but hands back the sampling events so that the
    /// caller closes them with its counters, in one helper process.
    pub fn finish_keeping_events(mut self) -> (Option<Collector>, PageSamples, Vec<Event>) {
        self.stop.store(true, Ordering::Release);
        // Wake the threads: the reader from poll, the others from their waits.
        drop(self.wake.take());
        {
            let (lock, cvar) = &*self.stop_signal;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cvar.notify_all();
        }
        let mut events = vec![];
        let mut collector = self.reader.map(|h| {
            let (collector, evs) = h.join().expect("reader thread panicked");
            events = evs;
            collector
        });
        if let Some(h) = self.switcher {
            let (windows, evs) = h.join().expect("fault-kind thread panicked");
            events.extend(evs);
            if let Some(c) = collector.as_mut() {
                c.kinds_open = true;
                c.kind_windows = windows;
            }
        }
        let pages = self
            .pager
            .map(|h| h.join().expect("smaps thread panicked"))
            .unwrap_or_default();
        (collector, pages, events)
    }
}
