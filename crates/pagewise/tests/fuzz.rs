//! Fuzzing of the parsers that read what users hand to pagewise: profiles
//! (pagewise's format and `perf script` output), perf maps, byte sizes, and
//! the ELF symbol tables and order computations behind `text order` and
//! `text footprint`. Property tests (proptest): each case is a fresh input
//! built from the format's own pieces (so that most get deep into the
//! parser) mixed with stray bytes; each test states what must hold besides
//! "no panic", including that a parsed input written back and parsed again
//! loses nothing.
//!
//! The case counts keep the whole file to a few seconds in a debug build, so
//! it runs in every `cargo test` (and so in `.ci/run`); set
//! `PAGEWISE_FUZZ_CASES=N` to run N cases per target for a longer search.
//! The queue file parser and the escape decoder of `queue append` have their
//! own property tests (tests/queue_corrupt.rs, and the CLI's queue.rs); the
//! table of all of them is in docs/TESTING.md.

use pagewise::text::function_table::{Function, FunctionTable};
use pagewise::text::order::{self, OrderOptions};
use pagewise::text::perfmap::{self, PerfMap, Symbol};
use pagewise::text::profile::{Location, Profile, ProfileError};
use pagewise::units::{format_bytes, format_bytes_exact, parse_size, SizeError};
use proptest::prelude::*;
use std::path::Path;

/// `cases` per target, or `PAGEWISE_FUZZ_CASES`.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PAGEWISE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

const BINARY: &str = "/opt/app/bin/server";

// ---- profiles, pagewise's format ----------------------------------------

/// Weights: small, huge, and near the 64-bit limit.
fn weight() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..1000).prop_map(|w| w.to_string()),
        (u64::MAX - 3..=u64::MAX).prop_map(|w| w.to_string()),
        any::<u64>().prop_map(|w| w.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        Just("+7".to_owned()),
    ]
}

/// A frame word: well formed or nearly.
fn frame() -> impl Strategy<Value = String> {
    let name = "[a-zA-Z_%0-9:+.]{1,8}";
    prop_oneof![
        (0usize..4, any::<u64>()).prop_map(|(o, a)| format!("{o}:{a:x}")),
        any::<u64>().prop_map(|a| format!("?:{a:x}")),
        (0usize..4, name, any::<u32>()).prop_map(|(o, n, off)| format!("{o}:{n}+{off:x}")),
        Just("0:".to_owned()),
        Just(":ff".to_owned()),
        Just("?:".to_owned()),
        Just("0:+1".to_owned()),
        Just("0:a+".to_owned()),
        Just("99999999999999999999:1".to_owned()),
        "[^ \n]{1,6}",
    ]
}

fn own_line() -> impl Strategy<Value = String> {
    let path = prop_oneof![
        Just(BINARY.to_owned()),
        Just("/lib/libc.so.6".to_owned()),
        Just("/a  b\tc".to_owned()),
        "[^\n]{0,12}",
    ];
    prop_oneof![
        4 => (0usize..4, path).prop_map(|(i, p)| format!("object {i} {p}")),
        8 => (weight(), prop::collection::vec(frame(), 0..6))
            .prop_map(|(w, f)| format!("stack {w} {}", f.join(" "))),
        1 => "[^\n]{0,20}".prop_map(|e| format!("# event {e}")),
        1 => "[^\n]{0,30}",
        1 => Just(String::new()),
    ]
}

/// Checks what every parsed profile must satisfy: weights summed without
/// wrapping, and written out and read back, nothing lost.
fn check_parsed(p: &Profile) -> Result<(), TestCaseError> {
    let exact: u128 = p.stacks.iter().map(|(w, _)| u128::from(*w)).sum();
    prop_assert!(
        exact <= u128::from(u64::MAX),
        "weights add up past 2^64: {exact}"
    );
    prop_assert_eq!(u128::from(p.total()), exact);
    let text = p.to_text();
    let again = Profile::parse(&text, "again")
        .map_err(|e| TestCaseError::fail(format!("written profile does not parse: {e}\n{text}")))?;
    prop_assert_eq!(&again, p, "lost in writing:\n{}", text);
    Ok(())
}

proptest! {
    #![proptest_config(config(1500))]

    /// Lines of pagewise's profile format, well formed or nearly, with
    /// weights up to and past 2^64: a profile or a `Syntax`/`Empty` error
    /// naming the line; never a wrapped total; what parses writes back
    /// losslessly.
    #[test]
    fn own_profile_format(lines in prop::collection::vec(own_line(), 0..24), header in prop::bool::weighted(0.9)) {
        let text = format!("{}{}\n", if header { "# pagewise-profile 1\n" } else { "" }, lines.join("\n"));
        match Profile::parse(&text, "fuzz") {
            Ok(p) => {
                prop_assert!(!p.stacks.is_empty());
                check_parsed(&p)?;
            }
            Err(ProfileError::Syntax { path, line, .. }) => {
                prop_assert_eq!(path, "fuzz");
                prop_assert!(line >= 1 && line <= text.lines().count());
            }
            Err(ProfileError::Empty { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    /// Merging profiles adds weights exactly; a merge that would pass
    /// 2^64 − 1 is refused and changes nothing. Never wraps, never clamps.
    #[test]
    fn merging_never_wraps(weights in prop::collection::vec(prop_oneof![0u64..10, u64::MAX - 5..=u64::MAX], 1..8)) {
        let frame = vec![Location::Unknown(0x1000)];
        let mut merged = Profile::default();
        let mut exact = 0u128;
        for w in &weights {
            let before = merged.clone();
            match merged.merge(Profile { event: "cpu-clock".into(), stacks: vec![(*w, frame.clone())] }) {
                Ok(()) => exact += u128::from(*w),
                Err(_) => {
                    prop_assert!(exact + u128::from(*w) > u128::from(u64::MAX));
                    prop_assert_eq!(&merged, &before);
                }
            }
            prop_assert_eq!(u128::from(merged.total()), exact);
        }
    }
}

// ---- profiles, `perf script` output --------------------------------------

/// One sample of `perf script` output: its frames, and how many of them a
/// parser keeps (user frames with a symbol).
fn perf_sample() -> impl Strategy<Value = (String, usize)> {
    let frame = prop_oneof![
        (
            "[a-zA-Z_][a-zA-Z0-9_:<>, ]{0,12}",
            any::<u16>(),
            prop_oneof![
                Just("/usr/bin/app"),
                Just("/lib/x86_64-linux-gnu/libc.so.6"),
                Just("/tmp/a b")
            ]
        )
            .prop_map(|(s, off, dso)| (
                format!(
                    "\t    {:x} {}+0x{off:x} ({dso})",
                    0x401000 + off as u64,
                    s.trim_end()
                ),
                usize::from(!s.trim_end().is_empty())
            )),
        Just((
            "\tffffffff81000000 kfunc+0x0 ([kernel.kallsyms])".to_owned(),
            0
        )),
        Just((
            "\t    7f0000001234 [unknown] (/usr/lib/libc.so.6)".to_owned(),
            0
        )),
        Just(("\t    401136".to_owned(), 0)),
        Just(("\t    401136 no_dso+0x1".to_owned(), 0)),
    ];
    (
        "[a-z]{1,8}",
        1u32..99999,
        0u32..8,
        prop::collection::vec(frame, 0..6),
    )
        .prop_map(|(comm, pid, cpu, frames)| {
            let kept = frames.iter().map(|(_, k)| k).sum();
            let mut text = format!("{comm} {pid} [{cpu:03}] 1.000000:     250000 cpu-clock:u: \n");
            for (line, _) in &frames {
                text.push_str(line);
                text.push('\n');
            }
            (text, kept)
        })
}

proptest! {
    #![proptest_config(config(2000))]

    /// `perf script` output with kernel frames, unknown symbols, missing DSOs
    /// and stray lines: every sample with a kept frame counts once (nothing
    /// lost), and the profile writes to pagewise's format and back unchanged.
    #[test]
    fn perf_script_output(samples in prop::collection::vec(perf_sample(), 1..12), junk in prop::collection::vec("[^\n]{0,30}", 0..3)) {
        let mut text = String::new();
        let mut expected = 0u64;
        for (sample, kept) in &samples {
            text.push_str(sample);
            text.push('\n');
            expected += u64::from(*kept > 0);
        }
        let with_junk = format!("{text}{}", junk.join("\n"));
        let _ = Profile::parse(&with_junk, "junk");
        match Profile::parse(&text, "perf") {
            Ok(p) => {
                prop_assert_eq!(p.total(), expected);
                prop_assert_eq!(p.event.as_str(), "cpu-clock");
                check_parsed(&p)?;
            }
            Err(ProfileError::Empty { .. }) => prop_assert_eq!(expected, 0),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

// ---- perf maps ------------------------------------------------------------

proptest! {
    #![proptest_config(config(1500))]

    /// Lines of a perf map, well formed or not: malformed ones are skipped;
    /// every kept symbol is found at its own start address.
    #[test]
    fn perf_map_lines(lines in prop::collection::vec(prop_oneof![
        (any::<u64>(), any::<u64>(), "[a-z_ ]{0,10}").prop_map(|(a, s, n)| format!("{a:x} {s:x} {n}")),
        (any::<u64>(), any::<u32>()).prop_map(|(a, s)| format!("0x{a:x} 0x{s:x} f")),
        "[^\n]{0,24}",
    ], 0..30)) {
        let map = PerfMap::parse(&lines.join("\n"));
        for s in map.symbols() {
            let found = map.lookup(s.start);
            prop_assert!(found.is_some_and(|f| f.start == s.start), "{:?} not found", s);
        }
        let _ = map.lookup(u64::MAX);
        let _ = map.lookup(0);
    }

}

proptest! {
    #![proptest_config(config(300))]

    /// Symbols written by `PerfMapWriter` read back the same, in address
    /// order (names as symbol tables hold them: no line break, no edge spaces).
    #[test]
    fn perf_maps_round_trip(symbols in prop::collection::vec((any::<u64>(), any::<u64>(), "[!-~]([ -~]{0,10}[!-~])?"), 0..20)) {
        let symbols: Vec<Symbol> = symbols.into_iter().map(|(start, size, name)| Symbol { start, size, name }).collect();
        let dir = tempfile::tempdir().unwrap();
        let mut writer = perfmap::PerfMapWriter::in_dir(dir.path());
        writer.write(1, &symbols).unwrap();
        let path = writer.path(1);
        let mut expected = symbols.clone();
        expected.sort_by_key(|s| s.start);
        let read = PerfMap::read(&path).unwrap();
        prop_assert_eq!(read.symbols(), &expected[..]);
    }
}

// ---- byte sizes -------------------------------------------------------------

/// What `parse_size` must return for `whole.frac` in units of `2^shift`:
/// rounded down to whole bytes, computed exactly with every decimal (in
/// 128-bit integers: up to 25 decimals, `frac × 2^40` still fits).
fn exact_size(whole: &str, frac: &str, shift: u32) -> Option<u64> {
    let mut value: u128 = 0;
    for d in whole.bytes().filter(u8::is_ascii_digit) {
        value = value.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
        if value > u128::from(u64::MAX) {
            return None;
        }
    }
    assert!(frac.len() <= 25, "the oracle is exact up to 25 decimals");
    let numerator: u128 = frac.parse().unwrap_or(0);
    let fraction = (numerator << shift) / 10u128.pow(frac.len() as u32);
    u64::try_from((value << shift) + fraction).ok()
}

proptest! {
    #![proptest_config(config(5000))]

    /// Numbers (up to 30 digits, with decimals and underscores) with every
    /// unit spelling, and stray text: the exact size rounded down, `Overflow`
    /// exactly when it does not fit in 64 bits, and formatting reads back.
    #[test]
    fn sizes(whole in "[0-9_]{0,30}", frac in proptest::option::of("[0-9]{0,25}"),
             space in "[ ]{0,2}", unit in prop_oneof![
                 Just(("", 0u32)), Just(("b", 0)), Just(("K", 10)), Just(("kb", 10)), Just(("KiB", 10)),
                 Just(("M", 20)), Just(("MiB", 20)), Just(("g", 30)), Just(("GB", 30)), Just(("t", 40)),
                 Just(("TiB", 40)), Just(("PiB", 99)), Just(("x", 99)), Just(("K4", 99)),
             ])
    {
        let text = match &frac {
            Some(f) => format!("{whole}.{f}{space}{}", unit.0),
            None => format!("{whole}{space}{}", unit.0),
        };
        let got = parse_size(&text);
        let digits = whole.chars().filter(char::is_ascii_digit).count();
        if unit.1 == 99 {
            prop_assert!(got.is_err(), "{text:?} gave {got:?}");
        } else if digits == 0 && frac.as_deref().is_none_or(str::is_empty) {
            prop_assert!(got.is_err(), "{text:?} gave {got:?}");
        } else if frac.as_deref().is_some_and(|f| !f.is_empty()) && unit.1 == 0 {
            // Decimals need a unit (Invalid), unless the number overflows first.
            prop_assert!(got.is_err(), "{text:?} gave {got:?}");
        } else {
            match exact_size(&whole, frac.as_deref().unwrap_or(""), unit.1) {
                Some(n) => prop_assert_eq!(got.clone(), Ok(n), "{:?}", text),
                None => prop_assert!(matches!(got, Err(SizeError::Overflow(_))), "{text:?} gave {got:?}"),
            }
        }
        if let Ok(n) = got {
            prop_assert_eq!(parse_size(&format_bytes_exact(n)), Ok(n));
            prop_assert!(!format_bytes(n).is_empty());
        }
    }

    /// Any text at all: a size or an error, never a panic.
    #[test]
    fn sizes_from_any_text(text in "\\PC{0,40}") {
        let _ = parse_size(&text);
    }
}

// ---- symbol tables, orders and footprints ----------------------------------

/// Functions anywhere in the address space, of any size, some at its very end.
fn functions() -> impl Strategy<Value = Vec<Function>> {
    let addr = prop_oneof![0u64..1 << 20, any::<u64>(), u64::MAX - 64..=u64::MAX];
    let size = prop_oneof![0u64..256, any::<u64>(), Just(u64::MAX)];
    prop::collection::vec((addr, size, 0usize..6), 1..12).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (vaddr, size, n))| Function {
                name: format!("f{}_{i}", n),
                vaddr,
                size,
            })
            .collect()
    })
}

/// A stack's weight and frames: (function, offset, given by name or by address).
type RawStack = (u64, Vec<(usize, u64, bool)>);

/// Stacks over those functions' addresses and names, with any weights.
fn stacks(n: usize) -> impl Strategy<Value = Vec<RawStack>> {
    let frame = (0..n, any::<u64>(), any::<bool>());
    prop::collection::vec(
        (
            prop_oneof![1u64..100, u64::MAX / 4..=u64::MAX],
            prop::collection::vec(frame, 1..8),
        ),
        1..10,
    )
}

fn order_everything(table: &FunctionTable, profile: &Profile, max_cluster: u64) {
    let binary = Path::new(BINARY);
    let options = OrderOptions {
        max_cluster_bytes: max_cluster,
        ..OrderOptions::default()
    };
    let computed = order::c3(profile, table, binary, &options);
    assert!(computed.call_graph_samples <= computed.total_samples);
    let before = order::footprint(profile, table, binary, None);
    let after = order::footprint(profile, table, binary, Some(&computed.functions));
    assert_eq!(before.resolved_samples, after.resolved_samples);
    assert!(before.resolved_samples <= computed.call_graph_samples);
    // Written and read back, the order loses no name (a name that starts
    // like a comment or a gold section is read as one: none is generated).
    let text = order::order_file(&computed, false);
    if computed
        .functions
        .iter()
        .all(|f| !f.starts_with('#') && !f.starts_with(".text."))
    {
        assert_eq!(order::read_order_file(&text), computed.functions);
    }
    let _ = order::layout(table, &computed.functions, 4096);
}

proptest! {
    #![proptest_config(config(2000))]

    /// Symbol tables with functions at the end of the address space and
    /// sizes up to 2^64 − 1, profiles with weights up to 2^64 − 1: ordering,
    /// layout and footprints never overflow or panic, and every sample is
    /// counted once whatever the layout.
    #[test]
    fn orders_and_footprints(funcs in functions(), raw in stacks(12), max_cluster in prop_oneof![Just(0u64), 1u64..1 << 30, Just(u64::MAX)]) {
        let table = FunctionTable::from_functions(funcs.clone());
        for f in table.functions() {
            let _ = table.at(f.vaddr);
            let _ = table.at(f.vaddr.saturating_add(f.size));
        }
        // Weights may add up past 2^64 here (a profile built in code, or merged).
        let mut stacks = Vec::new();
        for (w, frames) in raw {
            let frames = frames.into_iter().map(|(i, off, by_name)| {
                let f = &funcs[i % funcs.len()];
                if by_name {
                    Location::Symbol { object: BINARY.into(), name: f.name.clone(), offset: off % f.size.max(1) }
                } else {
                    Location::Address { object: BINARY.into(), vaddr: f.vaddr.wrapping_add(off % f.size.max(1)) }
                }
            }).collect();
            stacks.push((w, frames));
        }
        let mut profile = Profile { event: "cpu-clock".into(), stacks };
        profile.normalize();
        order_everything(&table, &profile, max_cluster);
    }
}

/// A small ELF program with symbols, compiled once (None without a compiler).
fn small_elf() -> Option<&'static [u8]> {
    static ELF: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    ELF.get_or_init(|| {
        let dir = tempfile::tempdir().ok()?;
        let src = "static int hot(int x) { return x * 3; }\nint cold(int x) { return x - 1; }\nint main(int c, char **v) { (void)v; return hot(c) + cold(c); }\n";
        let bin = pagewise_testkit::compile_c(dir.path(), "small", src, &["-O0"]).ok()?;
        std::fs::read(bin).ok()
    })
    .as_deref()
}

/// A real ELF program with 1–12 bytes changed, or cut short: a symbol
/// table or a typed error, and whatever table comes out orders and measures
/// footprints without a panic.
#[test]
fn damaged_elf_files() {
    let Some(elf) = small_elf() else {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Compiler,
            "no C compiler for the ELF fixture"
        );
    };
    let damage = (
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
        proptest::option::weighted(0.2, any::<prop::sample::Index>()),
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        failure_persistence: None,
        ..config(2000)
    });
    let result = runner.run(&damage, |(flips, cut)| {
        let mut data = elf.to_vec();
        for (at, value) in flips {
            let i = at.index(data.len());
            data[i] = value;
        }
        if let Some(cut) = cut {
            data.truncate(cut.index(data.len()));
        }
        if let Ok(table) = FunctionTable::parse(&data) {
            let stacks = table
                .functions()
                .iter()
                .map(|f| {
                    let leaf = Location::Address {
                        object: BINARY.into(),
                        vaddr: f.vaddr,
                    };
                    (u64::MAX / 64, vec![leaf])
                })
                .collect();
            let mut profile = Profile {
                event: "cpu-clock".into(),
                stacks,
            };
            profile.normalize();
            order_everything(&table, &profile, 2 << 20);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
