//! The scenario as resolved, written back as TOML with every default filled in (a VM's limit and
//! shares only where set): a run folder's `scenario.toml`, which reproduces the run when loaded
//! again.

use toml::{Table, Value};

use super::resolve::{Scenario, default_shares};
use crate::units::{PAGE_SIZE, fmt_bytes, fmt_duration, fmt_rate};
use crate::workloads::{Closer, Load, WorkloadSpec};

fn s(x: impl Into<String>) -> Value {
    Value::String(x.into())
}

fn i(x: u64) -> Value {
    Value::Integer(x as i64)
}

fn table(entries: Vec<(&str, Value)>) -> Value {
    Value::Table(entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// VM tables with runs of identical VMs named `base-1`, `base-2`, ... folded back into one table
/// with a `count`, as a scenario writes them: 10,000 alike VMs stay one table.
fn counted(vms: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut run: Option<(String, Table, u64)> = None;
    let flush = |run: Option<(String, Table, u64)>, out: &mut Vec<Value>| {
        if let Some((base, mut t, n)) = run {
            t.insert("name".into(), s(if n == 1 { format!("{base}-1") } else { base }));
            if n > 1 {
                t.insert("count".into(), i(n));
            }
            out.push(Value::Table(t));
        }
    };
    for v in vms {
        let Value::Table(mut t) = v else { unreachable!("VMs are tables") };
        let name = t.remove("name").and_then(|n| n.as_str().map(String::from)).unwrap_or_default();
        let numbered = name.rsplit_once('-').and_then(|(b, k)| Some((b.to_string(), k.parse::<u64>().ok()?)));
        match (&mut run, numbered) {
            (Some((base, body, n)), Some((b, k))) if *base == b && k == *n + 1 && *body == t => *n += 1,
            (_, Some((b, 1))) => {
                flush(run.take(), &mut out);
                run = Some((b, t, 1));
            }
            _ => {
                flush(run.take(), &mut out);
                t.insert("name".into(), s(name));
                out.push(Value::Table(t));
            }
        }
    }
    flush(run, &mut out);
    out
}

impl Scenario {
    /// The resolved scenario as a TOML document.
    pub fn to_toml(&self) -> String {
        let mut doc = Table::new();
        doc.insert("name".into(), s(&self.name));
        if !self.description.is_empty() {
            doc.insert("description".into(), s(&self.description));
        }
        doc.insert("seed".into(), i(self.seed));
        if let Some(d) = self.duration_ns {
            doc.insert("duration".into(), s(fmt_duration(d)));
        }
        if let Some(f) = &self.files_from {
            doc.insert("files_from".into(), s(f));
        }
        let mut sharing = vec![("page_sharing", Value::Boolean(self.host.sharing.is_some()))];
        if let Some(k) = self.host.sharing.as_ref().and_then(|p| p.ksm) {
            let mut ksm = vec![("run", i(k.run as u64))];
            ksm.extend(k.settings.entries().into_iter().map(|(name, v)| (name, i(v))));
            sharing.push(("ksm", table(ksm)));
        } else if let Some(p) = &self.host.sharing {
            sharing.push(("share_scan_time", s(fmt_duration(p.scan_time_ns))));
            sharing.push(("share_force_salting", i(p.force_salting as u64)));
            sharing.push(("large_pages", Value::Boolean(p.large_pages)));
        }
        sharing.push(("tmem", Value::Boolean(self.host.tmem.is_some())));
        if self.host.policy.name == "esx" {
            sharing.push(("esx_states", s(self.host.policy.esx_states)));
            sharing.push(("idle_tax", i((self.host.policy.idle_tax * 100.0).round() as u64)));
        }
        if self.host.profile == crate::host::HostProfile::Denali {
            sharing.push(("vm_metadata", s(fmt_bytes(self.host.vm_metadata))));
        }
        if let Some(n) = self.host.cpus {
            sharing.push(("cpus", i(n as u64)));
        }
        if let Some(n) = self.host.dom0_vcpus {
            sharing.push(("dom0_vcpus", i(n as u64)));
        }
        if let Some(t) = &self.host.tmem {
            sharing.push(("tmem_dedup", Value::Boolean(t.dedup)));
            sharing.push(("tmem_compress", Value::Boolean(t.compress)));
        }
        doc.insert(
            "host".into(),
            table(
                vec![
                    ("memory", s(fmt_bytes(self.host.memory))),
                    ("policy", s(&self.host.policy.name)),
                    ("sample_interval", s(fmt_duration(self.host.sample_interval_ns))),
                    ("lookahead", s(fmt_duration(self.host.lookahead_ns))),
                    ("profile", s(self.host.profile.name())),
                    ("hypervisor", s(fmt_bytes(self.host.hypervisor))),
                    ("swap", Value::Boolean(self.host.swap)),
                    ("zip_max_percent", i(self.host.zip_max_percent as u64)),
                    ("compressor", s(self.host.compressor.name())),
                    ("balloon_max_percent", i(self.host.balloon_max_percent as u64)),
                    ("sample_period", s(fmt_duration(self.host.sample_period_ns))),
                    ("sample_pages", i(self.host.sample_pages as u64)),
                ]
                .into_iter()
                .chain(sharing)
                .collect(),
            ),
        );
        let c = &self.costs;
        let mut costs = vec![
            ("dram_access", s(fmt_duration(c.dram_access_ns))),
            ("minor_fault", s(fmt_duration(c.minor_fault_ns))),
            ("host_back", s(fmt_duration(c.host_back_ns))),
            ("page_copy", s(fmt_duration(c.page_copy_ns))),
            ("reclaim_scan", s(fmt_duration(c.reclaim_scan_ns))),
            ("reclaim_free", s(fmt_duration(c.reclaim_free_ns))),
            ("reclaim_pageout", s(fmt_duration(c.reclaim_pageout_ns))),
            ("balloon_page", s(fmt_duration(c.balloon_page_ns))),
            ("compress", s(fmt_duration(self.host.costs.compress_ns))),
            ("decompress", s(fmt_duration(self.host.costs.decompress_ns))),
            ("host_swap_out", s(fmt_duration(self.host.costs.swap_out_ns))),
        ];
        // dom0's backend cost only where it runs: elsewhere it would be said to be ignored.
        if self.host.dom0_vcpus.is_some() {
            costs.push(("blkback_request", s(fmt_duration(self.host.costs.blkback_request_ns))));
        }
        doc.insert("costs".into(), table(costs));
        let ds = self
            .datastores
            .iter()
            .map(|d| {
                let mut t = vec![
                    ("name", s(&d.name)),
                    ("device", s(d.device.kind.name())),
                    ("latency", s(fmt_duration(d.device.latency_ns))),
                    ("bandwidth", s(fmt_rate(d.device.bandwidth))),
                    ("queue_depth", i(d.device.queue_depth as u64)),
                    ("seek", s(fmt_duration(d.device.seek_ns))),
                ];
                if let Some(f) = d.device.filer {
                    t.push(("cache", s(fmt_bytes(f.cache_bytes))));
                    t.push(("disks", i(f.disks as u64)));
                }
                table(t)
            })
            .collect();
        doc.insert("datastore".into(), Value::Array(ds));
        let vms = self.vms.iter().map(|v| {
            let g = &v.guest;
            let sysctl: Table = g.sysctl.entries().into_iter().map(|(k, x)| (k.to_string(), i(x))).collect();
            let workloads = g
                .workloads
                .iter()
                .map(|w| {
                    let mut e = vec![("kind", s(w.spec.kind())), ("name", s(&w.name)), ("start", s(fmt_duration(w.start_ns)))];
                    if let Some(c) = w.mix.class {
                        e.push(("content", s(c.key())));
                    }
                    if let Some(z) = w.mix.zero() {
                        e.push(("zero_pages", Value::Float(z)));
                    }
                    if w.mix.common() > 0.0 {
                        e.push(("common_pages", Value::Float(w.mix.common())));
                    }
                    if w.mix.duplicate() > 0.0 {
                        e.push(("duplicate_pages", Value::Float(w.mix.duplicate())));
                    }
                    if let Some(p) = &w.mix.program {
                        e.push(("program", s(p)));
                    }
                    if let Some(c) = &w.mix.captured {
                        e.push(("captured", s(&c.path)));
                    }
                    if let Some(l) = w.memory_limit {
                        e.push(("memory_limit", s(fmt_bytes(l * PAGE_SIZE))));
                    }
                    match &w.spec {
                        WorkloadSpec::Stress(st) => {
                            e.push(("instances", i(st.instances as u64)));
                            e.push(("pages", i(st.pages as u64)));
                            if let Some(p) = st.passes {
                                e.push(("passes", i(p)));
                            }
                        }
                        WorkloadSpec::FileIo(f) => {
                            e.push(("size", s(fmt_bytes(f.pages as u64 * PAGE_SIZE))));
                            e.push(("block", s(fmt_bytes(f.block_pages as u64 * PAGE_SIZE))));
                            e.push(("fsync", Value::Boolean(f.fsync)));
                            e.push(("read", Value::Boolean(f.read)));
                        }
                        WorkloadSpec::Random(rd) => {
                            e.push(("pages", i(rd.pages as u64)));
                            e.push(("touches", i(rd.touches)));
                            if let Some(seed) = rd.seed {
                                e.push(("seed", i(seed)));
                            }
                            e.push(("write", Value::Boolean(rd.write)));
                            e.push(("compute", s(fmt_duration(rd.compute_ns))));
                            e.push(("distribution", s(if rd.zipf { "zipf" } else { "uniform" })));
                        }
                        WorkloadSpec::Trace(t) => {
                            e.push(("file", s(&t.file)));
                            e.push(("loops", i(t.loops)));
                            e.push(("compute", s(fmt_duration(t.compute_ns))));
                        }
                        WorkloadSpec::StressVm(sv) => {
                            e.push(("workers", i(sv.workers as u64)));
                            e.push(("bytes", s(fmt_bytes(sv.pages as u64 * PAGE_SIZE))));
                            e.push(("keep", Value::Boolean(sv.keep)));
                            if let Some(n) = sv.rounds {
                                e.push(("rounds", i(n)));
                            }
                        }
                        WorkloadSpec::Bonnie(b) => e.push(("size", s(fmt_bytes(b.pages as u64 * PAGE_SIZE)))),
                        WorkloadSpec::KernelBuild(k) => {
                            e.push(("tree", s(&k.tree)));
                            e.push(("arch", s(k.arch.name())));
                            e.push(("config", s(k.config.name())));
                            e.push(("jobs", i(k.jobs as u64)));
                            e.push(("builds", i(k.builds as u64)));
                            e.push(("units", i(k.units as u64)));
                            e.push(("compute", s(fmt_duration(k.compile_ns))));
                        }
                        WorkloadSpec::DotnetHeap(d) => {
                            e.push(("live", s(fmt_bytes(d.live))));
                            e.push(("object", s(fmt_bytes(d.object))));
                            e.push(("cycles", i(d.cycles)));
                            e.push(("replace_percent", i(d.replace_percent as u64)));
                            e.push(("visit", s(fmt_duration(d.visit_ns))));
                        }
                        WorkloadSpec::WebServer(ws) => {
                            e.push(("pool", s(ws.pool.name())));
                            match ws.load {
                                Load::Open { rate } => e.push(("rate", Value::Float(rate))),
                                Load::Closed { clients, think_ns, zipf } => {
                                    e.push(("clients", i(clients as u64)));
                                    e.push(("think", s(fmt_duration(think_ns))));
                                    e.push(("zipf", Value::Float(zipf)));
                                }
                            }
                            e.push(("document", s(fmt_bytes(ws.document))));
                            e.push(("compute", s(fmt_duration(ws.cpu_ns))));
                            e.push(("rtt", s(fmt_duration(ws.rtt_ns))));
                            e.push(("path", i(ws.path_pages as u64)));
                            e.push(("close", s(ws.closer.name())));
                            if ws.closer == Closer::Server {
                                e.push(("msl", s(fmt_duration(ws.msl_ns))));
                            }
                            e.push(("mbufs", i(ws.mbufs as u64)));
                            e.push(("clusters", i(ws.clusters as u64)));
                        }
                        WorkloadSpec::Idle(id) => {
                            e.push(("footprint", s(fmt_bytes(id.footprint_pages as u64 * PAGE_SIZE))));
                            e.push(("active", s(fmt_bytes(id.active_pages as u64 * PAGE_SIZE))));
                            e.push(("period", s(fmt_duration(id.period_ns))));
                        }
                    }
                    table(e)
                })
                .collect();
            let mut fields = vec![
                ("name", s(&g.name)),
                ("memory", s(fmt_bytes((g.memory_pages - g.boot_balloon_pages) as u64 * PAGE_SIZE))),
                ("vcpus", i(g.vcpus as u64)),
                ("reservation", s(fmt_bytes(v.reservation))),
                ("overhead", s(fmt_bytes(v.overhead))),
                ("os", s(&v.os)),
                ("balloon", s(g.balloon.name())),
                ("host_swap_datastore", s(&self.datastores[v.swap_datastore].name)),
                ("datastore", s(&self.datastores[v.datastore].name)),
                ("swap", s(fmt_bytes(g.swap_pages as u64 * PAGE_SIZE))),
                ("replacement", s(g.replacement.name())),
                ("kernel_reserved", s(fmt_bytes(g.reserved_pages as u64 * PAGE_SIZE))),
                ("transparent_hugepage", s(g.transparent_hugepage.name())),
                ("cgroup", s(g.cgroup.name())),
                ("sysctl", Value::Table(sysctl)),
                ("workload", Value::Array(workloads)),
            ];
            // A limit or shares only where set: under a policy that ignores them, a reload would
            // otherwise warn about what the user never wrote.
            let memory = g.memory_pages as u64 * PAGE_SIZE;
            if v.limit < memory {
                fields.push(("limit", s(fmt_bytes(v.limit))));
            }
            if v.shares != default_shares(memory) {
                fields.push(("shares", i(v.shares)));
            }
            if let Some(img) = &g.image {
                fields.push(("image", s(&img.name)));
                fields.push(("image_common", s(fmt_bytes(img.common_pages as u64 * PAGE_SIZE))));
            }
            if g.boot_balloon_pages > 0 {
                fields.push(("maxmem", s(fmt_bytes(g.memory_pages as u64 * PAGE_SIZE))));
            }
            if let Some(t) = g.zero_memory_at_ns {
                fields.push(("zero_memory_at", s(fmt_duration(t))));
            }
            if self.host.tmem.is_some() {
                fields.push(("cleancache", Value::Boolean(g.cleancache)));
                fields.push(("frontswap", Value::Boolean(g.frontswap)));
                // Only the self-ballooning driver reads it; elsewhere only a value not its default.
                if self.host.policy.name == "xen-selfballoon" || g.frontswap_selfshrink != g.frontswap {
                    fields.push(("frontswap_selfshrink", Value::Boolean(g.frontswap_selfshrink)));
                }
            }
            // A Windows guest's replacement comes with its `os`, and it has no Linux kernel knobs.
            if g.replacement == crate::guest::Replacement::Windows {
                fields.retain(|(k, _)| !["replacement", "sysctl", "transparent_hugepage", "cgroup"].contains(k));
            }
            table(fields)
        });
        doc.insert("vm".into(), Value::Array(counted(vms)));
        let mut report = vec![("columns", Value::Array(self.report.columns.iter().map(s).collect()))];
        if let (a, Some(b)) = self.report.window_ns {
            report.push(("window", Value::Array(vec![s(fmt_duration(a)), s(fmt_duration(b))])));
        }
        doc.insert("report".into(), table(report));
        let header = match &self.variant {
            Some(v) => {
                format!("# {} as resolved for variant '{v}', every default filled in (limit and shares only where set)\n", self.name)
            }
            None => format!("# {} as resolved, every default filled in (limit and shares only where set)\n", self.name),
        };
        header + &toml::to_string(&doc).expect("a TOML table serializes")
    }
}
