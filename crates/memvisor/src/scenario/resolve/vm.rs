//! A `[[vm]]` entry: its memory, guest kernel, balloon, swap, datastores and workloads.

use toml::Spanned;

use super::workload::resolve_workload;
use super::{Ctx, DatastoreSpec, VmSpec, page_count};
use crate::guest::{BalloonDriver, CgroupVersion, Costs, GuestConfig, Replacement, Sysctl, Thp, Watermarks};
use crate::host::HostProfile;
use crate::scenario::ScenarioError;
use crate::scenario::raw::RawVm;
use crate::units::{self, PAGE_SIZE};
use crate::workloads::WorkloadSpec;

/// A VM's shares unless set: ESX's "normal", 10 per MB of configured memory.
pub(in crate::scenario) fn default_shares(memory: u64) -> u64 {
    10 * (memory >> 20)
}

pub(super) fn resolve_vm(
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
