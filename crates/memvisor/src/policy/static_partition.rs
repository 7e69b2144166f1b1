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
        let vm =
            |id, name: &str, memory, limit| VmView { id: VmId(id), name: name.into(), memory, limit, shares: 1000, ..Default::default() };
        let view = HostView {
            time_ns: 0,
            host_memory: 8 << 30,
            host_free: 8 << 30,
            vms: vec![vm(0, "a", 2 << 30, 2 << 30), vm(7, "b", 4 << 30, 1 << 30)],
            ..Default::default()
        };
        let d = Static.decide(&view);
        assert_eq!(d[0].action, Action::SetGrantLimit { bytes: 2 << 30 });
        assert_eq!((d[1].vm, &d[1].action), (Some(VmId(7)), &Action::SetGrantLimit { bytes: 1 << 30 }));
        assert!(d[1].reason.contains("limited"));
    }
}
