//! The Denali host (seed 004): whole-VM paging of Ilwaco web servers.

use memvisor::{Scenario, Simulation, scenario};

/// `vms` VMs of 16 MiB running `workload` (a TOML inline table's insides) on a denali host of
/// `memory`, for `duration`, reported from `window_start`.
fn denali(vms: u32, memory: &str, duration: &str, window_start: &str, workload: &str) -> Scenario {
    let text = format!(
        r#"
name = "denali-test"
seed = 3
duration = "{duration}"
[host]
memory = "{memory}"
profile = "denali"
sample_interval = "1s"
[[datastore]]
name = "swap"
device = "hdd"
[[vm]]
name = "web"
count = {vms}
memory = "16MiB"
datastore = "swap"
workload = {{ kind = "web-server", {workload} }}
[report]
window = ["{window_start}", "{duration}"]
columns = ["requests_per_s", "latency_p99_ms", "footprint_pages", "page_ins_per_s", "resident_vms", "sim_bytes_per_paged_out_vm"]
"#
    );
    scenario::load(&text, "denali-test.toml", &[]).expect("valid").remove(0)
}

/// `vms` web servers loaded by 64 closed-loop clients with Zipf popularity.
fn scenario(vms: u32, memory: &str, pool: &str) -> Scenario {
    denali(vms, memory, "20s", "5s", &format!(r#"pool = "{pool}", clients = 64, zipf = 1.0"#))
}

#[test]
fn invariants_hold_after_every_step_with_hundreds_of_vms() {
    // 300 VMs of about 56 pages each on 8 MiB: the clock must keep taking frames.
    let s = scenario(300, "8MiB", "list");
    let mut sim = Simulation::new(&s).unwrap();
    let mut t = 0;
    while !sim.run_until(t).unwrap() {
        sim.check_invariants().unwrap();
        t += 20_000_000;
    }
    sim.check_invariants().unwrap();
    let d = sim.denali().unwrap();
    assert!(d.pager().stats.evictions > 1000, "memory was short: {} evictions", d.pager().stats.evictions);
    assert!(d.pager().stats.page_outs > 0, "dirty pages (stacks, mbufs) were written back");
}

#[test]
fn a_paged_out_vm_holds_no_frame_and_its_first_request_pays_the_page_ins() {
    let s = scenario(500, "2GiB", "hash");
    let mut sim = Simulation::new(&s).unwrap();
    sim.run().unwrap();
    let d = sim.denali().unwrap();
    let mut untouched = 0;
    for i in 0..500u32 {
        let (vm, pv) = (d.vm(i as usize), d.pager().vm(i));
        if !vm.is_serving() {
            untouched += 1;
            assert_eq!(pv.resident(), 0, "VM {i} was never asked anything, yet holds frames");
            assert_eq!(pv.page_ins, 0);
        } else if vm.stats.served > 0 {
            // Every page a request touches was read in once (memory is ample here): at least the
            // code path, stack, document and one page of each pool.
            assert!(pv.page_ins >= 48 + 2 + 1 + 2, "VM {i} served with only {} page-ins", pv.page_ins);
            assert!(vm.stats.paging_wait_ns >= pv.page_ins.min(10) * 1_000_000, "VM {i}'s vCPU did not wait for its page-ins");
        }
    }
    assert!(untouched > 0, "with Zipf popularity over 500 VMs some are never asked in 20 s");
    // The most popular VMs' rows report their own rates over the window, which add up to at most
    // all VMs' rate.
    let summary = sim.results().summary;
    let rate = |row: usize| summary.vms[row].report.iter().find(|(c, _)| *c == "requests_per_s").and_then(|(_, v)| *v);
    let all = rate(0).expect("all VMs' rate");
    let rows: Vec<f64> = (1..summary.vms.len()).map(|k| rate(k).expect("a row VM's rate")).collect();
    assert!(rows[0] > 0.0 && rows[0] >= rows[7] && rows.iter().sum::<f64>() <= all + 1e-9, "{rows:?} of {all}");
    assert!(d.bytes_per_paged_out_vm() <= 1024.0, "{} simulator bytes per paged-out VM", d.bytes_per_paged_out_vm());
}

/// One server under an open-loop `rate` whose 512 mbufs pass through connections `close`d by
/// one end, with a 1 s MSL when it is the server.
fn one_server(close: &str, rate: u32) -> Scenario {
    let msl = if close == "server" { r#", msl = "1s""# } else { "" };
    let w = format!(r#"pool = "list", rate = {rate}, close = "{close}"{msl}, mbufs = 512, clusters = 256"#);
    denali(1, "64MiB", "12s", "4s", &w)
}

#[test]
fn a_connection_the_server_closes_keeps_its_template_through_time_wait() {
    let served = |close: &str| {
        let mut sim = Simulation::new(&one_server(close, 400)).unwrap();
        let mut t = 0;
        while !sim.run_until(t).unwrap() {
            sim.check_invariants().unwrap();
            t += 50_000_000;
        }
        let d = sim.denali().unwrap();
        (d.vm(0).stats.served, d.vm(0).stats.dropped)
    };
    // The client closing, each template is back two round trips after the answer: every request of
    // 400 a second is served.
    let (client, dropped) = served("client");
    assert!(client as f64 > 0.97 * 400.0 * 12.0 && dropped == 0, "client closes: {client} served, {dropped} dropped");
    // The server closing, each template stays 2 MSL = 2 s after its answer, so a connection can
    // only start once one answered 2 s before has ended: over 12 s at most 6 x 512 are served
    // (fewer, as requests in flight hold mbufs too); the rest find no mbuf and are dropped.
    let (server, dropped) = served("server");
    assert!(server <= 6 * 512 && dropped > 0, "server closes: {server} served, {dropped} dropped");
    assert!(server > 3 * 512, "TIME_WAIT ends and gives its templates back: only {server} served");
}

#[test]
fn same_scenario_and_seed_same_result() {
    let run = || {
        let mut sim = Simulation::new(&scenario(200, "64MiB", "list")).unwrap();
        sim.run().unwrap();
        let r = sim.results();
        (r.summary.to_json(), r.series.bits())
    };
    assert_eq!(run(), run());
}

#[test]
fn denali_scenarios_are_checked() {
    let bad = |edit: &dyn Fn(String) -> String| {
        let text = edit(std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scenario/cases/denali-scale.toml")).unwrap());
        scenario::load(&text, "x.toml", &[]).map(|_| ()).unwrap_err().to_string()
    };
    // Off the denali host the VMs default to Linux guests, where the web server cannot run.
    let e = bad(&|t| t.replace("profile = \"denali\"", "profile = \"kvm\""));
    assert!(
        e.contains("workload: web-server is the Ilwaco guest's web server (Denali): it runs on a host with profile = \"denali\""),
        "{e}"
    );
    let e = bad(&|t| t.replace("rate = 1000 }", "rate = 1000, clients = 4 }"));
    assert!(e.contains("either rate"), "{e}");
    let e = bad(&|t| t.replace("pool = \"list\", rate", "pool = \"tree\", rate"));
    assert!(e.contains("pool") && e.contains("list"), "{e}");
    // One server per guest, and no memory cgroups in it: neither would be modelled.
    let e = bad(&|t| {
        t.replace(
            "{ kind = \"web-server\", pool = \"list\", rate = 1000 }",
            "[{ kind = \"web-server\", pool = \"list\", rate = 1000 }, { kind = \"web-server\", name = \"other\", clients = 3 }]",
        )
    });
    assert!(e.contains("one web server"), "{e}");
    let e = bad(&|t| t.replace("rate = 1000 }", "rate = 1000, memory_limit = \"8MiB\" }"));
    assert!(e.contains("no memory cgroups"), "{e}");
    // Page contents would be ignored: the denali host neither shares nor compresses.
    let e = bad(&|t| t.replace("rate = 1000 }", "rate = 1000, zero_pages = 0.5 }"));
    assert!(e.contains("workload.zero_pages") && e.contains("contents are not modelled"), "{e}");
    // Refused as such, not as a file that is missing.
    let e = bad(&|t| t.replace("rate = 1000 }", "rate = 1000, captured = \"no-such-pages.bin\" }"));
    assert!(e.contains("workload.captured") && e.contains("contents are not modelled"), "{e}");
    let e = bad(&|t| t.replace("rate = 1000 }", "rate = 1000, close = \"both\" }"));
    assert!(e.contains("close") && e.contains("client") && e.contains("server"), "{e}");
    let e = bad(&|t| t.replace("rate = 1000 }", "rate = 1000, document = \"0B\" }"));
    assert!(e.contains("document") && e.contains("at least 1 byte"), "{e}");
    // A host whose metadata leaves less than a page for guest pages has nothing to page with.
    let mut s = scenario(2, "16KiB", "list");
    s.host.vm_metadata = 8_192;
    let e = Simulation::new(&s).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("leaving less than one page"), "{e}");
    // The resolved scenario folds the 1,000 alike VMs back into one counted table, and reloads.
    let all = scenario::load(memvisor::scenario::case_text("denali-scale").unwrap(), "c.toml", &[]).unwrap();
    let s = all.into_iter().find(|s| s.variant.as_deref() == Some("vms-1000-list")).unwrap();
    assert_eq!(s.vms.len(), 1000);
    let toml = s.to_toml();
    assert_eq!(toml.matches("[[vm]]").count(), 1, "{toml}");
    let again = scenario::load(&toml, "again.toml", &[]).unwrap().remove(0);
    assert_eq!(again.vms.len(), s.vms.len());
    // Equal but for the header line naming the variant.
    assert_eq!(again.to_toml().split_once('\n').unwrap().1, toml.split_once('\n').unwrap().1);
}
