//! Memory cgroups (`mm/memcontrol.c`): a workload's processes may run in a cgroup with a memory
//! limit, as a container in a VM does. Every page is charged to one cgroup (the root's when its
//! process has none); a charge past the limit reclaims from the cgroup's own LRU lists at once
//! (`try_charge_memcg`: no watermarks, no kswapd), retries, and after `MAX_RECLAIM_RETRIES`
//! fruitless reclaims calls the OOM killer on the cgroup's processes alone.
//!
//! Not modelled: the per-CPU charge stock (`MEMCG_CHARGE_BATCH`, 64 pages charged ahead), soft
//! limits, `memory.high`, `memory.low`/`min` protection, and a swap limit (v1 `memsw`, v2
//! `memory.swap.max`): the cgroup may swap as much as the guest's swap area holds.

use super::oom_kill::Oom;
use super::page::NONE;
use super::page_alloc::{SWAP_CLUSTER_MAX, Stall};
use super::vmscan::{DEF_PRIORITY, ScanControl};
use super::{Env, Guest};

/// MAX_RECLAIM_RETRIES (mm/internal.h): fruitless reclaims before a charge gives up.
const MAX_RECLAIM_RETRIES: u32 = 16;

/// Which cgroup hierarchy the guest mounts. It changes how limit reclaim treats pages under
/// writeback (`writeback_throttling_sane`): v1 ("legacy") reclaim waits for such a page, v2 moves
/// it to the active list like global reclaim does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1 (`memory.limit_in_bytes`).
    V1,
    /// cgroup v2 (`memory.max`), systemd's default since 2021.
    V2,
}

impl CgroupVersion {
    /// Names as written in scenario files.
    pub const NAMES: &'static [&'static str] = &["v1", "v2"];

    /// Parses a scenario name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "v1" => Some(Self::V1),
            "v2" => Some(Self::V2),
            _ => None,
        }
    }

    /// The scenario name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// A memory cgroup. Number 0 is the root, which has no limit.
#[derive(Clone, Debug)]
pub struct MemCgroup {
    /// The workload whose processes it holds ("" for the root).
    pub name: String,
    /// Limit in pages (`u64::MAX`: none).
    pub limit: u64,
    /// Charges that found the cgroup at its limit (`memory.failcnt`).
    pub failcnt: u64,
    /// Processes the cgroup's own OOM killer killed.
    pub oom_kill: u64,
    /// Evictions and refault activations so far (`lruvec->nonresident_age`): the clock refault
    /// distances are measured in.
    pub nonresident_age: u64,
}

impl MemCgroup {
    /// A cgroup with a limit in pages (`u64::MAX` for none).
    pub fn new(name: &str, limit: u64) -> Self {
        Self { name: name.to_string(), limit, failcnt: 0, oom_kill: 0, nonresident_age: 0 }
    }
}

impl Guest {
    /// The memory cgroup of process `pid` (the root for the kernel's own allocations).
    #[inline]
    pub(super) fn memcg_of(&self, pid: u32) -> u8 {
        if pid == NONE { 0 } else { self.procs[pid as usize].memcg }
    }

    /// Charges one page to cgroup `v` for process `pid` (`try_charge_memcg`): at the limit, reclaim
    /// from the cgroup's lists and retry while reclaim frees pages; with writes in flight, wait for
    /// them (`Err(Wait)`: the process is blocked and retries when woken); after MAX_RECLAIM_RETRIES
    /// fruitless attempts, kill within the cgroup. With `pid` `NONE` (readahead) it never waits or
    /// kills: `Err(Wait)` only says the charge failed. Returns the time spent reclaiming.
    pub(super) fn try_charge(&mut self, pid: u32, v: u8, now: u64, env: &mut Env) -> Result<u64, Stall> {
        let mut spent = 0;
        let mut retries = MAX_RECLAIM_RETRIES;
        while self.pages.charged(v) >= self.memcgs[v as usize].limit {
            self.memcgs[v as usize].failcnt += 1;
            let (reclaimed, wait) = self.try_to_free_mem_cgroup_pages(v, now + spent, &mut spent, env);
            if self.pages.charged(v) < self.memcgs[v as usize].limit {
                break;
            }
            if wait || (reclaimed == 0 && self.bios.in_flight() > 0) {
                if pid != NONE {
                    self.block(pid, now + spent, true);
                    self.throttled.push(pid);
                }
                return Err(Stall::Wait(spent));
            }
            if reclaimed > 0 {
                continue;
            }
            if retries > 0 {
                retries -= 1;
                continue;
            }
            if pid == NONE {
                return Err(Stall::Wait(spent));
            }
            match self.oom_kill(now + spent, Some(v), env) {
                Oom::Killed(k) if k != pid => retries = MAX_RECLAIM_RETRIES,
                Oom::Freed => retries = MAX_RECLAIM_RETRIES,
                Oom::Killed(_) | Oom::NoVictim => return Err(Stall::Killed),
            }
        }
        Ok(spent)
    }

    /// Limit reclaim (`try_to_free_mem_cgroup_pages`): scan the cgroup's lists from DEF_PRIORITY
    /// down until SWAP_CLUSTER_MAX pages are freed or being written (`ScanControl::progress`).
    /// Adds the scan time to `spent`; returns the pages freed and whether the scan stopped to wait
    /// for a write (v1).
    fn try_to_free_mem_cgroup_pages(&mut self, v: u8, now: u64, spent: &mut u64, env: &mut Env) -> (u64, bool) {
        let mut sc = ScanControl::new(SWAP_CLUSTER_MAX, false, now);
        sc.target = Some(v);
        for prio in (0..=DEF_PRIORITY).rev() {
            sc.priority = prio;
            self.shrink_node(&mut sc);
            if sc.progress() >= sc.nr_to_reclaim || sc.wait_writeback {
                break;
            }
        }
        self.finish_reclaim(&mut sc, now, env);
        *spent += sc.nr_scanned * self.cfg.costs.reclaim_scan_ns;
        (sc.nr_reclaimed, sc.wait_writeback)
    }
}
