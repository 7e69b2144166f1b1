//! Page allocation and the zone watermarks (`mm/page_alloc.c`): the fast path takes a free page while
//! free memory is above the low watermark; below it kswapd is woken; below the min watermark the
//! allocating process reclaims for itself (direct reclaim) and, if that frees nothing at once,
//! waits for writeback to complete; with nothing left to reclaim the OOM killer picks a victim.

use super::oom_kill::Oom;
use super::page::{NONE, PageKind};
use super::vmscan::MAX_RECLAIM_RETRIES;
use super::{Counter, Env, Guest, Replacement, Sysctl, Thp};

/// Pages per pageblock on x86-64 (2 MiB of 4 KiB pages), khugepaged's unit.
const PAGEBLOCK_NR_PAGES: u64 = 512;
/// MIGRATE_PCPTYPES: unmovable, movable and reclaimable pageblocks.
const MIGRATE_PCPTYPES: u64 = 3;

/// The min, low and high watermarks in pages (one zone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watermarks {
    /// Below this, allocations reclaim directly.
    pub min: u64,
    /// Below this, kswapd is woken.
    pub low: u64,
    /// kswapd reclaims until free memory reaches this.
    pub high: u64,
}

impl Watermarks {
    /// The kernel's watermarks for `managed` pages (`__setup_per_zone_wmarks`): min from
    /// `min_free_kbytes` (default `int_sqrt(lowmem_kbytes * 16)` clamped to 128..262144 KiB), then
    /// low = min + gap and high = min + 2 gap with gap = max(min / 4, managed x
    /// watermark_scale_factor / 10000).
    pub fn linux(managed: u64, sysctl: &Sysctl) -> Self {
        let min_kb = sysctl.min_free_kbytes.unwrap_or_else(|| Self::default_min_free_kbytes(managed));
        let min = min_kb / 4;
        let gap = (min / 4).max(managed * sysctl.watermark_scale_factor as u64 / 10_000);
        Self { min, low: min + gap, high: min + 2 * gap }
    }

    /// `init_per_zone_wmark_min`'s default `min_free_kbytes` for `managed` pages:
    /// int_sqrt(16 x lowmem KiB), clamped to 128..262,144 KiB (mm/page_alloc.c).
    pub fn default_min_free_kbytes(managed: u64) -> u64 {
        let x = managed * 4 * 16;
        // int_sqrt: the largest r with r^2 <= x (the float root can be one off near squares).
        let mut r = (x as f64).sqrt() as u64;
        while r * r > x {
            r -= 1;
        }
        while (r + 1) * (r + 1) <= x {
            r += 1;
        }
        r.clamp(128, 262_144)
    }

    /// `min_free_kbytes` after boot. With transparent huge pages enabled (`always` or `madvise`),
    /// khugepaged's `set_recommended_min_free_kbytes` (mm/khugepaged.c) raises the formula's value
    /// to keep 2 + MIGRATE_PCPTYPES^2 = 11 free pageblocks (2 MiB each) per populated zone up to
    /// ZONE_NORMAL, at most 5 % of lowmem (managed pages above the high watermark). On this
    /// project's 24 GiB machine (three zones) that is 67,584 KiB against about 19,900 by the formula.
    pub fn boot_min_free_kbytes(managed: u64, zones: u64, thp: Thp, watermark_scale_factor: u32) -> u64 {
        let formula = Self::default_min_free_kbytes(managed);
        if thp == Thp::Never {
            return formula;
        }
        let sysctl = Sysctl { min_free_kbytes: Some(formula), watermark_scale_factor, ..Sysctl::default() };
        let lowmem = managed.saturating_sub(Self::linux(managed, &sysctl).high);
        let recommended = (PAGEBLOCK_NR_PAGES * zones * (2 + MIGRATE_PCPTYPES * MIGRATE_PCPTYPES)).min(lowmem / 20);
        formula.max(recommended * 4)
    }

    /// Populated zones up to ZONE_NORMAL of an x86-64 guest with `memory` bytes: ZONE_DMA (the
    /// first 16 MiB), ZONE_DMA32 (the rest below 4 GiB) and, once memory no longer fits below the
    /// PCI hole, ZONE_NORMAL above 4 GiB. Firmware puts the hole's start between 2.75 GiB (QEMU
    /// q35) and 3.5 GiB (QEMU i440fx); 3 GiB is taken.
    pub fn linux_zones(memory: u64) -> u64 {
        1 + (memory > 16 << 20) as u64 + (memory > 3 << 30) as u64
    }
}

/// Why an allocation could not complete now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The process spent this long in direct reclaim and now waits for it (it is blocked; it
    /// retries when woken).
    Wait(u64),
    /// The process spent this long reclaiming and lets the rest of the simulation catch up (it is
    /// still runnable; it retries at once, and its reclaim goes on where it stopped).
    Yield(u64),
    /// The process was killed by the OOM killer.
    Killed,
}

impl Stall {
    /// The same stall after `ns` already spent.
    pub(super) fn after(self, ns: u64) -> Self {
        match self {
            Self::Wait(t) => Self::Wait(ns + t),
            Self::Yield(t) => Self::Yield(ns + t),
            Self::Killed => Self::Killed,
        }
    }
}

impl Guest {
    /// Allocates a page for process `pid` (or for the kernel when `pid` is `NONE`, which never
    /// waits). Returns the page and the time the allocation took (host backing, direct reclaim).
    /// On `Err(Wait)` the process has been blocked on reclaim.
    pub(super) fn alloc_page(
        &mut self,
        pid: u32,
        kind: PageKind,
        owner: u32,
        index: u32,
        now: u64,
        env: &mut Env,
    ) -> Result<(u32, u64), Stall> {
        let memcg = self.memcg_of(pid);
        let mut spent = if memcg != 0 { self.try_charge(pid, memcg, 1, now, env)? } else { 0 };
        let mut no_progress_loops = 0;
        loop {
            if self.windows() {
                if let Some(r) = self.windows_alloc(kind, owner, index, now, env) {
                    return Ok(r);
                }
                self.wait_or_kill(pid, spent, now, env)?;
                continue;
            }
            let free = self.pages.nr_free();
            if self.cfg.replacement == Replacement::ExactLru {
                if free == 0 && matches!(self.evict_exact(now, env), Some(Oom::Killed(v)) if v == pid) {
                    return Err(Stall::Killed);
                }
            } else if free <= self.wmark.low {
                self.wakeup_kswapd(now, env);
                if free <= self.wmark.min {
                    self.vmstat.inc(Counter::AllocStall);
                    spent += self.try_to_free_pages(now, env);
                }
            }
            let floor = if self.cfg.replacement == Replacement::Linux { self.wmark.min } else { 0 };
            if self.pages.nr_free() > floor {
                let p = self.pages.take_free(kind, owner, index, memcg).expect("free page");
                // The next allocations most likely take the next free pages: over a large guest
                // their descriptors are not in the CPU's caches, and one allocation's time is too
                // short to fetch them in.
                let free = self.pages.free_list();
                for &q in &free[free.len().saturating_sub(2)..] {
                    self.pages.prefetch(q);
                }
                // Zeroing the page touches it: the host backs it, or brings back what it took.
                let (host, _) = self.host_touch(p, true, now + spent, true, env);
                return Ok((p, spent + host));
            }
            if self.cfg.replacement == Replacement::Linux && !self.reclaim_in_flight() {
                // Reclaim ran (free memory is at the min watermark) and freed too little: a
                // pass that found the pages referenced has cleared their bits, so another may
                // free them.
                no_progress_loops = if self.pages.nr_free() > free { 0 } else { no_progress_loops + 1 };
                if self.should_reclaim_retry(no_progress_loops) {
                    continue;
                }
            }
            self.wait_or_kill(pid, spent, now, env)?;
            // Written pages or a victim's memory came back: reclaim starts counting afresh.
            no_progress_loops = 0;
        }
    }

    /// Nothing to allocate after `spent` of reclaim: wait for I/O in flight (writes that will free
    /// or make pages available) if there is any, else call the OOM killer. `Ok` means retry.
    fn wait_or_kill(&mut self, pid: u32, spent: u64, now: u64, env: &mut Env) -> Result<(), Stall> {
        if pid != NONE {
            // It is about to sleep (or kill): writes held under its plug go to the device first.
            self.flush_task_plug(pid, now + spent, env);
        }
        if self.reclaim_in_flight() {
            if pid != NONE {
                self.block(pid, now + spent, true);
                self.throttled.push(pid);
            }
            return Err(Stall::Wait(spent));
        }
        match self.oom_kill(now, None, env) {
            Oom::Freed => Ok(()),
            Oom::Killed(v) if v != pid => Ok(()),
            Oom::Killed(_) | Oom::NoVictim => Err(Stall::Killed),
        }
    }

    /// Allocates a readahead page charged to cgroup `memcg`: like any allocation it may wake kswapd
    /// and reclaim directly, or reclaim for its cgroup's limit (the kernel allocates and charges
    /// readahead pages with the faulting allocation's flags), but it never waits or kills: without a
    /// page the readahead just stops. Returns the page and the time spent reclaiming.
    pub(super) fn alloc_page_nowait(
        &mut self,
        kind: PageKind,
        owner: u32,
        index: u32,
        memcg: u8,
        now: u64,
        env: &mut Env,
    ) -> Option<(u32, u64)> {
        if self.windows() {
            let p = self.windows_take_page(kind, owner, index)?;
            self.host_touch(p, true, now, false, env);
            return Some((p, 0));
        }
        let mut spent = if memcg != 0 { self.try_charge(NONE, memcg, 1, now, env).ok()? } else { 0 };
        let floor = if self.cfg.replacement == Replacement::Linux {
            if self.pages.nr_free() <= self.wmark.low {
                self.wakeup_kswapd(now, env);
                if self.pages.nr_free() <= self.wmark.min {
                    spent += self.try_to_free_pages(now + spent, env);
                }
            }
            self.wmark.min
        } else {
            0
        };
        if self.pages.nr_free() <= floor {
            return None;
        }
        let p = self.pages.take_free(kind, owner, index, memcg)?;
        // The device fills the page: the host backs it in its I/O path, not on a vCPU.
        self.host_touch(p, true, now + spent, false, env);
        Some((p, spent))
    }

    /// `should_reclaim_retry` (mm/page_alloc.c; its back-off went in 2017): direct reclaim is
    /// tried again, rather than the OOM killer, while freeing all it could would lift free memory
    /// above the min watermark, for at most MAX_RECLAIM_RETRIES fruitless retries in a row.
    /// Anonymous pages count as reclaimable only while a swap slot is free
    /// (`zone_reclaimable_pages`, `can_reclaim_anon_pages`).
    fn should_reclaim_retry(&self, no_progress_loops: u32) -> bool {
        if no_progress_loops > MAX_RECLAIM_RETRIES {
            return false;
        }
        let reclaimable = self.lru.file() + if self.swap.has_free() { self.lru.anon() } else { 0 };
        reclaimable + self.pages.nr_free() > self.wmark.min
    }

    /// Whether writes in flight will free memory or otherwise change reclaim's options soon.
    fn reclaim_in_flight(&self) -> bool {
        self.bios.in_flight() > 0
    }

    /// Zeroes every page the guest has not used, or has freed (Windows at boot: see
    /// `GuestConfig::zero_memory_at_ns`). Each is a write the host must back; the zeroing's own
    /// time is not modelled (seconds at memory bandwidth for gigabytes, against the minutes that
    /// matter here), but a page the host must first free (host reclaim) makes the zeroing wait for
    /// it, as the zeroing vCPU would: it goes on from that page when the frame is there.
    pub(super) fn zero_memory(&mut self, now: u64, env: &mut Env) {
        while self.zero_next < self.pages.managed() {
            let p = self.zero_next;
            self.zero_next += 1;
            let i = p as usize;
            if i < self.pages.len() {
                if self.pages[i].kind != PageKind::Free {
                    continue;
                }
                self.pages[i].content = crate::content::ZERO;
            }
            let (wait, plain) = self.host_touch(p, true, now, false, env);
            if env.host.fatal.is_some() {
                return;
            }
            // Backing a free frame (`plain`) is part of the zeroing's unmodelled time.
            if wait > 0 && !plain {
                env.schedule(self.id, now + wait, crate::clock::GuestEvent::ZeroMemory);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_free_kbytes_follows_the_kernel() {
        // The table in the comment above init_per_zone_wmark_min (mm/page_alloc.c): lowmem -> KiB;
        // the comment's 8192 MB row says 11584k, but int_sqrt(16 x 8,388,608) is 11,585.
        let table = [
            (16, 512),
            (32, 724),
            (64, 1024),
            (128, 1448),
            (256, 2048),
            (512, 2896),
            (1024, 4096),
            (2048, 5792),
            (4096, 8192),
            (8192, 11585),
            (16384, 16384),
        ];
        for (mib, kib) in table {
            assert_eq!(Watermarks::default_min_free_kbytes(mib * 256), kib, "{mib} MiB");
        }
        assert_eq!(Watermarks::default_min_free_kbytes(1), 128, "clamped below");
        assert_eq!(Watermarks::default_min_free_kbytes(1 << 40), 262_144, "clamped above");
    }

    #[test]
    fn khugepaged_raises_min_free_kbytes_when_thp_is_on() {
        // This project's machine: 24 GiB, three zones, THP madvise: /proc/sys/vm/min_free_kbytes
        // reads 67,584 = 11 pageblocks x 3 zones x 2 MiB.
        let managed = 24 * 262_144 - 50_000;
        assert_eq!(Watermarks::boot_min_free_kbytes(managed, Watermarks::linux_zones(24 << 30), Thp::Madvise, 10), 67_584);
        // Seed 003's Kali guest: MemTotal 1,994,208 KiB in two zones (DMA, DMA32), THP always.
        let kali = 1_994_208 / 4;
        assert_eq!(Watermarks::linux_zones(2 << 30), 2);
        assert_eq!(Watermarks::boot_min_free_kbytes(kali, 2, Thp::Always, 10), 45_056);
        assert_eq!(Watermarks::boot_min_free_kbytes(kali, 2, Thp::Never, 10), 5_648);
        // A small guest: capped at 5 % of lowmem.
        let small = 64 * 256;
        let w = Watermarks::linux(small, &Sysctl { min_free_kbytes: Some(1024), ..Sysctl::default() });
        assert_eq!(Watermarks::boot_min_free_kbytes(small, 2, Thp::Always, 10), (small - w.high) / 20 * 4);
    }
}
