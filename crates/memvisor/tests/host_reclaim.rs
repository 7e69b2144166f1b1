//! Host memory reclamation: the balloon, host swap and the compression cache, driven by hand
//! (targets applied as a policy would) or by the `esx` policy, with every invariant checked after
//! each step: every guest page in exactly one host state, every frame free or owned once, no VM
//! reclaimed below its reservation.

mod common;

use common::scenario;
use memvisor::Simulation;
use memvisor::host::PageState;
use memvisor::policy::{Action, Decision, VmId};

const MIB: u64 = 1 << 20;

/// Runs `s` to the end, applying `decisions` at `at_ns`, checking invariants every `step_ns`.
fn run_with(s: &memvisor::Scenario, at_ns: u64, decisions: &[Decision], step_ns: u64) -> Simulation {
    let mut sim = Simulation::new(s).unwrap_or_else(|e| panic!("{e}"));
    let mut t = 0;
    let mut applied = decisions.is_empty();
    loop {
        t += step_ns;
        if !applied && t >= at_ns {
            sim.run_until(at_ns).unwrap();
            for d in decisions {
                sim.apply(d).unwrap();
            }
            applied = true;
        }
        let done = sim.run_until(t).unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = sim.check_invariants() {
            panic!("invariant broken by t={:.3}s: {e}", sim.now() as f64 / 1e9);
        }
        if done {
            return sim;
        }
    }
}

fn target(vm: u32, action: Action) -> Decision {
    Decision { vm: Some(VmId(vm)), action, reason: "test".into() }
}

/// A 1 GiB guest whose process writes 300 MiB, then references it at random with 100 us of CPU
/// after each reference for 2 s, with about 500 MiB free.
fn reader(extra_host: &str) -> memvisor::Scenario {
    scenario(&format!(
        "name = \"t\"\n[host]\nmemory = \"4GiB\"\nsample_interval = \"1s\"\n{extra_host}\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"g\"\nmemory = \"1GiB\"\ndatastore = \"d\"\nballoon = \"virtio\"\n\
         workload = {{ kind = \"random\", pages = \"300MiB\", touches = 20000, compute = \"100us\" }}\n"
    ))
}

fn runtime(sim: &Simulation) -> f64 {
    sim.results().summary.vms[0].runtime_s.unwrap()
}

/// Ballooning memory the guest does not use costs it almost nothing: the guest gives up free
/// pages. Host-swapping the same amount takes random pages, some of them in use, and each touch of
/// one waits for a read.
#[test]
fn ballooning_free_memory_is_cheap_and_host_swapping_it_is_not() {
    let s = reader("");
    let base = runtime(&run_with(&s, 0, &[], 100_000_000));
    let amount = 256 * MIB;
    let ballooned = run_with(&s, 1_000_000_000, &[target(0, Action::SetBalloonTarget { bytes: amount })], 100_000_000);
    assert_eq!(ballooned.world().host().vms()[0].ballooned * 4096, amount, "the balloon reached its target");
    let swapped = run_with(&s, 1_000_000_000, &[target(0, Action::SetSwapTarget { bytes: amount })], 100_000_000);
    let (tb, ts) = (runtime(&ballooned), runtime(&swapped));
    let (cost_b, cost_s) = (tb - base, ts - base);
    // The 2 % and 10x bounds are the host-reclamation issue's.
    assert!(cost_b < 0.02 * base, "ballooning cost {cost_b:.3} s of {base:.3} s");
    assert!(cost_s > 0.02 * base && cost_s >= 10.0 * cost_b.max(0.0), "host swap cost {cost_s:.3} s, ballooning {cost_b:.3} s");
    // The host wait counts stalls on host reclamation only: none when ballooned (first-touch
    // backing is not a wait), and the swap-ins' cost when host-swapped.
    let wait = |sim: &Simulation| sim.world().host().vms()[0].stats.host_wait.ns_at(sim.now()) as f64 / 1e9;
    assert_eq!(wait(&ballooned), 0.0, "ballooned free pages cost no host wait");
    let ws = wait(&swapped);
    assert!(ws > 0.5 * cost_s && ws <= ts, "host wait {ws:.3} s explains the host-swap cost {cost_s:.3} s");
}

/// Host-swap victims are drawn uniformly among the VM's backed pages: their distribution over the
/// guest's pages passes a chi-squared test of uniformity.
#[test]
fn host_swap_victims_are_spread_at_random() {
    // An idle guest whose 512 MiB footprint is touched once and never again: no victim is brought
    // back, so the swapped pages are exactly the victims.
    let s = scenario(
        "name = \"t\"\nduration = \"30s\"\n[host]\nmemory = \"4GiB\"\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"g\"\nmemory = \"1GiB\"\ndatastore = \"d\"\nkernel_reserved = \"0B\"\n\
         workload = { kind = \"idle\", footprint = \"512MiB\" }\n",
    );
    let sim = run_with(&s, 5_000_000_000, &[target(0, Action::SetSwapTarget { bytes: 128 * MIB })], 1_000_000_000);
    let p2m = sim.world().host().vms()[0].p2m();
    let backed_or_swapped: Vec<(u32, bool)> = p2m
        .iter()
        .filter_map(|(p, e)| match e.state() {
            PageState::Backed => Some((p, false)),
            PageState::Swapped(_) => Some((p, true)),
            _ => None,
        })
        .collect();
    let victims = backed_or_swapped.iter().filter(|(_, s)| *s).count() as f64;
    assert_eq!(victims as u64, 128 * MIB / 4096, "the target was met exactly");
    // 64 equal bins over the candidate pages, in page order.
    let bins = 64;
    let per = backed_or_swapped.len().div_ceil(bins);
    let mut counts = vec![0f64; bins];
    for (i, (_, s)) in backed_or_swapped.iter().enumerate() {
        if *s {
            counts[i / per] += 1.0;
        }
    }
    let expect: Vec<f64> =
        (0..bins).map(|b| victims * (per.min(backed_or_swapped.len() - b * per)) as f64 / backed_or_swapped.len() as f64).collect();
    let chi2: f64 = counts.iter().zip(&expect).map(|(o, e)| (o - e) * (o - e) / e).sum();
    // 63 degrees of freedom: the 0.1 % critical value is 103.4.
    assert!(chi2 < 103.4, "victims are not uniform over the pages: chi2 = {chi2:.1}");
    // A victim choice that followed page order would put them all in a quarter of the bins.
    assert!(counts.iter().filter(|&&c| c > 0.0).count() == bins);
}

/// The compression cache keeps pages that fit in half a page, never more than its cap, and sends
/// pages that do not compress to the swap file.
#[test]
fn compression_cache_respects_its_cap_and_incompressible_pages_go_to_swap() {
    let s = scenario(
        "name = \"t\"\nduration = \"20s\"\n[host]\nmemory = \"4GiB\"\nprofile = \"esx\"\nzip_max_percent = 10\nsample_pages = 0\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"g\"\nmemory = \"1GiB\"\ndatastore = \"d\"\nkernel_reserved = \"0B\"\n\
         [[vm.workload]]\nkind = \"idle\"\nname = \"zippy\"\nfootprint = \"300MiB\"\ncontent = \"stress-vm\"\n\
         [[vm.workload]]\nkind = \"idle\"\nname = \"random\"\nfootprint = \"300MiB\"\ncontent = \"incompressible\"\n",
    );
    let mut sim = Simulation::new(&s).unwrap();
    sim.run_until(5_000_000_000).unwrap();
    sim.apply(&target(0, Action::SetSwapTarget { bytes: 500 * MIB })).unwrap();
    let mut t = 5_000_000_000;
    while !sim.run_until(t).unwrap() {
        t += 50_000_000;
        sim.check_invariants().unwrap();
        let v = &sim.world().host().vms()[0];
        assert!(v.zip().used() <= v.zip().capacity(), "cache over its cap: {} of {} slots", v.zip().used(), v.zip().capacity());
    }
    let v = &sim.world().host().vms()[0];
    let g = &sim.world().guests()[0];
    assert_eq!(v.zip().capacity(), 1024 * MIB / 10 / 2048, "10 % of memory in 2 KiB slots");
    assert!(v.zip().is_full(), "compressible pages fill the cache");
    // Which workload each compressed or swapped page belongs to.
    let (mut zipped_random, mut swapped_random, mut swapped_zippy) = (0, 0, 0);
    for (p, e) in v.p2m().iter() {
        let random = g.page_owner_workload(p).is_some_and(|w| w == "random");
        match e.state() {
            PageState::Compressed(_) if random => zipped_random += 1,
            PageState::Swapped(_) if random => swapped_random += 1,
            PageState::Swapped(_) => swapped_zippy += 1,
            _ => {}
        }
    }
    assert_eq!(zipped_random, 0, "an incompressible page was kept compressed");
    assert!(swapped_random > 0, "incompressible victims go to the swap file");
    // Compressible victims go to swap only when the full cache evicts its oldest.
    assert_eq!(swapped_zippy, v.stats.zip_evicted, "compressible pages swapped other than by eviction");
}

/// vmw_balloon inflates at most 16,384 pages a second while the guest has free memory, and at
/// `rate_alloc` (at most 2,048) once allocations fail; the host caps it at 65 % of the VM's memory.
#[test]
fn the_balloon_respects_its_rate_and_cap() {
    let s = scenario(
        "name = \"t\"\nduration = \"90s\"\n[host]\nmemory = \"8GiB\"\nprofile = \"esx\"\nsample_pages = 0\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"g\"\nmemory = \"2GiB\"\ndatastore = \"d\"\n\
         workload = { kind = \"idle\", footprint = \"1200MiB\", active = \"1200MiB\", period = \"1s\" }\n",
    );
    let mut sim = Simulation::new(&s).unwrap();
    sim.run_until(2_000_000_000).unwrap();
    // Ask for all of it: the host caps the target at 65 %.
    sim.apply(&target(0, Action::SetBalloonTarget { bytes: 2048 * MIB })).unwrap();
    let cap = 2048 * MIB * 65 / 100 / 4096;
    assert_eq!(sim.world().host().vms()[0].balloon_target, cap);
    let (mut prev, mut t, mut fast_seconds) = (0u64, 2_000_000_000u64, 0);
    while !sim.run_until(t).unwrap() {
        t += 1_000_000_000;
        sim.check_invariants().unwrap();
        let size = sim.world().host().vms()[0].ballooned;
        let step = size - prev;
        assert!(step <= 16_384 + 2_048, "{step} pages ballooned in one second");
        if step > 2_048 {
            fast_seconds += 1;
        } else if prev > 0 && size < cap {
            // Slow: the guest is under pressure and allocates with reclaim at rate_alloc.
            assert!(step <= 2_048, "{step} pages in a slow second");
        }
        assert!(size <= cap);
        prev = size;
    }
    let g = &sim.world().guests()[0];
    assert!(fast_seconds >= 1, "the guest's free memory went in fast seconds");
    assert!(g.balloon().alloc_fail > 0, "the balloon met the guest's pressure");
    assert_eq!(g.mem_total(), g.mem_total_configured(), "vmw_balloon pages count as used: MemTotal stays");
}

/// virtio-balloon without deflate-on-oom takes its pages out of MemTotal; with it MemTotal stays,
/// and an OOM releases 256 pages instead of killing a process.
#[test]
fn virtio_balloon_mem_total_and_deflate_on_oom() {
    let run = |driver: &str| {
        let s = scenario(&format!(
            "name = \"t\"\nduration = \"20s\"\n[host]\nmemory = \"4GiB\"\n\
             [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"g\"\nmemory = \"512MiB\"\nswap = \"0B\"\ndatastore = \"d\"\nballoon = \"{driver}\"\n\
             [[vm.workload]]\nkind = \"idle\"\nname = \"late\"\nfootprint = \"300MiB\"\nstart = \"5s\"\n"
        ));
        run_with(&s, 1_000_000_000, &[target(0, Action::SetBalloonTarget { bytes: 200 * MIB })], 500_000_000)
    };
    let plain = run("virtio");
    let g = &plain.world().guests()[0];
    assert_eq!(g.balloon().size() * 4096, 200 * MIB);
    assert_eq!(g.mem_total(), g.mem_total_configured() - 200 * MIB / 4096, "MemTotal shrinks by the balloon");
    // 300 MiB do not fit beside a 200 MiB balloon in about 430 MiB: without swap, the OOM killer.
    assert_eq!(g.counters().get(memvisor::guest::Counter::OomKill), 1);
    let doom = run("virtio-deflate-on-oom");
    let g = &doom.world().guests()[0];
    assert_eq!(g.mem_total(), g.mem_total_configured(), "with deflate-on-oom MemTotal stays");
    assert_eq!(g.counters().get(memvisor::guest::Counter::OomKill), 0, "the balloon deflated instead of a kill");
    assert!(g.balloon().oom_deflations > 0 && g.balloon().size() * 4096 < 200 * MIB);
    assert_eq!((200 * MIB / 4096 - g.balloon().size()) % 256, 0, "deflations of 256 pages each");
}

/// A page the balloon gave back holds no frame until the guest touches it again, and that touch
/// comes to the host, which backs it anew, even though the guest used the page (and the host
/// answered for it) before the balloon took it: the guest's cached "backed" state for a page must
/// not outlive its trip through the balloon.
#[test]
fn pages_back_from_the_balloon_are_backed_again_when_reused() {
    let s = scenario(
        "name = \"t\"\nduration = \"8s\"\n[host]\nmemory = \"4GiB\"\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"g\"\nmemory = \"512MiB\"\nswap = \"0B\"\ndatastore = \"d\"\nballoon = \"virtio\"\n\
         [[vm.workload]]\nkind = \"random\"\nname = \"early\"\npages = \"300MiB\"\ntouches = 1000\n\
         [[vm.workload]]\nkind = \"idle\"\nname = \"late\"\nfootprint = \"300MiB\"\nstart = \"6s\"\n",
    );
    // `early` writes 300 MiB and exits; the balloon then takes 250 MiB of the freed pages and gives
    // them back; `late` reuses them.
    let mut sim = Simulation::new(&s).unwrap_or_else(|e| panic!("{e}"));
    sim.run_until(2_000_000_000).unwrap();
    sim.apply(&target(0, Action::SetBalloonTarget { bytes: 250 * MIB })).unwrap();
    sim.run_until(4_000_000_000).unwrap();
    assert_eq!(sim.world().guests()[0].balloon().size() * 4096, 250 * MIB, "the balloon inflated");
    sim.apply(&target(0, Action::SetBalloonTarget { bytes: 0 })).unwrap();
    sim.run_until(5_900_000_000).unwrap();
    assert_eq!(sim.world().guests()[0].balloon().size(), 0, "the balloon deflated");
    sim.run().unwrap();
    sim.check_invariants().unwrap_or_else(|e| panic!("{e}"));
    let (g, v) = (&sim.world().guests()[0], &sim.world().host().vms()[0]);
    let late: Vec<u32> = (0..g.mem_total_configured() as u32).filter(|&p| g.page_owner_workload(p) == Some("late")).collect();
    assert!(late.len() * 4096 >= 299 * MIB as usize, "late holds its 300 MiB ({} pages)", late.len());
    let unbacked = late.iter().filter(|&&p| v.p2m().get(p).state() != PageState::Backed).count();
    assert_eq!(unbacked, 0, "{unbacked} of late's {} pages are in use in the guest but not backed on the host", late.len());
}

/// The esx policy on an overcommitted host: it balloons and swaps the unreserved VM, never takes
/// the reserved one below its reservation, and a run is the same bit for bit with the same seed.
#[test]
fn esx_policy_reclaims_without_touching_reservations_and_is_deterministic() {
    let text = "name = \"t\"\nduration = \"40s\"\nseed = 3\n[host]\nmemory = \"2GiB\"\nprofile = \"esx\"\npolicy = \"esx\"\nsample_period = \"10s\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"res\"\nmemory = \"1GiB\"\nreservation = \"1GiB\"\ndatastore = \"d\"\ntransparent_hugepage = \"never\"\n\
                workload = { kind = \"stress-vm\", bytes = \"800MiB\" }\n\
                [[vm]]\nname = \"free\"\nmemory = \"1GiB\"\ndatastore = \"d\"\ntransparent_hugepage = \"never\"\n\
                workload = { kind = \"random\", pages = \"700MiB\", touches = 3000000 }\n";
    let s = scenario(text);
    let sim = run_with(&s, 0, &[], 250_000_000);
    let h = &sim.world().host().vms();
    let free = &h[1];
    assert!(free.stats.ballooned_total > 0 && free.stats.swap_out > 0, "the unreserved VM was ballooned and swapped");
    assert_eq!(h[0].ballooned + h[0].swapped, 0, "the reserved VM keeps its memory");
    let rerun = common::run(&s);
    let again = rerun.results();
    let first = sim.results();
    assert_eq!(first.summary.to_json(), again.summary.to_json());
    assert_eq!(first.series.bits(), again.series.bits());
    assert_eq!(first.decisions, again.decisions);
}

/// A limit below a VM's memory holds under the esx policy whatever the host's free memory: the host
/// never backs more than the limit, and the balloon takes the VM down to it so that its guest, not
/// random host swapping, chooses what to give up.
#[test]
fn esx_holds_a_vm_at_its_limit_on_a_roomy_host() {
    let text = "name = \"t\"\nduration = \"30s\"\n[host]\nmemory = \"16GiB\"\nprofile = \"esx\"\npolicy = \"esx\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"capped\"\nmemory = \"2GiB\"\nlimit = \"1GiB\"\ndatastore = \"d\"\n\
                workload = { kind = \"random\", pages = \"1500MiB\", touches = 5000000 }\n";
    let s = scenario(text);
    let mut sim = Simulation::new(&s).unwrap_or_else(|e| panic!("{e}"));
    let limit = 1024 * MIB / 4096;
    let mut t = 0;
    loop {
        t += 100_000_000;
        let done = sim.run_until(t).unwrap_or_else(|e| panic!("{e}"));
        sim.check_invariants().unwrap_or_else(|e| panic!("{e}"));
        let v = &sim.world().host().vms()[0];
        assert!(v.granted + v.zip().frames() <= limit, "holds {} pages over its limit of {limit}", v.granted + v.zip().frames());
        if done {
            break;
        }
    }
    let v = &sim.world().host().vms()[0];
    // Ballooned toward the limit: 1 GiB of its 2 GiB, as far as the vmw driver's rate allows
    // in the time (at least its slowest rate, 512 pages/s, over the 15 s after the first balance).
    assert!(v.ballooned >= 512 * 15, "balloon {} pages", v.ballooned);
}

/// The esx policy blocks a VM in the low state only while it holds more than its target: on a host
/// overcommitted four to one, every block is lifted within a balance period (15 s), and every VM
/// keeps running.
#[test]
fn esx_blocked_vms_resume_once_within_target() {
    let text = "name = \"t\"\nduration = \"60s\"\nseed = 5\n[host]\nmemory = \"1700MiB\"\nprofile = \"esx\"\npolicy = \"esx\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"v\"\ncount = 4\nmemory = \"512MiB\"\ndatastore = \"d\"\n\
                workload = { kind = \"idle\", footprint = \"400MiB\", active = \"100MiB\", period = \"2s\" }\n";
    let s = scenario(text);
    let sim = run_with(&s, 0, &[], 500_000_000);
    let r = sim.results();
    let mut blocked_since: std::collections::BTreeMap<String, u64> = Default::default();
    for d in &r.decisions {
        match d.action.as_str() {
            "block" => {
                blocked_since.insert(d.vm.clone(), d.time_ns);
            }
            "unblock" => {
                let since = blocked_since.remove(&d.vm).expect("unblocked while not blocked");
                assert!(d.time_ns - since <= 15_000_000_000, "'{}' blocked for {} s", d.vm, (d.time_ns - since) as f64 / 1e9);
            }
            _ => {}
        }
    }
    let end = sim.now();
    for (vm, since) in blocked_since {
        assert!(end - since <= 15_000_000_000, "'{vm}' still blocked after {} s", (end - since) as f64 / 1e9);
    }
    assert!(r.decisions.iter().any(|d| d.action == "block"), "the host reached the low state");
}

/// The KVM-world policies drive the simulated host through the same interface: on an overcommitted
/// host each balloons a guest (none below its reservation), every invariant holds throughout, and
/// the run is deterministic.
#[test]
fn kvm_world_policies_balloon_within_reservations() {
    for policy in ["mom", "proxmox", "pressure"] {
        let text = format!(
            "name = \"t\"\nduration = \"30s\"\nseed = 3\n[host]\nmemory = \"1100MiB\"\nprofile = \"kvm\"\npolicy = \"{policy}\"\n\
             [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"busy\"\nmemory = \"512MiB\"\nreservation = \"350MiB\"\ndatastore = \"d\"\ntransparent_hugepage = \"never\"\n\
             workload = {{ kind = \"stress-vm\", bytes = \"400MiB\" }}\n\
             [[vm]]\nname = \"idle\"\nmemory = \"512MiB\"\nreservation = \"128MiB\"\ndatastore = \"d\"\ntransparent_hugepage = \"never\"\n\
             workload = {{ kind = \"random\", pages = \"350MiB\", touches = 150000 }}\n"
        );
        let s = scenario(&text);
        let sim = run_with(&s, 0, &[], 1_000_000_000);
        let r = sim.results();
        assert!(
            r.decisions.iter().any(|d| d.action.starts_with("set balloon target") && d.outcome == "applied"),
            "{policy}: no balloon decision"
        );
        let h = sim.world().host().vms();
        assert!(h.iter().any(|v| v.stats.ballooned_total > 0), "{policy}: nothing was ballooned");
        // The balloon's size is what it took less what it gave back, at every sample.
        let col = |name: &str| &r.series.values[r.series.columns.iter().position(|c| *c == name).expect(name)];
        let (size, took, gave) = (col("MCTLSZ_MiB"), col("balloon_inflated_pages"), col("balloon_deflated_pages"));
        for i in 0..size.len() {
            assert_eq!(size[i] * 256.0, took[i] - gave[i], "{policy}: row {i}");
        }
        for (v, g) in h.iter().zip(sim.world().guests()) {
            let left = (g.config().memory_pages as u64 - v.ballooned) * 4096;
            assert!(left >= v.res.reservation, "{policy}: '{}' ballooned below its reservation", v.name);
        }
        assert_eq!(r.decisions, common::run(&s).results().decisions, "{policy}: not deterministic");
    }
}

/// A page read back from host swap and never touched again must become takeable once its read is
/// done, even with neither the sampler nor the reclaim daemon running (a KVM host under a policy
/// that sets no swap target): here guests that free and reallocate their memory used to leave the
/// host with only such pages, and the run ended with "no VM has memory ... the host could swap
/// out" at 19.7 s.
#[test]
fn pages_read_back_are_takeable_again_without_the_daemon() {
    let text = "name = \"t\"\nduration = \"25s\"\n[host]\nmemory = \"1536MiB\"\nprofile = \"kvm\"\npolicy = \"pressure\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"web\"\nmemory = \"512MiB\"\ndatastore = \"d\"\ntransparent_hugepage = \"never\"\n\
                workload = { kind = \"stress\", pages = \"300MiB\", passes = 3 }\n\
                [[vm]]\nname = \"batch\"\ncount = 3\nmemory = \"512MiB\"\ndatastore = \"d\"\ntransparent_hugepage = \"never\"\n\
                workload = { kind = \"stress-vm\", bytes = \"400MiB\" }\n";
    let sim = run_with(&scenario(text), 0, &[], 1_000_000_000);
    assert!(sim.world().host().vms().iter().all(|v| v.stats.swap_out > 0), "the host had to swap every VM");
}

/// Xen self-ballooning: an idle guest gives memory back a little at a time down to what it has
/// committed plus its reserve, never below the driver's floor; a guest whose balloon does not take
/// pages out of MemTotal is refused with the reason.
#[test]
fn xen_selfballoon_shrinks_an_idle_guest_toward_its_commitment() {
    let text = |balloon: &str| {
        common::one_guest(
            "4GiB",
            &format!("name = \"g\"\nmemory = \"512MiB\"\nballoon = \"{balloon}\"\nworkload = {{ kind = \"idle\", footprint = \"64MiB\" }}"),
            "duration = \"300s\"",
        )
        .replace("[host]\n", "[host]\npolicy = \"xen-selfballoon\"\n")
    };
    let s = common::scenario(&text("virtio"));
    let sim = common::run(&s);
    let g = &sim.world().guests()[0];
    let page = memvisor::units::PAGE_SIZE;
    let (total, committed) = (g.mem_total() * page, g.committed_as() * page);
    let floor = memvisor::policy::floor_pages(512 << 8, g.watermarks().high) * page;
    assert!(g.balloon().size() > 0, "the guest gave memory back");
    assert!(total >= floor - page, "MemTotal {total} stays at or above the floor {floor}");
    assert!(total <= floor.max(committed + g.watermarks().high * page) + (8 << 20), "MemTotal {total} came down to its goal or floor");
    let decisions = sim.results().decisions;
    assert!(decisions.len() > 10 && decisions.iter().all(|d| d.reason.contains("Committed_AS")), "every tick says why");
    let err = memvisor::scenario::load(&text("vmw"), "t", &[]).unwrap_err().to_string();
    assert!(err.contains("host.policy") && err.contains("MemTotal") && err.contains("vmw"), "{err}");
}

/// DMC squeezes VMs equally: with the host short, two VMs of different ranges are ballooned to the
/// same fraction of their dynamic range (reservation to memory), and none below its reservation.
#[test]
fn dmc_squeezes_every_vm_to_the_same_fraction_of_its_range() {
    let text = "name = \"t\"\nduration = \"60s\"\n[host]\nmemory = \"1GiB\"\nprofile = \"kvm\"\npolicy = \"dmc\"\n\
                [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
                [[vm]]\nname = \"a\"\nmemory = \"1GiB\"\nreservation = \"256MiB\"\noverhead = \"0B\"\ndatastore = \"d\"\n\
                workload = { kind = \"idle\", footprint = \"500MiB\" }\n\
                [[vm]]\nname = \"b\"\nmemory = \"768MiB\"\nreservation = \"512MiB\"\noverhead = \"0B\"\ndatastore = \"d\"\n\
                workload = { kind = \"idle\", footprint = \"500MiB\" }\n";
    let sim = common::run(&scenario(text));
    let page = memvisor::units::PAGE_SIZE as f64;
    let h = sim.world().host().vms();
    let frac = |i: usize, min: f64, max: f64| ((max - h[i].balloon_target as f64 * page) - min) / (max - min);
    let (a, b) = (frac(0, 256.0 * 1048576.0, 1024.0 * 1048576.0), frac(1, 512.0 * 1048576.0, 768.0 * 1048576.0));
    assert!(h[0].balloon_target > 0 && h[1].balloon_target > 0, "both were squeezed");
    assert!((a - b).abs() < 0.01 && a > 0.0 && a < 1.0, "the same fraction of each range: {a:.4} and {b:.4}");
    assert!(sim.results().decisions.iter().all(|d| d.reason.contains("dynamic range")));
}

/// A vCPU's stall on host reclamation is counted as it passes: a guest whose allocation waits
/// minutes for a frame (host swap-outs queued on one disk, the case as a new user first ran it)
/// has at no sample stalled longer than the run has lasted. Counted when each stall began, the
/// total was 176 s at the 20 s sample of a 120 s run.
#[test]
fn host_wait_never_runs_ahead_of_the_time_that_passed() {
    let s = scenario(
        "name = \"t\"\nduration = \"30s\"\n[host]\nmemory = \"4GiB\"\nprofile = \"esx\"\npolicy = \"esx\"\nsample_interval = \"1s\"\n\
         [[datastore]]\nname = \"d\"\ndevice = \"hdd\"\n\
         [[vm]]\nname = \"app\"\ncount = 2\nos = \"windows\"\nmemory = \"4GiB\"\ndatastore = \"d\"\n\
         workload = { kind = \"dotnet-heap\", live = \"2GiB\", cycles = 50 }\n",
    );
    let sim = common::run(&s);
    let rows = sim.results().series;
    let wait = rows.columns.iter().position(|c| *c == "host_wait_ms").expect("column");
    let mut longest: f64 = 0.0;
    for (r, &t) in rows.time_s.iter().enumerate() {
        let w = rows.values[wait][r];
        // One vCPU each.
        assert!(w <= t * 1e3 + 1e-6, "{} stalled {w:.0} ms by {t} s", rows.vm[r]);
        longest = longest.max(w);
    }
    assert!(longest > 10e3, "the guests do stall on the host here ({longest:.0} ms): the test tests something");
}

/// Direct host reclaim (a guest's fault that finds no free frame, with no policy asking for
/// anything) draws its victims from the scenario's seed: the same seed takes the same pages, and
/// another seed others.
#[test]
fn direct_host_reclaim_victims_follow_the_seed() {
    let swapped = |seed: u64| -> Vec<u32> {
        let s = scenario(&format!(
            "name = \"t\"\nseed = {seed}\nduration = \"10s\"\n[host]\nmemory = \"512MiB\"\nsample_pages = 0\n\
             [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
             [[vm]]\nname = \"g\"\nmemory = \"1GiB\"\ndatastore = \"d\"\nkernel_reserved = \"0B\"\n\
             workload = {{ kind = \"idle\", footprint = \"640MiB\" }}\n"
        ));
        let sim = run_with(&s, 0, &[], 1_000_000_000);
        let p2m = sim.world().host().vms()[0].p2m();
        p2m.iter().filter(|(_, e)| matches!(e.state(), PageState::Swapped(_))).map(|(p, _)| p).collect()
    };
    let (a, again, b) = (swapped(1), swapped(1), swapped(2));
    assert!(a.len() as u64 >= 128 * MIB / 4096, "the host had to take at least what it lacks: {} pages", a.len());
    assert_eq!(a, again, "the same seed takes the same victims");
    let common = a.iter().filter(|p| b.binary_search(p).is_ok()).count();
    // The footprint fills in page order and each victim is drawn among the pages backed at that
    // moment, so early pages face more draws: for uniform draws a model of that fill predicts about
    // 51 % shared between two seeds (30,102 of 59,346 here). Allowed: 45-57 %. The old choice, which
    // ignored the seed, shared all of them; a seeded one that took the first backed page after a
    // random start shared 83 %.
    let shared = common as f64 / a.len().min(b.len()) as f64;
    assert!((0.45..0.57).contains(&shared), "seeds 1 and 2 share {common} of {} victims", a.len());
}
