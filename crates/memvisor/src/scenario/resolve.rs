//! From the file's tables to a fully specified scenario: units parsed, defaults filled in (each
//! citing its source), cross-references and ranges checked.

use toml::Spanned;

use super::raw::{Qty, RawHost, RawScenario, RawVm, RawWorkload};
use super::{ScenarioError, Source};
use crate::devices::{DeviceKind, DeviceSpec};
use crate::guest::ilwaco::mbuf::PoolKind;
use crate::guest::{BalloonDriver, CgroupVersion, Costs, GuestConfig, Replacement, Sysctl, Thp, Watermarks};
use crate::host::ksm::KsmSettings;
use crate::host::{Content, HostCosts, HostKsm, HostProfile, PshareSettings, TmemSettings};
use crate::metrics::MAX_SERIES_ROWS;
use crate::policy::{ESX_STATE_TABLES, POLICY_NAMES, PolicySpec};
use crate::units::{self, PAGE_SIZE};
use crate::workloads::{
    Arch, Bonnie, Closer, Config, DotnetHeap, FileIo, Idle, KernelBuild, Load, Random, Stress, StressVm, TraceReplay, TreeShape, WebServer,
    WorkloadEntry, WorkloadSpec,
};

/// Host settings.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpec {
    /// Machine memory, bytes.
    pub memory: u64,
    /// The policy and its settings.
    pub policy: PolicySpec,
    /// The kind of hypervisor (its defaults).
    pub profile: HostProfile,
    /// Memory the hypervisor itself holds, bytes.
    pub hypervisor: u64,
    /// Whether the host can swap guest memory (a swap file per VM).
    pub swap: bool,
    /// Compression cache per VM, percent of its memory (0: none).
    pub zip_max_percent: u32,
    /// The compressor of the compression cache and of tmem.
    pub compressor: crate::content::Compressor,
    /// Largest balloon, percent of a VM's memory.
    pub balloon_max_percent: u32,
    /// Active-memory sampling period.
    pub sample_period_ns: u64,
    /// Pages sampled per VM per period.
    pub sample_pages: u32,
    /// Costs of the host's reclamation.
    pub costs: HostCosts,
    /// Counter sampling interval.
    pub sample_interval_ns: u64,
    /// How far a vCPU may account resident-page hits past the next event elsewhere (simulation
    /// accuracy, not a model parameter). Faults, I/O and every other step that touches shared state
    /// still happen in exact time order; only the timing of accessed bits is blurred by this much.
    pub lookahead_ns: u64,
    /// Transparent page sharing, if on.
    pub sharing: Option<PshareSettings>,
    /// Transcendent memory, if on.
    pub tmem: Option<TmemSettings>,
    /// Kernel memory the host keeps per VM, paged out or not, bytes (the `denali` profile's
    /// residual metadata).
    pub vm_metadata: u64,
    /// Physical CPUs the vCPUs share (`host.cpus`); `None`: as many as there are vCPUs.
    pub cpus: Option<u32>,
    /// dom0's vCPUs, which run its block backend on those CPUs (`host.dom0_vcpus`, Xen only);
    /// `None`: dom0's CPU is not modelled and guests' requests reach the disk directly.
    pub dom0_vcpus: Option<u32>,
}

impl HostSpec {
    /// The largest balloon of a VM of `memory_pages` pages, in pages (`balloon_max_percent`).
    pub fn balloon_max_pages(&self, memory_pages: u32) -> u64 {
        memory_pages as u64 * self.balloon_max_percent as u64 / 100
    }
}

/// A datastore.
#[derive(Clone, Debug, PartialEq)]
pub struct DatastoreSpec {
    /// Name.
    pub name: String,
    /// Its device.
    pub device: DeviceSpec,
}

/// A VM.
#[derive(Clone, Debug, PartialEq)]
pub struct VmSpec {
    /// Guest configuration (memory, kernel, workloads).
    pub guest: GuestConfig,
    /// Reservation, bytes.
    pub reservation: u64,
    /// Limit, bytes.
    pub limit: u64,
    /// Shares.
    pub shares: u64,
    /// Overhead memory, bytes.
    pub overhead: u64,
    /// Guest OS profile.
    pub os: String,
    /// Datastore index.
    pub datastore: usize,
    /// Datastore of the VM's host swap file (by default its own).
    pub swap_datastore: usize,
}

/// What the summary's report table shows.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportSpec {
    /// Rates are computed over `[start, end)`; `None` end means the end of the run.
    pub window_ns: (u64, Option<u64>),
    /// Columns: `<counter>/s` (rate over the window), `<phase>_s` (a workload phase's duration),
    /// `runtime_s`, or a counter's final value.
    pub columns: Vec<String>,
}

/// A fully specified run.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Variant name, if the scenario has variants.
    pub variant: Option<String>,
    /// Free text.
    pub description: String,
    /// Seed of every random stream.
    pub seed: u64,
    /// Fixed length; `None` runs until every finite workload has finished.
    pub duration_ns: Option<u64>,
    /// The folder the relative files it names (traces, captured page sets, a Python policy's
    /// module) are found in: the `files_from` the scenario gives, else its file's own folder. A
    /// run folder's `scenario.toml` writes it, so the run folder reproduces the run.
    pub files_from: Option<String>,
    /// Host.
    pub host: HostSpec,
    /// CPU costs (shared by all guests).
    pub costs: Costs,
    /// Datastores.
    pub datastores: Vec<DatastoreSpec>,
    /// VMs, in power-on order.
    pub vms: Vec<VmSpec>,
    /// Report.
    pub report: ReportSpec,
    /// Things the reader should know about how the scenario was put together (a `--set` that
    /// replaces what a variant sets).
    pub warnings: Vec<String>,
    /// Those of `warnings` that hold only under the scenario's own `host.policy` (a field it
    /// ignores): a run given another policy in its place need not show them.
    pub policy_warnings: Vec<String>,
}

impl Scenario {
    /// Name with the variant, as used for run folders.
    pub fn full_name(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}/{v}", self.name),
            None => self.name.clone(),
        }
    }
}

/// `[host]`'s page-sharing settings: off unless `page_sharing = true`; the rest apply only then.
/// A KVM host shares with KSM (`[host.ksm]`, running with the kernel's defaults unless told
/// otherwise), the others as ESX does (`share_scan_time`, `share_force_salting`, `large_pages`).
fn resolve_sharing(c: &Ctx, h: &RawHost, profile: HostProfile) -> Result<Option<PshareSettings>, ScenarioError> {
    let on = h.page_sharing.as_ref().is_some_and(|b| *b.get_ref());
    let esx_keys = [
        (h.share_scan_time.as_ref().map(|q| q.span()), "host.share_scan_time"),
        (h.share_force_salting.as_ref().map(|q| q.span()), "host.share_force_salting"),
        (h.large_pages.as_ref().map(|q| q.span()), "host.large_pages"),
    ];
    let given = |keys: &[(Option<std::ops::Range<usize>>, &'static str)]| keys.iter().find_map(|(s, n)| s.clone().map(|s| (s, *n)));
    if !on {
        if let Some((span, field)) = given(&esx_keys).or_else(|| given(&[(h.ksm.as_ref().map(|t| t.span()), "host.ksm")])) {
            return c.err(span, field, "is a page-sharing setting: set host.page_sharing = true too");
        }
        return Ok(None);
    }
    let d = PshareSettings::default();
    if profile == HostProfile::Kvm {
        if let Some((span, field)) = given(&esx_keys) {
            return c.err(span, field, "is ESX page sharing's; a kvm host shares with KSM (set [host.ksm])");
        }
        // QEMU's guests are mergeable and the host runs ksmd (run = 1) unless told otherwise.
        let mut k = HostKsm { settings: KsmSettings::default(), run: true };
        for (name, v) in h.ksm.iter().flat_map(|t| t.get_ref()) {
            let field = format!("host.ksm.{name}");
            let n = u64::try_from(*v.get_ref()).or_else(|_| c.err(v.span(), &field, "must not be negative"))?;
            if name == "run" {
                k.run = match n {
                    0 | 1 => n == 1,
                    _ => return c.err(v.span(), &field, "must be 0 (stopped) or 1 (running)"),
                };
            } else {
                // An unknown name's message lists the tunables; `run` is one more here.
                let m = |m: String| if m.starts_with("unknown") { format!("{m}, run") } else { m };
                k.settings.set(name, n).or_else(|e| c.err(v.span(), &field, m(e)))?;
            }
        }
        return Ok(Some(PshareSettings { ksm: Some(k), ..d }));
    }
    if let Some(t) = &h.ksm {
        return c.err(t.span(), "host.ksm", "is a kvm host's (set host.profile = \"kvm\"); ESX shares with share_scan_time and friends");
    }
    let scan_time_ns = c.opt_ns(&h.share_scan_time, "host.share_scan_time", d.scan_time_ns)?;
    if scan_time_ns == 0 {
        return c.err(h.share_scan_time.as_ref().expect("zero was given").span(), "host.share_scan_time", "must be longer than zero");
    }
    Ok(Some(PshareSettings {
        scan_time_ns,
        force_salting: c.int(&h.share_force_salting, "host.share_force_salting", d.force_salting as u64, 0, 2)? as u8,
        large_pages: h.large_pages.as_ref().map_or(d.large_pages, |b| *b.get_ref()),
        ..d
    }))
}

/// `[host]`'s tmem settings: off unless `tmem = true`, which only a Xen host has (transcendent
/// memory is a Xen hypervisor feature; KVM, ESX and Denali have none); dedup and compression
/// (Xen's `tmem_dedup`, `tmem_compress`, both off by default) apply only then.
fn resolve_tmem(c: &Ctx, h: &RawHost, profile: HostProfile, costs: &HostCosts) -> Result<Option<TmemSettings>, ScenarioError> {
    let flag = |b: &Option<Spanned<bool>>| b.as_ref().is_some_and(|b| *b.get_ref());
    if let Some(t) = h.tmem.as_ref().filter(|t| *t.get_ref() && profile != HostProfile::Xen) {
        return c.err(
            t.span(),
            "host.tmem",
            format!(
                "is Xen's transcendent memory, which this host does not have: {} (set host.profile = \"xen\")",
                c.profile_is(h, profile)
            ),
        );
    }
    if !flag(&h.tmem) {
        if let Some((span, field)) = [(&h.tmem_dedup, "host.tmem_dedup"), (&h.tmem_compress, "host.tmem_compress")]
            .into_iter()
            .find_map(|(b, n)| b.as_ref().map(|b| (b.span(), n)))
        {
            return c.err(span, field, "is a tmem setting: set host.tmem = true too");
        }
        return Ok(None);
    }
    Ok(Some(TmemSettings {
        dedup: flag(&h.tmem_dedup),
        compress: flag(&h.tmem_compress),
        compress_ns: costs.compress_ns,
        decompress_ns: costs.decompress_ns,
        ..TmemSettings::default()
    }))
}

/// Default sampling interval: vCenter's real-time statistics interval, 20 s (DESIGN.md 3).
const DEFAULT_SAMPLE_NS: u64 = 20_000_000_000;
/// Default lookahead: 1 ms, below a scheduler slice (2.25 ms for 4 CPUs) and far below the
/// seconds over which reclaim ages pages.
const DEFAULT_LOOKAHEAD_NS: u64 = 1_000_000;
/// The largest `[costs]` entry. The measured ones are 5 ns to 50 us; 1 s is 20,000 times the
/// largest, and a step that pays it for every page of the largest guest (2^30 pages) still sums
/// to 34 years, within the nanosecond clock's 584 (at 97 years a page, six pages wrapped it to
/// microseconds and a balloon inflated for free).
const MAX_COST_NS: u64 = 1_000_000_000;
/// The longest a datastore request may wait on its device (latency, seek): 60 s, NFS's default
/// timeout (`timeo=600`, tenths of a second; a SCSI disk's is 30 s). A device slower than that
/// fails or retries the request, which is not modelled; and a queue of requests that long each
/// wrapped the device's nanosecond clock (at 97 years, the sixth request completed at once).
const MAX_DEVICE_WAIT_NS: u64 = 60_000_000_000;
/// dd's customary block size (bs=1M).
const DEFAULT_BLOCK: u64 = 1 << 20;

struct Ctx<'s, 'a> {
    src: &'s Source<'a>,
    /// `Scenario::files_from`.
    files: Option<std::path::PathBuf>,
}

impl Ctx<'_, '_> {
    fn err<T>(&self, span: std::ops::Range<usize>, field: &str, m: impl Into<String>) -> Result<T, ScenarioError> {
        Err(self.src.error(Some(span), field, m))
    }

    /// "host.profile is 'kvm'" and where that came from (a line, a `--set`, or the default), for
    /// a setting refused because of the profile: the profile may have been set far from it.
    fn profile_is(&self, h: &RawHost, profile: HostProfile) -> String {
        let from = h.profile.as_ref().map_or("the default".to_string(), |p| self.src.locate(Some(p.span())));
        format!("host.profile is '{}' ({from})", profile.name())
    }

    fn with<T>(&self, q: &Spanned<Qty>, field: &str, f: fn(&str) -> Result<T, String>) -> Result<T, ScenarioError> {
        f(&q.get_ref().0).map_err(|m| self.src.error(Some(q.span()), field, m))
    }

    fn bytes(&self, q: &Spanned<Qty>, field: &str) -> Result<u64, ScenarioError> {
        self.with(q, field, units::parse_bytes)
    }

    fn ns(&self, q: &Spanned<Qty>, field: &str) -> Result<u64, ScenarioError> {
        self.with(q, field, units::parse_duration_ns)
    }

    fn opt_bytes(&self, q: &Option<Spanned<Qty>>, field: &str, default: u64) -> Result<u64, ScenarioError> {
        q.as_ref().map_or(Ok(default), |q| self.bytes(q, field))
    }

    fn opt_ns(&self, q: &Option<Spanned<Qty>>, field: &str, default: u64) -> Result<u64, ScenarioError> {
        q.as_ref().map_or(Ok(default), |q| self.ns(q, field))
    }

    /// A `[costs]` entry: CPU time per page or operation, at most `MAX_COST_NS`.
    fn cost(&self, q: &Option<Spanned<Qty>>, field: &str, default: u64) -> Result<u64, ScenarioError> {
        let ns = self.opt_ns(q, field, default)?;
        if ns > MAX_COST_NS {
            return self.err(q.as_ref().expect("above the default").span(), field, "is CPU time per page or operation: at most 1s");
        }
        Ok(ns)
    }

    fn int(&self, v: &Option<Spanned<i64>>, field: &str, default: u64, min: u64, max: u64) -> Result<u64, ScenarioError> {
        let Some(v) = v else { return Ok(default) };
        let x = *v.get_ref();
        if x < min as i64 || x as u64 > max {
            return self.err(v.span(), field, format!("{x} is out of range {min}..={max}"));
        }
        Ok(x as u64)
    }

    fn choice<'v>(
        &self,
        v: &'v Option<Spanned<String>>,
        field: &str,
        default: &'v str,
        allowed: &[&str],
    ) -> Result<&'v str, ScenarioError> {
        let Some(v) = v else { return Ok(default) };
        let s = v.get_ref().as_str();
        if !allowed.contains(&s) {
            return self.err(v.span(), field, format!("'{s}' is not one of: {}", allowed.join(", ")));
        }
        Ok(s)
    }
}

/// Pages in `bytes`, refusing sizes that do not fit a 32-bit page number.
fn page_count(c: &Ctx, q: &Spanned<Qty>, field: &str, bytes: u64) -> Result<u32, ScenarioError> {
    let p = units::pages(bytes);
    if p > (1 << 30) - 1 {
        return c.err(q.span(), field, format!("{} is too large (at most 4 TiB less one page: 1073741823 pages)", units::fmt_bytes(bytes)));
    }
    Ok(p as u32)
}

/// Resolves a parsed file.
pub(super) fn resolve(src: &Source, raw: RawScenario) -> Result<Scenario, ScenarioError> {
    let files = match &raw.files_from {
        Some(f) if std::path::Path::new(f.get_ref()).is_absolute() => Some(std::path::PathBuf::from(f.get_ref())),
        Some(f) => {
            let why = format!(
                "'{}' is not an absolute path (it names the folder the scenario's relative files are found in, as a run \
                 folder's scenario.toml gives the original scenario's)",
                f.get_ref()
            );
            return Err(src.error(Some(f.span()), "files_from", why));
        }
        // The folder of the name it was given under, as for a captured file (a case has none).
        None => src.file_dir().and_then(|d| std::fs::canonicalize(if d.as_os_str().is_empty() { ".".as_ref() } else { d }).ok()),
    };
    let c = Ctx { src, files };
    let name = raw.name.get_ref().trim().to_string();
    if let Some(why) = super::folder_name_problem(&name) {
        return c.err(raw.name.span(), "name", why);
    }
    let seed = c.int(&raw.seed, "seed", 1, 0, i64::MAX as u64)?;
    let duration_ns = raw.duration.as_ref().map(|d| c.ns(d, "duration")).transpose()?;
    if duration_ns == Some(0) {
        return c.err(raw.duration.as_ref().unwrap().span(), "duration", "must be longer than zero");
    }

    let h = raw.host.get_ref();
    // Whole frames: a part of one holds nothing (the scenario written back shows what is used).
    let memory = c.bytes(&h.memory, "host.memory")? / PAGE_SIZE * PAGE_SIZE;
    let profile = HostProfile::parse(c.choice(&h.profile, "host.profile", "kvm", HostProfile::NAMES)?).expect("checked");
    let mut host_costs = HostCosts::default();
    if let Some(rc) = &raw.costs {
        host_costs.compress_ns = c.cost(&rc.compress, "costs.compress", host_costs.compress_ns)?;
        host_costs.decompress_ns = c.cost(&rc.decompress, "costs.decompress", host_costs.decompress_ns)?;
        host_costs.swap_out_ns = c.cost(&rc.host_swap_out, "costs.host_swap_out", host_costs.swap_out_ns)?;
        host_costs.blkback_request_ns = c.cost(&rc.blkback_request, "costs.blkback_request", host_costs.blkback_request_ns)?;
    }
    let host = HostSpec {
        memory,
        profile,
        hypervisor: c.opt_bytes(&h.hypervisor, "host.hypervisor", profile.hypervisor_memory(memory))?,
        swap: h.swap.as_ref().map_or(profile.host_swap(), |b| *b.get_ref()),
        zip_max_percent: c.int(&h.zip_max_percent, "host.zip_max_percent", profile.zip_max_percent() as u64, 0, 100)? as u32,
        // Xen tmem compresses with LZO1X-1 (docs/sources/tmem.md); ESX's compressor is not published, and
        // LZO1X-1 stands in for it.
        compressor: {
            let names: Vec<&str> = crate::content::Compressor::ALL.iter().map(|z| z.name()).collect();
            crate::content::Compressor::parse(c.choice(&h.compressor, "host.compressor", "lzo1x-1", &names)?).expect("checked")
        },
        balloon_max_percent: c.int(&h.balloon_max_percent, "host.balloon_max_percent", profile.balloon_max_percent() as u64, 0, 100)?
            as u32,
        // ESX `Mem.SamplePeriod`, 60 s (ESX 4.0+; 30 s in ESX 2.x and the paper).
        sample_period_ns: c.opt_ns(&h.sample_period, "host.sample_period", 60_000_000_000)?,
        sample_pages: c.int(&h.sample_pages, "host.sample_pages", profile.sample_pages() as u64, 0, 1 << 20)? as u32,
        costs: host_costs.clone(),
        policy: PolicySpec {
            name: match &h.policy {
                Some(p) if p.get_ref().starts_with(crate::policy::EXTERNAL_PREFIX) => {
                    if !crate::policy::is_external(p.get_ref()) {
                        return c.err(
                            p.span(),
                            "host.policy",
                            "a Python policy is named python:MODULE:CLASS, e.g. python:mypolicies:Greedy",
                        );
                    }
                    p.get_ref().clone()
                }
                _ => {
                    let names: Vec<&str> = POLICY_NAMES.iter().copied().chain(["python:MODULE:CLASS"]).collect();
                    c.choice(&h.policy, "host.policy", "static", &names)?.to_string()
                }
            },
            esx_states: {
                let names: Vec<&str> = ESX_STATE_TABLES.iter().map(|t| t.name).collect();
                let n = c.choice(&h.esx_states, "host.esx_states", PolicySpec::DEFAULT_ESX_STATES, &names)?;
                ESX_STATE_TABLES.iter().find(|t| t.name == n).expect("checked").name
            },
            idle_tax: c.int(&h.idle_tax, "host.idle_tax", PolicySpec::DEFAULT_IDLE_TAX_PERCENT, 0, 99)? as f64 / 100.0,
        },
        sample_interval_ns: c.opt_ns(&h.sample_interval, "host.sample_interval", DEFAULT_SAMPLE_NS)?,
        lookahead_ns: c.opt_ns(&h.lookahead, "host.lookahead", DEFAULT_LOOKAHEAD_NS)?,
        sharing: resolve_sharing(&c, h, profile)?,
        tmem: resolve_tmem(&c, h, profile, &host_costs)?,
        vm_metadata: match &h.vm_metadata {
            Some(q) if profile != HostProfile::Denali => {
                return c.err(q.span(), "host.vm_metadata", "is the denali profile's (set host.profile = \"denali\")");
            }
            _ => c.opt_bytes(&h.vm_metadata, "host.vm_metadata", profile.vm_metadata())?,
        },
        cpus: match &h.cpus {
            Some(n) if profile == HostProfile::Denali => {
                return c.err(n.span(), "host.cpus", "is not the denali profile's (its host has one CPU, which it models itself)");
            }
            Some(_) => Some(c.int(&h.cpus, "host.cpus", 0, 1, 4096)? as u32),
            None => None,
        },
        dom0_vcpus: match &h.dom0_vcpus {
            Some(n) if profile != HostProfile::Xen => {
                return c.err(
                    n.span(),
                    "host.dom0_vcpus",
                    format!("is the xen profile's (dom0 runs a Xen host's block backend), and {}", c.profile_is(h, profile)),
                );
            }
            Some(n) if h.cpus.is_none() => {
                return c.err(n.span(), "host.dom0_vcpus", "needs host.cpus: dom0's vCPUs take the physical CPUs the guests' vCPUs share");
            }
            Some(_) => Some(c.int(&h.dom0_vcpus, "host.dom0_vcpus", 0, 1, 4096)? as u32),
            None => None,
        },
    };
    // The state table and the idle tax are the esx policy's: under another they do nothing. Said,
    // not refused, so that a case whose variant sets them can still be run under another policy.
    let esx_unused: Vec<String> = [("host.esx_states", h.esx_states.is_some()), ("host.idle_tax", h.idle_tax.is_some())]
        .into_iter()
        .filter(|&(_, set)| set && host.policy.name != "esx")
        .map(|(field, _)| format!("{field} is the esx policy's, and host.policy is '{}': it is ignored", host.policy.name))
        .collect();
    if host.memory < PAGE_SIZE {
        return c.err(h.memory.span(), "host.memory", "must be at least one page (4KiB)");
    }
    if host.hypervisor >= host.memory {
        // The profile's own share is the memory's fault; a share set in the scenario is its own.
        return c.err(
            h.hypervisor.as_ref().map_or(h.memory.span(), |q| q.span()),
            "host.hypervisor",
            format!(
                "the hypervisor's {} leaves nothing of the host's {}",
                units::fmt_bytes(host.hypervisor),
                units::fmt_bytes(host.memory)
            ),
        );
    }
    // As for the counters below: each period is an event per VM, and finer than a millisecond
    // (the kernel's tick at most) it sees no access a coarser one misses; at 1 us a 30 s run did not
    // end in minutes.
    if host.sample_period_ns < 1_000_000 {
        return c.err(h.sample_period.as_ref().unwrap().span(), "host.sample_period", "must be at least 1ms");
    }
    // With none, vCPUs due at the same instant each yield to the other before any work, for ever.
    if host.lookahead_ns == 0 {
        return c.err(
            h.lookahead.as_ref().unwrap().span(),
            "host.lookahead",
            "must be longer than zero (at least 1ns): with none, vCPUs due at the same instant yield to each other for ever",
        );
    }
    // A sample reads every counter of every VM: finer than a millisecond measures nothing the
    // counters can show (the kernel's own tick is 1-10 ms) and only fills memory.
    if host.sample_interval_ns < 1_000_000 {
        return c.err(h.sample_interval.as_ref().unwrap().span(), "host.sample_interval", "must be at least 1ms");
    }

    let mut costs = Costs::default();
    if let Some(rc) = &raw.costs {
        costs.dram_access_ns = c.cost(&rc.dram_access, "costs.dram_access", costs.dram_access_ns)?;
        costs.minor_fault_ns = c.cost(&rc.minor_fault, "costs.minor_fault", costs.minor_fault_ns)?;
        costs.host_back_ns = c.cost(&rc.host_back, "costs.host_back", costs.host_back_ns)?;
        costs.page_copy_ns = c.cost(&rc.page_copy, "costs.page_copy", costs.page_copy_ns)?;
        costs.reclaim_scan_ns = c.cost(&rc.reclaim_scan, "costs.reclaim_scan", costs.reclaim_scan_ns)?;
        costs.reclaim_free_ns = c.cost(&rc.reclaim_free, "costs.reclaim_free", costs.reclaim_free_ns)?;
        costs.reclaim_pageout_ns = c.cost(&rc.reclaim_pageout, "costs.reclaim_pageout", costs.reclaim_pageout_ns)?;
        costs.balloon_page_ns = c.cost(&rc.balloon_page, "costs.balloon_page", costs.balloon_page_ns)?;
        // Every reference takes time: at zero a workload's resident hits take none, and one that
        // never ends (stress without passes) ran for ever at one instant.
        if let (0, Some(q)) = (costs.dram_access_ns, &rc.dram_access) {
            return c.err(q.span(), "costs.dram_access", "a memory reference must take some time: at least 1ns");
        }
    }

    let mut datastores: Vec<DatastoreSpec> = Vec::new();
    for ds in &raw.datastore {
        let d = ds.get_ref();
        let dname = d.name.get_ref().clone();
        if dname.trim().is_empty() {
            return c.err(d.name.span(), "datastore.name", "must be a non-empty name (VMs refer to the datastore by it)");
        }
        if datastores.iter().any(|x| x.name == dname) {
            return c.err(d.name.span(), "datastore.name", format!("two datastores are named '{dname}'"));
        }
        let kind = DeviceKind::parse(d.device.get_ref()).ok_or_else(|| {
            src.error(
                Some(d.device.span()),
                "datastore.device",
                format!("'{}' is not one of: {}", d.device.get_ref(), DeviceKind::NAMES.join(", ")),
            )
        })?;
        let mut dev = kind.defaults();
        dev.latency_ns = c.opt_ns(&d.latency, "datastore.latency", dev.latency_ns)?;
        dev.seek_ns = c.opt_ns(&d.seek, "datastore.seek", dev.seek_ns)?;
        for (q, field, ns) in [(&d.latency, "datastore.latency", dev.latency_ns), (&d.seek, "datastore.seek", dev.seek_ns)] {
            if let (true, Some(q)) = (ns > MAX_DEVICE_WAIT_NS, q) {
                return c.err(
                    q.span(),
                    field,
                    "at most 60s (NFS's default timeout; a slower device fails the request, which is not modelled)",
                );
            }
        }
        if let Some(bw) = &d.bandwidth {
            dev.bandwidth = c.with(bw, "datastore.bandwidth", units::parse_rate)?;
        }
        dev.queue_depth = c.int(&d.queue_depth, "datastore.queue_depth", dev.queue_depth as u64, 1, 65_536)? as u32;
        match &mut dev.filer {
            Some(f) => {
                f.cache_bytes = c.opt_bytes(&d.cache, "datastore.cache", f.cache_bytes)?;
                f.disks = c.int(&d.disks, "datastore.disks", f.disks as u64, 1, 65_536)? as u32;
            }
            None => {
                if let Some(span) = d.cache.as_ref().map(|x| x.span()).or(d.disks.as_ref().map(|x| x.span())) {
                    return c.err(
                        span,
                        "datastore",
                        format!("'cache' and 'disks' describe the file server behind an nfs datastore; '{dname}' is {}", kind.name()),
                    );
                }
            }
        }
        datastores.push(DatastoreSpec { name: dname, device: dev });
    }

    let mut vms: Vec<VmSpec> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for v in &raw.vm {
        for mut spec in resolve_vm(&c, v.get_ref(), &datastores, &costs, host.profile, host.tmem.is_some())? {
            let cap = host.balloon_max_pages(spec.guest.memory_pages);
            if let (Some(q), true) = (&v.get_ref().maxmem, spec.guest.boot_balloon_pages as u64 > cap) {
                // The boot balloon is a balloon like any other: it may not start above its maximum.
                return c.err(
                    q.span(),
                    &format!("vm.{}.maxmem", v.get_ref().name.get_ref().trim()),
                    format!(
                        "starts {} of the VM in its balloon (maxmem - memory), above the balloon's maximum of {} (host.balloon_max_percent = {} of maxmem): raise memory or host.balloon_max_percent",
                        units::human_bytes(spec.guest.boot_balloon_pages as u64 * PAGE_SIZE),
                        units::human_bytes(cap * PAGE_SIZE),
                        host.balloon_max_percent
                    ),
                );
            }
            let kept = spec.guest.memory_pages as u64 - spec.guest.boot_balloon_pages as u64;
            if let (Some(q), true) = (&v.get_ref().reservation, spec.guest.boot_balloon_pages > 0 && kept * PAGE_SIZE < spec.reservation) {
                // The host never balloons a VM below its reservation: nor does its boot.
                return c.err(
                    q.span(),
                    &format!("vm.{}.reservation", v.get_ref().name.get_ref().trim()),
                    format!(
                        "{} is more than the {} the VM starts with (memory; the rest of maxmem starts in its balloon, which may not take a reserved page)",
                        units::human_bytes(spec.reservation),
                        units::human_bytes(kept * PAGE_SIZE)
                    ),
                );
            }
            spec.guest.seed = crate::rng::derive(seed, &[vms.len() as u64]);
            if !names.insert(spec.guest.name.clone()) {
                return c.err(v.get_ref().name.span(), "vm.name", format!("two VMs are named '{}'", spec.guest.name));
            }
            vms.push(spec);
        }
    }
    if vms.is_empty() {
        // Said where the VMs were taken away: the count (in the file or a --set) of the last group.
        if let Some(count) = raw.vm.last().and_then(|v| v.get_ref().count.as_ref()) {
            return c.err(
                count.span(),
                &format!("vm.{}.count", raw.vm.last().expect("one").get_ref().name.get_ref()),
                "every [[vm]] has count = 0: the scenario has no VMs left to run",
            );
        }
        return c.err(raw.name.span(), "vm", "the scenario has no [[vm]]");
    }
    if host.policy.name == "xen-selfballoon" {
        let span = raw.host.get_ref().policy.as_ref().map(|p| p.span());
        // The policy is a Linux guest's own driver (drivers/xen/xen-selfballoon.c), reading the
        // guest's Committed_AS: a Windows guest has neither.
        if let Some(v) = vms.iter().find(|v| v.os != "linux") {
            let why = format!("xen-selfballoon is a Linux guest's driver, and VM '{}' runs {}", v.guest.name, v.os);
            return Err(c.src.error(span, "host.policy", why));
        }
        // The driver's arithmetic counts ballooned pages out of MemTotal, as Xen's balloon does.
        if let Some(v) =
            vms.iter().find(|v| !matches!(v.guest.balloon, BalloonDriver::Virtio { deflate_on_oom: false } | BalloonDriver::Xen))
        {
            return Err(c.src.error(
                span,
                "host.policy",
                format!(
                    "xen-selfballoon needs guests whose balloon takes pages out of MemTotal (balloon = \"xen\" or \"virtio\"); VM '{}' has \"{}\"",
                    v.guest.name,
                    v.guest.balloon.name()
                ),
            ));
        }
    }
    let finite = vms.iter().flat_map(|v| &v.guest.workloads).any(|w| w.spec.is_finite());
    if duration_ns.is_none() && !finite {
        // Not at a line: what is missing has none.
        let why = if vms.iter().all(|v| v.guest.workloads.is_empty()) {
            "no duration is set and no VM has a workload to finish; set duration = \"...\" or give a VM a [[vm.workload]]"
        } else {
            "no duration is set and no workload finishes on its own (stress without passes, idle); set duration = \"...\""
        };
        return Err(c.src.error(None, "duration", why));
    }

    // A workload that starts at or after the end never runs: said, not refused, since a sweep over
    // the duration may cut some points short on purpose.
    let mut warnings: Vec<String> = duration_ns
        .map(|d| {
            vms.iter()
                .flat_map(|v| v.guest.workloads.iter().map(move |w| (v, w)))
                .filter(|(_, w)| w.start_ns >= d)
                .map(|(vm, w)| {
                    format!(
                        "VM '{}' starts workload '{}' at {} s, not before the run ends at {} s: it will not run",
                        vm.guest.name,
                        w.name,
                        w.start_ns as f64 / 1e9,
                        d as f64 / 1e9
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    // What the scenario's own policy ignores: also kept apart, for a run given another policy.
    let mut policy_warnings = esx_unused;
    // A VM's limit is a ceiling only the static and esx policies keep, and its shares weigh only in
    // esx's and proxmox's division: under another built-in policy they do nothing. Said, as the esx
    // fields are (a Python policy sees both in its view and may use them).
    let policy = host.policy.name.as_str();
    // VMs a variant leaves out (count = 0) have nothing to be told.
    let present = raw.vm.iter().map(|v| v.get_ref()).filter(|v| v.count.as_ref().is_none_or(|n| *n.get_ref() != 0));
    for v in present.clone().filter(|v| v.os.as_ref().is_some_and(|o| o.get_ref() == "windows")) {
        // The Linux kernel's knobs: Windows' memory manager has none. Said, not refused: a run
        // folder's scenario from before this check wrote them for every guest.
        let set =
            [("sysctl", v.sysctl.is_some()), ("transparent_hugepage", v.transparent_hugepage.is_some()), ("cgroup", v.cgroup.is_some())];
        for (field, _) in set.into_iter().filter(|&(_, set)| set) {
            warnings.push(format!("vm.{}.{field} is a Linux kernel setting, and the guest runs Windows: it is ignored", v.name.get_ref()));
        }
    }
    if POLICY_NAMES.contains(&policy) {
        for v in present {
            let name = v.name.get_ref();
            if v.limit.is_some() && !["static", "esx"].contains(&policy) {
                policy_warnings
                    .push(format!("vm.{name}.limit is kept by the static and esx policies, and host.policy is '{policy}': it is ignored"));
            }
            if v.shares.is_some() && !["esx", "proxmox"].contains(&policy) {
                policy_warnings.push(format!(
                    "vm.{name}.shares weigh in the esx and proxmox policies, and host.policy is '{policy}': they are ignored"
                ));
            }
            if v.frontswap_selfshrink.as_ref().is_some_and(|b| *b.get_ref()) && policy != "xen-selfballoon" {
                policy_warnings.push(format!(
                    "vm.{name}.frontswap_selfshrink is the xen-selfballoon driver's, and host.policy is '{policy}': it is ignored"
                ));
            }
        }
    }
    // Settings of a mechanism the scenario leaves off: said, as the policies' are.
    if host.dom0_vcpus.is_none() && raw.costs.as_ref().is_some_and(|c| c.blkback_request.is_some()) {
        warnings.push("costs.blkback_request: dom0's backend is not modelled (host.dom0_vcpus is unset): it is ignored".into());
    }
    // The default is left unsaid: run folders written before this check state it for every host.
    if host.compressor != crate::content::Compressor::Lzo1x1 && host.zip_max_percent == 0 && !host.tmem.as_ref().is_some_and(|t| t.compress)
    {
        warnings
            .push("host.compressor: nothing compresses (host.zip_max_percent is 0 and host.tmem_compress is off): it is ignored".into());
    }
    warnings.extend(policy_warnings.iter().cloned());
    // The time series is kept in memory until the run ends: a run that would pass its bound is
    // refused before it starts.
    if let Some(d) = duration_ns {
        // The Denali host keeps rows for its most popular VMs and one for all of them.
        let per_sample = if host.profile == HostProfile::Denali { 1 + vms.len().min(crate::metrics::denali::ROW_VMS) } else { vms.len() };
        let rows = (d / host.sample_interval_ns + 1).saturating_mul(per_sample as u64);
        if rows > MAX_SERIES_ROWS {
            let at = h.sample_interval.as_ref().map(|q| q.span()).unwrap_or_else(|| raw.duration.as_ref().expect("set").span());
            return c.err(
                at,
                "host.sample_interval",
                format!(
                    "{per_sample} {} sampled every {} s for {} s make {rows} time-series rows, more than the {MAX_SERIES_ROWS} kept in memory: sample less often",
                    if host.profile == HostProfile::Denali { "rows (the most popular VMs and all together)" } else { "VMs" },
                    host.sample_interval_ns as f64 / 1e9,
                    d as f64 / 1e9
                ),
            );
        }
    }

    let report = resolve_report(&c, &raw, host.profile == HostProfile::Denali)?;
    // A phase column of a phase no workload has shows '-' in every row: said, not refused, as a
    // variant may leave out the VM that has it.
    for col in &report.columns {
        let Some(p) = phase_of_column(col) else { continue };
        if !vms.iter().flat_map(|v| &v.guest.workloads).any(|w| w.spec.phase_bytes(p).is_some()) {
            warnings.push(format!(
                "report.columns '{col}': no workload here has a {p} phase (bonnie has write, rewrite and read; file-io write, \
                 and read with read = true): it shows -"
            ));
        }
    }
    // Likewise a report window that outlasts the run: its rates are over what the run had.
    if let (Some(d), (start, Some(end))) = (duration_ns, report.window_ns)
        && end > d
    {
        let (end_s, d_s) = (end as f64 / 1e9, d as f64 / 1e9);
        warnings.push(if start < d {
            format!(
                "report.window ends at {end_s} s, after the run ends at {d_s} s: its rates are over {} s to {d_s} s",
                start as f64 / 1e9
            )
        } else {
            format!("report.window starts at {} s, not before the run ends at {d_s} s: it holds nothing to measure", start as f64 / 1e9)
        });
    }
    Ok(Scenario {
        name,
        variant: None,
        description: raw.description.clone().unwrap_or_default(),
        seed,
        duration_ns,
        files_from: c.files.as_ref().map(|d| d.to_string_lossy().into_owned()),
        host,
        costs,
        datastores,
        vms,
        report,
        warnings,
        policy_warnings,
    })
}

fn resolve_report(c: &Ctx, raw: &RawScenario, denali: bool) -> Result<ReportSpec, ScenarioError> {
    let mut window_ns = (0, None);
    let mut columns: Vec<String> = if denali {
        ["requests_per_s", "latency_p50_ms", "latency_p99_ms", "footprint_pages", "page_ins_per_s"].map(String::from).to_vec()
    } else {
        // The guest's own paging, then what the host took from it (balloon, host swap) and what
        // that cost its vCPUs: a guest slowed by host reclamation alone pages nothing itself.
        ["runtime_s", "pgmajfault/s", "pswpin_pages/s", "pswpout_pages/s", "MCTLSZ_MiB", "SWCUR_MiB", "host_wait_ms"]
            .map(String::from)
            .to_vec()
    };
    if let Some(r) = &raw.report {
        if let Some(w) = &r.window {
            let ws = w.get_ref();
            if ws.len() != 2 {
                return c.err(w.span(), "report.window", "must be [start, end], e.g. [\"0s\", \"150s\"]");
            }
            let parse = |q: &Qty| units::parse_duration_ns(&q.0).map_err(|m| c.src.error(Some(w.span()), "report.window", m));
            let (a, b) = (parse(&ws[0])?, parse(&ws[1])?);
            if b <= a {
                return c.err(w.span(), "report.window", "the end must come after the start");
            }
            window_ns = (a, Some(b));
        }
        if let Some(cols) = &r.columns {
            if cols.get_ref().is_empty() {
                return c.err(cols.span(), "report.columns", "is empty: name at least one column, or leave it out for the defaults");
            }
            if let Some((_, col)) = cols.get_ref().iter().enumerate().find(|(i, col)| cols.get_ref()[..*i].contains(col)) {
                return c.err(cols.span(), "report.columns", format!("'{col}' is named twice: name each column once"));
            }
            for col in cols.get_ref() {
                if denali && !crate::metrics::denali::REPORT_COLUMNS.contains(&col.as_str()) {
                    return c.err(
                        cols.span(),
                        "report.columns",
                        format!("unknown column '{col}' for a denali host: use {}", crate::metrics::denali::REPORT_COLUMNS.join(", ")),
                    );
                }
                if !denali && !report_column_known(col) {
                    return c.err(
                        cols.span(),
                        "report.columns",
                        format!(
                            "unknown column '{col}': use a counter (e.g. pgpgin_KiB), a rate (pgpgin_KiB/s), \
                             a phase duration (write_s, rewrite_s, read_s), a phase rate (write_KiB/s, rewrite_KiB/s, \
                             read_KiB/s) or runtime_s"
                        ),
                    );
                }
            }
            columns = cols.get_ref().clone();
        }
    }
    Ok(ReportSpec { window_ns, columns })
}

/// The timed phase a report column measures (its duration `write_s` or rate `write_KiB/s`), if any.
fn phase_of_column(col: &str) -> Option<&str> {
    let phase = |p: &&str| matches!(*p, "write" | "rewrite" | "read");
    col.strip_suffix("_KiB/s").filter(phase).or_else(|| col.strip_suffix("_s").filter(phase))
}

/// Whether a report column names something the summary provides.
pub fn report_column_known(col: &str) -> bool {
    let counter = |n: &str| crate::metrics::columns().contains(&n);
    if phase_of_column(col).is_some() || col == "runtime_s" {
        return true;
    }
    col.strip_suffix("/s").map_or_else(|| counter(col), counter)
}

/// A VM's shares unless set: ESX's "normal", 10 per MB of configured memory.
pub(super) fn default_shares(memory: u64) -> u64 {
    10 * (memory >> 20)
}

fn resolve_vm(
    c: &Ctx,
    v: &RawVm,
    datastores: &[DatastoreSpec],
    costs: &Costs,
    profile: HostProfile,
    tmem: bool,
) -> Result<Vec<VmSpec>, ScenarioError> {
    let base_name = v.name.get_ref().trim().to_string();
    if base_name.is_empty() || base_name.contains(['/', '\\', '.']) {
        return c.err(v.name.span(), "vm.name", "must be a non-empty name without '/', '\\' or '.'");
    }
    // The decisions log names a host-wide decision "host" and a VM the host lacks "#id".
    if base_name == "host" || base_name.starts_with('#') {
        return c.err(
            v.name.span(),
            "vm.name",
            format!("'{base_name}' is the decisions log's name for a host-wide decision or an unknown VM; name the VM otherwise"),
        );
    }
    let f = |field: &str| format!("vm.{base_name}.{field}");
    // count = 0 leaves the VM out (a variant without it).
    let count = c.int(&v.count, &f("count"), 1, 0, 100_000)?;
    let memory = c.bytes(&v.memory, &f("memory"))?;
    let memory_pages = page_count(c, &v.memory, &f("memory"), memory)?;
    if memory_pages == 0 {
        return c.err(v.memory.span(), &f("memory"), "must be at least one page (4KiB)");
    }
    // Xen's `maxmem`: the guest's physical memory is that, and what lies above `memory` starts in
    // its balloon.
    let (memory_pages, boot_balloon_pages) = match &v.maxmem {
        None => (memory_pages, 0),
        Some(q) => {
            let max = page_count(c, q, &f("maxmem"), c.bytes(q, &f("maxmem"))?)?;
            if max < memory_pages {
                return c.err(q.span(), &f("maxmem"), "must be at least the VM's memory (the memory it starts with)");
            }
            (max, max - memory_pages)
        }
    };
    let memory = memory_pages as u64 * PAGE_SIZE;
    let vcpus = c.int(&v.vcpus, &f("vcpus"), 1, 1, 1024)? as u32;
    let reservation = c.opt_bytes(&v.reservation, &f("reservation"), 0)?;
    if reservation > memory {
        return c.err(
            v.reservation.as_ref().unwrap().span(),
            &f("reservation"),
            format!(
                "{} is above the VM's memory {}; a reservation can be at most the memory",
                units::fmt_bytes(reservation),
                units::fmt_bytes(memory)
            ),
        );
    }
    let limit = c.opt_bytes(&v.limit, &f("limit"), memory)?.min(memory);
    if limit < reservation {
        return c.err(
            v.limit.as_ref().unwrap().span(),
            &f("limit"),
            format!(
                "{} is below the reservation {}; a limit can be no lower than the reservation",
                units::fmt_bytes(limit),
                units::fmt_bytes(reservation)
            ),
        );
    }
    let shares = c.int(&v.shares, &f("shares"), default_shares(memory), 1, u32::MAX as u64)?;
    // The profile's per-VM overhead (host/profile.rs cites each).
    let overhead = c.opt_bytes(&v.overhead, &f("overhead"), profile.vm_overhead(memory, vcpus))?;
    let balloon = match &v.balloon {
        Some(b) => BalloonDriver::parse(c.choice(&v.balloon, &f("balloon"), "", BalloonDriver::NAMES)?)
            .ok_or_else(|| c.src.error(Some(b.span()), &f("balloon"), "unknown driver"))?,
        None => profile.balloon(),
    };
    if let (Some(q), true) = (&v.maxmem, balloon != BalloonDriver::Xen) {
        return c.err(
            q.span(),
            &f("maxmem"),
            format!("starts memory in a Xen balloon: the guest needs balloon = \"xen\" (it has \"{}\")", balloon.name()),
        );
    }
    let os = c
        .choice(&v.os, &f("os"), if profile == HostProfile::Denali { "ilwaco" } else { "linux" }, &["linux", "windows", "ilwaco"])?
        .to_string();
    let web = v.workload.iter().flatten().find(|w| w.get_ref().kind.get_ref() == "web-server");
    if let Some(w) = web.filter(|_| os != "ilwaco") {
        // Said of the workload the user wrote, not of an `os` they may never have set.
        return c.err(
            w.span(),
            &f("workload"),
            format!(
                "web-server is the Ilwaco guest's web server (Denali): it runs on a host with profile = \"denali\", not in a {os} guest"
            ),
        );
    }
    if (os == "ilwaco") != (profile == HostProfile::Denali) {
        let span = v.os.as_ref().map_or(v.name.span(), |o| o.span());
        return c.err(span, &f("os"), "Ilwaco guests run on the denali host, and the denali host runs only Ilwaco guests");
    }
    let find = |name: &Spanned<String>, field: &str| {
        datastores.iter().position(|d| &d.name == name.get_ref()).ok_or_else(|| {
            let names: Vec<&str> = datastores.iter().map(|d| d.name.as_str()).collect();
            let have = if names.is_empty() {
                "the scenario has no [[datastore]]: add one, e.g. [[datastore]] name = \"d\" device = \"ssd\"".to_string()
            } else {
                format!("have: {}", names.join(", "))
            };
            c.src.error(Some(name.span()), &f(field), format!("no datastore named '{}' ({have})", name.get_ref()))
        })
    };
    let datastore = find(&v.datastore, "datastore")?;
    // ESX keeps a VM's swap file with the VM's files unless told otherwise.
    let swap_datastore = v.host_swap_datastore.as_ref().map(|d| find(d, "host_swap_datastore")).transpose()?.unwrap_or(datastore);
    // Swap as large as memory: Red Hat's rule for 2-8 GB of RAM (RHEL 7 Installation Guide,
    // "Recommended System Swap Space" [doc-recalled]); [assumed] for other sizes and for Windows'
    // pagefile, where a case sets its own if it matters.
    let swap = c.opt_bytes(&v.swap, &f("swap"), memory)?;
    let swap_pages = match &v.swap {
        Some(q) => page_count(c, q, &f("swap"), swap)?,
        None => memory_pages,
    };
    let mut replacement = Replacement::parse(c.choice(&v.replacement, &f("replacement"), "linux", Replacement::NAMES)?).expect("checked");
    if os == "windows" {
        if let Some(r) = &v.replacement {
            return c.err(
                r.span(),
                &f("replacement"),
                "a Windows guest has its own memory manager; remove `replacement` or use os = \"linux\"",
            );
        }
        replacement = Replacement::Windows;
    }
    // Ilwaco is a library OS in the VM's own pages (its layout is the web server's).
    let default_reserved = if os == "ilwaco" { 0 } else { GuestConfig::linux_reserved_bytes(memory) };
    let reserved = c.opt_bytes(&v.kernel_reserved, &f("kernel_reserved"), default_reserved)?;
    // The guest boots in the memory it starts with: a Xen guest's reservation (sized for maxmem,
    // whose memmap it holds) must fit there, not merely in maxmem.
    let initial_pages = memory_pages - boot_balloon_pages;
    if units::pages(reserved) >= initial_pages as u64 {
        let span = v.kernel_reserved.as_ref().map_or(v.memory.span(), |q| q.span());
        let (default, fits) = if boot_balloon_pages > 0 {
            let starts = units::human_bytes(initial_pages as u64 * PAGE_SIZE);
            (
                " (the default for its maxmem)",
                format!("does not fit in the {starts} the guest starts with (memory; maxmem is {})", units::human_bytes(memory)),
            )
        } else {
            (" (the default for its size)", format!("leaves no memory in a {} guest", units::human_bytes(memory)))
        };
        let default = if v.kernel_reserved.is_none() { default } else { "" };
        return c.err(
            span,
            &f("kernel_reserved"),
            format!(
                "the kernel's boot reservation of {}{default} {fits}: give it more memory, or set kernel_reserved",
                units::human_bytes(reserved)
            ),
        );
    }
    // Less than the VM's page count, which fits in u32.
    let reserved_pages = units::pages(reserved) as u32;
    let mut sysctl = Sysctl::default();
    if let Some(map) = &v.sysctl {
        for (k, val) in map {
            let x = *val.get_ref();
            if x < 0 {
                return c.err(val.span(), &f(&format!("sysctl.{}", k.get_ref())), format!("{x} is negative"));
            }
            sysctl.set(k.get_ref(), x as u64).map_err(|m| c.src.error(Some(val.span()), &f("sysctl"), m))?;
        }
    }
    // The kernel's Kconfig default, and Debian's (Kali's): THP always. Only the watermarks feel it.
    let thp = Thp::parse(c.choice(&v.transparent_hugepage, &f("transparent_hugepage"), "always", Thp::NAMES)?).expect("checked");
    // systemd mounts cgroup v2 alone by default since version 247 (2020); Debian 11 and later do.
    let cgroup = CgroupVersion::parse(c.choice(&v.cgroup, &f("cgroup"), "v2", CgroupVersion::NAMES)?).expect("checked");
    // Resolved scenarios state the kernel's value after boot, computed over the pages the buddy
    // allocator has then: a Xen guest's memory above `memory` is memblock-reserved at boot and
    // handed to the balloon (arch/x86/xen/setup.c `xen_add_extra_mem`, drivers/xen/balloon.c), so
    // its watermarks follow the memory it starts with.
    let managed = (initial_pages - reserved_pages) as u64;
    let zones = Watermarks::linux_zones(memory);
    sysctl.min_free_kbytes.get_or_insert_with(|| Watermarks::boot_min_free_kbytes(managed, zones, thp, sysctl.watermark_scale_factor));
    let image = match (&v.image, &v.image_common) {
        (None, None) => None,
        (None, Some(q)) => {
            return c.err(q.span(), &f("image_common"), "says what guests booted from an image hold alike: name the image too");
        }
        (Some(name), common) => {
            let common_pages = units::pages(c.opt_bytes(common, &f("image_common"), 0)?);
            if common_pages > reserved_pages as u64 {
                let span = common.as_ref().map_or(name.span(), |q| q.span());
                return c.err(
                    span,
                    &f("image_common"),
                    format!("is part of the kernel's boot reservation, {}: it cannot be larger", units::fmt_bytes(reserved)),
                );
            }
            if name.get_ref().is_empty() {
                return c.err(name.span(), &f("image"), "must be a non-empty name");
            }
            Some(crate::guest::Image { name: name.get_ref().clone(), common_pages: common_pages as u32 })
        }
    };
    let zero_memory_at_ns = v.zero_memory_at.as_ref().map(|q| c.ns(q, &f("zero_memory_at"))).transpose()?;
    // Why this guest cannot run a tmem client, if it cannot.
    let no_client = || {
        if !tmem {
            Some("needs a host with transcendent memory: set host.tmem = true".to_string())
        } else if replacement != Replacement::Linux {
            Some(format!("is a Linux client; this guest's os or replacement makes it '{}'", replacement.name()))
        } else {
            None
        }
    };
    // A Linux guest of a tmem host runs both clients unless told not to (the Xen frontend's
    // `cleancache` and `frontswap` module parameters default to on).
    let mut clients = [false; 2];
    for (i, (b, name)) in [(&v.cleancache, "cleancache"), (&v.frontswap, "frontswap")].into_iter().enumerate() {
        clients[i] = b.as_ref().map_or(tmem && replacement == Replacement::Linux, |b| *b.get_ref());
        if let (Some(b), Some(why)) = (b.as_ref().filter(|b| *b.get_ref()), no_client()) {
            return c.err(b.span(), &f(name), why);
        }
    }
    // The self-ballooning driver shrinks frontswap unless booted with `noselfshrink`.
    let selfshrink = match &v.frontswap_selfshrink {
        Some(b) if *b.get_ref() && !clients[1] => {
            let why = no_client().unwrap_or_else(|| "this guest does not run (frontswap = false)".to_string());
            return c.err(b.span(), &f("frontswap_selfshrink"), format!("shrinks frontswap, which {why}"));
        }
        Some(b) => *b.get_ref(),
        None => clients[1],
    };
    let mut workloads = Vec::new();
    if let Some(ws) = &v.workload {
        for w in ws {
            // Before the workload is resolved: a captured file it names need not exist to be refused.
            let r = w.get_ref();
            let contents = [
                ("content", r.content.as_ref().map(|x| x.span())),
                ("zero_pages", r.zero_pages.as_ref().map(|x| x.span())),
                ("common_pages", r.common_pages.as_ref().map(|x| x.span())),
                ("duplicate_pages", r.duplicate_pages.as_ref().map(|x| x.span())),
                ("program", r.program.as_ref().map(|x| x.span())),
                ("captured", r.captured.as_ref().map(|x| x.span())),
            ];
            if let (true, Some((field, Some(span)))) = (os == "ilwaco", contents.into_iter().find(|(_, s)| s.is_some())) {
                return c.err(
                    span,
                    &f(&format!("workload.{field}")),
                    "the Ilwaco guest's page contents are not modelled: Denali's host pages whole VMs and neither shares nor compresses them",
                );
            }
            let entry = resolve_workload(c, w, &base_name, &os, (memory_pages - reserved_pages) as u64 * PAGE_SIZE, swap_pages as u64)?;
            if let (Some(_), Some(q)) = (entry.memory_limit, &w.get_ref().memory_limit)
                && replacement != Replacement::Linux
            {
                return c.err(
                    q.span(),
                    &f("workload.memory_limit"),
                    format!(
                        "memory cgroups are modelled in Linux guests only (this guest's os or replacement makes it '{}')",
                        replacement.name()
                    ),
                );
            }
            if (os == "ilwaco") != matches!(entry.spec, WorkloadSpec::WebServer(_)) {
                return c.err(w.span(), &f("workload"), "an Ilwaco guest runs a web-server workload, and only it does");
            }
            if os == "ilwaco" && !workloads.is_empty() {
                return c.err(w.span(), &f("workload"), "an Ilwaco guest runs one web server: give it one web-server workload");
            }
            if let (true, Some(q)) = (os == "ilwaco", &w.get_ref().memory_limit) {
                return c.err(q.span(), &f("workload.memory_limit"), "the Ilwaco guest has no memory cgroups (its host pages it)");
            }
            if os == "windows" && entry.spec.uses_files() {
                return c.err(
                    w.span(),
                    &f("workload"),
                    format!(
                        "a {} workload reads and writes files; the Windows guest has no file cache model yet (use os = \"linux\")",
                        entry.spec.kind()
                    ),
                );
            }
            workloads.push(entry);
        }
    }
    let names: Vec<String> = if count == 1 { vec![base_name.clone()] } else { (1..=count).map(|i| format!("{base_name}-{i}")).collect() };
    Ok(names
        .into_iter()
        .map(|name| VmSpec {
            guest: GuestConfig {
                name,
                memory_pages,
                reserved_pages,
                swap_pages,
                vcpus,
                replacement,
                sysctl: sysctl.clone(),
                transparent_hugepage: thp,
                cgroup,
                balloon,
                costs: costs.clone(),
                sched_slice_ns: GuestConfig::default_sched_slice_ns(vcpus),
                workloads: workloads.clone(),
                image: image.clone(),
                zero_memory_at_ns,
                boot_balloon_pages,
                populate_at_boot: profile.populate_at_boot(),
                cleancache: clients[0],
                frontswap: clients[1],
                frontswap_selfshrink: selfshrink,
                seed: 0,
            },
            reservation,
            limit,
            shares,
            overhead,
            os: os.clone(),
            datastore,
            swap_datastore,
        })
        .collect())
}

/// Resolves a workload of a VM whose MemTotal is `mem_total` bytes, with `swap_pages` of swap.
fn resolve_workload(
    c: &Ctx,
    w: &Spanned<RawWorkload>,
    vm: &str,
    os: &str,
    mem_total: u64,
    swap_pages: u64,
) -> Result<WorkloadEntry, ScenarioError> {
    let r = w.get_ref();
    let kind = r.kind.get_ref().as_str();
    let f = |field: &str| format!("vm.{vm}.workload.{kind}.{field}");
    let allowed: &[&str] = match kind {
        "stress" => &["instances", "pages", "passes"],
        "file-io" => &["size", "block", "fsync", "read"],
        "idle" => &["footprint", "active", "period"],
        "trace" => &["file", "loops", "compute"],
        "random" => &["pages", "touches", "seed", "write", "compute", "distribution"],
        "stress-vm" => &["workers", "bytes", "keep", "rounds"],
        "bonnie" => &["size"],
        "dotnet-heap" => &["live", "object", "cycles", "replace_percent", "visit"],
        "kernel-build" => &["tree", "arch", "config", "jobs", "builds", "units", "compute"],
        "web-server" => {
            &["pool", "rate", "clients", "think", "zipf", "document", "compute", "rtt", "path", "close", "msl", "mbufs", "clusters"]
        }
        _ => {
            return c.err(
                r.kind.span(),
                &format!("vm.{vm}.workload.kind"),
                format!("'{kind}' is not one of: {}", WorkloadSpec::KINDS.join(", ")),
            );
        }
    };
    let present: [(&str, Option<std::ops::Range<usize>>); 43] = [
        ("instances", r.instances.as_ref().map(|x| x.span())),
        ("pages", r.pages.as_ref().map(|x| x.span())),
        ("passes", r.passes.as_ref().map(|x| x.span())),
        ("size", r.size.as_ref().map(|x| x.span())),
        ("block", r.block.as_ref().map(|x| x.span())),
        ("fsync", r.fsync.as_ref().map(|x| x.span())),
        ("read", r.read.as_ref().map(|x| x.span())),
        ("footprint", r.footprint.as_ref().map(|x| x.span())),
        ("active", r.active.as_ref().map(|x| x.span())),
        ("period", r.period.as_ref().map(|x| x.span())),
        ("file", r.file.as_ref().map(|x| x.span())),
        ("loops", r.loops.as_ref().map(|x| x.span())),
        ("compute", r.compute.as_ref().map(|x| x.span())),
        ("touches", r.touches.as_ref().map(|x| x.span())),
        ("distribution", r.distribution.as_ref().map(|x| x.span())),
        ("seed", r.seed.as_ref().map(|x| x.span())),
        ("write", r.write.as_ref().map(|x| x.span())),
        ("workers", r.workers.as_ref().map(|x| x.span())),
        ("bytes", r.bytes.as_ref().map(|x| x.span())),
        ("keep", r.keep.as_ref().map(|x| x.span())),
        ("rounds", r.rounds.as_ref().map(|x| x.span())),
        ("live", r.live.as_ref().map(|x| x.span())),
        ("object", r.object.as_ref().map(|x| x.span())),
        ("cycles", r.cycles.as_ref().map(|x| x.span())),
        ("replace_percent", r.replace_percent.as_ref().map(|x| x.span())),
        ("visit", r.visit.as_ref().map(|x| x.span())),
        ("tree", r.tree.as_ref().map(|x| x.span())),
        ("arch", r.arch.as_ref().map(|x| x.span())),
        ("jobs", r.jobs.as_ref().map(|x| x.span())),
        ("builds", r.builds.as_ref().map(|x| x.span())),
        ("units", r.units.as_ref().map(|x| x.span())),
        ("pool", r.pool.as_ref().map(|x| x.span())),
        ("rate", r.rate.as_ref().map(|x| x.span())),
        ("clients", r.clients.as_ref().map(|x| x.span())),
        ("think", r.think.as_ref().map(|x| x.span())),
        ("zipf", r.zipf.as_ref().map(|x| x.span())),
        ("document", r.document.as_ref().map(|x| x.span())),
        ("rtt", r.rtt.as_ref().map(|x| x.span())),
        ("path", r.path.as_ref().map(|x| x.span())),
        ("close", r.close.as_ref().map(|x| x.span())),
        ("msl", r.msl.as_ref().map(|x| x.span())),
        ("mbufs", r.mbufs.as_ref().map(|x| x.span())),
        ("clusters", r.clusters.as_ref().map(|x| x.span())),
    ];
    for (field, span) in present {
        if let Some(span) = span
            && !allowed.contains(&field)
        {
            return c.err(
                span,
                &f(field),
                format!(
                    "a '{kind}' workload has no field '{field}' (its fields: name, start, content, zero_pages, common_pages, duplicate_pages, program, captured, memory_limit, {})",
                    allowed.join(", ")
                ),
            );
        }
    }
    let pages_of = |q: &Spanned<Qty>, field: &str| -> Result<u32, ScenarioError> {
        let b = c.bytes(q, &f(field))?;
        page_count(c, q, &f(field), b)
    };
    // A page count: a bare number of pages, or a size with a unit.
    let page_number = |q: &Option<Spanned<Qty>>, field: &str, default: u32| -> Result<u32, ScenarioError> {
        let Some(q) = q else { return Ok(default) };
        let n = match q.get_ref().0.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => units::pages(c.bytes(q, &f(field))?),
        };
        if n == 0 || n >= 1 << 30 {
            return c.err(q.span(), &f(field), format!("{n} pages is out of range 1..={}", (1u64 << 30) - 1));
        }
        Ok(n as u32)
    };
    // One anonymous mapping larger than MemTotal and swap together is refused by Linux's default
    // (heuristic) overcommit, `__vm_enough_memory` in mm/util.c, as Windows refuses a commit past
    // its limit (RAM + pagefile): the program fails at once. Refused here, since a mapping's page
    // table is kept whole (4 TiB in a 1 GiB guest took 4.6 GB).
    let commit_limit = units::pages(mem_total) + swap_pages;
    let mapping = |q: &Option<Spanned<Qty>>, field: &str, pages: u32| -> Result<u32, ScenarioError> {
        match q {
            Some(q) if pages as u64 > commit_limit => c.err(
                q.span(),
                &f(field),
                format!(
                    "{} is more than the guest's memory and {} ({}): {}",
                    units::human_bytes(pages as u64 * PAGE_SIZE),
                    if os == "windows" { "pagefile" } else { "swap" },
                    units::human_bytes(commit_limit * PAGE_SIZE),
                    if os == "windows" { "Windows refuses a commit past its limit" } else { "Linux's overcommit refuses such an mmap" }
                ),
            ),
            _ => Ok(pages),
        }
    };
    let spec = match kind {
        "web-server" => {
            let load = match (&r.rate, &r.clients) {
                (Some(rate), None) => {
                    let x = *rate.get_ref();
                    if !(x.is_finite() && x > 0.0 && x <= 1e7) {
                        return c.err(rate.span(), &f("rate"), "requests per second per VM: a number above 0, at most 1e7");
                    }
                    if let Some(span) = r.think.as_ref().map(|t| t.span()).or(r.zipf.as_ref().map(|z| z.span())) {
                        return c.err(span, &f("rate"), "think and zipf go with closed-loop clients, not an open-loop rate");
                    }
                    Load::Open { rate: x }
                }
                (None, Some(_)) => {
                    let zipf = r.zipf.as_ref().map_or(0.0, |z| *z.get_ref());
                    if !(0.0..=10.0).contains(&zipf) {
                        return c.err(r.zipf.as_ref().unwrap().span(), &f("zipf"), "a Zipf exponent from 0 (uniform) to 10");
                    }
                    Load::Closed {
                        clients: c.int(&r.clients, &f("clients"), 1, 1, 1_000_000)? as u32,
                        think_ns: c.opt_ns(&r.think, &f("think"), 0)?,
                        zipf,
                    }
                }
                _ => {
                    return c.err(w.span(), &f("rate"), "give either rate (open loop, requests/s per VM) or clients (closed loop)");
                }
            };
            let pool = PoolKind::parse(c.choice(&r.pool, &f("pool"), "list", PoolKind::NAMES)?).expect("checked");
            // FreeBSD 3.x/4.x: NMBCLUSTERS = 512 + MAXUSERS * 16 with GENERIC's maxusers 32, and
            // nmbufs = 4 * NMBCLUSTERS (sys/kern/uipc_mbuf.c, param.c).
            let clusters = c.int(&r.clusters, &f("clusters"), 512 + 32 * 16, 1, 1 << 20)? as u32;
            let mbufs = c.int(&r.mbufs, &f("mbufs"), 4 * clusters as u64, 1, 1 << 22)? as u32;
            // Denali's small object: 2,258 bytes, "approximately the median web object size"
            // (OSDI 2002 section 4.3).
            let document = c.opt_bytes(&r.document, &f("document"), 2_258)?;
            if let (0, Some(d)) = (document, &r.document) {
                return c.err(d.span(), &f("document"), "is what each request is answered with: at least 1 byte");
            }
            // One connection holds its header template, its request's packet and its whole answer
            // before anything of it is freed, so a pool smaller than that never serves: the first
            // request sleeps for buffers nothing will free (and past 16 TiB its page count wrapped
            // to one page).
            let need = (document.div_ceil(crate::guest::ilwaco::mbuf::MCLBYTES as u64), document.div_ceil(crate::workloads::MSS as u64));
            if need.0 > clusters as u64 || need.0 + need.1 + 2 > mbufs as u64 {
                return c.err(
                    r.document.as_ref().map_or(w.span(), |d| d.span()),
                    &f("document"),
                    format!(
                        "a connection answered with {} holds {} clusters and {} mbufs at once (with its header template and request packet), more than the pools hold (clusters = {clusters}, mbufs = {mbufs})",
                        units::human_bytes(document),
                        need.0,
                        need.0 + need.1 + 2
                    ),
                );
            }
            let closer = Closer::parse(c.choice(&r.close, &f("close"), "client", Closer::NAMES)?).expect("checked");
            if let (Closer::Client, Some(m)) = (closer, &r.msl) {
                return c.err(
                    m.span(),
                    &f("msl"),
                    "sets how long TIME_WAIT keeps a connection the server closed: it goes with close = \"server\"",
                );
            }
            // FreeBSD's TCPTV_MSL, 30 s (netinet/tcp_timer.h), so TIME_WAIT lasts 60 s.
            let msl_ns = c.opt_ns(&r.msl, &f("msl"), 30_000_000_000)?;
            WorkloadSpec::WebServer(WebServer {
                pool,
                load,
                document,
                // [assumed] 200 us of CPU per request: a 2002 server on a 1.7 GHz Pentium 4 serving
                // a small static file; the seed's throughput figures were not recoverable.
                cpu_ns: c.opt_ns(&r.compute, &f("compute"), 200_000)?,
                // [assumed] 200 us from an answer to its acknowledgement on gigabit Ethernet.
                rtt_ns: c.opt_ns(&r.rtt, &f("rtt"), 200_000)?.max(1),
                // [assumed] 192 KiB of the guest's code and data on a request's path: Ilwaco's
                // TCP stack, threads, libc subset and the server; its size is not published.
                path_pages: page_number(&r.path, "path", 48)?,
                closer,
                msl_ns,
                mbufs,
                clusters,
            })
        }
        "kernel-build" => {
            let arch = Arch::parse(c.choice(&r.arch, &f("arch"), "x86_64", Arch::NAMES)?).expect("checked");
            // defconfig, as the project first measured; seed 002 does not say which.
            let config = Config::parse(c.choice(&r.config, &f("config"), "defconfig", Config::NAMES)?).expect("checked");
            let tree = r.tree.as_ref().map_or("linux-2.6.32".to_string(), |t| t.get_ref().clone());
            if tree.is_empty() {
                return c.err(r.tree.as_ref().expect("given").span(), &f("tree"), "must be a non-empty name");
            }
            WorkloadSpec::KernelBuild(KernelBuild {
                tree,
                arch,
                config,
                // Seed 002: `make -j8`, twice.
                jobs: c.int(&r.jobs, &f("jobs"), 8, 1, 256)? as u32,
                builds: c.int(&r.builds, &f("builds"), 2, 1, 1_000)? as u32,
                units: c.int(&r.units, &f("units"), TreeShape::of(config, arch).units() as u64, 1, 100_000)? as u32,
                // 0.71 s: the 1,650 defconfig units built by gcc 12 on this machine's two cores in
                // 9 min 43 s (bench/compressibility.md).
                compile_ns: c.opt_ns(&r.compute, &f("compute"), 710_000_000)?,
            })
        }
        "dotnet-heap" => {
            // Seed 000: the LOH never fell below about 4 GB in an 8 GB guest; half of MemTotal.
            let live = c.opt_bytes(&r.live, &f("live"), mem_total / 2)?;
            // 64 MiB arrays: each fills its own 128 MB LOH segment (dotnet-gc.md 3.1, 3.3).
            let object = c.opt_bytes(&r.object, &f("object"), 64 << 20)?;
            if object < 85_000 || object % PAGE_SIZE != 0 || object > 2 << 30 {
                let span = r.object.as_ref().map_or(w.span(), |o| o.span());
                return c.err(span, &f("object"), "a Large Object Heap object is 85,000 bytes to 2 GiB, in whole pages");
            }
            if live < object {
                let span = r.live.as_ref().map_or(w.span(), |o| o.span());
                return c.err(
                    span,
                    &f("live"),
                    format!("the live data ({}) is smaller than one object ({})", units::fmt_bytes(live), units::fmt_bytes(object)),
                );
            }
            if r.cycles.is_none() {
                return c.err(w.span(), &f("cycles"), "a dotnet-heap workload needs its amount of work, e.g. cycles = 2000");
            }
            WorkloadSpec::DotnetHeap(DotnetHeap {
                live,
                object,
                cycles: c.int(&r.cycles, &f("cycles"), 1, 1, i64::MAX as u64)?,
                // [unpublished] the seed gives no allocation rate: one cycle in four replaces its object.
                replace_percent: c.int(&r.replace_percent, &f("replace_percent"), 25, 0, 100)? as u32,
                // 512 8-byte elements per page, each update a DRAM miss of about 100 ns ("fetch
                // from main memory: 100 nanosec", Norvig's typical-PC timings, norvig.com/21-days.html).
                visit_ns: c.opt_ns(&r.visit, &f("visit"), 51_200)?,
            })
        }
        "stress-vm" => WorkloadSpec::StressVm(StressVm::new(
            c.int(&r.workers, &f("workers"), 1, 1, 10_000)? as u32,
            match &r.bytes {
                Some(b) => match pages_of(b, "bytes")? {
                    0 => return c.err(b.span(), &f("bytes"), "a worker allocates at least one page"),
                    pages => mapping(&r.bytes, "bytes", pages)?,
                },
                None => StressVm::DEFAULT_PAGES,
            },
            r.keep.as_ref().is_some_and(|b| *b.get_ref()),
            r.rounds.as_ref().map(|_| c.int(&r.rounds, &f("rounds"), 1, 1, u32::MAX as u64)).transpose()?,
        )),
        "bonnie" => {
            let pages = match &r.size {
                Some(q) => pages_of(q, "size")?,
                None => units::pages(Bonnie::default_bytes(mem_total)) as u32,
            };
            if pages == 0 {
                return c.err(w.span(), &f("size"), "the file must be at least one page");
            }
            WorkloadSpec::Bonnie(Bonnie::new(pages))
        }
        "stress" => {
            let passes = r.passes.as_ref().map(|_| c.int(&r.passes, &f("passes"), 1, 1, u32::MAX as u64)).transpose()?;
            WorkloadSpec::Stress(Stress::new(
                c.int(&r.instances, &f("instances"), 1, 1, 10_000)? as u32,
                mapping(&r.pages, "pages", page_number(&r.pages, "pages", Stress::SEED_PAGES)?)?,
                passes,
            ))
        }
        "file-io" => {
            let size = r
                .size
                .as_ref()
                .ok_or_else(|| c.src.error(Some(w.span()), &f("size"), "a file-io workload needs a size, e.g. size = \"1GiB\""))?;
            let pages = pages_of(size, "size")?;
            let block = match &r.block {
                Some(b) => pages_of(b, "block")?,
                None => (DEFAULT_BLOCK / PAGE_SIZE) as u32,
            };
            if pages == 0 || block == 0 {
                return c.err(w.span(), &f("size"), "size and block must be at least one page");
            }
            WorkloadSpec::FileIo(FileIo::new(
                pages,
                block,
                r.fsync.as_ref().is_none_or(|b| *b.get_ref()),
                r.read.as_ref().is_some_and(|b| *b.get_ref()),
            ))
        }
        "random" => {
            if r.pages.is_none() || r.touches.is_none() {
                return c.err(w.span(), &f("pages"), "a random workload needs pages and touches, e.g. pages = 1000, touches = 100000");
            }
            WorkloadSpec::Random(Random::new(
                mapping(&r.pages, "pages", page_number(&r.pages, "pages", 1)?)?,
                c.int(&r.touches, &f("touches"), 0, 0, i64::MAX as u64)?,
                r.seed.as_ref().map(|_| c.int(&r.seed, &f("seed"), 1, 1, i64::MAX as u64)).transpose()?,
                r.write.as_ref().is_some_and(|b| *b.get_ref()),
                c.opt_ns(&r.compute, &f("compute"), 0)?,
                c.choice(&r.distribution, &f("distribution"), "uniform", &["uniform", "zipf"])? == "zipf",
            ))
        }
        "trace" => {
            let file = r.file.as_ref().map(|f| f.get_ref().trim().to_string()).filter(|f| !f.is_empty());
            let file =
                file.ok_or_else(|| c.src.error(Some(w.span()), &f("file"), "a trace workload needs a file, e.g. file = \"run.mvtrace\""))?;
            WorkloadSpec::Trace(TraceReplay {
                file,
                loops: c.int(&r.loops, &f("loops"), 1, 1, u32::MAX as u64)?,
                compute_ns: c.opt_ns(&r.compute, &f("compute"), 0)?,
            })
        }
        _ => {
            let fp = r.footprint.as_ref().ok_or_else(|| {
                c.src.error(Some(w.span()), &f("footprint"), "an idle workload needs a footprint, e.g. footprint = \"256MiB\"")
            })?;
            let footprint = mapping(&r.footprint, "footprint", pages_of(fp, "footprint")?)?;
            let active = match &r.active {
                Some(a) => pages_of(a, "active")?,
                None => 0,
            };
            let period = c.opt_ns(&r.period, &f("period"), 0)?;
            if active > 0 && period == 0 {
                return c.err(w.span(), &f("period"), "an idle workload with an active set needs a period (longer than zero)");
            }
            if active > footprint {
                let a = r.active.as_ref().expect("active > 0");
                return c.err(
                    a.span(),
                    &f("active"),
                    format!("the active set ({active} pages) is larger than the footprint ({footprint} pages); it is part of it"),
                );
            }
            WorkloadSpec::Idle(Idle::new(footprint, active, period))
        }
    };
    let names: Vec<&str> = Content::ALL.iter().map(|c| c.key()).collect();
    let content = r
        .content
        .as_ref()
        .map(|_| c.choice(&r.content, &f("content"), "", &names).map(|n| Content::parse(n).expect("checked")))
        .transpose()?;
    let mut mix = crate::content::ContentMix::new(kind, content, spec.content(false), r.program.as_ref().map(|p| p.get_ref().clone()));
    let (mut declared, mut zero, mut common, mut duplicate) = (0.0, None, 0.0, 0.0);
    for (q, field) in [(&r.zero_pages, "zero_pages"), (&r.common_pages, "common_pages"), (&r.duplicate_pages, "duplicate_pages")] {
        let Some(q) = q else { continue };
        let x = *q.get_ref();
        if !(0.0..=1.0).contains(&x) {
            return c.err(q.span(), &f(field), format!("{x} is not a share of pages from 0 to 1"));
        }
        declared += x;
        if declared > 1.0 + 1e-9 {
            return c.err(
                q.span(),
                &f(field),
                format!("zero_pages, common_pages and duplicate_pages add up to {declared}, more than every page"),
            );
        }
        match field {
            "zero_pages" => zero = Some(x),
            "common_pages" => common = x,
            _ => duplicate = x,
        }
    }
    mix.set_shares(zero, common, duplicate);
    if let Some(p) = &r.captured {
        // Read now, so a missing or bad file is named before the run; kept by its full path so
        // the resolved scenario runs from anywhere. A relative path is the scenario file's
        // neighbour (or in its `files_from`), as a trace's is (not the working directory's).
        let given = std::path::Path::new(p.get_ref());
        let beside = c.files.as_ref().filter(|_| given.is_relative()).map(|d| d.join(given));
        let full = std::fs::canonicalize(beside.as_deref().unwrap_or(given))
            .map_err(|e| c.src.error(Some(p.span()), &f("captured"), format!("cannot read {}: {e}", p.get_ref())))?;
        let full = full.to_string_lossy();
        let cap = crate::content::Captured::load(&full).map_err(|m| c.src.error(Some(p.span()), &f("captured"), m))?;
        mix.captured = Some(cap);
    }
    let memory_limit = match &r.memory_limit {
        Some(q) => {
            let b = c.bytes(q, &f("memory_limit"))?;
            // Whole pages, rounded down, as the kernel reads memory.max (page_counter_memparse).
            let pages = b / PAGE_SIZE;
            if pages == 0 {
                return c.err(q.span(), &f("memory_limit"), "a memory cgroup's limit must hold at least one page (4 KiB)");
            }
            Some(pages)
        }
        None => None,
    };
    if let Some(n) = r.name.as_ref().filter(|n| n.get_ref().trim().is_empty()) {
        return c.err(n.span(), &f("name"), "must be a non-empty name (leave it out and the workload goes by its kind)");
    }
    Ok(WorkloadEntry {
        name: r.name.as_ref().map_or_else(|| kind.to_string(), |n| n.get_ref().clone()),
        start_ns: c.opt_ns(&r.start, &f("start"), 0)?,
        spec,
        mix,
        memory_limit,
    })
}
