//! The Windows profile of the guest memory manager (NT 6.x, x64): working sets instead of LRU
//! lists, the standby and modified page lists, the working-set manager and the modified page
//! writer, clustered pagefile reads, and the low/high memory resource notifications.
//! Sources and their confidence: `docs/sources/windows-guest.md` (WI6 = Windows Internals 6th ed.
//! ch. 10; WRK = the Windows Research Kernel, NT 5.2).
//!
//! How the Linux structures map: a page in a process's working set is mapped and on no list; a
//! trimmed page keeps its pagefile slot through the swap cache and sits on `Standby` (clean) or
//! `Modified` (dirty), or on no list while the modified writer writes it; re-touching it is a
//! transition (soft) fault. Repurposing a standby page drops it from the swap cache but keeps the
//! slot, so the next touch is a hard fault.

mod modified_writer;
mod working_set;

use super::lru::LruList;
use super::page::{NONE, PG_DIRTY, PageKind};
use super::process::PTE_SWAP;
use super::{Env, Guest};
use crate::units::PAGE_SIZE;

/// Minimum working set, pages: trimming never takes a process below it (WI6/WI7 "Working Set
/// Management": default minimum 50 pages).
pub const WS_MINIMUM: u64 = 50;
/// The working-set manager trims while Available is below this many pages, and the modified
/// writer runs while a working set is trimmed below it (WI6 "Modified Page Writer": 15,000 pages).
/// [unpublished] as the trim trigger: NT 6.x's trim thresholds are not public; the writer's
/// number is the nearest published one (windows-guest.md section 1, proposed model).
pub const TRIM_BELOW: u64 = 15_000;
/// Trimming stops once Available reaches this many pages (WI6 "Modified Page Writer": the writer's
/// zeroed+free threshold, 20,000 pages; [unpublished] as the trim goal, as above).
pub const TRIM_GOAL: u64 = 20_000;
/// The working-set manager's period: the balance set manager's timer "set to fire once per
/// second" (WI6 "Balance Set Manager and Swapper").
pub const WS_MANAGER_PERIOD_NS: u64 = 1_000_000_000;
/// Largest pagefile read, pages (WRK `MM_MAXIMUM_READ_CLUSTER_SIZE` 15 + the faulting page).
pub const READ_CLUSTER: u32 = 16;
/// Pagefile reads are clustered only while Available exceeds this (WRK `MiResolvePageFileFault`).
pub const CLUSTER_MIN_AVAILABLE: u64 = 1_024;
/// `MmAllocatePagesForMdl` stops when Available falls below this (WRK `iosup.c`).
pub const MDL_ALLOC_FLOOR: u64 = 128;
/// Pages per balloon MDL in the open analogue of the Windows balloon driver (virtio-win: one MDL
/// per `PAGE_SIZE / sizeof(PFN_NUMBER)` pages); VMware's Windows driver is unpublished.
const BALLOON_MDL_PAGES: u64 = 512;

/// The Windows-only state of a guest.
#[derive(Clone, Debug, Default)]
pub struct WindowsState {
    /// Each process's working-set clock hand (virtual page), by pid.
    hands: Vec<u32>,
    /// Modified-writer writes in flight.
    writes: u32,
}

impl WindowsState {
    /// Where process `pid`'s clock hand stands.
    pub(in crate::guest) fn hand(&self, pid: u32) -> u32 {
        self.hands.get(pid as usize).copied().unwrap_or(0)
    }

    /// Moves process `pid`'s clock hand.
    pub(in crate::guest) fn set_hand(&mut self, pid: u32, v: u32) {
        if self.hands.len() <= pid as usize {
            self.hands.resize(pid as usize + 1, 0);
        }
        self.hands[pid as usize] = v;
    }
}

impl Guest {
    /// Available Bytes, in pages: the zeroed, free and standby lists ("Available Bytes" explain
    /// text).
    pub fn available(&self) -> u64 {
        self.pages.nr_free() + self.lru.len(LruList::Standby)
    }

    /// Pages in the processes' working sets (resident anonymous pages; on Linux, their RSS).
    pub fn working_set(&self) -> u64 {
        self.procs.iter().map(|p| p.mm.rss).sum()
    }

    /// The .NET Memory counters of the guest's managed processes, if it runs any.
    pub fn clr_heap(&self) -> Option<crate::workloads::ClrHeap> {
        self.procs.iter().filter_map(|p| p.workload.clr()).reduce(|a, b| crate::workloads::ClrHeap {
            loh_bytes: a.loh_bytes + b.loh_bytes,
            gen0: a.gen0 + b.gen0,
            gen1: a.gen1 + b.gen1,
            gen2: a.gen2 + b.gen2,
            lowmem: a.lowmem + b.lowmem,
        })
    }

    /// Physical pages as Windows counts them for its thresholds (`MmNumberOfPhysicalPages`): the
    /// configured memory; a balloon does not change it.
    fn physical_pages(&self) -> u64 {
        self.cfg.memory_pages as u64
    }

    /// The low-memory notification threshold, pages (WRK `MiInitializeMemoryEvents`, quoted in the
    /// .NET reference source): `MmPlentyFreePages` (800) plus (pages - 32,768) / 32 above 128 MiB
    /// of RAM; above 1 GiB instead 32 MiB + (pages - 262,144) / 128; capped at 64 MiB. An 8 GiB
    /// guest gets the cap, 16,384 pages.
    pub fn low_memory_threshold(&self) -> u64 {
        const MIB: u64 = (1 << 20) / PAGE_SIZE;
        let pages = self.physical_pages();
        let low = if pages > 262_144 {
            32 * MIB + (pages - 262_144) / 128
        } else if pages > 32_768 {
            800 + (pages - 32_768) / 32
        } else {
            800
        };
        low.min(64 * MIB)
    }

    /// The high-memory threshold: three times the low one (same source).
    pub fn high_memory_threshold(&self) -> u64 {
        3 * self.low_memory_threshold()
    }

    /// Whether `\KernelObjects\LowMemoryCondition` is set. A notification event that stays set while
    /// the condition holds (WDK "Standard Event Objects"), so the level, not the crossing, is seen.
    pub fn low_memory(&self) -> bool {
        self.windows() && self.available() < self.low_memory_threshold()
    }

    /// Whether `HighMemoryCondition` is set.
    pub fn high_memory(&self) -> bool {
        self.windows() && self.available() >= self.high_memory_threshold()
    }

    /// Nonpaged pool the balloon's page lists take, bytes: one MDL of 48 B + 8 B per page for each
    /// 512 pages (4,144 B, a big-pool allocation of two pages), plus a 24 B list entry in a 48 B
    /// block (windows-guest.md section 5: about 16 B per ballooned page).
    pub fn balloon_pool_bytes(&self) -> u64 {
        if !self.windows() {
            return 0;
        }
        self.balloon.size().div_ceil(BALLOON_MDL_PAGES) * (2 * PAGE_SIZE + 48)
    }

    /// Takes a page for a new use without waiting: a free page, else the oldest standby page
    /// repurposed (its owner's entry keeps the pagefile slot, so its next touch is a hard fault).
    /// The allocator's order for a demand-zero fault: zeroed, free, then standby (WI5 "Page List
    /// Dynamics"); zeroed and free are one list here.
    pub(super) fn windows_take_page(&mut self, kind: PageKind, owner: u32, index: u32) -> Option<u32> {
        if self.pages.nr_free() == 0 {
            let p = self.lru.tail(0, LruList::Standby)?;
            self.lru.remove(p);
            self.delete_from_swap_cache(p, false);
            self.pages.release(p);
            self.vmstat.inc(super::Counter::StandbyRepurposed);
        }
        self.pages.take_free(kind, owner, index, 0)
    }

    /// Takes page `p` out of its owner's working set: its entry now refers to the page through its
    /// pagefile slot, and the page goes to the modified list if its contents are not on disk, else
    /// to standby. Returns false if the pagefile is full (a dirty page then stays).
    pub(super) fn trim_page(&mut self, p: u32) -> bool {
        let mut slot = self.pages[p as usize].swap;
        if slot == NONE {
            let Some(s) = self.swap.alloc() else { return false };
            slot = s;
            self.add_to_swap_cache(p, slot);
        }
        self.unmap_to_swap(p, slot);
        let list = if self.pages.has(p, PG_DIRTY) { LruList::Modified } else { LruList::Standby };
        self.lru.add_head(0, list, p);
        self.vmstat.inc(super::Counter::WsTrimmed);
        true
    }

    /// Allocates a page: a free or standby page; with none, the working-set manager runs at once
    /// and the modified writer is kicked. Returns the page and the time the host took to back it,
    /// or `None` if nothing became available (the caller waits for the writer).
    pub(super) fn windows_alloc(&mut self, kind: PageKind, owner: u32, index: u32, now: u64, env: &mut Env) -> Option<(u32, u64)> {
        loop {
            if let Some(p) = self.windows_take_page(kind, owner, index) {
                self.modified_writer_check(false, now, env);
                let (host, _) = self.host_touch(p, true, now, true, env);
                return Some((p, host));
            }
            // Pages on their way to standby (modified, or being written) will do: wait for them
            // rather than trim more. Only with nothing in the pipeline is the manager run early.
            let pipeline = self.lru.len(LruList::Modified) > 0 || self.win.writes > 0;
            if pipeline || self.trim_working_sets(now, env) == 0 || self.available() == 0 {
                self.modified_writer_check(false, now, env);
                return None;
            }
        }
    }

    /// The pagefile read cluster around a hard fault at `vpn` on `slot` (WRK `MiResolvePageFileFault`
    /// with NT 6's clustering for all faults): neighbouring pages of the same region and page table
    /// whose entries hold the neighbouring slots, up to `READ_CLUSTER` pages, only while Available
    /// exceeds `CLUSTER_MIN_AVAILABLE`. Returns `[start, end)` in virtual pages.
    pub(super) fn windows_cluster(&self, pid: u32, vpn: u32, slot: u32) -> (u32, u32) {
        if self.available() <= CLUSTER_MIN_AVAILABLE {
            return (vpn, vpn + 1);
        }
        let mm = &self.procs[pid as usize].mm;
        let pmd = vpn - vpn % 512;
        let r = mm.region_of(vpn);
        let (lo, hi) = r.map_or((vpn, vpn + 1), |r| (r.start.max(pmd), (r.start + r.pages).min(pmd + 512)));
        // Pages already in memory (standby, modified) do not end the cluster: the read covers their
        // blocks with a dummy page.
        let holds = |v: u32| mm.pte[v as usize] == PTE_SWAP | (slot as i64 + v as i64 - vpn as i64) as u32;
        let (mut start, mut end) = (vpn, vpn + 1);
        while end - start < READ_CLUSTER && end < hi && holds(end) {
            end += 1;
        }
        while end - start < READ_CLUSTER && start > lo && holds(start - 1) {
            start -= 1;
        }
        (start, end)
    }

    /// Starts the working-set manager's periodic runs (Windows guests).
    pub(super) fn windows_boot(&mut self, env: &mut Env) {
        if self.windows() {
            env.schedule(self.id, WS_MANAGER_PERIOD_NS, crate::clock::GuestEvent::WorkingSetManager);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Simulation;
    use crate::guest::Counter;
    use crate::guest::memory::Touch;
    use crate::guest::process::{PTE_MASK, PTE_PRESENT};

    /// A Windows guest of `memory` (no kernel reservation) whose idle process has written
    /// `footprint` pages, stopped at 100 ms: before the working-set manager's first run at 1 s.
    fn booted(memory: &str, footprint: u32) -> Simulation {
        let text = format!(
            "name = \"t\"\nduration = \"60s\"\n[host]\nmemory = \"1GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
             [[vm]]\nname = \"w\"\nos = \"windows\"\nmemory = \"{memory}\"\nkernel_reserved = \"0B\"\ndatastore = \"d\"\n\
             workload = {{ kind = \"idle\", footprint = \"{footprint} pages\" }}\n"
        );
        let s = crate::scenario::load(&text, "t", &[]).unwrap().remove(0);
        let mut sim = Simulation::new(&s).unwrap();
        sim.run_until(100_000_000).unwrap();
        sim
    }

    /// Virtual pages of process 0 whose entry holds a pagefile slot (trimmed).
    fn trimmed_vpns(g: &Guest) -> Vec<u32> {
        let mm = &g.procs[0].mm;
        (0..mm.pte.len() as u32).filter(|&v| mm.pte[v as usize] & PTE_SWAP != 0).collect()
    }

    #[test]
    fn trimming_lists_pages_without_writing_and_a_retouch_is_a_transition_fault() {
        let mut sim = booted("400 pages", 100);
        let now = 100_000_000;
        sim.with_guest(0, |g, env| {
            assert_eq!(g.trim_process(0, 100, now), 0, "every page was just accessed: the first pass only clears bits");
            assert_eq!(g.trim_process(0, 100, now), 50, "the second pass trims down to the 50-page minimum");
            assert_eq!((g.lru.len(LruList::Modified), g.lru.len(LruList::Standby)), (50, 0), "anonymous pages are dirty");
            assert_eq!(g.bios.in_flight(), 0, "trimming writes nothing");
            assert_eq!(g.vmstat.get(Counter::PswpOut), 0);
            g.modified_writer_run(now, env);
            assert!(g.bios.in_flight() > 0);
        });
        sim.run_until(300_000_000).unwrap();
        sim.check_invariants().unwrap();
        sim.with_guest(0, |g, env| {
            assert_eq!((g.lru.len(LruList::Modified), g.lru.len(LruList::Standby)), (0, 50), "written pages go to standby");
            assert_eq!(g.vmstat.get(Counter::PswpOut), 50);
            let vpn = trimmed_vpns(g)[0];
            assert!(matches!(g.touch_slow(0, vpn, false, 1, 300_000_000, env), Touch::Done(_)), "a standby page needs no read");
            assert_eq!((g.vmstat.get(Counter::TransitionFaults), g.vmstat.get(Counter::PageReads)), (1, 0));
            assert_ne!(g.procs[0].mm.pte[vpn as usize] & PTE_PRESENT, 0, "back in the working set");
            assert_eq!(g.lru.len(LruList::Standby), 49);
            // Use every free page, then one more: the oldest standby page is repurposed, and its
            // owner's next touch reads the pagefile.
            let victim = g.lru.tail(0, LruList::Standby).unwrap();
            let victim_vpn = g.pages[victim as usize].index;
            while g.pages.nr_free() > 0 {
                g.windows_take_page(PageKind::Kernel, NONE, NONE).unwrap();
            }
            assert_eq!(g.windows_take_page(PageKind::Kernel, NONE, NONE), Some(victim));
            assert_eq!(g.vmstat.get(Counter::StandbyRepurposed), 1);
            assert!(matches!(g.touch_slow(0, victim_vpn, false, 1, 300_000_000, env), Touch::Blocked(_)), "a hard fault");
            assert_eq!(g.vmstat.get(Counter::PageReads), 1);
        });
    }

    #[test]
    fn a_dirty_trimmed_page_is_written_before_its_frame_is_reused() {
        let mut sim = booted("200 pages", 200);
        let now = 100_000_000;
        sim.with_guest(0, |g, env| {
            assert_eq!(g.pages.nr_free(), 0);
            g.trim_process(0, 100, now);
            assert_eq!(g.trim_process(0, 100, now), 100);
            assert_eq!(g.windows_take_page(PageKind::Kernel, NONE, NONE), None, "modified pages are not available");
            g.modified_writer_run(now, env);
            assert_eq!(g.windows_take_page(PageKind::Kernel, NONE, NONE), None, "nor while they are written");
        });
        sim.run_until(400_000_000).unwrap();
        sim.with_guest(0, |g, _| {
            let q = g.lru.tail(0, LruList::Standby).expect("written pages are on standby");
            let (slot, vpn) = (g.pages[q as usize].swap, g.pages[q as usize].index);
            assert!(g.swap.is_written(slot), "the page's contents are on the pagefile");
            assert_eq!(g.windows_take_page(PageKind::Kernel, NONE, NONE), Some(q));
            assert_eq!(g.procs[0].mm.pte[vpn as usize], PTE_SWAP | slot, "its owner finds it on the pagefile");
            assert_eq!(g.procs[0].mm.pte[vpn as usize] & PTE_MASK, slot);
        });
    }

    #[test]
    fn memory_notifications_follow_the_wrk_thresholds_and_the_level() {
        let expect =
            [("8GiB", 16_384), ("2GiB", 8_192 + (524_288 - 262_144) / 128), ("512MiB", 800 + (131_072 - 32_768) / 32), ("64MiB", 800)];
        for (mem, low) in expect {
            let mut s = booted(mem, 10);
            s.with_guest(0, |g, _| {
                assert_eq!(g.low_memory_threshold(), low, "{mem}");
                assert_eq!(g.high_memory_threshold(), 3 * low, "{mem}");
            });
        }
        let mut sim = booted("512MiB", 100);
        sim.with_guest(0, |g, _| {
            assert!(!g.low_memory() && g.high_memory());
            while g.available() > g.low_memory_threshold() {
                g.windows_take_page(PageKind::Kernel, NONE, NONE).unwrap();
            }
            assert!(!g.low_memory(), "set below the threshold, not at it");
            g.windows_take_page(PageKind::Kernel, NONE, NONE).unwrap();
            assert!(g.low_memory() && !g.high_memory());
        });
    }
}
