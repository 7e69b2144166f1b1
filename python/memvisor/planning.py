"""`memvisor plan`: capacity questions answered by searching over simulated runs. For a scenario and
a named VM: the smallest reservation, the smallest host memory, or the largest number of guests
that keeps the VM's runtime within a slowdown of its baseline (its runtime at the most generous end
of the range: a full reservation, the largest host, one guest).

The search is a bisection over a grid of values (a step apart). Runtime need not be monotonic in the
value, and runs vary with the seed, so each probed value runs with several seeds (in parallel) and
counts as within the bound only if every seed is; after the bisection the answer is checked: the
value itself within the bound, its neighbour toward the constrained end outside it, and every
probed value on the generous side within it. The answer is "sharp" when all of that holds and the
seeds agree at both bracketing values; otherwise it says what did not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

from memvisor import _core, api

@dataclass
class Probe:
    """One probed value: each seed's runtime of the VM (None: the run failed or the VM did not
    finish) and its slowdown against the baseline."""

    value: int
    runtimes: list[float | None]
    errors: list[str]
    baseline: float | None = None

    @property
    def slowdowns(self) -> list[float | None]:
        return [None if r is None or not self.baseline else r / self.baseline for r in self.runtimes]

    def within(self, bound: float) -> bool:
        return all(s is not None and s <= bound for s in self.slowdowns)

    def agree(self, bound: float) -> bool:
        """Whether the seeds agree on which side of the bound the value is."""
        sides = {s is not None and s <= bound for s in self.slowdowns}
        return len(sides) == 1


@dataclass
class Answer:
    question: str
    value: int | None
    bound: float
    baseline: float
    probes: dict[int, Probe]
    bracket: tuple[int | None, int | None]
    sharp: bool
    notes: list[str] = field(default_factory=list)


def _runtime(text: str, origin: str, vm: str) -> tuple[float | None, str | None]:
    """In a worker: one run; the named VM's runtime (None and why if it has none)."""
    try:
        (s,) = _core.load(text, origin)
        r = api.simulate(s, step_s=1e9)
    except (_core.RunError, _core.ScenarioError, _core.TraceError) as e:
        return None, str(e)
    for v in r.summary["vms"]:
        if v["name"] == vm:
            if v.get("runtime_s") is None:
                if any(p.get("state") == "killed" for p in v.get("processes", [])):
                    return None, f"VM '{vm}': a process was killed by the OOM killer"
                return None, f"VM '{vm}' did not finish within the run"
            return v["runtime_s"], None
    return None, f"no VM '{vm}' in the run"


def one_scenario(spec, scenarios: list) -> str:
    """Why plan cannot take `scenarios`: it plans for one, and these are variants."""
    return f"{spec}: plan needs one scenario; this one has variants: choose one with --variant ({', '.join(x.variant for x in scenarios)})"


class Planner:
    """Runs the probes of one question."""

    def __init__(
        self, spec: str, vm: str, key: str, sets: list[str], seeds: list[int], jobs: int | None, fmt: Callable[[int], str], variant: str | None = None
    ):
        self.spec, self.vm, self.key, self.sets, self.seeds, self.variant = spec, vm, key, list(sets), seeds, variant
        self.jobs = jobs or api.cpus()
        self.fmt = fmt
        self.probes: dict[int, Probe] = {}
        _, self.origin = api.read_scenario_text(spec)

    def probe(self, values: list[int]) -> None:
        """Runs every seed at each value not yet probed, all in parallel."""
        from memvisor.sweep import run_in_workers

        new = [v for v in dict.fromkeys(values) if v not in self.probes]
        tasks, owners = [], []
        for v in new:
            for seed in self.seeds:
                scenarios = api.load_scenarios(self.spec, [*self.sets, f"{self.key}={self.fmt(v)}", f"seed={seed}"], [self.variant] if self.variant else [])
                if len(scenarios) != 1:
                    raise _core.ScenarioError(one_scenario(self.spec, scenarios))
                tasks.append((scenarios[0].to_toml(), self.origin, self.vm))
                owners.append(v)
        results = run_in_workers(tasks, self.jobs, None, fn=_runtime) if tasks else []
        for v in new:
            got = [r for o, r in zip(owners, results) if o == v]
            self.probes[v] = Probe(v, [r for r, _ in got], [e for _, e in got if e])


class ProbeValues(Sequence[int]):
    """lo, lo + step, ... and hi, in that order or reversed, without the list: bisection probes
    a few dozen points of a grid that may have billions."""

    def __init__(self, lo: int, hi: int, step: int, reverse: bool):
        self.steps, self.hi, self.reverse = range(lo, hi + 1, step), hi, reverse
        self.n = len(self.steps) + (self.steps[-1] != hi)

    def __len__(self) -> int:
        return self.n

    def _at(self, i: int) -> int:
        return self.hi if i == len(self.steps) else self.steps[i]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._at(self.n - 1 - i if self.reverse else i)

    def index(self, v, start: int = 0, stop: int | None = None) -> int:
        if v == self.hi:
            i = self.n - 1
        elif v in self.steps:
            i = self.steps.index(v)
        else:
            raise ValueError(f"{v} is not on the grid")
        return self.n - 1 - i if self.reverse else i

    def __contains__(self, v) -> bool:
        return v == self.hi or v in self.steps


def search(planner: Planner, lo: int, hi: int, step: int, bound: float, generous_high: bool) -> Answer:
    """The value nearest the constrained end of [lo, hi] (on the `step` grid) whose runs stay
    within `bound` x the baseline, the baseline being the runtime at the generous end (`hi` if
    `generous_high`, else `lo`)."""
    # Index 0 is always the constrained end, the last the generous end.
    grid = ProbeValues(lo, hi, step, reverse=not generous_high)
    planner.probe([grid[-1], grid[0]])
    gen = planner.probes[grid[-1]]
    runtimes = [r for r in gen.runtimes if r is not None]
    if len(runtimes) != len(gen.runtimes):
        raise _core.RunError(f"the baseline ({planner.key} = {planner.fmt(grid[-1])}) has no runtime: {'; '.join(gen.errors)}")
    baseline = sum(runtimes) / len(runtimes)

    def within(i: int) -> bool:
        p = planner.probes[grid[i]]
        p.baseline = baseline
        return p.within(bound)

    notes = []
    for p in planner.probes.values():
        p.baseline = baseline
    if within(0):
        value, bracket = grid[0], (grid[0], None)
        notes.append(f"the most constrained value, {planner.fmt(grid[0])}, is already within the bound")
    elif not within(len(grid) - 1):
        return Answer(planner.key, None, bound, baseline, planner.probes, (None, grid[-1]), False,
                      ["the seeds disagree even at the baseline value: no answer"])
    else:
        bad, good = 0, len(grid) - 1  # invariant: grid[bad] outside, grid[good] within
        while good - bad > 1:
            mid = (bad + good) // 2
            planner.probe([grid[mid]])
            if within(mid):
                good = mid
            else:
                bad = mid
        value, bracket = grid[good], (grid[good], grid[bad])
    sharp = True
    for v, p in planner.probes.items():
        if not p.agree(bound):
            sharp = False
            notes.append(f"at {planner.fmt(v)} the seeds disagree (slowdowns {', '.join('-' if s is None else f'{s:.2f}' for s in p.slowdowns)})")
    idx = grid.index(value)
    for v, p in planner.probes.items():
        if v in grid and grid.index(v) > idx and not p.within(bound):
            sharp = False
            notes.append(f"{planner.fmt(v)}, more generous than the answer, is outside the bound: runtime is not monotonic here")
    return Answer(planner.key, value, bound, baseline, planner.probes, bracket, sharp, notes)
