//! The library's layers, checked from its own source (docs/ARCHITECTURE.md).
//!
//! Arrows run one way, down this list: `observe`/`probe` (leaves, behind
//! `stat` and `doctor`) → the capabilities (`region`, `buffer`, `copy`,
//! `queue`, `text`, `launch`, `file_window`) → `host` (safe readers of /proc and /sys) →
//! `units` → `sys` (the only place with raw system calls, `libc` and `unsafe`).
//! A module may use its own layer and the layers below it; within a layer the
//! imports must not form a circle. The check reads every `crate::MODULE`
//! path in `crates/pagewise/src` (comments and doc comments excepted).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first.
const LAYERS: &[&[&str]] = &[
    // `os` is the public face of `sys` for the other pagewise crates.
    &["sys", "os"],
    &["units"],
    &["host"],
    &[
        "region",
        "buffer",
        "copy",
        "queue",
        "text",
        "launch",
        "file_window",
    ],
    &["observe", "probe"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn cli_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../pagewise-cli/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file under `root` belongs to
/// (`src/queue/reader.rs` → `queue`).
fn module_of(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    if first == "lib.rs" || first == "main.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_owned())
}

/// The code of a line, without a trailing `//` comment (a crude cut that is
/// enough here: no string in this crate holds `crate::`).
fn code(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") {
        return "";
    }
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// Every `crate::NAME` in `text`, and every module named in a grouped
/// `use crate::{a, b::c}` import.
fn referenced_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let joined: String = text.lines().map(code).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = joined.as_str();
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(after);
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

/// module → the other top-level modules of the same crate it names.
fn graph_of(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(root, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(root, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let refs = graph.entry(module.clone()).or_default();
        for r in referenced_modules(&text) {
            if r != module && modules.contains(&r) {
                refs.insert(r);
            }
        }
    }
    graph
}

fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(&src())
}

/// The first import circle in `graph`, if any.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search for a back edge, reporting the circle it closes.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut circle = path[start..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn every_module_has_a_layer() {
    for module in import_graph().keys() {
        assert!(
            layer_of(module).is_some(),
            "src/{module} is in no layer: add it to LAYERS here and to docs/ARCHITECTURE.md"
        );
    }
}

#[test]
fn no_arrow_runs_up_a_layer() {
    let mut upward = Vec::new();
    for (module, refs) in import_graph() {
        let Some(own) = layer_of(&module) else {
            continue;
        };
        for r in refs {
            if layer_of(&r).is_some_and(|l| l > own) {
                upward.push(format!("{module} -> {r}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports that run up a layer: {upward:?}");
}

#[test]
fn no_import_circle() {
    if let Some(circle) = find_circle(&import_graph()) {
        panic!("import circle in the library: {}", circle.join(" -> "));
    }
}

#[test]
fn no_import_circle_in_the_cli() {
    if let Some(circle) = find_circle(&graph_of(&cli_src())) {
        panic!("import circle in pagewise-cli: {}", circle.join(" -> "));
    }
}

#[test]
fn the_scanner_sees_plain_grouped_and_nested_paths() {
    let text = "use crate::sys::mem;\nuse crate::{host, copy::Plan};\n// crate::probe\nlet x = crate::region::f(); // crate::observe\n";
    let refs: Vec<String> = referenced_modules(text).into_iter().collect();
    assert_eq!(refs, ["copy", "host", "region", "sys"]);
}

/// The fields of an error variant (the text after its `#[error(…)]`) that
/// are its `source()`: marked `#[source]` or `#[from]` (`0` in a tuple
/// variant), or named `source`, as thiserror takes them.
fn source_fields(variant: &str) -> Vec<String> {
    let lines: Vec<&str> = variant.lines().map(str::trim).collect();
    let mut fields = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let field_name = |l: &str| {
            l.split(':')
                .next()
                .unwrap_or("")
                .trim()
                .trim_start_matches("pub ")
                .to_owned()
        };
        if line.contains("(#[source]") || line.contains("(#[from]") {
            fields.push("0".to_owned());
        } else if *line == "#[source]" || *line == "#[from]" {
            if let Some(next) = lines.get(i + 1) {
                fields.push(field_name(next));
            }
        } else if line.starts_with("source:") || line.starts_with("pub source:") {
            fields.push("source".to_owned());
        }
    }
    fields
}

/// Every `#[error("…")]` message with the fields of its variant that are
/// the error's `source()` and that the message also prints, in the Rust
/// files of `dir`.
fn messages_repeating_their_source(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[error(") {
            rest = &rest[at + "#[error(".len()..];
            let Some(end) = rest.find(")]\n") else {
                break;
            };
            let message = &rest[..end];
            let body = &rest[end..];
            let body = &body[..body.find("#[error(").unwrap_or(body.len())];
            let body = &body[..body.find("\n}").unwrap_or(body.len())];
            for field in source_fields(body) {
                if message.contains(&format!("{{{field}}}"))
                    || message.contains(&format!("{{{field}:"))
                {
                    found.push(format!(
                        "{}: {message} prints its source {field}",
                        file.display()
                    ));
                }
            }
        }
    }
    found
}

/// An error whose message prints its cause and that also reports the cause
/// as `source()` says it twice when a chain is printed on one line, as the
/// CLI does ("cannot read .: Is a directory (os error 21): Is a directory
/// (os error 21)"). Errors here say it once: in the message, with no
/// `source()` (the field is named `error`, not `source`).
#[test]
fn no_error_message_repeats_its_source() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for dir in std::fs::read_dir(&crates).unwrap() {
        let src = dir.unwrap().path().join("src");
        if src.is_dir() {
            found.extend(messages_repeating_their_source(&src));
        }
    }
    assert!(
        found.is_empty(),
        "errors that say their cause twice:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_source_scanner_sees_named_tuple_and_marked_sources() {
    let variant = ")]\n    Read {\n        path: String,\n        #[source]\n        error: io::Error,\n    },\n";
    assert_eq!(source_fields(variant), ["error"]);
    assert_eq!(source_fields(")]\n    Io(#[from] io::Error),\n"), ["0"]);
    assert_eq!(
        source_fields(")]\n    X {\n        source: SysError,\n    },\n"),
        ["source"]
    );
    assert!(source_fields(")]\n    X {\n        error: SysError,\n    },\n").is_empty());
}

/// Whether `text` names the `libc` crate in code (not `glibc::`, not a comment).
fn names_libc(text: &str) -> bool {
    text.lines().map(code).any(|line| {
        line.match_indices("libc::").any(|(i, _)| {
            !line[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn libc_is_named_only_in_sys() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let outside: Vec<String> = files
        .iter()
        .filter(|f| module_of(&src(), f).as_deref() != Some("sys"))
        .filter(|f| names_libc(&std::fs::read_to_string(f).unwrap()))
        .map(|f| f.strip_prefix(src()).unwrap().display().to_string())
        .collect();
    assert!(
        outside.is_empty(),
        "libc:: outside src/sys (compare errno with sys::Errno, use sys flags): {outside:?}"
    );
}

#[test]
fn the_libc_scanner_ignores_glibc_and_comments() {
    assert!(names_libc("let x = libc::EINVAL;"));
    assert!(names_libc("f(&[libc::EPERM])"));
    assert!(!names_libc(
        "use crate::host::glibc_info::x; // libc::EPERM"
    ));
    assert!(!names_libc("let g = Glibc::default();"));
}

/// The other crates reach system calls only through `pagewise::os`, the
/// curated face of `sys`; `sys` itself stays private to the library.
#[test]
fn sys_is_private_and_reached_through_os() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    assert!(
        lib.lines().any(|l| code(l).trim() == "pub(crate) mod sys;"),
        "src/lib.rs must declare `pub(crate) mod sys;`"
    );
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() && dir.file_name().is_some_and(|n| n != "pagewise") {
            rust_files(&dir, &mut files);
        }
    }
    rust_files(&crates.join("pagewise/tests"), &mut files);
    // Spelled in two pieces so that this file does not name it.
    let needle = concat!("pagewise::", "sys::");
    let outside: Vec<_> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .any(|l| code(l).contains(needle))
        })
        .collect();
    assert!(files.len() > 20, "found only {} files", files.len());
    assert!(
        outside.is_empty(),
        "pagewise::sys named outside the library: {outside:?}"
    );
}
