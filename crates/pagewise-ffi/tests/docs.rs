//! Every C and C++ example in docs/c.md compiles with strict warnings
//! against the installed library and runs.

mod common;

use common::{run_ok, scratch, workspace};
use pagewise_testkit::{skip, Need};

/// The fenced blocks of `lang` in docs/c.md that are whole programs.
fn examples(lang: &str) -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join("docs/c.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_end() == format!("```{lang}") => current = Some(String::new()),
            Some(block) if line.starts_with("```") => {
                if block.contains("int main(") {
                    blocks.push(std::mem::take(block));
                }
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn the_c_examples_compile_and_run() {
    let blocks = examples("c");
    assert_eq!(blocks.len(), 4, "docs/c.md should hold 4 C examples");
    let dir = scratch();
    let queue = dir.path().join("orders.q");
    let q = queue.to_str().unwrap();
    let inst = common::installed();
    common::note_pkg_config();
    let mut flags = vec!["-std=c11", "-Wall", "-Wextra", "-Werror"];
    flags.extend(inst.flags.iter().map(String::as_str));
    for (i, source) in blocks.iter().enumerate() {
        let name = format!("example{i}");
        let program = match pagewise_testkit::compile_c(dir.path(), &name, source, &flags) {
            Ok(p) => p,
            Err(why) => skip!(Need::Compiler, "{why}"),
        };
        let out = run_ok(&program, &[q]);
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn the_cxx_example_compiles_and_runs() {
    let blocks = examples("cpp");
    assert_eq!(blocks.len(), 1, "docs/c.md should hold 1 C++ example");
    let dir = scratch();
    let src = dir.path().join("example.cpp");
    std::fs::write(&src, &blocks[0]).unwrap();
    let program = match common::build_cxx(&src, &dir.path().join("example")) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let queue = dir.path().join("orders.q");
    let out = run_ok(&program, &[queue.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(": hello from C++\n") && text.ends_with(": bytes\n"),
        "{text}"
    );
}
