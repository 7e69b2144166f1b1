//! Physical CPUs shared by vCPUs (`host.cpus`): CPU-bound guests take turns, the CPUs are never
//! oversubscribed (checked after every step), and a vCPU that waits for I/O leaves its CPU to
//! others and takes one back at once when the I/O completes.

mod common;

use common::{run_checked, scenario};
use memvisor::Simulation;

/// `n` single-vCPU guests, each making 20,000 references to 256 resident pages with 100 us of
/// CPU after each (2 s of CPU in all), on a host with `cpus` physical CPUs (`None`: unset).
fn cpu_bound(n: usize, cpus: Option<u32>) -> memvisor::Scenario {
    let cpus = cpus.map_or(String::new(), |c| format!("cpus = {c}\n"));
    let mut text = format!(
        "name = \"t\"\nseed = 1\n[host]\nmemory = \"4GiB\"\nsample_interval = \"1s\"\n{cpus}[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n"
    );
    for i in 0..n {
        text += &format!(
            "[[vm]]\nname = \"g{i}\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
             workload = {{ kind = \"random\", pages = 256, touches = 20000, compute = \"100us\" }}\n"
        );
    }
    scenario(&text)
}

fn runtimes(sim: &Simulation) -> Vec<f64> {
    sim.results().summary.vms.iter().map(|v| v.runtime_s.expect("finite work")).collect()
}

#[test]
fn cpu_bound_guests_share_the_cpus_in_turns() {
    let alone = runtimes(&run_checked(&cpu_bound(3, None), 50_000_000));
    // Three guests on one CPU: each gets a third of it, so each takes about three times as long
    // (within one 30 ms slice per turn of the others: the last turns end unevenly).
    let shared = run_checked(&cpu_bound(3, Some(1)), 50_000_000);
    for (a, s) in alone.iter().zip(runtimes(&shared)) {
        assert!((s / a - 3.0).abs() < 0.1, "alone {a:.3} s, sharing one CPU {s:.3} s");
    }
    // The CPU was busy all along and each guest spent about two thirds of its run waiting.
    let end = shared.now();
    let rows = shared.results().series;
    let col = |name: &str| rows.columns.iter().position(|c| *c == name).expect("column");
    let (run, steal) = (col("pcpu_run_ms"), col("pcpu_steal_ms"));
    let last = rows.len() - 3..rows.len();
    let busy: f64 = last.clone().map(|r| rows.values[run][r]).sum();
    let waited: f64 = last.map(|r| rows.values[steal][r]).sum();
    assert!(busy * 1e6 <= end as f64 + 1.0, "no more CPU time than one CPU gives: {busy} ms in {end} ns");
    assert!(waited > 1.5 * busy, "waiting {waited} ms against running {busy} ms");
}

#[test]
fn enough_cpus_change_nothing_but_the_accounting() {
    let unset = run_checked(&cpu_bound(2, None), 50_000_000);
    let two = run_checked(&cpu_bound(2, Some(2)), 50_000_000);
    assert_eq!(runtimes(&unset), runtimes(&two));
    let steal = two.results().series.columns.iter().position(|c| *c == "pcpu_steal_ms").expect("column");
    assert!(two.results().series.values[steal].iter().all(|&x| x == 0.0), "nobody waits with a CPU each");
}

/// A guest that pages (its 78 MiB of random references in 58 MiB, swapping to a disk: mostly
/// waiting for the disk) beside a CPU-bound one.
fn io_and_cpu(cpus: Option<u32>) -> memvisor::Scenario {
    let cpus = cpus.map_or(String::new(), |c| format!("cpus = {c}\n"));
    scenario(&format!(
        "name = \"t\"\nseed = 1\n[host]\nmemory = \"4GiB\"\nsample_interval = \"1s\"\n{cpus}[[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
         [[vm]]\nname = \"io\"\nmemory = \"128MiB\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"random\", pages = 20000, touches = 3000, compute = \"10us\" }}\n\
         [[vm]]\nname = \"cpu\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"random\", pages = 256, touches = 200000, compute = \"100us\" }}\n"
    ))
}

#[test]
fn a_vcpu_waking_from_io_takes_a_cpu_at_once() {
    let alone = runtimes(&run_checked(&io_and_cpu(None), 50_000_000));
    let shared = run_checked(&io_and_cpu(Some(1)), 50_000_000);
    let t = runtimes(&shared);
    let rows = shared.results().series;
    let run = rows.columns.iter().position(|c| *c == "pcpu_run_ms").expect("column");
    let io_cpu_s = rows.values[run].iter().step_by(2).fold(0.0f64, |a, &x| a.max(x)) / 1e3;
    // BOOST: the pager preempts the CPU-bound guest each time a page comes in, losing at most the
    // engine's lookahead (1 ms) per wake-up rather than a 30 ms turn (which would double its
    // run); while it computes it shares the CPU in turns, which at most doubles its CPU time.
    let faults = shared.results().summary.vms[0].counters["pgmajfault"];
    assert!(faults > 500.0, "{faults} major faults");
    let bound = io_cpu_s + faults * 1e-3;
    assert!((t[0] - alone[0]).abs() <= bound, "pager alone {:.3} s, sharing {:.3} s, bound {bound:.3} s", alone[0], t[0]);
    // The CPU-bound guest loses what the pager runs, and no more than a few percent beside it.
    assert!(
        t[1] >= alone[1] && t[1] <= (alone[1] + io_cpu_s) * 1.05,
        "CPU-bound: alone {:.3} s, sharing {:.3} s, pager's CPU {io_cpu_s:.3} s",
        alone[1],
        t[1]
    );
}

#[test]
fn a_bad_cpu_count_is_an_error() {
    let text = "name = \"t\"\n[host]\nmemory = \"1GiB\"\ncpus = 0\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\nworkload = { kind = \"idle\" }\n";
    let e = memvisor::scenario::load(text, "t.toml", &[]).expect_err("0 CPUs");
    let msg = e.to_string();
    assert!(msg.contains("host.cpus") && msg.contains("1..=4096"), "{msg}");
}

#[test]
fn self_ballooning_compilers_on_one_cpu_lose_no_vcpu() {
    // Compilers, page-cache and swap I/O, a self-ballooning policy: vCPUs wake, preempt, go idle
    // and retake their CPUs ahead of the engine; after every step each vCPU with work must still
    // have its turn coming (checked by `check_invariants`), and every guest must finish.
    let mut text = String::from(
        "name = \"t\"\nseed = 2\n[host]\nmemory = \"1152MiB\"\nprofile = \"xen\"\nhypervisor = \"288MiB\"\n\
         policy = \"xen-selfballoon\"\ncpus = 1\n[[datastore]]\nname = \"ide\"\ndevice = \"hdd\"\n",
    );
    for arch in ["x86_64", "i386"] {
        text += &format!(
            "[[vm]]\nname = \"{arch}\"\nmemory = \"384MiB\"\nmaxmem = \"512MiB\"\ndatastore = \"ide\"\nswap = \"768MiB\"\n\
             kernel_reserved = \"16MiB\"\ntransparent_hugepage = \"never\"\n\
             workload = {{ kind = \"kernel-build\", arch = \"{arch}\", jobs = 8, units = 60 }}\n"
        );
    }
    let sim = run_checked(&scenario(&text), 1_000_000_000);
    assert!(runtimes(&sim).iter().all(|t| *t > 0.0));
    let host = sim.results().summary.host;
    let u = host.cpu_utilisation_percent.expect("modelled");
    assert!(u <= 100.0 && u > 50.0, "{u} % of one CPU");
}
