//! Kernel samepage merging (`mm/ksm.c`, Linux 6.x): ksmd walks the pages processes marked
//! mergeable, `pages_to_scan` of them every `sleep_millisecs`, and merges pages of identical
//! content into one write-protected KSM page. Pages are compared by content identity (equal
//! identities are equal bytes: [`crate::content`]), so no bytes are hashed here.
//!
//! The rules, each as `mm/ksm.c` has them since 6.11 (docs/sources/page-sharing.md, 1.4-1.9):
//! - A page goes further only if its checksum is unchanged since its previous visit
//!   (`cmp_and_merge_page`): nothing merges on a page's first visit.
//! - With `use_zero_pages`, a zero page is then mapped to the kernel's zero page
//!   (`try_to_merge_with_zero_page`, counted in `ksm_zero_pages`); its rmap item is freed when the
//!   scan next passes it, since the address no longer maps an anonymous page.
//! - Then the stable tree (KSM pages) is searched for the page's content, and the page merged into
//!   a KSM page with room (`stable_tree_search`, `try_to_merge_with_ksm_page`). A KSM page holds
//!   at most `max_page_sharing` mappings; more make a chain of KSM pages ("dups") of that content
//!   (`stable_node_chain`, counted by `stable_node_chains` and `stable_node_dups`).
//! - Otherwise the page is looked up in the unstable tree, rebuilt every full scan: an identical
//!   page there is merged with it into a new KSM page (`try_to_merge_two_pages`,
//!   `stable_tree_insert`); no match inserts it (`pages_unshared` counts unstable-tree items).
//! - `smart_scan` (6.7+, `should_skip_rmap_item`): a page that is not a KSM page is skipped on
//!   some visits once it has been visited three times without merging, more often the longer it
//!   stays unmerged (`skip_age`); a skip takes the page out of the unstable tree and counts in
//!   `pages_skipped`, not `pages_scanned`, and costs no scan budget.
//! - Counts: `pages_shared` is KSM pages in use, `pages_sharing` the further mappings of them,
//!   `pages_volatile` the rmap items in neither tree nor merged (`ksm_rmap_items` minus the rest).

use rustc_hash::FxHashMap;

use crate::content::ZERO;

/// ksmd's tunables, as in /sys/kernel/mm/ksm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KsmSettings {
    /// Pages processed per wake-up (`pages_to_scan`; kernel default 100).
    pub pages_to_scan: u32,
    /// Sleep between wake-ups (`sleep_millisecs`; kernel default 20).
    pub sleep_millisecs: u32,
    /// Mappings per KSM page at most (`max_page_sharing`; kernel default 256).
    pub max_page_sharing: u32,
    /// Merge zero pages with the kernel's zero page (`use_zero_pages`; default off).
    pub use_zero_pages: bool,
    /// Skip pages that keep failing to merge (`smart_scan`; default on since 6.7).
    pub smart_scan: bool,
}

impl Default for KsmSettings {
    /// The kernel's defaults (`ksm_thread_pages_to_scan`, `ksm_thread_sleep_millisecs`,
    /// `ksm_max_page_sharing`, `ksm_use_zero_pages`, `ksm_smart_scan` in mm/ksm.c).
    fn default() -> Self {
        Self { pages_to_scan: 100, sleep_millisecs: 20, max_page_sharing: 256, use_zero_pages: false, smart_scan: true }
    }
}

impl KsmSettings {
    /// Sets a tunable by its /sys/kernel/mm/ksm name, refusing what the kernel refuses
    /// (`pages_to_scan_store` and friends: `max_page_sharing` at least 2, flags 0 or 1).
    pub fn set(&mut self, name: &str, v: u64) -> Result<(), String> {
        let flag = |v: u64| match v {
            0 | 1 => Ok(v == 1),
            _ => Err(format!("KSM setting {name} = {v}: must be 0 or 1")),
        };
        let int = |v: u64, min: u64| match u32::try_from(v) {
            Ok(x) if v >= min => Ok(x),
            _ => Err(format!("KSM setting {name} = {v}: must be from {min} to {}", u32::MAX)),
        };
        match name {
            "pages_to_scan" => self.pages_to_scan = int(v, 1)?,
            "sleep_millisecs" => self.sleep_millisecs = int(v, 0)?,
            "max_page_sharing" => self.max_page_sharing = int(v, 2)?,
            "use_zero_pages" => self.use_zero_pages = flag(v)?,
            "smart_scan" => self.smart_scan = flag(v)?,
            _ => {
                let names: Vec<&str> = self.entries().iter().map(|(n, _)| *n).collect();
                return Err(format!("unknown KSM setting '{name}': one of {}", names.join(", ")));
            }
        }
        Ok(())
    }

    /// Every setting with its /sys/kernel/mm/ksm name (flags as 0 or 1).
    pub fn entries(&self) -> [(&'static str, u64); 5] {
        [
            ("pages_to_scan", self.pages_to_scan as u64),
            ("sleep_millisecs", self.sleep_millisecs as u64),
            ("max_page_sharing", self.max_page_sharing as u64),
            ("use_zero_pages", self.use_zero_pages as u64),
            ("smart_scan", self.smart_scan as u64),
        ]
    }
}

/// KSM's counters, by their /sys/kernel/mm/ksm names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KsmCounters {
    /// KSM pages in use.
    pub pages_shared: u64,
    /// Mappings of KSM pages beyond the first of each: the pages saved.
    pub pages_sharing: u64,
    /// Pages in the unstable tree: checked, unique so far.
    pub pages_unshared: u64,
    /// Rmap items in neither tree: changing, new, or skipped.
    pub pages_volatile: u64,
    /// Pages mapped to the zero page by KSM (`use_zero_pages`).
    pub ksm_zero_pages: u64,
    /// Contents with more than one KSM page.
    pub stable_node_chains: u64,
    /// KSM pages in those chains.
    pub stable_node_dups: u64,
    /// Completed passes over every mergeable page.
    pub full_scans: u64,
    /// Pages processed (cumulative).
    pub pages_scanned: u64,
    /// Pages smart scan skipped (cumulative).
    pub pages_skipped: u64,
}

impl KsmCounters {
    /// Every counter with its /sys/kernel/mm/ksm name.
    pub fn entries(&self) -> [(&'static str, u64); 10] {
        [
            ("pages_shared", self.pages_shared),
            ("pages_sharing", self.pages_sharing),
            ("pages_unshared", self.pages_unshared),
            ("pages_volatile", self.pages_volatile),
            ("ksm_zero_pages", self.ksm_zero_pages),
            ("stable_node_chains", self.stable_node_chains),
            ("stable_node_dups", self.stable_node_dups),
            ("full_scans", self.full_scans),
            ("pages_scanned", self.pages_scanned),
            ("pages_skipped", self.pages_skipped),
        ]
    }
}

/// Where ksmd finds the pages it scans and makes its merges take effect: a list of contents
/// ([`Ksm`], as `validate ksm` runs it) or guest memory on the simulated host.
pub trait KsmPages {
    /// What page `i` holds now, or `None` when no anonymous page is there for ksmd (not present,
    /// or one the host is moving), which the scan passes over and whose rmap item it frees.
    fn content(&mut self, i: u32) -> Option<u64>;
    /// Page `i`, holding `content`, now maps KSM page `n`. With `first` its own frame becomes
    /// that KSM page (the page being scanned in `try_to_merge_two_pages`); otherwise its frame is
    /// freed.
    fn merge(&mut self, i: u32, n: u32, content: u64, first: bool);
    /// Page `i` now maps the kernel's zero page and its frame is freed.
    fn map_zero(&mut self, i: u32);
}

/// No KSM page: an item in neither tree.
const NO_NODE: u32 = u32::MAX;
/// Marks an item in an unstable tree (the scan number is kept beside it).
const UNSTABLE: u32 = u32::MAX - 1;

/// An item's flags.
const HAS_CHECKSUM: u8 = 1;
const ZERO_MAPPED: u8 = 2;
const HAS_RMAP: u8 = 4;
/// The page still maps its KSM page (no write has broken it since it merged).
const MAPPED: u8 = 8;

/// A mergeable page and its rmap item, 24 bytes (the kernel's rmap item is 64).
#[derive(Clone, Copy, Debug)]
struct Item {
    /// The checksum of the last visit (`oldchecksum`), valid with `HAS_CHECKSUM`; it is also the
    /// content under which the page sits in the unstable tree.
    checksum: u64,
    /// KSM page the rmap item hangs on, `UNSTABLE`, or `NO_NODE`.
    tree: u32,
    /// With `UNSTABLE`: the scan whose tree holds it; later scans' trees do not.
    seq: u32,
    /// Visits without merging, for smart scan (`rmap_item->age`, saturating at 255).
    age: u8,
    /// Visits smart scan may still skip (`remaining_skips`).
    remaining_skips: u8,
    flags: u8,
}

impl Item {
    const NEW: Item = Item { checksum: 0, tree: NO_NODE, seq: 0, age: 0, remaining_skips: 0, flags: HAS_RMAP };

    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    fn set(&mut self, f: u8, on: bool) {
        if on {
            self.flags |= f;
        } else {
            self.flags &= !f;
        }
    }
}

/// A KSM page.
#[derive(Clone, Copy, Debug)]
struct StableNode {
    content: u64,
    /// Rmap items hanging on it (`rmap_hlist_len`), what the counters count.
    sharers: u32,
    /// Pages mapping it now: fewer than `sharers` once writes broke some, which the counters see
    /// only when ksmd next visits them. Its frame is freed when this reaches 0.
    mapped: u32,
}

/// ksmd: the rmap items of the mergeable pages, the stable and unstable trees, the counters.
#[derive(Clone, Debug)]
pub struct Ksmd {
    settings: KsmSettings,
    /// Mergeable pages in scan order.
    items: Vec<Item>,
    /// Next item to visit.
    cursor: usize,
    nodes: crate::index::Recycled<StableNode>,
    /// KSM pages of each content (more than one: a chain of dups).
    stable: FxHashMap<u64, Vec<u32>>,
    /// Unstable tree of the current scan: content -> item.
    unstable: FxHashMap<u64, u32>,
    rmap_items: u64,
    /// KSM pages some page maps.
    in_use: u64,
    c: KsmCounters,
}

impl Ksmd {
    /// ksmd over `pages` mergeable pages, none visited yet.
    pub fn new(settings: KsmSettings, pages: usize) -> Self {
        Self {
            settings,
            items: vec![Item::NEW; pages],
            cursor: 0,
            nodes: crate::index::Recycled::new(),
            stable: FxHashMap::default(),
            unstable: FxHashMap::default(),
            rmap_items: pages as u64,
            in_use: 0,
            c: KsmCounters::default(),
        }
    }

    /// The tunables.
    pub fn settings(&self) -> KsmSettings {
        self.settings
    }

    /// Changes the tunables (a write to /sys/kernel/mm/ksm); the pages keep their state.
    pub fn set_settings(&mut self, settings: KsmSettings) {
        self.settings = settings;
    }

    /// KSM pages mapped by at least one page: the frames merging holds.
    pub fn frames_in_use(&self) -> u64 {
        self.in_use
    }

    /// Pages mapping KSM page `n` now.
    pub fn mapped(&self, n: u32) -> u32 {
        self.nodes[n].mapped
    }

    /// Appends `n` mergeable pages (`madvise MADV_MERGEABLE`); returns the first one's number.
    pub fn add_pages(&mut self, n: u32) -> u32 {
        let first = self.items.len() as u32;
        self.items.resize(self.items.len() + n as usize, Item::NEW);
        self.rmap_items += n as u64;
        first
    }

    /// What KSM page `n` holds.
    pub fn content_of(&self, n: u32) -> u64 {
        self.nodes[n].content
    }

    /// The KSM page page `i` maps, if it maps one (not a private page, not the zero page).
    pub fn ksm_page(&self, i: u32) -> Option<u32> {
        let it = &self.items[i as usize];
        (it.tree < UNSTABLE && it.has(MAPPED)).then_some(it.tree)
    }

    /// Whether page `i` maps the kernel's zero page through KSM.
    pub fn zero_mapped(&self, i: u32) -> bool {
        self.items[i as usize].has(ZERO_MAPPED)
    }

    /// Page `i` stops mapping its KSM page or the zero page: a write broke copy-on-write and gave
    /// it a private page, or it was unmapped. The counters change when ksmd next visits it, as in
    /// the kernel, except `ksm_zero_pages`, which the unmapping itself lowers. Returns whether
    /// the KSM page lost its last mapping (its frame is freed).
    pub fn unmap(&mut self, i: u32) -> bool {
        let it = &mut self.items[i as usize];
        if it.has(ZERO_MAPPED) {
            it.set(ZERO_MAPPED, false);
            self.c.ksm_zero_pages -= 1;
            return false;
        }
        if it.tree >= UNSTABLE || !it.has(MAPPED) {
            return false;
        }
        it.set(MAPPED, false);
        let node = &mut self.nodes[it.tree];
        node.mapped -= 1;
        if node.mapped == 0 {
            self.in_use -= 1;
            return true;
        }
        false
    }

    /// Counters now.
    pub fn counters(&self) -> KsmCounters {
        let c = self.c;
        KsmCounters { pages_volatile: self.rmap_items - c.pages_shared - c.pages_sharing - c.pages_unshared, ..c }
    }

    /// Processes up to `budget` pages, passing over what needs no processing; returns how many
    /// were processed. A batch ends early at the end of a full scan, as `scan_get_next_rmap_item`
    /// returns no page there (`full_scans` is the scan sequence number, `ksm_scan.seqnr`).
    pub fn scan(&mut self, budget: u32, pages: &mut impl KsmPages) -> u32 {
        let mut done = 0;
        while done < budget && !self.items.is_empty() {
            if self.cursor == 0 {
                // A new pass starts with an empty unstable tree.
                self.unstable.clear();
            }
            if self.cursor == self.items.len() {
                self.cursor = 0;
                self.c.full_scans += 1;
                break;
            }
            let i = self.cursor as u32;
            self.cursor += 1;
            done += self.visit(i, pages) as u32;
        }
        done
    }

    /// The scanner reaches page `i`; returns whether it was processed (counted and budgeted).
    fn visit(&mut self, i: u32, pages: &mut impl KsmPages) -> bool {
        let it = self.items[i as usize];
        if it.has(ZERO_MAPPED) {
            // No anonymous page at this address any more: the rmap item goes.
            self.drop_rmap(i);
            return false;
        }
        let Some(content) = pages.content(i) else {
            self.remove_from_tree(i);
            self.drop_rmap(i);
            return false;
        };
        if !it.has(HAS_RMAP) {
            // A page is back where an rmap item was freed: a new item, as on a first visit.
            self.items[i as usize] = Item::NEW;
            self.rmap_items += 1;
        }
        if self.should_skip(i) {
            return false;
        }
        self.c.pages_scanned += 1;
        self.cmp_and_merge_page(i, content, pages);
        true
    }

    fn drop_rmap(&mut self, i: u32) {
        let it = &mut self.items[i as usize];
        if it.has(HAS_RMAP) {
            it.set(HAS_RMAP, false);
            self.rmap_items -= 1;
        }
    }

    /// Smart scan's decision (`should_skip_rmap_item`): KSM pages are never skipped; a page
    /// visited three times or more is skipped `skip_age` times between visits processed.
    fn should_skip(&mut self, i: u32) -> bool {
        if !self.settings.smart_scan || self.ksm_page(i).is_some() {
            return false;
        }
        let it = &mut self.items[i as usize];
        let age = it.age;
        it.age = it.age.saturating_add(1);
        if age < 3 {
            return false;
        }
        if it.remaining_skips == 0 {
            it.remaining_skips = skip_age(age);
            return false;
        }
        it.remaining_skips -= 1;
        self.c.pages_skipped += 1;
        self.remove_from_tree(i);
        true
    }

    /// `cmp_and_merge_page`, in 6.11+'s order (commit d58a361b0350, "don't waste time searching
    /// stable tree for fast changing page"): a page must keep its checksum over two visits before
    /// it is even compared with KSM pages, so a page equal to one merges on its second visit too.
    fn cmp_and_merge_page(&mut self, i: u32, content: u64, pages: &mut impl KsmPages) {
        if self.ksm_page(i).is_some() {
            return;
        }
        self.remove_from_tree(i);
        let it = &mut self.items[i as usize];
        if !it.has(HAS_CHECKSUM) || it.checksum != content {
            it.checksum = content;
            it.set(HAS_CHECKSUM, true);
            return;
        }
        if self.settings.use_zero_pages && content == ZERO {
            it.set(ZERO_MAPPED, true);
            self.c.ksm_zero_pages += 1;
            pages.map_zero(i);
            return;
        }
        if let Some(n) = self.stable_candidate(content) {
            self.append(i, n);
            pages.merge(i, n, content, false);
            return;
        }
        // The tree page is compared as it is now (`memcmp_pages`): one written since it went in
        // no longer matches.
        match self.unstable.get(&content).copied() {
            Some(j) if j != i && pages.content(j) == Some(content) => {
                self.remove_from_tree(j);
                let n = self.insert_node(content);
                self.append(i, n);
                pages.merge(i, n, content, true);
                self.append(j, n);
                pages.merge(j, n, content, false);
            }
            _ => {
                self.unstable.insert(content, i);
                let seq = self.c.full_scans as u32;
                let it = &mut self.items[i as usize];
                (it.tree, it.seq) = (UNSTABLE, seq);
                self.c.pages_unshared += 1;
            }
        }
    }

    /// A KSM page of `content` with room for another mapping (`stable_tree_search` through
    /// `chain_prune`: the first dup below `max_page_sharing`). A KSM page no page maps any more
    /// has been freed (`get_ksm_page` finds it stale) and takes no new mapping.
    fn stable_candidate(&self, content: u64) -> Option<u32> {
        let dups = self.stable.get(&content)?;
        dups.iter().copied().find(|&n| self.nodes[n].mapped > 0 && self.nodes[n].sharers < self.settings.max_page_sharing)
    }

    /// A new KSM page of `content` (`stable_tree_insert`): a second one of the same content makes
    /// a chain, later ones add dups to it.
    fn insert_node(&mut self, content: u64) -> u32 {
        let n = self.nodes.insert(StableNode { content, sharers: 0, mapped: 0 });
        self.in_use += 1;
        let dups = self.stable.entry(content).or_default();
        dups.push(n);
        match dups.len() {
            2 => {
                self.c.stable_node_chains += 1;
                self.c.stable_node_dups += 2;
            }
            k if k > 2 => self.c.stable_node_dups += 1,
            _ => {}
        }
        n
    }

    /// Maps page `i` to KSM page `n` (`stable_tree_append`): the first mapping counts as shared,
    /// the others as sharing.
    fn append(&mut self, i: u32, n: u32) {
        let node = &mut self.nodes[n];
        if node.sharers == 0 {
            self.c.pages_shared += 1;
        } else {
            self.c.pages_sharing += 1;
        }
        node.sharers += 1;
        node.mapped += 1;
        let it = &mut self.items[i as usize];
        it.tree = n;
        it.set(MAPPED, true);
        it.age = 0;
        it.remaining_skips = 0;
    }

    /// Takes page `i` out of whichever tree holds it (`remove_rmap_item_from_tree`); a KSM page
    /// left with no rmap item is freed.
    fn remove_from_tree(&mut self, i: u32) {
        let it = self.items[i as usize];
        match it.tree {
            NO_NODE => return,
            UNSTABLE => {
                // Only the current scan's tree still holds it; older trees were dropped whole.
                if it.seq == self.c.full_scans as u32 && self.unstable.get(&it.checksum) == Some(&i) {
                    self.unstable.remove(&it.checksum);
                }
                self.c.pages_unshared -= 1;
            }
            n => {
                // Only a page that no longer maps its KSM page leaves the tree (a KSM page is
                // neither skipped nor re-merged, and a present page's content is always known).
                debug_assert!(!it.has(MAPPED), "page {i} leaves KSM page {n} while mapping it");
                let node = &mut self.nodes[n];
                node.sharers -= 1;
                if node.sharers > 0 {
                    self.c.pages_sharing -= 1;
                } else {
                    self.c.pages_shared -= 1;
                    self.free_node(n);
                }
            }
        }
        let it = &mut self.items[i as usize];
        it.tree = NO_NODE;
        it.set(MAPPED, false);
    }

    /// Frees a KSM page with no rmap item left; a chain left with one KSM page is one plain KSM
    /// page again.
    fn free_node(&mut self, n: u32) {
        let content = self.nodes[n].content;
        let dups = self.stable.get_mut(&content).expect("a KSM page is in the stable tree");
        dups.retain(|&d| d != n);
        match dups.len() {
            0 => {
                self.stable.remove(&content);
            }
            1 => {
                self.c.stable_node_chains -= 1;
                self.c.stable_node_dups -= 2;
            }
            _ => self.c.stable_node_dups -= 1,
        }
        self.nodes.free(n);
    }

    /// Checks the counters against a recount of the state; describes the first difference.
    pub fn check(&self) -> Result<(), String> {
        let mut shared = 0;
        let mut sharing = 0;
        let mut unshared = 0;
        let mut zero = 0;
        let mut in_use = 0;
        let mut per_node: FxHashMap<u32, (u32, u32)> = FxHashMap::default();
        for it in &self.items {
            zero += it.has(ZERO_MAPPED) as u64;
            match it.tree {
                NO_NODE => {}
                UNSTABLE => unshared += 1,
                n => {
                    let e = per_node.entry(n).or_default();
                    e.0 += 1;
                    e.1 += it.has(MAPPED) as u32;
                }
            }
        }
        for (&n, &(k, m)) in &per_node {
            let node = &self.nodes[n];
            if (node.sharers, node.mapped) != (k, m) {
                return Err(format!(
                    "KSM page {n} records {} rmap items and {} mappings; the pages say {k} and {m}",
                    node.sharers, node.mapped
                ));
            }
            if k > self.settings.max_page_sharing {
                return Err(format!("KSM page {n} has {k} mappings, more than max_page_sharing"));
            }
            shared += 1;
            sharing += k as u64 - 1;
            in_use += (m > 0) as u64;
        }
        let c = self.counters();
        let recount = (shared, sharing, unshared, zero, in_use);
        let kept = (c.pages_shared, c.pages_sharing, c.pages_unshared, c.ksm_zero_pages, self.in_use);
        if recount != kept {
            return Err(format!("KSM counters (shared, sharing, unshared, zero, frames) {kept:?} but the pages say {recount:?}"));
        }
        Ok(())
    }
}

/// ksmd over a list of contents, as `validate ksm` runs it against the kernel's.
#[derive(Clone, Debug)]
pub struct Ksm {
    ksmd: Ksmd,
    contents: Contents,
}

/// The contents of a [`Ksm`]'s pages.
#[derive(Clone, Debug, Default)]
struct Contents(Vec<u64>);

impl KsmPages for Contents {
    fn content(&mut self, i: u32) -> Option<u64> {
        Some(self.0[i as usize])
    }
    fn merge(&mut self, _: u32, _: u32, _: u64, _: bool) {}
    fn map_zero(&mut self, _: u32) {}
}

impl Ksm {
    /// A scanner with nothing to scan yet.
    pub fn new(settings: KsmSettings) -> Self {
        Self { ksmd: Ksmd::new(settings, 0), contents: Contents::default() }
    }

    /// Adds a mergeable page holding `content` at the end of the scan order (`madvise
    /// MADV_MERGEABLE`); returns its number.
    pub fn add_page(&mut self, content: u64) -> u32 {
        self.contents.0.push(content);
        self.ksmd.add_pages(1)
    }

    /// Page `i` is written and now holds `content`: a merged page gets a private copy at once
    /// (the write fault breaks copy-on-write), counted as such when ksmd next visits it.
    pub fn write(&mut self, i: u32, content: u64) {
        self.contents.0[i as usize] = content;
        self.ksmd.unmap(i);
    }

    /// The KSM page page `i` maps, if any.
    pub fn ksm_page(&self, i: u32) -> Option<u32> {
        self.ksmd.ksm_page(i)
    }

    /// Counters now.
    pub fn counters(&self) -> KsmCounters {
        self.ksmd.counters()
    }

    /// One wake-up of ksmd: processes up to `pages_to_scan` pages (`ksm_do_scan`); returns how
    /// many it processed.
    pub fn wake(&mut self) -> u32 {
        self.scan(self.ksmd.settings.pages_to_scan)
    }

    /// Processes up to `budget` pages (see [`Ksmd::scan`]).
    pub fn scan(&mut self, budget: u32) -> u32 {
        self.ksmd.scan(budget, &mut self.contents)
    }

    /// Runs until `n` more full scans have completed.
    #[cfg(test)]
    pub fn run_full_scans(&mut self, n: u64) {
        let target = self.ksmd.c.full_scans + n;
        while self.ksmd.c.full_scans < target && !self.ksmd.items.is_empty() {
            self.scan(u32::MAX);
        }
    }

    /// Checks the counters against a recount of the state.
    pub fn check(&self) -> Result<(), String> {
        self.ksmd.check()
    }
}

/// Visits smart scan skips before the next processed one, by age (`skip_age`).
fn skip_age(age: u8) -> u8 {
    match age {
        0..=3 => 1,
        4..=5 => 2,
        6..=8 => 4,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ksm(settings: KsmSettings, pages: &[u64]) -> Ksm {
        let mut k = Ksm::new(settings);
        for &p in pages {
            k.add_page(p);
        }
        k
    }

    #[test]
    fn nothing_merges_before_a_pages_second_visit() {
        let mut k = ksm(KsmSettings::default(), &[7, 7, 7]);
        k.run_full_scans(1);
        assert_eq!(k.counters().pages_shared, 0);
        k.run_full_scans(1);
        let c = k.counters();
        assert_eq!((c.pages_shared, c.pages_sharing, c.pages_unshared, c.pages_volatile), (1, 2, 0, 0));
        k.check().unwrap();
    }

    #[test]
    fn max_page_sharing_makes_a_chain_of_dups_and_leaves_a_loner_unshared() {
        let mut k = ksm(KsmSettings::default(), &[5; 1000]);
        k.add_page(6);
        k.run_full_scans(3);
        let c = k.counters();
        // 256 + 256 + 256 + 232 mappings; 1,000 = 3 x 256 + 232, so no loner of content 5.
        assert_eq!((c.pages_shared, c.pages_sharing, c.stable_node_chains, c.stable_node_dups), (4, 996, 1, 4));
        assert_eq!(c.pages_unshared, 1, "the unique page sits in the unstable tree");
        let mut k = ksm(KsmSettings::default(), &[5; 257]);
        k.run_full_scans(3);
        let c = k.counters();
        assert_eq!((c.pages_shared, c.pages_sharing, c.pages_unshared), (1, 255, 1), "the 257th page finds no room and no partner");
        k.check().unwrap();
    }

    #[test]
    fn zero_pages_count_as_ksm_zero_pages_only_with_use_zero_pages() {
        let mut k = ksm(KsmSettings::default(), &[ZERO; 10]);
        k.run_full_scans(3);
        let c = k.counters();
        assert_eq!((c.pages_shared, c.pages_sharing, c.ksm_zero_pages), (1, 9, 0));
        let mut k = ksm(KsmSettings { use_zero_pages: true, ..Default::default() }, &[ZERO; 10]);
        k.run_full_scans(2);
        let c = k.counters();
        assert_eq!((c.pages_shared, c.pages_sharing, c.ksm_zero_pages, c.pages_volatile), (0, 0, 10, 10));
        k.run_full_scans(1);
        let c = k.counters();
        assert_eq!((c.ksm_zero_pages, c.pages_volatile, c.pages_scanned), (10, 0, 20), "rmap items freed; scanned twice only");
    }

    #[test]
    fn a_write_breaks_the_share_at_the_next_visit() {
        let mut k = ksm(KsmSettings { smart_scan: false, ..Default::default() }, &[3, 3, 3]);
        k.run_full_scans(2);
        assert_eq!(k.ksm_page(0), k.ksm_page(2));
        k.write(1, 99);
        assert_eq!(k.ksm_page(1), None, "the writer has a private copy at once");
        assert_eq!(k.counters().pages_sharing, 2, "the counters change when ksmd sees it");
        k.run_full_scans(1);
        let c = k.counters();
        assert_eq!((c.pages_shared, c.pages_sharing, c.pages_volatile), (1, 1, 1));
        k.check().unwrap();
    }

    #[test]
    fn a_page_equal_to_a_ksm_page_still_needs_two_visits() {
        let mut k = ksm(KsmSettings::default(), &[4, 4]);
        k.run_full_scans(2);
        let late = k.add_page(4);
        k.run_full_scans(1);
        assert_eq!(k.ksm_page(late), None, "6.11+ checks the checksum before the stable tree");
        k.run_full_scans(1);
        assert_eq!(k.ksm_page(late), k.ksm_page(0));
        assert_eq!(k.counters().pages_sharing, 2);
    }

    #[test]
    fn smart_scan_skips_unique_pages_after_three_visits() {
        let mut k = ksm(KsmSettings::default(), &[1, 2]);
        let mut processed = vec![];
        for v in 0..14 {
            let before = k.counters().pages_scanned;
            k.run_full_scans(1);
            if k.counters().pages_scanned > before {
                processed.push(v);
            }
        }
        assert_eq!(processed, [0, 1, 2, 3, 5, 8, 13], "the kernel's visits, measured on 6.18");
        assert_eq!(k.counters().pages_skipped, 2 * 7);
    }
}
