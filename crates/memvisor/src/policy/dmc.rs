//! `dmc`: Citrix XenServer's Dynamic Memory Control, the `squeezed` daemon's `Proportional`
//! policy (xen-api `ocaml/xenops/squeeze.ml`; docs/sources/tmem.md section 4). "VMs are squeezed
//! equally to free memory. There is no direct attempt to respond to distress or memory pressure
//! information from within the guest."
//!
//! Each VM has a dynamic range: here its reservation (`dynamic-min`) to its configured memory
//! (`dynamic-max`). The surplus is the host's free memory, plus what every VM holds above its
//! minimum, less the host's own target (9 MiB: `low_mem_emergency_pool` 1 MiB plus
//! `extra_mem_to_keep` 8 MiB); every VM gets the same fraction `gamma` of its range:
//! `target = min + gamma x (max - min)`, gamma = surplus / the ranges' sum, within 0..1. Targets
//! are set in two phases: while any VM must shrink, only the shrinking ones are set, and growth
//! waits until nothing is left to free (the Xen heap workaround). A VM whose balloon has not moved
//! since the last round while off its target is treated as stuck (`assume_balloon_driver_stuck_after`,
//! 5 s): it counts at what it holds, and the others share the rest. What a VM holds is the
//! machine memory granted to it (see `range`). Rebalancing runs every 10 s
//! (`balance-check-interval`).

use std::collections::BTreeMap;

use super::{Action, Decision, HostView, Policy, VmId, VmView};
use crate::units::human_bytes;

/// `balance-check-interval`: 10 s.
const PERIOD_NS: u64 = 10_000_000_000;
/// The host keeps `low_mem_emergency_pool` (1 MiB) + `extra_mem_to_keep` (8 MiB) free.
const HOST_TARGET: u64 = 9 << 20;
/// `inaccuracy_kib`: a balloon within 4 KiB of its target has hit it.
const INACCURACY: u64 = 4 << 10;

/// The policy: what each VM held at the last round, to tell a stuck balloon.
#[derive(Clone, Debug, Default)]
pub struct Dmc {
    last_actual: BTreeMap<VmId, u64>,
}

/// A VM's dynamic range and what it holds. Xen's `memory_actual` is the pages the domain holds;
/// on a host that backs guest memory on first touch (KVM, the simulator) that is the machine
/// memory granted to the VM, not its size less the balloon, so that, as in Xen, what the VMs hold
/// and what is free add up to the host.
fn range(v: &VmView) -> (u64, u64, u64) {
    let max = v.memory;
    let min = v.reservation.min(max);
    (min, max, v.granted.min(max))
}

impl Policy for Dmc {
    fn name(&self) -> &str {
        "dmc"
    }

    fn period_ns(&self) -> Option<u64> {
        Some(PERIOD_NS)
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        // Only a VM asked to shrink can be stuck: one under its target need not take memory it
        // does not touch.
        let stuck = |d: &Dmc, v: &VmView| {
            let (_, _, actual) = range(v);
            let target = v.memory - v.balloon_target.min(v.memory);
            d.last_actual.get(&v.id) == Some(&actual) && actual > target + INACCURACY
        };
        let (moving, held): (Vec<&VmView>, Vec<&VmView>) = view.vms.iter().partition(|v| !stuck(self, v));
        self.last_actual = view.vms.iter().map(|v| (v.id, range(v).2)).collect();
        // Free memory plus what the moving VMs hold above their minimum (less 2 x the tolerance,
        // as squeeze.ml counts it), less the host's own target; stuck VMs keep what they hold.
        let above: u64 = moving.iter().map(|v| range(v)).map(|(min, _, actual)| actual.saturating_sub(min + 2 * INACCURACY)).sum();
        let surplus = (view.host_free + above).saturating_sub(HOST_TARGET);
        let span: u64 = moving.iter().map(|v| range(v)).map(|(min, max, _)| max - min).sum();
        let gamma = if span == 0 { 1.0 } else { (surplus as f64 / span as f64).min(1.0) };
        let targets: Vec<(&VmView, u64)> = moving
            .iter()
            .map(|v| {
                let (min, max, _) = range(v);
                (*v, min + (gamma * (max - min) as f64) as u64)
            })
            .collect();
        let shrinking = targets.iter().any(|&(v, t)| t + INACCURACY < range(v).2);
        let why = format!(
            "dmc: host free {}, {} above the VMs' minimums: every VM at {:.1} % of its dynamic range{}{}",
            human_bytes(view.host_free),
            human_bytes(above),
            gamma * 100.0,
            if held.is_empty() { String::new() } else { format!(" ({} stuck VM(s) keep what they hold)", held.len()) },
            if shrinking { "; shrinking first, growth waits" } else { "" },
        );
        targets
            .into_iter()
            .filter(|&(v, t)| !shrinking || t < range(v).2)
            .filter_map(|(v, t)| {
                let bytes = v.memory - t;
                (bytes != v.balloon_target).then(|| Decision {
                    vm: Some(v.id),
                    action: Action::SetBalloonTarget { bytes },
                    reason: format!(
                        "{why}: {} -> {} (range {} to {})",
                        human_bytes(range(v).2),
                        human_bytes(t),
                        human_bytes(range(v).0),
                        human_bytes(v.memory)
                    ),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A VM holding all of its memory less the balloon.
    fn vm(id: u32, min: u64, max: u64, balloon: u64) -> VmView {
        VmView {
            id: VmId(id),
            memory: max,
            reservation: min,
            granted: max - balloon,
            balloon_size: balloon,
            balloon_target: balloon,
            ..Default::default()
        }
    }

    fn sizes(d: &mut Dmc, view: &HostView) -> BTreeMap<u32, u64> {
        d.decide(view)
            .into_iter()
            .map(|x| match x.action {
                Action::SetBalloonTarget { bytes } => (x.vm.unwrap().0, view.vm(x.vm.unwrap()).unwrap().memory - bytes),
                _ => panic!("only balloon targets"),
            })
            .collect()
    }

    #[test]
    fn every_vm_at_the_same_fraction_of_its_range() {
        // Two VMs at their maximum and nothing free: the host's own 9 MiB comes out of both, each
        // giving the same share of its range.
        let view =
            HostView { host_free: 0, vms: vec![vm(0, 256 * MIB, 1024 * MIB, 0), vm(1, 256 * MIB, 768 * MIB, 0)], ..Default::default() };
        let s = sizes(&mut Dmc::default(), &view);
        let frac = |id: u32, min: u64, max: u64| (s[&id] - min) as f64 / (max - min) as f64;
        assert!((frac(0, 256 * MIB, 1024 * MIB) - frac(1, 256 * MIB, 768 * MIB)).abs() < 1e-6);
        assert!(s[&0] < 1024 * MIB && s[&1] < 768 * MIB, "{s:?}");
    }

    #[test]
    fn shrinking_comes_first_and_a_stuck_balloon_is_worked_around() {
        // VM 0 was squeezed to its minimum and the host has room now; VM 1 sits at its maximum
        // while the host is short: VM 1 must shrink, so VM 0's growth waits.
        let mut d = Dmc::default();
        let view = HostView {
            host_free: 0,
            vms: vec![vm(0, 256 * MIB, 1024 * MIB, 768 * MIB), vm(1, 256 * MIB, 1024 * MIB, 0)],
            ..Default::default()
        };
        let s = sizes(&mut d, &view);
        assert!(s.contains_key(&1) && !s.contains_key(&0), "only the shrinking VM is set: {s:?}");
        // Next round VM 1 has not moved from its new target: stuck. It keeps what it holds and the
        // surplus goes to VM 0 alone.
        let mut v1 = vm(1, 256 * MIB, 1024 * MIB, 0);
        v1.balloon_target = 1024 * MIB - s[&1];
        assert!(v1.granted > s[&1], "still above its target");
        let view = HostView { host_free: 200 * MIB, vms: vec![vm(0, 256 * MIB, 1024 * MIB, 768 * MIB), v1], ..Default::default() };
        let s = sizes(&mut d, &view);
        assert!(!s.contains_key(&1), "a stuck VM gets no new target");
        assert!(s[&0] > 256 * MIB, "VM 0 grows into the free memory: {s:?}");
    }
}
