//! Transparent page sharing as VMware ESX does it (Waldspurger, OSDI 2002, section 4;
//! docs/sources/page-sharing.md 2). A scanner visits each VM's pages so that the whole VM is
//! covered once per `Mem.ShareScanTime`; a visited page's content (its identity: [`crate::content`]) is
//! looked up in one host-wide table:
//! - a shared frame with that content: the page maps it copy-on-write and its own frame is freed;
//! - a hint (an earlier unshared page with that content): the hint page is rehashed; if it still
//!   holds that content both pages map one new shared frame, else the stale hint is replaced;
//! - nothing: the page becomes the hint. Unlike KSM there is no "unchanged over two scans" rule and
//!   hints persist across scans.
//!
//! A write to a shared page faults and gets a private copy (`cow_break`). Zero pages share like any
//! other content (ZERO counts them). Salting (`Mem.ShareForceSalting`, default 2 since ESXi 6.0)
//! keeps VMs' pages apart: the table key is (salt, content). With large-page backing (hardware MMU)
//! pages are hashed, so hints are kept, but not shared until the VM's large pages are broken, which
//! host reclamation does before it swaps or compresses a VM's memory (KB 1021095, KB 1021896).
//!
//! A KVM host shares with KSM instead (`ksm.rs`): QEMU marks all guest RAM mergeable (its
//! `mem-merge` default), so ksmd walks every guest page, VM after VM, `pages_to_scan` per
//! `sleep_millisecs`, by its own rules. A KSM page is a shared frame like ESX's, numbered by
//! ksmd; with `use_zero_pages` a zero page maps the kernel's zero page ([`ZERO_PAGE`]), which
//! takes no frame. Host reclaim does not try sharing first: Linux swaps what it reclaims.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::hostswap::takeable;
use super::ksm::{KsmCounters, KsmPages, KsmSettings, Ksmd};
use super::{Entry, GuestMemory, Host, HostVm, PageState};
use crate::content::ZERO;
use crate::index::{NONE, Recycled};

/// The frame a page maps when KSM mapped it to the kernel's zero page (`use_zero_pages`).
pub const ZERO_PAGE: u32 = NONE;

/// ksmd on a KVM host: its tunables and whether it runs (/sys/kernel/mm/ksm/run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostKsm {
    /// The tunables (kernel defaults unless the scenario sets them).
    pub settings: KsmSettings,
    /// Whether ksmd runs; a policy may switch it (MOM's 03-ksm.policy).
    pub run: bool,
}

/// Page sharing's settings (ESX advanced options).
#[derive(Clone, Debug, PartialEq)]
pub struct PshareSettings {
    /// Time within which a whole VM is scanned (`Mem.ShareScanTime`, 60 min in ESXi 4.0 to 8.0).
    pub scan_time_ns: u64,
    /// How often the scanner wakes to visit its share of pages: 1 s (the interval is
    /// \[unpublished\]; per-second scan rates are what ESX documents).
    pub period_ns: u64,
    /// `Mem.ShareForceSalting`: 0 shares among all VMs (ESX before the 2014-15 patches); 1 and 2
    /// salt each VM with its own value (2 is the default since ESXi 6.0; with no
    /// `sched.mem.pshare.salt` set, 1 salts every VM with 0 and so shares among them as 0 does).
    pub force_salting: u8,
    /// Guest memory backed with 2 MiB host pages (hardware MMU): shared only once broken.
    pub large_pages: bool,
    /// Host CPU to hash a visited 4 KiB page: 0.5 us (page-sharing.md 1.11, from memory bandwidth).
    pub hash_ns: u64,
    /// Host CPU to share a page: `share_pages` 6.2 us (Difference Engine, table 2).
    pub share_ns: u64,
    /// Host CPU to break a share on write: `cow_break` 25.1 us (same table); the vCPU waits.
    pub cow_break_ns: u64,
    /// ksmd instead of ESX's scanner (a KVM host): the ESX settings above other than the costs
    /// do not apply.
    pub ksm: Option<HostKsm>,
}

impl Default for PshareSettings {
    fn default() -> Self {
        Self {
            scan_time_ns: 3_600_000_000_000,
            period_ns: 1_000_000_000,
            force_salting: 2,
            large_pages: false,
            hash_ns: 500,
            share_ns: 6_200,
            cow_break_ns: 25_100,
            ksm: None,
        }
    }
}

/// A page never hashed while large (content identities are below 2^55: [`crate::content`]).
const NOT_HASHED: u64 = u64::MAX;

/// Pages the scanner takes together, so that their cache misses overlap.
const SCAN_BATCH: usize = 64;

/// One VM's sharing state and counters (esxtop names).
#[derive(Clone, Debug, Default)]
pub struct VmShare {
    /// The next page in the VM's scan order.
    next: u64,
    /// Step through the VM's pages: coprime with their number, so a pass visits each page once.
    stride: u64,
    /// Scan budget carried between wake-ups, in pages times `scan_time_ns`.
    owed: u128,
    /// The VM's memory is still backed with large pages (nothing of it shares).
    pub large_pages: bool,
    /// The content each page held when the scanner last hashed it while large pages backed it
    /// (the "pre-generated hashes" of KB 1021095; [`NOT_HASHED`] for none), by page: empty until
    /// the first such visit, taken when they are used to share. Kept after host reclaim breaks the
    /// large pages (ESX keeps its hashes), so 8 bytes a page of a large-backed VM until then.
    hashed: Vec<u64>,
    /// Guest pages mapping a shared frame (SHRD).
    pub shared: u64,
    /// Of those, zero pages (ZERO).
    pub zero: u64,
    /// Pages recorded as hints (COWH).
    pub hints: u64,
    /// Pages the scanner visited.
    pub scanned: u64,
    /// Shares broken by writes.
    pub cow_breaks: u64,
    /// Host CPU the scanner spent on this VM, ns.
    pub cpu_ns: u64,
}

/// A shared frame.
#[derive(Clone, Copy, Debug)]
struct Frame {
    key: (u64, u64),
    refs: u32,
}

/// The sharing table, its hints and the scanner's per-VM state.
#[derive(Clone, Debug)]
pub struct Pshare {
    /// Settings.
    pub settings: PshareSettings,
    frames: Recycled<Frame>,
    table: FxHashMap<(u64, u64), u32>,
    hints: FxHashMap<(u64, u64), (u32, u32)>,
    vms: Vec<VmShare>,
    in_use: u64,
    /// ksmd over all guest pages, on a KVM host.
    ksm: Option<Ksm>,
}

/// ksmd on the host: its state, where each VM's pages start in its scan order, and whether it
/// runs now (the scenario's `run` until a policy changes it).
#[derive(Clone, Debug)]
struct Ksm {
    ksmd: Ksmd,
    base: Vec<u32>,
    run: bool,
}

impl Pshare {
    /// Sharing with `settings` and no VMs yet.
    pub fn new(settings: PshareSettings) -> Self {
        let ksm = settings.ksm.map(|k| Ksm { ksmd: Ksmd::new(k.settings, 0), base: Vec::new(), run: k.run });
        Self {
            settings,
            frames: Recycled::new(),
            table: FxHashMap::default(),
            hints: FxHashMap::default(),
            vms: Vec::new(),
            in_use: 0,
            ksm,
        }
    }

    /// Shared frames in use (PSHARE common; KSM's pages_shared less KSM pages whose every
    /// mapping was broken since ksmd last looked).
    pub fn frames_in_use(&self) -> u64 {
        match &self.ksm {
            Some(k) => k.ksmd.frames_in_use(),
            None => self.in_use,
        }
    }

    /// KSM's counters, on a host that shares with KSM.
    pub fn ksm_counters(&self) -> Option<KsmCounters> {
        self.ksm.as_ref().map(|k| k.ksmd.counters())
    }

    /// ksmd's settings now and whether it runs, on a host that shares with KSM.
    pub fn ksm(&self) -> Option<HostKsm> {
        self.ksm.as_ref().map(|k| HostKsm { settings: k.ksmd.settings(), run: k.run })
    }

    /// Whether host reclaim offers a page for sharing before it swaps it (ESX, not KSM).
    pub fn shares_before_swap(&self) -> bool {
        self.ksm.is_none()
    }

    /// A VM's state.
    pub fn vm(&self, vm: u32) -> &VmShare {
        &self.vms[vm as usize]
    }

    /// Pages mapping shared frame `f` (for KSM's zero page, which takes no frame: `u32::MAX`).
    pub fn refs(&self, f: u32) -> u32 {
        match &self.ksm {
            _ if f == ZERO_PAGE => u32::MAX,
            Some(k) => k.ksmd.mapped(f),
            None => self.frames[f].refs,
        }
    }

    /// Whether shared frame `f` holds zeros.
    fn is_zero(&self, f: u32) -> bool {
        match &self.ksm {
            _ if f == ZERO_PAGE => true,
            Some(k) => k.ksmd.content_of(f) == ZERO,
            None => self.frames[f].key.1 == ZERO,
        }
    }

    fn salt(&self, vm: u32) -> u64 {
        if self.settings.force_salting == 2 { vm as u64 + 1 } else { 0 }
    }

    fn add_vm(&mut self, pages: u32) {
        if let Some(k) = &mut self.ksm {
            k.base.push(k.ksmd.add_pages(pages));
        }
        let n = pages.max(1) as u64;
        // A large odd step coprime with n (Knuth's multiplicative constant, adjusted).
        let mut stride = 2_654_435_761 % n;
        while gcd(stride.max(1), n) != 1 {
            stride += 1;
        }
        self.vms.push(VmShare { stride: stride.max(1), large_pages: self.settings.large_pages, ..Default::default() });
    }

    /// Drops one sharer of frame `f`; returns whether the frame was freed.
    fn unref(&mut self, f: u32) -> bool {
        let fr = &mut self.frames[f];
        fr.refs -= 1;
        if fr.refs > 0 {
            return false;
        }
        self.table.remove(&fr.key);
        self.frames.free(f);
        self.in_use -= 1;
        true
    }

    fn new_frame(&mut self, key: (u64, u64), refs: u32) -> u32 {
        let f = self.frames.insert(Frame { key, refs });
        self.table.insert(key, f);
        self.in_use += 1;
        f
    }

    /// Page `ppn` of `vm` becomes the hint for `key`, replacing any other.
    fn set_hint(&mut self, key: (u64, u64), vm: u32, ppn: u32) {
        self.drop_hint(key);
        self.hints.insert(key, (vm, ppn));
        self.vms[vm as usize].hints += 1;
    }

    fn drop_hint(&mut self, key: (u64, u64)) {
        if let Some((v, _)) = self.hints.remove(&key) {
            self.vms[v as usize].hints -= 1;
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Host {
    /// Turns page sharing on, before any VM is added.
    pub fn enable_sharing(&mut self, settings: PshareSettings) {
        debug_assert!(self.vms.is_empty());
        self.pshare = Some(Pshare::new(settings));
    }

    /// Page sharing, if on.
    pub fn sharing(&self) -> Option<&Pshare> {
        self.pshare.as_ref()
    }

    pub(super) fn sharing_add_vm(&mut self, pages: u32) {
        if let Some(s) = &mut self.pshare {
            s.add_vm(pages);
        }
    }

    /// Breaks VM `vm`'s large pages: its memory may share from now on, as the scanner reaches it.
    /// The hashes taken while they were whole are kept for [`Host::break_large_pages_and_share`].
    pub fn break_large_pages(&mut self, vm: u32) {
        if let Some(s) = &mut self.pshare {
            s.vms[vm as usize].large_pages = false;
        }
    }

    /// Whether VM `vm`'s memory is still backed with large pages (nothing of it shares).
    pub fn has_large_pages(&self, vm: u32) -> bool {
        self.pshare.as_ref().is_some_and(|s| s.vms[vm as usize].large_pages)
    }

    /// Breaks VM `vm`'s large pages (if still whole) and shares at once what the scanner hashed
    /// while they were whole, as ESX 6.0 does in its clear state ("actively call TPS"; KB 1021095:
    /// it "tries to share those small pages using the pre-generated hashes"). A page written since
    /// its hash was taken fails the full compare and waits for the scanner, as do pages never
    /// hashed. Returns the pages shared.
    pub fn break_large_pages_and_share(&mut self, vm: u32, guests: &mut [&mut dyn GuestMemory]) -> u64 {
        let Some(s) = &mut self.pshare else { return 0 };
        let hashed = std::mem::take(&mut s.vms[vm as usize].hashed);
        let compare_ns = s.settings.hash_ns;
        self.break_large_pages(vm);
        let mut shared = 0;
        for (ppn, content) in (0u32..).zip(hashed).filter(|&(_, c)| c != NOT_HASHED) {
            if !takeable(self.vms[vm as usize].p2m.get(ppn)) {
                continue;
            }
            // The lookup by the kept hash and the compare read the page, as hashing it does.
            self.pshare.as_mut().expect("on").vms[vm as usize].cpu_ns += compare_ns;
            if guests[vm as usize].content_id(ppn) == content {
                shared += self.try_share(vm, ppn, content, true, guests) as u64;
            }
        }
        shared
    }

    /// One wake-up of the scanner at `now`: each VM's share of pages visited. Returns when it
    /// next wakes, or `None` with sharing off.
    pub fn share_scan(&mut self, now: u64, guests: &mut [&mut dyn GuestMemory]) -> Option<u64> {
        let s = self.pshare.as_mut()?;
        if s.ksm.is_some() {
            return Some(self.ksmd_wake(now, guests));
        }
        let (period, scan_time) = (s.settings.period_ns, s.settings.scan_time_ns);
        for vm in 0..self.vms.len() {
            let n = self.vms[vm].p2m.len() as u64;
            let s = self.pshare.as_mut().expect("on");
            let st = &mut s.vms[vm];
            st.owed += n as u128 * period as u128;
            let budget = (st.owed / scan_time as u128) as u64;
            st.owed %= scan_time as u128;
            // Random order misses the cache on every page, so a batch's misses are overlapped:
            // first the map entries are asked for, then the content of the pages that will be
            // hashed (backed and settled: visiting only those is the same scan, as a visit can
            // only make a later page unshareable), then those are visited.
            let step = |p: u64, by: u64| if p + by >= n { p + by - n } else { p + by };
            let mut left = budget;
            while left > 0 {
                let k = left.min(SCAN_BATCH as u64) as usize;
                left -= k as u64;
                let st = &mut self.pshare.as_mut().expect("on").vms[vm];
                let p2m = &self.vms[vm].p2m;
                let mut batch = [0u32; SCAN_BATCH];
                for ppn in &mut batch[..k] {
                    *ppn = st.next as u32;
                    // The permutation's next page without a division: the stride never exceeds n.
                    st.next = step(st.next, st.stride);
                    p2m.prefetch(*ppn);
                }
                let mut hashed = 0;
                for j in 0..k {
                    if takeable(p2m.get(batch[j])) {
                        guests[vm].prefetch_content(batch[j]);
                        batch[hashed] = batch[j];
                        hashed += 1;
                    }
                }
                for &ppn in &batch[..hashed] {
                    self.share_visit(vm as u32, ppn, guests);
                }
            }
        }
        Some(now + period)
    }

    /// One wake-up of ksmd (`ksm_do_scan` when it runs); returns when it next wakes: after its
    /// sleep and the CPU the batch took, as ksmd sleeps after each batch.
    fn ksmd_wake(&mut self, now: u64, guests: &mut [&mut dyn GuestMemory]) -> u64 {
        let Host { pshare, vms, free, invalidations, .. } = self;
        let s = pshare.as_mut().expect("on");
        let Ksm { ksmd, base, run } = s.ksm.as_mut().expect("KSM");
        let sleep = ksmd.settings().sleep_millisecs as u64 * 1_000_000;
        if !*run {
            // Stopped: looks again after a sleep, so a policy that starts it is heard.
            return now + sleep.max(1_000_000);
        }
        let mut pages = HostPages { vms, stats: &mut s.vms, base, guests, free, invalidations, settings: &s.settings, cpu_ns: 0 };
        ksmd.scan(ksmd.settings().pages_to_scan, &mut pages);
        // At least a microsecond apart, so sleep_millisecs = 0 cannot stop simulated time.
        now + (sleep + pages.cpu_ns).max(1_000)
    }

    /// A policy starts or stops ksmd or retunes it (/sys/kernel/mm/ksm/run, pages_to_scan,
    /// sleep_millisecs); returns false on a host that does not share with KSM.
    pub fn set_ksm(&mut self, run: bool, pages_to_scan: u32, sleep_millisecs: u32) -> bool {
        let Some(k) = self.pshare.as_mut().and_then(|s| s.ksm.as_mut()) else { return false };
        k.run = run;
        let settings = KsmSettings { pages_to_scan: pages_to_scan.max(1), sleep_millisecs, ..k.ksmd.settings() };
        k.ksmd.set_settings(settings);
        true
    }

    /// The scanner visits page `ppn` of `vm`: a private page with nothing in flight is hashed and
    /// offered for sharing.
    fn share_visit(&mut self, vm: u32, ppn: u32, guests: &mut [&mut dyn GuestMemory]) {
        let e = self.vms[vm as usize].p2m.get(ppn);
        let s = self.pshare.as_mut().expect("on");
        let st = &mut s.vms[vm as usize];
        if !takeable(e) {
            return;
        }
        st.scanned += 1;
        st.cpu_ns += s.settings.hash_ns;
        let content = guests[vm as usize].content_id(ppn);
        let large = st.large_pages;
        if large {
            if st.hashed.is_empty() {
                st.hashed = vec![NOT_HASHED; self.vms[vm as usize].p2m.len() as usize];
            }
            st.hashed[ppn as usize] = content;
        }
        self.try_share(vm, ppn, content, !large, guests);
    }

    /// Offers private page `ppn` of `vm`, holding `content`, for sharing: maps it to a shared frame
    /// of that content, or shares it with a still-valid hint, or (with `share` false, or no match)
    /// records it as the hint. Returns whether its frame was freed.
    pub(super) fn try_share(&mut self, vm: u32, ppn: u32, content: u64, share: bool, guests: &mut [&mut dyn GuestMemory]) -> bool {
        let s = self.pshare.as_mut().expect("on");
        let key = (s.salt(vm), content);
        if share && let Some(&f) = s.table.get(&key) {
            s.frames[f].refs += 1;
            self.map_shared(vm, ppn, f, content);
            self.free += 1;
            return true;
        }
        match s.hints.get(&key).copied() {
            Some((hv, hp)) if (hv, hp) == (vm, ppn) => false,
            Some((hv, hp)) if share => {
                // Rehash the hint page: still private, settled and holding the same content?
                let he = self.vms[hv as usize].p2m.get(hp);
                let valid = takeable(he)
                    && !self.pshare.as_ref().expect("on").vms[hv as usize].large_pages
                    && guests[hv as usize].content_id(hp) == content;
                let s = self.pshare.as_mut().expect("on");
                if !valid {
                    s.set_hint(key, vm, ppn);
                    return false;
                }
                s.drop_hint(key);
                let f = s.new_frame(key, 2);
                self.map_shared(hv, hp, f, content);
                self.map_shared(vm, ppn, f, content);
                // Two private frames gave way to one shared frame.
                self.free += 1;
                true
            }
            _ => {
                s.set_hint(key, vm, ppn);
                false
            }
        }
    }

    /// Maps private page `ppn` of `vm` to shared frame `f` (its reference already counted): its
    /// private frame leaves the VM, and the guest's next write must come to the host.
    fn map_shared(&mut self, vm: u32, ppn: u32, f: u32, content: u64) {
        let s = self.pshare.as_mut().expect("on");
        map_page(&mut self.vms[vm as usize], &mut s.vms[vm as usize], ppn, f, content == ZERO, s.settings.share_ns);
        self.invalidations.push((vm, ppn));
    }

    /// Page `ppn` of `vm` stops mapping shared frame `f` (a write's private copy, the balloon):
    /// the frame goes when its last sharer does.
    pub(super) fn unshare(&mut self, vm: u32, ppn: u32, f: u32) {
        let s = self.pshare.as_mut().expect("a shared page means sharing is on");
        let zero = s.is_zero(f);
        let st = &mut s.vms[vm as usize];
        st.shared -= 1;
        st.zero -= zero as u64;
        let freed = match &mut s.ksm {
            Some(k) => k.ksmd.unmap(k.base[vm as usize] + ppn),
            None => s.unref(f),
        };
        if freed {
            self.free += 1;
        }
    }

    /// A write to page `ppn` of `vm`, which maps shared frame `f`, gave it a private frame: the
    /// share is dropped. Returns the host CPU the break costs (the vCPU waits for it).
    pub(super) fn cow_break(&mut self, vm: u32, ppn: u32, f: u32) -> u64 {
        self.unshare(vm, ppn, f);
        let s = self.pshare.as_mut().expect("a shared page means sharing is on");
        s.vms[vm as usize].cow_breaks += 1;
        s.vms[vm as usize].cpu_ns += s.settings.cow_break_ns;
        s.settings.cow_break_ns
    }

    /// Machine memory saved by sharing attributed to each VM (SHRDSVD), pages: a frame shared n
    /// ways credits each sharer (n - 1) / n.
    pub fn shared_saved(&self, vm: u32) -> f64 {
        let Some(s) = &self.pshare else { return 0.0 };
        self.vms[vm as usize]
            .p2m
            .iter()
            .filter_map(|(_, e)| match e.state() {
                PageState::Shared(ZERO_PAGE) => Some(1.0),
                PageState::Shared(f) => Some(1.0 - 1.0 / s.refs(f) as f64),
                _ => None,
            })
            .sum::<f64>()
            // An empty sum is -0.0.
            + 0.0
    }

    /// Checks the sharing table against the maps: every shared frame's count is the number of
    /// pages mapping it, every VM's counters match its map; with KSM, every mapping is ksmd's.
    pub(super) fn check_sharing(&self) -> Result<(), String> {
        let Some(s) = &self.pshare else { return Ok(()) };
        let mut refs: HashMap<u32, u32> = HashMap::new();
        let mut zero_mapped = 0;
        for (i, v) in self.vms.iter().enumerate() {
            let (mut shared, mut zero) = (0, 0);
            for (ppn, e) in v.p2m.iter() {
                let PageState::Shared(f) = e.state() else { continue };
                let known = match &s.ksm {
                    Some(k) if f == ZERO_PAGE => k.ksmd.zero_mapped(k.base[i] + ppn),
                    Some(k) => k.ksmd.ksm_page(k.base[i] + ppn) == Some(f),
                    None => s.frames.get(f).is_some_and(|fr| fr.refs > 0),
                };
                if !known {
                    return Err(format!("VM '{}': page {ppn} maps shared frame {f}, which does not hold it", v.name));
                }
                if f == ZERO_PAGE {
                    zero_mapped += 1;
                } else {
                    *refs.entry(f).or_default() += 1;
                }
                shared += 1;
                zero += s.is_zero(f) as u64;
            }
            let st = &s.vms[i];
            if (shared, zero) != (st.shared, st.zero) {
                return Err(format!("VM '{}': {shared} shared pages ({zero} zero) mapped but {} ({}) counted", v.name, st.shared, st.zero));
            }
        }
        match &s.ksm {
            Some(k) => {
                k.ksmd.check()?;
                let zeros = k.ksmd.counters().ksm_zero_pages;
                if zeros != zero_mapped {
                    return Err(format!("{zero_mapped} pages map the zero page but ksm_zero_pages is {zeros}"));
                }
            }
            None if s.table.len() as u64 != s.in_use => {
                return Err(format!("{} shared frames in the table, {} counted", s.table.len(), s.in_use));
            }
            None => {}
        }
        if refs.len() as u64 != s.frames_in_use() {
            return Err(format!("{} shared frames mapped, {} counted", refs.len(), s.frames_in_use()));
        }
        for (f, n) in refs {
            if s.refs(f) != n {
                return Err(format!("shared frame {f} counts {} sharers but {n} pages map it", s.refs(f)));
            }
        }
        Ok(())
    }
}

/// Guest memory as ksmd sees it: item `i` is page `i - base[vm]` of the VM whose pages start at
/// the greatest base not above `i`.
struct HostPages<'a, 'g> {
    vms: &'a mut [HostVm],
    stats: &'a mut [VmShare],
    base: &'a [u32],
    guests: &'a mut [&'g mut dyn GuestMemory],
    free: &'a mut u64,
    invalidations: &'a mut Vec<(u32, u32)>,
    settings: &'a PshareSettings,
    /// CPU the batch spent, ns.
    cpu_ns: u64,
}

impl HostPages<'_, '_> {
    fn locate(&self, i: u32) -> (usize, u32) {
        let vm = self.base.partition_point(|&b| b <= i) - 1;
        (vm, i - self.base[vm])
    }

    /// Page `ppn` of `vm` now maps shared frame `f` instead of its private frame.
    fn map(&mut self, vm: usize, ppn: u32, f: u32, zero: bool) {
        map_page(&mut self.vms[vm], &mut self.stats[vm], ppn, f, zero, self.settings.share_ns);
        self.cpu_ns += self.settings.share_ns;
        self.invalidations.push((vm as u32, ppn));
    }
}

/// Private page `ppn` of VM `v` maps shared frame `f` (its reference counted already): its private
/// frame leaves the VM, and the guest must be told (its next write must come to the host).
fn map_page(v: &mut HostVm, st: &mut VmShare, ppn: u32, f: u32, zero: bool, share_ns: u64) {
    v.p2m.set(ppn, Entry::new(PageState::Shared(f)));
    v.granted -= 1;
    st.shared += 1;
    st.zero += zero as u64;
    st.cpu_ns += share_ns;
}

impl KsmPages for HostPages<'_, '_> {
    /// A private page with nothing in flight, or one mapping a KSM page, is read (checksummed or
    /// compared: `hash_ns` of CPU); other pages are not there for ksmd.
    fn content(&mut self, i: u32) -> Option<u64> {
        let (vm, ppn) = self.locate(i);
        let e = self.vms[vm].p2m.get(ppn);
        if !takeable(e) && !matches!(e.state(), PageState::Shared(f) if f != ZERO_PAGE) {
            return None;
        }
        let st = &mut self.stats[vm];
        st.scanned += 1;
        st.cpu_ns += self.settings.hash_ns;
        self.cpu_ns += self.settings.hash_ns;
        Some(self.guests[vm].content_id(ppn))
    }

    fn merge(&mut self, i: u32, n: u32, content: u64, first: bool) {
        let (vm, ppn) = self.locate(i);
        self.map(vm, ppn, n, content == ZERO);
        // The first page's frame becomes the KSM page; the others' frames are freed.
        *self.free += !first as u64;
    }

    fn map_zero(&mut self, i: u32) {
        let (vm, ppn) = self.locate(i);
        self.map(vm, ppn, ZERO_PAGE, true);
        *self.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{Access, Content, VmResources};

    /// A guest whose pages hold the given identities.
    struct Pages(Vec<u64>);

    impl GuestMemory for Pages {
        fn invalidate(&mut self, _: u32) {}
        fn touched_after(&self, _: u32, _: u64) -> bool {
            false
        }
        fn content(&self, _: u32) -> Content {
            Content::Generic
        }
        fn content_id(&self, ppn: u32) -> u64 {
            self.0[ppn as usize]
        }
    }

    /// A host of 64 frames, sharing across VMs, with three 4-page VMs whose pages are all backed.
    fn host() -> Host {
        let mut h = Host::new(64);
        h.enable_sharing(PshareSettings { force_salting: 0, ..Default::default() });
        for i in 0..3 {
            let res = VmResources { reservation: 0, limit: u64::MAX, shares: 1000, overhead: 0 };
            h.add_vm(format!("v{i}"), 4, res, 0, 0, 0, 0);
            h.back_range(i, 0, 4);
        }
        h
    }

    #[test]
    fn a_write_gives_the_writer_a_private_frame_and_leaves_the_others_shared() {
        let mut h = host();
        // Page 0 of every VM holds content 7; the rest are different.
        let mut g: Vec<Pages> = (0..3).map(|v| Pages(vec![7, 100 + v, 200 + v, 300 + v])).collect();
        let mut refs: Vec<&mut dyn GuestMemory> = g.iter_mut().map(|p| p as &mut dyn GuestMemory).collect();
        assert!(!h.try_share(0, 0, 7, true, &mut refs), "the first page of a content is only a hint");
        assert!(h.try_share(1, 0, 7, true, &mut refs), "the second shares with the hint");
        assert!(h.try_share(2, 0, 7, true, &mut refs), "the third maps the shared frame");
        h.check().unwrap();
        // Twelve private frames became ten: nine private and one shared.
        assert_eq!(h.free_frames(), 64 - 10);
        let PageState::Shared(f) = h.vms()[0].p2m().get(0).state() else { panic!("not shared") };
        assert_eq!(h.sharing().unwrap().refs(f), 3);
        // VM 1 writes its page: it gets a private frame after the break's cost; the others still share.
        let r = h.access(1, 0, true, 1_000, &mut []);
        assert_eq!(r, Access::Wait(1_000 + PshareSettings::default().cow_break_ns));
        assert_eq!(h.vms()[1].p2m().get(0).state(), PageState::Backed);
        assert_eq!(h.vms()[0].p2m().get(0).state(), PageState::Shared(f));
        assert_eq!(h.vms()[2].p2m().get(0).state(), PageState::Shared(f));
        assert_eq!(h.sharing().unwrap().refs(f), 2);
        assert_eq!(h.free_frames(), 64 - 11);
        // A read of a shared page needs no copy, but its writes must still come to the host.
        assert_eq!(h.access(0, 0, false, 2_000, &mut []), Access::Shared);
        h.check().unwrap();
        // The last two sharers write: the frame goes with the last of them.
        h.access(0, 0, true, 3_000, &mut []);
        h.access(2, 0, true, 3_000, &mut []);
        assert_eq!(h.sharing().unwrap().frames_in_use(), 0);
        assert_eq!(h.free_frames(), 64 - 12);
        h.check().unwrap();
    }

    #[test]
    fn a_stale_hint_is_replaced_not_shared() {
        let mut h = host();
        let mut g: Vec<Pages> = (0..3).map(|v| Pages(vec![7, 100 + v, 200 + v, 300 + v])).collect();
        {
            let mut refs: Vec<&mut dyn GuestMemory> = g.iter_mut().map(|p| p as &mut dyn GuestMemory).collect();
            assert!(!h.try_share(0, 0, 7, true, &mut refs));
        }
        // The hint page changes before the next page with its old content is visited.
        g[0].0[0] = 8;
        let mut refs: Vec<&mut dyn GuestMemory> = g.iter_mut().map(|p| p as &mut dyn GuestMemory).collect();
        assert!(!h.try_share(1, 0, 7, true, &mut refs), "rehashing the hint finds it changed");
        assert_eq!(h.sharing().unwrap().vm(1).hints, 1, "the visited page is the hint now");
        assert_eq!(h.sharing().unwrap().vm(0).hints, 0);
        assert!(h.try_share(2, 0, 7, true, &mut refs));
        h.check().unwrap();
    }
}
