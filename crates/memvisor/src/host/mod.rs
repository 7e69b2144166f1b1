//! The host: machine frames, each guest's guest-physical -> machine map (p2m), per-VM resource
//! settings, and admission control. Frames are backed lazily, when a guest first touches a page.

mod admission;
mod frames;

pub use admission::{AdmissionVm, admit};
pub use frames::{FrameOwner, Frames};

use crate::index::NONE;

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
    /// Guest page -> machine frame, `NONE` when not backed.
    p2m: Vec<u32>,
    /// Frames backing guest pages (esxtop GRANT).
    pub granted: u64,
    /// Frames held as the VM's overhead memory.
    pub overhead_frames: u64,
    /// Cap on `granted` set by the policy (`SetGrantLimit`), in frames.
    pub grant_limit: u64,
}

/// The host's memory.
#[derive(Clone, Debug)]
pub struct Host {
    frames: Frames,
    vms: Vec<HostVm>,
    /// A condition that ends the run (machine memory exhausted with no host reclaim).
    pub fatal: Option<String>,
}

impl Host {
    /// A host with `frames` machine frames and no VMs.
    pub fn new(frames: u32) -> Self {
        Self { frames: Frames::new(frames), vms: Vec::new(), fatal: None }
    }

    /// Powers on a VM of `memory_pages` guest pages, taking its overhead frames now.
    pub fn add_vm(&mut self, name: String, memory_pages: u32, res: VmResources) -> u32 {
        let id = self.vms.len() as u32;
        let overhead_frames = crate::units::pages(res.overhead);
        for _ in 0..overhead_frames {
            self.frames.take(FrameOwner::Overhead(id));
        }
        self.vms.push(HostVm { name, p2m: vec![NONE; memory_pages as usize], granted: 0, overhead_frames, grant_limit: u64::MAX, res });
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
        self.frames.total()
    }

    /// Free machine frames.
    pub fn free_frames(&self) -> u64 {
        self.frames.nr_free()
    }

    /// Makes sure a guest page is backed by a frame; says whether it had to back it now. Running out
    /// of frames (or past the VM's grant limit) with no host reclaim mechanism ends the run through
    /// `fatal`, never a panic.
    pub fn back(&mut self, vm: u32, ppn: u32) -> bool {
        let v = &mut self.vms[vm as usize];
        if v.p2m[ppn as usize] != NONE {
            return false;
        }
        if v.granted >= v.grant_limit {
            self.fatal.get_or_insert_with(|| {
                format!(
                    "VM '{}' reached its grant limit of {} pages and the host has no reclaim mechanism to enforce it",
                    v.name, v.grant_limit
                )
            });
            return false;
        }
        match self.frames.take(FrameOwner::Guest(vm, ppn)) {
            Some(f) => {
                v.p2m[ppn as usize] = f;
                v.granted += 1;
                true
            }
            None => {
                self.fatal.get_or_insert_with(|| {
                    format!(
                        "host machine memory exhausted ({} frames) while backing VM '{}': the configured guests need more \
                         than the host has, and no host reclaim mechanism (balloon, host swap) is available to this policy",
                        self.frames.total(),
                        v.name
                    )
                });
                false
            }
        }
    }

    /// Whether a guest page is backed.
    #[inline]
    pub fn is_backed(&self, vm: u32, ppn: u32) -> bool {
        self.vms[vm as usize].p2m[ppn as usize] != NONE
    }

    /// Checks that every frame is free or owned exactly once and that the maps agree.
    pub fn check(&self) -> Result<(), String> {
        self.frames.check()?;
        for (id, v) in self.vms.iter().enumerate() {
            let mut granted = 0;
            for (ppn, &f) in v.p2m.iter().enumerate() {
                if f == NONE {
                    continue;
                }
                granted += 1;
                let owner = self.frames.owner(f);
                if owner != FrameOwner::Guest(id as u32, ppn as u32) {
                    return Err(format!("VM {id} page {ppn} maps frame {f} owned by {owner:?}"));
                }
            }
            if granted != v.granted {
                return Err(format!("VM {id}: granted {} but {granted} pages mapped", v.granted));
            }
        }
        let owned_overhead: u64 = self.vms.iter().map(|v| v.overhead_frames).sum();
        let owned_guest: u64 = self.vms.iter().map(|v| v.granted).sum();
        if owned_overhead + owned_guest + self.frames.nr_free() != self.frames.total() {
            return Err("frames lost: owned + free != total".into());
        }
        Ok(())
    }
}
