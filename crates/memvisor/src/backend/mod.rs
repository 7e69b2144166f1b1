//! The one interface between policy and mechanism: a backend is observed (filling a `HostView`)
//! and told to apply decisions. The simulated host is the first backend; a live Linux host
//! (cgroups, QEMU balloon, KSM) implements the same two calls later.

mod simulated;

pub use simulated::SimulatedHost;

use crate::policy::{Decision, HostView};

/// Something a policy can drive.
pub trait Backend {
    /// What the host and its VMs look like now.
    fn observe(&self, now: u64) -> HostView;
    /// Carries out one decision.
    fn apply(&mut self, decision: &Decision) -> Result<(), String>;
}
