"""The memvisor command: run folders, and one clear error per kind of bad input with no folder."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import SMALL, memvisor


def test_cases_lists_paging_stress(tmp_path):
    r = memvisor("cases", cwd=tmp_path)
    assert r.returncode == 0
    assert "paging-stress" in r.stdout


def test_run_writes_a_complete_run_folder(tmp_path, small_scenario):
    r = memvisor("run", str(small_scenario), "--out", "out", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = tmp_path / "out"
    assert sorted(p.name for p in d.iterdir()) == ["decisions.jsonl", "scenario.toml", "summary.json", "timeseries.parquet"]
    table = pq.read_table(d / "timeseries.parquet")
    for col in ["time_s", "vm", "pgpgin_KiB", "pswpin_pages", "MemFree_KiB", "GRANT_MiB"]:
        assert col in table.column_names
    assert table.num_rows >= 3
    summary = json.loads((d / "summary.json").read_text())
    assert summary["vms"][0]["phases_s"]["write"] > 0
    assert "static partitioning" in (d / "decisions.jsonl").read_text()
    assert 'name = "small"' in (d / "scenario.toml").read_text()
    assert "small" in r.stdout and "run folder" in r.stdout


BAD = {
    "malformed TOML": (SMALL.replace("[host]", "[host"), "small.toml:3:"),
    "unknown field": (SMALL.replace('name = "g"', 'name = "g"\ncolour = "blue"'), "unknown field `colour`"),
    "unitless size": (SMALL.replace('"128MiB"', "128"), "has no unit"),
    "negative size": (SMALL.replace('"128MiB"', '"-128MiB"'), "negative"),
    "reservation above memory": (SMALL.replace('name = "g"', 'name = "g"\nreservation = "1GiB"'), "above the VM's memory"),
    "reservations above the host": (
        SMALL.replace('name = "g"', 'name = "g"\ncount = 3\nreservation = "128MiB"').replace('memory = "1GiB"', 'memory = "512MiB"'),
        "admission control refuses",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_gets_one_clear_error_and_no_folder(tmp_path, case):
    text, expect = BAD[case]
    (tmp_path / "small.toml").write_text(text)
    r = memvisor("run", "small.toml", "--out", "out", "--quiet", cwd=tmp_path)
    assert r.returncode != 0
    assert expect in r.stderr, r.stderr
    assert r.stderr.count("error:") == 1
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


def test_unknown_case_names_the_cases(tmp_path):
    r = memvisor("run", "no-such-case", cwd=tmp_path)
    assert r.returncode == 2
    assert "paging-stress" in r.stderr


def test_interrupted_run_leaves_no_folder(tmp_path):
    exe = Path(sys.executable).parent / "memvisor"
    p = subprocess.Popen([str(exe), "run", "paging-stress", "--out", "out"], cwd=tmp_path, stderr=subprocess.PIPE)
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    assert p.returncode != 0
    assert list(tmp_path.iterdir()) == []
