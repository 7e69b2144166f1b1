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
and restores everything it changes (events, buffer size, the mount, the swap file, the cgroup).
Run it on an otherwise idle machine: python3 bench/reclaimcost.py
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRACE = Path("/sys/kernel/tracing")
CG_ROOT = Path("/sys/fs/cgroup/memory")
EVENTS = ["mm_vmscan_lru_shrink_inactive", "mm_vmscan_memcg_reclaim_begin", "mm_vmscan_memcg_reclaim_end"]
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
    here = Path(__file__).resolve().parent
    work = Path(tempfile.mkdtemp(prefix="memvisor-reclaimcost-", dir="/var/tmp"))
    mounted = False
    old_buffer = None
    swap_on = False
    cg = CG_ROOT / f"memvisor-reclaimcost-{os.getpid()}"
    rows = []
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
        cg.mkdir()
        (cg / "memory.limit_in_bytes").write_text(str(64 << 20))
        scanned0 = vmstat_scanned()
        pid = os.fork()
        if pid == 0:
            (cg / "cgroup.procs").write_text(str(os.getpid()))
            os.execv(str(work / "sweep"), [str(work / "sweep"), str(96 * 256), "5"])
        _, _, usage = os.wait4(pid, 0)
        scanned = vmstat_scanned() - scanned0
        faults = int(re.search(r"^pgfault (\d+)", (cg / "memory.stat").read_text(), re.M).group(1))
        overall = (usage.ru_stime - faults * FAULT_S) / scanned * 1e6
        for limit_mib in (64, 91):
            (cg / "memory.limit_in_bytes").write_text(str(limit_mib << 20))
            (TRACE / "trace").write_text("")
            for e in EVENTS:
                (TRACE / "events/vmscan" / e / "enable").write_text("1")
            # The cgroup's OOM killer may end a run early (SIGKILL); its batches still count.
            subprocess.run([str(work / "sweep"), str(96 * 256), "5"],
                           preexec_fn=lambda: (cg / "cgroup.procs").write_text(str(os.getpid())))
            for e in EVENTS:
                (TRACE / "events/vmscan" / e / "enable").write_text("0")
            rows += list(batches((TRACE / "trace").read_text()))
            (cg / "memory.limit_in_bytes").write_text(str(1 << 40))
    finally:
        if (TRACE / "events").exists():
            for e in EVENTS:
                (TRACE / "events/vmscan" / e / "enable").write_text("0")
            (TRACE / "trace").write_text("")
            if old_buffer is not None:
                (TRACE / "buffer_size_kb").write_text(old_buffer)
        if cg.exists():
            cg.rmdir()
        if swap_on:
            subprocess.run(["swapoff", str(work / "swap")], check=False)
        if mounted:
            subprocess.run(["umount", str(TRACE)], check=False)
        subprocess.run(["rm", "-rf", str(work)], check=False)

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
