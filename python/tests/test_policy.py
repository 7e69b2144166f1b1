"""Policies written in Python drive a simulated run through the same interface as built-in ones."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import memvisor
from memvisor import _core, api
from memvisor.examples.pressure import Pressure

# An overcommitted KVM host: a guest that keeps rewriting 400 MiB beside an idle one.
SCENARIO = """
name = "py-policy"
duration = "40s"
seed = 3
[host]
memory = "1100MiB"
profile = "kvm"
policy = "{policy}"
[[datastore]]
name = "d"
device = "ssd"
[[vm]]
name = "busy"
memory = "512MiB"
reservation = "350MiB"
datastore = "d"
transparent_hugepage = "never"
workload = {{ kind = "stress-vm", bytes = "400MiB" }}
[[vm]]
name = "idle"
memory = "512MiB"
reservation = "128MiB"
datastore = "d"
transparent_hugepage = "never"
workload = {{ kind = "random", pages = "200MiB", touches = 100000 }}
"""


def scenario(policy: str):
    (s,) = _core.load(SCENARIO.format(policy=policy), "py-policy.toml")
    return s


def test_a_python_policy_decides_exactly_as_its_rust_twin():
    rust = api.simulate(scenario("pressure"))
    py = api.simulate(scenario("pressure"), policy=Pressure)
    cols = ["time_s", "vm_id", "vm", "action", "outcome"]
    assert len(rust.decisions) >= 5
    assert rust.decisions[cols].equals(py.decisions[cols])
    assert set(py.decisions["policy"]) == {"pressure.py"}
    # The summary names the policy that decided, as the log does.
    assert (py.summary["host"]["policy"], rust.summary["host"]["policy"]) == ("pressure.py", "pressure")
    # Its scenario.toml says which policy ran, not only the host.policy it replaced.
    assert py.scenario_toml.startswith("# Run with the Python policy memvisor.examples.pressure.Pressure ('pressure.py') passed to memvisor.run")
    assert not rust.scenario_toml.startswith("# Run with")
    assert py.summary["vms"] == rust.summary["vms"], "the same decisions make the same run"


def test_a_scenario_names_a_python_policy_next_to_it(tmp_path: Path):
    (tmp_path / "mypolicies.py").write_text(
        "from memvisor.policy import Policy, balloon_target\n"
        "class Halve(Policy):\n"
        "    name = 'halve'\n"
        "    period_s = None\n"
        "    def decide(self, view):\n"
        "        return [balloon_target(v['id'], v['memory'] // 2, 'give back half') for v in view['vms']]\n"
    )
    f = tmp_path / "s.toml"
    f.write_text(SCENARIO.format(policy="python:mypolicies:Halve").replace('duration = "40s"', 'duration = "5s"'))
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "run", str(f), "--quiet", "--out", str(tmp_path / "run")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    log = (tmp_path / "run" / "decisions.jsonl").read_text()
    assert '"policy": "halve"' in log and "give back half" in log
    # The controller's floors hold for Python policies too: 'busy' keeps its 350 MiB reservation.
    assert "clamped to 162 MiB to keep busy's floor of 350 MiB" in log
    # A decision for a VM the host does not have is refused, and the run says so.
    (tmp_path / "mypolicies.py").write_text((tmp_path / "mypolicies.py").read_text().replace("v['id']", "v['id'] + 7"))
    p = subprocess.run([sys.executable, "-m", "memvisor.cli", "run", str(f), "--quiet", "--out", str(tmp_path / "run")], capture_output=True, text=True)
    assert p.returncode == 0 and "decisions of policy 'halve' name VMs the host does not have (#7, #8)" in p.stderr, p.stderr
    # A class that only looks like a policy, and a module that is not there: scenario mistakes
    # found as the run starts, with the status of one (2), and no folder.
    (tmp_path / "mypolicies.py").write_text("class Lookalike:\n    name = 'x'\n    period_s = 1\n    def decide(self, view):\n        return []\n")
    for policy, expect in [
        ("python:mypolicies:Lookalike", "class 'Lookalike' is not a memvisor.Policy subclass: write class Lookalike(memvisor.Policy)"),
        ("python:nosuchmod:X", "cannot import module 'nosuchmod'"),
    ]:
        f.write_text(SCENARIO.format(policy=policy))
        p = subprocess.run([sys.executable, "-m", "memvisor.cli", "run", str(f), "--quiet", "--out", str(tmp_path / "bad")], capture_output=True, text=True)
        assert p.returncode == 2 and expect in p.stderr and not (tmp_path / "bad").exists(), p.stderr


def test_a_policy_module_s_mistakes_are_told_before_the_run(tmp_path: Path):
    (tmp_path / "pol.py").write_text(
        "from memvisor.policy import Policy\n"
        "class MostFree(Policy):\n"
        "    def decid(self, view):\n"
        "        return []\n"
        "class Args(Policy):\n"
        "    def __init__(self, x):\n"
        "        self.x = x\n"
        "    def decide(self, view):\n"
        "        return []\n"
    )
    (tmp_path / "uses.py").write_text("import no_such_library_here\n")
    for policy, expect in [
        ("python:pol:MostFree", "class 'MostFree' does not override decide(view) (it defines decid(): a misspelling?)"),
        ("python:pol:MostFre", "module 'pol' has no class 'MostFre'; did you mean 'MostFree'?"),
        ("python:pol:Args", "Args() raised TypeError: Args.__init__() missing 1 required positional argument: 'x': a policy is made with no arguments"),
        # The module is there; what it imports is not: where that failed, not "cannot import".
        ("python:uses:X", f"module 'uses' failed as it was imported: {tmp_path / 'uses.py'}:1: ModuleNotFoundError: No module named 'no_such_library_here'"),
        ("python:nosuch:X", f"cannot import module 'nosuch': no nosuch.py in {tmp_path} (the scenario's folder, or files_from's), nor a module"),
        ("python:pol.py:MostFree", "(MODULE is a module's name, without .py: python:pol:MostFree)"),
    ]:
        f = tmp_path / "s.toml"
        f.write_text(SCENARIO.format(policy=policy))
        (s,) = api.load(str(f))
        with pytest.raises(memvisor.ScenarioError) as e:
            api.simulate(s)
        # Located where the scenario names the policy (SCENARIO's line 8), as the engine's own errors are.
        assert str(e.value).startswith(f"{f}:8:10: host.policy: '{policy}': ") and expect in str(e.value), str(e.value)
    # Named by a --set, located there.
    with pytest.raises(memvisor.ScenarioError) as e:
        memvisor.run(str(f), sets=["host.policy=python:nosuch:X"])
    assert str(e.value).startswith("--set host.policy=python:nosuch:X: host.policy: "), str(e.value)
    # A path for the module is refused as the scenario loads, saying where the file goes.
    with pytest.raises(memvisor.ScenarioError, match="MODULE is a module's name, not a path: put the file"):
        scenario("python:../pol:MostFree")
    # files_from naming no folder is said, not taken for a module that is not there; a module on
    # Python's path is still found.
    f.write_text(SCENARIO.format(policy="python:gonepol:Args").replace('seed = 3', f'seed = 3\nfiles_from = "{tmp_path / "gone"}"'))
    (s,) = api.load(str(f))
    with pytest.raises(memvisor.ScenarioError, match=f"cannot import module 'gonepol': the folder {tmp_path / 'gone'} that files_from names .* does not exist"):
        api.simulate(s)
    f.write_text(f.read_text().replace("python:gonepol:Args", "python:memvisor.examples.pressure:Pressure").replace('duration = "40s"', 'duration = "1s"'))
    (s,) = api.load(str(f))
    assert api.simulate(s).summary["host"]["policy"] == "pressure.py"
    # A package's module that imports a module of its own package that is not there.
    # (A package is imported once per process, as Python does: this one's name is its own.)
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("")
    (tmp_path / "brokenpkg" / "b.py").write_text("import brokenpkg.missing\n")
    f.write_text(SCENARIO.format(policy="python:brokenpkg.b:P"))
    (s,) = api.load(str(f))
    with pytest.raises(memvisor.ScenarioError, match=re.escape(f"module 'brokenpkg.b' failed as it was imported: {tmp_path / 'brokenpkg' / 'b.py'}:1: ModuleNotFoundError")):
        api.simulate(s)

    class Typo(memvisor.Policy):
        def decide_(self, view):
            return []

    # Given to simulate, as a class or an instance, the same.
    for given in (Typo, Typo()):
        with pytest.raises(memvisor.ScenarioError, match=re.escape("class 'Typo' does not override decide(view) (it defines decide_(): a misspelling?)")):
            api.simulate(scenario("static"), policy=given)
    # An instance given its own decide has one.
    own = Typo()
    own.decide = lambda view: []
    (short,) = _core.load(SCENARIO.format(policy="static").replace('duration = "40s"', 'duration = "1s"'), "own.toml")
    assert api.simulate(short, policy=own).policy_calls >= 1


def test_a_run_says_when_a_policy_overreached_or_was_slow(capsys):
    from memvisor import cli

    class Greedy(memvisor.Policy):
        period_s = None

        def decide(self, view):
            return [memvisor.policy.balloon_target(v["id"], 2 * v["memory"], "all of it and more") for v in view["vms"]]

    (s,) = _core.load(SCENARIO.format(policy="static").replace('reservation = "350MiB"', 'reservation = "0B"').replace('reservation = "128MiB"', 'reservation = "0B"')
                      .replace('duration = "40s"', 'duration = "1s"'), "greedy.toml")
    r = api.simulate(s, policy=Greedy)
    assert r.policy_calls == 1 and 0 <= r.policy_s <= r.run_s
    cli._report_finished([r])
    err = capsys.readouterr().err
    assert "2 decisions of policy 'Greedy' asked for more than the VM's memory (busy, idle); each was clamped" in err, err
    assert "took" not in err

    class Slow(memvisor.Policy):
        period_s = 0.5

        def decide(self, view):
            import time

            time.sleep(0.35)
            return []

    # Four calls in 2 simulated seconds: 1.4 s of real time, most of the run's.
    (s,) = _core.load(SCENARIO.format(policy="static").replace('duration = "40s"', 'duration = "2s"'), "slow.toml")
    r = api.simulate(s, policy=Slow)
    assert r.policy_calls >= 4 and r.policy_s >= 1.4, (r.policy_calls, r.policy_s)
    cli._report_finished([r])
    err = capsys.readouterr().err
    m = re.search(r"policy 'Slow' took \d+\.\d s of the run's \d+\.\d s of real time in decide \(\d calls, (\d+\.\d) ms each\)", err)
    assert m and float(m[1]) >= 350, err


def test_a_balloon_beyond_the_drivers_cap_is_logged_as_capped():
    class All(memvisor.Policy):
        name = "all"
        period_s = None

        def decide(self, view):
            return [memvisor.policy.balloon_target(v["id"], 1 << 40, "take everything") for v in view["vms"]]

    # ESX caps a balloon at 65 % of the guest (Mem.CtlMaxPercent); 'idle' has no floor left to keep.
    (s,) = _core.load(SCENARIO.format(policy="static").replace('profile = "kvm"', 'profile = "esx"').replace('reservation = "128MiB"', 'reservation = "0B"'), "cap.toml")
    r = api.simulate(s, policy=All)
    # The action is what the policy asked; the outcome says, in order, what became of it.
    (action, idle) = r.decisions[r.decisions["vm"] == "idle"][["action", "outcome"]].iloc[0]
    assert action == "set balloon target 1 TiB", action
    assert idle == "clamped to 512 MiB, all of idle's memory; applied, capped at 332.8 MiB, the balloon's maximum (MCTLMAX)", idle


def test_python_policy_errors_are_clear():
    with pytest.raises(memvisor.ScenarioError, match="host.policy.*python:MODULE:CLASS"):
        scenario("python:no colon")
    # Scenario errors (what the CLI shows as one line), naming the field.
    with pytest.raises(memvisor.ScenarioError, match="host.policy: .*cannot import module 'no_such_module'"):
        api.simulate(scenario("python:no_such_module:X"))
    with pytest.raises(memvisor.ScenarioError, match="host.policy: .*module 'json' has no class 'X'"):
        api.simulate(scenario("python:json:X"))

    class Never(memvisor.Policy):
        name = "never"
        period_s = 0

        def decide(self, view):
            return []

    with pytest.raises(memvisor.ScenarioError, match=r"host.policy: policy 'never': period_s must be seconds from 0.001 to 1.8e10, or None"):
        api.simulate(scenario("static"), policy=Never)
    # A period that rounds to no time at all would never let the run advance; one past the clock's
    # 64-bit nanoseconds would silently mean once; True is not 1 s.
    for period, shown in [(1e-12, "got 1e-12"), (1e300, r"got 1e\+300"), (True, "not a boolean"), ("5s", "got '5s'")]:
        Never.period_s = period
        with pytest.raises(memvisor.ScenarioError, match=f"period_s must be seconds from 0.001 to 1.8e10, or None, {shown}"):
            api.simulate(scenario("static"), policy=Never)
    with pytest.raises(ValueError, match="step_s must be simulated seconds, at least 1e-6"):
        api.simulate(scenario("static"), step_s=0.0)
    with pytest.raises(TypeError, match="simulate takes one resolved scenario"):
        api.simulate(api.load("nfs-balloon"))

    class Broken(memvisor.Policy):
        name = "broken"

        def decide(self, view):
            raise RuntimeError("oops")

    with pytest.raises(memvisor.RunError, match=r"policy 'broken' failed at 0.000 s of the run: .*test_policy.py:\d+: RuntimeError: oops") as e:
        api.simulate(scenario("static"), policy=Broken)
    # Raised in decide itself: one line.
    assert "\n" not in str(e.value)

    def helper(view):
        return view["vms"][99]

    class Deeper(memvisor.Policy):
        name = "deeper"

        def decide(self, view):
            return helper(view)

    # Raised further in: the line says where, and Python's traceback says how it got there.
    with pytest.raises(memvisor.RunError) as e:
        api.simulate(scenario("static"), policy=Deeper)
    head, *trace = str(e.value).splitlines()
    assert re.fullmatch(r"policy 'deeper' failed at 0.000 s of the run: .*test_policy.py:\d+: .*IndexError.*", head), head
    assert trace[0] == "Traceback (most recent call last):"
    files = [t for t in trace if t.startswith("  File")]
    assert files[0].endswith(", in decide") and files[-1].endswith(", in helper"), trace

    class Unnamed(memvisor.Policy):
        def decide(self, view):
            raise RuntimeError("oops")

    # A policy that gives no name is known by its class's.
    assert Unnamed.name == "Unnamed"
    with pytest.raises(memvisor.RunError, match=r"policy 'Unnamed' failed at "):
        api.simulate(scenario("static"), policy=Unnamed)

    # A field of the wrong type is named, and booleans are not numbers (nor numbers booleans).
    drop = object()  # a field of the balloon_target decision below left out

    def returning(d: dict):
        if d.get("kind", "balloon_target") != "balloon_target":
            d = {"bytes": drop, **d}
        decision = {k: v for k, v in {"vm_id": 0, "kind": "balloon_target", "bytes": 0, "reason": "r", **d}.items() if v is not drop}

        class Once(memvisor.Policy):
            name = "once"

            def decide(self, view):
                return [decision]

        return Once

    for d, expect in [
        ({"vm_id": -1}, "'vm_id' must be a VM's id"),
        ({"vm_id": "a"}, "'vm_id' must be a VM's id"),
        ({"vm_id": True}, "'vm_id' must be a VM's id"),
        ({"vm_id": None}, "a 'balloon_target' decision needs the vm_id of the VM it is for"),
        ({"kind": 3}, "'kind' must be a string"),
        ({"reason": 5}, "'reason' must be a string"),
        ({"bytes": True}, "'bytes' must be a non-negative integer, not a boolean"),
        ({"kind": "blocked", "blocked": 1}, "'blocked' must be True or False, not 1"),
        ({"kind": "memory_state", "state": "high"}, "a 'memory_state' decision is the host's: its vm_id must be None"),
        ({"bytess": 5}, r"a 'balloon_target' decision has no field 'bytess' \(its fields: vm_id, kind, bytes, reason\)"),
        ({"kind": "blocked", "blocked": True, "bytes": 5}, "a 'blocked' decision has no field 'bytes'"),
        # A misspelt field is named before the field it stands for is missed.
        ({"bytes": drop, "bytess": 5}, "a 'balloon_target' decision has no field 'bytess'"),
        ({"bytes": drop}, "a decision lacks 'bytes'"),
        ({"kind": "balloon"}, "unknown decision kind 'balloon' \\(kinds: balloon_target, grant_limit, swap_target, blocked, "
         "break_large_pages, shrink_frontswap, sharing, memory_state\\)"),
        # A state is one of the ESX tables' (esxtop's names), which the time series records.
        ({"vm_id": None, "kind": "memory_state", "state": "normal"}, "memory state 'normal' is not one of: high, soft, hard, low, clear"),
    ]:
        with pytest.raises(memvisor.RunError, match=f"policy 'once'.*decision 0 of 1: {expect}"):
            api.simulate(scenario("static"), policy=returning(d))

    # What decide returned instead of a list is shown; the policy is named once.
    class Answers(memvisor.Policy):
        answer = None

        def decide(self, view):
            return self.answer

    for answer, expect in [(None, "not a NoneType: None"), ({"vm_id": 0}, "not a dict: {'vm_id': 0}"), ((), "not a tuple: ()")]:
        Answers.answer = answer
        with pytest.raises(memvisor.RunError) as e:
            api.simulate(scenario("static"), policy=Answers)
        assert f"policy 'Answers' failed at 0.000 s of the run: TypeError: decide must return a list of decisions, {expect}" in str(e.value)
        assert str(e.value).count("Answers") == 1
    Answers.answer = [[]]
    with pytest.raises(memvisor.RunError, match="decision 0 of 1: each decision must be a dict"):
        api.simulate(scenario("static"), policy=Answers)

    class NoReason(memvisor.Policy):
        name = "terse"

        def decide(self, view):
            return [{"vm_id": 0, "kind": "balloon_target", "bytes": 0, "reason": ""}]

    with pytest.raises(memvisor.RunError, match="policy 'terse'.*needs a reason"):
        api.simulate(scenario("static"), policy=NoReason)

    # The helpers pass values on as given: a fraction, a string or a boolean is not quietly a
    # number of bytes, and a number too large says so.
    def helper(nbytes):
        class H(memvisor.Policy):
            name = "helper"
            period_s = None

            def decide(self, view):
                return [memvisor.policy.shrink_frontswap(0, nbytes, "r")]

        return H

    for value, expect in [(1.7, "a non-negative integer, not 1.7"), ("100", "a non-negative integer, not '100'"), (True, "a non-negative integer, not a boolean"),
                          (2**64, "a non-negative integer below 2\\^64, not 18446744073709551616"), (2**130, "a non-negative integer below 2\\^64"), (-1, "a non-negative integer, not -1")]:
        with pytest.raises(memvisor.RunError, match=f"policy 'helper'.*'bytes' must be {expect}"):
            api.simulate(scenario("static"), policy=helper(value))
    import numpy as np

    r = api.simulate(scenario("static"), policy=helper(np.int64(0)))
    assert set(r.decisions["outcome"]) == {"not applied: the guest runs no frontswap"}, "a numpy integer is an integer"


def test_a_policy_module_beside_each_scenario_is_its_own(tmp_path: Path):
    """Two scenarios in two folders, each with its own pol.py: each runs its own module, not the
    one imported first (which sys.modules would return), and a module that fails says where."""
    for d in ["a", "b"]:
        (tmp_path / d).mkdir()
        (tmp_path / d / "pol.py").write_text(
            "from memvisor.policy import Policy, memory_state\n"
            f"class P(Policy):\n    name = 'policy-{d}'\n    period_s = 1.0\n"
            "    def decide(self, view):\n        return [memory_state('high', 'plenty')]\n"
        )
        (tmp_path / d / "s.toml").write_text(SCENARIO.format(policy="python:pol:P").replace('duration = "40s"', 'duration = "2s"'))
    runs = [memvisor.run(str(tmp_path / d / "s.toml"))[0] for d in "ab"]
    assert [set(r.decisions["policy"]) for r in runs] == [{"policy-a"}, {"policy-b"}]
    assert not runs[0].scenario_toml.startswith("# Run with"), "its host.policy did decide it"
    # A package beside the scenario, whose module imports its sibling relatively, still imports.
    (tmp_path / "a" / "pkg").mkdir()
    (tmp_path / "a" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "a" / "pkg" / "helpers.py").write_text("STATE = 'high'\n")
    (tmp_path / "a" / "pkg" / "mod.py").write_text(
        "from memvisor.policy import Policy, memory_state\nfrom . import helpers\n"
        "class P(Policy):\n    name = 'in-a-package'\n    def decide(self, view):\n        return [memory_state(helpers.STATE, 'from a package')]\n"
    )
    (r,) = memvisor.run(str(tmp_path / "a" / "s.toml"), sets=["host.policy=python:pkg.mod:P"])
    assert set(r.decisions["policy"]) == {"in-a-package"}
    (tmp_path / "a" / "pol.py").write_text("x = 1\ny = )\n")
    with pytest.raises(memvisor.ScenarioError, match=r"module 'pol' failed as it was imported: .*pol.py:2: SyntaxError"):
        memvisor.run(str(tmp_path / "a" / "s.toml"))
    # A module that exits as it is imported does not take memvisor with it, silently.
    (tmp_path / "a" / "pol.py").write_text("import sys\nsys.exit(4)\n")
    with pytest.raises(memvisor.ScenarioError, match=r"module 'pol' failed as it was imported: .*pol.py:2: SystemExit: 4"):
        memvisor.run(str(tmp_path / "a" / "s.toml"))
    (tmp_path / "a" / "pol.py").write_text(
        "from memvisor.policy import Policy\nclass P(Policy):\n    name = 'p'\n    def __init__(self):\n        raise ValueError('bad config')\n    def decide(self, view):\n        return []\n"
    )
    with pytest.raises(memvisor.ScenarioError, match=r"host.policy: 'python:pol:P': P\(\) raised .*pol.py:5: ValueError: bad config"):
        memvisor.run(str(tmp_path / "a" / "s.toml"))


def test_what_python_hands_over_is_taken_as_python_means_it(small_scenario):
    """Not only the exact built-in types: a policy object that is not a Policy subclass but has
    name, period_s and decide; sets as a generator; numpy's integers and booleans."""
    import numpy as np

    class Duck:
        name = "duck"
        period_s = 1.0

        def decide(self, view):
            return [{"vm_id": v["id"], "kind": "blocked", "blocked": np.bool_(False), "reason": "quack"} for v in view["vms"]]

    (r,) = memvisor.run(str(small_scenario), policy=Duck, jobs=np.int64(1), sets=(x for x in ["duration=3s"]))
    assert set(r.decisions["policy"]) == {"duck"} and r.summary["sim_time_s"] == 3.0, r.summary["sim_time_s"]


def test_on_a_case_too():
    """The nfs-balloon case (its 4GiB variant, the first 60 simulated seconds) under `pressure`."""
    (s,) = [x for x in api.load("nfs-balloon", ["host.policy=pressure", "duration=60s"]) if x.variant == "4GiB"]
    rust = api.simulate(s)
    py = api.simulate(s, policy=Pressure)
    cols = ["time_s", "vm_id", "vm", "action", "outcome"]
    assert len(rust.decisions) >= 5
    assert rust.decisions[cols].equals(py.decisions[cols])


def test_a_frontswap_shrink_reaches_the_guest_and_says_why_it_did_nothing():
    """`shrink_frontswap` goes through to the guest's `frontswap_shrink`; these guests run no
    frontswap (a KVM host has no tmem), so the outcome says so, and their view has no frontswap."""
    seen = []

    class Shrink(memvisor.Policy):
        name = "shrink"
        period_s = None

        def decide(self, view):
            seen.extend((v["frontswap"], v["frontswap_selfshrink"]) for v in view["vms"])
            return [memvisor.policy.shrink_frontswap(v["id"], 0, "all of it") for v in view["vms"]]

    r = api.simulate(scenario("static"), policy=Shrink)
    assert seen == [(None, False), (None, False)]
    assert list(r.decisions["action"]) == ["shrink frontswap to 0 B"] * 2
    assert set(r.decisions["outcome"]) == {"not applied: the guest runs no frontswap"}


def test_a_live_backend_view_that_contradicts_itself_is_refused():
    """A backend's `observe()` is checked as it is read: a balloon or a reservation larger than the
    VM's memory would make the policies subtract past zero, so it is an error naming the VM and the
    field, not a decision built on it."""
    views = []

    class Capture(memvisor.Policy):
        name = "capture"

        def decide(self, view):
            views.append(view)
            return []

    api.simulate(scenario("static"), policy=Capture)
    good = views[-1]

    class Backend:
        def __init__(self, field):
            self.field = field

        def observe(self):
            v = {**good, "vms": [dict(x) for x in good["vms"]]}
            if self.field:
                v["vms"][0][self.field] = v["vms"][0]["memory"] + 4096
            return v

        def apply(self, decision):
            return "applied"

    assert isinstance(_core.Controller("pressure").tick(Backend(None)), list), "the captured view itself is accepted"
    for f in ["balloon_size", "balloon_target", "reservation"]:
        with pytest.raises(ValueError, match=f"VM 'busy' '{f}' is .* bytes, more than its memory"):
            _core.Controller("pressure").tick(Backend(f))


def test_a_policy_that_never_returns_does_not_hold_an_interrupt(tmp_path: Path):
    """Ctrl-C while a policy's decide loops for ever: the run folder goes, and the command ends
    with the interrupt's status, leaving the stuck run behind rather than waiting for it."""
    import signal

    from conftest import interrupted

    (tmp_path / "stuck.py").write_text(
        "import time\nfrom memvisor.policy import Policy\n"
        "class Forever(Policy):\n    period_s = 1.0\n    def decide(self, view):\n"
        "        open('deciding', 'w').close()\n        while True:\n            time.sleep(0.05)\n"
    )
    (tmp_path / "s.toml").write_text(SCENARIO.format(policy="python:stuck:Forever"))
    exe = Path(sys.executable).parent / "memvisor"
    p = subprocess.Popen([str(exe), "run", "s.toml", "--quiet", "--out", "out"], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    stderr = interrupted(p, (tmp_path / "deciding").exists, "the policy was never asked")
    assert p.returncode == 130 and stderr.splitlines() == ["error: interrupted"], (p.returncode, stderr)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["deciding", "s.toml", "stuck.py"]
