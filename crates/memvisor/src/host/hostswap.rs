//! Host swap (DESIGN.md section 4): the host takes pages behind the guest's back. Victims are drawn
//! at random among a VM's backed pages, with no knowledge of their use (so a hot kernel page can go);
//! each is first offered to the VM's compression cache (kept if it compresses to half a page) and
//! otherwise written to the VM's swap file on its datastore. A later touch stalls the vCPU until the
//! page is back. A guest that pages out a page the host has swapped must first have it read back:
//! double paging arises by itself.
//!
//! The reclaim daemon works toward each VM's swap target at the host CPU's pace: each step spends
//! `STEP_NS` of host CPU at the per-page costs, then sleeps until its next step.

use super::{Compressibility, Entry, GuestMemory, Host, HostVm, P2m, PageState, flags};
use crate::clock::{Event, EventQueue};
use crate::devices::Datastore;
use crate::rng::Rng;
use crate::slots::Slots;
use crate::units::PAGE_SIZE;
use rand::Rng as _;

/// Host CPU a reclaim step spends before yielding (the daemon's time slice): 1 ms [assumed: neither
/// ESX nor KVM publishes one; the rate of reclaim is set by the per-page costs, not by this].
pub const STEP_NS: u64 = 1_000_000;
/// When a step could take nothing (every candidate page busy, swap file full), the daemon looks
/// again this much later: 100 ms [assumed; a retry interval, not published].
pub const BACKOFF_NS: u64 = 100_000_000;

/// A VM's swap file: as large as the VM's memory (ESX creates a .vswp of the configured memory
/// less the reservation; the whole memory is the upper bound), on a datastore.
#[derive(Clone, Debug)]
pub struct SwapFile {
    slots: Slots,
    datastore: u32,
    base: u64,
}

impl SwapFile {
    /// A swap file of `pages` slots at byte `base` of datastore `datastore`.
    pub fn new(pages: u32, datastore: u32, base: u64) -> Self {
        Self { slots: Slots::new(pages), datastore, base }
    }

    /// Reads slot `s` at `now`; returns when the data is in.
    pub fn read(&self, s: u32, now: u64, ds: &mut [Datastore]) -> u64 {
        ds[self.datastore as usize].device.submit(now, self.base + s as u64 * PAGE_SIZE, PAGE_SIZE, false)
    }

    /// Writes slot `s` at `now`; returns when the data is out.
    fn write(&self, s: u32, now: u64, ds: &mut [Datastore]) -> u64 {
        ds[self.datastore as usize].device.submit(now, self.base + s as u64 * PAGE_SIZE, PAGE_SIZE, true)
    }

    /// Frees a slot.
    pub fn free(&mut self, s: u32) {
        self.slots.free(s);
    }

    /// Whether a slot is in use.
    pub fn is_used(&self, s: u32) -> bool {
        self.slots.is_used(s)
    }

    /// Slots in use.
    pub fn used(&self) -> u64 {
        self.slots.nr_used()
    }
}

/// A host swap write in flight.
#[derive(Clone, Copy, Debug)]
pub struct HostIo {
    /// Guest page being written.
    pub ppn: u32,
    /// Its slot in the swap file.
    pub slot: u32,
}

/// A page of `p2m` drawn uniformly among those `ok` accepts: rejection sampling over the VM's pages,
/// then, when accepted pages are rare (64 probes all refused), a scan from a random start, which
/// favours pages that follow long runs of refused ones: uniform there too would take a count of
/// the whole map per draw, half again the wall time of `esx-overcommit`'s reserved variant.
pub fn random_page(p2m: &P2m, rng: &mut Rng, ok: impl Fn(u32, Entry) -> bool) -> Option<u32> {
    let n = p2m.len();
    if n == 0 {
        return None;
    }
    for _ in 0..64 {
        let p = rng.random_range(0..n);
        if ok(p, p2m.get(p)) {
            return Some(p);
        }
    }
    let start = rng.random_range(0..n);
    (start..n).chain(0..start).find(|&p| ok(p, p2m.get(p)))
}

/// Whether the host may take (or share) a page in this state: backed, nothing in flight.
pub(super) fn takeable(e: Entry) -> bool {
    e.is_backed() && e.flags() & (flags::SWAPOUT | flags::READING) == 0
}

/// A victim for direct host reclaim in VM `vm`, other than `except`: drawn as the daemon draws
/// its own, from the host's direct-reclaim stream (the daemon's is not reachable from a guest's
/// fault).
pub(super) fn random_victim(v: &HostVm, rng: &mut Rng, except: Option<u32>) -> Option<u32> {
    random_page(&v.p2m, rng, |p, e| Some(p) != except && takeable(e))
}

impl Host {
    /// Direct host reclaim: swaps page `victim` of `vm` out now. The victim's frame is handed to the
    /// caller (so `granted` drops by one here); returns when the write completes, or `None` if the
    /// swap file is full.
    pub(super) fn swap_out_now(&mut self, vm: u32, victim: u32, now: u64, ds: &mut [Datastore]) -> Option<u64> {
        // Host swap never swaps large pages: it breaks them first.
        self.break_large_pages(vm);
        let v = &mut self.vms[vm as usize];
        if !v.above_reservation() && v.granted < v.grant_limit {
            v.stats.taken_below_reservation += 1;
        }
        let slot = v.swapfile.slots.alloc()?;
        let done = v.swapfile.write(slot, now + self.costs.swap_out_ns, ds);
        v.p2m.set(victim, Entry::new(PageState::Swapped(slot)));
        v.swapped += 1;
        v.granted -= 1;
        v.stats.swap_out += 1;
        self.invalidations.push((vm, victim));
        Some(done)
    }

    /// One step of the reclaim daemon at `now`: for each VM below its swap target, in turn, take
    /// random victims until the step's CPU is spent. Returns when the next step is due, or `None`
    /// if every target is met (the daemon sleeps until a target rises or a page comes back).
    pub fn reclaim_step(
        &mut self,
        now: u64,
        rng: &mut Rng,
        guests: &mut [&mut dyn GuestMemory],
        ds: &mut [Datastore],
        events: &mut EventQueue,
    ) -> Option<u64> {
        self.finish_reads(now);
        let mut spent = 0;
        let mut progress = true;
        let mut any = false;
        while spent < STEP_NS && progress {
            progress = false;
            for vm in 0..guests.len() {
                let v = &self.vms[vm];
                // Never below the reservation, whatever the target says.
                if v.reclaimed() >= v.swap_target || !v.above_reservation() || spent >= STEP_NS {
                    continue;
                }
                let Some(p) = random_page(&v.p2m, rng, |_, e| takeable(e)) else { continue };
                if guests[vm].touched_after(p, now + spent) {
                    // The guest is using it at this very moment: a swap-out would be cancelled.
                    spent += self.costs.swap_out_ns;
                    progress = true;
                    continue;
                }
                spent += self.reclaim_page(vm as u32, p, now + spent, guests, ds, events);
                progress = true;
                any = true;
            }
        }
        let work = self.vms.iter().any(|v| v.reclaimed() < v.swap_target && v.above_reservation());
        match (work, any) {
            (false, _) => None,
            (true, true) => Some(now + spent.max(STEP_NS)),
            (true, false) => Some(now + BACKOFF_NS),
        }
    }

    /// Shares page `p` if its content is shared or hinted already ("the system always attempts to
    /// share a page before paging it out", Waldspurger 2002, 4.2; KB 1021095 for broken large
    /// pages), else compresses it into the cache if it fits, else starts its swap-out. Returns the
    /// host CPU spent.
    fn reclaim_page(
        &mut self,
        vm: u32,
        p: u32,
        now: u64,
        guests: &mut [&mut dyn GuestMemory],
        ds: &mut [Datastore],
        events: &mut EventQueue,
    ) -> u64 {
        let mut spent = 0;
        let id = guests[vm as usize].content_id(p);
        if self.pshare.as_ref().is_some_and(|s| s.shares_before_swap()) {
            self.break_large_pages(vm);
            spent += self.pshare.as_ref().map_or(0, |s| s.settings.hash_ns);
            if self.try_share(vm, p, id, true, guests) {
                // Sharing freed the frame; the target counts swapped and compressed pages, so the
                // daemon goes on to the next victim.
                self.vms[vm as usize].stats.shared_instead += 1;
                return spent;
            }
        }
        guests[vm as usize].invalidate(p);
        let v = &mut self.vms[vm as usize];
        if !v.above_reservation() {
            v.stats.taken_below_reservation += 1;
        }
        if !v.zip.is_disabled() {
            spent += self.costs.compress_ns;
            // The page's kind and identity are the guest's; taking it did not change them.
            let content = guests[vm as usize].content(p);
            let size = Compressibility::measured().size_of(self.compressor, content, id);
            if size <= super::ZIP_SLOT_BYTES {
                // Measured before any eviction: an eviction frees a slot but no frame leaves the
                // host, so only the cache's net growth is taken from the free frames.
                let frames = v.zip.frames();
                if v.zip.is_full() {
                    // The oldest compressed page goes to the swap file to make room.
                    let (slot, old) = v.zip.oldest().expect("a full cache holds pages");
                    let Some(s) = v.swapfile.slots.alloc() else { return spent };
                    v.swapfile.write(s, now, ds);
                    v.zip.remove(slot);
                    v.p2m.set(old, Entry::new(PageState::Swapped(s)));
                    v.swapped += 1;
                    v.stats.swap_out += 1;
                    v.stats.zip_evicted += 1;
                }
                let slot = v.zip.insert(p);
                v.p2m.set(p, Entry::new(PageState::Compressed(slot)));
                v.granted -= 1;
                // The freed frame, less any frame the cache grew by.
                self.free += 1;
                self.free -= v.zip.frames() - frames;
                v.stats.zip += 1;
                return spent;
            }
        }
        let Some(slot) = v.swapfile.slots.alloc() else { return spent };
        spent += self.costs.swap_out_ns;
        let done = v.swapfile.write(slot, now + spent, ds);
        let e = v.p2m.get(p).with_flag(flags::SWAPOUT, true).with_payload(slot);
        v.p2m.set(p, e);
        v.swapping_out += 1;
        let io = HostIo { ppn: p, slot };
        let id = match self.io_free.pop() {
            Some(i) => {
                self.io[i as usize] = Some(io);
                i
            }
            None => {
                self.io.push(Some(io));
                (self.io.len() - 1) as u32
            }
        };
        events.push(done, Event::HostIoDone { vm, io: id });
        spent
    }

    /// A swap-out write completed: the frame is freed, unless the guest touched or ballooned the
    /// page meanwhile (then the copy on disk is discarded).
    pub fn io_done(&mut self, vm: u32, id: u32) {
        let io = self.io[id as usize].take().expect("host I/O in flight");
        self.io_free.push(id);
        let v = &mut self.vms[vm as usize];
        let e = v.p2m.get(io.ppn);
        if e.is_backed() && e.flags() & flags::SWAPOUT != 0 && e.payload() == io.slot {
            v.p2m.set(io.ppn, Entry::new(PageState::Swapped(io.slot)));
            v.swapping_out -= 1;
            v.swapped += 1;
            v.granted -= 1;
            v.stats.swap_out += 1;
            self.free += 1;
        } else {
            v.swapfile.free(io.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Victims are uniform over the takeable pages when those lie in one run (memory filled in
    /// order) a quarter of the map long: a draw that started from a random page and took the next
    /// takeable one would pile onto the run's first page. And the stream decides: another seed,
    /// other victims.
    #[test]
    fn victims_are_uniform_over_takeable_pages_and_follow_the_stream() {
        let (n, run) = (1u32 << 16, 16_384u32);
        let mut p2m = P2m::new(n);
        p2m.set_range(1000, 1000 + run, Entry::new(PageState::Backed));
        let draw = |seed: u64| {
            let mut rng = crate::rng::stream(seed, &[crate::rng::DIRECT_RECLAIM_STREAM]);
            (0..20_000).map(|_| random_page(&p2m, &mut rng, |_, e| takeable(e)).unwrap()).collect::<Vec<u32>>()
        };
        let a = draw(1);
        assert!(a.iter().all(|&p| (1000..1000 + run).contains(&p)), "only takeable pages are drawn");
        // 64 bins over the run: chi-squared with 63 degrees of freedom, 0.1 % critical value 103.4.
        let mut bins = [0f64; 64];
        for &p in &a {
            bins[((p - 1000) / (run / 64)) as usize] += 1.0;
        }
        let e = a.len() as f64 / 64.0;
        let chi2: f64 = bins.iter().map(|o| (o - e) * (o - e) / e).sum();
        assert!(chi2 < 103.4, "victims are not uniform over the run: chi2 = {chi2:.1}");
        assert_eq!(a, draw(1), "the same stream draws the same victims");
        let b = draw(2);
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        // Two independent uniform draws over 16,384 pages agree about 20,000 / 16,384 = 1.2 times.
        assert!(same < 10, "seeds 1 and 2 drew the same page {same} times of 20,000");
        let mut rng = crate::rng::stream(3, &[crate::rng::DIRECT_RECLAIM_STREAM]);
        assert_eq!(random_page(&P2m::new(1 << 10), &mut rng, |_, e| takeable(e)), None, "nothing takeable, no victim");
    }
}
