//! The file server behind an NFS datastore (a NetApp filer in seed 001): a buffer cache in front of
//! its disks. A write is acknowledged once it is in the server's NVRAM and its blocks stay in the
//! cache; a read of cached blocks, or one continuing a sequential stream (which the server's
//! readahead has already fetched), is answered from memory; any other read waits for one of the
//! server's disks to seek. This is why a host's swap-ins, random reads of a swap file written a
//! while ago, cost a filer far more than the VM's own sequential file I/O does.

use std::collections::{HashMap, VecDeque};

/// Bytes the server caches and reads in one block (WAFL's 4 KiB block).
const BLOCK: u64 = 4096;

/// Sequential read streams the server follows at once: enough for several clients' files
/// ([assumed]: WAFL's readahead is not published).
const STREAMS: usize = 8;

/// A cache of block numbers with least-recently-used replacement. Touches are appended to a queue
/// with their stamp; entries whose stamp is stale are skipped when evicting.
#[derive(Clone, Debug, Default)]
struct BlockLru {
    capacity: usize,
    stamp: u64,
    blocks: HashMap<u64, u64>,
    order: VecDeque<(u64, u64)>,
}

impl BlockLru {
    fn new(capacity_bytes: u64) -> Self {
        Self { capacity: (capacity_bytes / BLOCK) as usize, ..Self::default() }
    }

    fn contains(&self, block: u64) -> bool {
        self.blocks.contains_key(&block)
    }

    fn touch(&mut self, block: u64) {
        if self.capacity == 0 {
            return;
        }
        self.stamp += 1;
        self.blocks.insert(block, self.stamp);
        self.order.push_back((block, self.stamp));
        while self.blocks.len() > self.capacity {
            let (b, s) = self.order.pop_front().expect("every cached block is queued");
            if self.blocks.get(&b) == Some(&s) {
                self.blocks.remove(&b);
            }
        }
        // Stale entries accumulate when blocks are touched again; drop them before they outgrow
        // the cache itself.
        if self.order.len() > 2 * self.capacity + 1024 {
            let blocks = &self.blocks;
            self.order.retain(|(b, s)| blocks.get(b) == Some(s));
        }
    }
}

/// The filer's parameters (carried in the device's spec, whose seek time is its disks').
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilerSpec {
    /// Buffer cache for reads, bytes.
    pub cache_bytes: u64,
    /// Disks that can seek at the same time.
    pub disks: u32,
}

/// A filer's cache, its disks' availability and the read streams it follows.
#[derive(Clone, Debug)]
pub struct Filer {
    /// One disk's positioning time for a read it cannot serve sequentially, ns.
    seek_ns: u64,
    cache: BlockLru,
    /// When each disk is free.
    disks: Vec<u64>,
    /// Sequential streams: the byte offset just past each one's last read, with when it was last
    /// continued; a read starting there continues it. A new stream replaces the least recently
    /// continued one.
    streams: [(u64, u64); STREAMS],
    /// Where recent reads ended that no stream holds yet: a read starting at one makes a stream, so
    /// random reads never push an established stream out.
    candidates: [u64; STREAMS],
    next_candidate: usize,
    reads: u64,
    /// Reads that went to a disk.
    pub disk_reads: u64,
}

impl Filer {
    /// An idle filer with an empty cache whose disks seek in `seek_ns`.
    pub fn new(spec: FilerSpec, seek_ns: u64) -> Self {
        Self {
            seek_ns,
            cache: BlockLru::new(spec.cache_bytes),
            disks: vec![0; spec.disks.max(1) as usize],
            streams: [(u64::MAX, 0); STREAMS],
            candidates: [u64::MAX; STREAMS],
            next_candidate: 0,
            reads: 0,
            disk_reads: 0,
        }
    }

    fn blocks(offset: u64, bytes: u64) -> std::ops::Range<u64> {
        offset / BLOCK..(offset + bytes).div_ceil(BLOCK)
    }

    /// A write of `bytes` at `offset`: acknowledged from NVRAM; its blocks are now cached.
    pub fn write(&mut self, offset: u64, bytes: u64) {
        for b in Self::blocks(offset, bytes) {
            self.cache.touch(b);
        }
    }

    /// A read of `bytes` at `offset` reaching the server at `at`: how long it waits for a disk,
    /// 0 when the cache or a sequential stream answers it.
    pub fn read(&mut self, at: u64, offset: u64, bytes: u64) -> u64 {
        self.reads += 1;
        let end = offset + bytes;
        let mut stream = self.streams.iter().position(|&(s, _)| s == offset);
        if stream.is_none()
            && let Some(c) = self.candidates.iter().position(|&c| c == offset)
        {
            self.candidates[c] = u64::MAX;
            stream = Some((0..STREAMS).min_by_key(|&i| self.streams[i].1).expect("streams"));
        }
        match stream {
            Some(i) => self.streams[i] = (end, self.reads),
            None => {
                self.candidates[self.next_candidate] = end;
                self.next_candidate = (self.next_candidate + 1) % STREAMS;
            }
        }
        let cached = Self::blocks(offset, bytes).all(|b| self.cache.contains(b));
        for b in Self::blocks(offset, bytes) {
            self.cache.touch(b);
        }
        if cached || stream.is_some() {
            return 0;
        }
        self.disk_reads += 1;
        let disk = (0..self.disks.len()).min_by_key(|&i| self.disks[i]).expect("at least one disk");
        let done = at.max(self.disks[disk]) + self.seek_ns;
        self.disks[disk] = done;
        done - at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filer(cache_blocks: u64, disks: u32) -> Filer {
        Filer::new(FilerSpec { cache_bytes: cache_blocks * BLOCK, disks }, 8_000_000)
    }

    #[test]
    fn written_blocks_are_read_from_the_cache_until_evicted() {
        let mut f = filer(4, 1);
        f.write(0, 4 * BLOCK);
        assert_eq!(f.read(0, 2 * BLOCK, BLOCK), 0, "a block just written is cached");
        // Four newer blocks push the old ones out (least recently used first).
        f.write(100 * BLOCK, 4 * BLOCK);
        assert_eq!(f.read(0, 0, BLOCK), 8_000_000, "an evicted block costs a seek");
        assert_eq!(f.disk_reads, 1);
    }

    #[test]
    fn sequential_reads_follow_the_stream_and_random_ones_seek() {
        let mut f = filer(0, 1);
        assert_eq!(f.read(0, 1 << 30, 64 * BLOCK), 8_000_000, "the first read of a stream seeks");
        assert_eq!(f.read(0, (1 << 30) + 64 * BLOCK, 64 * BLOCK), 0, "its continuation does not");
        // Random reads queue on the one disk.
        assert_eq!(f.read(0, 5 * BLOCK, BLOCK), 16_000_000);
    }

    #[test]
    fn random_reads_do_not_push_a_sequential_stream_out() {
        let mut f = filer(0, 1);
        let mut at = 0;
        f.read(at, 1 << 30, 16 * BLOCK);
        assert_eq!(f.read(at, (1 << 30) + 16 * BLOCK, 16 * BLOCK), 0, "the second read makes a stream");
        for k in 2..100u64 {
            for r in 0..(2 * STREAMS as u64) {
                at += 1;
                f.read(at, (k * 1000 + r) * 7919 * BLOCK, BLOCK);
            }
            assert_eq!(f.read(at, (1 << 30) + k * 16 * BLOCK, 16 * BLOCK), 0, "the stream's read {k} seeks");
        }
    }

    #[test]
    fn disks_seek_in_parallel() {
        let mut f = filer(0, 2);
        let waits: Vec<u64> = (0..4).map(|i| f.read(0, i * 1000 * BLOCK, BLOCK)).collect();
        assert_eq!(waits, [8_000_000, 8_000_000, 16_000_000, 16_000_000]);
    }

    #[test]
    fn the_cache_never_holds_more_than_its_capacity() {
        let mut f = filer(16, 1);
        for i in 0..10_000u64 {
            f.write((i * 7919 % 1000) * BLOCK, BLOCK);
            assert!(f.cache.blocks.len() <= 16);
            assert!(f.cache.order.len() <= 2 * 16 + 1024 + 1);
        }
    }
}
