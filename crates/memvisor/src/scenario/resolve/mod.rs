//! From the file's tables to a fully specified scenario: units parsed, defaults filled in (each
//! citing its source), cross-references and ranges checked.

use toml::Spanned;

use super::raw::{Qty, RawHost, RawScenario};
use super::{ScenarioError, Source};
use crate::devices::{DeviceKind, DeviceSpec};
use crate::guest::{BalloonDriver, Costs, GuestConfig};
use crate::host::{HostCosts, HostProfile, PshareSettings, TmemSettings};
use crate::metrics::MAX_SERIES_ROWS;
use crate::policy::{ESX_STATE_TABLES, POLICY_NAMES, PolicySpec};
use crate::units::{self, PAGE_SIZE};

// One file per part of the scenario; each reads its tables with this module's `Ctx`.
mod host;
mod report;
mod vm;
mod workload;

use host::{resolve_sharing, resolve_tmem};
use report::{phase_of_column, resolve_report};
pub(in crate::scenario) use vm::default_shares;
use vm::resolve_vm;

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

/// Where in a scenario's text something was written ("file:line:col", or the `--set` that set
/// it): provenance for messages, not content, so two scenarios that say the same are equal
/// wherever they were written (a run folder's scenario.toml reloads equal to its original).
#[derive(Clone, Debug, Default)]
pub struct WrittenAt(pub String);

impl PartialEq for WrittenAt {
    fn eq(&self, _: &Self) -> bool {
        true
    }
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
    /// Where the scenario names its policy ("file:line:col", the `--set` that did, or the file
    /// alone when the policy is the default): what a Python policy's errors are located by.
    pub policy_at: WrittenAt,
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
                        // A path where the module's name goes is the likely slip: say where files go.
                        let module = p.get_ref()[crate::policy::EXTERNAL_PREFIX.len()..].rsplit_once(':').map_or("", |(m, _)| m);
                        let path = if module.contains('/') || module.ends_with(".py") {
                            "; MODULE is a module's name, not a path: put the file (MODULE.py) in the scenario's folder, or in the \
                             folder files_from names, and name it without .py"
                        } else {
                            ""
                        };
                        return c.err(
                            p.span(),
                            "host.policy",
                            format!("a Python policy is named python:MODULE:CLASS, e.g. python:mypolicies:Greedy{path}"),
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
        policy_at: WrittenAt(src.locate(h.policy.as_ref().map(|p| p.span()))),
    })
}
