//! The OOM killer (`mm/oom_kill.c`): when reclaim can free nothing and nothing is in flight, the
//! OOM notifiers run first (a virtio balloon with `deflate_on_oom` gives pages back); if none freed
//! anything, kill the process with the most memory (resident plus swapped, `oom_badness`). A memory
//! cgroup at its limit kills among its own processes (`mem_cgroup_out_of_memory`), with no notifiers.

use super::{Counter, Env, Guest};

/// What an out-of-memory situation ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Oom {
    /// An OOM notifier freed memory; nobody was killed.
    Freed,
    /// This process was killed.
    Killed(u32),
    /// There was nothing to kill.
    NoVictim,
}

impl Guest {
    /// Frees memory through the OOM notifiers, or kills the biggest live process (of cgroup
    /// `memcg` when one is at its limit).
    pub(super) fn oom_kill(&mut self, now: u64, memcg: Option<u8>, env: &mut Env) -> Oom {
        if memcg.is_none() && self.balloon_oom_deflate(env) {
            return Oom::Freed;
        }
        let Some(victim) = self
            .procs
            .iter()
            .filter(|p| !p.ended() && p.state != super::ProcState::New && memcg.is_none_or(|v| p.memcg == v))
            .max_by_key(|p| (p.mm.rss + p.mm.swapents, std::cmp::Reverse(p.pid)))
            .map(|p| p.pid)
        else {
            return Oom::NoVictim;
        };
        let p = &self.procs[victim as usize];
        let msg = format!(
            "Out of memory: killed process {} ({}) total-vm:{}kB, anon-rss:{}kB, swap:{}kB",
            victim,
            p.name,
            p.mm.pte.len() * 4,
            p.mm.rss * 4,
            p.mm.swapents * 4
        );
        self.log.push((now, msg));
        self.vmstat.inc(Counter::OomKill);
        if let Some(v) = memcg {
            self.memcgs[v as usize].oom_kill += 1;
        }
        self.throttled.retain(|&q| q != victim);
        self.exit_process(victim, now, true, env);
        Oom::Killed(victim)
    }
}
