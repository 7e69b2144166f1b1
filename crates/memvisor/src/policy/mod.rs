//! Policies: pure decisions. A policy reads a [`HostView`] (what a real host can measure) and
//! returns [`Decision`]s, each with the reason a human can read. It never touches mechanism
//! internals, so the same policy object can drive the simulated host or a live one.

mod dmc;
mod esx;
mod esx_states;
mod mom;
mod pressure;
mod proxmox;
mod static_partition;
mod xen_selfballoon;

pub use dmc::Dmc;
pub use esx::Esx;
pub use esx_states::{StateTable, TABLES as ESX_STATE_TABLES, state_names as memory_state_names};
pub use mom::Mom;
pub use pressure::Pressure;
pub use proxmox::Proxmox;
pub use static_partition::Static;
pub use xen_selfballoon::{XenSelfballoon, floor_pages};

/// A VM's stable identity: given at power-on, never reused, kept when other VMs come and go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmId(pub u32);

/// What a policy may know about one VM: what a live host can also measure (DESIGN.md 9), and, as
/// `Option`s that a live host leaves `None`, a few figures only the simulator knows.
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// Memory the guest could use without swapping, bytes (MemAvailable; virtio
    /// `stat-available-memory`; on Windows, Available).
    pub guest_available: u64,
    /// Cumulative pages the guest swapped in and out (virtio-balloon stats).
    pub swap_in: u64,
    /// Cumulative pages swapped out.
    pub swap_out: u64,
    /// Cumulative major faults.
    pub major_faults: u64,
    /// Cumulative time the guest's tasks were stalled on memory, ns (the guest's own PSI memory
    /// "some" total): the simulator knows it; a live host does not (no guest agent reports it),
    /// and a policy falls back on the guest's swap-ins and major faults.
    pub memory_stall_ns: Option<u64>,
    /// Cumulative time the VM waited on the host's memory, ns (host swap-ins, host reclaim): the
    /// PSI "some" total of the VM's cgroup on a cgroup v2 host; `None` where the host cannot say.
    pub host_stall_ns: Option<u64>,
    /// Guest Committed_AS, bytes.
    pub committed: u64,
    /// The guest's `totalreserve_pages` in bytes (its zones' high watermarks plus lowmem
    /// reserves): what it keeps free, which its own self-ballooning driver adds to Committed_AS.
    /// The simulator knows it; a live host cannot see it (no guest agent reports it).
    pub guest_reserve: Option<u64>,
    /// What the guest holds in frontswap, bytes (`frontswap_curr_pages`), where it runs frontswap:
    /// the simulator knows it; a live host cannot see it.
    pub frontswap: Option<u64>,
    /// The guest's self-ballooning driver shrinks frontswap (`frontswap_selfshrinking`, off when
    /// booted with `noselfshrink`).
    pub frontswap_selfshrink: bool,
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
    /// Guest memory backed with 2 MiB host pages, bytes (ESX with a hardware MMU; on KVM, the
    /// AnonHugePages of QEMU's smaps_rollup): none of it shares until broken.
    pub large_pages: u64,
}

/// The host's same-page merging (KSM; ESX TPS) as a policy can see and set it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharingView {
    /// Whether the scanner runs (/sys/kernel/mm/ksm/run).
    pub run: bool,
    /// Pages scanned per wake-up (pages_to_scan).
    pub pages_to_scan: u64,
    /// Sleep between wake-ups, ms (sleep_millisecs).
    pub sleep_ms: u64,
    /// Shared pages in use (pages_shared).
    pub pages_shared: u64,
    /// Further mappings of the shared pages, i.e. the memory saved (pages_sharing).
    pub pages_sharing: u64,
}

/// What a policy sees.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostView {
    /// Time of the observation, ns since start.
    pub time_ns: u64,
    /// Host machine memory, bytes.
    pub host_memory: u64,
    /// Host free memory, bytes.
    pub host_free: u64,
    /// Memory the host could give without swapping, bytes (/proc/meminfo MemAvailable; the
    /// simulated host has no page cache, so its free memory).
    pub host_available: u64,
    /// Memory the hypervisor itself holds, bytes.
    pub hypervisor: u64,
    /// Same-page merging.
    pub sharing: SharingView,
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
    /// Same-page merging settings (host-wide; KSM run, pages_to_scan, sleep_millisecs).
    SetSharing {
        /// Whether the scanner runs.
        run: bool,
        /// Pages per wake-up.
        pages_to_scan: u64,
        /// Sleep between wake-ups, ms.
        sleep_ms: u64,
    },
    /// Break the VM's large pages (2 MiB host pages backing its memory), so its small pages can
    /// share; with `share_now`, also offer at once every page the sharing scanner has hashed (ESX
    /// 6.0's clear state). A KVM host splits huge pages by its own reclaim: no per-VM call.
    BreakLargePages {
        /// Whether to share what the scanner has hashed now rather than as it next reaches it.
        share_now: bool,
    },
    /// Bring the VM's frontswap pages back into guest memory until frontswap holds this much
    /// (`frontswap_shrink`, the self-ballooning driver's self-shrink inside the guest).
    ShrinkFrontswap {
        /// Bytes left in frontswap.
        bytes: u64,
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
    /// Why the last `decide` failed, for a policy that can fail (one written in Python); the
    /// controller ends the run with it. Built-in policies cannot fail.
    fn take_error(&mut self) -> Option<String> {
        None
    }
}

/// A scenario's `host.policy` of the form `python:MODULE:CLASS` names a policy written in Python
/// (`memvisor.Policy`), which the Python package builds and hands to the engine.
pub const EXTERNAL_PREFIX: &str = "python:";

/// Whether `name` is a well-formed external policy name: `python:MODULE:CLASS`, MODULE a dotted
/// Python module path and CLASS an identifier.
pub fn is_external(name: &str) -> bool {
    let ident =
        |s: &str| !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match name.strip_prefix(EXTERNAL_PREFIX).and_then(|r| r.split_once(':')) {
        Some((module, class)) => module.split('.').all(ident) && ident(class),
        None => false,
    }
}

/// Policy names a scenario may use.
pub const POLICY_NAMES: &[&str] = &["static", "esx", "mom", "proxmox", "pressure", "xen-selfballoon", "dmc"];

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

impl PolicySpec {
    /// The `esx` policy's state table unless told otherwise: ESX 3.x/4.0's (DESIGN.md section 4).
    pub const DEFAULT_ESX_STATES: &'static str = "esx3";
    /// The idle memory tax unless told otherwise, percent: ESX's `Mem.IdleTax` default, 75.
    pub const DEFAULT_IDLE_TAX_PERCENT: u64 = 75;

    /// A policy's settings by name, checked: the name one of [`POLICY_NAMES`], the ESX state
    /// table one of [`ESX_STATE_TABLES`], the idle tax in 0..1.
    pub fn named(name: &str, esx_states: &str, idle_tax: f64) -> Result<Self, String> {
        let name = POLICY_NAMES
            .iter()
            .find(|n| **n == name)
            .ok_or_else(|| format!("unknown policy '{name}' (policies: {})", POLICY_NAMES.join(", ")))?;
        let table = ESX_STATE_TABLES.iter().find(|t| t.name == esx_states).ok_or_else(|| {
            let names: Vec<&str> = ESX_STATE_TABLES.iter().map(|t| t.name).collect();
            format!("unknown esx_states '{esx_states}' (tables: {})", names.join(", "))
        })?;
        if !(0.0..1.0).contains(&idle_tax) {
            return Err(format!("idle_tax must be at least 0 and below 1, got {idle_tax}"));
        }
        Ok(Self { name: name.to_string(), esx_states: table.name, idle_tax })
    }
}

/// Builds a policy from its settings.
pub fn build(spec: &PolicySpec) -> Option<Box<dyn Policy>> {
    match spec.name.as_str() {
        "static" => Some(Box::new(Static)),
        "esx" => {
            let table = ESX_STATE_TABLES.iter().find(|t| t.name == spec.esx_states)?;
            Some(Box::new(Esx::new(table, spec.idle_tax)))
        }
        "mom" => Some(Box::new(Mom::default())),
        "proxmox" => Some(Box::new(Proxmox)),
        "pressure" => Some(Box::new(Pressure::default())),
        "xen-selfballoon" => Some(Box::new(XenSelfballoon::default())),
        "dmc" => Some(Box::new(Dmc::default())),
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
            Self::SetSharing { run: false, .. } => write!(f, "stop page sharing"),
            Self::SetSharing { run: true, pages_to_scan, sleep_ms } => {
                write!(f, "share pages: scan {pages_to_scan} pages every {sleep_ms} ms")
            }
            Self::BreakLargePages { share_now: false } => write!(f, "break large pages"),
            Self::BreakLargePages { share_now: true } => write!(f, "break large pages and share the hashed pages now"),
            Self::ShrinkFrontswap { bytes } => write!(f, "shrink frontswap to {}", crate::units::human_bytes(*bytes)),
            Self::SetMemoryState { state } => write!(f, "memory state {state}"),
        }
    }
}
