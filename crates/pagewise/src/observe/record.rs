//! Decoding the records the kernel writes into a perf ring buffer
//! (`struct perf_event_header` followed by a body whose layout depends on the
//! record type and, for samples, on the event's `sample_type`).
//!
//! Every sampled event pagewise opens carries `PERF_SAMPLE_IDENTIFIER`, so the
//! id comes first and tells which `sample_type` the rest follows. Decoding is
//! bounds-checked: a truncated or malformed record becomes
//! [`Record::Malformed`], never a panic.

use crate::sys::perf::{
    SAMPLE_ADDR, SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_ID, SAMPLE_IDENTIFIER, SAMPLE_IP,
    SAMPLE_PERIOD, SAMPLE_RAW, SAMPLE_STACK_USER, SAMPLE_STREAM_ID, SAMPLE_TID, SAMPLE_TIME,
};

/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = 2;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
pub const RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_FORK`.
pub const RECORD_FORK: u32 = 7;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = 10;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const RECORD_LOST_SAMPLES: u32 = 13;

/// `PERF_RECORD_MISC_COMM_EXEC`: the name changed because of `exec`.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: the MMAP2 record holds a build id.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `PERF_CONTEXT_USER`: the user part of a call chain follows.
const CONTEXT_USER: u64 = (-512i64) as u64;
/// `PERF_CONTEXT_KERNEL`: the kernel part of a call chain follows.
const CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// Values at or above `PERF_CONTEXT_MAX` are context markers, not addresses.
const CONTEXT_MAX: u64 = (-4095i64) as u64;

/// One sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The event's id.
    pub id: u64,
    /// Instruction pointer.
    pub ip: Option<u64>,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp (ns, perf clock).
    pub time: Option<u64>,
    /// Data address.
    pub addr: Option<u64>,
    /// How many events the sample stands for.
    pub period: Option<u64>,
    /// The raw call chain (`u64` addresses and context markers); see [`Sample::callchain_into`].
    pub chain: &'a [u8],
    /// The tracepoint record.
    pub raw: Option<&'a [u8]>,
    /// The top of the user stack, starting at the stack pointer.
    pub stack: Option<&'a [u8]>,
}

impl Sample<'_> {
    /// Appends the user frames of the call chain to `out`, innermost first,
    /// without the context markers (kernel frames are dropped).
    pub fn callchain_into(&self, out: &mut Vec<u64>) {
        let mut user = false;
        let mut saw_marker = false;
        for w in self.chain.chunks_exact(8) {
            let ip = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
            if ip >= CONTEXT_MAX {
                saw_marker = true;
                user = ip == CONTEXT_USER;
                continue;
            }
            if user || !saw_marker {
                out.push(ip);
            }
        }
    }

    /// Appends the kernel frames of the call chain to `out`, innermost first,
    /// without the context markers (user frames are dropped).
    pub fn kernel_callchain_into(&self, out: &mut Vec<u64>) {
        let mut kernel = false;
        for w in self.chain.chunks_exact(8) {
            let ip = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
            if ip >= CONTEXT_MAX {
                kernel = ip == CONTEXT_KERNEL;
                continue;
            }
            if kernel {
                out.push(ip);
            }
        }
    }

    /// The user frames of the call chain, innermost first.
    pub fn callchain(&self) -> Vec<u64> {
        let mut v = Vec::new();
        self.callchain_into(&mut v);
        v
    }
}

/// A new mapping (`PERF_RECORD_MMAP2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap2 {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of the start.
    pub pgoff: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_*` bits.
    pub flags: u32,
    /// The file's build id, when the kernel put it in the record.
    pub build_id: Option<Vec<u8>>,
    /// The path (or `[anon]`, `//anon`, `[vdso]`…).
    pub filename: String,
    /// When the mapping was made (perf clock, ns), from the record's sample id.
    pub time: Option<u64>,
}

impl Mmap2 {
    /// Whether the mapping is executable (its protection has `PROT_EXEC`).
    pub fn is_executable(&self) -> bool {
        crate::sys::mem::prot_is_executable(self.prot)
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// A sample of one of our events.
    Sample(Sample<'a>),
    /// A mapping was created.
    Mmap2(Mmap2),
    /// A task got a name (at `exec` when `exec` is true).
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The name.
        name: String,
        /// Set by `exec`.
        exec: bool,
        /// When (perf clock, ns), from the record's sample id.
        time: Option<u64>,
    },
    /// A task was created.
    Fork {
        /// New process id (equal to `ppid` for a new thread).
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// New thread id.
        tid: u32,
    },
    /// A task ended.
    Exit {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
    },
    /// The ring buffer was full and this many records were dropped.
    Lost(u64),
    /// Samples dropped for another reason (for example the stack copy failed).
    LostSamples(u64),
    /// A sample whose id we do not know, or a record type we do not use.
    Other(u32),
    /// A record that did not decode.
    Malformed(u32),
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let b = self.buf.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        let b = self.buf.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_ne_bytes(b.try_into().ok()?))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.at..).unwrap_or(&[])
    }
}

/// Walks the records in `buf` (bytes copied out of a ring buffer).
/// `sample_type_of(id)` returns the `sample_type` of the event with that id.
pub struct Records<'a, F> {
    buf: &'a [u8],
    at: usize,
    sample_type_of: F,
}

impl<'a, F: Fn(u64) -> Option<u64>> Records<'a, F> {
    /// Starts at the beginning of `buf`.
    pub fn new(buf: &'a [u8], sample_type_of: F) -> Self {
        Records {
            buf,
            at: 0,
            sample_type_of,
        }
    }
}

impl<'a, F: Fn(u64) -> Option<u64>> Iterator for Records<'a, F> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        let header = self.buf.get(self.at..self.at + 8)?;
        let kind = u32::from_ne_bytes(header[0..4].try_into().ok()?);
        let misc = u16::from_ne_bytes(header[4..6].try_into().ok()?);
        let size = u16::from_ne_bytes(header[6..8].try_into().ok()?) as usize;
        if size < 8 || self.at + size > self.buf.len() {
            // Cannot continue past a record whose size is wrong.
            self.at = self.buf.len();
            return Some(Record::Malformed(kind));
        }
        let body = &self.buf[self.at + 8..self.at + size];
        self.at += size;
        Some(decode(kind, misc, body, &self.sample_type_of).unwrap_or(Record::Malformed(kind)))
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The time in the `sample_id` that ends a side-band record of an event with
/// `sample_id_all`: its last word is the event's id (`PERF_SAMPLE_IDENTIFIER`),
/// whose `sample_type` says which fields lie between the time and the id.
/// `None` when the last word is no id of ours or the event has no time.
fn trailer_time(body: &[u8], sample_type_of: &impl Fn(u64) -> Option<u64>) -> Option<u64> {
    // The `back`-th word from the end (0 is the last).
    let word = |back: usize| {
        let end = body.len().checked_sub(back * 8)?;
        let w = body.get(end.checked_sub(8)?..end)?;
        Some(u64::from_ne_bytes(w.try_into().ok()?))
    };
    let st = sample_type_of(word(0)?)?;
    if st & SAMPLE_IDENTIFIER == 0 || st & SAMPLE_TIME == 0 {
        return None;
    }
    let after_time = [SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU]
        .iter()
        .filter(|&&bit| st & bit != 0)
        .count();
    word(1 + after_time)
}

fn decode<'a>(
    kind: u32,
    misc: u16,
    body: &'a [u8],
    sample_type_of: &impl Fn(u64) -> Option<u64>,
) -> Option<Record<'a>> {
    let mut c = Cursor { buf: body, at: 0 };
    Some(match kind {
        RECORD_SAMPLE => {
            let id = c.u64()?;
            let Some(st) = sample_type_of(id) else {
                return Some(Record::Other(kind));
            };
            if st & SAMPLE_IDENTIFIER == 0 {
                return None;
            }
            decode_sample(id, st, &mut c).map(Record::Sample)?
        }
        RECORD_MMAP2 => {
            let pid = c.u32()?;
            let tid = c.u32()?;
            let addr = c.u64()?;
            let len = c.u64()?;
            let pgoff = c.u64()?;
            let build_id = if misc & MISC_MMAP_BUILD_ID != 0 {
                let head = c.bytes(4)?;
                let n = (head[0] as usize).min(20);
                let id = c.bytes(20)?;
                Some(id[..n].to_vec())
            } else {
                c.bytes(24)?; // maj, min, ino, ino_generation
                None
            };
            let prot = c.u32()?;
            let flags = c.u32()?;
            Record::Mmap2(Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                prot,
                flags,
                build_id,
                filename: c_string(c.rest()),
                time: trailer_time(body, sample_type_of),
            })
        }
        RECORD_COMM => {
            let pid = c.u32()?;
            let tid = c.u32()?;
            Record::Comm {
                pid,
                tid,
                name: c_string(c.rest()),
                exec: misc & MISC_COMM_EXEC != 0,
                time: trailer_time(body, sample_type_of),
            }
        }
        RECORD_FORK => {
            let pid = c.u32()?;
            let ppid = c.u32()?;
            let tid = c.u32()?;
            Record::Fork { pid, ppid, tid }
        }
        RECORD_EXIT => {
            let pid = c.u32()?;
            let _ppid = c.u32()?;
            let tid = c.u32()?;
            Record::Exit { pid, tid }
        }
        RECORD_LOST => {
            let _id = c.u64()?;
            Record::Lost(c.u64()?)
        }
        RECORD_LOST_SAMPLES => Record::LostSamples(c.u64()?),
        other => Record::Other(other),
    })
}

fn decode_sample<'a>(id: u64, st: u64, c: &mut Cursor<'a>) -> Option<Sample<'a>> {
    const SUPPORTED: u64 = SAMPLE_IDENTIFIER
        | SAMPLE_IP
        | SAMPLE_TID
        | SAMPLE_TIME
        | SAMPLE_ADDR
        | SAMPLE_CPU
        | SAMPLE_PERIOD
        | SAMPLE_CALLCHAIN
        | SAMPLE_RAW
        | SAMPLE_STACK_USER;
    if st & !SUPPORTED != 0 {
        return None;
    }
    let mut s = Sample {
        id,
        ip: None,
        pid: 0,
        tid: 0,
        time: None,
        addr: None,
        period: None,
        chain: &[],
        raw: None,
        stack: None,
    };
    if st & SAMPLE_IP != 0 {
        s.ip = Some(c.u64()?);
    }
    if st & SAMPLE_TID != 0 {
        s.pid = c.u32()?;
        s.tid = c.u32()?;
    }
    if st & SAMPLE_TIME != 0 {
        s.time = Some(c.u64()?);
    }
    if st & SAMPLE_ADDR != 0 {
        s.addr = Some(c.u64()?);
    }
    if st & SAMPLE_CPU != 0 {
        c.u64()?;
    }
    if st & SAMPLE_PERIOD != 0 {
        s.period = Some(c.u64()?);
    }
    if st & SAMPLE_CALLCHAIN != 0 {
        let n = c.u64()? as usize;
        if n > 4096 {
            return None;
        }
        s.chain = c.bytes(n * 8)?;
    }
    if st & SAMPLE_RAW != 0 {
        let n = c.u32()? as usize;
        s.raw = Some(c.bytes(n)?);
    }
    if st & SAMPLE_STACK_USER != 0 {
        let size = c.u64()? as usize;
        if size > 0 {
            let data = c.bytes(size)?;
            let dyn_size = (c.u64()? as usize).min(size);
            s.stack = Some(&data[..dyn_size]);
        }
    }
    Some(s)
}

/// Builds ring-buffer bytes for tests and fixtures: the inverse of [`Records`].
#[cfg(test)]
pub(crate) mod build {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut body = body.to_vec();
        while !(body.len() + 8).is_multiple_of(8) {
            body.push(0);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&misc.to_ne_bytes());
        out.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Raw call-chain bytes: a user-context marker, then `frames`.
    pub fn chain(frames: &[u64]) -> Vec<u8> {
        let mut b = CONTEXT_USER.to_ne_bytes().to_vec();
        for f in frames {
            b.extend_from_slice(&f.to_ne_bytes());
        }
        b
    }

    /// A sample with the fields `st` asks for.
    pub fn sample(st: u64, s: &Sample<'_>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&s.id.to_ne_bytes());
        if st & SAMPLE_IP != 0 {
            b.extend_from_slice(&s.ip.unwrap_or(0).to_ne_bytes());
        }
        if st & SAMPLE_TID != 0 {
            b.extend_from_slice(&s.pid.to_ne_bytes());
            b.extend_from_slice(&s.tid.to_ne_bytes());
        }
        if st & SAMPLE_TIME != 0 {
            b.extend_from_slice(&s.time.unwrap_or(0).to_ne_bytes());
        }
        if st & SAMPLE_ADDR != 0 {
            b.extend_from_slice(&s.addr.unwrap_or(0).to_ne_bytes());
        }
        if st & SAMPLE_PERIOD != 0 {
            b.extend_from_slice(&s.period.unwrap_or(1).to_ne_bytes());
        }
        if st & SAMPLE_CALLCHAIN != 0 {
            b.extend_from_slice(&(s.chain.len() as u64 / 8).to_ne_bytes());
            b.extend_from_slice(s.chain);
        }
        if st & SAMPLE_RAW != 0 {
            let raw = s.raw.unwrap_or(&[]);
            // The kernel pads so that the u32 size plus the data end 8-byte aligned.
            let padded = (raw.len() + 4).next_multiple_of(8) - 4;
            b.extend_from_slice(&(padded as u32).to_ne_bytes());
            b.extend_from_slice(raw);
            b.resize(b.len() + padded - raw.len(), 0);
        }
        if st & SAMPLE_STACK_USER != 0 {
            let stack = s.stack.unwrap_or(&[]);
            let size = stack.len().next_multiple_of(8);
            b.extend_from_slice(&(size as u64).to_ne_bytes());
            b.extend_from_slice(stack);
            b.resize(b.len() + size - stack.len(), 0);
            if size > 0 {
                b.extend_from_slice(&(stack.len() as u64).to_ne_bytes());
            }
        }
        record(RECORD_SAMPLE, 0, &b)
    }

    /// An MMAP2 record with a build id.
    pub fn mmap2(m: &Mmap2) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&m.pid.to_ne_bytes());
        b.extend_from_slice(&m.tid.to_ne_bytes());
        b.extend_from_slice(&m.addr.to_ne_bytes());
        b.extend_from_slice(&m.len.to_ne_bytes());
        b.extend_from_slice(&m.pgoff.to_ne_bytes());
        let misc = match &m.build_id {
            Some(id) => {
                b.push(id.len() as u8);
                b.extend_from_slice(&[0, 0, 0]);
                let mut padded = id.clone();
                padded.resize(20, 0);
                b.extend_from_slice(&padded);
                MISC_MMAP_BUILD_ID
            }
            None => {
                b.extend_from_slice(&[0u8; 24]);
                0
            }
        };
        b.extend_from_slice(&m.prot.to_ne_bytes());
        b.extend_from_slice(&m.flags.to_ne_bytes());
        b.extend_from_slice(m.filename.as_bytes());
        b.push(0);
        stamp(&mut b, m.pid, m.tid, m.time);
        record(RECORD_MMAP2, misc, &b)
    }

    /// A FORK record.
    pub fn fork(pid: u32, ppid: u32) -> Vec<u8> {
        task(RECORD_FORK, pid, ppid)
    }

    /// An EXIT record of process `pid`'s main thread.
    pub fn exit(pid: u32, ppid: u32) -> Vec<u8> {
        task(RECORD_EXIT, pid, ppid)
    }

    /// A FORK or EXIT record (the same layout) of a main thread.
    fn task(kind: u32, pid: u32, ppid: u32) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [pid, ppid, pid, ppid] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&0u64.to_ne_bytes());
        record(kind, 0, &b)
    }

    /// The id of the side-band event in records that carry a time; its
    /// sample type is [`SIDE_BAND_TYPE`].
    pub const SIDE_BAND_ID: u64 = 0x5b1d;
    /// `TID | TIME | IDENTIFIER`, as the `cpu-clock` leaders have.
    pub const SIDE_BAND_TYPE: u64 = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME;

    /// With a `time`, pads `body` (which ends with a string) to whole words
    /// and appends the `sample_id` trailer of a record from [`SIDE_BAND_ID`].
    fn stamp(body: &mut Vec<u8>, pid: u32, tid: u32, time: Option<u64>) {
        let Some(time) = time else {
            return;
        };
        body.resize(body.len().next_multiple_of(8), 0);
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&tid.to_ne_bytes());
        body.extend_from_slice(&time.to_ne_bytes());
        body.extend_from_slice(&SIDE_BAND_ID.to_ne_bytes());
    }

    /// A COMM record; with a `time`, stamped by [`SIDE_BAND_ID`].
    pub fn comm(pid: u32, name: &str, exec: bool, time: Option<u64>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        stamp(&mut b, pid, pid, time);
        record(RECORD_COMM, if exec { MISC_COMM_EXEC } else { 0 }, &b)
    }

    /// A LOST record.
    pub fn lost(n: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0u64.to_ne_bytes());
        b.extend_from_slice(&n.to_ne_bytes());
        record(RECORD_LOST, 0, &b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ST: u64 = SAMPLE_IDENTIFIER
        | SAMPLE_IP
        | SAMPLE_TID
        | SAMPLE_TIME
        | SAMPLE_ADDR
        | SAMPLE_PERIOD
        | SAMPLE_CALLCHAIN
        | SAMPLE_RAW
        | SAMPLE_STACK_USER;

    fn types(id: u64) -> Option<u64> {
        match id {
            7 => Some(ST),
            8 => Some(SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID),
            build::SIDE_BAND_ID => Some(build::SIDE_BAND_TYPE),
            _ => None,
        }
    }

    #[test]
    fn decodes_a_stream_of_records() {
        let raw = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        let stack = 0x401234u64.to_ne_bytes();
        let frames = [0x7f00_0000_1000, 0x401100, 0x401200];
        let chain = build::chain(&frames);
        let full = Sample {
            id: 7,
            ip: Some(0x7f00_0000_1000),
            pid: 42,
            tid: 43,
            time: Some(999),
            addr: Some(0x7f12_3456_7000),
            period: Some(48),
            chain: &chain,
            raw: Some(&raw),
            stack: Some(&stack),
        };
        let small = Sample {
            id: 8,
            ip: Some(0x401010),
            pid: 42,
            tid: 44,
            time: None,
            addr: None,
            period: None,
            chain: &[],
            raw: None,
            stack: None,
        };
        let map = Mmap2 {
            pid: 42,
            tid: 42,
            addr: 0x400000,
            len: 0x2000,
            pgoff: 0x1000,
            prot: 5,
            flags: 2,
            build_id: Some(vec![0xab; 20]),
            filename: "/tmp/fixture a".to_owned(),
            time: None,
        };
        let mut buf = build::mmap2(&map);
        buf.extend(build::sample(ST, &full));
        buf.extend(build::fork(50, 42));
        buf.extend(build::sample(types(8).unwrap(), &small));
        buf.extend(build::lost(17));
        let records: Vec<Record<'_>> = Records::new(&buf, types).collect();
        assert_eq!(records.len(), 5);
        assert_eq!(records[0], Record::Mmap2(map));
        match &records[1] {
            Record::Sample(s) => {
                assert_eq!(s.callchain(), frames);
                assert_eq!(s.addr, full.addr);
                assert_eq!(s.time, Some(999));
                assert_eq!(s.period, Some(48));
                // The RAW area is padded; the record starts with our bytes.
                assert_eq!(&s.raw.unwrap()[..raw.len()], &raw);
                assert_eq!(s.stack, Some(&stack[..]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            records[2],
            Record::Fork {
                pid: 50,
                ppid: 42,
                tid: 50
            }
        );
        assert_eq!(records[3], Record::Sample(small));
        assert_eq!(records[4], Record::Lost(17));
    }

    #[test]
    fn side_band_records_carry_the_time_of_their_sample_id() {
        let map = |name: &str, time| Mmap2 {
            pid: 42,
            tid: 43,
            addr: 0x7f00_0000_0000,
            len: 0x1000,
            pgoff: 0,
            prot: 1,
            flags: 2,
            build_id: None,
            filename: name.to_owned(),
            time,
        };
        // Names of every length modulo 8, so the trailer follows every padding.
        for name in ["/d", "/data.bin", "/a/b/c/d/e/f/g", "/sixteen-bytes/x"] {
            let stamped = map(name, Some(1_234_567));
            let buf = build::mmap2(&stamped);
            let records: Vec<_> = Records::new(&buf, types).collect();
            assert_eq!(records, vec![Record::Mmap2(stamped)]);
            let comm = build::comm(42, name, true, Some(99));
            let records: Vec<_> = Records::new(&comm, types).collect();
            assert_eq!(
                records,
                vec![Record::Comm {
                    pid: 42,
                    tid: 42,
                    name: name.to_owned(),
                    exec: true,
                    time: Some(99)
                }]
            );
        }
        // Without a trailer (an event without sample_id_all) there is no time,
        // whatever the name's last bytes are.
        let bare = map("/data.bin", None);
        let buf = build::mmap2(&bare);
        let records: Vec<_> = Records::new(&buf, types).collect();
        assert_eq!(records, vec![Record::Mmap2(bare)]);
        // A trailer from an event without a time gives none.
        let untimed = |id: u64| (id == build::SIDE_BAND_ID).then_some(SAMPLE_IDENTIFIER);
        let buf = build::comm(42, "x", true, Some(5));
        let records: Vec<_> = Records::new(&buf, untimed).collect();
        assert!(matches!(records[0], Record::Comm { time: None, .. }));
    }

    proptest! {
        /// Any bytes decode to records, malformed ones included, without a
        /// panic, and the walk ends.
        #[test]
        fn any_bytes_decode_without_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            headers in proptest::collection::vec((2u32..14, any::<u16>(), 8u16..120), 0..6),
        ) {
            // Plausible headers (known kinds, small sizes) over random bodies,
            // then the random tail.
            let mut buf = Vec::new();
            let mut rest = bytes.as_slice();
            for (kind, misc, size) in headers {
                let body = usize::from(size) - 8;
                let take = body.min(rest.len());
                buf.extend_from_slice(&kind.to_ne_bytes());
                buf.extend_from_slice(&misc.to_ne_bytes());
                buf.extend_from_slice(&size.to_ne_bytes());
                buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
            }
            buf.extend_from_slice(rest);
            let n = Records::new(&buf, types).count();
            prop_assert!(n <= buf.len() / 8 + 1);
        }

        /// A mapping record, stamped or not, decodes to what was written.
        #[test]
        fn mapping_records_round_trip(
            name in "[ -~]{0,40}",
            addr in any::<u64>(),
            len in any::<u64>(),
            time in proptest::option::of(any::<u64>()),
            build_id in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..=20)),
        ) {
            let map = Mmap2 {
                pid: 7,
                tid: 8,
                addr,
                len,
                pgoff: 0,
                prot: 5,
                flags: 2,
                build_id,
                filename: name,
                time,
            };
            let buf = build::mmap2(&map);
            let records: Vec<_> = Records::new(&buf, types).collect();
            prop_assert_eq!(records, vec![Record::Mmap2(map)]);
        }
    }

    #[test]
    fn unknown_ids_and_truncation_do_not_panic() {
        let s = Sample {
            id: 99,
            ip: Some(1),
            pid: 1,
            tid: 1,
            time: None,
            addr: None,
            period: None,
            chain: &[],
            raw: None,
            stack: None,
        };
        let buf = build::sample(SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID, &s);
        let records: Vec<_> = Records::new(&buf, types).collect();
        assert_eq!(records, vec![Record::Other(RECORD_SAMPLE)]);
        // Truncated: the header claims more bytes than there are.
        let short = &buf[..buf.len() - 8];
        let records: Vec<_> = Records::new(short, types).collect();
        assert_eq!(records, vec![Record::Malformed(RECORD_SAMPLE)]);
        // A sample of a known id whose body is too short.
        let mut bad = build::sample(types(8).unwrap(), &Sample { id: 8, ..s.clone() });
        bad.truncate(16);
        bad[6..8].copy_from_slice(&16u16.to_ne_bytes());
        let records: Vec<_> = Records::new(&bad, types).collect();
        assert_eq!(records, vec![Record::Malformed(RECORD_SAMPLE)]);
    }

    #[test]
    fn kernel_frames_are_dropped_from_call_chains() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u64.to_ne_bytes());
        body.extend_from_slice(&0u64.to_ne_bytes()); // ip
        body.extend_from_slice(&[0u8; 8]); // pid, tid
        body.extend_from_slice(&0u64.to_ne_bytes()); // time
        body.extend_from_slice(&0u64.to_ne_bytes()); // addr
        body.extend_from_slice(&1u64.to_ne_bytes()); // period
        let chain = [
            CONTEXT_KERNEL,
            0xffff_ffff_8100_0000,
            CONTEXT_USER,
            0x401000,
            0x401100,
        ];
        body.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
        for ip in chain {
            body.extend_from_slice(&ip.to_ne_bytes());
        }
        body.extend_from_slice(&4u32.to_ne_bytes());
        body.extend_from_slice(&[0u8; 4]);
        body.extend_from_slice(&0u64.to_ne_bytes()); // no stack
        let mut buf = Vec::new();
        buf.extend_from_slice(&RECORD_SAMPLE.to_ne_bytes());
        buf.extend_from_slice(&0u16.to_ne_bytes());
        buf.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        buf.extend(body);
        match Records::new(&buf, types).next() {
            Some(Record::Sample(s)) => {
                assert_eq!(s.callchain(), vec![0x401000, 0x401100]);
                let mut kernel = vec![];
                s.kernel_callchain_into(&mut kernel);
                assert_eq!(kernel, vec![0xffff_ffff_8100_0000]);
            }
            other => panic!("{other:?}"),
        }
    }
}
