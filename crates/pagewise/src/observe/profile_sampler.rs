//! Sampling user instruction pointers with call chains (`cpu-clock`, which
//! works without a PMU) from a command it starts or a process already running,
//! into a [`Profile`] of link-time addresses: behind `pagewise text profile`.
//!
//! It runs on `stat`'s pipeline: the [`Target`] is started stopped or attached
//! to ([`super::target`]), one sampling event per CPU and thread follows it
//! and its children (`inherit`, [`session::open_profile_sampling`]), the reader
//! thread decodes the ring buffers ([`super::record`]) into the collector's
//! stacks and address spaces (`MMAP2` records, and `/proc/PID/maps` for
//! mappings made before attaching), and each address becomes a link-time
//! address through its file's program headers ([`LinkAddresses`]).
//!
//! Cost while the program runs: one sample per period of user CPU time per
//! thread, with its call chain (up to 127 frames); a 512 KiB ring buffer per CPU.

use super::address_spaces::{AddressSpaces, LinkAddresses};
use super::collect::Collector;
use super::session::{self, Env, Plan};
use super::target::{self, StoppedCommand, Target, TargetError};
use crate::sys::process::{self, ExitKind};
use crate::text::profile::{Location, Profile};
use std::time::{Duration, Instant};

/// The outcome of a sampling run.
#[derive(Debug)]
pub struct SampledProfile {
    /// The samples.
    pub profile: Profile,
    /// The command's exit, when one was started.
    pub exit: Option<ExitKind>,
    /// Samples the kernel dropped because a ring buffer was full.
    pub lost: u64,
}

/// Why sampling could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The command could not be started, or the process attached to.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The events could not be opened (privilege, paranoid level).
    #[error("cannot sample: {0} (see `pagewise doctor`: perf_event_paranoid, root)")]
    Open(String),
}

/// Samples `target` every `period_ns` nanoseconds of CPU time: a command to
/// its exit, or a running process for its window (or until it exits).
pub fn sample_profile(target: &Target, period_ns: u64) -> Result<SampledProfile, ProfileError> {
    let env = Env::probe();
    let (collector, exit) = match target {
        Target::Command(argv) => sample_command(&env, argv, period_ns)?,
        Target::Pid { pid, duration } => sample_process(&env, *pid, *duration, period_ns)?,
    };
    Ok(SampledProfile {
        profile: profile_of(&collector),
        exit,
        lost: collector.lost,
    })
}

fn sample_command(
    env: &Env,
    argv: &[std::ffi::OsString],
    period_ns: u64,
) -> Result<(Collector, Option<ExitKind>), ProfileError> {
    let command = StoppedCommand::spawn(argv)?;
    let pid = command.pid();
    // Signals asking to stop go to the command (the terminal's Ctrl-C reaches
    // it anyway); we stay to write the profile.
    let forward = process::ForwardSignals::to(pid as u32);
    let plan = Plan {
        tasks: vec![pid],
        on_exec: true,
        sites: false,
    };
    // On an error the stopped child is dropped, which kills it.
    let sampling = session::open_profile_sampling(env, &plan, period_ns)
        .map_err(|e| ProfileError::Open(e.to_string()))?;
    let running = session::start(
        Some(sampling),
        AddressSpaces::new(),
        session::live_set(pid),
        None,
    );
    if let Err(e) = command.release() {
        drop(running.finish());
        return Err(e.into());
    }
    running.go();
    let waited = process::wait(pid);
    drop(forward);
    let (collector, _) = running.finish();
    let (exit, _) = waited.map_err(TargetError::from)?;
    Ok((collected(collector)?, Some(exit)))
}

fn sample_process(
    env: &Env,
    pid: i32,
    duration: Duration,
    period_ns: u64,
) -> Result<(Collector, Option<ExitKind>), ProfileError> {
    let tasks = target::attach_tasks(pid)?;
    let _ = process::raise_nofile_limit();
    let mut spaces = AddressSpaces::new();
    // Without the mappings made before attaching, samples in them stay unresolved.
    let _ = target::add_mappings(pid, &mut spaces);
    let plan = Plan {
        tasks,
        on_exec: false,
        sites: false,
    };
    let sampling = session::open_profile_sampling(env, &plan, period_ns)
        .map_err(|e| ProfileError::Open(e.to_string()))?;
    let start = Instant::now();
    let running = session::start(Some(sampling), spaces, session::live_set(pid), None);
    running.go();
    target::watch_window(start, duration, || process::exists(pid));
    let (collector, _) = running.finish();
    let mut collector = collected(collector)?;
    // Mappings made while sampling whose records were lost.
    let _ = target::add_mappings(pid, &mut collector.spaces);
    Ok((collector, None))
}

/// The collector of a run started with sampling open (the reader always returns one).
fn collected(collector: Option<Collector>) -> Result<Collector, ProfileError> {
    collector.ok_or_else(|| ProfileError::Open("the ring-buffer reader did not run".to_owned()))
}

/// The sampled stacks as a profile: each address as a link-time address in
/// its object, or unknown (JIT code, the vDSO, a file that cannot be read).
fn profile_of(collector: &Collector) -> Profile {
    let mut link = LinkAddresses::new(&collector.spaces);
    let mut profile = Profile {
        event: "cpu-clock".into(),
        stacks: Vec::new(),
    };
    for (&stack, &samples) in &collector.call_stacks {
        let key = &collector.stacks[stack as usize];
        let frames = key
            .chain
            .iter()
            .map(|&addr| match link.locate(key.pid, addr) {
                Some((object, vaddr)) => Location::Address {
                    object: object.to_owned(),
                    vaddr,
                },
                None => Location::Unknown(addr),
            })
            .collect();
        profile.stacks.push((samples, frames));
    }
    profile.normalize();
    profile
}

#[cfg(test)]
mod tests {
    use super::super::collect::Sampled;
    use super::super::record::{build, Sample};
    use super::*;
    use crate::host::proc_maps;
    use crate::sys::perf::{SAMPLE_CALLCHAIN, SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID};
    use std::collections::HashMap;

    const ST: u64 = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_CALLCHAIN;

    #[test]
    fn stacks_become_link_time_addresses_of_their_objects() {
        // This test binary's own mappings stand in for a sampled process.
        let pid = std::process::id();
        let mut spaces = AddressSpaces::new();
        spaces.add_maps(pid, &proc_maps::read(None).unwrap());
        let here = stacks_become_link_time_addresses_of_their_objects as *const () as u64;
        let nowhere = 0x10;
        let mut c = Collector::new(
            HashMap::from([(1, (Sampled::CallStacks, ST))]),
            Default::default(),
            spaces,
            session::live_set(pid as i32),
        );
        let chain = build::chain(&[here, nowhere]);
        let sample = Sample {
            id: 1,
            ip: Some(here),
            pid,
            tid: pid,
            time: None,
            addr: None,
            period: None,
            chain: &chain,
            raw: None,
            stack: None,
        };
        let record = build::sample(ST, &sample);
        c.consume(&[record.clone(), record]);
        let profile = profile_of(&c);
        assert_eq!(profile.total(), 2);
        assert_eq!(profile.stacks.len(), 1, "{:?}", profile.stacks);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        match &profile.stacks[0].1[..] {
            [Location::Address { object, vaddr }, Location::Unknown(a)] => {
                assert_eq!(std::path::Path::new(object), exe);
                assert_ne!(*vaddr, 0);
                assert_eq!(*a, nowhere);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn samples_a_command() {
        // Sampling a command installs `ForwardSignals`, as a test of it does.
        let _serial = crate::sys::process::FORWARD_SIGNALS_TESTS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let target = Target::Command(vec![
            "sh".into(),
            "-c".into(),
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done".into(),
        ]);
        match sample_profile(&target, 100_000) {
            Ok(s) => {
                assert!(matches!(s.exit, Some(ExitKind::Exited(0))));
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
            Err(ProfileError::Open(e)) => {
                pagewise_testkit::skip!(
                    pagewise_testkit::Need::PerfEvents,
                    "cannot open sampling events here: {e}"
                )
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_missing_command_or_process_is_a_target_error() {
        let missing = Target::Command(vec!["no-such-program-pagewise".into()]);
        assert!(matches!(
            sample_profile(&missing, 1_000_000),
            Err(ProfileError::Target(TargetError::NotFound(_)))
        ));
        let gone = Target::Pid {
            pid: i32::MAX,
            duration: Duration::from_millis(10),
        };
        assert!(matches!(
            sample_profile(&gone, 1_000_000),
            Err(ProfileError::Target(TargetError::NoSuchProcess(_)))
        ));
    }
}
