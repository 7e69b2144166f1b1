//! The LRU lists: intrusive doubly-linked lists threaded through the page array, so that adding,
//! removing and rotating a page are O(1) index updates.
//!
//! The head of a list is the most recently added end (Linux `list_add`); reclaim takes from the tail.
//! Each memory cgroup has its own set of lists (its `lruvec`; number 0 is the root's), and a page
//! is on its cgroup's lists. Link slots exist for the pages used so far (the lists' heads take the
//! first slots, page `p` the slot after them plus `p`), so the lists grow with use.

use super::page::NONE;
use crate::index::grow_to;

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
/// Most lruvecs a guest can have (a page's list must fit in a byte next to `NO_LIST`).
pub const MAX_LRUVECS: u8 = (NO_LIST as usize / NR_LISTS) as u8;

impl LruList {
    /// All lists, indexed by their number.
    pub const ALL: [LruList; NR_LISTS] =
        [Self::InactiveAnon, Self::ActiveAnon, Self::InactiveFile, Self::ActiveFile, Self::Exact, Self::Standby, Self::Modified];

    /// The four lists of Linux reclaim.
    pub const LINUX: [LruList; 4] = [Self::InactiveAnon, Self::ActiveAnon, Self::InactiveFile, Self::ActiveFile];

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

/// The lists of every memory cgroup.
#[derive(Clone, Debug)]
pub struct Lru {
    /// Link slots: the lists' heads, then the pages.
    links: Vec<Link>,
    /// Per page: the list it is on, as `lruvec x NR_LISTS + list` (its head's slot), or `NO_LIST`.
    on: Vec<u8>,
    /// Pages per list of each lruvec, indexed like `on`.
    len: Vec<u64>,
    /// Pages per list over all lruvecs.
    total: [u64; NR_LISTS],
    /// Slots taken by the lists' heads (page `p` links at slot `heads + p`).
    heads: u32,
}

/// A slot's neighbours. Both in one record, so that unlinking a page costs one cache miss on its
/// own slot, not two.
#[derive(Clone, Copy, Debug)]
struct Link {
    next: u32,
    prev: u32,
}

/// Link slot of list `l`'s head in lruvec `v`.
#[inline]
fn sentinel(v: u8, l: LruList) -> u32 {
    v as u32 * NR_LISTS as u32 + l as u32
}

impl Lru {
    /// Empty lists for `lruvecs` memory cgroups (the root and its children).
    pub fn new(lruvecs: u8) -> Self {
        assert!((1..=MAX_LRUVECS).contains(&lruvecs), "1..={MAX_LRUVECS} lruvecs");
        let heads = lruvecs as u32 * NR_LISTS as u32;
        let links = (0..heads).map(|s| Link { next: s, prev: s }).collect();
        Self { links, on: Vec::new(), len: vec![0; heads as usize], total: [0; NR_LISTS], heads }
    }

    /// Link slot of page `p`.
    #[inline]
    fn slot(&self, p: u32) -> u32 {
        p + self.heads
    }

    /// Pages on a list, over all lruvecs.
    #[inline]
    pub fn len(&self, l: LruList) -> u64 {
        self.total[l as usize]
    }

    /// Page-cache pages on the Linux lists, over all lruvecs.
    #[inline]
    pub fn file(&self) -> u64 {
        self.len(LruList::InactiveFile) + self.len(LruList::ActiveFile)
    }

    /// Anonymous pages on the Linux lists, over all lruvecs.
    #[inline]
    pub fn anon(&self) -> u64 {
        self.len(LruList::InactiveAnon) + self.len(LruList::ActiveAnon)
    }

    /// Pages on a list of lruvec `v`.
    #[inline]
    pub fn len_in(&self, v: u8, l: LruList) -> u64 {
        self.len[sentinel(v, l) as usize]
    }

    /// The list a page is on, if any.
    #[inline]
    pub fn list_of(&self, p: u32) -> Option<LruList> {
        let l = *self.on.get(p as usize)?;
        (l != NO_LIST).then(|| LruList::ALL[l as usize % NR_LISTS])
    }

    /// Adds a page at the head of a list of lruvec `v`.
    pub fn add_head(&mut self, v: u8, l: LruList, p: u32) {
        self.link_after(sentinel(v, l), p, sentinel(v, l));
    }

    /// Adds a page at the tail of a list of lruvec `v` (reclaimed first).
    pub fn add_tail(&mut self, v: u8, l: LruList, p: u32) {
        let last = self.links[sentinel(v, l) as usize].prev;
        self.link_after(last, p, sentinel(v, l));
    }

    fn link_after(&mut self, at: u32, p: u32, list: u32) {
        if p as usize >= self.on.len() {
            let n = self.slot(p) as usize + 1;
            grow_to(&mut self.on, p as usize + 1, NO_LIST);
            grow_to(&mut self.links, n, Link { next: NONE, prev: NONE });
        }
        debug_assert_eq!(self.on[p as usize], NO_LIST);
        let (sp, nx) = (self.slot(p), self.links[at as usize].next);
        self.links[sp as usize].next = nx;
        self.links[sp as usize].prev = at;
        self.links[nx as usize].prev = sp;
        self.links[at as usize].next = sp;
        self.on[p as usize] = list as u8;
        self.len[list as usize] += 1;
        self.total[list as usize % NR_LISTS] += 1;
    }

    /// The lruvec of the list a page is on (it must be on one).
    #[inline]
    fn lruvec_of(&self, p: u32) -> u8 {
        debug_assert_ne!(self.on[p as usize], NO_LIST);
        (self.on[p as usize] as usize / NR_LISTS) as u8
    }

    /// Removes a page from whatever list it is on.
    pub fn remove(&mut self, p: u32) {
        let l = self.on[p as usize];
        debug_assert_ne!(l, NO_LIST);
        let sp = self.slot(p) as usize;
        let (pv, nx) = (self.links[sp].prev, self.links[sp].next);
        self.links[pv as usize].next = nx;
        self.links[nx as usize].prev = pv;
        self.on[p as usize] = NO_LIST;
        self.len[l as usize] -= 1;
        self.total[l as usize % NR_LISTS] -= 1;
    }

    /// A hint that page `p`'s links are about to be used.
    pub fn prefetch(&self, p: u32) {
        if let Some(l) = self.on.get(p as usize) {
            crate::index::prefetch(l);
            let sp = self.slot(p) as usize;
            if let Some(x) = self.links.get(sp) {
                crate::index::prefetch(x);
            }
        }
    }

    /// The page before `p` on its list (towards the head), if any, with its links fetched into the
    /// CPU's caches: a scan from the tail takes it soon. Reading ahead of a scan, `p` may have
    /// moved since it was read; the answer is then only a wasted hint.
    #[inline]
    pub fn prefetch_prev(&self, p: u32) -> Option<u32> {
        let q = self.links[self.slot(p) as usize].prev;
        (q >= self.heads).then(|| {
            crate::index::prefetch(&self.links[q as usize]);
            q - self.heads
        })
    }

    /// Removes a page from its list if it is on one (a Windows page in a working set is not).
    pub fn remove_if_on(&mut self, p: u32) {
        if self.list_of(p).is_some() {
            self.remove(p);
        }
    }

    /// Moves a page to the head of a list (possibly another one) of the lruvec it is on.
    pub fn move_head(&mut self, l: LruList, p: u32) {
        let v = self.lruvec_of(p);
        self.remove(p);
        self.add_head(v, l, p);
    }

    /// Moves a page to the head of the list it is on, unless it is there already (the common case
    /// of consecutive references to one page).
    #[inline]
    pub fn touch_head(&mut self, p: u32) {
        let head = self.on[p as usize] as u32;
        if self.links[head as usize].next != self.slot(p) {
            self.remove(p);
            self.link_after(head, p, head);
        }
    }

    /// Moves a page to the tail of a list of the lruvec it is on.
    pub fn move_tail(&mut self, l: LruList, p: u32) {
        let v = self.lruvec_of(p);
        self.remove(p);
        self.add_tail(v, l, p);
    }

    /// The tail (least recent) page of a list of lruvec `v`.
    #[inline]
    pub fn tail(&self, v: u8, l: LruList) -> Option<u32> {
        let s = sentinel(v, l);
        let t = self.links[s as usize].prev;
        (t != s).then(|| t - self.heads)
    }

    /// Walks a list of lruvec `v` from head to tail (for invariant checks).
    pub fn iter(&self, v: u8, l: LruList) -> impl Iterator<Item = u32> + '_ {
        let s = sentinel(v, l);
        let mut cur = self.links[s as usize].next;
        std::iter::from_fn(move || {
            if cur == s {
                None
            } else {
                let p = cur - self.heads;
                cur = self.links[cur as usize].next;
                Some(p)
            }
        })
    }

    /// Number of lruvecs.
    pub fn lruvecs(&self) -> u8 {
        (self.heads as usize / NR_LISTS) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_rotate() {
        let mut lru = Lru::new(2);
        lru.add_head(0, LruList::InactiveAnon, 0);
        lru.add_head(0, LruList::InactiveAnon, 1);
        lru.add_tail(0, LruList::InactiveAnon, 2);
        lru.add_head(1, LruList::InactiveAnon, 3);
        assert_eq!(lru.iter(0, LruList::InactiveAnon).collect::<Vec<_>>(), vec![1, 0, 2]);
        assert_eq!(lru.tail(0, LruList::InactiveAnon), Some(2));
        lru.move_head(LruList::ActiveAnon, 2);
        assert_eq!(lru.tail(0, LruList::InactiveAnon), Some(0));
        assert_eq!(lru.len(LruList::ActiveAnon), 1);
        // A cgroup's page stays on its cgroup's lists when it moves.
        lru.move_head(LruList::ActiveAnon, 3);
        assert_eq!((lru.len_in(0, LruList::ActiveAnon), lru.len_in(1, LruList::ActiveAnon), lru.len(LruList::ActiveAnon)), (1, 1, 2));
        assert_eq!(lru.tail(1, LruList::ActiveAnon), Some(3));
        lru.touch_head(2);
        lru.remove(0);
        lru.remove(1);
        assert_eq!(lru.tail(0, LruList::InactiveAnon), None);
        assert_eq!(lru.list_of(2), Some(LruList::ActiveAnon));
    }
}
