//! Random streams. Every stream in a run derives from the scenario's `seed` and the stream's place
//! in the scenario (which VM, which workload, which mechanism), so one seed fixes the whole run,
//! a different seed changes every stream, and no two streams share numbers.
//!
//! The generator is PCG-64 (MCG variant, `rand_pcg`), seeded through `rand`'s `seed_from_u64`, a
//! portable, value-stable choice. Workloads whose streams must match a native program (the `random`
//! workload and `validate linux-paging`'s C program) use xorshift64* instead, seeded from here.

use rand::{RngCore, SeedableRng};

/// The stream of the simulated host's own choices (host swap victims, sampling): a path no VM's
/// index can take.
pub const HOST_STREAM: u64 = u64::MAX;
/// The stream of direct host reclaim's victims (a guest's fault that finds no free frame).
pub const DIRECT_RECLAIM_STREAM: u64 = u64::MAX - 1;
/// The stream of the Denali host's choices (the web servers' arrivals and clients).
pub const DENALI_STREAM: u64 = u64::MAX - 4;

/// The generator of every simulator stream.
pub type Rng = rand_pcg::Pcg64Mcg;

/// A 64-bit seed for the stream at `path` (e.g. `[VM index, workload index, process]`) under `seed`.
pub fn derive(seed: u64, path: &[u64]) -> u64 {
    let mut r = Rng::seed_from_u64(seed);
    for &p in path {
        r = Rng::seed_from_u64(r.next_u64() ^ p);
    }
    r.next_u64()
}

/// The generator of the stream at `path` under `seed`.
pub fn stream(seed: u64, path: &[u64]) -> Rng {
    Rng::seed_from_u64(derive(seed, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_depend_on_seed_and_path_only() {
        assert_eq!(derive(1, &[0, 2]), derive(1, &[0, 2]));
        assert_ne!(derive(1, &[0, 2]), derive(2, &[0, 2]));
        assert_ne!(derive(1, &[0, 2]), derive(1, &[2, 0]));
        assert_ne!(derive(1, &[0]), derive(1, &[0, 0]));
    }
}
