//! glibc's tunables as its dynamic loader reports them (`ld.so
//! --list-tunables`): the malloc thresholds and the copy/fill strategy
//! thresholds in force for programs started here. (Setting tunables for a
//! program is `launch::keep_heap`'s business.) The parser is pure
//! and tested against fixture text.

use super::proc_maps;

/// One glibc tunable from `ld.so --list-tunables`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunable {
    /// Full name, for example `glibc.malloc.mmap_threshold`.
    pub name: String,
    /// The value in force, parsed from decimal or `0x` hex.
    pub value: Option<u64>,
}

/// Parses `ld.so --list-tunables` output: `name: value (min: a, max: b)`.
pub fn parse_tunables(text: &str) -> Vec<Tunable> {
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

/// The dynamic loader this process runs under (from `/proc/self/maps`), or
/// `None` for a static or non-glibc process. One read of the maps file.
pub fn dynamic_loader() -> Option<String> {
    proc_maps::read(None)
        .ok()?
        .into_iter()
        .filter_map(|m| m.path)
        .find(|path| path.contains("/ld-linux") || path.contains("/ld-2."))
}

/// The tunables in force, from running `loader --list-tunables` (one
/// process start, a millisecond or so). The error is the reason in words.
pub fn list_tunables(loader: &str) -> Result<Vec<Tunable>, String> {
    match std::process::Command::new(loader)
        .arg("--list-tunables")
        .output()
    {
        Ok(out) if out.status.success() => {
            Ok(parse_tunables(&String::from_utf8_lossy(&out.stdout)))
        }
        Ok(out) => Err(format!("--list-tunables exited with {}", out.status)),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunables_list() {
        let text = "glibc.malloc.mmap_threshold: 0x0 (min: 0x0, max: 0xffffffffffffffff)\n\
                    glibc.cpu.x86_non_temporal_threshold: 0x28e0000 (min: 0x4040, max: 0xfffffffffffffff)\n\
                    glibc.malloc.perturb: 0 (min: 0, max: 255)\n\
                    glibc.cpu.x86_shstk:\n\
                    garbage line\n";
        let t = parse_tunables(text);
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].name, "glibc.malloc.mmap_threshold");
        assert_eq!(t[0].value, Some(0));
        assert_eq!(t[1].value, Some(0x28e0000));
        assert_eq!(t[2].value, Some(0));
        assert_eq!(t[3].value, None);
    }

    #[test]
    fn c_integers() {
        assert_eq!(parse_c_integer(" 0x1F "), Some(31));
        assert_eq!(parse_c_integer("0X10"), Some(16));
        assert_eq!(parse_c_integer("42"), Some(42));
        assert_eq!(parse_c_integer("-1"), None);
        assert_eq!(parse_c_integer("0xzz"), None);
    }
}
