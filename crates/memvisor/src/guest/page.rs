//! Guest-physical page descriptors (the guest's `struct page` array): one record per page in a
//! dense array indexed by page frame number, so that a lookup is an index, never a search, and a
//! page's state is one cache line away.

use crate::bitmap::Bitmap;
pub use crate::index::NONE;

/// What a guest-physical page currently holds. Every page is in exactly one of these states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    /// On the free list.
    Free = 0,
    /// Pinned by the kernel (image, memmap, slab, page tables).
    Kernel = 1,
    /// Anonymous memory of a process, possibly also in the swap cache.
    Anon = 2,
    /// Page cache of a file.
    File = 3,
    /// Pinned by the balloon driver and handed to the host.
    Balloon = 4,
}

/// `PG_referenced`: set by `mark_page_accessed` and by reclaim when it finds a young mapping.
pub const PG_REFERENCED: u8 = 1 << 0;
/// Contents differ from the backing store (swap slot or file block).
pub const PG_DIRTY: u8 = 1 << 2;
/// A write of the page to its backing store is in flight.
pub const PG_WRITEBACK: u8 = 1 << 3;
/// Reclaim wants the page as soon as its writeback completes.
pub const PG_RECLAIM: u8 = 1 << 4;
/// A read into the page is in flight; users wait for it.
pub const PG_LOCKED: u8 = 1 << 5;
/// Mapped by its owning process's page table.
pub const PG_MAPPED: u8 = 1 << 6;
/// Brought in by readahead and not yet used (swap or file); a use counts a readahead hit. The same
/// bit as `PG_RECLAIM`, as in the kernel (`PG_readahead = PG_reclaim`, include/linux/page-flags.h:
/// "PG_readahead is only used for reads; PG_reclaim is only for writes"), with the kernel's
/// consequence: a swap-cache hit on a page under reclaim writeback takes it for a readahead hit and
/// clears its reclaim mark, so its write's completion no longer rotates it to the inactive tail.
pub const PG_READAHEAD: u8 = PG_RECLAIM;
/// The page was on an active list before reclaim took it back to an inactive one
/// (`PG_workingset`): its eviction and refault tell working-set thrashing from cache churn.
pub const PG_WORKINGSET: u8 = 1 << 7;

/// The owner of kernel allocations' data (`crate::content::private`): the last process number.
pub const KERNEL_OWNER: u64 = crate::content::FILE_OWNER - 1;

/// One page's descriptor. The fields a page's allocation, fault, reclaim and free read together
/// share one 32-byte record (two to a cache line), so that a page scattered over a large guest
/// costs one cache miss rather than one per field.
#[derive(Clone, Copy, Debug)]
pub struct Page {
    /// What the page holds (`crate::content`), set when it is allocated (`Pages::take_free`) and
    /// when its owner writes it or a read fills it. A freed page keeps it.
    pub content: u64,
    /// Owning process (anon) or file (file); `NONE` otherwise.
    pub owner: u32,
    /// Virtual page number (anon) or page index in the file (file).
    pub index: u32,
    /// Swap slot of an anonymous page in the swap cache; `NONE` otherwise.
    pub swap: u32,
    /// In-flight I/O request the page is part of; `NONE` otherwise.
    pub io: u32,
    /// State of the page.
    pub kind: PageKind,
    /// `PG_*` flags.
    pub flags: u8,
    /// The memory cgroup the page is charged to (0: the root).
    pub memcg: u8,
}

// Two descriptors to a 64-byte cache line.
const _: () = assert!(std::mem::size_of::<Page>() == 32);

impl Page {
    /// A page never allocated.
    const UNUSED: Self =
        Self { content: crate::content::ZERO, owner: NONE, index: NONE, swap: NONE, io: NONE, kind: PageKind::Free, flags: 0, memcg: 0 };
}

/// The page descriptor array. Descriptors exist for the pages the guest has used (page numbers
/// are handed out from 0 up, freed ones first), so its size follows use, not configured memory.
/// The kernel's boot-time reservation is the range `managed..` and has no descriptors: those pages
/// are kernel pages for good. Indexing with a page number gives its descriptor.
#[derive(Clone, Debug)]
pub struct Pages {
    desc: Vec<Page>,
    /// Per page: the host backed it with nothing pending at the guest's last touch and has not
    /// said otherwise since (`GuestMemory::invalidate`; the guest clears it when it hands the page
    /// to its balloon), so a touch needs no host check. Cached state of the host's, not the
    /// guest's; a bitmap beside the descriptors, so that a reference that needs nothing else of
    /// the page does not reach its descriptor.
    host_plain: Bitmap,
    /// The guest's number, for the identities of what its pages hold.
    vm: u32,
    /// Pages charged to each memory cgroup (`memory.usage_in_bytes` / 4 KiB), root first.
    charged: Vec<u64>,
    /// Freed pages, reused last-freed first.
    free_list: Vec<u32>,
    /// Pages the kernel manages (allocatable); the reservation follows them.
    managed: u32,
    /// Pages of each kind, indexed by `PageKind as usize`.
    pub count: [u64; 5],
}

impl std::ops::Index<usize> for Pages {
    type Output = Page;
    #[inline]
    fn index(&self, i: usize) -> &Page {
        &self.desc[i]
    }
}

impl std::ops::IndexMut<usize> for Pages {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Page {
        &mut self.desc[i]
    }
}

impl Pages {
    /// `managed` free pages followed by `reserved` kernel pages, for `memcgs` memory cgroups, of
    /// guest `vm`.
    pub fn new(vm: u32, managed: u32, reserved: u32, memcgs: u8) -> Self {
        Self {
            desc: Vec::new(),
            host_plain: Bitmap::default(),
            vm,
            charged: vec![0; memcgs as usize],
            free_list: Vec::new(),
            managed,
            count: [managed as u64, reserved as u64, 0, 0, 0],
        }
    }

    /// Pages with a descriptor (every page the guest has allocated at least once).
    pub fn len(&self) -> usize {
        self.desc.len()
    }

    /// The descriptor of page `i`, if it has one.
    pub fn get(&self, i: usize) -> Option<&Page> {
        self.desc.get(i)
    }

    /// Whether the host is known to back page `p` plainly (no check needed on a touch).
    #[inline]
    pub fn host_plain(&self, p: u32) -> bool {
        (p as usize) < self.host_plain.len() && self.host_plain.get(p as usize)
    }

    /// Records what the host said of page `p` (a page without a descriptor is never plain).
    #[inline]
    pub fn set_host_plain(&mut self, p: u32, plain: bool) {
        if (p as usize) < self.host_plain.len() {
            self.host_plain.assign(p as usize, plain);
        }
    }

    /// Pages the kernel manages (MemTotal).
    pub fn managed(&self) -> u32 {
        self.managed
    }

    /// Free pages.
    pub fn nr_free(&self) -> u64 {
        self.count[PageKind::Free as usize]
    }

    /// Pages charged to memory cgroup `v`.
    pub fn charged(&self, v: u8) -> u64 {
        self.charged[v as usize]
    }

    /// What a page allocated as `kind` holds once its first touch has filled it: zeros for
    /// anonymous memory (the fault zeroes it) and the balloon; the file's data for the page cache;
    /// the guest's own kernel data otherwise.
    fn filled(&self, kind: PageKind, owner: u32, index: u32, p: u32) -> u64 {
        use crate::content::{FILE_OWNER, ZERO, private};
        match kind {
            PageKind::Anon | PageKind::Balloon | PageKind::Free => ZERO,
            PageKind::File => private(self.vm as u64, FILE_OWNER + owner as u64, index as u64),
            PageKind::Kernel => private(self.vm as u64, KERNEL_OWNER, p as u64),
        }
    }

    /// Takes a free page (the last freed, else the lowest never used) and gives it a kind and owner,
    /// charged to memory cgroup `memcg`. Its content is what the caller's first touch puts there.
    pub fn take_free(&mut self, kind: PageKind, owner: u32, index: u32, memcg: u8) -> Option<u32> {
        let p = match self.free_list.pop() {
            Some(p) => p,
            None if (self.desc.len() as u32) < self.managed => {
                self.desc.push(Page::UNUSED);
                self.host_plain.grow(self.desc.len());
                (self.desc.len() - 1) as u32
            }
            None => return None,
        };
        let content = self.filled(kind, owner, index, p);
        let d = &mut self.desc[p as usize];
        debug_assert_eq!(d.kind, PageKind::Free);
        d.kind = kind;
        d.flags = 0;
        d.owner = owner;
        d.index = index;
        d.memcg = memcg;
        d.content = content;
        self.charged[memcg as usize] += 1;
        self.count[0] -= 1;
        self.count[kind as usize] += 1;
        Some(p)
    }

    /// A hint that page `p`'s descriptor is about to be used.
    #[inline]
    pub fn prefetch(&self, p: u32) {
        if let Some(d) = self.desc.get(p as usize) {
            crate::index::prefetch(d);
        }
    }

    /// Returns a page to the free list. The caller has already unlinked it from every list.
    pub fn release(&mut self, p: u32) {
        let d = &mut self.desc[p as usize];
        debug_assert_ne!(d.kind, PageKind::Free);
        debug_assert_eq!(d.swap, NONE);
        debug_assert_eq!(d.io, NONE);
        self.count[d.kind as usize] -= 1;
        self.count[0] += 1;
        self.charged[d.memcg as usize] -= 1;
        d.memcg = 0;
        d.kind = PageKind::Free;
        d.flags = 0;
        d.owner = NONE;
        d.index = NONE;
        self.free_list.push(p);
    }

    /// The free list of pages freed at least once, for invariant checks.
    pub fn free_list(&self) -> &[u32] {
        &self.free_list
    }

    /// Tests a flag.
    #[inline]
    pub fn has(&self, p: u32, f: u8) -> bool {
        self.desc[p as usize].flags & f != 0
    }

    /// Sets flags.
    #[inline]
    pub fn set(&mut self, p: u32, f: u8) {
        self.desc[p as usize].flags |= f;
    }

    /// Clears flags.
    #[inline]
    pub fn clear(&mut self, p: u32, f: u8) {
        self.desc[p as usize].flags &= !f;
    }

    /// Clears a flag and says whether it was set.
    #[inline]
    pub fn test_and_clear(&mut self, p: u32, f: u8) -> bool {
        let was = self.has(p, f);
        self.clear(p, f);
        was
    }
}
