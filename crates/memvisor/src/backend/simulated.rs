//! The simulated host as a backend: machine memory, guests, datastores and the event queue that
//! carries their time.

use super::Backend;
use crate::clock::{Event, EventQueue};
use crate::devices::Datastore;
use crate::guest::{Counter, Env, Guest};
use crate::host::Host;
use crate::policy::{Action, Decision, HostView, VmId, VmView};
use crate::units::{PAGE_SIZE, pages};

/// The simulated machine.
pub struct SimulatedHost {
    pub(crate) host: Host,
    pub(crate) guests: Vec<Guest>,
    pub(crate) datastores: Vec<Datastore>,
    pub(crate) events: EventQueue,
    /// Simulated time of the event being handled.
    pub(crate) now: u64,
}

impl SimulatedHost {
    /// Machine memory and its VMs.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Guests, in power-on order (a guest's index is its VM id).
    pub fn guests(&self) -> &[Guest] {
        &self.guests
    }

    /// Datastores.
    pub fn datastores(&self) -> &[Datastore] {
        &self.datastores
    }

    /// The world a guest step acts on, with the guest itself.
    pub(crate) fn split(&mut self, guest: usize) -> (&mut Guest, Env<'_>) {
        let env = Env { events: &mut self.events, datastores: &mut self.datastores, host: &mut self.host };
        (&mut self.guests[guest], env)
    }

    /// Hands a guest's event to it; `limit` is how far its vCPUs may account resident hits.
    pub(crate) fn handle_guest(&mut self, guest: u32, ev: Event, limit: u64) -> Result<(), String> {
        let now = self.now;
        let (g, mut env) = self.split(guest as usize);
        g.handle(now, limit, ev, &mut env);
        match self.host.fatal.take() {
            Some(e) => Err(format!("at t={:.3}s: {e}", now as f64 / 1e9)),
            None => Ok(()),
        }
    }

    fn index(&self, id: VmId) -> Result<usize, String> {
        let i = id.0 as usize;
        if i < self.guests.len() { Ok(i) } else { Err(format!("decision for VM #{} but the host has {} VMs", id.0, self.guests.len())) }
    }
}

impl Backend for SimulatedHost {
    fn observe(&self) -> HostView {
        let vms = self
            .guests
            .iter()
            .zip(self.host.vms())
            .enumerate()
            .map(|(i, (g, h))| VmView {
                id: VmId(i as u32),
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
        HostView {
            time_ns: self.now,
            host_memory: self.host.total_frames() * PAGE_SIZE,
            host_free: self.host.free_frames() * PAGE_SIZE,
            vms,
        }
    }

    fn apply(&mut self, d: &Decision) -> Result<(), String> {
        let i = self.index(d.vm)?;
        match d.action {
            Action::SetGrantLimit { bytes } => self.host.set_grant_limit(i as u32, pages(bytes)),
        }
        Ok(())
    }
}
