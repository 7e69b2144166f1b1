//! A guest process: its address space (page table and regions), its workload and its accounting.

use crate::bitmap::Bitmap;
use crate::workloads::{Op, Workload};

/// Page-table entry tag: present, low bits hold the guest page frame number.
pub const PTE_PRESENT: u32 = 1 << 31;
/// Page-table entry tag: swapped out, low bits hold the swap slot.
pub const PTE_SWAP: u32 = 1 << 30;
/// Mask of the payload bits of a page-table entry.
pub const PTE_MASK: u32 = (1 << 30) - 1;

/// A contiguous range of virtual pages created by one `Map` operation.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    /// First virtual page.
    pub start: u32,
    /// Number of pages.
    pub pages: u32,
    /// False once unmapped.
    pub live: bool,
}

/// The memory descriptor (`mm_struct`) of a process.
#[derive(Clone, Debug, Default)]
pub struct Mm {
    /// Page table: 0 (never touched or unmapped), `PTE_PRESENT | pfn` or `PTE_SWAP | slot`.
    pub pte: Vec<u32>,
    /// Bit set when a read of the page would change nothing (present, accessed, backed by the host).
    pub rfast: Bitmap,
    /// Bit set when a write would change nothing (also dirty and not sharing a swap copy).
    pub wfast: Bitmap,
    /// Regions in creation order; a region's id is its index.
    pub regions: Vec<Region>,
    /// Resident pages.
    pub rss: u64,
    /// Pages in swap (page-table entries holding a swap slot).
    pub swapents: u64,
}

impl Mm {
    /// Adds a region of `pages` virtual pages and returns its id.
    pub fn map(&mut self, pages: u32) -> u32 {
        let start = self.pte.len() as u32;
        let end = start as usize + pages as usize;
        assert!(end < PTE_MASK as usize, "address space exhausted");
        self.pte.resize(end, 0);
        self.rfast.grow(end);
        self.wfast.grow(end);
        self.regions.push(Region { start, pages, live: true });
        (self.regions.len() - 1) as u32
    }

    /// Marks the fast bits of a page after its state changed.
    #[inline]
    pub fn set_fast(&mut self, vpn: u32, read: bool, write: bool) {
        self.rfast.assign(vpn as usize, read);
        self.wfast.assign(vpn as usize, write);
    }
}

/// Why a process is not running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcState {
    /// Not yet started (its start time has not come).
    New,
    /// On the run queue or on a vCPU.
    Runnable,
    /// Waiting for I/O or for memory.
    Blocked,
    /// Sleeping until a wake-up event.
    Sleeping,
    /// Finished its work.
    Exited,
    /// Killed by the OOM killer.
    Killed,
}

/// Per-process accounting.
#[derive(Clone, Debug, Default)]
pub struct ProcStats {
    /// Simulated time the process started.
    pub start_ns: u64,
    /// Simulated time it exited (0 while running).
    pub end_ns: u64,
    /// Page references performed.
    pub touches: u64,
    /// Minor faults.
    pub minflt: u64,
    /// Major faults.
    pub majflt: u64,
    /// Time spent blocked on memory: fault I/O, reclaim, dirty throttling.
    pub stall_ns: u64,
    /// Time spent blocked on file I/O it asked for (reads, fsync).
    pub io_wait_ns: u64,
}

/// VMA swap-readahead state (`vma->swap_readahead_info`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SwapRa {
    /// Virtual page of the previous swap fault.
    pub prev_vpn: u32,
    /// Previous window size in pages.
    pub prev_win: u32,
    /// Readahead pages used since the last window was chosen.
    pub hits: u32,
}

/// A process.
pub struct Process {
    /// Index in the guest's process table.
    pub pid: u32,
    /// Name (workload name and instance).
    pub name: String,
    /// Address space.
    pub mm: Mm,
    /// Operation source.
    pub workload: Box<dyn Workload>,
    /// Operation in progress; it carries its own progress.
    pub op: Option<Op>,
    /// Scheduling state.
    pub state: ProcState,
    /// Time it entered its current blocked state.
    pub blocked_since: u64,
    /// Whether the current block counts as a memory stall (else I/O wait).
    pub blocked_on_memory: bool,
    /// Accounting.
    pub stats: ProcStats,
    /// Named instants the workload recorded (e.g. "write-start").
    pub marks: Vec<(String, u64)>,
    /// Swap readahead state.
    pub swap_ra: SwapRa,
    /// Files this process created, by its own handle number.
    pub files: Vec<u32>,
    /// Index of the scenario workload this process runs.
    pub workload_index: usize,
}

impl Process {
    /// A process that has not started yet.
    pub fn new(pid: u32, name: String, workload: Box<dyn Workload>, workload_index: usize) -> Self {
        Self {
            pid,
            name,
            mm: Mm::default(),
            workload,
            op: None,
            state: ProcState::New,
            blocked_since: 0,
            blocked_on_memory: false,
            stats: ProcStats::default(),
            marks: Vec::new(),
            swap_ra: SwapRa::default(),
            files: Vec::new(),
            workload_index,
        }
    }

    /// Whether the process has ended (exited or killed).
    pub fn ended(&self) -> bool {
        matches!(self.state, ProcState::Exited | ProcState::Killed)
    }
}
