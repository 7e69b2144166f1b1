//! Denali's demand pager (the `denali` host profile; seed 004 and Whitaker et al., OSDI 2002,
//! section 3.2.2): guests have no virtual memory of their own, so the isolation kernel pages their
//! physical memory. Every VM has a swap region, statically allocated when it is created and large
//! enough for its whole address space, so a page's place on disk is computed from VM and page and
//! never stored; frames are reclaimed with a clock over the reference bits of every resident page
//! (Denali's WSClock without its virtual time stamps). A VM nobody touches loses every frame to the
//! hand and keeps only its residual kernel metadata, which the host holds pinned.
//!
//! State grows with what is resident: a frame table for machine memory, and per VM a map of its
//! resident pages (empty, unallocated, for a paged-out VM) plus its swap region's base.

use rustc_hash::FxHashMap;

use crate::devices::Device;
use crate::units::PAGE_SIZE;

const FREE: u64 = u64::MAX;

/// One machine frame: which VM page it holds and when its contents are in (a page-in in flight
/// completes then).
#[derive(Clone, Copy, Debug)]
struct Frame {
    owner: u64,
    ready: u64,
}

/// A VM as the pager sees it.
#[derive(Clone, Debug, Default)]
pub struct PagerVm {
    /// First page of the VM's swap region on the swap disk.
    swap_base: u64,
    /// Pages of the VM's physical address space.
    pages: u32,
    resident: FxHashMap<u32, u32>,
    /// Pages read in (faults), cumulative.
    pub page_ins: u64,
    /// Dirty pages written out when their frame was taken, cumulative.
    pub page_outs: u64,
}

impl PagerVm {
    /// Resident pages.
    pub fn resident(&self) -> usize {
        self.resident.len()
    }
}

/// Cumulative host counters.
#[derive(Clone, Debug, Default)]
pub struct PagerStats {
    /// Faults that read a page from a swap region.
    pub page_ins: u64,
    /// Dirty pages written back when their frame was taken.
    pub page_outs: u64,
    /// Frames the clock took from a resident page.
    pub evictions: u64,
}

/// Machine memory for guest pages, the VMs' swap regions and the clock.
pub struct Pager {
    frames: Vec<Frame>,
    referenced: Vec<u64>,
    dirty: Vec<u64>,
    free: Vec<u32>,
    hand: usize,
    vms: Vec<PagerVm>,
    swap: Device,
    resident_vms: usize,
    /// Counters.
    pub stats: PagerStats,
}

fn bit(v: &[u64], i: usize) -> bool {
    v[i / 64] >> (i % 64) & 1 == 1
}

fn assign(v: &mut [u64], i: usize, on: bool) {
    let m = 1u64 << (i % 64);
    if on { v[i / 64] |= m } else { v[i / 64] &= !m }
}

impl Pager {
    /// A pager over `frames` frames for guest pages, swapping to `swap`.
    pub fn new(frames: u32, swap: Device) -> Self {
        let n = frames as usize;
        Self {
            frames: vec![Frame { owner: FREE, ready: 0 }; n],
            referenced: vec![0; n.div_ceil(64)],
            dirty: vec![0; n.div_ceil(64)],
            free: (0..frames).rev().collect(),
            hand: 0,
            vms: Vec::new(),
            swap,
            resident_vms: 0,
            stats: PagerStats::default(),
        }
    }

    /// Adds a VM of `pages` pages, its swap region following the previous VM's; returns its index.
    /// Its pages start on disk: a VM is created paged out.
    pub fn add_vm(&mut self, pages: u32) -> u32 {
        let swap_base = self.vms.last().map_or(0, |v| v.swap_base + v.pages as u64);
        self.vms.push(PagerVm { swap_base, pages, ..Default::default() });
        self.vms.len() as u32 - 1
    }

    /// VM `vm`.
    pub fn vm(&self, vm: u32) -> &PagerVm {
        &self.vms[vm as usize]
    }

    /// Frames for guest pages.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// VMs with at least one resident page.
    pub fn resident_vms(&self) -> usize {
        self.resident_vms
    }

    /// Frames holding no page.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// The swap disk.
    pub fn swap_device(&self) -> &Device {
        &self.swap
    }

    fn slot_offset(&self, owner: u64) -> u64 {
        let (vm, page) = ((owner >> 32) as usize, owner as u32);
        (self.vms[vm].swap_base + page as u64) * PAGE_SIZE
    }

    /// The VM touches its page `page` at `now` (writing if `write`); returns when the page can be
    /// used: `now` if resident, else when the read from its swap region completes (and any dirty
    /// page whose frame it takes has been queued for writing first).
    pub fn touch(&mut self, now: u64, vm: u32, page: u32, write: bool) -> u64 {
        debug_assert!(page < self.vms[vm as usize].pages, "VM {vm} has no page {page}");
        if let Some(&f) = self.vms[vm as usize].resident.get(&page) {
            let f = f as usize;
            assign(&mut self.referenced, f, true);
            if write {
                assign(&mut self.dirty, f, true);
            }
            return self.frames[f].ready.max(now);
        }
        let f = match self.free.pop() {
            Some(f) => f as usize,
            None => self.evict(now),
        };
        let owner = (vm as u64) << 32 | page as u64;
        let ready = self.swap.submit(now, self.slot_offset(owner), PAGE_SIZE, false);
        self.frames[f] = Frame { owner, ready };
        assign(&mut self.referenced, f, true);
        assign(&mut self.dirty, f, write);
        let v = &mut self.vms[vm as usize];
        self.resident_vms += v.resident.is_empty() as usize;
        v.resident.insert(page, f as u32);
        v.page_ins += 1;
        self.stats.page_ins += 1;
        ready
    }

    /// The clock: the hand clears reference bits until it meets an unreferenced page whose
    /// contents are in, writes it out if dirty, and takes its frame.
    fn evict(&mut self, now: u64) -> usize {
        let n = self.frames.len();
        loop {
            let f = self.hand;
            self.hand = (self.hand + 1) % n;
            let fr = self.frames[f];
            if fr.owner == FREE || fr.ready > now {
                continue;
            }
            if bit(&self.referenced, f) {
                assign(&mut self.referenced, f, false);
                continue;
            }
            let (vm, page) = ((fr.owner >> 32) as usize, fr.owner as u32);
            if bit(&self.dirty, f) {
                self.swap.submit(now, self.slot_offset(fr.owner), PAGE_SIZE, true);
                self.vms[vm].page_outs += 1;
                self.stats.page_outs += 1;
            }
            let v = &mut self.vms[vm];
            v.resident.remove(&page);
            if v.resident.is_empty() {
                // A paged-out VM keeps no map at all.
                v.resident = FxHashMap::default();
                self.resident_vms -= 1;
            }
            self.stats.evictions += 1;
            return f;
        }
    }

    /// Simulator bytes the pager holds for VM `vm` beyond its resident pages' entries.
    pub fn vm_bytes(&self, vm: u32) -> usize {
        let v = &self.vms[vm as usize];
        std::mem::size_of::<PagerVm>() + v.resident.capacity() * (std::mem::size_of::<(u32, u32)>() + 1)
    }

    /// Checks that every frame is free or holds one VM page that maps it, and nothing else.
    pub fn check(&self) -> Result<(), String> {
        let mut owned = 0usize;
        for (i, v) in self.vms.iter().enumerate() {
            for (&page, &f) in &v.resident {
                let want = (i as u64) << 32 | page as u64;
                match self.frames.get(f as usize) {
                    Some(fr) if fr.owner == want => owned += 1,
                    _ => return Err(format!("pager: VM {i} page {page} maps frame {f}, which does not hold it")),
                }
            }
        }
        let mut free = vec![false; self.frames.len()];
        for &f in &self.free {
            if self.frames[f as usize].owner != FREE || std::mem::replace(&mut free[f as usize], true) {
                return Err(format!("pager: frame {f} is on the free list but held, or listed twice"));
            }
        }
        let with_pages = self.vms.iter().filter(|v| !v.resident.is_empty()).count();
        if with_pages != self.resident_vms {
            return Err(format!("pager: {with_pages} VMs have resident pages, the count says {}", self.resident_vms));
        }
        if owned + self.free.len() != self.frames.len() {
            return Err(format!(
                "pager: {} frames, {owned} hold VM pages, {} free: frames are lost or held twice",
                self.frames.len(),
                self.free.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::DeviceKind;

    #[test]
    fn paged_out_vm_pays_page_ins_and_the_clock_takes_idle_pages_first() {
        let mut p = Pager::new(8, Device::new(DeviceKind::Hdd.defaults()));
        let (a, b) = (p.add_vm(16), p.add_vm(16));
        for page in 0..7 {
            p.touch(0, b, page, false);
        }
        // A fresh VM is paged out: its first touch reads from its swap region.
        let t = p.touch(0, a, 3, true);
        assert!(t >= 8_000_000, "a page-in pays the disk's seek: ready at {t}");
        assert_eq!(p.touch(t, a, 3, true), t, "then it is resident");
        assert_eq!(p.free_frames(), 0);
        p.check().unwrap();
        // The first eviction finds every bit set: the hand clears them all and takes frame 0.
        let now = 1_000_000_000;
        p.touch(now, b, 7, false);
        assert_eq!(p.vm(b).resident(), 7);
        // B goes on using its pages, A does not: the next frame is A's, though the hand meets
        // six of B's first.
        for page in 1..8 {
            p.touch(now, b, page, false);
        }
        p.touch(now, b, 8, false);
        assert_eq!(p.vm(a).resident(), 0, "the clock took the idle VM's page");
        assert_eq!(p.vm(a).page_outs, 1, "it was dirty, so it was written to A's region");
        assert_eq!(p.vm(b).resident(), 8);
        p.check().unwrap();
    }
}
