"""validate linux-paging: the clean refusal, and (opt-in, needs root) the comparison itself."""

import json
import os
import shutil
import subprocess
from importlib import resources

import pytest

from conftest import memvisor as run_cli
from memvisor.validate import classify_exit


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
    for passes in (1, 2, 3):
        assert subprocess.run([str(exe), "stress", "64", str(passes)]).returncode == 0
    assert subprocess.run([str(exe), "bogus", "64", "1"], capture_output=True).returncode == 2


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_simulated_major_faults_within_ten_percent_where_the_kernel_is_stable(tmp_path):
    r = run_cli("validate", "linux-paging", "--out", "v", "--working-set", "48MiB", "--limits", "8,16,24", cwd=tmp_path)
    if r.returncode == 77:
        pytest.skip(r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "v" / "summary.json").read_text())
    stable = [row for row in summary["rows"] if row["stable"]]
    assert any(row["pattern"] == "stress" for row in stable)
    assert all(abs(row["majflt_error"]) <= 0.10 for row in stable)
