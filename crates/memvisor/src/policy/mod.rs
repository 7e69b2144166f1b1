//! Policies: pure decisions. A policy reads a [`HostView`] (what a real host can measure) and
//! returns [`Decision`]s, each with the reason a human can read. It never touches mechanism
//! internals, so the same policy object can drive the simulated host or a live one.

mod esx;
mod esx_states;
mod static_partition;

pub use esx::Esx;
pub use esx_states::{StateTable, TABLES as ESX_STATE_TABLES, min_free};
pub use static_partition::Static;

/// A VM's stable identity: given at power-on, never reused, kept when other VMs come and go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmId(pub u32);

/// What a policy may know about one VM: only what a live host can also measure (DESIGN.md 9).
#[derive(Clone, Debug, PartialEq)]
pub struct VmView {
    /// Stable identity; decisions name the VM by it.
    pub id: VmId,
    /// VM name.
    pub name: String,
    /// Configured guest memory, bytes.
    pub memory: u64,
    /// Reservation, bytes.
    pub reservation: u64,
    /// Limit, bytes.
    pub limit: u64,
    /// Shares.
    pub shares: u64,
    /// Memory the virtualization layer holds for the VM, bytes (ESX OVHD).
    pub overhead: u64,
    /// Machine memory backing the VM, bytes (esxtop GRANT; cgroup memory.current).
    pub granted: u64,
    /// Guest-reported total and free memory, bytes (virtio-balloon stats).
    pub guest_total: u64,
    /// Guest free memory, bytes.
    pub guest_free: u64,
    /// Cumulative pages the guest swapped in and out (virtio-balloon stats).
    pub swap_in: u64,
    /// Cumulative pages swapped out.
    pub swap_out: u64,
    /// Cumulative major faults.
    pub major_faults: u64,
    /// Cumulative time the guest's tasks were stalled on memory, ns (PSI memory "some" total).
    pub memory_stall_ns: u64,
    /// Guest Committed_AS, bytes.
    pub committed: u64,
    /// Pages in the balloon, bytes (MCTLSZ; virtio `actual`).
    pub balloon_size: u64,
    /// Balloon target, bytes (MCTLTGT).
    pub balloon_target: u64,
    /// Largest balloon the host allows, bytes (MCTLMAX).
    pub balloon_max: u64,
    /// Memory in the host's swap file, bytes (SWCUR).
    pub swapped: u64,
    /// Memory in the compression cache, bytes (uncompressed size).
    pub compressed: u64,
    /// Machine memory the compression cache occupies, bytes: part of what the VM consumes (ESX
    /// carves the cache out of the VM's own allocation).
    pub compression_cache: u64,
    /// Memory the host keeps compressed or swapped, bytes (SWTGT).
    pub swap_target: u64,
    /// Active-memory sampling, last complete period: (pages sampled, pages touched).
    pub active_sample: (u64, u64),
    /// Active-memory sampling, current period so far: (pages sampled, pages touched).
    pub active_sample_now: (u64, u64),
    /// Complete sampling periods so far.
    pub active_periods: u64,
}

/// What a policy sees.
#[derive(Clone, Debug, PartialEq)]
pub struct HostView {
    /// Time of the observation, ns since start.
    pub time_ns: u64,
    /// Host machine memory, bytes.
    pub host_memory: u64,
    /// Host free memory, bytes.
    pub host_free: u64,
    /// Memory the hypervisor itself holds, bytes.
    pub hypervisor: u64,
    /// One entry per VM, in power-on order.
    pub vms: Vec<VmView>,
}

impl HostView {
    /// The view of a VM by id.
    pub fn vm(&self, id: VmId) -> Option<&VmView> {
        self.vms.iter().find(|v| v.id == id)
    }
}

/// A change a policy asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Cap the machine memory granted to the VM (ESX limit; cgroup memory.max).
    SetGrantLimit {
        /// Bytes.
        bytes: u64,
    },
    /// Balloon size for the VM's driver to work toward (ESX MCTLTGT; QMP `balloon`, which takes
    /// the guest's size, i.e. memory less this).
    SetBalloonTarget {
        /// Bytes.
        bytes: u64,
    },
    /// Memory the host keeps compressed or swapped for the VM (ESX SWTGT).
    SetSwapTarget {
        /// Bytes.
        bytes: u64,
    },
    /// Stop (or resume) running the VM's vCPUs until memory is freed (ESX's low state).
    SetBlocked {
        /// Whether it is blocked.
        blocked: bool,
    },
    /// The host's memory state as the policy judges it (ESX high, soft, hard, low), for the record
    /// and the time series (host-wide).
    SetMemoryState {
        /// State name.
        state: &'static str,
    },
}

/// One decision with its reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The VM it is for; `None` for the host as a whole.
    pub vm: Option<VmId>,
    /// What to do.
    pub action: Action,
    /// Why, in words an operator can read.
    pub reason: String,
}

/// A memory policy.
pub trait Policy: Send + Sync {
    /// Name as written in scenarios.
    fn name(&self) -> &str;
    /// How often it runs; `None` runs it once, at start.
    fn period_ns(&self) -> Option<u64>;
    /// Decides from what it sees.
    fn decide(&mut self, view: &HostView) -> Vec<Decision>;
}

/// Policy names a scenario may use.
pub const POLICY_NAMES: &[&str] = &["static", "esx"];

/// A policy's settings from the scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    /// Policy name.
    pub name: String,
    /// `esx`: the free-memory state table.
    pub esx_states: &'static str,
    /// `esx`: the idle memory tax, 0..1 (`Mem.IdleTax`, 75 %).
    pub idle_tax: f64,
}

/// Builds a policy from its settings.
pub fn build(spec: &PolicySpec) -> Option<Box<dyn Policy>> {
    match spec.name.as_str() {
        "static" => Some(Box::new(Static)),
        "esx" => {
            let table = ESX_STATE_TABLES.iter().find(|t| t.name == spec.esx_states)?;
            Some(Box::new(Esx::new(table, spec.idle_tax)))
        }
        _ => None,
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Self::SetGrantLimit { bytes } => write!(f, "set grant limit {}", crate::units::human_bytes(*bytes)),
            Self::SetBalloonTarget { bytes } => write!(f, "set balloon target {}", crate::units::human_bytes(*bytes)),
            Self::SetSwapTarget { bytes } => write!(f, "set swap target {}", crate::units::human_bytes(*bytes)),
            Self::SetBlocked { blocked: true } => write!(f, "block"),
            Self::SetBlocked { blocked: false } => write!(f, "unblock"),
            Self::SetMemoryState { state } => write!(f, "memory state {state}"),
        }
    }
}
