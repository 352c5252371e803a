//! What this process may inspect of others, as `stat --pid` needs to say
//! why the kernel refused it a process: whether its effective capabilities
//! hold `CAP_SYS_PTRACE` (`/proc/self/status`), and whether it runs in the
//! initial user namespace (`/proc/self/uid_map`). [`has_sys_ptrace`] and
//! [`maps_every_uid`] are pure; the readers cost one small file read each.

/// `CAP_SYS_PTRACE`'s bit in the capability sets (`linux/capability.h`).
const CAP_SYS_PTRACE: u32 = 19;

/// Whether the `CapEff` line of a `/proc/PID/status` text holds
/// `CAP_SYS_PTRACE`; `None` when there is no such line or it does not parse.
pub fn has_sys_ptrace(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// Whether a `/proc/PID/uid_map` text maps every uid to itself, as the
/// initial user namespace does (`0 0 4294967295`); a user namespace made
/// later (a rootless container, `unshare --user`) maps a part.
pub fn maps_every_uid(uid_map: &str) -> bool {
    let lines: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| !f.is_empty())
        .collect();
    matches!(lines.as_slice(), [only] if only.as_slice() == ["0", "0", "4294967295"])
}

/// Whether this process holds `CAP_SYS_PTRACE` in its effective set;
/// `None` when `/proc/self/status` cannot be read.
pub fn own_sys_ptrace() -> Option<bool> {
    has_sys_ptrace(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// Whether this process runs in the initial user namespace; `None` when
/// `/proc/self/uid_map` cannot be read.
pub fn in_initial_user_namespace() -> Option<bool> {
    Some(maps_every_uid(
        &std::fs::read_to_string("/proc/self/uid_map").ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_sys_ptrace_is_read_from_cap_eff() {
        // Root with every capability but CAP_SYS_RESOURCE (bit 24).
        let root = "Name:\tbash\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\n\
                    CapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\n";
        assert_eq!(has_sys_ptrace(root), Some(true));
        // A container's default set: no CAP_SYS_PTRACE.
        let container = "CapEff:\t00000000a80425fb\n";
        assert_eq!(has_sys_ptrace(container), Some(false));
        assert_eq!(has_sys_ptrace("CapEff:\t0000000000000000\n"), Some(false));
        assert_eq!(has_sys_ptrace("Name:\tx\n"), None);
        assert_eq!(has_sys_ptrace("CapEff:\tzz\n"), None);
    }

    #[test]
    fn only_the_identity_map_of_every_uid_is_the_initial_namespace() {
        assert!(maps_every_uid("         0          0 4294967295\n"));
        // `unshare --user --map-root-user`, a rootless container.
        assert!(!maps_every_uid("         0          0          1\n"));
        assert!(!maps_every_uid("0 1000 1\n1 100000 65536\n"));
        assert!(!maps_every_uid(""));
    }

    #[test]
    fn this_process_can_be_asked() {
        assert!(own_sys_ptrace().is_some());
        assert!(in_initial_user_namespace().is_some());
    }
}
