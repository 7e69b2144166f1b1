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
    io_and_cpu_with(&cpus.map_or(String::new(), |c| format!("cpus = {c}\n")), "")
}

/// `io_and_cpu` with `host` added to its `[host]` table and `tail` after its VMs.
fn io_and_cpu_with(host: &str, tail: &str) -> memvisor::Scenario {
    scenario(&format!(
        "name = \"t\"\nseed = 1\n[host]\nmemory = \"4GiB\"\nsample_interval = \"1s\"\n{host}[[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
         [[vm]]\nname = \"io\"\nmemory = \"128MiB\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"random\", pages = 20000, touches = 3000, compute = \"10us\" }}\n\
         [[vm]]\nname = \"cpu\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"random\", pages = 256, touches = 200000, compute = \"100us\" }}\n{tail}"
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

/// `io_and_cpu` on a Xen host with one CPU, and with dom0's backend on it (`dom0`: its vCPUs).
fn xen_io_and_cpu(dom0: Option<u32>, tail: &str) -> memvisor::Scenario {
    let dom0 = dom0.map_or(String::new(), |n| format!("dom0_vcpus = {n}\n"));
    io_and_cpu_with(&format!("profile = \"xen\"\ncpus = 1\n{dom0}"), tail)
}

#[test]
fn dom0s_backend_takes_the_cpus_for_every_ring_request() {
    let without = run_checked(&xen_io_and_cpu(None, ""), 50_000_000);
    let with = run_checked(&xen_io_and_cpu(Some(2), "[costs]\nblkback_request = \"200us\"\n"), 50_000_000);
    let (h0, h) = (without.results().summary.host, with.results().summary.host);
    assert_eq!((h0.dom0_cpu_s, h0.blkback_requests), (None, None), "not modelled unless asked");
    let requests = h.blkback_requests.expect("modelled");
    let ds = &with.results().summary.datastores[0];
    let (device_requests, pages) = (ds.reads + ds.writes, ((ds.read_mib + ds.written_mib) * 256.0).round() as u64);
    // A guest request of n pages becomes ceil(n / 11) ring requests: between the pages over 11
    // and that plus one a request.
    assert!(
        requests >= pages.div_ceil(11).max(device_requests) && requests <= pages / 11 + device_requests,
        "{requests} ring requests for {device_requests} requests of {pages} pages"
    );
    // Every request's two halves ran (the last completion's too: the run ends when the work does).
    let dom0 = h.dom0_cpu_s.expect("modelled");
    assert!((dom0 - requests as f64 * 200e-6).abs() < 1e-9, "dom0 {dom0} s for {requests} requests at 200 us");
    // The one CPU, never oversubscribed: the guests' run and dom0's within the run's length.
    let busy = h.cpu_busy_s.expect("modelled");
    assert!(busy <= with.now() as f64 / 1e9 + 1e-9, "{busy} s busy in {} ns", with.now());
    // The CPU-bound guest needs the same CPU either way and finishes later by at most what dom0 took.
    let (t0, t) = (runtimes(&without), runtimes(&with));
    let run = |s: &Simulation| s.results().summary.vms[1].counters["pcpu_run_ms"];
    assert!((run(&with) - run(&without)).abs() < 1.0, "its CPU time {} ms against {} ms", run(&with), run(&without));
    assert!(t[1] > t0[1] && t[1] <= t0[1] + dom0 + 1e-3, "CPU-bound: {} s alone, {} s with dom0's {dom0} s", t0[1], t[1]);
    // The pager's requests each wait for dom0 both ways: it takes longer.
    assert!(t[0] > t0[0], "pager {} s without dom0, {} s with", t0[0], t[0]);
}

#[test]
fn dom0_is_a_xen_hosts_and_needs_its_cpus() {
    let host = |profile: &str, cpus: &str| {
        format!(
            "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\nprofile = \"{profile}\"\n{cpus}dom0_vcpus = 2\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\nworkload = {{ kind = \"idle\", footprint = \"64MiB\" }}\n"
        )
    };
    let err = |text: String| memvisor::scenario::load(&text, "t.toml", &[]).expect_err("refused").to_string();
    let e = err(host("kvm", "cpus = 2\n"));
    assert!(e.contains("host.dom0_vcpus") && e.contains("xen profile") && e.contains("host.profile is 'kvm' (t.toml:5:11)"), "{e}");
    // The profile may come from far away: the message says where.
    let e = memvisor::scenario::load(&host("xen", "cpus = 2\n"), "t.toml", &["host.profile=kvm".into()]).expect_err("refused").to_string();
    assert!(e.contains("host.profile is 'kvm' (--set host.profile=kvm)"), "{e}");
    let e = err(host("xen", "cpus = 2\n").replace("profile = \"xen\"\n", ""));
    assert!(e.contains("host.profile is 'kvm' (the default)"), "{e}");
    let e = err(host("xen", ""));
    assert!(e.contains("host.dom0_vcpus") && e.contains("needs host.cpus"), "{e}");
    let e = err(host("xen", "cpus = 2\n").replace("dom0_vcpus = 2", "dom0_vcpus = 0"));
    assert!(e.contains("host.dom0_vcpus") && e.contains("1..=4096"), "{e}");
    // Accepted, and written back; its cost without it is said to be ignored.
    let s = scenario(&host("xen", "cpus = 2\n"));
    assert_eq!(s.host.dom0_vcpus, Some(2));
    assert!(s.to_toml().contains("dom0_vcpus = 2"));
    let text = host("xen", "cpus = 2\n").replace("dom0_vcpus = 2\n", "") + "[costs]\nblkback_request = \"10us\"\n";
    let v = memvisor::scenario::load(&text, "t.toml", &[]).expect("valid");
    assert!(v[0].warnings.iter().any(|w| w.contains("costs.blkback_request") && w.contains("ignored")), "{:?}", v[0].warnings);
}
