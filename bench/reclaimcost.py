#!/usr/bin/env python3
"""Measures the kernel's CPU cost of reclaim per page, the source of memvisor's default
costs.reclaim_scan (and of the split into reclaim_scan, reclaim_free and reclaim_pageout).

A 96 MiB sweep (sweep.c) runs 5 passes in a memory cgroup (v1) with a swap file. First, untraced at
64 MiB: its system time, less its faults at 1.5 us each (faultcost.c), per page scanned: the cost of
reclaim per page scanned, all outcomes together. Then at 64 and 91 MiB
while the vmscan tracepoints record every batch of limit reclaim (mm_vmscan_lru_shrink_inactive:
pages scanned, freed, activated, kept; the rest of a batch had its write started). A batch's time is
the gap since the previous event of the same reclaim call. The costs are the medians, per page, of
the batches whose 32 pages all met one fate: kept or activated (looked at only), freed, written.

Needs root, cgroup v1 memory, swap-file support and tracefs; it mounts tracefs if it is not mounted
and restores everything it changes (memcgsweep.py: events, buffer size, tracing_on, the mount, the
swap file, the cgroup).
Run it on an otherwise idle machine: python3 bench/reclaimcost.py
"""

import re
import statistics
import sys
from pathlib import Path

from memcgsweep import Bench

EVENTS = ["vmscan/mm_vmscan_lru_shrink_inactive", "vmscan/mm_vmscan_memcg_reclaim_begin", "vmscan/mm_vmscan_memcg_reclaim_end"]
BATCH = 32  # SWAP_CLUSTER_MAX
FAULT_S = 1.5e-6  # an anonymous fault on this machine (bench/faultcost.c)


def vmstat_scanned() -> int:
    """Pages reclaim has scanned, machine-wide."""
    v = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return int(v["pgscan_anon"]) + int(v["pgscan_file"])


def batches(trace: str):
    """(microseconds, kept or activated, freed, written) of each reclaim batch of the trace."""
    t_prev = None
    for line in trace.splitlines():
        m = re.search(r"\s(\d+\.\d+): (mm_vmscan_\w+):", line)
        if not m:
            continue
        t, event = float(m.group(1)), m.group(2)
        if event == "mm_vmscan_memcg_reclaim_begin":
            t_prev = t
        elif event == "mm_vmscan_memcg_reclaim_end":
            t_prev = None
        elif t_prev is not None:
            f = {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", line)}
            looked = f["nr_activate_anon"] + f["nr_activate_file"] + f["nr_ref_keep"]
            freed = f["nr_reclaimed"]
            yield (t - t_prev) * 1e6, looked, freed, f["nr_scanned"] - looked - freed
            t_prev = t


def main() -> int:
    rows = []
    with Bench("reclaimcost", EVENTS) as bench:
        scanned0 = vmstat_scanned()
        usage, _ = bench.sweep(64, traced=False)
        scanned = vmstat_scanned() - scanned0
        overall = (usage.ru_stime - bench.stat("pgfault") * FAULT_S) / scanned * 1e6
        for limit_mib in (64, 91):
            rows += list(batches(bench.sweep(limit_mib, traced=True)[1]))

    def per_page(pick):
        v = [us / BATCH for us, *fates in rows if pick(*fates)]
        return (statistics.median(v), len(v)) if v else (float("nan"), 0)

    looked, n1 = per_page(lambda k, f, w: k == BATCH)
    freed, n2 = per_page(lambda k, f, w: f == BATCH)
    written, n3 = per_page(lambda k, f, w: w == BATCH)
    print(f"untraced at 64 MiB: {overall:.2f} us of system time per page scanned (costs.reclaim_scan, all outcomes)")
    print(f"{len(rows)} reclaim batches; per page, medians of batches whose {BATCH} pages met one fate:")
    print(f"  looked at (kept or activated): {looked:.2f} us ({n1} batches)")
    print(f"  freed:                         {freed:.2f} us ({n2} batches)")
    print(f"  written (write started):       {written:.2f} us ({n3} batches)")
    print(f"split: reclaim_scan = {looked:.2f} us, reclaim_free = {freed - looked:.2f} us, reclaim_pageout = {written - looked:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
