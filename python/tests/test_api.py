"""The Python API."""

import pandas as pd

import memvisor
from memvisor.runfolder import top_summary


def test_run_returns_dataframes(small_scenario):
    (r,) = memvisor.run(str(small_scenario))
    assert isinstance(r.timeseries, pd.DataFrame)
    assert {"time_s", "vm", "pgpgout_KiB"} <= set(r.timeseries.columns)
    assert r.timeseries["pgpgout_KiB"].iloc[-1] >= 64 * 1024, "the 64 MiB file reached the device"
    assert r.decisions["reason"].str.contains("static partitioning").all()
    assert list(r.report()["vm"]) == ["g"]


def test_sets_override_the_scenario(small_scenario):
    (s,) = memvisor.load(str(small_scenario), sets=["vm.g.memory=256MiB"])
    assert 'memory = "256MiB"' in s.to_toml()


def test_invariants_hold_when_checked_from_python(small_scenario):
    (s,) = memvisor.load(str(small_scenario))
    r = memvisor.simulate(s, step_s=0.05, check_invariants=True)
    assert r.summary["end_reason"] == "every finite workload finished"


def test_report_rows_are_the_one_source_of_report_rows(small_scenario):
    (r,) = memvisor.run(str(small_scenario))
    rows = r.report_rows()
    assert [row["vm"] for row in rows] == ["g"]
    assert set(r.summary["report_columns"]) <= set(rows[0])
    assert r.report().to_dict(orient="records") == rows
    r.variant = "v1"
    assert top_summary([r])["variants"][0]["vms"] == rows
