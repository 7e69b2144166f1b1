"""Click parameter types for the command line's structured options, so that bad values get click's
usage error naming the option (exit status 2) before the command runs."""

from __future__ import annotations

import math
from pathlib import Path

import click

from memvisor import _core


def listed_twice(items) -> list:
    """The items that occur more than once, sorted: a VM managed, or a validation point run, once."""
    items = list(items)
    return sorted({x for x in items if items.count(x) > 1})


class IntList(click.ParamType):
    """Comma-separated integers, each at least `min` and at most `max`, e.g. `16,24,32`."""

    name = "integers"

    def __init__(self, min: int | None = None, max: int | None = None):
        self.min, self.max = min, max

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N,N,..."

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, (tuple, list)):
            items = list(value)
        else:
            items = str(value).split(",")
        what = "integers" if self.min is None else ("positive integers" if self.min == 1 else f"integers of at least {self.min}")
        out = []
        for item in items:
            try:
                n = item if isinstance(item, int) else int(str(item).strip())
            except ValueError:
                self.fail(f"{value!r}: {item.strip()!r} is not an integer; give {what} separated by commas", param, ctx)
            if self.min is not None and n < self.min:
                self.fail(f"{value!r}: {n} is below {self.min}; give {what} separated by commas", param, ctx)
            if self.max is not None and n > self.max:
                self.fail(f"{value!r}: {n} is above {self.max}, the most allowed", param, ctx)
            out.append(n)
        if not out:
            self.fail(f"give {what} separated by commas", param, ctx)
        return tuple(out)


class ByteSize(click.ParamType):
    """A size with a unit, as in scenarios: `96MiB`, `4 GiB`, `1000 pages`."""

    name = "size"

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return _core.parse_bytes(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class _Units(click.ParamType):
    """A size with a unit, as in scenarios, given in whole units of `unit` bytes (`whole` names
    them, `counted` when counted), at least `min` and at most `max` units; `many`: comma-separated
    sizes; `counts`: a bare number (ASCII digits) is a count of units. Gives units."""

    name = "size"
    unit, whole, counted, counts = 1 << 20, "MiB", "MiB", False

    def __init__(self, min: int, max: int | None = None, many: bool = False):
        self.min, self.max, self.many = min, max, many

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        one = "N|SIZE" if self.counts else "SIZE"
        return f"{one},{one},..." if self.many else one

    def least(self) -> str:
        """The least allowed, as said in an error."""
        return f"{self.min}MiB"

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None):
        if isinstance(value, (int, tuple)):
            return value
        out = []
        for item in (x.strip() for x in str(value).split(",")) if self.many else [str(value).strip()]:
            why, n = "", 0
            if self.counts and item.isascii() and item.isdigit():
                # Past 20 digits it is above any maximum (and past 4,300, int() refuses it).
                n = int(item) if len(item) <= 20 else 10**20
            else:
                try:
                    b = ByteSize().convert(item, None, None)
                except click.BadParameter as e:
                    why = f"'{item}' is neither a number of {self.whole} nor a size ({e.message})" if self.counts else e.message
                else:
                    n = b // self.unit
                    why = "" if b % self.unit == 0 else f"'{item}' is not a whole number of {self.whole}"
            if not why and n < self.min:
                why = f"'{item}' is below {self.least()}, the least allowed"
            if not why and self.max is not None and n > self.max:
                shown = item if len(item) <= 24 else f"{item[:20]}..."
                why = f"'{shown}' is above {self.max:,} {self.counted}, the most allowed"
            if why:
                self.fail(f"{value!r}: {why}; give sizes separated by commas" if self.many else why, param, ctx)
            out.append(n)
        return tuple(out) if self.many else out[0]


class MiB(_Units):
    """A size with a unit of a whole number of MiB (what QEMU's -m and a memory cgroup's limit here
    are set in), at least `min` MiB; `many`: comma-separated sizes. Gives MiB."""


class Frames(_Units):
    """Page frames: a count (`25600`) or a size with a unit, a whole number of 4 KiB pages
    (`100MiB`), at least 1 and at most `max`; `many`: comma-separated. Gives frames."""

    unit, whole, counted, counts = 4096, "4 KiB frames", "frames", True

    def __init__(self, max: int, many: bool = False):
        super().__init__(min=1, max=max, many=many)

    def least(self) -> str:
        return "1 frame"


#: What `report` and `compare` read.
ANY_RUN = "a run folder (what `memvisor run`, `validate` or `manage` writes)"


class RunFolderPath(click.Path):
    """A run folder given to read: a file there is a usage error that says what is wanted (`wants`,
    by default any run's folder, and then a scenario file is told how to run it), not click's
    "Directory ... is a file"; `exists`: it must exist."""

    def __init__(self, exists: bool = True, wants: str = ANY_RUN):
        super().__init__(file_okay=False, exists=exists, path_type=Path)
        self.wants = wants

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None):
        if Path(value).is_file():
            hint = f"; to run a scenario file, `memvisor run {value}`" if self.wants == ANY_RUN and str(value).endswith(".toml") else ""
            self.fail(f"'{value}' is a file: give {self.wants}{hint}", param, ctx)
        return super().convert(value, param, ctx)


class Duration(click.ParamType):
    """A duration with a unit, as in scenarios (`250us`, `2ms`), in nanoseconds, at most `max_ns`."""

    name = "duration"

    def __init__(self, max_ns: int, max_text: str):
        self.max_ns, self.max_text = max_ns, max_text

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if str(value).strip() == "0":
            return 0  # no time needs no unit
        try:
            ns = _core.parse_duration_ns(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if ns > self.max_ns:
            self.fail(f"'{value}' is longer than {self.max_text}", param, ctx)
        return ns


class KeyValues(click.ParamType):
    """A scenario key and the values to give it in turn, e.g. `vm.g.memory=256MiB,512MiB`."""

    name = "key=values"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "KEY=V1,V2,..."

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, tuple[str, ...]]:
        if isinstance(value, tuple):
            return value
        key, eq, rest = str(value).partition("=")
        key = key.strip()
        if not eq or not key:
            self.fail(f"{value!r}: give a key and values, e.g. vm.g.memory=256MiB,512MiB", param, ctx)
        values = [v.strip() for v in rest.split(",")]
        if any(not v for v in values):
            self.fail(f"{value!r}: an empty value; give values separated by commas", param, ctx)
        twice = listed_twice(values)
        if twice:
            self.fail(f"{value!r}: {', '.join(twice)} given more than once", param, ctx)
        return key, tuple(values)


class Number(click.FloatRange):
    """A finite number of at least `min` (and at most `max`): click's FloatRange lets `nan` through
    (every comparison with it is false) and `inf`, neither of which is a bound, a period or a
    timeout."""

    name = "number"

    def __init__(self, min: float, max: float | None = None):
        super().__init__(min=min, max=max)

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> float:
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number; give a number of at least {self.min:g}", param, ctx)
        return v
