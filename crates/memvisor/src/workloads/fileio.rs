//! Sequential file I/O through the page cache, as `dd` or bonnie++'s block phases do it: write a
//! file in fixed-size `write()` calls, `fsync()` it, optionally read it back.

use super::{Op, SystemView, Workload};

/// The file-io workload.
#[derive(Clone, Debug, PartialEq)]
pub struct FileIo {
    /// File size in pages.
    pub pages: u32,
    /// Pages per `write()`/`read()` call.
    pub block_pages: u32,
    /// Whether to `fsync()` after writing (the write phase ends when the data is on the device).
    pub fsync: bool,
    /// Whether to read the file back after writing it.
    pub read: bool,
    ops: Vec<Op>,
    next: usize,
}

impl FileIo {
    /// A file-io workload.
    pub fn new(pages: u32, block_pages: u32, fsync: bool, read: bool) -> Self {
        let mut ops = vec![Op::Mark { label: "write-start".into() }, Op::CreateFile { pages }];
        let chunks = |op: fn(u32, u32) -> Op, ops: &mut Vec<Op>| {
            let mut first = 0;
            while first < pages {
                let count = block_pages.min(pages - first);
                ops.push(op(first, count));
                first += count;
            }
        };
        chunks(|first, count| Op::Write { file: 0, first, count }, &mut ops);
        if fsync {
            ops.push(Op::Fsync { file: 0 });
        }
        ops.push(Op::Mark { label: "write-end".into() });
        if read {
            ops.push(Op::Mark { label: "read-start".into() });
            chunks(|first, count| Op::Read { file: 0, first, count }, &mut ops);
            ops.push(Op::Mark { label: "read-end".into() });
        }
        ops.push(Op::Exit);
        Self { pages, block_pages, fsync, read, ops, next: 0 }
    }
}

impl Workload for FileIo {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        let op = self.ops.get(self.next).cloned().unwrap_or(Op::Exit);
        self.next += 1;
        op
    }
}
