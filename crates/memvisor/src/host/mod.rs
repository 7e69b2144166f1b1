//! The host: machine memory, each VM's physical-to-machine map ([`P2m`]), per-VM resource settings
//! and admission control. Frames are counted, not named: a private frame is identified by the one
//! page it backs. Guest pages are backed lazily, when the guest first touches them.

mod admission;
mod p2m;

pub use admission::{AdmissionVm, admit};
pub use p2m::{Entry, P2m, PageState, flags};

use crate::units::fmt_bytes;

/// Per-VM resource settings (ESX terms; DESIGN.md section 4).
#[derive(Clone, Debug, PartialEq)]
pub struct VmResources {
    /// Guaranteed machine memory, bytes.
    pub reservation: u64,
    /// Most machine memory the VM may be granted, bytes.
    pub limit: u64,
    /// Relative claim on memory under contention.
    pub shares: u64,
    /// Machine memory the virtualization layer needs for this VM, bytes.
    pub overhead: u64,
}

/// One VM as the host sees it.
#[derive(Clone, Debug)]
pub struct HostVm {
    /// VM name.
    pub name: String,
    /// Resource settings.
    pub res: VmResources,
    p2m: P2m,
    /// Private frames backing guest pages (esxtop GRANT).
    pub granted: u64,
    /// Frames held as the VM's overhead memory.
    pub overhead_frames: u64,
    /// Cap on `granted` set by the policy (`SetGrantLimit`), in frames.
    pub grant_limit: u64,
}

impl HostVm {
    /// Where each guest page lives.
    pub fn p2m(&self) -> &P2m {
        &self.p2m
    }
}

/// What a guest's access to one of its pages costs the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The page is backed: nothing to do.
    Ready,
    /// The host backed the page now with a zeroed frame (the guest pays `host_back_ns`).
    NewFrame,
    /// The host cannot back the page; the run ends with `Host::fatal`.
    Refused,
}

/// The host's memory.
#[derive(Clone, Debug)]
pub struct Host {
    total: u64,
    free: u64,
    vms: Vec<HostVm>,
    /// A condition that ends the run (machine memory exhausted with no host reclaim).
    pub fatal: Option<String>,
}

impl Host {
    /// A host with `frames` machine frames and no VMs.
    pub fn new(frames: u64) -> Self {
        Self { total: frames, free: frames, vms: Vec::new(), fatal: None }
    }

    /// Powers on a VM of `memory_pages` guest pages, taking its overhead frames now.
    pub fn add_vm(&mut self, name: String, memory_pages: u32, res: VmResources) -> u32 {
        let id = self.vms.len() as u32;
        let overhead_frames = crate::units::pages(res.overhead).min(self.free);
        self.free -= overhead_frames;
        self.vms.push(HostVm { name, p2m: P2m::new(memory_pages), granted: 0, overhead_frames, grant_limit: u64::MAX, res });
        id
    }

    /// The host's VMs.
    pub fn vms(&self) -> &[HostVm] {
        &self.vms
    }

    /// Sets the cap on frames granted to a VM.
    pub fn set_grant_limit(&mut self, vm: u32, frames: u64) {
        self.vms[vm as usize].grant_limit = frames;
    }

    /// Machine frames in all.
    pub fn total_frames(&self) -> u64 {
        self.total
    }

    /// Free machine frames.
    pub fn free_frames(&self) -> u64 {
        self.free
    }

    /// The guest of VM `vm` touches page `ppn`: backs it if it is not. Running out of frames (or
    /// past the VM's grant limit) with no host reclaim mechanism ends the run through `fatal`,
    /// never a panic.
    #[inline]
    pub fn access(&mut self, vm: u32, ppn: u32) -> Access {
        let v = &mut self.vms[vm as usize];
        let e = v.p2m.get(ppn);
        if e.is_backed() {
            return Access::Ready;
        }
        debug_assert_eq!(e.state(), PageState::Unbacked, "a guest touched a page in state {:?}", e.state());
        if v.granted >= v.grant_limit {
            self.fatal.get_or_insert_with(|| {
                format!(
                    "VM '{}' reached its grant limit of {} and the host has no reclaim mechanism to enforce it",
                    v.name,
                    fmt_bytes(v.grant_limit * crate::units::PAGE_SIZE)
                )
            });
            return Access::Refused;
        }
        if self.free == 0 {
            self.fatal.get_or_insert_with(|| {
                format!(
                    "host machine memory exhausted ({}) while backing VM '{}': the configured guests need more than the \
                     host has, and no host reclaim mechanism (balloon, host swap) is available to this policy",
                    fmt_bytes(self.total * crate::units::PAGE_SIZE),
                    v.name
                )
            });
            return Access::Refused;
        }
        self.free -= 1;
        v.granted += 1;
        v.p2m.set(ppn, Entry::new(PageState::Backed));
        Access::NewFrame
    }

    /// Backs pages `start..end` of a VM at once (a kernel area its boot touches).
    pub fn back_range(&mut self, vm: u32, start: u32, end: u32) {
        let v = &mut self.vms[vm as usize];
        let n = (end - start) as u64;
        if n > self.free {
            self.fatal.get_or_insert_with(|| format!("host machine memory exhausted while booting VM '{}'", v.name));
            return;
        }
        debug_assert!((start..end).all(|p| v.p2m.get(p).state() == PageState::Unbacked));
        v.p2m.set_range(start, end, Entry::new(PageState::Backed));
        self.free -= n;
        v.granted += n;
    }

    /// Whether a guest page is backed.
    #[inline]
    pub fn is_backed(&self, vm: u32, ppn: u32) -> bool {
        self.vms[vm as usize].p2m.get(ppn).is_backed()
    }

    /// Checks that every frame is free or owned exactly once: each VM's backed pages are its
    /// granted frames, and granted, overhead and free frames add up to the machine's.
    pub fn check(&self) -> Result<(), String> {
        let mut owned = 0;
        for v in &self.vms {
            let backed = v.p2m.iter().filter(|(_, e)| e.is_backed()).count() as u64;
            if backed != v.granted {
                return Err(format!("VM '{}': granted {} frames but {backed} pages are backed", v.name, v.granted));
            }
            owned += v.granted + v.overhead_frames;
        }
        if owned + self.free != self.total {
            return Err(format!("frames lost: {owned} owned + {} free != {} in all", self.free, self.total));
        }
        Ok(())
    }
}
