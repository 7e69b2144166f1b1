"""Run folders: written under a temporary name and renamed into place only when complete, so an
interrupted or failed run never leaves a folder that looks finished."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Sequence

from memvisor.api import RunResult
from memvisor.console import some_of


def parquet_bytes(df) -> bytes:
    """A data frame as Parquet, for Python to write: pyarrow cannot open every path Python can (a
    folder name that is not UTF-8)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue().to_pybytes()


def _write_one(r: RunResult, d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "timeseries.parquet").write_bytes(parquet_bytes(r.timeseries))
    (d / "summary.json").write_text(json.dumps(r.summary, indent=2) + "\n", encoding="utf-8")
    (d / "scenario.toml").write_text(r.scenario_toml, encoding="utf-8")
    with open(d / "decisions.jsonl", "w", encoding="utf-8") as f:
        for rec in r.decisions.to_dict(orient="records"):
            f.write(json.dumps(rec, allow_nan=False) + "\n")


def top_summary(results: Sequence[RunResult]) -> dict:
    """The summary of a case with variants: each variant's report rows."""
    return {
        "scenario": results[0].name,
        "variants": [{"variant": r.variant, "folder": r.variant, "vms": r.report_rows()} for r in results],
    }


class NotARunFolder(ValueError):
    """The path a run folder would replace holds something else."""


def is_run_folder(path: Path) -> bool:
    """Whether `path` is a run folder (a folder with a summary.json), which a new run may replace."""
    return path.is_dir() and not path.is_symlink() and (path / "summary.json").is_file()


def run_kind(path: Path) -> str | None:
    """What a run folder holds, told by what only that kind writes: "manage" (manage.json),
    "simulated" (a summary naming its scenario, a report.html or a scenario.toml, none of which a
    validation writes) or "validation"; None if `path` is not a run folder."""
    if not is_run_folder(path):
        return None
    if (path / "manage.json").is_file():
        return "manage"
    if scenario_of(path) or any((path / f).exists() for f in ("report.html", "scenario.toml")):
        return "simulated"
    return "validation"


#: Each kind of run folder as a refusal names it.
KIND_NAMES = {"simulated": "a simulated run", "manage": "a manage run", "validation": "a validation"}


def scenario_of(path: Path) -> str | None:
    """The scenario whose run the run folder `path` holds, if it is one and says so."""
    try:
        name = json.loads((path / "summary.json").read_text(encoding="utf-8")).get("scenario") if is_run_folder(path) else None
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return name if isinstance(name, str) else None


def run_folder_around(path: Path) -> Path | None:
    """The run folder `path` is inside, at any depth, or None: what is written there goes when a
    rerun replaces the folder."""
    return next((p for p in Path(path).resolve().parents if is_run_folder(p)), None)


def inside_run_folder(path: Path) -> str | None:
    """Why `path` may not be written, if it lies inside a run folder at any depth: a rerun of that
    run replaces all inside it."""
    around = run_folder_around(path)
    return None if around is None else f"inside the run folder {around}, which a rerun replaces with all inside it"


def check_location(path: Path) -> None:
    """Refuses (NotARunFolder) a folder that cannot be made where it is asked for, or that would be
    lost: one under a file (found only when the work is done and its folder is written), or one
    inside a run folder (a rerun of that run replaces all inside it)."""
    path = Path(path)
    for p in path.absolute().parents:
        if p.exists():
            if not p.is_dir():
                raise NotARunFolder(f"{path}: {p} is a file, not a folder; name a folder whose parents are folders")
            break
    why = inside_run_folder(path)
    if why is not None:
        raise NotARunFolder(f"{path} is {why}; name a folder elsewhere")


def is_empty_folder(path: Path) -> bool:
    """Whether `path` is a folder (not a link to one) with nothing in it."""
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def check_replaceable(path: Path, kind: str) -> None:
    """Refuses (NotARunFolder) a path a run of `kind` ("simulated", "validation") may not write: a
    run replaces an earlier run's folder of its own kind or an empty folder (made for it), never
    anything else that happens to be there, and is not put where it would be lost
    (`check_location`). Commands whose work is long or changes the machine check it before they
    start."""
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not (is_run_folder(path) or is_empty_folder(path)):
        raise NotARunFolder(f"{path} exists and is not a run folder (it has no summary.json): name a new or empty folder, or an earlier run's")
    found = run_kind(path)
    if found not in (None, kind):
        raise NotARunFolder(f"{path} holds {KIND_NAMES[found]}'s folder, not {KIND_NAMES[kind]}'s: name a new folder or an earlier {KIND_NAMES[kind][2:]}'s")
    check_location(path)


class RunFolder:
    """A run folder being written, as a context manager: `path` appears only when `commit` is
    called inside the block; leaving the block any other way (an error, Ctrl-C, SIGTERM, or simply
    without committing) removes what was written, so nothing that looks complete is left.

        with RunFolder(path) as folder:
            folder.add(result)
            folder.commit([result])

    A new folder, or an earlier run's, is written beside it and renamed into place. An empty folder
    (made for the run: perhaps a mount point or the working folder, which cannot be renamed) is
    written in, under a hidden folder whose contents move up when done, `summary.json` last.
    """

    def __init__(self, path: Path, kind: str = "simulated"):
        self.path = Path(path)
        #: The kind of run written (`check_replaceable`).
        self.kind = kind
        #: The folder's own name, also where `path` is "." or ends in "..".
        absolute = Path(os.path.abspath(self.path))
        self.name = absolute.name
        self.fill = is_empty_folder(self.path)
        where = self.path if self.fill else absolute.parent
        self.tmp = where / f".{self.name}.partial-{os.getpid()}"
        self.committed = False

    def __enter__(self) -> RunFolder:
        check_replaceable(self.path, self.kind)
        # Its error names the folder that could not be made, one the user can see.
        self.tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            self.tmp.mkdir()
            return self
        except OSError as e:
            # Said of the folder the user named, not of the hidden one it is written under.
            self.abandon()
            raise OSError(e.errno, f"cannot create the run folder here ({e.strerror or e})", str(self.path)) from None
        except BaseException:
            self.abandon()
            raise

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.committed:
            self.abandon()

    def add(self, r: RunResult) -> None:
        """Writes a finished run into the folder: a variant's into a folder of its name."""
        _write_one(r, self.tmp / r.variant if r.variant else self.tmp)

    def commit(self, results: Sequence[RunResult]) -> Path:
        """Writes the report of what was added (`report.html`) and puts the folder in place,
        replacing an earlier run's."""
        if any(r.variant for r in results):
            (self.tmp / "summary.json").write_text(json.dumps(top_summary(results), indent=2) + "\n", encoding="utf-8")
        if results:
            from memvisor import report

            # Labelled by the folder's final name, not the temporary one it is written under; the
            # time series are the ones in memory, not read back.
            alone = (self.tmp / "timeseries.parquet").exists()
            frames = {r.variant: r.timeseries for r in results}
            runs = report.runs_in(self.tmp, label=self.name if alone else None, frames=frames)
            report.write(self.tmp, runs, title=report.page_title(self.name, results[0].name))
        if self.fill:
            return self._fill()
        old = self.tmp.parent / f".{self.name}.old-{os.getpid()}"
        target = self.tmp.parent / self.name
        if target.exists():
            target.rename(old)
        try:
            self.tmp.rename(target)
        except BaseException:
            if old.exists() and not target.exists():
                old.rename(target)  # the earlier run stays as it was
            raise
        self.committed = True
        shutil.rmtree(old, ignore_errors=True)
        return self.path

    def _fill(self) -> Path:
        """Moves what was written up into the empty folder, `summary.json` last: until it is there,
        the folder is not a run folder. What someone put there meanwhile is left, and the run with
        it; an interruption puts back what was moved."""
        others = [e.name for e in self.path.iterdir() if e.name != self.tmp.name]
        if others:
            raise NotARunFolder(f"{self.path} is no longer empty ({some_of(sorted(others), 3)} appeared during the run): the run is not written there")
        names = sorted((e.name for e in self.tmp.iterdir()), key=lambda n: n == "summary.json")
        moved: list[str] = []
        try:
            for n in names:
                os.rename(self.tmp / n, self.path / n)
                moved.append(n)
        except BaseException:
            for n in reversed(moved):
                os.rename(self.path / n, self.tmp / n)
            raise
        self.committed = True
        self.tmp.rmdir()
        return self.path

    def abandon(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def write_run_folder(results: Sequence[RunResult], path: Path) -> Path:
    """Writes the finished results of one run (one per variant) as a run folder."""
    if isinstance(results, RunResult) or not all(isinstance(r, RunResult) for r in results):
        raise TypeError("write_run_folder takes the list memvisor.run returns (RunResults, one per variant)")
    if not results:
        raise ValueError("write_run_folder: no results to write")
    folders = [r.variant for r in results]
    if len(results) > 1 and (None in folders or len(set(folders)) < len(folders)):
        raise ValueError(f"write_run_folder: {len(results)} results would share a folder (variants: {', '.join(map(str, folders))}); "
                         "a run folder holds one run's variants: write other runs to folders of their own")
    with RunFolder(path) as folder:
        for r in results:
            folder.add(r)
        return folder.commit(results)
