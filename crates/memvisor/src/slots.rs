//! Slot allocation for swap areas (the guest's swap partition, the host's per-VM swap file): slots
//! are handed out after the previous one, so pages written together land together and their writes
//! merge, as the kernel's cluster allocator arranges. The table covers the slots used so far.

use crate::bitmap::Bitmap;

/// A swap area's slots.
#[derive(Clone, Debug)]
pub struct Slots {
    used: Bitmap,
    size: u32,
    cursor: usize,
    nr_used: u64,
}

impl Slots {
    /// `size` free slots.
    pub fn new(size: u32) -> Self {
        Self { used: Bitmap::default(), size, cursor: 0, nr_used: 0 }
    }

    /// Total slots.
    pub fn size(&self) -> u64 {
        self.size as u64
    }

    /// Slots in use.
    pub fn nr_used(&self) -> u64 {
        self.nr_used
    }

    /// Length of the table: one past the highest slot ever used.
    pub fn table_len(&self) -> usize {
        self.used.len()
    }

    /// Allocates the first free slot at or after the previous one, wrapping around.
    pub fn alloc(&mut self) -> Option<u32> {
        if self.nr_used == self.size() {
            return None;
        }
        let hw = self.used.len();
        let s = match (self.cursor < hw).then(|| self.used.next_zero_in(self.cursor, hw)).flatten() {
            Some(s) => s,
            // Every slot past the table's end is free.
            None if self.cursor.max(hw) < self.size as usize => self.cursor.max(hw),
            None => self.used.next_zero_in(0, self.cursor.min(hw)).expect("a free slot exists"),
        };
        if s >= hw {
            self.used.grow(s + 1);
        }
        self.used.set(s);
        self.nr_used += 1;
        self.cursor = if s + 1 >= self.size as usize { 0 } else { s + 1 };
        Some(s as u32)
    }

    /// Allocates `n` consecutive free slots, the first such run at or after the previous
    /// allocation, wrapping around once; returns the first slot. Windows' pagefile writer takes a
    /// run of free pagefile space for each write this way.
    pub fn alloc_run(&mut self, n: u32) -> Option<u32> {
        let (n, size) = (n as usize, self.size as usize);
        if n == 0 || (self.size() - self.nr_used) < n as u64 {
            return None;
        }
        let start = self.cursor;
        let mut pos = start;
        let mut wrapped = false;
        loop {
            if wrapped && pos >= start {
                return None;
            }
            if pos + n > size {
                if wrapped {
                    return None;
                }
                (pos, wrapped) = (0, true);
                continue;
            }
            let run = self.used.zeros_from(pos, n);
            if run >= n {
                self.used.grow(pos + n);
                for s in pos..pos + n {
                    self.used.set(s);
                }
                self.nr_used += n as u64;
                self.cursor = if pos + n >= size { 0 } else { pos + n };
                return Some(pos as u32);
            }
            pos += run + 1;
        }
    }

    /// Frees a slot.
    pub fn free(&mut self, s: u32) {
        debug_assert!(self.is_used(s));
        self.used.clear(s as usize);
        self.nr_used -= 1;
    }

    /// Whether a slot is allocated.
    pub fn is_used(&self, s: u32) -> bool {
        (s as usize) < self.used.len() && self.used.get(s as usize)
    }
}
