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
use super::page_alloc::Stall;
use super::vmscan::{MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX, ScanControl};
use super::{Env, Guest};

/// A charge's limit reclaim under way in its process's context (`try_charge_memcg`'s retry loop
/// and its current `try_to_free_mem_cgroup_pages` call), kept while the process lets time pass.
pub(super) struct LimitReclaim {
    /// The call under way.
    call: Option<ScanControl>,
    /// Fruitless calls left before the OOM killer.
    retries: u32,
}

impl Default for LimitReclaim {
    fn default() -> Self {
        Self { call: None, retries: MAX_RECLAIM_RETRIES }
    }
}

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

scenario_names!(CgroupVersion {
    V1 => "v1",
    V2 => "v2",
});

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
    /// Refaults activated in the cgroup and its descendants, anon and file
    /// (`WORKINGSET_ACTIVATE_ANON`, `_FILE` of its lruvec).
    pub workingset_activate: [u64; 2],
    /// `workingset_activate` at the end of the last reclaim cycle on it (`lruvec->refaults`).
    pub refaults: [u64; 2],
}

impl MemCgroup {
    /// A cgroup with a limit in pages (`u64::MAX` for none).
    pub fn new(name: &str, limit: u64) -> Self {
        Self { name: name.to_string(), limit, failcnt: 0, oom_kill: 0, nonresident_age: 0, workingset_activate: [0; 2], refaults: [0; 2] }
    }
}

impl Guest {
    /// The memory cgroup of process `pid` (the root for the kernel's own allocations).
    #[inline]
    pub(super) fn memcg_of(&self, pid: u32) -> u8 {
        if pid == NONE { 0 } else { self.procs[pid as usize].memcg }
    }

    /// Charges `nr` pages to cgroup `v` for process `pid` (`try_charge_memcg`): at the limit, reclaim
    /// from the cgroup's lists (`try_to_free_mem_cgroup_pages`) and retry while reclaim frees pages;
    /// after MAX_RECLAIM_RETRIES fruitless calls, kill within the cgroup. The reclaim takes time
    /// (`ReclaimCosts`): when its clock passes the next event elsewhere it stops between
    /// batches and the process yields (`Err(Yield)`: still runnable, it retries the charge and the
    /// call goes on where it stopped, to its own end, as a preempted task's would), so the writes
    /// it started complete, and their pages rotate to the tail to be freed, while it scans. A v1
    /// scan that must wait for a write (`folio_wait_writeback`), or a call that frees nothing with
    /// writes in flight, blocks the process until an I/O completes (`Err(Wait)`). Returns the time
    /// spent reclaiming.
    ///
    /// `nr` above one is a fault with its readahead: the kernel charges each readahead page in the
    /// faulting task as it charges the faulting page (`mem_cgroup_swapin_charge_folio`,
    /// `filemap_add_folio`), each charge reclaiming the same way, so the room for all of them is
    /// made here, before any is allocated, and the pages are then charged without reclaim. One
    /// reclaim call (SWAP_CLUSTER_MAX pages) usually makes room for a whole window. When the
    /// retries run out with room for the faulting page only, the charge succeeds and readahead
    /// stops short. Such a fault reclaims under its readahead's block plug (the process's `plug`,
    /// while it is `plugging`): the swap writes wait in it until it fills or the fault submits its
    /// reads, or the process sleeps, which flushes it.
    pub(super) fn try_charge(&mut self, pid: u32, v: u8, nr: u64, now: u64, env: &mut Env) -> Result<u64, Stall> {
        if pid == NONE {
            return self.try_charge_readahead(v, now, env).ok_or(Stall::Wait(0));
        }
        let held = self.plugging == pid;
        let limit = self.memcgs[v as usize].limit;
        let nr = nr.clamp(1, limit.max(1));
        let fits = |g: &Self, n: u64| g.pages.charged(v) + n <= limit;
        let mut st = self.procs[pid as usize].limit_reclaim.take().map_or_else(LimitReclaim::default, |b| *b);
        let mut spent = 0;
        loop {
            let t = now + spent;
            let mut sc = match st.call.take() {
                Some(sc) => sc,
                None if fits(self, nr) => return Ok(spent),
                None => {
                    self.memcgs[v as usize].failcnt += 1;
                    let mut sc = self.scan_control(SWAP_CLUSTER_MAX, false, t).timed();
                    sc.target = Some(v);
                    sc
                }
            };
            // The plug is the fault's while it reads ahead; a call the process resumes from
            // elsewhere goes on under `shrink_lruvec`'s own.
            sc.held = held;
            if held {
                sc.plug.absorb(&mut self.procs[pid as usize].plug);
            }
            sc.resume_at(t, env.events.peek_time().unwrap_or(u64::MAX));
            self.do_try_to_free_pages(&mut sc, env);
            spent = sc.clock() - now;
            if sc.stopped() || sc.wait_writeback {
                let wait = sc.wait_writeback;
                if wait {
                    // Sleeping flushes the task's plug (`sched_submit_work`).
                    self.flush_plug(&mut sc.plug, false, now + spent, env);
                }
                st.call = Some(sc);
                self.procs[pid as usize].limit_reclaim = Some(Box::new(st));
                if wait {
                    self.block(pid, now + spent, true);
                    self.throttled.push(pid);
                    return Err(Stall::Wait(spent));
                }
                return Err(Stall::Yield(spent));
            }
            if held {
                self.procs[pid as usize].plug.absorb(&mut sc.plug);
            } else {
                self.flush_plug(&mut sc.plug, false, now + spent, env);
            }
            if fits(self, nr) || sc.nr_reclaimed > 0 {
                continue;
            }
            if st.retries > 0 {
                st.retries -= 1;
                continue;
            }
            if fits(self, 1) {
                return Ok(spent);
            }
            self.flush_task_plug(pid, now + spent, env);
            if self.bios.in_flight() > 0 {
                // The kernel would go on retrying and may give up with writes still in flight (its
                // runs of the validation see such OOM kills); the model waits for them instead.
                st.retries = MAX_RECLAIM_RETRIES;
                self.procs[pid as usize].limit_reclaim = Some(Box::new(st));
                self.block(pid, now + spent, true);
                self.throttled.push(pid);
                return Err(Stall::Wait(spent));
            }
            match self.oom_kill(now + spent, Some(v), env) {
                Oom::Killed(k) if k != pid => st.retries = MAX_RECLAIM_RETRIES,
                Oom::Freed => st.retries = MAX_RECLAIM_RETRIES,
                Oom::Killed(_) | Oom::NoVictim => return Err(Stall::Killed),
            }
        }
    }

    /// Swap writes held under plugs: processes' own, and those of limit reclaims that stopped to
    /// let time pass.
    pub(super) fn plugged_writes(&self) -> usize {
        let stopped = self.procs.iter().filter_map(|p| p.limit_reclaim.as_ref()?.call.as_ref()).map(|sc| sc.plug.writes.len());
        stopped.sum::<usize>() + self.procs.iter().map(|p| p.plug.writes.len()).sum::<usize>()
    }

    /// Submits the swap writes process `pid` holds under its plug, as its sleeping would.
    pub(super) fn flush_task_plug(&mut self, pid: u32, now: u64, env: &mut Env) {
        let mut plug = std::mem::take(&mut self.procs[pid as usize].plug);
        self.flush_plug(&mut plug, false, now, env);
    }

    /// Process `pid` ends, perhaps in the middle of a limit reclaim: the writes it holds under
    /// plugs go to the device, as the kernel's would when the task leaves reclaim, no earlier than
    /// the reclaim had got to.
    pub(super) fn abandon_limit_reclaim(&mut self, pid: u32, now: u64, env: &mut Env) {
        if let Some(mut sc) = self.procs[pid as usize].limit_reclaim.take().and_then(|st| st.call) {
            let at = now.max(sc.clock());
            self.flush_plug(&mut sc.plug, false, at, env);
        }
        self.flush_task_plug(pid, now, env);
    }

    /// A readahead page's charge when its fault did not make room for it (asynchronous file
    /// readahead, or a fault whose reclaim made room for fewer pages): the readahead cannot stop in
    /// the middle here, so the reclaim is instantaneous, counts pages being written as progress,
    /// and never waits or kills: `None` if the page cannot be charged now. Returns the time spent
    /// reclaiming.
    fn try_charge_readahead(&mut self, v: u8, now: u64, env: &mut Env) -> Option<u64> {
        let mut spent = 0;
        let mut retries = MAX_RECLAIM_RETRIES;
        while self.pages.charged(v) >= self.memcgs[v as usize].limit {
            self.memcgs[v as usize].failcnt += 1;
            let (reclaimed, wait) = self.try_to_free_mem_cgroup_pages(v, now + spent, &mut spent, env);
            if self.pages.charged(v) < self.memcgs[v as usize].limit {
                break;
            }
            if wait || (reclaimed == 0 && self.bios.in_flight() > 0) || (reclaimed == 0 && retries == 0) {
                return None;
            }
            if reclaimed == 0 {
                retries -= 1;
            }
        }
        Some(spent)
    }

    /// `do_try_to_free_pages` for limit reclaim: shrink the cgroup's lists from the scan's priority
    /// down until it has freed enough, must wait for a write, or stops at its deadline. The block
    /// plug spans one `shrink_lruvec` call, so each priority level's swap writes go to the device
    /// when the level ends (unless the plug is a faulting process's, `ScanControl::held`), when the
    /// plug holds BLK_MAX_REQUEST_COUNT requests, or when the scan sleeps on a write, at the time
    /// the scan reached. Traced on this project's machine (`bench/reclaimtrace.py`): a fault's call
    /// that finds no clean page writes until its plug flushes 32 requests of 254 pages and their
    /// completions rotate to the tail, thousands of pages at once; the sweep runs over many of them
    /// before they are freed.
    fn do_try_to_free_pages(&mut self, sc: &mut ScanControl, env: &mut Env) {
        let v = sc.target.expect("limit reclaim has a target");
        loop {
            self.shrink_node(sc);
            if sc.stopped() {
                return;
            }
            let clock = sc.clock();
            self.finish_reclaim(sc, clock, env);
            let plug_full = sc.take_plug_full();
            if plug_full {
                self.flush_plug(&mut sc.plug, false, clock, env);
            }
            // The writes just submitted complete in time order with the rest of the scan.
            sc.deadline = sc.deadline.min(env.events.peek_time().unwrap_or(u64::MAX));
            if plug_full {
                // The level goes on where it stopped, unless it is time to let others run.
                if sc.overdue() {
                    sc.stop();
                    return;
                }
                continue;
            }
            if sc.wait_writeback {
                return;
            }
            if sc.progress() >= sc.nr_to_reclaim || sc.priority == 0 {
                self.snapshot_refaults(v);
                if sc.priority == 0 && sc.retry_forcing_deactivation() {
                    continue;
                }
                return;
            }
            sc.priority -= 1;
            if sc.overdue() {
                sc.stop();
                return;
            }
        }
    }

    /// Limit reclaim (`try_to_free_mem_cgroup_pages`): scan the cgroup's lists from DEF_PRIORITY
    /// down until SWAP_CLUSTER_MAX pages are freed or being written (`ScanControl::progress`).
    /// Adds the scan time to `spent`; returns the pages freed and whether the scan stopped to wait
    /// for a write (v1).
    fn try_to_free_mem_cgroup_pages(&mut self, v: u8, now: u64, spent: &mut u64, env: &mut Env) -> (u64, bool) {
        let mut sc = self.scan_control(SWAP_CLUSTER_MAX, false, now);
        sc.target = Some(v);
        self.shrink_priorities(&mut sc);
        self.finish_direct_reclaim(&mut sc, now, env);
        *spent += sc.spent_ns();
        (sc.nr_reclaimed, sc.wait_writeback)
    }
}

#[cfg(test)]
mod tests {
    use super::super::page::{PG_DIRTY, PG_MAPPED, PG_WRITEBACK, PageKind};
    use super::super::process::{PTE_MASK, PTE_PRESENT};
    use super::*;

    /// Two processes in one cgroup: one stops in the middle of a limit reclaim whose plug holds the
    /// other's page, and the other exits. The page waits for its write (orphaned, never freed while
    /// plugged); the stopped process's end submits the write, whose completion frees it.
    #[test]
    fn a_page_held_in_a_stopped_reclaims_plug_outlives_its_owner_until_the_write_completes() {
        let text = "name = \"t\"\nduration = \"10s\"\n[host]\nmemory = \"1GiB\"\nsample_interval = \"10ms\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                    [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ncgroup = \"v1\"\ndatastore = \"d\"\n\
                    workload = { kind = \"stress\", instances = 2, pages = 2000, memory_limit = \"64MiB\" }\n";
        let s = crate::scenario::load(text, "t", &[]).unwrap().remove(0);
        let mut sim = crate::Simulation::new(&s).unwrap();
        sim.run_until(20_000_000).unwrap();
        let now = sim.now();
        assert!(!sim.is_finished() && now < 1_000_000_000);
        let (a, b) = (0, 1);
        let p = sim.with_guest(0, |g, env| {
            assert!(g.procs.len() > b && g.procs[a].memcg == g.procs[b].memcg && g.procs[a].memcg != 0);
            // A dirty page of B's that reclaim would write, as A's reclaim does under its plug.
            let p = (0..2000)
                .map(|v| g.procs[b].mm.pte[g.procs[b].mm.regions[0].start as usize + v])
                .filter(|&e| e & PTE_PRESENT != 0)
                .map(|e| e & PTE_MASK)
                .find(|&p| g.pages.has(p, PG_MAPPED | PG_DIRTY) && g.pages[p as usize].io == NONE)
                .expect("a dirty mapped page");
            let mut sc = g.scan_control(SWAP_CLUSTER_MAX, false, now).timed();
            sc.target = Some(g.procs[a].memcg);
            sc.held = true;
            assert!(!g.reclaim_anon_page(p, &mut sc), "a dirty page is written, not freed");
            assert_eq!(sc.plug.writes, vec![(g.pages[p as usize].swap, p)]);
            sc.stop();
            g.procs[a].limit_reclaim = Some(Box::new(LimitReclaim { call: Some(sc), retries: MAX_RECLAIM_RETRIES }));
            g.exit_process(b as u32, now, true, env);
            assert_eq!(g.pages[p as usize].kind, PageKind::Anon, "a plugged page is not freed");
            assert_eq!(g.pages[p as usize].owner, NONE, "but orphaned");
            p
        });
        sim.check_invariants().unwrap();
        sim.with_guest(0, |g, env| {
            g.exit_process(a as u32, now, true, env);
            assert!(g.pages.has(p, PG_WRITEBACK) && g.pages[p as usize].io != NONE, "A's end submits the write");
        });
        sim.check_invariants().unwrap();
        sim.run_until(now + 10_000_000).unwrap();
        sim.check_invariants().unwrap();
        sim.with_guest(0, |g, _| assert_eq!(g.pages[p as usize].kind, PageKind::Free, "the write's completion frees it"));
    }
}
