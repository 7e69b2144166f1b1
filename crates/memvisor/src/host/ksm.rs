//! Kernel samepage merging (`mm/ksm.c`, Linux 6.x): ksmd walks the pages processes marked
//! mergeable, `pages_to_scan` of them every `sleep_millisecs`, and merges pages of identical
//! content into one write-protected KSM page. Pages are compared by content identity (equal
//! identities are equal bytes: `content.rs`), so no bytes are hashed here.
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

use std::collections::HashMap;

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
                return Err(format!(
                    "unknown KSM setting '{name}': one of pages_to_scan, sleep_millisecs, max_page_sharing, use_zero_pages, smart_scan"
                ));
            }
        }
        Ok(())
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

/// Where a page's rmap item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tree {
    /// In neither tree.
    None,
    /// In the unstable tree of the scan with this sequence number; later scans' trees do not
    /// hold it.
    Unstable(u64),
    /// Mapped to KSM page `node`.
    Stable(u32),
}

/// A mergeable page and its rmap item.
#[derive(Clone, Copy, Debug)]
struct Item {
    /// What the page holds now.
    content: u64,
    /// The checksum of the last visit (`oldchecksum`), if any.
    checksum: Option<u64>,
    tree: Tree,
    /// Visits without merging, for smart scan (`rmap_item->age`, saturating at 255).
    age: u8,
    /// Visits smart scan may still skip (`remaining_skips`).
    remaining_skips: u8,
    /// Mapped to the zero page by KSM (`use_zero_pages`).
    zero_mapped: bool,
    /// Whether it has an rmap item (a zero-mapped page loses it at the next pass).
    has_rmap: bool,
}

/// A KSM page.
#[derive(Clone, Copy, Debug)]
struct StableNode {
    content: u64,
    /// Mappings (`rmap_hlist_len`).
    sharers: u32,
}

/// The scanner and the merged state of the pages it knows.
#[derive(Clone, Debug)]
pub struct Ksm {
    settings: KsmSettings,
    /// Mergeable pages in scan order.
    items: Vec<Item>,
    /// Next item to visit.
    cursor: usize,
    nodes: crate::index::Recycled<StableNode>,
    /// KSM pages of each content (more than one: a chain of dups).
    stable: HashMap<u64, Vec<u32>>,
    /// Unstable tree of the current scan: content -> item.
    unstable: HashMap<u64, u32>,
    rmap_items: u64,
    c: KsmCounters,
}

impl Ksm {
    /// A scanner with nothing to scan yet.
    pub fn new(settings: KsmSettings) -> Self {
        Self {
            settings,
            items: Vec::new(),
            cursor: 0,
            nodes: crate::index::Recycled::new(),
            stable: HashMap::new(),
            unstable: HashMap::new(),
            rmap_items: 0,
            c: KsmCounters::default(),
        }
    }

    /// Adds a mergeable page holding `content` at the end of the scan order (`madvise
    /// MADV_MERGEABLE`); returns its number.
    pub fn add_page(&mut self, content: u64) -> u32 {
        self.items.push(Item { content, checksum: None, tree: Tree::None, age: 0, remaining_skips: 0, zero_mapped: false, has_rmap: true });
        self.rmap_items += 1;
        (self.items.len() - 1) as u32
    }

    /// Page `i` is written and now holds `content`. A merged page gets a private copy at once
    /// (the write fault breaks copy-on-write) but stays counted with its KSM page until the
    /// scanner next visits it, as in the kernel; a zero-mapped page gets a new anonymous page and
    /// an rmap item again.
    pub fn write(&mut self, i: u32, content: u64) {
        let it = &mut self.items[i as usize];
        it.content = content;
        if it.zero_mapped {
            it.zero_mapped = false;
            self.c.ksm_zero_pages -= 1;
            if !it.has_rmap {
                it.has_rmap = true;
                it.checksum = None;
                it.age = 0;
                it.remaining_skips = 0;
                self.rmap_items += 1;
            }
        }
    }

    /// The frame page `i` uses: `Some(node)` if it is mapped to KSM page `node` (shared with the
    /// other mappings of that node), `None` for a private page or the zero page.
    pub fn ksm_page(&self, i: u32) -> Option<u32> {
        match self.items[i as usize].tree {
            Tree::Stable(n) if self.nodes[n].content == self.items[i as usize].content => Some(n),
            _ => None,
        }
    }

    /// Counters now.
    pub fn counters(&self) -> KsmCounters {
        let c = self.c;
        KsmCounters { pages_volatile: self.rmap_items - c.pages_shared - c.pages_sharing - c.pages_unshared, ..c }
    }

    /// One wake-up of ksmd: processes up to `pages_to_scan` pages (`ksm_do_scan`); returns how
    /// many it processed.
    pub fn wake(&mut self) -> u32 {
        self.scan(self.settings.pages_to_scan)
    }

    /// Processes up to `budget` pages, passing over what needs no processing; returns how many
    /// were processed. A batch ends early at the end of a full scan, as `scan_get_next_rmap_item`
    /// returns no page there (`full_scans` is the scan sequence number, `ksm_scan.seqnr`).
    pub fn scan(&mut self, budget: u32) -> u32 {
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
            done += self.visit(i) as u32;
        }
        done
    }

    /// Runs until `n` more full scans have completed.
    pub fn run_full_scans(&mut self, n: u64) {
        let target = self.c.full_scans + n;
        while self.c.full_scans < target && !self.items.is_empty() {
            self.scan(u32::MAX);
        }
    }

    /// The scanner reaches page `i`; returns whether it was processed (counted and budgeted).
    fn visit(&mut self, i: u32) -> bool {
        let it = self.items[i as usize];
        if !it.has_rmap {
            return false;
        }
        if it.zero_mapped {
            // No anonymous page at this address any more: the rmap item goes.
            self.items[i as usize].has_rmap = false;
            self.rmap_items -= 1;
            return false;
        }
        if self.should_skip(i) {
            return false;
        }
        self.c.pages_scanned += 1;
        self.cmp_and_merge_page(i);
        true
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
    fn cmp_and_merge_page(&mut self, i: u32) {
        if self.ksm_page(i).is_some() {
            return;
        }
        self.remove_from_tree(i);
        let it = &mut self.items[i as usize];
        let content = it.content;
        if it.checksum != Some(content) {
            it.checksum = Some(content);
            return;
        }
        if self.settings.use_zero_pages && content == ZERO {
            self.items[i as usize].zero_mapped = true;
            self.c.ksm_zero_pages += 1;
            return;
        }
        if let Some(n) = self.stable_candidate(content) {
            self.append(i, n);
            return;
        }
        match self.unstable.get(&content) {
            Some(&j) if j != i => {
                self.remove_from_tree(j);
                let n = self.insert_node(content);
                self.append(j, n);
                self.append(i, n);
            }
            _ => {
                self.unstable.insert(content, i);
                self.items[i as usize].tree = Tree::Unstable(self.c.full_scans);
                self.c.pages_unshared += 1;
            }
        }
    }

    /// A KSM page of `content` with room for another mapping (`stable_tree_search` through
    /// `chain_prune`: the first dup below `max_page_sharing`).
    fn stable_candidate(&self, content: u64) -> Option<u32> {
        let dups = self.stable.get(&content)?;
        dups.iter().copied().find(|&n| self.nodes[n].sharers < self.settings.max_page_sharing)
    }

    /// A new KSM page of `content` (`stable_tree_insert`): a second one of the same content makes
    /// a chain, later ones add dups to it.
    fn insert_node(&mut self, content: u64) -> u32 {
        let node = StableNode { content, sharers: 0 };
        let n = self.nodes.insert(node);
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
        let it = &mut self.items[i as usize];
        it.tree = Tree::Stable(n);
        it.age = 0;
        it.remaining_skips = 0;
    }

    /// Takes page `i` out of whichever tree holds it (`remove_rmap_item_from_tree`); a KSM page
    /// left with no mapping is freed.
    fn remove_from_tree(&mut self, i: u32) {
        match self.items[i as usize].tree {
            Tree::None => return,
            Tree::Unstable(seq) => {
                // Only the current scan's tree still holds it; older trees were dropped whole.
                if seq == self.c.full_scans {
                    let content = self.items[i as usize].content;
                    if self.unstable.get(&content) == Some(&i) {
                        self.unstable.remove(&content);
                    }
                }
                self.c.pages_unshared -= 1;
            }
            Tree::Stable(n) => {
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
        self.items[i as usize].tree = Tree::None;
    }

    /// Frees an empty KSM page; a chain left with one KSM page is one plain KSM page again.
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
        let mut per_node: HashMap<u32, u32> = HashMap::new();
        for it in &self.items {
            zero += it.zero_mapped as u64;
            match it.tree {
                Tree::Stable(n) => *per_node.entry(n).or_default() += 1,
                Tree::Unstable(_) => unshared += 1,
                Tree::None => {}
            }
        }
        for (&n, &k) in &per_node {
            if self.nodes[n].sharers != k {
                return Err(format!("KSM page {n} has {} mappings recorded and {k} pages", self.nodes[n].sharers));
            }
            if k > self.settings.max_page_sharing {
                return Err(format!("KSM page {n} has {k} mappings, more than max_page_sharing"));
            }
            shared += 1;
            sharing += k as u64 - 1;
        }
        let c = self.counters();
        let recount = (shared, sharing, unshared, zero);
        let kept = (c.pages_shared, c.pages_sharing, c.pages_unshared, c.ksm_zero_pages);
        if recount != kept {
            return Err(format!("KSM counters (shared, sharing, unshared, zero) {kept:?} but the pages say {recount:?}"));
        }
        Ok(())
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
