//! ESX's free-memory states as data: for each published table, the free-memory level below which
//! each state begins and the mechanisms it runs. Sources: docs/sources/host-reclamation.md,
//! sections 3.3 and 3.4, and DESIGN.md section 4.

/// What the host does in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mechanisms {
    /// Balloon toward the VMs' targets.
    pub balloon: bool,
    /// Swap (and compress) toward the VMs' targets.
    pub swap: bool,
    /// Stop VMs above their target.
    pub block: bool,
    /// Break the VMs' large pages and offer their small pages for sharing at once, by the hashes
    /// the scanner has already taken (ESX 6.0's clear state: "actively call TPS").
    pub share_now: bool,
}

/// One state of a table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct State {
    /// Its name (esxtop's).
    pub name: &'static str,
    /// Entered when free memory falls below this fraction of the table's basis.
    pub below: f64,
    /// What it runs.
    pub does: Mechanisms,
}

/// What the thresholds are fractions of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The host's memory.
    HostMemory,
    /// minFree: 6 % of the first 4 GB, 4 % of the next 8 GB, 2 % of the next 16 GB, 1 % of the rest.
    MinFree,
}

/// A table of states, highest (most free memory) first.
#[derive(Clone, Debug, PartialEq)]
pub struct StateTable {
    /// Name as written in scenarios.
    pub name: &'static str,
    /// What the thresholds are fractions of.
    pub basis: Basis,
    /// Free memory the targets aim to restore, as a fraction of the basis.
    pub goal: f64,
    /// States from the one with the most free memory down; the first has `below` = infinity.
    pub states: &'static [State],
    /// Leaving a state upward needs free memory above `up` times the threshold it was entered at
    /// (hysteresis). The sources say only "significantly exceeding the higher threshold"; 1.25 keeps
    /// each return point below the next state's entry point, so a recovering host cannot skip a state.
    pub up: f64,
    /// Below this fraction of the basis the host breaks the VMs' large pages, so their small pages
    /// share as the scanner reaches them (ESX 6.0: 400 % of minFree, the high state's threshold:
    /// "break large pages when below threshold (wait for TPS)"). 0 where the table leaves large
    /// pages until the host reclaims (ESX 3 to 5: KB 1021095).
    pub break_large_below: f64,
}

const NONE: Mechanisms = Mechanisms { balloon: false, swap: false, block: false, share_now: false };
const BALLOON: Mechanisms = Mechanisms { balloon: true, swap: false, block: false, share_now: false };
const SWAP: Mechanisms = Mechanisms { balloon: true, swap: true, block: false, share_now: false };
const BLOCK: Mechanisms = Mechanisms { balloon: true, swap: true, block: true, share_now: false };

/// ESX 3.x/4.0 (Waldspurger, OSDI 2002, 6.3; VMware's ESX 4 memory white paper): ballooning starts
/// as free memory falls below 6 % toward the soft threshold (4 %), swapping below 2 % (hard), and
/// below 1 % (low) VMs above their target are blocked. DESIGN.md's first row.
pub const ESX3: StateTable = StateTable {
    name: "esx3",
    basis: Basis::HostMemory,
    goal: 0.06,
    states: &[
        State { name: "high", below: f64::INFINITY, does: NONE },
        State { name: "soft", below: 0.06, does: BALLOON },
        State { name: "hard", below: 0.02, does: SWAP },
        State { name: "low", below: 0.01, does: BLOCK },
    ],
    up: 1.25,
    break_large_below: 0.0,
};

/// The thresholds seed 000 narrates (balloon below 6 %, swap below 4 %, block below 2 %): the
/// ESX 3/4 table shifted one step, as the blogger read it.
pub const SEED000: StateTable = StateTable {
    name: "seed000",
    basis: Basis::HostMemory,
    goal: 0.06,
    states: &[
        State { name: "high", below: f64::INFINITY, does: NONE },
        State { name: "soft", below: 0.06, does: BALLOON },
        State { name: "hard", below: 0.04, does: SWAP },
        State { name: "low", below: 0.02, does: BLOCK },
    ],
    up: 1.25,
    break_large_below: 0.0,
};

/// ESX 5.x (Mem.MinFreePct sliding scale): soft below 64 % of minFree (balloon), hard below 32 %
/// (compress and swap), low below 16 % (also block).
pub const MINFREE5: StateTable = StateTable {
    name: "minfree5",
    basis: Basis::MinFree,
    goal: 1.0,
    states: &[
        State { name: "high", below: f64::INFINITY, does: NONE },
        State { name: "soft", below: 0.64, does: BALLOON },
        State { name: "hard", below: 0.32, does: SWAP },
        State { name: "low", below: 0.16, does: BLOCK },
    ],
    up: 1.25,
    break_large_below: 0.0,
};

/// ESX 6.x: as 5.x with a "clear" state below 100 % of minFree and no ballooning in hard (Epping,
/// yellow-bricks.com, 2015: high 400 %, "break large pages when below threshold (wait for TPS)";
/// clear 100 %, "break large pages and actively call TPS to collapse pages"; soft, hard and low
/// run TPS too, so a host falling straight past clear shares at once as well).
pub const MINFREE6: StateTable = StateTable {
    name: "minfree6",
    basis: Basis::MinFree,
    goal: 1.0,
    states: &[
        State { name: "high", below: f64::INFINITY, does: NONE },
        State { name: "clear", below: 1.0, does: Mechanisms { share_now: true, ..NONE } },
        State { name: "soft", below: 0.64, does: Mechanisms { share_now: true, ..BALLOON } },
        State { name: "hard", below: 0.32, does: Mechanisms { balloon: false, swap: true, block: false, share_now: true } },
        State { name: "low", below: 0.16, does: Mechanisms { balloon: false, swap: true, block: true, share_now: true } },
    ],
    up: 1.25,
    break_large_below: 4.0,
};

/// Every table, by name.
pub const TABLES: &[&StateTable] = &[&ESX3, &SEED000, &MINFREE5, &MINFREE6];

/// The names of every table's states, each once, in the order the tables give them: what a
/// `SetMemoryState` decision may name.
pub fn state_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for s in TABLES.iter().flat_map(|t| t.states) {
        if !names.contains(&s.name) {
            names.push(s.name);
        }
    }
    names
}

/// minFree of a host with `memory` bytes (ESX 5.0+; frankdenneman.nl, 2011).
pub fn min_free(memory: u64) -> u64 {
    const GB: u64 = 1 << 30;
    let bands = [(4 * GB, 6), (8 * GB, 4), (16 * GB, 2), (u64::MAX, 1)];
    let (mut left, mut total) = (memory, 0u64);
    for (size, pct) in bands {
        let part = left.min(size);
        total += part / 100 * pct;
        left -= part;
    }
    total
}

impl StateTable {
    /// The basis in bytes for a host of `memory` bytes.
    pub fn basis_bytes(&self, memory: u64) -> f64 {
        match self.basis {
            Basis::HostMemory => memory as f64,
            Basis::MinFree => min_free(memory) as f64,
        }
    }

    /// The state after `current` (an index into `states`) given `free` bytes on a host of
    /// `memory` bytes: down at once when free falls below a threshold, up only past `up` times it.
    pub fn next(&self, current: usize, free: u64, memory: u64) -> usize {
        let f = free as f64 / self.basis_bytes(memory);
        // The deepest state whose threshold free memory is below.
        let target = self.states.iter().rposition(|s| f < s.below).unwrap_or(0);
        if target >= current {
            return target;
        }
        // Going up: one state at a time, each past its hysteresis margin.
        let mut s = current;
        while s > target && f > self.states[s].below * self.up {
            s -= 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_is_named_once() {
        assert_eq!(state_names(), ["high", "soft", "hard", "low", "clear"]);
    }

    #[test]
    fn min_free_follows_the_sliding_scale() {
        let mb = |b: u64| (b as f64 / 1048576.0).round() as u64;
        // 246 MB for 4 GB, 655 MB for 16 GB (DESIGN.md section 4).
        assert_eq!(mb(min_free(4 << 30)), 246);
        assert_eq!(mb(min_free(16 << 30)), 655);
    }

    #[test]
    fn states_go_down_at_once_and_up_with_hysteresis() {
        let t = &ESX3;
        let m = 100 << 30;
        let gb = |x: f64| (x * (1u64 << 30) as f64) as u64;
        assert_eq!(t.next(0, gb(7.0), m), 0);
        assert_eq!(t.next(0, gb(5.0), m), 1, "below 6 %: soft");
        assert_eq!(t.next(0, gb(0.5), m), 3, "straight to low");
        assert_eq!(t.next(3, gb(1.1), m), 3, "1.1 % is not 1.25 x 1 %");
        assert_eq!(t.next(3, gb(1.3), m), 2, "up one state past its margin");
        assert_eq!(t.next(2, gb(7.0), m), 1, "from hard, 7 % passes 1.25 x 2 % but not 1.25 x 6 %");
        assert_eq!(t.next(1, gb(7.6), m), 0);
    }

    #[test]
    fn esx3_enters_each_state_at_its_published_threshold() {
        // Falling free memory crosses 6 % (soft), 2 % (hard) and 1 % (low): the white paper's.
        let m = 100 << 30;
        let at = |pct: f64| ESX3.next(0, (pct / 100.0 * m as f64) as u64, m);
        let steps = [(6.1, 0), (5.9, 1), (2.1, 1), (1.9, 2), (1.1, 2), (0.9, 3)];
        assert_eq!(steps.map(|(pct, _)| at(pct)), steps.map(|(_, state)| state));
    }
}
