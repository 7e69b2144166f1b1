//! The balloon's host side: a page the guest's driver hands over gives its frame (or swap slot,
//! or compressed copy) back to the host; a page the driver takes back is unbacked until the guest
//! touches it again.

use super::{Entry, Host, PageState, flags};

impl Host {
    /// The balloon driver of VM `vm` took guest page `ppn` (a shared page drops its share).
    pub fn balloon(&mut self, vm: u32, ppn: u32) {
        let v = &mut self.vms[vm as usize];
        let e = v.p2m.get(ppn);
        match e.state() {
            PageState::Backed => {
                if e.flags() & flags::SWAPOUT != 0 {
                    v.swapping_out -= 1;
                }
                if e.flags() & flags::READING != 0 {
                    v.reading.remove(ppn);
                }
                if !v.above_reservation() {
                    v.stats.taken_below_reservation += 1;
                }
                v.granted -= 1;
                self.free += 1;
            }
            PageState::Swapped(slot) => {
                v.swapfile.free(slot);
                v.swapped -= 1;
            }
            PageState::Compressed(slot) => {
                let frames = v.zip.frames();
                v.zip.remove(slot);
                self.free += frames - v.zip.frames();
            }
            PageState::Unbacked => {}
            PageState::Shared(f) => self.unshare(vm, ppn, f),
            PageState::Ballooned => unreachable!("ballooning a page in state {:?}", e.state()),
        }
        let v = &mut self.vms[vm as usize];
        v.p2m.set(ppn, Entry::new(PageState::Ballooned));
        v.ballooned += 1;
        v.stats.ballooned_total += 1;
    }

    /// The balloon driver of VM `vm` releases guest page `ppn` back to its guest. A host that
    /// backs guests when it builds them (Xen) backs the page now (`XENMEM_populate_physmap`),
    /// taking ephemeral tmem pages if it must; with no frame to give, or with the VM at its
    /// `max_pages` counting its persistent tmem pages, it refuses and the page stays in the
    /// balloon. Others back it on its next touch. Returns whether it was released.
    pub fn unballoon(&mut self, vm: u32, ppn: u32) -> bool {
        let backed = self.populate_on_release;
        if backed {
            let v = &self.vms[vm as usize];
            let pers = self.tmem.as_ref().map_or(0, |t| t.pers_frames(vm));
            if v.granted + pers >= v.p2m.len() as u64 || !self.tmem_relinquish() {
                return false;
            }
        }
        let v = &mut self.vms[vm as usize];
        debug_assert_eq!(v.p2m.get(ppn).state(), PageState::Ballooned);
        v.p2m.set(ppn, Entry::new(if backed { PageState::Backed } else { PageState::Unbacked }));
        if backed {
            self.free -= 1;
            v.granted += 1;
        }
        v.ballooned -= 1;
        v.stats.unballooned_total += 1;
        true
    }

    /// The balloon size VM `vm`'s driver should work toward: the policy's target, but never so
    /// far that the VM would hold less than its reservation (the host keeps that floor whatever
    /// the targets say, as it does for host swap).
    pub fn balloon_target(&self, vm: u32) -> u64 {
        let v = &self.vms[vm as usize];
        v.balloon_target.min(v.ballooned + v.granted.saturating_sub(v.reservation_pages()))
    }
}
