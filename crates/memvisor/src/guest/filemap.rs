//! The page cache (`mm/filemap.c`, `mm/readahead.c`): files on the guest's virtual disk, `read()`
//! and `write()` through cached pages, `mark_page_accessed`, and on-demand readahead.

use super::bio::{BioKind, MAX_REQUEST_PAGES, Submission, Waited};
use super::lru::LruList;
use super::page::{NONE, PG_DIRTY, PG_LOCKED, PG_READAHEAD, PG_REFERENCED, PG_WRITEBACK, PageKind};
use super::page_alloc::Stall;
use super::workingset::{NO_SHADOW, Shadow};
use super::{Counter, Env, Guest, Replacement};
use crate::units::PAGE_SIZE;

/// A file on the guest's file system.
#[derive(Clone, Debug)]
pub struct File {
    /// Page index -> cached page, or `NONE`.
    pub pages: Vec<u32>,
    /// Page index -> the shadow entry reclaim left where an evicted page was.
    pub shadows: Vec<Shadow>,
    /// Byte offset of the file's first block on the virtual disk (files are contiguous).
    pub disk_off: u64,
    /// Dirty pages.
    pub nr_dirty: u64,
    /// Pages under writeback.
    pub nr_writeback: u64,
    /// When the file first became dirty since it was last clean (`inode->dirtied_when`).
    pub dirtied_when: Option<u64>,
    /// Processes in `fsync()` waiting for the file's writeback to drain.
    pub fsync_waiters: Vec<u32>,
    /// The scenario workload whose process created it (what its data looks like).
    pub workload: usize,
    /// The name a workload opens it by (`Op::Open`), whose bytes are the same in every guest
    /// holding a file of that name (`content::file_data`); `None`: the guest's own data.
    pub key: Option<u64>,
    /// Unlinked: pages still in flight leave the page cache when their I/O completes.
    pub deleted: bool,
}

/// How far a page-cache operation got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Progress {
    /// The operation completed.
    Done,
    /// It ran out of time; resume later.
    Yield,
    /// Its next step must wait until the rest of the simulation has caught up with it.
    Resync,
    /// The process blocked.
    Blocked,
    /// The process was killed.
    Killed,
}

impl Stall {
    /// What a file operation that stalled in page allocation does: the time spent is the
    /// process's, then it blocks (`Wait`), lets the simulation catch up (`Yield`) or was killed.
    fn progress(self, now: &mut u64) -> Progress {
        match self {
            Stall::Wait(ns) => {
                *now += ns;
                Progress::Blocked
            }
            Stall::Yield(ns) => {
                *now += ns;
                Progress::Resync
            }
            Stall::Killed => Progress::Killed,
        }
    }
}

/// How many pages ahead `file_read` fetches a cached page's state into the CPU's caches.
const READ_AHEAD_FETCH: u32 = 8;

impl Guest {
    /// Creates a file of `pages` pages, laid out contiguously after the previous one.
    pub(super) fn create_file(&mut self, pid: u32, pages: u32) {
        self.new_file(pid, pages, None);
    }

    /// `open()` of the file named `key`, of `pages` pages: an existing one (on disk, not cached,
    /// the first time any process opens it), or with `create` a new, empty one replacing any of
    /// that name (`O_CREAT | O_TRUNC`). The process's next handle names it.
    pub(super) fn open_file(&mut self, pid: u32, key: u64, pages: u32, create: bool, env: &mut Env) {
        if create {
            self.unlink_file(key, env);
        }
        match self.names.get(&key) {
            Some(&f) => self.procs[pid as usize].files.push(f),
            None => {
                let f = self.new_file(pid, pages, Some(key));
                self.names.insert(key, f);
            }
        }
    }

    /// `unlink()` of the file named `key`: its cached pages are dropped (dirty ones unwritten),
    /// those with I/O in flight when it completes; cleancache forgets the file.
    pub(super) fn unlink_file(&mut self, key: u64, env: &mut Env) {
        let Some(f) = self.names.remove(&key) else { return };
        self.files[f as usize].deleted = true;
        for i in 0..self.files[f as usize].pages.len() {
            let p = self.files[f as usize].pages[i];
            if p == NONE {
                continue;
            }
            if self.pages.has(p, PG_DIRTY) {
                self.pages.clear(p, PG_DIRTY);
                self.account_clean(p);
                self.dirty_cancelled += 1;
            }
            if self.pages[p as usize].io == NONE && !self.pages.has(p, PG_LOCKED | PG_WRITEBACK) {
                self.drop_file_page(p);
            }
        }
        self.files[f as usize].shadows.fill(NO_SHADOW);
        self.cleancache_invalidate_file(f, env);
    }

    /// Frees a page of a deleted file (`truncate_inode_pages`).
    pub(super) fn drop_file_page(&mut self, p: u32) {
        self.remove_from_page_cache(p);
        self.lru.remove_if_on(p);
        self.pages.release(p);
    }

    /// A new file of `pages` pages laid out after the previous one, opened by `pid`.
    fn new_file(&mut self, pid: u32, pages: u32, key: Option<u64>) -> u32 {
        let id = self.files.len() as u32;
        self.files.push(File {
            pages: vec![NONE; pages as usize],
            shadows: vec![NO_SHADOW; pages as usize],
            disk_off: self.fs_next,
            nr_dirty: 0,
            nr_writeback: 0,
            dirtied_when: None,
            fsync_waiters: Vec::new(),
            workload: self.procs[pid as usize].workload_index,
            key,
            deleted: false,
        });
        self.fs_next += pages as u64 * PAGE_SIZE;
        self.procs[pid as usize].files.push(id);
        id
    }

    /// Disk offset of a file page.
    pub(super) fn file_block_offset(&self, p: u32) -> u64 {
        let f = &self.files[self.pages[p as usize].owner as usize];
        f.disk_off + self.pages[p as usize].index as u64 * PAGE_SIZE
    }

    /// Removes a page from its file's index (the caller frees it).
    pub(super) fn remove_from_page_cache(&mut self, p: u32) {
        let (f, i) = (self.pages[p as usize].owner, self.pages[p as usize].index);
        self.files[f as usize].pages[i as usize] = NONE;
    }

    /// Removes a page reclaim frees from its file's index, leaving its shadow entry there.
    pub(super) fn evict_from_page_cache(&mut self, p: u32, shadow: Shadow) {
        let (f, i) = (self.pages[p as usize].owner, self.pages[p as usize].index);
        self.files[f as usize].pages[i as usize] = NONE;
        self.files[f as usize].shadows[i as usize] = shadow;
    }

    /// Puts a new page in a file's index and on its LRU list: the active list if it refaults
    /// close enough (`filemap_add_folio` with `workingset_refault`).
    fn add_to_page_cache(&mut self, p: u32, file: u32, index: u32) {
        let f = &mut self.files[file as usize];
        f.pages[index as usize] = p;
        if let Some(key) = f.key {
            self.pages[p as usize].content = crate::content::file_data(key, index as u64);
        }
        let shadow = std::mem::replace(&mut f.shadows[index as usize], NO_SHADOW);
        let active = self.workingset_refault(shadow, true, p);
        self.lru_add(p, true, active);
    }

    /// `mark_page_accessed`: the first access sets PG_referenced, the second activates.
    fn mark_page_accessed(&mut self, p: u32) {
        match self.cfg.replacement {
            Replacement::ExactLru => self.lru.move_head(LruList::Exact, p),
            Replacement::Linux | Replacement::Windows => {
                if !self.pages.has(p, PG_REFERENCED) {
                    self.pages.set(p, PG_REFERENCED);
                } else if self.lru.list_of(p) == Some(LruList::InactiveFile) {
                    self.lru.move_head(LruList::ActiveFile, p);
                    self.pages.clear(p, PG_REFERENCED);
                    self.vmstat.inc(Counter::PgActivate);
                }
            }
        }
    }

    /// Gets the cached page of `file` at `index`, allocating it if absent.
    fn grab_page(&mut self, pid: u32, file: u32, index: u32, now: u64, env: &mut Env) -> Result<(u32, u64), Stall> {
        let p = self.files[file as usize].pages[index as usize];
        if p != NONE {
            return Ok((p, self.host_touch(p, true, now, true, env).0));
        }
        let (p, host_ns) = self.alloc_page(pid, PageKind::File, file, index, now, env)?;
        self.add_to_page_cache(p, file, index);
        Ok((p, host_ns))
    }

    /// `write()` of whole pages: copy into the page cache, dirtying pages; writers that push dirty
    /// memory past `vm.dirty_ratio` wait (`balance_dirty_pages`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn file_write(
        &mut self,
        pid: u32,
        handle: u32,
        first: &mut u32,
        count: &mut u32,
        now: &mut u64,
        end: u64,
        env: &mut Env,
    ) -> Progress {
        let file = self.procs[pid as usize].files[handle as usize];
        while *count > 0 {
            if *now >= end {
                return Progress::Yield;
            }
            if self.balance_dirty_pages(pid, *now, env) {
                return Progress::Blocked;
            }
            let (p, host_ns) = match self.grab_page(pid, file, *first, *now, env) {
                Ok(x) => x,
                Err(stall) => return stall.progress(now),
            };
            if !self.pages.has(p, PG_DIRTY) {
                self.pages.set(p, PG_DIRTY);
                self.vmstat.inc(Counter::NrDirtied);
                self.account_dirtied(file, *now);
                self.arm_flusher_timer(*now, env);
            }
            self.mark_page_accessed(p);
            *now += self.cfg.costs.page_copy_ns + host_ns;
            *first += 1;
            *count -= 1;
        }
        Progress::Done
    }

    /// Readahead window in pages (`read_ahead_kb`; none in exact-LRU mode).
    fn ra_pages(&self) -> u32 {
        match self.cfg.replacement {
            Replacement::ExactLru => 1,
            Replacement::Linux | Replacement::Windows => (self.cfg.sysctl.read_ahead_kb / 4).max(1),
        }
    }

    /// Reads pages `[start, start + n)` of a file that are not cached. The page at `start` is
    /// allocated like any page; the others only if memory is free without reclaim. The page in the
    /// middle of the window is marked so that reaching it starts the next window asynchronously
    /// (on-demand readahead's `PG_readahead`). Returns the request holding `start`, if any.
    fn page_cache_ra(&mut self, pid: u32, file: u32, start: u32, sync: bool, now: u64, env: &mut Env) -> Result<Option<u32>, Stall> {
        let size = self.files[file as usize].pages.len() as u32;
        let n = self.ra_pages().min(size - start);
        let mut reads = Vec::new();
        for i in start..start + n {
            if self.files[file as usize].pages[i as usize] != NONE {
                continue;
            }
            let p = if i == start && sync {
                self.grab_page(pid, file, i, now, env)?.0
            } else {
                let Some((p, _)) = self.alloc_page_nowait(PageKind::File, file, i, self.memcg_of(pid), now, env) else { break };
                self.add_to_page_cache(p, file, i);
                p
            };
            self.pages.set(p, PG_LOCKED);
            if n > 1 && i == start + n / 2 {
                self.pages.set(p, PG_READAHEAD);
            }
            reads.push((i, p));
        }
        let sub = Submission {
            kind: BioKind::FileRead,
            file,
            kthread: false,
            base: self.files[file as usize].disk_off,
            max: MAX_REQUEST_PAGES,
            through_gaps: false,
        };
        let key = reads.first().filter(|&&(i, _)| i == start).map(|&(_, p)| Waited { page: p, waiter: NONE, fault: None });
        Ok(self.submit_runs(&sub, &reads, key, now, env))
    }

    /// `read()` of whole pages through the page cache.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn file_read(
        &mut self,
        pid: u32,
        handle: u32,
        first: &mut u32,
        count: &mut u32,
        now: &mut u64,
        end: u64,
        env: &mut Env,
    ) -> Progress {
        let file = self.procs[pid as usize].files[handle as usize];
        while *count > 0 {
            if *now >= end {
                return Progress::Yield;
            }
            let p = self.files[file as usize].pages[*first as usize];
            // A file's cached pages lie scattered over memory: fetch the descriptor and list links
            // of a page a few on while this one is copied (a copy is quicker than a miss).
            if *count > READ_AHEAD_FETCH {
                let q = self.files[file as usize].pages[(*first + READ_AHEAD_FETCH) as usize];
                if q != NONE {
                    self.pages.prefetch(q);
                    self.lru.prefetch(q);
                }
            }
            if p == NONE {
                return match self.page_cache_ra(pid, file, *first, true, *now, env) {
                    Ok(Some(bio)) => {
                        self.bios.get_mut(bio).waiters.push(pid);
                        self.block(pid, *now, false);
                        Progress::Blocked
                    }
                    Ok(None) => unreachable!("a sync readahead reads its first page"),
                    Err(stall) => stall.progress(now),
                };
            }
            if self.pages.has(p, PG_LOCKED) {
                let bio = self.pages[p as usize].io;
                self.bios.get_mut(bio).waiters.push(pid);
                self.block(pid, *now, false);
                return Progress::Blocked;
            }
            if self.pages.test_and_clear(p, PG_READAHEAD) {
                let size = self.files[file as usize].pages.len() as u32;
                let next = (*first + 1..size).find(|&i| self.files[file as usize].pages[i as usize] == NONE);
                if let Some(next) = next {
                    // Asynchronous: nobody waits, and allocation never stalls the reader.
                    let _ = self.page_cache_ra(pid, file, next, false, *now, env);
                }
            }
            self.mark_page_accessed(p);
            let (wait, _) = self.host_touch(p, false, *now, true, env);
            *now += self.cfg.costs.page_copy_ns + wait;
            *first += 1;
            *count -= 1;
        }
        Progress::Done
    }

    /// A file read completed: unlock the pages. Those of a file deleted meanwhile are dropped,
    /// unless a reader waits for them: a process that has the file open still reads it (the
    /// kernel truncates an unlinked file's pages at its last close), and would otherwise read them
    /// again and again; reclaim drops them later (`shrink_folio_list`'s mapping check).
    pub(super) fn file_read_done(&mut self, bio: &super::Bio) {
        let drop = self.files[bio.file as usize].deleted && bio.waiters.is_empty();
        for &p in &bio.pages {
            self.pages.clear(p, PG_LOCKED);
            if drop {
                self.drop_file_page(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A process reading a file from the disk that another process deletes reads it to the end
    /// (before, each completed read dropped the pages its reader waited for, and it read them
    /// again for ever).
    #[test]
    fn a_reader_finishes_a_file_deleted_under_it() {
        let text = "name = \"t\"\nduration = \"600s\"\n[host]\nmemory = \"1GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                    [[vm]]\nname = \"g\"\nmemory = \"128MiB\"\ndatastore = \"d\"\n\
                    workload = { kind = \"file-io\", size = \"256MiB\", read = true }\n";
        let s = crate::scenario::load(text, "t", &[]).unwrap().remove(0);
        let mut sim = crate::Simulation::new(&s).unwrap();
        // Run until the read-back has started (its first pages come from the disk: the file is
        // twice the guest's memory).
        let mut t = 0;
        while !sim.with_guest(0, |g, _| g.procs[0].marks.iter().any(|(l, _)| l == "read-start")) {
            t += 100_000_000;
            sim.run_until(t).unwrap();
            assert!(t < 300_000_000_000, "the read never started");
        }
        sim.with_guest(0, |g, env| {
            const KEY: u64 = 0x5eed;
            g.files[0].key = Some(KEY);
            g.names.insert(KEY, 0);
            g.unlink_file(KEY, env);
        });
        sim.check_invariants().unwrap();
        sim.run().unwrap();
        sim.check_invariants().unwrap();
        assert!(sim.with_guest(0, |g, _| g.procs[0].marks.iter().any(|(l, _)| l == "read-end")), "the reader finished");
    }
}
