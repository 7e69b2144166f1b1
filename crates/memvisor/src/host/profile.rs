//! Host profiles: the defaults a kind of hypervisor brings, each with its source. A scenario picks
//! one with `host.profile` and may override any value.

use crate::guest::BalloonDriver;

/// A kind of host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostProfile {
    /// Linux with KVM and QEMU.
    Kvm,
    /// VMware ESX 3.5 / 4.x, the seeds' era (seeds 000 and 001).
    Esx,
    /// Xen 4.0 with paravirtualized Linux guests (seed 002).
    Xen,
    /// The Denali isolation kernel with Ilwaco guests (seed 004): it pages whole VMs itself.
    Denali,
}

scenario_names!(HostProfile {
    Kvm => "kvm",
    Esx => "esx",
    Xen => "xen",
    Denali => "denali",
});

impl HostProfile {
    /// Memory the hypervisor itself holds on a host of `memory` bytes.
    pub fn hypervisor_memory(self, memory: u64) -> u64 {
        match self {
            // The host kernel and system services are not modelled; each VM's QEMU process is its
            // overhead.
            Self::Kvm => 0,
            // "For ESX, the service console typically uses 272MB and the VMkernel uses a smaller
            // amount of memory" (vSphere Resource Management Guide 4.0 U1, "Understanding Memory
            // Overhead"); the VMkernel's own size is not published: 128 MB is taken (ESX 2.x's was
            // about 24 MB; its drivers grew). docs/sources/host-reclamation.md, section 5.
            Self::Esx => (272 + 128) << 20,
            // Xen's frame table (a 32-byte `struct page_info` per 4 KiB frame, 1/128 of memory)
            // and its image and heap, taken as 16 MiB [unpublished; tmem.md 7.9 says "tens of
            // MiB"]. dom0 is the scenario's to add.
            Self::Xen => memory / 128 + (16 << 20),
            // The isolation kernel is pinned, but its size is not published; what grows with the
            // VMs is their metadata (`vm_metadata`), counted apart.
            Self::Denali => 0,
        }
    }

    /// Per-VM overhead memory for a VM of `memory` bytes and `vcpus` vCPUs.
    pub fn vm_overhead(self, memory: u64, vcpus: u32) -> u64 {
        match self {
            // A PV guest's page tables are its own memory; Xen's per-domain structures are in its
            // heap (`hypervisor_memory`).
            Self::Xen | Self::Denali => 0,
            // KubeVirt's published estimate: 0.2 % of guest memory + 218 MiB (virt-launcher,
            // QEMU) + 8 MiB per vCPU.
            Self::Kvm => memory / 500 + (218 << 20) + 8 * (1 << 20) * vcpus as u64,
            // ESX/ESXi 4.0's overhead table (Resource Management Guide, table 3-2), interpolated
            // linearly in memory: 1 vCPU 123.73 MB at 1 GB to 222.30 MB at 8 GB; 2 vCPUs 176.05 MB
            // at 1 GB to 242.51 MB at 4 GB; each further vCPU as the second added.
            Self::Esx => {
                let gb = memory as f64 / (1u64 << 30) as f64;
                let one = 123.73 + (222.30 - 123.73) / 7.0 * (gb - 1.0);
                let two = 176.05 + (242.51 - 176.05) / 3.0 * (gb - 1.0);
                let mb = one + (two - one) * vcpus.saturating_sub(1) as f64;
                (mb.max(0.0) * 1048576.0) as u64
            }
        }
    }

    /// The balloon driver a guest of this host runs by default.
    pub fn balloon(self) -> BalloonDriver {
        match self {
            // libvirt adds a virtio memballoon device by default, without deflate-on-oom.
            Self::Kvm => BalloonDriver::Virtio { deflate_on_oom: false },
            // VMware Tools' vmmemctl / vmw_balloon.
            Self::Esx => BalloonDriver::Vmw,
            Self::Xen => BalloonDriver::Xen,
            // Denali takes memory back by paging, never from inside the guest.
            Self::Denali => BalloonDriver::None,
        }
    }

    /// Largest balloon, percent of guest memory.
    pub fn balloon_max_percent(self) -> u32 {
        match self {
            // QEMU and Xen set no cap of their own.
            Self::Kvm | Self::Xen | Self::Denali => 100,
            // ESX `Mem.CtlMaxPercent`, 65 (DESIGN.md section 4).
            Self::Esx => 65,
        }
    }

    /// Pages the active-memory sampler takes from each VM per period (0: no sampling).
    pub fn sample_pages(self) -> u32 {
        match self {
            // KVM and Xen have no such sampler; idle page tracking is opt-in.
            Self::Kvm | Self::Xen | Self::Denali => 0,
            // "By default, ESX Server samples 100 pages for each 30 second period" (Waldspurger,
            // OSDI 2002, 5.3); later ESX keeps the count and samples every 60 s.
            Self::Esx => 100,
        }
    }

    /// Compression cache size, percent of guest memory (0: none).
    pub fn zip_max_percent(self) -> u32 {
        match self {
            // QEMU/KVM has no per-VM compression cache (zswap compresses the host's own swap); Xen
            // compresses only inside tmem.
            Self::Kvm | Self::Xen | Self::Denali => 0,
            // ESX 4.1+ `Mem.MemZipMaxPct`, 10.
            Self::Esx => 10,
        }
    }

    /// Whether the host swaps guest memory by default: Xen has no host swap (it takes memory back
    /// only through the balloon and tmem).
    pub fn host_swap(self) -> bool {
        self != Self::Xen
    }

    /// Kernel memory the host keeps for each VM even when it is paged out, bytes: Denali's 8,472
    /// (seed 004, table 2: 97 % of it the VM's kernel thread stack); the others keep no such
    /// residue apart from their per-VM overhead.
    pub fn vm_metadata(self) -> u64 {
        if self == Self::Denali { 8_472 } else { 0 }
    }

    /// Whether a VM's memory is all backed when it is created: Xen's domain builder populates
    /// every page of its initial reservation; KVM and ESX back a page on its first touch.
    pub fn populate_at_boot(self) -> bool {
        self == Self::Xen
    }
}
