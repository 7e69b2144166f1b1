//! The guest operating system's memory manager (Linux profile): guest-physical pages, LRU lists,
//! watermarks and kswapd, direct reclaim, swap, the page cache with dirty writeback, and the
//! scheduler that runs processes on vCPUs. Files are named after the kernel's.
//!
//! Time flows only through the [`Env`]: the guest schedules its own future steps as events and
//! submits I/O to its datastore's device queue.

mod access;
mod balloon;
mod bio;
mod check;
mod config;
mod filemap;
pub mod ilwaco;
mod kswapd;
mod lru;
mod memcontrol;
mod memory;
mod oom_kill;
mod page;
mod page_alloc;
mod process;
mod sched;
mod swap_state;
mod swapfile;
mod tmem;
mod vmscan;
mod vmstat;
mod windows;
mod workingset;
mod writeback;

pub use balloon::{Balloon, BalloonDriver};
pub use bio::{Bio, BioKind};
pub use config::{Costs, GuestConfig, Image, Replacement, Sysctl, Thp};
pub use lru::LruList;
pub use memcontrol::{CgroupVersion, MemCgroup};
pub use page::{NONE, PageKind};
pub use page_alloc::Watermarks;
pub use process::{ProcState, ProcStats, Process};
pub use vmstat::{Counter, NR_COUNTERS, VmStat};

use crate::clock::{Event, EventQueue, GuestEvent};
use crate::devices::{Datastore, VirtualDisk};
use crate::host::{Content, GuestMemory, Host};
use crate::units::PAGE_SIZE;
use crate::workloads::TraceSource;
use bio::BioTable;
use filemap::File;
use kswapd::Kswapd;
use lru::Lru;
use page::Pages;
use swapfile::SwapArea;
use vmscan::ReclaimCost;
use writeback::Flusher;

/// What a guest step needs from the rest of the world.
pub struct Env<'a> {
    /// Future events.
    pub events: &'a mut EventQueue,
    /// Datastores (devices).
    pub datastores: &'a mut [Datastore],
    /// The host's memory.
    pub host: &'a mut Host,
    /// How far the guest may go on handling its own next events before returning to the engine;
    /// `None` outside the event loop.
    pub horizon: Option<Horizon<'a>>,
}

/// The engine's loop as a guest may continue it: while the next event anywhere is its own, the
/// guest takes it as the engine would (same time, same `limit`), saving the round trip through
/// the engine for each of a lone process's faults.
pub struct Horizon<'a> {
    /// The engine's clock, advanced to each event taken.
    pub now: &'a mut u64,
    /// How far past the next event a vCPU may account resident hits.
    pub lookahead: u64,
    /// The run's end: events at or after it are not taken.
    pub end: u64,
    /// Where the caller of the engine wants control back: later events are not taken.
    pub until: u64,
}

impl Env<'_> {
    /// Schedules an event for guest `guest`'s actors at time `t`.
    #[inline]
    pub fn schedule(&mut self, guest: u32, t: u64, ev: GuestEvent) {
        self.events.push(t, Event::Guest { guest, ev });
    }

    /// Guest `guest`'s request of `pages` pages at byte `offset` of datastore `ds`, issued at
    /// `now`: to the device directly, or through dom0's block backend where the host models it
    /// (dom0's CPU for issuing it delays it; its completion reaches the guest after dom0's CPU for
    /// that, `Event::BlkbackDone`). The guest's `IoDone { bio }` comes when it sees the request
    /// complete; `bio` is `NONE` for a write nothing waits for. The device takes requests in the
    /// order dom0 is handed them: one queued behind dom0's backlog keeps its place.
    #[allow(clippy::too_many_arguments)]
    pub fn disk_io(&mut self, guest: u32, ds: u32, now: u64, offset: u64, pages: u64, write: bool, bio: u32) {
        let device = &mut self.datastores[ds as usize].device;
        let bytes = pages * PAGE_SIZE;
        if self.host.blkback.is_none() {
            let done = device.submit(now, offset, bytes, write);
            if bio != NONE {
                self.schedule(guest, done, GuestEvent::IoDone { bio });
            }
            return;
        }
        let requests = crate::host::Blkback::ring_requests(pages);
        let arrives = self.host.blkback_half(now, requests, false);
        let done = device.submit_at(now, arrives, offset, bytes, write);
        self.events.push(done, Event::BlkbackDone { guest, bio, requests: requests as u32 });
    }

    /// The host's side of guest `vm` touching (`write`: storing to) its page `ppn` at `now`.
    #[inline]
    pub fn host_access(&mut self, vm: u32, ppn: u32, write: bool, now: u64) -> crate::host::Access {
        self.host.access(vm, ppn, write, now, self.datastores)
    }
}

/// A running guest.
pub struct Guest {
    /// Index among the host's guests (also its host VM id).
    pub(crate) id: u32,
    /// Configuration.
    pub(crate) cfg: GuestConfig,
    /// Page descriptors.
    pub(crate) pages: Pages,
    lru: Lru,
    /// Watermarks in pages.
    pub(crate) wmark: Watermarks,
    /// Processes, by pid.
    pub(crate) procs: Vec<Process>,
    sched: sched::Sched,
    swap: SwapArea,
    files: Vec<File>,
    /// Files by the name workloads open them by.
    names: rustc_hash::FxHashMap<u64, u32>,
    bios: BioTable,
    kswapd: Kswapd,
    flusher: Flusher,
    /// Event counters.
    pub(crate) vmstat: VmStat,
    disk: VirtualDisk,
    /// Recent reclaim cost of each lruvec, anon and file.
    reclaim_cost: Vec<ReclaimCost>,
    /// Memory cgroups, the root first, then one per workload with a memory limit.
    pub(crate) memcgs: Vec<MemCgroup>,
    /// Processes waiting for any I/O completion before they retry (reclaim, dirty throttling).
    throttled: Vec<u32>,
    /// The process whose swap readahead holds its block plug open (`NONE`: none): direct reclaim
    /// while it allocates writes under that plug, so the writes follow the fault's reads.
    plugging: u32,
    /// Dirty page-cache pages.
    nr_dirty: u64,
    /// Dirty pages dropped unwritten because their file was deleted (`cancel_dirty_page`).
    dirty_cancelled: u64,
    /// Page-cache pages under writeback.
    nr_writeback_file: u64,
    /// Pages under writeback that reclaim will free on completion.
    nr_reclaim_wb: u64,
    /// Next free byte of the file-system area of the virtual disk.
    fs_next: u64,
    /// Processes not yet exited or killed.
    live: u32,
    /// Processes running finite workloads that have not finished.
    finite_left: u32,
    /// Messages about notable guest events (OOM kills), with their time.
    pub(crate) log: Vec<(u64, String)>,
    balloon: Balloon,
    win: windows::WindowsState,
    /// The next page boot-time zeroing will write (`zero_memory`).
    zero_next: u32,
    /// Its image's [`crate::content::image_key`] (0 without an image).
    image_key: u64,
    /// cleancache and frontswap.
    tmem: tmem::TmemClient,
}

impl GuestMemory for Guest {
    fn invalidate(&mut self, ppn: u32) {
        self.pages.set_host_plain(ppn, false);
        if (ppn as usize) < self.pages.len() && self.pages[ppn as usize].kind == PageKind::Anon && self.pages.has(ppn, page::PG_MAPPED) {
            let (pid, vpn) = (self.pages[ppn as usize].owner, self.pages[ppn as usize].index);
            self.procs[pid as usize].mm.set_fast(vpn, false, false);
        }
    }

    fn touched_after(&self, ppn: u32, t: u64) -> bool {
        (ppn as usize) < self.pages.len()
            && self.pages[ppn as usize].kind == PageKind::Anon
            && self.pages.has(ppn, page::PG_MAPPED)
            && self.procs[self.pages[ppn as usize].owner as usize].ahead.touched_after(self.pages[ppn as usize].index, t)
    }

    fn content_id(&self, ppn: u32) -> u64 {
        let managed = self.pages.managed();
        if ppn >= managed {
            // The boot reservation: the image's own pages, then the kernel's data.
            let k = ppn - managed;
            return match &self.cfg.image {
                Some(img) if k < img.common_pages => crate::content::image(self.image_key, k as u64),
                _ => crate::content::private(self.id as u64, page::KERNEL_OWNER, ppn as u64),
            };
        }
        // A page the guest never allocated holds zeros (untouched, or zeroed at boot).
        self.pages.get(ppn as usize).map_or(crate::content::ZERO, |d| d.content)
    }

    fn prefetch_content(&self, ppn: u32) {
        if let Some(c) = self.pages.get(ppn as usize).map(|d| &d.content) {
            crate::index::prefetch(c);
        }
    }

    fn content(&self, ppn: u32) -> Content {
        if ppn as usize >= self.pages.len() {
            return Content::Generic;
        }
        let workload = match self.pages[ppn as usize].kind {
            PageKind::Anon if self.pages[ppn as usize].owner != NONE => self.procs[self.pages[ppn as usize].owner as usize].workload_index,
            PageKind::File => self.files[self.pages[ppn as usize].owner as usize].workload,
            _ => return Content::Generic,
        };
        self.cfg.workloads[workload].content(self.pages[ppn as usize].kind == PageKind::File)
    }
}

impl Guest {
    /// Tells the guest's mappings about pages the host took meanwhile.
    pub(crate) fn apply_invalidations(&mut self, env: &mut Env) {
        let mut pages = Vec::new();
        env.host.take_invalidations(self.id, &mut pages);
        for p in pages {
            self.invalidate(p);
        }
    }
}

impl Guest {
    /// Boots a guest: reserves the kernel's pages (backing them on the host, which the kernel's
    /// boot touches), creates its processes and schedules their starts.
    pub fn boot(id: u32, cfg: GuestConfig, disk: VirtualDisk, traces: TraceSource, env: &mut Env) -> Result<Self, String> {
        let n = cfg.memory_pages;
        let managed = n.checked_sub(cfg.reserved_pages).ok_or("reservation exceeds memory")?;
        // The root, then one cgroup per workload with a limit; each workload's processes join its.
        let mut memcgs = vec![MemCgroup::new("", u64::MAX)];
        let mut workload_memcg = Vec::with_capacity(cfg.workloads.len());
        for w in &cfg.workloads {
            workload_memcg.push(match w.memory_limit {
                Some(limit) => {
                    memcgs.push(MemCgroup::new(&w.name, limit));
                    memcgs.len() - 1
                }
                None => 0,
            });
        }
        let nr_memcgs = u8::try_from(memcgs.len()).ok().filter(|&n| n <= lru::MAX_LRUVECS).ok_or("too many memory cgroups")?;
        let pages = Pages::new(id, managed, cfg.reserved_pages, nr_memcgs);
        env.host.back_range(id, managed, n);
        let managed = managed as u64;
        let wmark = match cfg.replacement {
            // Over the pages the buddy allocator has at boot: a Xen guest's boot balloon is not
            // among them (the resolved min_free_kbytes says the same).
            Replacement::Linux => Watermarks::linux(managed - cfg.boot_balloon_pages as u64, &cfg.sysctl),
            Replacement::ExactLru | Replacement::Windows => Watermarks::default(),
        };
        let mut g = Self {
            id,
            pages,
            lru: Lru::new(nr_memcgs),
            wmark,
            procs: Vec::new(),
            sched: sched::Sched::new(cfg.vcpus),
            swap: SwapArea::new(cfg.swap_pages),
            files: Vec::new(),
            names: rustc_hash::FxHashMap::default(),
            bios: BioTable::default(),
            kswapd: Kswapd::default(),
            flusher: Flusher::default(),
            vmstat: VmStat::default(),
            disk,
            reclaim_cost: vec![ReclaimCost::default(); nr_memcgs as usize],
            memcgs,
            throttled: Vec::new(),
            plugging: NONE,
            nr_dirty: 0,
            dirty_cancelled: 0,
            nr_writeback_file: 0,
            nr_reclaim_wb: 0,
            fs_next: cfg.swap_pages as u64 * PAGE_SIZE,
            live: 0,
            finite_left: 0,
            log: Vec::new(),
            balloon: Balloon::new(cfg.balloon),
            win: windows::WindowsState::default(),
            zero_next: 0,
            image_key: cfg.image.as_ref().map_or(0, |img| crate::content::image_key(&img.name)),
            tmem: tmem::TmemClient::default(),
            cfg,
        };
        g.tmem_init(env);
        g.balloon_boot(env);
        if g.cfg.boot_balloon_pages > 0 {
            // Pages past the initial reservation were never populated: the driver starts with
            // them out (`balloon_stats.current_pages = nr_pages`), at no cost.
            env.host.set_balloon_target(id, g.cfg.boot_balloon_pages as u64);
            if g.inflate(g.cfg.boot_balloon_pages as u64, false, 0, env).1 {
                // Booting in `memory` would leave the guest below the free memory its allocator
                // keeps: it would start with more than `memory`, and nothing but the OOM killer
                // to run.
                let kib = |pages: u64| pages * PAGE_SIZE / 1024;
                let initial = (g.cfg.memory_pages - g.cfg.boot_balloon_pages) as u64;
                let (floor, what) = if g.windows() {
                    (windows::MDL_ALLOC_FLOOR, "the pages Windows keeps for itself")
                } else {
                    (g.wmark.min, "the min watermark")
                };
                return Err(format!(
                    "VM '{}' cannot start in memory = {} KiB (maxmem {} KiB): its kernel's reservation ({} KiB) and {what} ({} KiB) leave room for {} KiB of its {} KiB boot balloon; give it more memory",
                    g.cfg.name,
                    kib(initial),
                    kib(g.cfg.memory_pages as u64),
                    kib(g.cfg.reserved_pages as u64),
                    kib(floor),
                    kib(g.balloon.pages().len() as u64),
                    kib(g.cfg.boot_balloon_pages as u64)
                ));
            }
        }
        if g.cfg.populate_at_boot {
            env.host.populate(id);
        }
        g.windows_boot(env);
        if let Some(t) = g.cfg.zero_memory_at_ns {
            env.schedule(id, t, GuestEvent::ZeroMemory);
        }
        for (wi, w) in g.cfg.workloads.clone().iter().enumerate() {
            let memcg = workload_memcg[wi] as u8;
            for (k, workload) in w.spec.processes(traces, crate::rng::derive(g.cfg.seed, &[wi as u64]))?.into_iter().enumerate() {
                let pid = g.procs.len() as u32;
                let name = if w.spec.processes_len() > 1 { format!("{}.{}", w.name, k + 1) } else { w.name.clone() };
                g.procs.push(Process::new(pid, name, workload, wi, memcg));
                g.live += 1;
                if w.spec.is_finite() {
                    g.finite_left += 1;
                }
                env.schedule(id, w.start_ns, GuestEvent::Wake { pid });
            }
        }
        Ok(g)
    }

    /// Whether the guest runs the Windows memory manager.
    #[inline]
    pub(crate) fn windows(&self) -> bool {
        self.cfg.replacement == Replacement::Windows
    }

    /// The datastore the VM's disk (and swap) lives on.
    pub fn datastore(&self) -> u32 {
        self.disk.datastore
    }

    /// The VM's index on its host (its stable id).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The guest's configuration.
    pub fn config(&self) -> &GuestConfig {
        &self.cfg
    }

    /// The event counters (/proc/vmstat).
    pub fn counters(&self) -> &VmStat {
        &self.vmstat
    }

    /// The processes, by pid.
    pub fn processes(&self) -> &[Process] {
        &self.procs
    }

    /// The zone watermarks, pages.
    pub fn watermarks(&self) -> Watermarks {
        self.wmark
    }

    /// Notable guest events (OOM kills) with their time, ns.
    pub fn log(&self) -> &[(u64, String)] {
        &self.log
    }

    /// Free pages (MemFree).
    pub fn nr_free(&self) -> u64 {
        self.pages.nr_free()
    }

    /// MemTotal as configured, before any balloon, pages.
    pub fn mem_total_configured(&self) -> u64 {
        (self.cfg.memory_pages - self.cfg.reserved_pages) as u64
    }

    /// The name of the workload whose process or file owns guest page `ppn`, if any.
    pub fn page_owner_workload(&self, ppn: u32) -> Option<&str> {
        let i = ppn as usize;
        if i >= self.pages.len() || self.pages[i].owner == NONE {
            return None;
        }
        let w = match self.pages[i].kind {
            PageKind::Anon => self.procs[self.pages[i].owner as usize].workload_index,
            PageKind::File => self.files[self.pages[i].owner as usize].workload,
            _ => return None,
        };
        Some(&self.cfg.workloads[w].name)
    }

    /// MemTotal in pages: a virtio balloon without `deflate_on_oom` takes its pages out of it.
    pub fn mem_total(&self) -> u64 {
        let managed = (self.cfg.memory_pages - self.cfg.reserved_pages) as u64;
        if self.balloon.shrinks_mem_total() { managed - self.balloon.size() } else { managed }
    }

    /// The balloon driver's state.
    pub fn balloon(&self) -> &Balloon {
        &self.balloon
    }

    /// Whether every finite workload has finished (true at once if there are none).
    pub fn finite_done(&self) -> bool {
        self.finite_left == 0
    }

    /// Pages on an LRU list.
    pub fn lru_len(&self, l: LruList) -> u64 {
        self.lru.len(l)
    }

    /// Whether kswapd is awake (running or waiting for its writes), as its task state shows.
    pub fn kswapd_awake(&self) -> bool {
        self.kswapd.state() != kswapd::KswapdState::Sleeping
    }

    /// Swap slots in use.
    pub fn swap_used(&self) -> u64 {
        self.swap.nr_used()
    }

    /// Swap area size in pages.
    pub fn swap_total(&self) -> u64 {
        self.swap.size()
    }

    /// Dirty page-cache pages.
    pub fn nr_dirty(&self) -> u64 {
        self.nr_dirty
    }

    /// Pages under writeback (page cache and swap).
    pub fn nr_writeback(&self) -> u64 {
        self.bios.iter().filter(|(_, b)| matches!(b.kind, BioKind::FileWrite | BioKind::SwapWrite)).map(|(_, b)| b.pages.len() as u64).sum()
    }

    /// Sum of anonymous memory processes have mapped (pages), the guest's `Committed_AS`.
    pub fn committed_as(&self) -> u64 {
        self.procs
            .iter()
            .filter(|p| !matches!(p.state, ProcState::Exited | ProcState::Killed))
            .map(|p| p.mm.regions.iter().filter(|r| r.live).map(|r| r.pages as u64).sum::<u64>())
            .sum()
    }

    /// Memory the guest could use without swapping, pages, as the guest reports it: Linux's
    /// MemAvailable (`si_mem_available`: free less the reserve, plus the page cache less what
    /// reclaiming it would cost, half of it or the low watermark); Windows' Available.
    pub fn mem_available(&self) -> u64 {
        if self.windows() {
            return self.available();
        }
        let cache = self.lru.file();
        let free = self.pages.nr_free().saturating_sub(self.wmark.high);
        free + cache - (cache / 2).min(self.wmark.low)
    }

    /// Total time processes have spent stalled on memory.
    pub fn memory_stall_ns(&self) -> u64 {
        self.procs.iter().map(|p| p.stats.stall_ns).sum()
    }

    /// vCPUs with work to run: each must have its turn coming (an event, a place in the host's
    /// CPU queue, or a parked event of a stopped VM).
    pub fn busy_vcpus(&self) -> Vec<u32> {
        self.sched.busy().collect()
    }

    /// Handles an event addressed to this guest. A vCPU woken meanwhile runs at once, unless the
    /// host has stopped the VM's vCPUs (`may_run` false): then its turn is scheduled like any other.
    pub fn handle(&mut self, mut now: u64, mut limit: u64, mut ev: GuestEvent, may_run: bool, env: &mut Env) {
        loop {
            self.dispatch(now, limit, ev, may_run, env);
            match self.take_own_event(may_run, env) {
                Some((t, l, e)) => (now, limit, ev) = (t, l, e),
                None => return,
            }
        }
    }

    /// The next event, if the engine would hand this guest that event next and do nothing else
    /// first: not past the run's end or the caller's stop, with no host work pending that the
    /// engine settles between events (reclaim to resume, pages to invalidate, a fatal error), and
    /// this guest's finite work not done (the engine may then end the run). Returns its time, the
    /// `limit` the engine would give, and the event.
    fn take_own_event(&self, may_run: bool, env: &mut Env) -> Option<(u64, u64, GuestEvent)> {
        let h = env.horizon.as_mut()?;
        let t = env.events.peek_time()?;
        if t >= h.end || t > h.until || self.finite_done() {
            return None;
        }
        if env.host.reclaim_fell || env.host.has_invalidations() || env.host.fatal.is_some() {
            return None;
        }
        let (t, ev) = env.events.pop_if(|e| match *e {
            Event::Guest { guest, ev } => guest == self.id && (may_run || !matches!(ev, GuestEvent::Vcpu { .. })),
            _ => false,
        })?;
        let Event::Guest { ev, .. } = ev else { unreachable!("pop_if matched a guest event") };
        *h.now = (*h.now).max(t);
        let next = env.events.peek_time().unwrap_or(u64::MAX);
        Some((t, next.max(t + h.lookahead).min(h.end), ev))
    }

    /// Runs one event's handler.
    fn dispatch(&mut self, now: u64, limit: u64, ev: GuestEvent, may_run: bool, env: &mut Env) {
        self.sched.start_now = Some(NONE);
        self.tmem_flush_pending(env);
        match ev {
            GuestEvent::Vcpu { vcpu } => self.run_vcpu(vcpu, now, limit, env),
            GuestEvent::IoDone { bio } => self.io_done(bio, now, env),
            GuestEvent::Kswapd => self.kswapd_run(now, env),
            GuestEvent::Flusher => self.flusher_run(now, env),
            GuestEvent::Wake { pid } => self.wake(pid, now, env),
            GuestEvent::Balloon => self.balloon_run(now, env),
            GuestEvent::WorkingSetManager => self.working_set_manager(now, env),
            GuestEvent::ZeroMemory => self.zero_memory(now, env),
        }
        let started = self.sched.start_now.take();
        if let Some(v) = started.filter(|&v| v != NONE) {
            if may_run {
                self.run_vcpu(v, now, limit, env);
            } else {
                env.schedule(self.id, now, GuestEvent::Vcpu { vcpu: v });
            }
        }
    }

    /// Makes a blocked, sleeping or new process runnable.
    fn wake(&mut self, pid: u32, now: u64, env: &mut Env) {
        let p = &mut self.procs[pid as usize];
        // A process may have blocked a little ahead of simulated time (a vCPU runs ahead by up to
        // the lookahead); it cannot resume before it blocked.
        let now = now.max(p.blocked_since);
        match p.state {
            ProcState::Blocked => {
                let waited = now - p.blocked_since;
                if p.blocked_on_memory {
                    p.stats.stall_ns += waited;
                } else {
                    p.stats.io_wait_ns += waited;
                }
            }
            ProcState::New => p.stats.start_ns = now,
            ProcState::Sleeping => {}
            ProcState::Runnable | ProcState::Exited | ProcState::Killed => return,
        }
        p.state = ProcState::Runnable;
        self.sched.enqueue(self.id, pid, now, env);
    }

    /// Whether a step at `now` happens in time order: nothing else is scheduled before it. A vCPU
    /// may account resident hits past that point (up to its lookahead limit) but yields before any
    /// step that reads or changes shared state.
    fn in_order(now: u64, env: &Env) -> bool {
        env.events.peek_time().is_none_or(|t| now <= t)
    }

    /// Puts the running process to sleep until `wake` is called for it.
    fn block(&mut self, pid: u32, now: u64, on_memory: bool) {
        let p = &mut self.procs[pid as usize];
        p.state = ProcState::Blocked;
        p.blocked_since = now;
        p.blocked_on_memory = on_memory;
    }
}

/// Test helper: a 128 MiB guest whose idle process has touched 100 pages, 10 ms into its run.
#[cfg(test)]
pub(crate) fn idle_guest_with_100_pages() -> crate::Simulation {
    let text = "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"g\"\nmemory = \"128MiB\"\ndatastore = \"d\"\n\
                workload = { kind = \"idle\", footprint = \"100 pages\" }\n";
    let s = crate::scenario::load(text, "t", &[]).unwrap().remove(0);
    let mut sim = crate::Simulation::new(&s).unwrap();
    sim.run_until(10_000_000).unwrap();
    sim
}
