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
use bio::{Submission, Waited, runs};
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
use crate::workloads::{TraceSource, WorkloadEntry};
use bio::BioTable;
use filemap::File;
use kswapd::Kswapd;
use lru::Lru;
use page::Pages;
use swapfile::SwapArea;
use vmscan::ReclaimCost;
use writeback::Flusher;

/// How the guest chooses pages to evict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// Linux: active/inactive lists per type, kswapd between watermarks, direct reclaim.
    Linux,
    /// Textbook LRU over every evictable page, evicting only when no page is free. For validation:
    /// its fault count on a trace equals an LRU cache's miss count of the same size.
    ExactLru,
    /// Windows: working sets trimmed by the working-set manager to the standby and modified lists
    /// (`os = "windows"`; see `guest/windows`).
    Windows,
}

impl Replacement {
    /// Names a scenario's `replacement` key takes (Windows comes with `os = "windows"`).
    pub const NAMES: &'static [&'static str] = &["linux", "exact-lru"];

    /// Parses a scenario name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "linux" => Some(Self::Linux),
            "exact-lru" => Some(Self::ExactLru),
            _ => None,
        }
    }

    /// The scenario name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::ExactLru => "exact-lru",
            Self::Windows => "windows",
        }
    }
}

/// `/sys/kernel/mm/transparent_hugepage/enabled`. Only its effect on the watermarks is modelled
/// (khugepaged raises `min_free_kbytes` at boot unless THP is off); pages stay 4 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thp {
    /// THP off: `min_free_kbytes` keeps the formula's value.
    Never,
    /// THP only for `madvise(MADV_HUGEPAGE)` regions (Ubuntu's default); khugepaged runs.
    Madvise,
    /// THP for every anonymous region: the kernel's Kconfig default, and Debian's (so Kali's).
    Always,
}

impl Thp {
    /// Names as written in scenario files (and in sysfs).
    pub const NAMES: &'static [&'static str] = &["never", "madvise", "always"];

    /// Parses a scenario name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "never" => Self::Never,
            "madvise" => Self::Madvise,
            "always" => Self::Always,
            _ => return None,
        })
    }

    /// The scenario name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// The guest kernel's tunables, by their sysctl names. Defaults are the kernel's.
#[derive(Clone, Debug, PartialEq)]
pub struct Sysctl {
    /// `vm.swappiness`: weight of anonymous against file pages in reclaim, 0..=200 (default 60).
    pub swappiness: u32,
    /// `vm.page-cluster`: log2 of the swap readahead window (default 3: 8 pages).
    pub page_cluster: u32,
    /// `vm.min_free_kbytes`; `None` computes the formula's default, sqrt(16 x lowmem KiB) (resolved
    /// scenarios always state it: see `Watermarks::boot_min_free_kbytes`).
    pub min_free_kbytes: Option<u64>,
    /// `vm.watermark_scale_factor`, in 1/10,000 of memory (default 10).
    pub watermark_scale_factor: u32,
    /// `vm.dirty_ratio`, percent of dirtyable memory at which writers block (default 20).
    pub dirty_ratio: u32,
    /// `vm.dirty_background_ratio`, percent at which background writeback starts (default 10).
    pub dirty_background_ratio: u32,
    /// `vm.dirty_expire_centisecs`: age at which dirty data is written (default 3000).
    pub dirty_expire_centisecs: u32,
    /// `vm.dirty_writeback_centisecs`: period of the flusher's wake-ups (default 500).
    pub dirty_writeback_centisecs: u32,
    /// Block device `read_ahead_kb` (default 128).
    pub read_ahead_kb: u32,
}

impl Default for Sysctl {
    fn default() -> Self {
        Self {
            swappiness: 60,
            page_cluster: 3,
            min_free_kbytes: None,
            watermark_scale_factor: 10,
            dirty_ratio: 20,
            dirty_background_ratio: 10,
            dirty_expire_centisecs: 3000,
            dirty_writeback_centisecs: 500,
            read_ahead_kb: 128,
        }
    }
}

impl Sysctl {
    /// The sysctl names a scenario may set.
    pub const NAMES: &'static [&'static str] = &[
        "vm.swappiness",
        "vm.page-cluster",
        "vm.min_free_kbytes",
        "vm.watermark_scale_factor",
        "vm.dirty_ratio",
        "vm.dirty_background_ratio",
        "vm.dirty_expire_centisecs",
        "vm.dirty_writeback_centisecs",
        "read_ahead_kb",
    ];

    /// Sets one tunable by name; the error says what is allowed.
    pub fn set(&mut self, name: &str, v: u64) -> Result<(), String> {
        let small = |max: u64| -> Result<u32, String> {
            if v > max { Err(format!("{name} = {v} is out of range 0..={max}")) } else { Ok(v as u32) }
        };
        match name {
            "vm.swappiness" => self.swappiness = small(200)?,
            "vm.page-cluster" => self.page_cluster = small(31)?,
            "vm.min_free_kbytes" => self.min_free_kbytes = Some(v),
            "vm.watermark_scale_factor" => self.watermark_scale_factor = small(3000)?,
            "vm.dirty_ratio" => self.dirty_ratio = small(100)?,
            "vm.dirty_background_ratio" => self.dirty_background_ratio = small(100)?,
            "vm.dirty_expire_centisecs" => self.dirty_expire_centisecs = small(u32::MAX as u64)?,
            "vm.dirty_writeback_centisecs" => self.dirty_writeback_centisecs = small(u32::MAX as u64)?,
            "read_ahead_kb" => self.read_ahead_kb = small(1 << 20)?,
            _ => return Err(format!("unknown sysctl '{name}' (known: {})", Self::NAMES.join(", "))),
        }
        Ok(())
    }

    /// Every tunable with its value, for the resolved scenario.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("vm.swappiness", self.swappiness as u64),
            ("vm.page-cluster", self.page_cluster as u64),
            ("vm.min_free_kbytes", self.min_free_kbytes.unwrap_or(0)),
            ("vm.watermark_scale_factor", self.watermark_scale_factor as u64),
            ("vm.dirty_ratio", self.dirty_ratio as u64),
            ("vm.dirty_background_ratio", self.dirty_background_ratio as u64),
            ("vm.dirty_expire_centisecs", self.dirty_expire_centisecs as u64),
            ("vm.dirty_writeback_centisecs", self.dirty_writeback_centisecs as u64),
            ("read_ahead_kb", self.read_ahead_kb as u64),
        ]
    }
}

/// CPU costs of memory operations. Defaults and their sources are in `Costs::default`.
#[derive(Clone, Debug, PartialEq)]
pub struct Costs {
    /// One memory reference to a resident page.
    pub dram_access_ns: u64,
    /// Kernel work of a page fault that needs no I/O (allocate, zero, map); also the CPU part of a
    /// major fault.
    pub minor_fault_ns: u64,
    /// Host work when a guest first touches a guest-physical page the host has never backed.
    pub host_back_ns: u64,
    /// Copying one page (`read()`/`write()` through the page cache).
    pub page_copy_ns: u64,
    /// Reclaim's CPU time per page it looks at (kswapd's pace; a direct reclaimer's stall).
    pub reclaim_scan_ns: u64,
    /// Reclaim's further CPU time per page it frees.
    pub reclaim_free_ns: u64,
    /// Reclaim's further CPU time per page whose write-out it starts.
    pub reclaim_pageout_ns: u64,
    /// The balloon driver's time per page taken or released (allocate or free, hand to the host).
    pub balloon_page_ns: u64,
}

impl Default for Costs {
    fn default() -> Self {
        Self {
            // Seed 002's backup slide: DDR3-1600 access, 5 ns.
            dram_access_ns: 5,
            // Measured on the development machine (a KVM guest) with bench/faultcost.c:
            // 1.5 us per anonymous fault on host-backed memory, 8.7 us when the host must also
            // back the page, so host backing adds about 7.2 us.
            minor_fault_ns: 1_500,
            host_back_ns: 7_200,
            // 4 KiB at DDR3-1600's 12.8 GB/s peak (seed 002's memory): 320 ns.
            page_copy_ns: 320,
            // Measured on the development machine with bench/reclaimcost.py (kernel 6.18, memory
            // cgroup limit reclaim): process system time, less its faults at 1.5 us each, per page
            // scanned, median of 7 runs (2.2-3.6 us; 3.2-3.9 in 3 later runs); an upper bound that
            // includes the swap writes' submission, so freeing and writing cost nothing more. Its
            // tracepoints split it by outcome (look 0.47 us, free +0.19, write +2.59), but with
            // those costs the whole guest's direct reclaim, which is not timed and counts writes in flight as
            // progress, outruns the swap device (README, "What is modelled").
            reclaim_scan_ns: 3_200,
            reclaim_free_ns: 0,
            reclaim_pageout_ns: 0,
            // Not measured: taken equal to the minor-fault cost above, since ballooning a page is
            // the same allocator work plus a host unmap of comparable cost.
            balloon_page_ns: 1_500,
        }
    }
}

/// Everything that defines one guest.
#[derive(Clone, Debug, PartialEq)]
pub struct GuestConfig {
    /// VM name.
    pub name: String,
    /// Guest-physical memory in pages.
    pub memory_pages: u32,
    /// Pages the kernel holds from boot on (image, memmap, firmware): not part of MemTotal.
    pub reserved_pages: u32,
    /// Swap area size in pages.
    pub swap_pages: u32,
    /// vCPUs.
    pub vcpus: u32,
    /// Replacement mode.
    pub replacement: Replacement,
    /// Kernel tunables.
    pub sysctl: Sysctl,
    /// Transparent huge pages (for their effect on `min_free_kbytes`).
    pub transparent_hugepage: Thp,
    /// The cgroup hierarchy its workloads' memory cgroups live in.
    pub cgroup: CgroupVersion,
    /// The balloon driver.
    pub balloon: BalloonDriver,
    /// CPU costs.
    pub costs: Costs,
    /// Scheduler time slice.
    pub sched_slice_ns: u64,
    /// Workloads to run.
    pub workloads: Vec<WorkloadEntry>,
    /// The image the guest booted from, if the scenario declares what it has in common with
    /// other guests booted from it.
    pub image: Option<Image>,
    /// When the guest zeroes every page it has not used (Windows does at boot: it "will check how
    /// much memory it has by zeroing out pages it detects during the boot process", Kingston's
    /// ESX 4.1 boot-storm tests); `None`: never.
    pub zero_memory_at_ns: Option<u64>,
    /// Pages in the balloon from boot on (a Xen guest started with `memory` below `maxmem`).
    pub boot_balloon_pages: u32,
    /// The host backs the guest's whole memory when it is created (Xen's domain builder).
    pub populate_at_boot: bool,
    /// The kernel runs cleancache over its file system (used when the host has tmem).
    pub cleancache: bool,
    /// The kernel runs frontswap over its swap device (used when the host has tmem).
    pub frontswap: bool,
    /// Its self-ballooning driver gives frontswap's pages back to the guest while frontswap does
    /// not grow (`frontswap_selfshrinking`, on unless booted with `noselfshrink`).
    pub frontswap_selfshrink: bool,
    /// Seed of the guest's random streams, derived from the scenario's seed and the VM's place.
    pub seed: u64,
}

impl GuestConfig {
    /// Linux's boot-time reservation for a guest of `memory` bytes. Seed 003's 2 GiB guest reports
    /// MemTotal 1,994,208 KiB, i.e. 102,944 KiB reserved; of that, the memmap (64-byte
    /// `struct page` per 4 KiB page, 1/64 of memory) is 32,768 KiB and the rest, 70,176 KiB, is the
    /// kernel image, firmware areas and early allocations, which do not grow with memory.
    pub fn linux_reserved_bytes(memory: u64) -> u64 {
        memory / 64 + 70_176 * 1024
    }

    /// The kernel's default scheduler slice for this many CPUs: `sysctl_sched_base_slice`
    /// 0.75 ms scaled by 1 + log2(cpus), cpus capped at 8 (SCHED_TUNABLESCALING_LOG).
    pub fn default_sched_slice_ns(vcpus: u32) -> u64 {
        let n = vcpus.clamp(1, 8);
        750_000 * (1 + (31 - n.leading_zeros()) as u64)
    }
}

/// A guest image: what every guest booted from it holds alike.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// Its name: guests of one name hold the same image pages.
    pub name: String,
    /// Pages of the kernel's boot reservation that are the image's (kernel text, drivers,
    /// libraries loaded at boot); the rest of the reservation is the guest's own data.
    pub common_pages: u32,
}

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
            crate::prefetch(c);
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
            Replacement::Linux => Watermarks::linux(managed, &cfg.sysctl),
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
            g.inflate(g.cfg.boot_balloon_pages as u64, false, 0, env);
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
        let cache = self.lru.len(LruList::ActiveFile) + self.lru.len(LruList::InactiveFile);
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

    /// Sends `npages` pages at byte `offset` of the virtual disk to the device; returns when the
    /// transfer completes.
    fn device_io(&mut self, now: u64, offset: u64, npages: usize, write: bool, env: &mut Env) -> u64 {
        let bytes = npages as u64 * PAGE_SIZE;
        self.vmstat.add(if write { Counter::PgpgOut } else { Counter::PgpgIn }, bytes / 1024);
        env.datastores[self.disk.datastore as usize].device.submit(now, self.disk.base + offset, bytes, write)
    }

    /// Submits `items`, (block, page) pairs sorted by block, as one request per run of consecutive
    /// blocks (the block layer's merging), each of at most `sub.max` pages, and schedules their
    /// completions; with `sub.through_gaps`, as one request over the whole block range. The request
    /// holding `key.page`, if any, carries `key`'s waiter and fault; its number is returned.
    /// Pages cleancache or frontswap hold are served from the host's pool first, as one request
    /// that completes when the copies are done.
    fn submit_runs(&mut self, sub: &Submission, items: &[(u32, u32)], key: Option<Waited>, now: u64, env: &mut Env) -> Option<u32> {
        if !self.tmem_serves(sub.kind) {
            return self.submit_device_runs(sub, items, key.as_ref(), now, env);
        }
        let (mut rest, mut served) = (items.to_vec(), Vec::new());
        let ns = self.tmem_serve(sub, &mut rest, &mut served, env);
        let holder = if served.is_empty() { None } else { self.submit_run(sub, &served, key.as_ref(), now, Some(ns), env) };
        if rest.is_empty() {
            return holder;
        }
        self.submit_device_runs(sub, &rest, key.as_ref(), now, env).or(holder)
    }

    /// `submit_runs` to the device.
    fn submit_device_runs(&mut self, sub: &Submission, items: &[(u32, u32)], key: Option<&Waited>, now: u64, env: &mut Env) -> Option<u32> {
        if sub.through_gaps {
            return self.submit_run(sub, items, key, now, None, env);
        }
        let mut holder = None;
        for run in runs(items, sub.max) {
            holder = self.submit_run(sub, run, key, now, None, env).or(holder);
        }
        holder
    }

    /// One request of `submit_runs`, over blocks `run[0].0..=run[last].0`, to the device or (with
    /// `tmem_ns`, the copies' time) served by tmem; returns its number if it holds `key.page`.
    #[allow(clippy::too_many_arguments)]
    fn submit_run(
        &mut self,
        sub: &Submission,
        run: &[(u32, u32)],
        key: Option<&Waited>,
        now: u64,
        tmem_ns: Option<u64>,
        env: &mut Env,
    ) -> Option<u32> {
        let write = matches!(sub.kind, BioKind::SwapWrite | BioKind::FileWrite);
        let mut holder = None;
        {
            let pages = self.bios.list_of(run.iter().map(|&(_, p)| p));
            let mut waiters = self.bios.list();
            let mut fault = None;
            let is_key = key.filter(|k| pages.contains(&k.page));
            if let Some(k) = is_key {
                if k.waiter != NONE {
                    waiters.push(k.waiter);
                }
                fault = k.fault;
            }
            // A write reads the pages: any the host took must come back first (double paging).
            let mut start = now;
            if write {
                for &p in &pages {
                    start = start.max(now + self.host_touch(p, false, now, false, env).0);
                }
            }
            let done = match tmem_ns {
                Some(ns) => {
                    if sub.kind == BioKind::SwapWrite {
                        // `write_slot` counted them for the device; frontswap took them instead.
                        self.vmstat.sub(Counter::PswpOut, pages.len() as u64);
                    }
                    start + ns
                }
                None => {
                    let blocks = (run[run.len() - 1].0 - run[0].0 + 1) as usize;
                    let n = pages.len() as u64;
                    match sub.kind {
                        BioKind::SwapRead => {
                            self.vmstat.inc(Counter::PageReads);
                            self.vmstat.add(Counter::PswpIn, n);
                        }
                        BioKind::SwapWrite => self.vmstat.inc(Counter::PageWrites),
                        _ => {}
                    }
                    self.device_io(start, sub.base + run[0].0 as u64 * PAGE_SIZE, blocks, write, env)
                }
            };
            let id = self.bios.next_id();
            for &p in &pages {
                self.pages[p as usize].io = id;
            }
            if is_key.is_some() {
                holder = Some(id);
            }
            self.bios.insert(Bio { kind: sub.kind, pages, waiters, file: sub.file, kthread: sub.kthread, fault });
            env.schedule(self.id, done, GuestEvent::IoDone { bio: id });
        }
        holder
    }

    /// A request completed: finish each page's state and wake whoever waited.
    fn io_done(&mut self, id: u32, now: u64, env: &mut Env) {
        let bio = self.bios.take(id);
        for &p in &bio.pages {
            self.pages[p as usize].io = NONE;
        }
        match bio.kind {
            BioKind::SwapRead => self.swap_read_done(&bio, env),
            BioKind::FileRead => self.file_read_done(&bio),
            BioKind::SwapWrite if self.windows() => self.modified_write_done(&bio.pages, now, env),
            BioKind::SwapWrite | BioKind::FileWrite => self.write_done(&bio),
        }
        for &pid in &bio.waiters {
            self.wake(pid, now, env);
        }
        // Any completion may have freed memory or lowered the dirty count.
        for pid in std::mem::take(&mut self.throttled) {
            self.wake(pid, now, env);
        }
        self.kswapd_io_done(now, env);
        self.flusher_io_done(&bio, now, env);
        self.bios.recycle(bio);
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
