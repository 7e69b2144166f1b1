//! Page allocation and the zone watermarks (`mm/page_alloc.c`): the fast path takes a free page while
//! free memory is above the low watermark; below it kswapd is woken; below the min watermark the
//! allocating process reclaims for itself (direct reclaim) and, if that frees nothing at once,
//! waits for writeback to complete; with nothing left to reclaim the OOM killer picks a victim.

use super::page::{NONE, PageKind};
use super::{Env, Guest, Replacement, Sysctl, Vm};

/// SWAP_CLUSTER_MAX: pages direct reclaim tries to free per attempt.
pub const SWAP_CLUSTER_MAX: u64 = 32;

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

    /// `init_per_zone_wmark_min`'s default `min_free_kbytes` for `managed` pages.
    pub fn default_min_free_kbytes(managed: u64) -> u64 {
        ((managed * 4 * 16) as f64).sqrt().floor().clamp(128.0, 262_144.0) as u64
    }
}

/// Why an allocation could not complete now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The process spent this long in direct reclaim and now waits for it (it is blocked; it
    /// retries when woken).
    Wait(u64),
    /// The process was killed by the OOM killer.
    Killed,
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
        let mut spent = 0;
        loop {
            let free = self.pages.nr_free();
            if self.cfg.replacement == Replacement::ExactLru {
                if free == 0 && self.evict_exact(now, env) == Some(pid) {
                    return Err(Stall::Killed);
                }
            } else if free <= self.wmark.low {
                self.wakeup_kswapd(now, env);
                if free <= self.wmark.min {
                    self.vmstat.inc(Vm::AllocStall);
                    spent += self.try_to_free_pages(now, env) * self.cfg.costs.reclaim_scan_ns;
                }
            }
            let floor = if self.cfg.replacement == Replacement::Linux { self.wmark.min } else { 0 };
            if self.pages.nr_free() > floor {
                let p = self.pages.take_free(kind, owner, index).expect("free page");
                let host = if env.host.back(self.id, p) { self.cfg.costs.host_back_ns } else { 0 };
                return Ok((p, spent + host));
            }
            if self.reclaim_in_flight() {
                if pid != NONE {
                    self.block(pid, now + spent, true);
                    self.throttled.push(pid);
                }
                return Err(Stall::Wait(spent));
            }
            let victim = self.oom_kill(now, env);
            if victim == Some(pid) || victim.is_none() {
                return Err(Stall::Killed);
            }
        }
    }

    /// Allocates a readahead page: like any allocation it may wake kswapd and reclaim directly
    /// (the kernel allocates readahead pages with the faulting allocation's flags), but it never
    /// waits or kills: without a page the readahead just stops. Returns the page and the time
    /// spent reclaiming.
    pub(super) fn alloc_page_nowait(&mut self, kind: PageKind, owner: u32, index: u32, now: u64, env: &mut Env) -> Option<(u32, u64)> {
        let mut spent = 0;
        let floor = if self.cfg.replacement == Replacement::Linux {
            if self.pages.nr_free() <= self.wmark.low {
                self.wakeup_kswapd(now, env);
                if self.pages.nr_free() <= self.wmark.min {
                    spent = self.try_to_free_pages(now, env) * self.cfg.costs.reclaim_scan_ns;
                }
            }
            self.wmark.min
        } else {
            0
        };
        if self.pages.nr_free() <= floor {
            return None;
        }
        let p = self.pages.take_free(kind, owner, index)?;
        env.host.back(self.id, p);
        Some((p, spent))
    }

    /// Whether writes in flight will free memory or otherwise change reclaim's options soon.
    fn reclaim_in_flight(&self) -> bool {
        self.bios.in_flight() > 0
    }
}
