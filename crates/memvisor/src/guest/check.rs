//! Invariant checks, run by the tests after every step: every guest page is in exactly one state
//! and reachable from exactly the structures that state implies; page tables, the swap cache and
//! the counters agree with the pages.

use super::lru::{LruList, NR_LISTS};
use super::page::{NONE, PG_DIRTY, PG_MAPPED, PG_RECLAIM, PG_WRITEBACK, PageKind};
use super::process::{PTE_MASK, PTE_PRESENT, PTE_SWAP};
use super::{Counter, Env, Guest, Replacement};
use crate::host::PageState;

impl Guest {
    /// Checks every invariant; the error names the first violation.
    pub fn check_invariants(&self, env: &Env) -> Result<(), String> {
        let n = self.pages.len();
        let name = &self.cfg.name;
        let err = |m: String| Err(format!("guest '{name}': {m}"));
        self.check_frontswap(env).or_else(err)?;

        // Free list: exactly the free pages, each once.
        let mut on_free = vec![false; n];
        for &p in self.pages.free_list() {
            if on_free[p as usize] {
                return err(format!("page {p} twice on the free list"));
            }
            on_free[p as usize] = true;
        }
        // LRU lists: walk them, count them.
        let mut on_lru = vec![NR_LISTS as u8; n];
        for v in 0..self.lru.lruvecs() {
            for l in LruList::ALL {
                let mut len = 0;
                for p in self.lru.iter(v, l) {
                    if on_lru[p as usize] != NR_LISTS as u8 {
                        return err(format!("page {p} on two LRU lists"));
                    }
                    if self.pages[p as usize].memcg != v {
                        return err(format!("page {p} of cgroup {} on cgroup {v}'s {l:?} list", self.pages[p as usize].memcg));
                    }
                    on_lru[p as usize] = l as u8;
                    len += 1;
                }
                if len != self.lru.len_in(v, l) {
                    return err(format!("cgroup {v}'s {l:?} has {len} pages but counts {}", self.lru.len_in(v, l)));
                }
            }
        }
        // Memory cgroups: charges add up and stay within the limit.
        let mut charged = vec![0u64; self.memcgs.len()];
        for p in 0..n {
            if self.pages[p].kind != PageKind::Free {
                charged[self.pages[p].memcg as usize] += 1;
            }
        }
        for (v, cg) in self.memcgs.iter().enumerate() {
            if charged[v] != self.pages.charged(v as u8) {
                return err(format!("cgroup {v} holds {} pages but is charged {}", charged[v], self.pages.charged(v as u8)));
            }
            if charged[v] > cg.limit {
                return err(format!("cgroup {v} ({}) holds {} pages, over its limit of {}", cg.name, charged[v], cg.limit));
            }
        }
        let reclaim_wb = (0..n as u32)
            .filter(|&p| self.pages[p as usize].kind == PageKind::Anon && self.pages.has(p, PG_WRITEBACK) && self.pages.has(p, PG_RECLAIM))
            .count() as u64;
        if reclaim_wb != self.nr_reclaim_wb {
            return err(format!("{reclaim_wb} anonymous pages under reclaim writeback but counted {}", self.nr_reclaim_wb));
        }
        // A swap write not yet submitted waits in the plug of a reclaim that stopped, and nowhere else.
        let unsubmitted = (0..n)
            .filter(|&i| self.pages[i].kind == PageKind::Anon && self.pages.has(i as u32, PG_WRITEBACK) && self.pages[i].io == NONE)
            .count();
        if unsubmitted != self.plugged_writes() {
            return err(format!("{unsubmitted} anonymous pages under writeback with no request, {} held in plugs", self.plugged_writes()));
        }
        let mut counts = [0u64; 5];
        let (mut dirty_file, mut wb_file) = (0u64, 0u64);
        for p in 0..n as u32 {
            let i = p as usize;
            let kind = self.pages[i].kind;
            counts[kind as usize] += 1;
            let lru = on_lru[i] != NR_LISTS as u8;
            if (kind == PageKind::Free) != on_free[i] {
                return err(format!("page {p} is {kind:?} but on_free_list={}", on_free[i]));
            }
            let evictable = if self.cfg.replacement == Replacement::Windows && kind == PageKind::Anon {
                // Windows: only trimmed pages with no I/O in flight are on a list.
                !self.pages.has(p, PG_MAPPED) && self.pages[i].io == NONE && self.pages[i].owner != NONE
            } else {
                matches!(kind, PageKind::Anon | PageKind::File)
            };
            if evictable != lru {
                return err(format!("page {p} is {kind:?} but on_lru={lru}"));
            }
            if lru {
                let l = LruList::ALL[on_lru[i] as usize];
                let expect_file = kind == PageKind::File;
                let mode_ok = match self.cfg.replacement {
                    Replacement::Linux => l != LruList::Exact && l.is_file() == expect_file,
                    Replacement::ExactLru => l == LruList::Exact,
                    Replacement::Windows => {
                        l == if self.pages.has(p, PG_DIRTY) { LruList::Modified } else { LruList::Standby } && !expect_file
                    }
                };
                if !mode_ok {
                    return err(format!("page {p} ({kind:?}) on list {l:?}"));
                }
            }
            let host = env.host.vms()[self.id as usize].p2m().get(p).state();
            match kind {
                PageKind::Balloon if host != PageState::Ballooned => {
                    return err(format!("balloon page {p} is {host:?} on the host"));
                }
                PageKind::Free if host == PageState::Ballooned => {
                    return err(format!("free page {p} is still ballooned on the host"));
                }
                PageKind::Anon | PageKind::File | PageKind::Kernel if host == PageState::Ballooned || host == PageState::Unbacked => {
                    return err(format!("page {p} in use ({kind:?}) but {host:?} on the host"));
                }
                _ => {}
            }
            // The guest's cached word on the host's entry holds unless the host has yet to tell it.
            if self.pages.host_plain(p) && !env.host.is_plain(self.id, p) && !env.host.has_invalidations() {
                return err(format!("page {p} is taken as plainly backed, but the host has it {host:?} or marked"));
            }
            let io = self.pages[i].io;
            if io != NONE && self.bios.iter().all(|(b, bio)| b != io || !bio.pages.contains(&p)) {
                return err(format!("page {p} claims request {io} which does not hold it"));
            }
            match kind {
                PageKind::Anon => {
                    let owner = self.pages[i].owner;
                    let slot = self.pages[i].swap;
                    if slot != NONE && self.swap.cached(slot) != p {
                        return err(format!("page {p} says slot {slot} but the swap cache disagrees"));
                    }
                    if owner == NONE {
                        if io == NONE && !self.pages.has(p, PG_WRITEBACK) {
                            return err(format!("orphan page {p} without I/O in flight or plugged"));
                        }
                        continue;
                    }
                    let vpn = self.pages[i].index as usize;
                    let pte = self.procs[owner as usize].mm.pte[vpn];
                    if self.pages.has(p, PG_MAPPED) {
                        if pte != PTE_PRESENT | p {
                            return err(format!("mapped page {p} but pte of {owner}:{vpn} is {pte:#x}"));
                        }
                        // A shared page's next write must reach the host to break the share.
                        if matches!(host, PageState::Shared(_)) && self.procs[owner as usize].mm.rfast.get(vpn) {
                            return err(format!("page {p} is shared on the host but {owner}:{vpn} has fast bits"));
                        }
                    } else if slot == NONE || pte != PTE_SWAP | slot {
                        return err(format!("unmapped anon page {p} not reachable through swap (pte {pte:#x})"));
                    }
                }
                PageKind::File => {
                    let (f, idx) = (self.pages[i].owner, self.pages[i].index);
                    if self.files[f as usize].pages[idx as usize] != p {
                        return err(format!("file page {p} not in its file's index"));
                    }
                    dirty_file += self.pages.has(p, PG_DIRTY) as u64;
                    wb_file += self.pages.has(p, PG_WRITEBACK) as u64;
                }
                _ => {}
            }
        }
        // Never-used pages are free without a descriptor; the kernel's reservation has none either.
        let managed = self.pages.managed();
        counts[PageKind::Free as usize] += (managed as usize - n) as u64;
        counts[PageKind::Kernel as usize] += (self.cfg.memory_pages - managed) as u64;
        let p2m = env.host.vms()[self.id as usize].p2m();
        if let Some(p) =
            (managed..self.cfg.memory_pages).find(|&p| matches!(p2m.get(p).state(), PageState::Unbacked | PageState::Ballooned))
        {
            return err(format!("kernel page {p} is {:?} on the host", p2m.get(p).state()));
        }
        if counts[PageKind::Balloon as usize] != self.balloon.size() || env.host.vms()[self.id as usize].ballooned != self.balloon.size() {
            return err(format!(
                "{} balloon pages, the driver holds {}, the host counts {}",
                counts[PageKind::Balloon as usize],
                self.balloon.size(),
                env.host.vms()[self.id as usize].ballooned
            ));
        }
        if counts != self.pages.count {
            return err(format!("page kind counts {counts:?} != tracked {:?}", self.pages.count));
        }
        if dirty_file != self.nr_dirty {
            return err(format!("{dirty_file} dirty file pages but nr_dirty = {}", self.nr_dirty));
        }
        // The flusher's dirty list holds exactly the files with dirty pages, at their dirtying time.
        let listed: std::collections::BTreeSet<(u64, u32)> =
            self.files.iter().enumerate().filter_map(|(i, f)| f.dirtied_when.map(|t| (t, i as u32))).collect();
        let dirty_files = self.files.iter().filter(|f| f.nr_dirty > 0).count();
        if listed.len() != dirty_files || listed != *self.dirty_files() {
            return err(format!("the flusher lists {} dirty files, {dirty_files} have dirty pages", self.dirty_files().len()));
        }
        // A dirty page is written before it is dropped, unless its file is deleted: every page ever
        // dirtied was written back, cancelled by an unlink, or is still dirty in the cache.
        let (dirtied, written) = (self.vmstat.get(Counter::NrDirtied), self.vmstat.get(Counter::NrWritten));
        if dirtied != written + self.dirty_cancelled + self.nr_dirty {
            return err(format!(
                "{dirtied} pages dirtied but {written} written, {} cancelled and {} still dirty",
                self.dirty_cancelled, self.nr_dirty
            ));
        }
        if wb_file != self.nr_writeback_file {
            return err(format!("{wb_file} file pages under writeback but counted {}", self.nr_writeback_file));
        }
        // Page tables.
        let mut slot_refs = 0u64;
        for proc in &self.procs {
            let mm = &proc.mm;
            if let Err(e) = mm.check() {
                return err(format!("process {}: {e}", proc.pid));
            }
            let (mut rss, mut swapents) = (0, 0);
            for (vpn, &pte) in mm.pte.iter().enumerate() {
                if pte & PTE_PRESENT != 0 {
                    let p = pte & PTE_MASK;
                    rss += 1;
                    if self.pages[p as usize].kind != PageKind::Anon
                        || self.pages[p as usize].owner != proc.pid
                        || self.pages[p as usize].index != vpn as u32
                    {
                        return err(format!("pte {}:{vpn} -> page {p} which does not point back", proc.pid));
                    }
                    if mm.wfast.get(vpn) && self.pages[p as usize].content != self.written(proc.pid, vpn as u32) {
                        return err(format!("page {}:{vpn} is write-fast but does not hold what its owner writes", proc.pid));
                    }
                } else if pte & PTE_SWAP != 0 {
                    let s = pte & PTE_MASK;
                    swapents += 1;
                    slot_refs += 1;
                    if !self.swap.is_used(s) {
                        return err(format!("pte {}:{vpn} -> free swap slot {s}", proc.pid));
                    }
                    if self.swap.cached(s) == NONE && !self.swap.is_written(s) {
                        return err(format!("pte {}:{vpn} -> slot {s} with neither cache page nor data", proc.pid));
                    }
                }
                if pte & PTE_PRESENT == 0 && (mm.rfast.get(vpn) || mm.wfast.get(vpn) || mm.young.get(vpn)) {
                    return err(format!("entry {}:{vpn} is not present but has fast or accessed bits", proc.pid));
                }
                if mm.rfast.get(vpn) && !mm.young.get(vpn) {
                    return err(format!("page {}:{vpn} read-fast but not accessed", proc.pid));
                }
                if mm.wfast.get(vpn) && !mm.rfast.get(vpn) {
                    return err(format!("page {}:{vpn} write-fast but not read-fast", proc.pid));
                }
            }
            if proc.ended() && (rss > 0 || swapents > 0) {
                return err(format!("process {} has ended but still maps {rss} pages and {swapents} swap entries", proc.pid));
            }
            if rss != mm.rss || swapents != mm.swapents {
                return err(format!("process {} counts rss {} swap {} but maps {rss}/{swapents}", proc.pid, mm.rss, mm.swapents));
            }
        }
        // Every used slot is referenced by exactly one page-table entry or one swap-cache page.
        let cache_only = (0..n).filter(|&i| {
            let s = self.pages[i].swap;
            s != NONE && self.pages[i].kind == PageKind::Anon && self.pages.has(i as u32, PG_MAPPED)
        });
        let used = slot_refs + cache_only.count() as u64;
        if used != self.swap.nr_used() {
            return err(format!("{} swap slots used but {used} referenced", self.swap.nr_used()));
        }
        // Swap counters: every page written to swap is still there or was discarded.
        let written = self.vmstat.get(Counter::PswpOut) + self.vmstat.get(Counter::FrontswapSuccStores);
        let left = self.swap.nr_written() + self.vmstat.get(Counter::SwapDiscard);
        if written != left {
            return err(format!(
                "pswpout {written} != slots holding data {} + discarded {}",
                self.swap.nr_written(),
                self.vmstat.get(Counter::SwapDiscard)
            ));
        }
        Ok(())
    }
}
