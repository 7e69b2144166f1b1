//! The physical-to-machine map of one VM: for every guest page, where its contents live on the
//! host. Every guest page is in exactly one state: unbacked (never touched, or given up), backed
//! by a private frame, ballooned, compressed in the VM's compression cache, swapped to the VM's
//! swap file, or shared with other pages (a reference-counted frame).
//!
//! Storage grows with use, not with the VM's configured size: entries live in chunks of 512 pages
//! that are one value while all their entries are equal (untouched memory, or a kernel area backed
//! at boot) and become an array once one entry differs.

/// Where a guest page's contents are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// No frame: never touched, or released (balloon deflated). A touch backs it with a zeroed frame.
    Unbacked,
    /// Backed by a private frame.
    Backed,
    /// Taken by the guest's balloon driver; its frame went back to the host.
    Ballooned,
    /// In the VM's compression cache, at this slot.
    Compressed(u32),
    /// In the VM's swap file, at this slot.
    Swapped(u32),
    /// Shares this reference-counted frame with other pages.
    Shared(u32),
}

/// Flags an entry carries besides its state.
pub mod flags {
    /// A host swap-out of the page is in flight: the frame is still held, the contents are on
    /// their way to the swap file.
    pub const SWAPOUT: u16 = 1 << 0;
    /// Chosen by the active-memory sampler this period; cleared when the guest touches the page.
    pub const SAMPLED: u16 = 1 << 1;
    /// Being read back from the swap file or decompressed; readers wait until it is in.
    pub const READING: u16 = 1 << 2;
}

/// An entry: state in bits 60..64, flags in 44..60, payload (slot or frame) in 0..32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Entry(u64);

const UNBACKED: u64 = 0;
const BACKED: u64 = 1;
const BALLOONED: u64 = 2;
const COMPRESSED: u64 = 3;
const SWAPPED: u64 = 4;
const SHARED: u64 = 5;

impl Entry {
    /// An entry in `state` with no flags.
    pub fn new(state: PageState) -> Self {
        let (tag, payload) = match state {
            PageState::Unbacked => (UNBACKED, 0),
            PageState::Backed => (BACKED, 0),
            PageState::Ballooned => (BALLOONED, 0),
            PageState::Compressed(s) => (COMPRESSED, s),
            PageState::Swapped(s) => (SWAPPED, s),
            PageState::Shared(f) => (SHARED, f),
        };
        Self(tag << 60 | payload as u64)
    }

    /// The state.
    #[inline]
    pub fn state(self) -> PageState {
        let payload = self.0 as u32;
        match self.0 >> 60 {
            UNBACKED => PageState::Unbacked,
            BACKED => PageState::Backed,
            BALLOONED => PageState::Ballooned,
            COMPRESSED => PageState::Compressed(payload),
            SWAPPED => PageState::Swapped(payload),
            _ => PageState::Shared(payload),
        }
    }

    /// Whether the page is backed by a private frame (the common, fast case).
    #[inline]
    pub fn is_backed(self) -> bool {
        self.0 >> 60 == BACKED
    }

    /// The payload: the slot of a compressed or swapped page, the frame of a shared one, and the
    /// swap slot a swap-out in flight writes to.
    #[inline]
    pub fn payload(self) -> u32 {
        self.0 as u32
    }

    /// The entry with another payload.
    #[inline]
    pub fn with_payload(self, x: u32) -> Self {
        Self(self.0 & !0xffff_ffff | x as u64)
    }

    /// The flags.
    #[inline]
    pub fn flags(self) -> u16 {
        (self.0 >> 44) as u16
    }

    /// The entry with `f` set (`on`) or cleared.
    #[inline]
    pub fn with_flag(self, f: u16, on: bool) -> Self {
        let bits = (f as u64) << 44;
        Self(if on { self.0 | bits } else { self.0 & !bits })
    }
}

/// Entries per chunk.
const CHUNK: usize = 512;

#[derive(Clone, Debug)]
enum Chunk {
    Uniform(Entry),
    Dense(Box<[Entry; CHUNK]>),
}

/// One VM's map.
#[derive(Clone, Debug)]
pub struct P2m {
    chunks: Vec<Chunk>,
    pages: u32,
}

impl P2m {
    /// A map of `pages` unbacked pages.
    pub fn new(pages: u32) -> Self {
        Self { chunks: vec![Chunk::Uniform(Entry::default()); (pages as usize).div_ceil(CHUNK)], pages }
    }

    /// Guest pages mapped.
    pub fn len(&self) -> u32 {
        self.pages
    }

    /// Whether the VM has no pages.
    pub fn is_empty(&self) -> bool {
        self.pages == 0
    }

    /// Asks the CPU to load page `ppn`'s entry ahead of its use: a scan in random order misses
    /// the cache on every page, and a miss started early overlaps with the work before it.
    #[inline]
    pub fn prefetch(&self, ppn: u32) {
        if let Chunk::Dense(a) = &self.chunks[ppn as usize / CHUNK] {
            crate::index::prefetch(&a[ppn as usize % CHUNK]);
        }
    }

    /// The entry of page `ppn`.
    #[inline]
    pub fn get(&self, ppn: u32) -> Entry {
        match &self.chunks[ppn as usize / CHUNK] {
            Chunk::Uniform(e) => *e,
            Chunk::Dense(a) => a[ppn as usize % CHUNK],
        }
    }

    /// Sets the entry of page `ppn`.
    pub fn set(&mut self, ppn: u32, e: Entry) {
        let c = &mut self.chunks[ppn as usize / CHUNK];
        match c {
            Chunk::Dense(a) => a[ppn as usize % CHUNK] = e,
            Chunk::Uniform(u) if *u == e => {}
            Chunk::Uniform(u) => {
                let mut a = Box::new([*u; CHUNK]);
                a[ppn as usize % CHUNK] = e;
                *c = Chunk::Dense(a);
            }
        }
    }

    /// Sets pages `start..end` to `e` (whole chunks become one value).
    pub fn set_range(&mut self, start: u32, end: u32, e: Entry) {
        let mut p = start;
        while p < end {
            let chunk_end = ((p as usize / CHUNK + 1) * CHUNK).min(end as usize) as u32;
            if (p as usize).is_multiple_of(CHUNK) && chunk_end as usize - p as usize == CHUNK {
                self.chunks[p as usize / CHUNK] = Chunk::Uniform(e);
            } else {
                for q in p..chunk_end {
                    self.set(q, e);
                }
            }
            p = chunk_end;
        }
    }

    /// Every page with its entry, in page order (for invariant checks and scans).
    pub fn iter(&self) -> impl Iterator<Item = (u32, Entry)> + '_ {
        (0..self.pages).map(|p| (p, self.get(p)))
    }

    /// Bytes of memory the map itself uses: its tests check that it follows use.
    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.chunks.iter().filter(|c| matches!(c, Chunk::Dense(_))).count() * CHUNK * std::mem::size_of::<Entry>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_chunks_stay_compact() {
        for s in [
            PageState::Unbacked,
            PageState::Backed,
            PageState::Ballooned,
            PageState::Compressed(7),
            PageState::Swapped(u32::MAX - 1),
            PageState::Shared(3),
        ] {
            let e = Entry::new(s).with_flag(flags::SAMPLED, true);
            assert_eq!(e.state(), s);
            assert_eq!(e.flags(), flags::SAMPLED);
            assert_eq!(e.with_flag(flags::SAMPLED, false).flags(), 0);
        }
        let mut m = P2m::new(2000);
        let small = m.heap_bytes();
        m.set_range(0, 1024, Entry::new(PageState::Backed));
        assert_eq!(m.heap_bytes(), small, "whole chunks set at once stay single values");
        m.set(5, Entry::new(PageState::Swapped(9)));
        assert!(m.heap_bytes() > small);
        assert_eq!(m.get(5).state(), PageState::Swapped(9));
        assert_eq!(m.get(6).state(), PageState::Backed);
        m.set_range(1500, 2000, Entry::new(PageState::Backed));
        assert_eq!(m.iter().filter(|(_, e)| e.is_backed()).count(), 1023 + 500);
    }
}
