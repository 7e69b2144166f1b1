//! How well guest pages compress, until pages carry real contents (the page-contents issue): for
//! each kind of content a distribution of compressed sizes measured from real process pages with
//! a real compressor (`data/compressibility.toml`; `bench/compressibility.py` made it and says how).
//! A page's compressed size is drawn from its content's distribution each time it is compressed.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use rand::Rng as _;

use crate::rng::Rng;

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

/// One content's measured distribution: counts of pages per compressed-size bin.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Upper edge (bytes, inclusive) of each bin; the last bin holds pages that do not compress.
    pub edges: Vec<u64>,
    /// Pages per bin.
    pub counts: Vec<u64>,
}

impl Histogram {
    /// Draws a compressed size: a bin by its weight, then its upper edge (the conservative end).
    pub fn draw(&self, rng: &mut Rng) -> u64 {
        let total: u64 = self.counts.iter().sum();
        self.at(if total == 0 { 0 } else { rng.random_range(0..total) })
    }

    /// The compressed size of content `id`: the bin at the quantile its identity hashes to, so one
    /// content always has one size and the sizes of many follow the measured weights.
    pub fn size_of(&self, id: u64) -> u64 {
        let total: u64 = self.counts.iter().sum();
        self.at(if total == 0 { 0 } else { crate::content::splitmix64(id) % total })
    }

    /// The upper edge of the bin holding the `x`-th page (an empty histogram: a whole page).
    fn at(&self, mut x: u64) -> u64 {
        for (c, e) in self.counts.iter().zip(&self.edges) {
            if x < *c {
                return *e;
            }
            x -= c;
        }
        crate::units::PAGE_SIZE
    }

    /// Fraction of pages at or below `bytes`.
    pub fn fraction_within(&self, bytes: u64) -> f64 {
        let total: u64 = self.counts.iter().sum();
        let within: u64 = self.counts.iter().zip(&self.edges).filter(|(_, e)| **e <= bytes).map(|(c, _)| c).sum();
        within as f64 / total.max(1) as f64
    }
}

/// The distributions a VM's pages are drawn from.
#[derive(Clone, Debug, PartialEq)]
pub struct Compressibility {
    by_content: BTreeMap<Content, Histogram>,
}

impl Compressibility {
    /// The measured distributions (LZO1X-1, the compressor Xen's tmem and Linux zram use; ESX's
    /// own algorithm is not published).
    pub fn measured() -> Self {
        static M: OnceLock<Compressibility> = OnceLock::new();
        M.get_or_init(|| parse(include_str!("data/compressibility.toml")).expect("the embedded compressibility data parses")).clone()
    }

    /// A compressed size for a page holding `c`.
    pub fn draw(&self, c: Content, rng: &mut Rng) -> u64 {
        let h = self.by_content.get(&c).or_else(|| self.by_content.get(&Content::Generic)).expect("generic data");
        h.draw(rng)
    }

    /// The compressed size of content identity `id` of kind `c` (`Histogram::size_of`).
    pub fn size_of(&self, c: Content, id: u64) -> u64 {
        let h = self.by_content.get(&c).or_else(|| self.by_content.get(&Content::Generic)).expect("generic data");
        h.size_of(id)
    }

    /// The distribution of one content.
    pub fn histogram(&self, c: Content) -> Option<&Histogram> {
        self.by_content.get(&c)
    }
}

/// Reads the data file: `[<key>.lzo]` tables with `edges` and `counts`.
fn parse(text: &str) -> Result<Compressibility, String> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut by_content = BTreeMap::new();
    // Incompressible data needs no measurement: every page stays a page.
    by_content.insert(Content::Incompressible, Histogram { edges: vec![crate::units::PAGE_SIZE], counts: vec![1] });
    for c in Content::ALL.into_iter().filter(|&c| c != Content::Incompressible) {
        let t = doc.get(c.key()).and_then(|t| t.get("lzo")).ok_or_else(|| format!("compressibility data has no [{}.lzo]", c.key()))?;
        let nums = |k: &str| -> Result<Vec<u64>, String> {
            t.get(k)
                .and_then(|v| v.as_array())
                .ok_or_else(|| format!("[{}.lzo] has no {k}", c.key()))?
                .iter()
                .map(|x| x.as_integer().map(|i| i as u64).ok_or_else(|| format!("[{}.lzo] {k}: not an integer", c.key())))
                .collect()
        };
        let (edges, counts) = (nums("edges")?, nums("counts")?);
        if edges.len() != counts.len() || edges.is_empty() {
            return Err(format!("[{}.lzo]: {} edges for {} counts", c.key(), edges.len(), counts.len()));
        }
        by_content.insert(c, Histogram { edges, counts });
    }
    Ok(Compressibility { by_content })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_the_measured_weights() {
        let h = Histogram { edges: vec![0, 2048, 4096], counts: vec![1, 3, 0] };
        let mut rng = crate::rng::stream(1, &[]);
        let n = 40_000;
        let small = (0..n).filter(|_| h.draw(&mut rng) == 0).count() as f64 / n as f64;
        // Binomial standard error at p = 0.25, n = 40,000 is 0.0022: allow five.
        assert!((small - 0.25).abs() < 0.011, "{small}");
        assert_eq!(h.fraction_within(2048), 1.0);
        let m = Compressibility::measured();
        for c in Content::ALL {
            assert!(m.histogram(c).is_some(), "{c:?}");
        }
    }
}
