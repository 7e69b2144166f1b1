//! Uniformly random page references: write every page once in order (allocating them), then make
//! `touches` references to pages drawn by xorshift64*, the generator `validate linux-paging`'s
//! native program uses too, so both see the same sequence. The generator's seed derives from the
//! scenario's seed unless the workload pins it (as the validation does, to match the native run).

use super::{Op, Pattern, SystemView, Workload};

/// The random workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Random {
    /// Pages in the region.
    pub pages: u32,
    /// References after the first pass.
    pub touches: u64,
    /// Generator seed (nonzero) if pinned by the scenario; otherwise derived from the scenario seed.
    pub seed: Option<u64>,
    /// The seed in use: the pinned one or the derived one (set when the process is created).
    state: u64,
    /// Whether the references store (else they load).
    pub write: bool,
    /// CPU time after each reference.
    pub compute_ns: u64,
    step: u8,
}

impl Random {
    /// A random workload.
    pub fn new(pages: u32, touches: u64, seed: Option<u64>, write: bool, compute_ns: u64) -> Self {
        Self { pages, touches, seed, write, compute_ns, state: 0, step: 0 }
    }

    /// The process for a run whose stream seed for this workload is `derived`.
    pub fn seeded(&self, derived: u64) -> Self {
        // xorshift64* must not start from zero.
        Self { state: self.seed.unwrap_or(derived).max(1), ..self.clone() }
    }
}

impl Workload for Random {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        self.step += 1;
        match self.step {
            1 => Op::Map { pages: self.pages },
            2 => Op::Access { region: 0, pattern: Pattern::Sweep { first: 0, count: self.pages as u64, refs: 1, write: true } },
            3 if self.touches > 0 => Op::Access {
                region: 0,
                pattern: Pattern::Random { state: self.state, count: self.touches, write: self.write, compute_ns: self.compute_ns },
            },
            _ => Op::Exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::workloads::xorshift64star;

    #[test]
    fn matches_the_native_program() {
        // Outputs of pagetouch.c's `next()` (python/memvisor/data/pagetouch.c), compiled with cc and
        // printed: the first three from state 42, and the 1,001st from state 1.
        let mut s = 42;
        let first: Vec<u64> = (0..3).map(|_| xorshift64star(&mut s)).collect();
        assert_eq!(first, [0x56ce_4ab7_719b_a3a0, 0xc841_eb53_ebbb_2dda, 0xca46_6be0_c998_0276]);
        let mut s = 1;
        let last = (0..1001).map(|_| xorshift64star(&mut s)).last();
        assert_eq!(last, Some(0x3027_8c3e_fbe9_3744));
    }
}
