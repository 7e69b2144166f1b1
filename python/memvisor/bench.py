"""Benchmarks: simulated page touches per real second.

(a) touches that hit resident pages, accounted in bulk (the default Linux mode: a sweep over
    resident pages costs a bitmap scan, not a step per reference) and one at a time (exact-LRU
    mode, where every reference moves its page in the recency list);
(b) a guest under steady reclaim (the sweep is larger than memory, so pages fault in and out).

Each figure is a whole run's simulated touches divided by its wall-clock time, on one core.
"""

from __future__ import annotations

from dataclasses import dataclass

from memvisor import _core
from memvisor.api import simulate

SCENARIO = """
name = "bench-{name}"
duration = "{duration}"
[host]
memory = "8GiB"
sample_interval = "{duration}"
[[datastore]]
name = "ssd"
device = "ssd"
[[vm]]
name = "g"
memory = "{memory}"
datastore = "ssd"
replacement = "{mode}"
{extra}
workload = {{ kind = "stress", pages = {pages} }}
"""


@dataclass
class BenchResult:
    name: str
    what: str
    sim_s: float
    touches: int
    faults: int
    wall_s: float

    @property
    def touches_per_s(self) -> float:
        return self.touches / self.wall_s


CASES = [
    # (name, what, mode, memory, pages, sim duration, extra)
    ("resident-bulk", "(a) resident hits, Linux mode (bulk accounting)", "linux", "1GiB", 61036, "60s", ""),
    ("resident-each", "(a) resident hits, exact-LRU mode (one at a time)", "exact-lru", "1GiB", 61036, "2s", ""),
    ("steady-reclaim", "(b) sweep 1.5x memory, Linux mode (steady reclaim)", "linux", "256MiB", 70000, "10s", ""),
]


def run_bench(quick: bool = False) -> list[BenchResult]:
    out = []
    for name, what, mode, memory, pages, duration, extra in CASES:
        if quick:
            duration = "1s"
        text = SCENARIO.format(name=name, duration=duration, memory=memory, mode=mode, pages=pages, extra=extra)
        (s,) = _core.load(text, f"bench:{name}")
        r = simulate(s, step_s=1e9)
        vm = r.summary["vms"][0]
        touches = sum(p["touches"] for p in vm["processes"])
        out.append(BenchResult(name, what, r.summary["sim_time_s"], touches, int(vm["counters"]["pgfault"]), r.wall_s))
    return out


@dataclass
class KsmBenchResult:
    pages: int
    full_scans: int
    visited: int
    wall_s: float

    @property
    def ns_per_page(self) -> float:
        return self.wall_s * 1e9 / self.visited


def run_ksm_bench(quick: bool = False) -> KsmBenchResult:
    """The simulated KSM scanner's real time per page it visits (processed or skipped by smart
    scan): 64 processes of 4,096 pages (a quarter zero, half drawn from a 2,048-page image, a
    quarter unique), default settings, run for 23 full scans (3 when quick); the pages are handed
    over once, so set-up is included. Median of 3."""
    import time
    from statistics import median

    from memvisor.validate_ksm import common, unique

    procs = [[0] * 1024 + [common(k) for k in range(2048)] + [unique(p, i) for i in range(1024)] for p in range(64)]
    scans = 3 if quick else 23
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        r = _core.ksm_scan(procs, {"full_scans": scans})
        times.append(time.perf_counter() - t0)
    return KsmBenchResult(sum(map(len, procs)), r["full_scans"], r["pages_scanned"] + r["pages_skipped"], median(times))


@dataclass
class TpsBenchResult:
    visited: int
    wall_on_s: float
    wall_off_s: float

    @property
    def ns_per_page(self) -> float:
        return (self.wall_on_s - self.wall_off_s) * 1e9 / self.visited


TPS_SCENARIO = """
name = "bench-tps"
duration = "{duration}"
[host]
memory = "8GiB"
profile = "{profile}"
sample_interval = "{duration}"
page_sharing = {on}
{scan}
[[datastore]]
name = "d"
device = "ssd"
[[vm]]
name = "g"
count = 4
memory = "1GiB"
image = "img"
image_common = "32MiB"
zero_memory_at = "0s"
datastore = "d"
workload = {{ kind = "idle", footprint = "1MiB" }}
"""

# How each host's scanner is set to cover the four guests (1,048,576 pages) every 10 s: ESX's by
# its scan time, ksmd by its batch (26,215 pages per 250 ms).
_SCANNERS = {"esx": 'share_scan_time = "10s"', "kvm": "ksm = { pages_to_scan = 26215, sleep_millisecs = 250 }"}


def run_tps_bench(quick: bool = False, profile: str = "esx") -> TpsBenchResult:
    """A simulated host's page-sharing scanner (ESX's on `esx`, ksmd on `kvm`) in real time per
    page it reads, where a page's hash is its content identity (memoised: no bytes are hashed):
    four idle 1 GiB guests that zeroed their memory and share an image, each page read about
    every 10 s for 200 s (20 s when quick), less the same run with sharing off. Medians of 3."""
    import time
    from statistics import median

    duration = "20s" if quick else "200s"
    walls, visited = {}, 0
    for on in (True, False):
        scan = _SCANNERS[profile] if on else ""
        text = TPS_SCENARIO.format(duration=duration, on=str(on).lower(), scan=scan, profile=profile)
        (s,) = _core.load(text, "bench:tps")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            r = simulate(s, step_s=1e9)
            times.append(time.perf_counter() - t0)
        walls[on] = median(times)
        if on:
            visited = int(sum(vm["counters"]["pshare_scanned_pages"] for vm in r.summary["vms"]))
    return TpsBenchResult(visited, walls[True], walls[False])


@dataclass
class DenaliBenchResult:
    vms: int
    wall_s: float
    events: int
    rss_mib: float
    rss_loaded_mib: float
    accounted_bytes_per_vm: float
    metadata_mib: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s

    @property
    def sim_mib(self) -> float:
        """Peak memory of the run beyond the process with the scenario loaded."""
        return self.rss_mib - self.rss_loaded_mib


#: The child's own peak resident memory, KiB: VmHWM, its address space's high-water mark. Not
#: getrusage's ru_maxrss, which Linux carries across execve: a child started by `memvisor bench`
#: after the other benchmarks reported the parent's peak (about 170 MiB) as its own, both children
#: alike, so the run's share came out as 0.
_PEAK_RSS = """
def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
"""

_DENALI_CHILD = _PEAK_RSS + """
import json, sys, time
from memvisor import _core
from memvisor.api import simulate
(s,) = [x for x in _core.load(_core.case_text("denali-scale"), "denali-scale", []) if x.variant == sys.argv[1]]
if sys.argv[2] == "load-only":
    print(json.dumps({"rss_kib": peak_kib()}))
    sys.exit(0)
t0 = time.perf_counter()
r = simulate(s, step_s=1e9)
wall = time.perf_counter() - t0
row = r.summary["vms"][0]["report"]
print(json.dumps({"wall": wall, "events": row["sim_events"], "bytes": row["sim_bytes_per_paged_out_vm"], "meta": row["metadata_MiB"],
                  "rss_kib": peak_kib()}))
"""


def run_denali_bench() -> DenaliBenchResult:
    """The 10,000-VM point of denali-scale (list pool): its wall time, simulated events per real
    second, and its peak resident memory against a process that only loads the scenario, each in
    a fresh process (one run: the point is deterministic and takes about a second)."""
    import json
    import subprocess
    import sys

    def child(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-c", _DENALI_CHILD, *args], check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    loaded, big = child("vms-10000-list", "load-only"), child("vms-10000-list", "run")
    return DenaliBenchResult(10_000, big["wall"], int(big["events"]), big["rss_kib"] / 1024, loaded["rss_kib"] / 1024, big["bytes"], big["meta"])


@dataclass
class LiveRoundResult:
    vms: int
    rounds: int
    accelerator: str
    round_ms_median: float
    round_ms_p90: float
    observe_ms_median: float
    decisions: int


# Each --live guest's memory (the README's 10-guest figure used this size).
LIVE_GUEST_MIB = 128


def run_live_rounds(n: int, rounds: int = 50, policy: str = "mom", memory_mib: int = LIVE_GUEST_MIB) -> LiveRoundResult:
    """One observe/decide/apply round over `n` real guests (QEMU), `rounds` times: wall time of
    `Controller.tick` (QMP round trips, cgroup and /proc reads, the policy, balloon commands), and
    of `observe` alone. The host is given a budget below what the guests hold, so that the policy
    keeps deciding and applying."""
    import shutil
    import statistics
    import tempfile
    import time

    from memvisor.live import launch
    from memvisor.live.livehost import LiveHost, VmSpec

    work = tempfile.mkdtemp(prefix="memvisor-bench-live-")
    guests = []
    try:
        for i in range(n):
            guests.append(launch.Guest(f"g{i}", work, memory_mib))
        for g in guests:
            g.wait_ready(300)
        host = LiveHost([VmSpec(g.name, g.qmp) for g in guests], host_memory=n * memory_mib << 20)
        try:
            ctl = _core.Controller(policy)
            ctl.tick(host)  # the first round attaches (memory size, stats polling)
            ticks, observes, decisions = [], [], 0
            for _ in range(rounds):
                t0 = time.perf_counter()
                decisions += len(ctl.tick(host))
                ticks.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                host.observe()
                observes.append(time.perf_counter() - t0)
        finally:
            host.close()
    finally:
        for g in guests:
            g.stop()
        shutil.rmtree(work, ignore_errors=True)
    ticks.sort()
    return LiveRoundResult(
        n, rounds, "KVM" if launch.kvm_usable() else "TCG",
        statistics.median(ticks) * 1e3, ticks[int(0.9 * (len(ticks) - 1))] * 1e3, statistics.median(observes) * 1e3, decisions,
    )
