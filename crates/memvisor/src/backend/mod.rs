//! The one interface between policy and mechanism: a backend is observed (filling a `HostView`)
//! and told to apply decisions. The simulated host is the first backend; a live Linux host
//! (cgroups, QEMU balloon, KSM) implements the same two calls. The [`crate::controller`] drives
//! either.

mod simulated;

pub use simulated::SimulatedHost;

use crate::policy::{Decision, HostView};

/// Something a policy can drive.
pub trait Backend {
    /// What the host and its VMs look like now.
    fn observe(&self) -> HostView;
    /// Sets the target a decision names; the mechanisms work toward it at their own rates.
    fn apply(&mut self, decision: &Decision) -> Result<(), String>;
}
