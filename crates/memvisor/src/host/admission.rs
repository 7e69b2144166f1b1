//! Admission control: a VM powers on only if its reservation plus its overhead memory fits in what
//! the VMs already admitted have not reserved (ESX semantics; DESIGN.md section 4).

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
}

/// Admits the VMs in power-on order on a host of `host_memory` of which the hypervisor keeps
/// `hypervisor`, or says which one cannot start and why.
pub fn admit(host_memory: u64, hypervisor: u64, vms: &[AdmissionVm]) -> Result<(), String> {
    let mut reserved = hypervisor;
    for (i, vm) in vms.iter().enumerate() {
        let need = vm.reservation + vm.overhead;
        let unreserved = host_memory.saturating_sub(reserved);
        if need > unreserved {
            let earlier = summarise(&vms[..i]);
            return Err(format!(
                "admission control refuses to power on VM '{}': its reservation {} plus overhead {} needs {}, \
                 but only {} of the host's {} is unreserved (the hypervisor keeps {}{})",
                vm.name,
                human_bytes(vm.reservation),
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
    by_size.sort_by_key(|v| std::cmp::Reverse(v.reservation + v.overhead));
    let mut parts: Vec<String> =
        by_size.iter().take(3).map(|v| format!("'{}' {}", v.name, human_bytes(v.reservation + v.overhead))).collect();
    if vms.len() > 3 {
        let rest: u64 = by_size[3..].iter().map(|v| v.reservation + v.overhead).sum();
        parts.push(format!("{} more VMs {} in all", vms.len() - 3, human_bytes(rest)));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(name: &str, r: u64, o: u64) -> AdmissionVm {
        AdmissionVm { name: name.into(), reservation: r << 20, overhead: o << 20 }
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
}
