//! A datastore: one device holding the virtual disks of several guests. Its queue is shared, which
//! is what turns one guest's paging into another guest's slow I/O (seeds 000 and 001).

use super::device::{Device, DeviceSpec};

/// Virtual disks are laid out this far apart on their datastore, so that two guests' requests are
/// never contiguous (a rotating disk seeks between them).
const DISK_STRIDE: u64 = 1 << 40;

/// A named device with the virtual disks placed on it.
#[derive(Clone, Debug)]
pub struct Datastore {
    /// Name from the scenario.
    pub name: String,
    /// The device and its queue.
    pub device: Device,
    disks: u64,
}

/// Where a guest's virtual disk lives: a datastore and the disk's base offset on its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtualDisk {
    /// Datastore index.
    pub datastore: u32,
    /// Byte offset of the disk on the datastore's device.
    pub base: u64,
}

impl Datastore {
    /// A datastore on a fresh device.
    pub fn new(name: String, spec: DeviceSpec) -> Self {
        Self { name, device: Device::new(spec), disks: 0 }
    }

    /// Places a new virtual disk on this datastore.
    pub fn add_disk(&mut self, datastore: u32) -> VirtualDisk {
        self.disks += 1;
        VirtualDisk { datastore, base: self.disks * DISK_STRIDE }
    }
}
