//! Simulated time: the event queue that orders every actor's next step.

mod events;

pub use events::{Event, EventQueue, GuestEvent};
