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
//! The same worker shrinks frontswap where the guest lets it (`frontswap_selfshrinking`, on by
//! default): the goal makes room for what frontswap holds, and once frontswap has not grown for
//! `frontswap_inertia` (3) ticks, each tick brings back 1/`frontswap_hysteresis` (1/20) of it,
//! all of it at 20 pages or fewer (`frontswap_selfshrink`). In the 3.1 form the inertia counter is
//! not reset after a shrink, so shrinking goes on every tick until frontswap grows again.
//!
//! That arithmetic assumes ballooned pages leave MemTotal (Xen's balloon lowers
//! `totalram_pages`); the scenario checks that every guest's balloon does (`virtio`). A guest whose
//! reserve is not visible (a live host sees no guest's `totalreserve_pages`, nor its Committed_AS)
//! is left alone: self-ballooning is the guest's own driver.

use std::collections::BTreeMap;

use super::{Action, Decision, HostView, Policy, VmId, VmView};
use crate::units::{PAGE_SIZE, human_bytes};

/// `selfballoon_interval`: 5 s.
const PERIOD_NS: u64 = 5_000_000_000;
/// `selfballoon_downhysteresis`.
const DOWN_HYSTERESIS: u64 = 8;
/// `selfballoon_uphysteresis`.
const UP_HYSTERESIS: u64 = 1;
/// `MB2PAGES(1)`.
const MB: u64 = (1 << 20) / PAGE_SIZE;
/// `frontswap_hysteresis`: each shrink takes 1/20 of frontswap.
const FRONTSWAP_HYSTERESIS: u64 = 20;
/// `frontswap_inertia`: ticks without growth before the first shrink.
const FRONTSWAP_INERTIA: u32 = 3;

/// The policy: the driver of every guest, each with its own self-shrink state.
#[derive(Clone, Debug, Default)]
pub struct XenSelfballoon {
    shrink: BTreeMap<VmId, SelfShrink>,
}

/// `frontswap_selfshrink`'s statics, per guest.
#[derive(Clone, Copy, Debug, Default)]
struct SelfShrink {
    /// `cur_frontswap_pages` at the last tick.
    cur: u64,
    /// `frontswap_inertia_counter`.
    inertia: u32,
}

impl SelfShrink {
    /// One tick with frontswap at `cur` pages: the pages to shrink it to, if it is time.
    fn tick(&mut self, cur: u64) -> Option<u64> {
        let last = std::mem::replace(&mut self.cur, cur);
        if cur == 0 || cur > last {
            self.inertia = FRONTSWAP_INERTIA;
            return None;
        }
        if self.inertia > 0 {
            self.inertia -= 1;
            if self.inertia > 0 {
                return None;
            }
        }
        Some(if cur <= FRONTSWAP_HYSTERESIS { 0 } else { cur - cur / FRONTSWAP_HYSTERESIS })
    }
}

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
    // Room for frontswap's pages to come back, where the driver shrinks frontswap.
    let shrinks = v.frontswap_selfshrink && v.frontswap.is_some();
    let frontswap = if shrinks { v.frontswap.unwrap_or(0) / PAGE_SIZE } else { 0 };
    let goal = v.committed / PAGE_SIZE + reserve + frontswap;
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
        "xen-selfballoon: Committed_AS {} + reserve {}{} = goal {}; MemTotal {} -> {} ({how}{})",
        human_bytes(v.committed),
        human_bytes(reserve * PAGE_SIZE),
        if shrinks { format!(" + frontswap {}", human_bytes(frontswap * PAGE_SIZE)) } else { String::new() },
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
        let mut out = Vec::new();
        for v in &view.vms {
            if let Some((bytes, reason)) = tick(v) {
                out.push(Decision { vm: Some(v.id), action: Action::SetBalloonTarget { bytes }, reason });
            }
            // After the balloon's target, as `selfballoon_process` calls `frontswap_selfshrink`.
            let Some(held) = v.frontswap.filter(|_| v.frontswap_selfshrink) else { continue };
            let cur = held / PAGE_SIZE;
            if let Some(tgt) = self.shrink.entry(v.id).or_default().tick(cur) {
                let how = if tgt == 0 {
                    "all of it".to_string()
                } else {
                    format!("by 1/{FRONTSWAP_HYSTERESIS} to {}", human_bytes(tgt * PAGE_SIZE))
                };
                let reason = format!(
                    "xen-selfballoon: frontswap {} has not grown for {FRONTSWAP_INERTIA} ticks or more: shrink {how}",
                    human_bytes(cur * PAGE_SIZE)
                );
                out.push(Decision { vm: Some(v.id), action: Action::ShrinkFrontswap { bytes: tgt * PAGE_SIZE }, reason });
            }
        }
        out
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
        XenSelfballoon::default().decide(&HostView { vms: vec![v.clone()], ..Default::default() }).first().map(|d| match d.action {
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
    fn frontswap_shrinks_by_a_twentieth_after_three_steady_ticks_and_every_tick_after() {
        let mut s = SelfShrink::default();
        assert_eq!(s.tick(1000), None, "frontswap grew");
        assert_eq!(s.tick(1000), None, "steady 1");
        assert_eq!(s.tick(1000), None, "steady 2");
        assert_eq!(s.tick(1000), Some(950), "steady 3: 1/20 of it back");
        // 3.1 form: the counter stays 0, so each following tick shrinks again.
        assert_eq!(s.tick(950), Some(903));
        assert_eq!(s.tick(1200), None, "growth resets the inertia");
        assert_eq!(s.tick(1200), None);
        assert_eq!(s.tick(1100), None, "falling is not growing, but the inertia still counts");
        assert_eq!(s.tick(20), Some(0), "20 pages or fewer: all of them");
        assert_eq!(s.tick(0), None, "nothing held");
    }

    #[test]
    fn the_goal_makes_room_for_frontswap_and_the_shrink_follows_the_balloon() {
        let mut v = guest(200 * MIB);
        v.frontswap = Some(80 * MIB);
        v.frontswap_selfshrink = true;
        let mut p = XenSelfballoon::default();
        let mut decide = |v: &VmView| p.decide(&HostView { vms: vec![v.clone()], ..Default::default() });
        // Goal 200 + 10 + 80 MiB against MemTotal 500 MiB: down by 210 / 8 MiB, not 290 / 8.
        let d = decide(&v);
        assert_eq!(d[0].action, Action::SetBalloonTarget { bytes: (210 * MIB / PAGE_SIZE / 8) * PAGE_SIZE });
        assert_eq!(d.len(), 1, "frontswap just appeared: no shrink yet");
        v.balloon_target = (210 * MIB / PAGE_SIZE / 8) * PAGE_SIZE;
        decide(&v);
        decide(&v);
        let d = decide(&v);
        let shrink = d.last().expect("a shrink on the third steady tick");
        assert_eq!(shrink.action, Action::ShrinkFrontswap { bytes: 76 * MIB });
        assert!(d.len() == 1 || matches!(d[0].action, Action::SetBalloonTarget { .. }), "the balloon's target comes first");
        let mut off = guest(200 * MIB);
        off.frontswap = Some(80 * MIB);
        off.frontswap_selfshrink = false;
        assert_eq!(target(&off), Some((290 * MIB / PAGE_SIZE / 8) * PAGE_SIZE), "no self-shrink: no room kept");
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
