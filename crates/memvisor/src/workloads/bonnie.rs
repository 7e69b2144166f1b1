//! bonnie++'s sequential block tests (bonnie++ 1.03e, `bon_io.cpp`), which seed 001 ran in its
//! starved VM: write a file twice the guest's memory in 8 KiB chunks ("block write"), then for each
//! chunk read it, change it and write it back ("rewrite"), then read it all ("block read"). Each
//! phase ends by closing the file, without `fsync`, before its time is taken; bonnie++ reports each
//! phase's rate as KiB/s. The per-character, seek and file-creation tests are left out.
//! Source: docs/sources/host-reclamation.md, section 7.

use super::{Op, SystemView, Workload};

/// bonnie++'s chunk, `DefaultChunkSize = 1 << 13`: two pages.
pub const CHUNK_PAGES: u32 = 2;

/// The bonnie workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Bonnie {
    /// File size in pages.
    pub pages: u32,
    step: u64,
}

impl Bonnie {
    /// A bonnie run over a file of `pages` pages.
    pub fn new(pages: u32) -> Self {
        Self { pages, step: 0 }
    }

    /// bonnie++'s default file size for a guest with `mem_total` bytes of memory: twice its memory,
    /// at least 300 MB, rounded up to a whole GiB when the part past a GiB exceeds 512 MiB
    /// (`bonnie++.cpp`).
    pub fn default_bytes(mem_total: u64) -> u64 {
        const MB: u64 = 1 << 20;
        let size = (2 * mem_total).max(300 * MB);
        let rem = size % (1024 * MB);
        if rem > 512 * MB { size - rem + 1024 * MB } else { size }
    }

    fn chunks(&self) -> u64 {
        self.pages.div_ceil(CHUNK_PAGES) as u64
    }

    fn chunk(&self, i: u64) -> (u32, u32) {
        let first = i as u32 * CHUNK_PAGES;
        (first, CHUNK_PAGES.min(self.pages - first))
    }
}

impl Workload for Bonnie {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        let n = self.chunks();
        let s = self.step;
        self.step += 1;
        // Layout: create, write-start, n writes, write-end, rewrite-start, 2n (read, write),
        // rewrite-end, read-start, n reads, read-end, exit.
        let mark = |label: &str| Op::Mark { label: label.to_string() };
        match s {
            0 => return Op::CreateFile { pages: self.pages },
            1 => return mark("write-start"),
            _ => {}
        }
        let s = s - 2;
        if s < n {
            let (first, count) = self.chunk(s);
            return Op::Write { file: 0, first, count };
        }
        let s = s - n;
        match s {
            0 => return mark("write-end"),
            1 => return mark("rewrite-start"),
            _ => {}
        }
        let s = s - 2;
        if s < 2 * n {
            let (first, count) = self.chunk(s / 2);
            return if s.is_multiple_of(2) { Op::Read { file: 0, first, count } } else { Op::Write { file: 0, first, count } };
        }
        let s = s - 2 * n;
        match s {
            0 => return mark("rewrite-end"),
            1 => return mark("read-start"),
            _ => {}
        }
        let s = s - 2;
        if s < n {
            let (first, count) = self.chunk(s);
            return Op::Read { file: 0, first, count };
        }
        match s - n {
            0 => mark("read-end"),
            _ => Op::Exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_in_order_over_every_chunk() {
        let mut b = Bonnie::new(5);
        let ops: Vec<Op> = std::iter::from_fn(|| Some(b.next_op(&SystemView::default()))).take_while(|o| *o != Op::Exit).collect();
        let marks: Vec<&Op> = ops.iter().filter(|o| matches!(o, Op::Mark { .. })).collect();
        assert_eq!(marks.len(), 6);
        let writes: u32 = ops.iter().map(|o| if let Op::Write { count, .. } = o { *count } else { 0 }).sum();
        let reads: u32 = ops.iter().map(|o| if let Op::Read { count, .. } = o { *count } else { 0 }).sum();
        assert_eq!((writes, reads), (10, 10), "write and rewrite each write the file; rewrite and read each read it");
        assert_eq!(ops.iter().filter(|o| matches!(o, Op::Write { first: 4, count: 1, .. })).count(), 2, "the short last chunk");
    }

    #[test]
    fn file_size_follows_bonnie() {
        const MB: u64 = 1 << 20;
        // A 1 GB guest with MemTotal about 1,000 MB: 2,000 MB rounds up to 2 GiB.
        assert_eq!(Bonnie::default_bytes(1000 * MB), 2048 * MB);
        assert_eq!(Bonnie::default_bytes(100 * MB), 300 * MB);
        assert_eq!(Bonnie::default_bytes(1200 * MB), 2400 * MB);
    }
}
