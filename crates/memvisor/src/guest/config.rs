//! A guest's configuration as a scenario resolves it: its size, reclaim model, sysctls, CPU costs,
//! workloads and the image it boots from.

use super::{BalloonDriver, CgroupVersion};
use crate::workloads::WorkloadEntry;

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

scenario_names!(Thp {
    Never => "never",
    Madvise => "madvise",
    Always => "always",
});

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
        let within = |min: u64, max: u64| -> Result<u32, String> {
            if v < min || v > max { Err(format!("{name} = {v} is out of range {min}..={max}")) } else { Ok(v as u32) }
        };
        let small = |max: u64| within(0, max);
        match name {
            "vm.swappiness" => self.swappiness = small(200)?,
            "vm.page-cluster" => self.page_cluster = small(31)?,
            "vm.min_free_kbytes" => self.min_free_kbytes = Some(v),
            // The kernel's own bounds (mm/page_alloc.c: extra1 = SYSCTL_ONE, extra2 = 3000).
            "vm.watermark_scale_factor" => self.watermark_scale_factor = within(1, 3000)?,
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
