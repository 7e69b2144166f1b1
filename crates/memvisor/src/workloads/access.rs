//! Access patterns: the order in which a process references the pages of a region. A pattern only
//! says which page comes next and moves on when told; the guest decides what each reference costs.
//! Sweeps also say how many consecutive pages follow, so a run of resident pages can be accounted
//! in one step.

use std::sync::Arc;

use crate::trace::{ID_MASK, Trace, WRITE};

/// One reference: a page of the region, whether it stores, how many memory references the visit
/// makes, and CPU time the process spends after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    /// Page within the region.
    pub page: u32,
    /// Whether the references store.
    pub write: bool,
    /// Memory references the visit makes.
    pub refs: u32,
    /// CPU time after the visit, ns.
    pub compute_ns: u64,
}

/// Zipf's law with exponent 1 over the pages of a region: the page of rank `k` (from 0) is drawn
/// with probability proportional to 1 / (k + 1). Integer arithmetic only, so that `validate
/// linux-paging`'s native program (pagetouch.c) draws the same pages from the same generator:
/// weight(k) = floor(2^40 / (k + 1)), a draw `x` picks the first rank whose cumulative weight
/// exceeds `x mod total`, and ranks are spread over the region by the bijection
/// page = rank x 2654435761 mod pages (a prime multiplier, so hot pages are not neighbours that
/// swap readahead would bring in together).
#[derive(Clone, Debug, PartialEq)]
pub struct Zipf {
    cdf: Vec<u64>,
}

/// The rank-spreading multiplier (a prime: coprime with any region size below it).
const ZIPF_SPREAD: u64 = 2_654_435_761;

impl Zipf {
    /// The distribution over `pages` pages.
    pub fn new(pages: u32) -> Self {
        let mut sum = 0u64;
        let cdf = (0..pages as u64)
            .map(|k| {
                sum += (1u64 << 40) / (k + 1);
                sum
            })
            .collect();
        Self { cdf }
    }

    /// The page a generator output picks.
    #[inline]
    pub fn page(&self, x: u64) -> u32 {
        let total = *self.cdf.last().expect("at least one page");
        let r = x % total;
        let rank = self.cdf.partition_point(|&c| c <= r) as u64;
        (rank * ZIPF_SPREAD % self.cdf.len() as u64) as u32
    }
}

/// The next page of a random pattern.
#[inline]
fn draw(state: &mut u64, pages: u32, zipf: &Option<Arc<Zipf>>) -> u32 {
    let x = xorshift64star(state);
    match zipf {
        None => (x % pages as u64) as u32,
        Some(z) => z.page(x),
    }
}

/// How a process references a region.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// Visit pages in address order from `first`, wrapping at the region's end, `count` visits of
    /// `refs` references each (`u64::MAX`: forever). Seed 003's loop, `stress --vm`, `idle`.
    Sweep {
        /// Page where the sweep stands.
        first: u32,
        /// Visits still to do.
        count: u64,
        /// Memory references per visit.
        refs: u32,
        /// Whether the references store.
        write: bool,
    },
    /// `count` references to pages drawn by xorshift64* from `state` (uniformly, or by `zipf`'s
    /// ranks), `compute_ns` of CPU after each.
    Random {
        /// Generator state.
        state: u64,
        /// References still to do.
        count: u64,
        /// Whether the references store.
        write: bool,
        /// CPU time after each reference.
        compute_ns: u64,
        /// Zipf-distributed ranks instead of uniform pages.
        zipf: Option<Arc<Zipf>>,
    },
    /// A recorded trace, `loops` times over, `compute_ns` of CPU between references.
    Trace {
        /// The trace (one region page per distinct trace page).
        trace: Arc<Trace>,
        /// Next reference.
        pos: usize,
        /// Passes left, including the current one.
        loops: u64,
        /// CPU time between references.
        compute_ns: u64,
    },
}

/// One step of xorshift64* (Vigna 2016): returns the output, advances the state.
#[inline]
pub fn xorshift64star(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// How many references ahead a trace shows its pages to `Pattern::hits`'s `ahead`: far enough
/// for a fetch from memory (about 100 ns) to complete behind the references in between.
pub const AHEAD: usize = 8;

impl Pattern {
    /// The next reference in a region of `pages` pages, or `None` when the pattern is done.
    #[inline]
    pub fn peek(&self, pages: u32) -> Option<Ref> {
        match self {
            Self::Sweep { first, count, refs, write } => {
                (*count > 0).then_some(Ref { page: *first, write: *write, refs: *refs, compute_ns: 0 })
            }
            Self::Random { state, count, write, compute_ns, zipf } => {
                let mut s = *state;
                (*count > 0).then(|| Ref { page: draw(&mut s, pages, zipf), write: *write, refs: 1, compute_ns: *compute_ns })
            }
            Self::Trace { trace, pos, loops, compute_ns } => {
                let refs = trace.refs();
                if *loops == 0 || refs.is_empty() {
                    return None;
                }
                let r = refs[*pos];
                Some(Ref { page: r & ID_MASK, write: r & WRITE != 0, refs: 1, compute_ns: *compute_ns })
            }
        }
    }

    /// Moves past the reference `peek` returned.
    #[inline]
    pub fn advance(&mut self, pages: u32) {
        match self {
            Self::Sweep { first, count, .. } => {
                *first = if *first + 1 == pages { 0 } else { *first + 1 };
                *count -= 1;
            }
            Self::Random { state, count, .. } => {
                xorshift64star(state);
                *count -= 1;
            }
            Self::Trace { trace, pos, loops, .. } => {
                *pos += 1;
                if *pos == trace.refs().len() {
                    *pos = 0;
                    *loops -= 1;
                }
            }
        }
    }

    /// For a sweep: how many consecutive pages (from `peek`'s page up to the region's end) the
    /// next visits take, at most `max`. Other patterns: 0.
    #[inline]
    pub fn sequential(&self, pages: u32, max: u64) -> u64 {
        match self {
            Self::Sweep { first, count, .. } => (*count).min((pages - *first) as u64).min(max),
            _ => 0,
        }
    }

    /// For a sweep: skips `n` visits at once (`n` may span several passes over the region).
    pub fn skip(&mut self, pages: u32, n: u64) {
        if let Self::Sweep { first, count, .. } = self {
            *first = ((*first as u64 + n) % pages as u64) as u32;
            *count -= n;
        }
    }

    /// Takes references while `hit` says a reference changes nothing but time (and whatever `hit`
    /// itself does), at most `budget` of them; returns how many were taken. Each pattern runs its
    /// own tight loop: this is the hot path of every simulation. A trace, whose next references
    /// are known, also shows `ahead`, if given, the pages `AHEAD` and 2 x `AHEAD` references
    /// ahead of each, so the caller can fetch their state into the cache before it is needed.
    #[inline]
    pub fn hits(
        &mut self,
        pages: u32,
        budget: u64,
        mut hit: impl FnMut(u32, bool) -> bool,
        mut ahead: Option<impl FnMut(u32, u32)>,
    ) -> u64 {
        let mut n = 0;
        match self {
            Self::Sweep { first, count, write, .. } => {
                let budget = budget.min(*count);
                while n < budget && hit(*first, *write) {
                    *first = if *first + 1 == pages { 0 } else { *first + 1 };
                    n += 1;
                }
                *count -= n;
            }
            Self::Random { state, count, write, zipf, .. } => {
                let budget = budget.min(*count);
                while n < budget {
                    let mut next = *state;
                    let page = draw(&mut next, pages, zipf);
                    if !hit(page, *write) {
                        break;
                    }
                    *state = next;
                    n += 1;
                }
                *count -= n;
            }
            Self::Trace { trace, pos, loops, .. } => {
                let refs = trace.refs();
                while n < budget && *loops > 0 {
                    let stop = refs.len().min(*pos + (budget - n) as usize);
                    let start = *pos;
                    while *pos < stop {
                        if let Some(ahead) = ahead.as_mut()
                            && let Some(&far) = refs.get(*pos + 2 * AHEAD)
                        {
                            ahead(refs[*pos + AHEAD] & ID_MASK, far & ID_MASK);
                        }
                        let r = refs[*pos];
                        if !hit(r & ID_MASK, r & WRITE != 0) {
                            break;
                        }
                        *pos += 1;
                    }
                    n += (*pos - start) as u64;
                    if *pos < refs.len() {
                        break;
                    }
                    *pos = 0;
                    *loops -= 1;
                }
            }
        }
        n
    }

    /// Visits left for a sweep (`u64::MAX` forever); references left otherwise.
    pub fn remaining(&self) -> u64 {
        match self {
            Self::Sweep { count, .. } | Self::Random { count, .. } => *count,
            Self::Trace { trace, pos, loops, .. } => {
                (*loops).saturating_sub(1) * trace.refs().len() as u64 + (trace.refs().len() - *pos) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_wrap_and_skip_whole_passes() {
        let mut p = Pattern::Sweep { first: 3, count: 10, refs: 2, write: true };
        assert_eq!(p.sequential(5, 100), 2, "two pages to the region's end");
        p.advance(5);
        p.advance(5);
        assert_eq!(p.peek(5).map(|r| r.page), Some(0), "wrapped");
        p.skip(5, 7);
        assert_eq!(p, Pattern::Sweep { first: 2, count: 1, refs: 2, write: true });
        p.advance(5);
        assert_eq!(p.peek(5), None);
    }

    #[test]
    fn random_references_follow_xorshift_and_advance_only_when_told() {
        let mut p = Pattern::Random { state: 42, count: 3, write: false, compute_ns: 0, zipf: None };
        let mut s = 42;
        let expect = (xorshift64star(&mut s) % 1000) as u32;
        assert_eq!(p.peek(1000).unwrap().page, expect);
        assert_eq!(p.peek(1000).unwrap().page, expect, "peek does not advance");
        p.advance(1000);
        assert_eq!(p.peek(1000).unwrap().page, (xorshift64star(&mut s) % 1000) as u32);
        assert_eq!(p.remaining(), 2);
    }
}
