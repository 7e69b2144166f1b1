//! The simulated host as a backend: host frames, guests and datastores.

use super::Backend;
use crate::devices::Datastore;
use crate::guest::{Counter, Guest};
use crate::host::Host;
use crate::policy::{Action, Decision, HostView, VmView};
use crate::units::{PAGE_SIZE, pages};

/// The simulated machine.
pub struct SimulatedHost {
    /// Machine memory.
    pub host: Host,
    /// Guests, indexed like the host's VMs.
    pub guests: Vec<Guest>,
    /// Datastores.
    pub datastores: Vec<Datastore>,
}

impl Backend for SimulatedHost {
    fn observe(&self, now: u64) -> HostView {
        let vms = self
            .guests
            .iter()
            .zip(self.host.vms())
            .map(|(g, h)| VmView {
                name: h.name.clone(),
                memory: g.cfg.memory_pages as u64 * PAGE_SIZE,
                reservation: h.res.reservation,
                limit: h.res.limit,
                shares: h.res.shares,
                granted: h.granted * PAGE_SIZE,
                guest_total: g.mem_total() * PAGE_SIZE,
                guest_free: g.pages.nr_free() * PAGE_SIZE,
                swap_in: g.vmstat.get(Counter::PswpIn),
                swap_out: g.vmstat.get(Counter::PswpOut),
                major_faults: g.vmstat.get(Counter::PgMajFault),
                memory_stall_ns: g.memory_stall_ns(),
                committed: g.committed_as() * PAGE_SIZE,
            })
            .collect();
        HostView { time_ns: now, host_memory: self.host.total_frames() * PAGE_SIZE, host_free: self.host.free_frames() * PAGE_SIZE, vms }
    }

    fn apply(&mut self, d: &Decision) -> Result<(), String> {
        if d.vm >= self.guests.len() {
            return Err(format!("decision for VM {} but the host has {}", d.vm, self.guests.len()));
        }
        match d.action {
            Action::SetGrantLimit { bytes } => self.host.set_grant_limit(d.vm as u32, pages(bytes)),
        }
        Ok(())
    }
}
