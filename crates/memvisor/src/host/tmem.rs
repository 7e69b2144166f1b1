//! Transcendent memory as Xen 4.0-4.4's tmem keeps it (`xen/common/tmem.c`; docs/sources/tmem.md
//! section 1). Guests reach host memory through synchronous, page-granular, copy-based calls on
//! pools they create: put, get, flush page, flush object, destroy pool. A page is named by a handle
//! (pool, object id, index).
//!
//! - Ephemeral pools (cleancache) hold clean page-cache pages the host may drop at any time; they
//!   use fallow memory billed to no guest. A get of a private ephemeral page removes it (the
//!   "exclusive get"); a shared one stays and moves to the tail of the eviction list.
//! - Persistent pools (frontswap) may refuse a put, but an accepted page comes back until flushed;
//!   the frames are billed to the guest and refused once the guest holds its `max_pages`.
//! - Puts go to the tail of one global ephemeral list; eviction takes its head (FIFO by put time;
//!   all client weights 0, Xen's default, so no client is "over quota"). Before a put the host
//!   evicts until 1 MB is free (`tmem_ensure_avail_pages`); when it needs a frame for a guest and
//!   has none, it takes one from tmem's ephemeral pages (`tmem_relinquish_pages`).
//! - Deduplication (ephemeral pools only, "not possible for persistent pools for accounting
//!   reasons") keys pages by their whole content: one copy of data per content, shared by every
//!   descriptor holding it, whichever guest put it. A deduplicated page met at the head of the
//!   list gets one second chance at the tail. Compression (LZO1X-1) keeps a page compressed only
//!   if it fits below `SUBPAGE_MAX_BYTES`.
//!
//! Compressed data are counted in bytes and held in whole frames (the TLSF sub-page allocator's
//! fragmentation is not modelled); a content's compressed size is fixed by its identity.

use hashbrown::HashTable;
use rustc_hash::{FxHashMap, FxHasher};

use super::{Compressibility, Content, Host};
use crate::index::{NONE, Recycled};
use crate::units::PAGE_SIZE;

/// The largest compressed size kept: the TLSF pool's largest allocation, `PAGE_SIZE - 2 *
/// BHDR_OVERHEAD`, about 4,064 B on x86_64 (`tmh_subpage_maxsize`; tmem.md 1.2).
pub const SUBPAGE_MAX_BYTES: u64 = 4_064;

/// Free memory `tmem_ensure_avail_pages` keeps before every put: 1 MB (tmem.md 1.2).
const MIN_FREE_FRAMES: u64 = (1 << 20) / PAGE_SIZE;

/// Pages per block of an object's index: a file's pages are put and got in runs, so a run's
/// lookups share one block.
const OBJ_BLOCK: usize = 64;

/// Pools per client (`MAX_POOLS_PER_DOMAIN`).
pub const MAX_POOLS_PER_CLIENT: usize = 16;

/// tmem's settings (Xen boot options `tmem_dedup`, `tmem_compress`) and costs.
#[derive(Clone, Debug, PartialEq)]
pub struct TmemSettings {
    /// Deduplicate ephemeral pages by content (`tmem_dedup`, off by default).
    pub dedup: bool,
    /// Compress pages with LZO1X-1 (`tmem_compress`, off by default).
    pub compress: bool,
    /// Copying a page into or out of the pool: 320 ns, 4 KiB at DDR3-1600's 12.8 GB/s (the
    /// memory of seed 002's backup slide; the guest's `page_copy_ns`).
    pub copy_ns: u64,
    /// Comparing a page with a stored one of the same key (`tmh_page_cmp`, a word-by-word walk):
    /// taken as one page copy.
    pub compare_ns: u64,
    /// Compressing a page: 29.7 us (Difference Engine, table 2; DESIGN.md section 3).
    pub compress_ns: u64,
    /// Decompressing a page: 10.4 us (same table).
    pub decompress_ns: u64,
}

impl Default for TmemSettings {
    fn default() -> Self {
        Self { dedup: false, compress: false, copy_ns: 320, compare_ns: 320, compress_ns: 29_700, decompress_ns: 10_400 }
    }
}

/// A pool's kind (`TMEM_POOL_PERSIST`, `TMEM_POOL_SHARED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// cleancache's per-file-system pool.
    PrivateEphemeral,
    /// cleancache on a cluster file system, shared by the guests mounting it.
    SharedEphemeral,
    /// frontswap's pool.
    PrivatePersistent,
}

impl PoolKind {
    /// Whether pages may be dropped by the host.
    pub fn ephemeral(self) -> bool {
        self != Self::PrivatePersistent
    }

    /// `xl tmem-list`'s type code.
    pub fn code(self) -> &'static str {
        match self {
            Self::PrivateEphemeral => "EP",
            Self::SharedEphemeral => "ES",
            Self::PrivatePersistent => "PP",
        }
    }
}

/// A pool's counters (`xl tmem-list -l`, pool keys).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PoolStats {
    /// Pages now (`Pc`) and at most (`Pm`).
    pub pages: u64,
    /// Most pages at once.
    pub pages_max: u64,
    /// Puts (`pt`) and those stored (`ps`).
    pub puts: u64,
    /// Puts stored.
    pub good_puts: u64,
    /// Puts to a handle already held whose new copy replaced the old (`pr`).
    pub dup_puts_replaced: u64,
    /// Puts to a handle already held whose new copy could not be stored: the old one is flushed
    /// (`pd`).
    pub dup_puts_flushed: u64,
    /// Puts refused for want of memory or of the guest's allowance (`px`).
    pub no_mem_puts: u64,
    /// Gets (`gt`) and hits (`gs`).
    pub gets: u64,
    /// Gets that found the page.
    pub found_gets: u64,
    /// Page flushes (`ft`) and those that found the page (`fs`).
    pub flushes: u64,
    /// Page flushes that found the page.
    pub flushes_found: u64,
    /// Object flushes (`ot`) and those that found the object (`os`).
    pub flush_objs: u64,
    /// Object flushes that found the object.
    pub flush_objs_found: u64,
}

/// One pool.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Its kind.
    pub kind: PoolKind,
    /// The guest that created it.
    pub client: u32,
    /// Counters.
    pub stats: PoolStats,
}

/// A client's (guest's) counters (`xl tmem-list`, client keys).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ClientStats {
    /// Ephemeral pages now (`Ec`) and at most (`Em`).
    pub eph_pages: u64,
    /// Most ephemeral pages at once.
    pub eph_pages_max: u64,
    /// Persistent pages now and at most.
    pub pers_pages: u64,
    /// Most persistent pages at once.
    pub pers_pages_max: u64,
    /// Bytes its persistent pages occupy (compressed or whole).
    pub pers_bytes: u64,
    /// Successful ephemeral gets (`Ge`).
    pub succ_eph_gets: u64,
    /// Successful persistent puts (`Pp`) and gets (`Gp`).
    pub succ_pers_puts: u64,
    /// Successful persistent gets.
    pub succ_pers_gets: u64,
    /// Pages stored compressed (`cp`) and those that did not compress (`cn`).
    pub compressed_pages: u64,
    /// Pages that did not compress below `SUBPAGE_MAX_BYTES`.
    pub compress_poor: u64,
    /// Ephemeral pages of this client the host evicted.
    pub evicted: u64,
    /// Host CPU its calls used (copies, compression, comparisons), ns (`Tc`, in ns).
    pub cpu_ns: u64,
}

/// Host-wide counters (`xl tmem-list -l`, global keys).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct GlobalStats {
    /// Ephemeral page descriptors now (`Ec`) and at most (`Em`): the pool's apparent size.
    pub eph_pages: u64,
    /// Most ephemeral descriptors at once.
    pub eph_pages_max: u64,
    /// Frames tmem holds now (`Fc`) and at most (`Fm`), ephemeral and persistent.
    pub frames: u64,
    /// Most frames at once.
    pub frames_max: u64,
    /// Ephemeral pages evicted (`Et`).
    pub evicted: u64,
    /// Ephemeral puts stored (`Ep`).
    pub good_eph_puts: u64,
    /// Puts whose data matched a stored copy (`Gd`).
    pub deduped_puts: u64,
}

/// A page descriptor (`pgp_t`).
#[derive(Clone, Debug)]
struct Pgp {
    pool: u32,
    oid: u64,
    index: u32,
    /// Its data.
    pcd: u32,
    /// Neighbours on the ephemeral list (`NONE` at the ends; persistent pages are on none).
    prev: u32,
    next: u32,
    /// A deduplicated page already sent back to the tail once (`eviction_attempted`).
    second_chance: bool,
}

/// An object (`tmem_object_t`): which blocks of its index hold pages. Its pages themselves are
/// found through `Tmem::blocks`, one lookup by handle, as Xen finds them through the object's
/// radix tree; this record changes only when a block is made or emptied.
#[derive(Clone, Copy, Debug, Default)]
struct Object {
    /// Blocks holding at least one page.
    blocks: u32,
    /// The highest block number it has held (its blocks lie in `0..=last_block`).
    last_block: u32,
}

/// `OBJ_BLOCK` consecutive indices of an object (a leaf of Xen's radix tree), and how many hold a
/// page.
#[derive(Clone, Debug)]
struct Block {
    slots: [u32; OBJ_BLOCK],
    used: u32,
}

/// A block's key: pool, object id, block number (index / `OBJ_BLOCK`).
type BlockKey = (u32, u64, u32);

/// Stored data (`pcd_t` with dedup; one per page without).
#[derive(Clone, Debug)]
struct Pcd {
    content: u64,
    bytes: u64,
    refs: u32,
    /// Persistent data's client (billed to it); `NONE` for ephemeral data.
    client: u32,
}

/// The result of a put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// Stored.
    Stored,
    /// Refused: no memory (or, persistent, the guest's allowance is used up). A put to a handle
    /// already held flushed the old copy.
    Refused,
}

/// Handles `Tmem::prefetch` takes at a time: a readahead window at its largest (128 KiB, the
/// default `read_ahead_kb`); longer batches go in pieces.
const PREFETCH_BATCH: usize = 32;

/// The hash `by_content` files data under (Fx: contents are not chosen by an adversary here).
fn content_hash(content: u64) -> u64 {
    use std::hash::Hasher;
    let mut h = FxHasher::default();
    h.write_u64(content);
    h.finish()
}

/// The pools of one host.
#[derive(Clone, Debug)]
pub struct Tmem {
    /// Settings.
    pub settings: TmemSettings,
    pools: Vec<Pool>,
    /// Pools of each client.
    clients: Vec<Vec<u32>>,
    /// Client counters.
    client_stats: Vec<ClientStats>,
    pgps: Recycled<Pgp>,
    /// Objects by (pool, object id); every stored page is in its object.
    objects: FxHashMap<(u32, u64), Object>,
    /// Every object's index blocks, in one table: a handle's lookup is one probe, not a probe for
    /// the object and another for its block.
    blocks: FxHashMap<BlockKey, Block>,
    pcds: Recycled<Pcd>,
    /// Deduplicated ephemeral data by content: the data's index alone, its content read from
    /// `pcds` when a probe meets a match of the hash's tag. A quarter of a (content, index) map's
    /// size, so more of a large pool's table stays in the CPU's caches (a put and a drop each probe it).
    by_content: HashTable<u32>,
    /// Ephemeral list ends.
    head: u32,
    tail: u32,
    /// Bytes of ephemeral data.
    eph_bytes: u64,
    /// Global counters.
    pub stats: GlobalStats,
}

impl Tmem {
    /// Empty pools for a host of `vms` guests.
    pub fn new(settings: TmemSettings, vms: usize) -> Self {
        Self {
            settings,
            pools: Vec::new(),
            clients: vec![Vec::new(); vms],
            client_stats: vec![ClientStats::default(); vms],
            pgps: Recycled::new(),
            objects: FxHashMap::default(),
            blocks: FxHashMap::default(),
            pcds: Recycled::new(),
            by_content: HashTable::new(),
            head: NONE,
            tail: NONE,
            eph_bytes: 0,
            stats: GlobalStats::default(),
        }
    }

    /// A new client (a guest powered on after the others).
    pub fn add_client(&mut self) {
        self.clients.push(Vec::new());
        self.client_stats.push(ClientStats::default());
    }

    /// `TMEM_NEW_POOL`: a pool of `kind` for guest `client`, or `None` past 16 pools.
    pub fn new_pool(&mut self, client: u32, kind: PoolKind) -> Option<u32> {
        let c = &mut self.clients[client as usize];
        if c.len() >= MAX_POOLS_PER_CLIENT {
            return None;
        }
        let id = self.pools.len() as u32;
        c.push(id);
        self.pools.push(Pool { kind, client, stats: PoolStats::default() });
        Some(id)
    }

    /// The pools, by id.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// A client's counters.
    pub fn client(&self, client: u32) -> &ClientStats {
        &self.client_stats[client as usize]
    }

    /// Frames the ephemeral data occupy.
    fn eph_frames(&self) -> u64 {
        self.eph_bytes.div_ceil(PAGE_SIZE)
    }

    /// Frames billed to a client for its persistent data.
    pub fn pers_frames(&self, client: u32) -> u64 {
        self.client_stats[client as usize].pers_bytes.div_ceil(PAGE_SIZE)
    }

    /// Frames tmem holds in all.
    pub fn frames(&self) -> u64 {
        self.eph_frames() + (0..self.client_stats.len() as u32).map(|c| self.pers_frames(c)).sum::<u64>()
    }

    /// Bytes a page of `content` occupies in the pool, and whether it compressed; `size` is its
    /// LZO1X-1 size.
    fn stored_bytes(&self, size: u64) -> (u64, bool) {
        if self.settings.compress && size > 0 && size < SUBPAGE_MAX_BYTES { (size, true) } else { (PAGE_SIZE, false) }
    }

    /// Frames more that storing `bytes` of new data in `pool` needs.
    fn frames_needed(&self, pool: u32, bytes: u64) -> u64 {
        if self.pools[pool as usize].kind.ephemeral() {
            (self.eph_bytes + bytes).div_ceil(PAGE_SIZE) - self.eph_frames()
        } else {
            let c = &self.client_stats[self.pools[pool as usize].client as usize];
            (c.pers_bytes + bytes).div_ceil(PAGE_SIZE) - c.pers_bytes.div_ceil(PAGE_SIZE)
        }
    }

    /// The ephemeral data page of this content already stored, if dedup finds one.
    fn dedup_match(&self, pool: u32, content: u64) -> Option<u32> {
        if !(self.settings.dedup && self.pools[pool as usize].kind.ephemeral()) {
            return None;
        }
        self.by_content.find(content_hash(content), |&d| self.pcds[d].content == content).copied()
    }

    /// Stores a page whose room the caller has made; returns the CPU it took.
    fn store(&mut self, pool: u32, oid: u64, index: u32, content: u64, size: u64) -> u64 {
        let kind = self.pools[pool as usize].kind;
        let client = self.pools[pool as usize].client;
        let s = &self.settings;
        let mut ns = s.copy_ns;
        let pcd = match self.dedup_match(pool, content) {
            Some(d) => {
                ns += s.compare_ns;
                self.pcds[d].refs += 1;
                self.stats.deduped_puts += 1;
                d
            }
            None => {
                let (bytes, compressed) = self.stored_bytes(size);
                let cs = &mut self.client_stats[client as usize];
                if self.settings.compress {
                    ns += self.settings.compress_ns;
                    if compressed {
                        cs.compressed_pages += 1;
                    } else {
                        cs.compress_poor += 1;
                    }
                }
                let d = self.pcds.insert(Pcd { content, bytes, refs: 1, client: if kind.ephemeral() { NONE } else { client } });
                if kind.ephemeral() {
                    self.eph_bytes += bytes;
                    if self.settings.dedup {
                        let pcds = &self.pcds;
                        self.by_content.insert_unique(content_hash(content), d, |&e| content_hash(pcds[e].content));
                    }
                } else {
                    cs.pers_bytes += bytes;
                }
                d
            }
        };
        let g = self.pgps.insert(Pgp { pool, oid, index, pcd, prev: NONE, next: NONE, second_chance: false });
        self.index_insert(pool, oid, index, g);
        if kind.ephemeral() {
            self.push_tail(g);
            self.stats.eph_pages += 1;
            self.stats.eph_pages_max = self.stats.eph_pages_max.max(self.stats.eph_pages);
            self.stats.good_eph_puts += 1;
            let cs = &mut self.client_stats[client as usize];
            cs.eph_pages += 1;
            cs.eph_pages_max = cs.eph_pages_max.max(cs.eph_pages);
        } else {
            let cs = &mut self.client_stats[client as usize];
            cs.pers_pages += 1;
            cs.pers_pages_max = cs.pers_pages_max.max(cs.pers_pages);
            cs.succ_pers_puts += 1;
        }
        let ps = &mut self.pools[pool as usize].stats;
        ps.good_puts += 1;
        ps.pages += 1;
        ps.pages_max = ps.pages_max.max(ps.pages);
        ns
    }

    /// Removes a page descriptor, freeing its data when no other refers to it.
    fn remove(&mut self, g: u32) {
        let p = self.pgps[g].clone();
        let kind = self.pools[p.pool as usize].kind;
        let client = self.pools[p.pool as usize].client;
        self.index_remove(p.pool, p.oid, p.index);
        let d = &mut self.pcds[p.pcd];
        d.refs -= 1;
        if d.refs == 0 {
            let (bytes, content) = (d.bytes, d.content);
            self.pcds.free(p.pcd);
            if kind.ephemeral() {
                self.eph_bytes -= bytes;
                if let Ok(e) = self.by_content.find_entry(content_hash(content), |&e| e == p.pcd) {
                    e.remove();
                }
            } else {
                self.client_stats[client as usize].pers_bytes -= bytes;
            }
        }
        if kind.ephemeral() {
            self.unlink(g);
            self.stats.eph_pages -= 1;
            self.client_stats[client as usize].eph_pages -= 1;
        } else {
            self.client_stats[client as usize].pers_pages -= 1;
        }
        self.pools[p.pool as usize].stats.pages -= 1;
        self.pgps.free(g);
    }

    /// Fetches into the CPU's caches what gets or flushes of these handles of `pool` will read:
    /// their page descriptors first, then their data descriptors and ephemeral-list neighbours. A
    /// batch's cache misses then overlap instead of coming one after another (a large pool's
    /// descriptors lie scattered over memory). Changes nothing.
    pub fn prefetch(&self, pool: u32, handles: impl Iterator<Item = (u64, u32)>) {
        let mut handles = handles.peekable();
        // Each handle is looked up once; what it found waits in a buffer for the second pass.
        let mut found = [NONE; PREFETCH_BATCH];
        while handles.peek().is_some() {
            let mut n = 0;
            for (oid, index) in handles.by_ref().take(PREFETCH_BATCH) {
                let g = self.lookup(pool, oid, index);
                if g != NONE {
                    crate::index::prefetch(&self.pgps[g]);
                    found[n] = g;
                    n += 1;
                }
            }
            for &g in &found[..n] {
                let p = &self.pgps[g];
                crate::index::prefetch(&self.pcds[p.pcd]);
                for q in [p.prev, p.next] {
                    if q != NONE {
                        crate::index::prefetch(&self.pgps[q]);
                    }
                }
            }
        }
    }

    /// The descriptor stored under a handle, or `NONE`.
    fn lookup(&self, pool: u32, oid: u64, index: u32) -> u32 {
        self.blocks.get(&(pool, oid, index / OBJ_BLOCK as u32)).map_or(NONE, |b| b.slots[index as usize % OBJ_BLOCK])
    }

    /// Enters descriptor `g` under a handle; an object's first page makes the object.
    fn index_insert(&mut self, pool: u32, oid: u64, index: u32, g: u32) {
        let key = index / OBJ_BLOCK as u32;
        let b = self.blocks.entry((pool, oid, key)).or_insert_with(|| Block { slots: [NONE; OBJ_BLOCK], used: 0 });
        if b.used == 0 {
            let o = self.objects.entry((pool, oid)).or_default();
            o.blocks += 1;
            o.last_block = o.last_block.max(key);
        }
        b.slots[index as usize % OBJ_BLOCK] = g;
        b.used += 1;
    }

    /// Takes the descriptor under a handle out of the index; an object's last page ends it.
    fn index_remove(&mut self, pool: u32, oid: u64, index: u32) {
        let key = index / OBJ_BLOCK as u32;
        let b = self.blocks.get_mut(&(pool, oid, key)).expect("a stored page's block exists");
        b.slots[index as usize % OBJ_BLOCK] = NONE;
        b.used -= 1;
        if b.used == 0 {
            self.blocks.remove(&(pool, oid, key));
            let o = self.objects.get_mut(&(pool, oid)).expect("a block's object exists");
            o.blocks -= 1;
            if o.blocks == 0 {
                self.objects.remove(&(pool, oid));
            }
        }
    }

    /// An object's descriptors in index order (the order Xen's `obj_destroy` walks its tree).
    fn descriptors(&self, pool: u32, oid: u64, obj: Object) -> Vec<u32> {
        (0..=obj.last_block)
            .filter_map(|k| self.blocks.get(&(pool, oid, k)))
            .flat_map(|b| b.slots.iter().copied().filter(|&g| g != NONE))
            .collect()
    }

    fn push_tail(&mut self, g: u32) {
        let t = self.tail;
        self.pgps[g].prev = t;
        self.pgps[g].next = NONE;
        if t == NONE {
            self.head = g;
        } else {
            self.pgps[t].next = g;
        }
        self.tail = g;
    }

    fn unlink(&mut self, g: u32) {
        let (prev, next) = (self.pgps[g].prev, self.pgps[g].next);
        if prev == NONE {
            self.head = next;
        } else {
            self.pgps[prev].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.pgps[next].prev = prev;
        }
    }

    /// `tmem_evict`: drops the ephemeral page at the head of the list; a deduplicated page met
    /// there for the first time goes to the tail instead. Returns false if no page is left.
    pub fn evict(&mut self) -> bool {
        loop {
            let g = self.head;
            if g == NONE {
                return false;
            }
            let p = &self.pgps[g];
            if self.pcds[p.pcd].refs > 1 && !p.second_chance {
                self.pgps[g].second_chance = true;
                self.unlink(g);
                self.push_tail(g);
                continue;
            }
            let client = self.pools[p.pool as usize].client;
            self.client_stats[client as usize].evicted += 1;
            self.stats.evicted += 1;
            self.remove(g);
            return true;
        }
    }

    /// `TMEM_GET_PAGE`: whether the page was found, and the CPU it took. A private ephemeral page
    /// found is removed; a shared one moves to the list's tail; a persistent one stays.
    pub fn get(&mut self, pool: u32, oid: u64, index: u32) -> (bool, u64) {
        let (kind, client) = (self.pools[pool as usize].kind, self.pools[pool as usize].client);
        self.pools[pool as usize].stats.gets += 1;
        let g = self.lookup(pool, oid, index);
        if g == NONE {
            return (false, 0);
        }
        self.pools[pool as usize].stats.found_gets += 1;
        let bytes = self.pcds[self.pgps[g].pcd].bytes;
        let ns = self.settings.copy_ns + if bytes < PAGE_SIZE { self.settings.decompress_ns } else { 0 };
        let cs = &mut self.client_stats[client as usize];
        cs.cpu_ns += ns;
        match kind {
            PoolKind::PrivateEphemeral => {
                cs.succ_eph_gets += 1;
                self.remove(g);
            }
            PoolKind::SharedEphemeral => {
                cs.succ_eph_gets += 1;
                self.unlink(g);
                self.push_tail(g);
            }
            PoolKind::PrivatePersistent => cs.succ_pers_gets += 1,
        }
        (true, ns)
    }

    /// `TMEM_FLUSH_PAGE`.
    pub fn flush_page(&mut self, pool: u32, oid: u64, index: u32) {
        let s = &mut self.pools[pool as usize].stats;
        s.flushes += 1;
        let g = self.lookup(pool, oid, index);
        if g != NONE {
            self.pools[pool as usize].stats.flushes_found += 1;
            self.remove(g);
        }
    }

    /// `TMEM_FLUSH_OBJECT`: every page of the object.
    pub fn flush_object(&mut self, pool: u32, oid: u64) {
        self.pools[pool as usize].stats.flush_objs += 1;
        let Some(&obj) = self.objects.get(&(pool, oid)) else { return };
        let pages = self.descriptors(pool, oid, obj);
        self.pools[pool as usize].stats.flush_objs_found += 1;
        for g in pages {
            self.remove(g);
        }
    }

    /// Pages held under a handle.
    pub fn contains(&self, pool: u32, oid: u64, index: u32) -> bool {
        self.lookup(pool, oid, index) != NONE
    }

    /// The content stored under a handle (for tests: what a get would copy back).
    pub fn content_of(&self, pool: u32, oid: u64, index: u32) -> Option<u64> {
        let g = self.lookup(pool, oid, index);
        (g != NONE).then(|| self.pcds[self.pgps[g].pcd].content)
    }

    /// Bytes of data stored (after dedup and compression), ephemeral and persistent.
    #[cfg(test)]
    pub fn data_bytes(&self) -> u64 {
        self.eph_bytes + self.client_stats.iter().map(|c| c.pers_bytes).sum::<u64>()
    }

    /// Checks that every descriptor is reachable exactly once by its handle, its object and (if
    /// ephemeral) the list; that data references, bytes and counters agree.
    pub fn check(&self) -> Result<(), String> {
        let mut refs: FxHashMap<u32, u32> = FxHashMap::default();
        let mut pool_pages = vec![0u64; self.pools.len()];
        let (mut eph, mut pers) = (vec![0u64; self.clients.len()], vec![0u64; self.clients.len()]);
        let mut blocks_of: FxHashMap<(u32, u64), Object> = FxHashMap::default();
        for (&(pool, oid, key), block) in &self.blocks {
            if block.used == 0 || block.slots.iter().filter(|&&g| g != NONE).count() != block.used as usize {
                return Err(format!("tmem: object ({pool}, {oid}) block {key} counts {} pages wrongly", block.used));
            }
            let o = blocks_of.entry((pool, oid)).or_default();
            o.blocks += 1;
            o.last_block = o.last_block.max(key);
            for (i, &g) in block.slots.iter().enumerate().filter(|&(_, &g)| g != NONE) {
                let index = key * OBJ_BLOCK as u32 + i as u32;
                let p = &self.pgps[g];
                if (p.pool, p.oid, p.index) != (pool, oid, index) {
                    return Err(format!("tmem: handle ({pool}, {oid}, {index}) names a descriptor of another handle"));
                }
                *refs.entry(p.pcd).or_default() += 1;
                pool_pages[pool as usize] += 1;
                let c = self.pools[pool as usize].client as usize;
                // Persistent data is billed to its own client and never shared (dedup is for
                // ephemeral pools only, as Xen's is).
                let owner = if self.pools[pool as usize].kind.ephemeral() { NONE } else { c as u32 };
                if self.pcds[p.pcd].client != owner {
                    return Err(format!("tmem: handle ({pool}, {oid}, {index}) refers to data of another kind or client"));
                }
                if self.pools[pool as usize].kind.ephemeral() { eph[c] += 1 } else { pers[c] += 1 }
            }
        }
        // Every object has exactly its blocks, and no block lies beyond its last.
        if blocks_of.len() != self.objects.len() {
            return Err(format!("tmem: {} objects, {} with blocks", self.objects.len(), blocks_of.len()));
        }
        for (&(pool, oid), o) in &blocks_of {
            match self.objects.get(&(pool, oid)) {
                Some(obj) if obj.blocks == o.blocks && obj.last_block >= o.last_block => {}
                _ => return Err(format!("tmem: object ({pool}, {oid}) has {} blocks up to {}, counted otherwise", o.blocks, o.last_block)),
            }
        }
        let (mut listed, mut g, mut prev) = (0u64, self.head, NONE);
        while g != NONE {
            let p = &self.pgps[g];
            if p.prev != prev || !self.pools[p.pool as usize].kind.ephemeral() || self.lookup(p.pool, p.oid, p.index) != g {
                return Err(format!("tmem: ephemeral list broken at descriptor {g}"));
            }
            listed += 1;
            (prev, g) = (g, p.next);
        }
        if prev != self.tail || listed != self.stats.eph_pages || listed != eph.iter().sum::<u64>() {
            return Err(format!("tmem: {listed} pages on the ephemeral list, {} counted", self.stats.eph_pages));
        }
        let (mut eph_bytes, mut pers_bytes) = (0u64, vec![0u64; self.clients.len()]);
        for (&d, &n) in &refs {
            let pcd = &self.pcds[d];
            if pcd.refs != n {
                return Err(format!("tmem: data {d} has {} references counted, {n} found", pcd.refs));
            }
            if pcd.client == NONE { eph_bytes += pcd.bytes } else { pers_bytes[pcd.client as usize] += pcd.bytes }
        }
        // Dedup finds every ephemeral data page, and only those, by its content.
        let eph_data = refs.keys().filter(|&&d| self.pcds[d].client == NONE).count();
        if self.by_content.len() != if self.settings.dedup { eph_data } else { 0 } {
            return Err(format!("tmem: {} data pages filed by content, {eph_data} ephemeral ones held", self.by_content.len()));
        }
        for &d in self.by_content.iter() {
            let content = self.pcds[d].content;
            if !refs.contains_key(&d) || self.by_content.find(content_hash(content), |&e| self.pcds[e].content == content) != Some(&d) {
                return Err(format!("tmem: data {d} filed by content is not held, or its content finds another"));
            }
        }
        if eph_bytes != self.eph_bytes {
            return Err(format!("tmem: {eph_bytes} ephemeral bytes stored, {} counted", self.eph_bytes));
        }
        for (c, s) in self.client_stats.iter().enumerate() {
            if (s.eph_pages, s.pers_pages, s.pers_bytes) != (eph[c], pers[c], pers_bytes[c]) {
                return Err(format!(
                    "tmem: client {c} counts {} ephemeral, {} persistent pages, {} bytes; found {}, {}, {}",
                    s.eph_pages, s.pers_pages, s.pers_bytes, eph[c], pers[c], pers_bytes[c]
                ));
            }
        }
        for (i, p) in self.pools.iter().enumerate() {
            if p.stats.pages != pool_pages[i] || p.stats.pages_max < p.stats.pages {
                return Err(format!(
                    "tmem: pool {i} counts {} pages (at most {}), holds {}",
                    p.stats.pages, p.stats.pages_max, pool_pages[i]
                ));
            }
        }
        let maxima = self.client_stats.iter().all(|c| c.eph_pages_max >= c.eph_pages && c.pers_pages_max >= c.pers_pages);
        if !maxima || self.stats.eph_pages_max < self.stats.eph_pages {
            return Err("tmem: a count of pages at most is below the count now".into());
        }
        Ok(())
    }
}

impl Host {
    /// Turns transcendent memory on.
    pub fn enable_tmem(&mut self, settings: TmemSettings) {
        self.tmem = Some(Tmem::new(settings, self.vms.len()));
    }

    /// The pools, if tmem is on.
    pub fn tmem(&self) -> Option<&Tmem> {
        self.tmem.as_ref()
    }

    /// Moves frames between the free count and tmem after its holdings changed.
    fn tmem_settle(&mut self) {
        let Some(t) = &mut self.tmem else { return };
        let now = t.frames();
        // Frames only leave through `tmem_make_room`, which checked they were free.
        self.free = self.free + self.tmem_frames - now;
        self.tmem_frames = now;
        t.stats.frames = now;
        t.stats.frames_max = t.stats.frames_max.max(now);
    }

    /// Evicts ephemeral pages until `frames` are free beyond `keep`; returns whether they are.
    fn tmem_make_room(&mut self, frames: u64, keep: u64) -> bool {
        while self.free < frames + keep {
            let Some(t) = &mut self.tmem else { return false };
            if !t.evict() {
                break;
            }
            self.tmem_settle();
        }
        self.free >= frames
    }

    /// A frame for the host's own use taken from tmem's ephemeral pages when none is free
    /// (`tmem_relinquish_pages`); returns whether one is free now.
    pub(super) fn tmem_relinquish(&mut self) -> bool {
        self.free > 0 || self.tmem_make_room(1, 0)
    }

    /// `TMEM_NEW_POOL` for guest `vm`.
    pub fn tmem_new_pool(&mut self, vm: u32, kind: PoolKind) -> Option<u32> {
        self.tmem.as_mut()?.new_pool(vm, kind)
    }

    /// `TMEM_PUT_PAGE` from guest `vm`: page `index` of object `oid` of `pool`, holding `content`
    /// (of compression class `class`). Returns the outcome and the CPU it took.
    pub fn tmem_put(&mut self, vm: u32, pool: u32, oid: u64, index: u32, content: u64, class: Content) -> (Put, u64) {
        let Some(t) = &mut self.tmem else { return (Put::Refused, 0) };
        // Only compression looks at a page's compressed size.
        let size = if t.settings.compress { Compressibility::measured().size_of(self.compressor, class, content) } else { 0 };
        t.pools[pool as usize].stats.puts += 1;
        let dup = Some(t.lookup(pool, oid, index)).filter(|&g| g != NONE);
        if let Some(g) = dup {
            t.remove(g);
            self.tmem_settle();
        }
        let t = self.tmem.as_mut().expect("on");
        let persistent = !t.pools[pool as usize].kind.ephemeral();
        let need = if t.dedup_match(pool, content).is_some() { 0 } else { t.frames_needed(pool, t.stored_bytes(size).0) };
        // Persistent frames are the guest's: refused at its `max_pages` (its memory size).
        let allowed = !persistent || {
            let v = &self.vms[vm as usize];
            v.granted + t.pers_frames(vm) + need <= v.p2m.len() as u64
        };
        let room = allowed && (need == 0 || self.tmem_make_room(need, if persistent { 0 } else { MIN_FREE_FRAMES }));
        let t = self.tmem.as_mut().expect("on");
        if !room {
            let s = &mut t.pools[pool as usize].stats;
            s.no_mem_puts += 1;
            if dup.is_some() {
                s.dup_puts_flushed += 1;
            }
            return (Put::Refused, 0);
        }
        if dup.is_some() {
            t.pools[pool as usize].stats.dup_puts_replaced += 1;
        }
        let ns = t.store(pool, oid, index, content, size);
        t.client_stats[vm as usize].cpu_ns += ns;
        self.tmem_settle();
        (Put::Stored, ns)
    }

    /// `TMEM_GET_PAGE`: whether the page came back, and the CPU it took.
    pub fn tmem_get(&mut self, pool: u32, oid: u64, index: u32) -> (bool, u64) {
        let Some(t) = &mut self.tmem else { return (false, 0) };
        let r = t.get(pool, oid, index);
        self.tmem_settle();
        r
    }

    /// Fetches what gets or flushes of these handles will read into the CPU's caches
    /// (`Tmem::prefetch`).
    pub fn tmem_prefetch(&self, pool: u32, handles: impl Iterator<Item = (u64, u32)>) {
        if let Some(t) = &self.tmem {
            t.prefetch(pool, handles);
        }
    }

    /// `TMEM_FLUSH_PAGE`.
    pub fn tmem_flush_page(&mut self, pool: u32, oid: u64, index: u32) {
        if let Some(t) = &mut self.tmem {
            t.flush_page(pool, oid, index);
            self.tmem_settle();
        }
    }

    /// `TMEM_FLUSH_OBJECT`.
    pub fn tmem_flush_object(&mut self, pool: u32, oid: u64) {
        if let Some(t) = &mut self.tmem {
            t.flush_object(pool, oid);
            self.tmem_settle();
        }
    }

    /// Frames tmem holds (checked against its own count by `check`).
    pub(super) fn tmem_frames_held(&self) -> u64 {
        self.tmem_frames
    }

    /// Checks tmem's structures and that the frames the host counts for it are what it holds.
    pub(super) fn check_tmem(&self) -> Result<(), String> {
        let Some(t) = &self.tmem else { return Ok(()) };
        t.check()?;
        if t.frames() != self.tmem_frames {
            return Err(format!("tmem holds {} frames, the host counts {}", t.frames(), self.tmem_frames));
        }
        for (i, v) in self.vms.iter().enumerate() {
            if v.granted + t.pers_frames(i as u32) > v.p2m.len() as u64 {
                return Err(format!(
                    "VM '{}': {} granted + {} persistent tmem frames exceed its {} pages",
                    v.name,
                    v.granted,
                    t.pers_frames(i as u32),
                    v.p2m.len()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{Compressibility, VmResources};

    fn host(frames: u64, vm_pages: u32, settings: TmemSettings) -> Host {
        let mut h = Host::new(frames);
        h.swap_enabled = false;
        for name in ["a", "b"] {
            let res = VmResources { reservation: 0, limit: u64::MAX, shares: 1000, overhead: 0 };
            h.add_vm(name.into(), vm_pages, res, 0, 0, 0, 0);
        }
        h.enable_tmem(settings);
        h
    }

    #[test]
    fn persistent_pages_come_back_intact_and_count_against_maxmem() {
        let mut h = host(1000, 100, TmemSettings::default());
        let pool = h.tmem_new_pool(0, PoolKind::PrivatePersistent).unwrap();
        h.back_range(0, 0, 90);
        for i in 0..20 {
            let r = h.tmem_put(0, pool, 0, i, 1000 + i as u64, Content::Generic).0;
            assert_eq!(r, if i < 10 { Put::Stored } else { Put::Refused }, "page {i}: 90 granted + 10 persistent = the VM's 100");
            h.check().unwrap();
        }
        for _ in 0..3 {
            for i in 0..10 {
                assert!(h.tmem_get(pool, 0, i).0);
                assert_eq!(h.tmem().unwrap().content_of(pool, 0, i), Some(1000 + i as u64), "a get leaves a persistent page");
            }
        }
        assert_eq!(h.free_frames(), 1000 - 90 - 10);
        h.tmem_flush_page(pool, 0, 3);
        assert!(!h.tmem_get(pool, 0, 3).0);
        h.check().unwrap();
        assert_eq!(h.free_frames(), 1000 - 90 - 9);
    }

    #[test]
    fn exclusive_gets_and_eviction_before_the_guests_need() {
        let mut h = host(600, 400, TmemSettings::default());
        let pool = h.tmem_new_pool(0, PoolKind::PrivateEphemeral).unwrap();
        // 600 frames, 256 kept free before every put: 344 can be held.
        for i in 0..400 {
            assert_eq!(h.tmem_put(0, pool, 7, i, 5000 + i as u64, Content::Generic).0, Put::Stored);
            h.check().unwrap();
        }
        let t = h.tmem().unwrap();
        assert_eq!(t.stats.eph_pages, 600 - MIN_FREE_FRAMES);
        assert_eq!(t.stats.evicted, 400 - (600 - MIN_FREE_FRAMES), "the oldest puts went first");
        assert!(!t.contains(pool, 7, 0) && t.contains(pool, 7, 399));
        // A hit removes the page; a second get misses.
        assert!(h.tmem_get(pool, 7, 399).0);
        assert!(!h.tmem_get(pool, 7, 399).0);
        // The host needs 300 frames for a guest: 257 are free, tmem gives up the rest.
        for i in 0..300 {
            assert!(h.tmem_relinquish(), "frame {i}");
            h.back_range(1, i, i + 1);
        }
        h.check().unwrap();
        assert_eq!((h.free_frames(), h.tmem().unwrap().stats.eph_pages), (0, 343 - 43));
    }

    #[test]
    fn ephemeral_pages_make_room_for_persistent_ones() {
        let mut h = host(600, 400, TmemSettings::default());
        let eph = h.tmem_new_pool(1, PoolKind::PrivateEphemeral).unwrap();
        let pers = h.tmem_new_pool(0, PoolKind::PrivatePersistent).unwrap();
        for i in 0..400 {
            h.tmem_put(1, eph, 1, i, 100 + i as u64, Content::Generic);
        }
        assert_eq!((h.tmem().unwrap().stats.eph_pages, h.free_frames()), (344, 256));
        for i in 0..300 {
            assert_eq!(h.tmem_put(0, pers, 0, i, 900 + i as u64, Content::Generic).0, Put::Stored, "page {i}");
        }
        let t = h.tmem().unwrap();
        assert_eq!((t.stats.eph_pages, h.free_frames()), (344 - 44, 0), "the free frames, then ephemeral pages");
        h.check().unwrap();
    }

    #[test]
    fn dedup_stores_one_copy_across_guests_and_flushes_keep_the_others() {
        let s = TmemSettings { dedup: true, ..TmemSettings::default() };
        let mut h = host(2000, 100, s);
        let (a, b) = (h.tmem_new_pool(0, PoolKind::PrivateEphemeral).unwrap(), h.tmem_new_pool(1, PoolKind::PrivateEphemeral).unwrap());
        for i in 0..100 {
            h.tmem_put(0, a, 1, i, 7000 + i as u64, Content::Generic);
            h.tmem_put(1, b, 9, i, 7000 + i as u64, Content::Generic);
        }
        let t = h.tmem().unwrap();
        assert_eq!((t.stats.eph_pages, t.frames(), t.stats.deduped_puts), (200, 100, 100));
        h.tmem_flush_object(a, 1);
        h.check().unwrap();
        assert_eq!(h.tmem().unwrap().frames(), 100, "b's pages still hold the data");
        assert!(h.tmem_get(b, 9, 5).0);
        assert_eq!(h.tmem().unwrap().frames(), 99);
        h.check().unwrap();
        // A put to a held handle replaces it.
        h.tmem_put(1, b, 9, 6, 1, Content::Generic);
        assert_eq!(h.tmem().unwrap().content_of(b, 9, 6), Some(1));
        assert_eq!(h.tmem().unwrap().pools()[b as usize].stats.dup_puts_replaced, 1);
        h.check().unwrap();
    }

    #[test]
    fn dedup_leaves_persistent_pages_alone() {
        let s = TmemSettings { dedup: true, ..TmemSettings::default() };
        let mut h = host(2000, 100, s);
        let eph = h.tmem_new_pool(0, PoolKind::PrivateEphemeral).unwrap();
        let pers = h.tmem_new_pool(0, PoolKind::PrivatePersistent).unwrap();
        let free = h.free_frames();
        h.tmem_put(0, eph, 1, 0, 42, Content::Generic);
        h.tmem_put(0, pers, 1, 0, 42, Content::Generic);
        let t = h.tmem().unwrap();
        assert_eq!((t.pers_frames(0), t.stats.deduped_puts), (1, 0), "the persistent copy is its own, billed to the guest");
        assert_eq!(free - h.free_frames(), 2);
        assert_eq!(t.pools()[pers as usize].stats.pages, 1);
        h.check().unwrap();
    }

    #[test]
    fn flushing_an_object_drops_every_page_of_every_block() {
        let mut h = host(2000, 100, TmemSettings::default());
        let p = h.tmem_new_pool(0, PoolKind::PrivateEphemeral).unwrap();
        let n = 3 * OBJ_BLOCK as u32 + 5;
        for i in 0..n {
            h.tmem_put(0, p, 4, i, 300 + i as u64, Content::Generic);
        }
        h.tmem_put(0, p, 5, 0, 1, Content::Generic);
        let t = h.tmem().unwrap();
        assert_eq!((t.pools()[p as usize].stats.pages, t.pools()[p as usize].stats.pages_max), (n as u64 + 1, n as u64 + 1));
        h.tmem_flush_object(p, 4);
        h.check().unwrap();
        let t = h.tmem().unwrap();
        assert!((0..n).all(|i| !t.contains(p, 4, i)), "a page of the object outlived its flush");
        assert!(t.contains(p, 5, 0), "another object is untouched");
        assert_eq!((t.pools()[p as usize].stats.pages, t.frames()), (1, 1));
        assert!(!h.tmem_get(p, 4, n - 1).0);
    }

    #[test]
    fn a_get_costs_a_copy_and_a_decompression_when_compressed() {
        let s = TmemSettings { compress: true, ..TmemSettings::default() };
        let mut h = host(2000, 100, s.clone());
        let p = h.tmem_new_pool(0, PoolKind::PrivatePersistent).unwrap();
        let packed = s.copy_ns + s.decompress_ns;
        let small = compressible(&h);
        let (r, put_ns) = h.tmem_put(0, p, 0, 0, small, Content::Generic);
        assert_eq!((r, put_ns), (Put::Stored, s.copy_ns + s.compress_ns));
        let before = h.tmem().unwrap().client(0).cpu_ns;
        assert_eq!(h.tmem_get(p, 0, 0), (true, packed));
        assert_eq!(h.tmem().unwrap().client(0).cpu_ns - before, packed);
        h.tmem_put(0, p, 0, 1, 5, Content::Incompressible);
        assert_eq!(h.tmem_get(p, 0, 1), (true, s.copy_ns), "a page stored whole is only copied");
    }

    /// A generic content that compresses below a page.
    fn compressible(h: &Host) -> u64 {
        let size = |c| Compressibility::measured().size_of(h.compressor, Content::Generic, c);
        (1..100_000u64).find(|&c| size(c) > 0 && size(c) < SUBPAGE_MAX_BYTES).expect("a compressible page")
    }

    #[test]
    fn a_shared_page_at_the_lists_head_gets_a_second_chance() {
        let s = TmemSettings { dedup: true, ..TmemSettings::default() };
        let mut h = host(2000, 100, s);
        let (a, b) = (h.tmem_new_pool(0, PoolKind::PrivateEphemeral).unwrap(), h.tmem_new_pool(1, PoolKind::PrivateEphemeral).unwrap());
        h.tmem_put(0, a, 0, 0, 77, Content::Generic);
        h.tmem_put(1, b, 0, 0, 77, Content::Generic);
        h.tmem_put(0, a, 0, 1, 78, Content::Generic);
        h.tmem_put(0, a, 0, 2, 79, Content::Generic);
        let t = h.tmem.as_mut().unwrap();
        assert!(t.evict());
        // a's copy of 77 was oldest but shared: it went to the tail, and b's (shared too) after it;
        // the oldest unshared page went instead.
        assert!(t.contains(a, 0, 0) && t.contains(b, 0, 0) && !t.contains(a, 0, 1) && t.contains(a, 0, 2));
        assert!(t.evict());
        assert!(!t.contains(a, 0, 2), "then the next unshared one");
        assert!(t.evict());
        assert!(!t.contains(a, 0, 0) && t.contains(b, 0, 0), "a second chance is one chance");
        h.tmem_settle();
        h.check().unwrap();
    }

    #[test]
    fn a_persistent_put_makes_room_for_its_compressed_bytes() {
        let s = TmemSettings { compress: true, ..TmemSettings::default() };
        // The guest's maximum is far above the host's frames: only the host's memory limits it.
        let mut h = host(300, 100_000, s);
        let p = h.tmem_new_pool(0, PoolKind::PrivatePersistent).unwrap();
        let small = compressible(&h);
        for i in 0..300 {
            assert_eq!(h.tmem_put(0, p, 0, i, 1 + i as u64, Content::Incompressible).0, Put::Stored);
        }
        assert_eq!(h.free_frames(), 0);
        assert_eq!(h.tmem_put(0, p, 1, 0, small, Content::Generic).0, Put::Refused, "its bytes need a frame the host lacks");
        h.check().unwrap();
        assert_eq!(h.tmem().unwrap().pers_frames(0), 300);
    }

    #[test]
    fn a_guest_at_maxmem_with_frontswap_pages_keeps_its_balloon() {
        let mut h = host(1000, 100, TmemSettings::default());
        h.populate_on_release = true;
        h.back_range(0, 0, 90);
        for ppn in 80..90 {
            h.balloon(0, ppn);
        }
        let pool = h.tmem_new_pool(0, PoolKind::PrivatePersistent).unwrap();
        for i in 0..20 {
            assert_eq!(h.tmem_put(0, pool, 0, i, 50 + i as u64, Content::Generic).0, Put::Stored, "80 granted + {i}");
        }
        assert!(!h.unballoon(0, 85), "80 granted + 20 persistent frames are its 100 pages");
        h.check().unwrap();
        h.tmem_flush_page(pool, 0, 0);
        assert!(h.unballoon(0, 85), "a frame of room once frontswap lets one go");
        h.check().unwrap();
    }

    #[test]
    fn compression_packs_pages_into_fewer_frames() {
        let s = TmemSettings { compress: true, ..TmemSettings::default() };
        let mut h = host(4000, 100, s);
        let p = h.tmem_new_pool(0, PoolKind::PrivateEphemeral).unwrap();
        for i in 0..1000 {
            h.tmem_put(0, p, 0, i, 10_000 + i as u64, Content::Generic);
        }
        let t = h.tmem().unwrap();
        let c = t.client(0);
        assert_eq!(c.compressed_pages + c.compress_poor, 1000);
        assert!(t.frames() < 1000 && t.frames() * PAGE_SIZE >= t.data_bytes(), "{} frames for {} bytes", t.frames(), t.data_bytes());
        // The same content always has the same size: storing it again adds what it added before.
        let before = t.data_bytes();
        h.tmem_put(0, p, 1, 0, 10_000, Content::Generic);
        let t = h.tmem().unwrap();
        let size = Compressibility::measured().size_of(h.compressor, Content::Generic, 10_000);
        let expected = if size > 0 && size < SUBPAGE_MAX_BYTES { size } else { PAGE_SIZE };
        assert_eq!(t.data_bytes() - before, expected);
        h.check().unwrap();
    }
}
