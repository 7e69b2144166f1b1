//! `pressure`: sizes each guest from its measured memory pressure, the way Facebook's senpai
//! sizes a cgroup (github.com/facebookincubator/senpai, senpai.py; TMO, ASPLOS 2022), with the
//! balloon in place of memory.high.
//!
//! Every second the VM's stall since the last adjustment is accumulated. Above the target (10 ms
//! per interval) the guest grows at once by (err / 20)^2 of its size, err = stall / target, at
//! most doubling; otherwise, every interval (6 s), it shrinks by (err / 10)^2 % of its size,
//! err = target / stall, at most 1 %. Never below 100 MiB (senpai's min size) or the VM's floor.
//!
//! The stall is the guest's own memory stall (its PSI) where it is known, as in the simulator;
//! a live host does not see it, and there each major fault the guest reports (virtio-balloon
//! statistics) is counted as one swap-in's wait, [`FAULT_COST_NS`]. The host-side stall (the VM
//! cgroup's PSI) is not used: a balloon makes the guest, not the host, wait.

use std::collections::BTreeMap;

use super::{Action, Decision, HostView, Policy, VmId};
use crate::units::{PAGE_SIZE, human_bytes};

/// senpai's tick: pressure is read every second.
const TICK_NS: u64 = 1_000_000_000;
/// senpai `--interval`: ticks between probes (and the grace after any adjustment).
const INTERVAL_TICKS: u32 = 6;
/// senpai `--pressure`: the stall target per interval, 10 ms.
const PRESSURE_NS: f64 = 10e6;
/// senpai `--max-probe`, `--coeff-probe`, `--max-backoff`, `--coeff-backoff`.
const MAX_PROBE: f64 = 0.01;
const COEFF_PROBE: f64 = 10.0;
const MAX_BACKOFF: f64 = 1.0;
const COEFF_BACKOFF: f64 = 20.0;
/// senpai `--min-size`.
const MIN_SIZE: u64 = 100 << 20;
/// Without PSI, the wait a major fault stands for: one 4 KiB read from a virtual disk, 1 ms (an
/// assumption between a flash read, ~0.1 ms, and a disk seek, ~10 ms; the simulator and a cgroup
/// v2 host give the stall itself).
pub const FAULT_COST_NS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct Track {
    last: Option<u64>,
    integral: u64,
    grace: u32,
}

/// The policy.
#[derive(Clone, Debug, Default)]
pub struct Pressure {
    vms: BTreeMap<VmId, Track>,
}

impl Policy for Pressure {
    fn name(&self) -> &str {
        "pressure"
    }

    fn period_ns(&self) -> Option<u64> {
        Some(TICK_NS)
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        let mut out = Vec::new();
        for v in &view.vms {
            let (stall, measured) = match v.memory_stall_ns {
                Some(ns) => (ns, "guest PSI"),
                None => (v.major_faults * FAULT_COST_NS, "major faults"),
            };
            let t = self.vms.entry(v.id).or_insert(Track { last: None, integral: 0, grace: INTERVAL_TICKS });
            // A counter that went backwards (a live guest rebooted) starts again from there.
            let delta = stall.saturating_sub(t.last.unwrap_or(stall));
            t.last = Some(stall);
            t.integral += delta;
            let size = v.memory.saturating_sub(v.balloon_target);
            let floor = MIN_SIZE.max(v.reservation).min(v.memory);
            let (factor, why) = if t.integral as f64 > PRESSURE_NS {
                let err = t.integral as f64 / PRESSURE_NS;
                let adj = ((err / COEFF_BACKOFF).powi(2) * MAX_BACKOFF).min(MAX_BACKOFF);
                (adj, format!("stall {:.1} ms ({measured}) over the 10 ms target: grow {:.2} %", t.integral as f64 / 1e6, adj * 100.0))
            } else if t.grace > 0 {
                t.grace -= 1;
                continue;
            } else {
                let err = PRESSURE_NS / t.integral.max(1) as f64;
                let adj = ((err / COEFF_PROBE).powi(2) * MAX_PROBE).min(MAX_PROBE);
                (
                    -adj,
                    format!("stall {:.1} ms ({measured}) under the 10 ms target: probe down {:.2} %", t.integral as f64 / 1e6, adj * 100.0),
                )
            };
            t.integral = 0;
            t.grace = INTERVAL_TICKS - 1;
            // Whole pages, never below the floor.
            let most = v.memory / PAGE_SIZE;
            let pages = ((size as f64 * (1.0 + factor)) as u64 / PAGE_SIZE).clamp(floor.div_ceil(PAGE_SIZE).min(most), most);
            let new = pages * PAGE_SIZE;
            if new == size {
                continue;
            }
            out.push(Decision {
                vm: Some(v.id),
                action: Action::SetBalloonTarget { bytes: v.memory - new },
                reason: format!("pressure: {why}: guest {} -> {}", human_bytes(size), human_bytes(new)),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::VmView;

    const MIB: u64 = 1 << 20;

    fn view(stall_ms: Option<u64>, faults: u64, target: u64) -> HostView {
        let vm = VmView {
            id: VmId(0),
            name: "g".into(),
            memory: 1024 * MIB,
            balloon_target: target,
            memory_stall_ns: stall_ms.map(|ms| ms * 1_000_000),
            major_faults: faults,
            ..Default::default()
        };
        HostView { vms: vec![vm], ..Default::default() }
    }

    fn target(d: &[Decision]) -> Option<u64> {
        d.iter().find_map(|d| match d.action {
            Action::SetBalloonTarget { bytes } => Some(bytes),
            _ => None,
        })
    }

    #[test]
    fn probes_down_one_percent_an_interval_and_backs_off_on_stall() {
        let mut p = Pressure::default();
        for tick in 0..INTERVAL_TICKS {
            assert_eq!(target(&p.decide(&view(Some(0), 0, 0))), None, "grace tick {tick}");
        }
        let t = target(&p.decide(&view(Some(0), 0, 0))).unwrap();
        assert_eq!(1024 * MIB - t, ((1024.0 * MIB as f64 * 0.99) as u64) & !4095, "no stall: 1 % smaller");
        // 100 ms of stall in a tick: err 10, (10/20)^2 = 25 % larger at once.
        let t2 = target(&p.decide(&view(Some(100), 0, t))).unwrap();
        let size = 1024 * MIB - t;
        assert_eq!(1024 * MIB - t2, ((size as f64 * 1.25) as u64).min(1024 * MIB) & !4095);
    }

    #[test]
    fn without_psi_major_faults_stand_for_the_stall() {
        let mut p = Pressure::default();
        p.decide(&view(None, 0, 512 * MIB));
        // 40 faults = 40 ms: err 4, 4 % larger.
        let t = target(&p.decide(&view(None, 40, 512 * MIB))).unwrap();
        assert_eq!(1024 * MIB - t, ((512.0 * MIB as f64 * 1.04) as u64) & !4095);
    }

    #[test]
    fn a_counter_that_goes_backwards_starts_again_instead_of_wrapping() {
        let mut p = Pressure::default();
        p.decide(&view(Some(5_000), 0, 512 * MIB));
        // The guest rebooted: its PSI total is smaller than last round's.
        let d = p.decide(&view(Some(1), 0, 512 * MIB));
        assert!(target(&d).is_none_or(|t| t >= 512 * MIB), "no stall counted, so no growth: {d:?}");
        assert!(d.iter().all(|d| !d.reason.contains("grow")), "{d:?}");
    }
}
