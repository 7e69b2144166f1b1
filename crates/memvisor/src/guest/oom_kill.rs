//! The OOM killer (`mm/oom_kill.c`): when reclaim can free nothing and nothing is in flight, kill
//! the process with the most memory (resident plus swapped, `oom_badness`).

use super::{Counter, Env, Guest};

impl Guest {
    /// Kills the biggest live process; returns its pid, or `None` if there is none.
    pub(super) fn oom_kill(&mut self, now: u64, _env: &mut Env) -> Option<u32> {
        let victim = self
            .procs
            .iter()
            .filter(|p| !p.ended() && p.state != super::ProcState::New)
            .max_by_key(|p| (p.mm.rss + p.mm.swapents, std::cmp::Reverse(p.pid)))?
            .pid;
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
        self.throttled.retain(|&q| q != victim);
        self.exit_process(victim, now, true);
        Some(victim)
    }
}
