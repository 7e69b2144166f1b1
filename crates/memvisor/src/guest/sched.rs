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
use super::page::NONE;
use super::process::ProcState;
use super::{Env, Guest};
use crate::clock::GuestEvent;
use crate::host::Grant;
use crate::workloads::{Op, SystemView};

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
                env.schedule(guest, now, GuestEvent::Vcpu { vcpu: i as u32 });
            }
        }
    }

    /// vCPUs that are busy: running, or about to.
    pub(super) fn busy(&self) -> impl Iterator<Item = u32> + '_ {
        self.vcpus.iter().enumerate().filter(|(_, v)| v.busy).map(|(i, _)| i as u32)
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
        // On a host with fewer physical CPUs than vCPUs, the vCPU runs only on a CPU the host's
        // scheduler gives it, until its host slice ends; while it waits, it stays busy.
        let mut cpu_end = u64::MAX;
        if let Some(p) = env.host.pcpus.as_mut() {
            match p.acquire((self.id, v), now) {
                Grant::Run(end) => {
                    cpu_end = end;
                    // Time dom0's backend took from this vCPU's turn: it makes no progress then.
                    now += p.take_owed((self.id, v));
                }
                Grant::Wait => return,
                Grant::From(t) => {
                    env.schedule(self.id, t, GuestEvent::Vcpu { vcpu: v });
                    return;
                }
            }
        }
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
                        if let Some(((vm, vcpu), start)) = env.host.pcpus.as_mut().and_then(|p| p.release((self.id, v), now)) {
                            env.schedule(vm, start, GuestEvent::Vcpu { vcpu });
                        }
                        return;
                    }
                }
            }
            let (pid, slice_end) = (vc.current, vc.slice_end);
            let (t, ran) = self.run_process(pid, now, limit.min(slice_end).min(cpu_end), env);
            now = t;
            let vc = &mut self.sched.vcpus[v as usize];
            match ran {
                Ran::Off => vc.current = NONE,
                Ran::Resync => {
                    env.schedule(self.id, now, GuestEvent::Vcpu { vcpu: v });
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
                    if now >= cpu_end {
                        match env.host.pcpus.as_mut().expect("a host slice ended").expire((self.id, v), now) {
                            Ok(end) => cpu_end = end,
                            Err(((vm, vcpu), start)) => {
                                // Preempted: the host starts it again when its turn comes.
                                env.schedule(vm, start, GuestEvent::Vcpu { vcpu });
                                return;
                            }
                        }
                    }
                    if now >= limit {
                        env.schedule(self.id, now, GuestEvent::Vcpu { vcpu: v });
                        return;
                    }
                }
            }
        }
    }

    /// Runs one process's operations from `now` until `end` or until it stops running.
    fn run_process(&mut self, pid: u32, mut now: u64, end: u64, env: &mut Env) -> (u64, Ran) {
        self.procs[pid as usize].ahead.prune(now);
        loop {
            if self.procs[pid as usize].ended() {
                return (now, Ran::Off);
            }
            if now >= end {
                return (now, Ran::Window);
            }
            let sys = self.system_view(now);
            let proc = &mut self.procs[pid as usize];
            let mut op = proc.op.take().unwrap_or_else(|| proc.workload.next_op(&sys));
            let local = matches!(op, Op::Access { .. } | Op::Compute { .. } | Op::Map { .. } | Op::Mark { .. });
            if !local && !Self::in_order(now, env) {
                proc.op = Some(op);
                return (now, Ran::Resync);
            }
            let progress = match &mut op {
                Op::Map { pages } => {
                    if proc.mm.map(*pages).is_none() {
                        let msg = format!(
                            "process {pid} ({}): mmap of {} failed, address space exhausted",
                            proc.name,
                            crate::units::human_bytes(*pages as u64 * crate::units::PAGE_SIZE)
                        );
                        self.log.push((now, msg));
                        self.exit_process(pid, now, true, env);
                        return (now, Ran::Off);
                    }
                    Progress::Done
                }
                Op::Unmap { region } => {
                    let r = *region;
                    self.zap_region(pid, r);
                    Progress::Done
                }
                Op::Access { region, pattern } => {
                    let r = *region;
                    self.access(pid, r, pattern, &mut now, end, env)
                }
                Op::CreateFile { pages } => {
                    let n = *pages;
                    self.create_file(pid, n);
                    Progress::Done
                }
                Op::Open { key, pages, create } => {
                    let (k, n, c) = (*key, *pages, *create);
                    self.open_file(pid, k, n, c, env);
                    Progress::Done
                }
                Op::Unlink { key } => {
                    let k = *key;
                    self.unlink_file(k, env);
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
                    env.schedule(self.id, now + *ns, GuestEvent::Wake { pid });
                    return (now, Ran::Off);
                }
                Op::Mark { label } => {
                    proc.marks.push((std::mem::take(label), now));
                    Progress::Done
                }
                Op::Exit => {
                    self.exit_process(pid, now, false, env);
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

    /// What a process may learn about memory at `now` (`GlobalMemoryStatusEx`, the low-memory
    /// notification; on Linux MemAvailable, roughly free plus page cache).
    fn system_view(&self, now: u64) -> SystemView {
        let available_pages = if self.windows() { self.available() } else { self.pages.nr_free() + self.lru.file() };
        SystemView { now_ns: now, total_pages: self.cfg.memory_pages as u64, available_pages, low_memory: self.low_memory() }
    }

    /// Ends a process: releases its memory and updates the counts of live work.
    pub(super) fn exit_process(&mut self, pid: u32, now: u64, killed: bool, env: &mut Env) {
        self.abandon_limit_reclaim(pid, now, env);
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
