//! Huge-page regions that are populated before the hot path touches them.
//!
//! A fresh mapping costs a page fault and a zeroed page on first touch of every
//! page; huge pages cut the number of faults 512× but not the zeroing. A
//! [`Region`] gets the best page size the machine can give (the *ladder*:
//! hugetlb 1 GiB → hugetlb 2 MiB → THP → 4 KiB), takes the fault-and-zero work
//! off the caller's critical path ([`Populate::Eager`] before returning, or
//! [`Populate::Background`] in worker threads ahead of the caller), and reports
//! in a [`Backing`] what it really got, verified from the kernel, with the
//! reason for every ladder step it skipped.
//!
//! ```no_run
//! use pagewise::region::{Populate, RegionBuilder};
//! let mut region = RegionBuilder::new(1 << 30).populate(Populate::Eager).build()?;
//! region[0] = 1; // no page fault: everything is mapped already
//! println!("{:?}", region.backing());
//! # Ok::<(), pagewise::region::RegionError>(())
//! ```
//!
//! Never a SIGBUS: hugetlb mappings reserve their pages at `mmap` time, so an
//! exhausted pool shows up as a skipped step (`Auto`) or a typed error (strict),
//! not as a signal on first touch. (A cgroup hugetlb limit can still SIGBUS on
//! fault; eager population turns that into an error too, since
//! `MADV_POPULATE_WRITE` reports it.)

pub(crate) mod background;
mod pool;
mod verify;

pub use background::CHUNK as BACKGROUND_CHUNK;
pub use pool::PoolReservation;

/// Resident bytes of any range of this process by page size, from the kernel
/// (`PAGEMAP_SCAN`, else smaps). `hugetlb_page` is the page size when the range
/// is a hugetlb mapping. Costs one ioctl or one smaps read.
pub fn granted_for(
    addr: usize,
    len: usize,
    hugetlb_page: Option<usize>,
) -> Result<Granted, String> {
    verify::granted(addr, len, hugetlb_page)
}

use crate::host::{cpu, hugetlb, thp, SysRoot};
use crate::sys::mem::{Advice, AnonMapping, MapOptions};
use crate::sys::Errno;
use crate::sys::{self, SysError};
use background::BackgroundPopulate;
use serde::Serialize;
use std::ops::{Deref, DerefMut};

const KIB4: usize = 4096;
const MIB2: usize = 2 << 20;
const GIB1: usize = 1 << 30;

/// A page size, as one step of the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageSize {
    /// hugetlb pages of 1 GiB (needs a reserved 1 GiB pool).
    Hugetlb1G,
    /// hugetlb pages of 2 MiB (needs a reserved 2 MiB pool).
    Hugetlb2M,
    /// Transparent huge pages (2 MiB, granted by the kernel when it can).
    Thp,
    /// Ordinary 4 KiB pages.
    Base,
}

impl PageSize {
    /// The page size in bytes (2 MiB for THP).
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Hugetlb1G => GIB1,
            PageSize::Hugetlb2M | PageSize::Thp => MIB2,
            PageSize::Base => KIB4,
        }
    }

    /// A short name: `hugetlb-1g`, `hugetlb-2m`, `thp`, `4k`.
    pub fn name(self) -> &'static str {
        match self {
            PageSize::Hugetlb1G => "hugetlb-1g",
            PageSize::Hugetlb2M => "hugetlb-2m",
            PageSize::Thp => "thp",
            PageSize::Base => "4k",
        }
    }

    const LADDER: [PageSize; 4] = [
        PageSize::Hugetlb1G,
        PageSize::Hugetlb2M,
        PageSize::Thp,
        PageSize::Base,
    ];
}

/// Which page sizes a region may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PagePolicy {
    /// The best the machine gives: hugetlb 1 GiB → hugetlb 2 MiB → THP → 4 KiB.
    #[default]
    Auto,
    /// Exactly this size, or an error saying why not.
    Only(PageSize),
}

/// When the region's pages are faulted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Populate {
    /// On first touch, by the caller (the cost lands on the hot path).
    #[default]
    Lazy,
    /// Before `build` returns: `MADV_POPULATE_WRITE` (after `MADV_HUGEPAGE` for
    /// THP), or a touch loop on kernels before 5.14.
    Eager,
    /// `build` returns at once; `threads` workers populate from the start in
    /// order. Wait with [`Region::wait_populated`] or run behind
    /// [`Region::populated_frontier`].
    Background {
        /// Worker threads (at least one).
        threads: usize,
    },
}

/// A ladder step that was not taken, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skip {
    /// The page size skipped.
    pub page_size: PageSize,
    /// Why: pool empty, THP disabled, too small, an errno…
    pub reason: String,
}

/// Resident bytes by page size, as the kernel reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Granted {
    /// Bytes on 1 GiB hugetlb pages.
    pub hugetlb_1g_bytes: u64,
    /// Bytes on 2 MiB hugetlb pages.
    pub hugetlb_2m_bytes: u64,
    /// Bytes on transparent huge pages.
    pub thp_bytes: u64,
    /// Bytes on 4 KiB pages.
    pub base_bytes: u64,
    /// `pagemap_scan` or `smaps`.
    pub verified_by: &'static str,
}

impl Granted {
    /// All resident bytes.
    pub fn total(&self) -> u64 {
        self.hugetlb_1g_bytes + self.hugetlb_2m_bytes + self.thp_bytes + self.base_bytes
    }

    /// The fewest page faults that can have brought these bytes in, touched
    /// once: one per huge page (hugetlb 1 GiB or 2 MiB, THP at 2 MiB) and
    /// one per `small_page` of the rest, where `small_page` is the largest
    /// page the rest may have been faulted in with
    /// ([`crate::host::thp::Thp::largest_small_fault_page`]: the base page
    /// unless multi-size THP is on). What a first-touch fault count is at
    /// least, whatever pages the kernel granted. Pure.
    pub fn fewest_faults(&self, small_page: u64) -> u64 {
        self.hugetlb_1g_bytes / GIB1 as u64
            + self.hugetlb_2m_bytes / MIB2 as u64
            + self.thp_bytes / MIB2 as u64
            + self.base_bytes / small_page.max(1)
    }
}

/// What a region asked for, what it got, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backing {
    /// Bytes the caller asked for (the length of the slice).
    pub requested_bytes: usize,
    /// Bytes mapped (rounded up to the page size).
    pub mapped_bytes: usize,
    /// The ladder step taken.
    pub page_size: PageSize,
    /// Resident bytes per page size, verified from the kernel now.
    pub granted: Granted,
    /// How population was done: `lazy`, `madv_populate_write`, `touch_loop`,
    /// `background`, or `background:touch_loop` when the kernel lacked
    /// `MADV_POPULATE_WRITE`.
    pub populate: &'static str,
    /// For background population: bytes from the start known to be populated.
    pub populated_frontier: usize,
    /// Ladder steps skipped, in ladder order.
    pub skipped: Vec<Skip>,
    /// NUMA node the memory is bound to.
    pub numa_node: Option<u32>,
    /// Whether the region is locked in memory.
    pub locked: bool,
    /// Whether children do not inherit the region (`MADV_DONTFORK`).
    pub dont_fork: bool,
    /// A verification problem, if the kernel could not be asked.
    pub verify_error: Option<String>,
}

/// Why a region could not be built. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Size 0 was asked for.
    #[error("a region of 0 bytes was requested: ask for at least 1 byte")]
    ZeroSize,
    /// Rounding the size up to the page size overflows.
    #[error("a region of {0} bytes is too large for the address space")]
    TooLarge(usize),
    /// A strict hugetlb request could not be met.
    #[error("no {page} hugetlb region: {reason}; reserve pages with `{fix}`, or use PagePolicy::Auto to fall back")]
    HugetlbUnavailable {
        /// `hugetlb-2m` or `hugetlb-1g`.
        page: &'static str,
        /// Why (pool size, errno).
        reason: String,
        /// The command that reserves enough pages.
        fix: String,
    },
    /// A strict THP request could not be met.
    #[error("no THP region: {0}; enable THP with `echo madvise > /sys/kernel/mm/transparent_hugepage/enabled`, or use PagePolicy::Auto")]
    ThpUnavailable(String),
    /// `mmap` failed.
    #[error("could not map {bytes} bytes: {error}")]
    Map {
        /// Bytes asked for.
        bytes: usize,
        /// The failing call.
        error: SysError,
    },
    /// Populating failed (out of memory, a cgroup limit).
    #[error("could not populate the region: {0} (out of memory or a cgroup limit?)")]
    Populate(String),
    /// The NUMA node does not exist or binding failed.
    #[error("cannot bind to NUMA node {node}: {reason}")]
    NumaNode {
        /// The node asked for.
        node: u32,
        /// Why.
        reason: String,
    },
    /// `mlock` failed.
    #[error("could not lock the region in memory: {0}; raise the limit with `ulimit -l unlimited` or run as root")]
    Lock(SysError),
    /// An `madvise` the options asked for failed.
    #[error("{0}")]
    Advise(SysError),
    /// A background worker thread could not be started.
    #[error("could not start a background populate thread: {0}")]
    Thread(std::io::Error),
}

/// Builds a [`Region`]. Cheap to create; all the work happens in [`build`](RegionBuilder::build).
#[derive(Debug, Clone)]
pub struct RegionBuilder {
    size: usize,
    pages: PagePolicy,
    populate: Populate,
    numa_node: Option<u32>,
    lock: bool,
    dont_fork: bool,
    before_map: Option<fn(PageSize)>,
}

impl RegionBuilder {
    /// A region of `size` bytes (rounded up to the page size in use; the
    /// slice is exactly `size` long), Auto pages, lazy population.
    pub fn new(size: usize) -> Self {
        RegionBuilder {
            size,
            pages: PagePolicy::Auto,
            populate: Populate::Lazy,
            numa_node: None,
            lock: false,
            dont_fork: false,
            before_map: None,
        }
    }

    /// Which page sizes to use.
    pub fn pages(mut self, policy: PagePolicy) -> Self {
        self.pages = policy;
        self
    }

    /// When to populate.
    pub fn populate(mut self, populate: Populate) -> Self {
        self.populate = populate;
        self
    }

    /// Bind the memory to a NUMA node (`mbind(MPOL_BIND)`) before populating.
    pub fn numa_node(mut self, node: u32) -> Self {
        self.numa_node = Some(node);
        self
    }

    /// Lock the region in memory (`mlock`) after populating.
    pub fn lock(mut self, lock: bool) -> Self {
        self.lock = lock;
        self
    }

    /// Keep the region out of children made by `fork` (`MADV_DONTFORK`):
    /// otherwise a write after `fork` copies whole huge pages.
    pub fn dont_fork(mut self, dont_fork: bool) -> Self {
        self.dont_fork = dont_fork;
        self
    }

    /// Fault injection for tests: called right before each `mmap` attempt,
    /// after the pool was checked.
    #[doc(hidden)]
    pub fn before_map_hook(mut self, hook: fn(PageSize)) -> Self {
        self.before_map = Some(hook);
        self
    }

    /// Maps, advises, binds, populates and locks as asked.
    ///
    /// Cost: one or a few `mmap`s and `madvise`s; with [`Populate::Eager`]
    /// also the faults and zeroing of every page (roughly 5–9 GB/s with huge
    /// pages, 2–4 GB/s with 4 KiB pages on a current server).
    pub fn build(self) -> Result<Region, RegionError> {
        if self.size == 0 {
            return Err(RegionError::ZeroSize);
        }
        if let Some(node) = self.numa_node {
            check_numa_node(node)?;
        }
        let (mut mapping, page_size, skipped) = self.map_by_ladder()?;
        let hugetlb_page = matches!(page_size, PageSize::Hugetlb1G | PageSize::Hugetlb2M)
            .then(|| page_size.bytes());

        match (self.pages, page_size) {
            (_, PageSize::Thp) => mapping
                .advise(0, mapping.len(), Advice::HugePage)
                .map_err(RegionError::Advise)?,
            (PagePolicy::Only(PageSize::Base), _) => {
                // Strictly 4 KiB, even where THP is `always`.
                mapping
                    .advise(0, mapping.len(), Advice::NoHugePage)
                    .map_err(RegionError::Advise)?
            }
            _ => {}
        }
        if self.dont_fork {
            mapping
                .advise(0, mapping.len(), Advice::DontFork)
                .map_err(RegionError::Advise)?;
        }
        if let Some(node) = self.numa_node {
            mapping
                .bind_to_node(node)
                .map_err(|e| RegionError::NumaNode {
                    node,
                    reason: e.to_string(),
                })?;
        }

        let mut background = None;
        let populate = match self.populate {
            Populate::Lazy => "lazy",
            Populate::Eager => populate_now(&mut mapping)?,
            Populate::Background { threads } if populate_write_supported() => {
                let bg =
                    BackgroundPopulate::start(mapping.populator(), threads, Advice::PopulateWrite)
                        .map_err(RegionError::Thread)?;
                background = Some(bg);
                "background"
            }
            Populate::Background { .. } => {
                // Before 5.14 only a touch loop can populate, and it writes the bytes, so it
                // cannot run beside the caller: it runs here, before build returns.
                touch_pages(&mut mapping);
                "background:touch_loop"
            }
        };
        if self.lock {
            mapping.lock().map_err(RegionError::Lock)?;
        }
        Ok(Region {
            background,
            mapping,
            len: self.size,
            page_size,
            hugetlb_page,
            skipped,
            populate,
            numa_node: self.numa_node,
            locked: self.lock,
            dont_fork: self.dont_fork,
        })
    }

    fn map_by_ladder(&self) -> Result<(AnonMapping, PageSize, Vec<Skip>), RegionError> {
        let steps: Vec<PageSize> = match self.pages {
            PagePolicy::Auto => PageSize::LADDER.to_vec(),
            PagePolicy::Only(size) => vec![size],
        };
        let mut skipped = Vec::new();
        for step in steps {
            match self.try_step(step) {
                Ok(mapping) => return Ok((mapping, step, skipped)),
                Err(StepError::Skip(reason)) => skipped.push(Skip {
                    page_size: step,
                    reason,
                }),
                Err(StepError::Fatal(e)) => return Err(e),
            }
        }
        // Only strict policies get here: Base never skips.
        let reason = skipped.pop().map(|s| s.reason).unwrap_or_default();
        Err(match self.pages {
            PagePolicy::Only(PageSize::Thp) => RegionError::ThpUnavailable(reason),
            PagePolicy::Only(size) => {
                let needed = self.size.div_ceil(size.bytes());
                RegionError::HugetlbUnavailable {
                    page: size.name(),
                    reason,
                    fix: reservation_fix(size, needed),
                }
            }
            PagePolicy::Auto => RegionError::Map {
                bytes: self.size,
                error: SysError {
                    call: "mmap",
                    source: Errno::NOMEM.io_error(),
                },
            },
        })
    }

    fn try_step(&self, step: PageSize) -> Result<AnonMapping, StepError> {
        let page = step.bytes();
        let rounded = self
            .size
            .checked_next_multiple_of(page)
            .ok_or(StepError::Fatal(RegionError::TooLarge(self.size)))?;
        match step {
            PageSize::Hugetlb1G | PageSize::Hugetlb2M => {
                if self.size < page {
                    return Err(StepError::Skip(format!(
                        "smaller than one {} page",
                        step.name()
                    )));
                }
                // 1 GiB pages for, say, 1.1 GiB would waste 0.9 GiB: allow at most 1/8.
                if rounded - self.size > self.size / 8 {
                    return Err(StepError::Skip(format!(
                        "rounding up to {} pages would waste {} bytes",
                        step.name(),
                        rounded - self.size
                    )));
                }
                let needed = (rounded / page) as u64;
                let pool = hugetlb::pool(page);
                let Some(pool) = pool else {
                    return Err(StepError::Skip(format!(
                        "the kernel has no {} pool",
                        step.name()
                    )));
                };
                let available = pool.available().unwrap_or(0);
                if available < needed {
                    return Err(StepError::Skip(format!(
                        "pool has {available} free pages, needs {needed}"
                    )));
                }
                self.call_hook(step);
                let options = MapOptions {
                    hugetlb_page_size: Some(page),
                    no_reserve: false,
                    populate: false,
                };
                AnonMapping::map(rounded, options).map_err(|e| match e.errno() {
                    Some(Errno::NOMEM) => {
                        StepError::Skip(format!("pool emptied before mapping: {e}"))
                    }
                    _ => StepError::Skip(e.to_string()),
                })
            }
            PageSize::Thp => {
                if self.size < page {
                    return Err(StepError::Skip("smaller than one 2 MiB page".into()));
                }
                match thp::enabled_mode().as_deref() {
                    Some("never") => {
                        return Err(StepError::Skip(
                            "THP is off system-wide (enabled = never)".into(),
                        ))
                    }
                    None => {
                        return Err(StepError::Skip(
                            "the kernel offers no THP (no readable enabled mode)".into(),
                        ))
                    }
                    Some(_) => {}
                }
                if sys::prctl::thp_disabled().unwrap_or(false) {
                    return Err(StepError::Skip(
                        "THP is disabled for this process (PR_SET_THP_DISABLE)".into(),
                    ));
                }
                self.call_hook(step);
                // 2 MiB-aligned, so every 2 MiB of it can be a huge page.
                AnonMapping::map_aligned(rounded, page, MapOptions::default()).map_err(|source| {
                    StepError::Fatal(RegionError::Map {
                        bytes: rounded,
                        error: source,
                    })
                })
            }
            PageSize::Base => {
                self.call_hook(step);
                AnonMapping::map(rounded, MapOptions::default()).map_err(|source| {
                    StepError::Fatal(RegionError::Map {
                        bytes: rounded,
                        error: source,
                    })
                })
            }
        }
    }

    fn call_hook(&self, step: PageSize) {
        if let Some(hook) = self.before_map {
            hook(step);
        }
    }
}

enum StepError {
    Skip(String),
    Fatal(RegionError),
}

fn reservation_fix(size: PageSize, needed: usize) -> String {
    match size {
        PageSize::Hugetlb1G => {
            format!("echo {needed} > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages")
        }
        _ => {
            let total = hugetlb::pool(MIB2).and_then(|p| p.total).unwrap_or(0);
            format!("sysctl vm.nr_hugepages={}", total as usize + needed)
        }
    }
}

fn check_numa_node(node: u32) -> Result<(), RegionError> {
    let nodes = cpu::numa_nodes(&SysRoot::live());
    if nodes.is_empty() || nodes.contains(&node) {
        return Ok(());
    }
    Err(RegionError::NumaNode {
        node,
        reason: format!("no such node (this machine has nodes {nodes:?})"),
    })
}

/// Whether this kernel has `MADV_POPULATE_WRITE` (5.14+), asked once per
/// process on a one-page scratch mapping.
fn populate_write_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        AnonMapping::map(KIB4, MapOptions::default())
            .and_then(|m| m.advise(0, KIB4, Advice::PopulateWrite))
            .map_or_else(|e| e.errno() != Some(Errno::INVAL), |()| true)
    })
}

fn touch_pages(mapping: &mut AnonMapping) {
    let bytes = mapping.as_mut_slice();
    for page in bytes.chunks_mut(KIB4) {
        page[0] = 0;
    }
    std::hint::black_box(bytes);
}

fn populate_now(mapping: &mut AnonMapping) -> Result<&'static str, RegionError> {
    match mapping.advise(0, mapping.len(), Advice::PopulateWrite) {
        Ok(()) => Ok("madv_populate_write"),
        Err(e) if e.errno() == Some(Errno::INVAL) => {
            touch_pages(mapping);
            Ok("touch_loop")
        }
        Err(e) => Err(RegionError::Populate(e.to_string())),
    }
}

/// Memory mapped with the best page size available, populated as asked.
///
/// Derefs to exactly the requested bytes. Dropping it stops any background
/// workers, then unmaps the whole mapping (a multiple of its page size).
#[derive(Debug)]
pub struct Region {
    // Declared first so it is dropped (workers joined) before the mapping goes.
    background: Option<BackgroundPopulate>,
    mapping: AnonMapping,
    len: usize,
    page_size: PageSize,
    hugetlb_page: Option<usize>,
    skipped: Vec<Skip>,
    populate: &'static str,
    numa_node: Option<u32>,
    locked: bool,
    dont_fork: bool,
}

impl Region {
    /// The page size the ladder settled on.
    pub fn page_size(&self) -> PageSize {
        self.page_size
    }

    /// Start address (aligned to the page size).
    pub fn addr(&self) -> usize {
        self.mapping.addr()
    }

    /// What the region asked for and got, verified from the kernel now.
    /// Costs one `PAGEMAP_SCAN` ioctl (or one read of `/proc/self/smaps`).
    pub fn backing(&self) -> Backing {
        let (granted, verify_error) =
            match verify::granted(self.mapping.addr(), self.mapping.len(), self.hugetlb_page) {
                Ok(g) => (g, None),
                Err(e) => (Granted::default(), Some(e)),
            };
        Backing {
            requested_bytes: self.len,
            mapped_bytes: self.mapping.len(),
            page_size: self.page_size,
            granted,
            populate: self.populate,
            populated_frontier: self.populated_frontier(),
            skipped: self.skipped.clone(),
            numa_node: self.numa_node,
            locked: self.locked,
            dont_fork: self.dont_fork,
            verify_error,
        }
    }

    /// Bytes from the start known to be populated: everything for eager
    /// regions, the workers' frontier for background ones, 0 for lazy ones.
    /// Lock-free.
    pub fn populated_frontier(&self) -> usize {
        match (&self.background, self.populate) {
            (Some(bg), _) => bg.frontier().min(self.len),
            (None, "lazy") => 0,
            (None, _) => self.len,
        }
    }

    /// Blocks until bytes `[0, n)` are populated. For a background region this
    /// waits on the workers; for a lazy one it populates `[0, n)` now in the
    /// calling thread; for an eager one it returns at once.
    pub fn wait_populated(&self, n: usize) -> Result<(), RegionError> {
        let n = n.min(self.len);
        match &self.background {
            Some(bg) => bg.wait_until(n).map_err(RegionError::Populate),
            None if self.populate == "lazy" && n > 0 => self
                .mapping
                .advise(0, n, Advice::PopulateWrite)
                .map_err(|e| RegionError::Populate(e.to_string())),
            None => Ok(()),
        }
    }
}

impl Deref for Region {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.mapping.as_slice()[..self.len]
    }
}

impl DerefMut for Region {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.mapping.as_mut_slice()[..len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_size_is_a_typed_error() {
        assert!(matches!(
            RegionBuilder::new(0).build(),
            Err(RegionError::ZeroSize)
        ));
    }

    #[test]
    fn odd_sizes_round_up_but_slice_is_exact() {
        let r = RegionBuilder::new(3 * MIB2 + 5)
            .populate(Populate::Eager)
            .build()
            .unwrap();
        assert_eq!(r.len(), 3 * MIB2 + 5);
        let b = r.backing();
        assert_eq!(b.requested_bytes, 3 * MIB2 + 5);
        assert_eq!(b.mapped_bytes % r.page_size().bytes(), 0);
        assert!(b.mapped_bytes >= b.requested_bytes);
        assert_eq!(r.addr() % r.page_size().bytes(), 0);
    }

    #[test]
    fn tiny_regions_use_base_pages_and_say_why() {
        let r = RegionBuilder::new(100).build().unwrap();
        assert_eq!(r.page_size(), PageSize::Base);
        let reasons: Vec<_> = r
            .backing()
            .skipped
            .iter()
            .map(|s| (s.page_size, s.reason.clone()))
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons.iter().all(|(_, why)| why.contains("smaller than")));
    }

    #[test]
    fn lazy_region_populates_on_request() {
        let r = RegionBuilder::new(4 * MIB2)
            .pages(PagePolicy::Only(PageSize::Base))
            .build()
            .unwrap();
        assert_eq!(r.populated_frontier(), 0);
        assert_eq!(r.backing().granted.total(), 0);
        r.wait_populated(MIB2).unwrap();
        assert_eq!(r.backing().granted.base_bytes, MIB2 as u64);
    }

    #[test]
    fn background_region_reaches_full_population() {
        let mut r = RegionBuilder::new(40 << 20)
            .populate(Populate::Background { threads: 2 })
            .build()
            .unwrap();
        r.wait_populated(usize::MAX).unwrap();
        assert_eq!(r.populated_frontier(), 40 << 20);
        assert!(r.backing().granted.total() >= 40 << 20);
        r[12345] = 9;
        assert_eq!(r[12345], 9);
    }

    #[test]
    fn impossible_numa_node_is_a_typed_error() {
        let err = RegionBuilder::new(MIB2)
            .numa_node(4000)
            .build()
            .unwrap_err();
        assert!(
            matches!(err, RegionError::NumaNode { node: 4000, .. }),
            "{err}"
        );
    }

    #[test]
    fn strict_base_pages_stay_base() {
        let r = RegionBuilder::new(8 * MIB2)
            .pages(PagePolicy::Only(PageSize::Base))
            .populate(Populate::Eager)
            .build()
            .unwrap();
        let g = r.backing().granted;
        assert_eq!(g.thp_bytes, 0);
        assert_eq!(g.base_bytes, 8 * MIB2 as u64);
    }
}
