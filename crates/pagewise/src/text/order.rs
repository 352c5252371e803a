//! Function ordering by call-chain clustering (C3, Ottoni & Maher, CGO 2017)
//! and the page footprint of a profile before and after an order.

use super::function_table::FunctionTable;
use super::profile::{Location, Profile};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// Tuning of the clustering.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrderOptions {
    /// Clusters stop growing at this many bytes (a huge page by default).
    pub max_cluster_bytes: u64,
    /// A caller's cluster refuses a merge that would cut its density by more than this factor.
    pub caller_degrade_factor: f64,
    /// A callee joins its hottest caller only if that caller accounts for at least this share
    /// of the callee's samples.
    pub min_arc_probability: f64,
}

impl Default for OrderOptions {
    fn default() -> Self {
        OrderOptions {
            max_cluster_bytes: 2 << 20,
            caller_degrade_factor: 8.0,
            min_arc_probability: 0.1,
        }
    }
}

/// Whether a profile object names this binary (same path, or the same file name).
pub fn same_object(profile_object: &str, binary: &Path) -> bool {
    let binary_str = binary.to_string_lossy();
    if profile_object == binary_str {
        return true;
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    if let (Some(a), Some(b)) = (canonical(Path::new(profile_object)), canonical(binary)) {
        if a == b {
            return true;
        }
    }
    let name = |p: &str| p.rsplit('/').next().map(str::to_owned);
    name(profile_object) == name(&binary_str)
}

/// The function (index) and its link-time address for a location in `binary`.
pub fn resolve(location: &Location, table: &FunctionTable, binary: &Path) -> Option<(usize, u64)> {
    match location {
        Location::Address { object, vaddr } if same_object(object, binary) => {
            table.at(*vaddr).map(|i| (i, *vaddr))
        }
        Location::Symbol {
            object,
            name,
            offset,
        } if same_object(object, binary) => {
            let i = table.by_name(name)?;
            Some((i, table.functions()[i].vaddr.checked_add(*offset)?))
        }
        _ => None,
    }
}

/// A computed order.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    /// Hot functions, in the order to lay them out.
    pub functions: Vec<String>,
    /// Clusters formed.
    pub clusters: usize,
    /// Samples with at least one frame in a function of the binary: the
    /// stacks the call graph is built from. More than the footprint's
    /// [`Footprint::resolved_samples`] (those whose instruction pointer is in
    /// the binary) when the binary calls into other objects (libc, say) where
    /// samples land: such a stack still weighs the binary's callers.
    pub call_graph_samples: u64,
    /// All samples in the profile.
    pub total_samples: u64,
}

/// Computes a C3 order of the binary's functions that appear in the profile.
/// Cost: linear in the profile's frames plus a sort of the hot functions.
pub fn c3(
    profile: &Profile,
    table: &FunctionTable,
    binary: &Path,
    options: &OrderOptions,
) -> Order {
    let funcs = table.functions();
    // A function's own samples (it was the leaf) give its heat and density; an
    // arc counts samples where the caller's frame sits right above the callee's.
    let mut self_samples: HashMap<usize, u64> = HashMap::new();
    let mut arcs: HashMap<(usize, usize), u64> = HashMap::new();
    let mut call_graph_samples = 0;
    for (weight, stack) in &profile.stacks {
        let frames: Vec<Option<usize>> = stack
            .iter()
            .map(|l| resolve(l, table, binary).map(|(i, _)| i))
            .collect();
        if frames.iter().all(Option::is_none) {
            continue;
        }
        // Sums saturate: weights can add up past 2^64 (a merged or hand-made profile).
        call_graph_samples = weight.saturating_add(call_graph_samples);
        for f in frames.iter().flatten() {
            self_samples.entry(*f).or_default();
        }
        if let Some(leaf) = frames[0] {
            add(self_samples.entry(leaf).or_default(), *weight);
        }
        // Only directly adjacent frames that both resolve make an arc: a frame in
        // another object (libc's qsort calling back) breaks the chain.
        for pair in frames.windows(2) {
            if let [Some(callee), Some(caller)] = *pair {
                if callee != caller {
                    add(arcs.entry((caller, callee)).or_default(), *weight);
                }
            }
        }
    }
    let mut incoming: HashMap<usize, u64> = HashMap::new();
    let mut best_caller: HashMap<usize, (usize, u64)> = HashMap::new();
    for (&(caller, callee), &w) in &arcs {
        add(incoming.entry(callee).or_default(), w);
        let entry = best_caller.entry(callee).or_insert((caller, w));
        if w > entry.1 || (w == entry.1 && caller < entry.0) {
            *entry = (caller, w);
        }
    }
    let hotness = self_samples;
    let mut order: Vec<usize> = hotness.keys().copied().collect();
    order.sort_by(|a, b| hotness[b].cmp(&hotness[a]).then(a.cmp(b)));

    // Cluster state: each function starts alone.
    let mut cluster_of: HashMap<usize, usize> = order.iter().map(|&f| (f, f)).collect();
    let mut members: HashMap<usize, Vec<usize>> = order.iter().map(|&f| (f, vec![f])).collect();
    let mut size: HashMap<usize, u64> = order.iter().map(|&f| (f, funcs[f].size)).collect();
    let mut heat: HashMap<usize, u64> = order.iter().map(|&f| (f, hotness[&f])).collect();
    let density = |h: u64, s: u64| h as f64 / s.max(1) as f64;
    for &f in &order {
        let Some(&(caller, w)) = best_caller.get(&f) else {
            continue;
        };
        let total_in = incoming.get(&f).copied().unwrap_or(w).max(1);
        if (w as f64) < options.min_arc_probability * total_in as f64 {
            continue;
        }
        let (cf, cp) = (cluster_of[&f], cluster_of[&caller]);
        let merged_size = size[&cf].saturating_add(size[&cp]);
        if cf == cp || merged_size > options.max_cluster_bytes {
            continue;
        }
        let merged = density(heat[&cp].saturating_add(heat[&cf]), merged_size);
        if density(heat[&cp], size[&cp]) > merged * options.caller_degrade_factor {
            continue;
        }
        let moved = members.remove(&cf).unwrap_or_default();
        for &m in &moved {
            cluster_of.insert(m, cp);
        }
        members.get_mut(&cp).expect("live cluster").extend(moved);
        let (s, h) = (size.remove(&cf).unwrap_or(0), heat.remove(&cf).unwrap_or(0));
        add(size.get_mut(&cp).expect("live cluster"), s);
        add(heat.get_mut(&cp).expect("live cluster"), h);
    }
    let mut clusters: Vec<usize> = members.keys().copied().collect();
    clusters.sort_by(|a, b| {
        density(heat[b], size[b])
            .total_cmp(&density(heat[a], size[a]))
            .then(heat[b].cmp(&heat[a]))
            .then(a.cmp(b))
    });
    Order {
        functions: clusters
            .iter()
            .flat_map(|c| members[c].iter().map(|&f| funcs[f].name.clone()))
            .collect(),
        clusters: clusters.len(),
        call_graph_samples,
        total_samples: profile.total(),
    }
}

/// Pages covering shares of the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PageCounts {
    /// Distinct pages holding 50% of the resolved samples.
    pub p50: usize,
    /// … 90%.
    pub p90: usize,
    /// … 99%.
    pub p99: usize,
}

/// The hot-text footprint of a profile in one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Footprint {
    /// 4 KiB pages.
    pub pages_4k: PageCounts,
    /// 2 MiB pages.
    pub pages_2m: PageCounts,
    /// Samples whose instruction pointer (the leaf frame) resolved in the
    /// binary: at most [`Order::call_graph_samples`].
    pub resolved_samples: u64,
}

fn page_counts(addresses: &[(u64, u64)], page: u64) -> PageCounts {
    let mut weights: HashMap<u64, u64> = HashMap::new();
    let mut total = 0;
    for &(addr, w) in addresses {
        add(weights.entry(addr / page).or_default(), w);
        add(&mut total, w);
    }
    let mut sorted: Vec<u64> = weights.into_values().collect();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let covering = |share: f64| {
        let goal = (total as f64 * share).ceil() as u64;
        let mut sum = 0;
        for (i, &w) in sorted.iter().enumerate() {
            add(&mut sum, w);
            if sum >= goal {
                return i + 1;
            }
        }
        sorted.len()
    };
    PageCounts {
        p50: covering(0.5),
        p90: covering(0.9),
        p99: covering(0.99),
    }
}

/// New link-time addresses of functions when `order` is laid out first, from
/// the start of the binary's text, each aligned to `align`; the rest follow in
/// their original order. Computed from symbol sizes.
pub fn layout(table: &FunctionTable, order: &[String], align: u64) -> Vec<u64> {
    let funcs = table.functions();
    let mut new = vec![0u64; funcs.len()];
    let mut placed = vec![false; funcs.len()];
    let mut cursor = funcs.first().map_or(0, |f| f.vaddr);
    for name in order {
        if let Some(i) = table.by_name(name) {
            if !placed[i] {
                new[i] = place(&mut cursor, funcs[i].size, align);
                placed[i] = true;
            }
        }
    }
    for (i, f) in funcs.iter().enumerate() {
        if !placed[i] {
            new[i] = place(&mut cursor, f.size, align);
        }
    }
    new
}

/// The address of a function of `size` bytes placed at `cursor` aligned to
/// `align`; moves the cursor past it. Saturates at the top of the address
/// space (only a damaged symbol table gets there).
fn place(cursor: &mut u64, size: u64, align: u64) -> u64 {
    let at = cursor.checked_next_multiple_of(align).unwrap_or(u64::MAX);
    *cursor = at.saturating_add(size);
    at
}

/// `*sum += w`, saturating at 2^64 − 1.
fn add(sum: &mut u64, w: u64) {
    *sum = sum.saturating_add(w);
}

/// The footprint of the profile's leaf samples in `binary`, as laid out now
/// (`order` = None) or after applying an order.
pub fn footprint(
    profile: &Profile,
    table: &FunctionTable,
    binary: &Path,
    order: Option<&[String]>,
) -> Footprint {
    let new = order.map(|o| layout(table, o, 16));
    let mut addresses = Vec::new();
    for (w, stack) in &profile.stacks {
        let Some((f, addr)) = stack.first().and_then(|leaf| resolve(leaf, table, binary)) else {
            continue;
        };
        let addr = match &new {
            Some(new) => new[f].saturating_add(addr - table.functions()[f].vaddr),
            None => addr,
        };
        addresses.push((addr, *w));
    }
    Footprint {
        pages_4k: page_counts(&addresses, 4096),
        pages_2m: page_counts(&addresses, 2 << 20),
        resolved_samples: addresses
            .iter()
            .fold(0, |sum, (_, w)| sum.saturating_add(*w)),
    }
}

/// The order as a symbol ordering file for `ld.lld --symbol-ordering-file`
/// (one symbol per line) or, with `gold_sections`, for gold's
/// `--section-ordering-file` (one `.text.SYMBOL` section per line).
pub fn order_file(order: &Order, gold_sections: bool) -> String {
    let mut out = String::new();
    for f in &order.functions {
        if gold_sections {
            out.push_str(".text.");
        }
        out.push_str(f);
        out.push('\n');
    }
    out
}

/// Reads an order file written by [`order_file`] (either flavour).
pub fn read_order_file(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.strip_prefix(".text.").unwrap_or(l).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::function_table::Function;

    fn table() -> FunctionTable {
        // Hot functions far apart, cold filler between them.
        let mut v = Vec::new();
        for (i, name) in ["main", "hot_a", "cold_1", "hot_b", "cold_2", "hot_c"]
            .iter()
            .enumerate()
        {
            v.push(Function {
                name: name.to_string(),
                vaddr: 0x400000 + i as u64 * 0x10000,
                size: 0x100,
            });
        }
        FunctionTable::from_functions(v)
    }

    fn at(name: &str, t: &FunctionTable) -> Location {
        let f = &t.functions()[t.by_name(name).unwrap()];
        Location::Address {
            object: "/bin/app".into(),
            vaddr: f.vaddr + 8,
        }
    }

    fn profile(t: &FunctionTable) -> Profile {
        let mut p = Profile {
            event: "cpu-clock".into(),
            stacks: vec![
                (50, vec![at("hot_a", t), at("main", t)]),
                (30, vec![at("hot_b", t), at("hot_a", t), at("main", t)]),
                (20, vec![at("hot_c", t), at("main", t)]),
                (1, vec![at("cold_1", t), at("main", t)]),
            ],
        };
        p.normalize();
        p
    }

    #[test]
    fn c3_clusters_callers_with_callees() {
        let t = table();
        let order = c3(
            &profile(&t),
            &t,
            Path::new("/bin/app"),
            &OrderOptions::default(),
        );
        assert_eq!(order.total_samples, 101);
        assert_eq!(order.call_graph_samples, 101);
        let pos = |n: &str| order.functions.iter().position(|f| f == n).unwrap();
        assert!(pos("hot_a") < pos("cold_1"));
        assert_eq!(pos("hot_b"), pos("hot_a") + 1, "{:?}", order.functions);
        assert!(order.functions.len() == 5);
    }

    #[test]
    fn ordering_shrinks_the_footprint() {
        let t = table();
        let p = profile(&t);
        let bin = Path::new("/bin/app");
        let before = footprint(&p, &t, bin, None);
        let order = c3(&p, &t, bin, &OrderOptions::default());
        let after = footprint(&p, &t, bin, Some(&order.functions));
        assert_eq!(
            before.pages_4k.p99, 3,
            "hot_a, hot_b and hot_c sit on three pages"
        );
        assert_eq!(after.pages_4k.p99, 1);
        assert_eq!(before.resolved_samples, 101);
    }

    #[test]
    fn order_files_round_trip() {
        let order = Order {
            functions: vec!["a".into(), "b".into()],
            clusters: 1,
            call_graph_samples: 1,
            total_samples: 1,
        };
        assert_eq!(order_file(&order, false), "a\nb\n");
        assert_eq!(order_file(&order, true), ".text.a\n.text.b\n");
        assert_eq!(read_order_file(&order_file(&order, true)), vec!["a", "b"]);
    }

    #[test]
    fn other_objects_do_not_resolve() {
        let t = table();
        let foreign = Location::Address {
            object: "/lib/other.so".into(),
            vaddr: 0x400008,
        };
        assert!(resolve(&foreign, &t, Path::new("/bin/app")).is_none());
    }
}
