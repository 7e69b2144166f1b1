//! The controller: observe -> decide -> apply -> log, over any [`Backend`]. The engine only says
//! when a tick is due; a live host's loop (`memvisor manage`) drives the same controller on a wall
//! clock, through the Python binding.
//!
//! The controller is also where the operator's guarantees are kept, whatever a policy says: a
//! decision for a VM the backend does not manage is refused, and no balloon, swap target or grant
//! limit may take a VM below its floor (its reservation; a live host's configured minimum).

use crate::backend::Backend;
use crate::policy::{Action, Decision, HostView, Policy, VmId};
use crate::units::human_bytes;

/// One logged policy decision.
#[derive(Clone, Debug, PartialEq)]
pub struct DecisionRecord {
    /// When, ns since the start.
    pub time_ns: u64,
    /// Policy name.
    pub policy: String,
    /// The VM's stable id, or `None` for a host-wide decision.
    pub vm_id: Option<VmId>,
    /// The VM's name, or "host".
    pub vm: String,
    /// What was asked for.
    pub action: String,
    /// Why, in words an operator can read.
    pub reason: String,
    /// What became of it: "applied", or why not or not as asked ("clamped to the floor ...",
    /// "dry run", "refused: ...", "failed: ...").
    pub outcome: String,
}

/// Runs a policy against a backend and keeps the decision log.
pub struct Controller {
    policy: Box<dyn Policy>,
    log: Vec<DecisionRecord>,
}

/// The decision as it may be applied, and what was changed to make it so; `Err`: refused.
fn guard(view: &HostView, d: &Decision) -> Result<(Decision, Option<String>), String> {
    let Some(id) = d.vm else {
        return Ok((d.clone(), None));
    };
    let Some(vm) = view.vm(id) else {
        return Err(format!("refused: VM #{} is not one the backend manages", id.0));
    };
    let floor = vm.reservation.min(vm.memory);
    let (asked, ok) = match d.action {
        Action::SetBalloonTarget { bytes } | Action::SetSwapTarget { bytes } => (bytes, bytes.min(vm.memory - floor)),
        Action::SetGrantLimit { bytes } => (bytes, bytes.max(floor)),
        _ => (0, 0),
    };
    if asked == ok {
        return Ok((d.clone(), None));
    }
    let action = match d.action {
        Action::SetBalloonTarget { .. } => Action::SetBalloonTarget { bytes: ok },
        Action::SetSwapTarget { .. } => Action::SetSwapTarget { bytes: ok },
        _ => Action::SetGrantLimit { bytes: ok },
    };
    let note = if floor == 0 {
        format!("clamped to {}, all of {}'s memory", human_bytes(ok), vm.name)
    } else {
        format!("clamped to {} to keep {}'s floor of {}", human_bytes(ok), vm.name, human_bytes(floor))
    };
    Ok((Decision { action, ..d.clone() }, Some(note)))
}

impl Controller {
    /// A controller for `policy` with an empty log.
    pub fn new(policy: Box<dyn Policy>) -> Self {
        Self { policy, log: Vec::new() }
    }

    /// How often the policy wants to run; `None`: once, at start.
    pub fn period_ns(&self) -> Option<u64> {
        self.policy.period_ns()
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// One round: observe the backend, let the policy decide, keep each decision within the
    /// floors, apply it and log it with its reason and outcome. Returns how many records the
    /// round added. An error from the backend (not a refusal) ends the round.
    pub fn tick(&mut self, backend: &mut dyn Backend) -> Result<usize, String> {
        let view = backend.observe()?;
        let before = self.log.len();
        let decisions = self.policy.decide(&view);
        if let Some(e) = self.policy.take_error() {
            return Err(e);
        }
        for d in decisions {
            let name = match d.vm {
                None => "host".to_string(),
                Some(id) => view.vm(id).map_or_else(|| format!("#{}", id.0), |v| v.name.clone()),
            };
            // The action as the policy asked it; the outcome in the order things happened to it.
            let outcome = match guard(&view, &d) {
                Err(refused) => refused,
                Ok((safe, note)) => {
                    let applied = backend.apply(&safe)?;
                    note.map_or(applied.clone(), |n| format!("{n}; {applied}"))
                }
            };
            let action = d.action.to_string();
            self.log.push(DecisionRecord {
                time_ns: view.time_ns,
                policy: self.policy.name().to_string(),
                vm_id: d.vm,
                vm: name,
                action,
                reason: d.reason,
                outcome,
            });
        }
        Ok(self.log.len() - before)
    }

    /// Every decision so far.
    pub fn log(&self) -> &[DecisionRecord] {
        &self.log
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::VmView;

    fn view() -> HostView {
        let vm = VmView { id: VmId(3), name: "a".into(), memory: 1 << 30, reservation: 256 << 20, ..Default::default() };
        HostView { vms: vec![vm], ..Default::default() }
    }

    fn decision(vm: u32, action: Action) -> Decision {
        Decision { vm: Some(VmId(vm)), action, reason: String::new() }
    }

    #[test]
    fn floors_hold_whatever_the_policy_asks() {
        let v = view();
        let (d, note) = guard(&v, &decision(3, Action::SetBalloonTarget { bytes: 1 << 30 })).unwrap();
        assert_eq!(d.action, Action::SetBalloonTarget { bytes: 768 << 20 });
        assert!(note.unwrap().contains("floor of 256"));
        let (d, _) = guard(&v, &decision(3, Action::SetGrantLimit { bytes: 1 << 20 })).unwrap();
        assert_eq!(d.action, Action::SetGrantLimit { bytes: 256 << 20 });
        let (d, note) = guard(&v, &decision(3, Action::SetBalloonTarget { bytes: 512 << 20 })).unwrap();
        assert_eq!((d.action, note), (Action::SetBalloonTarget { bytes: 512 << 20 }, None));
        // No floor: a balloon beyond the VM is cut to its memory, and said so (not "a floor of 0 B").
        let mut free = view();
        free.vms[0].reservation = 0;
        let (d, note) = guard(&free, &decision(3, Action::SetBalloonTarget { bytes: 1 << 40 })).unwrap();
        assert_eq!(d.action, Action::SetBalloonTarget { bytes: 1 << 30 });
        assert_eq!(note.unwrap(), "clamped to 1 GiB, all of a's memory");
    }

    #[test]
    fn a_vm_the_backend_does_not_manage_is_refused() {
        let e = guard(&view(), &decision(4, Action::SetBalloonTarget { bytes: 0 })).unwrap_err();
        assert!(e.contains("#4"), "{e}");
    }
}
