//! pprof profiles (`profile.proto`, usually gzip-compressed), as continuous
//! profilers export them (Parca, Pyroscope, Go's `pprof`, Google-wide
//! profiling), read into a [`Profile`].
//!
//! The messages are declared here with `prost`'s derive, only the fields
//! pagewise reads (prost skips the others); no `protoc` and no build script.
//! prost was chosen over a reader of our own because it is the protobuf
//! implementation the Rust ecosystem maintains (tokio's), fuzzed upstream,
//! and decodes hostile input into an error, never a panic; over an existing
//! pprof crate because those are profilers that happen to write pprof
//! (pprof-rs) and pull in far more than a reader.
//!
//! Each location becomes one frame, leaf first as in pprof:
//! - with an address in a mapping whose file is here ([`Locate`]) and whose
//!   build ID (when the profile has one) matches that file's: the link-time
//!   address in that file, from the file offset (`address − memory_start +
//!   file_offset`) and the file's program headers, so page-level hot text and
//!   function lookup work as for pagewise's own profiles;
//! - else, with a function name: the outermost function of the location
//!   (pprof lists inlined functions first, the one the code lives in last),
//!   by its `system_name` (mangled) when there is one;
//! - else an unknown address.

use super::function_table::ObjectLayout;
use super::profile::{Location, Profile};
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;

/// Where a file a profile names is on this machine (the same build), if anywhere.
pub type Locate<'a> = &'a dyn Fn(&str) -> Option<PathBuf>;

/// The largest profile accepted after decompression: a gzip bomb is an
/// error, not an exhausted machine.
pub const MAX_DECODED_BYTES: u64 = 1 << 30;

/// `perftools.profiles.Profile`, the fields pagewise reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PprofProfile {
    /// What each sample value measures.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Address ranges and the files mapped there.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Program locations.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<PprofLocation>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// The kind of events between samples.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between samples.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// The preferred sample type (index into the string table).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a type and unit, as string-table indices.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// e.g. `samples`, `cpu`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// e.g. `count`, `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack (leaf first) and its values.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// `Mapping`: a file mapped at an address range.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Unique nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Where the mapping starts.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Where it ends.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// The file offset mapped at `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The file (string-table index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// The build ID (string-table index), hex for GNU build IDs.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
}

/// `Location`: an address and the functions (inlined first) there.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PprofLocation {
    /// Unique nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping, 0 when unknown.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The instruction address, 0 when unknown.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Functions at this address, inlined ones first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`: a function (and line) at a location.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The source line.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Unique nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Readable name (string-table index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// The name the system knows, e.g. mangled (string-table index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
}

/// Whether `bytes` start like a gzip stream.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Decompresses gzip `bytes`, refusing more than [`MAX_DECODED_BYTES`].
pub fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .take(MAX_DECODED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("not a valid gzip stream: {e}"))?;
    if out.len() as u64 > MAX_DECODED_BYTES {
        return Err(format!(
            "decompresses to more than {} MiB: not read",
            MAX_DECODED_BYTES >> 20
        ));
    }
    Ok(out)
}

/// What reading a pprof profile gave: the profile and what is worth saying
/// about it (frames that could not use their addresses, and why).
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    /// The stacks.
    pub profile: Profile,
    /// Sentences for the user, e.g. a build ID that does not match.
    pub notes: Vec<String>,
}

/// Decodes a pprof profile (gzip-compressed or not). Never panics on bad
/// input: garbage is an error. Cost: one pass over the samples, plus the
/// program headers of each mapped file found through `locate`.
pub fn decode(bytes: &[u8], locate: Locate<'_>) -> Result<Decoded, String> {
    use prost::Message;
    let raw;
    let bytes = if is_gzip(bytes) {
        raw = gunzip(bytes)?;
        &raw[..]
    } else {
        bytes
    };
    let pprof = PprofProfile::decode(bytes).map_err(|e| format!("not a pprof profile: {e}"))?;
    convert(&pprof, locate)
}

fn string(table: &[String], index: i64) -> &str {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .map_or("", String::as_str)
}

/// Which sample value is the weight, and the divisor that turns it into a
/// count: the first `count` value (by convention the number of samples),
/// else the default (or last) type, divided by the period when the period is
/// in the same unit (CPU nanoseconds at 10 ms a sample → samples).
fn weight_column(p: &PprofProfile) -> (usize, u64, String) {
    let s = &p.string_table;
    // The event is one line of pagewise's format: no newline or tab in it.
    let word = |i: i64| -> String {
        string(s, i)
            .chars()
            .map(|c| {
                if c.is_whitespace() || c.is_control() {
                    '_'
                } else {
                    c
                }
            })
            .collect()
    };
    let name = |v: &ValueType| format!("{}/{}", word(v.r#type), word(v.unit));
    if let Some(i) = p
        .sample_type
        .iter()
        .position(|v| string(s, v.unit) == "count")
    {
        return (i, 1, name(&p.sample_type[i]));
    }
    let default = p
        .sample_type
        .iter()
        .position(|v| p.default_sample_type != 0 && v.r#type == p.default_sample_type);
    let i = default.unwrap_or(p.sample_type.len().saturating_sub(1));
    let Some(chosen) = p.sample_type.get(i) else {
        return (0, 1, "samples".into());
    };
    let per_sample = match &p.period_type {
        Some(pt) if p.period > 0 && string(s, pt.unit) == string(s, chosen.unit) => p.period as u64,
        _ => 1,
    };
    (i, per_sample, name(chosen))
}

/// Per mapping: the layout of its file here, or why its addresses are not used.
struct MappedFile {
    object: String,
    layout: Result<ObjectLayout, String>,
}

fn map_files(p: &PprofProfile, locate: Locate<'_>) -> HashMap<u64, MappedFile> {
    let s = &p.string_table;
    p.mapping
        .iter()
        .map(|m| {
            let object = string(s, m.filename).to_owned();
            let wanted = string(s, m.build_id).to_ascii_lowercase();
            let layout = if !object.starts_with('/') {
                Err(format!("{object:?} is not a file"))
            } else {
                match locate(&object) {
                    None => Err(format!("{object} is not on this machine")),
                    Some(local) => ObjectLayout::read(&local)
                        .map_err(|e| e.to_string())
                        .and_then(|layout| match &layout.build_id {
                            Some(id) if !wanted.is_empty() && hex(id) != wanted => Err(format!(
                                "{} has build ID {} where the profile's {object} has {wanted}",
                                local.display(),
                                hex(id)
                            )),
                            _ => Ok(layout),
                        }),
                }
            };
            (m.id, MappedFile { object, layout })
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn convert(p: &PprofProfile, locate: Locate<'_>) -> Result<Decoded, String> {
    let s = &p.string_table;
    let (column, per_sample, event) = weight_column(p);
    let files = map_files(p, locate);
    let functions: HashMap<u64, &Function> = p.function.iter().map(|f| (f.id, f)).collect();
    let mut unusable: HashMap<&str, (&str, u64)> = HashMap::new();
    let mut frames: HashMap<u64, Location> = HashMap::new();
    for loc in &p.location {
        let file = files.get(&loc.mapping_id);
        let by_address = file.and_then(|f| {
            let m = p.mapping.iter().find(|m| m.id == loc.mapping_id)?;
            if loc.address < m.memory_start || loc.address == 0 {
                return None;
            }
            let offset = (loc.address - m.memory_start).checked_add(m.file_offset)?;
            match &f.layout {
                Ok(layout) => layout.link_address(offset).map(|vaddr| Location::Address {
                    object: f.object.clone(),
                    vaddr,
                }),
                Err(why) => {
                    unusable.entry(&f.object).or_insert((why, 0)).1 += 1;
                    None
                }
            }
        });
        let by_name = || {
            let f = functions.get(&loc.line.last()?.function_id)?;
            let name = [f.system_name, f.name]
                .into_iter()
                .map(|i| string(s, i))
                .find(|n| !n.is_empty())?;
            Some(Location::Symbol {
                object: file.map(|f| f.object.clone()).unwrap_or_default(),
                name: name.to_owned(),
                offset: 0,
            })
        };
        let frame = by_address
            .or_else(by_name)
            .unwrap_or(Location::Unknown(loc.address));
        frames.insert(loc.id, frame);
    }
    let mut profile = Profile {
        event: format!("pprof {event}"),
        stacks: Vec::new(),
    };
    // Checked as pagewise's own format checks it, so that what is read here
    // can be written out and read back.
    let mut total = 0u64;
    for sample in &p.sample {
        let value = sample.value.get(column).copied().unwrap_or(0);
        if value <= 0 {
            continue;
        }
        let weight = (value as u64 / per_sample).max(1);
        total = total
            .checked_add(weight)
            .ok_or("the sample values add up to more than 2^64 - 1 (a damaged profile?)")?;
        let stack: Vec<Location> = sample
            .location_id
            .iter()
            .filter_map(|id| frames.get(id).cloned())
            .collect();
        if !stack.is_empty() {
            profile.stacks.push((weight, stack));
        }
    }
    profile.normalize();
    let mut notes: Vec<String> = unusable
        .into_iter()
        .map(|(object, (why, n))| {
            format!("{n} locations in {object} were read by function name, not address: {why}")
        })
        .collect();
    notes.sort();
    Ok(Decoded { profile, notes })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    /// A profile with one mapping of `object` at 0x400000 (file offset 0),
    /// `functions` by name, and samples as (count, [(address, function index)]).
    pub(crate) fn build(
        object: &str,
        build_id: &str,
        functions: &[&str],
        samples: &[(i64, Vec<(u64, usize)>)],
    ) -> PprofProfile {
        let mut strings = vec![String::new(), "samples".into(), "count".into()];
        let mut intern = |text: &str| {
            strings.iter().position(|s| s == text).unwrap_or_else(|| {
                strings.push(text.to_owned());
                strings.len() - 1
            }) as i64
        };
        let filename = intern(object);
        let build_id = intern(build_id);
        let function: Vec<Function> = functions
            .iter()
            .enumerate()
            .map(|(i, name)| Function {
                id: i as u64 + 1,
                name: intern(name),
                system_name: 0,
            })
            .collect();
        let mut location = Vec::new();
        let mut sample = Vec::new();
        for (count, stack) in samples {
            let mut ids = Vec::new();
            for &(address, f) in stack {
                location.push(PprofLocation {
                    id: location.len() as u64 + 1,
                    mapping_id: 1,
                    address,
                    line: vec![Line {
                        function_id: f as u64 + 1,
                        line: 0,
                    }],
                });
                ids.push(location.len() as u64);
            }
            sample.push(Sample {
                location_id: ids,
                value: vec![*count],
            });
        }
        PprofProfile {
            sample_type: vec![ValueType { r#type: 1, unit: 2 }],
            sample,
            mapping: vec![Mapping {
                id: 1,
                memory_start: 0x40_0000,
                memory_limit: 0x80_0000,
                file_offset: 0,
                filename,
                build_id,
            }],
            location,
            function,
            string_table: strings,
            period_type: None,
            period: 0,
            default_sample_type: 0,
        }
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn names_are_used_when_the_file_is_not_here() {
        let p = build(
            "/nonexistent/app",
            "",
            &["leaf", "main"],
            &[
                (5, vec![(0x401000, 0), (0x402000, 1)]),
                (2, vec![(0x402000, 1)]),
            ],
        );
        let d = decode(&gzip(&p.encode_to_vec()), &|_| None).unwrap();
        assert_eq!(d.profile.event, "pprof samples/count");
        assert_eq!(d.profile.total(), 7);
        assert_eq!(
            d.profile.stacks[0].1[0],
            Location::Symbol {
                object: "/nonexistent/app".into(),
                name: "leaf".into(),
                offset: 0
            }
        );
        assert!(d.notes[0].contains("not on this machine"), "{:?}", d.notes);
    }

    #[test]
    fn addresses_become_link_time_addresses_of_the_local_file() {
        // This test binary stands in for the profiled file: its first
        // executable segment's file offset maps to its link-time address.
        let exe = std::env::current_exe().unwrap();
        let layout = ObjectLayout::read(&exe).unwrap();
        let &(offset, _, vaddr) = layout.segments.iter().find(|s| s.1 > 0x100).unwrap();
        let address = 0x40_0000 + offset + 0x10;
        let p = build(
            "/somewhere/else/app",
            "",
            &["f"],
            &[(3, vec![(address, 0)])],
        );
        let here = exe.clone();
        let d = decode(&p.encode_to_vec(), &move |_| Some(here.clone())).unwrap();
        assert_eq!(
            d.profile.stacks[0].1[0],
            Location::Address {
                object: "/somewhere/else/app".into(),
                vaddr: vaddr + 0x10
            }
        );
        // A build ID that is not the local file's: names, and a note saying why.
        let p = build(
            "/somewhere/else/app",
            "00ff",
            &["f"],
            &[(3, vec![(address, 0)])],
        );
        let d = decode(&p.encode_to_vec(), &move |_| Some(exe.clone())).unwrap();
        assert!(matches!(d.profile.stacks[0].1[0], Location::Symbol { .. }));
        assert!(d.notes[0].contains("build ID"), "{:?}", d.notes);
    }

    #[test]
    fn time_values_are_divided_by_the_period() {
        let mut p = build("/x", "", &["f"], &[(30_000_000, vec![(0x401000, 0)])]);
        let cpu = p.string_table.len() as i64;
        p.string_table.push("cpu".into());
        let ns = p.string_table.len() as i64;
        p.string_table.push("nanoseconds".into());
        p.sample_type = vec![ValueType {
            r#type: cpu,
            unit: ns,
        }];
        p.period_type = Some(ValueType {
            r#type: cpu,
            unit: ns,
        });
        p.period = 10_000_000;
        let d = decode(&p.encode_to_vec(), &|_| None).unwrap();
        assert_eq!(d.profile.total(), 3);
        assert_eq!(d.profile.event, "pprof cpu/nanoseconds");
    }

    #[test]
    fn garbage_and_bombs_are_errors() {
        assert!(decode(b"\x1f\x8bnot gzip", &|_| None).is_err());
        assert!(decode(&[0xff; 16], &|_| None).is_err());
        assert!(gunzip(&gzip(b"hello")).is_ok());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode(&bytes, &|_| None);
            let _ = decode(&gzip(&bytes), &|_| None);
        }

        /// Function and file names with any characters (spaces, tabs,
        /// newlines, `%`, other scripts) and any sample values: the profile
        /// read holds one sample per positive value, weights never wrap, and
        /// it writes to pagewise's format and reads back unchanged.
        #[test]
        fn any_names_and_values_survive_pagewise_format(
            names in proptest::collection::vec("\\PC{1,12}|[ \t\n\r%0-9a-f\u{a0}\u{2028}]{1,8}", 1..5),
            object in "/[^\u{0}]{0,16}",
            samples in proptest::collection::vec((any::<i64>(), proptest::collection::vec((0x40_0000u64..0x40_1000, 0usize..5), 1..4)), 1..8),
        ) {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let samples: Vec<(i64, Vec<(u64, usize)>)> = samples
                .into_iter()
                .map(|(v, stack)| (v, stack.into_iter().map(|(a, f)| (a, f % names.len())).collect()))
                .collect();
            let p = build(&object, "", &names, &samples);
            let decoded = decode(&p.encode_to_vec(), &|_| None);
            let positive: u128 = samples.iter().filter(|(v, _)| *v > 0).map(|(v, _)| *v as u128).sum();
            if positive > u128::from(u64::MAX) {
                prop_assert!(decoded.unwrap_err().contains("2^64"));
                return Ok(());
            }
            let d = decoded.map_err(|e| TestCaseError::fail(format!("a valid profile was refused: {e}")))?;
            prop_assert_eq!(u128::from(d.profile.total()), positive);
            let text = d.profile.to_text();
            let back = crate::text::profile::Profile::parse(&text, "again");
            if d.profile.stacks.is_empty() {
                prop_assert!(back.is_err());
            } else {
                let back = back.map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
                prop_assert_eq!(back, d.profile, "lost in writing:\n{}", text);
            }
        }

        /// Valid messages with ids, indices and values anywhere (dangling
        /// ids, negative string indices, addresses below their mapping).
        #[test]
        fn odd_but_valid_profiles_never_panic(
            ids in proptest::collection::vec(0u64..6, 0..12),
            values in proptest::collection::vec(any::<i64>(), 0..3),
            strings in proptest::collection::vec(-3i64..8, 4),
            address in any::<u64>(),
            start in any::<u64>(),
            offset in any::<u64>(),
        ) {
            let p = PprofProfile {
                sample_type: vec![ValueType { r#type: strings[0], unit: strings[1] }],
                sample: vec![Sample { location_id: ids.clone(), value: values }],
                mapping: vec![Mapping { id: 1, memory_start: start, memory_limit: 0, file_offset: offset, filename: strings[2], build_id: strings[3] }],
                location: ids.iter().map(|&id| PprofLocation { id, mapping_id: id % 3, address, line: vec![Line { function_id: id, line: 0 }] }).collect(),
                function: vec![Function { id: 1, name: strings[2], system_name: strings[3] }],
                string_table: vec![String::new(), "/bin/sh".into(), "count".into()],
                period_type: Some(ValueType { r#type: strings[0], unit: strings[1] }),
                period: strings[0] * 1000,
                default_sample_type: strings[0],
            };
            let exe = std::env::current_exe().unwrap();
            let _ = decode(&p.encode_to_vec(), &move |_| Some(exe.clone()));
        }
    }
}
