"""The Python API: load scenarios, run them, get DataFrames back."""

from __future__ import annotations

import json
import operator
import os
import re
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # pandas costs a third of a second to import: only where a DataFrame is made
    import pandas as pd

from memvisor import _core
from memvisor.signals import SIGNAL_POLL_S, deferred_signals, reraise


@dataclass
class RunResult:
    """What one run (one variant) produced."""

    name: str
    variant: str | None
    scenario_toml: str
    summary: dict
    timeseries: pd.DataFrame
    decisions: pd.DataFrame
    wall_s: float = field(default=0.0)
    run_s: float = field(default=0.0)  # of wall_s, the time spent simulating
    # A Python policy's calls of decide, and the real seconds they took (of run_s).
    policy_calls: int = field(default=0)
    policy_s: float = field(default=0.0)

    def report_rows(self) -> list[dict]:
        """The report rows, one per VM: `vm` and the scenario's report columns. The one place they
        are built, for the DataFrame, the run folder's summary and the printed table alike."""
        cols = self.summary["report_columns"]
        return [{"vm": vm["name"], **{c: vm["report"].get(c) for c in cols}} for vm in self.summary["vms"]]

    def report(self) -> pd.DataFrame:
        """The report table: one row per VM with the scenario's report columns."""
        import pandas as pd

        # A value a run has none of (a phase that never ran) is NaN, so the columns stay numbers.
        df = pd.DataFrame(self.report_rows())
        for c in self.summary["report_columns"]:
            df[c] = pd.to_numeric(df[c])
        return df


def cases() -> list[tuple[str, str]]:
    """The shipped case studies as (name, description)."""
    return list(_core.cases())


def _untomlable(v, path: str = "") -> str | None:
    """The dotted path of the first value in a scenario dict that TOML cannot hold (None, a set, an
    object), or None."""
    import datetime

    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                return f"{path}.{k!r}".lstrip(".")
            found = _untomlable(x, f"{path}.{k}".lstrip("."))
            if found is not None:
                return found
        return None
    if isinstance(v, (list, tuple)):
        return next((f for i, x in enumerate(v) if (f := _untomlable(x, f"{path}[{i}]")) is not None), None)
    ok = (str, int, float, bool, datetime.date, datetime.time)
    return None if isinstance(v, ok) else (path or "<dict>")


def as_text(path: str | os.PathLike) -> str:
    """A path as text the engine can carry (it takes UTF-8): a name's bytes that are not UTF-8
    are written as `\\xff` escapes, so errors still name the file; other names are unchanged."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_scenario_text(spec: str | dict) -> tuple[str, str]:
    """Returns (text, origin) for a case name, a scenario file path, or a scenario as a dict (the
    TOML file's tables as Python values)."""
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, (str, dict)):
        raise TypeError(f"a scenario is a case name, a file path or a dict, not {type(spec).__name__}")
    if isinstance(spec, str) and not spec.strip():
        raise _core.ScenarioError("an empty name: give a case name or a scenario file")
    if isinstance(spec, dict):
        import tomli_w

        try:
            return tomli_w.dumps(spec), "<dict>"
        except TypeError as e:
            where = _untomlable(spec)
            raise _core.ScenarioError(f"<dict>: {where + ': ' if where else ''}not a scenario value: {e}") from None
    shown = as_text(spec)
    text = _core.case_text(shown)
    if text is not None:
        return text, f"case:{spec}"
    path = Path(spec)
    if "\n" in spec or (re.match(r"\s*[\w.-]+\s*=\s*\S", spec) and not path.exists() and not spec.endswith(".toml")):
        # The text of a scenario, not a name: read as one it would be a file name too long to be.
        raise _core.ScenarioError("this looks like a scenario's TOML text, not a case name or a file: save it as a .toml "
                                  "file (from Python, a dict also serves: tomllib.loads(text))")
    if path.is_file():
        folder = path.resolve().parent
        if as_text(folder) != str(folder):
            # The engine finds the scenario's relative files (traces, a policy) through it.
            raise _core.ScenarioError(f"{shown}: its folder {as_text(folder)} has a name that is not UTF-8, which the files "
                                      "a scenario names beside it are found through; move the scenario to a folder named in UTF-8")
        raw = path.read_bytes()
        try:
            return raw.decode("utf-8"), shown
        except UnicodeDecodeError as e:
            raise _core.ScenarioError(f"{shown}: byte {e.start}: a scenario file is UTF-8 text (TOML), and this is not") from None
    if path.is_dir():
        raise _core.ScenarioError(f"{shown}: is a folder; a scenario is a .toml file or a case name")
    if path.exists():
        raise _core.ScenarioError(f"{shown}: not a regular file (a device, a pipe or a socket); a scenario is a .toml file or a case name")
    import difflib

    names = [n for n, _ in cases()]
    near = difflib.get_close_matches(spec.lower(), names, n=1)
    hint = f"did you mean '{near[0]}'? " if near else ""
    raise _core.ScenarioError(f"{shown}: no such case or file ({hint}cases: {', '.join(names)})")


def load(spec: str | dict, sets: Sequence[str] | None = (), variants: Sequence[str] | None = ()) -> list:
    """Loads a case, a scenario file or a scenario dict; one resolved scenario per variant (per
    variant named in `variants`, if any: the others are not resolved, so their problems do not
    stop these; a name that is not a variant is a ScenarioError listing them). `sets` are
    'key=value' overrides; None for either is none. Errors name an override as `sets entry
    'key=value'`; the scenarios' `warnings` name it as the command line does (`--set key`)."""
    sets = listed(sets)
    try:
        return _load(spec, sets, variants)
    except _core.ScenarioError as e:
        raise _core.ScenarioError(api_words(str(e), sets)) from None


def listed(sets) -> list[str]:
    """`sets` as a list of 'key=value' strings, read once (a generator), for the call and its
    messages; None is none. Anything else is a TypeError, before any of it is used (a lone string
    would be taken a character at a time)."""
    if sets is None:
        return []
    if isinstance(sets, (str, bytes)):
        raise TypeError(f"sets must be a list of 'key=value' strings, not one string: sets=[{sets!r}]")
    if isinstance(sets, dict):
        raise TypeError(f"sets must be a list of 'key=value' strings, not {sets!r}")
    sets = list(sets)
    if not all(isinstance(x, str) for x in sets):
        raise TypeError(f"sets must be a list of 'key=value' strings, not {sets!r}")
    return sets


def api_words(message: str, sets: Sequence[str] = (), vary: tuple[str, Sequence[str]] | None = None) -> str:
    """A message of the engine's or the commands', which name overrides as the command line gives
    them (`--set key=value`, `--vary key=value`), in the words of the Python call that gave them:
    `sets` entries and a sweep's (`vary`: its key and) `values`."""
    named = [(f"--set {x}", f"sets entry {x!r}") for x in sets]
    # A warning names the key alone.
    named += [(f"--set {k} ", f"the sets entry for {k} ") for k in (x.split("=", 1)[0].strip() for x in sets)]
    if vary is not None:
        key, values = vary
        named += [(f"--vary {key}={v}", f"values entry {v!r} of {key}") for v in values]
        named += [(f"--vary {key}:", f"values of {key}:"), (f"--vary {key} ", f"the swept value of {key} ")]
    # Longest first: `--set a=10` holds `--set a=1`.
    for cli, api in sorted(named, key=lambda n: len(n[0]), reverse=True):
        message = message.replace(cli, api)
    return message


def load_scenarios(spec: str | dict, sets: Sequence[str] | None = (), variants: Sequence[str] | None = ()) -> list:
    """`load`, for the commands: errors name overrides by their command-line options."""
    return _load(spec, listed(sets), variants)


def _load(spec: str | dict, sets: list[str], variants: Sequence[str] | None) -> list:
    # Python's usual way to leave an optional argument out.
    variants = () if variants is None else variants
    if isinstance(variants, (str, bytes)):
        raise TypeError(f"variants must be a list of names, not the string {variants!r}")
    variants = list(variants)
    if not all(isinstance(x, str) for x in variants):
        raise TypeError(f"variants must be a list of names, not {variants!r}")
    text, origin = read_scenario_text(spec)
    return _core.load(text, origin, sets, variants)


def files_dir(scenario) -> Path | None:
    """Where the relative files a resolved scenario names (traces, a Python policy's module) are
    looked for: its `files_from` (its file's folder, or the original's for a run folder's
    scenario.toml); None for a case or a dict."""
    return None if scenario.files_from is None else Path(scenario.files_from)


def series_frame(ts: dict):
    """The engine's time series (`Simulation.results()["timeseries"]`) as a DataFrame: `time_s`,
    `vm`, `state`, then the numeric columns, which arrive as one block of little-endian f64s, a
    column after another, and become the frame's without a copy."""
    import numpy as np
    import pandas as pd

    rows = len(ts["vm"])
    values = np.frombuffer(ts["values"], dtype="<f8").reshape(len(ts["columns"]), rows)
    frame = pd.DataFrame(values.T, columns=ts["columns"], copy=False)
    frame.insert(0, "state", ts["state"])
    frame.insert(0, "vm", ts["vm"])
    frame.insert(0, "time_s", np.frombuffer(ts["time_s"], dtype="<f8"))
    return frame


def simulate(
    scenario,
    progress: Callable[[float, float | None], None] | None = None,
    step_s: float | None = None,
    check_invariants: bool = False,
    traces: dict | None = None,
    policy=None,
) -> RunResult:
    """Runs one resolved scenario to its end. Trace files its workloads name are loaded from the
    scenario's folder (`files_dir`) or the working directory unless `traces` supplies them.
    `policy`: a Python policy (a `memvisor.Policy` subclass, or an instance for this run alone) in
    place of the scenario's;
    a scenario naming `python:MODULE:CLASS` gets a new instance of that class. The engine runs in
    steps of `step_s` simulated seconds, between which progress is reported and an interruption
    heard; by default each step is sized to take about `STEP_WALL_S` of real time. Results do not
    depend on the steps."""
    import time

    from memvisor.traces import load_traces

    if not isinstance(scenario, _core.Scenario):
        raise TypeError(f"simulate takes one resolved scenario (an item of memvisor.load's list), not {type(scenario).__name__}")
    if step_s is not None and not (isinstance(step_s, (int, float)) and step_s >= 1e-6):  # nan fails too
        raise ValueError(f"step_s must be simulated seconds, at least 1e-6 (inf: the whole run in one step), or None, not {step_s!r}")
    if traces is None:
        traces = load_traces(scenario, files_dir(scenario))
    from memvisor.policy import check_decide, instantiate, resolve

    # Given with policy=, it replaces the scenario's host.policy; else a `python:` one is resolved.
    given = policy is not None
    if given and not callable(getattr(policy, "decide", None)):
        raise TypeError(f"policy= takes a memvisor.Policy subclass or instance (with a decide method), not {policy!r}; "
                        "a built-in policy is named in the scenario: sets=['host.policy=NAME']")
    named = not given and scenario.policy.startswith("python:")
    try:
        if named:
            policy = resolve(scenario.policy, files_dir(scenario))
        if isinstance(policy, type):
            policy = instantiate(policy, policy.__name__ if given else scenario.policy)
        elif given:
            check_decide(policy, type(policy).__name__)
        t0 = time.perf_counter()
        sim = _core.Simulation(scenario, traces, policy)
    except _core.ScenarioError as e:
        if not named:
            raise
        # Located where the scenario names the policy, as the engine locates its own errors.
        raise _core.ScenarioError(f"{scenario.policy_at}: {e}") from None
    t = 0.0
    run_s = 0.0
    # The first steps are short: how fast the run goes is not known yet.
    step = 0.01 if step_s is None else step_s
    while True:
        t += step
        t1 = time.perf_counter()
        done = sim.run_until(t)
        took = time.perf_counter() - t1
        run_s += took
        if step_s is None:
            # A large run (thousands of VMs) can take seconds of real time per simulated one.
            # A step at most doubles, so a quiet stretch cannot make the next busy one long.
            step = min(STEP_MAX_S, 2 * step, max(STEP_MIN_S, step * STEP_WALL_S / max(took, 1e-6)))
        if check_invariants:
            sim.check_invariants()
        if progress is not None:
            progress(sim.now_s, scenario.duration_s)
        if done:
            break
    r = sim.results()
    import pandas as pd

    ts = series_frame(r["timeseries"])
    decisions = pd.DataFrame(r["decisions"], columns=["time_s", "policy", "vm_id", "vm", "action", "reason", "outcome"])
    # A host-wide decision has no VM: a nullable integer column keeps the ids integers (a float
    # column would hold NaN, which decisions.jsonl cannot carry: NaN is not JSON).
    decisions["vm_id"] = decisions["vm_id"].astype("Int64")
    toml = r["scenario_toml"]
    if given:
        # The scenario's host.policy did not decide this run: say which policy did, so that the
        # folder does not claim to reproduce it.
        cls = type(policy)
        toml = (f"# Run with the Python policy {cls.__module__}.{cls.__qualname__} ('{policy.name}') passed to memvisor.run, in place\n"
                f"# of host.policy below: name it as host.policy = \"python:MODULE:CLASS\" to run it again.\n{toml}")
    return RunResult(
        name=scenario.name,
        variant=scenario.variant,
        scenario_toml=toml,
        summary=json.loads(r["summary_json"]),
        timeseries=ts,
        decisions=decisions,
        wall_s=time.perf_counter() - t0,
        run_s=run_s,
        policy_calls=sim.policy_time[0],
        policy_s=sim.policy_time[1],
    )


#: Real time a step of the engine aims to take by default: how soon progress shows and an
#: interruption is heard.
STEP_WALL_S = 0.25
#: Bounds on a default step, simulated seconds: the longest (small runs cross into Python rarely)
#: and the shortest.
STEP_MAX_S = 5.0
STEP_MIN_S = 0.001


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class _Stopped(Exception):
    """Raised in a run's thread when another run failed or the user interrupted."""


#: How long an interrupted run may take to reach its next step before it is left behind, s: a
#: step ends within milliseconds, unless a Python policy's `decide` does not return.
STOP_GRACE_S = 2.0

#: Threads of runs left behind that way (`stuck_runs`).
_left: list[threading.Thread] = []


def stuck_runs() -> int:
    """How many runs left behind by an interrupt are still running (a policy's `decide` that has
    not returned): the command's exit must not wait for them."""
    return sum(t.is_alive() for t in _left)


def simulate_all(
    scenarios: Sequence,
    progress_for: Callable[[int], Callable[[float, float | None], None] | None] | None = None,
    jobs: int | None = None,
    **kw,
) -> list[RunResult]:
    """Runs resolved scenarios side by side, a thread each up to `jobs` (default: `cpus()`); the
    engine lets go of the GIL while it simulates, so they run in parallel, and each run is what it
    would be alone. Results in the scenarios' order; `progress_for(i)` gives run i's progress
    callback. When one run fails or the caller is interrupted, the others stop at their next step."""
    if jobs is not None:
        try:
            n = -1 if isinstance(jobs, bool) else operator.index(jobs)  # numpy integers too
        except TypeError:
            n = -1
        if n < 1:
            raise ValueError(f"jobs must be a number of threads, at least 1, or None (all CPUs), not {jobs!r}")
        jobs = n
    pol = kw.get("policy")
    if pol is not None and not isinstance(pol, type) and len(scenarios) > 1:
        raise ValueError("a policy instance keeps one run's state: pass its class to run several scenarios or variants")
    stop = threading.Event()
    every = kw.pop("progress", None)  # one callback for all runs, as `run(..., progress=f)` passes it

    threads: dict[int, threading.Thread] = {}

    def one(i: int, s) -> RunResult:
        threads[i] = threading.current_thread()
        shown = progress_for(i) if progress_for else every

        def progress(now: float, total: float | None) -> None:
            if stop.is_set():
                raise _Stopped
            if shown is not None:
                shown(now, total)

        try:
            return simulate(s, progress=progress, **kw)
        except _core.RunError as e:
            # Which of several runs failed: the message alone names a VM, not the variant.
            if s.variant and len(scenarios) > 1:
                raise _core.RunError(f"variant '{s.variant}': {e}") from None
            raise

    with deferred_signals() as got:
        pool = ThreadPoolExecutor(max_workers=max(1, min(jobs or cpus(), len(scenarios))))
        futures = [pool.submit(one, i, s) for i, s in enumerate(scenarios)]
        # The first failure, whichever run it is in, stops the others; so does a signal.
        failed = None
        while not got:
            done, pending = wait(futures, timeout=SIGNAL_POLL_S, return_when=FIRST_EXCEPTION)
            failed = next((e for f in done if (e := f.exception()) is not None), None)
            if failed is not None or not pending:
                break
        if failed is not None or got:
            stop.set()
            for f in futures:
                f.cancel()
        # Interrupted, a run stops at its next step; one whose policy never returns is left.
        _, held = wait(futures, timeout=STOP_GRACE_S) if got else ((), ())
        _left.extend(threads[i] for i, f in enumerate(futures) if f in held and i in threads)
        pool.shutdown(wait=not held)
    if got:
        reraise(got[0])
    if failed is not None:
        raise failed
    return [f.result() for f in futures]


def run(
    spec: str | dict,
    sets: Sequence[str] = (),
    jobs: int | None = None,
    *,
    variants: Sequence[str] = (),
    policy=None,
    progress: Callable[[float, float | None], None] | None = None,
    step_s: float | None = None,
    check_invariants: bool = False,
    traces: dict | None = None,
) -> list[RunResult]:
    """Runs the variants of a case, scenario file or scenario dict (those named in `variants`, or
    all), side by side on `jobs` CPUs (`simulate_all`; the other arguments are `simulate`'s, with
    one `progress` callback for every run); a `sets` entry that replaces what a variant sets is
    reported as a warning (UserWarning)."""
    import warnings

    sets = listed(sets)  # read once: its warnings below name its entries
    scenarios = load(spec, sets, variants)
    # A policy object replaces the scenario's host.policy: what that policy would ignore is moot.
    moot = {w for s in scenarios for w in s.policy_warnings} if policy is not None else set()
    for w in dict.fromkeys(w for s in scenarios for w in s.warnings if w not in moot):
        warnings.warn(api_words(w, sets), stacklevel=2)
    return simulate_all(
        scenarios, jobs=jobs, policy=policy, progress=progress, step_s=step_s, check_invariants=check_invariants, traces=traces
    )
