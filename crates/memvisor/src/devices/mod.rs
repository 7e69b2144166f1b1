//! Storage: devices as queues, and datastores that hold several guests' virtual disks on one device.

mod datastore;
mod device;
mod filer;

pub use datastore::{Datastore, VirtualDisk};
pub use device::{Device, DeviceKind, DeviceSpec, DeviceStats};
pub use filer::FilerSpec;
