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
