//! From counted stacks to call sites: symbolize each stack, recover the frame
//! that frame-pointer unwinding drops when the leaf is frameless library code
//! (the caller of `memset`, `malloc`…), and name the first frame in the
//! program's own code as "the site" (the leaf when no frame is, said in
//! [`Site::own_code`]).

#[cfg(test)]
use super::address_spaces::AddressSpaces;
use super::collect::StackKey;
use super::report::{ChurnSite, Location, Site};
use super::runtimes;
use super::symbolizer::{Frame, Symbolizer};
use std::collections::HashMap;

/// A symbolized stack: logical frames innermost first (inlined functions expanded).
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The frames.
    pub frames: Vec<Frame>,
    /// Index of the site in `frames`.
    pub site: usize,
}

/// Symbolizes one stack and picks its site.
///
/// Frame-pointer unwinding reads the caller from the frame of the nearest
/// function that keeps a frame pointer, so when the leaf is frameless library
/// code the leaf's caller is skipped. When the leaf is not the program's own
/// code, the first word on the stack that is a return address into the
/// program's own code (the instruction before it is a call) is that caller; it
/// is put back after the leading library frames unless it is already there.
pub fn resolve(sym: &mut Symbolizer<'_>, key: &StackKey) -> Resolved {
    let mut frames: Vec<Frame> = Vec::new();
    let mut leaf_frames = 0;
    for (i, &ip) in key.chain.iter().enumerate() {
        frames.extend(sym.frames(key.pid, ip, i > 0).iter().cloned());
        if i == 0 {
            leaf_frames = frames.len();
        }
    }
    if frames.is_empty() {
        frames.push(Frame {
            function: "[unknown]".to_owned(),
            file: None,
            line: None,
            object: "[unknown]".to_owned(),
            own: false,
            jit: false,
        });
    }
    let recovered = key
        .words
        .iter()
        .find(|&&w| sym.is_return_address(key.pid, w))
        .map(|&w| sym.frames(key.pid, w, true));
    if let Some(rec) = recovered {
        // Library leaf: after the leading library frames. Own leaf: right after it.
        let at = if frames[0].own {
            leaf_frames
        } else {
            frames.iter().take_while(|f| !f.own).count()
        };
        let already = frames
            .get(at)
            .is_some_and(|f| rec.first().is_some_and(|r| r.function == f.function));
        if !already {
            frames.splice(at..at, rec.iter().cloned());
        }
    }
    let site = frames.iter().position(|f| f.own).unwrap_or(0);
    Resolved { frames, site }
}

fn location(f: &Frame) -> Location {
    Location {
        function: f.function.clone(),
        file: f.file.clone(),
        line: f.line,
    }
}

/// Function, file and line: what makes two stacks the same site.
type SiteKey = (String, Option<String>, Option<u32>);

/// Maximum callers listed for a site.
const MAX_CALLERS: usize = 8;

/// The callers after the site, up to the first frame no mapping holds (frame-pointer
/// walks through frameless code end in garbage).
fn callers(r: &Resolved) -> Vec<Location> {
    r.frames[r.site + 1..]
        .iter()
        .take_while(|f| !f.function.starts_with("[unknown]"))
        .take(MAX_CALLERS)
        .map(location)
        .collect()
}

/// The runtime the site is in (in words, with how to see the script's
/// functions when they are hidden) and the innermost script function on the
/// stack, for sites in interpreters and JIT runtimes.
fn runtime_and_script(r: &Resolved) -> (Option<String>, Option<Location>) {
    let script = r
        .frames
        .iter()
        .filter(|f| f.jit)
        .find_map(|f| runtimes::script_location(&f.function));
    let runtime = r.frames[r.site..]
        .iter()
        .find_map(|f| runtimes::runtime_of(&f.object));
    (runtime.map(|rt| rt.label(script.is_some())), script)
}

/// Fault sites, most faults first, from stack counts.
pub fn fault_sites(
    sym: &mut Symbolizer<'_>,
    stacks: &[StackKey],
    counts: &HashMap<u32, u64>,
    limit: usize,
) -> Vec<Site> {
    let total: u64 = counts.values().sum();
    struct Acc {
        site: Site,
        best: u64,
    }
    let mut by_site: HashMap<SiteKey, Acc> = HashMap::new();
    for (&id, &n) in counts {
        let r = resolve(sym, &stacks[id as usize]);
        let f = &r.frames[r.site];
        let key = (f.function.clone(), f.file.clone(), f.line);
        let via = (r.site > 0).then(|| r.frames[0].function.clone());
        let callers = callers(&r);
        let (interpreter, script) = runtime_and_script(&r);
        let acc = by_site.entry(key).or_insert_with(|| Acc {
            site: Site {
                function: f.function.clone(),
                own_code: f.own,
                file: f.file.clone(),
                line: f.line,
                object: f.object.clone(),
                faults: 0,
                share: 0.0,
                via: via.clone(),
                callers: callers.clone(),
                interpreter: interpreter.clone(),
                script: script.clone(),
            },
            best: 0,
        });
        acc.site.faults += n;
        if n > acc.best {
            acc.best = n;
            acc.site.via = via;
            acc.site.callers = callers;
            acc.site.interpreter = interpreter;
            acc.site.script = script;
        }
    }
    let mut sites: Vec<Site> = by_site
        .into_values()
        .map(|mut a| {
            a.site.share = if total > 0 {
                a.site.faults as f64 / total as f64
            } else {
                0.0
            };
            a.site
        })
        .collect();
    sites.sort_by(|a, b| b.faults.cmp(&a.faults).then(a.function.cmp(&b.function)));
    sites.truncate(limit);
    sites
}

/// Churn sites (where heap mappings that were unmapped again were made), most bytes first.
pub fn churn_sites(
    sym: &mut Symbolizer<'_>,
    stacks: &[StackKey],
    churn: &HashMap<u32, super::churn::StackChurn>,
    limit: usize,
) -> Vec<ChurnSite> {
    let mut by_site: HashMap<SiteKey, (ChurnSite, HashMap<u64, u64>)> = HashMap::new();
    for (&id, c) in churn {
        let r = resolve(sym, &stacks[id as usize]);
        let f = &r.frames[r.site];
        // The function that called into the library (for example malloc), if not the site.
        let via = (r.site > 0).then(|| r.frames[r.site - 1].function.clone());
        let (interpreter, script) = runtime_and_script(&r);
        let entry = by_site
            .entry((f.function.clone(), f.file.clone(), f.line))
            .or_insert_with(|| {
                (
                    ChurnSite {
                        function: f.function.clone(),
                        own_code: f.own,
                        file: f.file.clone(),
                        line: f.line,
                        via,
                        cycles: 0,
                        bytes: 0,
                        sizes: vec![],
                        callers: callers(&r),
                        interpreter,
                        script,
                    },
                    HashMap::new(),
                )
            });
        entry.0.cycles += c.cycles;
        entry.0.bytes += c.bytes;
        for (&len, &n) in &c.sizes {
            *entry.1.entry(len).or_default() += n;
        }
    }
    let mut out: Vec<ChurnSite> = by_site
        .into_values()
        .map(|(mut s, sizes)| {
            let mut sizes: Vec<(u64, u64)> = sizes.into_iter().collect();
            sizes.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
            s.sizes = sizes.into_iter().map(|(len, _)| len).take(5).collect();
            s
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.function.cmp(&b.function)));
    out.truncate(limit);
    out
}

/// Folded stacks (`root;...;leaf`, count) for a flame graph, rooted at the process name.
pub fn folded(
    sym: &mut Symbolizer<'_>,
    stacks: &[StackKey],
    counts: &HashMap<u32, u64>,
    names: &HashMap<u32, String>,
) -> Vec<(String, u64)> {
    let mut out: HashMap<String, u64> = HashMap::new();
    for (&id, &n) in counts {
        let key = &stacks[id as usize];
        let r = resolve(sym, key);
        let mut parts: Vec<String> = Vec::with_capacity(r.frames.len() + 1);
        parts.push(
            names
                .get(&key.pid)
                .cloned()
                .unwrap_or_else(|| format!("pid {}", key.pid)),
        );
        // Flame graph frames may not contain ';' (the separator).
        parts.extend(r.frames.iter().rev().map(|f| f.function.replace(';', ":")));
        *out.entry(parts.join(";")).or_default() += n;
    }
    let mut v: Vec<(String, u64)> = out.into_iter().collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::proc_maps;
    use object::{Object, ObjectSegment, ObjectSymbol};

    /// A stack of C library code only (xz's fault stacks: its own threads in
    /// liblzma, walks that stop in libc): its site is the leaf, said to be
    /// no code of the program's own, and a function libc exports is named
    /// from `.dynsym` (Debian's libc has no `.symtab`).
    #[test]
    fn a_stack_of_library_code_only_is_its_leaf_and_not_own_code() {
        let pid = std::process::id();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let entries = proc_maps::parse(&maps);
        let Some(text) = entries
            .iter()
            .find(|e| e.perms.exec && e.path.as_deref().is_some_and(|p| p.ends_with("/libc.so.6")))
        else {
            // Not glibc (musl, static): nothing here to look up.
            return;
        };
        let data = std::fs::read(text.path.as_deref().unwrap()).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let getpid = obj
            .dynamic_symbols()
            .find(|s| s.name() == Ok("getpid"))
            .expect("libc exports getpid")
            .address();
        let file_offset = obj
            .segments()
            .find_map(|seg| {
                let (start, size) = seg.file_range();
                let within = getpid.checked_sub(seg.address()).filter(|&d| d < size);
                within.map(|d| start + d)
            })
            .expect("getpid is in a segment");
        let addr = text.start + file_offset - text.offset;
        assert!(addr < text.end, "getpid in the mapped text");
        let mut spaces = AddressSpaces::new();
        spaces.add_maps(pid, &entries);
        let mut sym = Symbolizer::new(&spaces);
        let stacks = [StackKey {
            pid,
            chain: [addr].into(),
            words: [].into(),
        }];
        let sites = fault_sites(&mut sym, &stacks, &HashMap::from([(0, 5)]), 10);
        assert_eq!(sites.len(), 1, "{sites:?}");
        // `__getpid` and `getpid` are one address: either name is the function.
        assert_eq!(
            sites[0].function.trim_start_matches('_'),
            "getpid",
            "{sites:?}"
        );
        assert!(!sites[0].own_code, "{sites:?}");
        assert_eq!(sites[0].via, None, "{sites:?}");
    }
}
