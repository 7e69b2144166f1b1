//! The guest's swap area: slot allocation (`mm/swapfile.c`) and the swap cache index from slot to
//! page (`mm/swap_state.c`).

use super::page::NONE;
use super::workingset::{NO_SHADOW, Shadow};
use crate::bitmap::Bitmap;
use crate::slots::Slots;

/// A swap area on the guest's virtual disk, starting at byte 0 of the disk. Its tables cover the
/// slots used so far, so they grow with use.
#[derive(Clone, Debug)]
pub struct SwapArea {
    slots: Slots,
    /// Slots whose device copy was written (so a read returns real data).
    written: Bitmap,
    /// What the swap cache holds for each slot, both in one entry: a fault reads one and then the
    /// other, and over a large swap area each separate table costs a cache miss.
    entries: Vec<SlotEntry>,
}

/// A slot's swap-cache entry.
#[derive(Clone, Copy, Debug)]
struct SlotEntry {
    /// The page holding the slot's contents in memory, or `NONE`.
    page: u32,
    /// The shadow entry reclaim left (`NO_SHADOW` where none).
    shadow: Shadow,
}

const EMPTY: SlotEntry = SlotEntry { page: NONE, shadow: NO_SHADOW };

impl SwapArea {
    /// A swap area of `slots` pages.
    pub fn new(slots: u32) -> Self {
        Self { slots: Slots::new(slots), written: Bitmap::default(), entries: Vec::new() }
    }

    /// Total slots.
    pub fn size(&self) -> u64 {
        self.slots.size()
    }

    /// Slots in use.
    pub fn nr_used(&self) -> u64 {
        self.slots.nr_used()
    }

    /// Whether any slot is free.
    pub fn has_free(&self) -> bool {
        self.nr_used() < self.size()
    }

    /// Allocates a slot after the previous one.
    pub fn alloc(&mut self) -> Option<u32> {
        let s = self.slots.alloc()?;
        self.grow();
        Some(s)
    }

    /// Allocates `n` consecutive slots (see `Slots::alloc_run`); returns the first.
    pub fn alloc_run(&mut self, n: u32) -> Option<u32> {
        let s = self.slots.alloc_run(n)?;
        self.grow();
        Some(s)
    }

    /// Extends the per-slot tables to the slots used so far.
    fn grow(&mut self) {
        let len = self.slots.table_len();
        if len > self.entries.len() {
            self.written.grow(len);
            self.entries.resize(len, EMPTY);
        }
    }

    /// Frees a slot; says whether it held written data (which is now discarded).
    pub fn free(&mut self, s: u32) -> bool {
        debug_assert_eq!(self.entries[s as usize].page, NONE);
        self.slots.free(s);
        self.entries[s as usize].shadow = NO_SHADOW;
        let had = self.written.get(s as usize);
        self.written.clear(s as usize);
        had
    }

    /// Whether a slot is allocated.
    pub fn is_used(&self, s: u32) -> bool {
        self.slots.is_used(s)
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
        self.entries[s as usize].page
    }

    /// Fetches a slot's entry into the CPU cache ahead of use (a slot beyond the tables is ignored).
    #[inline]
    pub fn prefetch(&self, s: u32) {
        if let Some(e) = self.entries.get(s as usize) {
            crate::index::prefetch(e);
        }
    }

    /// Sets or clears the swap-cache page of a slot.
    #[inline]
    pub fn set_cached(&mut self, s: u32, p: u32) {
        self.entries[s as usize].page = p;
    }

    /// Leaves a shadow entry in a slot whose page reclaim freed.
    pub fn set_shadow(&mut self, s: u32, shadow: Shadow) {
        self.entries[s as usize].shadow = shadow;
    }

    /// Takes the shadow entry of a slot (a page is coming back to it).
    pub fn take_shadow(&mut self, s: u32) -> Shadow {
        std::mem::replace(&mut self.entries[s as usize].shadow, NO_SHADOW)
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
