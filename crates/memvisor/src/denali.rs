//! The simulated Denali host (the `denali` profile; seed 004): an isolation kernel on one CPU
//! that pages whole VMs (`host::Pager`), Ilwaco guests running web servers (`guest::ilwaco`), and
//! the clients that load them. Its own engine, not a backend: the isolation kernel decides what
//! to page by itself and runs no policy, so there is nothing for the controller to drive. Built for scale: a VM that has never been asked anything costs the
//! simulator a few dozen bytes, and nothing that happens each tick walks every VM.
//!
//! The host's memory for guest pages is what is left after its per-VM kernel metadata, an input
//! (Denali's 8,472 bytes per VM, seed 004 table 2), which the host holds pinned.

use crate::clock::EventQueue;
use crate::devices::Device;
use crate::guest::ilwaco::{Layout, Vm, Wake, WebStats};
use crate::host::Pager;
use crate::metrics::TimeSeries;
use crate::metrics::denali::{COLUMNS, ROW_VMS};
use crate::rng::{self, Rng};
use crate::scenario::Scenario;
use crate::summary::{DatastoreSummary, HostSummary, RunSummary, VmSummary};
use crate::units::PAGE_SIZE;
use crate::workloads::{Closer, Load, WebServer, WorkloadSpec, zipf_cdf, zipf_pick};
use rand::Rng as _;

#[derive(Clone, Copy, Debug)]
enum Ev {
    Run {
        vm: u32,
    },
    Arrive {
        vm: u32,
    },
    Send {
        client: u32,
    },
    Ack {
        vm: u32,
        slot: u32,
    },
    /// The connection whose header template is `template` ends (`tcp_close`).
    Close {
        vm: u32,
        template: u32,
    },
    Sample,
    Window,
}

/// The Denali machine and its run.
pub struct DenaliHost {
    pager: Pager,
    vms: Vec<Vm>,
    /// Each VM's server configuration, as an index into `servers` (`u16::MAX`: none, idle).
    server_of: Vec<u16>,
    servers: Vec<(WebServer, Layout)>,
    /// VMs loaded by the closed-loop clients, in popularity order, and their Zipf CDF.
    closed_vms: Vec<u32>,
    zipf: Vec<f64>,
    think_ns: u64,
    events: EventQueue<Ev>,
    rng: Rng,
    cpu_free: u64,
    now: u64,
    end: u64,
    window: (u64, Option<u64>),
    /// Latencies of requests answered inside the report window, us.
    latencies: Vec<u32>,
    /// Requests served and pages read in at the report window's start and end: all VMs', then
    /// each row VM's (`row_vms`).
    at_window: Option<Vec<(u64, u64)>>,
    at_window_end: Option<Vec<(u64, u64)>>,
    metadata_bytes: u64,
    /// Every VM's counters added up as they change (no tick walks the VMs).
    total: WebStats,
    sample_interval_ns: u64,
    series: TimeSeries,
    finished: Option<String>,
    /// Names of the VMs with rows of their own (`row_vms`).
    row_names: Vec<String>,
    /// Events handled (for the simulator's own speed).
    handled: u64,
}

fn drop_retry_ns() -> u64 {
    // A refused connection is tried again after TCP's initial retransmission timeout, 3 s
    // (RFC 1122 4.2.3.1; FreeBSD TCPTV_SRTTDFLT).
    3_000_000_000
}

impl DenaliHost {
    /// Builds the host of a `denali`-profile scenario.
    pub fn new(s: &Scenario) -> Result<Self, String> {
        let n = s.vms.len() as u64;
        let metadata_bytes = s.host.vm_metadata;
        let pinned = n.checked_mul(metadata_bytes).and_then(|m| m.checked_add(s.host.hypervisor)).unwrap_or(u64::MAX);
        // The pager needs at least one frame to page through.
        if pinned.saturating_add(PAGE_SIZE) > s.host.memory {
            return Err(format!(
                "host.memory: {} VMs need {} of kernel metadata ({} B each) and the kernel {}, leaving less than one page of the host's {} for their pages",
                n,
                crate::units::human_bytes(n.saturating_mul(metadata_bytes)),
                metadata_bytes,
                crate::units::human_bytes(s.host.hypervisor),
                crate::units::human_bytes(s.host.memory)
            ));
        }
        let frames = u32::try_from((s.host.memory - pinned) / PAGE_SIZE).map_err(|_| {
            format!(
                "host.memory: a denali host pages at most 16 TiB (its frames are numbered in 32 bits); {} is left after the metadata",
                crate::units::human_bytes(s.host.memory - pinned)
            )
        })?;
        let swap = s.datastores.first().ok_or("a denali host needs a datastore for its VMs' swap regions")?;
        let mut pager = Pager::new(frames, Device::new(swap.device.clone()));
        let mut servers: Vec<(WebServer, Layout)> = Vec::new();
        let mut server_of = Vec::with_capacity(s.vms.len());
        let mut closed_vms = Vec::new();
        let mut closed: Option<(u32, u64, f64)> = None;
        let mut events = EventQueue::new();
        let mut rng = rng::stream(s.seed, &[rng::DENALI_STREAM]);
        for (i, v) in s.vms.iter().enumerate() {
            pager.add_vm(v.guest.memory_pages);
            let web = v.guest.workloads.iter().find_map(|w| match &w.spec {
                WorkloadSpec::WebServer(ws) => Some((ws, w.start_ns)),
                _ => None,
            });
            let Some((ws, start)) = web else {
                server_of.push(u16::MAX);
                continue;
            };
            let k = match servers.iter().position(|(x, _)| x == ws) {
                Some(k) => k,
                None => {
                    let l = Layout::of(ws);
                    if l.end > v.guest.memory_pages {
                        return Err(format!(
                            "vm.{}: its web server needs {} pages (code path, stack, document, mbuf and cluster pools), the VM has {}",
                            v.guest.name, l.end, v.guest.memory_pages
                        ));
                    }
                    servers.push((*ws, l));
                    servers.len() - 1
                }
            };
            server_of.push(k as u16);
            match ws.load {
                Load::Open { rate } => events.push(start + exp_ns(&mut rng, 1e9 / rate), Ev::Arrive { vm: i as u32 }),
                Load::Closed { clients, think_ns, zipf } => {
                    if closed.is_some_and(|c| c != (clients, think_ns, zipf)) {
                        return Err(format!(
                            "vm.{}: every web server the closed-loop clients load must give the same clients, think and zipf",
                            v.guest.name
                        ));
                    }
                    closed = Some((clients, think_ns, zipf));
                    closed_vms.push(i as u32);
                }
            }
        }
        if servers.len() >= u16::MAX as usize {
            return Err("more than 65,534 distinct web-server configurations".into());
        }
        let (zipf, think_ns) = match closed {
            Some((clients, think_ns, z)) => {
                for c in 0..clients {
                    // Clients start spread over one think time, not all at once.
                    events.push(rng.random_range(0..think_ns.max(1)), Ev::Send { client: c });
                }
                (zipf_cdf(closed_vms.len(), z), think_ns)
            }
            None => (Vec::new(), 0),
        };
        events.push(0, Ev::Sample);
        events.push(s.report.window_ns.0, Ev::Window);
        if let Some(e) = s.report.window_ns.1 {
            events.push(e, Ev::Window);
        }
        let mut host = Self {
            pager,
            vms: vec![Vm::default(); s.vms.len()],
            server_of,
            servers,
            closed_vms,
            zipf,
            think_ns,
            events,
            rng,
            cpu_free: 0,
            now: 0,
            end: s.duration_ns.ok_or("a denali run needs a duration (its clients never finish)")?,
            window: s.report.window_ns,
            latencies: Vec::new(),
            at_window: None,
            at_window_end: None,
            metadata_bytes,
            total: WebStats::default(),
            sample_interval_ns: s.host.sample_interval_ns,
            series: TimeSeries { columns: COLUMNS.to_vec(), ..Default::default() },
            finished: None,
            row_names: Vec::new(),
            handled: 0,
        };
        host.row_names = host.row_vms().into_iter().map(|i| s.vms[i as usize].guest.name.clone()).collect();
        Ok(host)
    }

    /// Simulated time reached.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Whether the run has ended.
    pub fn is_finished(&self) -> bool {
        self.finished.is_some()
    }

    /// The pager.
    pub fn pager(&self) -> &Pager {
        &self.pager
    }

    /// VM `i`.
    pub fn vm(&self, i: usize) -> &Vm {
        &self.vms[i]
    }

    /// Runs until `until` or the end; returns whether the run has ended.
    pub fn run_until(&mut self, until: u64) -> Result<bool, String> {
        while self.finished.is_none() {
            let Some(t) = self.events.peek_time() else {
                self.finish(self.now, "nothing left to simulate");
                break;
            };
            if t >= self.end {
                self.finish(self.end, "duration reached");
                break;
            }
            if t > until {
                break;
            }
            let (now, ev) = self.events.pop().expect("peeked");
            self.now = now;
            self.handled += 1;
            self.handle(now, ev);
        }
        Ok(self.finished.is_some())
    }

    fn server(&self, vm: u32) -> (WebServer, Layout) {
        self.servers[self.server_of[vm as usize] as usize]
    }

    fn handle(&mut self, now: u64, ev: Ev) {
        let vm = match ev {
            Ev::Run { vm } | Ev::Arrive { vm } | Ev::Ack { vm, .. } | Ev::Close { vm, .. } => Some(vm),
            // The client's request goes to a VM drawn by popularity.
            Ev::Send { .. } => Some(self.closed_vms[zipf_pick(&self.zipf, self.rng.random::<f64>())]),
            Ev::Sample | Ev::Window => None,
        };
        let before = vm.map(|v| self.vms[v as usize].stats.clone());
        self.act(now, ev, vm.unwrap_or_default());
        if let (Some(v), Some(a)) = (vm, before) {
            let b = &self.vms[v as usize].stats;
            let t = &mut self.total;
            t.served += b.served - a.served;
            t.dropped += b.dropped - a.dropped;
            t.latency_ns += b.latency_ns - a.latency_ns;
            t.footprint_pages += b.footprint_pages - a.footprint_pages;
            t.footprint_windows += b.footprint_windows - a.footprint_windows;
            t.paging_wait_ns += b.paging_wait_ns - a.paging_wait_ns;
        }
    }

    /// Handles one event; `to` is the VM a client's request goes to.
    fn act(&mut self, now: u64, ev: Ev, to: u32) {
        match ev {
            Ev::Run { vm } => self.run_vm(now, vm),
            Ev::Arrive { vm } => {
                let (w, l) = self.server(vm);
                if self.vms[vm as usize].arrive(now, None, &w, &l) == Some(true) {
                    self.events.push(now, Ev::Run { vm });
                }
                if let Load::Open { rate } = w.load {
                    let next = now + exp_ns(&mut self.rng, 1e9 / rate);
                    self.events.push(next, Ev::Arrive { vm });
                }
            }
            Ev::Send { client } => {
                let vm = to;
                let (w, l) = self.server(vm);
                match self.vms[vm as usize].arrive(now, Some(client), &w, &l) {
                    Some(true) => self.events.push(now, Ev::Run { vm }),
                    Some(false) => {}
                    None => self.events.push(now + drop_retry_ns(), Ev::Send { client }),
                }
            }
            Ev::Ack { vm, slot } => {
                let (template, start) = self.vms[vm as usize].ack(slot);
                if start {
                    self.events.push(now, Ev::Run { vm });
                }
                let w = self.server(vm).0;
                let end = match w.closer {
                    // The client's FIN comes with its acknowledgement; the server's FIN is
                    // acknowledged a round trip later and LAST_ACK ends.
                    Closer::Client => exp_ns(&mut self.rng, w.rtt_ns as f64),
                    // The server closed first: TIME_WAIT, 2 MSL (tcp_input, TCPT_2MSL).
                    Closer::Server => 2 * w.msl_ns,
                };
                self.events.push(now + end, Ev::Close { vm, template });
            }
            Ev::Close { vm, template } => {
                if self.vms[vm as usize].close(template) {
                    self.events.push(now, Ev::Run { vm });
                }
            }
            Ev::Sample => {
                self.sample(now);
                self.events.push(now + self.sample_interval_ns, Ev::Sample);
            }
            Ev::Window => {
                let mark = self.window_mark();
                if self.at_window.is_none() { self.at_window = Some(mark) } else { self.at_window_end = Some(mark) }
            }
        }
    }

    fn run_vm(&mut self, now: u64, vm: u32) {
        let server = self.server(vm);
        let rtt = exp_ns(&mut self.rng, server.0.rtt_ns as f64);
        let before = self.vms[vm as usize].stats.latency_ns;
        match self.vms[vm as usize].run(now, vm, &server, &mut self.pager, &mut self.cpu_free, rtt) {
            Wake::Run(t) => self.events.push(t, Ev::Run { vm }),
            Wake::Idle => {}
            Wake::Answered { ack_at, slot, client } => {
                self.events.push(ack_at, Ev::Ack { vm, slot });
                if let Some(c) = client {
                    self.events.push(now + self.think_ns, Ev::Send { client: c });
                }
                if now >= self.window.0 && self.window.1.is_none_or(|e| now < e) {
                    let lat = self.vms[vm as usize].stats.latency_ns - before;
                    self.latencies.push((lat / 1000).min(u32::MAX as u64) as u32);
                }
                if self.vms[vm as usize].has_work() {
                    self.events.push(now, Ev::Run { vm });
                }
            }
        }
    }

    fn served(&self) -> u64 {
        self.total.served
    }

    /// Rows: every VM together, then the `ROW_VMS` most popular.
    fn row_vms(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.closed_vms.iter().copied().take(ROW_VMS).collect();
        if v.is_empty() {
            v = (0..self.vms.len().min(ROW_VMS) as u32).collect();
        }
        v
    }

    fn row(&self, vm: Option<u32>) -> Vec<f64> {
        let kib = |pages: u64| (pages * PAGE_SIZE / 1024) as f64;
        match vm {
            Some(i) => {
                let (s, p) = (&self.vms[i as usize].stats, self.pager.vm(i));
                vec![
                    s.served as f64,
                    s.dropped as f64,
                    if s.served > 0 { s.latency_ns as f64 / s.served as f64 / 1e6 } else { 0.0 },
                    s.last_footprint as f64,
                    kib(p.resident() as u64),
                    p.page_ins as f64,
                    p.page_outs as f64,
                    s.paging_wait_ns as f64 / 1e6,
                    (p.resident() > 0) as u8 as f64,
                ]
            }
            None => {
                let (st, t) = (&self.pager.stats, &self.total);
                vec![
                    t.served as f64,
                    t.dropped as f64,
                    if t.served > 0 { t.latency_ns as f64 / t.served as f64 / 1e6 } else { 0.0 },
                    if t.footprint_windows > 0 { t.footprint_pages as f64 / t.footprint_windows as f64 } else { 0.0 },
                    kib((self.pager.frames() - self.pager.free_frames()) as u64),
                    st.page_ins as f64,
                    st.page_outs as f64,
                    t.paging_wait_ns as f64 / 1e6,
                    self.pager.resident_vms() as f64,
                ]
            }
        }
    }

    fn sample(&mut self, now: u64) {
        let rows: Vec<(String, Vec<f64>)> = std::iter::once(("all".to_string(), self.row(None)))
            .chain(self.row_vms().into_iter().zip(&self.row_names).map(|(i, n)| (n.clone(), self.row(Some(i)))))
            .collect();
        if self.series.values.is_empty() {
            self.series.values = vec![Vec::new(); COLUMNS.len()];
        }
        for (name, r) in rows {
            self.series.time_s.push(now as f64 / 1e9);
            self.series.vm.push(name);
            self.series.state.push("");
            for (c, x) in r.into_iter().enumerate() {
                self.series.values[c].push(x);
            }
        }
    }

    /// Requests served and pages read in so far: all VMs', then each row VM's.
    fn window_mark(&self) -> Vec<(u64, u64)> {
        std::iter::once((self.served(), self.pager.stats.page_ins))
            .chain(self.row_vms().into_iter().map(|i| (self.vms[i as usize].stats.served, self.pager.vm(i).page_ins)))
            .collect()
    }

    fn finish(&mut self, t: u64, why: &str) {
        self.now = t;
        self.sample(t);
        let mark = self.window_mark();
        self.at_window.get_or_insert_with(|| mark.clone());
        self.at_window_end.get_or_insert(mark);
        self.finished = Some(why.to_string());
    }

    /// Simulator bytes per VM that has never served (paged out since it was created): its guest
    /// record, its pager record and its server index.
    pub fn bytes_per_paged_out_vm(&self) -> f64 {
        let idle: Vec<usize> =
            (0..self.vms.len()).filter(|&i| !self.vms[i].is_serving() && self.pager.vm(i as u32).resident() == 0).collect();
        if idle.is_empty() {
            return 0.0;
        }
        let total: usize = idle.iter().map(|&i| self.vms[i].bytes() + self.pager.vm_bytes(i as u32) + 2).sum();
        total as f64 / idle.len() as f64
    }

    /// Checks the pager's and every serving VM's invariants, and that the running totals are
    /// the VMs' counters added up.
    pub fn check(&self) -> Result<(), String> {
        self.pager.check()?;
        for (i, v) in self.vms.iter().enumerate() {
            v.check().map_err(|e| format!("VM {i}: {e}"))?;
        }
        let served: u64 = self.vms.iter().map(|v| v.stats.served).sum();
        let dropped: u64 = self.vms.iter().map(|v| v.stats.dropped).sum();
        if (served, dropped) != (self.total.served, self.total.dropped) {
            return Err(format!(
                "denali: VMs served {served} and dropped {dropped} requests, the totals say {} and {}",
                self.total.served, self.total.dropped
            ));
        }
        let ins: u64 = (0..self.vms.len() as u32).map(|i| self.pager.vm(i).page_ins).sum();
        if ins != self.pager.stats.page_ins {
            return Err(format!("denali: VMs paged in {ins} pages, the pager counts {}", self.pager.stats.page_ins));
        }
        Ok(())
    }

    /// The time series.
    pub fn series(&self) -> &TimeSeries {
        &self.series
    }

    /// The run's summary; `s` is the scenario it was built from.
    pub fn summary(&self, s: &Scenario) -> RunSummary {
        let wstart = s.report.window_ns.0;
        let wend = s.report.window_ns.1.unwrap_or(self.now).min(self.now);
        let span = wend.saturating_sub(wstart) as f64 / 1e9;
        let (a, b) = (self.at_window.clone().unwrap_or_default(), self.at_window_end.clone().unwrap_or_default());
        // Served and read in over the window, per second: all VMs' (row 0) or a row VM's.
        let rate = |k: usize, f: fn(&(u64, u64)) -> u64| match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) if span > 0.0 => Some((f(y) - f(x)) as f64 / span),
            _ => None,
        };
        let mut lat = self.latencies.clone();
        lat.sort_unstable();
        let pct = |q: f64| lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1))).map(|&us| us as f64 / 1e3);
        let all = self.row(None);
        let value = |c: &str| -> Option<f64> {
            Some(match c {
                "requests_per_s" => return rate(0, |m| m.0),
                "page_ins_per_s" => return rate(0, |m| m.1),
                "latency_p50_ms" => return pct(0.50),
                "latency_p90_ms" => return pct(0.90),
                "latency_p99_ms" => return pct(0.99),
                "requests_served" => all[0],
                "requests_dropped" => all[1],
                "footprint_pages" => all[3],
                "resident_vms" => all[8],
                "vms" => self.vms.len() as f64,
                "metadata_MiB" => (self.vms.len() as u64 * self.metadata_bytes) as f64 / 1048576.0,
                "sim_bytes_per_paged_out_vm" => self.bytes_per_paged_out_vm(),
                "sim_events" => self.handled as f64,
                _ => return None,
            })
        };
        // A row: its report values and its counters; the VMM fields (runtimes, phases, processes)
        // have no meaning here.
        let row_summary = |name: String, report, r: &[f64]| VmSummary {
            name,
            report,
            runtime_s: None,
            phases_s: Default::default(),
            counters: COLUMNS.iter().zip(r).map(|(c, v)| (c.to_string(), *v)).collect(),
            rates_per_s: Default::default(),
            processes: Vec::new(),
            log: Vec::new(),
        };
        let mut vms = vec![row_summary("all".into(), s.report.columns.iter().map(|c| (c.clone(), value(c))).collect(), &all)];
        for (k, i) in self.row_vms().into_iter().enumerate() {
            let r = self.row(Some(i));
            let v = &self.vms[i as usize].stats;
            let report = s
                .report
                .columns
                .iter()
                .map(|c| {
                    let x = match c.as_str() {
                        "requests_served" => Some(r[0]),
                        "requests_dropped" => Some(r[1]),
                        "footprint_pages" if v.footprint_windows > 0 => Some(v.footprint_pages as f64 / v.footprint_windows as f64),
                        "requests_per_s" => rate(k + 1, |m| m.0),
                        "page_ins_per_s" => rate(k + 1, |m| m.1),
                        _ => None,
                    };
                    (c.clone(), x)
                })
                .collect();
            vms.push(row_summary(s.vms[i as usize].guest.name.clone(), report, &r));
        }
        RunSummary {
            scenario: s.name.clone(),
            variant: s.variant.clone(),
            seed: s.seed,
            sim_time_s: self.now as f64 / 1e9,
            end_reason: self.finished.clone(),
            report_window_s: [wstart as f64 / 1e9, wend as f64 / 1e9],
            report_columns: s.report.columns.clone(),
            host: HostSummary {
                memory_mib: s.host.memory as f64 / 1048576.0,
                free_mib: (self.pager.free_frames() as u64 * PAGE_SIZE) as f64 / 1048576.0,
                policy: s.host.policy.name.clone(),
                // The Denali host's one CPU is its own model (`cpu_free`), not `host.cpus`.
                cpus: None,
                cpu_busy_s: None,
                cpu_utilisation_percent: None,
                dom0_cpu_s: None,
                blkback_requests: None,
                tmem: None,
            },
            vms,
            datastores: vec![DatastoreSummary::of(&s.datastores[0].name, self.pager.swap_device())],
            decisions: 0,
        }
    }
}

/// An exponential draw with mean `mean_ns`, at least 1 ns.
fn exp_ns(r: &mut Rng, mean_ns: f64) -> u64 {
    let u: f64 = r.random::<f64>();
    ((-(1.0 - u).ln() * mean_ns) as u64).max(1)
}
