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
and restores everything it changes (events, buffer size, tracing_on, the mount, the swap file, the
cgroup).
Run it on an otherwise idle machine: python3 bench/reclaimtrace.py [LIMIT_MIB ...]
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

TRACE = Path("/sys/kernel/tracing")
CG_ROOT = Path("/sys/fs/cgroup/memory")
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
    here = Path(__file__).resolve().parent
    work = Path(tempfile.mkdtemp(prefix="memvisor-reclaimtrace-", dir="/var/tmp"))
    mounted, old_buffer, old_on, swap_on = False, None, None, False
    cg = CG_ROOT / f"memvisor-reclaimtrace-{os.getpid()}"
    results = []
    try:
        if not (TRACE / "events").exists():
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACE)], check=True)
            mounted = True
        subprocess.run(["cc", "-O2", "-o", str(work / "sweep"), str(here / "sweep.c")], check=True)
        swap = work / "swap"
        subprocess.run(["dd", "if=/dev/zero", f"of={swap}", "bs=1M", "count=256", "status=none"], check=True)
        swap.chmod(0o600)
        subprocess.run(["mkswap", "-q", str(swap)], check=True)
        subprocess.run(["swapon", "-p", "32767", str(swap)], check=True)
        swap_on = True
        old_buffer = (TRACE / "buffer_size_kb").read_text().split()[0]
        (TRACE / "buffer_size_kb").write_text("262144")
        old_on = (TRACE / "tracing_on").read_text().strip()
        (TRACE / "tracing_on").write_text("1")
        cg.mkdir()
        for limit_mib in limits:
            (cg / "memory.limit_in_bytes").write_text(str(limit_mib << 20))
            (TRACE / "trace").write_text("")
            for e in EVENTS:
                (TRACE / "events" / e / "enable").write_text("1")
            subprocess.run([str(work / "sweep"), str(96 * 256), "5"],
                           preexec_fn=lambda: (cg / "cgroup.procs").write_text(str(os.getpid())))
            for e in EVENTS:
                (TRACE / "events" / e / "enable").write_text("0")
            results.append((limit_mib, *calls((TRACE / "trace").read_text())))
            (cg / "memory.limit_in_bytes").write_text(str(1 << 40))
    finally:
        if (TRACE / "events").exists():
            for e in EVENTS:
                (TRACE / "events" / e / "enable").write_text("0")
            (TRACE / "trace").write_text("")
            if old_buffer is not None:
                (TRACE / "buffer_size_kb").write_text(old_buffer)
            if old_on is not None:
                (TRACE / "tracing_on").write_text(old_on)
        if cg.exists():
            cg.rmdir()
        if swap_on:
            subprocess.run(["swapoff", str(work / "swap")], check=False)
        if mounted:
            subprocess.run(["umount", str(TRACE)], check=False)
        subprocess.run(["rm", "-rf", str(work)], check=False)

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
