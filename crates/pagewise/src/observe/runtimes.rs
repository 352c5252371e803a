//! Interpreters and JIT runtimes in a stack: which runtime a call site is in
//! (CPython, node), and the script's own functions where the runtime names
//! them in a perf map (`/tmp/perf-PID.map`, written by node with
//! `--perf-basic-prof` and by Python 3.12+ with `-X perf`).
//!
//! A perf map is text, one `START SIZE NAME` line (hexadecimal) per piece
//! of generated code. It is read once per process after the run, with
//! `O_NOFOLLOW | O_NONBLOCK` and only when it is a regular file, since
//! anyone can create files in `/tmp`.

use super::report::Location;
use std::io::Read;

/// A runtime that runs scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// CPython, with its version when the file name says it (`3.11`).
    CPython(Option<String>),
    /// node (V8).
    Node,
}

/// The runtime an object file belongs to, by its file name: `python3.11`,
/// `libpython3.12.so.1.0`, `node`, `libnode.so.115`.
pub fn runtime_of(object: &str) -> Option<Runtime> {
    let file = object.rsplit('/').next().unwrap_or(object);
    let version = |rest: &str| {
        let v: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let v = v.trim_end_matches('.');
        // `3.11` from `3.11.so.1.0` or `3.11`; a bare `3` says too little.
        (v.contains('.')).then(|| {
            let mut parts = v.split('.');
            format!(
                "{}.{}",
                parts.next().unwrap_or(""),
                parts.next().unwrap_or("")
            )
        })
    };
    if let Some(rest) = file.strip_prefix("libpython") {
        return Some(Runtime::CPython(version(rest)));
    }
    if let Some(rest) = file.strip_prefix("python") {
        if rest.is_empty() || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(Runtime::CPython(version(rest)));
        }
    }
    if file == "node" || file == "nodejs" || file.starts_with("libnode.so") {
        return Some(Runtime::Node);
    }
    None
}

impl Runtime {
    /// What the report says about a site in this runtime: its name, and when
    /// the script's functions were not visible, how to make them visible.
    pub fn label(&self, script_visible: bool) -> String {
        match (self, script_visible) {
            (Runtime::Node, true) => "node (V8)".to_owned(),
            (Runtime::Node, false) => "node (V8); its script functions are hidden: run node with \
                 --perf-basic-prof --interpreted-frames-native-stack to name them"
                .to_owned(),
            (Runtime::CPython(v), true) => format!("CPython {}", v.as_deref().unwrap_or("")),
            (Runtime::CPython(v), false) => {
                let old = v.as_deref().is_some_and(|v| {
                    let mut p = v.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
                    (p.next().unwrap_or(0), p.next().unwrap_or(0)) < (3, 12)
                });
                let name = match v {
                    Some(v) => format!("CPython {v}"),
                    None => "CPython".to_owned(),
                };
                if old {
                    format!(
                        "{name} (an interpreter frame); it does not name the script's functions \
                         to profilers: Python 3.12+ does with `-X perf`"
                    )
                } else {
                    format!(
                        "{name} (an interpreter frame); to name the script's functions run it with \
                         `-X perf`, on a CPython built with frame pointers"
                    )
                }
            }
        }
    }
}

/// One piece of generated code in a perf map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitSymbol {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// The runtime's name for it (`JS:~churn /tmp/a.js:1:15`, `py::churn:/tmp/a.py`).
    pub name: String,
}

/// Parses a perf map, sorted by address; malformed lines are skipped.
pub fn parse_perf_map(text: &str) -> Vec<JitSymbol> {
    let mut out: Vec<JitSymbol> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            let name = parts.next()?.trim();
            (size > 0 && !name.is_empty()).then(|| JitSymbol {
                start,
                end: start.saturating_add(size),
                name: name.to_owned(),
            })
        })
        .collect();
    out.sort_by_key(|s| s.start);
    out
}

/// The entry holding `addr` (the newest when pieces were replaced).
pub fn lookup(map: &[JitSymbol], addr: u64) -> Option<&JitSymbol> {
    let i = map.partition_point(|s| s.start <= addr);
    map[..i].iter().rev().take(64).find(|s| addr < s.end)
}

/// Largest perf map read (node writes a few MiB for a short script).
const MAX_PERF_MAP: u64 = 256 << 20;

/// The perf map of process `pid`, if it wrote one. Reads `/tmp/perf-PID.map`.
pub fn read_perf_map(pid: u32) -> Option<Vec<JitSymbol>> {
    let path = format!("/tmp/perf-{pid}.map");
    let file = crate::sys::create::open_read_no_follow(std::path::Path::new(&path)).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_PERF_MAP {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_PERF_MAP).read_to_string(&mut text).ok()?;
    Some(parse_perf_map(&text))
}

/// The script function a perf-map name stands for, or `None` for the
/// runtime's own code (V8 builtins, stubs, `node:` modules, bytecode handlers).
pub fn script_location(name: &str) -> Option<Location> {
    // Python 3.12+: `py::QUALNAME:FILE`.
    if let Some(rest) = name.strip_prefix("py::") {
        let (function, file) = rest.split_once(':')?;
        return Some(Location {
            function: function.to_owned(),
            file: Some(file.to_owned()),
            line: None,
        });
    }
    // V8: `KIND:MARK NAME LOCATION`, KIND one of JS, LazyCompile, Function,
    // Script, Eval; MARK `~` interpreted, `^` baseline, `+`/`*` optimised.
    let (kind, rest) = name.split_once(':')?;
    if !matches!(kind, "JS" | "LazyCompile" | "Function" | "Script" | "Eval") {
        return None;
    }
    let rest = rest.trim_start_matches(['~', '^', '+', '*', '-']);
    let (function, place) = match rest.rsplit_once(' ') {
        Some((f, p)) => (f.trim(), p.trim()),
        None => ("", rest.trim()),
    };
    if place.starts_with("node:") || place.is_empty() {
        return None;
    }
    // `FILE:LINE:COLUMN` (the file may itself hold colons, as in `file:///…`).
    let mut parts = place.rsplitn(3, ':');
    let (first, second, file) = (parts.next(), parts.next(), parts.next());
    let (file, line) = match (file, second, first) {
        (Some(f), Some(l), Some(_col)) if l.parse::<u32>().is_ok() => (f, l.parse().ok()),
        _ => match place.rsplit_once(':') {
            Some((f, l)) if l.parse::<u32>().is_ok() => (f, l.parse().ok()),
            _ => (place, None),
        },
    };
    Some(Location {
        function: if function.is_empty() {
            "(top level)".to_owned()
        } else {
            function.to_owned()
        },
        file: Some(file.to_owned()),
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_by_file_name() {
        assert_eq!(
            runtime_of("/usr/bin/python3.11"),
            Some(Runtime::CPython(Some("3.11".into())))
        );
        assert_eq!(
            runtime_of("/x/lib/libpython3.12.so.1.0"),
            Some(Runtime::CPython(Some("3.12".into())))
        );
        assert_eq!(runtime_of("/x/bin/python3"), Some(Runtime::CPython(None)));
        assert_eq!(runtime_of("/usr/bin/node"), Some(Runtime::Node));
        assert_eq!(
            runtime_of("/usr/lib/x86_64-linux-gnu/libnode.so.108"),
            Some(Runtime::Node)
        );
        assert_eq!(runtime_of("/usr/bin/pythonista"), None);
        assert_eq!(runtime_of("/tmp/first_touch"), None);
    }

    #[test]
    fn labels_say_how_to_see_script_functions() {
        let old = Runtime::CPython(Some("3.11".into())).label(false);
        assert!(
            old.contains("CPython 3.11") && old.contains("3.12+"),
            "{old}"
        );
        let new = Runtime::CPython(Some("3.13".into())).label(false);
        assert!(new.contains("-X perf") && !new.contains("3.12+"), "{new}");
        assert!(Runtime::Node.label(false).contains("--perf-basic-prof"));
        assert_eq!(Runtime::Node.label(true), "node (V8)");
    }

    const MAP: &str = "\
2222bd6ca5ee 5 Eval:~ /tmp/sw/churn.js:1:1
7f1e2c02401c 100 JS:~churn /tmp/sw/churn.js:1:15
7f1e2c024f1c 100 JS:~_fill node:buffer:1031:15
18c4000 300 Builtin:DeoptimizationEntry_Eager
7f00 10 py::Worker.run:/srv/app/worker.py
garbage line
";

    #[test]
    fn perf_maps_parse_and_look_up() {
        let map = parse_perf_map(MAP);
        assert_eq!(map.len(), 5);
        assert_eq!(map[0].start, 0x7f00);
        let hit = lookup(&map, 0x7f1e2c024020).unwrap();
        assert_eq!(hit.name, "JS:~churn /tmp/sw/churn.js:1:15");
        assert!(lookup(&map, 0x7f1e2c024200).is_none());
        assert!(lookup(&map, 0x10).is_none());
    }

    #[test]
    fn script_functions_from_perf_map_names() {
        let js = script_location("JS:~churn /tmp/sw/churn.js:1:15").unwrap();
        assert_eq!(js.function, "churn");
        assert_eq!(js.file.as_deref(), Some("/tmp/sw/churn.js"));
        assert_eq!(js.line, Some(1));
        let top = script_location("JS:^ /tmp/a.js:1:1").unwrap();
        assert_eq!(top.function, "(top level)");
        let old = script_location("LazyCompile:*work file:///srv/a.mjs:20").unwrap();
        assert_eq!(old.function, "work");
        assert_eq!(old.file.as_deref(), Some("file:///srv/a.mjs"));
        assert_eq!(old.line, Some(20));
        let py = script_location("py::Worker.run:/srv/app/worker.py").unwrap();
        assert_eq!(py.function, "Worker.run");
        assert_eq!(py.file.as_deref(), Some("/srv/app/worker.py"));
        assert!(script_location("JS:~_fill node:buffer:1031:15").is_none());
        assert!(script_location("Builtin:DeoptimizationEntry_Eager").is_none());
        assert!(script_location("BytecodeHandler:Ldar").is_none());
    }

    #[test]
    fn a_perf_map_that_is_not_a_regular_file_is_not_read() {
        // This process wrote no perf map.
        assert!(read_perf_map(std::process::id()).is_none());
    }
}
