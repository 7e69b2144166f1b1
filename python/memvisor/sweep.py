"""Sweeps: a scenario run at every point of a grid of overrides (one key's values, the cartesian
product of several keys' values, or an explicit list of points), every variant at every point, in
parallel worker processes or on a Dask cluster; one report value tabulated, and every run's report
gathered into one table with the overrides as columns.

    df = sweep("paging-stress", "vm.kali.workload.desktop.active", ["300MiB", "600MiB"])
    df.loc["300MiB", "5-instances"]      # pgpgin_KiB/s of the first VM

The engine is deterministic, so the tables do not depend on how many workers ran them, nor where.
With a store (a folder), each finished run is kept as it finishes, and a sweep run again with the
same store and the same engine build does only the runs it lacks."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import multiprocessing
import re
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    import pandas as pd

from memvisor import _core, api
from memvisor.atomic import write_atomically
from memvisor.console import fmt, some_of
from memvisor.params import listed_twice
from memvisor.signals import SIGNAL_POLL_S, deferred_signals, held, reraise

#: The table's last column, with variants: the neighbouring variants whose values differ by the
#: largest factor.
JUMP = "biggest jump"

# Characters that end a word in a variant or VM name (`6-instances`, `web_1`).
_SEP = "-_ ./:"


@dataclass
class Grid:
    """A sweep checked and ready to run: for each point (its overrides), one resolved scenario per
    variant. `key` names the swept keys (joined by " × "), `values` labels the points."""

    key: str
    values: list[str]
    column: str
    scenarios: list[list]
    origin: str
    vm: str | None = None
    points: list[dict] | None = None
    #: Where the points' values were given, for messages: `--vary` or `--points FILE:`.
    source: str = "--vary"

    @property
    def runs(self) -> int:
        return sum(len(s) for s in self.scenarios)


def product(varies: Sequence[tuple[str, Sequence[str]]]) -> list[dict]:
    """The cartesian product of keys' values, as points (dicts of overrides), the last key fastest."""
    keys = [k for k, _ in varies]
    if twice := listed_twice(keys):
        raise ValueError(f"a key is varied twice: {', '.join(twice)}")
    return [dict(zip(keys, combo)) for combo in itertools.product(*(list(v) for _, v in varies))]


def points_from_csv(path: Path) -> list[dict]:
    """Explicit points: a CSV file whose header names the keys and whose rows give their values."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # -sig: a spreadsheet's byte-order mark
            # strict: a quote left open or text after a closing quote is an error, not a value.
            reader = csv.reader(f, strict=True)
            lines = list(reader)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: byte {e.start}: a points file is UTF-8 text (CSV)") from None
    except csv.Error as e:
        raise ValueError(f"{path}:{reader.line_num}: {e} (a quoted value ends with a quote, before the next comma)") from None
    # A blank line (spaces at most) is skipped; a row of empty values (",,") is a point without them.
    lines = [(i, line) for i, line in enumerate(lines, start=1) if len(line) > 1 or (line and line[0].strip())]
    if len(lines) < 2:
        raise ValueError(f"{path}: no points (a header of keys, then a row of values per point)")
    (at, header), rows = lines[0], lines[1:]
    keys = [k.strip() for k in header]
    if "" in keys:
        raise ValueError(f"{path}:{at}: an empty key; each column names one key")
    if twice := listed_twice(keys):
        raise ValueError(f"{path}:{at}: a key given twice: {', '.join(twice)}; each column names one key")
    for i, line in rows:
        if len(line) != len(keys):
            raise ValueError(f"{path}:{i}: {len(line)} values for {len(keys)} keys; every point gives one value for every key")
        empty = [k for k, v in zip(keys, line) if not v.strip()]
        if empty:
            raise ValueError(f"{path}:{i}: no value for {', '.join(empty)}; every point gives one value for every key")
    first: dict[tuple, int] = {}
    for i, line in rows:
        at_line = first.setdefault(tuple(v.strip() for v in line), i)
        if at_line != i:
            # Its runs would be the same; and the table, a row per point, would have one index twice.
            raise ValueError(f"{path}:{i}: repeats the point of line {at_line}; give each point once")
    return [{k: v.strip() for k, v in zip(keys, line)} for _, line in rows]


def overlaps(a: str, b: str) -> bool:
    """Whether two dotted scenario keys name the same value, or one lies inside the other."""
    return a == b or a.startswith(f"{b}.") or b.startswith(f"{a}.")


def refuse_sets_of(sets: Sequence[str], keys: Sequence[str], why: str) -> None:
    """Raises `ScenarioError` for a `--set` of a value among `keys`, which the command sets itself."""
    for s in sets:
        k = s.split("=", 1)[0].strip()
        for key in keys:
            if overlaps(k, key):
                raise _core.ScenarioError(f"--set {s}: {key} {why}")


#: How the sweep's messages name its `vm` and `column` arguments and a report column's scenario
#: key: the command line's options, or (`PYTHON_OPTIONS`) the Python call's arguments.
CLI_OPTIONS = {"vm": "--vm ", "column": "--column", "columns": "--set report.columns=[...]"}
PYTHON_OPTIONS = {"vm": "vm=", "column": "column=", "columns": "sets=['report.columns=[...]']"}


def plan(spec: str, key: str, values: Sequence[str], column: str | None = None, sets: Sequence[str] = (), vm: str | None = None,
         options: dict = CLI_OPTIONS) -> Grid:
    """One key's values (see `plan_points`)."""
    values = list(values)
    if not values:
        raise ValueError("a sweep needs at least one value")
    return plan_points(spec, [{key: v} for v in values], column, sets, vm, options=options)


def plan_points(spec: str, points: Sequence[dict], column: str | None = None, sets: Sequence[str] = (), vm: str | None = None,
                source: str = "--vary", options: dict = CLI_OPTIONS) -> Grid:
    """Loads the scenario once per point (the `sets`, then the point's overrides), so that a bad
    key, value or column raises the scenario's own `ScenarioError` before anything runs. Messages
    locate a point's value in `source` (`--vary`, or `--points FILE:`) and name `vm` and `column`
    as `options` does."""
    points = [dict(p) for p in points]
    if not points:
        raise ValueError("a sweep needs at least one point")
    keys = list(dict.fromkeys(k for p in points for k in p))
    key = " × ".join(keys)
    values = [", ".join(str(p.get(k, "-")) for k in keys) for p in points]
    refuse_sets_of(sets, keys, "is varied by the sweep: vary it or set it, not both")
    _, origin = api.read_scenario_text(spec)
    try:
        scenarios = [api.load_scenarios(spec, [*sets, *(f"{k}={v}" for k, v in p.items())]) for p in points]
    except _core.ScenarioError as e:
        msg = str(e)
        for k in keys:
            msg = msg.replace(f"--set {k}=", f"{source} {k}=")
        raise _core.ScenarioError(msg) from None
    # Values that differ in writing only (1GiB and 1024MiB) resolve to the same runs: one point.
    seen: dict = {}
    for value, per in zip(values, scenarios):
        same = seen.setdefault(tuple(s.to_toml() for s in per), value)
        if same != value:
            raise ValueError(f"{source} {key}: {same} and {value} are the same point once resolved; give each point once")
    first = scenarios[0][0]
    # A VM absent from some runs (a variant without it) shows "-" there; one in none is a mistake.
    names = list(dict.fromkeys(n for per_value in scenarios for s in per_value for n in s.vm_names))
    if vm is not None and vm not in names:
        group = [n for n in names if n.startswith(f"{vm}-") and n[len(vm) + 1:].isdigit()]
        what = f"a group of {len(group)} VMs, name one of them" if group else "no such VM in any run"
        raise _core.ScenarioError(f"{options['vm']}{vm}: {what} (VMs: {some_of(names, 12)})")
    if column is None:
        if not first.report_columns:
            raise _core.ScenarioError(f"{first.name} has no report columns; name one with {options['column']}")
        column = first.report_columns[0]
    for s in (s for per_value in scenarios for s in per_value):
        if column not in s.report_columns:
            raise _core.ScenarioError(
                f"'{column}' is not a report column of {s.name} (report columns: {', '.join(s.report_columns)}; "
                f"others can be added with {options['columns']})"
            )
    return Grid(key, values, column, scenarios, origin, vm, points, source)


def warnings_of(grid: Grid) -> list[str]:
    """The scenarios' warnings, once each, naming the swept keys where they were given."""
    out = []
    for w in (w for per in grid.scenarios for s in per for w in s.warnings):
        for k in grid.key.split(" × "):
            w = w.replace(f"--set {k} ", f"{grid.source} {k} ")
        out.append(w)
    return list(dict.fromkeys(out))


def sweep(
    spec: str,
    key: str,
    values: Sequence[str],
    column: str | None = None,
    sets: Sequence[str] = (),
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    vm: str | None = None,
) -> pd.DataFrame:
    """Runs every variant of `spec` (a case or scenario file) with `key` set to each value; see
    `run_points` for the table. `vm` names the VM whose report value fills the cells (default: the
    first; without variants, every VM has a column unless `vm` names one). Scenario warnings (a
    swept key a variant sets itself) are Python warnings, as `memvisor.run` gives them. Its worker
    processes import the calling script anew: a script runs it under `if __name__ == "__main__":`.
    A failed run's cell holds its error (a string)."""
    import warnings

    if isinstance(values, (str, bytes)):
        # A lone string would be swept a character at a time.
        raise TypeError(f"values must be a list of values, not one string: values=[{values!r}]")
    values, sets = list(values), api.listed(sets)
    if twice := listed_twice([str(v) for v in values]):
        # Its runs would be the same; and the table, a row per value, would have one index twice.
        raise ValueError(f"values: {', '.join(twice)} given more than once; give each value once")
    try:
        grid = plan(spec, key, values, column, sets, vm, options=PYTHON_OPTIONS)
    except (_core.ScenarioError, ValueError) as e:
        raise type(e)(api.api_words(str(e), sets, (key, values))) from None
    for w in warnings_of(grid):
        warnings.warn(api.api_words(w, sets, (key, values)), stacklevel=2)
    return run_points(grid, jobs, progress)[0]


@functools.cache
def _engine_id() -> str:
    """The engine that computes the runs: a hash of the compiled extension, so that a store kept
    across a rebuild that changed a mechanism is not taken for this engine's results."""
    return hashlib.sha256(Path(_core.__file__).read_bytes()).hexdigest()


def _task_id(toml: str, inputs: str = "") -> str:
    """A run's identity in a store: the resolved scenario decides the run, bit for bit, given the
    engine and the files it reads (`inputs`, from `_inputs_id`)."""
    return hashlib.sha256(f"{_engine_id()}\n{toml}\n{inputs}".encode("utf-8")).hexdigest()[:32]


def input_files(scenario, imports: dict | None = None) -> list[Path]:
    """The files a run reads besides its scenario, resolved, each once: its traces, its captured
    page contents, and a policy module beside the scenario with the modules beside it that it
    imports. `imports` caches each policy's imports over the runs of one sweep (a sweep's points
    mostly share one policy: its files are read once, not once a run)."""
    from memvisor.policy import PREFIX, module_file
    from memvisor.traces import resolve_trace_path

    base = api.files_dir(scenario)
    files = [resolve_trace_path(name, base) for name in scenario.trace_files]
    files += [Path(f) for f in scenario.captured_files]
    if scenario.policy.startswith(PREFIX):
        files.append(module_file(scenario.policy, base))
        cache = {} if imports is None else imports
        key = (scenario.policy, base)
        if key not in cache:
            cache[key] = _imported_beside(scenario.policy, base)
        files += cache[key]
    return list(dict.fromkeys(f.resolve() for f in files if f is not None and f.is_file()))


def _inputs_id(scenario, digests: dict[Path, str], imports: dict | None = None) -> str:
    """The contents of a run's `input_files` (an edited file is another run). Over one sweep,
    `digests` caches each file's hash and `imports` each policy's imports."""
    out = []
    for f in input_files(scenario, imports):
        if f not in digests:
            h = hashlib.sha256()
            with f.open("rb") as r:
                for block in iter(lambda: r.read(1 << 20), b""):
                    h.update(block)
            digests[f] = h.hexdigest()
        out.append(digests[f])
    return " ".join(out)


STORE_ENTRY = re.compile(r"[0-9a-f]+\.json(\.tmp\d+)?")


def refuse_foreign_out(out: Path) -> None:
    """Raises ValueError unless `out` is new, empty, or an earlier sweep's folder (one with its
    `runs/` store or `sweep.parquet`, where other files, such as `--csv` tables, may lie beside
    them): a sweep writes there and a later one trusts what it finds."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"--out {out}: is a file; name a new folder or an earlier sweep's")
    store, table = out / "runs", out / "sweep.parquet"
    ours = store.is_dir() or table.is_file()
    foreign = [p.name for p in out.iterdir() if p.name not in ("runs", "sweep.parquet") and not (ours and p.is_file())]
    if store.exists():
        foreign += [f"runs/{p.name}" for p in store.iterdir() if not (p.is_file() and STORE_ENTRY.fullmatch(p.name))] if store.is_dir() else ["runs"]
    if table.exists() and not table.is_file():
        foreign.append("sweep.parquet (not a file)")
    if foreign:
        shown = ", ".join(sorted(foreign)[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(f"--out {out}: holds what no sweep wrote ({shown}); name a new folder or an earlier sweep's "
                         "(one with its runs/ store or sweep.parquet)")


def replaced_sweep(out: Path, scenario: str) -> str | None:
    """The scenario an earlier sweep's `sweep.parquet` in `out` was of, if it was another's (or
    cannot be told), so that replacing it is said; None when it was this scenario's or is absent."""
    import pandas as pd

    table = out / "sweep.parquet"
    if not table.is_file():
        return None
    try:
        names = pd.read_parquet(table, columns=["scenario"])["scenario"].dropna().unique().tolist()
    except (OSError, ValueError, KeyError):  # an older sweep's table, without the column, or a damaged one
        return "an unknown scenario"
    return None if names == [scenario] else ", ".join(f"'{n}'" for n in names) or "an unknown scenario"


class StoreError(ValueError):
    """A sweep store's entry that is not a finished run's result."""


def _report_row(r) -> bool:
    """Whether `r` is a report row as `RunResult.report_rows` makes it: the VM's name, then numbers
    (or null where a VM has no figure)."""
    number = lambda x: x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))  # noqa: E731
    return isinstance(r, dict) and isinstance(r.get("vm"), str) and all(number(x) for k, x in r.items() if k != "vm")


def _stored(f: Path) -> tuple:
    """A run kept in the store: (True, report rows) or (False, its error)."""
    try:
        entry = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        entry = None
    ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], bool)
    if not (ok and (isinstance(entry[1], list) and all(_report_row(r) for r in entry[1]) if entry[0] else isinstance(entry[1], str))):
        raise StoreError(f"{f}: a damaged store entry (not a finished run's result); delete it to run that point again")
    return tuple(entry)


def _imported_beside(policy: str, base: Path | None) -> tuple[Path, ...]:
    """The files of the modules beside the scenario (in `base`) that a `python:` policy's module
    imports, directly or through one another, found by reading their import statements (nothing
    is run: a module that fails is the run's error to report). Sorted."""
    from modulefinder import ModuleFinder

    from memvisor.policy import PREFIX

    if base is None:
        return ()
    module = policy[len(PREFIX):].partition(":")[0]
    finder = ModuleFinder(path=[str(base)])  # only what lies beside the scenario is found
    try:
        finder.import_hook(module)
    except (ImportError, SyntaxError, OSError, ValueError):
        return ()
    root = base.resolve()
    files = {Path(m.__file__).resolve() for m in finder.modules.values() if m.__file__}
    return tuple(sorted(f for f in files if f.is_relative_to(root)))


def run_points(
    grid: Grid,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    scheduler: str | None = None,
    store: Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs a planned sweep over `jobs` worker processes (default: the CPUs this process may use),
    or on the Dask cluster whose scheduler is at `scheduler`; `progress(done, total)` is called as
    runs finish. With a `store` folder, each finished run is kept there as it finishes and runs
    already there are not run again (an interrupted sweep resumes).

    Returns (table, runs). `runs`: a row per run and VM: the point's overrides as columns, then
    `variant`, `vm`, the report columns, and `error` (the message of a run that failed; its row has
    no VM). The table: a row per value (the index, named after the key), a column per variant (per
    VM, or only `grid.vm`, when the scenario has no variants; the columns' name is the report
    column), each cell the report value of the first VM or of `grid.vm` (of that VM) or, for a run
    that failed, its error message as a string; then `JUMP`. A failed run does not stop the others:
    `failed_cells` lists them."""
    import pandas as pd

    tasks = [(s.to_toml(), grid.origin) for per_value in grid.scenarios for s in per_value]
    results: list = [None] * len(tasks)
    todo = list(range(len(tasks)))
    ids: list[str] = []
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
        digests: dict[Path, str] = {}
        imports: dict = {}
        ids = [_task_id(t[0], _inputs_id(s, digests, imports)) for t, s in zip(tasks, (s for p in grid.scenarios for s in p))]
        for i, t in enumerate(tasks):
            f = store / f"{ids[i]}.json"
            if f.exists():
                results[i] = _stored(f)
        todo = [i for i, r in enumerate(results) if r is None]

    def keep(i: int, result) -> None:
        results[todo[i]] = result
        if store is not None:
            f = store / f"{ids[todo[i]]}.json"
            write_atomically(f, json.dumps(result))

    already = len(tasks) - len(todo)
    shown = None if progress is None else (lambda done, _total: progress(already + done, len(tasks)))
    if todo:
        run = _run_dask if scheduler is not None else run_in_workers
        run([tasks[i] for i in todo], scheduler if scheduler is not None else (jobs or api.cpus()), shown, keep)
    elif progress is not None:
        progress(len(tasks), len(tasks))
    runs = _long(grid, results)
    results = iter(results)
    by_vm = grid.scenarios[0][0].variant is None
    rows: list[dict] = []
    errors: list[str | None] = []  # without variants, a failed run's error fills its row
    for per_value in grid.scenarios:
        row: dict = {}
        error = None
        for s in per_value:
            ok, res = next(results)
            if not by_vm:
                picked = next((r for r in res if r["vm"] == grid.vm), None) if ok and grid.vm else (res[0] if ok else None)
                row[s.variant] = (picked.get(grid.column) if picked else None) if ok else res
            elif ok:
                row.update({r["vm"]: r.get(grid.column) for r in res if grid.vm is None or r["vm"] == grid.vm})
            else:
                error = res
        rows.append(row)
        errors.append(error)
    # In order of first appearance; when no VM ran at all, one column named after the scenario.
    names = list(dict.fromkeys(c for row in rows for c in row)) or [grid.scenarios[0][0].name]
    rows = [row if error is None else dict.fromkeys(names, error) for row, error in zip(rows, errors)]
    table = [[row.get(c) for c in names] for row in rows]
    df = pd.DataFrame(table, index=pd.Index(grid.values, name=grid.key), columns=names)
    if not by_vm:
        # Variants are a series (1 to 8 instances, growing memory); the VMs of one scenario are not.
        df[JUMP] = [biggest_jump(names, cells) for cells in table]
    df.columns.name = grid.column
    return df, runs


def _long(grid: Grid, results: list):
    """Every run's report rows with the point's overrides as columns."""
    import pandas as pd

    rows = []
    it = iter(results)
    points = grid.points or [{grid.key: v} for v in grid.values]
    for point, per in zip(points, grid.scenarios):
        for s in per:
            ok, res = next(it)
            base = {"scenario": s.name, **point, "variant": s.variant}
            if ok:
                rows.extend({**base, **r, "error": None} for r in res)
            else:
                rows.append({**base, "vm": None, "error": res})
    return pd.DataFrame(rows)


def failed_cells(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The (value, column, error) of every run in a sweep table that failed."""
    return [(v, c, x) for v in df.index for c in df.columns if c != JUMP and isinstance(x := df.at[v, c], str)]


def biggest_jump(labels: Sequence[str], values: Sequence) -> str:
    """Of the neighbouring columns, the pair whose values differ by the largest factor, e.g.
    `6→7 ×12.4` (a fall shows a factor below 1). From zero the factor is infinite, so such a pair
    wins, shown with its values (`4→5 0→14,342.4`; the largest such value if there are several).
    Pairs of zeros, failed runs, missing and negative values are skipped; `-` if no pair is left, or
    if no value changes."""
    best: tuple[tuple, str] | None = None
    for (a, x), (b, y) in zip(zip(labels, values), zip(labels[1:], values[1:])):
        if not (_number(x) and _number(y)):
            continue
        lo, hi = sorted((x, y))
        if lo < 0 or hi == 0:
            continue
        if lo == 0:
            rank, text = (1, hi), f"0→{fmt(y)}" if x == 0 else f"{fmt(x)}→0"
        else:
            rank, text = (0, hi / lo), f"×{_factor(y / x)}"
        if best is None or rank > best[0]:
            best = rank, f"{_pair(a, b)} {text}"
    return "-" if best is None or best[0] == (0, 1.0) else best[1]


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _factor(r: float) -> str:
    if r >= 100:
        return f"{r:,.0f}"
    if r >= 10:
        return f"{r:.1f}"
    if r >= 1:
        return f"{r:.2f}"
    return f"{r:.2g}"


def _pair(a: str, b: str) -> str:
    """`6-instances`, `7-instances` → `6→7`: whole words the two names share at either end are
    dropped (the column headers show them); what differs is kept."""
    suffix = next((a[i:] for i in range(1, len(a)) if a[i] in _SEP and b.endswith(a[i:]) and len(b) > len(a) - i), "")
    a, b = a[: len(a) - len(suffix)], b[: len(b) - len(suffix)]
    n = next((i + 1 for i in range(len(a) - 2, -1, -1) if a[i] in _SEP and b.startswith(a[: i + 1]) and len(b) > i + 1), 0)
    return f"{a[n:]}→{b[n:]}"


def _run_one(text: str, origin: str) -> tuple[bool, list[dict] | str]:
    """In a worker: reloads one resolved scenario (`_core.Scenario` does not pickle) and runs it.
    Returns (True, its report rows) or (False, the error of a run that failed)."""
    try:
        (s,) = _core.load(text, origin)
        r = api.simulate(s)
    except (_core.RunError, _core.ScenarioError, _core.TraceError) as e:
        return False, str(e)
    return True, r.report_rows()


def _ignore_terminal_signals() -> None:
    """Worker initializer: Ctrl-C, and the terminal closing, signal the whole process group; only
    the parent acts on them (by ending the workers), so that workers print no tracebacks."""
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)


def _run_dask(tasks: list[tuple], address: str, progress: Callable[[int, int], None] | None, on_result: Callable[[int, object], None]) -> None:
    """`_run_one` on every task on the Dask cluster at `address`; `on_result(i, result)` as each
    finishes. Interrupted, it cancels what is left on the cluster."""
    from dask.distributed import Client, as_completed

    with Client(address, timeout="30s") as client:
        futures = [client.submit(_run_one, *t, pure=False) for t in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        if progress is not None:
            progress(0, len(tasks))
        try:
            for done, f in enumerate(as_completed(futures), start=1):
                on_result(index[f.key], tuple(f.result()))
                if progress is not None:
                    progress(done, len(tasks))
        except BaseException:
            client.cancel(futures)
            raise


def run_in_workers(
    tasks: list[tuple],
    jobs: int,
    progress: Callable[[int, int], None] | None,
    on_result: Callable[[int, object], None] | None = None,
    fn: Callable = _run_one,
) -> list:
    """`fn` (default `_run_one`) on every task, in worker processes; the results in the tasks'
    order, each also given to `on_result(i, result)` as it finishes."""
    results: list = [None] * len(tasks)
    with deferred_signals() as got:
        # spawn, not fork: the parent has threads (the progress bar's, the pool's own).
        pool = ProcessPoolExecutor(
            max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_terminal_signals
        )
        try:
            with held(signal.SIGINT, signal.SIGHUP):  # the pool starts its workers as tasks are submitted
                futures = {pool.submit(fn, *t): i for i, t in enumerate(tasks)}
            if progress is not None:
                progress(0, len(tasks))
            pending, finished = set(futures), 0
            while pending and not got:
                done, pending = wait(pending, timeout=SIGNAL_POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    results[futures[f]] = f.result()
                    if on_result is not None:
                        on_result(futures[f], results[futures[f]])
                    finished += 1
                    if progress is not None:
                        progress(finished, len(tasks))
            if got:
                raise _Interrupted
        except BaseException:
            # Ctrl-C, SIGTERM or a worker that died: end the workers now rather than after their runs.
            for p in list((getattr(pool, "_processes", None) or {}).values()):
                p.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            if not got:
                raise
    if got:
        reraise(got[0])
    pool.shutdown()
    return results


class _Interrupted(Exception):
    """A signal arrived while the workers ran (it is re-raised once they are ended)."""
