//! Counters sampled into a time series: one row per VM per sample, columns named as operators know
//! them (/proc/vmstat, /proc/meminfo, esxtop) with their unit in the name. esxtop's rates (SWR/s,
//! ZIP/s, ...) are kept as cumulative page counts (`SWR_pages`, ...): a rate is their difference
//! over an interval, as for the vmstat counters.

pub mod denali;

use crate::backend::SimulatedHost;
use crate::guest::{Counter, LruList, NR_COUNTERS};
use crate::units::PAGE_SIZE;

/// Gauge columns after the vmstat counters.
pub const GAUGES: &[&str] = &[
    "nr_free_pages",
    "MemTotal_KiB",
    "MemFree_KiB",
    "Active_anon_KiB",
    "Inactive_anon_KiB",
    "Active_file_KiB",
    "Inactive_file_KiB",
    "Dirty_KiB",
    "Writeback_KiB",
    "SwapTotal_KiB",
    "SwapUsed_KiB",
    "Committed_AS_KiB",
    "memory_stall_ms",
    "GRANT_MiB",
    "MCTLSZ_MiB",
    "MCTLTGT_MiB",
    "MCTLMAX_MiB",
    "SWCUR_MiB",
    "SWTGT_MiB",
    "SWR_pages",
    "SWW_pages",
    "CACHESZ_MiB",
    "CACHEUSD_MiB",
    "ZIP_saved_MiB",
    "ZIP_pages",
    "UNZIP_pages",
    "zip_evicted_pages",
    "swap_out_cancelled_pages",
    "reclaim_shared_pages",
    "balloon_inflated_pages",
    "balloon_deflated_pages",
    "host_wait_ms",
    "blocked_ms",
    "Available_MiB",
    "Standby_MiB",
    "Modified_MiB",
    "Working_Set_MiB",
    "low_memory",
    "Pool_Nonpaged_balloon_KiB",
    "LOH_MiB",
    "gen0_collections",
    "gen1_collections",
    "gen2_collections",
    "datastore_queue_wait_ms",
    "SHRD_MiB",
    "ZERO_MiB",
    "SHRDSVD_MiB",
    "COWH_MiB",
    "PSHARE_common_MiB",
    "pshare_scanned_pages",
    "pshare_cow_breaks",
    "pshare_cpu_ms",
    "tmem_eph_pages",
    "tmem_eph_max_pages",
    "tmem_pers_pages",
    "tmem_pers_max_pages",
    "tmem_cpu_ms",
    "TMEM_eph_pages",
    "TMEM_eph_max_pages",
    "TMEM_frames",
    "TMEM_frames_max",
    "pcpu_run_ms",
    "pcpu_steal_ms",
];

/// All numeric columns, in row order.
pub fn columns() -> Vec<&'static str> {
    Counter::COLUMNS.iter().chain(GAUGES).copied().collect()
}

/// Numeric values of VM `i`'s row, in `columns()` order.
pub fn row(sim: &SimulatedHost, i: usize) -> Vec<f64> {
    let (g, h) = (&sim.guests()[i], &sim.host().vms()[i]);
    let kib = |pages: u64| (pages * PAGE_SIZE / 1024) as f64;
    let mib = |pages: u64| (pages * PAGE_SIZE) as f64 / (1 << 20) as f64;
    let mut v: Vec<f64> = g.vmstat.values().iter().map(|&c| c as f64).collect();
    debug_assert_eq!(v.len(), NR_COUNTERS);
    v.extend([
        g.pages.nr_free() as f64,
        kib(g.mem_total()),
        kib(g.pages.nr_free()),
        kib(g.lru_len(LruList::ActiveAnon)),
        kib(g.lru_len(LruList::InactiveAnon)),
        kib(g.lru_len(LruList::ActiveFile)),
        kib(g.lru_len(LruList::InactiveFile)),
        kib(g.nr_dirty()),
        kib(g.nr_writeback()),
        kib(g.swap_total()),
        kib(g.swap_used()),
        kib(g.committed_as()),
        g.memory_stall_ns() as f64 / 1e6,
        mib(h.granted),
        mib(h.ballooned),
        mib(h.balloon_target),
        mib(h.balloon_max),
        mib(h.swapped),
        mib(h.swap_target),
        h.stats.swap_in as f64,
        h.stats.swap_out as f64,
        mib(h.zip().capacity()) / 2.0,
        mib(h.zip().used()) / 2.0,
        // Each compressed page keeps half a page's slot: it saves the other half.
        mib(h.zip().used()) / 2.0,
        h.stats.zip as f64,
        h.stats.unzip as f64,
        // Compressed pages a full cache pushed to the swap file; swap-outs the guest's touch
        // cancelled mid-write; pages host reclaim shared instead of compressing or swapping; pages
        // the balloon driver handed over and took back (all cumulative).
        h.stats.zip_evicted as f64,
        h.stats.swap_out_cancelled as f64,
        h.stats.shared_instead as f64,
        h.stats.ballooned_total as f64,
        h.stats.unballooned_total as f64,
        h.stats.host_wait.ns_at(sim.now()) as f64 / 1e6,
        sim.blocked_ns(i) as f64 / 1e6,
    ]);
    // perfmon's Memory counters exist on a Windows guest only; elsewhere they are missing (NaN),
    // not zero. The working set is also a Linux guest's processes' RSS.
    let windows = g.windows();
    let perfmon = |x: f64| if windows { x } else { f64::NAN };
    v.extend([
        perfmon(mib(g.available())),
        perfmon(mib(g.lru_len(LruList::Standby))),
        perfmon(mib(g.lru_len(LruList::Modified))),
        mib(g.working_set()),
        perfmon(g.low_memory() as u8 as f64),
        perfmon(g.balloon_pool_bytes() as f64 / 1024.0),
    ]);
    // Missing rather than zero where no managed process runs: no collection is not zero collections.
    match g.clr_heap() {
        Some(clr) => v.extend([(clr.loh_bytes as f64) / (1 << 20) as f64, clr.gen0 as f64, clr.gen1 as f64, clr.gen2 as f64]),
        None => v.extend([f64::NAN; 4]),
    }
    // The VM's datastore's device: time requests (of every VM on it) waited in its queue, so far.
    v.push(sim.datastores()[g.datastore() as usize].device.stats().queue_wait_ns as f64 / 1e6);
    // Page sharing (esxtop's SHRD, ZERO, SHRDSVD, COWH; the host's PSHARE common on every row).
    match sim.host().sharing() {
        Some(s) => {
            let st = s.vm(i as u32);
            v.extend([
                mib(st.shared),
                mib(st.zero),
                sim.host().shared_saved(i as u32) * PAGE_SIZE as f64 / (1 << 20) as f64,
                mib(st.hints),
                mib(s.frames_in_use()),
                st.scanned as f64,
                st.cow_breaks as f64,
                st.cpu_ns as f64 / 1e6,
            ]);
        }
        None => v.extend([0.0; 8]),
    }
    // Transcendent memory (`xl tmem-list`: the client's Ec/Em and persistent pages, then the
    // host's Ec/Em and frames on every row).
    match sim.host().tmem() {
        Some(t) => {
            let c = t.client(i as u32);
            v.extend([c.eph_pages, c.eph_pages_max, c.pers_pages, c.pers_pages_max].map(|x| x as f64));
            v.push(c.cpu_ns as f64 / 1e6);
            v.extend([t.stats.eph_pages, t.stats.eph_pages_max, t.stats.frames, t.stats.frames_max].map(|x| x as f64));
        }
        None => v.extend([0.0; 9]),
    }
    // Physical CPU time the VM's vCPUs used, and spent runnable waiting for a CPU (Xen's steal
    // time); both 0 when the host does not model its CPUs (`host.cpus` unset).
    let (run, steal) = sim.pcpu_ns(i);
    v.extend([run as f64 / 1e6, steal as f64 / 1e6]);
    v
}

/// Most rows a time series may hold. It is kept in memory until the run ends, a row of about 90
/// numbers per VM and sample, so 5 million rows is about 4 GB [chosen: a sixth of this 24 GiB
/// machine, leaving room for the guests' own state]. A run whose length is known is refused
/// before it starts (`scenario`); one without a duration is stopped when it gets there.
pub const MAX_SERIES_ROWS: u64 = 5_000_000;

/// The sampled series, column-oriented.
#[derive(Clone, Debug, Default)]
pub struct TimeSeries {
    /// Names of the value columns (`columns()` for a VMM host, the Denali host's own otherwise).
    pub columns: Vec<&'static str>,
    /// Sample times, seconds.
    pub time_s: Vec<f64>,
    /// VM of each row.
    pub vm: Vec<String>,
    /// The host's memory state at each row, as the policy last declared it (ESX high, soft, hard,
    /// low; empty for policies without states).
    pub state: Vec<&'static str>,
    /// Values; `values[c][r]` is column `c` of row `r`.
    pub values: Vec<Vec<f64>>,
}

impl TimeSeries {
    /// The values as bit patterns, the form in which two runs' series are the same run: a missing
    /// counter is NaN, which equals nothing, not even itself.
    pub fn bits(&self) -> Vec<Vec<u64>> {
        self.values.iter().map(|c| c.iter().map(|x| x.to_bits()).collect()).collect()
    }

    /// Appends one row per VM.
    pub fn sample(&mut self, now: u64, sim: &SimulatedHost) {
        if self.values.is_empty() {
            self.columns = columns();
            self.values = vec![Vec::new(); self.columns.len()];
        }
        for (i, g) in sim.guests().iter().enumerate() {
            self.time_s.push(now as f64 / 1e9);
            self.vm.push(g.cfg.name.clone());
            self.state.push(sim.memory_state());
            for (c, x) in row(sim, i).into_iter().enumerate() {
                self.values[c].push(x);
            }
        }
    }

    /// Refuses `more` rows (one sample of `more` VMs, every `interval_ns`) that would take the
    /// series past `MAX_SERIES_ROWS`, saying when and what to change.
    pub fn make_room(&self, more: usize, now: u64, interval_ns: u64) -> Result<(), String> {
        if (self.len() + more) as u64 <= MAX_SERIES_ROWS {
            return Ok(());
        }
        Err(format!(
            "at {} s the time series of {more} VMs sampled every {} s passed {MAX_SERIES_ROWS} rows, the most kept in \
             memory: the run is stopped; give host.sample_interval a longer interval or the scenario a duration",
            now as f64 / 1e9,
            interval_ns as f64 / 1e9
        ))
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.time_s.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.time_s.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_stopped_at_its_bound_not_after() {
        let full = TimeSeries { time_s: vec![0.0; MAX_SERIES_ROWS as usize - 3], ..Default::default() };
        assert!(full.make_room(3, 0, 1_000_000).is_ok(), "up to the bound");
        let e = full.make_room(4, 7_500_000_000, 1_000_000).unwrap_err();
        assert!(e.starts_with("at 7.5 s the time series of 4 VMs sampled every 0.001 s passed 5000000 rows"), "{e}");
    }
}
