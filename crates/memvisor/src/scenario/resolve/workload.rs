//! A `[[vm.workload]]` entry: its kind's parameters, start, memory cgroup and content mix.

use toml::Spanned;

use super::{Ctx, DEFAULT_BLOCK, page_count};
use crate::guest::ilwaco::mbuf::PoolKind;
use crate::host::Content;
use crate::scenario::ScenarioError;
use crate::scenario::raw::{Qty, RawWorkload};
use crate::units::{self, PAGE_SIZE};
use crate::workloads::{
    Arch, Bonnie, Closer, Config, DotnetHeap, FileIo, Idle, KernelBuild, Load, Random, Stress, StressVm, TraceReplay, TreeShape, WebServer,
    WorkloadEntry, WorkloadSpec,
};

/// Resolves a workload of a VM whose MemTotal is `mem_total` bytes, with `swap_pages` of swap.
pub(super) fn resolve_workload(
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
    let Some(allowed) = kind_fields(kind) else {
        return c.err(
            r.kind.span(),
            &format!("vm.{vm}.workload.kind"),
            format!("'{kind}' is not one of: {}", WorkloadSpec::KINDS.join(", ")),
        );
    };
    for (field, span) in kind_specific_fields(r) {
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

/// The fields a workload of `kind` takes besides those every workload takes; None for a kind that
/// does not exist.
fn kind_fields(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
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
        _ => return None,
    })
}

/// Every kind-specific field of a workload, with where it was given (None: not given).
fn kind_specific_fields(r: &RawWorkload) -> [(&'static str, Option<std::ops::Range<usize>>); 44] {
    [
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
        ("config", r.config.as_ref().map(|x| x.span())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field a kind takes but the presence check does not list would be accepted, and ignored,
    /// on every other kind (`config` was, on a stress workload).
    #[test]
    fn every_kind_specific_field_is_checked_for_presence() {
        let r: RawWorkload = toml::from_str("kind = \"idle\"").unwrap();
        let checked: Vec<&str> = kind_specific_fields(&r).iter().map(|(n, _)| *n).collect();
        let taken: Vec<&str> = WorkloadSpec::KINDS.iter().flat_map(|k| kind_fields(k).expect("a kind's fields")).copied().collect();
        for f in &taken {
            assert!(checked.contains(f), "{f} is taken by a kind but not checked for presence");
        }
        for f in &checked {
            assert!(taken.contains(f), "{f} is checked but no kind takes it");
        }
    }

    #[test]
    fn a_field_of_another_kind_is_refused() {
        let text = "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                    [[vm]]\nname = \"g\"\nmemory = \"128MiB\"\ndatastore = \"d\"\n\
                    workload = { kind = \"stress\", pages = 100, config = \"rhel5\" }\n";
        let e = crate::scenario::load(text, "t.toml", &[]).unwrap_err().to_string();
        assert!(e.starts_with("t.toml:12:53: vm.g.workload.stress.config: a 'stress' workload has no field 'config'"), "{e}");
    }
}
