//! Sets of real 4 KiB pages with their compressed sizes under real compressors (`.mvpages`
//! files written by `bench/compressibility.py snapshot --pages`): a uniform sample of one kind of
//! workload memory (the engine's built-in contents, `content/data/pages/`), or every page of a
//! captured process image. The sizes were measured by the compressors themselves (liblzo2's
//! LZO1X-1, liblz4, zlib) on these very bytes, so looking one up is compressing the page.
//!
//! File: one zstd frame holding the magic `MVPAGES1`, a u32 page count, a u32 compressor count,
//! per compressor a u8 key length and the key, per compressor a u16 size per page, then the pages
//! (all integers little-endian).

use crate::units::PAGE_SIZE;

const PAGE: usize = PAGE_SIZE as usize;
const MAGIC: &[u8; 8] = b"MVPAGES1";

/// A compressor whose sizes a page set records, by its key in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compressor {
    /// LZO1X-1 (`lzo1x_1_compress`): Xen tmem's, and Linux zram's and zswap's `lzo`.
    Lzo1x1,
    /// LZ4, default acceleration (zram's and zswap's `lz4`).
    Lz4,
    /// Raw deflate at level 1 (zswap's `deflate`).
    Deflate1,
}

impl Compressor {
    /// Every compressor, in scenario-name order.
    pub const ALL: [Compressor; 3] = [Self::Lzo1x1, Self::Lz4, Self::Deflate1];

    /// The name a scenario uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lzo1x1 => "lzo1x-1",
            Self::Lz4 => "lz4",
            Self::Deflate1 => "deflate-1",
        }
    }

    /// Parses a scenario name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Its key in a page-set file.
    fn key(self) -> &'static str {
        match self {
            Self::Lzo1x1 => "lzo",
            Self::Lz4 => "lz4",
            Self::Deflate1 => "zlib",
        }
    }
}

/// Real pages and their compressed sizes.
#[derive(Debug)]
pub struct PageSet {
    bytes: Vec<u8>,
    /// Sizes per compressor, in `Compressor::ALL` order.
    sizes: [Vec<u16>; 3],
    zero: Vec<bool>,
}

impl PageSet {
    /// Reads a page-set file's bytes (`origin` names it in errors).
    pub fn parse(file: &[u8], origin: &str) -> Result<Self, String> {
        let raw = zstd::decode_all(file).map_err(|e| format!("{origin}: not a zstd-compressed page set: {e}"))?;
        let bad = |what: &str| format!("{origin}: {what} (a page set is written by bench/compressibility.py snapshot --pages)");
        let mut r = raw.as_slice();
        let mut take = |n: usize| -> Result<&[u8], String> {
            if r.len() < n {
                return Err(bad("truncated"));
            }
            let (a, b) = r.split_at(n);
            r = b;
            Ok(a)
        };
        if take(8)? != MAGIC {
            return Err(bad("does not start with MVPAGES1"));
        }
        let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
        let n = u32_at(take(4)?);
        let ncomp = u32_at(take(4)?);
        // A count read from the file reserves nothing: the keys grow as their bytes are read.
        let mut keys = Vec::new();
        for _ in 0..ncomp {
            let len = take(1)?[0] as usize;
            keys.push(String::from_utf8_lossy(take(len)?).into_owned());
        }
        let mut by_key = Vec::with_capacity(keys.len());
        for _ in 0..ncomp {
            by_key.push(take(2 * n)?.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<u16>>());
        }
        let bytes = take(n * PAGE)?.to_vec();
        if !r.is_empty() {
            return Err(bad("has bytes after its pages"));
        }
        if n == 0 {
            return Err(bad("holds no page"));
        }
        let [a, b, c] = Compressor::ALL.map(|c| {
            keys.iter()
                .position(|k| k == c.key())
                .map(|i| std::mem::take(&mut by_key[i]))
                .ok_or_else(|| bad(&format!("has no {} sizes", c.key())))
        });
        let zero = bytes.chunks_exact(PAGE).map(|p| p.iter().all(|&x| x == 0)).collect();
        Ok(PageSet { bytes, sizes: [a?, b?, c?], zero })
    }

    /// Pages in the set.
    pub fn len(&self) -> usize {
        self.zero.len()
    }

    /// Whether it holds no page (never: parsing refuses an empty set).
    pub fn is_empty(&self) -> bool {
        self.zero.is_empty()
    }

    /// Page `i`'s bytes.
    pub fn page(&self, i: usize) -> &[u8] {
        &self.bytes[i * PAGE..(i + 1) * PAGE]
    }

    /// Whether page `i` is all zeros.
    pub fn is_zero(&self, i: usize) -> bool {
        self.zero[i]
    }

    /// Page `i`'s compressed size under `c`, in bytes (a zero page: 0, since hosts keep those as a
    /// flag; a page that does not compress: its size, at least a page).
    pub fn size(&self, c: Compressor, i: usize) -> u64 {
        if self.zero[i] {
            return 0;
        }
        self.sizes[c as usize][i] as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(body: &[u8]) -> Vec<u8> {
        zstd::encode_all(body, 3).unwrap()
    }

    #[test]
    fn a_page_set_reads_back_and_bad_files_are_named() {
        let mut body = b"MVPAGES1".to_vec();
        body.extend(2u32.to_le_bytes());
        body.extend(3u32.to_le_bytes());
        for k in ["lzo", "lz4", "zlib"] {
            body.push(k.len() as u8);
            body.extend(k.as_bytes());
        }
        for s in [[24u16, 60], [20, 61], [10, 40]] {
            body.extend(s.iter().flat_map(|x| x.to_le_bytes()));
        }
        body.extend([0u8; PAGE]);
        body.extend([7u8; PAGE]);
        let set = PageSet::parse(&file(&body), "t.mvpages").unwrap();
        assert_eq!(set.len(), 2);
        assert_eq!((set.size(Compressor::Lzo1x1, 0), set.size(Compressor::Lz4, 1), set.size(Compressor::Deflate1, 1)), (0, 61, 40));
        assert!(set.is_zero(0) && set.page(1).iter().all(|&b| b == 7));
        for (bad, what) in [(&body[..body.len() - 1], "truncated"), (&b"MVPAGES2"[..], "MVPAGES1")] {
            let e = PageSet::parse(&file(bad), "t.mvpages").unwrap_err();
            assert!(e.starts_with("t.mvpages: ") && e.contains(what), "{e}");
        }
        assert!(PageSet::parse(b"not zstd", "t.mvpages").unwrap_err().contains("not a zstd-compressed page set"));
        // Counts of four billion reserve nothing: the short file is refused as truncated.
        let mut huge = b"MVPAGES1".to_vec();
        huge.extend(u32::MAX.to_le_bytes());
        huge.extend(u32::MAX.to_le_bytes());
        assert!(PageSet::parse(&file(&huge), "t.mvpages").unwrap_err().contains("truncated"));
    }
}
