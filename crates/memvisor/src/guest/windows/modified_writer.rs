//! The modified page writer (WI6 "Modified Page Writer"): writes pages of the modified list to the
//! pagefile in large clustered writes; a written page moves to the standby list (if it was not
//! re-referenced meanwhile) and so becomes available.

use super::TRIM_BELOW;
use crate::guest::bio::{BioKind, Submission, runs};
use crate::guest::lru::LruList;
use crate::guest::page::{NONE, PG_DIRTY, PG_MAPPED, PG_WRITEBACK};
use crate::guest::process::PTE_SWAP;
use crate::guest::{Env, Guest};

/// Largest write, pages: Windows 7's pagefile writes are mostly 1 MiB ("45 % being exactly 1 MB",
/// Engineering Windows 7 blog, 2009-05-05); windows-guest.md section 6.
const WRITE_CLUSTER: usize = 256;
/// Writes in flight per paging file (WRK `MM_PAGING_FILE_MDLS`).
const PAGING_FILE_MDLS: u32 = 2;
/// The writer runs when zeroed + free pages fall below this and enough is modified (WI6).
const FREE_BELOW: u64 = 20_000;
/// Cap of the "enough modified" test: min(Available / 16, 16,384 pages) (WI6).
const MODIFIED_CAP: u64 = 16_384;

impl Guest {
    /// The writer's gate (WI6): it writes when zeroed + free < 20,000 pages and the modified list
    /// holds more than min(Available / 16, 16,384) pages, when a working set is being trimmed
    /// (`trimming`) while Available < 15,000 pages, or when nothing is available at all (an
    /// allocation waits for it).
    pub(in crate::guest) fn modified_writer_check(&mut self, trimming: bool, now: u64, env: &mut Env) {
        let modified = self.lru.len(LruList::Modified);
        if modified == 0 {
            return;
        }
        let avail = self.available();
        let go = (self.pages.nr_free() < FREE_BELOW && modified > (avail / 16).min(MODIFIED_CAP))
            || (trimming && avail < TRIM_BELOW)
            || avail == 0;
        if go {
            self.modified_writer_run(now, env);
        }
    }

    /// Issues writes of up to `WRITE_CLUSTER` pages from the old end of the modified list while
    /// fewer than `PAGING_FILE_MDLS` are in flight; pages on consecutive slots go in one request.
    pub(super) fn modified_writer_run(&mut self, now: u64, env: &mut Env) {
        let mut batch: Vec<(u32, u32)> = Vec::with_capacity(WRITE_CLUSTER);
        while self.win.writes < PAGING_FILE_MDLS && self.lru.len(LruList::Modified) > 0 {
            batch.clear();
            while batch.len() < WRITE_CLUSTER {
                let Some(p) = self.lru.tail(0, LruList::Modified) else { break };
                self.lru.remove(p);
                self.pages.clear(p, PG_DIRTY);
                self.pages.set(p, PG_WRITEBACK);
                batch.push((self.pages[p as usize].swap, p));
            }
            // The writer allocates pagefile space for the whole write at once (WRK
            // `MiGatherPagefilePages`: a run of clear bits in the pagefile's bitmap), so pages
            // trimmed together (neighbours, by the clock hand) land together and later read back in
            // one clustered read. The slots given at trimming only held their place.
            if let Some(base) = self.swap.alloc_run(batch.len() as u32) {
                for (i, (slot, p)) in batch.iter_mut().enumerate() {
                    self.delete_from_swap_cache(*p, true);
                    *slot = base + i as u32;
                    self.add_to_swap_cache(*p, *slot);
                    let (pid, vpn) = (self.pages[*p as usize].owner, self.pages[*p as usize].index);
                    self.procs[pid as usize].mm.pte[vpn as usize] = PTE_SWAP | *slot;
                }
            }
            for &(slot, _) in batch.iter() {
                self.write_slot(slot);
            }
            batch.sort_unstable();
            let sub = Submission { kind: BioKind::SwapWrite, file: NONE, kthread: true, base: 0, max: WRITE_CLUSTER, through_gaps: false };
            self.win.writes += runs(&batch, WRITE_CLUSTER).count() as u32;
            self.submit_runs(&sub, &batch, None, now, env);
        }
    }

    /// A writer's request completed: each page still trimmed goes to standby (the tail of the
    /// standby list: "placed at the tail of the standby list"); one re-referenced meanwhile stays
    /// in its working set. The writer then looks at its gate again.
    pub(in crate::guest) fn modified_write_done(&mut self, pages: &[u32], now: u64, env: &mut Env) {
        for &p in pages {
            self.pages.clear(p, PG_WRITEBACK);
            if self.pages[p as usize].owner == NONE {
                if self.pages[p as usize].swap != NONE {
                    self.delete_from_swap_cache(p, true);
                }
                self.pages.release(p);
            } else if !self.pages.has(p, PG_MAPPED) {
                self.lru.add_head(0, LruList::Standby, p);
            }
        }
        self.win.writes -= 1;
        self.modified_writer_check(false, now, env);
    }
}
