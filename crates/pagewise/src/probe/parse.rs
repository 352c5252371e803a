//! Parsers for the text formats of `/proc`, `/sys` and glibc's tunables list.
//! Pure functions: every one is tested against fixture text.

/// The selected word of a sysfs mode file such as `always [madvise] never`.
pub fn bracketed_mode(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    let word = text[start + 1..end].trim();
    (!word.is_empty()).then(|| word.to_owned())
}

/// Bytes in a sysfs huge page folder name: `hugepages-2048kB` -> 2 MiB.
pub fn hugepages_dir_bytes(name: &str) -> Option<u64> {
    let kib = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

/// Bytes in a cache size such as `48K`, `2048K`, `105M`.
pub fn cache_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let mult = match unit.trim() {
        "" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The first `model name` in `/proc/cpuinfo`.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// The mount point of tracefs in `/proc/mounts`, else debugfs's `tracing` folder.
pub fn tracefs_mount(mounts: &str) -> Option<String> {
    let mut debugfs = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (_dev, Some(point), Some(fstype)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        match fstype {
            "tracefs" => return Some(point.to_owned()),
            "debugfs" if debugfs.is_none() => debugfs = Some(format!("{point}/tracing")),
            _ => {}
        }
    }
    debugfs
}

/// One glibc tunable from `ld.so --list-tunables`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunable {
    /// Full name, for example `glibc.malloc.mmap_threshold`.
    pub name: String,
    /// The value in force, parsed from decimal or `0x` hex.
    pub value: Option<u64>,
}

/// Parses `ld.so --list-tunables` output: `name: value (min: a, max: b)`.
pub fn tunables(text: &str) -> Vec<Tunable> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            if !name.starts_with("glibc.") {
                return None;
            }
            let raw = rest.split('(').next().unwrap_or("").trim();
            Some(Tunable {
                name: name.to_owned(),
                value: parse_c_integer(raw),
            })
        })
        .collect()
}

/// An integer in C notation: decimal or `0x` hex.
pub fn parse_c_integer(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// NUMA node numbers from the entries of `/sys/devices/system/node`.
pub fn numa_nodes(entries: &[String]) -> Vec<u32> {
    let mut nodes: Vec<u32> = entries
        .iter()
        .filter_map(|e| e.strip_prefix("node")?.parse().ok())
        .collect();
    nodes.sort_unstable();
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_modes() {
        assert_eq!(
            bracketed_mode("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            bracketed_mode("[always] madvise never\n").as_deref(),
            Some("always")
        );
        assert_eq!(
            bracketed_mode("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            bracketed_mode("always inherit madvise [never]").as_deref(),
            Some("never")
        );
        assert_eq!(bracketed_mode("always madvise never"), None);
        assert_eq!(bracketed_mode("[]"), None);
        assert_eq!(bracketed_mode(""), None);
    }

    #[test]
    fn hugepage_folders() {
        assert_eq!(hugepages_dir_bytes("hugepages-2048kB"), Some(2 << 20));
        assert_eq!(hugepages_dir_bytes("hugepages-1048576kB"), Some(1 << 30));
        assert_eq!(hugepages_dir_bytes("hugepages-64kB"), Some(64 << 10));
        assert_eq!(hugepages_dir_bytes("hugepages-xkB"), None);
        assert_eq!(hugepages_dir_bytes("enabled"), None);
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(cache_size_bytes("48K"), Some(48 << 10));
        assert_eq!(cache_size_bytes("107520K"), Some(107520 << 10));
        assert_eq!(cache_size_bytes("2M"), Some(2 << 20));
        assert_eq!(cache_size_bytes("512"), Some(512));
        assert_eq!(cache_size_bytes("12Q"), None);
        assert_eq!(cache_size_bytes(""), None);
    }

    #[test]
    fn cpu_model_name() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: fpu";
        assert_eq!(
            cpu_model(text).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(cpu_model("processor : 0"), None);
    }

    #[test]
    fn tracefs_mount_points() {
        let both = "sysfs /sys sysfs rw 0 0\ndebugfs /sys/kernel/debug debugfs rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(tracefs_mount(both).as_deref(), Some("/sys/kernel/tracing"));
        let debug_only = "debugfs /sys/kernel/debug debugfs rw 0 0\n";
        assert_eq!(
            tracefs_mount(debug_only).as_deref(),
            Some("/sys/kernel/debug/tracing")
        );
        assert_eq!(tracefs_mount("proc /proc proc rw 0 0\nbroken\n"), None);
    }

    #[test]
    fn tunables_list() {
        let text = "glibc.malloc.mmap_threshold: 0x0 (min: 0x0, max: 0xffffffffffffffff)\n\
                    glibc.cpu.x86_non_temporal_threshold: 0x28e0000 (min: 0x4040, max: 0xfffffffffffffff)\n\
                    glibc.malloc.perturb: 0 (min: 0, max: 255)\n\
                    glibc.cpu.x86_shstk:\n\
                    garbage line\n";
        let t = tunables(text);
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].name, "glibc.malloc.mmap_threshold");
        assert_eq!(t[0].value, Some(0));
        assert_eq!(t[1].value, Some(0x28e0000));
        assert_eq!(t[2].value, Some(0));
        assert_eq!(t[3].value, None);
    }

    #[test]
    fn numa_node_entries() {
        let entries: Vec<String> = ["has_cpu", "node1", "node0", "online", "nodex"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(numa_nodes(&entries), vec![0, 1]);
    }
}
