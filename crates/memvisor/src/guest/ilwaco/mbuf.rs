//! BSD packet buffers in an Ilwaco guest's memory, and the two pools Denali compared (seed 004,
//! "mbuf entropy"): BSD's free list, and Denali's pool that hashes buffers to buckets by address.
//!
//! Sizes are FreeBSD 4.x's (`sys/i386/include/param.h`: MSIZE 256, MCLBYTES 2048; 4.4BSD had
//! MSIZE 128). A pool is a contiguous region carved into equal objects at boot, as `m_mballoc`
//! carves the pages it takes from `mb_map`: the "large contiguous byte array" of the seed.

use crate::units::PAGE_SIZE;

/// Bytes of an mbuf (FreeBSD 4.x MSIZE).
pub const MSIZE: u32 = 256;
/// Bytes of an mbuf cluster (MCLBYTES).
pub const MCLBYTES: u32 = 2048;

/// Which allocator hands out a pool's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// BSD's free list: `MGET` takes the head (`m = mmbfree; mmbfree = m->m_next`), `MFREE` pushes
    /// the freed buffer back on the head. Allocation order becomes free order, so buffers freed in
    /// an order other than they were taken (responses acknowledged out of order, packets queued
    /// while others are sent) end up interleaved across pages.
    List,
    /// Denali's fix: buffers hashed to buckets by their address (a bucket per page here), each
    /// allocation served from the lowest-addressed bucket that has a free buffer, so the buffers in
    /// use stay packed into as few pages as they need.
    Hash,
}

scenario_names!(PoolKind {
    List => "list",
    Hash => "hash",
});

/// One pool of equal objects (mbufs or clusters) over a page-aligned region of guest memory.
#[derive(Clone, Debug)]
pub struct Pool {
    kind: PoolKind,
    /// First guest page of the region.
    base_page: u32,
    per_page: u32,
    objects: u32,
    /// List: the objects freed back onto the free list, head last; below them lie the objects
    /// never taken, `0..fresh`, in carve order (held implicitly: a pool that has seen little use
    /// costs the simulator little).
    stack: Vec<u32>,
    fresh: u32,
    /// Hash: free objects of each bucket (page), one bit per object (at most 16 per page).
    buckets: Vec<u16>,
    /// Hash: buckets with a free object, one bit each.
    nonempty: Vec<u64>,
    in_use: u32,
}

impl Pool {
    /// A pool of `objects` objects of `size` bytes from guest page `base_page`, all free, in the
    /// order a fresh carve leaves them.
    pub fn new(kind: PoolKind, base_page: u32, size: u32, objects: u32) -> Self {
        let per_page = (PAGE_SIZE as u32 / size).max(1);
        assert!(per_page <= 16, "a bucket holds at most 16 objects");
        let pages = objects.div_ceil(per_page);
        let mut p =
            Self { kind, base_page, per_page, objects, stack: Vec::new(), fresh: 0, buckets: Vec::new(), nonempty: Vec::new(), in_use: 0 };
        match kind {
            // m_mballoc pushes each chunk on the head in ascending address order: the highest
            // address is taken first, then downwards through the array.
            PoolKind::List => p.fresh = objects,
            PoolKind::Hash => {
                p.buckets = (0..pages).map(|b| Self::full_mask(objects - b * per_page, per_page)).collect();
                p.nonempty = vec![0; pages.div_ceil(64) as usize];
                for b in 0..pages as usize {
                    p.nonempty[b / 64] |= 1 << (b % 64);
                }
            }
        }
        p
    }

    fn full_mask(left: u32, per_page: u32) -> u16 {
        let n = left.min(per_page);
        if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
    }

    /// Pages the region spans.
    pub fn pages(&self) -> u32 {
        self.objects.div_ceil(self.per_page)
    }

    /// Objects in use.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Simulator bytes the pool's free-object record takes.
    pub fn bytes(&self) -> usize {
        self.stack.capacity() * 4 + self.buckets.capacity() * 2 + self.nonempty.capacity() * 8
    }

    /// Objects in the pool.
    pub fn objects(&self) -> u32 {
        self.objects
    }

    /// The guest page object `o` lies in.
    pub fn page_of(&self, o: u32) -> u32 {
        self.base_page + o / self.per_page
    }

    /// Takes an object; `None` when every one is in use (BSD's M_DONTWAIT allocation fails).
    pub fn alloc(&mut self) -> Option<u32> {
        let o = match self.kind {
            PoolKind::List => match self.stack.pop() {
                Some(o) => o,
                None if self.fresh > 0 => {
                    self.fresh -= 1;
                    self.fresh
                }
                None => return None,
            },
            PoolKind::Hash => {
                let (w, word) = self.nonempty.iter().enumerate().find(|(_, w)| **w != 0)?;
                let b = w * 64 + word.trailing_zeros() as usize;
                let mask = &mut self.buckets[b];
                let slot = mask.trailing_zeros();
                *mask &= !(1 << slot);
                if *mask == 0 {
                    self.nonempty[b / 64] &= !(1 << (b % 64));
                }
                b as u32 * self.per_page + slot
            }
        };
        self.in_use += 1;
        Some(o)
    }

    /// Returns object `o`, which must be in use.
    pub fn free(&mut self, o: u32) {
        debug_assert!(o < self.objects);
        match self.kind {
            PoolKind::List => self.stack.push(o),
            PoolKind::Hash => {
                let b = (o / self.per_page) as usize;
                debug_assert!(self.buckets[b] & (1 << (o % self.per_page)) == 0, "object {o} freed twice");
                self.buckets[b] |= 1 << (o % self.per_page);
                self.nonempty[b / 64] |= 1 << (b % 64);
            }
        }
        self.in_use -= 1;
    }

    /// Checks that every object is free exactly once or in use.
    pub fn check(&self) -> Result<(), String> {
        let free = match self.kind {
            PoolKind::List => {
                let mut seen = vec![false; self.objects as usize];
                for &o in &self.stack {
                    if o >= self.objects || o < self.fresh || std::mem::replace(&mut seen[o as usize], true) {
                        return Err(format!("mbuf free list holds object {o} twice, out of range or among those never taken"));
                    }
                }
                self.fresh + self.stack.len() as u32
            }
            PoolKind::Hash => {
                for (b, m) in self.buckets.iter().enumerate() {
                    if (*m != 0) != (self.nonempty[b / 64] >> (b % 64) & 1 == 1) {
                        return Err(format!("mbuf hash bucket {b}: non-empty bit disagrees with its free objects"));
                    }
                }
                self.buckets.iter().map(|m| m.count_ones()).sum()
            }
        };
        if free + self.in_use != self.objects {
            return Err(format!("mbuf pool: {free} free + {} in use != {} objects", self.in_use, self.objects));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng;
    use rand::Rng;
    use std::collections::BTreeSet;

    /// Distinct pages of `n` back-to-back allocations, returned afterwards.
    fn pages_of_burst(p: &mut Pool, n: usize) -> usize {
        let objs: Vec<u32> = (0..n).map(|_| p.alloc().expect("pool large enough")).collect();
        let pages: BTreeSet<u32> = objs.iter().map(|&o| p.page_of(o)).collect();
        for o in objs {
            p.free(o);
        }
        pages.len()
    }

    /// Many allocations and frees in an order other than they were taken, as connections
    /// interleave: a random half of the held objects is freed, then as many taken, many times.
    fn churn(p: &mut Pool, held: usize, rounds: usize) {
        let mut r = rng::stream(7, &[1]);
        let mut live: Vec<u32> = (0..held).map(|_| p.alloc().unwrap()).collect();
        for _ in 0..rounds {
            for _ in 0..held / 2 {
                let i = r.random_range(0..live.len());
                p.free(live.swap_remove(i));
            }
            while live.len() < held {
                live.push(p.alloc().unwrap());
            }
        }
        for o in live {
            p.free(o);
        }
    }

    #[test]
    fn list_scatters_after_churn_and_hash_does_not() {
        let n = 4096;
        for kind in [PoolKind::List, PoolKind::Hash] {
            let mut p = Pool::new(kind, 100, MSIZE, n);
            // Fresh: 16 back-to-back mbufs share one page.
            assert_eq!(pages_of_burst(&mut p, 16), 1, "{kind:?} fresh");
            churn(&mut p, 1024, 200);
            p.check().unwrap();
            let after = pages_of_burst(&mut p, 16);
            match kind {
                // A scattered free list: nearly one page per mbuf (the seed's worst case).
                PoolKind::List => assert!(after >= 12, "list after churn: 16 mbufs on {after} pages"),
                PoolKind::Hash => assert_eq!(after, 1, "hash after churn: 16 mbufs on {after} pages"),
            }
        }
    }

    /// Keeps `held` buffers in use for `steps` steps, each freeing a random one and taking one;
    /// returns the distinct pages the last 1,600 allocations landed on.
    fn steady(p: &mut Pool, live: &mut Vec<u32>, held: usize, steps: usize, r: &mut crate::rng::Rng) -> usize {
        let mut pages = BTreeSet::new();
        for step in 0..steps {
            while live.len() > held {
                let i = r.random_range(0..live.len());
                p.free(live.swap_remove(i));
            }
            while live.len() < held {
                live.push(p.alloc().unwrap());
            }
            let i = r.random_range(0..live.len());
            p.free(live.swap_remove(i));
            let o = p.alloc().unwrap();
            live.push(o);
            if step + 1600 >= steps {
                pages.insert(p.page_of(o));
            }
        }
        pages.len()
    }

    /// A LIFO list hands out only buffers that were once in use together, so it spreads no wider
    /// than the most buffers it ever held at once; after a burst it keeps that spread at lower use
    /// (the seed's "especially if a VM is subjected to a burst of high load"), where the hash pool
    /// packs its buffers again.
    #[test]
    fn the_list_keeps_the_spread_of_its_largest_burst_and_hash_does_not() {
        for kind in [PoolKind::List, PoolKind::Hash] {
            let mut r = rng::stream(7, &[2]);
            let mut p = Pool::new(kind, 0, MSIZE, 4096);
            let mut live = Vec::new();
            // 128 mbufs fill 8 pages: before any burst neither pool can spread wider.
            let before = steady(&mut p, &mut live, 128, 20_000, &mut r);
            assert!(before <= 8, "{kind:?} before a burst: 128 mbufs on {before} pages");
            steady(&mut p, &mut live, 1024, 20_000, &mut r);
            let after = steady(&mut p, &mut live, 128, 20_000, &mut r);
            p.check().unwrap();
            match kind {
                // The burst's 1,024 mbufs span 64 pages, and the list keeps drawing from all of
                // them: at least half, against the 8 that 128 mbufs need.
                PoolKind::List => assert!(after >= 32, "list after a burst: 128 mbufs on {after} pages"),
                PoolKind::Hash => assert!(after <= 8, "hash after a burst: 128 mbufs on {after} pages"),
            }
        }
    }

    #[test]
    fn exhausted_pool_refuses_and_recovers() {
        let mut p = Pool::new(PoolKind::Hash, 0, MCLBYTES, 5);
        assert_eq!(p.pages(), 3);
        let all: Vec<u32> = (0..5).map(|_| p.alloc().unwrap()).collect();
        assert_eq!(p.alloc(), None);
        assert_eq!(all.iter().map(|&o| p.page_of(o)).collect::<Vec<_>>(), vec![0, 0, 1, 1, 2]);
        p.free(all[3]);
        assert_eq!(p.alloc(), Some(3));
        p.check().unwrap();
    }
}
