//! A booted, quiet system: it allocates its footprint once, then every `period` reads a small
//! active set of it (or, with no active set, sleeps for good). The rest goes cold, which is what
//! makes idle guests cheap to reclaim.

use super::{Op, Pattern, SystemView, Workload};

/// The idle workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Idle {
    /// Pages allocated and written once at start.
    pub footprint_pages: u32,
    /// Pages read every period (the first pages of the footprint).
    pub active_pages: u32,
    /// Time between touches of the active set (unused when the active set is empty).
    pub period_ns: u64,
    step: u64,
}

impl Idle {
    /// An idle workload.
    pub fn new(footprint_pages: u32, active_pages: u32, period_ns: u64) -> Self {
        Self { footprint_pages, active_pages: active_pages.min(footprint_pages), period_ns, step: 0 }
    }
}

impl Workload for Idle {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        self.step += 1;
        match self.step {
            1 => Op::Map { pages: self.footprint_pages },
            2 => Op::Access { region: 0, pattern: Pattern::Sweep { first: 0, count: self.footprint_pages as u64, refs: 1, write: true } },
            _ if self.active_pages == 0 => Op::Sleep { ns: u64::MAX / 4 },
            s if s % 2 == 1 => Op::Sleep { ns: self.period_ns },
            _ => Op::Access { region: 0, pattern: Pattern::Sweep { first: 0, count: self.active_pages as u64, refs: 1, write: false } },
        }
    }
}
