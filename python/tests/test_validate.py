"""validate linux-paging: the clean refusal, and (opt-in, needs root) the comparison itself."""

import json
import os

import pytest

from conftest import memvisor as run_cli


def test_without_a_memory_cgroup_it_says_what_is_missing(tmp_path):
    r = run_cli("validate", "linux-paging", "--cgroup-root", str(tmp_path), "--out", "v", cwd=tmp_path)
    assert r.returncode == 77
    assert "memory cgroup controller" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "v").exists()


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
