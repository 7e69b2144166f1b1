//! Seed 003's paging stress program: `malloc` 61,036 pages of 4 KiB, then forever increment one int
//! in each page in turn (`virtualMemory[i].buf[j]++`). Each loop iteration is one store to a
//! different page, so one pass references every page once.

use super::{Op, Pattern, SystemView, Workload};

/// The stress workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Stress {
    /// Processes running the program at once.
    pub instances: u32,
    /// Pages each allocates (seed 003: 61,036).
    pub pages: u32,
    /// Passes over the array before exiting; `None` loops forever, as the seed's program does.
    pub passes: Option<u64>,
    step: u8,
}

impl Stress {
    /// Pages of the seed's program.
    pub const SEED_PAGES: u32 = 61_036;

    /// A stress workload.
    pub fn new(instances: u32, pages: u32, passes: Option<u64>) -> Self {
        Self { instances, pages, passes, step: 0 }
    }
}

impl Workload for Stress {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        self.step += 1;
        match self.step {
            1 => Op::Map { pages: self.pages },
            2 => Op::Access {
                region: 0,
                pattern: Pattern::Sweep { first: 0, count: self.passes.map_or(u64::MAX, |p| p * self.pages as u64), refs: 1, write: true },
            },
            _ => Op::Exit,
        }
    }
}
