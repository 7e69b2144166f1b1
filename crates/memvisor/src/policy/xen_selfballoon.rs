//! `xen-selfballoon`: Linux's Xen self-ballooning driver (`drivers/xen/xen-selfballoon.c`, 3.1
//! form; docs/sources/tmem.md section 3.1). Each guest sizes itself from its own Committed_AS: no
//! host-wide view enters the decision.
//!
//! Every 5 s (`selfballoon_interval`) the goal is Committed_AS plus the guest's
//! `totalreserve_pages` (plus `selfballoon_reserved_mb`, 0 in the 3.1 form that seed 002's era
//! ran). MemTotal above the goal comes down by an eighth of the gap (`selfballoon_downhysteresis`
//! 8), MemTotal below it goes up by the whole gap (`selfballoon_uphysteresis` 1), never below a
//! floor that is a piecewise-linear function of the guest's size. The driver's balloon target is
//! `tgt + current_pages - totalram_pages`: the balloon moves by MemTotal less `tgt`.
//!
//! That arithmetic assumes ballooned pages leave MemTotal (Xen's balloon lowers
//! `totalram_pages`); the scenario checks that every guest's balloon does (`virtio`). A guest whose
//! reserve is not visible (a live host sees no guest's `totalreserve_pages`, nor its Committed_AS)
//! is left alone: self-ballooning is the guest's own driver.

use super::{Action, Decision, HostView, Policy, VmView};
use crate::units::{PAGE_SIZE, human_bytes};

/// `selfballoon_interval`: 5 s.
const PERIOD_NS: u64 = 5_000_000_000;
/// `selfballoon_downhysteresis`.
const DOWN_HYSTERESIS: u64 = 8;
/// `selfballoon_uphysteresis`.
const UP_HYSTERESIS: u64 = 1;
/// `MB2PAGES(1)`.
const MB: u64 = (1 << 20) / PAGE_SIZE;

/// The policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct XenSelfballoon;

/// The driver's floor in pages (`selfballoon_process`, `selfballoon_min_usable_mb` 0): no
/// ballooning under 16 MB of useful memory, then slopes of 1/2, 1/8 and 1/32 ("ending in ~3%").
pub fn floor_pages(max_pfn: u64, totalreserve: u64) -> u64 {
    let useful = max_pfn.saturating_sub(totalreserve);
    if useful < 16 * MB {
        max_pfn
    } else if useful < 64 * MB {
        totalreserve + 16 * MB + ((useful - 16 * MB) >> 1)
    } else if useful < 512 * MB {
        totalreserve + 40 * MB + ((useful - 40 * MB) >> 3)
    } else {
        totalreserve + 99 * MB + ((useful - 99 * MB) >> 5)
    }
}

/// One tick for one guest: the new balloon size in bytes and the reason, or `None` to leave it.
fn tick(v: &VmView) -> Option<(u64, String)> {
    let reserve = v.guest_reserve? / PAGE_SIZE;
    let (cur, max_pfn) = (v.guest_total / PAGE_SIZE, v.memory / PAGE_SIZE);
    let goal = v.committed / PAGE_SIZE + reserve;
    let (mut tgt, how) = if cur > goal {
        (cur - (cur - goal) / DOWN_HYSTERESIS, "down by 1/8 of the gap")
    } else if cur < goal {
        (cur + (goal - cur) / UP_HYSTERESIS, "up by the whole gap")
    } else {
        (cur, "at the goal")
    };
    let floor = floor_pages(max_pfn, reserve);
    let floored = tgt < floor;
    tgt = tgt.max(floor);
    let balloon = (v.balloon_size / PAGE_SIZE + cur).saturating_sub(tgt).min(v.balloon_max / PAGE_SIZE);
    let bytes = balloon * PAGE_SIZE;
    if bytes == v.balloon_target {
        return None;
    }
    let why = format!(
        "xen-selfballoon: Committed_AS {} + reserve {} = goal {}; MemTotal {} -> {} ({how}{})",
        human_bytes(v.committed),
        human_bytes(reserve * PAGE_SIZE),
        human_bytes(goal * PAGE_SIZE),
        human_bytes(cur * PAGE_SIZE),
        human_bytes(tgt * PAGE_SIZE),
        if floored { format!(", held at the floor {}", human_bytes(floor * PAGE_SIZE)) } else { String::new() },
    );
    Some((bytes, why))
}

impl Policy for XenSelfballoon {
    fn name(&self) -> &str {
        "xen-selfballoon"
    }

    fn period_ns(&self) -> Option<u64> {
        Some(PERIOD_NS)
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        view.vms
            .iter()
            .filter_map(|v| {
                let (bytes, reason) = tick(v)?;
                Some(Decision { vm: Some(v.id), action: Action::SetBalloonTarget { bytes }, reason })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::VmId;

    const MIB: u64 = 1 << 20;

    /// Seed 002's guest: 512 MiB, 10 MiB kept in reserve, nothing ballooned yet.
    fn guest(committed: u64) -> VmView {
        VmView {
            id: VmId(0),
            memory: 512 * MIB,
            guest_total: 500 * MIB,
            guest_reserve: Some(10 * MIB),
            committed,
            balloon_max: 512 * MIB,
            ..Default::default()
        }
    }

    fn target(v: &VmView) -> Option<u64> {
        XenSelfballoon.decide(&HostView { vms: vec![v.clone()], ..Default::default() }).first().map(|d| match d.action {
            Action::SetBalloonTarget { bytes } => bytes,
            _ => panic!("only balloon targets"),
        })
    }

    #[test]
    fn the_floor_follows_the_drivers_pieces() {
        assert_eq!(floor_pages(12 * MB, 0), 12 * MB, "under 16 MB: no ballooning");
        assert_eq!(floor_pages(48 * MB, 0), 16 * MB + 16 * MB);
        // Seed 002's 512 MB guest with 3 MB reserve: 40 + (509 - 40) / 8 MB above the reserve.
        assert_eq!(floor_pages(512 * MB, 3 * MB), 3 * MB + 40 * MB + ((469 * MB) >> 3));
        assert_eq!(floor_pages(4096 * MB, 0), 99 * MB + (((4096 - 99) * MB) >> 5));
    }

    #[test]
    fn down_by_an_eighth_of_the_gap_up_by_all_of_it() {
        // Goal 200 + 10 MiB, MemTotal 500 MiB: down by 290 / 8 MiB.
        let down = target(&guest(200 * MIB)).unwrap();
        assert_eq!(down, (290 * MIB / PAGE_SIZE / 8) * PAGE_SIZE);
        // Ballooned to 300 MiB MemTotal, Committed_AS now 400 MiB: the whole gap back at once.
        let mut v = guest(400 * MIB);
        v.guest_total = 300 * MIB;
        v.balloon_size = 200 * MIB;
        v.balloon_target = 200 * MIB;
        assert_eq!(target(&v), Some(90 * MIB), "MemTotal 300 -> 410 MiB: the balloon gives back 110 MiB");
    }

    #[test]
    fn never_below_the_floor_and_never_a_guest_it_cannot_see() {
        let mut v = guest(0);
        v.guest_total = floor_pages(512 * MB, 10 * MB) * PAGE_SIZE;
        v.balloon_size = 512 * MIB - v.guest_total - 12 * MIB;
        v.balloon_target = v.balloon_size;
        assert_eq!(target(&v), None, "at the floor: nothing to change");
        let hidden = VmView { guest_reserve: None, ..guest(0) };
        assert_eq!(target(&hidden), None, "a live host sees no guest reserve: the guest is left alone");
    }
}
