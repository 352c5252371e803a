//! The processor as `/proc` and `/sys` describe it: its model name, the
//! caches of CPU 0 and the NUMA nodes. (What `cpuid` says is in
//! [`crate::sys::cpu`].) The parsers are pure and tested against fixture
//! text; the readers take a [`SysRoot`] so fixture trees can stand in for `/`.

use super::kernel_files::SysRoot;
use serde::Serialize;

const CACHE: &str = "/sys/devices/system/cpu/cpu0/cache";
const NODES: &str = "/sys/devices/system/node";

/// One cache level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// 1, 2, 3…
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// Size in bytes.
    pub size_bytes: u64,
}

/// Bytes in a cache size such as `48K`, `2048K`, `105M`.
pub fn parse_cache_size(text: &str) -> Option<u64> {
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
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// NUMA node numbers from the entries of `/sys/devices/system/node`.
pub fn parse_numa_nodes(entries: &[String]) -> Vec<u32> {
    let mut nodes: Vec<u32> = entries
        .iter()
        .filter_map(|e| e.strip_prefix("node")?.parse().ok())
        .collect();
    nodes.sort_unstable();
    nodes
}

/// The caches of CPU 0, in sysfs order (`index0`, `index1`…). A cache whose
/// size does not parse is left out and noted in `root`. Costs a directory
/// listing and three small reads per cache.
pub fn caches(root: &SysRoot) -> Vec<Cache> {
    root.list(CACHE)
        .unwrap_or_default()
        .iter()
        .filter(|name| name.starts_with("index"))
        .filter_map(|name| {
            let dir = format!("{CACHE}/{name}");
            let size_path = format!("{dir}/size");
            let size_text = root.read(&size_path)?;
            let Some(size_bytes) = parse_cache_size(&size_text) else {
                root.note(&size_path, format!("not a size: {size_text:?}"));
                return None;
            };
            Some(Cache {
                level: root.read_u64(&format!("{dir}/level"))? as u32,
                kind: root.read(&format!("{dir}/type"))?,
                size_bytes,
            })
        })
        .collect()
}

/// The size of the largest cache of CPU 0 on this machine (the last level),
/// if sysfs tells it.
pub fn largest_cache_bytes() -> Option<u64> {
    caches(&SysRoot::live()).iter().map(|c| c.size_bytes).max()
}

/// The size of CPU 0's largest data or unified cache at `level` (1, 2,
/// 3…) on this machine, if sysfs tells it. Costs what [`caches`] costs.
pub fn level_cache_bytes(level: u32) -> Option<u64> {
    caches(&SysRoot::live())
        .iter()
        .filter(|c| c.level == level && c.kind != "Instruction")
        .map(|c| c.size_bytes)
        .max()
}

/// The processor's `model name`, from `/proc/cpuinfo`.
pub fn model(root: &SysRoot) -> Option<String> {
    root.read("/proc/cpuinfo").and_then(|t| parse_cpu_model(&t))
}

/// The NUMA node numbers, sorted; empty when `/sys/devices/system/node`
/// cannot be listed. One directory listing.
pub fn numa_nodes(root: &SysRoot) -> Vec<u32> {
    root.list(NODES)
        .map(|e| parse_numa_nodes(&e))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("48K"), Some(48 << 10));
        assert_eq!(parse_cache_size("107520K"), Some(107520 << 10));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("12Q"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn cpu_model_name() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: fpu";
        assert_eq!(
            parse_cpu_model(text).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(parse_cpu_model("processor : 0"), None);
    }

    #[test]
    fn numa_node_entries() {
        let entries: Vec<String> = ["has_cpu", "node1", "node0", "online", "nodex"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(parse_numa_nodes(&entries), vec![0, 1]);
    }

    #[test]
    fn this_machine_has_caches() {
        let root = SysRoot::live();
        let found = caches(&root);
        if found.is_empty() {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Kernel,
                "sysfs describes no cache of CPU 0 here: {:?}",
                root.not_read()
            );
        }
        assert_eq!(
            largest_cache_bytes(),
            found.iter().map(|c| c.size_bytes).max()
        );
    }
}
