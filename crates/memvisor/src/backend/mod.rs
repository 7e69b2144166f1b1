//! The one interface between policy and mechanism: a backend is observed (filling a `HostView`)
//! and told to apply decisions. The simulated host is the first backend; a live Linux host
//! (cgroups, QEMU balloon, KSM) implements the same two calls. The [`crate::controller`] drives
//! either.

mod simulated;

pub use simulated::SimulatedHost;

use crate::policy::{Decision, HostView};

/// Something a policy can drive.
pub trait Backend {
    /// What the host and its VMs look like now. An error is fatal to the run; a live backend
    /// leaves out a VM it cannot reach instead.
    fn observe(&mut self) -> Result<HostView, String>;
    /// Sets the target a decision names; the mechanisms work toward it at their own rates.
    /// Returns the outcome for the log ("applied", or why it was not, e.g. a VM that stopped
    /// answering); an error is fatal to the run.
    fn apply(&mut self, decision: &Decision) -> Result<String, String>;
}
