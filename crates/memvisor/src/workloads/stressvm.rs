//! The `stress` tool's `--vm` workers (stress 1.0.x, `hogvm`), which seed 001 ran in its reserved VM:
//! each worker `malloc`s `--vm-bytes` (glibc maps a fresh zeroed region for it), writes one byte
//! ('Z') every `--vm-stride` bytes, reads them back to check them, and `free`s the region (unmaps
//! it, giving the pages back to the guest), then starts over; with `--vm-keep` it keeps the region
//! and rewrites it forever. Defaults of stress 1.0.4: 256 MiB, stride 4,096 (one write per page).
//! Source: docs/sources/host-reclamation.md, section 7.

use super::{Op, Pattern, SystemView, Workload};

/// The stress-vm workload.
#[derive(Clone, Debug, PartialEq)]
pub struct StressVm {
    /// Workers (`--vm N`), one process each.
    pub workers: u32,
    /// Pages each worker allocates (`--vm-bytes`).
    pub pages: u32,
    /// Whether a worker keeps its region instead of freeing it each round (`--vm-keep`).
    pub keep: bool,
    /// Rounds each worker makes before exiting; `None` runs until the scenario ends, as stress does
    /// without `--timeout`.
    pub rounds: Option<u64>,
    step: u64,
}

impl StressVm {
    /// stress 1.0.4's default `--vm-bytes`: 256 MiB.
    pub const DEFAULT_PAGES: u32 = 65_536;

    /// A stress-vm workload.
    pub fn new(workers: u32, pages: u32, keep: bool, rounds: Option<u64>) -> Self {
        Self { workers, pages, keep, rounds, step: 0 }
    }
}

impl Workload for StressVm {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        // A round: [map], write every page, read every page, [unmap]; with keep the region is
        // mapped once and every round reuses it.
        let per_round = if self.keep { 2 } else { 4 };
        let s = self.step;
        self.step += 1;
        let (prelude, s) = if self.keep { (1, s) } else { (0, s) };
        if self.keep && s == 0 {
            return Op::Map { pages: self.pages };
        }
        let s = s - prelude;
        let round = s / per_round;
        if self.rounds.is_some_and(|n| round >= n) {
            return Op::Exit;
        }
        let region = if self.keep { 0 } else { round as u32 };
        let sweep = |write| Op::Access { region, pattern: Pattern::Sweep { first: 0, count: self.pages as u64, refs: 1, write } };
        match (self.keep, s % per_round) {
            (false, 0) => Op::Map { pages: self.pages },
            (false, 1) | (true, 0) => sweep(true),
            (false, 2) | (true, 1) => sweep(false),
            _ => Op::Unmap { region },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_maps_writes_reads_and_frees_each_round() {
        let mut w = StressVm::new(1, 10, false, Some(2));
        let ops: Vec<Op> = (0..9).map(|_| w.next_op(&SystemView::default())).collect();
        assert_eq!(ops[0], Op::Map { pages: 10 });
        assert!(matches!(ops[1], Op::Access { region: 0, pattern: Pattern::Sweep { write: true, .. } }));
        assert!(matches!(ops[2], Op::Access { region: 0, pattern: Pattern::Sweep { write: false, .. } }));
        assert_eq!(ops[3], Op::Unmap { region: 0 });
        assert_eq!(ops[4], Op::Map { pages: 10 });
        assert_eq!(ops[7], Op::Unmap { region: 1 });
        assert_eq!(ops[8], Op::Exit);
        let mut k = StressVm::new(1, 10, true, Some(1));
        assert_eq!(k.next_op(&SystemView::default()), Op::Map { pages: 10 });
        assert!(matches!(k.next_op(&SystemView::default()), Op::Access { region: 0, pattern: Pattern::Sweep { write: true, .. } }));
        assert!(matches!(k.next_op(&SystemView::default()), Op::Access { region: 0, pattern: Pattern::Sweep { write: false, .. } }));
        assert_eq!(k.next_op(&SystemView::default()), Op::Exit);
    }
}
