//! The swap cache and swap-in (`mm/swap_state.c`): a fault on a swapped page reads it together with
//! its swapped neighbours in the faulting region (VMA-based readahead), whose window adapts to how
//! many earlier readahead pages were used.

use super::bio::{Bio, BioKind, Submission, Waited};
use super::page::{NONE, PG_LOCKED, PG_READAHEAD, PageKind};
use super::page_alloc::Stall;
use super::process::{PTE_MASK, PTE_SWAP, SwapRa};
use super::{Counter, Env, Guest, Replacement};

/// Swap readahead never reads more than 2^5 pages (`SWAP_RA_ORDER_CEILING`).
const SWAP_RA_ORDER_CEILING: u32 = 5;
/// Pages per page-middle-directory: readahead stays within one (x86-64, 4 KiB pages).
const PMD_PAGES: u32 = 512;

impl Guest {
    /// Puts page `p` in the swap cache under `slot`.
    pub(super) fn add_to_swap_cache(&mut self, p: u32, slot: u32) {
        self.pages[p as usize].swap = slot;
        self.swap.set_cached(slot, p);
    }

    /// Puts a page being read from `slot` on its LRU list, the active one if the slot's shadow entry
    /// says it refaults close enough (`__read_swap_cache_async` calls `workingset_refault` for the
    /// faulting page and readahead pages alike).
    fn swapin_lru_add(&mut self, p: u32, slot: u32) {
        let shadow = self.swap.take_shadow(slot);
        let active = self.workingset_refault(shadow, false, p);
        self.lru_add(p, false, active);
    }

    /// Removes page `p` from the swap cache; frees its slot too if asked.
    pub(super) fn delete_from_swap_cache(&mut self, p: u32, free_slot: bool) {
        let slot = self.pages[p as usize].swap;
        self.swap.set_cached(slot, NONE);
        self.pages[p as usize].swap = NONE;
        if free_slot && self.swap_free(slot) {
            self.vmstat.inc(Counter::SwapDiscard);
        }
    }

    /// The readahead window for a fault at `vpn` (`swap_vma_ra_win` and `__swapin_nr_pages`):
    /// grows with readahead hits, shrinks no faster than by half, follows the direction of
    /// sequential faults. Returns `[start, end)` in virtual pages and the window's size, which the
    /// fault records once it reads (`swap_ra_commit`).
    fn swap_ra_window(&self, pid: u32, vpn: u32) -> (u32, u32, u32) {
        let cluster = if self.cfg.replacement == Replacement::ExactLru { 0 } else { self.cfg.sysctl.page_cluster };
        let max_win = 1u32 << cluster.min(SWAP_RA_ORDER_CEILING);
        let mm = &self.procs[pid as usize].mm;
        let region = mm.region_of(vpn);
        let ra = region.map_or(SwapRa::default(), |r| r.ra);
        let mut pages = ra.hits + 2;
        if pages == 2 {
            if vpn != ra.prev_vpn.wrapping_add(1) && vpn != ra.prev_vpn.wrapping_sub(1) {
                pages = 1;
            }
        } else {
            pages = pages.next_power_of_two().max(4);
        }
        let win = pages.min(max_win).max(ra.prev_win / 2);
        if win <= 1 {
            return (vpn, vpn + 1, win);
        }
        let (lo, hi) = if vpn == ra.prev_vpn.wrapping_add(1) {
            (vpn as i64, vpn as i64 + win as i64)
        } else if ra.prev_vpn == vpn.wrapping_add(1) {
            (vpn as i64 - win as i64 + 1, vpn as i64 + 1)
        } else {
            let left = ((win - 1) / 2) as i64;
            (vpn as i64 - left, vpn as i64 - left + win as i64)
        };
        let (rs, re) = region.map_or((vpn, vpn + 1), |r| (r.start, r.start + r.pages));
        let pmd = vpn - vpn % PMD_PAGES;
        let start = lo.max(rs as i64).max(pmd as i64) as u32;
        let end = hi.min(re as i64).min((pmd + PMD_PAGES) as i64) as u32;
        (start, end, win)
    }

    /// A fault at `vpn` read with a window of `win` pages: the next fault's window starts from it.
    fn swap_ra_commit(&mut self, pid: u32, vpn: u32, win: u32) {
        let mm = &mut self.procs[pid as usize].mm;
        if let Some(i) = mm.region_index(vpn) {
            mm.regions[i].ra = SwapRa { prev_vpn: vpn, prev_win: win, hits: 0 };
        }
    }

    /// The neighbours of `vpn` in `[start, end)` that readahead would read: swapped out and not in
    /// the swap cache, at most `max`.
    fn swap_ra_candidates(&self, pid: u32, vpn: u32, (start, end): (u32, u32), max: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
        let pte = &self.procs[pid as usize].mm.pte;
        (start..end)
            .filter(move |&v| v != vpn)
            .filter_map(move |v| {
                let e = pte[v as usize];
                (e & PTE_SWAP != 0 && self.swap.cached(e & PTE_MASK) == NONE).then_some((v, e & PTE_MASK))
            })
            .take(max)
    }

    /// Reads the faulting page and its readahead neighbours; the process waits for the faulting
    /// page's request. In a memory cgroup the fault first makes room for the whole window
    /// (`try_charge`); the faulting page is allocated like any fault, neighbours only if memory is
    /// free without waiting. Returns the time allocation took (the reads start after it).
    pub(super) fn swapin_readahead(&mut self, pid: u32, vpn: u32, slot: u32, write: bool, now: u64, env: &mut Env) -> Result<u64, Stall> {
        // At most 2^SWAP_RA_ORDER_CEILING pages: kept on the stack, this is a hot path.
        let mut buf = [(0u32, 0u32); 1 << SWAP_RA_ORDER_CEILING];
        let windows = self.windows();
        let (mut start, mut end, win) = self.swap_ra_window(pid, vpn);
        let memcg = self.memcg_of(pid);
        // `swap_vma_readahead` plugs its loop when the window is more than one page: reclaim while
        // the window is charged and allocated writes under the process's plug.
        if !windows && win > 1 {
            self.plugging = pid;
        }
        // In a memory cgroup the whole window is charged first. If the fault stops here, a process
        // that sleeps (or ends) has flushed its plug; one that yields keeps it, to submit it with
        // the reads when it comes back.
        let nr = if memcg != 0 { 1 + self.swap_ra_candidates(pid, vpn, (start, end), buf.len() - 1).count() as u64 } else { 0 };
        let (p, mut spent) = self.charge_and_alloc(pid, vpn, memcg, nr, now, env).inspect_err(|_| self.plugging = NONE)?;
        if windows {
            // The cluster depends on Available, which the allocation just changed.
            (start, end) = self.windows_cluster(pid, vpn, slot);
        } else {
            self.swap_ra_commit(pid, vpn, win);
        }
        // The read brings back what the owner wrote before the page went out.
        self.pages[p as usize].content = self.written(pid, vpn);
        self.add_to_swap_cache(p, slot);
        self.pages.set(p, PG_LOCKED);
        self.swapin_lru_add(p, slot);
        buf[0] = (slot, p);
        let mut n = 1;
        let mut next = start;
        while n < buf.len() {
            let Some((v, s)) = self.swap_ra_candidates(pid, vpn, (next, end), 1).next() else { break };
            next = v + 1;
            let Some((q, ns)) = self.alloc_page_nowait(PageKind::Anon, pid, v, memcg, now + spent, env) else { break };
            spent += ns;
            self.pages[q as usize].content = self.written(pid, v);
            self.add_to_swap_cache(q, s);
            self.pages.set(q, PG_LOCKED | PG_READAHEAD);
            self.swapin_lru_add(q, s);
            buf[n] = (s, q);
            n += 1;
        }
        self.plugging = NONE;
        let reads = &mut buf[..n];
        let now = now + spent;
        self.vmstat.add(Counter::SwapRa, reads.len() as u64 - 1);
        reads.sort_unstable();
        let sub = Submission { kind: BioKind::SwapRead, file: NONE, kthread: false, base: 0, max: usize::MAX, through_gaps: windows };
        self.submit_runs(&sub, reads, Some(Waited { page: p, waiter: pid, fault: Some((p, write)) }), now, env);
        self.flush_task_plug(pid, now, env);
        Ok(spent)
    }

    /// The faulting page of a swap-in: room for `nr` pages in cgroup `memcg` (none outside a
    /// cgroup), then the page. Returns it and the time both took; a stall counts from `now`.
    fn charge_and_alloc(&mut self, pid: u32, vpn: u32, memcg: u8, nr: u64, now: u64, env: &mut Env) -> Result<(u32, u64), Stall> {
        let charge_ns = if memcg != 0 { self.try_charge(pid, memcg, nr, now, env)? } else { 0 };
        let (p, ns) = self.alloc_page(pid, PageKind::Anon, pid, vpn, now + charge_ns, env).map_err(|e| e.after(charge_ns))?;
        Ok((p, charge_ns + ns))
    }

    /// A swap read completed: unlock the pages, map the faulting one into its process (the rest of
    /// `do_swap_page`), free pages whose owner went away meanwhile.
    pub(super) fn swap_read_done(&mut self, bio: &Bio, env: &Env) {
        let fault_page = bio.fault.map_or(NONE, |(p, _)| p);
        for &p in &bio.pages {
            self.pages.clear(p, PG_LOCKED);
            if self.pages[p as usize].owner == NONE {
                self.pages.clear(p, PG_READAHEAD);
                self.lru.remove_if_on(p);
                self.pages.release(p);
            } else if self.windows() && p != fault_page {
                // A clustered page is not mapped: it waits on the standby list.
                self.lru.add_head(0, super::lru::LruList::Standby, p);
            }
        }
        if let Some((p, write)) = bio.fault {
            if self.pages[p as usize].kind != PageKind::Anon || self.pages[p as usize].owner == NONE {
                return;
            }
            let (pid, vpn) = (self.pages[p as usize].owner, self.pages[p as usize].index);
            let slot = self.pages[p as usize].swap;
            if self.procs[pid as usize].mm.pte[vpn as usize] == PTE_SWAP | slot {
                self.procs[pid as usize].mm.swapents -= 1;
                let plain = env.host.is_plain(self.id, p);
                self.map_page(pid, vpn, p, write, plain);
                // do_swap_page's should_try_to_free_swap, as on a swap-cache hit.
                self.free_swap_if_full(p);
            }
        }
    }
}
