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
    /// Its swap readahead state (`vma->swap_readahead_info`): a new mapping starts afresh.
    pub ra: SwapRa,
}

/// The memory descriptor (`mm_struct`) of a process.
#[derive(Clone, Debug, Default)]
pub struct Mm {
    /// Page table: 0 (never touched or unmapped), `PTE_PRESENT | pfn` or `PTE_SWAP | slot`.
    pub pte: Vec<u32>,
    /// The hardware accessed bit of each entry (meaningful for present entries only): set by a
    /// reference, cleared by reclaim's `page_referenced`. Kept beside the table, not in the page's
    /// descriptor, as the MMU keeps it in the PTE: a reference need not reach the descriptor.
    pub young: Bitmap,
    /// Bit set when a read of the page would change nothing (present, accessed, backed by the host).
    pub rfast: Bitmap,
    /// Bit set when a write would change nothing (also dirty and not sharing a swap copy).
    pub wfast: Bitmap,
    /// Regions in creation order; a region's id is its index.
    pub regions: Vec<Region>,
    /// Free ranges below the table's end, for reuse: (start, pages), sorted by address, no two
    /// adjacent.
    holes: Vec<(u32, u32)>,
    /// Resident pages.
    pub rss: u64,
    /// Pages in swap (page-table entries holding a swap slot).
    pub swapents: u64,
}

impl Mm {
    /// Adds a region of `pages` virtual pages and returns its id, or `None` if the address space
    /// is exhausted. It goes in the lowest free range that fits, as the kernel's bottom-up mmap
    /// layout places it (`vm_unmapped_area`; the default top-down layout is its mirror image). The
    /// free space above the highest mapping is unbounded, as it is in that layout: a region that
    /// fits nowhere else starts there and the table grows by what it lacks. So a process that maps
    /// and unmaps in a loop (`stress --vm`, a job slot of `make` running one compiler after
    /// another) keeps a page table of its largest region's size.
    pub fn map(&mut self, pages: u32) -> Option<u32> {
        debug_assert!(pages > 0, "an empty region would leave an empty free range");
        let len = self.pte.len() as u32;
        let start = match self.holes.iter().position(|&(_, n)| n >= pages) {
            Some(i) => {
                let (start, n) = self.holes[i];
                if n > pages {
                    self.holes[i] = (start + pages, n - pages);
                } else {
                    self.holes.remove(i);
                }
                start
            }
            None => {
                // The top hole, if it reaches the table's end, is the bottom of the open space above.
                let top = matches!(self.holes.last(), Some(&(s, n)) if s + n == len);
                let start = if top { self.holes[self.holes.len() - 1].0 } else { len };
                let end = start as usize + pages as usize;
                if end >= PTE_MASK as usize {
                    return None;
                }
                if top {
                    self.holes.pop();
                }
                self.pte.resize(end, 0);
                self.young.grow(end);
                self.rfast.grow(end);
                self.wfast.grow(end);
                start
            }
        };
        self.regions.push(Region { start, pages, live: true, ra: SwapRa::default() });
        Some((self.regions.len() - 1) as u32)
    }

    /// Records that a region's range is free again, merged with the free ranges beside it (the
    /// kernel's gaps are what lies between mappings, so two neighbouring gaps are one).
    pub fn unmap(&mut self, region: u32) {
        let r = &mut self.regions[region as usize];
        debug_assert!(r.live, "region {region} unmapped twice");
        r.live = false;
        let (mut start, mut pages) = (r.start, r.pages);
        // Holes are kept sorted by address.
        let mut i = self.holes.partition_point(|&(s, _)| s < start);
        if i < self.holes.len() && start + pages == self.holes[i].0 {
            pages += self.holes.remove(i).1;
        }
        if i > 0 && self.holes[i - 1].0 + self.holes[i - 1].1 == start {
            i -= 1;
            start = self.holes[i].0;
            pages += self.holes.remove(i).1;
        }
        self.holes.insert(i, (start, pages));
    }

    /// The index of the live region holding virtual page `vpn` (`find_vma`), if any. A freed range
    /// may have been reused, so only live regions count; the newest region covering a page is the
    /// only one that can be live, so the search goes newest first and stops there (a process that
    /// maps a region per task, a make job slot running one compiler after another, keeps every
    /// region it ever mapped).
    pub fn region_index(&self, vpn: u32) -> Option<usize> {
        let i = self.regions.iter().rposition(|r| r.start <= vpn && vpn < r.start + r.pages)?;
        self.regions[i].live.then_some(i)
    }

    /// The live region holding virtual page `vpn`, if any.
    pub fn region_of(&self, vpn: u32) -> Option<Region> {
        self.region_index(vpn).map(|i| self.regions[i])
    }

    /// Checks the address space: live regions do not overlap, the free ranges are exactly what they
    /// leave free below the table's end (sorted, none empty, no two touching), and every entry
    /// outside a live region is empty.
    pub fn check(&self) -> Result<(), String> {
        let len = self.pte.len();
        let mut live = vec![false; len];
        for (id, r) in self.regions.iter().enumerate().filter(|(_, r)| r.live) {
            let range = live.get_mut(r.start as usize..(r.start + r.pages) as usize);
            match range {
                Some(range) if !range.contains(&true) => range.fill(true),
                _ => return Err(format!("region {id} at {}+{} overlaps another or passes the table's end {len}", r.start, r.pages)),
            }
        }
        let mut free = Vec::new();
        let mut v = 0;
        while v < len {
            let run = live[v..].iter().position(|&l| l).unwrap_or(len - v);
            if run > 0 {
                free.push((v as u32, run as u32));
            }
            v += run + live[v + run..].iter().position(|&l| !l).unwrap_or(len - v - run);
        }
        if free != self.holes {
            return Err(format!("free ranges {:?} but the live regions leave {free:?}", self.holes));
        }
        match (0..len).find(|&v| !live[v] && self.pte[v] != 0) {
            Some(v) => Err(format!("entry {v} outside every live region holds {:#x}", self.pte[v])),
            None => Ok(()),
        }
    }

    /// Replaces a present entry with `pte` (a swap entry, or 0 for none): its accessed and fast bits go
    /// with the mapping.
    #[inline]
    pub fn unmap_entry(&mut self, vpn: u32, pte: u32) {
        self.pte[vpn as usize] = pte;
        self.young.clear(vpn as usize);
        self.set_fast(vpn, false, false);
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

/// Most spans an `AheadLog` keeps; past that the process waits for the rest of the simulation
/// instead of running ahead.
const AHEAD_SPANS: usize = 16;

/// A run of visits to consecutive pages of a region: the i-th visit (i < `n`) touches page
/// `start + (first + i) mod pages` at time `t0 + i * cost`.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    pages: u32,
    first: u32,
    n: u64,
    t0: u64,
    cost: u64,
}

/// References a process made ahead of the rest of the simulation. A vCPU may account resident
/// hits up to its lookahead past the next event; a reader of accessed bits (reclaim) that runs at
/// an earlier time must still see those references as made after it, or it would take for idle a
/// page the process touched after the scan. The log keeps them as spans of a sweep, which is
/// exact and small; other patterns do not run ahead.
#[derive(Clone, Debug, Default)]
pub struct AheadLog {
    spans: Vec<Span>,
}

impl AheadLog {
    /// Records `n` visits to consecutive pages of the region `[start, start + pages)` beginning at
    /// page `first` at time `t0`, one every `cost` ns. Returns false (recording nothing) when full.
    pub fn record(&mut self, start: u32, pages: u32, first: u32, n: u64, t0: u64, cost: u64) -> bool {
        if self.spans.len() == AHEAD_SPANS {
            return false;
        }
        self.spans.push(Span { start, pages, first, n, t0, cost });
        true
    }

    /// Whether there is room for another span.
    pub fn has_room(&self) -> bool {
        self.spans.len() < AHEAD_SPANS
    }

    /// Forgets spans that ended by `t`: no reader can run before the event being handled.
    pub fn prune(&mut self, t: u64) {
        self.spans.retain(|s| s.t0 + s.n * s.cost > t);
    }

    /// Whether page `vpn` was referenced after time `t`.
    pub fn touched_after(&self, vpn: u32, t: u64) -> bool {
        self.spans.iter().any(|s| {
            if vpn < s.start || vpn >= s.start + s.pages {
                return false;
            }
            let k = ((vpn - s.start + s.pages - s.first) % s.pages) as u64;
            // The last visit to the page in this span.
            k < s.n && s.t0 + (k + (s.n - 1 - k) / s.pages as u64 * s.pages as u64) * s.cost > t
        })
    }
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
    /// Files this process created, by its own handle number.
    pub files: Vec<u32>,
    /// Index of the scenario workload this process runs.
    pub workload_index: usize,
    /// Its memory cgroup (0: the root).
    pub memcg: u8,
    /// References made ahead of the rest of the simulation.
    pub ahead: AheadLog,
    /// A charge's limit reclaim under way, kept while the process lets time pass.
    pub(super) limit_reclaim: Option<Box<super::memcontrol::LimitReclaim>>,
    /// Its block plug (`current->plug`): swap writes its fault's reclaim made while the fault read
    /// ahead, submitted with the fault's reads or when it sleeps.
    pub(super) plug: super::bio::Plug,
}

impl Process {
    /// A process that has not started yet.
    pub fn new(pid: u32, name: String, workload: Box<dyn Workload>, workload_index: usize, memcg: u8) -> Self {
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
            files: Vec::new(),
            workload_index,
            memcg,
            ahead: AheadLog::default(),
            limit_reclaim: None,
            plug: super::bio::Plug::default(),
        }
    }

    /// Whether the process has ended (exited or killed).
    pub fn ended(&self) -> bool {
        matches!(self.state, ProcState::Exited | ProcState::Killed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_ranges_merge_and_the_lowest_that_fits_is_reused() {
        let mut mm = Mm::default();
        let a = mm.map(10).unwrap();
        let b = mm.map(5).unwrap();
        let c = mm.map(7).unwrap();
        assert_eq!((mm.regions[b as usize].start, mm.regions[c as usize].start), (10, 15));
        mm.unmap(a);
        mm.unmap(b);
        // [0, 15) is one free range now: a 12-page region fits at 0, where neither hole alone would.
        let d = mm.map(12).unwrap();
        assert_eq!(mm.regions[d as usize].start, 0);
        assert_eq!(mm.pte.len(), 22, "the table did not grow");
        mm.unmap(c);
        // [12, 22) is free and reaches the table's end: a 20-page region starts there and the table
        // grows by the 10 pages it lacks.
        let e = mm.map(20).unwrap();
        assert_eq!((mm.regions[e as usize].start, mm.pte.len()), (12, 32));
        assert_eq!(mm.region_of(14).map(|r| r.start), Some(12), "the live region, not c's freed one");
        assert_eq!(mm.region_of(3).map(|r| r.pages), Some(12));
    }

    #[test]
    fn any_sequence_of_maps_and_unmaps_keeps_the_free_ranges_exact() {
        use rand::Rng as _;
        let mut rng = crate::rng::stream(7, &[]);
        let mut mm = Mm::default();
        let mut live: Vec<u32> = Vec::new();
        for _ in 0..3_000 {
            if live.is_empty() || rng.random_range(0..5) < 3 {
                live.push(mm.map(rng.random_range(1..=20)).unwrap());
            } else {
                mm.unmap(live.swap_remove(rng.random_range(0..live.len())));
            }
            mm.check().unwrap();
        }
        // Merged on both sides: three neighbours freed outer ones first.
        let mut mm = Mm::default();
        let ids: Vec<u32> = (0..3).map(|_| mm.map(4).unwrap()).collect();
        mm.unmap(ids[0]);
        mm.unmap(ids[2]);
        mm.unmap(ids[1]);
        assert_eq!(mm.holes, vec![(0, 12)]);
    }

    #[test]
    fn one_region_at_a_time_keeps_the_table_at_the_largest() {
        // A make job slot: one compiler's heap after another, of varying sizes.
        let mut mm = Mm::default();
        for n in [30u32, 10, 45, 20, 45, 5, 44, 1, 45] {
            let r = mm.map(n).unwrap();
            assert_eq!(mm.regions[r as usize].start, 0, "the lowest free range");
            mm.unmap(r);
        }
        assert_eq!(mm.pte.len(), 45);
        assert_eq!(mm.holes, vec![(0, 45)], "every freed range merged into one");
    }

    #[test]
    fn ahead_spans_know_each_pages_last_visit() {
        let mut log = AheadLog::default();
        // A 10-page region at vpn 100, swept from page 7 for 25 visits at 1 ns each from t = 1000:
        // pages 7, 8, 9, 0, ..., 9, 0, 1; page 7's last visit is the 21st (t = 1020), page 2's the
        // 16th (t = 1015), page 1's the 25th (t = 1024).
        assert!(log.record(100, 10, 7, 25, 1000, 1));
        assert!(log.touched_after(107, 1019) && !log.touched_after(107, 1020));
        assert!(log.touched_after(102, 1014) && !log.touched_after(102, 1015));
        assert!(log.touched_after(101, 1023) && !log.touched_after(101, 1024));
        assert!(!log.touched_after(99, 0) && !log.touched_after(110, 0), "outside the region");
        log.prune(1025);
        assert!(!log.touched_after(101, 0), "a span that ended is forgotten");
        for _ in 0..AHEAD_SPANS {
            assert!(log.record(0, 1, 0, 1, 0, 1));
        }
        assert!(!log.record(0, 1, 0, 1, 0, 1), "the log is bounded");
    }
}
