//! `esx`: VMware ESX's memory scheduler (Waldspurger, "Memory Resource Management in VMware ESX
//! Server", OSDI 2002; docs/sources/host-reclamation.md, section 3).
//!
//! Every VM gets a reservation (floor), a limit (ceiling) and shares. When the VMs want more than
//! the host can give while keeping its free-memory goal, memory is revoked from the VM that pays
//! the least for it: the one with the lowest adjusted shares per page
//! rho = S / (P (f + k (1 - f))), k = 1 / (1 - tax), where f is the VM's active fraction, so idle
//! memory is taxed (75 % by default). The active fraction comes from the host's page sampling:
//! the maximum of a slow and a fast moving average and of the fast one updated with the current
//! period's touches so far, so an estimate rises quickly and decays slowly.
//!
//! The host's free memory puts it in a state (a table of `esx_states`); the state decides how the
//! VMs' excess over their targets is reclaimed: by ballooning, by host swapping (with compression
//! first where the host has a cache), and in the lowest state by blocking VMs above their target.

use std::collections::BTreeMap;

use super::esx_states::{Mechanisms, StateTable};
use super::{Action, Decision, HostView, Policy, VmId, VmView};
use crate::units::{PAGE_SIZE, human_bytes};

/// `Mem.BalancePeriod`: targets are recomputed every 15 s (ESXi 4.0 Resource Management Guide,
/// table B-2), and at once when the state changes.
const BALANCE_PERIOD_NS: u64 = 15_000_000_000;
/// The state is checked every second: the balloon driver polls its target as often.
const TICK_NS: u64 = 1_000_000_000;
/// Gains of the fast and slow moving averages of the active fraction, per sample period. Not
/// published: a fast average that follows within a couple of periods, a slow one that carries a
/// working set over about ten (docs/sources/host-reclamation.md, 3.2).
const FAST_GAIN: f64 = 0.5;
const SLOW_GAIN: f64 = 0.1;
/// Memory revoked per step of the min-funding revocation, pages (4 MiB: fine enough for targets
/// that are hundreds of MB apart, coarse enough to stay cheap for many VMs).
const REVOKE_STEP: u64 = 1024;

/// One VM's active-memory estimate.
#[derive(Clone, Debug)]
struct Active {
    slow: f64,
    fast: f64,
    periods: u64,
}

impl Active {
    /// The estimate: the maximum of the slow average, the fast one, and the fast one updated with
    /// the current period so far. Fully active until a period has been sampled.
    fn estimate(&self, now: (u64, u64)) -> f64 {
        if self.periods == 0 {
            return 1.0;
        }
        let (n, t) = now;
        let current = if n > 0 { self.fast + FAST_GAIN * (t as f64 / n as f64 - self.fast) } else { 0.0 };
        self.slow.max(self.fast).max(current)
    }
}

/// Machine memory a VM consumes, pages: what it is granted and its compression cache.
fn held(v: &VmView) -> u64 {
    (v.granted + v.compression_cache) / PAGE_SIZE
}

/// What a state runs, in words.
fn mechanisms(does: Mechanisms) -> String {
    let named = [(does.share_now, "share now"), (does.balloon, "balloon"), (does.swap, "swap"), (does.block, "block VMs above target")];
    let on: Vec<&str> = named.iter().filter(|(on, _)| *on).map(|(_, what)| *what).collect();
    if on.is_empty() { "no reclamation".into() } else { on.join(", ") }
}

/// What the policy last set for a VM, pages.
#[derive(Clone, Copy, Debug, Default)]
struct Set {
    balloon: u64,
    swap: u64,
    blocked: bool,
}

/// The policy.
#[derive(Clone, Debug)]
pub struct Esx {
    table: &'static StateTable,
    tax: f64,
    state: usize,
    active: BTreeMap<VmId, Active>,
    last_balance: Option<u64>,
    /// Per VM, what was last set.
    set: BTreeMap<VmId, Set>,
    /// VMs seen with large pages, and what was asked of them.
    large: BTreeMap<VmId, Large>,
    /// The targets are due at the next tick (sharing freed memory after this view).
    rebalance: bool,
}

/// Where a VM seen with large pages stands (ESX 6.0's breaking).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Large {
    /// Nothing asked yet.
    Whole,
    /// Asked broken; its small pages share as the scanner reaches them.
    Broken,
    /// Asked to share what was hashed while whole.
    Shared,
}

impl Esx {
    /// The scheduler with a state table and an idle tax (0..1).
    pub fn new(table: &'static StateTable, tax: f64) -> Self {
        Self {
            table,
            tax,
            state: 0,
            active: BTreeMap::new(),
            last_balance: None,
            set: BTreeMap::new(),
            large: BTreeMap::new(),
            rebalance: false,
        }
    }

    fn update_active(&mut self, v: &VmView) -> f64 {
        let a = self.active.entry(v.id).or_insert(Active { slow: 1.0, fast: 1.0, periods: 0 });
        if v.active_periods > a.periods {
            let (n, t) = v.active_sample;
            let f = if n > 0 { t as f64 / n as f64 } else { 1.0 };
            if a.periods == 0 {
                a.slow = f;
                a.fast = f;
            } else {
                a.fast += FAST_GAIN * (f - a.fast);
                a.slow += SLOW_GAIN * (f - a.slow);
            }
            a.periods = v.active_periods;
        }
        a.estimate(v.active_sample_now)
    }

    /// Adjusted shares per page.
    fn rho(&self, shares: u64, pages: u64, active: f64) -> f64 {
        let k = 1.0 / (1.0 - self.tax.min(0.999));
        shares as f64 / (pages.max(1) as f64 * (active + k * (1.0 - active)))
    }

    /// Large pages (ESX 6.0): a VM's are broken once free memory falls below the table's
    /// threshold and its small pages share as the scanner reaches them; in a state that shares at
    /// once (`clear` and below) the pages the scanner hashed while they were whole share now.
    /// Asked of each VM that was seen with large pages: a break at most once, and a share at most
    /// once (with the break, if the VM's pages were still whole).
    fn break_large_pages(&mut self, view: &HostView, basis: f64) -> Vec<Decision> {
        let threshold = self.table.break_large_below * basis;
        let state = self.table.states[self.state];
        let mut out = Vec::new();
        for v in &view.vms {
            if v.large_pages > 0 {
                self.large.entry(v.id).or_insert(Large::Whole);
            }
            let Some(large) = self.large.get_mut(&v.id) else { continue };
            let asked = match *large {
                Large::Whole if state.does.share_now => Action::BreakLargePages { share_now: true },
                Large::Whole if v.large_pages > 0 && (view.host_free as f64) < threshold => Action::BreakLargePages { share_now: false },
                Large::Broken if state.does.share_now => Action::BreakLargePages { share_now: true },
                _ => continue,
            };
            *large = if state.does.share_now { Large::Shared } else { Large::Broken };
            let reason = format!(
                "state {}, host free {} ({:.0} % of minFree {}; table {} breaks large pages below {:.0} %): '{}' {}; {}",
                state.name,
                human_bytes(view.host_free),
                view.host_free as f64 / basis * 100.0,
                human_bytes(basis as u64),
                self.table.name,
                self.table.break_large_below * 100.0,
                v.name,
                if v.large_pages > 0 {
                    format!("has {} in large pages", human_bytes(v.large_pages))
                } else {
                    "had its large pages broken by host reclaim".into()
                },
                if state.does.share_now {
                    format!("state {} shares what the scanner hashed while they were whole now", state.name)
                } else {
                    "its small pages share as the scanner reaches them".to_string()
                }
            );
            out.push(Decision { vm: Some(v.id), action: asked, reason });
        }
        out
    }

    /// Min-funding revocation: each VM's allocation target, in pages, so that the VMs together
    /// hold at most `available` pages. A VM starts from what it holds (within its limit); while the
    /// total is too large, the VM with the lowest rho gives up a step, never below its
    /// reservation. A reservation the VM has not touched takes no memory: others may use it until
    /// the VM does (reservations are honoured on demand; admission control guarantees they can be).
    fn targets(&self, vms: &[(&VmView, f64)], available: u64) -> Vec<u64> {
        let mut alloc: Vec<u64> = vms.iter().map(|(v, _)| held(v).min(v.memory.min(v.limit) / PAGE_SIZE)).collect();
        let floor: Vec<u64> = vms.iter().zip(&alloc).map(|((v, _), &a)| (v.reservation / PAGE_SIZE).min(a)).collect();
        let mut total: u64 = alloc.iter().sum();
        while total > available {
            let pick = (0..vms.len())
                .filter(|&i| alloc[i] > floor[i])
                .min_by(|&a, &b| self.rho(vms[a].0.shares, alloc[a], vms[a].1).total_cmp(&self.rho(vms[b].0.shares, alloc[b], vms[b].1)));
            let Some(i) = pick else { break };
            let step = REVOKE_STEP.min(alloc[i] - floor[i]).min(total - available);
            alloc[i] -= step;
            total -= step;
        }
        alloc
    }
}

impl Policy for Esx {
    fn name(&self) -> &str {
        "esx"
    }

    fn period_ns(&self) -> Option<u64> {
        Some(TICK_NS)
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        let mut out = Vec::new();
        let actives: Vec<f64> = view.vms.iter().map(|v| self.update_active(v)).collect();
        let state = self.table.next(self.state, view.host_free, view.host_memory);
        let basis = self.table.basis_bytes(view.host_memory);
        let free_pct = view.host_free as f64 / view.host_memory as f64 * 100.0;
        let changed = state != self.state;
        if changed || self.last_balance.is_none() {
            let s = &self.table.states[state];
            out.push(Decision {
                vm: None,
                action: Action::SetMemoryState { state: s.name },
                reason: format!(
                    "free memory {} ({free_pct:.2} % of {}) {} of table {}: state {} ({})",
                    human_bytes(view.host_free),
                    human_bytes(view.host_memory),
                    if !changed {
                        "at start".to_string()
                    } else if state > self.state {
                        format!("is below the {} threshold", s.name)
                    } else {
                        format!("has recovered past the {} threshold", self.table.states[self.state].name)
                    },
                    self.table.name,
                    s.name,
                    mechanisms(s.does)
                ),
            });
            self.state = state;
        }
        // In the states that swap or block, targets follow every tick: swapping is the quick
        // antidote and must stop as soon as the balloon and it together have taken the excess, and
        // a blocked VM runs again as soon as it is within its target (ESX blocks a VM only while
        // it is above its target).
        let does_now = self.table.states[self.state].does;
        let breaks = self.break_large_pages(view, basis);
        let shared_now = breaks.iter().any(|d| d.action == Action::BreakLargePages { share_now: true });
        out.extend(breaks);
        if shared_now {
            // Sharing frees memory this view does not show: the targets wait for the next tick's.
            self.rebalance = true;
            return out;
        }
        let due = self.last_balance.is_none_or(|t| view.time_ns >= t + BALANCE_PERIOD_NS)
            || does_now.swap
            || does_now.block
            || std::mem::take(&mut self.rebalance);
        if !(changed || due) {
            return out;
        }
        self.last_balance = Some(view.time_ns);
        let does = self.table.states[self.state].does;
        // What the VMs may hold together: the host less the hypervisor, the VMs' overhead and the
        // free memory the table aims to keep.
        let overhead: u64 = view.vms.iter().map(|v| v.overhead).sum();
        let goal = (basis * self.table.goal) as u64;
        let available = view.host_memory.saturating_sub(view.hypervisor + overhead + goal) / PAGE_SIZE;
        let vms: Vec<(&VmView, f64)> = view.vms.iter().zip(actives.iter().copied()).collect();
        let targets = self.targets(&vms, available);
        for ((v, active), target) in vms.iter().zip(targets) {
            let held = held(v);
            let (balloon_now, reclaimed) = (v.balloon_size / PAGE_SIZE, (v.swapped + v.compressed) / PAGE_SIZE);
            let need = held.saturating_sub(target);
            let slack = target.saturating_sub(held);
            let cap = v.balloon_max / PAGE_SIZE;
            // A VM that has reached its limit is ballooned down to it in any state, so its guest
            // chooses what to give up (ESX enforces limits whatever the host's free memory; until
            // the balloon is in, the grant limit set at power-on makes the host swap its pages).
            let limit = v.limit.min(v.memory) / PAGE_SIZE;
            // Compressed pages count once: as reclaimed, not also as the cache frames holding them.
            let to_limit = if v.granted / PAGE_SIZE + reclaimed >= limit { v.memory / PAGE_SIZE - limit } else { 0 };
            let balloon = if does.balloon || need == 0 { (balloon_now + need).saturating_sub(slack) } else { balloon_now };
            let balloon = balloon.max(to_limit).min(cap);
            // Swapping takes what the balloon has not yet taken: in the swap states all of the
            // excess now, while the balloon works on it too (ESX swaps in hard because ballooning
            // "may take a while to work", seed 000); in a balloon-only state what lies beyond the
            // balloon's maximum (ESX swaps when "the maximum balloon size is reached", Resource
            // Management Guide 4.0). Outside that, no new swapping: the target drops to nothing
            // and swapped pages stay out until touched (ESX does not swap pages back in ahead of
            // use).
            let beyond_cap = (balloon_now + need).saturating_sub(cap);
            let swap = if does.swap && need > 0 {
                reclaimed + need
            } else if does.balloon && beyond_cap > 0 {
                reclaimed + beyond_cap
            } else {
                0
            };
            let blocked = does.block && need > 0;
            let old = self.set.get(&v.id).copied();
            let rho = self.rho(v.shares, held, *active);
            let why = |what: &str| {
                format!(
                    "state {}, host free {}: '{}' holds {} with target {} (reservation {}, shares {}, active {:.0} %, rho {:.3e}); {what}",
                    self.table.states[self.state].name,
                    human_bytes(view.host_free),
                    v.name,
                    human_bytes(held * PAGE_SIZE),
                    human_bytes(target * PAGE_SIZE),
                    human_bytes(v.reservation),
                    v.shares,
                    active * 100.0,
                    rho
                )
            };
            if old.is_none() && v.limit < v.memory {
                out.push(Decision {
                    vm: Some(v.id),
                    action: Action::SetGrantLimit { bytes: v.limit },
                    reason: format!(
                        "'{}' has a limit of {} below its {} of memory: the host backs no more",
                        v.name,
                        human_bytes(v.limit),
                        human_bytes(v.memory)
                    ),
                });
            }
            let old = old.unwrap_or_default();
            if balloon != old.balloon {
                out.push(Decision {
                    vm: Some(v.id),
                    action: Action::SetBalloonTarget { bytes: balloon * PAGE_SIZE },
                    reason: why(&format!(
                        "balloon {} now, {} more to reclaim, cap {}{}",
                        human_bytes(balloon_now * PAGE_SIZE),
                        human_bytes(need * PAGE_SIZE),
                        human_bytes(cap * PAGE_SIZE),
                        if to_limit > 0 && balloon == to_limit.min(cap) {
                            format!("; at its limit of {}, the balloon holds the rest of its memory", human_bytes(v.limit))
                        } else {
                            String::new()
                        }
                    )),
                });
            }
            if swap != old.swap {
                out.push(Decision {
                    vm: Some(v.id),
                    action: Action::SetSwapTarget { bytes: swap * PAGE_SIZE },
                    reason: why(&format!(
                        "{} swapped or compressed now; {}",
                        human_bytes(reclaimed * PAGE_SIZE),
                        if swap == 0 && need == 0 {
                            "nothing more to reclaim, no new swapping".to_string()
                        } else if swap == 0 {
                            "no new swapping in this state".to_string()
                        } else if does.swap {
                            "swapping takes what the balloon has not".to_string()
                        } else {
                            format!("{} is beyond the balloon's maximum", human_bytes(beyond_cap * PAGE_SIZE))
                        }
                    )),
                });
            }
            if blocked != old.blocked {
                out.push(Decision {
                    vm: Some(v.id),
                    action: Action::SetBlocked { blocked },
                    reason: why(if blocked {
                        "blocked until memory is freed"
                    } else if does.block {
                        "within its target, runs again"
                    } else {
                        "free memory recovered, runs again"
                    }),
                });
            }
            self.set.insert(v.id, Set { balloon, swap, blocked });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::esx_states::TABLES;

    fn vm(id: u32, shares: u64, granted_gib: u64, active: (u64, u64)) -> VmView {
        VmView {
            id: VmId(id),
            name: format!("vm{id}"),
            memory: 4 << 30,
            reservation: 0,
            limit: 4 << 30,
            shares,
            granted: granted_gib << 30,
            guest_total: 4 << 30,
            balloon_max: (4 << 30) * 65 / 100,
            active_sample: active,
            active_sample_now: (100, 0),
            active_periods: 1,
            ..Default::default()
        }
    }

    fn balloon_targets(tax: f64) -> (u64, u64) {
        let mut p = Esx::new(TABLES[0], tax);
        // Two VMs holding 4 GiB each on a 8 GiB host with nothing free: one active (all sampled
        // pages touched), one idle (none).
        let view = HostView {
            time_ns: 0,
            host_memory: 8 << 30,
            vms: vec![vm(0, 1000, 4, (100, 100)), vm(1, 1000, 4, (100, 0))],
            ..Default::default()
        };
        let mut t = (0, 0);
        for d in p.decide(&view) {
            if let (Some(id), Action::SetBalloonTarget { bytes }) = (d.vm, d.action) {
                if id == VmId(0) { t.0 = bytes } else { t.1 = bytes }
            }
        }
        t
    }

    #[test]
    fn esx6_breaks_large_pages_once_and_shares_once_before_new_targets() {
        let table = TABLES.iter().find(|t| t.name == "minfree6").expect("minfree6");
        let mut p = Esx::new(table, 0.75);
        let mem = 16u64 << 30;
        let min_free = super::super::esx_states::min_free(mem);
        let view = |t: u64, free: u64, large: u64| HostView {
            time_ns: t * 1_000_000_000,
            host_memory: mem,
            host_free: free,
            // Four VMs holding 4 GiB each: more than the host less its minFree goal.
            vms: (0..4).map(|i| VmView { large_pages: large, ..vm(i, 1000, 4, (100, 100)) }).collect(),
            ..Default::default()
        };
        let breaks = |d: &[Decision]| {
            d.iter()
                .filter_map(|d| if let Action::BreakLargePages { share_now } = d.action { Some(share_now) } else { None })
                .collect::<Vec<_>>()
        };
        assert!(breaks(&p.decide(&view(0, 5 * min_free, 1 << 30))).is_empty(), "above 400 % of minFree: whole");
        assert_eq!(breaks(&p.decide(&view(1, 3 * min_free, 1 << 30))), [false; 4], "below 400 %: broken, TPS waits");
        assert!(breaks(&p.decide(&view(2, 3 * min_free, 0))).is_empty(), "asked once");
        let d = p.decide(&view(3, min_free / 2, 0));
        assert_eq!(breaks(&d), [true; 4], "soft (below 64 %): share what was hashed now");
        assert!(!d.iter().any(|d| matches!(d.action, Action::SetBalloonTarget { .. })), "targets wait for the next view: {d:?}");
        let d = p.decide(&view(4, min_free / 2, 0));
        assert!(breaks(&d).is_empty(), "shared once");
        assert!(d.iter().any(|d| matches!(d.action, Action::SetBalloonTarget { .. })), "then the targets follow: {d:?}");
    }

    #[test]
    fn in_soft_the_balloon_stops_at_its_maximum_and_swapping_takes_the_rest() {
        let table = TABLES.iter().find(|t| t.name == "esx3").expect("esx3");
        // Two idle VMs holding 4 GiB each on an 8 GiB host with 5 % free: soft, balloon only.
        let targets = |balloon_max: u64| {
            let view = HostView {
                time_ns: 0,
                host_memory: 8 << 30,
                host_free: (8u64 << 30) / 20,
                vms: (0..2).map(|i| VmView { balloon_max, ..vm(i, 1000, 4, (100, 0)) }).collect(),
                ..Default::default()
            };
            let (mut balloon, mut swap) = (Vec::new(), Vec::new());
            for d in Esx::new(table, 0.75).decide(&view) {
                match d.action {
                    Action::SetBalloonTarget { bytes } => balloon.push(bytes),
                    Action::SetSwapTarget { bytes } => swap.push(bytes),
                    _ => {}
                }
            }
            (balloon, swap)
        };
        let (balloon, swap) = targets(4 << 30);
        assert!(balloon.iter().any(|&b| b > 16 << 20), "soft takes more than 16 MiB by ballooning: {balloon:?}");
        assert!(swap.iter().all(|&s| s == 0), "and swaps nothing while the balloon can take it: {swap:?}");
        let (balloon, swap) = targets(16 << 20);
        assert!(!balloon.is_empty() && balloon.iter().all(|&b| b <= 16 << 20), "never past the balloon's maximum: {balloon:?}");
        assert!(swap.iter().any(|&s| s > 0), "what lies beyond it is swapped: {swap:?}");
    }

    #[test]
    fn the_idle_tax_takes_from_the_idle_vm_first() {
        let (active, idle) = balloon_targets(0.75);
        assert_eq!(active, 0, "with a 75 % tax the active VM keeps its memory");
        assert!(idle > 400 << 20, "the idle VM gives up the goal's worth: {idle}");
        let (active, idle) = balloon_targets(0.0);
        assert!(active.abs_diff(idle) <= REVOKE_STEP * PAGE_SIZE, "no tax: equal shares lose equally ({active} vs {idle})");
    }
}
