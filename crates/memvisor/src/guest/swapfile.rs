//! The guest's swap area: slot allocation (`mm/swapfile.c`) and the swap cache index from slot to
//! page (`mm/swap_state.c`).

use super::page::NONE;
use crate::bitmap::Bitmap;

/// A swap area on the guest's virtual disk, starting at byte 0 of the disk. Its tables cover the
/// slots used so far (slots are allocated from the low end), so they grow with use.
#[derive(Clone, Debug)]
pub struct SwapArea {
    used: Bitmap,
    /// Slots whose device copy was written (so a read returns real data).
    written: Bitmap,
    /// Swap cache: the page holding each slot's contents in memory, or `NONE`.
    cache: Vec<u32>,
    size: u32,
    cursor: usize,
    nr_used: u64,
}

impl SwapArea {
    /// A swap area of `slots` pages.
    pub fn new(slots: u32) -> Self {
        Self { used: Bitmap::default(), written: Bitmap::default(), cache: Vec::new(), size: slots, cursor: 0, nr_used: 0 }
    }

    /// Total slots.
    pub fn size(&self) -> u64 {
        self.size as u64
    }

    /// Slots in use.
    pub fn nr_used(&self) -> u64 {
        self.nr_used
    }

    /// Whether any slot is free.
    pub fn has_free(&self) -> bool {
        self.nr_used < self.size()
    }

    /// Allocates a slot. Allocation continues after the previous slot, so pages evicted together
    /// land next to each other and their writes merge, as the kernel's cluster allocator arranges.
    pub fn alloc(&mut self) -> Option<u32> {
        if !self.has_free() {
            return None;
        }
        let hw = self.used.len();
        let s = match (self.cursor < hw).then(|| self.used.next_zero_in(self.cursor, hw)).flatten() {
            Some(s) => s,
            // Every slot past the tables' end is free.
            None if self.cursor.max(hw) < self.size as usize => self.cursor.max(hw),
            None => self.used.next_zero_in(0, self.cursor.min(hw)).expect("a free slot exists"),
        };
        if s >= hw {
            self.used.grow(s + 1);
            self.written.grow(s + 1);
            self.cache.resize(s + 1, NONE);
        }
        self.used.set(s);
        self.nr_used += 1;
        self.cursor = s + 1;
        if self.cursor >= self.size as usize {
            self.cursor = 0;
        }
        Some(s as u32)
    }

    /// Frees a slot; says whether it held written data (which is now discarded).
    pub fn free(&mut self, s: u32) -> bool {
        debug_assert!(self.used.get(s as usize));
        debug_assert_eq!(self.cache[s as usize], NONE);
        self.used.clear(s as usize);
        self.nr_used -= 1;
        let had = self.written.get(s as usize);
        self.written.clear(s as usize);
        had
    }

    /// Whether a slot is allocated.
    pub fn is_used(&self, s: u32) -> bool {
        (s as usize) < self.used.len() && self.used.get(s as usize)
    }

    /// Records that a slot's contents were written to the device.
    pub fn mark_written(&mut self, s: u32) {
        self.written.set(s as usize);
    }

    /// Whether a slot's device copy is valid.
    pub fn is_written(&self, s: u32) -> bool {
        (s as usize) < self.written.len() && self.written.get(s as usize)
    }

    /// Slots holding written data.
    pub fn nr_written(&self) -> u64 {
        self.written.count_ones() as u64
    }

    /// The swap-cache page of a slot.
    #[inline]
    pub fn cached(&self, s: u32) -> u32 {
        self.cache[s as usize]
    }

    /// Sets or clears the swap-cache page of a slot.
    #[inline]
    pub fn set_cached(&mut self, s: u32, p: u32) {
        self.cache[s as usize] = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_allocation_and_reuse() {
        let mut a = SwapArea::new(4);
        assert_eq!((a.alloc(), a.alloc(), a.alloc()), (Some(0), Some(1), Some(2)));
        a.mark_written(1);
        assert!(a.free(1));
        assert!(!a.free(0));
        assert_eq!(a.alloc(), Some(3));
        assert_eq!(a.alloc(), Some(0));
        assert_eq!(a.alloc(), Some(1));
        assert_eq!(a.alloc(), None);
        assert_eq!(a.nr_used(), 4);
    }
}
