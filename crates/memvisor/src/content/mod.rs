//! Page contents: what a page holds, as an identity. Equal identities are equal bytes, so sharing
//! and deduplication compare identities; the bytes themselves are generated from the identity
//! when something must see them (a hash, a compressor, a real process in a validation).
//!
//! Identities (a `u64`): 0 is a zero-filled page; `common(k)` is content k of an image that every
//! guest or process booted from it holds (kernel text, libraries, a runtime's code); `unique(p, i)`
//! is page i of process p, found nowhere else; `duplicate(p, d)` is content d repeated within
//! process p only. The kind sits in bits 40 and up, the process in bits 20..40, the index below.
//! Guests' pages: `private(vm, owner, i)` is data a process or file of one guest wrote, found
//! nowhere else; `image(name, i)` is page i of what every guest booted from image `name` holds.
//! A captured page's identity is its bytes' digest (`captured.rs`). Every identity is below 2^55,
//! so `page_bytes`'s `id << 9` keeps them apart.

pub mod captured;
mod compressibility;
mod mix;
pub mod pageset;

pub use captured::Captured;
pub use compressibility::{Compressibility, Content};
pub use mix::ContentMix;
pub use pageset::{Compressor, PageSet};

/// The identity of a zero-filled page.
pub const ZERO: u64 = 0;

const KIND_SHIFT: u32 = 40;
const PROC_SHIFT: u32 = 20;
const FIELD: u64 = 1 << PROC_SHIFT;

/// Bytes in a page.
const PAGE_BYTES: usize = crate::units::PAGE_SIZE as usize;

/// Content `k` common to everything booted from one image (`k` below 2^40).
pub fn common(k: u64) -> u64 {
    debug_assert!(k < 1 << KIND_SHIFT);
    1 << KIND_SHIFT | k
}

/// Page `i` of process `p`, unique to it (both below 2^20).
pub fn unique(p: u64, i: u64) -> u64 {
    debug_assert!(p < FIELD && i < FIELD);
    2 << KIND_SHIFT | p << PROC_SHIFT | i
}

/// Content `d` repeated within process `p` only (both below 2^20).
pub fn duplicate(p: u64, d: u64) -> u64 {
    debug_assert!(p < FIELD && d < FIELD);
    3 << KIND_SHIFT | p << PROC_SHIFT | d
}

/// Owners of `private` data: processes take `0..FILE_OWNER`, files `FILE_OWNER + f`.
pub const FILE_OWNER: u64 = 1 << 10;

/// Data that owner `owner` (a process, or `FILE_OWNER` + a file) of guest `vm` wrote at page `i`.
/// Fields past their widths (65,536 guests, 1,024 processes and 1,024 files per guest, 2^27 pages)
/// wrap, which could make two pages falsely equal: the scenario checks guest and process counts.
pub fn private(vm: u64, owner: u64, i: u64) -> u64 {
    1 << 54 | (vm & 0xffff) << 38 | (owner & 0x7ff) << 27 | i & ((1 << 27) - 1)
}

/// What keeps guest image `name`'s pages apart from other images': its name's digest folded to
/// 16 bits. Computed once per guest, as every page of the image needs it.
pub fn image_key(name: &str) -> u64 {
    let h = name_digest(name);
    (h ^ h >> 16 ^ h >> 32 ^ h >> 48) & 0xffff
}

/// Page `i` (below 2^24) of the guest image whose [`image_key`] is `key`: the same in every guest
/// booted from it.
pub fn image(key: u64, i: u64) -> u64 {
    debug_assert!(i < 1 << 24);
    common(key << 24 | i)
}

/// Page `i` (below 2^16) of the file named `key`: the same bytes in every guest holding that file
/// (a source tree unpacked from one archive, an object compiled from it). A 37-bit digest of the
/// name keeps files apart (two names collide with probability n^2 / 2^38 for n files: under
/// 0.1 % for ten thousand files).
pub fn file_data(key: u64, i: u64) -> u64 {
    debug_assert!(i < 1 << 16);
    1 << 53 | (splitmix64(key) & ((1 << 37) - 1)) << 16 | i & 0xffff
}

/// Page `vpn` (below 2^24) of what every process of the program whose name digests to `program`
/// holds alike (its code, the data it loads): a 28-bit digest keeps programs apart.
pub fn program_data(program: u64, vpn: u64) -> u64 {
    debug_assert!(vpn < 1 << 24);
    1 << 52 | (splitmix64(program) & ((1 << 28) - 1)) << 24 | vpn & ((1 << 24) - 1)
}

/// A name's 64-bit FNV-1a digest, for identities derived from names (images, file trees).
pub fn name_digest(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Vigna's SplitMix64 output function: a bijection of `u64` that scrambles every bit.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 4 KiB an identity stands for: zeros for `ZERO`, otherwise 512 little-endian words, word i
/// being `splitmix64(id << 9 | i)` (what `validate ksm`'s `data/ksmpages.c` writes). Distinct
/// identities give distinct pages: the first word alone is a bijection of `id << 9`.
pub fn page_bytes(id: u64) -> Vec<u8> {
    if id == ZERO {
        return vec![0; PAGE_BYTES];
    }
    (0..PAGE_BYTES as u64 / 8).flat_map(|i| splitmix64(id << 9 | i).to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_is_vignas_reference() {
        // The first output of SplitMix64 seeded with 0 in Vigna's reference implementation.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn identities_are_their_bytes() {
        assert_eq!(page_bytes(ZERO), vec![0; 4096]);
        let a = page_bytes(common(3));
        assert_eq!(a, page_bytes(common(3)), "the same bytes every time");
        assert_eq!(u64::from_le_bytes(a[..8].try_into().unwrap()), splitmix64(common(3) << 9));
        assert_ne!(a, page_bytes(common(4)));
        assert_ne!(page_bytes(unique(1, 2)), page_bytes(duplicate(1, 2)));
        assert!(a.iter().any(|&b| b != 0));
    }

    #[test]
    fn guest_identities_are_apart() {
        let ids = [
            private(0, 0, 0),
            private(1, 0, 0),
            private(0, 1, 0),
            private(0, FILE_OWNER, 0),
            private(0, 0, 1),
            image(image_key("w"), 0),
            image(image_key("l"), 0),
            image(image_key("w"), 1),
        ];
        for (i, a) in ids.iter().enumerate() {
            assert!(*a < 1 << 55 && *a != ZERO);
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(image(image_key("w"), 5), image(image_key("w"), 5));
        assert!(private(0xffff, 0x7ff, (1 << 27) - 1) > common((1 << 40) - 1), "guest data is apart from every other kind");
    }
}
