"""Sensitivity sweeps: one scenario key given each of several values in turn, every variant run at
each value in parallel worker processes, and one report value tabulated.

    df = sweep("paging-stress", "vm.kali.workload.desktop.active", ["300MiB", "600MiB"])
    df.loc["300MiB", "5-instances"]      # pgpgin_KiB/s of the first VM

The engine is deterministic, so the table does not depend on how many workers ran it."""

from __future__ import annotations

import math
import multiprocessing
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pandas as pd

from memvisor import _core, api
from memvisor.console import fmt

#: The table's last column: the neighbouring columns whose values differ by the largest factor.
JUMP = "biggest jump"

# Characters that end a word in a variant or VM name (`6-instances`, `web_1`).
_SEP = "-_ ./:"


@dataclass
class Grid:
    """A sweep checked and ready to run: for each value, one resolved scenario per variant."""

    key: str
    values: list[str]
    column: str
    scenarios: list[list]
    origin: str
    base: Path | None
    vm: str | None = None

    @property
    def runs(self) -> int:
        return sum(len(s) for s in self.scenarios)


def plan(spec: str, key: str, values: Sequence[str], column: str | None = None, sets: Sequence[str] = (), vm: str | None = None) -> Grid:
    """Loads the scenario once per value (the `sets`, then `key=value`), so that a bad key, value or
    column raises the scenario's own `ScenarioError` before anything runs."""
    values = list(values)
    if not values:
        raise ValueError("a sweep needs at least one value")
    _, origin = api.read_scenario_text(spec)
    try:
        scenarios = [api.load(spec, [*sets, f"{key}={v}"]) for v in values]
    except _core.ScenarioError as e:
        raise _core.ScenarioError(str(e).replace(f"--set {key}=", f"--vary {key}=")) from None
    first = scenarios[0][0]
    if column is None:
        if not first.report_columns:
            raise _core.ScenarioError(f"{first.name} has no report columns; name one with --column")
        column = first.report_columns[0]
    for s in (s for per_value in scenarios for s in per_value):
        if column not in s.report_columns:
            raise _core.ScenarioError(
                f"'{column}' is not a report column of {s.name} (report columns: {', '.join(s.report_columns)}; "
                "others can be added with --set report.columns=[...])"
            )
    return Grid(key, values, column, scenarios, origin, api.base_dir(spec), vm)


def warnings_of(grid: Grid) -> list[str]:
    """The scenarios' warnings, once each, naming the swept key as --vary."""
    seen = dict.fromkeys(w.replace(f"--set {grid.key} ", f"--vary {grid.key} ") for per in grid.scenarios for s in per for w in s.warnings)
    return list(seen)


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
    `run_grid` for the table. `vm` names the VM whose report value fills the cells (default: the
    first)."""
    return run_grid(plan(spec, key, values, column, sets, vm), jobs, progress)


def run_grid(grid: Grid, jobs: int | None = None, progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Runs a planned sweep over `jobs` worker processes (default: the CPUs this process may use);
    `progress(done, total)` is called as runs finish.

    The table: a row per value (the index, named after the key), a column per variant (per VM when
    the scenario has no variants; the columns' name is the report column), each cell the report
    value of the first VM or of `grid.vm` (of that VM) or, for a run that failed, its error message as a string;
    then `JUMP`. A failed run does not stop the others: `failed_cells` lists them."""
    tasks = [(s.to_toml(), grid.origin, None if grid.base is None else str(grid.base)) for per_value in grid.scenarios for s in per_value]
    results = iter(_run_all(tasks, jobs or api.cpus(), progress))
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
                row.update({r["vm"]: r.get(grid.column) for r in res})
            else:
                error = res
        rows.append(row)
        errors.append(error)
    # In order of first appearance; when no VM ran at all, one column named after the scenario.
    names = list(dict.fromkeys(c for row in rows for c in row)) or [grid.scenarios[0][0].name]
    rows = [row if error is None else dict.fromkeys(names, error) for row, error in zip(rows, errors)]
    table = [[row.get(c) for c in names] for row in rows]
    df = pd.DataFrame(table, index=pd.Index(grid.values, name=grid.key), columns=names)
    df[JUMP] = [biggest_jump(names, cells) for cells in table]
    df.columns.name = grid.column
    return df


def failed_cells(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The (value, column, error) of every run in a sweep table that failed."""
    return [(v, c, x) for v in df.index for c in df.columns if c != JUMP and isinstance(x := df.at[v, c], str)]


def biggest_jump(labels: Sequence[str], values: Sequence) -> str:
    """Of the neighbouring columns, the pair whose values differ by the largest factor, e.g.
    `6→7 ×12.4` (a fall shows a factor below 1). From zero the factor is infinite, so such a pair
    wins, shown with its values (`4→5 0→14,342.4`; the largest such value if there are several).
    Pairs of zeros, failed runs, missing and negative values are skipped; `-` if no pair is left."""
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
    return "-" if best is None else best[1]


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


def _run_one(text: str, origin: str, base: str | None) -> tuple[bool, list[dict] | str]:
    """In a worker: reloads one resolved scenario (`_core.Scenario` does not pickle) and runs it.
    Returns (True, its report rows) or (False, the error of a run that failed)."""
    try:
        (s,) = _core.load(text, origin)
        r = api.simulate(s, base=None if base is None else Path(base))
    except (_core.RunError, _core.ScenarioError, _core.TraceError) as e:
        return False, str(e)
    return True, r.report_rows()


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C at the terminal signals the whole process group; only the parent
    acts on it (by ending the workers), so that workers print no tracebacks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Workers started within the block inherit a blocked SIGINT, so none is ever delivered to them,
    even before `_ignore_sigint` runs; a Ctrl-C meanwhile reaches this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _run_all(tasks: list[tuple], jobs: int, progress: Callable[[int, int], None] | None) -> list:
    """`_run_one` on every task, in worker processes; the results in the tasks' order."""
    results: list = [None] * len(tasks)
    with api.deferred_signals() as got:
        # spawn, not fork: the parent has threads (the progress bar's, the pool's own).
        pool = ProcessPoolExecutor(
            max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint
        )
        try:
            with _sigint_blocked():  # the pool starts its workers as tasks are submitted
                futures = {pool.submit(_run_one, *t): i for i, t in enumerate(tasks)}
            if progress is not None:
                progress(0, len(tasks))
            pending, finished = set(futures), 0
            while pending and not got:
                done, pending = wait(pending, timeout=api.SIGNAL_POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    results[futures[f]] = f.result()
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
        api.reraise(got[0])
    pool.shutdown()
    return results


class _Interrupted(Exception):
    """A signal arrived while the workers ran (it is re-raised once they are ended)."""
