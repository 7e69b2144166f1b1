//! The guest's event counters, named as in `/proc/vmstat` (plus a few memvisor adds, marked).
//! Column names carry their unit: `pgpgin_KiB` is in KiB because the kernel reports it so
//! (`vmstat -s` calls it "pages paged in", but /proc/vmstat divides sectors by two).

/// A cumulative counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// KiB read from block devices (swap and files).
    PgpgIn,
    /// KiB written to block devices.
    PgpgOut,
    /// Pages read from swap.
    PswpIn,
    /// Pages written to swap.
    PswpOut,
    /// Page faults (minor and major).
    PgFault,
    /// Faults that had to wait for a read.
    PgMajFault,
    /// Pages scanned by kswapd.
    PgScanKswapd,
    /// Pages scanned by direct reclaim.
    PgScanDirect,
    /// Pages reclaimed by kswapd.
    PgStealKswapd,
    /// Pages reclaimed by direct reclaim.
    PgStealDirect,
    /// Pages moved to an active list.
    PgActivate,
    /// Pages moved from an active list to an inactive one.
    PgDeactivate,
    /// Pages scanned on active lists.
    PgRefill,
    /// Allocations that entered direct reclaim.
    AllocStall,
    /// Times kswapd was woken (memvisor: /proc/vmstat has no direct equivalent).
    KswapdWake,
    /// Processes killed by the OOM killer.
    OomKill,
    /// Pages brought in by swap readahead.
    SwapRa,
    /// Swap readahead pages that were used.
    SwapRaHit,
    /// Page-cache pages dirtied.
    NrDirtied,
    /// Pages written back from the page cache.
    NrWritten,
    /// Swap slots whose written contents were discarded (memvisor).
    SwapDiscard,
    /// Pages the balloon driver took (`balloon_inflate`).
    BalloonInflate,
    /// Pages the balloon driver gave back (`balloon_deflate`).
    BalloonDeflate,
    /// Swap (pagefile) read requests: Windows' Memory\Page Reads, "without regard to the number of
    /// pages retrieved" (memvisor; Pages Input is `pswpin`).
    PageReads,
    /// Swap (pagefile) write requests: Windows' Memory\Page Writes (memvisor; Pages Output is
    /// `pswpout`).
    PageWrites,
    /// Windows: faults resolved from the standby or modified list or a page in flight, no read.
    TransitionFaults,
    /// Windows: pages the working-set manager took out of working sets.
    WsTrimmed,
    /// Windows: standby pages given a new use (their next touch reads the pagefile).
    StandbyRepurposed,
    /// Anonymous pages read back where reclaim had left a shadow entry.
    WorkingsetRefaultAnon,
    /// Page-cache pages read back where reclaim had left a shadow entry.
    WorkingsetRefaultFile,
    /// Anonymous refaults close enough to be activated at once.
    WorkingsetActivateAnon,
    /// Page-cache refaults close enough to be activated at once.
    WorkingsetActivateFile,
    /// Pages whose reclaim write completed moved to the inactive tail (`pgrotated`).
    PgRotated,
    /// Clean page-cache pages reclaim offered to cleancache (debugfs `cleancache/puts`).
    CleancachePuts,
    /// Page-cache reads cleancache served (`cleancache/succ_gets`).
    CleancacheSuccGets,
    /// Page-cache reads cleancache did not hold (`cleancache/failed_gets`).
    CleancacheFailedGets,
    /// Swap writes frontswap took instead of the disk (`frontswap/succ_stores`).
    FrontswapSuccStores,
    /// Swap writes frontswap refused (`frontswap/failed_stores`).
    FrontswapFailedStores,
    /// Swap reads frontswap served (`frontswap/loads`).
    FrontswapLoads,
}

/// Number of counters.
pub const NR_COUNTERS: usize = 39;

impl Counter {
    /// Column names with units, in counter order.
    pub const COLUMNS: [&'static str; NR_COUNTERS] = [
        "pgpgin_KiB",
        "pgpgout_KiB",
        "pswpin_pages",
        "pswpout_pages",
        "pgfault",
        "pgmajfault",
        "pgscan_kswapd_pages",
        "pgscan_direct_pages",
        "pgsteal_kswapd_pages",
        "pgsteal_direct_pages",
        "pgactivate_pages",
        "pgdeactivate_pages",
        "pgrefill_pages",
        "allocstall",
        "kswapd_wake",
        "oom_kill",
        "swap_ra_pages",
        "swap_ra_hit_pages",
        "nr_dirtied_pages",
        "nr_written_pages",
        "swap_discard_pages",
        "balloon_inflate_pages",
        "balloon_deflate_pages",
        "page_reads",
        "page_writes",
        "transition_faults",
        "ws_trimmed_pages",
        "standby_repurposed_pages",
        "workingset_refault_anon_pages",
        "workingset_refault_file_pages",
        "workingset_activate_anon_pages",
        "workingset_activate_file_pages",
        "pgrotated_pages",
        "cleancache_puts_pages",
        "cleancache_succ_gets_pages",
        "cleancache_failed_gets_pages",
        "frontswap_succ_stores_pages",
        "frontswap_failed_stores_pages",
        "frontswap_loads_pages",
    ];
}

/// The counters.
#[derive(Clone, Debug)]
pub struct VmStat {
    c: [u64; NR_COUNTERS],
}

impl Default for VmStat {
    fn default() -> Self {
        Self { c: [0; NR_COUNTERS] }
    }
}

impl VmStat {
    /// Adds to a counter.
    #[inline]
    pub fn add(&mut self, v: Counter, n: u64) {
        self.c[v as usize] += n;
    }

    /// Takes back `n` counted too early (events that turned out not to happen).
    #[inline]
    pub fn sub(&mut self, v: Counter, n: u64) {
        self.c[v as usize] -= n;
    }

    /// Increments a counter.
    #[inline]
    pub fn inc(&mut self, v: Counter) {
        self.c[v as usize] += 1;
    }

    /// Reads a counter.
    #[inline]
    pub fn get(&self, v: Counter) -> u64 {
        self.c[v as usize]
    }

    /// All counters in `Counter::COLUMNS` order.
    pub fn values(&self) -> &[u64; NR_COUNTERS] {
        &self.c
    }
}
