//! The native trace format: a fixed header, then one zstd frame (with its checksum) holding the
//! original page numbers (u64 each) and the references (u32 each: dense page id, bit 31 = write),
//! all little-endian.
//!
//! ```text
//! bytes 0..8    "MVTRACE1"
//! bytes 8..16   references (u64)
//! bytes 16..24  distinct pages (u64)
//! bytes 24..    zstd frame: pages x u64, then references x u32
//! ```

use super::{ID_MASK, Trace, TraceError};

const MAGIC: &[u8; 8] = b"MVTRACE1";
const HEADER: usize = 24;
/// zstd level: 3 is the library default, a good ratio at hundreds of MB/s.
pub(super) const LEVEL: i32 = 3;

/// Encodes a trace.
pub fn write_native(t: &Trace) -> Vec<u8> {
    let mut body = Vec::with_capacity(t.pages.len() * 8 + t.refs.len() * 4);
    for p in &t.pages {
        body.extend_from_slice(&p.to_le_bytes());
    }
    for r in &t.refs {
        body.extend_from_slice(&r.to_le_bytes());
    }
    let mut out = Vec::with_capacity(HEADER + body.len() / 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(t.refs.len() as u64).to_le_bytes());
    out.extend_from_slice(&(t.pages.len() as u64).to_le_bytes());
    let mut enc = zstd::stream::Encoder::new(&mut out, LEVEL).expect("zstd encoder");
    enc.include_checksum(true).expect("zstd checksum flag");
    std::io::Write::write_all(&mut enc, &body).expect("writing to memory");
    enc.finish().expect("writing to memory");
    out
}

/// Decodes a trace, checking everything a corrupt or truncated file would break.
pub fn read_native(bytes: &[u8]) -> Result<Trace, TraceError> {
    if bytes.len() < HEADER {
        return Err(TraceError::at_byte(bytes.len() as u64, format!("truncated: a native trace header is {HEADER} bytes")));
    }
    if &bytes[..8] != MAGIC {
        return Err(TraceError::at_byte(0, "not a memvisor trace (missing \"MVTRACE1\")"));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (n_refs, n_pages) = (word(8), word(16));
    if n_pages > ID_MASK as u64 + 1 {
        return Err(TraceError::at_byte(16, format!("{n_pages} distinct pages is more than a trace can hold")));
    }
    let expect = n_pages.checked_mul(8).and_then(|p| n_refs.checked_mul(4).and_then(|r| p.checked_add(r)));
    let Some(expect) = expect.filter(|&e| e < (1 << 40)) else {
        return Err(TraceError::at_byte(8, "header counts are impossibly large"));
    };
    // Decoded no further than one byte past what the header promises, so a corrupt or hostile
    // body cannot fill memory before the mismatch is seen.
    let mut body = Vec::new();
    zstd::stream::read::Decoder::new(&bytes[HEADER..])
        .and_then(|d| std::io::Read::read_to_end(&mut std::io::Read::take(d, expect + 1), &mut body))
        .map_err(|e| {
            TraceError::at_byte(HEADER as u64, format!("compressed body (bytes {HEADER}..{}) is corrupt or truncated: {e}", bytes.len()))
        })?;
    if body.len() as u64 != expect {
        return Err(TraceError::at_byte(
            HEADER as u64,
            format!(
                "body holds {} bytes but the header promises {expect} ({n_pages} pages, {n_refs} references)",
                if body.len() as u64 > expect { "more".to_string() } else { body.len().to_string() }
            ),
        ));
    }
    let (pb, rb) = body.split_at(n_pages as usize * 8);
    let pages: Vec<u64> = pb.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect();
    let refs: Vec<u32> = rb.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4"))).collect();
    if let Some(i) = refs.iter().position(|&r| (r & ID_MASK) as u64 >= n_pages) {
        return Err(TraceError::at_byte(HEADER as u64, format!("reference {i} names page {} of {n_pages}", refs[i] & ID_MASK)));
    }
    // Each distinct page is listed once (a page listed twice would count as two and split its
    // references between them).
    let mut seen = rustc_hash::FxHashSet::with_capacity_and_hasher(pages.len(), Default::default());
    if let Some(i) = pages.iter().position(|p| !seen.insert(*p)) {
        return Err(TraceError::at_byte(HEADER as u64, format!("page {:#x} is listed twice (entry {i} of the page table)", pages[i])));
    }
    Ok(Trace { refs, pages })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceBuilder;

    fn sample() -> Trace {
        let mut b = TraceBuilder::new();
        for i in 0..10_000u64 {
            b.push((i * 7) % 300, i % 3 == 0).unwrap();
        }
        b.finish()
    }

    #[test]
    fn a_page_listed_twice_is_refused() {
        let mut t = sample();
        t.pages[1] = t.pages[0];
        let e = read_native(&write_native(&t)).unwrap_err();
        assert!(e.message.contains("is listed twice (entry 1"), "{e}");
    }

    #[test]
    fn round_trip() {
        let t = sample();
        let bytes = write_native(&t);
        assert!(bytes.len() < 10_000, "compressed: {} bytes", bytes.len());
        assert_eq!(read_native(&bytes).unwrap(), t);
    }

    #[test]
    fn truncation_and_corruption_are_located() {
        let bytes = write_native(&sample());
        let e = read_native(&bytes[..10]).unwrap_err();
        assert_eq!(e.at, "byte 10");
        let e = read_native(&bytes[..bytes.len() - 5]).unwrap_err();
        assert!(e.to_string().starts_with("byte 24: compressed body"), "{e}");
        let mut bad = bytes.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0xff;
        assert!(read_native(&bad).is_err());
        assert!(read_native(b"NOTATRACEFILE-----------").unwrap_err().message.contains("MVTRACE1"));
        // A header promising less than the body holds: refused after decoding one byte past it.
        let mut short = bytes.clone();
        short[8..16].copy_from_slice(&1u64.to_le_bytes());
        let e = read_native(&short).unwrap_err();
        assert!(e.message.contains("body holds more bytes but the header promises"), "{e}");
    }
}
