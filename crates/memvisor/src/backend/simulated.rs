//! The simulated host as a backend: machine memory, guests, datastores and the event queue that
//! carries their time; the host's daemons (reclaim, sampling) run here because they act on guests.

use super::Backend;
use crate::clock::{Event, EventQueue, GuestEvent};
use crate::devices::Datastore;
use crate::guest::{Counter, Env, Guest, Horizon};
use crate::host::{GuestMemory, Host};
use crate::policy::{Action, Decision, HostView, SharingView, VmId, VmView};
use crate::rng::{self, Rng};
use crate::units::{PAGE_SIZE, human_bytes, pages};

/// The outcome of a decision the simulated host takes as given: the mechanisms work toward the
/// target. Others are recorded, capped or not applied, and `apply` says which and why.
const APPLIED: &str = "applied";

/// The simulated machine.
pub struct SimulatedHost {
    pub(crate) host: Host,
    pub(crate) guests: Vec<Guest>,
    pub(crate) datastores: Vec<Datastore>,
    pub(crate) events: EventQueue,
    /// Simulated time of the event being handled.
    pub(crate) now: u64,
    rng: Rng,
    sample_pages: u32,
    sample_period_ns: u64,
    /// The memory state the policy last declared (for the time series).
    pub(crate) memory_state: &'static str,
    /// KSM tuning as a policy last set it (`Action::SetSharing`), for a host without KSM; a KVM
    /// host with `host.page_sharing` runs ksmd as told.
    sharing: SharingView,
    /// VMs whose vCPUs the policy stopped (since when), their vCPU events held meanwhile, and
    /// each VM's time blocked in earlier stops.
    blocked: Vec<Option<u64>>,
    parked: Vec<Vec<GuestEvent>>,
    blocked_before: Vec<u64>,
    /// The engine loop's lookahead, run end and stop time, while it runs: a guest may take its own
    /// next events within them (`guest::Horizon`).
    pub(crate) horizon: Option<(u64, u64, u64)>,
}

impl SimulatedHost {
    /// The machine, with its host's random stream drawn from `seed`.
    pub(crate) fn new(
        mut host: Host,
        guests: Vec<Guest>,
        datastores: Vec<Datastore>,
        events: EventQueue,
        seed: u64,
        sample_pages: u32,
        sample_period_ns: u64,
    ) -> Self {
        let n = guests.len();
        host.direct_reclaim_rng = rng::stream(seed, &[rng::DIRECT_RECLAIM_STREAM]);
        Self {
            host,
            guests,
            datastores,
            events,
            now: 0,
            rng: rng::stream(seed, &[rng::HOST_STREAM]),
            sample_pages,
            sample_period_ns,
            memory_state: "",
            sharing: SharingView::default(),
            blocked: vec![None; n],
            parked: vec![Vec::new(); n],
            blocked_before: vec![0; n],
            horizon: None,
        }
    }

    /// Machine memory and its VMs.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Guests, in power-on order (a guest's index is its VM id).
    pub fn guests(&self) -> &[Guest] {
        &self.guests
    }

    /// Time VM `i` has spent blocked by the policy, ns, up to now.
    pub fn blocked_ns(&self, i: usize) -> u64 {
        self.blocked_before[i] + self.blocked[i].map_or(0, |since| self.now - since)
    }

    /// Physical CPU time VM `i`'s vCPUs have used, and waited for a CPU while runnable, ns, up
    /// to now; zeros when the host does not model its CPUs.
    pub fn pcpu_ns(&self, i: usize) -> (u64, u64) {
        self.host.pcpus.as_ref().map_or((0, 0), |p| (p.run_ns(i, self.now), p.wait_ns(i, self.now)))
    }

    /// Checks that no vCPU with work is lost: each has an event coming, waits in the host's CPU
    /// queue, or is parked while its VM is stopped.
    pub(crate) fn check_vcpus(&self) -> Result<(), String> {
        for (g, guest) in self.guests.iter().enumerate() {
            for v in guest.busy_vcpus() {
                let ev = GuestEvent::Vcpu { vcpu: v };
                let coming = self.events.iter().any(|e| matches!(e, Event::Guest { guest, ev: x } if *guest == g as u32 && *x == ev));
                let waiting = self.host.pcpus.as_ref().is_some_and(|p| p.is_waiting((g as u32, v)));
                if !coming && !waiting && !self.parked[g].contains(&ev) {
                    return Err(format!("VM '{}': vCPU {v} has work but no turn coming", guest.cfg.name));
                }
            }
        }
        Ok(())
    }

    /// Datastores.
    pub fn datastores(&self) -> &[Datastore] {
        &self.datastores
    }

    /// Simulated time, ns.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The host's free-memory state as the policy last set it ("" before any).
    pub fn memory_state(&self) -> &'static str {
        self.memory_state
    }

    /// The world a guest step acts on, with the guest itself.
    pub(crate) fn split(&mut self, guest: usize) -> (&mut Guest, Env<'_>) {
        let horizon = self.horizon.map(|(lookahead, end, until)| Horizon { now: &mut self.now, lookahead, end, until });
        let env = Env { events: &mut self.events, datastores: &mut self.datastores, host: &mut self.host, horizon };
        (&mut self.guests[guest], env)
    }

    /// Hands a guest's event to it; `limit` is how far its vCPUs may account resident hits.
    pub(crate) fn handle_guest(&mut self, guest: u32, ev: GuestEvent, limit: u64) -> Result<(), String> {
        if let (Some(_), GuestEvent::Vcpu { vcpu }) = (self.blocked[guest as usize], ev) {
            // A blocked VM's vCPUs do not run; they resume where they stopped when it is unblocked,
            // and meanwhile leave their physical CPU to others.
            self.parked[guest as usize].push(ev);
            if let Some(((vm, vcpu), start)) = self.host.pcpus.as_mut().and_then(|p| p.leave((guest, vcpu), self.now)) {
                self.events.push(start, Event::Guest { guest: vm, ev: GuestEvent::Vcpu { vcpu } });
            }
            return Ok(());
        }
        let now = self.now;
        let may_run = self.blocked[guest as usize].is_none();
        let (g, mut env) = self.split(guest as usize);
        g.handle(now, limit, ev, may_run, &mut env);
        self.settle()
    }

    /// Runs a host daemon's event.
    pub(crate) fn handle_host(&mut self, ev: Event) -> Result<(), String> {
        let now = self.now;
        let mut mems: Vec<&mut dyn GuestMemory> = self.guests.iter_mut().map(|g| g as &mut dyn GuestMemory).collect();
        match ev {
            Event::HostSample => {
                self.host.sample_period(self.sample_pages, now, &mut self.rng, &mut mems);
                self.events.push(now + self.sample_period_ns, Event::HostSample);
            }
            Event::HostReclaim => {
                let next = self.host.reclaim_step(now, &mut self.rng, &mut mems, &mut self.datastores, &mut self.events);
                self.host.daemon_scheduled = next.is_some();
                if let Some(t) = next {
                    self.events.push(t, Event::HostReclaim);
                }
            }
            Event::HostIoDone { vm, io } => self.host.io_done(vm, io),
            Event::BlkbackDone { guest, bio, requests } => {
                let seen = self.host.blkback_half(now, requests as u64, true);
                if bio != crate::guest::NONE {
                    self.events.push(seen, Event::Guest { guest, ev: GuestEvent::IoDone { bio } });
                }
            }
            Event::HostShareScan => {
                if let Some(t) = self.host.share_scan(now, &mut mems) {
                    self.events.push(t, Event::HostShareScan);
                }
            }
            _ => unreachable!("not a host event: {ev:?}"),
        }
        self.settle()
    }

    /// After any step: tell guests about pages the host took, let the reclaim daemon resume if pages
    /// came back below a target, and end the run on a fatal condition.
    fn settle(&mut self) -> Result<(), String> {
        if std::mem::take(&mut self.host.reclaim_fell)
            && self.host.vms().iter().any(|v| v.reclaimed() < v.swap_target && v.above_reservation())
        {
            self.wake_daemon();
        }
        if self.host.has_invalidations() {
            for i in 0..self.guests.len() {
                let (g, mut env) = self.split(i);
                g.apply_invalidations(&mut env);
            }
        }
        match self.host.fatal.take() {
            Some(e) => Err(format!("at t={:.3}s: {e}", self.now as f64 / 1e9)),
            None => Ok(()),
        }
    }

    fn index(&self, id: VmId) -> Result<usize, String> {
        let i = id.0 as usize;
        if i < self.guests.len() { Ok(i) } else { Err(format!("decision for VM #{} but the host has {} VMs", id.0, self.guests.len())) }
    }

    fn wake_daemon(&mut self) {
        if !self.host.daemon_scheduled {
            self.host.daemon_scheduled = true;
            self.events.push(self.now, Event::HostReclaim);
        }
    }
}

impl Backend for SimulatedHost {
    fn observe(&mut self) -> Result<HostView, String> {
        let vms = self
            .guests
            .iter()
            .zip(self.host.vms())
            .enumerate()
            .map(|(i, (g, h))| VmView {
                id: VmId(i as u32),
                name: h.name.clone(),
                memory: g.cfg.memory_pages as u64 * PAGE_SIZE,
                reservation: h.res.reservation,
                limit: h.res.limit,
                shares: h.res.shares,
                overhead: h.overhead_frames * PAGE_SIZE,
                granted: h.granted * PAGE_SIZE,
                guest_total: g.mem_total() * PAGE_SIZE,
                guest_free: g.pages.nr_free() * PAGE_SIZE,
                guest_available: g.mem_available() * PAGE_SIZE,
                swap_in: g.vmstat.get(Counter::PswpIn),
                swap_out: g.vmstat.get(Counter::PswpOut),
                major_faults: g.vmstat.get(Counter::PgMajFault),
                memory_stall_ns: Some(g.memory_stall_ns()),
                host_stall_ns: Some(h.stats.host_wait.ns_at(self.now)),
                committed: g.committed_as() * PAGE_SIZE,
                // One zone, no lowmem reserve: totalreserve_pages is its high watermark.
                guest_reserve: Some(g.watermarks().high * PAGE_SIZE),
                frontswap: g.config().frontswap.then(|| g.frontswap_pages() * PAGE_SIZE),
                frontswap_selfshrink: g.config().frontswap_selfshrink,
                balloon_size: h.ballooned * PAGE_SIZE,
                balloon_target: h.balloon_target * PAGE_SIZE,
                balloon_max: h.balloon_max * PAGE_SIZE,
                swapped: h.swapped * PAGE_SIZE,
                compressed: h.zip().used() * PAGE_SIZE,
                compression_cache: h.zip().frames() * PAGE_SIZE,
                swap_target: h.swap_target * PAGE_SIZE,
                active_sample: h.sample().last,
                active_sample_now: (h.sample().pages.len() as u64, h.sample().touched),
                active_periods: h.sample().periods,
                large_pages: if self.host.has_large_pages(i as u32) { h.granted * PAGE_SIZE } else { 0 },
            })
            .collect();
        Ok(HostView {
            time_ns: self.now,
            host_memory: self.host.total_frames() * PAGE_SIZE,
            host_free: self.host.free_frames() * PAGE_SIZE,
            host_available: self.host.free_frames() * PAGE_SIZE,
            sharing: match self.host.sharing() {
                Some(s) if let (Some(k), Some(c)) = (s.ksm(), s.ksm_counters()) => SharingView {
                    run: k.run,
                    pages_to_scan: k.settings.pages_to_scan as u64,
                    sleep_ms: k.settings.sleep_millisecs as u64,
                    pages_shared: c.pages_shared,
                    pages_sharing: c.pages_sharing,
                },
                // What ESX's sharing has merged, in KSM's terms.
                Some(s) => {
                    let shared: u64 = (0..self.guests.len() as u32).map(|i| s.vm(i).shared).sum();
                    SharingView { pages_shared: s.frames_in_use(), pages_sharing: shared - s.frames_in_use(), ..self.sharing }
                }
                None => self.sharing,
            },
            hypervisor: self.host.hypervisor_frames() * PAGE_SIZE,
            vms,
        })
    }

    fn apply(&mut self, d: &Decision) -> Result<String, String> {
        match d.action {
            Action::SetMemoryState { state } => {
                self.memory_state = state;
                return Ok(APPLIED.into());
            }
            Action::SetSharing { run, pages_to_scan, sleep_ms } => {
                self.sharing = SharingView { run, pages_to_scan, sleep_ms, ..self.sharing };
                let clamp = |x: u64| x.min(u32::MAX as u64) as u32;
                if self.host.set_ksm(run, clamp(pages_to_scan), clamp(sleep_ms)) {
                    return Ok(APPLIED.into());
                }
                return Ok("recorded: this host does not share with KSM".into());
            }
            _ => {}
        }
        let id = d.vm.ok_or_else(|| format!("'{}' needs a VM", d.action))?;
        let i = self.index(id)?;
        match d.action {
            Action::SetGrantLimit { bytes } => self.host.set_grant_limit(i as u32, pages(bytes)),
            Action::SetBalloonTarget { bytes } => {
                let set = self.host.set_balloon_target(i as u32, pages(bytes));
                let now = self.now;
                let (g, mut env) = self.split(i);
                g.balloon_notify(now, &mut env);
                if set < pages(bytes) {
                    // The controller kept the reservation; what is left is the driver's cap.
                    return Ok(format!("{APPLIED}, capped at {}, the balloon's maximum (MCTLMAX)", human_bytes(set * PAGE_SIZE)));
                }
            }
            Action::SetSwapTarget { bytes } => {
                self.host.set_swap_target(i as u32, pages(bytes));
                self.wake_daemon();
            }
            Action::SetBlocked { blocked: true } => {
                self.blocked[i].get_or_insert(self.now);
            }
            Action::BreakLargePages { share_now } => {
                if !share_now {
                    self.host.break_large_pages(i as u32);
                    return Ok(APPLIED.into());
                }
                let mut mems: Vec<&mut dyn GuestMemory> = self.guests.iter_mut().map(|g| g as &mut dyn GuestMemory).collect();
                let shared = self.host.break_large_pages_and_share(i as u32, &mut mems);
                self.settle()?;
                return Ok(format!("{APPLIED}: {shared} hashed pages shared"));
            }
            Action::SetBlocked { blocked: false } => {
                if let Some(since) = self.blocked[i].take() {
                    self.blocked_before[i] += self.now - since;
                    for ev in std::mem::take(&mut self.parked[i]) {
                        self.events.push(self.now, Event::Guest { guest: i as u32, ev });
                    }
                }
            }
            Action::ShrinkFrontswap { bytes } => {
                let now = self.now;
                let (g, mut env) = self.split(i);
                // The worker's time is the guest kernel's, on no vCPU of the model (as the
                // balloon driver's is): it delays nothing but the reclaim it starts.
                let done = g.frontswap_shrink(pages(bytes), now, &mut env);
                // Its allocations may have backed frames and reclaimed on the host.
                self.settle()?;
                return Ok(match done {
                    Ok((n, _)) => format!("{APPLIED}: {n} pages brought back"),
                    Err(why) => format!("not applied: {why}"),
                });
            }
            Action::SetMemoryState { .. } | Action::SetSharing { .. } => unreachable!("host-wide, handled above"),
        }
        Ok(APPLIED.into())
    }
}
