//! `mom`: oVirt MOM's default KSM and auto-balloon policy (`mom-balloon.policy`, oVirt wiki, by
//! A. Litke; vdsm ships the same rules as `mom.d/02-balloon.policy` and `03-ksm.policy`), its two
//! parts run together as MOM runs them.
//!
//! Balloon (vdsm's version): every guest's floor is what it uses plus a free margin, 20 % of its
//! size scaled by the host's free share against 20 % (negative at 5 % or less, forcing the guest
//! to swap), never below its guaranteed memory. While the host's free memory is under 20 % of
//! its memory, every guest shrinks toward its floor, at most 5 % of its size a round; otherwise
//! every ballooned guest grows by 5 % a round, or at once to its floor if that is more, up to its
//! full size. A guest below its guaranteed memory goes back to it. Changes of 0.25 % of a guest's
//! size or less are not made. MOM averages statistics over its last 10 samples (`StatAvg`); here
//! the current ones are used.
//!
//! KSM: the scanner stops while what KSM could share (the QEMU processes' virtual size) plus a
//! 20 % margin fits in the host and free memory is above that margin; else it runs, scanning 300
//! pages more a round while free memory is under the margin and 50 fewer otherwise (64 to 1,250),
//! sleeping 10 ms per 16 GiB of host memory, never less than 10 ms.

use super::{Action, Decision, HostView, Policy, VmView};
use crate::units::human_bytes;

/// MOM's policy-engine interval (`policy-engine-interval` in vdsm's mom.conf: 10 s).
const PERIOD_NS: u64 = 10_000_000_000;
/// 02-balloon.policy's constants.
const PRESSURE_THRESHOLD: f64 = 0.20;
const PRESSURE_CRITICAL: f64 = 0.05;
const MIN_GUEST_FREE_PERCENT: f64 = 0.20;
const MAX_BALLOON_CHANGE_PERCENT: f64 = 0.05;
const MIN_BALLOON_CHANGE_PERCENT: f64 = 0.0025;
/// 03-ksm.policy's constants.
const KSM_PAGES_BOOST: i64 = 300;
const KSM_PAGES_DECAY: i64 = -50;
const KSM_SLEEP_MS_BASELINE: f64 = 10.0;
const KSM_NPAGES_MIN: i64 = 64;
const KSM_NPAGES_MAX: i64 = 1250;
const KSM_FREE_PERCENT: f64 = 0.20;
/// The host size the sleep baseline is given for (16 GiB: 16,777,216 kB in the policy).
const KSM_SLEEP_BASE_BYTES: f64 = (16u64 << 30) as f64;

/// The policy; it remembers what it last asked of KSM (asked again only when that changes, so a
/// host that does not let it set KSM is not told the same every round).
#[derive(Clone, Debug, Default)]
pub struct Mom {
    ksm_asked: Option<Action>,
}

/// A guest's size as MOM sees it (`balloon_cur`): its memory less the balloon.
fn cur(v: &VmView) -> u64 {
    v.memory.saturating_sub(v.balloon_size)
}

/// A guest's free margin as a decision's reason gives it: a share of its size beyond what it uses,
/// or, when the host is nearly out of memory, below it.
fn margin(pct: f64) -> String {
    if pct < 0.0 {
        format!("less {:.1} % of its size (the guest must swap)", -pct * 100.0)
    } else {
        format!("plus {:.1} % of its size free", pct * 100.0)
    }
}

impl Mom {
    fn balloon(&self, view: &HostView, host_free_pct: f64, out: &mut Vec<Decision>) {
        let shrink = host_free_pct < PRESSURE_THRESHOLD;
        // The free share a guest keeps: 20 % scaled by the host's free share against the 20 %
        // threshold, negative at 5 % or less (the guest must swap).
        let guest_free_pct = if host_free_pct <= PRESSURE_CRITICAL {
            host_free_pct - 0.05
        } else {
            MIN_GUEST_FREE_PERCENT * (host_free_pct / PRESSURE_THRESHOLD)
        };
        for v in &view.vms {
            if v.guest_total == 0 {
                continue; // no guest statistics yet: MOM skips guests without them
            }
            let cur = cur(v) as f64;
            let max = v.memory as f64;
            let guaranteed = v.reservation as f64;
            let used = cur - v.guest_free as f64;
            let floor = guaranteed.max(used + guest_free_pct * cur);
            let (size, why) = if cur < guaranteed {
                (guaranteed, "below its guaranteed memory: back to it".to_string())
            } else if shrink {
                let size = (cur * (1.0 - MAX_BALLOON_CHANGE_PERCENT)).max(floor);
                if size > cur {
                    continue;
                }
                (
                    size,
                    format!(
                        "host free {:.1} % < {:.0} %: shrink toward used {} {}, at most {:.0} % a round",
                        host_free_pct * 100.0,
                        PRESSURE_THRESHOLD * 100.0,
                        human_bytes(used.max(0.0) as u64),
                        margin(guest_free_pct),
                        MAX_BALLOON_CHANGE_PERCENT * 100.0
                    ),
                )
            } else if cur < max {
                let size = (cur * (1.0 + MAX_BALLOON_CHANGE_PERCENT)).max(floor).min(max);
                (
                    size,
                    format!(
                        "host free {:.1} % >= {:.0} %: grow by {:.0} % a round, at once to used {} {}",
                        host_free_pct * 100.0,
                        PRESSURE_THRESHOLD * 100.0,
                        MAX_BALLOON_CHANGE_PERCENT * 100.0,
                        human_bytes(used.max(0.0) as u64),
                        margin(guest_free_pct)
                    ),
                )
            } else {
                continue;
            };
            if (size - cur).abs() <= MIN_BALLOON_CHANGE_PERCENT * cur {
                continue;
            }
            let balloon = v.memory.saturating_sub(size as u64);
            out.push(Decision {
                vm: Some(v.id),
                action: Action::SetBalloonTarget { bytes: balloon },
                reason: format!("mom balloon: {why}: guest {} -> {}", human_bytes(cur as u64), human_bytes(size as u64)),
            });
        }
    }

    fn ksm(&mut self, view: &HostView, out: &mut Vec<Decision>) {
        let total = view.host_memory as f64;
        let threshold = total * KSM_FREE_PERCENT;
        // Host.ksm_shareable: the virtual size of the QEMU processes (MOM sums `ps -o vsz` over
        // them): each guest's memory and QEMU's own.
        let committed: f64 = view.vms.iter().map(|v| (v.memory + v.overhead) as f64).sum();
        let free = view.host_available as f64;
        let run = !(threshold + committed < total && free > threshold);
        let npages = view.sharing.pages_to_scan as i64;
        let (npages, sleep_ms, why) = if run {
            let step = if free < threshold { KSM_PAGES_BOOST } else { KSM_PAGES_DECAY };
            let n = (npages + step).clamp(KSM_NPAGES_MIN, KSM_NPAGES_MAX);
            // vdsm never sleeps less than the baseline (its max(10, ...)).
            let sleep = (KSM_SLEEP_MS_BASELINE * KSM_SLEEP_BASE_BYTES / total).round().max(KSM_SLEEP_MS_BASELINE) as u64;
            let why = if free < threshold {
                format!("free {} < 20 % of the host: scan {step:+} pages", human_bytes(free as u64))
            } else {
                format!(
                    "QEMU's virtual size {} (with the 20 % margin, more than the host): scan {step:+} pages",
                    human_bytes(committed as u64)
                )
            };
            (n, sleep, why)
        } else {
            (
                npages,
                view.sharing.sleep_ms,
                format!(
                    "QEMU's virtual size {} and free {} leave the 20 % margin: KSM not needed",
                    human_bytes(committed as u64),
                    human_bytes(free as u64)
                ),
            )
        };
        let want = Action::SetSharing { run, pages_to_scan: npages as u64, sleep_ms };
        let now = Action::SetSharing { run: view.sharing.run, pages_to_scan: view.sharing.pages_to_scan, sleep_ms: view.sharing.sleep_ms };
        if want != now && self.ksm_asked.as_ref() != Some(&want) {
            self.ksm_asked = Some(want.clone());
            out.push(Decision { vm: None, action: want, reason: format!("mom ksm: {why}") });
        }
    }
}

impl Policy for Mom {
    fn name(&self) -> &str {
        "mom"
    }

    fn period_ns(&self) -> Option<u64> {
        Some(PERIOD_NS)
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        let mut out = Vec::new();
        let host_free_pct = view.host_available as f64 / view.host_memory.max(1) as f64;
        self.balloon(view, host_free_pct, &mut out);
        self.ksm(view, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::VmId;

    const MIB: u64 = 1 << 20;

    fn view(host_free_pct: f64, balloon: u64, reservation: u64) -> HostView {
        let vm = VmView {
            id: VmId(0),
            name: "g".into(),
            memory: 1024 * MIB,
            reservation,
            guest_total: 1024 * MIB - balloon,
            guest_free: 1024 * MIB - balloon - 100 * MIB,
            balloon_size: balloon,
            ..Default::default()
        };
        let host = 8192 * MIB;
        HostView { host_memory: host, host_available: (host as f64 * host_free_pct) as u64, vms: vec![vm], ..Default::default() }
    }

    fn target(p: &mut Mom, v: &HostView) -> Option<u64> {
        p.decide(v).into_iter().find_map(|d| match d.action {
            Action::SetBalloonTarget { bytes } => Some(bytes),
            _ => None,
        })
    }

    #[test]
    fn shrinks_five_percent_a_round_toward_use_and_grows_back() {
        let mut p = Mom::default();
        let t = target(&mut p, &view(0.10, 0, 0)).unwrap();
        assert!(t.abs_diff(1024 * MIB / 20) <= 1, "5 % of 1 GiB a round: {t}");
        // Rounds later the guest reaches its use (100 MiB) plus 10 % of its size (host 10 % free:
        // 20 % scaled by 10/20), and stays.
        let mut balloon = 0;
        for _ in 0..100 {
            match target(&mut p, &view(0.10, balloon, 0)) {
                Some(t) => balloon = t,
                None => break,
            }
        }
        let size = (1024 * MIB - balloon) as f64 / MIB as f64;
        assert!((size - (100.0 + 0.1 * size)).abs() < 0.003 * 1024.0 + 1.0, "converged to {size} MiB");
        // A free host (50 %): at once to its use plus a 50 % margin (20 % x 50/20) of its size.
        let before = (1024 * MIB - balloon) as f64 / MIB as f64;
        let grown = target(&mut p, &view(0.5, balloon, 0)).unwrap();
        let size = (1024 * MIB - grown) as f64 / MIB as f64;
        assert!((size - (100.0 + 0.5 * before)).abs() < 1.0, "grew from {before} to {size} MiB");
        // A reservation is a floor MOM keeps (guest.balloon_min).
        let floored = target(&mut p, &view(0.10, 0, 1000 * MIB)).unwrap();
        assert_eq!(floored, 24 * MIB);
    }

    #[test]
    fn critical_pressure_takes_the_guest_below_its_use() {
        let mut p = Mom::default();
        let mut balloon = 0;
        for _ in 0..200 {
            match target(&mut p, &view(0.04, balloon, 0)) {
                Some(t) => balloon = t,
                None => break,
            }
        }
        assert!(1024 * MIB - balloon < 100 * MIB, "below the 100 MiB it uses: the guest must swap");
        // The reason says so in words, not as "+ -1.0 % free".
        let why = p.decide(&view(0.04, 0, 0)).into_iter().find(|d| matches!(d.action, Action::SetBalloonTarget { .. })).unwrap().reason;
        assert!(why.contains("used 100 MiB less 1.0 % of its size (the guest must swap)"), "{why}");
    }

    #[test]
    fn ksm_runs_only_when_the_guests_do_not_fit() {
        let mut p = Mom::default();
        let mut v = view(0.9, 0, 0);
        assert!(p.decide(&v).iter().all(|d| !matches!(d.action, Action::SetSharing { run: true, .. })));
        v.vms[0].memory = 8192 * MIB; // QEMU's virtual size 8 GiB: with the 20 % margin, more than the host
        v.vms[0].guest_total = 0; // (no balloon statistics: only KSM is decided)
        let d = p.decide(&v);
        let Some(Action::SetSharing { run: true, pages_to_scan, sleep_ms }) =
            d.iter().map(|d| d.action.clone()).find(|a| matches!(a, Action::SetSharing { .. }))
        else {
            panic!("KSM should run: {d:?}")
        };
        assert_eq!((pages_to_scan, sleep_ms), (KSM_NPAGES_MIN as u64, 20), "decay from 0, held at the minimum; 10 ms per 16 GiB on 8 GiB");
        v.host_memory = 64 << 30;
        v.vms[0].memory = 64 << 30;
        let d = p.decide(&v);
        assert!(d.iter().any(|d| matches!(d.action, Action::SetSharing { run: true, sleep_ms: 10, .. })), "never under 10 ms: {d:?}");
    }
}
