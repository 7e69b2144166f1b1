//! Admission control: a VM powers on only if its reservation plus its overhead memory fits in what
//! the VMs already admitted have not reserved (ESX semantics; DESIGN.md section 4). A Xen domain is
//! built with its whole initial memory backed (the domain builder populates it, or `xl create`
//! fails), so that memory counts as reserved.

use crate::units::human_bytes;

/// What admission control needs to know of a VM.
#[derive(Clone, Debug)]
pub struct AdmissionVm {
    /// VM name.
    pub name: String,
    /// Reservation, bytes.
    pub reservation: u64,
    /// Overhead memory, bytes.
    pub overhead: u64,
    /// Memory the host must back when the VM is created, bytes (a Xen domain's initial memory; 0
    /// where pages are backed on first touch).
    pub built_with: u64,
}

impl AdmissionVm {
    /// What the VM takes from the unreserved memory.
    fn need(&self) -> u64 {
        self.reservation.max(self.built_with) + self.overhead
    }
}

/// Admits the VMs in power-on order on a host of `host_memory` of which the hypervisor keeps
/// `hypervisor`, or says which one cannot start and why.
pub fn admit(host_memory: u64, hypervisor: u64, vms: &[AdmissionVm]) -> Result<(), String> {
    let mut reserved = hypervisor;
    for (i, vm) in vms.iter().enumerate() {
        let need = vm.need();
        let unreserved = host_memory.saturating_sub(reserved);
        if need > unreserved {
            let earlier = summarise(&vms[..i]);
            let what = if vm.built_with > vm.reservation {
                format!("its initial memory {} (a Xen domain is built with all of it)", human_bytes(vm.built_with))
            } else {
                format!("its reservation {}", human_bytes(vm.reservation))
            };
            return Err(format!(
                "admission control refuses to power on VM '{}': {what} plus overhead {} needs {}, \
                 but only {} of the host's {} is unreserved (the hypervisor keeps {}{}); a VM's overhead is its \
                 host profile's estimate unless the scenario sets `overhead`",
                vm.name,
                human_bytes(vm.overhead),
                human_bytes(need),
                human_bytes(unreserved),
                human_bytes(host_memory),
                human_bytes(hypervisor),
                if earlier.is_empty() { String::new() } else { format!("; already reserved: {earlier}") }
            ));
        }
        reserved += need;
    }
    Ok(())
}

/// The VMs already admitted, for the error: the three largest by name, the rest summed.
fn summarise(vms: &[AdmissionVm]) -> String {
    let mut by_size: Vec<&AdmissionVm> = vms.iter().collect();
    by_size.sort_by_key(|v| std::cmp::Reverse(v.need()));
    let mut parts: Vec<String> = by_size.iter().take(3).map(|v| format!("'{}' {}", v.name, human_bytes(v.need()))).collect();
    if vms.len() > 3 {
        let rest: u64 = by_size[3..].iter().map(|v| v.need()).sum();
        parts.push(format!("{} more VMs {} in all", vms.len() - 3, human_bytes(rest)));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(name: &str, r: u64, o: u64) -> AdmissionVm {
        AdmissionVm { name: name.into(), reservation: r << 20, overhead: o << 20, built_with: 0 }
    }

    #[test]
    fn refuses_the_vm_that_does_not_fit() {
        assert!(admit(4096 << 20, 400 << 20, &[vm("a", 2560, 200), vm("b", 0, 200)]).is_ok());
        let e = admit(4096 << 20, 400 << 20, &[vm("a", 2560, 200), vm("b", 1536, 200)]).unwrap_err();
        assert!(e.contains("'b'") && e.contains("already reserved: 'a' 2.7 GiB"), "{e}");
        assert!(e.contains("only 936 MiB of the host's 4 GiB is unreserved (the hypervisor keeps 400 MiB;"), "{e}");
        // The hypervisor's share counts: what fits without it does not fit with it.
        assert!(admit(4096 << 20, 400 << 20, &[vm("a", 3800, 0)]).is_err());
        // Thousands of VMs: three named, the rest summed, sizes in units.
        let many: Vec<AdmissionVm> = (0..5000).map(|i| vm(&format!("v{i}"), 1, 0)).collect();
        let e = admit(4096 << 20, 0, &many).unwrap_err();
        assert!(e.contains("4093 more VMs 4.0 GiB in all") && e.len() < 400, "{e}");
    }

    /// Xen domains are built with their initial memory backed: 41 of 384 MiB fit in 16 GiB less
    /// the hypervisor's 288 MiB, the 42nd does not, and the error says why.
    #[test]
    fn a_xen_domain_needs_its_initial_memory() {
        let xen = |i: u32| AdmissionVm { name: format!("g-{i}"), reservation: 0, overhead: 0, built_with: 384 << 20 };
        let fits: Vec<AdmissionVm> = (1..=41).map(xen).collect();
        assert!(admit(16 << 30, 288 << 20, &fits).is_ok());
        let e = admit(16 << 30, 288 << 20, &(1..=60).map(xen).collect::<Vec<_>>()).unwrap_err();
        assert!(e.contains("'g-42': its initial memory 384 MiB (a Xen domain is built with all of it)"), "{e}");
    }
}
