//! The host's physical CPUs, shared by the VMs' vCPUs when there are fewer of them than vCPUs
//! (seed 002 ran six vCPUs on a dual-core Conroe). Xen's credit scheduler as it behaves on such a
//! host with equal weights and no caps: runnable vCPUs take turns in 30 ms time slices
//! (`CSCHED_DEFAULT_TSLICE_MS`, xen/common/sched_credit.c), a vCPU that wakes from idle queues
//! ahead of those that used up their slice (its BOOST priority), and a vCPU with nothing to run
//! gives its CPU up at once.
//!
//! Simplifications: a waking vCPU does not preempt one that is running (Xen's BOOST tickle
//! would), so it waits at most for the end of a running slice; credits, which only matter when
//! weights differ or a vCPU stays busy longer than the accounting period, are not kept.

use std::collections::VecDeque;

/// Xen's credit scheduler time slice, ns (30 ms, `sched_credit_tslice_ms`).
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

/// The physical CPUs and the vCPUs running on or waiting for them.
#[derive(Clone, Debug)]
pub struct Pcpus {
    cpus: u32,
    slice_ns: u64,
    /// vCPUs on a CPU: who, since when, until when their slice lasts.
    running: Vec<(VcpuId, u64, u64)>,
    /// When each idle CPU became free. A vCPU runs ahead of the rest of the simulation within its
    /// window, so it may give its CPU up at a time the engine has not reached.
    idle_since: Vec<u64>,
    /// vCPUs waiting for a CPU, with the time they started waiting and whether they woke from
    /// idle (BOOST: ahead of the preempted).
    waiting: VecDeque<(VcpuId, u64, bool)>,
    /// CPU time used, ns, by VM.
    run_ns: Vec<u64>,
    /// Time spent runnable but waiting for a CPU, ns, by VM (Xen's "steal" time).
    wait_ns: Vec<u64>,
}

impl Pcpus {
    /// `cpus` physical CPUs shared by the vCPUs of `vms` VMs.
    pub fn new(cpus: u32, vms: usize) -> Self {
        assert!(cpus > 0, "a host has at least one CPU");
        Self {
            cpus,
            slice_ns: CREDIT_SLICE_NS,
            running: Vec::with_capacity(cpus as usize),
            idle_since: vec![0; cpus as usize],
            waiting: VecDeque::new(),
            run_ns: vec![0; vms],
            wait_ns: vec![0; vms],
        }
    }

    /// Physical CPUs.
    pub fn cpus(&self) -> u32 {
        self.cpus
    }

    /// A vCPU wants to run at `now`. A vCPU already on a CPU keeps it; one coming from idle takes
    /// a free CPU or queues ahead of the vCPUs that were preempted (BOOST).
    pub fn acquire(&mut self, v: VcpuId, now: u64) -> Grant {
        if let Some(r) = self.running.iter().find(|r| r.0 == v) {
            return if r.1 > now { Grant::From(r.1) } else { Grant::Run(r.2) };
        }
        if self.waiting.iter().any(|w| w.0 == v) {
            return Grant::Wait;
        }
        if let Some(i) = (0..self.idle_since.len()).min_by_key(|&i| self.idle_since[i]) {
            let start = self.idle_since.swap_remove(i).max(now);
            self.running.push((v, start, start + self.slice_ns));
            return if start == now { Grant::Run(now + self.slice_ns) } else { Grant::From(start) };
        }
        let boosted = self.waiting.iter().take_while(|w| w.2).count();
        self.waiting.insert(boosted, (v, now, true));
        Grant::Wait
    }

    /// A vCPU on a CPU has nothing to run at `now`: its CPU goes to the next waiting vCPU, which
    /// is returned for the host to start.
    pub fn release(&mut self, v: VcpuId, now: u64) -> Option<VcpuId> {
        let i = self.running.iter().position(|r| r.0 == v)?;
        let (_, since, _) = self.running.swap_remove(i);
        self.run_ns[v.0 as usize] += now - since;
        self.next(now)
    }

    /// A vCPU on a CPU reached the end of its slice at `now`. With nobody waiting it goes on (the
    /// new slice's end is returned); otherwise it goes to the back of the queue and its CPU to the
    /// vCPU returned.
    pub fn expire(&mut self, v: VcpuId, now: u64) -> Result<u64, VcpuId> {
        let i = self.running.iter().position(|r| r.0 == v).expect("an expiring vCPU is on a CPU");
        if self.waiting.is_empty() {
            self.running[i].2 = now + self.slice_ns;
            return Ok(now + self.slice_ns);
        }
        let (_, since, _) = self.running.swap_remove(i);
        self.run_ns[v.0 as usize] += now - since;
        self.waiting.push_back((v, now, false));
        Err(self.next(now).expect("a vCPU was waiting"))
    }

    fn next(&mut self, now: u64) -> Option<VcpuId> {
        let Some((w, since, _)) = self.waiting.pop_front() else {
            self.idle_since.push(now);
            return None;
        };
        self.wait_ns[w.0 as usize] += now.saturating_sub(since);
        self.running.push((w, now, now + self.slice_ns));
        Some(w)
    }

    /// CPU time VM `vm` has used up to `now`, ns.
    pub fn run_ns(&self, vm: usize, now: u64) -> u64 {
        self.run_ns[vm] + self.running.iter().filter(|r| r.0.0 as usize == vm).map(|r| now.saturating_sub(r.1)).sum::<u64>()
    }

    /// Time VM `vm`'s vCPUs have waited for a CPU up to `now`, ns.
    pub fn wait_ns(&self, vm: usize, now: u64) -> u64 {
        self.wait_ns[vm] + self.waiting.iter().filter(|w| w.0.0 as usize == vm).map(|w| now.saturating_sub(w.1)).sum::<u64>()
    }

    /// CPU time used by every VM up to `now`, ns.
    pub fn busy_ns(&self, now: u64) -> u64 {
        (0..self.run_ns.len()).map(|vm| self.run_ns(vm, now)).sum()
    }

    /// Checks that no more vCPUs run than there are CPUs, none twice, and none both running and
    /// waiting.
    pub fn check(&self) -> Result<(), String> {
        if self.running.len() + self.idle_since.len() != self.cpus as usize {
            return Err(format!(
                "{} vCPUs running and {} CPUs idle on {} physical CPUs",
                self.running.len(),
                self.idle_since.len(),
                self.cpus
            ));
        }
        let mut seen: Vec<VcpuId> = self.running.iter().map(|r| r.0).chain(self.waiting.iter().map(|w| w.0)).collect();
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != n {
            return Err("a vCPU is both running and waiting, or queued twice".into());
        }
        if !self.waiting.is_empty() && !self.idle_since.is_empty() {
            return Err(format!("{} vCPUs wait while a physical CPU is idle", self.waiting.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpus_take_free_cpus_then_queue_woken_ahead_of_preempted() {
        let mut p = Pcpus::new(1, 3);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(CREDIT_SLICE_NS));
        assert_eq!(p.acquire((0, 0), 5), Grant::Run(CREDIT_SLICE_NS), "a running vCPU keeps its slice");
        assert_eq!(p.acquire((1, 0), 10), Grant::Wait);
        // VM 0's slice ends with VM 1 waiting: VM 1 runs, VM 0 queues behind it.
        assert_eq!(p.expire((0, 0), CREDIT_SLICE_NS), Err((1, 0)));
        // VM 2 wakes from idle: it goes ahead of the preempted VM 0.
        assert_eq!(p.acquire((2, 0), CREDIT_SLICE_NS + 1), Grant::Wait);
        assert_eq!(p.release((1, 0), CREDIT_SLICE_NS + 100), Some((2, 0)));
        assert_eq!(p.release((2, 0), CREDIT_SLICE_NS + 200), Some((0, 0)));
        p.check().expect("consistent");
        // Alone, a vCPU's slice is renewed.
        assert_eq!(p.expire((0, 0), 2 * CREDIT_SLICE_NS), Ok(3 * CREDIT_SLICE_NS));
        assert_eq!(p.release((0, 0), 2 * CREDIT_SLICE_NS + 300), None);
        assert_eq!(p.run_ns(0, u64::MAX), 2 * CREDIT_SLICE_NS + 100, "0..30 ms, then 30.0002 ms..60.0003 ms");
        assert_eq!(p.wait_ns(1, u64::MAX), CREDIT_SLICE_NS - 10);
        assert_eq!(p.wait_ns(2, u64::MAX), 99);
        assert_eq!(p.busy_ns(u64::MAX), 2 * CREDIT_SLICE_NS + 300);
    }

    #[test]
    fn a_cpu_given_up_ahead_of_the_engine_is_free_only_from_then() {
        let mut p = Pcpus::new(1, 2);
        assert_eq!(p.acquire((0, 0), 0), Grant::Run(CREDIT_SLICE_NS));
        // VM 0 ran ahead to 5 ms and went idle there; VM 1 wakes at 2 ms.
        assert_eq!(p.release((0, 0), 5_000_000), None);
        assert_eq!(p.acquire((1, 0), 2_000_000), Grant::From(5_000_000));
        assert_eq!(p.acquire((1, 0), 3_000_000), Grant::From(5_000_000), "still not before then");
        assert_eq!(p.acquire((1, 0), 5_000_000), Grant::Run(5_000_000 + CREDIT_SLICE_NS));
        assert_eq!(p.busy_ns(6_000_000), 6_000_000, "never two at once on the one CPU");
        p.check().expect("consistent");
    }
}
