//! Whole runs with every invariant checked after each short step: pages in exactly one state,
//! frames free or owned once, page tables, swap cache and counters consistent.

mod common;

use common::{one_guest, run_checked, scenario};
use memvisor::guest::Counter;

#[test]
fn paging_stress_thrashing_keeps_every_invariant() {
    let text = memvisor::scenario::case_text("paging-stress").unwrap();
    let sets = ["vm.kali.workload.stress.instances=5".to_string(), "vm.kali.workload.write-1GiB.start=8s".to_string()];
    let s = memvisor::scenario::load(text, "x", &sets).unwrap().remove(0);
    let sim = run_checked(&s, 20_000_000);
    let g = &sim.world().guests()[0];
    assert!(g.counters().get(Counter::PswpIn) > 1_000 && g.counters().get(Counter::PswpOut) > 1_000, "the run must page");
}

#[test]
fn exact_lru_with_files_and_anonymous_memory_keeps_every_invariant() {
    let s = scenario(&one_guest(
        "1GiB",
        "name = \"g\"\nmemory = \"256MiB\"\nreplacement = \"exact-lru\"\n\
         [[vm.workload]]\nkind = \"file-io\"\nsize = \"150MiB\"\nread = true\n\
         [[vm.workload]]\nkind = \"stress\"\npages = 12000\npasses = 3\n",
        "",
    ));
    run_checked(&s, 5_000_000);
}

#[test]
fn oom_kill_frees_the_biggest_process_and_keeps_every_invariant() {
    // 128 MiB guest (57.5 MiB MemTotal), 16 MiB swap; a 20 MiB process, then a 60 MiB one (each
    // within memory and swap, as the overcommit check asks) that cannot fit beside it: the larger
    // is killed, the smaller finishes.
    let s = scenario(&one_guest(
        "1GiB",
        "name = \"g\"\nmemory = \"128MiB\"\nswap = \"16MiB\"\n\
         [[vm.workload]]\nkind = \"stress\"\nname = \"small\"\npages = 5120\npasses = 50000\n\
         [[vm.workload]]\nkind = \"stress\"\nname = \"big\"\npages = 15360\npasses = 20\nstart = \"100ms\"\n",
        "",
    ));
    let sim = run_checked(&s, 10_000_000);
    let g = &sim.world().guests()[0];
    assert_eq!(g.counters().get(Counter::OomKill), 1, "{:?}", g.log());
    assert!(g.log()[0].1.contains("(big)"), "{}", g.log()[0].1);
    let small = g.processes().iter().find(|p| p.name == "small").unwrap();
    assert_eq!(small.state, memvisor::guest::ProcState::Exited);
}

/// The OOM killer in exact-LRU mode: with swap full, eviction kills the biggest process, and the
/// killed process must not receive the page it was faulting for (it owns nothing once it ended).
#[test]
fn exact_lru_oom_kill_leaves_the_killed_process_nothing() {
    // 80 pages of memory, 16 of swap, two sweeps over 60 pages each (each within memory and swap,
    // as the overcommit check asks): they cannot fit together, and one is killed.
    let s = scenario(&one_guest(
        "1GiB",
        "name = \"g\"\nmemory = \"80 pages\"\nkernel_reserved = \"0B\"\nswap = \"16 pages\"\nreplacement = \"exact-lru\"\n\
         workload = { kind = \"stress\", instances = 2, pages = 60, passes = 100000 }",
        "",
    ));
    let sim = run_checked(&s, 100_000);
    let g = &sim.world().guests()[0];
    assert_eq!(g.counters().get(Counter::OomKill), 1, "{:?}", g.log());
    let p = g.processes().iter().find(|p| p.state == memvisor::guest::ProcState::Killed).expect("one was killed");
    assert_eq!(p.state, memvisor::guest::ProcState::Killed);
    assert_eq!((p.mm.rss, p.mm.swapents), (0, 0), "the killed process still holds memory");
    assert_eq!(g.nr_free(), 80, "every page must be free once both processes are gone");
    assert_eq!(g.swap_used(), 0);
}

/// The Windows memory manager under a working set larger than memory and a second process that
/// exits mid-run: trimmed pages on exactly one of standby and modified (or under write), re-touches
/// as transition faults, clustered hard faults. (Ballooning a Windows guest is checked with the
/// esx-overcommit case.)
#[test]
fn windows_trimming_standby_and_modified_writer_keep_every_invariant() {
    let text = "name = \"t\"\nduration = \"12s\"\n[host]\nmemory = \"2GiB\"\nsample_interval = \"1s\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
                [[vm]]\nname = \"w\"\nos = \"windows\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
                [[vm.workload]]\nkind = \"random\"\npages = 70000\ntouches = 400000\nwrite = true\ncompute = \"5us\"\n\
                [[vm.workload]]\nkind = \"stress\"\npages = 8000\npasses = 3\n\
                [[vm]]\nname = \"l\"\nmemory = \"512MiB\"\ndatastore = \"d\"\n\
                workload = { kind = \"stress\", pages = 110000, passes = 40 }\n";
    let s = scenario(text);
    let sim = run_checked(&s, 20_000_000);
    let g = &sim.world().guests()[0];
    let c = |k| g.counters().get(k);
    assert!(c(Counter::WsTrimmed) > 10_000, "trimmed {}", c(Counter::WsTrimmed));
    let (tf, pr, pw) = (c(Counter::TransitionFaults), c(Counter::PageReads), c(Counter::PageWrites));
    assert!(tf > 0 && pr > 0 && pw > 0, "transition faults {tf}, page reads {pr}, page writes {pw}");
    assert!(c(Counter::PswpIn) > c(Counter::PageReads), "pagefile reads must cluster");
    assert_eq!(c(Counter::OomKill), 0, "{:?}", g.log());
}

/// Regression: a full compression cache with an odd number of half-page slots evicts its oldest
/// page to make room; the frame that eviction frees was once lost (neither free nor owned).
/// The 256 MiB guest's cache is 10 % of its memory, 13,107 slots.
#[test]
fn compression_cache_evictions_lose_no_frame() {
    let text = "name = \"t\"\nduration = \"6s\"\n[host]\nmemory = \"900MiB\"\nprofile = \"esx\"\npolicy = \"esx\"\nsample_interval = \"1s\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
                [[vm]]\nname = \"a\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
                [[vm.workload]]\nkind = \"random\"\npages = 70000\ntouches = 400000\nwrite = true\ncompute = \"5us\"\n\
                [[vm.workload]]\nkind = \"stress\"\npages = 8000\npasses = 3\n\
                [[vm]]\nname = \"b\"\nmemory = \"512MiB\"\ndatastore = \"d\"\n\
                workload = { kind = \"stress\", pages = 110000, passes = 40 }\n";
    let sim = run_checked(&scenario(text), 20_000_000);
    let evicted: u64 = sim.world().host().vms().iter().map(|v| v.stats.zip_evicted).sum();
    assert!(evicted > 100, "the run must evict from a full compression cache ({evicted})");
}

/// A container in a guest: a process in a memory cgroup with a limit pages under it while another
/// process outside the cgroup keeps its memory; charges stay within the limit at every step
/// (`check_invariants`), pages stay on their cgroup's lists, and refaults are detected.
#[test]
fn memory_cgroup_limit_reclaim_keeps_every_invariant() {
    for cgroup in ["v1", "v2"] {
        let s = scenario(&one_guest(
            "1GiB",
            &format!(
                "name = \"g\"\nmemory = \"256MiB\"\ncgroup = \"{cgroup}\"\n\
                 [[vm.workload]]\nkind = \"stress\"\nname = \"box\"\npages = 6000\npasses = 4\nmemory_limit = \"16MiB\"\n\
                 [[vm.workload]]\nkind = \"random\"\nname = \"zipf\"\npages = 3000\ntouches = 20000\ndistribution = \"zipf\"\nmemory_limit = \"8MiB\"\n\
                 [[vm.workload]]\nkind = \"stress\"\nname = \"free\"\npages = 5000\npasses = 4\n"
            ),
            "",
        ));
        let sim = run_checked(&s, 2_000_000);
        let g = &sim.world().guests()[0];
        let box_ = g.processes().iter().find(|p| p.name == "box").unwrap();
        assert_eq!(box_.state, memvisor::guest::ProcState::Exited, "{cgroup}");
        assert!(box_.stats.majflt > 1_000, "{cgroup}: the boxed sweep must page ({})", box_.stats.majflt);
        let free = g.processes().iter().find(|p| p.name == "free").unwrap();
        assert_eq!(free.stats.majflt, 0, "{cgroup}: the process outside the cgroup has room and must not page");
        assert!(g.counters().get(Counter::WorkingsetRefaultAnon) > 1_000, "{cgroup}");
        assert_eq!(g.counters().get(Counter::AllocStall), 0, "{cgroup}: no global reclaim");
    }
}

/// A cgroup whose limit cannot hold its process and has no swap left kills its own process, not
/// the bigger one outside it.
#[test]
fn memory_cgroup_oom_kills_inside_the_cgroup() {
    let s = scenario(&one_guest(
        "1GiB",
        "name = \"g\"\nmemory = \"256MiB\"\nswap = \"4MiB\"\n\
         [[vm.workload]]\nkind = \"stress\"\nname = \"big\"\npages = 20000\npasses = 100\n\
         [[vm.workload]]\nkind = \"stress\"\nname = \"box\"\npages = 8000\npasses = 2\nmemory_limit = \"16MiB\"\nstart = \"50ms\"\n",
        "",
    ));
    let sim = run_checked(&s, 5_000_000);
    let g = &sim.world().guests()[0];
    assert_eq!(g.counters().get(Counter::OomKill), 1, "{:?}", g.log());
    assert!(g.log()[0].1.contains("(box)"), "{}", g.log()[0].1);
    let big = g.processes().iter().find(|p| p.name == "big").unwrap();
    assert_ne!(big.state, memvisor::guest::ProcState::Killed);
}
