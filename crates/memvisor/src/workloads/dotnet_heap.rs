//! `dotnet-heap`: seed 000's ThreadContentionGenerator, a 64-bit .NET program that keeps very large
//! data structures on the Large Object Heap (LOH) and "access, modify and update[s] them at
//! random" through long processing cycles, with the CLR's garbage collector deciding when memory
//! goes back to the OS. Rules and sources: `docs/sources/dotnet-gc.md` (numbers `n.m` below are its
//! rows; CoreCLR's first commit is the nearest public copy of the .NET 4.5-era GC).
//!
//! The model, stated before any run:
//! - Live data: `live` bytes in LOH arrays of `object` bytes each, of primitive elements (no
//!   references: a GC neither marks their interior nor scans cards in them, 4.4, 4.8). A 64 MiB
//!   array and its header do not fit twice in a 128 MB LOH segment (3.1), so each object has a
//!   segment of its own: a dead object's segment is released at the next gen2 (3.8) and a new
//!   object is fresh, demand-zero memory (4.3: no clearing beyond the segment's used mark).
//! - A processing cycle picks a live object at random and updates its elements at random: one
//!   visit per page of the object, each `visit` of CPU (512 8-byte elements at a DRAM miss each).
//!   In `replace_percent` of the cycles the object is first replaced by a new one (the old one
//!   dies): a LOH allocation, then the new array is initialised, one pass of stores.
//! - Collections follow the CLR's rules: a LOH allocation beyond the LOH budget triggers a gen2
//!   (1.3-1.4), after which the budget is max(min(3.5 x live, available + LOH free), max(live / 4,
//!   3 MB)) (1.9); while the OS's low-memory notification is set, the finalizer thread starts one
//!   GC and then waits 2 s (2.3-2.4); a low-memory GC is at least gen1 and is gen2 when gen2 has
//!   used 10 % of its budget (2.7), which the program's small bookkeeping objects, promoted as they
//!   persist, do in every cycle [assumption: the seed shows many escalations but gives no
//!   allocation rate]; an elevated gen2 that frees nothing locks elevation for the next 5 (2.8).
//! - What a gen2 touches: the first page of every LOH object, written for a live one (the mark bit
//!   is in its method-table pointer, 4.5) and read for a dead one (the sweep reads its size, 4.6).
//!   A gen1 touches nothing of the LOH (no references, no cards). The CPU time of marking
//!   reference-free arrays is negligible (4.4), so a collection costs what its page touches cost.
//! - Counters as the CLR's: "# Gen 0 Collections" counts every GC, Gen 1 counts gen1 and gen2,
//!   Gen 2 counts gen2 (1.11); the LOH size includes dead objects not yet released.
//!
//! One thread: the seed's program is multithreaded, but its thread count is not given; a single
//! thread makes every hard fault stall the whole program, an upper bound on the slowdown.

use super::{Op, Pattern, SystemView, Workload};
use crate::rng::Rng;
use crate::units::PAGE_SIZE;
use rand::Rng as _;

/// Visits per `Access` operation: the program returns to the CLR's checks this often.
const VISITS_PER_OP: u64 = 1_024;
/// The finalizer thread's wait after a low-memory GC before it looks at the notification again
/// (`finalizerthread.cpp`: "wait only on the event for 2s").
const LOWMEM_REARM_NS: u64 = 2_000_000_000;
/// Minimum LOH budget (1.8: 3 MB).
const LOH_MIN_BUDGET: u64 = 3 << 20;
/// Elevated gen2 requests demoted after an unproductive one (2.8: "the next 5").
const ELEVATION_LOCK: u32 = 5;
/// Stores per page when an array is initialised: one per 8-byte element.
const INIT_REFS: u32 = (PAGE_SIZE / 8) as u32;

/// The configured workload.
#[derive(Clone, Debug, PartialEq)]
pub struct DotnetHeap {
    /// Live data in bytes.
    pub live: u64,
    /// Bytes per LOH object.
    pub object: u64,
    /// Processing cycles (the work).
    pub cycles: u64,
    /// Percent of cycles that replace their object with a new one.
    pub replace_percent: u32,
    /// CPU per page visit, ns.
    pub visit_ns: u64,
}

/// The CLR's .NET Memory counters of a managed process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClrHeap {
    /// Large Object Heap size, bytes (live and dead objects not yet released).
    pub loh_bytes: u64,
    /// "# Gen 0 Collections": every GC.
    pub gen0: u64,
    /// "# Gen 1 Collections": gen1 and gen2.
    pub gen1: u64,
    /// "# Gen 2 Collections".
    pub gen2: u64,
    /// GCs started by the low-memory notification.
    pub lowmem: u64,
}

/// One LOH object: its region and whether it is still referenced.
#[derive(Clone, Copy, Debug)]
struct Object {
    region: u32,
    live: bool,
}

/// The running process.
#[derive(Debug)]
pub struct DotnetProcess {
    cfg: DotnetHeap,
    rng: Rng,
    /// Objects with committed memory, in allocation order.
    objects: Vec<Object>,
    /// Regions created so far (the next `Map` gets this number).
    regions: u32,
    /// Queued operations.
    queue: std::collections::VecDeque<Op>,
    /// Cycles started.
    cycles: u64,
    /// LOH allocation budget left, bytes.
    loh_budget: u64,
    /// Cycles since the last gen2.
    since_gen2: u64,
    /// Elevated gen2 requests still to demote.
    elevation_locked: u32,
    /// When the finalizer thread next looks at the low-memory notification.
    lowmem_rearm: u64,
    counters: ClrHeap,
    done: bool,
}

impl DotnetHeap {
    /// Pages per object.
    fn object_pages(&self) -> u32 {
        (self.object / PAGE_SIZE) as u32
    }

    /// Objects of live data.
    pub fn objects(&self) -> u64 {
        (self.live / self.object).max(1)
    }

    /// The process, with its random stream.
    pub fn process(&self, seed: u64) -> DotnetProcess {
        DotnetProcess {
            cfg: self.clone(),
            rng: crate::rng::stream(seed, &[]),
            objects: Vec::new(),
            regions: 0,
            queue: Default::default(),
            cycles: 0,
            loh_budget: LOH_MIN_BUDGET,
            since_gen2: 0,
            elevation_locked: 0,
            lowmem_rearm: 0,
            counters: ClrHeap::default(),
            done: false,
        }
    }
}

impl DotnetProcess {
    /// The CLR counters.
    pub fn clr(&self) -> ClrHeap {
        ClrHeap { loh_bytes: self.objects.len() as u64 * self.cfg.object, ..self.counters }
    }

    fn live_bytes(&self) -> u64 {
        self.objects.iter().filter(|o| o.live).count() as u64 * self.cfg.object
    }

    /// A LOH allocation: a gen2 first if the budget is spent, then a new segment, initialised.
    fn allocate(&mut self, sys: &SystemView) {
        if self.loh_budget < self.cfg.object {
            self.gen2(sys);
        }
        self.loh_budget = self.loh_budget.saturating_sub(self.cfg.object);
        let region = self.regions;
        self.regions += 1;
        self.objects.push(Object { region, live: true });
        let pages = self.cfg.object_pages();
        self.queue.push_back(Op::Map { pages });
        self.queue
            .push_back(Op::Access { region, pattern: Pattern::Sweep { first: 0, count: pages as u64, refs: INIT_REFS, write: true } });
    }

    /// A blocking gen2, queued after what is queued: see `gen2_ops`.
    fn gen2(&mut self, sys: &SystemView) -> bool {
        let ops = self.gen2_ops(sys);
        let freed = ops.iter().any(|o| matches!(o, Op::Unmap { .. }));
        self.queue.extend(ops);
        freed
    }

    /// A blocking gen2: mark the live objects, sweep the dead ones, release their segments, reset
    /// the LOH budget. Returns its operations.
    fn gen2_ops(&mut self, sys: &SystemView) -> Vec<Op> {
        let mut ops = Vec::with_capacity(self.objects.len() * 2);
        self.counters.gen0 += 1;
        self.counters.gen1 += 1;
        self.counters.gen2 += 1;
        self.since_gen2 = 0;
        for o in &self.objects {
            ops.push(Op::Access { region: o.region, pattern: Pattern::Sweep { first: 0, count: 1, refs: 1, write: o.live } });
        }
        let mut released = 0;
        for o in self.objects.iter().filter(|o| !o.live) {
            ops.push(Op::Unmap { region: o.region });
            released += self.cfg.object;
        }
        self.objects.retain(|o| o.live);
        let live = self.live_bytes();
        // The budget is set at the end of the GC, once the dead segments are released: their
        // memory counts as available (an upper bound: pages of theirs already paged out free
        // nothing).
        let available_free = (sys.available_pages * PAGE_SIZE + released).saturating_sub(1 << 20);
        self.loh_budget = (live.saturating_mul(7) / 2).min(available_free).max((live / 4).max(LOH_MIN_BUDGET));
        ops
    }

    /// The finalizer thread's response to the low-memory notification (2.3-2.8).
    fn lowmem_gc(&mut self, sys: &SystemView) {
        self.counters.lowmem += 1;
        self.lowmem_rearm = sys.now_ns + LOWMEM_REARM_NS;
        let elevate = self.since_gen2 > 0;
        if elevate && self.elevation_locked == 0 {
            // It runs now, ahead of the rest of the cycle.
            let ops = self.gen2_ops(sys);
            if !ops.iter().any(|o| matches!(o, Op::Unmap { .. })) {
                self.elevation_locked = ELEVATION_LOCK;
            }
            for op in ops.into_iter().rev() {
                self.queue.push_front(op);
            }
            return;
        }
        if elevate {
            self.elevation_locked -= 1;
        }
        // A gen1: nothing of the LOH is touched.
        self.counters.gen0 += 1;
        self.counters.gen1 += 1;
    }

    /// Queues the next cycle, or the end.
    fn cycle(&mut self, sys: &SystemView) {
        if self.cycles == self.cfg.cycles {
            self.done = true;
            self.queue.push_back(Op::Exit);
            return;
        }
        self.cycles += 1;
        self.since_gen2 += 1;
        let live: Vec<usize> = (0..self.objects.len()).filter(|&i| self.objects[i].live).collect();
        let i = live[self.rng.random_range(0..live.len())];
        let mut region = self.objects[i].region;
        if self.rng.random_range(0..100) < self.cfg.replace_percent {
            self.objects[i].live = false;
            self.allocate(sys);
            region = self.objects.last().expect("just allocated").region;
        }
        let pages = self.cfg.object_pages() as u64;
        let mut left = pages;
        while left > 0 {
            let n = left.min(VISITS_PER_OP);
            left -= n;
            let state = self.rng.random::<u64>() | 1;
            self.queue.push_back(Op::Access {
                region,
                pattern: Pattern::Random { state, count: n, write: true, compute_ns: self.cfg.visit_ns, zipf: None },
            });
        }
    }
}

impl Workload for DotnetProcess {
    fn next_op(&mut self, sys: &SystemView) -> Op {
        if self.done {
            return self.queue.pop_front().unwrap_or(Op::Exit);
        }
        // Not while an allocation's segment is still to be mapped: the GC would touch it.
        let mapping = self.queue.iter().any(|o| matches!(o, Op::Map { .. }));
        if sys.low_memory && sys.now_ns >= self.lowmem_rearm && !mapping {
            self.lowmem_gc(sys);
        }
        while self.queue.is_empty() {
            if (self.objects.len() as u64) < self.cfg.objects() && self.cycles == 0 {
                self.allocate(sys);
            } else {
                self.cycle(sys);
            }
        }
        self.queue.pop_front().expect("queued")
    }

    fn clr(&self) -> Option<ClrHeap> {
        Some(DotnetProcess::clr(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn view(now_s: u64, available_mib: u64, low_memory: bool) -> SystemView {
        SystemView { now_ns: now_s * 1_000_000_000, total_pages: 1 << 20, available_pages: available_mib * MIB / PAGE_SIZE, low_memory }
    }

    /// Runs operations until the program has done `cycles` cycles (every queued op is taken).
    fn run_cycles(p: &mut DotnetProcess, cycles: u64, sys: &SystemView) {
        while p.cycles < cycles || !p.queue.is_empty() {
            p.next_op(sys);
        }
    }

    #[test]
    fn the_loh_budget_follows_available_memory_and_never_drops_below_a_quarter_of_live() {
        let cfg = DotnetHeap { live: 256 * MIB, object: 64 * MIB, cycles: 1_000, replace_percent: 100, visit_ns: 1 };
        let mut p = cfg.process(1);
        run_cycles(&mut p, 1, &view(0, 4_096, false));
        // Plenty of memory: each gen2 lets the heap grow by min(3.5 x live, available).
        let ops = p.gen2_ops(&view(1, 100_000, false));
        assert!(ops.iter().filter(|o| matches!(o, Op::Access { .. })).count() >= 4, "a gen2 touches every object's first page");
        assert_eq!(p.loh_budget, 7 * 256 * MIB / 2);
        // Short of memory: a quarter of live.
        p.gen2_ops(&view(2, 10, false));
        assert_eq!(p.loh_budget, 64 * MIB);
        // Allocation beyond the budget triggers a gen2 that releases the dead objects' segments.
        let (gen2, loh) = (p.clr().gen2, p.clr().loh_bytes);
        run_cycles(&mut p, 3, &view(3, 10, false));
        assert!(p.clr().gen2 > gen2, "a LOH allocation past the budget collects");
        assert!(p.clr().loh_bytes <= loh + 64 * MIB, "the budget bounds the heap's growth");
    }

    #[test]
    fn a_low_memory_notification_collects_at_most_every_two_seconds_and_shrinks_the_heap() {
        let cfg = DotnetHeap { live: 256 * MIB, object: 64 * MIB, cycles: 1_000, replace_percent: 100, visit_ns: 1 };
        let mut p = cfg.process(1);
        // Build the heap with ample memory so the budget lets dead objects pile up.
        run_cycles(&mut p, 3, &view(0, 100_000, false));
        let before = p.clr();
        assert!(before.loh_bytes > 256 * MIB, "replaced objects stay until a gen2");
        // The notification is set: the next operation is the collection's first.
        let op = p.next_op(&view(10, 10, true));
        assert!(matches!(op, Op::Access { pattern: Pattern::Sweep { count: 1, .. }, .. }), "{op:?}");
        let after = p.clr();
        assert_eq!((after.lowmem, after.gen2), (before.lowmem + 1, before.gen2 + 1), "a low-memory GC after work is a gen2");
        assert_eq!(after.loh_bytes, 256 * MIB, "the dead objects' segments are released");
        assert!(p.queue.iter().any(|o| matches!(o, Op::Unmap { .. })));
        // Still signalled one second later: the finalizer thread is waiting out its 2 s.
        p.next_op(&view(11, 10, true));
        assert_eq!(p.clr().lowmem, after.lowmem);
        p.next_op(&view(12, 10, true));
        assert_eq!(p.clr().lowmem, after.lowmem + 1, "and collects again once the 2 s are up");
    }
}
