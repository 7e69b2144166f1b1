//! Helpers shared by the integration tests.
#![allow(dead_code)]

use memvisor::{Scenario, Simulation};

/// Loads a scenario text that must be valid and have no variants.
pub fn scenario(text: &str) -> Scenario {
    let mut v = memvisor::scenario::load(text, "test.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.len(), 1, "expected one variant");
    v.remove(0)
}

/// Runs to the end, checking every invariant after each `step_ns` of simulated time.
pub fn run_checked(s: &Scenario, step_ns: u64) -> Simulation {
    let mut sim = Simulation::new(s).unwrap_or_else(|e| panic!("{e}"));
    let mut t = 0;
    loop {
        t += step_ns;
        let done = sim.run_until(t).unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = sim.check_invariants() {
            panic!("invariant broken by t={:.6}s: {e}", sim.now() as f64 / 1e9);
        }
        if done {
            return sim;
        }
    }
}

/// Runs to the end without checks.
pub fn run(s: &Scenario) -> Simulation {
    let mut sim = Simulation::new(s).unwrap_or_else(|e| panic!("{e}"));
    sim.run().unwrap_or_else(|e| panic!("{e}"));
    sim
}

/// A one-guest scenario: `vm` is the body of its [[vm]] table (without the datastore line),
/// `extra` is appended at the top level.
pub fn one_guest(host_mem: &str, vm: &str, extra: &str) -> String {
    format!(
        "name = \"t\"\n{extra}\n[host]\nmemory = \"{host_mem}\"\nsample_interval = \"1s\"\n\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\n[[vm]]\ndatastore = \"d\"\n{vm}\n"
    )
}
