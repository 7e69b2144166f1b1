//! Dirty page-cache writeback (`mm/page-writeback.c`, `fs/fs-writeback.c`): writers past
//! `vm.dirty_ratio` of dirtyable memory wait; past `vm.dirty_background_ratio` the flusher writes
//! in the background; every `dirty_writeback_centisecs` it writes files dirty for longer than
//! `dirty_expire_centisecs`; reclaim that meets dirty pages asks it to write everything;
//! `fsync()` writes a file's dirty pages itself and waits for them.
//!
//! Simplification: a writer below the dirty limit is never paused (the kernel starts pausing
//! proportionally halfway between the background and the hard limit).

use std::collections::BTreeSet;

use super::bio::{Bio, BioKind, MAX_REQUEST_PAGES, Submission};
use super::lru::LruList;
use super::page::{NONE, PG_DIRTY, PG_WRITEBACK};
use super::{Counter, Env, Guest};
use crate::clock::GuestEvent;

/// MAX_WRITEBACK_PAGES: the flusher writes at most this much per round (fs/fs-writeback.c).
const MAX_WRITEBACK_PAGES: u64 = 1024;

/// The flusher thread's state.
#[derive(Clone, Debug, Default)]
pub struct Flusher {
    /// A run is scheduled now.
    kicked: bool,
    /// Time of the next periodic run, if armed.
    timer: Option<u64>,
    /// Reclaim asked for all dirty pages to be written.
    write_all: bool,
    /// Pages of the flusher's own writes still in flight.
    in_flight: u64,
    /// The dirty files, oldest first (`b_dirty`, ordered by `dirtied_when`), so a run visits
    /// only those: a kernel build has tens of thousands of clean files.
    dirty: BTreeSet<(u64, u32)>,
}

impl Guest {
    /// Background and hard dirty limits in pages. Dirtyable memory is free pages above the high
    /// watermark (the kernel's `totalreserve_pages`) plus the page cache (`global_dirtyable_memory`).
    fn dirty_limits(&self) -> (u64, u64) {
        let dirtyable = self.pages.nr_free().saturating_sub(self.wmark.high) + self.lru.file() + self.lru.len(LruList::Exact);
        let s = &self.cfg.sysctl;
        (dirtyable * s.dirty_background_ratio as u64 / 100, dirtyable * s.dirty_ratio as u64 / 100)
    }

    /// `balance_dirty_pages`: starts background writeback past the background limit and blocks the
    /// writer past the hard limit. Returns whether the writer blocked.
    pub(super) fn balance_dirty_pages(&mut self, pid: u32, now: u64, env: &mut Env) -> bool {
        let (bg, thresh) = self.dirty_limits();
        let dirty = self.nr_dirty + self.nr_writeback_file;
        if dirty > bg {
            self.kick_flusher(now, env);
        }
        if dirty > thresh && self.bios.in_flight() > 0 {
            self.block(pid, now, false);
            self.throttled.push(pid);
            return true;
        }
        false
    }

    fn kick_flusher(&mut self, now: u64, env: &mut Env) {
        if !self.flusher.kicked {
            self.flusher.kicked = true;
            env.schedule(self.id, now, GuestEvent::Flusher);
        }
    }

    /// Arms the periodic writeback timer if dirty data exists and it is not armed.
    pub(super) fn arm_flusher_timer(&mut self, now: u64, env: &mut Env) {
        if self.flusher.timer.is_none() {
            let at = now + self.cfg.sysctl.dirty_writeback_centisecs as u64 * 10_000_000;
            self.flusher.timer = Some(at);
            env.schedule(self.id, at, GuestEvent::Flusher);
        }
    }

    /// Reclaim met dirty page cache: write it all (`wakeup_flusher_threads(WB_REASON_VMSCAN)`).
    pub(super) fn flusher_write_all(&mut self, now: u64, env: &mut Env) {
        self.flusher.write_all = true;
        self.kick_flusher(now, env);
    }

    /// Counts a newly dirtied page of `file`; a file clean until now joins the dirty list.
    pub(super) fn account_dirtied(&mut self, file: u32, now: u64) {
        self.nr_dirty += 1;
        let f = &mut self.files[file as usize];
        f.nr_dirty += 1;
        if f.dirtied_when.is_none() {
            f.dirtied_when = Some(now);
            self.flusher.dirty.insert((now, file));
        }
    }

    /// Marks a dirty page clean for the counters (its write has been issued).
    pub(super) fn account_clean(&mut self, p: u32) {
        let f = self.pages[p as usize].owner as usize;
        self.nr_dirty -= 1;
        self.files[f].nr_dirty -= 1;
        if self.files[f].nr_dirty == 0
            && let Some(t) = self.files[f].dirtied_when.take()
        {
            self.flusher.dirty.remove(&(t, f as u32));
        }
    }

    /// The dirty files, oldest first, as (`dirtied_when`, file).
    pub(super) fn dirty_files(&self) -> &BTreeSet<(u64, u32)> {
        &self.flusher.dirty
    }

    /// Issues writes for up to `budget` dirty pages of a file, in page order, merged into requests
    /// of consecutive blocks. Returns pages issued.
    fn write_file_pages(&mut self, file: u32, budget: u64, kthread: bool, now: u64, env: &mut Env) -> u64 {
        let mut batch = Vec::new();
        for (i, &p) in self.files[file as usize].pages.iter().enumerate() {
            if batch.len() as u64 >= budget {
                break;
            }
            if p != NONE && self.pages.has(p, PG_DIRTY) && self.pages[p as usize].io == NONE {
                batch.push((i as u32, p));
            }
        }
        for &(_, p) in &batch {
            self.pages.clear(p, PG_DIRTY);
            self.pages.set(p, PG_WRITEBACK);
            self.account_clean(p);
        }
        let n = batch.len() as u64;
        self.files[file as usize].nr_writeback += n;
        self.nr_writeback_file += n;
        self.vmstat.add(Counter::NrWritten, n);
        let sub = Submission {
            kind: BioKind::FileWrite,
            file,
            kthread,
            base: self.files[file as usize].disk_off,
            max: MAX_REQUEST_PAGES,
            through_gaps: false,
        };
        self.submit_runs(&sub, &batch, None, now, env);
        n
    }

    /// A flusher run: background writeback while over the background limit (or asked by
    /// reclaim), and expired files on the periodic tick; at most MAX_WRITEBACK_PAGES in flight.
    pub(super) fn flusher_run(&mut self, now: u64, env: &mut Env) {
        self.flusher.kicked = false;
        if self.flusher.timer.is_some_and(|t| t <= now) {
            self.flusher.timer = None;
        }
        let expire = self.cfg.sysctl.dirty_expire_centisecs as u64 * 10_000_000;
        // Writing cleans files, so the list is read before it changes.
        let order: Vec<(u64, u32)> = self.flusher.dirty.iter().copied().collect();
        for (dirtied, file) in order {
            let (bg, _) = self.dirty_limits();
            let background = self.nr_dirty + self.nr_writeback_file > bg || self.flusher.write_all;
            let expired = dirtied + expire <= now;
            if !background && !expired {
                break;
            }
            let budget = MAX_WRITEBACK_PAGES.saturating_sub(self.flusher.in_flight);
            if budget == 0 {
                break;
            }
            self.flusher.in_flight += self.write_file_pages(file, budget, true, now, env);
        }
        if self.nr_dirty == 0 {
            self.flusher.write_all = false;
        } else {
            self.arm_flusher_timer(now, env);
        }
    }

    /// A file page's write completed.
    pub(super) fn file_write_done(&mut self, p: u32) {
        let f = self.pages[p as usize].owner as usize;
        self.files[f].nr_writeback -= 1;
        self.nr_writeback_file -= 1;
    }

    /// After an I/O completion: account the flusher's writes, wake `fsync()` callers whose file has
    /// drained, and let background writeback continue.
    pub(super) fn flusher_io_done(&mut self, bio: &Bio, now: u64, env: &mut Env) {
        if bio.file == NONE && self.nr_dirty == 0 {
            return;
        }
        if bio.kind == BioKind::FileWrite && bio.kthread {
            self.flusher.in_flight = self.flusher.in_flight.saturating_sub(bio.pages.len() as u64);
        }
        if bio.file != NONE && self.files[bio.file as usize].nr_writeback == 0 {
            for pid in std::mem::take(&mut self.files[bio.file as usize].fsync_waiters) {
                self.wake(pid, now, env);
            }
        }
        let (bg, _) = self.dirty_limits();
        if self.nr_dirty > 0 && (self.nr_dirty + self.nr_writeback_file > bg || self.flusher.write_all) {
            self.kick_flusher(now, env);
        }
    }

    /// `fsync()`: write every dirty page of the file now and wait until none is under writeback.
    /// Returns whether the process blocked.
    pub(super) fn fsync(&mut self, pid: u32, handle: u32, now: u64, env: &mut Env) -> bool {
        let file = self.procs[pid as usize].files[handle as usize];
        self.write_file_pages(file, u64::MAX, false, now, env);
        if self.files[file as usize].nr_writeback == 0 {
            return false;
        }
        self.files[file as usize].fsync_waiters.push(pid);
        self.block(pid, now, false);
        true
    }
}
