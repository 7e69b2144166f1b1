#!/usr/bin/env python3
"""Traces how the kernel's memory cgroup limit reclaim writes a sweep out near the limit: the
evidence behind memvisor's fault-held block plug (README, "Validation against the Linux kernel").

A 96 MiB sweep (sweep.c, 5 passes) runs in a memory cgroup (v1) with a swap file at each limit given
(default 72 and 91 MiB) while the vmscan tracepoints record every limit reclaim call
(mm_vmscan_memcg_reclaim_begin/end, the batches of mm_vmscan_lru_shrink_inactive, each
mm_vmscan_write_folio) and the block layer records each plug flush (block_unplug: how many requests
it held). For each limit it prints the pages written and freed, how many calls wrote nothing, the
calls that went down to priority 0 (a burst: everything it met written, nothing submitted until the
plug filled), and the plug flushes by size.

Needs root, cgroup v1 memory, swap-file support and tracefs; it mounts tracefs if it is not mounted
and restores everything it changes (memcgsweep.py: events, buffer size, tracing_on, the mount, the
swap file, the cgroup).
Run it on an otherwise idle machine: python3 bench/reclaimtrace.py [LIMIT_MIB ...]
"""

import re
import statistics
import sys
from collections import Counter

from memcgsweep import Bench

EVENTS = [
    "vmscan/mm_vmscan_memcg_reclaim_begin",
    "vmscan/mm_vmscan_memcg_reclaim_end",
    "vmscan/mm_vmscan_lru_shrink_inactive",
    "vmscan/mm_vmscan_write_folio",
    "block/block_unplug",
]
LINE = re.compile(r"\s(\d+\.\d+): (\w+):(.*)")


def calls(trace: str):
    """Each limit reclaim call of the trace: (pages scanned, freed, written, lowest priority), and
    the plug flushes by the number of requests each held."""
    out, unplugs, cur = [], Counter(), None
    for line in trace.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        event, rest = m.group(2), m.group(3)
        if event == "block_unplug":
            unplugs[int(rest.split()[-1])] += 1
        elif event == "mm_vmscan_memcg_reclaim_begin":
            cur = [0, 0, 0, 12]
        elif cur is None:
            continue
        elif event == "mm_vmscan_lru_shrink_inactive":
            f = {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", rest)}
            cur[0] += f["nr_scanned"]
            cur[1] += f["nr_reclaimed"]
            cur[3] = min(cur[3], f["priority"])
        elif event == "mm_vmscan_write_folio":
            cur[2] += 1
        elif event == "mm_vmscan_memcg_reclaim_end":
            out.append(tuple(cur))
            cur = None
    return out, unplugs


def main() -> int:
    limits = [int(a) for a in sys.argv[1:]] or [72, 91]
    with Bench("reclaimtrace", EVENTS) as bench:
        results = [(limit_mib, *calls(bench.sweep(limit_mib, traced=True)[1])) for limit_mib in limits]

    for limit_mib, rows, unplugs in results:
        written, freed = sum(r[2] for r in rows), sum(r[1] for r in rows)
        bursts = [r[2] for r in rows if r[3] == 0 and r[2] > 0]
        print(f"{limit_mib} MiB: {len(rows)} reclaim calls wrote {written:,} pages and freed {freed:,}; "
              f"{sum(r[2] == 0 for r in rows)} calls wrote nothing")
        if bursts:
            print(f"  {len(bursts)} calls went down to priority 0 writing {min(bursts):,}..{max(bursts):,} pages "
                  f"(median {statistics.median(bursts):,.0f})")
        print("  plug flushes by requests held: " + ", ".join(f"{n} x{c}" for n, c in sorted(unplugs.items(), reverse=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
