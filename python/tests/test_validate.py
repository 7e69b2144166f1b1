"""validate linux-paging: the clean refusal, and (opt-in, needs root) the comparison itself."""

import json
import os
import shutil
import subprocess
from importlib import resources

import pytest

from conftest import memvisor as run_cli
from memvisor.validate import band, classify_exit


def test_without_a_memory_cgroup_it_says_what_is_missing(tmp_path):
    r = run_cli("validate", "linux-paging", "--cgroup-root", str(tmp_path), "--out", "v", cwd=tmp_path)
    assert r.returncode == 77
    lines = r.stderr.splitlines()
    assert lines[0] == "error: validate linux-paging cannot run on this machine; it needs:"
    assert any(line.startswith("  - a memory cgroup controller") for line in lines[1:]), r.stderr
    assert r.stderr.count("error:") == 1
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("returncode, oom_kills, outcome", [
    (0, 0, "ok"),
    (-9, 1, "oom-killed"),
    (-9, 2, "oom-killed"),
    # A status derived from the data, or any other failure, is the program's error, not an OOM kill.
    (3, 0, "error"),
    (3, 1, "error"),
    (1, 0, "error"),
    # SIGKILL with no OOM kill in the cgroup: someone else killed it.
    (-9, 0, "error"),
    (-11, 1, "error"),
])
def test_only_sigkill_with_an_oom_kill_in_the_cgroup_counts_as_oom(returncode, oom_kills, outcome):
    assert classify_exit(returncode, oom_kills) == outcome


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_pagetouch_exits_0_whatever_the_data(tmp_path):
    exe = tmp_path / "pagetouch"
    src = resources.files("memvisor") / "data" / "pagetouch.c"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    # Every load of the random pattern reads 1 (each page was stored to once), so the sum of the
    # loads is TOUCHES mod 256: 257 and 1025 make it 1, 1000 does not; the seed must not matter.
    for touches in (1000, 257, 1025):
        for seed in range(1, 51):
            p = subprocess.run([str(exe), "random", "64", str(touches), str(seed)], capture_output=True)
            assert p.returncode == 0, (touches, seed, p.returncode, p.stderr)
    for seed in range(1, 11):
        assert subprocess.run([str(exe), "zipf", "64", "1000", str(seed)]).returncode == 0
    for passes in (1, 2, 3):
        assert subprocess.run([str(exe), "stress", "64", str(passes)]).returncode == 0
    assert subprocess.run([str(exe), "bogus", "64", "1"], capture_output=True).returncode == 2


def test_the_band_is_the_kernels_spread_widened_by_a_tenth_of_its_median():
    assert band([100, 110, 120]) == pytest.approx((89.0, 131.0))
    assert band([]) is None


def test_an_unknown_pattern_is_refused_before_anything_runs(tmp_path):
    r = run_cli("validate", "linux-paging", "--patterns", "stress,sawtooth", "--out", "v", cwd=tmp_path)
    assert r.returncode == 2
    assert "Invalid value for '--patterns': sawtooth" in r.stderr and "stress, random, zipf" in r.stderr
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("args, expect", [
    (["--limits", "24MiB,40MiB,24MiB"], "--limits: 24MiB given more than once"),
    (["--patterns", "stress,zipf,stress"], "--patterns: stress given more than once"),
])
def test_a_point_given_twice_is_refused_before_anything_runs(tmp_path, args, expect):
    """A limit or pattern given twice would run twice and count its miss twice against the
    target's "at most one miss per pattern"."""
    # (--cgroup-root: were the lists accepted, the validation would refuse to run, not run.)
    r = run_cli("validate", "linux-paging", *args, "--cgroup-root", ".", "--out", "v", cwd=tmp_path)
    assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "v").exists()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_random_and_zipf_major_faults_fall_in_the_kernels_band(tmp_path):
    r = run_cli("validate", "linux-paging", "--out", "v", "--working-set", "48MiB", "--limits", "12MiB,24MiB,36MiB",
                "--patterns", "random,zipf", "--repeats", "3", cwd=tmp_path)
    if r.returncode == 77:
        pytest.skip(r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "v" / "summary.json").read_text())
    assert summary["target_met"], summary["misses_per_pattern"]
    assert {row["pattern"] for row in summary["rows"]} == {"random", "zipf"}


SETTINGS = {"cgroup_version": 1, "vm.page-cluster": 3, "vm.swappiness": 60}
#: 96 MiB in pages, the validation's default working set.
PAGES = 24576


def _whole_guest_sweep(replacement: str, passes: int = 4) -> dict:
    """A sweep 8 % larger than a whole guest's free memory (the Debian-under-QEMU measurement), its
    swap on a RAM device as that guest's was on zram: writes complete at once, so reclaim leaves no
    window in which the sweep could come back to a page before its write completes."""
    from memvisor import _core
    from memvisor.api import simulate

    guest = _core.guest_pages_for(int(PAGES / 1.08), replacement)
    text = f"""name = "sweep"
[host]
memory = "{guest + 256} pages"
[[datastore]]
name = "d"
device = "ram"
[[vm]]
name = "g"
memory = "{guest} pages"
kernel_reserved = "0B"
overhead = "0B"
transparent_hugepage = "never"
replacement = "{replacement}"
datastore = "d"
swap = "{2 * PAGES} pages"
workload = {{ kind = "stress", pages = {PAGES}, passes = {passes} }}
"""
    (s,) = _core.load(text, "sweep")
    return simulate(s, step_s=float("inf")).summary["vms"][0]["counters"]


@pytest.mark.parametrize("replacement", ["linux", "exact-lru"])
def test_a_sweep_slightly_larger_than_a_whole_guest_faults_on_every_page_of_every_pass(replacement):
    # Measured: Debian's 6.1 under QEMU/TCG with zram swap faulted on every page of every pass; an
    # exact LRU must too (a cyclic sweep longer than an LRU cache always misses).
    c = _whole_guest_sweep(replacement)
    assert c["pswpin_pages"] == 3 * PAGES
    assert c["workingset_activate_anon_pages"] == 0


#: The swap file's device on this project's machine as `measure_swap_device` found it (40-47 us and
#: 1.0-1.3 GB/s over four measurements on 2026-11-25): the kernel figures below were measured on it.
MACHINE = {**SETTINGS, "swap_device": {"latency_ns": 45_000, "bandwidth_B_s": 1_200_000_000}}


def test_a_sweep_a_third_larger_than_its_memory_cgroup_is_partly_rescued_as_in_the_kernel():
    """At 72 MiB of 96 the kernel keeps part of the sweep: its runs on this project's machine
    (kernel 6.18, cgroup v1; ten validations of five runs each, four from 2026-11-24 and six from
    11-25) took 6,718..11,481 major faults,
    median about 8,500, against about 12,300 when every page faults. Tolerance: the issue's band,
    the kernel's min..max widened by 10 % of its median."""
    from memvisor.validate import BAND_MARGIN, simulated

    lo, hi = 6718 - BAND_MARGIN * 8500, 11481 + BAND_MARGIN * 8500
    sim = simulated("stress", PAGES, 5, 200_000, 42, 72 << 20, MACHINE)
    assert lo <= sim["majflt"] <= hi, sim
    # The mechanism: reclaim writes pages the sweep comes back to before they are freed, so it
    # writes more than it frees (the kernel: 97,000..110,000 written, 69,000..75,000 freed).
    assert sim["pswpout"] > 1.1 * sim["pgsteal"], sim


def test_limit_reclaim_does_not_depend_on_how_often_the_run_is_sampled():
    """A limit reclaim takes time and lets the rest of the simulation run in between (its writes
    complete, their pages rotate to the tail); where it stops to let time pass must not change what
    it does. Sampling adds events, so stops, and nothing else."""
    from memvisor import _core, validate

    results = []
    for interval in ("1h", "1ms"):
        original = _core.load

        def load(text, origin, *a, interval=interval):
            return original(text.replace('sample_interval = "1h"', f'sample_interval = "{interval}"'), origin, *a)

        validate._core.load = load
        try:
            results.append(validate.simulated("stress", PAGES // 2, 4, 0, 42, 44 << 20, SETTINGS))
        finally:
            validate._core.load = original
    assert results[0] == results[1]


def test_a_sweep_slightly_larger_than_its_memory_cgroup_stays_mostly_resident_as_in_the_kernel():
    from memvisor.validate import BAND_MARGIN, simulated

    # The kernel's runs at 91 MiB of 96 on this project's machine (kernel 6.18, cgroup v1; ten
    # validations of five runs each, as above): 1,891..3,777 major faults, median about 2,700.
    lo, hi = 1891 - BAND_MARGIN * 2700, 3777 + BAND_MARGIN * 2700
    sim = simulated("stress", PAGES, 5, 200_000, 42, 91 << 20, MACHINE)
    assert lo <= sim["majflt"] <= hi, sim
