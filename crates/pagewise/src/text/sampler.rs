//! Sampling user instruction pointers with call chains (`cpu-clock`, which
//! works without a PMU) from a command it starts or a process already running,
//! into a [`Profile`] of link-time addresses.
//!
//! One sampling event per online CPU follows the target's threads and
//! children (`inherit`), each with its own ring buffer. Addresses are mapped
//! to files through `PERF_RECORD_MMAP2` records (the command's exec and later
//! mappings) and `/proc/PID/maps` (mappings that existed before attaching),
//! then to link-time addresses through the file's program headers.

use super::profile::{Location, Profile};
use crate::sys::perf::{self, Event, EventAttr, EventType, RingBuffer};
use crate::sys::process;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// What to sample.
#[derive(Debug, Clone)]
pub enum Target {
    /// Start this command (program, then arguments) and sample it to its exit.
    Command(Vec<String>),
    /// Sample a running process for a while.
    Pid {
        /// The process.
        pid: i32,
        /// How long.
        duration: Duration,
    },
}

/// The outcome of a sampling run.
#[derive(Debug)]
pub struct Sampled {
    /// The samples.
    pub profile: Profile,
    /// The command's exit, when one was started.
    pub exit: Option<process::ExitKind>,
    /// Samples the kernel dropped because a ring buffer was full.
    pub lost: u64,
}

/// Why sampling could not run.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// The command could not be started.
    #[error("{0}: command not found or not executable")]
    NotFound(String),
    /// The events could not be opened (privilege, paranoid level).
    #[error("cannot sample: {0} (see `pagewise doctor`: perf_event_paranoid, root)")]
    Open(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

const RECORD_FORK: u32 = 7;
const RECORD_MMAP2: u32 = 10;
const RECORD_SAMPLE: u32 = 9;
const RECORD_LOST: u32 = 2;
/// Call-chain context markers are the top 4095 values.
const CONTEXT_MARKER_MIN: u64 = u64::MAX - 4095;

#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    path: String,
}

/// A `PT_LOAD` segment: file offset, file size, link-time address.
type Load = (u64, u64, u64);

/// Link-time address of a file offset, from the file's `PT_LOAD` headers (cached).
#[derive(Default)]
struct Loads {
    by_path: HashMap<String, Option<Vec<Load>>>,
}

impl Loads {
    fn vaddr(&mut self, path: &str, offset: u64) -> Option<u64> {
        let loads = self
            .by_path
            .entry(path.to_owned())
            .or_insert_with(|| read_loads(path));
        loads
            .as_ref()?
            .iter()
            .find(|(off, size, _)| offset >= *off && offset < off + size)
            .map(|(off, _, vaddr)| offset - off + vaddr)
    }
}

fn read_loads(path: &str) -> Option<Vec<Load>> {
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    let data = std::fs::read(path).ok()?;
    let file = ElfFile64::<object::Endianness>::parse(&*data).ok()?;
    let endian = file.endian();
    let headers = file.elf_header().program_headers(endian, &*data).ok()?;
    Some(
        headers
            .iter()
            .filter(|h| h.p_type(endian) == object::elf::PT_LOAD)
            .map(|h| (h.p_offset(endian), h.p_filesz(endian), h.p_vaddr(endian)))
            .collect(),
    )
}

/// The executable file mappings of `pid`, from `/proc/PID/maps`.
fn proc_maps(pid: i32) -> Vec<Mapping> {
    crate::host::proc_maps::read(Some(pid))
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.perms.exec && m.is_file())
        .filter_map(|m| {
            Some(Mapping {
                start: m.start,
                end: m.end,
                pgoff: m.offset,
                path: m.path?,
            })
        })
        .collect()
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Records decoded from ring-buffer bytes.
#[derive(Default)]
struct Decoded {
    /// (pid, stack of runtime addresses leaf first), one per sample.
    samples: Vec<(u32, Vec<u64>)>,
    /// Mappings per pid, in arrival order.
    mappings: HashMap<u32, Vec<Mapping>>,
    /// Parent of each forked process: a child that has not exec'd shares its
    /// parent's mappings.
    parent_of: HashMap<u32, u32>,
    lost: u64,
}

/// Decodes `PERF_RECORD_*` records of an event with sample_type IP|TID|CALLCHAIN.
/// Malformed or truncated records end the decoding of that buffer.
fn decode(bytes: &[u8], out: &mut Decoded) {
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let (Some(kind), Some(size)) = (u32_at(bytes, at), bytes.get(at + 6..at + 8)) else {
            return;
        };
        let size = u16::from_ne_bytes([size[0], size[1]]) as usize;
        if size < 8 || at + size > bytes.len() {
            return;
        }
        let record = &bytes[at + 8..at + size];
        match kind {
            RECORD_SAMPLE => {
                // ip, pid, tid, nr, ips[nr]
                let (Some(ip), Some(pid), Some(nr)) =
                    (u64_at(record, 0), u32_at(record, 8), u64_at(record, 16))
                else {
                    return;
                };
                let chain: Vec<u64> = (0..nr.min(512) as usize)
                    .map_while(|i| u64_at(record, 24 + 8 * i))
                    .filter(|&a| a < CONTEXT_MARKER_MIN)
                    .collect();
                // The chain starts with the sampled IP itself; keep it once.
                let callers = if chain.first() == Some(&ip) {
                    &chain[1..]
                } else {
                    &chain[..]
                };
                let mut stack = vec![ip];
                stack.extend_from_slice(callers);
                out.samples.push((pid, stack));
            }
            RECORD_MMAP2 => {
                // pid, tid, addr, len, pgoff, (maj, min, ino, ino_generation | build id), prot, flags, filename
                let (Some(pid), Some(addr), Some(len), Some(pgoff)) = (
                    u32_at(record, 0),
                    u64_at(record, 8),
                    u64_at(record, 16),
                    u64_at(record, 24),
                ) else {
                    return;
                };
                let (Some(prot), Some(name)) = (u32_at(record, 56), record.get(64..)) else {
                    return;
                };
                let path =
                    String::from_utf8_lossy(name.split(|&b| b == 0).next().unwrap_or_default())
                        .into_owned();
                if prot & libc::PROT_EXEC as u32 != 0 && path.starts_with('/') {
                    out.mappings.entry(pid).or_default().push(Mapping {
                        start: addr,
                        end: addr + len,
                        pgoff,
                        path,
                    });
                }
            }
            RECORD_FORK => {
                // pid, ppid, tid, ptid, time
                let (Some(pid), Some(ppid)) = (u32_at(record, 0), u32_at(record, 4)) else {
                    return;
                };
                if pid != ppid {
                    out.parent_of.insert(pid, ppid);
                }
            }
            RECORD_LOST => {
                if let Some(n) = u64_at(record, 8) {
                    out.lost += n;
                }
            }
            _ => {}
        }
        at += size;
    }
}

/// The mapping that holds `addr` in process `pid`: its own (the latest wins,
/// as an exec replaces earlier ones at the same address), else its parent's
/// (a forked child that has not exec'd), and so on up.
fn mapping_for(decoded: &Decoded, mut pid: u32, addr: u64) -> Option<&Mapping> {
    for _ in 0..64 {
        let own = decoded
            .mappings
            .get(&pid)
            .and_then(|maps| maps.iter().rev().find(|m| addr >= m.start && addr < m.end));
        if own.is_some() {
            return own;
        }
        pid = *decoded.parent_of.get(&pid)?;
    }
    None
}

fn locate(mapping: Option<&Mapping>, addr: u64, loads: &mut Loads) -> Location {
    match mapping {
        Some(m) => match loads.vaddr(&m.path, addr - m.start + m.pgoff) {
            Some(vaddr) => Location::Address {
                object: m.path.clone(),
                vaddr,
            },
            None => Location::Unknown(addr),
        },
        None => Location::Unknown(addr),
    }
}

struct Sampling {
    events: Vec<Event>,
    rings: Vec<RingBuffer>,
}

impl Sampling {
    fn open(pid: i32, period_ns: u64, from_exec: bool) -> Result<Sampling, SampleError> {
        let attr = EventAttr {
            sample_period: period_ns,
            sample_type: perf::SAMPLE_IP | perf::SAMPLE_TID | perf::SAMPLE_CALLCHAIN,
            exclude_kernel: true,
            exclude_callchain_kernel: true,
            inherit: true,
            disabled: from_exec,
            enable_on_exec: from_exec,
            side_band: true,
            sample_max_stack: 127,
            ..EventAttr::counting(EventType::Software, perf::SW_CPU_CLOCK)
        };
        let mut events = Vec::new();
        let mut rings = Vec::new();
        for cpu in perf::online_cpus() {
            let event =
                Event::open(&attr, pid, cpu).map_err(|e| SampleError::Open(e.to_string()))?;
            let ring =
                RingBuffer::map(&event, 128).map_err(|e| SampleError::Open(e.to_string()))?;
            events.push(event);
            rings.push(ring);
        }
        Ok(Sampling { events, rings })
    }

    fn drain(&mut self, bytes: &mut Vec<u8>, decoded: &mut Decoded) {
        for ring in &mut self.rings {
            bytes.clear();
            ring.read_into(bytes);
            decode(bytes, decoded);
        }
    }

    fn wait_for_data(&self, timeout: Duration) {
        let fds: Vec<_> = self.events.iter().map(|e| e.as_fd()).collect();
        let _ = perf::poll_readable(&fds, timeout);
    }
}

/// Samples `target` every `period_ns` nanoseconds of CPU time.
pub fn sample(target: &Target, period_ns: u64) -> Result<Sampled, SampleError> {
    let mut decoded = Decoded::default();
    let mut bytes = Vec::new();
    let mut exit = None;
    match target {
        Target::Command(argv) => {
            let program = argv
                .first()
                .ok_or_else(|| SampleError::Other("no command given".into()))?;
            let path = crate::launch::resolve_program(program)
                .map_err(|_| SampleError::NotFound(program.clone()))?;
            let c_path = CString::new(path.as_os_str().as_encoded_bytes())
                .map_err(|_| SampleError::NotFound(program.clone()))?;
            let c_argv: Vec<CString> = argv
                .iter()
                .map(|a| CString::new(a.as_bytes()))
                .collect::<Result<_, _>>()
                .map_err(|_| SampleError::Other("an argument contains a NUL byte".into()))?;
            let child = process::spawn_stopped(&c_path, &c_argv)
                .map_err(|e| SampleError::Other(e.to_string()))?;
            let pid = child.pid();
            let mut sampling = match Sampling::open(pid, period_ns, true) {
                Ok(s) => s,
                Err(e) => {
                    drop(child);
                    return Err(e);
                }
            };
            match child
                .release()
                .map_err(|e| SampleError::Other(e.to_string()))?
            {
                Ok(_) => {}
                Err(failed) => {
                    let _ = process::wait(pid);
                    return Err(SampleError::Other(format!(
                        "{program}: {}",
                        std::io::Error::from_raw_os_error(failed.errno)
                    )));
                }
            }
            // Ctrl-C goes to the command (same process group); we stay to write the profile.
            let _interrupts = process::IgnoreInterrupts::new();
            let waiter = std::thread::spawn(move || process::wait(pid));
            while !waiter.is_finished() {
                sampling.wait_for_data(Duration::from_millis(50));
                sampling.drain(&mut bytes, &mut decoded);
            }
            exit = Some(
                waiter
                    .join()
                    .map_err(|_| SampleError::Other("wait thread panicked".into()))?
                    .map_err(|e| SampleError::Other(e.to_string()))?
                    .0,
            );
            sampling.drain(&mut bytes, &mut decoded);
        }
        Target::Pid { pid, duration } => {
            let before = proc_maps(*pid);
            if before.is_empty() && !process::exists(*pid) {
                return Err(SampleError::Other(format!("no process {pid}")));
            }
            let mut sampling = Sampling::open(*pid, period_ns, false)?;
            decoded.mappings.insert(*pid as u32, before);
            let until = Instant::now() + *duration;
            while Instant::now() < until && process::exists(*pid) {
                sampling.wait_for_data(
                    Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
                );
                sampling.drain(&mut bytes, &mut decoded);
            }
            // Mappings made while sampling, for samples not covered by MMAP2 records.
            let after = proc_maps(*pid);
            decoded
                .mappings
                .entry(*pid as u32)
                .or_default()
                .extend(after);
            sampling.drain(&mut bytes, &mut decoded);
        }
    }
    let mut loads = Loads::default();
    let mut profile = Profile {
        event: "cpu-clock".into(),
        stacks: Vec::new(),
    };
    for (pid, stack) in &decoded.samples {
        let frames = stack
            .iter()
            .map(|&a| locate(mapping_for(&decoded, *pid, a), a, &mut loads))
            .collect();
        profile.stacks.push((1, frames));
    }
    profile.normalize();
    Ok(Sampled {
        profile,
        exit,
        lost: decoded.lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn decodes_samples_and_mappings() {
        let mut sample = Vec::new();
        sample.extend_from_slice(&0x401000u64.to_ne_bytes());
        sample.extend_from_slice(&7u32.to_ne_bytes());
        sample.extend_from_slice(&7u32.to_ne_bytes());
        sample.extend_from_slice(&3u64.to_ne_bytes());
        for a in [u64::MAX - 511, 0x401000, 0x402000] {
            sample.extend_from_slice(&a.to_ne_bytes());
        }
        let mut mmap = Vec::new();
        mmap.extend_from_slice(&7u32.to_ne_bytes());
        mmap.extend_from_slice(&7u32.to_ne_bytes());
        for v in [0x400000u64, 0x10000, 0] {
            mmap.extend_from_slice(&v.to_ne_bytes());
        }
        mmap.extend_from_slice(&[0u8; 24]);
        mmap.extend_from_slice(&((libc::PROT_READ | libc::PROT_EXEC) as u32).to_ne_bytes());
        mmap.extend_from_slice(&0u32.to_ne_bytes());
        mmap.extend_from_slice(b"/bin/true\0\0\0\0\0\0\0");
        let mut bytes = record(RECORD_MMAP2, &mmap);
        bytes.extend(record(RECORD_SAMPLE, &sample));
        bytes.extend(record(99, &[0u8; 8]));
        let mut out = Decoded::default();
        decode(&bytes, &mut out);
        assert_eq!(out.samples, vec![(7, vec![0x401000, 0x402000])]);
        assert_eq!(out.mappings[&7][0].path, "/bin/true");
        assert_eq!(out.mappings[&7][0].end, 0x410000);
    }

    #[test]
    fn forked_children_use_their_parents_mappings() {
        let mut fork = Vec::new();
        for v in [9u32, 7, 9, 7] {
            fork.extend_from_slice(&v.to_ne_bytes());
        }
        fork.extend_from_slice(&0u64.to_ne_bytes());
        let mut out = Decoded::default();
        decode(&record(RECORD_FORK, &fork), &mut out);
        out.mappings.insert(
            7,
            vec![Mapping {
                start: 0x1000,
                end: 0x2000,
                pgoff: 0,
                path: "/bin/x".into(),
            }],
        );
        assert_eq!(
            mapping_for(&out, 9, 0x1800).map(|m| m.path.as_str()),
            Some("/bin/x")
        );
        assert!(mapping_for(&out, 9, 0x3000).is_none());
        assert!(mapping_for(&out, 42, 0x1800).is_none());
    }

    #[test]
    fn truncated_records_stop_decoding_without_panicking() {
        let mut out = Decoded::default();
        decode(&[9, 0, 0, 0, 0, 0, 200, 0, 1, 2, 3], &mut out);
        decode(&[], &mut out);
        decode(&[0xff; 7], &mut out);
        assert!(out.samples.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let mut out = Decoded::default();
            decode(&bytes, &mut out);
        }
    }

    #[test]
    fn samples_a_command() {
        let target = Target::Command(vec![
            "sh".into(),
            "-c".into(),
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done".into(),
        ]);
        match sample(&target, 100_000) {
            Ok(s) => {
                assert!(matches!(s.exit, Some(process::ExitKind::Exited(0))));
                assert!(s.profile.total() > 0, "no samples");
                let resolved = s
                    .profile
                    .stacks
                    .iter()
                    .filter(|(_, st)| matches!(st[0], Location::Address { .. }))
                    .count();
                assert!(
                    resolved > 0,
                    "{:?}",
                    s.profile.stacks.iter().take(3).collect::<Vec<_>>()
                );
            }
            Err(SampleError::Open(e)) => {
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::PerfEvents,
                    "cannot open sampling events here: {e}"
                )
            }
            Err(e) => panic!("{e}"),
        }
    }
}
