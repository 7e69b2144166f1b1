//! Dense tables indexed by u32 (pages, frames, slots, processes): their one empty value, their growth,
//! recycled numbers, and the hint that fetches an entry ahead of its use.

/// "No page, frame, slot or owner": the empty value of every dense u32 index table.
pub const NONE: u32 = u32::MAX;

/// Extends `v` with `fill` to `n` entries, growing its allocation by an eighth (at least 64
/// entries) rather than doubling it: tables indexed by page follow use, and a doubling would leave up
/// to half of a small guest's table unused.
pub fn grow_to<T: Clone>(v: &mut Vec<T>, n: usize, fill: T) {
    if n > v.capacity() {
        let want = n.max(v.len() + (v.len() / 8).max(64));
        v.reserve_exact(want - v.len());
    }
    v.resize(n, fill);
}

/// A table of records addressed by u32 numbers that are reused once freed (KSM pages, shared
/// frames): freeing is O(1) and numbers stay small.
#[derive(Clone, Debug, Default)]
pub struct Recycled<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T> Recycled<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self { items: Vec::new(), free: Vec::new() }
    }

    /// Stores `t` under a free number (the last freed, else a new one) and returns the number.
    pub fn insert(&mut self, t: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = t;
                // A freed record lies anywhere in a large table: fetch the next one to be reused
                // now, so that the next insert does not wait for it.
                if let Some(&j) = self.free.last() {
                    prefetch(&self.items[j as usize]);
                }
                i
            }
            None => {
                self.items.push(t);
                (self.items.len() - 1) as u32
            }
        }
    }

    /// Frees number `i` for reuse; its record stays readable until then.
    pub fn free(&mut self, i: u32) {
        self.free.push(i);
    }

    /// The record under `i`, if the number was ever given.
    pub fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize)
    }
}

impl<T> std::ops::Index<u32> for Recycled<T> {
    type Output = T;
    fn index(&self, i: u32) -> &T {
        &self.items[i as usize]
    }
}

impl<T> std::ops::IndexMut<u32> for Recycled<T> {
    fn index_mut(&mut self, i: u32) -> &mut T {
        &mut self.items[i as usize]
    }
}

/// Asks the CPU to bring `x`'s cache line in without waiting for it (a hint: no effect on results).
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address; this one is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((x as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}
