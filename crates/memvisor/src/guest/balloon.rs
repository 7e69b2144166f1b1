//! The in-guest balloon drivers. The host sets a target; the driver allocates pages through the
//! guest's own allocator (so the guest's reclaim decides what it loses), pins them and hands their
//! frames to the host; when the target falls it frees pages back. Three drivers:
//!
//! - `virtio` (Linux `drivers/virtio/virtio_balloon.c`, QEMU/KVM): a target change runs the driver's
//!   work at once; each round takes or releases at most VIRTIO_BALLOON_ARRAY_PFNS_MAX = 256 pages
//!   and the work requeues itself until the target is met. Pages come from `balloon_page_alloc`
//!   (GFP_HIGHUSER_MOVABLE | __GFP_NORETRY | __GFP_NOMEMALLOC): the allocator may reclaim but never
//!   calls the OOM killer; when it fails the driver logs "Out of puff!" and sleeps 200 ms. Without
//!   `deflate_on_oom` ballooned pages leave MemTotal (`adjust_managed_page_count`); with it they
//!   count as used and the guest's OOM notifier releases OOM_VBALLOON_DEFAULT_PAGES = 256 pages
//!   instead of killing.
//! - `vmw` (Linux `drivers/misc/vmware_balloon.c` 2.6.34-3.x and VMware Tools' vmmemctl, the seeds'
//!   era): the work polls the host's target every second. It allocates without sleeping (no direct
//!   reclaim) first, at most VMW_BALLOON_NOSLEEP_ALLOC_MAX = 16,384 pages per poll; when such an
//!   allocation fails the guest is under pressure, and for the next VMW_BALLOON_SLOW_CYCLES = 4 polls
//!   it allocates with reclaim at `rate_alloc` pages per poll (512 to 2,048, rising by 16 per poll
//!   that met its rate, halved when a sleeping allocation fails). It releases at `rate_free` pages
//!   per poll (512 to 16,384). Ballooned pages count as used; MemTotal stays. The seed-era driver's
//!   sleeping allocations could invoke the guest's OOM killer; here, as 4.20+ drivers do
//!   (__GFP_NORETRY), they fail instead: inflation must never OOM-kill (the guest's reclaim decides
//!   what it loses).
//! - `xen` (Linux `drivers/xen/balloon.c`, the Xen PV guests of seed 002): `balloon_process` takes
//!   or releases 512 pages per hypercall and loops until the target is met; a failed allocation
//!   (`GFP_BALLOON`, no OOM) retries after 1 s, doubling up to 32 s. Ballooned pages leave MemTotal.
//!
//! Sources: docs/sources/host-reclamation.md, sections 1 and 2.

use super::page::PageKind;
use super::{Counter, Env, Guest};
use crate::clock::GuestEvent;

/// Pages a virtio balloon round takes or releases (VIRTIO_BALLOON_ARRAY_PFNS_MAX).
const VIRTIO_PFNS_MAX: u64 = 256;
/// Pages per Xen balloon hypercall (`ARRAY_SIZE(frame_list)`, `PAGE_SIZE / sizeof(unsigned long)`).
const XEN_BATCH: u64 = 512;
/// Xen's balloon retries a failed allocation after 1 s, doubling up to 32 s (Linux 3.6
/// `drivers/xen/balloon.c`, `max_schedule_delay`; tmem.md 3.1).
const XEN_RETRY_NS: u64 = 1_000_000_000;
const XEN_MAX_RETRY_SHIFT: u32 = 5;
/// Sleep after a virtio allocation failure ("Out of puff!", msleep(200)).
const VIRTIO_OUT_OF_PUFF_NS: u64 = 200_000_000;
/// Pages the virtio OOM notifier releases (OOM_VBALLOON_DEFAULT_PAGES).
const VIRTIO_OOM_PAGES: usize = 256;
/// vmw_balloon's cap on non-sleeping allocations per poll (VMW_BALLOON_NOSLEEP_ALLOC_MAX).
const VMW_NOSLEEP_MAX: u64 = 16_384;
/// vmw_balloon's work period: one second (`round_jiffies_relative(HZ)`).
const VMW_PERIOD_NS: u64 = 1_000_000_000;
/// vmw_balloon's sleeping-allocation rates, pages per poll (VMW_BALLOON_RATE_ALLOC_MIN/MAX/INC).
const VMW_RATE_ALLOC: (u64, u64, u64) = (512, 2048, 16);
/// vmw_balloon's release rates, pages per poll (VMW_BALLOON_RATE_FREE_MIN/MAX/INC).
const VMW_RATE_FREE: (u64, u64, u64) = (512, 16_384, 16);
/// Polls after an allocation failure during which vmw_balloon allocates slowly.
const VMW_SLOW_CYCLES: u32 = 4;

/// Which driver the guest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BalloonDriver {
    /// No balloon device.
    None,
    /// virtio-balloon (QEMU/KVM).
    Virtio {
        /// `deflate-on-oom`: the guest's OOM notifier deflates instead of killing.
        deflate_on_oom: bool,
    },
    /// vmw_balloon (VMware Tools' memory control driver).
    Vmw,
    /// Xen's balloon driver (`drivers/xen/balloon.c`): ballooned pages leave MemTotal.
    Xen,
}

impl BalloonDriver {
    /// Names as written in scenario files.
    pub const NAMES: &'static [&'static str] = &["none", "virtio", "virtio-deflate-on-oom", "vmw", "xen"];

    /// Parses a scenario name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" => Self::None,
            "virtio" => Self::Virtio { deflate_on_oom: false },
            "virtio-deflate-on-oom" => Self::Virtio { deflate_on_oom: true },
            "vmw" => Self::Vmw,
            "xen" => Self::Xen,
            _ => return None,
        })
    }

    /// The scenario name.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Virtio { deflate_on_oom: false } => "virtio",
            Self::Virtio { deflate_on_oom: true } => "virtio-deflate-on-oom",
            Self::Vmw => "vmw",
            Self::Xen => "xen",
        }
    }
}

/// The driver's state.
#[derive(Clone, Debug)]
pub struct Balloon {
    driver: BalloonDriver,
    /// Pages in the balloon, last taken first out.
    pages: Vec<u32>,
    /// Whether the driver's work is scheduled.
    scheduled: bool,
    rate_alloc: u64,
    rate_free: u64,
    slow_cycles: u32,
    /// Allocation failures so far.
    pub alloc_fail: u64,
    /// OOM notifications answered by deflating.
    pub oom_deflations: u64,
}

impl Balloon {
    /// A driver with an empty balloon.
    pub fn new(driver: BalloonDriver) -> Self {
        Self {
            driver,
            pages: Vec::new(),
            scheduled: false,
            rate_alloc: VMW_RATE_ALLOC.1,
            rate_free: VMW_RATE_FREE.1,
            slow_cycles: 0,
            alloc_fail: 0,
            oom_deflations: 0,
        }
    }

    /// The driver.
    pub fn driver(&self) -> BalloonDriver {
        self.driver
    }

    /// Pages in the balloon.
    pub fn size(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Pages in the balloon, for invariant checks.
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }

    /// Whether ballooned pages leave MemTotal.
    pub fn shrinks_mem_total(&self) -> bool {
        matches!(self.driver, BalloonDriver::Virtio { deflate_on_oom: false } | BalloonDriver::Xen)
    }
}

impl Guest {
    /// Starts the driver at boot: vmw polls from the start; virtio waits for a target.
    pub(super) fn balloon_boot(&mut self, env: &mut Env) {
        if self.balloon.driver == BalloonDriver::Vmw {
            self.balloon.scheduled = true;
            env.schedule(self.id, 0, GuestEvent::Balloon);
        }
    }

    /// The host changed the target: virtio's config-change interrupt queues the work now; vmw
    /// notices at its next poll.
    pub fn balloon_notify(&mut self, now: u64, env: &mut Env) {
        if matches!(self.balloon.driver, BalloonDriver::Virtio { .. } | BalloonDriver::Xen) && !self.balloon.scheduled {
            self.balloon.scheduled = true;
            env.schedule(self.id, now, GuestEvent::Balloon);
        }
    }

    /// The driver's work: read the target, take or release pages, schedule the next round.
    pub(super) fn balloon_run(&mut self, now: u64, env: &mut Env) {
        self.balloon.scheduled = false;
        let target = env.host.balloon_target(self.id);
        let size = self.balloon.size();
        let (spent, next) = match self.balloon.driver {
            BalloonDriver::None => return,
            BalloonDriver::Virtio { .. } => {
                let (spent, failed) = if size < target {
                    self.inflate((target - size).min(VIRTIO_PFNS_MAX), true, now, env)
                } else {
                    self.deflate((size - target).min(VIRTIO_PFNS_MAX), now, env)
                };
                let done = self.balloon.size() == env.host.balloon_target(self.id);
                let next = if failed {
                    Some(VIRTIO_OUT_OF_PUFF_NS)
                } else if done {
                    None
                } else {
                    Some(0)
                };
                (spent, next)
            }
            BalloonDriver::Xen => {
                // `balloon_process`: 512 pages per hypercall (`PAGE_SIZE / sizeof(long)`),
                // looping until done; a failed allocation (`GFP_BALLOON`, no OOM) retries after
                // 1 s, doubling up to 32 s (`max_schedule_delay`).
                let (spent, failed) = if size < target {
                    self.inflate((target - size).min(XEN_BATCH), true, now, env)
                } else {
                    self.deflate((size - target).min(XEN_BATCH), now, env)
                };
                let next = if failed {
                    let d = XEN_RETRY_NS << self.balloon.slow_cycles.min(XEN_MAX_RETRY_SHIFT);
                    self.balloon.slow_cycles += 1;
                    Some(d)
                } else {
                    self.balloon.slow_cycles = 0;
                    (self.balloon.size() != env.host.balloon_target(self.id)).then_some(0)
                };
                (spent, next)
            }
            BalloonDriver::Vmw => {
                let spent = if size < target {
                    self.vmw_inflate(target - size, now, env)
                } else if size > target {
                    let goal = (size - target).min(self.balloon.rate_free);
                    let spent = self.deflate(goal, now, env).0;
                    self.balloon.rate_free = (self.balloon.rate_free + VMW_RATE_FREE.2).min(VMW_RATE_FREE.1);
                    spent
                } else {
                    0
                };
                self.balloon.slow_cycles = self.balloon.slow_cycles.saturating_sub(1);
                (spent, Some(VMW_PERIOD_NS))
            }
        };
        if let Some(delay) = next {
            self.balloon.scheduled = true;
            env.schedule(self.id, now + spent + delay.max(1), GuestEvent::Balloon);
        }
    }

    /// vmw_balloon's inflation: non-sleeping allocations as fast as they succeed (unless the last
    /// polls found the guest under pressure), then sleeping ones at `rate_alloc` per poll.
    fn vmw_inflate(&mut self, want: u64, now: u64, env: &mut Env) -> u64 {
        let b = &mut self.balloon;
        let (mut can_sleep, mut rate) = if b.slow_cycles > 0 { (true, b.rate_alloc) } else { (false, VMW_NOSLEEP_MAX) };
        let (mut taken, mut spent, mut failed) = (0u64, 0u64, false);
        while taken < want {
            match self.balloon_alloc(can_sleep, now + spent, env) {
                Some(ns) => {
                    spent += ns;
                    taken += 1;
                    if taken >= rate {
                        break;
                    }
                }
                None => {
                    self.balloon.alloc_fail += 1;
                    if can_sleep {
                        // Severe pressure: give up until the next poll.
                        failed = true;
                        break;
                    }
                    self.balloon.slow_cycles = VMW_SLOW_CYCLES;
                    if taken >= self.balloon.rate_alloc {
                        break;
                    }
                    can_sleep = true;
                    rate = self.balloon.rate_alloc;
                }
            }
        }
        let b = &mut self.balloon;
        if !failed && taken >= b.rate_alloc {
            b.rate_alloc = (b.rate_alloc + taken / b.rate_alloc * VMW_RATE_ALLOC.2).min(VMW_RATE_ALLOC.1);
        } else if failed {
            b.rate_alloc = (b.rate_alloc / 2).max(VMW_RATE_ALLOC.0);
        }
        spent
    }

    /// Takes up to `n` pages into the balloon with reclaim allowed (virtio). Returns the time spent
    /// and whether an allocation failed.
    pub(super) fn inflate(&mut self, n: u64, can_sleep: bool, now: u64, env: &mut Env) -> (u64, bool) {
        let mut spent = 0;
        for _ in 0..n {
            match self.balloon_alloc(can_sleep, now + spent, env) {
                Some(ns) => spent += ns,
                None => {
                    self.balloon.alloc_fail += 1;
                    return (spent, true);
                }
            }
        }
        (spent, false)
    }

    /// Allocates one page for the balloon and hands it to the host; returns the time it took, or
    /// `None` if the allocator failed. Every allocation wakes kswapd below the low watermark and
    /// may take free pages down to the min watermark; without `can_sleep` it does no direct reclaim
    /// (vmw's NOSLEEP flags lack __GFP_WAIT); with it it reclaims directly, but fails rather than
    /// calling the OOM killer (__GFP_NORETRY).
    fn balloon_alloc(&mut self, can_sleep: bool, now: u64, env: &mut Env) -> Option<u64> {
        if self.windows() {
            return self.windows_balloon_alloc(env);
        }
        let mut spent = 0;
        if self.pages.nr_free() <= self.wmark.low {
            self.wakeup_kswapd(now, env);
            if can_sleep && self.pages.nr_free() <= self.wmark.min {
                spent += self.try_to_free_pages(now, env);
            }
        }
        let floor = self.wmark.min;
        if self.pages.nr_free() <= floor {
            return None;
        }
        let p = self.pages.take_free(PageKind::Balloon, super::NONE, super::NONE, 0)?;
        self.balloon.pages.push(p);
        self.pages.set_host_plain(p, false);
        env.host.balloon(self.id, p);
        self.vmstat.inc(Counter::BalloonInflate);
        Some(spent + self.cfg.costs.balloon_page_ns)
    }

    /// A Windows balloon page: `MmAllocatePagesForMdl` takes a free page, else a standby page, stops
    /// once Available falls below 128 pages, and never trims or waits (WRK `iosup.c`), so the
    /// working-set manager and the applications' low-memory responses do the reclaiming.
    fn windows_balloon_alloc(&mut self, env: &mut Env) -> Option<u64> {
        if self.available() < super::windows::MDL_ALLOC_FLOOR {
            return None;
        }
        let p = self.windows_take_page(PageKind::Balloon, super::NONE, super::NONE)?;
        self.balloon.pages.push(p);
        self.pages.set_host_plain(p, false);
        env.host.balloon(self.id, p);
        self.vmstat.inc(Counter::BalloonInflate);
        Some(self.cfg.costs.balloon_page_ns)
    }

    /// Releases up to `n` pages from the balloon; returns the time spent.
    /// Releases up to `n` pages; returns the time it took and whether the host refused one.
    fn deflate(&mut self, n: u64, _now: u64, env: &mut Env) -> (u64, bool) {
        let mut spent = 0;
        for _ in 0..n {
            let Some(&p) = self.balloon.pages.last() else { break };
            if !env.host.unballoon(self.id, p) {
                return (spent, true);
            }
            self.balloon.pages.pop();
            self.pages.release(p);
            self.vmstat.inc(Counter::BalloonDeflate);
            spent += self.cfg.costs.balloon_page_ns;
        }
        (spent, false)
    }

    /// The OOM notifier of a virtio balloon with `deflate_on_oom`: releases pages instead of a kill.
    /// Returns whether it freed any.
    pub(super) fn balloon_oom_deflate(&mut self, env: &mut Env) -> bool {
        if self.balloon.driver != (BalloonDriver::Virtio { deflate_on_oom: true }) || self.balloon.pages.is_empty() {
            return false;
        }
        let n = self.balloon.pages.len().min(VIRTIO_OOM_PAGES) as u64;
        self.deflate(n, 0, env);
        self.balloon.oom_deflations += 1;
        true
    }
}
