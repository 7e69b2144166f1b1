//! The simulation engine: builds the simulated host from a scenario, then pops events in time order
//! and hands each to its actor (a guest's vCPU, kswapd, flusher, I/O completion; the controller;
//! the sampler) until the scenario's end. Same scenario, same seed: the same run, bit for bit.

use std::collections::BTreeMap;

use crate::backend::SimulatedHost;
use crate::clock::{Event, EventQueue};
use crate::controller::{Controller, DecisionRecord};
use crate::denali::DenaliHost;
use crate::devices::Datastore;
use crate::guest::{Env, Guest};
use crate::host::{AdmissionVm, Blkback, Host, HostProfile, Pcpus, VmResources, admit};
use crate::metrics::{self, TimeSeries};
use crate::policy;
use crate::scenario::Scenario;
use crate::summary::{DatastoreSummary, HostSummary, RunSummary, TmemSummary, VmSummary};
use crate::units::{self, PAGE_SIZE};
use crate::workloads::TraceSource;

/// Everything a finished run produced.
pub struct RunResult<'a> {
    /// The scenario as resolved.
    pub scenario_toml: String,
    /// Sampled counters, borrowed from the run (`into_owned` keeps them past it).
    pub series: std::borrow::Cow<'a, TimeSeries>,
    /// Summary.
    pub summary: RunSummary,
    /// Policy decisions with reasons.
    pub decisions: Vec<DecisionRecord>,
}

/// A run in progress.
pub struct Simulation {
    scenario: Scenario,
    host: Hosted,
}

/// What runs: VMs on the simulated host under a policy, or the Denali host, which pages whole VMs
/// by itself and runs no policy.
enum Hosted {
    Vms(Box<VmHost>),
    Denali(Box<DenaliHost>),
}

/// The simulated host with its VMs, the controller that runs the policy over it, and what the run
/// records.
struct VmHost {
    world: SimulatedHost,
    controller: Controller,
    series: TimeSeries,
    window: [Option<Vec<Vec<f64>>>; 2],
    finished: Option<String>,
    /// Where a run without a duration ends all the same: the longest a scenario may give, so no
    /// clock arithmetic of a runaway workload can wrap (tests shorten it).
    longest_ns: u64,
    /// Tests: every event goes through the engine loop (no `guest::Horizon`).
    #[cfg(test)]
    engine_only: bool,
}

impl Simulation {
    /// Powers on the scenario's host and VMs (admission control first) and schedules their start.
    /// A scenario with `trace` workloads needs `with_traces`.
    pub fn new(s: &Scenario) -> Result<Self, String> {
        Self::with_traces(s, &|f| Err(format!("trace '{f}' was not loaded (the caller must supply trace files)")))
    }

    /// Like `new`, with a source for the traces that `trace` workloads name.
    pub fn with_traces(s: &Scenario, traces: TraceSource) -> Result<Self, String> {
        Self::with_policy(s, traces, None)
    }

    /// Like `with_traces`, with the policy given rather than built from the scenario's name (a
    /// policy written outside the engine, such as a Python one; `None`: the scenario's).
    pub fn with_policy(s: &Scenario, traces: TraceSource, policy: Option<Box<dyn crate::policy::Policy>>) -> Result<Self, String> {
        if s.host.profile == HostProfile::Denali {
            if policy.is_some() || s.host.policy.name != "static" {
                return Err(format!(
                    "host.policy: the denali host's pager is its only reclaimer and takes no policy (have '{}'; use \"static\")",
                    s.host.policy.name
                ));
            }
            return Ok(Self { scenario: s.clone(), host: Hosted::Denali(Box::new(DenaliHost::new(s)?)) });
        }
        let adm: Vec<AdmissionVm> = s
            .vms
            .iter()
            .map(|v| {
                let g = &v.guest;
                let built_with = if g.populate_at_boot { (g.memory_pages - g.boot_balloon_pages) as u64 * PAGE_SIZE } else { 0 };
                AdmissionVm { name: g.name.clone(), reservation: v.reservation, overhead: v.overhead, built_with }
            })
            .collect();
        admit(s.host.memory, s.host.hypervisor, &adm)?;
        // Every guest's boot backs its kernel's reservation at once: reservations past what the
        // hypervisor leaves can never boot, and failing here spares building page state for them
        // (a 1 TiB maxmem's is gigabytes).
        let for_guests = s.host.memory - s.host.hypervisor;
        let mut booted = 0;
        for (i, v) in s.vms.iter().enumerate() {
            let reserved = v.guest.reserved_pages as u64 * PAGE_SIZE;
            booted += reserved;
            if booted > for_guests {
                return Err(format!(
                    "VM '{}' cannot boot: its kernel's boot reservation of {} (kernel_reserved; by default it grows with \
                     the memory, maxmem included) does not fit in the {} the hypervisor leaves{} (fewer or smaller VMs, \
                     or a larger host)",
                    v.guest.name,
                    units::human_bytes(reserved),
                    units::human_bytes(for_guests),
                    if i == 0 { String::new() } else { format!(" after the {i} VMs before it") },
                ));
            }
        }
        let frames = s.host.memory / PAGE_SIZE;
        let mut host = Host::new(frames);
        host.compressor = s.host.compressor;
        host.swap_enabled = s.host.swap;
        host.costs = s.host.costs.clone();
        host.reserve_hypervisor(units::pages(s.host.hypervisor));
        if let Some(p) = &s.host.sharing {
            host.enable_sharing(p.clone());
        }
        if let Some(t) = &s.host.tmem {
            host.enable_tmem(t.clone());
        }
        host.populate_on_release = s.host.profile.populate_at_boot();
        host.pcpus = s.host.cpus.map(|n| Pcpus::new(n, s.vms.len()));
        host.blkback = s.host.dom0_vcpus.map(|n| Blkback::new(n, s.host.costs.blkback_request_ns));
        let mut datastores: Vec<Datastore> = s.datastores.iter().map(|d| Datastore::new(d.name.clone(), d.device.clone())).collect();
        let mut events = EventQueue::new();
        let mut guests = Vec::new();
        for (i, v) in s.vms.iter().enumerate() {
            let res = VmResources { reservation: v.reservation, limit: v.limit, shares: v.shares, overhead: v.overhead };
            let swapfile = datastores[v.swap_datastore].add_disk(v.swap_datastore as u32);
            let memory = v.guest.memory_pages as u64 * PAGE_SIZE;
            host.add_vm(
                v.guest.name.clone(),
                v.guest.memory_pages,
                res,
                v.swap_datastore as u32,
                swapfile.base,
                memory * s.host.zip_max_percent as u64 / 100,
                s.host.balloon_max_pages(v.guest.memory_pages),
            );
            let disk = datastores[v.datastore].add_disk(v.datastore as u32);
            let mut env = Env { events: &mut events, datastores: &mut datastores, host: &mut host, horizon: None };
            guests.push(Guest::boot(i as u32, v.guest.clone(), disk, traces, &mut env)?);
        }
        if let Some(e) = host.fatal.take() {
            return Err(e);
        }
        let policy = match policy {
            Some(p) => p,
            None => policy::build(&s.host.policy).ok_or_else(|| match s.host.policy.name.strip_prefix(policy::EXTERNAL_PREFIX) {
                Some(_) => {
                    format!("policy '{}' is written in Python: run it through the Python API or the memvisor command", s.host.policy.name)
                }
                None => format!("unknown policy '{}'", s.host.policy.name),
            })?,
        };
        // The policy's first decision (the host's initial memory state) comes before the first
        // sample, so no row lacks a state.
        events.push(0, Event::PolicyTick);
        events.push(0, Event::Sample);
        if s.host.sample_pages > 0 {
            events.push(0, Event::HostSample);
        }
        if let Some(p) = &s.host.sharing {
            // ksmd's first batch comes after its sleep, ESX's scanner after its period.
            let first = p.ksm.map_or(p.period_ns, |k| k.settings.sleep_millisecs as u64 * 1_000_000);
            events.push(first.max(1_000), Event::HostShareScan);
        }
        events.push(s.report.window_ns.0, Event::Window);
        if let Some(end) = s.report.window_ns.1 {
            events.push(end, Event::Window);
        }
        let vms = VmHost {
            world: SimulatedHost::new(host, guests, datastores, events, s.seed, s.host.sample_pages, s.host.sample_period_ns),
            controller: Controller::new(policy),
            series: TimeSeries::default(),
            window: [None, None],
            finished: None,
            longest_ns: units::MAX_DURATION_NS,
            #[cfg(test)]
            engine_only: false,
        };
        Ok(Self { scenario: s.clone(), host: Hosted::Vms(Box::new(vms)) })
    }

    /// Simulated time reached, ns.
    pub fn now(&self) -> u64 {
        match &self.host {
            Hosted::Vms(h) => h.world.now,
            Hosted::Denali(d) => d.now(),
        }
    }

    /// Whether the run has ended.
    pub fn is_finished(&self) -> bool {
        match &self.host {
            Hosted::Vms(h) => h.finished.is_some(),
            Hosted::Denali(d) => d.is_finished(),
        }
    }

    /// The Denali host, if the scenario's profile is `denali`.
    pub fn denali(&self) -> Option<&DenaliHost> {
        match &self.host {
            Hosted::Vms(_) => None,
            Hosted::Denali(d) => Some(d),
        }
    }

    /// The scenario's fixed length, if it has one.
    pub fn duration_ns(&self) -> Option<u64> {
        self.scenario.duration_ns
    }

    /// The simulated machine (for tests and inspection).
    ///
    /// # Panics
    /// On a `denali`-profile run, which has no such machine (see [`Simulation::denali`]).
    pub fn world(&self) -> &SimulatedHost {
        match &self.host {
            Hosted::Vms(h) => &h.world,
            Hosted::Denali(_) => panic!("a denali-profile run has no VM host: use Simulation::denali"),
        }
    }

    /// Runs until simulated time `until` (or the end). Returns whether the run has ended.
    pub fn run_until(&mut self, until: u64) -> Result<bool, String> {
        match &mut self.host {
            Hosted::Vms(h) => h.run_until(&self.scenario, until),
            Hosted::Denali(d) => d.run_until(until),
        }
    }

    /// Applies a decision now, outside the policy (by hand, from a test or a script); it is not
    /// logged as the policy's.
    pub fn apply(&mut self, d: &crate::policy::Decision) -> Result<(), String> {
        use crate::backend::Backend;
        match &mut self.host {
            Hosted::Vms(h) => h.world.apply(d).map(drop),
            Hosted::Denali(_) => Err("the denali host takes no decisions: its pager is its only reclaimer".into()),
        }
    }

    /// Runs to the end.
    pub fn run(&mut self) -> Result<(), String> {
        self.run_until(u64::MAX).map(|_| ())
    }

    /// The VM host (tests of its internals; never a `denali` run there).
    #[cfg(test)]
    fn vm_host(&mut self) -> &mut VmHost {
        match &mut self.host {
            Hosted::Vms(h) => h,
            Hosted::Denali(_) => unreachable!("a test of the VM host ran a denali scenario"),
        }
    }

    /// Runs `f` on guest `i` with the world it acts on, for unit tests of guest internals.
    #[cfg(test)]
    pub(crate) fn with_guest<R>(&mut self, i: usize, f: impl FnOnce(&mut Guest, &mut Env) -> R) -> R {
        let (g, mut env) = self.vm_host().world.split(i);
        f(g, &mut env)
    }

    /// Checks every guest's and the host's invariants.
    pub fn check_invariants(&mut self) -> Result<(), String> {
        match &mut self.host {
            Hosted::Vms(h) => h.check(),
            Hosted::Denali(d) => d.check(),
        }
    }

    /// The results of a finished run.
    pub fn results(&self) -> RunResult<'_> {
        let s = &self.scenario;
        let scenario_toml = s.to_toml();
        match &self.host {
            Hosted::Vms(h) => RunResult {
                scenario_toml,
                series: std::borrow::Cow::Borrowed(&h.series),
                summary: h.summary(s),
                decisions: h.controller.log().to_vec(),
            },
            Hosted::Denali(d) => {
                RunResult { scenario_toml, series: std::borrow::Cow::Borrowed(d.series()), summary: d.summary(s), decisions: Vec::new() }
            }
        }
    }
}

impl VmHost {
    fn run_until(&mut self, s: &Scenario, until: u64) -> Result<bool, String> {
        let lookahead = s.host.lookahead_ns;
        let end = s.duration_ns.unwrap_or(self.longest_ns);
        let horizon = Some((lookahead, end, until));
        #[cfg(test)]
        let horizon = horizon.filter(|_| !self.engine_only);
        self.world.horizon = horizon;
        while self.finished.is_none() {
            let Some(t) = self.world.events.peek_time() else {
                self.finish(self.world.now, "nothing left to simulate");
                break;
            };
            if t >= end {
                let why = if s.duration_ns.is_some() {
                    "duration reached"
                } else {
                    "100 years reached, the longest a run may be (no duration was given)"
                };
                self.finish(end, why);
                break;
            }
            if t > until {
                break;
            }
            let (now, ev) = self.world.events.pop().expect("peeked");
            self.world.now = self.world.now.max(now);
            match ev {
                Event::Sample => {
                    self.series.make_room(self.world.guests.len(), now, s.host.sample_interval_ns)?;
                    self.series.sample(now, &self.world);
                    self.world.events.push(now + s.host.sample_interval_ns, Event::Sample);
                }
                Event::PolicyTick => {
                    self.controller.tick(&mut self.world)?;
                    if let Some(p) = self.controller.period_ns() {
                        self.world.events.push(now + p, Event::PolicyTick);
                    }
                }
                Event::Window => {
                    let k = if self.window[0].is_none() { 0 } else { 1 };
                    self.window[k] = Some(self.snapshot());
                }
                Event::HostReclaim | Event::HostIoDone { .. } | Event::BlkbackDone { .. } | Event::HostSample | Event::HostShareScan => {
                    self.world.handle_host(ev)?
                }
                Event::Guest { guest, ev } => {
                    let next = self.world.events.peek_time().unwrap_or(u64::MAX);
                    let limit = next.max(now + lookahead).min(end);
                    self.world.handle_guest(guest, ev, limit)?;
                    let g = &self.world.guests;
                    if s.duration_ns.is_none() && g.iter().all(|g| g.finite_done()) {
                        let t = g.iter().flat_map(|g| &g.procs).map(|p| p.stats.end_ns).max().unwrap_or(now);
                        self.finish(t.max(now), "every finite workload finished");
                    }
                }
            }
        }
        Ok(self.finished.is_some())
    }

    fn finish(&mut self, t: u64, why: &str) {
        self.world.now = t;
        if self.series.time_s.last().copied() != Some(t as f64 / 1e9) {
            self.series.sample(t, &self.world);
        }
        if self.window[0].is_none() {
            self.window[0] = Some(self.snapshot());
        }
        if self.window[1].is_none() {
            self.window[1] = Some(self.snapshot());
        }
        self.finished = Some(why.to_string());
    }

    fn snapshot(&self) -> Vec<Vec<f64>> {
        (0..self.world.guests.len()).map(|i| metrics::row(&self.world, i)).collect()
    }

    fn check(&mut self) -> Result<(), String> {
        self.world.host.check()?;
        self.world.check_vcpus()?;
        for i in 0..self.world.guests.len() {
            let (g, env) = self.world.split(i);
            g.check_invariants(&env)?;
        }
        Ok(())
    }

    fn summary(&self, s: &Scenario) -> RunSummary {
        let now = self.world.now;
        let cols = metrics::columns();
        let (w0, w1) = (self.window[0].as_ref(), self.window[1].as_ref());
        let wstart = s.report.window_ns.0;
        let wend = s.report.window_ns.1.unwrap_or(now).min(now);
        let span_s = (wend.saturating_sub(wstart)) as f64 / 1e9;
        let vms = self
            .world
            .guests
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let fin = metrics::row(&self.world, i);
                let counters: BTreeMap<String, f64> = cols.iter().zip(&fin).map(|(c, v)| (c.to_string(), *v)).collect();
                let rates: BTreeMap<String, f64> = match (w0, w1) {
                    (Some(a), Some(b)) if span_s > 0.0 => {
                        cols.iter().enumerate().map(|(c, name)| (name.to_string(), (b[i][c] - a[i][c]) / span_s)).collect()
                    }
                    _ => BTreeMap::new(),
                };
                VmSummary::of(g, &s.report.columns, counters, rates)
            })
            .collect();
        let datastores = self.world.datastores.iter().map(|d| DatastoreSummary::of(&d.name, &d.device)).collect();
        let mib = |frames: u64| frames as f64 * PAGE_SIZE as f64 / 1048576.0;
        let cpus = self.world.host.pcpus.as_ref().map(|p| (p.cpus(), p.busy_ns(self.world.now)));
        RunSummary {
            scenario: s.name.clone(),
            variant: s.variant.clone(),
            seed: s.seed,
            sim_time_s: now as f64 / 1e9,
            end_reason: self.finished.clone(),
            report_window_s: [wstart as f64 / 1e9, wend as f64 / 1e9],
            report_columns: s.report.columns.clone(),
            host: HostSummary {
                memory_mib: mib(self.world.host.total_frames()),
                free_mib: mib(self.world.host.free_frames()),
                // The policy that decided: a Python one given to the run stands in for the scenario's.
                policy: self.controller.policy_name().to_string(),
                cpus: cpus.map(|(n, _)| n),
                cpu_busy_s: cpus.map(|(_, busy)| busy as f64 / 1e9),
                cpu_utilisation_percent: cpus.map(|(n, busy)| 100.0 * busy as f64 / (n as f64 * self.world.now.max(1) as f64)),
                dom0_cpu_s: self.world.host.blkback.as_ref().and(self.world.host.pcpus.as_ref()).map(|p| p.dom0_ns() as f64 / 1e9),
                blkback_requests: self.world.host.blkback.as_ref().map(|b| b.requests),
                tmem: self.world.host.tmem().map(|t| TmemSummary::of(t, |c| self.world.guests[c as usize].cfg.name.clone())),
            },
            vms,
            datastores,
            decisions: self.controller.log().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest taking its own next events (`guest::Horizon`) is the engine loop done in place:
    /// the same runs give the same results, bit for bit, with and without it.
    #[test]
    fn guests_taking_their_own_events_change_nothing() {
        let stress = crate::scenario::case_text("paging-stress").unwrap();
        let cases = [
            // Several processes and vCPUs, kswapd and writeback, a policy and samples.
            (
                stress,
                vec![
                    "vm.kali.workload.stress.instances=5".to_string(),
                    "vm.kali.workload.write-1GiB.start=5s".to_string(),
                    "duration=12s".to_string(),
                ],
            ),
            // One process faulting alone: the events its faults make are nearly all its own.
            (
                stress,
                vec!["vm.kali.workload.stress.instances=1".to_string(), "vm.kali.memory=256MiB".to_string(), "duration=12s".to_string()],
            ),
            // Host reclaim: balloon, host swap and their invalidations while guests page.
            (crate::scenario::case_text("nfs-balloon").unwrap(), vec!["vm.big.reservation=3GiB".to_string(), "duration=90s".to_string()]),
        ];
        for (text, sets) in cases {
            let s = crate::scenario::load(text, "x", &sets).unwrap().remove(0);
            let run = |engine_only: bool| {
                let mut sim = Simulation::new(&s).unwrap();
                sim.vm_host().engine_only = engine_only;
                sim.run().unwrap();
                let r = sim.results();
                (r.summary.to_json(), r.series.bits(), r.decisions.len(), sim.now())
            };
            let (a, b) = (run(false), run(true));
            assert!(a.0.contains("pswpin"));
            assert_eq!(a, b, "{sets:?}");
        }
    }

    /// A request through dom0's backend reaches the disk after dom0's issuing half, and the guest
    /// learns of its completion after the completing half: each on dom0's CPU, the two adding up
    /// to the cost of its ring requests.
    #[test]
    fn a_request_through_dom0_waits_for_its_cpu_both_ways() {
        use crate::clock::{Event, GuestEvent};
        use crate::devices::{Device, DeviceKind};
        let text = "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\nprofile = \"xen\"\ncpus = 1\ndom0_vcpus = 1\n\
                    [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n[[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
                    workload = { kind = \"idle\", footprint = \"16MiB\" }\n[costs]\nblkback_request = \"40001ns\"\n";
        let s = crate::scenario::load(text, "x", &[]).unwrap().remove(0);
        let mut sim = Simulation::new(&s).unwrap();
        let w = &mut sim.vm_host().world;
        // 12 pages: two ring requests of at most 11, 80,002 ns of dom0's CPU, 40,001 each way.
        w.split(0).1.disk_io(0, 0, 0, 1 << 20, 12, false, 7);
        let disk = Device::new(DeviceKind::Ssd.defaults()).submit(40_001, 1 << 20, 12 * 4096, false);
        let find = |w: &mut crate::backend::SimulatedHost, want: &dyn Fn(&Event) -> bool| loop {
            let (t, e) = w.events.pop().expect("the event comes");
            if want(&e) {
                return (t, e);
            }
        };
        let (t, e) = find(w, &|e| matches!(e, Event::BlkbackDone { .. }));
        assert_eq!((t, e), (disk, Event::BlkbackDone { guest: 0, bio: 7, requests: 2 }), "at the disk's completion");
        w.now = t;
        w.handle_host(e).unwrap();
        let (t, _) = find(w, &|e| matches!(e, Event::Guest { guest: 0, ev: GuestEvent::IoDone { bio: 7 } }));
        assert_eq!(t, disk + 40_001, "the guest learns of it after dom0's completing half");
        assert_eq!(w.host.pcpus.as_ref().unwrap().dom0_ns(), 80_002);
    }

    /// A run without a duration whose workload would go on past the longest run ends there, said
    /// so, rather than running its clock on towards wrapping.
    #[test]
    fn a_run_without_a_duration_stops_at_the_longest_run() {
        let text = crate::scenario::case_text("paging-stress").unwrap();
        let s = crate::scenario::load(text, "x", &["vm.kali.workload.stress.instances=1".to_string()]).unwrap().remove(0);
        assert_eq!(s.duration_ns, None);
        let mut sim = Simulation::new(&s).unwrap();
        sim.vm_host().longest_ns = 3_000_000_000;
        sim.run().unwrap();
        let r = sim.results();
        assert_eq!(sim.now(), 3_000_000_000);
        assert_eq!(r.summary.end_reason.as_deref(), Some("100 years reached, the longest a run may be (no duration was given)"));
    }
}
