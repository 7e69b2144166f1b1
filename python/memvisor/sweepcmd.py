"""`memvisor sweep`: a scenario's variants run at every point of a grid of overrides, one report
value shown as a table."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import click
from rich.table import Column, Table
from rich.text import Text

from memvisor import _core
from memvisor.console import USAGE, MemvisorError, check_output, err, fmt, out, warn
from memvisor.params import KeyValues
from memvisor.runfolder import inside_run_folder, parquet_bytes


@click.command("sweep")
@click.argument("spec")
@click.option("--vary", "varies", multiple=True, type=KeyValues(), help="A key to vary and its values, e.g. vm.g.memory=256MiB,512MiB; repeated, the grid is every combination.")
@click.option("--points", "points_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), help="Explicit points instead: a CSV file, a header of keys and a row of values per point.")
@click.option("--column", help="Report column to show (default: the scenario's first).")
@click.option("--vm", help="VM whose report value fills the cells (default: the first; without variants, every VM has a column unless this names one).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a scenario value at every point.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: the number of CPUs).")
@click.option("--scheduler", metavar="ADDRESS", help="Run on this Dask cluster (e.g. tcp://10.0.0.5:8786) instead of local processes.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Keep every run here as it finishes (a sweep run again resumes) and write sweep.parquet: a row per run and VM.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write the table as CSV.")
@click.option("--quiet", is_flag=True, help="No progress bar (there is none when stderr is not a terminal).")
def sweep_cmd(spec, varies, points_file, column, vm, sets, jobs, scheduler, out_dir, csv_path, quiet) -> None:
    """Run every variant of a case or scenario file at each point of a grid of overrides; show one
    report value of the first VM or --vm (without variants: of each VM, or of --vm) as a table, a row per point, with
    the biggest jump between neighbouring variants. A run that fails shows `failed (n)` in its
    cells and its error under the table; the others go on, and the exit status is then 1."""
    import pandas as pd
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from memvisor.sweep import (JUMP, StoreError, failed_cells, input_files, plan_points, points_from_csv, product, refuse_foreign_out,
                                replaced_sweep, run_points, warnings_of)
    from memvisor.atomic import write_atomically, written_through

    if scheduler is not None:
        try:
            from distributed.comm.addressing import get_address_host_port
        except ImportError:
            raise MemvisorError("--scheduler needs Dask: pip install 'memvisor[dask]'", USAGE) from None
        try:
            host, port = get_address_host_port(scheduler)
        except ValueError as e:
            raise MemvisorError(f"--scheduler {scheduler}: {e}; give a scheduler's address, e.g. tcp://10.0.0.5:8786", USAGE) from None
    if bool(varies) == bool(points_file):
        raise MemvisorError("give the grid as --vary KEY=V1,V2 (repeatable) or as --points FILE, one of the two", USAGE)
    # What is written inside a run folder goes when that run is run again.
    for opt, path in (("--out", out_dir), ("--csv", csv_path)):
        why = None if path is None else inside_run_folder(path)
        if why is not None:
            raise MemvisorError(f"{opt} {path}: {why}; name a place elsewhere", USAGE)
    if csv_path is not None and out_dir is not None:
        # The sweep's own files: the table would replace its result, or be taken for a damaged run.
        own = csv_path.resolve()
        if own == (out_dir / "sweep.parquet").resolve() or (out_dir / "runs").resolve() in own.parents:
            raise MemvisorError(f"--csv {csv_path}: is the sweep's own sweep.parquet or inside its runs/ store; name a file beside them or elsewhere", USAGE)
    if csv_path is not None:
        check_output(csv_path, "--csv")
    try:
        if out_dir is not None:
            refuse_foreign_out(out_dir)
        points = product(varies) if varies else points_from_csv(points_file)
        grid = plan_points(spec, points, column, sets, vm, source="--vary" if varies else f"--points {points_file}:")
    except (_core.ScenarioError, ValueError) as e:
        raise MemvisorError(str(e), USAGE) from None
    if csv_path is not None:
        # The table must not replace what the sweep reads (a rerun would read the table).
        read = {p.resolve() for p in (Path(spec), points_file) if p is not None and p.is_file()}
        imports: dict = {}
        read |= {f for per in grid.scenarios for s in per for f in input_files(s, imports)}
        if csv_path.resolve() in read:
            raise MemvisorError(f"--csv {csv_path}: is a file the sweep reads; name another", USAGE)
    key = grid.key
    for w in warnings_of(grid):
        warn(w)
    if out_dir is not None and (other := replaced_sweep(out_dir, grid.scenarios[0][0].name)) is not None:
        warn(f"--out {out_dir}: its sweep.parquet is of {other}, and this sweep of '{grid.scenarios[0][0].name}' replaces it "
             "(the runs/ store keeps both sweeps' runs)")
    if scheduler is not None:
        # A port that refuses the connection is said at once (Dask's client would wait out its
        # 30 s timeout); one that does not answer is left to that timeout. Usage mistakes first.
        import socket

        try:
            socket.create_connection((host, port), timeout=1).close()
        except ConnectionRefusedError:
            raise MemvisorError(f"--scheduler {scheduler}: connection refused (no scheduler listens there)", 1) from None
        except OSError:
            pass
    try:
        with Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            # A bar drawn into a file or pipe is noise among the results: a terminal's only.
            disable=quiet or not err.is_terminal,
        ) as bar:
            task = bar.add_task(f"sweep {key}", total=grid.runs)
            df, runs = run_points(grid, jobs, progress=lambda done, total: bar.update(task, completed=done), scheduler=scheduler,
                                  store=None if out_dir is None else out_dir / "runs")
    except BrokenProcessPool as e:
        raise MemvisorError(f"a worker process died: {e}", 1) from None
    except StoreError as e:
        raise MemvisorError(str(e), USAGE) from None
    except OSError as e:
        if scheduler:
            raise MemvisorError(f"--scheduler {scheduler}: {e}", 1) from None
        if out_dir is not None:
            raise MemvisorError(f"--out {out_dir}: cannot keep its runs there ({e.strerror or e})", 1) from None
        raise MemvisorError(str(e), 1) from None
    if out_dir is not None:
        try:
            write_atomically(out_dir / "sweep.parquet", parquet_bytes(runs))
        except OSError as e:
            raise MemvisorError(f"--out {out_dir}: {e.strerror or e}", 1) from None
    # A failed run's error is said once, not in every cell it empties: numbered under the table,
    # and in the csv's own column, so that the value columns stay numbers.
    failed = failed_cells(df)
    errors = list(dict.fromkeys(x for _, _, x in failed))
    if csv_path is not None:
        table = df.map(lambda x: None if isinstance(x, str) and x in errors else x)
        # Its own column, named apart from a VM or variant that is itself called "error".
        table["error" if "error" not in table.columns else "run_error"] = ["; ".join(dict.fromkeys(x for x in row if isinstance(x, str) and x in errors)) or None for row in df.itertuples(index=False)]
        try:
            write_atomically(written_through(csv_path), table.to_csv())
        except OSError as e:
            raise MemvisorError(f"--csv {csv_path}: {e.strerror or e}", 1) from None
    cols = [c for c in df.columns if c != JUMP]
    # Runs may differ in their first VM (a variant without it): the first run's names one.
    first = grid.scenarios[0][0].vm_names[:1]
    first_vm = "each run's first VM" + (f" ({first[0]} in the first)" if first else "")
    jump = [JUMP] if JUMP in df.columns else []
    unfinished = grid.column == "runtime_s" and any(not isinstance(x, str) and pd.isna(x) for c in cols for x in df[c])
    # The key can be long (vm.kali.workload.desktop.active): folded, never cut short.
    t = Table(Column(key, overflow="fold"), *cols, *jump, title=f"{spec}: {grid.column}" + ("" if grid.scenarios[0][0].variant is None else f" of {vm or first_vm}"),
              caption="-: the VM's work had not finished when the run ended, a process of it was killed by the OOM killer, or the VM is not in that run" if unfinished else None)
    for value, row in df.iterrows():
        cells = [Text(f"failed ({errors.index(x) + 1})", style="red") if isinstance(x, str) else fmt(None if pd.isna(x) else x) for x in (row[c] for c in cols)]
        t.add_row(str(value), *cells, *(row[c] for c in jump))
    out.print(t)
    for i, e in enumerate(errors, 1):
        out.print(Text(f"({i}) {e}", style="red"))
    if csv_path is not None:
        out.print(f"csv: {csv_path}")
    if out_dir is not None:
        out.print(f"runs: {out_dir / 'sweep.parquet'} ({len(runs)} rows)")
    if failed:
        raise MemvisorError(f"{int(runs.error.notna().sum())} of {grid.runs} runs failed", 1)
