//! Captured process images as a workload's content: every page of a real process's memory, in
//! address order, read through /proc/PID/pagemap and /proc/PID/mem (`bench/compressibility.py
//! snapshot --pages F`, without `--sample`), with each page's compressed sizes measured by the
//! real compressors. A process of the workload holds page `vpn` of the capture at `vpn`, for `vpn`
//! below the capture's length; its pages beyond are its own data (the workload's content mix).
//!
//! A captured page's identity is a digest of its bytes, so pages equal in bytes are one identity
//! (they share and deduplicate) and a zero page is the zero identity. Its sizes and bytes are the
//! captured ones: identities are registered process-wide when a capture is loaded, and a digest
//! names the same bytes whichever file registered it.

use std::hash::Hasher;
use std::sync::{Arc, OnceLock, RwLock};

use rustc_hash::{FxHashMap, FxHasher};

use super::{PageSet, ZERO};

/// Captured identities take bits 0..51 under the kind bit 51, apart from every other kind
/// (`content/mod.rs`). 51 bits of digest: two of a million distinct pages collide with
/// probability about n^2 / 2^52, under 0.03 %.
const KIND: u64 = 1 << 51;
const DIGEST: u64 = KIND - 1;

/// A loaded capture: where it came from and its pages' identities in address order.
#[derive(Clone, Debug, PartialEq)]
pub struct Captured {
    /// The file, as it was loaded (the scenario's path made absolute).
    pub path: String,
    ids: Arc<[u64]>,
}

impl Captured {
    /// Reads and registers the capture in `path`.
    pub fn load(path: &str) -> Result<Self, String> {
        let data = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        // Parsing refuses a set with no page.
        let set = Arc::new(PageSet::parse(&data, path)?);
        let ids: Arc<[u64]> = (0..set.len()).map(|i| identity(set.page(i))).collect();
        let mut r = registry().write().expect("no panic holds the registry");
        for (i, &id) in ids.iter().enumerate() {
            if id != ZERO {
                r.entry(id).or_insert_with(|| (set.clone(), i as u32));
            }
        }
        Ok(Self { path: path.to_string(), ids })
    }

    /// What the process holds at virtual page `vpn`, if the capture reaches it.
    pub fn page(&self, vpn: u64) -> Option<u64> {
        self.ids.get(usize::try_from(vpn).ok()?).copied()
    }

    /// Pages in the capture.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the capture holds no page (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The identity of a captured page: zero for a zero page, else its bytes' digest (rustc-hash's
/// byte hash, a wyhash-style 128-bit multiply mix) under the captured kind.
pub fn identity(page: &[u8]) -> u64 {
    if page.iter().all(|&b| b == 0) {
        return ZERO;
    }
    let mut h = FxHasher::default();
    h.write(page);
    KIND | super::splitmix64(h.finish()) & DIGEST
}

/// Whether `id` is a captured page's identity.
pub fn is_captured(id: u64) -> bool {
    id & !DIGEST == KIND
}

/// Where a registered captured identity's bytes and sizes are.
pub(super) fn lookup(id: u64) -> Option<(Arc<PageSet>, usize)> {
    let r = registry().read().expect("no panic holds the registry");
    r.get(&id).map(|(s, i)| (s.clone(), *i as usize))
}

type Registry = RwLock<FxHashMap<u64, (Arc<PageSet>, u32)>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Default::default)
}
