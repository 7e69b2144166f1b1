//! Block requests in flight (the guest's `struct bio`s): what each carries, who waits for it, how
//! contiguous pages merge into one request as the block layer's plugging does, and their
//! submission to the virtual disk (or to tmem, for pages it holds) and completion.

use super::{Counter, Env, Guest, NONE};
use crate::clock::GuestEvent;
use crate::units::PAGE_SIZE;

/// Largest request the block layer builds (max_sectors_kb 1024 on common virtual disks).
pub(super) const MAX_REQUEST_PAGES: usize = 256;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BioKind {
    /// Read pages from swap into the swap cache.
    SwapRead,
    /// Write pages to swap.
    SwapWrite,
    /// Read file pages into the page cache.
    FileRead,
    /// Write dirty file pages back.
    FileWrite,
}

/// One request in flight.
#[derive(Clone, Debug)]
pub struct Bio {
    /// What it does.
    pub kind: BioKind,
    /// Guest pages it fills or drains (empty when the pages were freed at submission, as exact-LRU
    /// eviction does).
    pub pages: Vec<u32>,
    /// Processes waiting for it.
    pub waiters: Vec<u32>,
    /// File the pages belong to (file requests), else `NONE`.
    pub file: u32,
    /// Whether a kernel thread (kswapd, the flusher) issued it rather than a process: pgsteal
    /// accounting for swap writes, the flusher's in-flight budget for file writes.
    pub kthread: bool,
    /// For a swap read: the faulting page and whether the fault was a write; it is mapped into its
    /// process when the read completes.
    pub fault: Option<(u32, bool)>,
}

/// What the requests of one submission share.
pub(super) struct Submission {
    /// What they do.
    pub kind: BioKind,
    /// File the pages belong to, or `NONE`.
    pub file: u32,
    /// Issued by a kernel thread (see `Bio::kthread`).
    pub kthread: bool,
    /// Byte offset on the virtual disk of block 0.
    pub base: u64,
    /// Largest request, in pages.
    pub max: usize,
    /// One request over the whole block range, blocks between the pages read into a discarded
    /// page (Windows' clustered in-page read with its dummy page, WI6 "Clustered Page Faults").
    pub through_gaps: bool,
}

/// The page a submitter waits for, and what its request carries for it.
pub(super) struct Waited {
    /// The page.
    pub page: u32,
    /// The process waiting for it, or `NONE`.
    pub waiter: u32,
    /// A swap read's faulting page and write flag (see `Bio::fault`).
    pub fault: Option<(u32, bool)>,
}

/// BLK_MAX_REQUEST_COUNT (include/linux/blkdev.h): a task's block plug holds this many requests;
/// the next one flushes them to the device (`blk_add_rq_to_plug`). That function also flushes when
/// the last request holds BLK_PLUG_FLUSH_SIZE (128 KiB), but the traced kernel (6.18, virtio-blk)
/// unplugged 32 swap-write requests of 1,016 KiB at once, so that rule is not modelled.
const BLK_MAX_REQUEST_COUNT: u32 = 32;

/// Swap writes held under a task's block plug (`struct blk_plug`): each write merges into the last
/// request if it continues it (`blk_attempt_plug_merge`), up to `MAX_REQUEST_PAGES`; the plug is
/// full at BLK_MAX_REQUEST_COUNT requests.
#[derive(Debug, Default)]
pub(super) struct Plug {
    /// The held writes: (slot, page).
    pub writes: Vec<(u32, u32)>,
    /// Requests they make.
    requests: u32,
    /// Pages in the last request.
    run: u32,
}

impl Plug {
    /// Holds the write of page `p` to `slot`.
    pub fn add(&mut self, slot: u32, p: u32) {
        if self.writes.last().is_some_and(|&(s, _)| s + 1 == slot) && (self.run as usize) < MAX_REQUEST_PAGES {
            self.run += 1;
        } else {
            self.requests += 1;
            self.run = 1;
        }
        self.writes.push((slot, p));
    }

    /// Whether the next request would flush the plug.
    pub fn is_full(&self) -> bool {
        self.requests >= BLK_MAX_REQUEST_COUNT
    }

    /// Takes the held writes, emptying the plug.
    pub fn take(&mut self) -> Vec<(u32, u32)> {
        (self.requests, self.run) = (0, 0);
        std::mem::take(&mut self.writes)
    }

    /// Moves the writes `other` holds into this plug, after its own.
    pub fn absorb(&mut self, other: &mut Plug) {
        if self.writes.is_empty() {
            std::mem::swap(self, other);
            return;
        }
        for (slot, p) in other.take() {
            self.add(slot, p);
        }
    }
}

/// The table of requests in flight; a request's number is its slot.
#[derive(Clone, Debug, Default)]
pub struct BioTable {
    slots: Vec<Option<Bio>>,
    free: Vec<u32>,
    in_flight: u32,
    /// Emptied page and waiter lists of completed requests, reused: requests are created and
    /// retired on every fault, and allocating their lists each time showed in profiles.
    spare: Vec<Vec<u32>>,
}

/// Spare lists kept at most.
const SPARE_MAX: usize = 64;

impl BioTable {
    /// The number the next `insert` will return.
    pub fn next_id(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.slots.len() as u32)
    }

    /// Stores a request and returns its number.
    pub fn insert(&mut self, bio: Bio) -> u32 {
        self.in_flight += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(bio);
                i
            }
            None => {
                self.slots.push(Some(bio));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The request with this number.
    pub fn get_mut(&mut self, i: u32) -> &mut Bio {
        self.slots[i as usize].as_mut().expect("bio in flight")
    }

    /// Removes a completed request.
    pub fn take(&mut self, i: u32) -> Bio {
        self.in_flight -= 1;
        self.free.push(i);
        self.slots[i as usize].take().expect("bio in flight")
    }

    /// An empty list for a new request's pages or waiters.
    pub fn list(&mut self) -> Vec<u32> {
        self.spare.pop().unwrap_or_default()
    }

    /// A list holding `items`.
    pub fn list_of(&mut self, items: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut v = self.list();
        v.extend(items);
        v
    }

    /// Takes back a completed request's lists for reuse.
    pub fn recycle(&mut self, bio: Bio) {
        for mut v in [bio.pages, bio.waiters] {
            if self.spare.len() < SPARE_MAX && v.capacity() > 0 {
                v.clear();
                self.spare.push(v);
            }
        }
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Requests in flight, for invariant checks.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Bio)> {
        self.slots.iter().enumerate().filter_map(|(i, b)| b.as_ref().map(|b| (i as u32, b)))
    }
}

/// Splits `(block, page)` pairs, sorted by block, into runs of consecutive blocks of at most `max`
/// pages: one device request each.
pub fn runs(items: &[(u32, u32)], max: usize) -> impl Iterator<Item = &[(u32, u32)]> {
    items.chunk_by(|a, b| b.0 == a.0 + 1).flat_map(move |run| run.chunks(max))
}

/// Submitting requests to the virtual disk (or to tmem, for what it holds) and completing them.
impl Guest {
    /// Sends `npages` pages at byte `offset` of the virtual disk to the device; request `bio`
    /// (`NONE`: nothing waits for it) is done when the guest sees it complete (`Env::disk_io`).
    pub(super) fn device_io(&mut self, now: u64, offset: u64, npages: usize, write: bool, bio: u32, env: &mut Env) {
        let bytes = npages as u64 * PAGE_SIZE;
        self.vmstat.add(if write { Counter::PgpgOut } else { Counter::PgpgIn }, bytes / 1024);
        env.disk_io(self.id, self.disk.datastore, now, self.disk.base + offset, npages as u64, write, bio);
    }

    /// Submits `items`, (block, page) pairs sorted by block, as one request per run of consecutive
    /// blocks (the block layer's merging), each of at most `sub.max` pages, and schedules their
    /// completions; with `sub.through_gaps`, as one request over the whole block range. The request
    /// holding `key.page`, if any, carries `key`'s waiter and fault; its number is returned.
    /// Pages cleancache or frontswap hold are served from the host's pool first, as one request
    /// that completes when the copies are done.
    pub(super) fn submit_runs(
        &mut self,
        sub: &Submission,
        items: &[(u32, u32)],
        key: Option<Waited>,
        now: u64,
        env: &mut Env,
    ) -> Option<u32> {
        if !self.tmem_serves(sub.kind) {
            return self.submit_device_runs(sub, items, key.as_ref(), now, env);
        }
        let (mut rest, mut served) = (items.to_vec(), Vec::new());
        let ns = self.tmem_serve(sub, &mut rest, &mut served, env);
        let holder = if served.is_empty() { None } else { self.submit_run(sub, &served, key.as_ref(), now, Some(ns), env) };
        if rest.is_empty() {
            return holder;
        }
        self.submit_device_runs(sub, &rest, key.as_ref(), now, env).or(holder)
    }

    /// `submit_runs` to the device.
    pub(super) fn submit_device_runs(
        &mut self,
        sub: &Submission,
        items: &[(u32, u32)],
        key: Option<&Waited>,
        now: u64,
        env: &mut Env,
    ) -> Option<u32> {
        if sub.through_gaps {
            return self.submit_run(sub, items, key, now, None, env);
        }
        let mut holder = None;
        for run in runs(items, sub.max) {
            holder = self.submit_run(sub, run, key, now, None, env).or(holder);
        }
        holder
    }

    /// One request of `submit_runs`, over blocks `run[0].0..=run[last].0`, to the device or (with
    /// `tmem_ns`, the copies' time) served by tmem; returns its number if it holds `key.page`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_run(
        &mut self,
        sub: &Submission,
        run: &[(u32, u32)],
        key: Option<&Waited>,
        now: u64,
        tmem_ns: Option<u64>,
        env: &mut Env,
    ) -> Option<u32> {
        let write = matches!(sub.kind, BioKind::SwapWrite | BioKind::FileWrite);
        let mut holder = None;
        {
            let pages = self.bios.list_of(run.iter().map(|&(_, p)| p));
            let mut waiters = self.bios.list();
            let mut fault = None;
            let is_key = key.filter(|k| pages.contains(&k.page));
            if let Some(k) = is_key {
                if k.waiter != NONE {
                    waiters.push(k.waiter);
                }
                fault = k.fault;
            }
            // A write reads the pages: any the host took must come back first (double paging).
            let mut start = now;
            if write {
                for &p in &pages {
                    start = start.max(now + self.host_touch(p, false, now, false, env).0);
                }
            }
            let id = self.bios.next_id();
            match tmem_ns {
                Some(ns) => {
                    if sub.kind == BioKind::SwapWrite {
                        // `write_slot` counted them for the device; frontswap took them instead.
                        self.vmstat.sub(Counter::PswpOut, pages.len() as u64);
                    }
                    env.schedule(self.id, start + ns, GuestEvent::IoDone { bio: id });
                }
                None => {
                    let blocks = (run[run.len() - 1].0 - run[0].0 + 1) as usize;
                    let n = pages.len() as u64;
                    match sub.kind {
                        BioKind::SwapRead => {
                            self.vmstat.inc(Counter::PageReads);
                            self.vmstat.add(Counter::PswpIn, n);
                        }
                        BioKind::SwapWrite => self.vmstat.inc(Counter::PageWrites),
                        _ => {}
                    }
                    self.device_io(start, sub.base + run[0].0 as u64 * PAGE_SIZE, blocks, write, id, env);
                }
            }
            for &p in &pages {
                self.pages[p as usize].io = id;
            }
            if is_key.is_some() {
                holder = Some(id);
            }
            let inserted = self.bios.insert(Bio { kind: sub.kind, pages, waiters, file: sub.file, kthread: sub.kthread, fault });
            debug_assert_eq!(inserted, id);
        }
        holder
    }

    /// A request completed: finish each page's state and wake whoever waited.
    pub(super) fn io_done(&mut self, id: u32, now: u64, env: &mut Env) {
        let bio = self.bios.take(id);
        for &p in &bio.pages {
            self.pages[p as usize].io = NONE;
        }
        match bio.kind {
            BioKind::SwapRead => self.swap_read_done(&bio, env),
            BioKind::FileRead => self.file_read_done(&bio),
            BioKind::SwapWrite if self.windows() => self.modified_write_done(&bio.pages, now, env),
            BioKind::SwapWrite | BioKind::FileWrite => self.write_done(&bio),
        }
        for &pid in &bio.waiters {
            self.wake(pid, now, env);
        }
        // Any completion may have freed memory or lowered the dirty count.
        for pid in std::mem::take(&mut self.throttled) {
            self.wake(pid, now, env);
        }
        self.kswapd_io_done(now, env);
        self.flusher_io_done(&bio, now, env);
        self.bios.recycle(bio);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write continuing the last request merges into it up to MAX_REQUEST_PAGES; anything else
    /// starts a request; the plug is full at BLK_MAX_REQUEST_COUNT requests, and taking its writes
    /// empties it.
    #[test]
    fn plugged_writes_merge_into_requests_until_the_plug_is_full() {
        let mut plug = Plug::default();
        for s in 0..MAX_REQUEST_PAGES as u32 + 1 {
            plug.add(s, s);
        }
        assert_eq!(plug.requests, 2, "a run one page longer than a request makes two");
        plug.add(1000, 0);
        assert_eq!(plug.requests, 3, "a gap starts a request");
        for k in 0..BLK_MAX_REQUEST_COUNT - 4 {
            plug.add(2000 + 2 * k, 0);
        }
        assert!(!plug.is_full());
        plug.add(5000, 0);
        assert!(plug.is_full());
        assert_eq!(plug.take().len(), MAX_REQUEST_PAGES + 2 + BLK_MAX_REQUEST_COUNT as usize - 3);
        assert!(!plug.is_full() && plug.writes.is_empty());
        plug.add(7, 0);
        assert_eq!(plug.requests, 1, "a taken plug starts afresh");
        let mut other = Plug::default();
        other.add(8, 1);
        other.add(20, 2);
        plug.absorb(&mut other);
        assert_eq!((plug.writes.len(), plug.requests), (3, 2), "absorbed writes merge as if added");
        assert!(other.writes.is_empty());
    }

    #[test]
    fn runs_split_on_gaps_and_size() {
        let items = [(1, 0), (2, 0), (3, 0), (7, 0), (8, 0)];
        let r: Vec<_> = runs(&items, 2).collect();
        let firsts: Vec<u32> = r.iter().map(|r| r[0].0).collect();
        assert_eq!(firsts, vec![1, 3, 7]);
        assert_eq!(r.iter().map(|r| r.len()).sum::<usize>(), 5);
    }
}
