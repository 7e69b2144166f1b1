//! Runs a shipped case (or a scenario file) from the command line without Python: `cargo run
//! --release --example run_case -- CASE [variant] [key=value ...]` prints each variant's report row and wall
//! time; arguments with `=` are `--set` overrides.

/// Says what went wrong and exits with status 2 (bad input) or 1 (a run that failed).
fn fail(code: i32, msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(code)
}

fn main() {
    let cases = memvisor::scenario::CASES.iter().map(|c| c.0).collect::<Vec<_>>().join(", ");
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else { fail(2, format!("usage: run_case CASE|FILE [VARIANT] [key=value ...]; cases: {}", cases)) };
    let (sets, rest): (Vec<String>, Vec<String>) = args.partition(|a| a.contains('='));
    let only = rest.first();
    let file = std::fs::read_to_string(&name).ok();
    let Some(text) = file.as_deref().or_else(|| memvisor::scenario::case_text(&name)) else {
        fail(2, format!("'{name}' is neither a case ({}) nor a readable scenario file", cases))
    };
    let scenarios = memvisor::scenario::load(text, &name, &sets).unwrap_or_else(|e| fail(2, e));
    if let Some(v) = only.filter(|v| !scenarios.iter().any(|s| s.variant.as_deref() == Some(v.as_str()))) {
        let names: Vec<&str> = scenarios.iter().filter_map(|s| s.variant.as_deref()).collect();
        fail(2, format!("{name} has no variant '{v}'; its variants: {}", if names.is_empty() { "none".into() } else { names.join(", ") }));
    }
    for s in scenarios {
        if only.is_some_and(|v| s.variant.as_deref() != Some(v)) {
            continue;
        }
        let t0 = std::time::Instant::now();
        // Admission and boot refusals are the scenario's: bad input.
        let mut sim = memvisor::Simulation::new(&s).unwrap_or_else(|e| fail(2, e));
        sim.run().unwrap_or_else(|e| fail(1, e));
        let r = sim.results();
        let vm = &r.summary.vms[0];
        println!(
            "{:<14} wall {:>6.2}s sim {:>7.1}s report {}",
            s.variant.unwrap_or_default(),
            t0.elapsed().as_secs_f64(),
            sim.now() as f64 / 1e9,
            serde_json::to_string(&vm.report).expect("JSON")
        );
    }
}
