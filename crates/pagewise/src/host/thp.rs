//! Transparent huge page settings (`/sys/kernel/mm/transparent_hugepage/`):
//! the system-wide modes, the multi-size (mTHP) switches and khugepaged's
//! fill limit. The readers take a [`SysRoot`] so fixture trees can stand in
//! for `/`; [`enabled_mode`] reads the live machine.

use super::hugetlb;
use super::kernel_files::SysRoot;
use serde::Serialize;

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// One multi-size THP setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MthpSize {
    /// Folio size in bytes.
    pub size_bytes: u64,
    /// `always`, `inherit`, `madvise` or `never`.
    pub enabled: Option<String>,
}

/// Transparent huge page settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Thp {
    /// `/sys/kernel/mm/transparent_hugepage/enabled`: `always`, `madvise` or `never`.
    pub enabled: Option<String>,
    /// `defrag`: how hard a fault tries to find a huge page.
    pub defrag: Option<String>,
    /// `shmem_enabled`: THP for tmpfs and shared memory.
    pub shmem_enabled: Option<String>,
    /// `khugepaged/max_ptes_none`: empty 4 KiB slots khugepaged fills to collapse.
    pub khugepaged_max_ptes_none: Option<u64>,
    /// `hpage_pmd_size`: the PMD-level huge page size.
    pub pmd_size_bytes: Option<u64>,
    /// Per-size (mTHP) settings; sizes whose mode is not `never` are in use.
    pub sizes: Vec<MthpSize>,
    /// THP disabled for this process by `PR_SET_THP_DISABLE` (inherited from
    /// the parent). Not a file: [`settings`] leaves it `None` for the caller
    /// to fill from `prctl`.
    pub disabled_for_process: Option<bool>,
}

/// The selected word of a sysfs mode file such as `always [madvise] never`.
pub fn parse_bracketed_mode(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    let word = text[start + 1..end].trim();
    (!word.is_empty()).then(|| word.to_owned())
}

/// The selected mode of `transparent_hugepage/FILE`; a file without one is
/// noted in `root`.
fn mode(root: &SysRoot, file: &str) -> Option<String> {
    let path = format!("{THP}/{file}");
    let text = root.read(&path)?;
    let mode = parse_bracketed_mode(&text);
    if mode.is_none() {
        root.note(&path, format!("no [selected] mode in {text:?}"));
    }
    mode
}

/// The THP settings below `root`. Files that cannot be read are noted in
/// `root` and left `None`. Costs a directory listing and a small read per setting.
pub fn settings(root: &SysRoot) -> Thp {
    let mut sizes = root
        .list(THP)
        .unwrap_or_default()
        .iter()
        .filter_map(|name| {
            let size = hugetlb::parse_dir_bytes(name)?;
            // Some sizes exist only for shmem or statistics and have no `enabled` switch.
            if !root.exists(&format!("{THP}/{name}/enabled")) {
                return None;
            }
            Some(MthpSize {
                size_bytes: size,
                enabled: mode(root, &format!("{name}/enabled")),
            })
        })
        .collect::<Vec<_>>();
    sizes.sort_by_key(|s| s.size_bytes);
    Thp {
        enabled: mode(root, "enabled"),
        defrag: mode(root, "defrag"),
        shmem_enabled: mode(root, "shmem_enabled"),
        khugepaged_max_ptes_none: root.read_u64(&format!("{THP}/khugepaged/max_ptes_none")),
        pmd_size_bytes: root.read_u64(&format!("{THP}/hpage_pmd_size")),
        sizes,
        disabled_for_process: None,
    }
}

/// The live THP `enabled` mode (`always`, `madvise`, `never`), if readable.
/// One small file read.
pub fn enabled_mode() -> Option<String> {
    let root = SysRoot::live();
    let text = root.read(&format!("{THP}/enabled"))?;
    parse_bracketed_mode(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_modes() {
        assert_eq!(
            parse_bracketed_mode("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            parse_bracketed_mode("[always] madvise never\n").as_deref(),
            Some("always")
        );
        assert_eq!(
            parse_bracketed_mode("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            parse_bracketed_mode("always inherit madvise [never]").as_deref(),
            Some("never")
        );
        assert_eq!(parse_bracketed_mode("always madvise never"), None);
        assert_eq!(parse_bracketed_mode("[]"), None);
        assert_eq!(parse_bracketed_mode(""), None);
    }
}
