//! kswapd (`balance_pgdat`): woken when free memory falls below the low watermark, it reclaims
//! until free memory reaches the high watermark, then sleeps. Pages whose write-out it started
//! count toward that goal; while they are in flight it waits for completions (the kernel's
//! writeback throttling) rather than scanning further.
//!
//! kswapd is an actor with its own clock: each step scans the LRU lists once at the current
//! priority and takes the reclaim costs of what it scanned, freed and wrote, so processes keep running (and keep
//! re-referencing their pages) while it works. It does not take vCPU time from them.

use super::vmscan::{DEF_PRIORITY, MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX};
use super::{Counter, Env, Guest};
use crate::clock::GuestEvent;

/// kswapd's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KswapdState {
    /// Asleep until an allocation wakes it.
    #[default]
    Sleeping,
    /// Its next step is scheduled.
    Scheduled,
    /// Waiting for in-flight writes to complete before looking again.
    Throttled,
}

/// kswapd's state and progress through a `balance_pgdat` pass.
#[derive(Clone, Debug)]
pub struct Kswapd {
    state: KswapdState,
    /// Priority of the next step.
    priority: u32,
    /// Pages freed or being written since the pass began.
    pass_progress: u64,
    /// Consecutive passes that made no progress.
    failures: u32,
    /// Until when its current step keeps it busy.
    busy_until: u64,
}

impl Default for Kswapd {
    fn default() -> Self {
        Self { state: KswapdState::Sleeping, priority: DEF_PRIORITY, pass_progress: 0, failures: 0, busy_until: 0 }
    }
}

impl Kswapd {
    /// The current state.
    pub fn state(&self) -> KswapdState {
        self.state
    }
}

impl Guest {
    /// `wakeup_kswapd`.
    pub(super) fn wakeup_kswapd(&mut self, now: u64, env: &mut Env) {
        if self.kswapd.state == KswapdState::Sleeping {
            self.kswapd = Kswapd { state: KswapdState::Scheduled, busy_until: now, ..Kswapd::default() };
            self.vmstat.inc(Counter::KswapdWake);
            env.schedule(self.id, now, GuestEvent::Kswapd);
        }
    }

    /// Whether free memory, counting pages already being written out for reclaim, reaches high.
    fn kswapd_balanced(&self) -> bool {
        self.pages.nr_free() + self.nr_reclaim_wb >= self.wmark.high
    }

    /// One kswapd step: a scan at the current priority, then the decision to go on, wait or sleep.
    pub(super) fn kswapd_run(&mut self, now: u64, env: &mut Env) {
        if self.kswapd.state != KswapdState::Scheduled {
            return;
        }
        let mut spent = 0;
        if !self.kswapd_balanced() {
            let mut sc = self.scan_control(self.wmark.high.max(SWAP_CLUSTER_MAX), true, now);
            sc.priority = self.kswapd.priority;
            self.shrink_node(&mut sc);
            self.finish_reclaim(&mut sc, now, env);
            spent = sc.spent_ns();
            self.kswapd.pass_progress += sc.progress();
            // The kernel lowers the priority when a step scanned less than it wanted or freed nothing.
            if sc.nr_scanned < sc.nr_to_reclaim || sc.progress() == 0 {
                self.kswapd.priority -= 1;
            }
            if self.kswapd.priority == 0 {
                self.kswapd.failures = if self.kswapd.pass_progress == 0 { self.kswapd.failures + 1 } else { 0 };
                self.kswapd.priority = DEF_PRIORITY;
                self.kswapd.pass_progress = 0;
            }
        }
        self.kswapd.busy_until = now + spent;
        self.kswapd.state = if self.pages.nr_free() >= self.wmark.high {
            // The end of `balance_pgdat`'s cycle.
            self.snapshot_refaults(0);
            KswapdState::Sleeping
        } else if self.kswapd_balanced() {
            KswapdState::Throttled
        } else if self.kswapd.failures >= MAX_RECLAIM_RETRIES {
            // Nothing reclaimable: allocators fall back on the OOM killer.
            KswapdState::Sleeping
        } else {
            env.schedule(self.id, now + spent.max(1), GuestEvent::Kswapd);
            KswapdState::Scheduled
        };
    }

    /// An I/O completed: a throttled kswapd looks again once its current step is over.
    pub(super) fn kswapd_io_done(&mut self, now: u64, env: &mut Env) {
        if self.kswapd.state == KswapdState::Throttled {
            self.kswapd.state = KswapdState::Scheduled;
            env.schedule(self.id, now.max(self.kswapd.busy_until), GuestEvent::Kswapd);
        }
    }
}
