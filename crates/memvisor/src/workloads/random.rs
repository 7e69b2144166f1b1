//! Random page references: write every page once in order (allocating them), then make `touches`
//! references to pages drawn by xorshift64* (uniformly, or by Zipf's law: `access::Zipf`), the
//! generator `validate linux-paging`'s native program uses too, so both see the same sequence. The generator's seed derives from the
//! scenario's seed unless the workload pins it (as the validation does, to match the native run).

use std::sync::Arc;

use super::access::Zipf;
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
    /// Pages drawn by Zipf's law (exponent 1) instead of uniformly.
    pub zipf: bool,
    step: u8,
}

impl Random {
    /// A random workload.
    pub fn new(pages: u32, touches: u64, seed: Option<u64>, write: bool, compute_ns: u64, zipf: bool) -> Self {
        Self { pages, touches, seed, write, compute_ns, zipf, state: 0, step: 0 }
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
                pattern: Pattern::Random {
                    state: self.state,
                    count: self.touches,
                    write: self.write,
                    compute_ns: self.compute_ns,
                    zipf: self.zipf.then(|| Arc::new(Zipf::new(self.pages))),
                },
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

    #[test]
    fn zipf_draws_match_the_native_program() {
        // pagetouch.c's zipf draws over 51,200 pages from seed 42, printed by a build of it.
        let z = crate::workloads::access::Zipf::new(51_200);
        let mut s = 42;
        let pages: Vec<u32> = (0..5).map(|_| z.page(xorshift64star(&mut s))).collect();
        assert_eq!(pages, [30_660, 0, 1_985, 28_508, 35_366]);
        // Rank 0 is the most drawn page: about 1 / H(51,200) = 8.9 % of draws.
        let mut s = 7;
        let hot = (0..100_000).filter(|_| z.page(xorshift64star(&mut s)) == 0).count();
        assert!((8_000..9_800).contains(&hot), "{hot}");
    }
}
