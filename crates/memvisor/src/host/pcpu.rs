//! The host's physical CPUs, shared by the VMs' vCPUs when there are fewer of them than vCPUs
//! (seed 002 ran six vCPUs on a dual-core Conroe). Xen's credit scheduler reduced to what equal
//! weights and no caps leave of it: runnable vCPUs take turns of 30 ms (Xen 3.x/4.0: three 10 ms
//! ticks per time slice, `CSCHED_TICKS_PER_TSLICE`, xen/common/sched_credit.c; a
//! `sched_credit_tslice_ms` option since 4.2), a vCPU that wakes from idle queues ahead of those
//! that used up their turn (BOOST), and a vCPU with nothing to run gives its CPU up at once.
//!
//! With every CPU busy, a waking vCPU also takes the CPU of the running vCPU that has not woken
//! since its turn began and started earliest (Xen's tickle of a lower-priority CPU); that vCPU
//! stops at its next step, within the engine's lookahead.
//!
//! Simplifications: one queue for all CPUs (Xen has one per CPU and steals work between them);
//! a waking vCPU is boosted whatever its credit (Xen boosts only a vCPU UNDER its share) until
//! its turn ends (Xen: until the next 10 ms tick); credits are not kept, so a vCPU busy for
//! longer than the accounting period is not demoted below others. A vCPU stalled on the
//! host (a host swap-in, a decompression) keeps its CPU: the model charges those waits to the
//! vCPU's own time, where ESX and KVM would run another vCPU meanwhile.
//!
//! dom0's block backend (`blkback.rs`), where it is modelled, takes the CPUs too: a CPU idle at
//! the time, or else the CPU of the running vCPU a waking one would preempt, which owes dom0 that
//! time and pays it, off the CPU, at its next step. dom0 never waits for a guest's vCPU (Xen
//! boosts its waking vCPUs like any other's and could queue them behind a boosted vCPU until the
//! next tick). The time a vCPU owes leaves its run time when it is taken, so a sample taken just
//! after a turn began may show that VM's run time lower than the one before, by at most the
//! time taken (microseconds).

use std::collections::VecDeque;

/// Xen's credit scheduler time slice, ns (30 ms).
pub const CREDIT_SLICE_NS: u64 = 30_000_000;

/// A vCPU: its VM and its index in the VM.
pub type VcpuId = (u32, u32);

/// What a vCPU may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// It runs on a physical CPU until this time (its slice's end).
    Run(u64),
    /// It waits: the host starts it when a physical CPU is free.
    Wait,
    /// A CPU is free from this later time (another vCPU, running ahead, gave it up then): the vCPU
    /// has it from then.
    From(u64),
}

/// A vCPU's turn on a CPU.
#[derive(Clone, Copy, Debug)]
struct Turn {
    v: VcpuId,
    cpu: u32,
    /// When it may run: a CPU another vCPU freed ahead of the engine is its only from then.
    from: u64,
    /// When its CPU time starts counting: `from`, or for a vCPU back on the CPU it left ahead of
    /// the engine, when it left (the overlap is not counted twice).
    since: u64,
    /// When it ends; a waking vCPU that preempts it brings this forward.
    end: u64,
    /// It woke from idle into this turn (BOOST): no other waking vCPU preempts it.
    boosted: bool,
}

/// The physical CPUs and the vCPUs running on or waiting for them.
#[derive(Clone, Debug)]
pub struct Pcpus {
    cpus: u32,
    slice_ns: u64,
    /// vCPUs on a CPU.
    running: Vec<Turn>,
    /// Idle CPUs: which, since when, and the vCPU that ran on it last. A vCPU runs ahead of the
    /// rest of the simulation within its window, so it may give its CPU up at a time the engine
    /// has not reached: another vCPU has that CPU only from then.
    idle: Vec<(u32, u64, Option<VcpuId>)>,
    /// When and from which CPU each vCPU last left, by VM and vCPU: it may not start on another
    /// CPU before then.
    left: Vec<Vec<(u64, u32)>>,
    /// vCPUs waiting for a CPU, with the time they started waiting and whether they woke from
    /// idle (BOOST: ahead of the preempted).
    waiting: VecDeque<(VcpuId, u64, bool)>,
    /// CPU time used, ns, by VM.
    run_ns: Vec<u64>,
    /// Time spent runnable but waiting for a CPU, ns, by VM (Xen's "steal" time).
    wait_ns: Vec<u64>,
    /// CPU time dom0 took from each VM's running vCPUs, ns: part of their turns, not their run.
    stolen_ns: Vec<u64>,
    /// What each vCPU owes dom0 and has not paid yet, ns, by VM and vCPU.
    owed: Vec<Vec<u64>>,
    /// CPU time dom0 used, ns.
    dom0_ns: u64,
}

impl Pcpus {
    /// `cpus` physical CPUs shared by the vCPUs of `vms` VMs.
    pub fn new(cpus: u32, vms: usize) -> Self {
        assert!(cpus > 0, "a host has at least one CPU");
        Self {
            cpus,
            slice_ns: CREDIT_SLICE_NS,
            running: Vec::with_capacity(cpus as usize),
            idle: (0..cpus).map(|c| (c, 0, None)).collect(),
            left: vec![Vec::new(); vms],
            waiting: VecDeque::new(),
            run_ns: vec![0; vms],
            wait_ns: vec![0; vms],
            stolen_ns: vec![0; vms],
            owed: vec![Vec::new(); vms],
            dom0_ns: 0,
        }
    }

    /// Physical CPUs.
    pub fn cpus(&self) -> u32 {
        self.cpus
    }

    /// A vCPU wants to run at `now`. A vCPU already on a CPU keeps it; one coming from idle takes
    /// a free CPU, or queues ahead of the vCPUs that were preempted (BOOST) and preempts one.
    pub fn acquire(&mut self, v: VcpuId, now: u64) -> Grant {
        if let Some(t) = self.running.iter().find(|t| t.v == v) {
            // Started from a later time: its event for then is already scheduled.
            return if t.from > now { Grant::Wait } else { Grant::Run(t.end) };
        }
        if self.waiting.iter().any(|w| w.0 == v) {
            return Grant::Wait;
        }
        // Its own CPU if idle: it may run on at once (what it did there ahead of the engine
        // overlaps by at most the engine's lookahead, as without a CPU model), else the CPU idle
        // longest.
        let own = self.idle.iter().position(|c| c.2 == Some(v));
        if let Some(i) = own.or_else(|| self.idle_longest(u64::MAX)) {
            let (cpu, free, _) = self.idle.swap_remove(i);
            if own.is_some() {
                self.running.push(Turn { v, cpu, from: now, since: free.max(now), end: now + self.slice_ns, boosted: true });
                return Grant::Run(now + self.slice_ns);
            }
            let start = free.max(now).max(self.left_before(v, cpu));
            self.wait_ns[v.0 as usize] += start - now;
            self.running.push(Turn { v, cpu, from: start, since: start, end: start + self.slice_ns, boosted: true });
            return if start == now { Grant::Run(now + self.slice_ns) } else { Grant::From(start) };
        }
        let boosted = self.waiting.iter().take_while(|w| w.2).count();
        self.waiting.insert(boosted, (v, now, true));
        if let Some(t) = self.running.iter_mut().filter(|t| !t.boosted && t.end > now).min_by_key(|t| (t.since, t.v)) {
            t.end = now.max(t.from);
        }
        Grant::Wait
    }

    /// A vCPU on a CPU has nothing to run at `now`: its CPU goes to the next waiting vCPU, which
    /// is returned with the time it starts, for the host to start it then.
    pub fn release(&mut self, v: VcpuId, now: u64) -> Option<(VcpuId, u64)> {
        let i = self.running.iter().position(|t| t.v == v)?;
        let cpu = self.stop(i, now);
        self.next(cpu, now, v)
    }

    /// A vCPU leaves the scheduler at `now` (its VM is stopped): off its CPU, or out of the queue.
    /// Returns the vCPU to start in its place, if any, and when.
    pub fn leave(&mut self, v: VcpuId, now: u64) -> Option<(VcpuId, u64)> {
        if let Some(i) = self.waiting.iter().position(|w| w.0 == v) {
            let (_, since, _) = self.waiting.remove(i).expect("found");
            self.wait_ns[v.0 as usize] += now.saturating_sub(since);
            return None;
        }
        self.release(v, now)
    }

    /// A vCPU on a CPU reached the end of its turn at `now` (or was preempted). With nobody
    /// waiting it goes on (the new turn's end is returned); otherwise it goes to the back of the
    /// queue and its CPU to the vCPU returned, from the time returned.
    pub fn expire(&mut self, v: VcpuId, now: u64) -> Result<u64, (VcpuId, u64)> {
        let i = self.running.iter().position(|t| t.v == v).expect("an expiring vCPU is on a CPU");
        if self.waiting.is_empty() {
            self.running[i].end = now + self.slice_ns;
            self.running[i].boosted = false;
            return Ok(now + self.slice_ns);
        }
        let cpu = self.stop(i, now);
        self.waiting.push_back((v, now, false));
        Err(self.next(cpu, now, v).expect("a vCPU was waiting"))
    }

    /// dom0 runs for `ns` from `at`: on the CPU idle longest by then, which is dom0's until it is
    /// done (a vCPU waking for it before then, even before `at`, starts after: when dom0's work
    /// is queued, the CPU's idle time before it is lost); with none idle, on the CPU of the
    /// running vCPU that has not woken since its turn began and started earliest (else any
    /// running one), which owes dom0 that time. With every CPU given up ahead of the engine, the
    /// one given up first: its last vCPU owes the time, or dom0 holds it longer.
    pub fn dom0_run(&mut self, at: u64, ns: u64) {
        if ns == 0 {
            return;
        }
        self.dom0_ns += ns;
        if let Some(i) = self.idle_longest(at) {
            self.idle[i] = (self.idle[i].0, at + ns, None);
            return;
        }
        let victim = self.running.iter().min_by_key(|t| (t.from > at, t.boosted, t.since, t.v)).map(|t| t.v);
        let victim = match victim {
            Some(v) => v,
            None => {
                let i = self.idle_longest(u64::MAX).expect("a CPU is running or idle");
                match self.idle[i].2 {
                    Some(v) => v,
                    None => {
                        self.idle[i].1 += ns;
                        return;
                    }
                }
            }
        };
        self.stolen_ns[victim.0 as usize] += ns;
        let owed = &mut self.owed[victim.0 as usize];
        if owed.len() <= victim.1 as usize {
            owed.resize(victim.1 as usize + 1, 0);
        }
        owed[victim.1 as usize] += ns;
    }

    /// The idle CPU (its index in `idle`) free since earliest, among those free by `by`.
    fn idle_longest(&self, by: u64) -> Option<usize> {
        (0..self.idle.len()).filter(|&i| self.idle[i].1 <= by).min_by_key(|&i| (self.idle[i].1, self.idle[i].0))
    }

    /// What vCPU `v` owes dom0, which it pays now by staying off its work that long; cleared.
    #[inline]
    pub fn take_owed(&mut self, v: VcpuId) -> u64 {
        self.owed[v.0 as usize].get_mut(v.1 as usize).map_or(0, std::mem::take)
    }

    /// CPU time dom0 has used, ns.
    pub fn dom0_ns(&self) -> u64 {
        self.dom0_ns
    }

    /// When `v` left its last CPU, if that was not `cpu` (0 otherwise).
    fn left_before(&self, v: VcpuId, cpu: u32) -> u64 {
        match self.left[v.0 as usize].get(v.1 as usize) {
            Some(&(t, c)) if c != cpu => t,
            _ => 0,
        }
    }

    /// Takes running turn `i` off its CPU at `now`; returns the CPU.
    fn stop(&mut self, i: usize, now: u64) -> u32 {
        let t = self.running.swap_remove(i);
        self.run_ns[t.v.0 as usize] += now.saturating_sub(t.since);
        let left = &mut self.left[t.v.0 as usize];
        if left.len() <= t.v.1 as usize {
            left.resize(t.v.1 as usize + 1, (0, u32::MAX));
        }
        left[t.v.1 as usize] = (now, t.cpu);
        t.cpu
    }

    /// CPU `cpu`, freed at `now` by `by`, goes to the head of the queue, which starts no earlier than it
    /// queued (a vCPU preempted ahead of the engine queued at the time it stopped) nor before it
    /// left another CPU.
    fn next(&mut self, cpu: u32, now: u64, by: VcpuId) -> Option<(VcpuId, u64)> {
        let Some((w, since, boosted)) = self.waiting.pop_front() else {
            self.idle.push((cpu, now, Some(by)));
            return None;
        };
        let start = now.max(since).max(self.left_before(w, cpu));
        self.wait_ns[w.0 as usize] += start - since;
        self.running.push(Turn { v: w, cpu, from: start, since: start, end: start + self.slice_ns, boosted });
        Some((w, start))
    }

    /// Whether vCPU `v` waits in the queue.
    pub fn is_waiting(&self, v: VcpuId) -> bool {
        self.waiting.iter().any(|w| w.0 == v)
    }

    /// CPU time VM `vm` has used up to `now`, ns (what dom0 took from its turns is dom0's).
    pub fn run_ns(&self, vm: usize, now: u64) -> u64 {
        let turns =
            self.run_ns[vm] + self.running.iter().filter(|t| t.v.0 as usize == vm).map(|t| now.saturating_sub(t.since)).sum::<u64>();
        turns.saturating_sub(self.stolen_ns[vm])
    }

    /// Time VM `vm`'s vCPUs have waited for a CPU up to `now`, ns (dom0's turns on theirs too).
    pub fn wait_ns(&self, vm: usize, now: u64) -> u64 {
        self.wait_ns[vm]
            + self.stolen_ns[vm]
            + self.waiting.iter().filter(|w| w.0.0 as usize == vm).map(|w| now.saturating_sub(w.1)).sum::<u64>()
    }

    /// CPU time used by every VM and dom0 up to `now`, ns.
    pub fn busy_ns(&self, now: u64) -> u64 {
        (0..self.run_ns.len()).map(|vm| self.run_ns(vm, now)).sum::<u64>() + self.dom0_ns
    }

    /// Checks that no more vCPUs run than there are CPUs, none twice, and none both running and
    /// waiting.
    pub fn check(&self) -> Result<(), String> {
        if self.running.len() + self.idle.len() != self.cpus as usize {
            return Err(format!("{} vCPUs running and {} CPUs idle on {} physical CPUs", self.running.len(), self.idle.len(), self.cpus));
        }
        let mut seen: Vec<VcpuId> = self.running.iter().map(|t| t.v).chain(self.waiting.iter().map(|w| w.0)).collect();
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != n {
            return Err("a vCPU is both running and waiting, or queued twice".into());
        }
        if let Some(t) = self.running.iter().find(|t| t.since < self.left_before(t.v, t.cpu)) {
            return Err(format!(
                "vCPU {:?} started on CPU {} at {} ns, before it left another CPU at {} ns",
                t.v,
                t.cpu,
                t.since,
                self.left_before(t.v, t.cpu)
            ));
        }
        let mut cpus: Vec<u32> = self.running.iter().map(|t| t.cpu).chain(self.idle.iter().map(|c| c.0)).collect();
        cpus.sort_unstable();
        if cpus != (0..self.cpus).collect::<Vec<u32>>() {
            return Err(format!("CPUs in use or idle {cpus:?}: each of 0..{} must be exactly once", self.cpus));
        }
        if !self.waiting.is_empty() && !self.idle.is_empty() {
            return Err(format!("{} vCPUs wait while a physical CPU is idle", self.waiting.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = CREDIT_SLICE_NS;

    #[test]
    fn vcpus_take_free_cpus_then_queue_woken_ahead_of_preempted() {
        let mut p = Pcpus::new(1, 3);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        assert_eq!(p.acquire((0, 0), 5), Grant::Run(S), "a running vCPU keeps its turn");
        assert_eq!(p.acquire((1, 0), 10), Grant::Wait);
        // VM 0's turn ends with VM 1 waiting: VM 1 runs, VM 0 queues behind it.
        assert_eq!(p.expire((0, 0), S), Err(((1, 0), S)));
        // VM 2 wakes from idle: it goes ahead of the preempted VM 0.
        assert_eq!(p.acquire((2, 0), S + 1), Grant::Wait);
        assert_eq!(p.release((1, 0), S + 100), Some(((2, 0), S + 100)));
        assert_eq!(p.release((2, 0), S + 200), Some(((0, 0), S + 200)));
        p.check().expect("consistent");
        // Alone, a vCPU's turn is renewed.
        assert_eq!(p.expire((0, 0), 2 * S), Ok(3 * S));
        assert_eq!(p.release((0, 0), 2 * S + 300), None);
        assert_eq!(p.run_ns(0, u64::MAX), 2 * S + 100, "0..30 ms, then 30.0002 ms..60.0003 ms");
        assert_eq!(p.wait_ns(1, u64::MAX), S - 10);
        assert_eq!(p.wait_ns(2, u64::MAX), 99);
        assert_eq!(p.wait_ns(0, u64::MAX), 200);
        assert_eq!(p.busy_ns(u64::MAX), 2 * S + 300);
    }

    #[test]
    fn a_cpu_given_up_ahead_of_the_engine_is_free_only_from_then() {
        let mut p = Pcpus::new(1, 2);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        // VM 0 ran ahead to 5 ms and went idle there; VM 1 wakes at 2 ms.
        assert_eq!(p.release((0, 0), 5_000_000), None);
        assert_eq!(p.acquire((1, 0), 2_000_000), Grant::From(5_000_000));
        assert_eq!(p.acquire((1, 0), 3_000_000), Grant::Wait, "its event for 5 ms is already scheduled");
        assert_eq!(p.acquire((1, 0), 5_000_000), Grant::Run(5_000_000 + S));
        assert_eq!(p.busy_ns(6_000_000), 6_000_000, "never two at once on the one CPU");
        assert_eq!(p.wait_ns(1, 6_000_000), 3_000_000, "it waited from 2 ms to 5 ms");
        p.check().expect("consistent");
    }

    #[test]
    fn a_vcpu_retakes_its_own_cpu_at_once() {
        let mut p = Pcpus::new(2, 2);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        // It went idle ahead of the engine, at 5 ms, and wakes at 3 ms: its own CPU, at once, as
        // a vCPU does without a CPU model; its time is not counted twice.
        assert_eq!(p.release((0, 0), 5_000_000), None);
        assert_eq!(p.acquire((0, 0), 3_000_000), Grant::Run(3_000_000 + S));
        assert_eq!(p.acquire((0, 0), 4_000_000), Grant::Run(3_000_000 + S), "still its turn, before 5 ms too");
        assert_eq!(p.wait_ns(0, 6_000_000), 0);
        assert_eq!(p.busy_ns(6_000_000), 6_000_000);
        p.check().expect("consistent");
    }

    #[test]
    fn a_vcpu_preempted_ahead_of_the_engine_starts_again_only_after_it_stopped() {
        let mut p = Pcpus::new(2, 3);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        assert_eq!(p.acquire((1, 0), 0), Grant::Run(S));
        assert_eq!(p.acquire((2, 0), 1), Grant::Wait);
        // VM 0 runs ahead to the end of its turn and is preempted there, at 30 ms.
        assert_eq!(p.expire((0, 0), S), Err(((2, 0), S)));
        // VM 1 goes idle earlier, at 10 ms: VM 0 may have its CPU, but not before 30 ms.
        assert_eq!(p.release((1, 0), 10_000_000), Some(((0, 0), S)));
        p.check().expect("no vCPU on two CPUs at once");
        assert_eq!(p.busy_ns(S), 2 * S + 10_000_000 - S, "VM 0 to 30 ms, VM 1 to 10 ms, VM 2 from 30 ms");
    }

    #[test]
    fn a_waking_vcpu_preempts_one_past_its_boost() {
        let mut p = Pcpus::new(1, 3);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        // Boosted (it woke into this turn): a waking vCPU waits for the turn's end.
        assert_eq!(p.acquire((1, 0), 1_000), Grant::Wait);
        assert_eq!(p.expire((0, 0), S), Err(((1, 0), S)));
        assert_eq!(p.release((1, 0), S + 1_000), Some(((0, 0), S + 1_000)));
        assert_eq!(p.expire((0, 0), 2 * S + 1_000), Ok(3 * S + 1_000), "alone: renewed, no longer boosted");
        // Now a waking vCPU takes its CPU at once: VM 0's turn ends when it next looks.
        assert_eq!(p.acquire((2, 0), 2 * S + 5_000), Grant::Wait);
        assert_eq!(p.acquire((0, 0), 2 * S + 6_000), Grant::Run(2 * S + 5_000));
        assert_eq!(p.expire((0, 0), 2 * S + 6_000), Err(((2, 0), 2 * S + 6_000)));
        p.check().expect("consistent");
    }

    #[test]
    fn dom0_takes_an_idle_cpu_or_a_running_vcpus_time() {
        let mut p = Pcpus::new(2, 2);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        // CPU 1 is idle: dom0 runs there from 1 ms for 20 us; a vCPU waking meanwhile starts after.
        p.dom0_run(1_000_000, 20_000);
        assert_eq!(p.acquire((1, 0), 1_010_000), Grant::From(1_020_000));
        assert_eq!(p.take_owed((0, 0)), 0, "nobody lost time to it");
        // Both CPUs busy: dom0 takes 30 us of the vCPU on longest, which pays it once.
        p.dom0_run(2_000_000, 30_000);
        assert_eq!(p.take_owed((1, 0)), 0);
        assert_eq!(p.take_owed((0, 0)), 30_000);
        assert_eq!(p.take_owed((0, 0)), 0, "paid");
        let now = 3_000_000;
        assert_eq!(p.run_ns(0, now), now - 30_000);
        assert_eq!(p.wait_ns(0, now), 30_000, "off its CPU while dom0 had it");
        assert_eq!(p.run_ns(1, now), now - 1_020_000);
        assert_eq!(p.dom0_ns(), 50_000);
        assert_eq!(p.busy_ns(now), 2 * now - 1_000_000, "both CPUs busy but CPU 1 before dom0 first ran");
        p.check().expect("consistent");
    }

    #[test]
    fn a_stopped_vm_leaves_the_queue() {
        let mut p = Pcpus::new(1, 2);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(S));
        assert_eq!(p.acquire((1, 0), 0), Grant::Wait);
        assert_eq!(p.leave((1, 0), 4), None);
        assert_eq!(p.release((0, 0), 10), None, "nobody waits any more");
        assert_eq!(p.wait_ns(1, 100), 4);
        p.check().expect("consistent");
    }
}
