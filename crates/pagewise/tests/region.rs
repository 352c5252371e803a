//! Region integration tests against the live kernel: the ladder, the backing
//! report checked against smaps, fault-free passes, and fault injection.
//! Tests that change the hugetlb pool need root; they serialise on one lock
//! and give the pages back.

use pagewise::host::smaps;
use pagewise::observe::faults_during;
use pagewise::os::mem::{AnonMapping, MapOptions};
use pagewise::region::{
    PagePolicy, PageSize, PoolReservation, Populate, Region, RegionBuilder, RegionError,
};
use std::sync::Mutex;

const MIB2: usize = 2 << 20;

/// Every test here that reads or changes the hugetlb pool holds this lock.
static POOL: Mutex<()> = Mutex::new(());

fn pool_lock() -> std::sync::MutexGuard<'static, ()> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

use pagewise_testkit::is_root;

fn free_2m_pages() -> u64 {
    pagewise::host::hugetlb::available(MIB2)
}

fn thp_usable() -> bool {
    matches!(
        pagewise::host::thp::enabled_mode().as_deref(),
        Some("always") | Some("madvise")
    )
}

fn smaps_for(addr: usize, len: usize) -> smaps::SmapsEntry {
    let entries = smaps::entries_overlapping(addr as u64, (addr + len) as u64).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().unwrap()
}

#[test]
fn auto_with_a_reserved_pool_reports_hugetlb() {
    let _lock = pool_lock();
    if !is_root() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Root,
            "reserving hugetlb pages needs root"
        );
    }
    let reservation = PoolReservation::ensure_available(MIB2, 8).unwrap();
    if free_2m_pages() < 8 {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Hugetlb,
            "the kernel granted only {} pages",
            reservation.obtained()
        );
    }
    let region = RegionBuilder::new(8 * MIB2)
        .populate(Populate::Eager)
        .build()
        .unwrap();
    let backing = region.backing();
    assert_eq!(backing.page_size, PageSize::Hugetlb2M, "{backing:?}");
    assert_eq!(
        backing.granted.hugetlb_2m_bytes,
        8 * MIB2 as u64,
        "{backing:?}"
    );
    assert_eq!(backing.skipped.len(), 1);
    assert_eq!(backing.skipped[0].page_size, PageSize::Hugetlb1G);
    let entry = smaps_for(region.addr(), 8 * MIB2);
    assert_eq!(entry.kernel_page_size, MIB2 as u64);
    assert_eq!(entry.hugetlb, 8 * MIB2 as u64);
    drop(region);
    drop(reservation);
}

#[test]
fn auto_with_an_empty_pool_reports_thp_that_smaps_confirms() {
    let _lock = pool_lock();
    if free_2m_pages() > 0 || !thp_usable() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::NoHugetlb,
            "needs an empty 2 MiB pool and THP in madvise or always mode"
        );
    }
    let size = 64 << 20;
    let region = RegionBuilder::new(size)
        .populate(Populate::Eager)
        .build()
        .unwrap();
    let backing = region.backing();
    assert_eq!(backing.page_size, PageSize::Thp, "{backing:?}");
    assert!(backing.granted.thp_bytes > 0, "{backing:?}");
    let skipped: Vec<PageSize> = backing.skipped.iter().map(|s| s.page_size).collect();
    assert_eq!(skipped, [PageSize::Hugetlb1G, PageSize::Hugetlb2M]);
    assert!(
        backing.skipped[1].reason.contains("pool has 0 free pages"),
        "{backing:?}"
    );
    let entry = smaps_for(region.addr(), size);
    assert_eq!(
        entry.anon_huge, backing.granted.thp_bytes,
        "smaps disagrees: {entry:?}"
    );
}

#[test]
fn strict_hugetlb_with_an_empty_pool_is_a_typed_error() {
    let _lock = pool_lock();
    if free_2m_pages() > 0 {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::NoHugetlb,
            "needs an empty 2 MiB pool"
        );
    }
    let err = RegionBuilder::new(4 * MIB2)
        .pages(PagePolicy::Only(PageSize::Hugetlb2M))
        .build()
        .unwrap_err();
    match &err {
        RegionError::HugetlbUnavailable { page, reason, fix } => {
            assert_eq!(*page, "hugetlb-2m");
            assert!(reason.contains("pool has 0 free pages"), "{reason}");
            assert!(fix.starts_with("sysctl vm.nr_hugepages="), "{fix}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.to_string().contains("PagePolicy::Auto"));
}

static STOLEN: Mutex<Vec<AnonMapping>> = Mutex::new(Vec::new());

/// Fault injection: takes every free 2 MiB page right after the pool check.
fn steal_the_pool(step: PageSize) {
    if step != PageSize::Hugetlb2M {
        return;
    }
    let free = free_2m_pages() as usize;
    if free == 0 {
        return;
    }
    let options = MapOptions {
        hugetlb_page_size: Some(MIB2),
        no_reserve: false,
        populate: false,
    };
    let thief = AnonMapping::map(free * MIB2, options).expect("steal the pool");
    STOLEN.lock().unwrap().push(thief);
}

#[test]
fn a_pool_that_empties_between_check_and_map_falls_back_or_errors() {
    let _lock = pool_lock();
    if !is_root() {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Root,
            "reserving hugetlb pages needs root"
        );
    }
    let reservation = PoolReservation::ensure_available(MIB2, 4).unwrap();
    if free_2m_pages() < 4 {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::Hugetlb,
            "the kernel granted only {} pages",
            reservation.obtained()
        );
    }
    let auto = RegionBuilder::new(4 * MIB2)
        .populate(Populate::Eager)
        .before_map_hook(steal_the_pool)
        .build()
        .expect("Auto falls back");
    let backing = auto.backing();
    assert_ne!(backing.page_size, PageSize::Hugetlb2M);
    let skip = backing
        .skipped
        .iter()
        .find(|s| s.page_size == PageSize::Hugetlb2M)
        .unwrap();
    assert!(
        skip.reason.contains("pool emptied before mapping"),
        "{skip:?}"
    );
    STOLEN.lock().unwrap().clear();

    let strict = RegionBuilder::new(4 * MIB2)
        .pages(PagePolicy::Only(PageSize::Hugetlb2M))
        .before_map_hook(steal_the_pool)
        .build();
    match strict {
        Err(RegionError::HugetlbUnavailable { reason, .. }) => {
            assert!(reason.contains("emptied"), "{reason}")
        }
        other => panic!("expected HugetlbUnavailable, got {other:?}"),
    }
    STOLEN.lock().unwrap().clear();
    drop(reservation);
}

#[test]
fn eager_region_takes_no_fault_on_the_first_pass() {
    let _lock = pool_lock();
    let eager = |size| {
        RegionBuilder::new(size)
            .populate(Populate::Eager)
            .build()
            .unwrap()
    };
    let fill_faults = |region: &mut Region| faults_during(|| region.fill(0xab));
    // The process's first 64 MiB fill runs its code and reaches its stack depth
    // for the first time; those pages fault once whatever the region does.
    fill_faults(&mut eager(64 << 20));
    let mut region = eager(64 << 20);
    let Some(faults) = fill_faults(&mut region) else {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    };
    assert_eq!(faults, 0, "{:?}", region.backing());
    assert!(region.iter().all(|&b| b == 0xab));
}

#[test]
fn background_region_takes_no_fault_behind_the_frontier() {
    let _lock = pool_lock();
    let background = |size| {
        RegionBuilder::new(size)
            .populate(Populate::Background { threads: 2 })
            .build()
            .unwrap()
    };
    let step = MIB2;
    let follow_faults = |region: &mut Region, size: usize| {
        faults_during(|| {
            let mut offset = 0;
            while offset < size {
                let end = (offset + step).min(size);
                region.wait_populated(end).unwrap();
                region[offset..end].fill(7);
                offset = end;
            }
        })
    };
    // A first, small region runs this code for the first time (see above).
    follow_faults(&mut background(4 * step), 4 * step);
    let size = 256 << 20;
    let mut region = background(size);
    let faults = follow_faults(&mut region, size);
    let Some(faults) = faults else {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    };
    assert_eq!(faults, 0, "{:?}", region.backing());
    assert_eq!(region.backing().populate, "background");
    assert!(region[size - 1] == 7 && region[0] == 7);
}

#[test]
fn lazy_region_faults_on_touch() {
    let _lock = pool_lock();
    let mut region = RegionBuilder::new(16 << 20)
        .pages(PagePolicy::Only(PageSize::Base))
        .build()
        .unwrap();
    let Some(faults) = faults_during(|| region.fill(1)) else {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    };
    // All 16 MiB are resident now, on the pages the kernel chose: at least
    // one fault each (one per the largest small folio where multi-size THP
    // is on), whatever THP mode the machine has.
    let granted = pagewise::region::granted_for(region.addr(), 16 << 20, None).unwrap();
    assert_eq!(granted.total(), 16 << 20, "{granted:?}");
    assert_eq!(
        granted.thp_bytes, 0,
        "a base-page region got THP: {granted:?}"
    );
    use pagewise::host::thp::{self, FaultMemory};
    let small = thp::settings(&pagewise::host::SysRoot::live())
        .largest_small_fault_page(FaultMemory::Anon { asked_huge: false });
    let least = granted.fewest_faults(small);
    assert!(least >= 16, "{granted:?}");
    assert!(
        faults >= least,
        "{faults} faults for {granted:?}: at least {least}"
    );
}

#[test]
fn dont_fork_and_lock_are_applied() {
    let _lock = pool_lock();
    let result = RegionBuilder::new(4 * MIB2)
        .pages(PagePolicy::Only(PageSize::Base))
        .populate(Populate::Eager)
        .dont_fork(true)
        .lock(true)
        .build();
    match result {
        Ok(region) => {
            let b = region.backing();
            assert!(b.locked && b.dont_fork);
            let maps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let start = format!("{:x}-", region.addr());
            let block: String = maps
                .split_inclusive('\n')
                .skip_while(|l| !l.starts_with(&start))
                .take_while(|l| {
                    l.starts_with(&start) || !l.contains('-') || l.starts_with("VmFlags")
                })
                .collect();
            let flags = block
                .lines()
                .find(|l| l.starts_with("VmFlags"))
                .unwrap_or("");
            assert!(flags.contains(" dc"), "no dontcopy flag: {flags}");
            assert!(flags.contains(" lo"), "not locked: {flags}");
        }
        Err(RegionError::Lock(e)) if !is_root() => {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Root,
                "mlock refused without root: {e}"
            )
        }
        Err(e) => panic!("{e}"),
    }
}
