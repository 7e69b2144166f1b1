//! How well guest pages compress: each kind of content is a uniform sample of 256 real pages of
//! that kind, with their sizes under real compressors (`data/pages/<kind>.mvpages`, made by
//! `bench/compressibility.py snapshot --pages`; `data/compressibility.toml` holds the whole
//! snapshots' histograms, and bench/compressibility.md says how both were made). A page's bytes
//! are the sample page its content identity hashes to, so one identity always has one size, and
//! its compressed size is that page's under the compressor of the mechanism compressing it.

use std::sync::OnceLock;

use super::pageset::{Compressor, PageSet};
use super::{ZERO, splitmix64};

/// What a guest page holds, as far as compression cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Content {
    /// Anonymous memory of the `stress` tool's `--vm` workers.
    StressVm,
    /// Anonymous memory of seed 003's stress program.
    Stress,
    /// File data bonnie++ writes.
    BonnieData,
    /// Linux 2.6.32 source files (.c, .h, .S) in the page cache.
    KernelSource,
    /// Object files a kernel build writes.
    KernelObject,
    /// Anything else a process or the kernel holds: the generic-heap measurement stands in.
    Generic,
    /// Data that does not compress (encrypted, already compressed, random): no page fits.
    Incompressible,
}

impl Content {
    /// Every kind, in table order.
    pub const ALL: [Content; 7] =
        [Self::StressVm, Self::Stress, Self::BonnieData, Self::KernelSource, Self::KernelObject, Self::Generic, Self::Incompressible];

    /// Parses a scenario name (the data file's keys).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.key() == s)
    }

    /// The key of its table in the data file.
    pub fn key(self) -> &'static str {
        match self {
            Self::StressVm => "stress-vm",
            Self::Stress => "seed003-stress",
            Self::BonnieData => "bonnie-data",
            Self::KernelSource => "kernel-source",
            Self::KernelObject => "kernel-object",
            Self::Generic => "generic-heap",
            Self::Incompressible => "incompressible",
        }
    }
}

/// The page sets of every kind of content, and the measured share of zero pages in each.
#[derive(Debug)]
pub struct Compressibility {
    /// Per kind (`Content::ALL` order): its sample (none for `Incompressible`), the indices of its
    /// non-zero pages, and the fraction of zero pages in the whole snapshot.
    kinds: Vec<Kind>,
}

#[derive(Debug)]
struct Kind {
    set: Option<PageSet>,
    nonzero: Vec<u32>,
    zero_fraction: f64,
}

/// The embedded samples, in `Content::ALL` order (`Incompressible` has none).
const SETS: [Option<&[u8]>; 7] = [
    Some(include_bytes!("data/pages/stress-vm.mvpages")),
    Some(include_bytes!("data/pages/seed003-stress.mvpages")),
    Some(include_bytes!("data/pages/bonnie-data.mvpages")),
    Some(include_bytes!("data/pages/kernel-source.mvpages")),
    Some(include_bytes!("data/pages/kernel-object.mvpages")),
    Some(include_bytes!("data/pages/generic-heap.mvpages")),
    None,
];

/// The whole snapshots' record (page and zero-page counts; the histograms the tests compare the
/// samples against).
const SNAPSHOTS: &str = include_str!("data/compressibility.toml");

impl Compressibility {
    /// The measured contents (embedded; parsed once per process).
    pub fn measured() -> &'static Self {
        static M: OnceLock<Compressibility> = OnceLock::new();
        M.get_or_init(|| Self::parse().expect("the embedded page sets parse"))
    }

    fn parse() -> Result<Self, String> {
        let doc: toml::Table = SNAPSHOTS.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let mut kinds = Vec::new();
        for (c, file) in Content::ALL.into_iter().zip(SETS) {
            let Some(file) = file else {
                kinds.push(Kind { set: None, nonzero: Vec::new(), zero_fraction: 0.0 });
                continue;
            };
            let set = PageSet::parse(file, &format!("data/pages/{}.mvpages", c.key()))?;
            let count = |k: &str| doc.get(c.key()).and_then(|t| t.get(k)).and_then(|v| v.as_integer());
            let (Some(pages), Some(zeros)) = (count("pages"), count("zero_pages")) else {
                return Err(format!("compressibility.toml: [{}] has no pages and zero_pages", c.key()));
            };
            let nonzero: Vec<u32> = (0..set.len() as u32).filter(|&i| !set.is_zero(i as usize)).collect();
            if nonzero.is_empty() {
                return Err(format!("data/pages/{}.mvpages: every sampled page is zero", c.key()));
            }
            kinds.push(Kind { set: Some(set), nonzero, zero_fraction: zeros as f64 / pages.max(1) as f64 });
        }
        Ok(Compressibility { kinds })
    }

    /// The sample page holding content identity `id` of kind `c` (a non-zero identity maps to a
    /// non-zero page: zero pages are the zero identity), or `None` for zeros and incompressible data.
    fn page_of(&self, c: Content, id: u64) -> Option<(&PageSet, usize)> {
        let k = &self.kinds[c as usize];
        let set = k.set.as_ref().filter(|_| id != ZERO)?;
        Some((set, k.nonzero[(splitmix64(id) % k.nonzero.len() as u64) as usize] as usize))
    }

    /// The compressed size of content identity `id` of kind `c` (a captured page: its own, whatever
    /// the kind) under compressor `z`: 0 for a zero page (hosts keep those as a flag), a whole
    /// page for incompressible data.
    pub fn size_of(&self, z: Compressor, c: Content, id: u64) -> u64 {
        if let Some((set, i)) = captured_page(id) {
            return set.size(z, i);
        }
        match self.page_of(c, id) {
            Some((set, i)) => set.size(z, i),
            None if id == ZERO => 0,
            None => crate::units::PAGE_SIZE,
        }
    }

    /// The 4 KiB content identity `id` of kind `c` stands for (zeros for the zero identity;
    /// incompressible data: `content::page_bytes`).
    pub fn bytes_of(&self, c: Content, id: u64) -> Vec<u8> {
        if let Some((set, i)) = captured_page(id) {
            return set.page(i).to_vec();
        }
        match self.page_of(c, id) {
            Some((set, i)) => set.page(i).to_vec(),
            None => super::page_bytes(id),
        }
    }

    /// The share of zero pages in what kind `c`'s workloads write (the whole snapshot's).
    pub fn zero_fraction(&self, c: Content) -> f64 {
        self.kinds[c as usize].zero_fraction
    }

    /// Kind `c`'s sample (none for `Incompressible`).
    pub fn sample(&self, c: Content) -> Option<&PageSet> {
        self.kinds[c as usize].set.as_ref()
    }
}

/// A captured page's set and index, for a captured identity (checked by its bits before the
/// registry is read).
fn captured_page(id: u64) -> Option<(std::sync::Arc<PageSet>, usize)> {
    super::captured::is_captured(id).then(|| super::captured::lookup(id)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole snapshot's LZO1X-1 histogram of kind `c`: bin upper edges and counts.
    fn histogram(c: Content) -> (Vec<u64>, Vec<u64>) {
        let doc: toml::Table = SNAPSHOTS.parse().unwrap();
        let t = &doc[c.key()]["lzo"];
        let ints = |k: &str| t[k].as_array().unwrap().iter().map(|x| x.as_integer().unwrap() as u64).collect::<Vec<_>>();
        (ints("edges"), ints("counts"))
    }

    #[test]
    fn samples_follow_the_whole_snapshots() {
        // The Dvoretzky-Kiefer-Wolfowitz bound: a uniform sample of n pages has its empirical
        // distribution within eps = sqrt(ln(2 / alpha) / 2n) of the snapshot's everywhere, with
        // probability 1 - alpha; alpha = 0.001 at n = 256 gives 0.121. Compared at the bins' edges.
        let m = Compressibility::measured();
        for c in Content::ALL.into_iter().filter(|&c| c != Content::Incompressible) {
            let set = m.sample(c).unwrap();
            let n = set.len() as f64;
            let eps = ((2.0f64 / 0.001).ln() / (2.0 * n)).sqrt();
            let (edges, counts) = histogram(c);
            let total: u64 = counts.iter().sum();
            let mut below = 0;
            for (e, k) in edges.iter().zip(&counts) {
                below += k;
                let sample = (0..set.len()).filter(|&i| set.size(Compressor::Lzo1x1, i) <= *e).count() as f64 / n;
                let whole = below as f64 / total as f64;
                assert!((sample - whole).abs() <= eps, "{c:?} at {e} B: sample {sample:.3}, snapshot {whole:.3}");
            }
        }
    }

    #[test]
    fn an_identity_has_one_page_and_zeros_are_the_zero_identity() {
        let m = Compressibility::measured();
        let c = Content::Generic;
        let id = crate::content::private(1, 2, 3);
        assert_eq!(m.bytes_of(c, id), m.bytes_of(c, id));
        assert!(m.bytes_of(c, id).iter().any(|&b| b != 0), "a non-zero identity never maps to a zero page");
        assert_eq!(m.size_of(Compressor::Lzo1x1, c, ZERO), 0);
        assert_eq!(m.size_of(Compressor::Lzo1x1, Content::Incompressible, id), crate::units::PAGE_SIZE);
        // Sizes differ by compressor on real pages (the heap is not a run of zeros).
        let ids = (0..200).map(|i| crate::content::private(0, 0, i));
        let (lzo, deflate): (u64, u64) = ids
            .map(|i| (m.size_of(Compressor::Lzo1x1, c, i), m.size_of(Compressor::Deflate1, c, i)))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert!(deflate < lzo, "entropy coding beats LZO on a heap: deflate {deflate}, lzo {lzo}");
        assert!(m.zero_fraction(Content::BonnieData) > 0.0 && m.zero_fraction(Content::StressVm) == 0.0);
    }
}
