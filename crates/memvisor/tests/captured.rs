//! A captured process image as a workload's content (`captured = "F.mvpages"`): a captured page's
//! identity is its bytes, so equal pages are one identity; its compressed sizes are the ones the
//! real compressors measured on it; guests running the same capture share its pages by content.
//! The capture is a real one: every resident page of `python3 -c 'import time; time.sleep(60)'`
//! (tests/data/python-idle.toml says how it was taken).

mod common;

use std::collections::HashMap;

use common::{run_checked, scenario};
use memvisor::content::{Captured, Compressibility, Compressor, Content, PageSet, ZERO, captured};

const CAPTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/python-idle.mvpages");

fn page_set() -> PageSet {
    PageSet::parse(&std::fs::read(CAPTURE).unwrap(), CAPTURE).unwrap()
}

#[test]
fn a_captured_pages_identity_is_its_bytes_and_its_sizes_are_measured() {
    let set = page_set();
    let cap = Captured::load(CAPTURE).unwrap();
    assert_eq!(cap.len(), set.len());
    let m = Compressibility::measured();
    let mut by_bytes: HashMap<&[u8], u64> = HashMap::new();
    for i in 0..set.len() {
        let id = cap.page(i as u64).unwrap();
        assert_eq!(id, captured::identity(set.page(i)));
        assert_eq!(id == ZERO, set.is_zero(i));
        // Equal bytes, equal identity; different bytes, different identity.
        assert_eq!(*by_bytes.entry(set.page(i)).or_insert(id), id, "page {i}");
        for z in Compressor::ALL {
            // Whatever kind the workload says its data is, a captured page's size is its own.
            assert_eq!(m.size_of(z, Content::StressVm, id), set.size(z, i), "page {i} under {}", z.name());
        }
        assert_eq!(m.bytes_of(Content::Generic, id), set.page(i));
    }
    let distinct: std::collections::HashSet<u64> = by_bytes.values().copied().collect();
    assert_eq!(distinct.len(), by_bytes.len(), "two different pages got one identity");
    assert_eq!(cap.page(set.len() as u64), None, "the capture ends where it ends");
}

/// Two KVM guests, each running `stress` over 5 MiB (1,280 pages, all its pages written once)
/// that holds the capture (or, without it, data of its own), idle after; ksmd with
/// `use_zero_pages` so zero pages take no KSM page.
fn two_guests(captured: bool) -> memvisor::host::ksm::KsmCounters {
    let cap = if captured { format!(", captured = \"{CAPTURE}\"") } else { String::new() };
    let mut text = "name = \"t\"\nduration = \"120s\"\n[host]\nmemory = \"4GiB\"\nsample_interval = \"10s\"\npage_sharing = true\n\
                    ksm = { use_zero_pages = 1 }\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n"
        .to_string();
    for i in 0..2 {
        text += &format!(
            "[[vm]]\nname = \"g{i}\"\nmemory = \"128MiB\"\ndatastore = \"d\"\n\
             workload = {{ kind = \"stress\", pages = \"5MiB\", passes = 1, zero_pages = 0{cap} }}\n"
        );
    }
    let sim = run_checked(&scenario(&text), 10_000_000_000);
    sim.world().host().sharing().unwrap().ksm_counters().unwrap()
}

#[test]
fn guests_running_one_capture_share_its_pages_by_content() {
    let set = page_set();
    let n = 1280;
    let (mut zeros, mut counts) = (0u64, HashMap::new());
    for i in 0..n {
        if set.is_zero(i) {
            zeros += 1;
        } else {
            *counts.entry(set.page(i)).or_insert(0u64) += 1;
        }
    }
    let own = two_guests(false);
    let cap = two_guests(true);
    // Each distinct non-zero page of the capture is one KSM page mapped by every copy of it in
    // both guests; the zero pages map the zero page. Without the capture those pages were each
    // guest's own and merged with nothing.
    let distinct = counts.len() as u64;
    assert!(counts.values().all(|&k| 2 * k <= 256), "no content needs a chain");
    assert_eq!(cap.pages_shared - own.pages_shared, distinct, "{cap:?} vs {own:?}");
    assert_eq!(cap.pages_sharing - own.pages_sharing, 2 * (n as u64 - zeros) - distinct);
    assert_eq!(cap.ksm_zero_pages - own.ksm_zero_pages, 2 * zeros);
}

#[test]
fn a_bad_capture_is_named() {
    let load = |cap: &str| {
        let text = format!(
            "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
             workload = {{ kind = \"stress\", pages = \"1MiB\", captured = \"{cap}\" }}\n"
        );
        memvisor::scenario::load(&text, "c.toml", &[]).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let e = load("/nonexistent/p.mvpages");
    assert!(e.contains("vm.g.workload.stress.captured") && e.contains("cannot read /nonexistent/p.mvpages"), "{e}");
    let e = load(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    assert!(e.contains("vm.g.workload.stress.captured") && e.contains("not a zstd-compressed page set"), "{e}");
}

#[test]
fn a_relative_capture_is_found_beside_the_scenario_file_not_the_working_directory() {
    let text = "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n\
                workload = { kind = \"stress\", pages = \"1MiB\", captured = \"python-idle.mvpages\" }\n";
    // Tests run in the crate's folder, where no such file is; the scenario's folder has it.
    let beside = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/s.toml");
    assert!(memvisor::scenario::load(text, beside, &[]).is_ok());
    let e = memvisor::scenario::load(text, "s.toml", &[]).unwrap_err().to_string();
    assert!(e.contains("cannot read python-idle.mvpages"), "{e}");
}
