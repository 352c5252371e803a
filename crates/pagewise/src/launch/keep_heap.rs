//! The glibc malloc tunables behind `pagewise run --keep-heap`.
//!
//! glibc serves allocations above its mmap threshold with a fresh `mmap`,
//! which the kernel faults in and zeroes page by page, and returns them with
//! `munmap` on `free`. The threshold adapts upward to at most 32 MiB, so a
//! program that repeatedly allocates larger buffers pays for every page on
//! every allocation. Keeping freed memory in the heap instead needs four
//! tunables together (setting `mmap_threshold` alone only freezes the
//! adaptation):
//!
//! - `glibc.malloc.mmap_threshold` = 32 MiB, the largest glibc accepts;
//! - `glibc.malloc.mmap_max` = 0: larger blocks also come from the heap;
//! - `glibc.malloc.trim_threshold` = 256 GiB: freed memory at the top of the
//!   heap is not given back to the kernel;
//! - `glibc.malloc.top_pad` = the largest expected block (default 64 MiB):
//!   each heap growth takes that much extra, so the next large block fits.
//!
//! The cost is memory: the process keeps its peak heap resident until it
//! exits, and fragmentation can hold more than that. Thread arenas other than
//! the main one are limited to 64 MiB heaps by glibc and still `mmap` blocks
//! larger than that.

use serde::Serialize;

/// glibc's largest accepted `mmap_threshold` on 64-bit (half its 64 MiB heap size).
pub const MAX_MMAP_THRESHOLD: u64 = 32 << 20;
/// The trim threshold set: high enough that the heap never shrinks in practice.
pub const TRIM_THRESHOLD: u64 = 256 << 30;
/// The default `top_pad`: room for one more large block at each heap growth.
pub const DEFAULT_TOP_PAD: u64 = 64 << 20;
/// The largest `top_pad` pagewise sets: 1 GiB. The pad only saves heap
/// growths (a larger block still fits: the heap grows by the block plus the
/// pad), so more buys nothing, while every growth asks the kernel for the
/// pad at once: with `mmap_max=0` malloc has no other source, and a pad the
/// kernel refuses (above RAM + swap under the default overcommit heuristic;
/// 64 GiB on a 23 GiB machine, 16 TiB anywhere) makes every malloc fail, so
/// that even python3 exits at start-up.
pub const MAX_TOP_PAD: u64 = 1 << 30;

/// One tunable set (or kept from the user's environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tunable {
    /// Full name, e.g. `glibc.malloc.trim_threshold`.
    pub name: &'static str,
    /// The value pagewise wants.
    pub value: u64,
    /// Whether the user's `GLIBC_TUNABLES` already set it (their value is kept).
    pub kept_user_value: bool,
}

/// The `GLIBC_TUNABLES` a run sets for `--keep-heap`, `--thp-heap` or both,
/// as `--report` prints it and the `PAGEWISE_REPORT` file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeapTunables {
    /// The fixes asked for, `keep-heap` and/or `thp-heap`.
    pub fixes: Vec<&'static str>,
    /// The program that reads them (for a script, its interpreter).
    pub program: String,
    /// Each tunable wanted, with whether the user's own value was kept.
    pub set: Vec<Tunable>,
    /// The whole value the program gets.
    pub glibc_tunables: String,
}

impl HeapTunables {
    /// The tunables for `fixes` read by `program`: `wanted` [`merge`]d into
    /// the user's `existing` value. Costs a pass over the existing value.
    pub fn new(
        fixes: Vec<&'static str>,
        program: String,
        wanted: &[(&'static str, u64)],
        existing: Option<&str>,
    ) -> HeapTunables {
        let (glibc_tunables, set) = merge(existing, wanted);
        HeapTunables {
            fixes,
            program,
            set,
            glibc_tunables,
        }
    }
}

/// The tunables for a given `top_pad` (bytes), in the order they are set.
pub fn tunables(top_pad: u64) -> Vec<(&'static str, u64)> {
    vec![
        ("glibc.malloc.mmap_threshold", MAX_MMAP_THRESHOLD),
        ("glibc.malloc.mmap_max", 0),
        ("glibc.malloc.trim_threshold", TRIM_THRESHOLD),
        ("glibc.malloc.top_pad", top_pad),
    ]
}

/// Builds the `GLIBC_TUNABLES` value for `--keep-heap` alone: [`merge`] of
/// [`tunables`]`(top_pad)`.
pub fn glibc_tunables_env(existing: Option<&str>, top_pad: u64) -> (String, Vec<Tunable>) {
    merge(existing, &tunables(top_pad))
}

/// Builds the `GLIBC_TUNABLES` value: the user's existing settings first and
/// unchanged (an explicit user choice wins), then `wanted` for names they did
/// not set. Returns the value and what was decided for each of `wanted`.
/// Costs a pass over the existing value.
pub fn merge(existing: Option<&str>, wanted: &[(&'static str, u64)]) -> (String, Vec<Tunable>) {
    let existing = existing.unwrap_or("").trim_matches(':');
    let user_names: Vec<&str> = existing
        .split(':')
        .filter_map(|item| item.split_once('=').map(|(name, _)| name.trim()))
        .collect();
    let mut parts: Vec<String> = if existing.is_empty() {
        Vec::new()
    } else {
        vec![existing.to_owned()]
    };
    let mut decided = Vec::new();
    for &(name, value) in wanted {
        let kept = user_names.contains(&name);
        if !kept {
            parts.push(format!("{name}={value}"));
        }
        decided.push(Tunable {
            name,
            value,
            kept_user_value: kept,
        });
    }
    (parts.join(":"), decided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_environment_gets_all_four() {
        let (env, decided) = glibc_tunables_env(None, 128 << 20);
        assert_eq!(
            env,
            "glibc.malloc.mmap_threshold=33554432:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=274877906944:glibc.malloc.top_pad=134217728"
        );
        assert!(decided.iter().all(|t| !t.kept_user_value));
    }

    #[test]
    fn user_settings_win_and_are_kept() {
        let (env, decided) = glibc_tunables_env(
            Some("glibc.malloc.top_pad=1:glibc.cpu.hwcaps=-AVX512F"),
            DEFAULT_TOP_PAD,
        );
        assert!(
            env.starts_with("glibc.malloc.top_pad=1:glibc.cpu.hwcaps=-AVX512F:"),
            "{env}"
        );
        assert_eq!(env.matches("top_pad").count(), 1);
        let pad = decided
            .iter()
            .find(|t| t.name == "glibc.malloc.top_pad")
            .unwrap();
        assert!(pad.kept_user_value);
    }
}
