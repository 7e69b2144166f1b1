//! Refault detection (`mm/workingset.c`, classic LRU, as since 5.9). When reclaim frees a page it
//! leaves a shadow entry where the page was (the swap cache slot, the file's page index) holding
//! the reclaiming cgroup and its `nonresident_age`, a clock that ticks once per eviction and per
//! activation (by refault or by reclaim putting a page back on the active list). When the page is read back, the clock's advance since then is its refault
//! distance: how many pages the cgroup let go or promoted meanwhile. If that is no more than the
//! memory its working set could have had (`workingset_test_recent`: the active file list, plus the
//! inactive file list for an anonymous page, plus the anonymous lists when swap has room, the
//! inactive one only for a file page), the page would have stayed resident with that much memory,
//! so it goes straight to the active list (`workingset_refault`).
//!
//! Not modelled: the shadow-node shrinker that bounds how many shadow entries are kept, and the
//! bucket order that coarsens the clock on machines whose memory overflows its bits.
//! (`PG_workingset` is: reclaim sets it on the pages it deactivates, and their refaults count as
//! reclaim cost.)

use super::lru::LruList;
use super::page::PG_WORKINGSET;
use super::{Counter, Guest, Replacement};

/// A shadow entry: present bit, cgroup in bits 1..9, the page's `PG_workingset` in bit 9, eviction
/// age above (`pack_shadow`).
pub type Shadow = u64;
/// No shadow entry.
pub const NO_SHADOW: Shadow = 0;

fn pack(memcg: u8, age: u64, workingset: bool) -> Shadow {
    (age << 10) | ((workingset as u64) << 9) | ((memcg as u64) << 1) | 1
}

fn unpack(s: Shadow) -> (u8, u64, bool) {
    (((s >> 1) & 0xff) as u8, s >> 10, (s >> 9) & 1 == 1)
}

impl Guest {
    /// `workingset_age_nonresident`: ticks cgroup `v`'s clock and its ancestors' (the root's).
    pub(super) fn age_nonresident(&mut self, v: u8) {
        self.memcgs[v as usize].nonresident_age += 1;
        if v != 0 {
            self.memcgs[0].nonresident_age += 1;
        }
    }

    /// `workingset_eviction`: the shadow entry of page `p`, which reclaim of cgroup `target` (0:
    /// the whole guest) frees now; the eviction ticks the clock.
    pub(super) fn workingset_eviction(&mut self, target: u8, p: u32) -> Shadow {
        let s = pack(target, self.memcgs[target as usize].nonresident_age, self.pages.has(p, PG_WORKINGSET));
        self.age_nonresident(target);
        s
    }

    /// `workingset_refault`: a page of the given type comes back where `shadow` was left. Counts
    /// the refault and says whether the page goes to the active list (Linux replacement only: the
    /// exact LRU and Windows have no active list to promote to).
    /// The activation is counted on page `p`'s cgroup and its ancestors.
    pub(super) fn workingset_refault(&mut self, shadow: Shadow, file: bool, p: u32) -> bool {
        if shadow == NO_SHADOW || self.cfg.replacement != Replacement::Linux {
            return false;
        }
        let (v, eviction, was_active) = unpack(shadow);
        let refault_ev = if file { Counter::WorkingsetRefaultFile } else { Counter::WorkingsetRefaultAnon };
        self.vmstat.inc(refault_ev);
        let distance = self.memcgs[v as usize].nonresident_age - eviction;
        // The root's sizes are the whole guest's (its statistics include its children's).
        let size = |l| if v == 0 { self.lru.len(l) } else { self.lru.len_in(v, l) };
        let mut workingset = size(LruList::ActiveFile);
        if !file {
            workingset += size(LruList::InactiveFile);
        }
        if self.swap.has_free() {
            workingset += size(LruList::ActiveAnon);
            if file {
                workingset += size(LruList::InactiveAnon);
            }
        }
        if distance > workingset {
            return false;
        }
        self.age_nonresident(v);
        self.vmstat.inc(if file { Counter::WorkingsetActivateFile } else { Counter::WorkingsetActivateAnon });
        let m = self.pages[p as usize].memcg;
        self.memcgs[m as usize].workingset_activate[file as usize] += 1;
        if m != 0 {
            self.memcgs[0].workingset_activate[file as usize] += 1;
        }
        if was_active {
            // It was active before its eviction: reclaiming its type cost a read
            // (`lru_note_cost_refault`), and it is working set again.
            self.pages.set(p, PG_WORKINGSET);
            self.lru_note_cost(m, file, 1, 0);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `workingset_test_recent`: an anonymous page refaulting within the active anonymous list's
    /// size (swap has room, no page cache) is activated, one page further is not; a page-cache
    /// refault at that distance also counts the inactive anonymous list and is activated.
    #[test]
    fn a_refault_within_the_workingset_size_is_activated() {
        let mut sim = super::super::idle_guest_with_100_pages();
        sim.with_guest(0, |g, _| {
            let pages: Vec<u32> = g.lru.iter(0, LruList::InactiveAnon).take(40).collect();
            for p in pages {
                g.lru.move_head(LruList::ActiveAnon, p);
            }
            assert_eq!((g.lru.len(LruList::ActiveAnon), g.lru.len(LruList::InactiveAnon)), (40, 60));
            // Evicted, then 39 more evictions: the clock is 40 ahead at the refault.
            let shadow = g.workingset_eviction(0, 0);
            for _ in 0..39 {
                g.workingset_eviction(0, 0);
            }
            assert!(g.workingset_refault(shadow, false, 0), "distance 40 <= 40 active anonymous pages");
            // The activation ticked the clock: a page evicted just before the first is now 41 away.
            let far = pack(0, g.memcgs[0].nonresident_age - 41, false);
            assert!(!g.workingset_refault(far, false, 0), "distance 41 > 40");
            assert!(g.workingset_refault(far, true, 0), "a file page also counts the 60 inactive anonymous pages");
            assert!(!g.workingset_refault(NO_SHADOW, false, 0), "no shadow: not a refault");
            let c = |k| g.vmstat.get(k);
            assert_eq!(
                [
                    c(Counter::WorkingsetRefaultAnon),
                    c(Counter::WorkingsetActivateAnon),
                    c(Counter::WorkingsetRefaultFile),
                    c(Counter::WorkingsetActivateFile)
                ],
                [2, 1, 1, 1]
            );
        });
    }

    #[test]
    fn shadow_entries_round_trip() {
        assert_eq!(unpack(pack(3, 123_456_789, true)), (3, 123_456_789, true));
        assert_eq!(unpack(pack(255, 7, false)), (255, 7, false));
        assert_ne!(pack(0, 0, false), NO_SHADOW, "a shadow stamped at age 0 is still a shadow");
    }
}
