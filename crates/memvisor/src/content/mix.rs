//! What a workload's processes write, page by page: data of their own of one kind (whose real
//! pages give the bytes and the compressed sizes), except for declared shares of pages that hold
//! zeros, content common to every guest running the same program (its code and the data it loads,
//! identical wherever it runs), or one content repeated within the process (a filled buffer, a
//! pattern). Which page holds what is a fixed draw per (program, virtual page), so the same pages
//! are common in every guest and every run.

use super::{Captured, Compressibility, Content, ZERO, private, splitmix64};

/// A workload's declared content mix (scenario keys `content`, `zero_pages`, `common_pages`,
/// `duplicate_pages`, `program`, `captured`).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentMix {
    /// Its kind of data, if the scenario says (else the workload kind's own).
    pub class: Option<Content>,
    /// Share of written pages holding zeros; `None`: the share its kind's measured snapshot held.
    zero: Option<f64>,
    /// Share holding content common to every process of `program`.
    common: f64,
    /// Share holding the process's one repeated content.
    duplicate: f64,
    /// The program whose common content it holds, if the scenario names it (else the workload's
    /// kind).
    pub program: Option<String>,
    /// A captured process image its processes hold from their first page (scenario key
    /// `captured`); the shares above apply to pages beyond it.
    pub captured: Option<Captured>,
    /// The program's name digest (`content::name_digest`).
    digest: u64,
    /// The share of zero pages its kind's snapshot held (looked up once, not per write).
    measured_zero: f64,
    /// The shares as cumulative cuts on the page's 53-bit draw: below `cuts[0]` zero, then common,
    /// then repeated. Integers, so a write compares without floating point; `u < x` for the draw
    /// `u = k / 2^53` is exactly `k < ceil(x * 2^53)`, so the verdicts are the shares' own.
    cuts: [u64; 3],
}

/// The draw's scale: 2^53 values, a double's mantissa.
const DRAW_SCALE: f64 = (1u64 << 53) as f64;

/// The least 53-bit draw `k` whose `k / 2^53` is not below `share`: draws below it fall in the share.
fn cut(share: f64) -> u64 {
    (share * DRAW_SCALE).ceil() as u64
}

/// The index of the process's repeated content among its own data (beyond any page number:
/// `private` keeps 27 bits of it).
const REPEATED: u64 = (1 << 27) - 1;

impl ContentMix {
    /// The mix of a workload of kind `kind`, whose processes' data is of kind `anon` unless the
    /// scenario names a `class`, declaring nothing else but (optionally) its program.
    pub fn new(kind: &str, class: Option<Content>, anon: Content, program: Option<String>) -> Self {
        let digest = super::name_digest(program.as_deref().unwrap_or(kind));
        let measured_zero = Compressibility::measured().zero_fraction(class.unwrap_or(anon));
        let mut m =
            ContentMix { class, zero: None, common: 0.0, duplicate: 0.0, program, captured: None, digest, measured_zero, cuts: [0; 3] };
        m.set_shares(None, 0.0, 0.0);
        m
    }

    /// Declares the shares of zero (`None`: the kind's measured share), common and repeated pages.
    pub fn set_shares(&mut self, zero: Option<f64>, common: f64, duplicate: f64) {
        (self.zero, self.common, self.duplicate) = (zero, common, duplicate);
        let z = zero.unwrap_or(self.measured_zero);
        // Summed as the shares are read: zero, then common, then repeated.
        self.cuts = [cut(z), cut(z + common), cut(z + common + duplicate)];
    }

    /// The declared share of zero pages (`None`: the kind's measured share).
    pub fn zero(&self) -> Option<f64> {
        self.zero
    }

    /// The declared share of pages common to the program.
    pub fn common(&self) -> f64 {
        self.common
    }

    /// The declared share of the process's repeated content.
    pub fn duplicate(&self) -> f64 {
        self.duplicate
    }

    /// What the process `owner` of guest `vm` writes at virtual page `vpn`.
    pub fn written(&self, vm: u64, owner: u64, vpn: u64) -> u64 {
        if let Some(id) = self.captured.as_ref().and_then(|c| c.page(vpn)) {
            return id;
        }
        if self.cuts[2] == 0 {
            return private(vm, owner, vpn);
        }
        // A uniform draw of 53 bits from the page's place in the program, the same everywhere.
        let k = splitmix64(self.digest ^ vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 11;
        if k < self.cuts[0] {
            ZERO
        } else if k < self.cuts[1] {
            super::program_data(self.digest, vpn)
        } else if k < self.cuts[2] {
            private(vm, owner, REPEATED)
        } else {
            private(vm, owner, vpn)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_declaration_and_common_pages_are_common() {
        let mut m = ContentMix::new("app", None, Content::Generic, None);
        m.set_shares(Some(0.1), 0.3, 0.2);
        let n = 100_000u64;
        let (mut z, mut c, mut d) = (0, 0, 0);
        for vpn in 0..n {
            let a = m.written(0, 1, vpn);
            let b = m.written(7, 3, vpn);
            match a {
                ZERO => z += 1,
                x if x == private(0, 1, REPEATED) => d += 1,
                x if x == b => c += 1,
                _ => assert_eq!(a, private(0, 1, vpn)),
            }
        }
        // Binomial standard error at n = 100,000 is at most 0.0016: allow five.
        for (got, want) in [(z, 0.1), (c, 0.3), (d, 0.2)] {
            assert!((got as f64 / n as f64 - want).abs() < 0.008, "{got} of {n}, declared {want}");
        }
        // Another program's common pages are other contents.
        let mut other = ContentMix::new("app", None, Content::Generic, Some("other".into()));
        other.set_shares(Some(0.1), 0.3, 0.2);
        let commons = |m: &ContentMix| -> std::collections::HashSet<u64> {
            (0..1000).map(|v| m.written(0, 1, v)).filter(|&x| x != ZERO && x >> 52 == 1).collect()
        };
        let (a, b) = (commons(&m), commons(&other));
        assert!(!a.is_empty() && !b.is_empty() && a.is_disjoint(&b));
    }

    #[test]
    fn a_cut_splits_the_draws_exactly_where_the_share_does() {
        // The draw k is in the share when k / 2^53 < share; the cut must be the first k that is not.
        for share in [0.0, 1e-17, 0.1, 0.3, 1.0 / 3.0, 0.1 + 0.3 + 0.2, 0.5, 0.999_999_999_9, 1.0] {
            let c = cut(share);
            let inside = |k: u64| (k as f64) / DRAW_SCALE < share;
            assert!(!inside(c), "share {share}: draw {c} at the cut is inside");
            assert!(c == 0 || inside(c - 1), "share {share}: draw {} below the cut is outside", c - 1);
        }
        // Shares may sum to a hair over 1 (the scenario allows 1e-9): every draw is then inside.
        assert!(cut(1.0 + 1e-9) >= 1 << 53);
    }

    #[test]
    fn an_undeclared_mix_is_the_kinds_own_data() {
        let m = ContentMix::new("stress-vm", None, Content::StressVm, None);
        assert_eq!(m.written(2, 3, 4), private(2, 3, 4), "stress-vm's snapshot held no zero page");
    }
}
