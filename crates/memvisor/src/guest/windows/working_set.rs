//! The working-set manager (WI6 "Working Set Management"): once a second, if Available is low, it
//! ages working sets with an accessed-bit clock and trims the pages found unaccessed since the
//! last visit, largest working sets first and never below the working-set minimum, until
//! Available reaches its goal. Trimmed pages go to the standby or modified list; nothing is
//! written here (the modified page writer does that).

use super::{TRIM_BELOW, TRIM_GOAL, WS_MANAGER_PERIOD_NS, WS_MINIMUM};

/// Below this many available pages trimming is "hard": pages are taken even if accessed since
/// the last pass (WRK `wsmanage.c`: trim age 0 under hard trim, triggered below 192 pages).
const HARD_TRIM_BELOW: u64 = 192;
use crate::clock::GuestEvent;
use crate::guest::page::NONE;
use crate::guest::process::{PTE_MASK, PTE_PRESENT, ProcState};
use crate::guest::{Env, Guest};

impl Guest {
    /// The periodic run: trim if needed, then wait for the next second.
    pub(in crate::guest) fn working_set_manager(&mut self, now: u64, env: &mut Env) {
        self.trim_working_sets(now, env);
        env.schedule(self.id, now + WS_MANAGER_PERIOD_NS, GuestEvent::WorkingSetManager);
    }

    /// Trims working sets while Available is below `TRIM_BELOW`, up to `TRIM_GOAL`; also called at
    /// once when an allocation finds nothing available (Mm signals the manager's event early when
    /// "the free list is too small"). Returns the pages trimmed.
    pub(in crate::guest) fn trim_working_sets(&mut self, now: u64, env: &mut Env) -> u64 {
        let avail = self.available();
        if avail >= TRIM_BELOW {
            return 0;
        }
        let mut need = TRIM_GOAL - avail;
        // Largest first: the manager puts processes with many pages to spare ahead.
        let mut order: Vec<u32> = (0..self.procs.len() as u32)
            .filter(|&p| !matches!(self.procs[p as usize].state, ProcState::Exited | ProcState::Killed))
            .filter(|&p| self.procs[p as usize].mm.rss > WS_MINIMUM)
            .collect();
        order.sort_by_key(|&p| std::cmp::Reverse(self.procs[p as usize].mm.rss));
        let mut trimmed = 0;
        // The first pass trims pages unaccessed since the hand last passed; if Available is then
        // still critically low, a second pass trims those whose bit the first one cleared.
        for pass in 0..2 {
            if pass == 1 && self.available() >= HARD_TRIM_BELOW {
                break;
            }
            for &pid in &order {
                if need == 0 {
                    break;
                }
                let n = self.trim_process(pid, need, now);
                trimmed += n;
                need -= n;
            }
        }
        if trimmed > 0 {
            // Standby pages are available at once: allocations waiting for memory may go on.
            for pid in std::mem::take(&mut self.throttled) {
                self.wake(pid, now, env);
            }
        }
        self.modified_writer_check(true, now, env);
        trimmed
    }

    /// One process's share: the clock hand walks its page table from where it stopped, clearing
    /// accessed bits and trimming pages whose bit was already clear, until `claim` pages are trimmed,
    /// the working set is at its minimum, or the hand has gone round once. Returns pages trimmed.
    pub(super) fn trim_process(&mut self, pid: u32, claim: u64, now: u64) -> u64 {
        let len = self.procs[pid as usize].mm.pte.len() as u32;
        if len == 0 {
            return 0;
        }
        let mut hand = self.win.hand(pid) % len;
        let mut trimmed = 0;
        for _ in 0..len {
            if trimmed == claim || self.procs[pid as usize].mm.rss <= WS_MINIMUM {
                break;
            }
            let pte = self.procs[pid as usize].mm.pte[hand as usize];
            hand = if hand + 1 == len { 0 } else { hand + 1 };
            if pte & PTE_PRESENT == 0 {
                continue;
            }
            let p = pte & PTE_MASK;
            if self.pages[p as usize].io != NONE || self.test_clear_young(p, now) {
                continue;
            }
            if self.trim_page(p) {
                trimmed += 1;
            }
        }
        self.win.set_hand(pid, hand);
        trimmed
    }
}
