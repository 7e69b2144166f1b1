//! Runs a shipped case (or a scenario file) from the command line without Python: `cargo run
//! --release --example run_case -- paging-stress [variant] [key=value ...]` prints each variant's report row and wall
//! time; arguments with `=` are `--set` overrides.

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "paging-stress".into());
    let (sets, rest): (Vec<String>, Vec<String>) = args.partition(|a| a.contains('='));
    let only = rest.first();
    let file = std::fs::read_to_string(&name).ok();
    let text = file.as_deref().or_else(|| memvisor::scenario::case_text(&name)).expect("unknown case or file");
    let scenarios = memvisor::scenario::load(text, &name, &sets).unwrap_or_else(|e| panic!("{e}"));
    if let Some(v) = only.filter(|v| !scenarios.iter().any(|s| s.variant.as_deref() == Some(v.as_str()))) {
        let names: Vec<&str> = scenarios.iter().filter_map(|s| s.variant.as_deref()).collect();
        eprintln!("{name} has no variant '{v}'; its variants: {}", if names.is_empty() { "none".into() } else { names.join(", ") });
        std::process::exit(2);
    }
    for s in scenarios {
        if only.is_some_and(|v| s.variant.as_deref() != Some(v)) {
            continue;
        }
        let t0 = std::time::Instant::now();
        let mut sim = memvisor::Simulation::new(&s).expect("admitted");
        sim.run().expect("run");
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
