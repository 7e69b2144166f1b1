//! Uniformly random page references: write every page once in order (allocating them), then make
//! `touches` references to pages drawn by xorshift64*, the generator `validate linux-paging`'s
//! native program uses too, so both see the same sequence.

use super::{Op, Workload};

/// The random workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Random {
    /// Pages in the region.
    pub pages: u32,
    /// References after the first pass.
    pub touches: u64,
    /// Generator seed (nonzero).
    pub seed: u64,
    /// Whether the references store (else they load).
    pub write: bool,
    step: u8,
}

impl Random {
    /// A random workload.
    pub fn new(pages: u32, touches: u64, seed: u64, write: bool) -> Self {
        Self { pages, touches, seed, write, step: 0 }
    }
}

/// One step of xorshift64* (Vigna 2016): returns the output, advances the state.
pub fn xorshift64star(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

impl Workload for Random {
    fn next_op(&mut self) -> Op {
        self.step += 1;
        match self.step {
            1 => Op::Map { pages: self.pages },
            2 => Op::Touch { region: 0, first: 0, count: self.pages as u64, refs: 1, write: true },
            3 if self.touches > 0 => Op::TouchRandom { region: 0, state: self.seed, count: self.touches, write: self.write },
            _ => Op::Exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of xorshift64* from seed 42, as the C program computes them.
        let mut s = 42;
        let a = xorshift64star(&mut s);
        let b = xorshift64star(&mut s);
        assert_eq!(a, {
            let mut x: u64 = 42;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545F4914F6CDD1D)
        });
        assert_ne!(a, b);
    }
}
