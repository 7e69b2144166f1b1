//! Page sharing by content (ESX transparent page sharing): guests that zero their memory at boot
//! and hold a common image share it; writes break shares; every invariant (each shared frame
//! counted once, its sharers equal to the pages mapping it, every frame free or owned once) is
//! checked after each step.

mod common;

use common::{run_checked, scenario};
use memvisor::Simulation;

/// `n` guests of 64 MiB booted from `images` (cycled), zeroing their memory at boot, idle for
/// `idle` and then (if `write` is set) each writing that much of fresh memory; a scan time of
/// 60 s so the test covers several passes in a few simulated minutes.
fn hosts(n: usize, images: &[&str], salting: u8, write: Option<&str>, duration: &str) -> memvisor::Scenario {
    let mut text = format!(
        "name = \"t\"\nduration = \"{duration}\"\n[host]\nmemory = \"4GiB\"\nprofile = \"esx\"\nsample_interval = \"10s\"\n\
         page_sharing = true\nshare_scan_time = \"60s\"\nshare_force_salting = {salting}\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n"
    );
    for i in 0..n {
        let workload = match write {
            Some(w) => format!("{{ kind = \"stress\", pages = \"{w}\", passes = 1, start = \"150s\" }}"),
            None => "{ kind = \"idle\", footprint = \"1MiB\" }".into(),
        };
        text += &format!(
            "[[vm]]\nname = \"g{i}\"\nmemory = \"64MiB\"\nkernel_reserved = \"16MiB\"\nimage = \"{}\"\nimage_common = \"8MiB\"\n\
             zero_memory_at = \"0s\"\ndatastore = \"d\"\nworkload = {workload}\n",
            images[i % images.len()]
        );
    }
    scenario(&text)
}

const MIB: f64 = (1 << 20) as f64;

/// Machine memory saved by sharing, MiB, over all VMs.
fn saved(sim: &Simulation) -> f64 {
    let h = sim.world().host();
    (0..h.vms().len() as u32).map(|i| h.shared_saved(i)).sum::<f64>() * 4096.0 / MIB
}

fn shared(sim: &Simulation, vm: u32) -> f64 {
    sim.world().host().sharing().unwrap().vm(vm).shared as f64 * 4096.0 / MIB
}

#[test]
fn idle_guests_share_their_zero_pages_and_image() {
    let sim = run_checked(&hosts(2, &["img"], 0, None, "130s"), 5_000_000_000);
    let s = sim.world().host().sharing().unwrap();
    // After two scan periods every page of both guests has been visited twice: the 48 MiB each
    // guest zeroed (less what its idle process took) and its 8 MiB of image share; the 8 MiB of
    // kernel data of each does not.
    for vm in 0..2 {
        let shrd = shared(&sim, vm);
        assert!((52.0..=56.0).contains(&shrd), "VM {vm} shares {shrd:.1} MiB");
        assert!(s.vm(vm).zero as f64 * 4096.0 / MIB > 45.0);
    }
    // One frame of zeros and one per image page: 2,049 frames for 112 MiB of guest pages.
    assert!(s.frames_in_use() <= 2_049 + 8, "{} frames", s.frames_in_use());
    assert!(saved(&sim) > 100.0, "{:.1} MiB saved", saved(&sim));
}

#[test]
fn identical_guests_share_more_than_different_ones_and_more_as_they_grow() {
    let same = saved(&run_checked(&hosts(2, &["img"], 0, None, "130s"), 10_000_000_000));
    let different = saved(&run_checked(&hosts(2, &["a", "b"], 0, None, "130s"), 10_000_000_000));
    // Different images still share zeros; only the image's 8 MiB per guest is lost, half of it
    // (one guest's copy) being what the shared image saves.
    assert!(same - different > 7.0, "same image {same:.1} MiB, different {different:.1} MiB");
    let four = saved(&run_checked(&hosts(4, &["img"], 0, None, "130s"), 10_000_000_000));
    assert!(four > 1.9 * same, "two guests save {same:.1} MiB, four {four:.1} MiB");
}

#[test]
fn salting_keeps_sharing_inside_each_vm() {
    let salted = run_checked(&hosts(2, &["img"], 2, None, "130s"), 10_000_000_000);
    let s = salted.world().host().sharing().unwrap();
    // Each VM shares its zeros within itself; its image pages are each unique inside it.
    for vm in 0..2 {
        let image_shared = s.vm(vm).shared - s.vm(vm).zero;
        assert_eq!(image_shared, 0, "VM {vm} shares image pages across VMs despite salting");
    }
    assert!(s.frames_in_use() <= 2, "one zero frame per VM, not {}", s.frames_in_use());
}

#[test]
fn sharing_persists_while_idle_and_evaporates_when_guests_write() {
    let idle = run_checked(&hosts(2, &["img"], 0, None, "300s"), 10_000_000_000);
    let before = shared(&idle, 0);
    // The same guests, each writing 40 MiB of its own data from 150 s on.
    let busy = run_checked(&hosts(2, &["img"], 0, Some("40MiB"), "300s"), 10_000_000_000);
    let after = shared(&busy, 0);
    assert!(before > 50.0, "idle guests keep sharing: {before:.1} MiB");
    // 40 of the 54 MiB shared are overwritten: each write broke a share.
    assert!(after < before - 35.0, "sharing after the writes {after:.1} MiB, idle {before:.1} MiB");
    let breaks = busy.world().host().sharing().unwrap().vm(0).cow_breaks;
    assert!(breaks as f64 * 4096.0 / MIB >= 35.0, "{breaks} copy-on-write breaks");
}

#[test]
fn pages_a_program_holds_in_common_stay_shared_when_guests_write() {
    // The same writes, but half of what the program writes is common to every guest running it
    // (`common_pages`): those pages share across the two guests once the scanner has seen them
    // twice, about half of the 40 MiB (binomial spread over 10,240 pages is under 1 %).
    let mut s = hosts(2, &["img"], 0, Some("40MiB"), "300s");
    let private = shared(&run_checked(&s, 10_000_000_000), 0);
    for v in &mut s.vms {
        let m = &mut v.guest.workloads[0].mix;
        m.set_shares(m.zero(), 0.5, m.duplicate());
    }
    let common = shared(&run_checked(&s, 10_000_000_000), 0);
    let gained = common - private;
    assert!((15.0..=21.0).contains(&gained), "common pages shared {gained:.1} MiB more (private {private:.1}, common {common:.1})");
}

/// Two idle 256 MiB guests zero their memory at boot, backed with large pages, and a third
/// touches `grow` of fresh memory from 100 s, on a host of `host` under the `esx` policy with
/// state table `table`. Returns, per second: (MiB shared over all VMs, whether any VM had a
/// balloon or swapped pages), with every invariant checked each second; and the run's decisions.
fn large_pages_run(host: &str, grow: &str, table: &str) -> (Vec<(f64, bool)>, Vec<memvisor::controller::DecisionRecord>) {
    let text = format!(
        "name = \"t\"\nduration = \"200s\"\n[host]\nmemory = \"{host}\"\nprofile = \"esx\"\npolicy = \"esx\"\n\
         esx_states = \"{table}\"\nhypervisor = \"64MiB\"\nsample_interval = \"10s\"\npage_sharing = true\n\
         share_scan_time = \"60s\"\nshare_force_salting = 0\nlarge_pages = true\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"g\"\ncount = 2\nmemory = \"256MiB\"\nkernel_reserved = \"16MiB\"\nimage = \"img\"\n\
         image_common = \"8MiB\"\nzero_memory_at = \"0s\"\ndatastore = \"d\"\nworkload = {{ kind = \"idle\", footprint = \"1MiB\" }}\n\
         [[vm]]\nname = \"grow\"\nmemory = \"1280MiB\"\nkernel_reserved = \"16MiB\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"stress\", pages = \"{grow}\", passes = 1000, start = \"100s\" }}\n"
    );
    let mut sim = Simulation::new(&scenario(&text)).unwrap_or_else(|e| panic!("{e}"));
    let mut per_second = Vec::new();
    for t in 1..=200u64 {
        sim.run_until(t * 1_000_000_000).unwrap_or_else(|e| panic!("{e}"));
        sim.check_invariants().unwrap_or_else(|e| panic!("invariant broken by t={t}s: {e}"));
        let h = sim.world().host();
        let shared = (0..3).map(|vm| shared(&sim, vm)).sum::<f64>();
        let reclaimed = h.vms().iter().any(|v| v.ballooned + v.swapped > 0);
        per_second.push((shared, reclaimed));
    }
    (per_second, sim.results().decisions)
}

/// ESX 6.0 breaks large pages once free memory falls below 400 % of minFree, and their small
/// pages then share as the scanner reaches them; ESX 5.x (`minfree5`) keeps them whole until it
/// must reclaim, so at the same free memory nothing shares. Neither reclaims anything here:
/// 800 MiB of growth leaves about 250 % of the 2 GiB host's minFree (123 MiB) free.
#[test]
fn esx6_breaks_large_pages_as_memory_tightens_and_they_share_as_scanned() {
    let (six, decisions) = large_pages_run("2GiB", "800MiB", "minfree6");
    let (five, _) = large_pages_run("2GiB", "800MiB", "minfree5");
    assert!(six.iter().chain(&five).all(|&(_, reclaimed)| !reclaimed), "nothing ballooned or swapped");
    assert!(six[99].0 == 0.0 && five.iter().all(|&(s, _)| s == 0.0), "nothing shares while pages are large");
    let breaks: Vec<_> = decisions.iter().filter(|d| d.action == "break large pages").collect();
    assert_eq!(breaks.len(), 3, "each VM's large pages broken once: {breaks:?}");
    assert!(breaks.iter().all(|d| (100e9..110e9).contains(&(d.time_ns as f64))), "when the growth begins");
    // Waiting for the scanner: a 60 s scan shares the two guests' zeroed 480 MiB over a minute,
    // not at once.
    let (at_105, at_199) = (six[104].0, six[198].0);
    assert!(at_105 < 0.25 * at_199, "shared {at_105:.0} MiB at 105 s, {at_199:.0} MiB at 199 s");
    assert!(at_199 > 470.0, "the zeroed memory of both guests shares: {at_199:.0} MiB");
}

/// In the clear state (below minFree) ESX 6.0 shares at once what the scanner hashed while the
/// pages were large (KB 1021095's pre-generated hashes), so free memory recovers without any
/// ballooning or swapping; growth of 1,010 MiB on a 1,950 MiB host leaves about 90 % of minFree.
#[test]
fn esx6_clear_state_shares_the_pre_hashed_pages_at_once() {
    let (six, decisions) = large_pages_run("1950MiB", "1010MiB", "minfree6");
    assert!(decisions.iter().any(|d| d.action == "memory state clear"), "the host enters clear");
    let first = decisions.iter().find(|d| d.action.starts_with("break large pages")).expect("a break");
    assert_eq!(first.action, "break large pages and share the hashed pages now");
    let t = (first.time_ns / 1_000_000_000) as usize;
    // Both guests' zeroed memory (2 x 240 MiB less the idle process) is hashed by then (two
    // passes of 60 s) and shares within the second.
    assert!(six[t].0 > 470.0, "shared {:.0} MiB one second after the break", six[t].0);
    assert!(six.iter().all(|&(_, reclaimed)| !reclaimed), "nothing ballooned or swapped");
}
