//! Active-memory sampling (Waldspurger, OSDI 2002, section 5.2): each period the host picks a small
//! random set of a VM's pages and invalidates their mappings; a guest touch of a sampled page traps
//! and is counted. The fraction touched by the period's end estimates the VM's active memory.
//! This mechanism only counts; the averages a policy keeps over periods are the policy's.

use super::{Entry, GuestMemory, Host, flags};
use crate::rng::Rng;

/// One VM's sample.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Pages sampled in the current period.
    pub pages: Vec<u32>,
    /// Of them, touched so far (one taken away, ballooned, swapped or shared, before its touch
    /// counts as not touched).
    pub touched: u64,
    /// The last complete period: pages sampled and touched.
    pub last: (u64, u64),
    /// Complete periods so far.
    pub periods: u64,
}

impl Host {
    /// Ends the current sampling period of every VM and starts the next with `size` random backed
    /// pages each (Waldspurger: 100).
    pub fn sample_period(&mut self, size: u32, now: u64, rng: &mut Rng, guests: &mut [&mut dyn GuestMemory]) {
        self.finish_reads(now);
        for (vm, g) in self.vms.iter_mut().zip(guests.iter_mut()) {
            let s = &mut vm.sample;
            if s.periods > 0 || !s.pages.is_empty() {
                s.last = (s.pages.len() as u64, s.touched);
                s.periods += 1;
            }
            for &p in &s.pages {
                let e = vm.p2m.get(p);
                if e.flags() & flags::SAMPLED != 0 {
                    vm.p2m.set(p, e.with_flag(flags::SAMPLED, false));
                }
            }
            s.pages.clear();
            s.touched = 0;
            for _ in 0..size {
                let Some(p) = super::hostswap::random_page(&vm.p2m, rng, |_, e: Entry| e.is_backed() && e.flags() == 0) else { break };
                if g.touched_after(p, now) {
                    // Touched after the sample was taken: it counts at once.
                    s.pages.push(p);
                    s.touched += 1;
                    continue;
                }
                vm.p2m.set(p, vm.p2m.get(p).with_flag(flags::SAMPLED, true));
                s.pages.push(p);
                g.invalidate(p);
            }
        }
    }
}
