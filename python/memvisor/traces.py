"""Trace files: reading any supported format by its name or content, writing atomically."""

from __future__ import annotations

from pathlib import Path

from memvisor import _core

FORMATS = ("native", "lackey", "oracleGeneral", "csv")
NATIVE_SUFFIX = ".mvtrace"
NATIVE_MAGIC = b"MVTRACE1"


def named_format(path: Path) -> str | None:
    """The format a trace file's name says, if it ends as one does (`.zst` aside): `.mvtrace`,
    `.oracleGeneral` or `.bin`, `.csv`, `.lackey`; None for any other name."""
    name = path.name.lower().removesuffix(".zst")
    for ending, fmt in ((NATIVE_SUFFIX, "native"), (".oraclegeneral", "oracleGeneral"), (".bin", "oracleGeneral"), (".csv", "csv"), (".lackey", "lackey")):
        if name.endswith(ending):
            return fmt
    return None


def detect_format(path: Path, data: bytes) -> str:
    """The format of a trace file: the native magic (or the start of it: a native trace cut short
    is reported as one), else the file name, else lackey (valgrind's output has no usual name)."""
    if data.startswith(NATIVE_MAGIC) or (data and NATIVE_MAGIC.startswith(data[:8])):
        return "native"
    return named_format(path) or "lackey"


def read_trace(path: str | Path, fmt: str | None = None, *, instructions: bool = False,
               obj_id_col: int = 2, delimiter: str = ",") -> "_core.Trace":
    """Reads a trace in any supported format (auto-detected unless `fmt` is given)."""
    path = Path(path)
    # A device or a pipe (/dev/zero, a FIFO) would be read without end.
    if path.exists() and not path.is_dir() and not path.is_file():
        raise _core.TraceError(f"{path}: not a regular file (a device, a pipe or a socket); a trace is a file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _core.TraceError(f"{path}: cannot be read: {e.strerror}") from None
    found = detect_format(path, data)
    guessed = fmt is None and found == "lackey" and named_format(path) is None
    fmt = fmt or found
    try:
        if fmt == "native":
            t = _core.Trace.from_native(data)
        elif fmt == "lackey":
            t = _core.Trace.from_lackey(data, instructions)
        elif fmt == "oracleGeneral":
            t = _core.Trace.from_oracle_general(data)
        elif fmt == "csv":
            t = _core.Trace.from_csv(data, obj_id_col, delimiter)
        else:
            raise ValueError(f"unknown trace format '{fmt}' (formats: {', '.join(FORMATS)})")
    except _core.TraceError as e:
        # Read as lackey only because its name says no format: say how to name another.
        hint = (f" ({path.name} was read as lackey, as a name with no trace ending is; a name ending in .csv, .oracleGeneral, .bin or "
                ".mvtrace says another format, and `memvisor trace convert --from` reads one of any name)") if guessed else ""
        raise _core.TraceError(f"{path}: {e}{hint}") from None
    # Nothing to replay is a mistake (an empty file, a csv whose one line was taken for a header),
    # not a run that finishes at once.
    if t.n_pages == 0:  # every reference touches a page
        raise _core.TraceError(f"{path}: holds no references (read as {fmt})")
    return t


def resolve_trace_path(name: str, base_dir: Path | None) -> Path:
    """A `trace` workload's file: absolute, else next to the scenario file, else in the working
    directory."""
    p = Path(name)
    if p.is_absolute():
        return p
    if base_dir is not None and (base_dir / p).exists():
        return base_dir / p
    return p


def load_traces(scenario, base_dir: Path | None) -> dict[str, "_core.Trace"]:
    """Loads every trace a scenario's workloads name, a relative one from `base_dir` (the
    scenario's folder) if it is there."""
    out = {}
    for name in scenario.trace_files:
        path = resolve_trace_path(name, base_dir)
        where = f"{scenario.name}: {scenario.trace_field(name)}"
        if not path.exists():
            raise _core.ScenarioError(f"{where}: trace file '{name}' not found (looked in {base_dir or '.'} and the working directory)")
        try:
            out[name] = read_trace(path)
        except _core.TraceError as e:
            # Which workload named the file, then what is wrong in it.
            raise _core.TraceError(f"{where}: {e}") from None
    return out
