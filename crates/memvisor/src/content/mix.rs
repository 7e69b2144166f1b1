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
    pub zero: Option<f64>,
    /// Share holding content common to every process of `program`.
    pub common: f64,
    /// Share holding the process's one repeated content.
    pub duplicate: f64,
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
        ContentMix { class, zero: None, common: 0.0, duplicate: 0.0, program, captured: None, digest, measured_zero }
    }

    /// What the process `owner` of guest `vm` writes at virtual page `vpn`.
    pub fn written(&self, vm: u64, owner: u64, vpn: u64) -> u64 {
        if let Some(id) = self.captured.as_ref().and_then(|c| c.page(vpn)) {
            return id;
        }
        let zero = self.zero.unwrap_or(self.measured_zero);
        if zero == 0.0 && self.common == 0.0 && self.duplicate == 0.0 {
            return private(vm, owner, vpn);
        }
        // A uniform draw in [0, 1) from the page's place in the program, the same everywhere.
        let u = (splitmix64(self.digest ^ vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 11) as f64 / (1u64 << 53) as f64;
        if u < zero {
            ZERO
        } else if u < zero + self.common {
            super::program_data(self.digest, vpn)
        } else if u < zero + self.common + self.duplicate {
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
        let m = ContentMix { zero: Some(0.1), common: 0.3, duplicate: 0.2, ..ContentMix::new("app", None, Content::Generic, None) };
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
        let other = ContentMix {
            zero: Some(0.1),
            common: 0.3,
            duplicate: 0.2,
            ..ContentMix::new("app", None, Content::Generic, Some("other".into()))
        };
        let commons = |m: &ContentMix| -> std::collections::HashSet<u64> {
            (0..1000).map(|v| m.written(0, 1, v)).filter(|&x| x != ZERO && x >> 52 == 1).collect()
        };
        let (a, b) = (commons(&m), commons(&other));
        assert!(!a.is_empty() && !b.is_empty() && a.is_disjoint(&b));
    }

    #[test]
    fn an_undeclared_mix_is_the_kinds_own_data() {
        let m = ContentMix::new("stress-vm", None, Content::StressVm, None);
        assert_eq!(m.written(2, 3, 4), private(2, 3, 4), "stress-vm's snapshot held no zero page");
    }
}
