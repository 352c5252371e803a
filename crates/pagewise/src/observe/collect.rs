//! The state the ring-buffer reader builds while the program runs: address
//! spaces from side-band records, and samples reduced to counts by stack,
//! by code page and by file.

use super::address_spaces::{AddressSpaces, CodeOwner};
use super::churn::{Call, CallKind, RemapRecords};
use super::kinds::KindWindow;
use super::record::{Record, Records, Sample};
use crate::host::tracefs::{raw_field, FieldSpec};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// What a sampled event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sampled {
    /// `cpu-clock`: in user mode, hot text; in kernel mode (where it may be
    /// sampled), the kernel stack: where the system time goes.
    CpuClock,
    /// `cpu-clock` in user mode with the user call chain (`text profile`).
    CallStacks,
    /// Every page fault, with its stack (`--sites`).
    Faults,
    /// Major faults, with address and stack.
    MajorFaults,
    /// `syscalls:sys_enter_mmap`.
    EnterMmap,
    /// `syscalls:sys_exit_mmap`.
    ExitMmap,
    /// `syscalls:sys_enter_munmap`.
    EnterMunmap,
    /// `syscalls:sys_enter_brk`.
    EnterBrk,
    /// `syscalls:sys_enter_madvise`.
    EnterMadvise,
}

/// Tracepoint fields used, from the tracefs format files.
#[derive(Debug, Clone, Default)]
pub struct TpFields {
    /// `sys_enter_mmap`: len, prot, flags.
    pub mmap: Option<(FieldSpec, FieldSpec, FieldSpec)>,
    /// `sys_exit_mmap`: ret.
    pub mmap_ret: Option<FieldSpec>,
    /// `sys_enter_munmap`: addr, len.
    pub munmap: Option<(FieldSpec, FieldSpec)>,
    /// `sys_enter_madvise`: len_in, behavior.
    pub madvise: Option<(FieldSpec, FieldSpec)>,
}

/// A call chain plus the code addresses found on the top of the stack: the
/// unit by which faults and calls are counted before symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// Process.
    pub pid: u32,
    /// User frames, innermost first (the first is the sampled instruction).
    pub chain: Box<[u64]>,
    /// Words on the stack that point into the program's own code: candidates
    /// for the caller that frame-pointer unwinding skipped.
    pub words: Box<[u64]>,
}

/// Everything collected from the ring buffers.
#[derive(Debug)]
pub struct Collector {
    ids: HashMap<u64, (Sampled, u64)>,
    fields: TpFields,
    /// Mappings and the files behind them.
    pub spaces: AddressSpaces,
    /// Interned stacks; counts refer to them by index.
    pub stacks: Vec<StackKey>,
    stack_index: HashMap<u64, Vec<u32>>,
    chain_buf: Vec<u64>,
    words_buf: Vec<u64>,
    /// Sampled faults by stack.
    pub fault_stacks: HashMap<u32, u64>,
    /// Sampled major faults by stack.
    pub major_stacks: HashMap<u32, u64>,
    /// `cpu-clock` samples with call chains ([`Sampled::CallStacks`]) by stack.
    pub call_stacks: HashMap<u32, u64>,
    /// Sampled major faults by the mapping name at the faulting address
    /// (`[unknown]` while no mapping holds it; see `unresolved_majors`).
    pub major_files: HashMap<String, u64>,
    /// Major faults counted as `[unknown]` in `major_files`, looked up again
    /// in the next [`RETRY_BATCHES`] batches: another CPU's ring may hold the
    /// mapping's record and be read a batch later.
    unresolved_majors: Retries<UnresolvedMajor>,
    /// Stacks counted while no known mapping held their sampled instruction,
    /// so that which of their stack words are the program's own code was
    /// decided without that mapping: decided again in the next
    /// [`RETRY_BATCHES`] batches, once its record is read.
    unsettled_stacks: Retries<UnsettledStack>,
    /// Batches consumed so far.
    batches: u64,
    /// User-mode cpu-clock samples by (pid, 4 KiB page).
    pub text_pages: HashMap<(u32, u64), u64>,
    /// mmap-family calls.
    pub calls: Vec<Call>,
    /// Records the kernel dropped.
    pub lost: u64,
    /// Processes alive now (shared with the page-size sampler).
    pub live: Arc<Mutex<BTreeSet<u32>>>,
    /// Samples or records that did not decode.
    pub malformed: u64,
    /// Process names from `COMM` records.
    pub names: HashMap<u32, String>,
    /// Whether the fault-kind counters are open (set by the reader).
    pub kinds_open: bool,
    /// What the fault-kind counters counted each time they were on (set by the reader).
    pub kind_windows: Vec<KindWindow>,
    /// Kernel-mode `cpu-clock` samples by kernel stack (innermost first).
    pub kernel_stacks: HashMap<Box<[u64]>, u64>,
    /// Anonymous mappings seen in `MMAP2` records, for heap churn without tracepoints.
    pub remaps: RemapRecords,
    /// The processes of the run and the programs they ran.
    pub census: Census,
    /// CPU time of the observed tasks and the children they started while
    /// sampled: the `cpu-clock` leaders' count, in nanoseconds (set by the
    /// reader; `None` when it could not be read).
    pub clock_ns: Option<u64>,
    /// Whether the `cpu-clock` samples include kernel mode (set by the reader).
    pub kernel_clock: bool,
    /// Kernel-mode `cpu-clock` samples.
    pub kernel_clock_samples: u64,
}

/// Splits `total_ns` of CPU time into user and system seconds by the
/// `cpu-clock` samples (one every `period_ns` of CPU time): in the ratio of
/// user to kernel samples when kernel mode was sampled too (as the kernel
/// splits a task's exact runtime by its ticks), else the user samples'
/// time, at most the total, and the rest is system time. Pure.
pub fn split_cpu_time(
    total_ns: u64,
    (user_samples, kernel_samples): (u64, u64),
    kernel_sampled: bool,
    period_ns: u64,
) -> (f64, f64) {
    let total = total_ns as f64 / 1e9;
    let samples = user_samples + kernel_samples;
    let user = if kernel_sampled && samples > 0 {
        total * user_samples as f64 / samples as f64
    } else {
        (user_samples as f64 * period_ns as f64 / 1e9).min(total)
    };
    (user, total - user)
}

/// The processes a run had and the programs they ran, from its fork and
/// exec records. Each program is an address space of its own, whose
/// resident memory peaked at most at the largest one's: what bounds the
/// memory a run can fault in without faulting any of it twice.
///
/// The records come from each CPU's ring, so a child's exec may be read
/// before the fork that made it: the count is kept per pid and settled when
/// asked, whatever order the records came in.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Processes forked during the run.
    forks: u64,
    /// Their pids, and those of commands started stopped before `exec`:
    /// their first exec replaces fork's copy of their parent (a few pages
    /// of their own) with their first program.
    forked: HashSet<u32>,
    /// Execs by pid.
    execs: HashMap<u32, u64>,
}

impl Census {
    /// Process `pid`'s first exec starts its first program (a command
    /// forked by pagewise and stopped before `exec`).
    pub fn expect_exec(&mut self, pid: u32) {
        self.forked.insert(pid);
    }

    fn fork(&mut self, pid: u32) {
        self.forks += 1;
        self.forked.insert(pid);
    }

    fn exec(&mut self, pid: u32) {
        *self.execs.entry(pid).or_default() += 1;
    }

    /// The processes: the one observed and every one forked during the run.
    pub fn processes(&self) -> u64 {
        1 + self.forks
    }

    /// The programs: one per process, and one more for each program a
    /// process exec'd after it had run one of its own (a shell's `exec`,
    /// `env`, `nice`, a version manager's shim). A process's first exec after
    /// `fork` starts its first program: fork's copy that ran until then is
    /// not counted. (A pid used again by a later process counts its first
    /// exec again: at most one program too many, never too few.)
    pub fn programs(&self) -> u64 {
        let later: u64 = self
            .execs
            .iter()
            .map(|(pid, &n)| n - u64::from(self.forked.contains(pid)))
            .sum();
        self.processes() + later
    }
}

/// A major fault whose address no known mapping held when it was read.
#[derive(Debug, Clone, Copy)]
struct UnresolvedMajor {
    pid: u32,
    addr: u64,
}

/// A sample's stack counted while no known mapping held its sampled
/// instruction: what it takes to choose its stack words again.
#[derive(Debug)]
struct UnsettledStack {
    /// The stack it was counted under.
    id: u32,
    /// What counted it.
    tally: Tally,
    pid: u32,
    /// Its user frames, innermost first.
    chain: Box<[u64]>,
    /// Its copy of the user stack.
    stack: Box<[u8]>,
}

/// Where a sample's stack was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tally {
    /// In `fault_stacks`.
    Faults,
    /// In `major_stacks`.
    Majors,
    /// In `call_stacks`.
    Calls,
    /// As the stack of `calls[i]`.
    MmapCall(usize),
}

/// How many later batches something read before the mapping record that
/// places it (a major fault's address, a sample's instruction) is looked up
/// again in. A batch reads every ring once, one after another, so a mapping
/// recorded in a ring already read, just before the sample was recorded in a
/// ring read later, arrives one batch after the sample; an address no
/// mapping record ever names (anonymous memory swapped back in, a lost
/// record) is given up on after that, so the list stays short.
const RETRY_BATCHES: u64 = 2;

/// Things read before the mapping that places them, each with the batch it
/// was read in, kept for [`RETRY_BATCHES`] batches.
#[derive(Debug)]
struct Retries<T>(Vec<(u64, T)>);

impl<T> Default for Retries<T> {
    fn default() -> Self {
        Retries(Vec::new())
    }
}

impl<T> Retries<T> {
    /// Keeps `item`, read in batch `batch`, to be retried.
    fn push(&mut self, batch: u64, item: T) {
        self.0.push((batch, item));
    }

    /// Offers every item to `settle` in batch `batch`, and keeps those it
    /// could not settle (it returns `false`) that have waited fewer than
    /// [`RETRY_BATCHES`] batches.
    fn retry(&mut self, batch: u64, mut settle: impl FnMut(&T) -> bool) {
        self.0
            .retain(|(read_in, item)| !settle(item) && batch - read_in < RETRY_BATCHES);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The name major faults are counted under while no mapping holds their address.
const UNKNOWN_FILE: &str = "[unknown]";

/// Addresses from here up are the kernel's (x86-64, 4- and 5-level paging).
const KERNEL_SPACE: u64 = 0xff00_0000_0000_0000;

/// At most this many code words are kept from a stack copy.
const MAX_WORDS: usize = 4;

/// A fast, non-cryptographic hash of a stack (FxHash-style mixing).
fn stack_hash(pid: u32, chain: &[u64], words: &[u64]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = pid as u64;
    for &v in chain.iter().chain(std::iter::once(&u64::MAX)).chain(words) {
        h = (h.rotate_left(5) ^ v).wrapping_mul(K);
    }
    h
}

/// Fills `words` with the words of `stack` that point into the program's own
/// code: candidates for the caller that frame-pointer unwinding skipped (see
/// [`StackKey::words`]), by the mappings of `pid` known so far. Returns whose
/// code the sampled instruction (`chain[0]`) is in, if there is one.
///
/// A frameless leaf hides its caller from frame-pointer unwinding. When the
/// sampled instruction is library code, the caller in our code may be a few
/// frames up: the first words of the stack that point into our code are
/// kept. When it is our own code, only its own return address can be
/// missing, and that is the first word on the stack.
fn own_code_words(
    spaces: &mut AddressSpaces,
    pid: u32,
    chain: &[u64],
    stack: Option<&[u8]>,
    words: &mut Vec<u64>,
) -> Option<CodeOwner> {
    words.clear();
    let leaf = chain.first().map(|&ip| spaces.code_owner(pid, ip));
    let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().expect("8 bytes"));
    if leaf == Some(CodeOwner::Own) {
        if let Some(v) = stack.and_then(|st| st.get(..8)).map(word) {
            if spaces.is_own_code(pid, v) {
                words.push(v);
            }
        }
    } else if let Some(stack) = stack {
        for v in stack.chunks_exact(8).map(word) {
            if v > 4096 && spaces.is_own_code(pid, v) {
                words.push(v);
                if words.len() == MAX_WORDS {
                    break;
                }
            }
        }
    }
    leaf
}

impl Collector {
    /// A collector for events with these ids (id -> kind and `sample_type`).
    pub fn new(
        ids: HashMap<u64, (Sampled, u64)>,
        fields: TpFields,
        spaces: AddressSpaces,
        live: Arc<Mutex<BTreeSet<u32>>>,
    ) -> Self {
        Collector {
            ids,
            fields,
            spaces,
            stacks: vec![],
            stack_index: HashMap::new(),
            chain_buf: Vec::new(),
            words_buf: Vec::new(),
            fault_stacks: HashMap::new(),
            major_stacks: HashMap::new(),
            call_stacks: HashMap::new(),
            major_files: HashMap::new(),
            unresolved_majors: Retries::default(),
            unsettled_stacks: Retries::default(),
            batches: 0,
            text_pages: HashMap::new(),
            calls: vec![],
            lost: 0,
            live,
            malformed: 0,
            names: HashMap::new(),
            kinds_open: false,
            kind_windows: vec![],
            kernel_stacks: HashMap::new(),
            remaps: RemapRecords::default(),
            census: Census::default(),
            clock_ns: None,
            kernel_clock: false,
            kernel_clock_samples: 0,
        }
    }

    /// User and system seconds of the observed tasks and the children they
    /// started while sampled: the `cpu-clock` count split by its samples
    /// ([`split_cpu_time`]); `None` when the count could not be read.
    pub fn cpu_time(&self, period_ns: u64) -> Option<(f64, f64)> {
        let user: u64 = self.text_pages.values().sum();
        let samples = (user, self.kernel_clock_samples);
        Some(split_cpu_time(
            self.clock_ns?,
            samples,
            self.kernel_clock,
            period_ns,
        ))
    }

    /// Processes one batch: the bytes read from each ring buffer. Side-band
    /// records of every buffer go first, so that samples on one CPU find the
    /// mappings another CPU reported in the same batch.
    pub fn consume(&mut self, buffers: &[Vec<u8>]) {
        let ids = std::mem::take(&mut self.ids);
        let types = |id: u64| ids.get(&id).map(|(_, st)| *st);
        for buf in buffers {
            for r in Records::new(buf, types) {
                self.side_band(r);
            }
        }
        self.batches += 1;
        self.resolve_majors();
        self.settle_stacks();
        for buf in buffers {
            for r in Records::new(buf, types) {
                if let Record::Sample(s) = r {
                    if let Some(&(kind, _)) = ids.get(&s.id) {
                        self.sample(kind, &s);
                    }
                }
            }
        }
        self.ids = ids;
    }

    /// Moves the major faults counted as `[unknown]` whose address a mapping
    /// now holds to that mapping's name, and forgets those that waited
    /// [`RETRY_BATCHES`] batches.
    fn resolve_majors(&mut self) {
        let mut pending = std::mem::take(&mut self.unresolved_majors);
        pending.retry(self.batches, |m| {
            let Some(name) = self
                .spaces
                .lookup(m.pid, m.addr)
                .map(|map| map.name.clone())
            else {
                return false;
            };
            if let Some(unknown) = self.major_files.get_mut(UNKNOWN_FILE) {
                *unknown -= 1;
                if *unknown == 0 {
                    self.major_files.remove(UNKNOWN_FILE);
                }
            }
            *self.major_files.entry(name).or_default() += 1;
            true
        });
        self.unresolved_majors = pending;
    }

    /// Chooses again the stack words of the stacks counted before the mapping
    /// of their sampled instruction was known, for those whose mapping is known
    /// now, and moves the count to the stack they make when that differs (a
    /// stack word in that mapping is the program's own code, or the sampled
    /// instruction is, which changes which words are kept); forgets those that
    /// waited [`RETRY_BATCHES`] batches.
    fn settle_stacks(&mut self) {
        let mut pending = std::mem::take(&mut self.unsettled_stacks);
        pending.retry(self.batches, |u| {
            let Some(&leaf) = u.chain.first() else {
                return true;
            };
            if self.spaces.code_owner(u.pid, leaf) == CodeOwner::Unmapped {
                return false;
            }
            let mut words = std::mem::take(&mut self.words_buf);
            own_code_words(
                &mut self.spaces,
                u.pid,
                &u.chain,
                Some(&u.stack),
                &mut words,
            );
            if *words != *self.stacks[u.id as usize].words {
                let id = self.intern_key(u.pid, &u.chain, &words);
                self.recount(u.tally, u.id, id);
            }
            self.words_buf = words;
            true
        });
        self.unsettled_stacks = pending;
    }

    /// Moves one count from stack `from` to stack `to` in what `tally` names.
    fn recount(&mut self, tally: Tally, from: u32, to: u32) {
        let counts = match tally {
            Tally::Faults => &mut self.fault_stacks,
            Tally::Majors => &mut self.major_stacks,
            Tally::Calls => &mut self.call_stacks,
            Tally::MmapCall(i) => {
                if let Some(call) = self.calls.get_mut(i) {
                    call.stack = Some(to);
                }
                return;
            }
        };
        if let Some(n) = counts.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&from);
            }
        }
        *counts.entry(to).or_default() += 1;
    }

    fn side_band(&mut self, r: Record<'_>) {
        match r {
            Record::Mmap2(m) => {
                self.remaps.note(&m);
                self.spaces.add_mmap(&m);
            }
            Record::Comm {
                pid,
                tid,
                exec,
                name,
                time,
            } if pid == tid => {
                if exec {
                    self.spaces.exec(pid, time);
                    self.census.exec(pid);
                }
                self.names.insert(pid, name);
            }
            Record::Fork { pid, ppid, .. } if pid != ppid => {
                self.spaces.set_parent(pid, ppid);
                self.census.fork(pid);
                if let Ok(mut live) = self.live.lock() {
                    live.insert(pid);
                }
            }
            Record::Exit { pid, tid } if pid == tid => {
                if let Ok(mut live) = self.live.lock() {
                    live.remove(&pid);
                }
            }
            Record::Lost(n) | Record::LostSamples(n) => self.lost += n,
            Record::Malformed(_) => self.malformed += 1,
            _ => {}
        }
    }

    /// Interns the stack of `s`, counted in `tally` by the caller. When no
    /// known mapping holds its sampled instruction yet, its words are chosen
    /// again once one does ([`Collector::settle_stacks`]).
    fn intern(&mut self, s: &Sample<'_>, tally: Tally) -> u32 {
        // Build the key in reusable buffers; allocate only for a stack not seen before.
        let mut chain = std::mem::take(&mut self.chain_buf);
        let mut words = std::mem::take(&mut self.words_buf);
        chain.clear();
        words.clear();
        s.callchain_into(&mut chain);
        if chain.is_empty() {
            chain.extend(s.ip);
        }
        let leaf = own_code_words(&mut self.spaces, s.pid, &chain, s.stack, &mut words);
        let id = self.intern_key(s.pid, &chain, &words);
        // A user instruction is always in some mapping: none known means its
        // record is still in a ring not read yet. (Without a stack copy there
        // are no words to choose.)
        let stack = s.stack.filter(|st| !st.is_empty());
        if let (Some(CodeOwner::Unmapped), Some(stack)) = (leaf, stack) {
            if chain[0] < KERNEL_SPACE {
                let unsettled = UnsettledStack {
                    id,
                    tally,
                    pid: s.pid,
                    chain: chain.as_slice().into(),
                    stack: stack.into(),
                };
                self.unsettled_stacks.push(self.batches, unsettled);
            }
        }
        self.chain_buf = chain;
        self.words_buf = words;
        id
    }

    /// The id of the stack (`pid`, `chain`, `words`), interned if new.
    fn intern_key(&mut self, pid: u32, chain: &[u64], words: &[u64]) -> u32 {
        let hash = stack_hash(pid, chain, words);
        let found = self.stack_index.get(&hash).and_then(|ids| {
            ids.iter().copied().find(|&id| {
                let k = &self.stacks[id as usize];
                k.pid == pid && *k.chain == *chain && *k.words == *words
            })
        });
        if let Some(id) = found {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(StackKey {
            pid,
            chain: chain.into(),
            words: words.into(),
        });
        self.stack_index.entry(hash).or_default().push(id);
        id
    }

    /// Counts the kernel stack of a kernel-mode `cpu-clock` sample.
    fn kernel_sample(&mut self, s: &Sample<'_>) {
        let mut chain = std::mem::take(&mut self.chain_buf);
        chain.clear();
        s.kernel_callchain_into(&mut chain);
        if !chain.is_empty() {
            match self.kernel_stacks.get_mut(chain.as_slice()) {
                Some(n) => *n += 1,
                None => {
                    self.kernel_stacks.insert(chain.as_slice().into(), 1);
                }
            }
        }
        self.chain_buf = chain;
    }

    fn sample(&mut self, kind: Sampled, s: &Sample<'_>) {
        let raw = |spec: FieldSpec| s.raw.and_then(|r| raw_field(r, spec));
        let call = |kind: CallKind, stack: Option<u32>| Call {
            time: s.time.unwrap_or(0),
            pid: s.pid,
            tid: s.tid,
            kind,
            stack,
        };
        match kind {
            Sampled::CpuClock => match s.ip {
                Some(ip) if ip < KERNEL_SPACE => {
                    *self.text_pages.entry((s.pid, ip >> 12)).or_default() += 1;
                }
                Some(_) => {
                    self.kernel_clock_samples += 1;
                    self.kernel_sample(s);
                }
                None => {}
            },
            Sampled::Faults => {
                let id = self.intern(s, Tally::Faults);
                *self.fault_stacks.entry(id).or_default() += 1;
            }
            Sampled::CallStacks => {
                let id = self.intern(s, Tally::Calls);
                *self.call_stacks.entry(id).or_default() += 1;
            }
            Sampled::MajorFaults => {
                let id = self.intern(s, Tally::Majors);
                *self.major_stacks.entry(id).or_default() += 1;
                let name = s
                    .addr
                    .and_then(|a| self.spaces.lookup(s.pid, a))
                    .map(|m| m.name.clone());
                if name.is_none() {
                    if let Some(addr) = s.addr {
                        let major = UnresolvedMajor { pid: s.pid, addr };
                        self.unresolved_majors.push(self.batches, major);
                    }
                }
                let name = name.unwrap_or_else(|| UNKNOWN_FILE.to_owned());
                *self.major_files.entry(name).or_default() += 1;
            }
            Sampled::EnterMmap => {
                let Some((len, prot, flags)) = self.fields.mmap else {
                    return;
                };
                let (Some(len), Some(prot), Some(flags)) = (raw(len), raw(prot), raw(flags)) else {
                    self.malformed += 1;
                    return;
                };
                let stack = Some(self.intern(s, Tally::MmapCall(self.calls.len())));
                self.calls
                    .push(call(CallKind::Mmap { len, prot, flags }, stack));
            }
            Sampled::ExitMmap => {
                let Some(ret) = self.fields.mmap_ret.and_then(raw) else {
                    return;
                };
                self.calls
                    .push(call(CallKind::MmapRet { ret: ret as i64 }, None));
            }
            Sampled::EnterMunmap => {
                let Some((addr, len)) = self.fields.munmap else {
                    return;
                };
                if let (Some(addr), Some(len)) = (raw(addr), raw(len)) {
                    self.calls.push(call(CallKind::Munmap { addr, len }, None));
                }
            }
            Sampled::EnterBrk => self.calls.push(call(CallKind::Brk, None)),
            Sampled::EnterMadvise => {
                let Some((len, behavior)) = self.fields.madvise else {
                    return;
                };
                if let (Some(len), Some(behavior)) = (raw(len), raw(behavior)) {
                    self.calls
                        .push(call(CallKind::Madvise { len, behavior }, None));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::build;
    use super::super::record::Mmap2;
    use super::*;
    use crate::sys::perf::{
        SAMPLE_ADDR, SAMPLE_CALLCHAIN, SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_RAW, SAMPLE_STACK_USER,
        SAMPLE_TID, SAMPLE_TIME,
    };

    const FAULT_ST: u64 = SAMPLE_IDENTIFIER
        | SAMPLE_IP
        | SAMPLE_TID
        | SAMPLE_ADDR
        | SAMPLE_CALLCHAIN
        | SAMPLE_STACK_USER;
    const CLOCK_ST: u64 = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID;
    const MMAP_ST: u64 =
        SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_RAW | SAMPLE_CALLCHAIN;

    fn collector() -> Collector {
        let ids = HashMap::from([
            (1, (Sampled::Faults, FAULT_ST)),
            (2, (Sampled::CpuClock, CLOCK_ST)),
            (3, (Sampled::EnterMmap, MMAP_ST)),
            (4, (Sampled::MajorFaults, FAULT_ST)),
        ]);
        let spec = |offset| FieldSpec {
            offset,
            size: 8,
            signed: false,
        };
        let fields = TpFields {
            mmap: Some((spec(24), spec(32), spec(40))),
            ..TpFields::default()
        };
        Collector::new(ids, fields, AddressSpaces::new(), Arc::default())
    }

    /// Process 7's executable mapping of its program, `/nonexistent/fixture`,
    /// at 0x400000 (one page).
    fn program_code() -> Mmap2 {
        Mmap2 {
            addr: 0x400000,
            len: 0x1000,
            prot: 5,
            filename: "/nonexistent/fixture".into(),
            ..data_file(None)
        }
    }

    /// Process 7's read-only mapping of `/data/file` at 0x7e00_0000_0000 (1 MiB).
    fn data_file(time: Option<u64>) -> Mmap2 {
        Mmap2 {
            pid: 7,
            tid: 7,
            addr: 0x7e00_0000_0000,
            len: 1 << 20,
            pgoff: 0,
            prot: 1,
            flags: 2,
            build_id: None,
            filename: "/data/file".into(),
            time,
        }
    }

    fn sample(id: u64) -> Sample<'static> {
        Sample {
            id,
            ip: None,
            pid: 7,
            tid: 7,
            time: Some(1),
            addr: None,
            period: None,
            chain: &[],
            raw: None,
            stack: None,
        }
    }

    #[test]
    fn faults_in_library_code_keep_own_code_words_from_the_stack() {
        let mut c = collector();
        let own = program_code();
        let libc = Mmap2 {
            addr: 0x7f00_0000_0000,
            filename: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            ..own.clone()
        };
        let data = Mmap2 {
            addr: 0x7e00_0000_0000,
            len: 1 << 20,
            prot: 1,
            filename: "/data/file".into(),
            ..own.clone()
        };
        let mut stack = Vec::new();
        for w in [0x7ffd_0000_0000u64, 0x400123, 5, 0x400456] {
            stack.extend_from_slice(&w.to_ne_bytes());
        }
        let chain = build::chain(&[0x7f00_0000_0100, 0x400200]);
        let fault = Sample {
            ip: Some(0x7f00_0000_0100),
            addr: Some(0x7e00_0000_1000),
            chain: &chain,
            stack: Some(&stack),
            ..sample(1)
        };
        let major = Sample {
            id: 4,
            ..fault.clone()
        };
        let tick = Sample {
            ip: Some(0x400123),
            ..sample(2)
        };
        // Samples first, mappings after: one batch still resolves them.
        let mut buf = build::sample(FAULT_ST, &fault);
        buf.extend(build::sample(FAULT_ST, &fault));
        buf.extend(build::sample(FAULT_ST, &major));
        buf.extend(build::sample(CLOCK_ST, &tick));
        let side = [build::mmap2(&own), build::mmap2(&libc), build::mmap2(&data)].concat();
        c.consume(&[buf, side]);
        assert_eq!(c.stacks.len(), 1, "same stack interned once");
        assert_eq!(c.fault_stacks[&0], 2);
        assert_eq!(&*c.stacks[0].words, &[0x400123, 0x400456]);
        assert_eq!(c.major_stacks[&0], 1);
        // A fault in our own (frameless) leaf keeps only the first word: its return address.
        let own_fault = Sample {
            ip: Some(0x400010),
            chain: &[],
            ..fault.clone()
        };
        c.consume(&[build::sample(FAULT_ST, &own_fault)]);
        assert_eq!(&*c.stacks[1].chain, &[0x400010]);
        assert!(c.stacks[1].words.is_empty(), "first word is not our code");
        let mut ret_first = 0x400456u64.to_ne_bytes().to_vec();
        ret_first.extend_from_slice(&0x400123u64.to_ne_bytes());
        let own_fault = Sample {
            stack: Some(&ret_first),
            ..own_fault
        };
        c.consume(&[build::sample(FAULT_ST, &own_fault)]);
        assert_eq!(&*c.stacks[2].words, &[0x400456]);
        assert_eq!(c.major_files["/data/file"], 1);
        assert_eq!(c.text_pages[&(7, 0x400)], 1);
    }

    #[test]
    fn a_major_fault_read_a_batch_before_its_mapping_gets_the_file_name() {
        let mut c = collector();
        let data = data_file(None);
        let major = |addr| Sample {
            addr: Some(addr),
            ..sample(4)
        };
        // Two faults in the file, one where no mapping will ever be.
        let early = [
            build::sample(FAULT_ST, &major(0x7e00_0000_1000)),
            build::sample(FAULT_ST, &major(0x7e00_0000_2000)),
            build::sample(FAULT_ST, &major(0x1000)),
        ]
        .concat();
        c.consume(&[early]);
        assert_eq!(c.major_files[UNKNOWN_FILE], 3);
        // The mapping's record comes from another ring, a batch later.
        c.consume(&[build::mmap2(&data)]);
        assert_eq!(c.major_files["/data/file"], 2);
        assert_eq!(c.major_files[UNKNOWN_FILE], 1);
        assert_eq!(c.unresolved_majors.len(), 1);
        // The one no mapping holds is given up on, and stays unknown.
        for _ in 0..RETRY_BATCHES + 1 {
            c.consume(&[]);
        }
        assert_eq!(c.unresolved_majors.len(), 0);
        assert_eq!(c.major_files[UNKNOWN_FILE], 1);
        // A later fault in the file is named at once.
        c.consume(&[build::sample(FAULT_ST, &major(0x7e00_0000_3000))]);
        assert_eq!(c.major_files["/data/file"], 3);
        // When every fault is named in the end, no `[unknown]` row is left.
        let mut c = collector();
        c.consume(&[build::sample(FAULT_ST, &major(0x7e00_0000_1000))]);
        c.consume(&[build::mmap2(&data)]);
        assert_eq!(c.major_files, HashMap::from([("/data/file".to_owned(), 1)]));
    }

    /// A fault in a plugin's frameless code, read a batch before the plugin's
    /// mapping (its record is in another CPU's ring, read before it was
    /// written): the stack words are chosen again once the mapping is known.
    /// Before, the leaf counted as library code for good, so the words kept
    /// were the program's further up the stack, not the leaf's return address,
    /// and the site was given a caller that never called it.
    #[test]
    fn a_stack_read_a_batch_before_the_mapping_of_its_leaf_gets_its_words_again() {
        let mut c = collector();
        const MMAP_STACK_ST: u64 = MMAP_ST | SAMPLE_STACK_USER;
        c.ids.insert(5, (Sampled::EnterMmap, MMAP_STACK_ST));
        let program = program_code();
        let plugin = Mmap2 {
            addr: 0x500000,
            filename: "/nonexistent/plugin.so".into(),
            ..program.clone()
        };
        c.consume(&[build::mmap2(&program)]);
        // The leaf's return address (into the plugin), then one into the program.
        let mut stack = Vec::new();
        for w in [0x500123u64, 0x400456] {
            stack.extend_from_slice(&w.to_ne_bytes());
        }
        let fault = Sample {
            ip: Some(0x500010),
            addr: Some(0x7e00_0000_1000),
            stack: Some(&stack),
            ..sample(1)
        };
        let major = Sample {
            id: 4,
            ..fault.clone()
        };
        let mut raw = vec![0u8; 64];
        raw[24..32].copy_from_slice(&(1u64 << 20).to_ne_bytes());
        let chain = build::chain(&[0x500010]);
        let call = Sample {
            raw: Some(&raw),
            chain: &chain,
            stack: Some(&stack),
            ..sample(5)
        };
        // Never mapped: given up on, counted as it was.
        let nowhere = Sample {
            ip: Some(0x900010),
            ..fault.clone()
        };
        let samples = [
            build::sample(FAULT_ST, &fault),
            build::sample(FAULT_ST, &major),
            build::sample(MMAP_STACK_ST, &call),
            build::sample(FAULT_ST, &nowhere),
        ]
        .concat();
        c.consume(&[samples]);
        assert_eq!(&*c.stacks[0].words, &[0x400456], "as library code, for now");
        assert_eq!(c.unsettled_stacks.len(), 4);
        c.consume(&[build::mmap2(&plugin)]);
        let own_leaf = c
            .stacks
            .iter()
            .position(|k| *k.chain == [0x500010] && *k.words == [0x500123])
            .expect("the leaf's stack with its return address") as u32;
        assert_eq!(
            c.fault_stacks.get(&own_leaf),
            Some(&1),
            "{:?}",
            c.fault_stacks
        );
        assert_eq!(c.major_stacks, HashMap::from([(own_leaf, 1)]));
        assert_eq!(c.calls[0].stack, Some(own_leaf));
        assert_eq!(c.unsettled_stacks.len(), 1);
        let faults: u64 = c.fault_stacks.values().sum();
        assert_eq!(faults, 2, "moved, not added: {:?}", c.fault_stacks);
        for _ in 0..RETRY_BATCHES {
            c.consume(&[]);
        }
        assert_eq!(c.unsettled_stacks.len(), 0);
        assert_eq!(c.fault_stacks.values().sum::<u64>(), 2);
    }

    #[test]
    fn an_exec_read_after_the_new_images_mappings_keeps_them() {
        // The program execs on CPU 1, moves to CPU 0 and maps a file: ring 0
        // (read first) holds the mapping and its faults, ring 1 the exec.
        let mut ids = collector().ids;
        ids.insert(
            build::SIDE_BAND_ID,
            (Sampled::CpuClock, build::SIDE_BAND_TYPE),
        );
        let mut c = collector();
        c.ids = ids;
        let data = data_file(Some(2_000));
        let before_exec = Mmap2 {
            addr: 0x7d00_0000_0000,
            filename: "/old/image".into(),
            time: Some(500),
            ..data.clone()
        };
        let major = Sample {
            id: 4,
            addr: Some(0x7e00_0000_1000),
            ..sample(4)
        };
        let mut ring0 = build::mmap2(&data);
        ring0.extend(build::sample(FAULT_ST, &major));
        let ring1 = build::comm(7, "fixture", true, Some(1_000));
        c.consume(&[ring0, ring1]);
        assert_eq!(
            c.major_files.get("/data/file"),
            Some(&1),
            "{:?}",
            c.major_files
        );
        // A mapping of the image that exec replaced, read later, is not taken.
        c.consume(&[build::mmap2(&before_exec)]);
        assert!(c.spaces.lookup(7, 0x7d00_0000_0000).is_none());
        // Without times (older records), exec still clears everything before it.
        c.consume(&[build::comm(7, "fixture", true, None)]);
        assert!(c.spaces.lookup(7, 0x7e00_0000_1000).is_none());
    }

    /// `make -j2`: make forks a compiler per file, each compiler forks its
    /// passes; a shell `exec`s its last command; a thread is no process.
    #[test]
    fn the_census_counts_processes_and_the_programs_they_ran() {
        let mut c = collector();
        // A command started stopped: its exec starts its first program.
        c.census.expect_exec(7);
        c.consume(&[build::comm(7, "make", true, None)]);
        assert_eq!((c.census.processes(), c.census.programs()), (1, 1));
        let mut records = vec![];
        for child in [8, 9] {
            records.push(build::fork(child, 7));
            records.push(build::comm(child, "g++", true, None));
            records.push(build::fork(child + 10, child));
            records.push(build::comm(child + 10, "cc1plus", true, None));
            records.push(build::exit(child + 10, child));
            records.push(build::exit(child, 7));
        }
        // A thread of make's: neither a process nor a program.
        records.push(build::fork(7, 7));
        // A shell that runs `a; exec b`: its exec of b is a second program.
        records.push(build::fork(30, 7));
        records.push(build::comm(30, "sh", true, None));
        records.push(build::fork(31, 30));
        records.push(build::comm(31, "a", true, None));
        records.push(build::comm(30, "b", true, None));
        c.consume(&[records.concat()]);
        assert_eq!(c.census.processes(), 7);
        assert_eq!(c.census.programs(), 8);
        // A child's exec read before its fork (another CPU's ring, read first).
        c.consume(&[build::comm(40, "as", true, None), build::fork(40, 9)]);
        assert_eq!((c.census.processes(), c.census.programs()), (8, 9));
        // A process attached to (`--pid`) that execs runs a second program.
        let mut c = collector();
        c.consume(&[build::comm(7, "python3", true, None)]);
        assert_eq!((c.census.processes(), c.census.programs()), (1, 2));
    }

    #[test]
    fn cpu_time_is_the_clock_count_split_by_its_samples() {
        const MS: u64 = 1_000_000;
        // 2 s of CPU, 1,500 user and 500 kernel samples: 1.5 s and 0.5 s.
        let (user, sys) = split_cpu_time(2_000 * MS, (1500, 500), true, MS);
        assert!((user - 1.5).abs() < 1e-9 && (sys - 0.5).abs() < 1e-9);
        // User mode sampled alone: the user samples' time, the rest system.
        let (user, sys) = split_cpu_time(2_000 * MS, (1500, 0), false, MS);
        assert!((user - 1.5).abs() < 1e-9 && (sys - 0.5).abs() < 1e-9);
        // Never more user time than the count.
        assert_eq!(split_cpu_time(MS, (3, 0), false, MS), (0.001, 0.0));
        assert_eq!(split_cpu_time(0, (0, 0), true, MS), (0.0, 0.0));
        // The collector's samples: a user and a kernel one.
        let mut c = collector();
        let tick = |ip| Sample {
            ip: Some(ip),
            ..sample(2)
        };
        c.consume(&[[
            build::sample(CLOCK_ST, &tick(0x400123)),
            build::sample(CLOCK_ST, &tick(KERNEL_SPACE + 0x10)),
        ]
        .concat()]);
        assert_eq!(c.cpu_time(MS), None, "no count read");
        c.clock_ns = Some(4 * MS);
        c.kernel_clock = true;
        assert_eq!(c.cpu_time(MS), Some((0.002, 0.002)));
    }

    #[test]
    fn mmap_calls_are_decoded_from_the_raw_record() {
        let mut c = collector();
        let mut raw = vec![0u8; 64];
        raw[24..32].copy_from_slice(&(64u64 << 20).to_ne_bytes());
        raw[32..40].copy_from_slice(&3u64.to_ne_bytes());
        raw[40..48].copy_from_slice(&0x22u64.to_ne_bytes());
        let chain = build::chain(&[0x7f00_0000_0100]);
        let s = Sample {
            raw: Some(&raw),
            chain: &chain,
            ..sample(3)
        };
        c.consume(&[build::sample(MMAP_ST, &s), build::lost(3)]);
        assert_eq!(
            c.calls[0].kind,
            CallKind::Mmap {
                len: 64 << 20,
                prot: 3,
                flags: 0x22
            }
        );
        assert_eq!(c.lost, 3);
    }
}
