//! Transcendent memory (Xen tmem) under a running guest: cleancache and frontswap serve page-cache
//! and swap reads; self-ballooning alone makes the page cache refault. Every invariant (tmem's
//! accounting, every frontswap page holding what its process wrote, every frame free or owned
//! once) is checked after each step.

mod common;

use common::{run, run_checked, scenario};
use memvisor::Simulation;

/// Two Xen guests at `guest` MiB (maxmem 512 MiB) building `units` units of a kernel tree with
/// `jobs` jobs, twice, on a host with `spare` MiB beside them and Xen's 288 MiB; `policy` and
/// `tmem` set the configuration.
fn build(policy: &str, tmem: &str, jobs: u32, units: u32, guest: u64, spare: u64) -> memvisor::Scenario {
    let host = 288 + 2 * guest + spare;
    let mut text = format!(
        "name = \"t\"\nseed = 2\n[host]\nmemory = \"{host}MiB\"\nprofile = \"xen\"\nhypervisor = \"288MiB\"\npolicy = \"{policy}\"\n\
         sample_interval = \"5s\"\n{tmem}\n[[datastore]]\nname = \"ide\"\ndevice = \"hdd\"\n"
    );
    for (i, arch) in ["x86_64", "i386"].iter().enumerate() {
        text += &format!(
            "[[vm]]\nname = \"g{i}\"\nmemory = \"{guest}MiB\"\nmaxmem = \"512MiB\"\ndatastore = \"ide\"\nswap = \"768MiB\"\n\
             kernel_reserved = \"16MiB\"\ntransparent_hugepage = \"never\"\n\
             workload = {{ kind = \"kernel-build\", arch = \"{arch}\", jobs = {jobs}, units = {units} }}\n"
        );
    }
    scenario(&text)
}

fn counter(sim: &Simulation, vm: usize, name: &str) -> f64 {
    sim.results().summary.vms[vm].counters[name]
}

#[test]
fn frontswap_and_cleancache_keep_every_page_under_memory_pressure() {
    // 256 MiB guests (eight compilers fill them) on a host with 16 MiB to spare: the pool fills.
    let s = build("xen-selfballoon", "tmem = true\ntmem_dedup = true\ntmem_compress = true", 8, 120, 256, 16);
    let sim = run_checked(&s, 2_000_000_000);
    for vm in 0..2 {
        assert!(counter(&sim, vm, "frontswap_succ_stores_pages") > 0.0, "frontswap took swap writes");
        assert!(counter(&sim, vm, "frontswap_loads_pages") > 0.0, "and gave them back");
        assert!(counter(&sim, vm, "cleancache_succ_gets_pages") > 0.0, "cleancache served reads");
        assert!(counter(&sim, vm, "cleancache_failed_gets_pages") > 0.0, "and missed pages it had dropped");
    }
    let t = sim.world().host().tmem().expect("on");
    assert!(t.stats.deduped_puts > 0, "the two guests' identical sources were stored once");
    assert!(t.stats.evicted > 0, "the pool filled and evicted");
    // The summary's pools (`xl tmem-list -l`) count what the guests' own counters count.
    let summary = sim.results().summary;
    let tm = summary.host.tmem.as_ref().expect("a tmem host's summary has its counters");
    for (vm, name) in ["g0", "g1"].iter().enumerate() {
        let pool =
            |kind: &str| tm.pools.iter().find(|p| p.vm == *name && p.kind == kind).unwrap_or_else(|| panic!("{name} has a {kind} pool"));
        let (ep, pp) = (pool("EP"), pool("PP"));
        assert_eq!(ep.stats.found_gets as f64, counter(&sim, vm, "cleancache_succ_gets_pages"), "{name}: cleancache hits");
        assert_eq!((ep.stats.gets - ep.stats.found_gets) as f64, counter(&sim, vm, "cleancache_failed_gets_pages"), "{name}: misses");
        assert_eq!(ep.stats.puts as f64, counter(&sim, vm, "cleancache_puts_pages"), "{name}: cleancache puts");
        assert_eq!(pp.stats.good_puts as f64, counter(&sim, vm, "frontswap_succ_stores_pages"), "{name}: frontswap stores");
        assert_eq!((pp.stats.puts - pp.stats.good_puts) as f64, counter(&sim, vm, "frontswap_failed_stores_pages"), "{name}: refused");
        assert_eq!(pp.stats.found_gets as f64, counter(&sim, vm, "frontswap_loads_pages"), "{name}: frontswap loads");
        // Deleted files flush their objects (cleancache_invalidate_inode); freed swap slots flush
        // their pages (frontswap_invalidate_page).
        assert!(ep.stats.flush_objs > 0 && pp.stats.flushes > 0, "{name}: {:?} {:?}", ep.stats, pp.stats);
    }
    assert_eq!(tm.clients.len(), 2);
    assert_eq!(tm.host.evicted, t.stats.evicted);
}

/// Pages the self-shrink's decisions brought back, by the log's outcomes.
fn brought_back(sim: &Simulation) -> u64 {
    let n = |o: &str| o.strip_prefix("applied: ")?.strip_suffix(" pages brought back")?.parse::<u64>().ok();
    sim.results().decisions.iter().filter(|d| d.action.starts_with("shrink frontswap")).filter_map(|d| n(&d.outcome)).sum()
}

#[test]
fn self_shrink_brings_idle_pages_back_from_frontswap() {
    // An idle process's 96 MiB is pushed into frontswap by a 200 MiB stress run in a 256 MiB
    // guest; once stress has ended frontswap stops growing, and the driver takes it back a
    // twentieth at a time. frontswap's pool and the guest's page tables stay consistent (every
    // invariant checked each simulated second).
    let text = |selfshrink: bool| {
        format!(
            "name = \"t\"\nseed = 1\nduration = \"150s\"\n[host]\nmemory = \"1GiB\"\nprofile = \"xen\"\nhypervisor = \"288MiB\"\n\
             policy = \"xen-selfballoon\"\ntmem = true\nsample_interval = \"5s\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\nswap = \"512MiB\"\nkernel_reserved = \"16MiB\"\n\
             frontswap_selfshrink = {selfshrink}\n\
             [[vm.workload]]\nkind = \"idle\"\nfootprint = \"96MiB\"\n\
             [[vm.workload]]\nkind = \"stress\"\npages = \"200MiB\"\npasses = 3\nstart = \"1s\"\n"
        )
    };
    let on = run_checked(&scenario(&text(true)), 1_000_000_000);
    let off = run(&scenario(&text(false)));
    let held = |sim: &Simulation| sim.world().guests()[0].frontswap_pages();
    let back = brought_back(&on);
    assert!(back > 1000, "self-shrink brought {back} pages back");
    assert_eq!(brought_back(&off), 0, "noselfshrink: none");
    assert!(held(&off) > 1000, "without self-shrink frontswap keeps {} pages", held(&off));
    // A twentieth back every 5 s for some 25 ticks leaves about 0.95^25, a quarter, of it.
    assert!(held(&on) < held(&off) / 2, "with it {} pages are left, without {}", held(&on), held(&off));
    // The first shrink waits for three ticks (15 s) without growth.
    let first = on.results().decisions.iter().find(|d| d.action.starts_with("shrink frontswap")).expect("a shrink").time_ns;
    assert!(first >= 15_000_000_000, "first shrink at {first} ns");
}

#[test]
fn self_ballooning_alone_makes_the_page_cache_refault() {
    // Two jobs leave the page cache room in a 384 MiB guest: unchanged, the tree stays cached
    // between the builds; self-ballooning shrinks the guest toward Committed_AS and drops it.
    let refaults = |policy: &str| {
        let sim = run(&build(policy, "", 2, 150, 384, 96));
        (0..2).map(|vm| counter(&sim, vm, "workingset_refault_file_pages")).sum::<f64>()
    };
    let (unchanged, selfballooning) = (refaults("static"), refaults("xen-selfballoon"));
    assert!(unchanged == 0.0, "unchanged: {unchanged} page-cache refaults");
    assert!(selfballooning > 1000.0, "self-ballooning: {selfballooning} page-cache refaults");
}
