//! memvisor: the memory manager for hosts that overcommit memory to virtual machines, and the
//! faithful simulator that evaluates it.
//!
//! Mechanism below, policy above, one interface between (DESIGN.md section 2):
//! - [`guest`], [`host`], [`devices`], [`workloads`]: the mechanisms, as the real systems do them;
//! - [`policy`]: pure decisions over a [`policy::HostView`], each with its reason;
//! - [`backend`]: the interface a policy drives, implemented by the simulated host;
//! - [`clock`], [`simulation`]: simulated time and the engine; [`denali`]: the Denali host's own
//!   engine (it pages whole VMs itself and runs no policy); [`metrics`]: sampled counters;
//! - [`scenario`]: scenario files and the shipped case studies.
//!
//! The core does no terminal I/O and reads one kind of file only, the page sets a scenario's
//! `captured` names (when it is resolved); the Python package does the rest.

/// Gives an enum of plain variants the names scenario files write it by, from one list, so its
/// `NAMES` (in the list's order), `parse` and `name` cannot disagree.
macro_rules! scenario_names {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Names as written in scenario files.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// Parses a scenario name.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($name => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// The scenario name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }
        }
    };
}

pub mod backend;
pub mod bitmap;
pub mod clock;
pub mod content;
pub mod controller;
pub mod denali;
pub mod devices;
pub mod guest;
pub mod host;
pub mod index;
pub mod metrics;
pub mod policy;
pub mod rng;
pub mod scenario;
pub mod simulation;
pub mod slots;
pub mod summary;
pub mod trace;
pub mod units;
pub mod workloads;

pub use index::NONE;
pub use scenario::{Scenario, ScenarioError};
pub use simulation::{RunResult, Simulation};
