//! Physical CPUs shared by vCPUs (`host.cpus`): CPU-bound guests take turns, the CPUs are never
//! oversubscribed (checked after every step), and a vCPU that waits for I/O leaves its CPU to others.

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
    let unset = runtimes(&run_checked(&cpu_bound(2, None), 50_000_000));
    let two = runtimes(&run_checked(&cpu_bound(2, Some(2)), 50_000_000));
    for (a, b) in unset.iter().zip(&two) {
        assert!((a - b).abs() < 1e-6 * a, "{a} s unset against {b} s on two CPUs");
    }
}

#[test]
fn a_bad_cpu_count_is_an_error() {
    let text = "name = \"t\"\n[host]\nmemory = \"1GiB\"\ncpus = 0\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\nworkload = { kind = \"idle\" }\n";
    let e = memvisor::scenario::load(text, "t.toml", &[]).expect_err("0 CPUs");
    let msg = e.to_string();
    assert!(msg.contains("host.cpus") && msg.contains("1..=4096"), "{msg}");
}
