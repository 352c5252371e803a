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
    /// The size's switch for shared memory (`shmem_enabled`: `always`,
    /// `inherit`, `within_size`, `advise` or `never`); `None` where the
    /// kernel has no such file (before 6.11).
    pub shmem_enabled: Option<String>,
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
            let shmem = format!("{name}/shmem_enabled");
            Some(MthpSize {
                size_bytes: size,
                enabled: mode(root, &format!("{name}/enabled")),
                shmem_enabled: root
                    .exists(&format!("{THP}/{shmem}"))
                    .then(|| mode(root, &shmem))
                    .flatten(),
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

/// Which memory a question about fault sizes is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMemory {
    /// Private anonymous memory; `asked_huge` when the range has
    /// `MADV_HUGEPAGE`.
    Anon {
        /// The range has `MADV_HUGEPAGE`.
        asked_huge: bool,
    },
    /// Shared memory: `MAP_SHARED | MAP_ANONYMOUS`, SysV shm, and files on a
    /// tmpfs mount whose `huge=` option is `mount_huge` (`None` when it is
    /// not known: every size the switches allow is then taken as possible).
    Shmem {
        /// The mount's `huge=` option (`never` when the mount has none).
        mount_huge: Option<&'static str>,
    },
}

impl Thp {
    /// The largest page, in bytes, that the kernel may map for `memory` in
    /// one page fault under these settings: the PMD size when PMD-sized THP
    /// may apply, else the largest multi-size THP size that may, else the
    /// base page. A setting that *may* apply counts (`within_size`, and for
    /// shared memory any size whose switch is not `never`), so a page-fault
    /// count of N bytes touched once is at least N divided by this. Pure.
    pub fn largest_fault_page(&self, memory: FaultMemory) -> u64 {
        self.fault_pages(memory).max().unwrap_or(BASE_PAGE)
    }

    /// The largest page below the PMD size that `memory` may be faulted in
    /// with (multi-size THP), or the base page: the unit in which the bytes
    /// a page-table walk reports as not PMD-mapped were faulted, at most. Pure.
    pub fn largest_small_fault_page(&self, memory: FaultMemory) -> u64 {
        let pmd = self.pmd_size_bytes.unwrap_or(2 << 20);
        self.fault_pages(memory)
            .filter(|&s| s < pmd)
            .max()
            .unwrap_or(BASE_PAGE)
    }

    /// Every page size `memory` may be faulted in with, base page included.
    fn fault_pages(&self, memory: FaultMemory) -> impl Iterator<Item = u64> + '_ {
        let pmd = self.pmd_size_bytes.unwrap_or(2 << 20);
        let top_anon = self.enabled.as_deref();
        let top_shmem = self.shmem_enabled.as_deref();
        let anon_applies = move |mode: Option<&str>, asked: bool| match mode {
            Some("always") => true,
            Some("madvise") => asked,
            // Unreadable: it may apply.
            None => true,
            _ => false,
        };
        let shmem_applies = move |mode: Option<&str>| !matches!(mode, Some("never" | "deny"));
        let applies = move |size: &MthpSize| match memory {
            FaultMemory::Anon { asked_huge } => {
                let mode = match size.enabled.as_deref() {
                    Some("inherit") => top_anon,
                    other => other,
                };
                anon_applies(mode, asked_huge)
            }
            FaultMemory::Shmem { mount_huge } => {
                if top_shmem == Some("deny") {
                    return false;
                }
                if top_shmem == Some("force") || mount_huge != Some("never") {
                    return true;
                }
                match size.shmem_enabled.as_deref() {
                    Some("inherit") => shmem_applies(top_shmem),
                    // A kernel without per-size switches: only the PMD size, by the top switch.
                    None if size.size_bytes == pmd => shmem_applies(top_shmem),
                    None => false,
                    other => shmem_applies(other),
                }
            }
        };
        // A kernel without per-size switches: the top-level switch governs the PMD size.
        let pmd_alone = self.sizes.is_empty().then_some(MthpSize {
            size_bytes: pmd,
            enabled: Some("inherit".into()),
            shmem_enabled: None,
        });
        let disabled = self.disabled_for_process == Some(true);
        self.sizes
            .iter()
            .cloned()
            .chain(pmd_alone)
            .filter(move |s| !disabled && applies(s))
            .map(|s| s.size_bytes)
            .chain(std::iter::once(BASE_PAGE))
    }
}

/// The base page size of x86-64.
const BASE_PAGE: u64 = 4096;

/// The `huge=` option of the tmpfs mount that holds `path`, from
/// `/proc/self/mounts` (`never` when the mount has none); `None` when the
/// path is not on tmpfs or the mounts cannot be read. One read of the mount
/// table.
pub fn tmpfs_huge_option(path: &std::path::Path) -> Option<&'static str> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    tmpfs_huge_option_in(&mounts, &path)
}

/// [`tmpfs_huge_option`] on the text of a mount table. Pure.
pub fn tmpfs_huge_option_in(mounts: &str, path: &std::path::Path) -> Option<&'static str> {
    // The last mount whose point holds the path is the one in effect.
    let (fs, options) = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (_, point, fs, options) = (f.next()?, f.next()?, f.next()?, f.next()?);
            let point = point.replace("\\040", " ");
            path.starts_with(&point)
                .then_some((point.len(), fs, options))
        })
        .fold(None, |best: Option<(usize, &str, &str)>, m| match best {
            Some(b) if b.0 > m.0 => Some(b),
            _ => Some(m),
        })
        .map(|(_, fs, options)| (fs, options))?;
    if fs != "tmpfs" {
        return None;
    }
    let huge = options
        .split(',')
        .find_map(|o| o.strip_prefix("huge="))
        .unwrap_or("never");
    Some(match huge {
        "never" => "never",
        "always" => "always",
        "within_size" => "within_size",
        "advise" => "advise",
        _ => "unknown",
    })
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

    fn size(kib: u64, enabled: &str, shmem: Option<&str>) -> MthpSize {
        MthpSize {
            size_bytes: kib << 10,
            enabled: Some(enabled.into()),
            shmem_enabled: shmem.map(Into::into),
        }
    }

    fn thp(enabled: &str, shmem: &str, sizes: Vec<MthpSize>) -> Thp {
        Thp {
            enabled: Some(enabled.into()),
            shmem_enabled: Some(shmem.into()),
            pmd_size_bytes: Some(2 << 20),
            sizes,
            ..Thp::default()
        }
    }

    #[test]
    fn fault_pages_follow_the_switches() {
        let unasked = FaultMemory::Anon { asked_huge: false };
        let asked = FaultMemory::Anon { asked_huge: true };
        let shm = FaultMemory::Shmem {
            mount_huge: Some("never"),
        };
        // This machine's defaults: madvise, PMD size inherits, the rest never.
        let t = thp(
            "madvise",
            "never",
            vec![
                size(64, "never", Some("never")),
                size(2048, "inherit", Some("never")),
            ],
        );
        assert_eq!(t.largest_fault_page(unasked), 4096);
        assert_eq!(t.largest_fault_page(asked), 2 << 20);
        assert_eq!(t.largest_small_fault_page(asked), 4096);
        assert_eq!(t.largest_fault_page(shm), 4096);
        // THP always: every anonymous fault may be 2 MiB.
        let t = thp("always", "never", vec![size(2048, "inherit", None)]);
        assert_eq!(t.largest_fault_page(unasked), 2 << 20);
        // A 64 KiB mTHP size always on: the small page is 64 KiB.
        let t = thp(
            "never",
            "never",
            vec![
                size(64, "always", Some("never")),
                size(2048, "inherit", None),
            ],
        );
        assert_eq!(t.largest_fault_page(unasked), 64 << 10);
        assert_eq!(t.largest_small_fault_page(unasked), 64 << 10);
        // Shared memory: a tmpfs mounted with huge=, the force switch, per-size switches.
        let t = thp(
            "never",
            "never",
            vec![
                size(64, "never", Some("never")),
                size(2048, "never", Some("never")),
            ],
        );
        assert_eq!(t.largest_fault_page(shm), 4096);
        let huge_mount = FaultMemory::Shmem {
            mount_huge: Some("within_size"),
        };
        assert_eq!(t.largest_fault_page(huge_mount), 2 << 20);
        assert_eq!(t.largest_small_fault_page(huge_mount), 64 << 10);
        let unknown_mount = FaultMemory::Shmem { mount_huge: None };
        assert_eq!(t.largest_fault_page(unknown_mount), 2 << 20);
        let t = thp(
            "never",
            "never",
            vec![
                size(16, "never", Some("always")),
                size(2048, "never", Some("never")),
            ],
        );
        assert_eq!(t.largest_fault_page(shm), 16 << 10);
        // A kernel without per-size switches: the top switch, for the PMD size.
        let t = thp("never", "advise", vec![]);
        assert_eq!(t.largest_fault_page(shm), 2 << 20);
        assert_eq!(t.largest_fault_page(unasked), 4096);
        // PR_SET_THP_DISABLE: base pages only.
        let t = Thp {
            disabled_for_process: Some(true),
            ..thp("always", "always", vec![size(2048, "inherit", None)])
        };
        assert_eq!(t.largest_fault_page(unasked), 4096);
    }

    #[test]
    fn the_tmpfs_huge_option_of_a_path() {
        let mounts = "\
proc /proc proc rw,nosuid 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0
tmpfs /dev/shm/big tmpfs rw,huge=always 0 0
/dev/vda1 / ext4 rw 0 0
";
        let at = |p: &str| tmpfs_huge_option_in(mounts, std::path::Path::new(p));
        assert_eq!(at("/dev/shm/q"), Some("never"));
        assert_eq!(at("/dev/shm/big/q"), Some("always"));
        assert_eq!(at("/var/tmp/q"), None);
        // A prefix that is not a whole path component does not match.
        assert_eq!(at("/dev/shmem/q"), None);
    }
}
