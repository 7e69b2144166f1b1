//! Page reclaim (`mm/vmscan.c`): how many pages to scan on each LRU list at a given priority
//! (`get_scan_count`), the inactive-list scan that frees, writes or keeps each page
//! (`shrink_folio_list`), the active-list scan that ages pages (`shrink_active_list`), direct
//! reclaim (`try_to_free_pages`), and exact-LRU eviction.
//!
//! Kernel versions differ; this follows 5.9+ for list placement and reference checks (new pages go
//! to the inactive list; a mapped page must be seen referenced twice to be activated), refault
//! detection (`workingset.rs`) and the 5.8+ cost-based balance of anonymous against file scanning
//! (`lru_note_cost`). Swap writes wait under a block plug (`bio::Plug`) until a priority level
//! ends, or, when the plug is a faulting process's, until the fault submits its reads. Each memory
//! cgroup has its own lists (its lruvec): global reclaim walks every lruvec, limit reclaim only its
//! cgroup's (`memcontrol.rs`).

use super::bio::{Bio, BioKind, MAX_REQUEST_PAGES, Plug, Submission};
use super::lru::LruList;
use super::oom_kill::Oom;
use super::page::{NONE, PG_DIRTY, PG_LOCKED, PG_MAPPED, PG_RECLAIM, PG_REFERENCED, PG_WORKINGSET, PG_WRITEBACK, PageKind};
use super::{CgroupVersion, Counter, Env, Guest};
use crate::units::PAGE_SIZE;

/// DEF_PRIORITY: reclaim starts by scanning 1/4096 of each list.
pub const DEF_PRIORITY: u32 = 12;
/// MAX_RECLAIM_RETRIES (mm/internal.h): fruitless reclaims in a row before kswapd gives up, a
/// cgroup charge fails or an allocation calls the OOM killer.
pub(super) const MAX_RECLAIM_RETRIES: u32 = 16;
/// SWAP_CLUSTER_MAX (include/linux/swap.h): pages one reclaim call tries to free.
pub const SWAP_CLUSTER_MAX: u64 = 32;

/// How many pages before the one being scanned a tail scan fetches links and descriptors. A long
/// list's pages lie scattered over memory, and a page kept or rotated takes less time than a
/// cache miss: fetched one page ahead, half of `shrink_lruvec`'s time was the wait for the next
/// descriptor (perf, `tmem-kernel-build`). 6 and 12 measured alike, within the machine's noise.
const SCAN_AHEAD: u32 = 12;

/// The look-ahead of a scan from a list's tail: a page `lead` places before the page being
/// scanned, whose links and descriptor are on their way. The list's order ahead of the scan does
/// not change while it runs (only the scanned page moves), and a stale page is only a wasted hint.
#[derive(Default)]
struct ScanAhead {
    page: Option<u32>,
    lead: u32,
}

impl ScanAhead {
    /// Called with each page as the scan reaches it: moves the look-ahead up to `SCAN_AHEAD`
    /// pages before it, two steps at a time while it catches up (each step reads links fetched
    /// the step before).
    #[inline]
    fn step(&mut self, g: &Guest, p: u32) {
        if self.lead == 0 {
            self.page = Some(p);
        } else {
            self.lead -= 1;
        }
        for _ in 0..2 {
            if self.lead >= SCAN_AHEAD {
                break;
            }
            let Some(q) = self.page.and_then(|c| g.lru.prefetch_prev(c)) else {
                self.page = None;
                break;
            };
            g.pages.prefetch(q);
            self.page = Some(q);
            self.lead += 1;
        }
    }
}

/// A lruvec's recent cost of reclaiming each type (`lruvec->anon_cost`, `file_cost`, 5.8+),
/// index 0 anon, 1 file: pages written out or refaulting from the working set, at
/// SWAP_CLUSTER_MAX each, plus pages scanned and not reclaimed (`lru_note_cost`).
#[derive(Clone, Debug, Default)]
pub struct ReclaimCost {
    cost: [u64; 2],
}

/// The reclaimer's CPU time per page, by outcome: every page looked at costs `scan_ns` (isolate,
/// `folio_referenced`, put back), a freed page `free_ns` more (unmap from the swap or page cache,
/// free), a page whose write it starts `pageout_ns` more (swap slot, unmap, the bio).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct ReclaimCosts {
    scan_ns: u64,
    free_ns: u64,
    pageout_ns: u64,
}

impl ReclaimCosts {
    /// The guest's costs.
    pub(super) fn of_guest(c: &super::Costs) -> Self {
        Self { scan_ns: c.reclaim_scan_ns, free_ns: c.reclaim_free_ns, pageout_ns: c.reclaim_pageout_ns }
    }

    /// Time to scan `scanned` pages of which `freed` were freed and `written` written.
    pub(super) fn of(&self, scanned: u64, freed: u64, written: u64) -> u64 {
        scanned * self.scan_ns + freed * self.free_ns + written * self.pageout_ns
    }
}

/// One reclaim pass's state (`struct scan_control`).
pub(super) struct ScanControl {
    /// Pages to free before stopping.
    pub nr_to_reclaim: u64,
    /// Scan 1/2^priority of each list.
    pub priority: u32,
    /// kswapd or direct reclaim.
    pub kswapd: bool,
    /// When the scan runs: references processes made after it count as made after the scan.
    pub now: u64,
    /// Pages freed.
    pub nr_reclaimed: u64,
    /// Pages whose write-out started; they are freed when it completes.
    pub nr_writeback: u64,
    /// Pages scanned.
    pub nr_scanned: u64,
    /// Dirty page-cache pages met (the flusher is asked to write them).
    pub nr_dirty_file: u64,
    /// The memory cgroup whose limit is being enforced (`None`: global reclaim).
    pub target: Option<u8>,
    /// Limit reclaim in a cgroup v1 hierarchy met a page it must wait for (`folio_wait_writeback`
    /// in case 3 of `shrink_folio_list`); the scan stopped.
    pub wait_writeback: bool,
    /// Swap writes gathered under the block plug.
    pub plug: Plug,
    /// The plug is the caller's, not `shrink_lruvec`'s: a fault reclaiming for its swap readahead
    /// (`swap_vma_readahead` plugs its loop, and a nested plug is the outer one), so the writes
    /// wait for the fault's reads to be submitted, or for the plug to fill, not for the end of a
    /// priority level.
    pub held: bool,
    /// A timed scan stopped because its plug is full: the caller submits it, at the scan's clock,
    /// and the scan goes on.
    plug_full: bool,
    /// CPU time of the cleancache puts of the pages it dropped.
    tmem_ns: u64,
    /// A scan that takes simulated time (a process's limit reclaim): it counts only freed pages as
    /// progress, as the kernel does, and stops to let time pass when it reaches `deadline`.
    timed: bool,
    /// Time the scan may run to before it must yield (the next event elsewhere).
    pub deadline: u64,
    /// The reclaimer's CPU time per page by what became of it (looked at, freed, written).
    costs: ReclaimCosts,
    /// Time spent before the scan last resumed; its clock runs from `now` by what it has done
    /// since (`spent_ns` less this).
    spent_at_resume: u64,
    /// The scan stopped at its deadline, to go on when resumed.
    stopped: bool,
    /// Whether the scan may move pages from the active to the inactive list, anon and file
    /// (`may_deactivate`, decided by `prepare_scan_count`).
    may_deactivate: [bool; 2],
    /// An active list was left alone because deactivation was not allowed (`skipped_deactivate`).
    skipped_deactivate: bool,
    /// Deactivate whatever the list ratios say (`force_deactivate`: the retry after a pass that
    /// reclaimed nothing having skipped deactivation).
    force_deactivate: bool,
    /// Enough inactive page cache that is not thrashing: reclaim it alone (`cache_trim_mode`).
    cache_trim_mode: bool,
    /// The target's reclaim costs, anon and file, when the level began (`sc->anon_cost`, `file_cost`).
    cost: [u64; 2],
    /// Swap writes this scan started (`stat.nr_pageout`), for the cost of the batch under way.
    nr_pageout: u64,
    /// Pages it had left to scan on each list at the current priority when it stopped mid-way.
    resume: Option<[u64; 4]>,
}

impl ScanControl {
    pub(super) fn new(nr_to_reclaim: u64, kswapd: bool, now: u64, costs: ReclaimCosts) -> Self {
        Self {
            nr_to_reclaim,
            priority: DEF_PRIORITY,
            kswapd,
            now,
            nr_reclaimed: 0,
            nr_writeback: 0,
            nr_scanned: 0,
            nr_dirty_file: 0,
            target: None,
            wait_writeback: false,
            plug: Plug::default(),
            held: false,
            plug_full: false,
            tmem_ns: 0,
            timed: false,
            deadline: u64::MAX,
            costs,
            spent_at_resume: 0,
            stopped: false,
            may_deactivate: [true; 2],
            skipped_deactivate: false,
            force_deactivate: false,
            cache_trim_mode: false,
            cost: [0; 2],
            nr_pageout: 0,
            resume: None,
        }
    }

    /// The same scan taking time: freed pages alone count as progress, and it stops whenever its
    /// clock passes its deadline (see `resume_at`).
    pub(super) fn timed(self) -> Self {
        Self { timed: true, ..self }
    }

    /// CPU time the scan has taken so far.
    pub(super) fn spent_ns(&self) -> u64 {
        self.costs.of(self.nr_scanned, self.nr_reclaimed, self.nr_pageout) + self.tmem_ns
    }

    /// Starts or resumes a timed scan at `now`; it may run until `deadline`.
    pub(super) fn resume_at(&mut self, now: u64, deadline: u64) {
        self.now = now;
        self.deadline = deadline;
        self.spent_at_resume = self.spent_ns();
        self.wait_writeback = false;
        self.stopped = false;
    }

    /// Whether a timed scan has passed its deadline (and so must stop at the next batch boundary).
    /// Its plugged writes stay plugged: a task preempted in reclaim does not flush its plug.
    pub(super) fn overdue(&self) -> bool {
        self.timed && self.clock() > self.deadline
    }

    /// Where a timed scan's clock has reached.
    pub(super) fn clock(&self) -> u64 {
        self.now + self.spent_ns() - self.spent_at_resume
    }

    /// The pass over all priorities is over: a pass that reclaimed nothing having skipped
    /// deactivation starts again with it forced (`do_try_to_free_pages`); returns whether it did.
    pub(super) fn retry_forcing_deactivation(&mut self) -> bool {
        if self.progress() > 0 || !self.skipped_deactivate {
            return false;
        }
        self.priority = DEF_PRIORITY;
        self.force_deactivate = true;
        self.skipped_deactivate = false;
        true
    }

    /// Stops a timed scan between priorities, to go on later.
    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }

    /// Whether a timed scan stopped at its deadline, to go on later.
    pub(super) fn stopped(&self) -> bool {
        self.stopped
    }

    /// Pages freed or on their way to being freed. The kernel counts freed pages only, but its scan
    /// takes real time during which earlier writes complete and their pages are freed at the list's
    /// tail; here a scan is instantaneous, so counting only freed pages would write out a whole
    /// list before any write could complete.
    /// A timed scan sees its writes complete as it goes, so it counts freed pages only.
    pub(super) fn progress(&self) -> u64 {
        if self.timed { self.nr_reclaimed } else { self.nr_reclaimed + self.nr_writeback }
    }

    /// Whether a timed scan must stop for its plug to be flushed, and clears the mark.
    pub(super) fn take_plug_full(&mut self) -> bool {
        std::mem::take(&mut self.plug_full)
    }

    /// The lruvec whose clock stamps the shadow entries of pages this scan frees (the kernel's
    /// `target_memcg`; the root for global reclaim).
    pub(super) fn shadow_target(&self) -> u8 {
        self.target.unwrap_or(0)
    }
}

/// What reclaim does with a page it finds on an inactive list (`enum folio_references`).
enum Verdict {
    Activate,
    Keep,
    ReclaimClean,
    Reclaim,
}

/// `int_sqrt`.
fn isqrt(x: u64) -> u64 {
    (x as f64).sqrt() as u64
}

/// `inactive_is_low`'s rule on `ina` inactive and `act` active pages of a type: the inactive list
/// should hold at least 1/ratio of the active one, ratio sqrt(10 x GiB of the type), at least 1.
fn inactive_low(ina: u64, act: u64) -> bool {
    let gb = (ina + act) >> (30 - 12);
    let ratio = if gb > 0 { isqrt(10 * gb) } else { 1 };
    ina * ratio < act
}

impl Guest {
    /// Whether the inactive list of a type in lruvec `v` is too small next to the active one
    /// (`inactive_is_low`: ratio sqrt(10 x GiB of the type), at least 1).
    pub(super) fn inactive_is_low(&self, v: u8, file: bool) -> bool {
        inactive_low(self.lru.len_in(v, LruList::inactive(file)), self.lru.len_in(v, LruList::active(file)))
    }

    /// Pages on list `l` of cgroup `v` and its descendants (the root's: the whole guest), as the
    /// kernel's hierarchical lruvec statistics count them for a reclaim target.
    fn target_len(&self, v: u8, l: LruList) -> u64 {
        if v == 0 { self.lru.len(l) } else { self.lru.len_in(v, l) }
    }

    /// `inactive_is_low` judged on a reclaim target's hierarchical sizes.
    fn target_inactive_is_low(&self, v: u8, file: bool) -> bool {
        inactive_low(self.target_len(v, LruList::inactive(file)), self.target_len(v, LruList::active(file)))
    }

    /// `prepare_scan_count` (5.9+): deactivation of a type is allowed while its inactive list is
    /// low, or when refaults of that type were activated since the target's last reclaim cycle
    /// ("a new workingset is being established. Deactivate to get rid of any stale active pages
    /// quickly"); with enough inactive page cache and no file refaults, reclaim trims the cache
    /// alone (`cache_trim_mode`).
    fn prepare_scan_count(&self, sc: &mut ScanControl) {
        let v = sc.target.unwrap_or(0);
        if sc.force_deactivate {
            sc.may_deactivate = [true; 2];
        } else {
            let m = &self.memcgs[v as usize];
            for (t, file) in [(0, false), (1, true)] {
                sc.may_deactivate[t] = m.workingset_activate[t] != m.refaults[t] || self.target_inactive_is_low(v, file);
            }
        }
        sc.cache_trim_mode = self.target_len(v, LruList::InactiveFile) >> sc.priority > 0 && !sc.may_deactivate[1];
        sc.cost = self.reclaim_cost[v as usize].cost;
    }

    /// `lru_note_cost`: reclaiming a type cost `nr_io` page reads or writes (each weighed as
    /// SWAP_CLUSTER_MAX rotations) and `nr_rotated` pages looked at for nothing, in cgroup `v` and
    /// its ancestors; each decays by half once its costs pass a quarter of its pages.
    pub(super) fn lru_note_cost(&mut self, v: u8, file: bool, nr_io: u64, nr_rotated: u64) {
        let cost = nr_io * SWAP_CLUSTER_MAX + nr_rotated;
        let lruvecs: &[u8] = if v == 0 { &[0] } else { &[v, 0] };
        for &m in lruvecs {
            let lrusize: u64 = LruList::LINUX.iter().map(|&l| self.target_len(m, l)).sum();
            let c = &mut self.reclaim_cost[m as usize].cost;
            c[file as usize] += cost;
            if c[0] + c[1] > lrusize / 4 {
                c[0] /= 2;
                c[1] /= 2;
            }
        }
    }

    /// `snapshot_refaults`: the end of a reclaim cycle on target `v` remembers its refault
    /// activations, so the next cycle deactivates only if new ones come.
    pub(super) fn snapshot_refaults(&mut self, v: u8) {
        let m = &mut self.memcgs[v as usize];
        m.refaults = m.workingset_activate;
    }

    /// `get_scan_count`: pages to scan on each of the four lists of lruvec `v` at this priority.
    fn get_scan_count(&mut self, v: u8, sc: &ScanControl) -> [u64; 4] {
        let priority = sc.priority;
        let lens = [0, 1, 2, 3].map(|l| self.lru.len_in(v, LruList::ALL[l]));
        let file = lens[2] + lens[3];
        let swappiness = self.cfg.sysctl.swappiness as u64;
        enum Balance {
            File,
            Anon,
            Equal,
            Fract(u64, u64),
        }
        let free = self.pages.nr_free();
        let balance = if !self.swap.has_free() {
            Balance::File
        } else if priority == 0 && swappiness > 0 {
            Balance::Equal
        } else if sc.target.is_none() && file + free <= self.wmark.high && !sc.may_deactivate[0] && lens[0] >> priority > 0 {
            // `file_is_tiny`, judged for global reclaim only.
            Balance::Anon
        } else if sc.cache_trim_mode {
            Balance::File
        } else {
            // Pressure inversely proportional to each type's cost, at least a third of it on
            // each before swappiness (5.9+).
            let total = sc.cost[0] + sc.cost[1];
            let (anon_cost, file_cost) = (total + sc.cost[0], total + sc.cost[1]);
            let total = anon_cost + file_cost;
            let ap = swappiness * (total + 1) / (anon_cost + 1);
            let fp = (200 - swappiness) * (total + 1) / (file_cost + 1);
            Balance::Fract(ap, fp)
        };
        let mut nr = [0u64; 4];
        for l in 0..4 {
            let file_list = l >= 2;
            let scan = lens[l] >> priority;
            nr[l] = match balance {
                Balance::File => {
                    if file_list {
                        scan
                    } else {
                        0
                    }
                }
                Balance::Anon => {
                    if file_list {
                        0
                    } else {
                        scan
                    }
                }
                Balance::Equal => scan,
                Balance::Fract(ap, fp) => {
                    let frac = if file_list { fp } else { ap };
                    scan * frac / (ap + fp).max(1)
                }
            };
        }
        nr
    }

    /// `shrink_node`: limit reclaim scans its cgroup's lruvec; global reclaim walks every lruvec,
    /// the root's first (`shrink_node_memcgs`), direct reclaim stopping once it has enough.
    pub(super) fn shrink_node(&mut self, sc: &mut ScanControl) {
        // A scan resumed in the middle of a level goes on with that level's decisions.
        if sc.resume.is_none() {
            self.prepare_scan_count(sc);
        }
        if let Some(v) = sc.target {
            self.shrink_lruvec(v, sc);
            return;
        }
        for v in 0..self.lru.lruvecs() {
            self.shrink_lruvec(v, sc);
            if !sc.kswapd && sc.progress() >= sc.nr_to_reclaim {
                break;
            }
        }
    }

    /// `shrink_lruvec`: scan the lists in batches of SWAP_CLUSTER_MAX until the targets are met or
    /// enough is reclaimed, then rebalance the anonymous lists.
    /// A timed scan that reaches its deadline stops between batches, keeping what it had left.
    fn shrink_lruvec(&mut self, v: u8, sc: &mut ScanControl) {
        let mut nr = match sc.resume.take() {
            Some(nr) => nr,
            None => self.get_scan_count(v, sc),
        };
        while nr[0] > 0 || nr[2] > 0 || nr[3] > 0 {
            for (l, left) in nr.iter_mut().enumerate() {
                if *left > 0 {
                    let n = SWAP_CLUSTER_MAX.min(*left);
                    *left -= n;
                    self.shrink_list(v, LruList::ALL[l], n, sc);
                }
            }
            if sc.wait_writeback {
                return;
            }
            if sc.progress() >= sc.nr_to_reclaim {
                break;
            }
            let left = nr[0] > 0 || nr[2] > 0 || nr[3] > 0;
            if sc.timed && left && sc.plug.is_full() {
                sc.resume = Some(nr);
                sc.plug_full = true;
                return;
            }
            if sc.overdue() && left {
                sc.resume = Some(nr);
                sc.stopped = true;
                return;
            }
        }
        // Aged even when the target was met without scanning anon, to keep candidates for the
        // next cycle; worth it whenever there is swap (`can_age_anon_pages`).
        if self.swap.size() > 0 && self.inactive_is_low(v, false) {
            self.shrink_active_list(v, LruList::ActiveAnon, SWAP_CLUSTER_MAX, sc);
        }
    }

    fn shrink_list(&mut self, v: u8, l: LruList, n: u64, sc: &mut ScanControl) {
        if l.is_active() {
            if sc.may_deactivate[l.is_file() as usize] {
                self.shrink_active_list(v, l, n, sc);
            } else {
                sc.skipped_deactivate = true;
            }
        } else {
            self.shrink_inactive_list(v, l, n, sc);
        }
    }

    /// Clears the accessed bit of a mapped anonymous page at time `now`; says whether it was set.
    /// If the owner, running ahead, referenced the page after `now`, the bit is set again at once:
    /// the scan saw it set, and the later reference set it anew.
    pub(super) fn test_clear_young(&mut self, p: u32, now: u64) -> bool {
        if !self.pages.has(p, PG_MAPPED) {
            return false;
        }
        let (pid, vpn) = (self.pages[p as usize].owner, self.pages[p as usize].index);
        let proc = &mut self.procs[pid as usize];
        if !proc.mm.young.get(vpn as usize) {
            return false;
        }
        if !proc.ahead.touched_after(vpn, now) {
            proc.mm.young.clear(vpn as usize);
            proc.mm.set_fast(vpn, false, false);
        }
        true
    }

    /// `shrink_active_list`: move pages from the tail of an active list to the inactive list,
    /// clearing their accessed bits and marking them `PG_workingset` (they were active). Only
    /// referenced executable file pages stay active in the kernel; there are none here.
    fn shrink_active_list(&mut self, v: u8, l: LruList, n: u64, sc: &mut ScanControl) {
        let mut ahead = ScanAhead::default();
        for _ in 0..n.min(self.lru.len_in(v, l)) {
            let Some(p) = self.lru.tail(v, l) else { break };
            ahead.step(self, p);
            self.vmstat.inc(Counter::PgRefill);
            self.test_clear_young(p, sc.now);
            self.pages.set(p, PG_WORKINGSET);
            self.lru.move_head(LruList::inactive(l.is_file()), p);
            self.vmstat.inc(Counter::PgDeactivate);
        }
    }

    /// `folio_check_references`.
    fn check_references(&mut self, p: u32, file: bool, now: u64) -> Verdict {
        let young = self.test_clear_young(p, now);
        let referenced = self.pages.test_and_clear(p, PG_REFERENCED);
        if young {
            // A mapped page starts with the reference of the fault that created it, so it must be
            // seen referenced twice to be activated.
            self.pages.set(p, PG_REFERENCED);
            return if referenced { Verdict::Activate } else { Verdict::Keep };
        }
        if referenced && file { Verdict::ReclaimClean } else { Verdict::Reclaim }
    }

    /// `shrink_inactive_list` + `shrink_folio_list`: take `n` pages from the tail of an inactive
    /// list and free, write, keep or activate each.
    /// Then `lru_note_cost`: the writes it started, and the pages it looked at and did not free.
    fn shrink_inactive_list(&mut self, v: u8, l: LruList, n: u64, sc: &mut ScanControl) {
        let (scanned, reclaimed, pageout) = (sc.nr_scanned, sc.nr_reclaimed, sc.nr_pageout);
        self.shrink_folio_list(v, l, n, sc);
        let scanned = sc.nr_scanned - scanned;
        let freed = sc.nr_reclaimed - reclaimed;
        self.lru_note_cost(v, l.is_file(), sc.nr_pageout - pageout, scanned - freed);
    }

    /// `shrink_folio_list` over `n` pages from the tail of an inactive list.
    fn shrink_folio_list(&mut self, v: u8, l: LruList, n: u64, sc: &mut ScanControl) {
        let file = l.is_file();
        let (scan_ev, steal_ev) =
            if sc.kswapd { (Counter::PgScanKswapd, Counter::PgStealKswapd) } else { (Counter::PgScanDirect, Counter::PgStealDirect) };
        let mut ahead = ScanAhead::default();
        for _ in 0..n.min(self.lru.len_in(v, l)) {
            let Some(p) = self.lru.tail(v, l) else { break };
            ahead.step(self, p);
            sc.nr_scanned += 1;
            self.vmstat.inc(scan_ev);
            if self.pages.has(p, PG_WRITEBACK) {
                if sc.target.is_some() && self.cfg.cgroup == CgroupVersion::V1 && self.pages.has(p, PG_RECLAIM) {
                    // Case 3: legacy cgroup reclaim waits for the write, then tries the page again
                    // (the write's completion frees it if it is still idle then).
                    self.lru.move_head(l, p);
                    sc.wait_writeback = true;
                    return;
                }
                // Cases 1 and 2 (since 4.11): moved out of the way to the active list, tagged so
                // that its completion rotates it to the inactive tail.
                if !self.pages.has(p, PG_RECLAIM) && !file && self.pages[p as usize].kind == PageKind::Anon {
                    self.nr_reclaim_wb += 1;
                }
                self.pages.set(p, PG_RECLAIM);
                self.putback_active(p, file);
                continue;
            }
            if self.pages[p as usize].io != NONE || self.pages.has(p, PG_LOCKED) {
                // Locked for a read: not reclaimable now (`folio_trylock` fails: keep).
                self.lru.move_head(l, p);
                continue;
            }
            match self.check_references(p, file, sc.now) {
                Verdict::Activate => self.putback_active(p, file),
                Verdict::Keep => self.lru.move_head(l, p),
                Verdict::ReclaimClean if self.pages.has(p, PG_DIRTY) => self.lru.move_head(l, p),
                Verdict::ReclaimClean | Verdict::Reclaim => {
                    let freed = if file { self.reclaim_file_page(p, sc) } else { self.reclaim_anon_page(p, sc) };
                    if freed {
                        sc.nr_reclaimed += 1;
                        self.vmstat.inc(steal_ev);
                    }
                }
            }
        }
    }

    /// Puts a page reclaim keeps back on its active list (`move_folios_to_lru`, which ticks the
    /// refault clock for every active page it puts back: since 5.9 activations by reclaim age the
    /// nonresident information too).
    fn putback_active(&mut self, p: u32, file: bool) {
        self.lru.move_head(LruList::active(file), p);
        self.vmstat.inc(Counter::PgActivate);
        self.age_nonresident(self.pages[p as usize].memcg);
    }

    /// Reclaims an anonymous page: give it a swap slot, unmap it, write it if dirty, free it if
    /// clean. Returns whether it was freed now.
    pub(super) fn reclaim_anon_page(&mut self, p: u32, sc: &mut ScanControl) -> bool {
        let mut slot = self.pages[p as usize].swap;
        if slot == NONE {
            let Some(s) = self.swap.alloc() else {
                // Swap full: the page stays (`activate_locked`).
                self.putback_active(p, false);
                return false;
            };
            slot = s;
            self.add_to_swap_cache(p, slot);
        }
        if self.pages.has(p, PG_MAPPED) {
            self.unmap_to_swap(p, slot);
        }
        if self.pages.test_and_clear(p, PG_DIRTY) {
            self.pages.set(p, PG_WRITEBACK | PG_RECLAIM);
            // Back to the head while the write is in flight; completion frees it.
            self.lru.move_head(LruList::InactiveAnon, p);
            self.nr_reclaim_wb += 1;
            self.write_slot(slot);
            sc.plug.add(slot, p);
            sc.nr_writeback += 1;
            sc.nr_pageout += 1;
            false
        } else {
            let shadow = self.workingset_eviction(sc.shadow_target(), p);
            self.swap.set_shadow(slot, shadow);
            self.delete_from_swap_cache(p, false);
            self.lru.remove(p);
            self.pages.release(p);
            true
        }
    }

    /// Reclaims a page-cache page: drop it if clean; if dirty, tag it and ask the flusher to write
    /// it (reclaim does not write file pages itself). Returns whether it was freed now.
    fn reclaim_file_page(&mut self, p: u32, sc: &mut ScanControl) -> bool {
        if self.pages.has(p, PG_DIRTY) {
            self.pages.set(p, PG_RECLAIM);
            self.lru.move_head(LruList::InactiveFile, p);
            sc.nr_dirty_file += 1;
            return false;
        }
        let shadow = self.workingset_eviction(sc.shadow_target(), p);
        self.cleancache_note_eviction(p);
        self.evict_from_page_cache(p, shadow);
        self.lru.remove(p);
        self.pages.release(p);
        true
    }

    /// Accounts a page written to `slot`; an older copy there is discarded.
    pub(super) fn write_slot(&mut self, slot: u32) {
        if self.swap.is_written(slot) {
            self.vmstat.inc(Counter::SwapDiscard);
        }
        self.swap.mark_written(slot);
        self.vmstat.inc(Counter::PswpOut);
    }

    /// The end of a reclaim pass: submits the swap writes it plugged (unless its caller holds the
    /// plug) and wakes the flusher for dirty page cache met.
    pub(super) fn finish_reclaim(&mut self, sc: &mut ScanControl, now: u64, env: &mut Env) {
        sc.tmem_ns += self.tmem_flush_pending(env);
        if !sc.held {
            self.flush_plug(&mut sc.plug, sc.kswapd, now, env);
        }
        if std::mem::take(&mut sc.nr_dirty_file) > 0 {
            self.flusher_write_all(now, env);
        }
    }

    /// Submits the swap writes held in `plug`, merged into one request per run of consecutive
    /// slots (`blk_finish_plug`).
    pub(super) fn flush_plug(&mut self, plug: &mut Plug, kswapd: bool, now: u64, env: &mut Env) {
        if plug.writes.is_empty() {
            return;
        }
        let mut writes = plug.take();
        let sub =
            Submission { kind: BioKind::SwapWrite, file: NONE, kthread: kswapd, base: 0, max: MAX_REQUEST_PAGES, through_gaps: false };
        writes.sort_unstable();
        self.submit_runs(&sub, &writes, None, now, env);
    }

    /// A scan of `nr_to_reclaim` pages at this guest's reclaim costs.
    pub(super) fn scan_control(&self, nr_to_reclaim: u64, kswapd: bool, now: u64) -> ScanControl {
        ScanControl::new(nr_to_reclaim, kswapd, now, ReclaimCosts::of_guest(&self.cfg.costs))
    }

    /// Direct reclaim (`try_to_free_pages`): the allocating process scans from DEF_PRIORITY down
    /// until SWAP_CLUSTER_MAX pages are freed or on their way. Returns the time it took.
    /// A pass that got nothing having skipped deactivation is retried with it forced.
    pub(super) fn try_to_free_pages(&mut self, now: u64, env: &mut Env) -> u64 {
        let mut sc = self.scan_control(SWAP_CLUSTER_MAX, false, now);
        self.shrink_priorities(&mut sc);
        self.finish_direct_reclaim(&mut sc, now, env);
        sc.spent_ns()
    }

    /// The end of an instantaneous reclaim in a process's context: its writes go to the device,
    /// or, while the process's swap readahead holds its plug (`plugging`), into that plug, to be
    /// submitted after the fault's reads.
    pub(super) fn finish_direct_reclaim(&mut self, sc: &mut ScanControl, now: u64, env: &mut Env) {
        let holder = self.plugging;
        sc.held = holder != NONE;
        self.finish_reclaim(sc, now, env);
        if holder != NONE {
            self.procs[holder as usize].plug.absorb(&mut sc.plug);
        }
    }

    /// An instantaneous `do_try_to_free_pages`: shrink the scan's target from DEF_PRIORITY down
    /// until it has enough or must wait for a write (v1 limit reclaim); a pass that got nothing
    /// having skipped deactivation is retried with it forced.
    pub(super) fn shrink_priorities(&mut self, sc: &mut ScanControl) {
        loop {
            for prio in (0..=DEF_PRIORITY).rev() {
                sc.priority = prio;
                self.shrink_node(sc);
                if sc.progress() >= sc.nr_to_reclaim || sc.wait_writeback {
                    break;
                }
            }
            self.snapshot_refaults(sc.shadow_target());
            if sc.wait_writeback || !sc.retry_forcing_deactivation() {
                break;
            }
        }
    }

    /// Exact-LRU eviction: the least recently used page goes, now. Its write (if dirty) is issued to
    /// the device but the frame is reused at once, as a textbook LRU cache reuses a slot. With swap
    /// full the OOM killer runs instead; its victim is returned (the caller must not hand a page to
    /// a process that has just been killed).
    pub(super) fn evict_exact(&mut self, now: u64, env: &mut Env) -> Option<Oom> {
        // Pages with a read or write in flight cannot go; they rotate past (only possible when
        // several processes fault at once).
        let mut victim = None;
        for _ in 0..self.lru.len(LruList::Exact) {
            let Some(p) = self.lru.tail(0, LruList::Exact) else { break };
            if self.pages[p as usize].io == NONE {
                victim = Some(p);
                break;
            }
            self.lru.move_head(LruList::Exact, p);
        }
        let p = victim?;
        let dirty = self.pages.test_and_clear(p, PG_DIRTY);
        let offset = match self.pages[p as usize].kind {
            PageKind::Anon => {
                let mut slot = self.pages[p as usize].swap;
                if slot == NONE {
                    let Some(s) = self.swap.alloc() else {
                        return Some(self.oom_kill(now, None, env));
                    };
                    slot = s;
                    self.add_to_swap_cache(p, slot);
                }
                if self.pages.has(p, PG_MAPPED) {
                    self.unmap_to_swap(p, slot);
                }
                self.delete_from_swap_cache(p, false);
                if dirty {
                    self.write_slot(slot);
                }
                slot as u64 * PAGE_SIZE
            }
            _ => {
                let off = self.file_block_offset(p);
                if dirty {
                    self.account_clean(p);
                    self.vmstat.inc(Counter::NrWritten);
                }
                self.remove_from_page_cache(p);
                off
            }
        };
        self.lru.remove(p);
        self.pages.release(p);
        self.vmstat.inc(Counter::PgStealDirect);
        self.prefetch_next_victim();
        if dirty {
            // Nothing waits for this write and no page depends on it: only the device sees it.
            self.device_io(now, offset, 1, true, NONE, env);
        }
        None
    }

    /// Fetches what evicting the next least recently used page will touch (its page-table entry
    /// and swap-cache entry) into the CPU cache, ahead of the next fault.
    fn prefetch_next_victim(&self) {
        let Some(q) = self.lru.tail(0, LruList::Exact) else { return };
        let (pid, vpn) = (self.pages[q as usize].owner, self.pages[q as usize].index);
        if let Some(pte) = self.procs.get(pid as usize).and_then(|pr| pr.mm.pte.get(vpn as usize)) {
            crate::index::prefetch(pte);
        }
        self.swap.prefetch(self.pages[q as usize].swap);
    }

    /// A write completed: the pages are clean; those reclaim was waiting for are freed now (the
    /// kernel rotates them to the inactive tail for the next scan to free), the rest rotate.
    pub(super) fn write_done(&mut self, bio: &Bio) {
        for &p in &bio.pages {
            self.pages.clear(p, PG_WRITEBACK);
            let reclaim = self.pages.test_and_clear(p, PG_RECLAIM);
            if reclaim && bio.kind == BioKind::SwapWrite {
                self.nr_reclaim_wb -= 1;
            }
            if self.pages[p as usize].kind == PageKind::File {
                self.file_write_done(p);
                if self.files[self.pages[p as usize].owner as usize].deleted {
                    self.drop_file_page(p);
                    continue;
                }
            }
            if self.pages[p as usize].owner == NONE {
                self.lru.remove(p);
                self.pages.release(p);
                continue;
            }
            if !reclaim {
                continue;
            }
            // `folio_rotate_reclaimable` + `lru_move_tail`: a clean, unlocked page on an LRU list
            // (active ones too, which are deactivated) goes to the inactive tail, where the next
            // scan frees it unless it was referenced meanwhile.
            let file = self.pages[p as usize].kind == PageKind::File;
            if self.lru.list_of(p).is_some() && !self.pages.has(p, PG_DIRTY) && !self.pages.has(p, PG_LOCKED) {
                self.lru.move_tail(LruList::inactive(file), p);
                self.vmstat.inc(Counter::PgRotated);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `folio_check_references` since 5.9: a mapped page carries the reference of the fault that
    /// created it, so the first scan that finds it young only marks it referenced; it is activated
    /// only if a second scan finds it young again, and reclaimed if not.
    #[test]
    fn a_mapped_page_is_activated_only_when_seen_referenced_twice() {
        let mut sim = super::super::idle_guest_with_100_pages();
        sim.with_guest(0, |g, env| {
            let pages: Vec<u32> = g.lru.iter(0, LruList::InactiveAnon).collect();
            assert_eq!(pages.len(), 100, "the idle footprint starts on the inactive list");
            let mut sc = ScanControl::new(1_000, true, 10_000_000, ReclaimCosts::default());
            g.shrink_inactive_list(0, LruList::InactiveAnon, 100, &mut sc);
            assert_eq!(g.lru.len(LruList::ActiveAnon), 0, "one reference (the fault's) must not activate");
            assert!(pages.iter().all(|&p| g.pages.has(p, PG_REFERENCED) && g.lru.list_of(p) == Some(LruList::InactiveAnon)));
            // The MMU sets the accessed bit of half of them again; the second scan activates those
            // and reclaims the rest (their swap writes start).
            for &p in &pages[..50] {
                let (pid, vpn) = (g.pages[p as usize].owner, g.pages[p as usize].index);
                g.procs[pid as usize].mm.young.set(vpn as usize);
            }
            g.shrink_inactive_list(0, LruList::InactiveAnon, 100, &mut sc);
            assert!(pages[..50].iter().all(|&p| g.lru.list_of(p) == Some(LruList::ActiveAnon)));
            assert!(pages[50..].iter().all(|&p| g.pages.has(p, PG_WRITEBACK) && !g.pages.has(p, PG_MAPPED)));
            g.finish_reclaim(&mut sc, 10_000_000, env);
        });
        sim.check_invariants().unwrap();
    }

    /// A vCPU that ran ahead recorded its sweep; a scan at an earlier time finds those pages young
    /// and leaves them young (and fast), while pages the sweep passed before the scan lose the bit.
    #[test]
    fn a_scan_sees_references_made_ahead_of_it() {
        let mut sim = super::super::idle_guest_with_100_pages();
        sim.with_guest(0, |g, env| {
            let pages: Vec<u32> = g.lru.iter(0, LruList::InactiveAnon).collect();
            let (pid, start) = (g.pages[pages[0] as usize].owner, g.procs[0].mm.regions[0].start);
            // From t = 20 ms, one visit every 10 ns from page 0: pages 0..50 are visited by 20.0005 ms.
            g.procs[pid as usize].ahead.record(start, 100, 0, 50, 20_000_000, 10);
            let mut sc = ScanControl::new(1_000, true, 20_000_250, ReclaimCosts::default());
            g.shrink_inactive_list(0, LruList::InactiveAnon, 100, &mut sc);
            for &p in &pages {
                let vpn = g.pages[p as usize].index - start;
                let after = vpn < 50 && 20_000_000 + vpn as u64 * 10 > 20_000_250;
                assert_eq!(g.procs[pid as usize].mm.young.get((start + vpn) as usize), after, "page {vpn}");
                assert_eq!(g.procs[pid as usize].mm.rfast.get((start + vpn) as usize), after, "page {vpn}");
            }
            g.finish_reclaim(&mut sc, 20_000_250, env);
        });
    }
}
