//! `[host]`'s page sharing and transcendent memory: what each profile has, and their settings.

use toml::Spanned;

use super::Ctx;
use crate::host::ksm::KsmSettings;
use crate::host::{HostCosts, HostKsm, HostProfile, PshareSettings, TmemSettings};
use crate::scenario::ScenarioError;
use crate::scenario::raw::RawHost;

/// `[host]`'s page-sharing settings: off unless `page_sharing = true`; the rest apply only then.
/// A KVM host shares with KSM (`[host.ksm]`, running with the kernel's defaults unless told
/// otherwise), the others as ESX does (`share_scan_time`, `share_force_salting`, `large_pages`).
pub(super) fn resolve_sharing(c: &Ctx, h: &RawHost, profile: HostProfile) -> Result<Option<PshareSettings>, ScenarioError> {
    let on = h.page_sharing.as_ref().is_some_and(|b| *b.get_ref());
    let esx_keys = [
        (h.share_scan_time.as_ref().map(|q| q.span()), "host.share_scan_time"),
        (h.share_force_salting.as_ref().map(|q| q.span()), "host.share_force_salting"),
        (h.large_pages.as_ref().map(|q| q.span()), "host.large_pages"),
    ];
    let given = |keys: &[(Option<std::ops::Range<usize>>, &'static str)]| keys.iter().find_map(|(s, n)| s.clone().map(|s| (s, *n)));
    if !on {
        if let Some((span, field)) = given(&esx_keys).or_else(|| given(&[(h.ksm.as_ref().map(|t| t.span()), "host.ksm")])) {
            return c.err(span, field, "is a page-sharing setting: set host.page_sharing = true too");
        }
        return Ok(None);
    }
    let d = PshareSettings::default();
    if profile == HostProfile::Kvm {
        if let Some((span, field)) = given(&esx_keys) {
            return c.err(span, field, "is ESX page sharing's; a kvm host shares with KSM (set [host.ksm])");
        }
        // QEMU's guests are mergeable and the host runs ksmd (run = 1) unless told otherwise.
        let mut k = HostKsm { settings: KsmSettings::default(), run: true };
        for (name, v) in h.ksm.iter().flat_map(|t| t.get_ref()) {
            let field = format!("host.ksm.{name}");
            let n = u64::try_from(*v.get_ref()).or_else(|_| c.err(v.span(), &field, "must not be negative"))?;
            if name == "run" {
                k.run = match n {
                    0 | 1 => n == 1,
                    _ => return c.err(v.span(), &field, "must be 0 (stopped) or 1 (running)"),
                };
            } else {
                // An unknown name's message lists the tunables; `run` is one more here.
                let m = |m: String| if m.starts_with("unknown") { format!("{m}, run") } else { m };
                k.settings.set(name, n).or_else(|e| c.err(v.span(), &field, m(e)))?;
            }
        }
        return Ok(Some(PshareSettings { ksm: Some(k), ..d }));
    }
    if let Some(t) = &h.ksm {
        return c.err(t.span(), "host.ksm", "is a kvm host's (set host.profile = \"kvm\"); ESX shares with share_scan_time and friends");
    }
    let scan_time_ns = c.opt_ns(&h.share_scan_time, "host.share_scan_time", d.scan_time_ns)?;
    if scan_time_ns == 0 {
        return c.err(h.share_scan_time.as_ref().expect("zero was given").span(), "host.share_scan_time", "must be longer than zero");
    }
    Ok(Some(PshareSettings {
        scan_time_ns,
        force_salting: c.int(&h.share_force_salting, "host.share_force_salting", d.force_salting as u64, 0, 2)? as u8,
        large_pages: h.large_pages.as_ref().map_or(d.large_pages, |b| *b.get_ref()),
        ..d
    }))
}

/// `[host]`'s tmem settings: off unless `tmem = true`, which only a Xen host has (transcendent
/// memory is a Xen hypervisor feature; KVM, ESX and Denali have none); dedup and compression
/// (Xen's `tmem_dedup`, `tmem_compress`, both off by default) apply only then.
pub(super) fn resolve_tmem(c: &Ctx, h: &RawHost, profile: HostProfile, costs: &HostCosts) -> Result<Option<TmemSettings>, ScenarioError> {
    let flag = |b: &Option<Spanned<bool>>| b.as_ref().is_some_and(|b| *b.get_ref());
    if let Some(t) = h.tmem.as_ref().filter(|t| *t.get_ref() && profile != HostProfile::Xen) {
        return c.err(
            t.span(),
            "host.tmem",
            format!(
                "is Xen's transcendent memory, which this host does not have: {}; set host.profile = \"xen\"",
                c.profile_is(h, profile)
            ),
        );
    }
    if !flag(&h.tmem) {
        if let Some((span, field)) = [(&h.tmem_dedup, "host.tmem_dedup"), (&h.tmem_compress, "host.tmem_compress")]
            .into_iter()
            .find_map(|(b, n)| b.as_ref().map(|b| (b.span(), n)))
        {
            return c.err(span, field, "is a tmem setting: set host.tmem = true too");
        }
        return Ok(None);
    }
    Ok(Some(TmemSettings {
        dedup: flag(&h.tmem_dedup),
        compress: flag(&h.tmem_compress),
        compress_ns: costs.compress_ns,
        decompress_ns: costs.decompress_ns,
        ..TmemSettings::default()
    }))
}
