//! kswapd (`balance_pgdat`): woken when free memory falls below the low watermark, it reclaims
//! until free memory reaches the high watermark, then sleeps. Pages whose write-out it started
//! count toward that goal; while they are in flight it waits for completions (the kernel's
//! writeback throttling) rather than scanning further.
//!
//! Scanning takes no simulated CPU time here: kswapd's cost that matters is the I/O it issues.

use super::page_alloc::SWAP_CLUSTER_MAX;

/// MAX_RECLAIM_RETRIES: fruitless reclaim passes before giving up (mm/internal.h).
const MAX_RECLAIM_RETRIES: u32 = 16;
use super::vmscan::{DEF_PRIORITY, ScanControl};
use super::{Env, Guest, Vm};
use crate::clock::Event;

/// kswapd's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kswapd {
    /// Asleep until an allocation wakes it.
    #[default]
    Sleeping,
    /// A run is scheduled.
    Scheduled,
    /// Waiting for in-flight writes to complete before looking again.
    Throttled,
}

impl Guest {
    /// `wakeup_kswapd`.
    pub(super) fn wakeup_kswapd(&mut self, now: u64, env: &mut Env) {
        if self.kswapd == Kswapd::Sleeping {
            self.kswapd = Kswapd::Scheduled;
            self.vmstat.inc(Vm::KswapdWake);
            env.events.push(now, Event::Kswapd { guest: self.id });
        }
    }

    /// Whether free memory, counting pages already being written out for reclaim, reaches high.
    fn kswapd_balanced(&self) -> bool {
        self.pages.nr_free() + self.nr_reclaim_wb >= self.wmark.high
    }

    /// One kswapd run.
    pub(super) fn kswapd_run(&mut self, now: u64, env: &mut Env) {
        if self.kswapd != Kswapd::Scheduled {
            return;
        }
        // balance_pgdat, repeated while it makes progress: a pass that only cleared accessed bits
        // has prepared the next one. After MAX_RECLAIM_RETRIES fruitless passes kswapd gives up.
        let mut failures = 0;
        while !self.kswapd_balanced() && failures < MAX_RECLAIM_RETRIES {
            let mut sc = ScanControl::new(self.wmark.high.max(SWAP_CLUSTER_MAX), true);
            for prio in (1..=DEF_PRIORITY).rev() {
                if self.kswapd_balanced() {
                    break;
                }
                sc.priority = prio;
                self.shrink_node(&mut sc);
            }
            self.finish_reclaim(&mut sc, now, env);
            failures = if sc.progress() == 0 { failures + 1 } else { 0 };
        }
        self.kswapd = if self.pages.nr_free() >= self.wmark.high {
            Kswapd::Sleeping
        } else if self.bios.in_flight() > 0 {
            Kswapd::Throttled
        } else {
            // Nothing left to reclaim and nothing in flight: allocators fall back on the OOM killer.
            Kswapd::Sleeping
        };
    }

    /// An I/O completed: a throttled kswapd looks again.
    pub(super) fn kswapd_io_done(&mut self, now: u64, env: &mut Env) {
        if self.kswapd == Kswapd::Throttled {
            self.kswapd = Kswapd::Scheduled;
            env.events.push(now, Event::Kswapd { guest: self.id });
        }
    }
}
