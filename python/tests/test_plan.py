"""`memvisor plan`: the answer is bracketed by runs that satisfy and violate the bound."""

import subprocess
import sys
from pathlib import Path

from memvisor import _core, api
from memvisor.planning import Planner, search

SCENARIO = """
name = "plan"
duration = "120s"
[host]
memory = "1GiB"
profile = "kvm"
policy = "pressure"
[[datastore]]
name = "d"
device = "ssd"
[[vm]]
name = "web"
memory = "512MiB"
datastore = "d"
transparent_hugepage = "never"
workload = { kind = "stress", pages = "300MiB", passes = 3 }
[[vm]]
name = "batch"
memory = "512MiB"
datastore = "d"
transparent_hugepage = "never"
workload = { kind = "stress-vm", bytes = "400MiB" }
"""
MIB = 1 << 20


def runtime(spec: str, host: int, seed: int) -> float:
    (s,) = api.load(spec, [f"host.memory={host // MIB}MiB", f"seed={seed}"])
    return next(v["runtime_s"] for v in api.simulate(s).summary["vms"] if v["name"] == "web")


def test_the_answer_is_bracketed_by_runs_on_either_side_of_the_bound(tmp_path: Path):
    spec = tmp_path / "plan.toml"
    spec.write_text(SCENARIO)
    planner = Planner(str(spec), "web", "host.memory", [], [1, 2], 2, lambda v: f"{v // MIB}MiB")
    a = search(planner, 1024 * MIB, 1536 * MIB, 128 * MIB, 1.5, generous_high=True)
    good, bad = a.bracket
    assert a.value == good and bad == good - 128 * MIB
    # Checked by runs done apart from the search, each seed.
    for seed in (1, 2):
        assert runtime(str(spec), good, seed) <= 1.5 * a.baseline
        assert runtime(str(spec), bad, seed) > 1.5 * a.baseline
    assert a.sharp, a.notes


def test_plan_command_prints_the_answer_and_its_runs(tmp_path: Path):
    spec = tmp_path / "plan.toml"
    spec.write_text(SCENARIO)
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "web", "--slowdown", "1.5", "--host-memory",
                        "--min", "256MiB", "--max", "1536MiB", "--step", "256MiB", "--seeds", "1"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "answer: host.memory = 1280MiB" in p.stdout and "<- bound" in p.stdout
    assert "why no runtime" in p.stdout and "admission control" in p.stdout, "a value where the VMs cannot start says why"
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "nope", "--slowdown", "1.5", "--reservation"], capture_output=True, text=True)
    assert p.returncode == 2 and "no such VM" in p.stderr
    # A group of VMs: the bound is on one of them, by the name its runs give it.
    spec.write_text(SCENARIO.replace('name = "web"', 'name = "web"\ncount = 2'))
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "web", "--slowdown", "1.5", "--host-memory", "--min", "256MiB"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "a group of 2 VMs, name one of them (VMs: web-1, web-2, batch)" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "web-2", "--slowdown", "1.5", "--reservation"], capture_output=True, text=True)
    assert p.returncode == 2 and "give it a [[vm]] of its own" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "web-3", "--slowdown", "2", "--count", "web", "--max", "4"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "web-3 exists from a count of 3: bound web-3 with --min 3" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "web-2", "--slowdown", "100", "--host-memory",
                        "--min", "1536MiB", "--max", "2048MiB", "--step", "512MiB", "--seeds", "1"], capture_output=True, text=True)
    assert p.returncode == 0 and "answer: host.memory = 1536MiB" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "batch", "--slowdown", "2", "--host-memory",
                        "--min", "1GiB", "--max", "2GiB", "--step", "0B"], capture_output=True, text=True)
    assert p.returncode == 2 and "--step 0B: the grid step is at least one page (4KiB)" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert _core.parse_bytes("1280MiB") == 1280 * MIB
    # What plan sets itself (the searched value, the seed) is not also taken from --set.
    for extra, expect in [("seed=3", "seed is set by plan, to each of --seeds in turn"), ("host.memory=3GiB", "host.memory is the value plan searches for")]:
        p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "batch", "--slowdown", "2", "--host-memory",
                            "--min", "256MiB", "--set", extra], capture_output=True, text=True)
        assert p.returncode == 2 and f"--set {extra}: {expect}" in p.stderr, p.stderr
    # Two questions at once are refused, not settled by which came last.
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "batch", "--slowdown", "2", "--reservation",
                        "--host-memory", "--min", "1GiB"], capture_output=True, text=True)
    assert p.returncode == 2 and "ask one question" in p.stderr and "(given: --reservation and --host-memory)" in p.stderr, p.stderr


def test_plan_refuses_bad_questions_by_the_option_given(tmp_path: Path):
    """What plan derives (--set of the searched key, the grid) never stands in for what the user
    typed: each refusal names the user's option, before any run."""
    spec = tmp_path / "plan.toml"
    spec.write_text(SCENARIO)
    base = [sys.executable, "-m", "memvisor.cli", "plan", str(spec), "--vm", "batch", "--slowdown", "2"]
    for args, expect in [
        (["--count", "nope", "--max", "3"], "--count nope: no [[vm]] named 'nope' (VMs: web, batch)"),
        (["--count", "web", "--min", "-3", "--max", "3"], "--min -3: a count of guests, 1 to 100,000"),
        (["--count", "web", "--max", "3", "--step", "128MiB"], "--step is a size step; --count steps by one guest"),
        (["--reservation", "--max", "1GiB"], "--max 1024MiB: above batch's memory (512MiB)"),
        (["--host-memory", "--min", "2GiB"], "--max defaults to the scenario's host memory"),
        (["--host-memory", "--min", "256MiB", "--max", ""], "--max: empty"),
        (["--host-memory", "--min", "256MiB", "--step", "1B"], "--step 1B: the grid step is at least one page"),
        # A step past the range's width leaves only its ends to answer with.
        (["--host-memory", "--min", "256MiB", "--max", "512MiB", "--step", "1GiB"], "--step 1024MiB: wider than the range (256MiB to 512MiB)"),
        (["--reservation", "--min", "480MiB"], "--step 64MiB (the default): wider than the range (480MiB to 512MiB)"),
        (["--host-memory", "--min", "256MiB", "--step", "5000B"], "--step 5000B: the grid step is a whole number of pages"),
        (["--count", "web", "--max", "3", "--step", "1B"], "--step is a size step"),
        (["--host-memory", "--min", "256MiB", "--variant", ""], "--variant: empty"),
        (["--host-memory", "--min", "256MiB", "--seeds", "1,1"], "--seeds 1,1: each seed once"),
        (["--host-memory", "--min", "256MiB", "--seeds", "99999999999999999999"], "is above 9223372036854775807"),
        (["--host-memory", "--min", "256MiB", "--variant", "x"], str(spec) + ": no variant x (variants: none)"),
        # The range's ends: whole pages, as every probe is (1B..2B probed "0 pages" twice), and
        # values the scenario takes (a 0B host was a failed probe's "--set host.memory=0MiB", exit 1).
        (["--reservation", "--min", "1B", "--max", "2B"], "--min 1B: a whole number of pages (4KiB)"),
        (["--host-memory", "--min", "256MiB", "--max", "1000000B"], "--max 1000000B: a whole number of pages (4KiB)"),
        (["--host-memory", "--min", "0B", "--max", "1GiB"], "--min 0B: host.memory: must be at least one page"),
    ]:
        p = subprocess.run(base + args, capture_output=True, text=True)
        assert p.returncode == 2 and expect in p.stderr and "--set" not in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    # A scenario error is the scenario's, not "has variants".
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", str(tmp_path / "none.toml"), "--vm", "a", "--slowdown", "2", "--host-memory", "--min", "1GiB"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "variants" not in p.stderr and "none.toml" in p.stderr, p.stderr
    # A case with variants asks for one, and names them.
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "plan", "nfs-balloon", "--vm", "small", "--slowdown", "2", "--host-memory", "--min", "2GiB"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "choose one with --variant (4GiB, 4GiB-full-reservation, 8GiB, small-alone)" in p.stderr, p.stderr


def test_probed_sizes_are_shown_as_a_scenario_takes_them():
    from memvisor.plancmd import _size

    # 512MB is whole pages but not whole MiB: shown in KiB, which --set takes, never in pages.
    assert (_size(512 * MIB), _size(512_000_000)) == ("512MiB", "500000KiB")
    assert _core.parse_bytes(_size(512_000_000)) == 512_000_000


def test_a_grid_of_billions_is_bisected_without_being_built():
    from memvisor.planning import ProbeValues

    g = ProbeValues(4096, 1 << 50, 4096, reverse=True)
    assert len(g) == (1 << 50) // 4096 and g[0] == 1 << 50 and g[-1] == 4096
    assert g.index(4096) == len(g) - 1 and (1 << 49) in g and 4097 not in g
    odd = ProbeValues(0, 10, 3, reverse=False)
    assert list(odd) == [0, 3, 6, 9, 10] and odd.index(10) == 4


def test_plans_count_bound_is_the_scenarios():
    """plan --count stops where a [[vm]] table's count does: one past it is refused by the scenario."""
    import pytest

    from memvisor.plancmd import MAX_COUNT

    text = SCENARIO.replace('name = "web"', f'name = "web"\ncount = {MAX_COUNT + 1}')
    with pytest.raises(_core.ScenarioError, match="count"):
        _core.load(text, "plan.toml")


def test_a_worker_that_dies_is_one_error_line(tmp_path: Path, monkeypatch):
    """A worker killed under the search (the kernel's OOM killer) ends plan with one line, as it
    ends a sweep, not a traceback."""
    from concurrent.futures.process import BrokenProcessPool

    from click.testing import CliRunner

    from memvisor import cli, planning

    def dies(*args, **kw):
        raise BrokenProcessPool("A process in the process pool was terminated abruptly")

    monkeypatch.setattr(planning, "search", dies)
    spec = tmp_path / "plan.toml"
    spec.write_text(SCENARIO)
    r = CliRunner().invoke(cli.main, ["plan", str(spec), "--vm", "web", "--slowdown", "2", "--host-memory", "--min", "512MiB", "--max", "1GiB"])
    assert r.exit_code == 1 and "a worker process died" in r.output and not isinstance(r.exception, BrokenProcessPool), r.output
