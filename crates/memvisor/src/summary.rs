//! The summary of a finished run, as typed structures: what `summary.json` holds, and how a VM's,
//! a datastore's and the tmem pool's are read off the mechanisms. Numbers are in the units their
//! names say (`_s` seconds, `_MiB` mebibytes); counters keep their column names.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::guest::{Guest, ProcState, Process};
use crate::host::{ClientStats, GlobalStats, PoolStats, Tmem};

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Scenario name.
    pub scenario: String,
    /// Variant, if the scenario has variants.
    pub variant: Option<String>,
    /// Seed of every random stream.
    pub seed: u64,
    /// Simulated time reached, s.
    pub sim_time_s: f64,
    /// Why the run ended.
    pub end_reason: Option<String>,
    /// The window rates are computed over, s.
    pub report_window_s: [f64; 2],
    /// The report table's columns.
    pub report_columns: Vec<String>,
    /// The host.
    pub host: HostSummary,
    /// Every VM, in power-on order.
    pub vms: Vec<VmSummary>,
    /// Every datastore.
    pub datastores: Vec<DatastoreSummary>,
    /// Policy decisions logged.
    pub decisions: usize,
}

/// The host at the end of the run.
#[derive(Clone, Debug, Serialize)]
pub struct HostSummary {
    /// Machine memory.
    #[serde(rename = "memory_MiB")]
    pub memory_mib: f64,
    /// Free machine memory at the end.
    #[serde(rename = "free_MiB")]
    pub free_mib: f64,
    /// Policy name.
    pub policy: String,
    /// Physical CPUs the vCPUs shared (`host.cpus`), if modelled.
    pub cpus: Option<u32>,
    /// CPU time the VMs' vCPUs and (where `host.dom0_vcpus` models it) dom0 used on them, s.
    pub cpu_busy_s: Option<f64>,
    /// That time over the CPUs' capacity during the run, percent.
    pub cpu_utilisation_percent: Option<f64>,
    /// dom0's part of that time, its block backend's, s, where modelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dom0_cpu_s: Option<f64>,
    /// Ring requests dom0's block backend handled (a guest request of n pages is ceil(n / 11)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blkback_requests: Option<u64>,
    /// Transcendent memory's counters at the end, on a host that has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmem: Option<TmemSummary>,
}

/// Transcendent memory at the end of the run, as `xl tmem-list -l` gives it: the host's counters,
/// each client's (guest's), and each pool's.
#[derive(Clone, Debug, Serialize)]
pub struct TmemSummary {
    /// Host-wide counters.
    pub host: GlobalStats,
    /// Each guest that is a client, in power-on order.
    pub clients: Vec<TmemClientSummary>,
    /// Each pool, in creation order.
    pub pools: Vec<TmemPoolSummary>,
}

/// One tmem client's counters.
#[derive(Clone, Debug, Serialize)]
pub struct TmemClientSummary {
    /// The guest.
    pub vm: String,
    /// Its counters.
    #[serde(flatten)]
    pub stats: ClientStats,
}

/// One tmem pool's counters.
#[derive(Clone, Debug, Serialize)]
pub struct TmemPoolSummary {
    /// The guest that created it.
    pub vm: String,
    /// Its kind, as `xl tmem-list` codes it: EP (private ephemeral: cleancache), ES (shared
    /// ephemeral), PP (private persistent: frontswap).
    pub kind: &'static str,
    /// Its counters.
    #[serde(flatten)]
    pub stats: PoolStats,
}

impl TmemSummary {
    /// The counters of `t`, guests named by `name`.
    pub fn of(t: &Tmem, name: impl Fn(u32) -> String) -> Self {
        let pools: Vec<TmemPoolSummary> =
            t.pools().iter().map(|p| TmemPoolSummary { vm: name(p.client), kind: p.kind.code(), stats: p.stats.clone() }).collect();
        let mut clients: Vec<u32> = t.pools().iter().map(|p| p.client).collect();
        clients.sort_unstable();
        clients.dedup();
        Self {
            host: t.stats.clone(),
            clients: clients.into_iter().map(|c| TmemClientSummary { vm: name(c), stats: t.client(c).clone() }).collect(),
            pools,
        }
    }
}

/// One VM.
#[derive(Clone, Debug, Serialize)]
pub struct VmSummary {
    /// VM name.
    pub name: String,
    /// The report row: each report column's value (`None` when it does not apply).
    pub report: BTreeMap<String, Option<f64>>,
    /// From the first start to the last end of the VM's finite workloads, s.
    pub runtime_s: Option<f64>,
    /// Workload phases ("write", "read", ...) and their durations, s.
    pub phases_s: BTreeMap<String, f64>,
    /// Every counter and gauge at the end of the run.
    pub counters: BTreeMap<String, f64>,
    /// Every counter's rate over the report window, per second.
    pub rates_per_s: BTreeMap<String, f64>,
    /// Every process.
    pub processes: Vec<ProcessSummary>,
    /// Notable guest events (OOM kills).
    pub log: Vec<LogLine>,
}

impl VmSummary {
    /// VM `g`'s summary from its final `counters` and its `rates` over the report window; its
    /// report row gives each of `columns`.
    pub(crate) fn of(g: &Guest, columns: &[String], counters: BTreeMap<String, f64>, rates: BTreeMap<String, f64>) -> Self {
        let phases = phases(g);
        let runtime = runtime(g);
        let report = columns
            .iter()
            .map(|c| {
                let phase_rate = c.strip_suffix("_KiB/s").and_then(|p| {
                    let bytes = g.cfg.workloads.iter().find_map(|w| w.spec.phase_bytes(p))?;
                    phases.get(p).filter(|&&t| t > 0.0).map(|t| bytes as f64 / 1024.0 / t)
                });
                let v = if phase_rate.is_some() {
                    phase_rate
                } else if let Some(base) = c.strip_suffix("/s") {
                    rates.get(base).copied()
                } else if c == "runtime_s" {
                    runtime
                } else if let Some(ph) = c.strip_suffix("_s").and_then(|p| phases.get(p)) {
                    Some(*ph)
                } else {
                    counters.get(c).copied()
                };
                (c.clone(), v)
            })
            .collect();
        Self {
            name: g.cfg.name.clone(),
            report,
            runtime_s: runtime,
            phases_s: phases,
            counters,
            rates_per_s: rates,
            processes: g.procs.iter().map(|p| ProcessSummary::of(g, p)).collect(),
            log: g.log.iter().map(|(t, m)| LogLine { time_s: *t as f64 / 1e9, message: m.clone() }).collect(),
        }
    }
}

/// One process of a VM.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    /// Process name.
    pub name: String,
    /// The workload it runs.
    pub workload: String,
    /// "not started", "running", "exited" or "killed".
    pub state: &'static str,
    /// When it started, s.
    pub start_s: f64,
    /// When it ended, s.
    pub end_s: Option<f64>,
    /// Page references performed.
    pub touches: u64,
    /// Minor faults.
    pub minflt: u64,
    /// Major faults.
    pub majflt: u64,
    /// Time blocked on memory, s.
    pub stall_s: f64,
    /// Time blocked on file I/O it asked for, s.
    pub io_wait_s: f64,
    /// Named instants the workload recorded, s.
    pub marks_s: BTreeMap<String, f64>,
}

/// A timed message.
#[derive(Clone, Debug, Serialize)]
pub struct LogLine {
    /// When, s.
    pub time_s: f64,
    /// What.
    pub message: String,
}

/// One datastore's device.
#[derive(Clone, Debug, Serialize)]
pub struct DatastoreSummary {
    /// Datastore name.
    pub name: String,
    /// Device kind.
    pub device: &'static str,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Data read.
    #[serde(rename = "read_MiB")]
    pub read_mib: f64,
    /// Data written.
    #[serde(rename = "written_MiB")]
    pub written_mib: f64,
    /// Time the data path was transferring, s.
    pub busy_s: f64,
    /// Time with a request at the device, s (iostat's `%util` is this over the run's length; a
    /// disk's seeks count).
    pub active_s: f64,
    /// Time requests spent queued, summed over requests, s.
    pub queue_wait_s: f64,
    /// Reads the file server behind an NFS datastore fetched from its disks.
    pub server_disk_reads: u64,
    /// Time those reads waited for the server's disks, summed, s.
    pub server_disk_wait_s: f64,
}

impl DatastoreSummary {
    /// The datastore `name` on `device`, from the device's counters.
    pub fn of(name: &str, device: &crate::devices::Device) -> Self {
        let st = device.stats();
        Self {
            name: name.to_string(),
            device: device.spec().kind.name(),
            reads: st.reads,
            writes: st.writes,
            read_mib: st.bytes_read as f64 / 1048576.0,
            written_mib: st.bytes_written as f64 / 1048576.0,
            busy_s: st.busy_ns as f64 / 1e9,
            active_s: st.active_ns as f64 / 1e9,
            queue_wait_s: st.queue_wait_ns as f64 / 1e9,
            server_disk_reads: st.server_disk_reads,
            server_disk_wait_s: st.server_disk_wait_ns as f64 / 1e9,
        }
    }
}

impl RunSummary {
    /// The summary as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a summary serializes")
    }
}

impl ProcessSummary {
    /// Process `p` of guest `g` as the run leaves it.
    fn of(g: &Guest, p: &Process) -> Self {
        let st = &p.stats;
        Self {
            name: p.name.clone(),
            workload: g.cfg.workloads[p.workload_index].name.clone(),
            state: match p.state {
                ProcState::New => "not started",
                ProcState::Exited => "exited",
                ProcState::Killed => "killed",
                _ => "running",
            },
            start_s: st.start_ns as f64 / 1e9,
            end_s: p.ended().then(|| st.end_ns as f64 / 1e9),
            touches: st.touches,
            minflt: st.minflt,
            majflt: st.majflt,
            stall_s: st.stall_ns as f64 / 1e9,
            io_wait_s: st.io_wait_ns as f64 / 1e9,
            marks_s: p.marks.iter().map(|(l, t)| (l.clone(), *t as f64 / 1e9)).collect(),
        }
    }
}

/// Phase durations from "<phase>-start" / "<phase>-end" marks (first process that has both).
fn phases(g: &Guest) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for p in &g.procs {
        for (label, t0) in &p.marks {
            let Some(phase) = label.strip_suffix("-start") else { continue };
            let end = format!("{phase}-end");
            if let Some((_, t1)) = p.marks.iter().find(|(l, _)| *l == end) {
                out.entry(phase.to_string()).or_insert((t1 - t0) as f64 / 1e9);
            }
        }
    }
    out
}

/// From the first start to the last end of the VM's finite workloads, seconds; none if one has not
/// ended, or was killed (its work was never done, so its end is no runtime).
fn runtime(g: &Guest) -> Option<f64> {
    let finite: Vec<_> = g.procs.iter().filter(|p| g.cfg.workloads[p.workload_index].spec.is_finite()).collect();
    if finite.is_empty() || finite.iter().any(|p| !p.ended() || p.state == ProcState::Killed) {
        return None;
    }
    let start = finite.iter().map(|p| p.stats.start_ns).min()?;
    let end = finite.iter().map(|p| p.stats.end_ns).max()?;
    Some((end - start) as f64 / 1e9)
}
