//! The host: machine memory, each VM's physical-to-machine map ([`P2m`]), per-VM resource settings
//! and admission control, and the mechanisms that take memory back from guests: the balloon back
//! end, host swap, the compression cache and the active-memory sampler. Frames are counted, not
//! named: a private frame is identified by the one page it backs.
//!
//! Mechanisms work toward targets a policy sets (balloon size, pages kept swapped or compressed)
//! at their own rates; none decides how much to take or from whom, with one exception that cannot
//! wait for a policy: when a guest touches a page and no frame is free, direct host reclaim takes
//! one at once, from the VM whose targets are furthest from met (the policy's choice, served
//! early), else from the VM most above its reservation (`take_frame`).

mod admission;
mod balloon_backend;
mod blkback;
mod hostswap;
pub mod ksm;
mod p2m;
mod pager;
mod pcpu;
mod profile;
mod pshare;
mod sampler;
mod tmem;
mod zip;

pub use crate::content::{Compressibility, Compressor, Content};
pub use admission::{AdmissionVm, admit};
pub use blkback::{BLKIF_MAX_SEGMENTS_PER_REQUEST, Blkback};
pub use hostswap::{HostIo, SwapFile};

pub use p2m::{Entry, P2m, PageState, flags};
pub use pager::{Pager, PagerStats, PagerVm};
pub use pcpu::{CREDIT_SLICE_NS, Grant, Pcpus, VcpuId};
pub use profile::HostProfile;
pub use pshare::{HostKsm, Pshare, PshareSettings, VmShare, ZERO_PAGE};
pub use sampler::Sample;
pub use tmem::{ClientStats, GlobalStats, Pool, PoolKind, PoolStats, Put, SUBPAGE_MAX_BYTES, Tmem, TmemSettings};
pub use zip::{ZIP_SLOT_BYTES, ZipCache};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::devices::Datastore;
use crate::rng::Rng;
use crate::units::{PAGE_SIZE, human_bytes};

/// Per-VM resource settings (ESX terms; DESIGN.md section 4).
#[derive(Clone, Debug, PartialEq)]
pub struct VmResources {
    /// Guaranteed machine memory, bytes.
    pub reservation: u64,
    /// Most machine memory the VM may be granted, bytes.
    pub limit: u64,
    /// Relative claim on memory under contention.
    pub shares: u64,
    /// Machine memory the virtualization layer needs for this VM, bytes.
    pub overhead: u64,
}

/// CPU costs of the host's reclamation, per page (DESIGN.md section 3).
#[derive(Clone, Debug, PartialEq)]
pub struct HostCosts {
    /// Host CPU to swap a page out (the write is the device's): 48.9 us, Difference Engine
    /// (Gupta et al., OSDI 2008), table 2.
    pub swap_out_ns: u64,
    /// Compressing a page: 29.7 us, same table.
    pub compress_ns: u64,
    /// Decompressing a page: 10.4 us, same table.
    pub decompress_ns: u64,
    /// dom0's CPU per ring request of its block backend (`blkback::DEFAULT_REQUEST_NS`, 25 us
    /// \[assumed\]).
    pub blkback_request_ns: u64,
}

impl Default for HostCosts {
    fn default() -> Self {
        Self { swap_out_ns: 48_900, compress_ns: 29_700, decompress_ns: 10_400, blkback_request_ns: blkback::DEFAULT_REQUEST_NS }
    }
}

/// A VM's vCPU stalls on host reclamation, counted as they pass. A stall is known in full when it
/// starts (the host says when the page will be ready), but a sample taken during it counts only
/// what has passed, so the total never runs ahead of the time the vCPUs spent.
#[derive(Clone, Debug, Default)]
pub struct HostWaits {
    /// Stalls over by the time the latest one began, ns.
    done_ns: u64,
    /// The others, (start, end): at most one a vCPU.
    pending: Vec<(u64, u64)>,
}

impl HostWaits {
    /// A vCPU stalls from `start` for `ns`.
    pub fn note(&mut self, start: u64, ns: u64) {
        let mut done = 0;
        self.pending.retain(|&(s, e)| {
            let over = e <= start;
            if over {
                done += e - s;
            }
            !over
        });
        self.done_ns += done;
        self.pending.push((start, start + ns));
    }

    /// Stall time that has passed by `at`, ns.
    pub fn ns_at(&self, at: u64) -> u64 {
        self.done_ns + self.pending.iter().map(|&(s, e)| e.min(at).saturating_sub(s)).sum::<u64>()
    }
}

/// Per-VM host counters (esxtop names in the comments).
#[derive(Clone, Debug, Default)]
pub struct HostVmStats {
    /// Pages written to the swap file (SWW, cumulative).
    pub swap_out: u64,
    /// Pages read back from the swap file (SWR, cumulative).
    pub swap_in: u64,
    /// Pages compressed into the cache (ZIP, cumulative).
    pub zip: u64,
    /// Pages decompressed (UNZIP, cumulative).
    pub unzip: u64,
    /// Compressed pages pushed out of a full cache to the swap file.
    pub zip_evicted: u64,
    /// Swap-outs cancelled because the guest touched the page while it was being written.
    pub swap_out_cancelled: u64,
    /// Time the VM's vCPUs stalled on host reclamation: swap-ins, decompression, waiting for a
    /// frame that host reclaim frees. Backing a first-touched page is not counted, nor are device
    /// reads and writes that wait for the host (no vCPU waits there).
    pub host_wait: HostWaits,
    /// Pages the balloon driver handed over (cumulative).
    pub ballooned_total: u64,
    /// Pages the balloon driver took back (cumulative).
    pub unballooned_total: u64,
    /// Pages host reclaim shared instead of compressing or swapping them.
    pub shared_instead: u64,
    /// Frames taken by host swap or compression while the VM held no more than its reservation:
    /// must stay 0 (checked as an invariant).
    pub taken_below_reservation: u64,
}

/// One VM as the host sees it.
#[derive(Clone, Debug)]
pub struct HostVm {
    /// VM name.
    pub name: String,
    /// Resource settings.
    pub res: VmResources,
    p2m: P2m,
    /// Private frames backing guest pages (esxtop GRANT).
    pub granted: u64,
    /// Frames held as the VM's overhead memory.
    pub overhead_frames: u64,
    /// Cap on `granted` set by the policy (`SetGrantLimit`), in frames.
    pub grant_limit: u64,
    /// Balloon size the policy asks for, pages (MCTLTGT).
    pub balloon_target: u64,
    /// Pages in the balloon (MCTLSZ).
    pub ballooned: u64,
    /// Most pages the balloon may hold (MCTLMAX).
    pub balloon_max: u64,
    /// Pages the policy wants kept compressed or swapped (SWTGT).
    pub swap_target: u64,
    /// Pages in the swap file (SWCUR).
    pub swapped: u64,
    swapfile: SwapFile,
    zip: ZipCache,
    /// Counters.
    pub stats: HostVmStats,
    sample: Sample,
    /// Pages being read back, and when each read completes.
    reading: Reads,
    /// Pages being written out: in-flight swap-outs that still hold their frame.
    swapping_out: u64,
}

impl HostVm {
    /// The reservation in pages.
    pub fn reservation_pages(&self) -> u64 {
        self.res.reservation / PAGE_SIZE
    }

    /// Whether the host may take a frame from this VM: only while it holds more than its reservation.
    pub fn above_reservation(&self) -> bool {
        self.granted > self.reservation_pages()
    }

    /// Where each guest page lives.
    pub fn p2m(&self) -> &P2m {
        &self.p2m
    }

    /// The compression cache.
    pub fn zip(&self) -> &ZipCache {
        &self.zip
    }

    /// The active-memory sampler's state.
    pub fn sample(&self) -> &Sample {
        &self.sample
    }

    /// Pages reclaimed by host swap and compression, done or in flight.
    pub fn reclaimed(&self) -> u64 {
        self.swapped + self.zip.used() + self.swapping_out
    }
}

/// Pages being read back from the swap file or decompressed: when each is in. A page's flag is
/// cleared when it is touched after that, or when the reclaim daemon or the sampler next looks.
#[derive(Clone, Debug, Default)]
struct Reads {
    done: HashMap<u32, u64>,
    order: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Reads {
    fn insert(&mut self, ppn: u32, t: u64) {
        self.done.insert(ppn, t);
        self.order.push(Reverse((t, ppn)));
    }

    fn get(&self, ppn: u32) -> Option<u64> {
        self.done.get(&ppn).copied()
    }

    fn remove(&mut self, ppn: u32) {
        self.done.remove(&ppn);
    }

    fn len(&self) -> usize {
        self.done.len()
    }

    /// Pages whose reads completed by `now`, forgotten.
    fn finished(&mut self, now: u64, out: &mut Vec<u32>) {
        while let Some(&Reverse((t, p))) = self.order.peek() {
            if t > now {
                break;
            }
            self.order.pop();
            if self.done.get(&p) == Some(&t) {
                self.done.remove(&p);
                out.push(p);
            }
        }
    }
}

/// What a guest's access to one of its pages costs the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The page is backed: nothing to do.
    Ready,
    /// The host backed the page now with a zeroed frame (the guest pays `host_back_ns`).
    NewFrame,
    /// The vCPU stalls until this time (swap-in, decompression, a frame being freed), then the
    /// page is backed.
    Wait(u64),
    /// The host cannot back the page; the run ends with `Host::fatal`.
    Refused,
    /// The page maps a shared frame: reads go ahead, but a write must come to the host (it breaks
    /// the share), so the guest may not take later writes as plain.
    Shared,
}

/// What the host's mechanisms need from the guest whose pages they handle, without reaching into
/// its internals.
pub trait GuestMemory {
    /// The host took page `ppn` away: the guest's next reference to it must come to the host
    /// (its fast-path assumptions about the page no longer hold).
    fn invalidate(&mut self, ppn: u32);
    /// Whether a process referenced `ppn` after time `t` (a vCPU running ahead of the host).
    fn touched_after(&self, ppn: u32, t: u64) -> bool;
    /// What the page holds, for its compressed size.
    fn content(&self, ppn: u32) -> Content;
    /// What the page holds, as a content identity (`crate::content`), for page sharing.
    fn content_id(&self, ppn: u32) -> u64;
    /// A hint that `content_id(ppn)` is asked for soon (a scanner ahead of its visits).
    fn prefetch_content(&self, _ppn: u32) {}
}

/// The host's memory.
#[derive(Clone, Debug)]
pub struct Host {
    total: u64,
    free: u64,
    /// Frames the hypervisor itself holds.
    hypervisor: u64,
    vms: Vec<HostVm>,
    /// Host swap is available (a swap file per VM).
    pub swap_enabled: bool,
    /// Costs of reclamation.
    pub costs: HostCosts,
    /// Host swap I/O in flight.
    io: Vec<Option<HostIo>>,
    io_free: Vec<u32>,
    /// Pages whose guest mappings must be invalidated, per VM, not yet told to the guest.
    invalidations: Vec<(u32, u32)>,
    /// Whether the reclaim daemon has a step scheduled.
    pub(crate) daemon_scheduled: bool,
    /// A VM's reclaimed memory fell (a page came back): the daemon may have work again.
    pub(crate) reclaim_fell: bool,
    /// A condition that ends the run (machine memory exhausted with no host reclaim).
    pub fatal: Option<String>,
    /// Transparent page sharing, if on.
    pshare: Option<Pshare>,
    /// Transcendent memory, if on.
    tmem: Option<Tmem>,
    /// Pages leaving a balloon are backed at once, or stay in it if no frame is free (Xen).
    pub populate_on_release: bool,
    /// Frames the host counts as tmem's.
    tmem_frames: u64,
    /// The compressor of its compression cache and of tmem (scenario `host.compressor`).
    pub compressor: Compressor,
    /// Physical CPUs the vCPUs share, if the scenario models them (`host.cpus`); otherwise every
    /// vCPU runs whenever it has work.
    pub pcpus: Option<Pcpus>,
    /// dom0's block backend, where the scenario models its CPU (`host.dom0_vcpus`, which needs
    /// `pcpus`); otherwise a guest's disk requests reach the disk directly.
    pub blkback: Option<Blkback>,
    /// The stream of direct host reclaim's victims, drawn from the scenario's seed by the backend.
    pub(crate) direct_reclaim_rng: Rng,
}

impl Host {
    /// A host with `frames` machine frames and no VMs.
    pub fn new(frames: u64) -> Self {
        Self {
            total: frames,
            free: frames,
            hypervisor: 0,
            vms: Vec::new(),
            swap_enabled: true,
            costs: HostCosts::default(),
            io: Vec::new(),
            io_free: Vec::new(),
            invalidations: Vec::new(),
            daemon_scheduled: false,
            reclaim_fell: false,
            fatal: None,
            pshare: None,
            tmem: None,
            tmem_frames: 0,
            populate_on_release: false,
            compressor: Compressor::Lzo1x1,
            pcpus: None,
            blkback: None,
            direct_reclaim_rng: crate::rng::stream(0, &[crate::rng::DIRECT_RECLAIM_STREAM]),
        }
    }

    /// dom0's backend handles one half (the issue, or with `completion` the rest) of `requests`
    /// ring requests reaching it at `at`, on its CPU and the host's (`Blkback::half`,
    /// `Pcpus::dom0_run`); returns when it is done. Issued requests are counted.
    pub fn blkback_half(&mut self, at: u64, requests: u64, completion: bool) -> u64 {
        let b = self.blkback.as_mut().expect("dom0's backend is modelled");
        if !completion {
            b.requests += requests;
        }
        let (start, ns) = b.half(at, requests, completion);
        self.pcpus.as_mut().expect("dom0 is modelled on the host's CPUs").dom0_run(start, ns);
        start + ns
    }

    /// Takes `frames` for the hypervisor itself (vmkernel, service console); returns false if the
    /// host does not have them.
    pub fn reserve_hypervisor(&mut self, frames: u64) -> bool {
        if frames > self.free {
            return false;
        }
        self.free -= frames;
        self.hypervisor += frames;
        true
    }

    /// Frames the hypervisor holds.
    pub fn hypervisor_frames(&self) -> u64 {
        self.hypervisor
    }

    /// Powers on a VM of `memory_pages` guest pages, taking its overhead frames now. Its swap file
    /// lives at byte `swap_base` of datastore `swap_datastore`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_vm(
        &mut self,
        name: String,
        memory_pages: u32,
        res: VmResources,
        swap_datastore: u32,
        swap_base: u64,
        zip_max_bytes: u64,
        balloon_max: u64,
    ) -> u32 {
        let id = self.vms.len() as u32;
        self.sharing_add_vm(memory_pages);
        if let Some(t) = &mut self.tmem {
            t.add_client();
        }
        let overhead_frames = crate::units::pages(res.overhead).min(self.free);
        self.free -= overhead_frames;
        self.vms.push(HostVm {
            name,
            p2m: P2m::new(memory_pages),
            granted: 0,
            overhead_frames,
            grant_limit: u64::MAX,
            balloon_target: 0,
            ballooned: 0,
            balloon_max,
            swap_target: 0,
            swapped: 0,
            swapfile: SwapFile::new(memory_pages, swap_datastore, swap_base),
            zip: ZipCache::new(zip_max_bytes),
            stats: HostVmStats::default(),
            sample: Sample::default(),
            reading: Reads::default(),
            swapping_out: 0,
            res,
        });
        id
    }

    /// The host's VMs.
    pub fn vms(&self) -> &[HostVm] {
        &self.vms
    }

    /// Sets the cap on frames granted to a VM.
    pub fn set_grant_limit(&mut self, vm: u32, frames: u64) {
        self.vms[vm as usize].grant_limit = frames;
    }

    /// Sets the balloon size a VM's driver works toward, capped at the VM's balloon maximum and at
    /// what leaves it its reservation; returns the target set.
    pub fn set_balloon_target(&mut self, vm: u32, pages: u64) -> u64 {
        let v = &mut self.vms[vm as usize];
        v.balloon_target = pages.min(v.balloon_max).min((v.p2m.len() as u64).saturating_sub(v.reservation_pages()));
        v.balloon_target
    }

    /// Sets how many of a VM's pages the host keeps compressed or swapped.
    pub fn set_swap_target(&mut self, vm: u32, pages: u64) {
        self.vms[vm as usize].swap_target = pages;
    }

    /// Machine frames in all.
    pub fn total_frames(&self) -> u64 {
        self.total
    }

    /// Free machine frames.
    pub fn free_frames(&self) -> u64 {
        self.free
    }

    /// Clears the flag of pages whose reads completed by `now`, so they can be taken again.
    pub(crate) fn finish_reads(&mut self, now: u64) {
        let mut done = Vec::new();
        for v in &mut self.vms {
            v.reading.finished(now, &mut done);
            for p in done.drain(..) {
                let e = v.p2m.get(p);
                v.p2m.set(p, e.with_flag(flags::READING, false));
            }
        }
    }

    /// Records that a vCPU of `vm` stalls from `start` for `ns` on host reclamation.
    pub fn note_wait(&mut self, vm: u32, start: u64, ns: u64) {
        self.vms[vm as usize].stats.host_wait.note(start, ns);
    }

    /// Whether a guest page is backed.
    #[inline]
    pub fn is_backed(&self, vm: u32, ppn: u32) -> bool {
        self.vms[vm as usize].p2m.get(ppn).is_backed()
    }

    /// Whether a guest page is backed with nothing pending (no sample, swap-out or read): a touch
    /// of it costs the host nothing.
    #[inline]
    pub fn is_plain(&self, vm: u32, ppn: u32) -> bool {
        let e = self.vms[vm as usize].p2m.get(ppn);
        e.is_backed() && e.flags() == 0
    }

    /// The pages of VM `vm` whose guest mappings must be invalidated, taken.
    pub fn take_invalidations(&mut self, vm: u32, out: &mut Vec<u32>) {
        self.invalidations.retain(|&(v, p)| {
            if v == vm {
                out.push(p);
                false
            } else {
                true
            }
        });
    }

    /// Whether any VM's mappings await invalidation.
    pub fn has_invalidations(&self) -> bool {
        !self.invalidations.is_empty()
    }

    /// Backs pages `start..end` of a VM at once (a kernel area its boot touches).
    pub fn back_range(&mut self, vm: u32, start: u32, end: u32) {
        let n = (end - start) as u64;
        if n > self.free {
            // What holds the rest: VMs are powered on and booted one after another.
            let mib = |frames: u64| human_bytes(frames * PAGE_SIZE);
            let on = self.vms.len();
            let overhead: u64 = self.vms.iter().map(|v| v.overhead_frames).sum();
            let granted: u64 = self.vms.iter().enumerate().filter(|&(i, _)| i != vm as usize).map(|(_, v)| v.granted).sum();
            let vms = |n: usize| if n == 1 { "1 VM".to_string() } else { format!("{n} VMs") };
            let booted = match on - 1 {
                0 => "no VM was booted before it".to_string(),
                b => format!("the {} booted before it {}", vms(b), mib(granted)),
            };
            let why = format!(
                "host machine memory exhausted while booting VM '{}': its kernel's boot backs {} at once (its kernel_reserved) \
                 and {} is free; the hypervisor holds {}, the overhead of the {} powered on so far {}, and {booted} (fewer or \
                 smaller VMs, a larger host, or a smaller host.hypervisor, overhead or kernel_reserved)",
                self.vms[vm as usize].name,
                mib(n),
                mib(self.free),
                mib(self.hypervisor),
                vms(on),
                mib(overhead),
            );
            self.fatal.get_or_insert(why);
            return;
        }
        let v = &mut self.vms[vm as usize];
        v.p2m.set_range(start, end, Entry::new(PageState::Backed));
        self.free -= n;
        v.granted += n;
    }

    /// Backs every page of VM `vm` not yet backed nor ballooned (a Xen domain built with its whole
    /// initial reservation).
    pub fn populate(&mut self, vm: u32) {
        let v = &mut self.vms[vm as usize];
        let unbacked: Vec<u32> = v.p2m.iter().filter(|(_, e)| e.state() == PageState::Unbacked).map(|(p, _)| p).collect();
        if unbacked.len() as u64 > self.free {
            self.fatal.get_or_insert_with(|| format!("host machine memory exhausted while building VM '{}'", v.name));
            return;
        }
        for &p in &unbacked {
            v.p2m.set(p, Entry::new(PageState::Backed));
        }
        self.free -= unbacked.len() as u64;
        v.granted += unbacked.len() as u64;
    }

    /// The guest of VM `vm` touches (`write`: stores to) page `ppn` at `now`. Backs it if it is
    /// unbacked, brings it back if it was compressed or swapped (the vCPU waits), gives a writer
    /// of a shared page its private copy, cancels a swap-out in flight, and notes a touch of a
    /// sampled page. Running out of frames with host swap off ends the run through `fatal`, never
    /// a panic.
    #[inline]
    pub fn access(&mut self, vm: u32, ppn: u32, write: bool, now: u64, ds: &mut [Datastore]) -> Access {
        let e = self.vms[vm as usize].p2m.get(ppn);
        if e.is_backed() && e.flags() == 0 {
            return Access::Ready;
        }
        self.access_slow(vm, ppn, e, write, now, ds)
    }

    #[allow(clippy::too_many_arguments)]
    fn access_slow(&mut self, vm: u32, ppn: u32, e: Entry, write: bool, now: u64, ds: &mut [Datastore]) -> Access {
        let v = &mut self.vms[vm as usize];
        match e.state() {
            PageState::Backed => {
                let mut e = e;
                if e.flags() & flags::SAMPLED != 0 {
                    v.sample.touched += 1;
                    e = e.with_flag(flags::SAMPLED, false);
                }
                if e.flags() & flags::SWAPOUT != 0 {
                    // The write in flight is wasted: the page stays.
                    e = e.with_flag(flags::SWAPOUT, false);
                    v.swapping_out -= 1;
                    v.stats.swap_out_cancelled += 1;
                    self.reclaim_fell = true;
                }
                let wait = if e.flags() & flags::READING != 0 { v.reading.get(ppn).filter(|&t| t > now) } else { None };
                if wait.is_none() && e.flags() & flags::READING != 0 {
                    e = e.with_flag(flags::READING, false);
                    v.reading.remove(ppn);
                }
                v.p2m.set(ppn, e);
                match wait {
                    Some(t) => Access::Wait(t),
                    None => Access::Ready,
                }
            }
            PageState::Unbacked => match self.take_frame(vm, ppn, now, ds) {
                Some(t) if t <= now => Access::NewFrame,
                Some(t) => Access::Wait(t),
                None => Access::Refused,
            },
            PageState::Compressed(slot) => {
                let Some(t) = self.take_frame(vm, ppn, now, ds) else { return Access::Refused };
                let v = &mut self.vms[vm as usize];
                let frames = v.zip.frames();
                v.zip.remove(slot);
                self.free += frames - v.zip.frames();
                v.stats.unzip += 1;
                self.reclaim_fell = true;
                let done = t.max(now) + self.costs.decompress_ns;
                v.p2m.set(ppn, Entry::new(PageState::Backed));
                Access::Wait(done)
            }
            PageState::Swapped(slot) => {
                let Some(t) = self.take_frame(vm, ppn, now, ds) else { return Access::Refused };
                let v = &mut self.vms[vm as usize];
                let done = v.swapfile.read(slot, t.max(now), ds);
                v.swapfile.free(slot);
                v.swapped -= 1;
                v.stats.swap_in += 1;
                self.reclaim_fell = true;
                v.p2m.set(ppn, Entry::new(PageState::Backed).with_flag(flags::READING, true));
                v.reading.insert(ppn, done);
                Access::Wait(done)
            }
            PageState::Ballooned => {
                self.fatal.get_or_insert_with(|| format!("VM '{}' touched guest page {ppn}, which is in its balloon", v.name));
                Access::Refused
            }
            PageState::Shared(_) if !write => Access::Shared,
            PageState::Shared(f) => {
                // Copy-on-write: the writer gets a private frame holding the shared contents.
                let Some(t) = self.take_frame(vm, ppn, now, ds) else { return Access::Refused };
                Access::Wait(t.max(now) + self.cow_break(vm, ppn, f))
            }
        }
    }

    /// A frame for page `ppn` of `vm`, which becomes backed (counted as granted). Returns when the
    /// frame is usable: now if one is free and the VM is under its grant limit. Otherwise the host
    /// swaps out another page and the frame is usable once that write completes (direct host
    /// reclaim, straight to swap: no compression on this path): at its grant limit a VM reclaims
    /// from itself, as a memory cgroup does; when the host is out of frames the page comes from a
    /// VM above its reservation, so no VM is reclaimed below it. `None` if nothing can be freed.
    fn take_frame(&mut self, vm: u32, ppn: u32, now: u64, ds: &mut [Datastore]) -> Option<u64> {
        if self.vms[vm as usize].granted < self.vms[vm as usize].grant_limit {
            // Ephemeral tmem pages are the first memory the host takes back.
            self.tmem_relinquish();
        }
        let v = &mut self.vms[vm as usize];
        if self.free > 0 && v.granted < v.grant_limit {
            self.free -= 1;
            v.granted += 1;
            v.p2m.set(ppn, Entry::new(PageState::Backed));
            return Some(now);
        }
        let why = if v.granted >= v.grant_limit {
            format!("VM '{}' reached its grant limit of {}", v.name, human_bytes(v.grant_limit * PAGE_SIZE))
        } else {
            format!("host machine memory ({}) is exhausted while backing VM '{}'", human_bytes(self.total * PAGE_SIZE), v.name)
        };
        if !self.swap_enabled {
            self.fatal.get_or_insert_with(|| format!("{why}, and host swap is off"));
            return None;
        }
        // Reads that completed since are done: their pages may be taken again (a page read back
        // and never touched since would otherwise keep its flag until the sampler or the reclaim
        // daemon ran, and neither need be running).
        self.finish_reads(now);
        let v = &self.vms[vm as usize];
        // The victim VM: at its grant limit, the VM itself; otherwise the one with the most
        // reclamation the policy has asked for and not yet had (swap and balloon targets not yet
        // reached), so an emergency serves the policy's choice; with none asked, the one holding
        // the most above its reservation. A VM whose pages are all on their way in or out has
        // nothing to give now: the next one in that order gives instead.
        let order: Vec<u32> = if v.granted >= v.grant_limit {
            vec![vm]
        } else {
            let mut c: Vec<_> = self
                .vms
                .iter()
                .enumerate()
                .filter(|(_, o)| o.above_reservation())
                .map(|(i, o)| {
                    let owed = o.swap_target.saturating_sub(o.reclaimed()) + o.balloon_target.saturating_sub(o.ballooned);
                    ((owed, o.granted - o.reservation_pages()), i as u32)
                })
                .collect();
            c.sort_unstable_by(|a, b| b.cmp(a));
            c.into_iter().map(|(_, i)| i).collect()
        };
        let victim = order.into_iter().find_map(|f| {
            hostswap::random_victim(&self.vms[f as usize], &mut self.direct_reclaim_rng, Some(ppn).filter(|_| f == vm)).map(|p| (f, p))
        });
        let Some((from, victim)) = victim else {
            self.fatal.get_or_insert_with(|| format!("{why}, and no VM has memory above its reservation the host could swap out"));
            return None;
        };
        // The victim's frame passes to the new page once the victim's contents are on disk.
        let Some(done) = self.swap_out_now(from, victim, now, ds) else {
            let name = &self.vms[from as usize].name;
            self.fatal.get_or_insert_with(|| format!("{why}, and VM '{name}' has no free slot in its host swap file"));
            return None;
        };
        let v = &mut self.vms[vm as usize];
        v.granted += 1;
        v.p2m.set(ppn, Entry::new(PageState::Backed));
        Some(done)
    }

    /// Checks that every frame is free or owned exactly once, that every guest page is in exactly
    /// one host state and the counters agree with the maps.
    pub fn check(&self) -> Result<(), String> {
        if let Some(p) = &self.pcpus {
            p.check()?;
        }
        let mut owned = 0;
        for v in &self.vms {
            let (mut backed, mut ballooned, mut swapped, mut zipped, mut out, mut reading) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
            for (ppn, e) in v.p2m.iter() {
                match e.state() {
                    PageState::Backed => {
                        backed += 1;
                        out += (e.flags() & flags::SWAPOUT != 0) as u64;
                        if e.flags() & flags::READING != 0 {
                            reading += 1;
                            if v.reading.get(ppn).is_none() {
                                return Err(format!("VM '{}': page {ppn} reading with no read recorded", v.name));
                            }
                        }
                    }
                    PageState::Ballooned => ballooned += 1,
                    PageState::Swapped(s) => {
                        swapped += 1;
                        if !v.swapfile.is_used(s) {
                            return Err(format!("VM '{}': page {ppn} swapped to free slot {s}", v.name));
                        }
                    }
                    PageState::Compressed(s) => {
                        zipped += 1;
                        if v.zip.page(s) != Some(ppn) {
                            return Err(format!("VM '{}': page {ppn} compressed in slot {s} which holds {:?}", v.name, v.zip.page(s)));
                        }
                    }
                    PageState::Unbacked | PageState::Shared(_) => {}
                }
            }
            let counts = [(backed, v.granted, "granted"), (ballooned, v.ballooned, "ballooned"), (swapped, v.swapped, "swapped")];
            for (seen, counted, what) in counts {
                if seen != counted {
                    return Err(format!("VM '{}': {counted} pages counted {what} but {seen} in the map", v.name));
                }
            }
            if zipped != v.zip.used() || out != v.swapping_out || reading != v.reading.len() as u64 {
                return Err(format!(
                    "VM '{}': map has {zipped} compressed, {out} swapping out, {reading} reading; counted {}, {}, {}",
                    v.name,
                    v.zip.used(),
                    v.swapping_out,
                    v.reading.len()
                ));
            }
            if v.stats.taken_below_reservation > 0 {
                return Err(format!("VM '{}': {} pages reclaimed below its reservation", v.name, v.stats.taken_below_reservation));
            }
            if v.ballooned > (v.p2m.len() as u64).saturating_sub(v.reservation_pages()) {
                return Err(format!("VM '{}': a balloon of {} pages leaves less than its reservation", v.name, v.ballooned));
            }
            owned += v.granted + v.overhead_frames + v.zip.frames();
        }
        owned += self.pshare.as_ref().map_or(0, |s| s.frames_in_use()) + self.tmem_frames_held();
        if owned + self.hypervisor + self.free != self.total {
            return Err(format!(
                "frames lost or counted twice: {owned} owned by VMs + {} by the hypervisor + {} free != {} in all",
                self.hypervisor, self.free, self.total
            ));
        }
        self.check_sharing()?;
        self.check_tmem()
    }
}

#[cfg(test)]
mod tests {
    use super::HostWaits;

    #[test]
    fn a_stall_counts_as_it_passes_and_stalls_of_two_vcpus_add_up() {
        let mut w = HostWaits::default();
        w.note(5, 10);
        assert_eq!((w.ns_at(0), w.ns_at(10), w.ns_at(15), w.ns_at(100)), (0, 5, 10, 10), "known in full at 5, passed by 15");
        w.note(8, 4); // another vCPU, meanwhile
        assert_eq!(w.ns_at(10), 5 + 2);
        w.note(30, 20); // both earlier stalls are over by then
        assert_eq!((w.ns_at(30), w.ns_at(40), w.ns_at(60)), (14, 24, 34));
        assert_eq!(w.pending.len(), 1, "finished stalls are folded into the total");
    }
}
