"""The Python API."""

import warnings

import pandas as pd
import pytest

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
    # One string where a list belongs is refused, not read a character at a time.
    with pytest.raises(TypeError, match=r"sets must be a list of 'key=value' strings, not one string: sets=\['vm.g.memory=256MiB'\]"):
        memvisor.run(str(small_scenario), sets="vm.g.memory=256MiB")


def test_invariants_hold_when_checked_from_python(small_scenario):
    (s,) = memvisor.load(str(small_scenario))
    r = memvisor.simulate(s, step_s=0.05, check_invariants=True)
    assert r.summary["end_reason"] == "every finite workload finished"


def test_report_rows_are_the_one_source_of_report_rows(small_scenario):
    (r,) = memvisor.run(str(small_scenario))
    rows = r.report_rows()
    assert [row["vm"] for row in rows] == ["g"]
    assert list(rows[0]) == ["vm", *r.summary["report_columns"]], "the scenario's order, not the alphabet's"
    assert r.report().to_dict(orient="records") == rows
    r.variant = "v1"
    assert top_summary([r])["variants"][0]["vms"] == rows



def test_a_report_value_a_run_lacks_is_missing_and_its_column_stays_numeric():
    # small-alone's VM only reads: bonnie's write and rewrite phases never run.
    (r,) = memvisor.run("nfs-balloon", variants=["small-alone"], sets=["duration=20s"])
    df = r.report()
    assert r.report_rows()[0]["rewrite_KiB/s"] is None
    assert df["rewrite_KiB/s"].dtype == float and df["rewrite_KiB/s"].isna().all()


def test_variants_side_by_side_give_what_they_give_one_at_a_time(small_scenario):
    text = small_scenario.read_text() + "".join(
        f'\n[[variant]]\nname = "m{m}"\nset = {{ "vm.g.memory" = "{m}MiB" }}\n' for m in (96, 128, 192)
    )
    small_scenario.write_text(text)
    one, side = memvisor.run(str(small_scenario), jobs=1), memvisor.run(str(small_scenario), jobs=3)
    assert [r.variant for r in side] == ["m96", "m128", "m192"], "results in the scenario's order"
    for a, b in zip(one, side):
        assert a.summary["vms"] == b.summary["vms"]
        pd.testing.assert_frame_equal(a.timeseries, b.timeseries)


def test_a_failing_variant_raises_its_own_error(small_scenario):
    import pytest

    from memvisor import _core

    ok = memvisor.load(str(small_scenario))[0]
    # 1.5 GiB of page cache in a 2 GiB guest on a 1 GiB host without host swap: the host runs out.
    bad = memvisor.load(str(small_scenario), sets=["vm.g.memory=2GiB", "vm.g.workload.0.size=1536MiB", "host.swap=false"])[0]
    with pytest.raises(_core.RunError, match="host swap is off"):
        memvisor.api.simulate_all([ok, bad], jobs=2)



def test_the_first_failure_stops_a_run_listed_before_it(small_scenario):
    import threading

    from memvisor import _core

    endless = small_scenario.parent / "endless.toml"
    endless.write_text(
        small_scenario.read_text()
        .replace('name = "small"', 'name = "endless"\nduration = "100000000s"')
        .replace('sample_interval = "100ms"', 'sample_interval = "100s"')  # a series it could keep
        .replace('{ kind = "file-io", size = "64MiB", read = true }', '{ kind = "stress", pages = 1000 }')
    )
    forever = memvisor.load(str(endless))[0]
    bad = memvisor.load(str(small_scenario), sets=["vm.g.memory=2GiB", "vm.g.workload.0.size=1536MiB", "host.swap=false"])[0]
    raised = []

    def go():
        try:
            memvisor.api.simulate_all([forever, bad], jobs=2)
        except _core.RunError as e:
            raised.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the endless run went on after the other failed"
    assert raised and "host swap is off" in str(raised[0])


def test_run_passes_a_progress_callback_to_every_run(small_scenario):
    seen = []
    memvisor.run(str(small_scenario), progress=lambda now, total: seen.append(now))
    assert seen and seen[-1] > 0


def test_run_takes_a_scenario_as_a_dict():
    import memvisor

    spec = {
        "name": "as-dict",
        "duration": "2s",
        "host": {"memory": "1GiB"},
        "datastore": [{"name": "d", "device": "ssd"}],
        "vm": [{"name": "g", "memory": "128MiB", "datastore": "d", "workload": {"kind": "idle", "footprint": "16MiB"}}],
    }
    (r,) = memvisor.run(spec)
    assert r.name == "as-dict" and r.summary["vms"][0]["name"] == "g"
    with pytest.raises(memvisor.ScenarioError, match="vm.g.workload"):
        memvisor.run({**spec, "vm": [{**spec["vm"][0], "workload": {"kind": "idle"}}]})


def test_results_do_not_depend_on_the_engine_steps(small_scenario, monkeypatch):
    # The default steps are sized by real time, which varies from machine to machine; the results
    # must not. Very short steps (a step per simulated millisecond at most) against one step.
    (s,) = memvisor.load(str(small_scenario))
    whole = memvisor.simulate(s, step_s=float("inf"))
    monkeypatch.setattr(memvisor.api, "STEP_WALL_S", 1e-9)
    monkeypatch.setattr(memvisor.api, "STEP_MIN_S", 0.001)
    stepped = memvisor.simulate(s)
    assert stepped.summary["vms"] == whole.summary["vms"]
    pd.testing.assert_frame_equal(stepped.timeseries, whole.timeseries)
    pd.testing.assert_frame_equal(stepped.decisions, whole.decisions)


def test_a_run_folder_s_report_is_drawn_from_the_results_in_memory(small_scenario, tmp_path, monkeypatch):
    import dataclasses

    from memvisor import report

    (a,) = memvisor.run(str(small_scenario))
    # The series is not read back from the folder being written...
    def unread(path):
        raise AssertionError(f"{path} read back")

    monkeypatch.setattr(report, "_timeseries", unread)
    assert (memvisor.write_run_folder([a], tmp_path / "a") / "report.html").is_file()
    # ...and is held to what a report needs all the same: a clear error, and no folder.
    bad = dataclasses.replace(a, timeseries=a.timeseries.drop(columns="vm"))
    with pytest.raises(report.BadRun, match=r"timeseries.parquet: cannot be read as a time series: lacks column 'vm'"):
        memvisor.write_run_folder([bad], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_write_run_folder_refuses_results_that_would_overwrite_each_other(small_scenario, tmp_path):
    (a,) = memvisor.run(str(small_scenario))
    (b,) = memvisor.run(str(small_scenario), sets=["vm.g.memory=256MiB"])
    with pytest.raises(ValueError, match=r"2 results would share a folder \(variants: None, None\)"):
        memvisor.write_run_folder([a, b], tmp_path / "ab")
    with pytest.raises(TypeError, match="takes the list memvisor.run returns"):
        memvisor.write_run_folder(a, tmp_path / "a")
    with pytest.raises(ValueError, match="no results"):
        memvisor.write_run_folder([], tmp_path / "none")
    assert sorted(p.name for p in tmp_path.iterdir()) == [small_scenario.name]
    assert memvisor.write_run_folder([a], tmp_path / "a").joinpath("summary.json").is_file()
    # A manage run's folder is not a simulated run's to replace, from Python as from the CLI.
    (tmp_path / "m").mkdir()
    for f in ("summary.json", "manage.json"):
        (tmp_path / "m" / f).write_text("{}")
    with pytest.raises(ValueError, match="holds a manage run's folder, not a simulated run's"):
        memvisor.write_run_folder([a], tmp_path / "m")
    assert (tmp_path / "m" / "manage.json").read_text() == "{}"


def test_wrong_arguments_are_named(small_scenario):
    from memvisor import _core

    assert memvisor.run(small_scenario)[0].summary == memvisor.run(str(small_scenario))[0].summary, "a Path is a file path"
    with pytest.raises(_core.ScenarioError, match="an empty name"):
        memvisor.load("")
    with pytest.raises(TypeError, match="a scenario is a case name, a file path or a dict, not int"):
        memvisor.load(5)
    with pytest.raises(TypeError, match="sets must be a list of 'key=value' strings, not \\[1\\]"):
        memvisor.load(str(small_scenario), sets=[1])
    with pytest.raises(TypeError, match="sets must be a list"):
        memvisor.load(str(small_scenario), sets={"duration": "5s"})
    # Overrides are named as the call gave them, not as the command line's --set.
    with pytest.raises(_core.ScenarioError, match=r"^sets entry 'vm.g.memory=lots': vm.g.memory: 'lots' does not start with a number"):
        memvisor.load(str(small_scenario), sets=(x for x in ["vm.g.memory=lots"]))
    with pytest.raises(_core.ScenarioError, match=r"^sets entry 'duration=2s': duration: also set by sets entry 'duration=1s'; give each value once$"):
        memvisor.run(str(small_scenario), sets=["duration=1s", "duration=2s"])
    # A set that replaces a variant's value is a warning, in the call's words too.
    varied = small_scenario.with_name("varied.toml")
    varied.write_text(small_scenario.read_text() + '[[variant]]\nname = "b"\nset = { "vm.g.memory" = "256MiB" }\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memvisor.run(str(varied), sets=["duration=1s", "vm.g.memory=300MiB"])
    said = [str(w.message) for w in caught]
    assert said and all("--" not in w for w in said) and any(w.startswith("the sets entry for vm.g.memory replaces") for w in said), said
    with pytest.raises(_core.ScenarioError, match=r"<dict>: vm\[1\].memory: not a scenario value: Object of type 'set'"):
        memvisor.load({"name": "x", "vm": [{"name": "g"}, {"memory": {1, 2}}]})
    for jobs in (0, -3, 1.5, "2", True):
        with pytest.raises(ValueError, match="jobs must be a number of threads, at least 1"):
            memvisor.run(str(small_scenario), jobs=jobs)
    for policy in ("pressure", 5, object):
        with pytest.raises(TypeError, match="policy= takes a memvisor.Policy subclass or instance.*host.policy=NAME"):
            memvisor.run(str(small_scenario), policy=policy)

    class HalfOne:
        def decide(self, view):
            return []

    # A class with decide but not the rest is pointed to memvisor.Policy, which gives the rest.
    with pytest.raises(memvisor.ScenarioError, match=r"a Python policy needs `name`: subclass memvisor.Policy, which gives it one"):
        memvisor.run(str(small_scenario), policy=HalfOne)
    # A scenario's TOML text is not a name: said so, not "file name too long".
    text = small_scenario.read_text()
    for t in (text, 'name = "x"'):
        with pytest.raises(_core.ScenarioError, match="this looks like a scenario's TOML text, not a case name or a file: save it as a .toml file"):
            memvisor.load(t)
    # None, as Python's optional arguments have it, is none given.
    assert [s.variant for s in memvisor.load(str(small_scenario), sets=None, variants=None)] == [s.variant for s in memvisor.load(str(small_scenario))]
    assert repr(memvisor.load("nfs-balloon", variants=["8GiB"])[0]) == "<Scenario 'nfs-balloon' variant '8GiB'>"


def test_run_takes_the_variants_it_is_asked_for_and_names_the_ones_it_lacks():
    (r,) = memvisor.run("nfs-balloon", variants=["small-alone"])
    assert r.variant == "small-alone"
    with pytest.raises(memvisor.ScenarioError, match=r"case:nfs-balloon: no variant 16GiB \(variants: 4GiB, 4GiB-full-reservation, 8GiB, small-alone\)"):
        memvisor.run("nfs-balloon", variants=["16GiB"])
    with pytest.raises(TypeError, match="variants must be a list of names"):
        memvisor.run("nfs-balloon", variants="8GiB")
    with pytest.raises(TypeError, match="run\\(\\) got an unexpected keyword argument 'variant'"):
        memvisor.run("nfs-balloon", variant="8GiB")


def test_a_policy_object_silences_what_the_scenarios_own_policy_would_ignore(small_scenario):
    """A VM's limit under mom is said to be ignored; given a Python policy object in mom's place
    (which sees the limit in its view), the note would be wrong and is not given."""
    import warnings

    sets = ["host.policy=mom", "vm.g.limit=96MiB", "duration=1s"]

    class Keep(memvisor.Policy):
        period_s = 1.0

        def decide(self, view):
            return []

    for policy, said in [(None, True), (Keep, False)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            memvisor.run(str(small_scenario), sets, policy=policy)
        notes = [str(w.message) for w in caught if "vm.g.limit is kept by" in str(w.message)]
        assert bool(notes) == said, (policy, notes)


def test_the_api_errors_are_memvisors_and_cross_processes():
    """Raised in a worker process (a sweep's, Dask's), an error is pickled back: its class must be
    importable by the name it carries."""
    import pickle

    for cls in (memvisor.ScenarioError, memvisor.RunError, memvisor._core.TraceError):
        assert cls.__module__ == "memvisor._core"
        e = pickle.loads(pickle.dumps(cls("x: bad")))
        assert type(e) is cls and str(e) == "x: bad"
