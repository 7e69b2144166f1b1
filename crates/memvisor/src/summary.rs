//! The summary of a finished run, as typed structures: what `summary.json` holds. Numbers are in
//! the units their names say (`_s` seconds, `_MiB` mebibytes); counters keep their column names.

use std::collections::BTreeMap;

use serde::Serialize;

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
    /// CPU time the VMs' vCPUs used on them, s (dom0's is not modelled).
    pub cpu_busy_s: Option<f64>,
    /// That time over the CPUs' capacity during the run, percent.
    pub cpu_utilisation_percent: Option<f64>,
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
