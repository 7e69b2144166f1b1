//! Admission control: a VM powers on only if its reservation plus its overhead memory fits in what
//! the VMs already admitted have not reserved (ESX semantics; DESIGN.md section 4).

use crate::units::fmt_bytes;

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

/// Admits the VMs in power-on order or says which one cannot start and why.
pub fn admit(host_memory: u64, vms: &[AdmissionVm]) -> Result<(), String> {
    let mut reserved = 0u64;
    for (i, vm) in vms.iter().enumerate() {
        let need = vm.reservation + vm.overhead;
        let unreserved = host_memory.saturating_sub(reserved);
        if need > unreserved {
            let earlier: Vec<String> = vms[..i].iter().map(|v| format!("'{}' {}", v.name, fmt_bytes(v.reservation + v.overhead))).collect();
            return Err(format!(
                "admission control refuses to power on VM '{}': its reservation {} plus overhead {} needs {}, \
                 but only {} of the host's {} is unreserved{}",
                vm.name,
                fmt_bytes(vm.reservation),
                fmt_bytes(vm.overhead),
                fmt_bytes(need),
                fmt_bytes(unreserved),
                fmt_bytes(host_memory),
                if earlier.is_empty() { String::new() } else { format!(" (already reserved: {})", earlier.join(", ")) }
            ));
        }
        reserved += need;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(name: &str, r: u64, o: u64) -> AdmissionVm {
        AdmissionVm { name: name.into(), reservation: r << 20, overhead: o << 20 }
    }

    #[test]
    fn refuses_the_vm_that_does_not_fit() {
        assert!(admit(4096 << 20, &[vm("a", 2560, 200), vm("b", 0, 200)]).is_ok());
        let e = admit(4096 << 20, &[vm("a", 2560, 200), vm("b", 1536, 200)]).unwrap_err();
        assert!(e.contains("'b'") && e.contains("already reserved: 'a'"), "{e}");
    }
}
