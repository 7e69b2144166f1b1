//! The LRU lists: intrusive doubly-linked lists threaded through the page array, so that adding,
//! removing and rotating a page are O(1) index updates.
//!
//! The head of a list is the most recently added end (Linux `list_add`); reclaim takes from the tail.
//! Link slots exist for the pages used so far (slot `p + NR_LISTS` for page `p`; the lists' heads
//! take slots 0..NR_LISTS), so the lists grow with use.

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
    /// Windows: trimmed pages whose pagefile copy is current (clean); repurposed oldest first.
    Standby = 5,
    /// Windows: trimmed dirty pages waiting for the modified page writer.
    Modified = 6,
}

/// Number of lists.
pub const NR_LISTS: usize = 7;
/// Marker for "on no list".
pub const NO_LIST: u8 = u8::MAX;

impl LruList {
    /// All lists, indexed by their number.
    pub const ALL: [LruList; NR_LISTS] =
        [Self::InactiveAnon, Self::ActiveAnon, Self::InactiveFile, Self::ActiveFile, Self::Exact, Self::Standby, Self::Modified];

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
}

impl Default for Lru {
    fn default() -> Self {
        Self::new()
    }
}

/// Link slot of page `p`.
#[inline]
fn slot(p: u32) -> u32 {
    p + NR_LISTS as u32
}

/// Link slot of list `l`'s head.
#[inline]
fn sentinel(l: LruList) -> u32 {
    l as u32
}

impl Lru {
    /// Empty lists.
    pub fn new() -> Self {
        let s: Vec<u32> = (0..NR_LISTS as u32).collect();
        Self { next: s.clone(), prev: s, on: Vec::new(), len: [0; NR_LISTS] }
    }

    /// Pages on a list.
    #[inline]
    pub fn len(&self, l: LruList) -> u64 {
        self.len[l as usize]
    }

    /// The list a page is on, if any.
    #[inline]
    pub fn list_of(&self, p: u32) -> Option<LruList> {
        let l = *self.on.get(p as usize)?;
        (l != NO_LIST).then(|| LruList::ALL[l as usize])
    }

    /// Adds a page at the head of a list.
    pub fn add_head(&mut self, l: LruList, p: u32) {
        self.link_after(sentinel(l), p, l);
    }

    /// Adds a page at the tail of a list (reclaimed first).
    pub fn add_tail(&mut self, l: LruList, p: u32) {
        let last = self.prev[sentinel(l) as usize];
        self.link_after(last, p, l);
    }

    fn link_after(&mut self, at: u32, p: u32, l: LruList) {
        if p as usize >= self.on.len() {
            self.on.resize(p as usize + 1, NO_LIST);
            self.next.resize(slot(p) as usize + 1, NONE);
            self.prev.resize(slot(p) as usize + 1, NONE);
        }
        debug_assert_eq!(self.on[p as usize], NO_LIST);
        let (sp, nx) = (slot(p), self.next[at as usize]);
        self.next[sp as usize] = nx;
        self.prev[sp as usize] = at;
        self.prev[nx as usize] = sp;
        self.next[at as usize] = sp;
        self.on[p as usize] = l as u8;
        self.len[l as usize] += 1;
    }

    /// Removes a page from whatever list it is on.
    pub fn remove(&mut self, p: u32) {
        let l = self.on[p as usize];
        debug_assert_ne!(l, NO_LIST);
        let sp = slot(p) as usize;
        let (pv, nx) = (self.prev[sp], self.next[sp]);
        self.next[pv as usize] = nx;
        self.prev[nx as usize] = pv;
        self.on[p as usize] = NO_LIST;
        self.len[l as usize] -= 1;
    }

    /// Removes a page from its list if it is on one (a Windows page in a working set is not).
    pub fn remove_if_on(&mut self, p: u32) {
        if self.list_of(p).is_some() {
            self.remove(p);
        }
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
        if self.next[sentinel(l) as usize] != slot(p) {
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
        let s = sentinel(l);
        let t = self.prev[s as usize];
        (t != s).then(|| t - NR_LISTS as u32)
    }

    /// Walks a list from head to tail (for invariant checks).
    pub fn iter(&self, l: LruList) -> impl Iterator<Item = u32> + '_ {
        let s = sentinel(l);
        let mut cur = self.next[s as usize];
        std::iter::from_fn(move || {
            if cur == s {
                None
            } else {
                let p = cur - NR_LISTS as u32;
                cur = self.next[cur as usize];
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
        let mut lru = Lru::new();
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
