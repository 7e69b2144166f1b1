//! Trace replay through the guest memory manager: in exact-LRU mode the fault count equals a
//! textbook LRU cache's miss count for every cache size, on generated traces of several shapes.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use memvisor::guest::{Counter, Replacement};
use memvisor::trace::{Trace, TraceBuilder};
use memvisor::{Simulation, scenario};

/// A textbook LRU cache of `c` entries: misses on `refs`.
fn lru_misses(refs: &[u32], c: usize) -> u64 {
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut order = std::collections::BTreeMap::new();
    let mut misses = 0;
    for (t, &r) in refs.iter().enumerate() {
        let p = r & memvisor::trace::ID_MASK;
        match last.insert(p, t as u64) {
            Some(old) => {
                order.remove(&old);
            }
            None => {
                misses += 1;
                if order.len() == c {
                    let (&oldest, &victim) = order.iter().next().unwrap();
                    order.remove(&oldest);
                    last.remove(&victim);
                }
            }
        }
        order.insert(t as u64, p);
    }
    misses
}

fn generated(kind: &str, n: usize) -> Trace {
    let mut state = 0x9e37_79b9_7f4a_7c15;
    let mut next = || memvisor::workloads::xorshift64star(&mut state);
    let mut b = TraceBuilder::new();
    for i in 0..n {
        let page = match kind {
            "loop" => (i % 300) as u64,
            "uniform" => next() % 400,
            // Skewed: page ~ 1000 / (1 + u) for u uniform in [0, 999]: a few hot pages, a long tail.
            "skewed" => 1000 / (1 + next() % 1000),
            // Pareto (shape 0.8) over 2,000 pages: a few very hot pages, a tail touched rarely.
            "pareto" => {
                let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
                ((1.0 - u).powf(-1.0 / 0.8) as u64) % 2000
            }
            _ => unreachable!(),
        };
        b.push(0x1000 + page, next().is_multiple_of(4)).unwrap();
    }
    b.finish()
}

fn replay_faults(t: &Arc<Trace>, frames: u64, mode: Replacement) -> (u64, u64) {
    let text = scenario::replay_scenario("t.mvtrace", t.n_pages() as u64, frames, mode, 1, 0);
    let s = scenario::load(&text, "replay", &[]).unwrap().remove(0);
    let t = t.clone();
    let mut sim = Simulation::with_traces(&s, &move |_| Ok(t.clone())).unwrap();
    sim.run().unwrap();
    sim.check_invariants().unwrap();
    let g = &sim.world().guests()[0];
    (g.counters().get(Counter::PgFault), g.processes()[0].stats.touches)
}

#[test]
fn exact_lru_faults_equal_textbook_lru_misses() {
    for kind in ["loop", "uniform", "skewed"] {
        let t = Arc::new(generated(kind, 20_000));
        for frames in [1, 7, 50, 150, 299, 300, 301, 1000] {
            let (faults, touches) = replay_faults(&t, frames, Replacement::ExactLru);
            assert_eq!(touches, 20_000);
            assert_eq!(faults, lru_misses(t.refs(), frames as usize), "{kind} trace, {frames} frames");
        }
    }
}

/// Belady's MIN with `c` frames: misses of the optimal replacement policy, a lower bound for every
/// demand-paging policy with at most `c` frames.
fn opt_misses(refs: &[u32], c: usize) -> u64 {
    let ids: Vec<u32> = refs.iter().map(|r| r & memvisor::trace::ID_MASK).collect();
    let mut next_use = vec![usize::MAX; ids.len()];
    let mut last: HashMap<u32, usize> = HashMap::new();
    for (i, &p) in ids.iter().enumerate().rev() {
        next_use[i] = last.insert(p, i).unwrap_or(usize::MAX);
    }
    let mut resident: std::collections::BTreeSet<(usize, u32)> = Default::default();
    let mut when: HashMap<u32, usize> = HashMap::new();
    let mut misses = 0;
    for (i, &p) in ids.iter().enumerate() {
        match when.remove(&p) {
            Some(n) => {
                resident.remove(&(n, p));
            }
            None => {
                misses += 1;
                if resident.len() == c {
                    let &(n, q) = resident.iter().next_back().unwrap();
                    resident.remove(&(n, q));
                    when.remove(&q);
                }
            }
        }
        resident.insert((next_use[i], p));
        when.insert(p, next_use[i]);
    }
    misses
}

#[test]
fn belady_bound_is_computed_right() {
    // 1 2 3 1 2 4 1 2 3 4 with 3 frames: OPT misses on 1, 2, 3, then 4 (evicting 3, used last)
    // and 3 (evicting 1 or 2, never used again): 5 misses.
    let refs = [1, 2, 3, 1, 2, 4, 1, 2, 3, 4];
    assert_eq!(opt_misses(&refs, 3), 5);
    assert_eq!(opt_misses(&refs, 4), 4);
    assert_eq!(opt_misses(&refs, 1), lru_misses(&refs, 1));
}

/// Linux mode replays every reference, and its faults are bounded below by Belady's MIN for the
/// most frames the process can ever hold (the frames given plus the gap between the high and min
/// watermarks, which kswapd may leave free for a while); when everything fits, it faults exactly
/// once per distinct page.
#[test]
fn linux_mode_faults_respect_the_optimal_bound() {
    let t = Arc::new(generated("skewed", 20_000));
    for frames in [50, 150] {
        let (faults, touches) = replay_faults(&t, frames, Replacement::Linux);
        assert_eq!(touches, 20_000);
        let pages = memvisor::scenario::guest_pages_for(frames, Replacement::Linux);
        let w = memvisor::guest::Watermarks::linux(pages, &memvisor::guest::Sysctl::default());
        let most = (frames + w.high - w.min) as usize;
        let bound = opt_misses(t.refs(), most);
        assert!(faults >= bound, "{frames} frames: {faults} faults, below Belady's {bound} with {most} frames");
    }
    let (faults, _) = replay_faults(&t, t.n_pages() as u64, Replacement::Linux);
    assert_eq!(faults, t.n_pages() as u64, "with room for every page, only first touches fault");
}

/// With a swap slot for every page the trace touches, a thrashing process is slow, never killed:
/// reclaim can always swap out a page it does not hold mapped, and a pass that finds every page
/// referenced clears the bits for the next (`should_reclaim_retry`), so Linux never finds itself
/// out of memory (the OOM killer runs only when reclaim cannot make progress).
#[test]
fn linux_mode_with_swap_for_every_page_replays_every_reference() {
    for kind in ["loop", "uniform", "skewed", "pareto"] {
        let t = Arc::new(generated(kind, 20_000));
        for frames in [1, 2, 3, 4, 5, 8, 16, 40, 64, 100, 200] {
            let (_, touches) = replay_faults(&t, frames, Replacement::Linux);
            assert_eq!(touches, 20_000, "{kind} trace, {frames} frames: the process was killed");
        }
    }
}
