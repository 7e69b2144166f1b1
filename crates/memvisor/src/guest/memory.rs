//! Page faults and references (`mm/memory.c`): a reference to a mapped page sets its accessed (and
//! dirty) bit; a first touch allocates a zeroed page; a swapped page is found in the swap cache or
//! read back; unmapping tears a region down.

use super::lru::LruList;
use super::page::{NONE, PG_DIRTY, PG_MAPPED, PG_READAHEAD, PG_WRITEBACK, PageKind};
use super::page_alloc::Stall;
use super::process::{PTE_MASK, PTE_PRESENT, PTE_SWAP};
use super::{Counter, Env, Guest, Replacement};
use crate::host::Access;

/// How many page-table entries ahead `zap_region` fetches the next pages' descriptors: about the
/// number of pages freed while a memory access is outstanding.
const ZAP_AHEAD: u32 = 8;

/// Largest readahead hit count the kernel keeps (`SWAP_RA_HITS_MAX`, 8 bits).
const SWAP_RA_HITS_MAX: u32 = 0xff;

/// Result of a reference that missed the fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Touch {
    /// Done; the process spent this long.
    Done(u64),
    /// The process spent this long and is now blocked; it retries the reference when woken.
    Blocked(u64),
    /// The process spent this long and must let the rest of the simulation catch up; it retries
    /// the reference then.
    Yield(u64),
    /// The process was killed.
    Killed,
}

/// A reference that stalled in page allocation: blocked or yielding after the time it spent, or
/// killed.
impl From<Stall> for Touch {
    fn from(s: Stall) -> Self {
        match s {
            Stall::Wait(ns) => Touch::Blocked(ns),
            Stall::Yield(ns) => Touch::Yield(ns),
            Stall::Killed => Touch::Killed,
        }
    }
}

impl Guest {
    /// A reference to virtual page `vpn` of process `pid` that the fast bitmaps could not account.
    pub(super) fn touch_slow(&mut self, pid: u32, vpn: u32, write: bool, refs: u32, now: u64, env: &mut Env) -> Touch {
        let touch = self.resolve_touch(pid, vpn, write, refs, now, env);
        // Writes left in the process's plug by a fault that yielded and, retried, went another way
        // go out now, unless it yields again (a swap-in submits its own with its reads).
        if !matches!(touch, Touch::Yield(_)) && !self.procs[pid as usize].plug.writes.is_empty() {
            self.flush_task_plug(pid, now, env);
        }
        touch
    }

    /// `touch_slow`'s reference: a hit on a mapped page, or a fault.
    fn resolve_touch(&mut self, pid: u32, vpn: u32, write: bool, refs: u32, now: u64, env: &mut Env) -> Touch {
        let pte = self.procs[pid as usize].mm.pte[vpn as usize];
        let dram = refs as u64 * self.cfg.costs.dram_access_ns;
        if pte & PTE_PRESENT != 0 {
            let p = pte & PTE_MASK;
            let (wait, plain) = self.host_touch(p, write, now, true, env);
            self.reference(pid, vpn, p, write, plain);
            Touch::Done(dram + wait)
        } else if pte & PTE_SWAP != 0 {
            self.do_swap_page(pid, vpn, pte & PTE_MASK, write, now, env)
        } else {
            self.do_anonymous_page(pid, vpn, write, now, env)
        }
    }

    /// A reference to a mapped page: what the MMU does (accessed and dirty bits), plus the move to
    /// the head of the recency list in exact-LRU mode.
    /// `plain`: the host backs the page with nothing pending, so later references may be accounted
    /// in bulk.
    fn reference(&mut self, pid: u32, vpn: u32, p: u32, write: bool, plain: bool) {
        // Linux and Windows age pages by the accessed bit; exact-LRU keeps a recency list.
        let linux = self.cfg.replacement != Replacement::ExactLru;
        if linux {
            self.procs[pid as usize].mm.young.set(vpn as usize);
        } else {
            self.lru.move_head(LruList::Exact, p);
        }
        if write {
            self.pages.set(p, PG_DIRTY);
            self.pages[p as usize].content = self.written(pid, vpn);
            // A written page's swap copy is stale: release the slot (the kernel's write-fault
            // `folio_free_swap`), unless a write-out of it is in flight or plugged.
            if self.pages[p as usize].swap != NONE && self.pages[p as usize].io == NONE && !self.pages.has(p, PG_WRITEBACK) {
                self.delete_from_swap_cache(p, true);
            }
        }
        if linux && plain {
            self.update_fast(pid, vpn, p, write);
        } else if linux {
            self.procs[pid as usize].mm.set_fast(vpn, false, false);
        }
    }

    /// The guest touches (`write`: stores to) page `p` at `now` (a process's reference, a copy, a
    /// device reading or filling it): what the host must do first. Returns the time the touch
    /// waits and whether the page is now plainly backed. A vCPU's (`vcpu`) wait for host reclamation to give a page back (swap-in,
    /// decompression, a frame freed by host reclaim) is the VM's host wait; backing a first-touched
    /// page is not reclamation and is not counted. Pages the host took from this guest meanwhile
    /// are invalidated here.
    pub(super) fn host_touch(&mut self, p: u32, write: bool, now: u64, vcpu: bool, env: &mut Env) -> (u64, bool) {
        // What the host said last time still holds: its map entry need not be read (a cache miss
        // over a large guest).
        if self.pages.host_plain(p) {
            return (0, true);
        }
        let r = match env.host_access(self.id, p, write, now) {
            Access::Ready => (0, true),
            Access::Shared => (0, false),
            Access::NewFrame => (self.cfg.costs.host_back_ns, true),
            Access::Wait(t) => {
                let ns = t.saturating_sub(now);
                if vcpu && ns > 0 {
                    env.host.note_wait(self.id, now, ns);
                }
                (ns, false)
            }
            Access::Refused => (0, false),
        };
        if r.1 {
            // Before the invalidations: the access may itself have made the host take this page.
            self.pages.set_host_plain(p, true);
        }
        if env.host.has_invalidations() {
            self.apply_invalidations(env);
        }
        r
    }

    /// What process `pid` writes at virtual page `vpn`: what its workload's content mix puts there
    /// (data of its own, found nowhere else, unless declared zero, common or repeated). A page
    /// swapped out and read back holds it too (a page swapped out before its first write, still
    /// zero, is taken to have been written: workloads here write before they read).
    pub(super) fn written(&self, pid: u32, vpn: u32) -> u64 {
        let w = &self.cfg.workloads[self.procs[pid as usize].workload_index];
        w.mix.written(self.id as u64, pid as u64, vpn as u64)
    }

    /// Sets a mapped, just-referenced page's fast bits (Linux mode: its accessed bit is set). A read
    /// makes it read-fast only: whether a write would change nothing (dirty, no swap copy, holding
    /// what `pid` writes there) is left to the next write's slow path, so that a read touches the
    /// page table and not the page's descriptor. `write`: this reference wrote the page, its
    /// content is what `pid` writes there.
    fn update_fast(&mut self, pid: u32, vpn: u32, p: u32, write: bool) {
        let write = write && self.pages.has(p, PG_DIRTY) && self.pages[p as usize].swap == NONE;
        self.procs[pid as usize].mm.set_fast(vpn, true, write);
    }

    /// Maps page `p` at `vpn` of its owner, as a fault completes.
    pub(super) fn map_page(&mut self, pid: u32, vpn: u32, p: u32, write: bool, plain: bool) {
        let mm = &mut self.procs[pid as usize].mm;
        mm.pte[vpn as usize] = PTE_PRESENT | p;
        mm.rss += 1;
        self.pages.set(p, PG_MAPPED);
        self.vmstat.inc(Counter::PgFault);
        self.reference(pid, vpn, p, write, plain);
    }

    /// First touch of an anonymous page: allocate, zero, map (`do_anonymous_page`). Every first
    /// touch allocates, reads included (the kernel would map its shared zero page for a read; the
    /// workloads here write before they read).
    fn do_anonymous_page(&mut self, pid: u32, vpn: u32, write: bool, now: u64, env: &mut Env) -> Touch {
        let (p, host_ns) = match self.alloc_page(pid, PageKind::Anon, pid, vpn, now, env) {
            Ok(x) => x,
            Err(stall) => return stall.into(),
        };
        // An anonymous page has no copy anywhere else: it is dirty from birth.
        self.pages.set(p, PG_DIRTY);
        self.lru_add(p, false, false);
        self.map_page(pid, vpn, p, write, true);
        self.procs[pid as usize].stats.minflt += 1;
        Touch::Done(self.cfg.costs.minor_fault_ns + host_ns)
    }

    /// Puts a newly allocated page on its cgroup's LRU list: inactive, as `folio_add_lru` does since
    /// 5.9, unless refault detection activated it. A Windows page in a working set is on no list.
    pub(super) fn lru_add(&mut self, p: u32, file: bool, active: bool) {
        let v = self.pages[p as usize].memcg;
        match self.cfg.replacement {
            Replacement::Linux if active => self.lru.add_head(v, LruList::active(file), p),
            Replacement::Linux => self.lru.add_head(v, LruList::inactive(file), p),
            Replacement::ExactLru => self.lru.add_head(v, LruList::Exact, p),
            Replacement::Windows => {}
        }
    }

    /// Fault on a page-table entry holding swap slot `slot` (`do_swap_page`).
    fn do_swap_page(&mut self, pid: u32, vpn: u32, slot: u32, write: bool, now: u64, env: &mut Env) -> Touch {
        let p = self.swap.cached(slot);
        if p != NONE {
            if self.pages[p as usize].io != NONE && !self.pages.has(p, super::page::PG_WRITEBACK) {
                // Being read in (readahead or another fault): wait for that read.
                let io = self.pages[p as usize].io;
                self.bios.get_mut(io).waiters.push(pid);
                self.block(pid, now, true);
                return Touch::Blocked(0);
            }
            // A swap-cache hit moves the readahead position here and counts a readahead hit
            // (`swap_cache_get_folio`), so a sequential scan keeps its window going forward.
            let mm = &mut self.procs[pid as usize].mm;
            let ra = mm.region_index(vpn).map(|i| &mut mm.regions[i].ra);
            let hit = self.pages.test_and_clear(p, PG_READAHEAD);
            if let Some(ra) = ra {
                ra.prev_vpn = vpn;
                if hit {
                    ra.hits = (ra.hits + 1).min(SWAP_RA_HITS_MAX);
                }
            }
            if hit {
                if self.pages.has(p, PG_WRITEBACK) {
                    // Not a readahead page: the mark was reclaim's (the aliased bit).
                    self.nr_reclaim_wb -= 1;
                }
                self.vmstat.inc(Counter::SwapRaHit);
            }
            self.procs[pid as usize].mm.swapents -= 1;
            if self.windows() {
                // A transition fault: the page leaves the standby or modified list (or is mapped
                // while the writer still writes it) with no read.
                if self.pages[p as usize].io == NONE {
                    self.lru.remove(p);
                }
                self.vmstat.inc(Counter::TransitionFaults);
            }
            let (wait, plain) = self.host_touch(p, write, now, true, env);
            self.map_page(pid, vpn, p, write, plain);
            self.free_swap_if_full(p);
            self.procs[pid as usize].stats.minflt += 1;
            return Touch::Done(self.cfg.costs.minor_fault_ns + wait);
        }
        match self.swapin_readahead(pid, vpn, slot, write, now, env) {
            Ok(spent) => {
                self.vmstat.inc(Counter::PgMajFault);
                self.procs[pid as usize].stats.majflt += 1;
                let cpu = spent + self.cfg.costs.minor_fault_ns;
                self.block(pid, now + cpu, true);
                Touch::Blocked(cpu)
            }
            Err(stall) => stall.into(),
        }
    }

    /// Drops a swapped-in page's slot when swap is more than half full (`vm_swap_full`), so a
    /// crowded swap area frees space as pages come back (`should_try_to_free_swap` in
    /// `do_swap_page`, after a swap-cache hit or a read alike).
    pub(super) fn free_swap_if_full(&mut self, p: u32) {
        // Windows keeps the pagefile copy of a clean page until the page is written to.
        if !self.windows()
            && self.pages[p as usize].swap != NONE
            && self.pages[p as usize].io == NONE
            && !self.pages.has(p, PG_WRITEBACK)
            && self.swap.nr_used() * 2 > self.swap.size()
        {
            self.pages.set(p, PG_DIRTY);
            self.delete_from_swap_cache(p, true);
        }
    }

    /// Unmaps one page of `pid` because reclaim is taking it; the entry now holds its swap slot.
    pub(super) fn unmap_to_swap(&mut self, p: u32, slot: u32) {
        let (pid, vpn) = (self.pages[p as usize].owner, self.pages[p as usize].index);
        let mm = &mut self.procs[pid as usize].mm;
        mm.unmap_entry(vpn, PTE_SWAP | slot);
        mm.rss -= 1;
        mm.swapents += 1;
        self.pages.clear(p, PG_MAPPED);
    }

    /// Tears down a region: frees its pages and swap slots. Pages with I/O in flight are orphaned
    /// (owner `NONE`) and freed when their I/O completes.
    pub(super) fn zap_region(&mut self, pid: u32, region: u32) {
        let r = self.procs[pid as usize].mm.regions[region as usize];
        if !r.live {
            return;
        }
        self.procs[pid as usize].mm.unmap(region);
        let end = r.start + r.pages;
        for vpn in r.start..end {
            // The pages of a large region are scattered over memory: fetch the descriptors and
            // list links of the page a few entries on while this one is freed.
            let ahead = vpn + ZAP_AHEAD;
            if ahead < end {
                let e = self.procs[pid as usize].mm.pte[ahead as usize];
                if e & PTE_PRESENT != 0 {
                    self.pages.prefetch(e & PTE_MASK);
                    self.lru.prefetch(e & PTE_MASK);
                }
            }
            let pte = self.procs[pid as usize].mm.pte[vpn as usize];
            let mm = &mut self.procs[pid as usize].mm;
            mm.unmap_entry(vpn, 0);
            if pte & PTE_PRESENT != 0 {
                mm.rss -= 1;
                self.free_anon_page(pte & PTE_MASK);
            } else if pte & PTE_SWAP != 0 {
                mm.swapents -= 1;
                let slot = pte & PTE_MASK;
                let p = self.swap.cached(slot);
                if p != NONE {
                    self.free_anon_page(p);
                } else if self.swap_free(slot) {
                    self.vmstat.inc(Counter::SwapDiscard);
                }
            }
        }
    }

    /// Frees an anonymous page whose mapping is gone, with its swap slot. A page with I/O in flight,
    /// or a write waiting under a plug, is orphaned: its write's completion frees it.
    fn free_anon_page(&mut self, p: u32) {
        if self.pages[p as usize].swap != NONE {
            self.delete_from_swap_cache(p, true);
        }
        self.pages.clear(p, PG_MAPPED);
        if self.pages[p as usize].io != NONE || self.pages.has(p, PG_WRITEBACK) {
            self.pages[p as usize].owner = NONE;
        } else {
            self.lru.remove_if_on(p);
            self.pages.release(p);
        }
    }
}
