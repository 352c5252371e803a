//! With THP disabled for the process (`PR_SET_THP_DISABLE`), an Auto region
//! reports 4 KiB pages and why it skipped THP. Its own test binary, because
//! the setting is process-wide.

use pagewise::region::{PageSize, Populate, RegionBuilder};

#[test]
fn thp_disabled_for_the_process_gives_base_pages_with_reasons() {
    let free_2m = pagewise::host::hugetlb::available(2 << 20);
    if free_2m > 0 {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::NoHugetlb,
            "a 2 MiB hugetlb pool has free pages, the ladder would stop there"
        );
    }
    pagewise::os::prctl::set_thp_disabled(true).unwrap();
    let size = 32 << 20;
    let region = RegionBuilder::new(size)
        .populate(Populate::Eager)
        .build()
        .unwrap();
    let backing = region.backing();
    assert_eq!(backing.page_size, PageSize::Base, "{backing:?}");
    assert_eq!(backing.granted.thp_bytes, 0);
    assert_eq!(backing.granted.base_bytes, size as u64);
    let thp = backing
        .skipped
        .iter()
        .find(|s| s.page_size == PageSize::Thp)
        .unwrap();
    assert!(thp.reason.contains("PR_SET_THP_DISABLE"), "{thp:?}");
    let entries = pagewise::host::smaps::entries_overlapping(
        region.addr() as u64,
        (region.addr() + size) as u64,
    )
    .unwrap();
    assert_eq!(entries.iter().map(|e| e.anon_huge).sum::<u64>(), 0);
    pagewise::os::prctl::set_thp_disabled(false).unwrap();
}
