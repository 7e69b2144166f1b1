//! `static`: partitioning, the no-overcommit baseline (Xen's default, seed 002 "Solution Set A").
//! Each VM may hold at most its configured memory (or its limit, if lower), decided once at start.

use super::{Action, Decision, HostView, Policy};
use crate::units::human_bytes;

/// The static partitioning policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Static;

impl Policy for Static {
    fn name(&self) -> &str {
        "static"
    }

    fn period_ns(&self) -> Option<u64> {
        None
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        view.vms
            .iter()
            .map(|vm| {
                let cap = vm.memory.min(vm.limit);
                Decision {
                    vm: Some(vm.id),
                    action: Action::SetGrantLimit { bytes: cap },
                    reason: format!(
                        "static partitioning: '{}' keeps the {} it was configured with{}; nothing is reclaimed",
                        vm.name,
                        human_bytes(cap),
                        if vm.limit < vm.memory { format!(" (limited from {})", human_bytes(vm.memory)) } else { String::new() }
                    ),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{VmId, VmView};

    #[test]
    fn caps_each_vm_at_its_configured_memory() {
        let vm = |id, name: &str, memory, limit| VmView {
            id: VmId(id),
            name: name.into(),
            memory,
            reservation: 0,
            limit,
            shares: 1000,
            overhead: 0,
            granted: 0,
            guest_total: 0,
            guest_free: 0,
            swap_in: 0,
            swap_out: 0,
            major_faults: 0,
            memory_stall_ns: 0,
            committed: 0,
            balloon_size: 0,
            balloon_target: 0,
            balloon_max: 0,
            swapped: 0,
            compressed: 0,
            compression_cache: 0,
            swap_target: 0,
            active_sample: (0, 0),
            active_sample_now: (0, 0),
            active_periods: 0,
        };
        let view = HostView {
            time_ns: 0,
            host_memory: 8 << 30,
            host_free: 8 << 30,
            hypervisor: 0,
            vms: vec![vm(0, "a", 2 << 30, 2 << 30), vm(7, "b", 4 << 30, 1 << 30)],
        };
        let d = Static.decide(&view);
        assert_eq!(d[0].action, Action::SetGrantLimit { bytes: 2 << 30 });
        assert_eq!((d[1].vm, &d[1].action), (Some(VmId(7)), &Action::SetGrantLimit { bytes: 1 << 30 }));
        assert!(d[1].reason.contains("limited"));
    }
}
