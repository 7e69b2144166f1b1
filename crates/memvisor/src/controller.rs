//! The controller: observe -> decide -> apply -> log, over any [`Backend`]. The engine only says
//! when a tick is due; a live host's loop drives the same controller on a wall clock.

use crate::backend::Backend;
use crate::policy::{Policy, VmId};

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
}

/// Runs a policy against a backend and keeps the decision log.
pub struct Controller {
    policy: Box<dyn Policy>,
    log: Vec<DecisionRecord>,
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

    /// One round: observe the backend, let the policy decide, apply each decision and log it with
    /// its reason. A decision the backend refuses ends the round with its error.
    pub fn tick(&mut self, backend: &mut dyn Backend) -> Result<(), String> {
        let view = backend.observe();
        for d in self.policy.decide(&view) {
            let name = match d.vm {
                None => "host".to_string(),
                Some(id) => view.vm(id).map_or_else(|| format!("#{}", id.0), |v| v.name.clone()),
            };
            backend.apply(&d)?;
            self.log.push(DecisionRecord {
                time_ns: view.time_ns,
                policy: self.policy.name().to_string(),
                vm_id: d.vm,
                vm: name,
                action: d.action.to_string(),
                reason: d.reason,
            });
        }
        Ok(())
    }

    /// Every decision so far.
    pub fn log(&self) -> &[DecisionRecord] {
        &self.log
    }
}
