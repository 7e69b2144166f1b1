//! The swap cache and swap-in (`mm/swap_state.c`): a fault on a swapped page reads it together with
//! its swapped neighbours in the faulting region (VMA-based readahead), whose window adapts to how
//! many earlier readahead pages were used.

use super::bio::{Bio, BioKind, Submission, Waited};
use super::page::{NONE, PG_LOCKED, PG_READAHEAD, PageKind};
use super::page_alloc::Stall;
use super::process::{PTE_MASK, PTE_SWAP};
use super::{Counter, Env, Guest, Replacement};

/// Swap readahead never reads more than 2^5 pages (`SWAP_RA_ORDER_CEILING`).
const SWAP_RA_ORDER_CEILING: u32 = 5;
/// Pages per page-middle-directory: readahead stays within one (x86-64, 4 KiB pages).
const PMD_PAGES: u32 = 512;

impl Guest {
    /// Puts page `p` in the swap cache under `slot`.
    pub(super) fn add_to_swap_cache(&mut self, p: u32, slot: u32) {
        self.pages.swap[p as usize] = slot;
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
        let slot = self.pages.swap[p as usize];
        self.swap.set_cached(slot, NONE);
        self.pages.swap[p as usize] = NONE;
        if free_slot && self.swap_free(slot) {
            self.vmstat.inc(Counter::SwapDiscard);
        }
    }

    /// The readahead window for a fault at `vpn` (`swap_vma_ra_win` and `__swapin_nr_pages`):
    /// grows with readahead hits, shrinks no faster than by half, follows the direction of
    /// sequential faults. Returns `[start, end)` in virtual pages.
    fn swap_ra_window(&mut self, pid: u32, vpn: u32) -> (u32, u32) {
        let cluster = if self.cfg.replacement == Replacement::ExactLru { 0 } else { self.cfg.sysctl.page_cluster };
        let max_win = 1u32 << cluster.min(SWAP_RA_ORDER_CEILING);
        let proc = &mut self.procs[pid as usize];
        let ra = proc.swap_ra;
        let mut pages = ra.hits + 2;
        if pages == 2 {
            if vpn != ra.prev_vpn.wrapping_add(1) && vpn != ra.prev_vpn.wrapping_sub(1) {
                pages = 1;
            }
        } else {
            pages = pages.next_power_of_two().max(4);
        }
        let win = pages.min(max_win).max(ra.prev_win / 2);
        proc.swap_ra.prev_vpn = vpn;
        proc.swap_ra.prev_win = win;
        proc.swap_ra.hits = 0;
        if win <= 1 {
            return (vpn, vpn + 1);
        }
        let (lo, hi) = if vpn == ra.prev_vpn.wrapping_add(1) {
            (vpn as i64, vpn as i64 + win as i64)
        } else if ra.prev_vpn == vpn.wrapping_add(1) {
            (vpn as i64 - win as i64 + 1, vpn as i64 + 1)
        } else {
            let left = ((win - 1) / 2) as i64;
            (vpn as i64 - left, vpn as i64 - left + win as i64)
        };
        let region = proc.mm.regions.iter().find(|r| r.start <= vpn && vpn < r.start + r.pages).copied();
        let (rs, re) = region.map_or((vpn, vpn + 1), |r| (r.start, r.start + r.pages));
        let pmd = vpn - vpn % PMD_PAGES;
        let start = lo.max(rs as i64).max(pmd as i64) as u32;
        let end = hi.min(re as i64).min((pmd + PMD_PAGES) as i64) as u32;
        (start, end)
    }

    /// Reads the faulting page and its readahead neighbours; the process waits for the faulting
    /// page's request. The faulting page is allocated like any fault; neighbours only if memory is
    /// free without reclaim. Returns the time allocation took (the reads start after it).
    pub(super) fn swapin_readahead(&mut self, pid: u32, vpn: u32, slot: u32, write: bool, now: u64, env: &mut Env) -> Result<u64, Stall> {
        let (p, mut spent) = self.alloc_page(pid, PageKind::Anon, pid, vpn, now, env)?;
        // The read brings back what the owner wrote before the page went out.
        self.pages.content[p as usize] = self.written(pid, vpn);
        self.add_to_swap_cache(p, slot);
        self.pages.set(p, PG_LOCKED);
        self.swapin_lru_add(p, slot);
        // At most 2^SWAP_RA_ORDER_CEILING pages: kept on the stack, this is a hot path.
        let mut buf = [(0u32, 0u32); 1 << SWAP_RA_ORDER_CEILING];
        buf[0] = (slot, p);
        let mut n = 1;
        let (start, end) = if self.windows() { self.windows_cluster(pid, vpn, slot) } else { self.swap_ra_window(pid, vpn) };
        for v in start..end {
            if v == vpn {
                continue;
            }
            let pte = self.procs[pid as usize].mm.pte[v as usize];
            if pte & PTE_SWAP == 0 {
                continue;
            }
            let s = pte & PTE_MASK;
            if self.swap.cached(s) != NONE {
                continue;
            }
            if n == buf.len() {
                break;
            }
            let Some((q, ns)) = self.alloc_page_nowait(PageKind::Anon, pid, v, self.memcg_of(pid), now + spent, env) else { break };
            spent += ns;
            self.pages.content[q as usize] = self.written(pid, v);
            self.add_to_swap_cache(q, s);
            self.pages.set(q, PG_LOCKED | PG_READAHEAD);
            self.swapin_lru_add(q, s);
            buf[n] = (s, q);
            n += 1;
        }
        let reads = &mut buf[..n];
        let now = now + spent;
        self.vmstat.add(Counter::SwapRa, reads.len() as u64 - 1);
        reads.sort_unstable();
        let sub =
            Submission { kind: BioKind::SwapRead, file: NONE, kthread: false, base: 0, max: usize::MAX, through_gaps: self.windows() };
        self.submit_runs(&sub, reads, Some(Waited { page: p, waiter: pid, fault: Some((p, write)) }), now, env);
        Ok(spent)
    }

    /// A swap read completed: unlock the pages, map the faulting one into its process (the rest of
    /// `do_swap_page`), free pages whose owner went away meanwhile.
    pub(super) fn swap_read_done(&mut self, bio: &Bio, env: &Env) {
        let fault_page = bio.fault.map_or(NONE, |(p, _)| p);
        for &p in &bio.pages {
            self.pages.clear(p, PG_LOCKED);
            if self.pages.owner[p as usize] == NONE {
                self.pages.clear(p, PG_READAHEAD);
                self.lru.remove_if_on(p);
                self.pages.release(p);
            } else if self.windows() && p != fault_page {
                // A clustered page is not mapped: it waits on the standby list.
                self.lru.add_head(0, super::lru::LruList::Standby, p);
            }
        }
        if let Some((p, write)) = bio.fault {
            if self.pages.kind[p as usize] != PageKind::Anon || self.pages.owner[p as usize] == NONE {
                return;
            }
            let (pid, vpn) = (self.pages.owner[p as usize], self.pages.index[p as usize]);
            let slot = self.pages.swap[p as usize];
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
