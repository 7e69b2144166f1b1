//! `proxmox`: Proxmox VE's auto-ballooning (pvestatd's `auto_balloning` and
//! `PVE::AutoBalloon::compute_alg1`, qemu-server).
//!
//! Every 10 s the host aims to use 80 % of its memory: the goal is 80 % of the host less what is
//! used. A goal over +10 MiB grows guests, one under -10 MiB shrinks them; in between nothing is
//! done. The goal is spread over the guests in proportion to their shares above each guest's
//! minimum (Proxmox's `balloon` setting; here the VM's floor), at most 100 MiB per guest a round,
//! repeated while guests hit their bounds. Growing serves first the guests under pressure (free
//! memory at most a quarter of their minimum, or below it), shrinking first the guests with free
//! memory; if those cannot move, all guests. A guest without a minimum (floor 0), without
//! balloon statistics, or with zero shares is not ballooned.

use std::collections::BTreeMap;

use super::{Action, Decision, HostView, Policy, VmId, VmView};
use crate::units::human_bytes;

/// pvestatd's update loop: every 10 s.
const PERIOD_NS: u64 = 10_000_000_000;
/// The share of host memory auto-ballooning aims to use.
const TARGET_USE: f64 = 0.8;
/// `$maxchange`: at most 100 MiB per guest a round.
const MAX_CHANGE: i64 = 100 << 20;
/// Goals within +-10 MiB are too small to act on.
const DEAD_BAND: i64 = 10 << 20;

/// The policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Proxmox;

/// A ballooned guest as compute_alg1 sees it: its size (`balloon`: memory less the balloon), its
/// minimum and maximum, shares and free memory.
struct Guest {
    id: VmId,
    size: i64,
    min: i64,
    max: i64,
    shares: i64,
}

/// Spreads `bytes` over `ids` (compute_alg1's change function); `res` holds the new sizes.
/// Returns what could not be placed.
fn spread(guests: &BTreeMap<VmId, Guest>, ids: &[VmId], bytes: i64, res: &mut BTreeMap<VmId, i64>) -> i64 {
    let mut rest = bytes;
    let mut done: Vec<VmId> = Vec::new();
    let (mut repeat, mut progress) = (true, true);
    while rest != 0 && repeat && progress {
        repeat = false;
        progress = false;
        let live: Vec<&Guest> = ids.iter().filter(|id| !done.contains(id)).map(|id| &guests[id]).collect();
        let shares_total: i64 = live.iter().map(|g| g.shares).sum();
        let alloc_old: i64 = live.iter().map(|g| res.get(&g.id).copied().unwrap_or(g.size) - g.min).sum();
        let alloc_new = alloc_old + rest;
        let mut changes = 0;
        for g in live {
            let mut desired = g.min + (alloc_new as f64 / shares_total as f64 * g.shares as f64) as i64;
            if desired > g.max || desired < g.min {
                desired = desired.clamp(g.min, g.max);
                repeat = true;
            }
            let size = if bytes > 0 && desired > g.size {
                (g.size + MAX_CHANGE).min(desired)
            } else if desired < g.size {
                (g.size - MAX_CHANGE).max(desired)
            } else {
                done.push(g.id);
                continue;
            };
            if size != g.size {
                let old = res.insert(g.id, size).unwrap_or(g.size);
                if size != old {
                    changes += size - old;
                    progress = true;
                    repeat = true;
                }
            }
        }
        rest -= changes;
    }
    rest
}

/// Whether a VM takes part: its balloon reports, it has a minimum below its memory, and shares.
fn ballooned(v: &VmView) -> bool {
    v.guest_total > 0 && v.reservation > 0 && v.reservation < v.memory && v.shares > 0
}

impl Policy for Proxmox {
    fn name(&self) -> &str {
        "proxmox"
    }

    fn period_ns(&self) -> Option<u64> {
        Some(PERIOD_NS)
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        let used = view.host_memory.saturating_sub(view.host_available) as i64;
        let goal = (view.host_memory as f64 * TARGET_USE) as i64 - used;
        if goal.abs() <= DEAD_BAND {
            return Vec::new();
        }
        let mut guests = BTreeMap::new();
        let (mut all, mut pressed, mut roomy) = (Vec::new(), Vec::new(), Vec::new());
        for v in view.vms.iter().filter(|v| ballooned(v)) {
            let g = Guest {
                id: v.id,
                size: v.memory.saturating_sub(v.balloon_size) as i64,
                min: v.reservation as i64,
                max: v.memory as i64,
                shares: v.shares as i64,
            };
            all.push(v.id);
            if v.guest_free > v.reservation / 4 && g.size >= g.min {
                roomy.push(v.id)
            } else {
                pressed.push(v.id)
            }
            guests.insert(v.id, g);
        }
        let mut res = BTreeMap::new();
        let first = if goal > 0 { &pressed } else { &roomy };
        let rest = spread(&guests, first, goal, &mut res);
        if (goal > 0 && rest >= goal) || (goal < 0 && rest <= goal) {
            spread(&guests, &all, rest, &mut res);
        }
        let why = format!(
            "host uses {} of {}; aiming at 80 %: {} {}",
            human_bytes(used as u64),
            human_bytes(view.host_memory),
            if goal > 0 { "grow by" } else { "shrink by" },
            human_bytes(goal.unsigned_abs())
        );
        res.into_iter()
            .filter(|(id, size)| *size != guests[id].size)
            .map(|(id, size)| {
                let v = view.vm(id).expect("listed");
                Decision {
                    vm: Some(id),
                    action: Action::SetBalloonTarget { bytes: v.memory - size as u64 },
                    reason: format!(
                        "proxmox: {why}, by shares ({}) above its minimum {}: guest {} -> {}",
                        v.shares,
                        human_bytes(v.reservation),
                        human_bytes(guests[&id].size as u64),
                        human_bytes(size as u64)
                    ),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn vm(id: u32, shares: u64, free: u64) -> VmView {
        VmView {
            id: VmId(id),
            name: format!("g{id}"),
            memory: 1024 * MIB,
            reservation: 256 * MIB,
            shares,
            guest_total: 1024 * MIB,
            guest_free: free,
            ..Default::default()
        }
    }

    fn sizes(view: &HostView) -> BTreeMap<u32, u64> {
        Proxmox
            .decide(view)
            .into_iter()
            .filter_map(|d| match d.action {
                Action::SetBalloonTarget { bytes } => Some((d.vm.unwrap().0, 1024 * MIB - bytes)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn shrinks_by_shares_at_most_100_mib_a_round() {
        // A 2 GiB host fully used: the goal is -410 MiB (80 % of 2 GiB less 2 GiB).
        let view = HostView {
            host_memory: 2048 * MIB,
            host_available: 0,
            vms: vec![vm(0, 1000, 500 * MIB), vm(1, 3000, 500 * MIB)],
            ..Default::default()
        };
        let s = sizes(&view);
        assert_eq!(s.get(&0), Some(&(924 * MIB)), "the low-shares guest gives 100 MiB, the most a round");
        assert_eq!(s.get(&1), None, "three times the shares: its share is above its memory, it keeps it");
    }

    #[test]
    fn grows_guests_under_pressure_first_and_ignores_small_goals() {
        let mut a = vm(0, 1000, 10 * MIB);
        a.balloon_size = 512 * MIB;
        let mut b = vm(1, 1000, 400 * MIB);
        b.balloon_size = 512 * MIB;
        let view = HostView { host_memory: 4096 * MIB, host_available: 4096 * MIB, vms: vec![a, b], ..Default::default() };
        let s = sizes(&view);
        assert_eq!(s.get(&0), Some(&(612 * MIB)), "the pressed guest grows 100 MiB");
        assert_eq!(s.get(&1), None, "the guest with free memory waits");
        let idle = HostView { host_memory: 4096 * MIB, host_available: 4096 * MIB / 5 + 5 * MIB, ..view };
        assert!(sizes(&idle).is_empty(), "a goal within 10 MiB does nothing");
    }
}
