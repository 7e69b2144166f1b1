//! The guest's transcendent-memory clients, as upstream Linux has them (docs/sources/tmem.md
//! section 2): cleancache (`mm/cleancache.c`, 3.0) keeps clean page-cache pages reclaim drops,
//! frontswap (`mm/frontswap.c`, 3.5) takes swap writes before the disk; the Xen frontend
//! (`drivers/xen/tmem.c`) gives each a pool.
//!
//! - cleancache: the file system's private ephemeral pool, created at mount; a page is keyed
//!   (file, index). Reclaim puts a clean page it drops (`__delete_from_page_cache`); a read looks
//!   in the pool before the disk (`do_mpage_readpage`), and a hit removes the page (the pool is
//!   exclusive); deleting a file flushes its object.
//! - frontswap: one private persistent pool for the swap device; slot `s` is object `s & 15`,
//!   index `s >> 4` (the frontend's "swizzling"). A swap write is offered to the pool first
//!   (`swap_writepage`): stored, it needs no I/O; refused, it goes to the disk. A swap read looks
//!   in the pool first; the copy stays until the slot is freed (`swap_entry_free` invalidates it).
//!
//! Both calls are synchronous copies: a request the pool serves completes after the copies'
//! CPU time instead of the device's.

use super::bio::{BioKind, Submission};
use super::lru::LruList;
use super::page::{NONE, PG_DIRTY, PG_MAPPED, PG_READAHEAD, PG_WRITEBACK, PageKind};
use super::process::{PTE_MASK, PTE_PRESENT, PTE_SWAP};
use super::{Counter, Env, Guest};
use crate::bitmap::Bitmap;
use crate::host::{PoolKind, Put};

/// Bits of a slot that pick its frontswap object (`SWIZ_BITS`).
const SWIZ_BITS: u32 = 4;

/// A guest's tmem frontend state.
#[derive(Clone, Debug, Default)]
pub struct TmemClient {
    /// cleancache's pool, if the guest runs cleancache and the host has tmem.
    cleancache: Option<u32>,
    /// frontswap's pool, likewise.
    frontswap: Option<u32>,
    /// Swap slots whose data frontswap holds (`frontswap_map`).
    frontswap_map: Bitmap,
    /// Freed slots whose frontswap copies are still to be invalidated.
    to_invalidate: Vec<u32>,
    /// Pages reclaim dropped, to be put once it may call the host: (file, index, content).
    to_put: Vec<(u32, u32, u64)>,
}

/// A slot's frontswap handle.
fn swizzle(slot: u32) -> (u64, u32) {
    ((slot & ((1 << SWIZ_BITS) - 1)) as u64, slot >> SWIZ_BITS)
}

impl Guest {
    /// Creates the guest's pools (at mount and `swapon`), if it runs the clients and the host has
    /// tmem.
    pub(super) fn tmem_init(&mut self, env: &mut Env) {
        if env.host.tmem().is_none() {
            return;
        }
        if self.cfg.cleancache {
            self.tmem.cleancache = env.host.tmem_new_pool(self.id, PoolKind::PrivateEphemeral);
        }
        if self.cfg.frontswap {
            self.tmem.frontswap = env.host.tmem_new_pool(self.id, PoolKind::PrivatePersistent);
            self.tmem.frontswap_map = Bitmap::new(self.cfg.swap_pages as usize);
        }
    }

    /// Frees a swap slot; returns whether it held written data. A frontswap copy of it is
    /// invalidated at the guest's next call to the host.
    pub(super) fn swap_free(&mut self, slot: u32) -> bool {
        if self.tmem.frontswap.is_some() && self.tmem.frontswap_map.get(slot as usize) {
            self.tmem.frontswap_map.clear(slot as usize);
            self.tmem.to_invalidate.push(slot);
        }
        self.swap.free(slot)
    }

    /// Pages frontswap holds for the guest (`frontswap_curr_pages`).
    pub fn frontswap_pages(&self) -> u64 {
        self.tmem.frontswap_map.count_ones() as u64
    }

    /// What `security_vm_enough_memory_mm` (OVERCOMMIT_GUESS, as for a privileged task) allows:
    /// free, page-cache and free swap pages beyond the reserve. The page cache here is the file LRU
    /// (the kernel's NR_FILE_PAGES also counts the swap cache; the model has no shmem and no
    /// reclaimable slab).
    fn vm_enough_memory_room(&self) -> u64 {
        (self.pages.nr_free() + self.lru.file() + self.swap.size() - self.swap.nr_used()).saturating_sub(self.wmark.high)
    }

    /// `frontswap_shrink(target)`, "essentially a partial swapoff" (`mm/frontswap.c`, 3.x): brings
    /// pages frontswap holds back into guest memory until it holds `target`, as `try_to_unuse`
    /// does, slot by slot from the swap area's start. Each page is allocated, loaded from the
    /// pool, mapped again old (`unuse_pte`: `pte_mkold`), activated and dirtied, and its slot
    /// freed, which invalidates the pool's copy. Returns the pages brought back and the worker's
    /// time, or why none could be.
    ///
    /// Simplified: the allocation reclaims directly but never waits (the kernel's may sleep, and
    /// OOM-kill), so the shrink stops early when memory is short; a page in the swap cache with
    /// I/O in flight is passed over rather than waited for, so fewer than asked may come back.
    pub fn frontswap_shrink(&mut self, target: u64, now: u64, env: &mut Env) -> Result<(u64, u64), &'static str> {
        let Some(pool) = self.tmem.frontswap else { return Err("the guest runs no frontswap") };
        let n = self.frontswap_pages().saturating_sub(target);
        if n == 0 {
            return Ok((0, 0));
        }
        // `__frontswap_unuse_pages` first asks `security_vm_enough_memory_mm`.
        if self.vm_enough_memory_room() <= n {
            return Err("not enough memory to take the pages back (vm_enough_memory)");
        }
        let slots: Vec<u32> = self.tmem.frontswap_map.ones().take(n as usize).map(|s| s as u32).collect();
        // unuse_mm: the page-table entries that hold those slots, found by walking every process.
        let mut want = Bitmap::new(self.tmem.frontswap_map.len());
        slots.iter().for_each(|&s| want.set(s as usize));
        let mut owner = vec![(NONE, NONE); slots.len()];
        for (pid, proc) in self.procs.iter().enumerate() {
            for (vpn, &pte) in proc.mm.pte.iter().enumerate() {
                let slot = pte & PTE_MASK;
                if pte & PTE_SWAP != 0 && want.get(slot as usize) {
                    owner[slots.binary_search(&slot).expect("wanted slot")] = (pid as u32, vpn as u32);
                }
            }
        }
        let (mut done, mut spent) = (0, 0);
        for (&slot, &(pid, vpn)) in slots.iter().zip(&owner) {
            let cached = self.swap.cached(slot);
            if cached != NONE {
                // In the swap cache: a page being read or written is left for this pass (the
                // kernel would wait for it); otherwise it is mapped where the entry still is.
                if self.pages[cached as usize].io != NONE || self.pages.has(cached, PG_WRITEBACK) {
                    continue;
                }
                if pid != NONE {
                    self.unuse_pte(pid, vpn, cached);
                }
                // A readahead page taken this way was not a readahead hit.
                self.pages.clear(cached, PG_READAHEAD);
                self.activate_page(cached);
                self.pages.set(cached, PG_DIRTY);
                self.delete_from_swap_cache(cached, true);
                done += 1;
                continue;
            }
            if pid == NONE {
                continue;
            }
            let memcg = self.memcg_of(pid);
            let Some((p, ns)) = self.alloc_page_nowait(PageKind::Anon, pid, vpn, memcg, now + spent, env) else { break };
            let (oid, index) = swizzle(slot);
            let (hit, t) = env.host.tmem_get(pool, oid, index);
            debug_assert!(hit, "frontswap returns every page it accepted");
            spent += ns + t;
            self.vmstat.inc(Counter::FrontswapLoads);
            self.pages[p as usize].content = self.written(pid, vpn);
            self.pages.set(p, PG_DIRTY);
            self.lru_add(p, false, false);
            self.activate_page(p);
            self.unuse_pte(pid, vpn, p);
            if self.swap_free(slot) {
                self.vmstat.inc(Counter::SwapDiscard);
            }
            done += 1;
        }
        Ok((done, spent))
    }

    /// `activate_page`, as `unuse_pte` calls it so a page brought back is not reclaimed at once.
    fn activate_page(&mut self, p: u32) {
        if self.lru.list_of(p) == Some(LruList::InactiveAnon) {
            self.lru.move_head(LruList::ActiveAnon, p);
            self.vmstat.inc(Counter::PgActivate);
        }
    }

    /// Maps page `p` where `pid`'s entry at `vpn` holds its slot, not yet accessed (`unuse_pte`).
    fn unuse_pte(&mut self, pid: u32, vpn: u32, p: u32) {
        let mm = &mut self.procs[pid as usize].mm;
        mm.pte[vpn as usize] = PTE_PRESENT | p;
        mm.rss += 1;
        mm.swapents -= 1;
        self.pages.set(p, PG_MAPPED);
    }

    /// Reclaim dropped clean page-cache page `p`: cleancache will be offered it.
    pub(super) fn cleancache_note_eviction(&mut self, p: u32) {
        if self.tmem.cleancache.is_some() {
            let (f, i) = (self.pages[p as usize].owner, self.pages[p as usize].index);
            self.tmem.to_put.push((f, i, self.pages[p as usize].content));
        }
    }

    /// Makes the calls reclaim and slot frees left pending; returns their CPU time.
    pub(super) fn tmem_flush_pending(&mut self, env: &mut Env) -> u64 {
        // Called before every guest event: nothing to do is the common case.
        if self.tmem.to_invalidate.is_empty() && self.tmem.to_put.is_empty() {
            return 0;
        }
        let mut ns = 0;
        if let Some(pool) = self.tmem.frontswap {
            env.host.tmem_prefetch(pool, self.tmem.to_invalidate.iter().map(|&slot| swizzle(slot)));
            for slot in self.tmem.to_invalidate.drain(..) {
                let (oid, index) = swizzle(slot);
                env.host.tmem_flush_page(pool, oid, index);
            }
        }
        if let Some(pool) = self.tmem.cleancache {
            self.vmstat.add(Counter::CleancachePuts, self.tmem.to_put.len() as u64);
            for k in 0..self.tmem.to_put.len() {
                let (f, i, content) = self.tmem.to_put[k];
                let class = self.cfg.workloads[self.files[f as usize].workload].content(true);
                ns += env.host.tmem_put(self.id, pool, f as u64, i, content, class).1;
            }
            self.tmem.to_put.clear();
        }
        ns
    }

    /// `cleancache_invalidate_inode`: a deleted file's pages leave the pool.
    pub(super) fn cleancache_invalidate_file(&mut self, file: u32, env: &mut Env) {
        if let Some(pool) = self.tmem.cleancache {
            env.host.tmem_flush_object(pool, file as u64);
        }
    }

    /// Splits a request's (block, page) items into those tmem serves now (moved to `served`) and
    /// those left for the device; returns the CPU time of the calls. File reads ask cleancache,
    /// swap writes and reads frontswap.
    pub(super) fn tmem_serve(&mut self, sub: &Submission, items: &mut Vec<(u32, u32)>, served: &mut Vec<(u32, u32)>, env: &mut Env) -> u64 {
        let mut ns = 0;
        match sub.kind {
            BioKind::FileRead => {
                let Some(pool) = self.tmem.cleancache else { return 0 };
                env.host.tmem_prefetch(pool, items.iter().map(|&(i, _)| (sub.file as u64, i)));
                items.retain(|&(i, p)| {
                    let (hit, t) = env.host.tmem_get(pool, sub.file as u64, i);
                    ns += t;
                    if hit {
                        served.push((i, p));
                    }
                    !hit
                });
                self.vmstat.add(Counter::CleancacheSuccGets, served.len() as u64);
                self.vmstat.add(Counter::CleancacheFailedGets, items.len() as u64);
            }
            BioKind::SwapWrite => {
                let Some(pool) = self.tmem.frontswap else { return 0 };
                items.retain(|&(slot, p)| {
                    let (oid, index) = swizzle(slot);
                    let class = crate::host::GuestMemory::content(self, p);
                    let (r, t) = env.host.tmem_put(self.id, pool, oid, index, self.pages[p as usize].content, class);
                    ns += t;
                    // A refused put to a slot frontswap held flushed the old copy.
                    let stored = r == Put::Stored;
                    self.tmem.frontswap_map.assign(slot as usize, stored);
                    if stored {
                        served.push((slot, p));
                    }
                    !stored
                });
                self.vmstat.add(Counter::FrontswapSuccStores, served.len() as u64);
                self.vmstat.add(Counter::FrontswapFailedStores, items.len() as u64);
            }
            BioKind::SwapRead => {
                let Some(pool) = self.tmem.frontswap else { return 0 };
                let held = items.iter().filter(|&&(slot, _)| self.tmem.frontswap_map.get(slot as usize));
                env.host.tmem_prefetch(pool, held.map(|&(slot, _)| swizzle(slot)));
                items.retain(|&(slot, p)| {
                    if !self.tmem.frontswap_map.get(slot as usize) {
                        return true;
                    }
                    let (oid, index) = swizzle(slot);
                    let (hit, t) = env.host.tmem_get(pool, oid, index);
                    debug_assert!(hit, "frontswap returns every page it accepted");
                    ns += t;
                    served.push((slot, p));
                    false
                });
                self.vmstat.add(Counter::FrontswapLoads, served.len() as u64);
            }
            BioKind::FileWrite => {}
        }
        ns
    }

    /// frontswap never loses a page: every slot it took holds, in the host's pool, what the
    /// process wrote there, and the pool holds nothing else (but copies still to be invalidated).
    pub(super) fn check_frontswap(&self, env: &Env) -> Result<(), String> {
        let (Some(pool), Some(t)) = (self.tmem.frontswap, env.host.tmem()) else { return Ok(()) };
        for (pid, proc) in self.procs.iter().enumerate() {
            for (vpn, &pte) in proc.mm.pte.iter().enumerate() {
                let slot = pte & PTE_MASK;
                if pte & PTE_SWAP == 0 || !self.tmem.frontswap_map.get(slot as usize) {
                    continue;
                }
                let (oid, index) = swizzle(slot);
                let want = self.written(pid as u32, vpn as u32);
                if t.content_of(pool, oid, index) != Some(want) {
                    return Err(format!(
                        "frontswap slot {slot} of process {pid} page {vpn} holds {:?}, not {want}",
                        t.content_of(pool, oid, index)
                    ));
                }
            }
        }
        let held = t.pools()[pool as usize].stats.pages;
        let expected = self.tmem.frontswap_map.count_ones() as u64 + self.tmem.to_invalidate.len() as u64;
        if held != expected {
            return Err(format!("frontswap's pool holds {held} pages, the guest {expected}"));
        }
        Ok(())
    }

    /// Whether a request of this kind may be served by tmem.
    pub(super) fn tmem_serves(&self, kind: BioKind) -> bool {
        match kind {
            BioKind::FileRead => self.tmem.cleancache.is_some(),
            BioKind::SwapWrite | BioKind::SwapRead => self.tmem.frontswap.is_some(),
            BioKind::FileWrite => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 256 MiB Xen guest whose idle process's 96 MiB a 200 MiB stress run pushes into
    /// frontswap; `swap` sizes its swap area. No policy acts: the tests call the shrink by hand.
    fn pushed(swap: &str, until_ns: u64) -> crate::Simulation {
        let text = format!(
            "name = \"t\"\nseed = 1\nduration = \"150s\"\n[host]\nmemory = \"1GiB\"\nprofile = \"xen\"\nhypervisor = \"288MiB\"\n\
             tmem = true\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\nmaxmem = \"512MiB\"\ndatastore = \"d\"\nswap = \"{swap}\"\nkernel_reserved = \"16MiB\"\n\
             [[vm.workload]]\nkind = \"idle\"\nfootprint = \"96MiB\"\n\
             [[vm.workload]]\nkind = \"stress\"\npages = \"200MiB\"\npasses = 30\nstart = \"1s\"\n"
        );
        let s = crate::scenario::load(&text, "t", &[]).unwrap().remove(0);
        let mut sim = crate::Simulation::new(&s).unwrap();
        sim.run_until(until_ns).unwrap();
        sim.check_invariants().unwrap();
        sim
    }

    #[test]
    fn a_shrink_memory_cannot_take_is_refused_and_changes_nothing() {
        // 100 MiB of swap, nearly all of it frontswap's, while stress fills memory.
        let mut sim = pushed("100MiB", 1_100_000_000);
        let (now, before) = (sim.now(), sim.with_guest(0, |g, _| g.frontswap_pages()));
        sim.with_guest(0, |g, env| {
            assert!(
                g.vm_enough_memory_room() < before,
                "the setting must leave less room ({}) than frontswap holds ({before})",
                g.vm_enough_memory_room()
            );
            let e = g.frontswap_shrink(0, now, env).expect_err("refused");
            assert!(e.contains("vm_enough_memory"), "{e}");
            assert_eq!(g.frontswap_pages(), before, "nothing taken back");
            // A shrink by less than the room goes through.
            let (done, _) = g.frontswap_shrink(before - 100, now, env).expect("100 pages fit");
            assert_eq!((done, g.frontswap_pages()), (100, before - 100));
        });
        sim.check_invariants().unwrap();
    }

    #[test]
    fn swap_cache_pages_are_mapped_back_without_a_load_and_the_rest_loaded() {
        // Stress has ended (at 1.14 s); swap readahead has left some of the idle process's
        // frontswap pages in the swap cache, unmapped.
        let mut sim = pushed("512MiB", 2_000_000_000);
        let now = sim.now();
        sim.with_guest(0, |g, env| {
            let held = g.frontswap_pages();
            let cached: Vec<u32> = g.tmem.frontswap_map.ones().map(|s| g.swap.cached(s as u32)).filter(|&p| p != NONE).collect();
            assert!(
                !cached.is_empty() && g.vm_enough_memory_room() > held,
                "setting: {} cached of {held}, room {}",
                cached.len(),
                g.vm_enough_memory_room()
            );
            let (loads, activations) = (g.vmstat.get(Counter::FrontswapLoads), g.vmstat.get(Counter::PgActivate));
            let (done, _) = g.frontswap_shrink(0, now, env).expect("room enough");
            assert_eq!((done, g.frontswap_pages()), (held, 0), "every page came back");
            assert_eq!(g.vmstat.get(Counter::FrontswapLoads) - loads, held - cached.len() as u64, "swap-cache pages need no load");
            assert!(g.vmstat.get(Counter::PgActivate) > activations, "pages come back active");
            for p in cached {
                assert!(g.pages.has(p, PG_MAPPED | PG_DIRTY), "swap-cache page {p} mapped and dirty");
                assert_eq!(g.pages[p as usize].swap, NONE, "and out of the swap cache");
            }
        });
        sim.check_invariants().unwrap();
        // The run goes on from there with every invariant intact.
        sim.run_until(now + 50_000_000).unwrap();
        sim.check_invariants().unwrap();
    }

    #[test]
    fn under_pressure_a_shrink_stops_early_and_frontswap_keeps_the_rest() {
        // Stress is filling memory: the allocations, which never wait, give out before the
        // pages are all back; what was not brought back stays in frontswap, intact.
        let mut sim = pushed("512MiB", 1_100_000_000);
        let now = sim.now();
        sim.with_guest(0, |g, env| {
            let (held, stores) = (g.frontswap_pages(), g.vmstat.get(Counter::FrontswapSuccStores));
            assert!(g.vm_enough_memory_room() > held, "vm_enough_memory lets it start");
            let (done, _) = g.frontswap_shrink(0, now, env).expect("started");
            assert!(done > 0 && done < held, "{done} of {held} brought back");
            // The allocations' direct reclaim stored stress pages meanwhile.
            let stored = g.vmstat.get(Counter::FrontswapSuccStores) - stores;
            assert_eq!(g.frontswap_pages(), held - done + stored);
        });
        sim.check_invariants().unwrap();
    }
}
