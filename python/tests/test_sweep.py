"""`memvisor sweep`: the table's shape, its independence from the number of workers, cells equal to
single runs, and failures that are located (bad keys) or contained (a run that fails)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import memvisor
from memvisor import _core
from conftest import SMALL, memvisor as run_cli
from memvisor.sweep import JUMP, biggest_jump, failed_cells, sweep

VARIANTS = SMALL + """
[[variant]]
name = "32MiB-file"
set = { "vm.g.workload.file-io.size" = "32MiB" }

[[variant]]
name = "96MiB-file"
set = { "vm.g.workload.file-io.size" = "96MiB" }
"""


def write(tmp_path: Path, text: str = VARIANTS) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_a_row_per_value_a_column_per_variant_each_cell_a_single_run(tmp_path):
    spec = str(write(tmp_path))
    values = ["96MiB", "256MiB"]
    df = sweep(spec, "vm.g.memory", values, column="runtime_s", jobs=2)
    assert list(df.index) == values and df.index.name == "vm.g.memory"
    assert list(df.columns) == ["32MiB-file", "96MiB-file", JUMP]
    assert failed_cells(df) == []
    for v in values:
        for r in memvisor.run(spec, sets=[f"vm.g.memory={v}"]):
            assert df.at[v, r.variant] == r.summary["vms"][0]["report"]["runtime_s"], (v, r.variant)
        assert df.at[v, JUMP].startswith("32MiB→96MiB ×"), "the words the names share are dropped"


def test_without_variants_a_column_per_vm(tmp_path):
    two = SMALL + '[[vm]]\nname = "h"\nmemory = "128MiB"\ndatastore = "d"\nworkload = { kind = "file-io", size = "32MiB", read = true }\n'
    spec = str(write(tmp_path, two))
    df = sweep(spec, "vm.g.memory", ["96MiB", "256MiB"], jobs=1)
    assert df.columns.name == "runtime_s", "the default column is the scenario's first report column"
    assert list(df.columns) == ["g", "h"], "no jump column: the VMs of a scenario are not a series"
    (r,) = memvisor.run(spec, sets=["vm.g.memory=256MiB"])
    assert [df.at["256MiB", row["vm"]] for row in r.report_rows()] == [row["runtime_s"] for row in r.report_rows()]
    # --vm names the one VM whose column is shown.
    only = sweep(spec, "vm.g.memory", ["96MiB", "256MiB"], jobs=1, vm="h")
    assert list(only.columns) == ["h"] and only["h"].equals(df["h"])


def test_the_python_sweep_takes_a_list_and_warns_as_run_does(tmp_path):
    import warnings

    spec = str(write(tmp_path))
    with pytest.raises(TypeError, match=r"values must be a list of values, not one string: values=\['96MiB'\]"):
        sweep(spec, "vm.g.memory", "96MiB")
    # A key every variant sets for itself: the sweep's value is overridden, and said so.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        sweep(spec, "vm.g.workload.file-io.size", ["64MiB"], jobs=1)
    assert any("vm.g.workload.file-io.size" in str(w.message) for w in seen), [str(w.message) for w in seen]
    # In the call's words: its values and sets, not the command line's --vary and --set.
    assert all("--" not in str(w.message) for w in seen) and any(str(w.message).startswith("the swept value of vm.g.workload.file-io.size replaces") for w in seen), \
        [str(w.message) for w in seen]
    with pytest.raises(_core.ScenarioError, match=r"^values entry 'lots' of vm.g.memory: vm.g.memory: 'lots' does not start with a number"):
        sweep(spec, "vm.g.memory", ["96MiB", "lots"])
    with pytest.raises(_core.ScenarioError, match=r"^sets entry 'vm.g.memory=1GiB': vm.g.memory is varied by the sweep"):
        sweep(spec, "vm.g.memory", ["96MiB"], sets=["vm.g.memory=1GiB"])
    with pytest.raises(ValueError, match=r"^values of vm.g.memory: 96MiB and 0.09375GiB are the same point once resolved"):
        sweep(spec, "vm.g.memory", ["96MiB", "0.09375GiB"])
    with pytest.raises(_core.ScenarioError, match=r"^vm=nobody: no such VM in any run"):
        sweep(spec, "vm.g.memory", ["96MiB"], vm="nobody")
    with pytest.raises(_core.ScenarioError, match=r"added with sets=\['report.columns=\[...\]'\]\)$"):
        sweep(spec, "vm.g.memory", ["96MiB"], column="nonesuch")
    with pytest.raises(ValueError, match=r"^values: 2 given more than once"):
        sweep(spec, "vm.g.vcpus", [2, "2"])
    # sets as load takes them, refused the same way before any is used.
    for bad in ("duration=5s", {"duration": "5s"}, [1]):
        with pytest.raises(TypeError, match="sets must be a list of 'key=value' strings"):
            sweep(spec, "vm.g.memory", ["96MiB"], sets=bad)


def test_the_table_does_not_depend_on_the_number_of_workers(tmp_path):
    write(tmp_path)
    tables = []
    for jobs in ["1", "2"]:
        r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=96MiB,128MiB,256MiB", "--jobs", jobs, "--csv", f"j{jobs}.csv", "--quiet", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""
        tables.append((r.stdout.replace(f"j{jobs}.csv", ""), (tmp_path / f"j{jobs}.csv").read_text()))
    assert tables[0] == tables[1]
    csv = pd.read_csv(tmp_path / "j1.csv", index_col=0)
    assert list(csv.index) == ["96MiB", "128MiB", "256MiB"] and list(csv.columns) == ["32MiB-file", "96MiB-file", JUMP, "error"]


def test_the_csv_goes_only_over_a_file(tmp_path):
    """--csv replaces a file, never a pipe or a device, and is refused before anything runs."""
    write(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    for target in ["fifo", "/dev/null"]:
        r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=96MiB", "--csv", target, "--quiet", cwd=tmp_path)
        assert r.returncode == 2 and f"--csv {target}: exists and is not a regular file" in r.stderr and r.stdout == "", r.stderr
    assert (tmp_path / "fifo").is_fifo() and Path("/dev/null").is_char_device()


def test_the_sweep_writes_neither_over_its_own_files_nor_inside_a_run_folder(tmp_path):
    """--csv may not replace the sweep's sweep.parquet or an entry of its store, and neither --out
    nor --csv may lie inside a run folder, which a rerun of that run replaces; all refused before
    anything runs."""
    write(tmp_path)
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "summary.json").write_text("{}")
    for args, expect in [
        (["--out", "sw", "--csv", "sw/sweep.parquet"], "--csv sw/sweep.parquet: is the sweep's own sweep.parquet"),
        (["--out", "sw", "--csv", "sw/runs/x.csv"], "--csv sw/runs/x.csv: is the sweep's own sweep.parquet or inside its runs/ store"),
        (["--out", "run1/sw"], f"--out run1/sw: inside the run folder {tmp_path / 'run1'}, which a rerun replaces"),
        (["--csv", "run1/t.csv"], f"--csv run1/t.csv: inside the run folder {tmp_path / 'run1'}, which a rerun replaces"),
    ]:
        r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=96MiB", *args, "--quiet", cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.startswith(f"error: {expect}") and r.stdout == "", r.stderr
    assert not (tmp_path / "sw").exists() and sorted(p.name for p in (tmp_path / "run1").iterdir()) == ["summary.json"]


def test_a_bad_key_or_value_gets_one_located_error_before_anything_runs(tmp_path):
    write(tmp_path)
    for vary, where, expect in [
        ("vm.nope.memory=128MiB,256MiB", "--vary vm.nope.memory=128MiB", "no 'vm' entry named 'nope'"),
        ("vm.g.memory=128MiB,lots", "--vary vm.g.memory=lots", "'lots' does not start with a number"),
    ]:
        r = run_cli("sweep", "s.toml", "--vary", vary, "--csv", "t.csv", cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"error: {where}") and expect in line, r.stderr
        assert r.stdout == ""
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=128MiB", "--column", "nope", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("error:") == 1 and "'nope' is not a report column" in r.stderr
    # A VM in none of the runs, or a group's name, is refused before anything runs.
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=128MiB", "--vm", "nosuch", cwd=tmp_path)
    assert r.returncode == 2 and "--vm nosuch: no such VM in any run (VMs: g)" in r.stderr, r.stderr
    write(tmp_path, VARIANTS.replace('name = "g"', 'name = "g"\ncount = 2'))
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=128MiB", "--vm", "g", cwd=tmp_path)
    assert r.returncode == 2 and "--vm g: a group of 2 VMs, name one of them (VMs: g-1, g-2)" in r.stderr, r.stderr
    # A value both varied and set is refused, naming the --set, not left to which comes last.
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=128MiB", "--set", "vm.g.memory=96MiB", cwd=tmp_path)
    assert r.returncode == 2 and "--set vm.g.memory=96MiB: vm.g.memory is varied by the sweep" in r.stderr, r.stderr
    # An address no scheduler can have (no port): a usage error, not Dask's traceback mid-sweep.
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=128MiB", "--scheduler", "nonsense", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2 and "--scheduler nonsense: missing port number" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # A port that refuses the connection is said at once, not after Dask's 30 s timeout.
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=128MiB", "--scheduler", "tcp://127.0.0.1:1", cwd=tmp_path)
    assert r.returncode == 1 and "--scheduler tcp://127.0.0.1:1: connection refused" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_failing_point_shows_in_its_cells_and_the_others_are_filled(tmp_path):
    write(tmp_path)
    r = run_cli("sweep", "s.toml", "--vary", "host.memory=64MiB,1GiB", "--csv", "t.csv", "--quiet", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == ["error: 2 of 4 runs failed"], r.stderr
    # Each error once, under the table, its cells pointing at it.
    assert r.stdout.count("admission control refuses") == 1 and "failed (1)" in r.stdout and "Traceback" not in r.stdout + r.stderr
    assert any(line.startswith("(1) admission control refuses to power on VM 'g'") for line in r.stdout.splitlines()), r.stdout
    # In the csv the value columns stay numbers; the error has its own column.
    csv = pd.read_csv(tmp_path / "t.csv", index_col=0)
    assert csv["32MiB-file"].dtype == float and csv["96MiB-file"].dtype == float
    assert csv.loc["64MiB", ["32MiB-file", "96MiB-file"]].isna().all() and csv.loc["64MiB", "error"].startswith("admission control refuses")
    assert all(csv.loc["1GiB", c] > 0 for c in ["32MiB-file", "96MiB-file"]) and pd.isna(csv.loc["1GiB", "error"])
    # Without variants a failed run empties every VM's cell, and counts once.
    (tmp_path / "two.toml").write_text(SMALL + SMALL[SMALL.index("[[vm]]"):].replace('name = "g"', 'name = "h"'))
    r = run_cli("sweep", "two.toml", "--vary", "host.memory=64MiB,1GiB", "--quiet", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.splitlines() == ["error: 1 of 2 runs failed"], r.stderr
    assert r.stdout.count("failed (1)") == 2 and r.stdout.count("admission control refuses") == 1, r.stdout
    # A VM itself named "error" keeps its column; the runs' errors go beside it.
    (tmp_path / "e.toml").write_text(SMALL.replace('name = "g"', 'name = "error"'))
    r = run_cli("sweep", "e.toml", "--vary", "host.memory=64MiB,1GiB", "--csv", "e.csv", "--quiet", cwd=tmp_path)
    csv = pd.read_csv(tmp_path / "e.csv", index_col=0)
    assert r.returncode == 1 and csv.loc["1GiB", "error"] > 0 and csv.loc["64MiB", "run_error"].startswith("admission control"), csv


def test_biggest_jump_names_the_pair_and_the_factor():
    names = [f"{i}-instances" for i in range(4, 9)]
    assert biggest_jump(names, [0.0, 0.0, 2.0, 4.0, 49.6]) == "5→6 0→2.000", "a jump from zero wins"
    assert biggest_jump(names, [1.0, 1.5, 3.0, 37.2, 40.0]) == "6→7 ×12.4"
    assert biggest_jump(names, [40.0, 20.0, "failed", 1.0, None]) == "4→5 ×0.5"
    assert biggest_jump(names, [0.0] * 5) == "-"
    assert biggest_jump(names, [2.0] * 5) == "-", "no change is no jump"
    assert biggest_jump(["vm-a", "vm-b"], [1.0, 250.0]) == "a→b ×250"
    assert biggest_jump(["1-instance", "2-instances"], [1.0, 2.0]) == "1-instance→2-instances ×2.00"


LONG = SMALL.replace('name = "small"', 'name = "long"\nduration = "100000000s"').replace(
    'sample_interval = "100ms"', 'sample_interval = "1h"'
).replace('{ kind = "file-io", size = "64MiB", read = true }', '{ kind = "stress", pages = 1000 }')


def workers_of(pid: int) -> list[int]:
    """The pool's worker processes among `pid`'s children."""
    kids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in (d / "cmdline").read_bytes():
                kids.append(int(d.name))
        except (OSError, IndexError, ValueError):
            pass
    return kids


def test_ctrl_c_ends_the_workers_and_leaves_no_csv(tmp_path):
    """The runs cannot finish (three simulated years); Ctrl-C at a terminal signals the whole process
    group, workers included."""
    (tmp_path / "long.toml").write_text(LONG)
    exe = Path(sys.executable).parent / "memvisor"
    p = subprocess.Popen([str(exe), "sweep", "long.toml", "--vary", "vm.g.memory=128MiB,256MiB", "--jobs", "2", "--csv", "t.csv", "--quiet"],
                         cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         # SIGINT as a terminal delivers it, even when the suite runs in the background.
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while len(workers := workers_of(p.pid)) < 2:
            assert p.poll() is None, f"the sweep ended before it was interrupted: {p.stderr.read()}"
            assert time.monotonic() < deadline, "no workers after 60 s"
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(p.pid, signal.SIGINT)
        _, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, stderr
    assert stderr.splitlines() == ["error: interrupted"], stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["long.toml"]
    assert not any(Path(f"/proc/{w}").exists() for w in workers), "the workers were ended"


def test_a_grid_gives_a_row_per_run_and_vm_equal_to_the_runs_done_one_by_one(tmp_path):
    from memvisor.sweep import plan_points, product, run_points

    spec = str(write(tmp_path))
    points = product([("vm.g.memory", ["96MiB", "256MiB"]), ("host.memory", ["512MiB", "1GiB"])])
    assert points[1] == {"vm.g.memory": "96MiB", "host.memory": "1GiB"}, "the last key varies fastest"
    table, runs = run_points(plan_points(spec, points, column="runtime_s"), jobs=2)
    assert len(table) == 4 and table.index.name == "vm.g.memory × host.memory"
    assert len(runs) == 4 * 2, "a row per point, variant and VM"
    assert list(runs.columns[:5]) == ["scenario", "vm.g.memory", "host.memory", "variant", "vm"]
    for p in points:
        for r in memvisor.run(spec, sets=[f"{k}={v}" for k, v in p.items()]):
            row = runs[(runs["vm.g.memory"] == p["vm.g.memory"]) & (runs["host.memory"] == p["host.memory"]) & (runs.variant == r.variant)]
            assert row.iloc[0]["runtime_s"] == r.summary["vms"][0]["report"]["runtime_s"]


def test_a_failed_point_is_reported_and_the_others_kept(tmp_path):
    from memvisor.sweep import plan_points, run_points

    spec = str(write(tmp_path, SMALL))
    _, runs = run_points(plan_points(spec, [{"host.memory": "64MiB"}, {"host.memory": "1GiB"}]), jobs=2)
    assert runs.error.notna().tolist() == [True, False]
    assert "admission control" in runs.error[0] and runs.runtime_s[1] > 0


def test_an_interrupted_sweep_resumes_without_redoing_finished_runs(tmp_path):
    spec = write(tmp_path)
    args = ("sweep", "s.toml", "--vary", "vm.g.memory=96MiB,256MiB", "--vary", "vm.g.vcpus=1,2", "--out", "out", "--quiet")
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    store = sorted((tmp_path / "out" / "runs").glob("*.json"))
    assert len(store) == 8
    first = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    # As if interrupted after all but one run: that one alone is run again.
    store[3].unlink()
    kept = {p: p.stat().st_mtime_ns for p in store if p != store[3]}
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert store[3].exists() and all(p.stat().st_mtime_ns == t for p, t in kept.items())
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "sweep.parquet"), first)
    assert spec.exists()


def with_files_beside(tmp_path: Path) -> Path:
    """A scenario that reads a trace, captured page contents and a policy module (which imports
    another) from its own folder."""
    (tmp_path / "t.csv").write_text("time,obj,size\n0,1,4096\n1,2,4096\n")
    pages = Path(memvisor.__file__).parents[2] / "crates/memvisor/src/content/data/pages"
    (tmp_path / "c.mvpages").write_bytes((pages / "stress-vm.mvpages").read_bytes())
    (tmp_path / "polhelp.py").write_text("NAME = 'p'\n")
    (tmp_path / "pol.py").write_text("import polhelp\nfrom memvisor.policy import Policy\nclass P(Policy):\n    name = polhelp.NAME\n"
                                     "    def decide(self, v):\n        return []\n")
    spec = tmp_path / "s.toml"
    spec.write_text(SMALL.replace('{ kind = "file-io", size = "64MiB", read = true }', '{ kind = "trace", file = "t.csv", captured = "c.mvpages" }')
                    .replace("[host]", '[host]\npolicy = "python:pol:P"'))
    return spec


def test_a_store_is_kept_per_engine_and_per_input_file(monkeypatch, tmp_path):
    # A rebuilt engine may compute a run differently: its runs are not the old engine's.
    from memvisor import sweep

    before = sweep._task_id("name = 'x'", "")
    assert sweep._task_id("name = 'x'", "") == before and sweep._task_id("name = 'y'", "") != before
    assert sweep._task_id("name = 'x'", "a trace's digest") != before
    # A trace, captured page contents, a policy module beside the scenario or a module beside it
    # that the policy imports, edited between two sweeps, makes other runs.
    spec = with_files_beside(tmp_path)
    pages = Path(memvisor.__file__).parents[2] / "crates/memvisor/src/content/data/pages"
    grid = sweep.plan(str(spec), "seed", ["1"], column="runtime_s")

    def ident() -> str:
        return sweep._inputs_id(grid.scenarios[0][0], {})

    first = ident()
    assert ident() == first and first.count(" ") == 3, "four files, each hashed once"
    seen = {first}
    for name, old, new in [("t.csv", "1,2,", "1,3,"), ("pol.py", "name = ", "name =  "), ("polhelp.py", "'p'", "'q'")]:
        (tmp_path / name).write_text((tmp_path / name).read_text().replace(old, new))
        seen.add(ident())
    (tmp_path / "c.mvpages").write_bytes((pages / "kernel-source.mvpages").read_bytes())
    seen.add(ident())
    assert len(seen) == 5, "each edit is another run"
    monkeypatch.setattr(sweep, "_engine_id", lambda: "another build")
    assert sweep._task_id("name = 'x'", "") != before


def test_a_run_folders_scenario_reproduces_the_run_from_anywhere(tmp_path):
    """The files a scenario reads from its folder are found again when its run folder's
    scenario.toml is run from another folder (files_from names the original's)."""
    (tmp_path / "orig").mkdir()
    spec = with_files_beside(tmp_path / "orig")
    r = run_cli("run", str(spec), "--out", str(tmp_path / "runs" / "first"), "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    toml = (tmp_path / "runs" / "first" / "scenario.toml").read_text()
    assert f'files_from = "{(tmp_path / "orig").resolve()}"' in toml, toml
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = run_cli("run", str(tmp_path / "runs" / "first" / "scenario.toml"), "--out", "again", "--quiet", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    first, again = (json.loads((d / "summary.json").read_text()) for d in [tmp_path / "runs" / "first", elsewhere / "again"])
    assert first["vms"] == again["vms"] and first["vms"][0]["counters"]["pgfault"] > 0
    # A files_from that is not absolute is refused, said why.
    (tmp_path / "rel.toml").write_text(toml.replace(str((tmp_path / "orig").resolve()), "orig"))
    r = run_cli("run", str(tmp_path / "rel.toml"), "--quiet", cwd=tmp_path)
    assert r.returncode != 0 and "rel.toml:" in r.stderr and "files_from" in r.stderr and "not an absolute path" in r.stderr, r.stderr
    # A trace that is not there is named by the field that names it.
    (tmp_path / "orig" / "t.csv").unlink()
    r = run_cli("run", str(spec), "--quiet", cwd=tmp_path)
    assert "error: small: vm.g.workload.trace.file: trace file 't.csv' not found (looked in" in r.stderr, r.stderr
    # So is one that is there but cannot be read.
    (tmp_path / "orig" / "t.csv").write_text("1,-5\n")
    r = run_cli("run", str(spec), "--quiet", cwd=tmp_path)
    assert "error: small: vm.g.workload.trace.file: " in r.stderr and "t.csv: line 1: object id '-5'" in r.stderr, r.stderr


def test_a_sweep_on_a_dask_cluster_equals_the_local_one(tmp_path):
    from dask.distributed import LocalCluster

    from memvisor.sweep import plan_points, product, run_points

    spec = str(write(tmp_path))
    grid = plan_points(spec, product([("vm.g.memory", ["96MiB", "256MiB"]), ("vm.g.vcpus", ["1", "2"])]), column="runtime_s")
    local_table, local_runs = run_points(grid, jobs=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        table, runs = run_points(grid, scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(runs, local_runs)
    pd.testing.assert_frame_equal(table, local_table)


def test_a_points_file_is_read_as_a_spreadsheet_writes_it_and_refused_when_ambiguous(tmp_path):
    from memvisor.sweep import points_from_csv

    f = tmp_path / "p.csv"
    f.write_bytes(b"\xef\xbb\xbfhost.memory, vm.g.memory\r\n\r\n1GiB, 96MiB\r\n   \r\n2GiB,128MiB\r\n")
    assert points_from_csv(f) == [{"host.memory": "1GiB", "vm.g.memory": "96MiB"}, {"host.memory": "2GiB", "vm.g.memory": "128MiB"}]
    for content, expect in [
        (b"host.memory,host.memory \n1GiB,2GiB\n", "p.csv:1: a key given twice: host.memory"),
        (b"host.memory,\n1GiB,2\n", "p.csv:1: an empty key"),
        (b"host.memory\n\n1GiB,2GiB\n", "p.csv:3: 2 values for 1 keys"),
        (b"host.memory,seed\n1GiB, \n", "p.csv:2: no value for seed"),
        (b"host.memory,seed\n1GiB,1\n , \n", "p.csv:3: no value for host.memory, seed"),
        (b"host.memory\n\xff\n", "p.csv: byte 12: a points file is UTF-8 text"),
        (b"host.memory\n", "p.csv: no points"),
        (b"host.memory,seed\n1GiB,1\n2GiB,1\n1GiB ,1\n", "p.csv:4: repeats the point of line 2"),
        (b'vm.g.memory\n"256MiB\n', "p.csv:2: unexpected end of data"),
        (b'vm.g.memory\n"256"MiB\n', "p.csv:2: ',' expected after"),
    ]:
        f.write_bytes(content)
        with pytest.raises(ValueError, match=expect):
            points_from_csv(f)
    # A bad value in the file is located in the file, not in a --vary the user did not write.
    write(tmp_path)
    # Values that differ in writing only are one point, from a file or from --vary.
    f.write_text("vm.g.memory\n1GiB\n1024MiB\n")
    for grid in (["--points", "p.csv"], ["--vary", "vm.g.memory=96MiB,1GiB,1024MiB"]):
        r = run_cli("sweep", "s.toml", *grid, cwd=tmp_path)
        assert r.returncode == 2 and "vm.g.memory: 1GiB and 1024MiB are the same point once resolved; give each point once" in r.stderr, r.stderr
    f.write_text("vm.g.memory\nlots\n")
    r = run_cli("sweep", "s.toml", "--points", "p.csv", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: --points p.csv: vm.g.memory=lots: ") and "--vary" not in r.stderr, r.stderr


def test_a_sweep_writes_only_where_a_sweep_wrote_and_never_over_what_it_reads(tmp_path):
    write(tmp_path)
    args = ("sweep", "s.toml", "--vary", "vm.g.memory=96MiB", "--quiet")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("mine")
    for out, what in [("docs", "notes.txt"), ("", "s.toml")]:
        r = run_cli(*args, "--out", out, cwd=tmp_path)
        assert r.returncode == 2 and "holds what no sweep wrote" in r.stderr and what in r.stderr, r.stderr
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["notes.txt"]
    r = run_cli(*args, "--csv", "s.toml", cwd=tmp_path)
    assert r.returncode == 2 and "--csv s.toml: is a file the sweep reads" in r.stderr, r.stderr
    assert (tmp_path / "s.toml").read_text() == VARIANTS
    # Its own folder, with a table --csv put there, is taken again; a damaged entry is named.
    r = run_cli(*args, "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli(*args, "--out", "out", "--csv", "out/t.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # Any file beside an earlier sweep's store is taken as the user's (a table, a note).
    (tmp_path / "out" / "notes.txt").write_text("mine")
    r = run_cli(*args, "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    entry = sorted((tmp_path / "out" / "runs").glob("*.json"))[0]
    # Shaped like a result but not one: a figure that is not a number, a VM that is not a name.
    for damaged in ["[true, 5]", '[true, [{"vm": "web", "runtime_s": "slow"}]]', '[true, [{"vm": 5}]]']:
        entry.write_text(damaged)
        r = run_cli(*args, "--out", "out", cwd=tmp_path)
        assert r.returncode == 2 and f"{entry.name}: a damaged store entry" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_policy_that_fails_to_import_fails_its_cells_with_a_store(tmp_path):
    # The store's identity reads the policy's imports without running it: the failure is the runs'.
    (tmp_path / "pol.py").write_text("x = )\n")
    write(tmp_path, VARIANTS.replace("[host]", '[host]\npolicy = "python:pol:P"'))
    r = run_cli("sweep", "s.toml", "--vary", "vm.g.memory=96MiB", "--out", "out", "--csv", "t.csv", "--quiet", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "runs failed" in r.stderr and "SyntaxError" in r.stdout, r.stdout


def test_a_sweep_of_another_scenario_into_the_same_out_says_it_replaces_the_table(tmp_path):
    (tmp_path / "a.toml").write_text(SMALL)
    (tmp_path / "b.toml").write_text(SMALL.replace('name = "small"', 'name = "other"'))
    vary = ("--vary", "vm.g.memory=96MiB", "--out", "out", "--quiet")
    r = run_cli("sweep", "a.toml", *vary, cwd=tmp_path)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert pd.read_parquet(tmp_path / "out" / "sweep.parquet").scenario.tolist() == ["small"]
    # The same scenario again: its own table, nothing to say.
    r = run_cli("sweep", "a.toml", *vary, cwd=tmp_path)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    r = run_cli("sweep", "b.toml", *vary, cwd=tmp_path)
    assert r.returncode == 0 and "--out out: its sweep.parquet is of 'small', and this sweep of 'other' replaces it" in r.stderr, r.stderr
    assert pd.read_parquet(tmp_path / "out" / "sweep.parquet").scenario.tolist() == ["other"]
