fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap();
    let variant = args.next().unwrap();
    let sets: Vec<String> = args.collect();
    let text = memvisor::scenario::case_text(&name).unwrap();
    let s = memvisor::scenario::load(text, &name, &sets).unwrap().into_iter().find(|s| s.variant.as_deref() == Some(&variant)).unwrap();
    let mut sim = memvisor::Simulation::new(&s).unwrap();
    let r = sim.run();
    println!("run: {r:?}");
    let res = sim.results();
    println!("end: {:?} at {}", res.summary.end_reason, res.summary.sim_time_s);
    for v in &res.summary.vms {
        println!("{} log {:?} procs {:?}", v.name, v.log, v.processes.iter().map(|p| (&p.name, p.state, p.end_s)).collect::<Vec<_>>());
    }
    for d in res.decisions.iter().take(40) {
        println!("{:.1} {} {} | {}", d.time_ns as f64 / 1e9, d.vm, d.action, d.reason);
    }
    let cols = memvisor::metrics::columns();
    let want = [
        "GRANT_MiB",
        "MCTLSZ_MiB",
        "MCTLTGT_MiB",
        "SWCUR_MiB",
        "SWTGT_MiB",
        "MemFree_KiB",
        "pswpin_pages",
        "pswpout_pages",
        "host_wait_ms",
        "SWR_pages",
        "SWW_pages",
    ];
    for r in 0..res.series.len() {
        let mut line = format!("{:6.1} {:6} {:5}", res.series.time_s[r], res.series.vm[r], res.series.state[r]);
        for w in want {
            let c = cols.iter().position(|c| *c == w).unwrap();
            line += &format!(" {w}={:.0}", res.series.values[c][r]);
        }
        println!("{line}");
    }
}
