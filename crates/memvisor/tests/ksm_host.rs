//! KSM on a simulated KVM host: ksmd merges guest pages by content at its own rate and by its own
//! rules (two visits, `max_page_sharing`, `use_zero_pages`), writes break merges, a policy starts
//! and stops it; every invariant (each KSM page's mappings, KSM's counters recounted, every frame
//! free or owned once) is checked after each step.

mod common;

use common::{run_checked, scenario};
use memvisor::host::{GuestMemory, PageState, ZERO_PAGE};
use memvisor::{Scenario, Simulation};

/// `n` KVM guests of 64 MiB from one image (8 MiB in common), zeroing their memory at boot, idle
/// or (with `write`) each writing that much fresh memory from 40 s; `ksm` is the `[host.ksm]`
/// table's body.
fn kvm(n: usize, ksm: &str, write: Option<&str>, duration: &str) -> Scenario {
    let mut text = format!(
        "name = \"t\"\nduration = \"{duration}\"\n[host]\nmemory = \"4GiB\"\nprofile = \"kvm\"\nsample_interval = \"5s\"\n\
         page_sharing = true\nksm = {{ {ksm} }}\n[[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n"
    );
    for i in 0..n {
        let workload = match write {
            Some(w) => format!("{{ kind = \"stress\", pages = \"{w}\", passes = 1, start = \"40s\" }}"),
            None => "{ kind = \"idle\", footprint = \"1MiB\" }".into(),
        };
        text += &format!(
            "[[vm]]\nname = \"g{i}\"\nmemory = \"64MiB\"\nkernel_reserved = \"16MiB\"\nimage = \"img\"\nimage_common = \"8MiB\"\n\
             zero_memory_at = \"0s\"\ndatastore = \"d\"\nworkload = {workload}\n"
        );
    }
    scenario(&text)
}

/// Pages of every guest by what the host has them as: (zero pages still private, private pages,
/// pages mapping a KSM page, pages mapping the zero page).
fn census(sim: &Simulation) -> (u64, u64, u64, u64) {
    let mut c = (0, 0, 0, 0);
    for (vm, g) in sim.world().host().vms().iter().zip(sim.world().guests()) {
        for (ppn, e) in vm.p2m().iter() {
            match e.state() {
                PageState::Backed if g.content_id(ppn) == memvisor::content::ZERO => c.0 += 1,
                PageState::Backed => c.1 += 1,
                PageState::Shared(ZERO_PAGE) => c.3 += 1,
                PageState::Shared(_) => c.2 += 1,
                _ => {}
            }
        }
    }
    c
}

fn counters(sim: &Simulation) -> memvisor::host::ksm::KsmCounters {
    sim.world().host().sharing().expect("sharing on").ksm_counters().expect("a KSM host")
}

#[test]
fn ksmd_merges_identical_pages_of_idle_guests_after_two_visits() {
    // 2 x 16,384 pages at 100 per 20 ms: a full scan takes 6.6 s, so by 30 s every page has been
    // visited at least three times.
    let sim = run_checked(&kvm(2, "", None, "30s"), 1_000_000_000);
    let c = counters(&sim);
    let (zero_private, _, merged, zero_mapped) = census(&sim);
    assert!(c.full_scans >= 3, "{} full scans", c.full_scans);
    assert_eq!((zero_private, zero_mapped), (0, 0), "without use_zero_pages every zero page merges into a KSM page");
    // Every merged page is a mapping of a KSM page: one of each is "shared", the rest "sharing".
    assert_eq!(merged, c.pages_shared + c.pages_sharing);
    // The zero pages, over 256 per KSM page, make a chain of dups.
    assert!(c.stable_node_chains >= 1 && c.stable_node_dups > 2, "{c:?}");
    // Both images' 2,048 common pages merge in pairs; the zeros fill KSM pages 256 at a time.
    let zeros = merged - 2 * 2048;
    assert_eq!(c.pages_shared, 2048 + zeros.div_ceil(256), "{c:?}");
    // Each KSM page holds one frame, which is all merging keeps of its mappings.
    let h = sim.world().host();
    assert_eq!(h.sharing().unwrap().frames_in_use(), c.pages_shared);
}

#[test]
fn with_use_zero_pages_zero_pages_map_the_zero_page_and_hold_no_frame() {
    let sim = run_checked(&kvm(2, "use_zero_pages = 1", None, "30s"), 1_000_000_000);
    let c = counters(&sim);
    let (zero_private, _, merged, zero_mapped) = census(&sim);
    assert_eq!(zero_private, 0);
    assert_eq!(c.ksm_zero_pages, zero_mapped);
    assert!(zero_mapped > 2 * 40 * 256, "{zero_mapped} zero pages mapped");
    // Only the image is left for KSM pages, merged in pairs, and no chain.
    assert_eq!((merged, c.pages_shared, c.pages_sharing, c.stable_node_chains), (4096, 2048, 2048, 0));
    assert_eq!(sim.world().host().sharing().unwrap().frames_in_use(), 2048);
}

#[test]
fn a_page_is_not_merged_before_its_second_visit() {
    // 5 s is less than one full scan (6.6 s): nothing has been seen twice.
    let sim = run_checked(&kvm(2, "", None, "5s"), 500_000_000);
    let c = counters(&sim);
    assert_eq!((c.pages_shared, c.pages_sharing, c.full_scans), (0, 0, 0), "{c:?}");
    assert!(c.pages_scanned > 20_000, "{c:?}");
}

#[test]
fn writes_break_merges_and_the_counters_follow_at_the_next_visits() {
    let idle = counters(&run_checked(&kvm(2, "", None, "90s"), 2_000_000_000));
    let sim = run_checked(&kvm(2, "", Some("40MiB"), "90s"), 2_000_000_000);
    let busy = counters(&sim);
    let saved = |c: &memvisor::host::ksm::KsmCounters| c.pages_sharing as f64 / 256.0;
    // Each guest overwrote 40 of its ~47 MiB of merged zeros: about 80 MiB of the 2 x 55 MiB merged.
    assert!(saved(&idle) > 90.0, "idle guests save {:.1} MiB", saved(&idle));
    assert!(saved(&busy) < saved(&idle) - 70.0, "after the writes {:.1} MiB, idle {:.1} MiB", saved(&busy), saved(&idle));
    let breaks: u64 = (0..2).map(|v| sim.world().host().sharing().unwrap().vm(v).cow_breaks).sum();
    assert!(breaks as f64 / 256.0 >= 70.0, "{breaks} copy-on-write breaks");
}

#[test]
fn a_stopped_ksmd_merges_nothing() {
    let sim = run_checked(&kvm(2, "run = 0", None, "30s"), 5_000_000_000);
    let c = counters(&sim);
    assert_eq!((c.pages_scanned, c.pages_shared, c.full_scans), (0, 0, 0));
}

#[test]
fn ksm_settings_are_checked() {
    let bad = |ksm: &str, profile: &str| {
        let text = format!(
            "name = \"t\"\n[host]\nmemory = \"1GiB\"\nprofile = \"{profile}\"\npage_sharing = true\nksm = {{ {ksm} }}\n\
             [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n[[vm]]\nname = \"g\"\nmemory = \"64MiB\"\ndatastore = \"d\"\n"
        );
        memvisor::scenario::load(&text, "k.toml", &[]).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let e = bad("pages_to_scan = 0", "kvm");
    assert!(e.contains("host.ksm.pages_to_scan") && e.contains("from 1"), "{e}");
    let e = bad("max_page_sharing = 1", "kvm");
    assert!(e.contains("host.ksm.max_page_sharing") && e.contains("from 2"), "{e}");
    let e = bad("run = 2", "kvm");
    assert!(e.contains("host.ksm.run") && e.contains("0 (stopped) or 1"), "{e}");
    let e = bad("scan_rate = 5", "kvm");
    assert!(e.contains("unknown KSM setting 'scan_rate'") && e.ends_with("smart_scan, run"), "{e}");
    assert!(!bad("pages_to_scan = 0", "kvm").contains("run"), "a bounds error lists no names");
    let e = bad("run = 1", "esx");
    assert!(e.contains("host.ksm") && e.contains("kvm host's"), "{e}");
    // The resolved scenario writes the KSM table back, and reading it again gives the same.
    let s = scenario(
        "name = \"t\"\nduration = \"1s\"\n[host]\nmemory = \"1GiB\"\npage_sharing = true\nksm = { use_zero_pages = 1, pages_to_scan = 300 }\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n[[vm]]\nname = \"g\"\nmemory = \"256MiB\"\ndatastore = \"d\"\n",
    );
    let again = memvisor::scenario::load(&s.to_toml(), "resolved.toml", &[]).unwrap().remove(0);
    assert_eq!(again.host.sharing, s.host.sharing);
    let k = s.host.sharing.unwrap().ksm.unwrap();
    assert!(k.run && k.settings.use_zero_pages && k.settings.pages_to_scan == 300);
}

#[test]
fn mom_starts_ksmd_only_when_the_guests_do_not_fit() {
    // MOM's 03-ksm.policy runs KSM while the guests' virtual size plus 20 % of the host does not
    // fit in the host: 2 x 64 MiB guests with QEMU's overhead (226 MiB each) do not fit that way
    // in 512 MiB, and do in 4 GiB.
    let ksm_after = |memory: &str| {
        let mut s = kvm(2, "run = 0", None, "60s");
        s.host.memory = memvisor::units::parse_bytes(memory).unwrap();
        s.host.policy.name = "mom".into();
        let sim = run_checked(&s, 5_000_000_000);
        (sim.world().host().sharing().unwrap().ksm().unwrap(), counters(&sim))
    };
    let (k, c) = ksm_after("512MiB");
    assert!(k.run, "{k:?}");
    // vdsm's sleep: 10 ms per 16 GiB of host, scaled to 512 MiB.
    assert_eq!(k.settings.sleep_millisecs, 320);
    assert!(c.pages_scanned > 0, "{c:?}");
    let (k, c) = ksm_after("4GiB");
    assert!(!k.run && c.pages_scanned == 0, "{k:?} {c:?}");
}
