//! A VM's compression cache (ESX memory compression): before host-swapping a page, the host
//! compresses it and keeps it if it fits in half a page, in a per-VM cache of at most 10 % of the
//! VM's memory (`Mem.MemZipMaxPct`). Compressed pages are stored in half-page slots, two to a
//! frame; when the cache is full, the oldest compressed page makes room by going to the swap file.

use std::collections::VecDeque;

use crate::index::NONE;
use crate::units::PAGE_SIZE;

/// The largest compressed size kept: half a page (ESX keeps a page only if it compresses to 2 KiB).
pub const ZIP_SLOT_BYTES: u64 = PAGE_SIZE / 2;

/// One VM's cache.
#[derive(Clone, Debug)]
pub struct ZipCache {
    /// Slot -> guest page it holds, or `NONE`.
    slots: Vec<u32>,
    free: Vec<u32>,
    /// Occupied slots, oldest first (the eviction order).
    fifo: VecDeque<u32>,
    /// Most slots the cache may hold.
    max_slots: u64,
    used: u64,
}

impl ZipCache {
    /// A cache of at most `max_bytes` of memory.
    pub fn new(max_bytes: u64) -> Self {
        Self { slots: Vec::new(), free: Vec::new(), fifo: VecDeque::new(), max_slots: max_bytes / ZIP_SLOT_BYTES, used: 0 }
    }

    /// Slots in use (esxtop CACHEUSD, in half pages).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Most slots (esxtop CACHESZ, in half pages).
    pub fn capacity(&self) -> u64 {
        self.max_slots
    }

    /// Whether the cache can take no page at all (a cache of zero size).
    pub fn is_disabled(&self) -> bool {
        self.max_slots == 0
    }

    /// Whether every slot is taken.
    pub fn is_full(&self) -> bool {
        self.used >= self.max_slots
    }

    /// Frames the cache occupies: two slots to a frame.
    pub fn frames(&self) -> u64 {
        self.used.div_ceil(2)
    }

    /// Stores page `ppn`; returns its slot. The caller has made room.
    pub fn insert(&mut self, ppn: u32) -> u32 {
        debug_assert!(!self.is_full());
        let s = self.free.pop().unwrap_or_else(|| {
            self.slots.push(NONE);
            (self.slots.len() - 1) as u32
        });
        self.slots[s as usize] = ppn;
        self.fifo.push_back(s);
        self.used += 1;
        s
    }

    /// Frees slot `s` (its page was decompressed, ballooned or evicted).
    pub fn remove(&mut self, s: u32) {
        debug_assert_ne!(self.slots[s as usize], NONE);
        self.slots[s as usize] = NONE;
        self.free.push(s);
        self.used -= 1;
        // The FIFO drops freed slots lazily, when they reach its front.
    }

    /// The oldest compressed page and its slot, which must leave to make room.
    pub fn oldest(&mut self) -> Option<(u32, u32)> {
        while let Some(&s) = self.fifo.front() {
            let ppn = self.slots[s as usize];
            if ppn != NONE {
                return Some((s, ppn));
            }
            self.fifo.pop_front();
        }
        None
    }

    /// The page in slot `s`, if any (for invariant checks).
    pub fn page(&self, s: u32) -> Option<u32> {
        self.slots.get(s as usize).copied().filter(|&p| p != NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_holds_two_pages_a_frame_and_evicts_oldest_first() {
        let mut z = ZipCache::new(10 * PAGE_SIZE);
        assert_eq!(z.capacity(), 20);
        let a = z.insert(100);
        let b = z.insert(200);
        z.insert(300);
        assert_eq!(z.frames(), 2);
        assert_eq!(z.oldest(), Some((a, 100)));
        z.remove(a);
        assert_eq!(z.oldest(), Some((b, 200)), "a freed slot is skipped");
        assert_eq!(z.used(), 2);
        for p in 0..18 {
            z.insert(p);
        }
        assert!(z.is_full());
    }
}
