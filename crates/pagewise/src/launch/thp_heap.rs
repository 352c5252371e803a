//! The glibc malloc tunable behind `pagewise run --thp-heap`.
//!
//! A program that allocates and writes a lot of heap memory takes one page
//! fault per 4 KiB page the first time it writes each one. Since glibc 2.35,
//! `glibc.malloc.hugetlb=1` makes malloc ask for transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`) on the main heap as it grows and on the blocks
//! it maps on their own, so where the kernel grants a 2 MiB page one fault
//! maps 512 pages' worth. This works with THP in `madvise` mode (the usual
//! default) as well as `always`, and needs no change to the program.
//!
//! Measured on the development VM (AMD EPYC Zen 4, KVM, THP `madvise`,
//! glibc 2.36), each without and with the tunable: `xz -9 -T1` of 30 MiB
//! 102 162 → 932 and 1 573 minor faults, `sqlite3 :memory:` inserting a
//! million 100-byte blobs 29 310 → 909 and 1 082, peak RSS +0.5% and +1.5%.
//!
//! The cost is memory: a huge page is resident as a whole, so a sparsely
//! written heap can hold more RAM than it did (`pagewise bench run --fix
//! thp-heap` measures peak RSS beside the time). Older glibc ignores the
//! name without a word, and with THP `never` nothing changes; [`check`]
//! refuses both rather than run a fix that does nothing.

use crate::launch::Linkage;

/// The tunable and its value.
pub const TUNABLE: (&str, u64) = ("glibc.malloc.hugetlb", 1);

/// The first glibc release that knows [`TUNABLE`].
pub const MIN_GLIBC: (u32, u32) = (2, 35);

/// Whether [`TUNABLE`] can change anything for a program that runs with this
/// glibc (`major.minor` as `gnu_get_libc_version` gives it; the program's
/// loader is the system's, so this process's version is the program's) and
/// this THP `enabled` mode; the error says why not. Costs nothing.
pub fn check(glibc: Option<&str>, thp_enabled: Option<&str>) -> Result<(), String> {
    let version = glibc.and_then(|v| {
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    });
    match version {
        Some(v) if v < MIN_GLIBC => {
            return Err(format!(
                "glibc {}.{} does not know {} (it needs {}.{} or later) and would ignore it",
                v.0, v.1, TUNABLE.0, MIN_GLIBC.0, MIN_GLIBC.1
            ))
        }
        Some(_) => {}
        None => return Err("the C library's version could not be read".to_owned()),
    }
    check_thp(thp_enabled)
}

/// [`check`] for a program statically linked against glibc, whose glibc
/// knows [`TUNABLE`] or not (`malloc_hugetlb`, read from the program by
/// [`crate::launch::linkage_of`]: its version is its own, not this
/// machine's). Costs nothing.
pub fn check_static(malloc_hugetlb: bool, thp_enabled: Option<&str>) -> Result<(), String> {
    if !malloc_hugetlb {
        return Err(format!(
            "its statically linked glibc does not know {} (it needs {}.{} or later) and would ignore it",
            TUNABLE.0, MIN_GLIBC.0, MIN_GLIBC.1
        ));
    }
    check_thp(thp_enabled)
}

/// Whether THP in `thp_enabled` mode can take [`TUNABLE`]'s advice.
fn check_thp(thp_enabled: Option<&str>) -> Result<(), String> {
    match thp_enabled {
        Some("always") | Some("madvise") => Ok(()),
        Some(mode) => Err(format!(
            "transparent huge pages are off here (/sys/kernel/mm/transparent_hugepage/enabled \
             is {mode}): as root, `echo madvise > /sys/kernel/mm/transparent_hugepage/enabled`"
        )),
        None => Err("transparent huge pages are not available here (no \
             /sys/kernel/mm/transparent_hugepage/enabled)"
            .to_owned()),
    }
}

/// [`check`] for this machine: this process's glibc and the live THP mode.
/// Costs one small file read.
pub fn check_here() -> Result<(), String> {
    check(
        crate::sys::libc_info::glibc_version().as_deref(),
        crate::host::thp::enabled_mode().as_deref(),
    )
}

/// [`check_here`] for a program linked as `linkage` says: a static glibc
/// program by its own glibc ([`check_static`]), any other by this machine's.
/// Costs one small file read.
pub fn check_for(linkage: &Linkage) -> Result<(), String> {
    match linkage {
        Linkage::StaticGlibc { malloc_hugetlb } => {
            check_static(*malloc_hugetlb, crate::host::thp::enabled_mode().as_deref())
        }
        _ => check_here(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_needs_glibc_2_35_and_thp_on() {
        assert_eq!(check(Some("2.36"), Some("madvise")), Ok(()));
        assert_eq!(check(Some("2.35"), Some("always")), Ok(()));
        assert_eq!(check(Some("3.0"), Some("always")), Ok(()));
        let old = check(Some("2.34"), Some("madvise")).unwrap_err();
        assert!(
            old.starts_with("glibc 2.34 does not know glibc.malloc.hugetlb"),
            "{old}"
        );
        let never = check(Some("2.36"), Some("never")).unwrap_err();
        assert!(never.contains("enabled is never"), "{never}");
        assert!(check(Some("2.36"), None).is_err());
        assert!(check(None, Some("madvise")).is_err());
        assert!(check(Some("garbage"), Some("madvise")).is_err());
        // A static program's glibc is its own.
        assert_eq!(check_static(true, Some("madvise")), Ok(()));
        let old = check_static(false, Some("madvise")).unwrap_err();
        assert!(old.starts_with("its statically linked glibc does not know"));
        assert!(check_static(true, Some("never")).is_err());
    }
}
