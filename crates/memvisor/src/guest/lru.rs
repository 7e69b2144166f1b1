//! The LRU lists: intrusive doubly-linked lists threaded through the page array, so that adding,
//! removing and rotating a page are O(1) index updates.
//!
//! The head of a list is the most recently added end (Linux `list_add`); reclaim takes from the tail.

use super::page::NONE;

/// Which list a page is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LruList {
    /// Anonymous pages not recently used.
    InactiveAnon = 0,
    /// Anonymous pages in use.
    ActiveAnon = 1,
    /// Page cache not recently used.
    InactiveFile = 2,
    /// Page cache in use.
    ActiveFile = 3,
    /// The single recency list of exact-LRU mode (most recent at the head).
    Exact = 4,
}

/// Number of lists.
pub const NR_LISTS: usize = 5;
/// Marker for "on no list".
pub const NO_LIST: u8 = u8::MAX;

impl LruList {
    /// All lists, indexed by their number.
    pub const ALL: [LruList; NR_LISTS] = [Self::InactiveAnon, Self::ActiveAnon, Self::InactiveFile, Self::ActiveFile, Self::Exact];

    /// The inactive list of the same type.
    pub fn inactive(file: bool) -> Self {
        if file { Self::InactiveFile } else { Self::InactiveAnon }
    }

    /// The active list of the same type.
    pub fn active(file: bool) -> Self {
        if file { Self::ActiveFile } else { Self::ActiveAnon }
    }

    /// Whether this is a page-cache list.
    pub fn is_file(self) -> bool {
        matches!(self, Self::InactiveFile | Self::ActiveFile)
    }

    /// Whether this is an active list.
    pub fn is_active(self) -> bool {
        matches!(self, Self::ActiveAnon | Self::ActiveFile)
    }
}

/// The lists.
#[derive(Clone, Debug)]
pub struct Lru {
    next: Vec<u32>,
    prev: Vec<u32>,
    on: Vec<u8>,
    len: [u64; NR_LISTS],
    npages: u32,
}

impl Lru {
    /// Empty lists for `n` pages.
    pub fn new(n: u32) -> Self {
        let total = n as usize + NR_LISTS;
        let mut next = vec![NONE; total];
        let mut prev = vec![NONE; total];
        for l in 0..NR_LISTS {
            let s = n + l as u32;
            next[s as usize] = s;
            prev[s as usize] = s;
        }
        Self { next, prev, on: vec![NO_LIST; n as usize], len: [0; NR_LISTS], npages: n }
    }

    fn sentinel(&self, l: LruList) -> u32 {
        self.npages + l as u32
    }

    /// Pages on a list.
    #[inline]
    pub fn len(&self, l: LruList) -> u64 {
        self.len[l as usize]
    }

    /// The list a page is on, if any.
    #[inline]
    pub fn list_of(&self, p: u32) -> Option<LruList> {
        let l = self.on[p as usize];
        (l != NO_LIST).then(|| LruList::ALL[l as usize])
    }

    /// Adds a page at the head of a list.
    pub fn add_head(&mut self, l: LruList, p: u32) {
        let s = self.sentinel(l);
        self.link_after(s, p, l);
    }

    /// Adds a page at the tail of a list (reclaimed first).
    pub fn add_tail(&mut self, l: LruList, p: u32) {
        let s = self.sentinel(l);
        let last = self.prev[s as usize];
        self.link_after(last, p, l);
    }

    fn link_after(&mut self, at: u32, p: u32, l: LruList) {
        debug_assert_eq!(self.on[p as usize], NO_LIST);
        let nx = self.next[at as usize];
        self.next[p as usize] = nx;
        self.prev[p as usize] = at;
        self.prev[nx as usize] = p;
        self.next[at as usize] = p;
        self.on[p as usize] = l as u8;
        self.len[l as usize] += 1;
    }

    /// Removes a page from whatever list it is on.
    pub fn remove(&mut self, p: u32) {
        let l = self.on[p as usize];
        debug_assert_ne!(l, NO_LIST);
        let (pv, nx) = (self.prev[p as usize], self.next[p as usize]);
        self.next[pv as usize] = nx;
        self.prev[nx as usize] = pv;
        self.on[p as usize] = NO_LIST;
        self.len[l as usize] -= 1;
    }

    /// Moves a page to the head of a list (possibly another one).
    pub fn move_head(&mut self, l: LruList, p: u32) {
        self.remove(p);
        self.add_head(l, p);
    }

    /// Moves a page to the head of a list it is already on, unless it is there already (the common
    /// case of consecutive references to one page).
    #[inline]
    pub fn touch_head(&mut self, l: LruList, p: u32) {
        if self.next[self.sentinel(l) as usize] != p {
            self.move_head(l, p);
        }
    }

    /// Moves a page to the tail of a list.
    pub fn move_tail(&mut self, l: LruList, p: u32) {
        self.remove(p);
        self.add_tail(l, p);
    }

    /// The tail (least recent) page of a list.
    #[inline]
    pub fn tail(&self, l: LruList) -> Option<u32> {
        let s = self.sentinel(l);
        let t = self.prev[s as usize];
        (t != s).then_some(t)
    }

    /// Walks a list from head to tail (for invariant checks).
    pub fn iter(&self, l: LruList) -> impl Iterator<Item = u32> + '_ {
        let s = self.sentinel(l);
        let mut cur = self.next[s as usize];
        std::iter::from_fn(move || {
            if cur == s {
                None
            } else {
                let p = cur;
                cur = self.next[p as usize];
                Some(p)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_rotate() {
        let mut lru = Lru::new(4);
        lru.add_head(LruList::InactiveAnon, 0);
        lru.add_head(LruList::InactiveAnon, 1);
        lru.add_tail(LruList::InactiveAnon, 2);
        assert_eq!(lru.iter(LruList::InactiveAnon).collect::<Vec<_>>(), vec![1, 0, 2]);
        assert_eq!(lru.tail(LruList::InactiveAnon), Some(2));
        lru.move_head(LruList::ActiveAnon, 2);
        assert_eq!(lru.tail(LruList::InactiveAnon), Some(0));
        assert_eq!(lru.len(LruList::ActiveAnon), 1);
        lru.remove(0);
        lru.remove(1);
        assert_eq!(lru.tail(LruList::InactiveAnon), None);
        assert_eq!(lru.list_of(2), Some(LruList::ActiveAnon));
    }
}
