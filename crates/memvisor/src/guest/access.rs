//! A process referencing its memory: the one loop every access pattern runs through. References
//! that change nothing but time are accounted in bulk (runs of resident pages by the fast bitmaps
//! in Linux mode; recency moves in exact-LRU mode); the others take the fault path in `memory.rs`.
//!
//! A vCPU may account hits up to its lookahead past the next event elsewhere. Sweeps that do so
//! record the span in the process's `AheadLog`, so reclaim running at an earlier time still sees
//! those references; other patterns stop at the next event.

use super::filemap::Progress;
use super::memory::Touch;
use super::page::{NONE, PG_DIRTY};
use super::process::{PTE_MASK, PTE_PRESENT, PTE_SWAP};
use super::{Env, Guest, Replacement};
use crate::workloads::Pattern;

/// Page tables smaller than this (1 MiB of entries) stay in the CPU's caches: no prefetching.
const PREFETCH_MIN_PAGES: usize = 1 << 18;

impl Guest {
    /// Runs `pattern` over `region` of process `pid` from `now` until it is done, the window ends
    /// at `end`, or the process blocks.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn access(&mut self, pid: u32, region: u32, pattern: &mut Pattern, now: &mut u64, end: u64, env: &mut Env) -> Progress {
        let r = self.procs[pid as usize].mm.regions[region as usize];
        let dram = self.cfg.costs.dram_access_ns;
        // Accessed-bit ageing (Linux, Windows): resident hits go through the fast bitmaps.
        let linux = self.cfg.replacement != Replacement::ExactLru;
        loop {
            let Some(x) = pattern.peek(r.pages) else { return Progress::Done };
            if *now >= end {
                return Progress::Yield;
            }
            let visit = x.refs as u64 * dram + x.compute_ns;
            // Everything at or before the next event is in order; later hits are ahead.
            let in_order = env.events.peek_time().unwrap_or(u64::MAX);
            let n = if linux && visit > 0 && pattern.sequential(r.pages, 1) > 0 {
                self.sweep_hits(pid, r.start, r.pages, pattern, visit, *now, end, in_order)
            } else {
                // Patterns whose next pages are not known in advance do not run ahead.
                let budget = if *now > in_order { 0 } else { (end.min(in_order) - *now).div_ceil(visit.max(1)).max(1) };
                self.pattern_hits(pid, r.start, r.pages, pattern, budget, linux)
            };
            if n > 0 {
                *now += n * visit;
                self.procs[pid as usize].stats.touches += n * x.refs as u64;
                continue;
            }
            if let Err(p) = self.reference_slow(pid, r.start, x.page, x.write, x.refs, now, env) {
                return p;
            }
            *now += x.compute_ns;
            self.procs[pid as usize].stats.touches += x.refs as u64;
            pattern.advance(r.pages);
        }
    }

    /// A sweep's run of pages whose fast bit says a visit changes nothing, accounted at once; a
    /// whole clean pass lets every pass that fits in the window be accounted too. The part after
    /// `in_order` is recorded in the process's ahead log, or not taken if the log is full.
    #[allow(clippy::too_many_arguments)]
    fn sweep_hits(
        &mut self,
        pid: u32,
        start: u32,
        pages: u32,
        pattern: &mut Pattern,
        visit: u64,
        now: u64,
        end: u64,
        in_order: u64,
    ) -> u64 {
        let proc = &mut self.procs[pid as usize];
        let end = if proc.ahead.has_room() { end } else { end.min(in_order.max(now + 1)) };
        let budget = (end - now).div_ceil(visit);
        let Some(x) = pattern.peek(pages) else { return 0 };
        let seq = pattern.sequential(pages, budget);
        let bits = if x.write { &proc.mm.wfast } else { &proc.mm.rfast };
        let run = bits.ones_from((start + x.page) as usize, seq as usize) as u64;
        if run == 0 {
            return 0;
        }
        let mut n = run;
        if x.page == 0 && run == pages as u64 {
            // A whole clean pass: nothing can change until the window ends, so the passes that
            // fit are clean too.
            let left = budget.saturating_sub(run).min(pattern.remaining() - run);
            n += left - left % pages as u64;
        }
        if now + n * visit > in_order {
            proc.ahead.record(start, pages, x.page, n, now, visit);
        }
        pattern.skip(pages, n);
        n
    }

    /// References that need no fault, taken one by one: a fast bit in Linux mode; in exact-LRU
    /// mode a mapped page that is moved to the head of the recency list (writes that must dirty
    /// the page or drop its swap copy take the slow path).
    fn pattern_hits(&mut self, pid: u32, start: u32, pages: u32, pattern: &mut Pattern, budget: u64, linux: bool) -> u64 {
        let mm = &self.procs[pid as usize].mm;
        if linux {
            return pattern.hits(
                pages,
                budget,
                |page, write| {
                    let vpn = (start + page) as usize;
                    if write { mm.wfast.get(vpn) } else { mm.rfast.get(vpn) }
                },
                None::<fn(u32, u32)>,
            );
        }
        let (lru, pg, swap) = (&mut self.lru, &self.pages, &self.swap);
        // Over a large footprint the page table and the swap cache miss the CPU's caches: fetch
        // a trace's far reference's page-table entry, and the swap-cache entry of the nearer one
        // (whose page-table entry is cached by now), so that a fault finds both there. Small
        // tables stay cached anyway; there it would only cost time.
        let ahead = (mm.pte.len() >= PREFETCH_MIN_PAGES).then_some(|near: u32, far: u32| {
            crate::index::prefetch(&mm.pte[(start + far) as usize]);
            let pte = mm.pte[(start + near) as usize];
            if pte & PTE_SWAP != 0 {
                swap.prefetch(pte & PTE_MASK);
            }
        });
        pattern.hits(
            pages,
            budget,
            |page, write| {
                let pte = mm.pte[(start + page) as usize];
                if pte & PTE_PRESENT == 0 {
                    return false;
                }
                let p = pte & PTE_MASK;
                if write && (!pg.has(p, PG_DIRTY) || pg[p as usize].swap != NONE) {
                    return false;
                }
                lru.touch_head(p);
                true
            },
            ahead,
        )
    }

    /// A reference the fast paths could not account. A fault must see the rest of the simulation
    /// up to `now`, so one that would come early yields (`Resync`); re-referencing a mapped page
    /// only sets its bits, like a hit, and may run ahead if the ahead log has room for it. On
    /// success `now` has advanced by the reference's cost.
    #[allow(clippy::too_many_arguments)]
    fn reference_slow(
        &mut self,
        pid: u32,
        start: u32,
        page: u32,
        write: bool,
        refs: u32,
        now: &mut u64,
        env: &mut Env,
    ) -> Result<(), Progress> {
        let vpn = start + page;
        let present = self.procs[pid as usize].mm.pte[vpn as usize] & PTE_PRESENT != 0;
        if !Self::in_order(*now, env) {
            let ahead = &mut self.procs[pid as usize].ahead;
            if !present || !ahead.record(vpn, 1, 0, 1, *now, 1) {
                return Err(Progress::Resync);
            }
        }
        match self.touch_slow(pid, vpn, write, refs, *now, env) {
            Touch::Done(ns) => {
                *now += ns;
                Ok(())
            }
            Touch::Blocked(ns) => {
                *now += ns;
                Err(Progress::Blocked)
            }
            Touch::Yield(ns) => {
                *now += ns;
                Err(Progress::Resync)
            }
            Touch::Killed => Err(Progress::Killed),
        }
    }
}
