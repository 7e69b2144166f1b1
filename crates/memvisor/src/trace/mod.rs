//! Page-reference traces: what a recorded program touched, in order. Every format converts to one
//! in-memory [`Trace`] of dense page ids (0, 1, 2, ... in order of first touch) with a write bit,
//! which the `trace` workload replays and the native format stores zstd-compressed.
//!
//! Readers take bytes, never paths: opening files is the caller's business. Corrupt or truncated
//! input is a [`TraceError`] naming the byte offset or line.

mod lackey;
mod libcachesim;
mod native;

pub use lackey::LackeyReader;
pub use libcachesim::{CsvOptions, read_csv, read_oracle_general, write_oracle_general, write_oracle_general_zst};
pub use native::{read_native, write_native};

use std::collections::HashMap;
use std::fmt;

/// The write flag in a reference.
pub const WRITE: u32 = 1 << 31;
/// Mask of the page id in a reference.
pub const ID_MASK: u32 = WRITE - 1;

/// A page-reference trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// References: dense page id, `WRITE` bit set for stores.
    refs: Vec<u32>,
    /// Original page number (address / 4 KiB, or object id) of each dense id.
    pages: Vec<u64>,
}

/// What `memvisor trace info` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceInfo {
    /// References.
    pub references: u64,
    /// Loads.
    pub reads: u64,
    /// Stores.
    pub writes: u64,
    /// Distinct pages.
    pub distinct_pages: u64,
    /// Distinct pages x 4 KiB.
    pub footprint_bytes: u64,
}

/// A problem in trace input, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// "line 12" or "byte 4096".
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

impl std::error::Error for TraceError {}

impl TraceError {
    pub(crate) fn at_byte(offset: u64, message: impl Into<String>) -> Self {
        Self { at: format!("byte {offset}"), message: message.into() }
    }

    pub(crate) fn at_line(line: u64, message: impl Into<String>) -> Self {
        Self { at: format!("line {line}"), message: message.into() }
    }
}

impl Trace {
    /// References: dense page id, `WRITE` bit for stores.
    pub fn refs(&self) -> &[u32] {
        &self.refs
    }

    /// Distinct pages.
    pub fn n_pages(&self) -> u32 {
        self.pages.len() as u32
    }

    /// Original page number of each dense id.
    pub fn original_pages(&self) -> &[u64] {
        &self.pages
    }

    /// Counts.
    pub fn info(&self) -> TraceInfo {
        let writes = self.refs.iter().filter(|&&r| r & WRITE != 0).count() as u64;
        TraceInfo {
            references: self.refs.len() as u64,
            reads: self.refs.len() as u64 - writes,
            writes,
            distinct_pages: self.pages.len() as u64,
            footprint_bytes: self.pages.len() as u64 * crate::units::PAGE_SIZE,
        }
    }
}

/// Builds a trace reference by reference, numbering pages in order of first touch.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    ids: HashMap<u64, u32>,
    trace: Trace,
}

impl TraceBuilder {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a reference to original page `page`. Fails past 2^31 distinct pages.
    pub fn push(&mut self, page: u64, write: bool) -> Result<(), String> {
        let next = self.trace.pages.len() as u32;
        let id = *self.ids.entry(page).or_insert(next);
        if id == next {
            if next > ID_MASK {
                return Err("more than 2^31 distinct pages".into());
            }
            self.trace.pages.push(page);
        }
        self.trace.refs.push(if write { id | WRITE } else { id });
        Ok(())
    }

    /// References so far.
    pub fn len(&self) -> usize {
        self.trace.refs.len()
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.trace.refs.is_empty()
    }

    /// The finished trace.
    pub fn finish(self) -> Trace {
        self.trace
    }
}

/// Whether bytes start with a zstd frame.
pub(crate) fn is_zstd(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_numbers_pages_by_first_touch() {
        let mut b = TraceBuilder::new();
        for (p, w) in [(0x7000u64, false), (0x10, true), (0x7000, true)] {
            b.push(p, w).unwrap();
        }
        let t = b.finish();
        assert_eq!(t.refs(), &[0, 1 | WRITE, WRITE]);
        assert_eq!(t.original_pages(), &[0x7000, 0x10]);
        let i = t.info();
        assert_eq!((i.references, i.reads, i.writes, i.distinct_pages, i.footprint_bytes), (3, 1, 2, 2, 8192));
    }
}
