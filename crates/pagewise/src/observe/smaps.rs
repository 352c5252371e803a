//! Reading `/proc/self/smaps` for a range (the parser is [`super::parse::smaps`]).

pub use super::parse::SmapsEntry;

/// The entries of this process that overlap `[start, end)`.
/// Costs one read of `/proc/self/smaps` (the kernel walks every mapping).
pub fn entries_overlapping(start: u64, end: u64) -> std::io::Result<Vec<SmapsEntry>> {
    let text = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(super::parse::smaps(&text)
        .into_iter()
        .filter(|e| e.map.start < end && e.map.end > start)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_smaps_has_this_mapping() {
        let v = vec![1u8; 1 << 20];
        let addr = v.as_ptr() as u64;
        let found = entries_overlapping(addr, addr + 1).unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].rss > 0);
    }
}
