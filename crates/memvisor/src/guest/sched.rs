//! vCPUs and the run queue: each vCPU is an actor that runs the process at the head of the guest's
//! run queue for a time slice, advancing simulated time by the cost of what the process does, and
//! switches when the process blocks, sleeps, exits or uses up its slice while others wait.
//!
//! A vCPU runs ahead of the rest of the simulation only up to the limit the engine gives it (the
//! next event, or a small lookahead window), and within that window accounts runs of resident
//! pages in bulk through the fast bitmaps: the cost of a run grows with faults and state changes,
//! not with references.

use std::collections::VecDeque;

use super::filemap::Progress;
use super::lru::LruList;
use super::memory::Touch;
use super::page::NONE;
use super::page::PG_DIRTY;
use super::process::{PTE_MASK, PTE_PRESENT, ProcState};
use super::{Env, Guest, Replacement};
use crate::clock::Event;
use crate::trace::{ID_MASK, Trace, WRITE};
use crate::workloads::{Op, xorshift64star};

/// One vCPU.
#[derive(Clone, Debug)]
struct Vcpu {
    /// Process running on it, or `NONE`.
    current: u32,
    /// When the current process's slice ends.
    slice_end: u64,
    /// Whether the vCPU has an event pending (it is running or about to).
    busy: bool,
}

/// The guest's scheduler.
#[derive(Clone, Debug)]
pub(super) struct Sched {
    runq: VecDeque<u32>,
    vcpus: Vec<Vcpu>,
    /// A vCPU woken while handling the current event: it runs right after the handler instead of
    /// through the event queue (same instant, one queue round trip less per wake-up).
    pub(super) start_now: Option<u32>,
}

/// Why `run_process` returned.
enum Ran {
    /// Reached the end of its window; still runnable.
    Window,
    /// Must wait for the rest of the simulation to catch up before its next step; still runnable.
    Resync,
    /// Blocked, sleeping or ended; the vCPU must pick another process.
    Off,
}

impl Sched {
    pub(super) fn new(vcpus: u32) -> Self {
        Self {
            runq: VecDeque::new(),
            vcpus: (0..vcpus).map(|_| Vcpu { current: NONE, slice_end: 0, busy: false }).collect(),
            start_now: None,
        }
    }

    /// Puts a process on the run queue and starts an idle vCPU if there is one.
    pub(super) fn enqueue(&mut self, guest: u32, pid: u32, now: u64, env: &mut Env) {
        self.runq.push_back(pid);
        if let Some(i) = self.vcpus.iter().position(|v| !v.busy) {
            self.vcpus[i].busy = true;
            if self.start_now == Some(NONE) {
                self.start_now = Some(i as u32);
            } else {
                env.events.push(now, Event::Vcpu { guest, vcpu: i as u32 });
            }
        }
    }

    /// Takes a process off the run queue (it was killed).
    pub(super) fn dequeue(&mut self, pid: u32) {
        self.runq.retain(|&p| p != pid);
    }
}

impl Guest {
    /// A vCPU's turn: run processes until the window closes or nothing is runnable.
    pub(super) fn run_vcpu(&mut self, v: u32, mut now: u64, limit: u64, env: &mut Env) {
        let slice = self.cfg.sched_slice_ns;
        loop {
            let vc = &mut self.sched.vcpus[v as usize];
            if vc.current == NONE {
                match self.sched.runq.pop_front() {
                    Some(pid) => {
                        vc.current = pid;
                        vc.slice_end = now + slice;
                    }
                    None => {
                        vc.busy = false;
                        return;
                    }
                }
            }
            let (pid, slice_end) = (vc.current, vc.slice_end);
            let (t, ran) = self.run_process(pid, now, limit.min(slice_end), env);
            now = t;
            let vc = &mut self.sched.vcpus[v as usize];
            match ran {
                Ran::Off => vc.current = NONE,
                Ran::Resync => {
                    env.events.push(now, Event::Vcpu { guest: self.id, vcpu: v });
                    return;
                }
                Ran::Window => {
                    if now >= vc.slice_end {
                        if self.sched.runq.is_empty() {
                            vc.slice_end = now + slice;
                        } else {
                            self.sched.runq.push_back(pid);
                            vc.current = NONE;
                        }
                    }
                    if now >= limit {
                        env.events.push(now, Event::Vcpu { guest: self.id, vcpu: v });
                        return;
                    }
                }
            }
        }
    }

    /// Runs one process's operations from `now` until `end` or until it stops running.
    fn run_process(&mut self, pid: u32, mut now: u64, end: u64, env: &mut Env) -> (u64, Ran) {
        loop {
            if self.procs[pid as usize].ended() {
                return (now, Ran::Off);
            }
            if now >= end {
                return (now, Ran::Window);
            }
            let proc = &mut self.procs[pid as usize];
            let mut op = proc.op.take().unwrap_or_else(|| proc.workload.next_op());
            let local = matches!(
                op,
                Op::Touch { .. } | Op::TouchRandom { .. } | Op::Replay { .. } | Op::Compute { .. } | Op::Map { .. } | Op::Mark { .. }
            );
            if !local && !Self::in_order(now, env) {
                proc.op = Some(op);
                return (now, Ran::Resync);
            }
            let progress = match &mut op {
                Op::Map { pages } => {
                    proc.mm.map(*pages);
                    Progress::Done
                }
                Op::Unmap { region } => {
                    let r = *region;
                    self.zap_region(pid, r);
                    Progress::Done
                }
                Op::Touch { region, first, count, refs, write } => {
                    let r = *region;
                    self.touch_range(pid, r, first, count, *refs, *write, &mut now, end, env)
                }
                Op::Replay { region, trace, pos, loops, compute_ns } => {
                    let (r, c) = (*region, *compute_ns);
                    self.replay(pid, r, trace, pos, loops, c, &mut now, end, env)
                }
                Op::TouchRandom { region, state, count, write } => {
                    let (r, w) = (*region, *write);
                    self.touch_random(pid, r, state, count, w, &mut now, end, env)
                }
                Op::CreateFile { pages } => {
                    let n = *pages;
                    self.create_file(pid, n);
                    Progress::Done
                }
                Op::Write { file, first, count } => {
                    let f = *file;
                    self.file_write(pid, f, first, count, &mut now, end, env)
                }
                Op::Read { file, first, count } => {
                    let f = *file;
                    self.file_read(pid, f, first, count, &mut now, end, env)
                }
                Op::Fsync { file } => {
                    let f = *file;
                    if self.fsync(pid, f, now, env) {
                        // The write-out is issued; on wake-up the fsync is complete.
                        self.procs[pid as usize].op = None;
                        return (now, Ran::Off);
                    }
                    Progress::Done
                }
                Op::Compute { ns } => {
                    let run = (*ns).min(end - now);
                    now += run;
                    *ns -= run;
                    if *ns == 0 { Progress::Done } else { Progress::Yield }
                }
                Op::Sleep { ns } => {
                    proc.state = ProcState::Sleeping;
                    env.events.push(now + *ns, Event::Wake { guest: self.id, pid });
                    return (now, Ran::Off);
                }
                Op::Mark { label } => {
                    proc.marks.push((std::mem::take(label), now));
                    Progress::Done
                }
                Op::Exit => {
                    self.exit_process(pid, now, false);
                    return (now, Ran::Off);
                }
            };
            match progress {
                Progress::Done => {}
                Progress::Yield => self.procs[pid as usize].op = Some(op),
                Progress::Blocked => {
                    self.procs[pid as usize].op = Some(op);
                    return (now, Ran::Off);
                }
                Progress::Resync => {
                    self.procs[pid as usize].op = Some(op);
                    return (now, Ran::Resync);
                }
                Progress::Killed => return (now, Ran::Off),
            }
        }
    }

    /// Sweeps a region: runs of pages whose fast bit says a reference changes nothing are
    /// accounted in bulk (time, touches); every other page takes the fault path.
    #[allow(clippy::too_many_arguments)]
    fn touch_range(
        &mut self,
        pid: u32,
        region: u32,
        first: &mut u32,
        count: &mut u64,
        refs: u32,
        write: bool,
        now: &mut u64,
        end: u64,
        env: &mut Env,
    ) -> Progress {
        let r = self.procs[pid as usize].mm.regions[region as usize];
        let visit = refs as u64 * self.cfg.costs.dram_access_ns;
        let fast = self.cfg.replacement == Replacement::Linux && visit > 0;
        while *count > 0 {
            if *now >= end {
                return Progress::Yield;
            }
            if fast {
                let budget = (end - *now).div_ceil(visit).min(*count).min((r.pages - *first) as u64);
                let mm = &self.procs[pid as usize].mm;
                let bits = if write { &mm.wfast } else { &mm.rfast };
                let run = bits.ones_from((r.start + *first) as usize, budget as usize) as u64;
                if run > 0 {
                    let mut n = run;
                    *first += run as u32;
                    if *first == r.pages {
                        *first = 0;
                        // A whole clean pass: nothing can change until the window ends, so the
                        // passes that fit are clean too.
                        if run == r.pages as u64 {
                            let after = *now + run * visit;
                            let left = end.saturating_sub(after).div_ceil(visit).min(*count - run);
                            n += left - left % r.pages as u64;
                        }
                    }
                    *now += n * visit;
                    *count -= n;
                    self.procs[pid as usize].stats.touches += n * refs as u64;
                    continue;
                }
            }
            let vpn = r.start + *first;
            if let Err(p) = self.reference_slow(pid, vpn, write, refs, now, env) {
                return p;
            }
            self.procs[pid as usize].stats.touches += refs as u64;
            *first += 1;
            if *first == r.pages {
                *first = 0;
            }
            *count -= 1;
        }
        Progress::Done
    }

    /// Replays a trace: runs of references that change nothing but recency (a fast bit in Linux
    /// mode; a mapped page in exact-LRU mode, moved to the head of the recency list) are accounted
    /// in a tight loop; the others take the fault path.
    #[allow(clippy::too_many_arguments)]
    fn replay(
        &mut self,
        pid: u32,
        region: u32,
        trace: &Trace,
        pos: &mut usize,
        loops: &mut u64,
        compute: u64,
        now: &mut u64,
        end: u64,
        env: &mut Env,
    ) -> Progress {
        let base = self.procs[pid as usize].mm.regions[region as usize].start;
        let refs = trace.refs();
        let hit = self.cfg.costs.dram_access_ns + compute;
        let fast = self.cfg.replacement == Replacement::Linux;
        loop {
            if *pos == refs.len() {
                *loops -= 1;
                if *loops == 0 {
                    return Progress::Done;
                }
                *pos = 0;
            }
            if *now >= end {
                return Progress::Yield;
            }
            let budget = (end - *now).div_ceil(hit.max(1)) as usize;
            let stop = refs.len().min(*pos + budget);
            let mut i = *pos;
            let mm = &self.procs[pid as usize].mm;
            if fast {
                while i < stop {
                    let r = refs[i];
                    let vpn = (base + (r & ID_MASK)) as usize;
                    let ok = if r & WRITE != 0 { mm.wfast.get(vpn) } else { mm.rfast.get(vpn) };
                    if !ok {
                        break;
                    }
                    i += 1;
                }
            } else {
                // Exact LRU: a reference to a mapped page moves it to the head; writes that must
                // dirty the page or drop its swap copy take the slow path below.
                let (lru, pages) = (&mut self.lru, &self.pages);
                while i < stop {
                    let r = refs[i];
                    let pte = mm.pte[(base + (r & ID_MASK)) as usize];
                    if pte & PTE_PRESENT == 0 {
                        break;
                    }
                    let p = pte & PTE_MASK;
                    if r & WRITE != 0 && (!pages.has(p, PG_DIRTY) || pages.swap[p as usize] != NONE) {
                        break;
                    }
                    lru.touch_head(LruList::Exact, p);
                    i += 1;
                }
            }
            let n = (i - *pos) as u64;
            if n > 0 {
                *now += n * hit;
                self.procs[pid as usize].stats.touches += n;
                *pos = i;
                continue;
            }
            let r = refs[*pos];
            let vpn = base + (r & ID_MASK);
            if let Err(p) = self.reference_slow(pid, vpn, r & WRITE != 0, 1, now, env) {
                return p;
            }
            *now += compute;
            self.procs[pid as usize].stats.touches += 1;
            *pos += 1;
        }
    }

    /// References pages drawn at random: a hit on a fast page is accounted in place; the others
    /// take the fault path. The generator only advances once a reference is done, so a blocked
    /// reference is retried on the same page.
    #[allow(clippy::too_many_arguments)]
    fn touch_random(
        &mut self,
        pid: u32,
        region: u32,
        state: &mut u64,
        count: &mut u64,
        write: bool,
        now: &mut u64,
        end: u64,
        env: &mut Env,
    ) -> Progress {
        let r = self.procs[pid as usize].mm.regions[region as usize];
        let hit = self.cfg.costs.dram_access_ns;
        let fast = self.cfg.replacement == Replacement::Linux;
        while *count > 0 {
            if *now >= end {
                return Progress::Yield;
            }
            let mut next = *state;
            let vpn = r.start + (xorshift64star(&mut next) % r.pages as u64) as u32;
            let mm = &self.procs[pid as usize].mm;
            let is_fast = fast && if write { mm.wfast.get(vpn as usize) } else { mm.rfast.get(vpn as usize) };
            if is_fast {
                *now += hit;
            } else {
                if let Err(p) = self.reference_slow(pid, vpn, write, 1, now, env) {
                    return p;
                }
            }
            *state = next;
            *count -= 1;
            self.procs[pid as usize].stats.touches += 1;
        }
        Progress::Done
    }

    /// A reference the fast path could not account, shared by the sweeps, the trace replay and
    /// the random references. A fault must see the rest of the simulation up to `now`, so one that
    /// would come early yields (`Resync`); re-referencing a mapped page only sets its bits, like a
    /// hit, and needs no such wait. On success `now` has advanced by the reference's cost.
    fn reference_slow(&mut self, pid: u32, vpn: u32, write: bool, refs: u32, now: &mut u64, env: &mut Env) -> Result<(), Progress> {
        if self.procs[pid as usize].mm.pte[vpn as usize] & PTE_PRESENT == 0 && !Self::in_order(*now, env) {
            return Err(Progress::Resync);
        }
        match self.touch_slow(pid, vpn, write, refs, *now, env) {
            Touch::Done(ns) => {
                *now += ns;
                Ok(())
            }
            Touch::Blocked(ns) => {
                *now += ns;
                Err(Progress::Blocked)
            }
            Touch::Killed => Err(Progress::Killed),
        }
    }

    /// Ends a process: releases its memory and updates the counts of live work.
    pub(super) fn exit_process(&mut self, pid: u32, now: u64, killed: bool) {
        let nregions = self.procs[pid as usize].mm.regions.len() as u32;
        for r in 0..nregions {
            self.zap_region(pid, r);
        }
        let finite = self.cfg.workloads[self.procs[pid as usize].workload_index].spec.is_finite();
        let p = &mut self.procs[pid as usize];
        p.state = if killed { ProcState::Killed } else { ProcState::Exited };
        p.stats.end_ns = now;
        p.op = None;
        self.live -= 1;
        if finite {
            self.finite_left -= 1;
        }
        self.sched.dequeue(pid);
    }
}
