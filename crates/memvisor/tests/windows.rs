//! The Windows guest against other guests: what it shares with them is the paging disk.

mod common;

use common::{run, scenario};
use memvisor::guest::Counter;

/// `n` Windows guests of 256 MiB, each paging a 320 MiB random working set to one shared disk.
fn paging_guests(n: u32) -> String {
    format!(
        "name = \"t\"\n[host]\nmemory = \"4GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
         [[vm]]\nname = \"w\"\ncount = {n}\nos = \"windows\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"random\", pages = 82000, touches = 300000, write = true, compute = \"20us\" }}\n"
    )
}

/// Mean time a process of guest 0 waited per hard fault, ns.
fn wait_per_hard_fault(n: u32) -> f64 {
    let sim = run(&scenario(&paging_guests(n)));
    let g = &sim.world().guests()[0];
    let p = &g.processes()[0];
    assert!(g.counters().get(Counter::PageReads) > 1_000, "the guest must page");
    p.stats.stall_ns as f64 / p.stats.majflt as f64
}

#[test]
fn guests_sharing_a_paging_disk_slow_each_others_hard_faults() {
    let alone = wait_per_hard_fault(1);
    let shared = wait_per_hard_fault(2);
    // Two guests that each keep the disk busy most of the time queue behind each other: a hard
    // fault waits for the other guest's request too. One queue, twice the load: at least 1.5x
    // (an M/M/1 queue's wait grows faster than the load; 1.5x leaves room for the other guest's
    // idle moments).
    assert!(shared >= 1.5 * alone, "alone {alone:.0} ns, shared {shared:.0} ns per hard fault");
}
