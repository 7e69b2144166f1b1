"""`report.html`: a run folder as one self-contained page that opens offline (plotly.js inlined,
no network reference): per VM, memory by where it lives, the balloon's target against its size,
paging and swap rates, the host's memory state as bands; the report table, the decision log
(filterable) and the resolved scenario. Several runs (the variants of a folder, or `compare`'s
runs) are overlaid on the same charts.

Long series are thinned to at most `MAX_POINTS` samples per VM (every k-th sample; the chart's
title says so), so that a large run's page stays small and quick to open.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from memvisor.atomic import write_atomically

#: Samples kept per VM and chart.
MAX_POINTS = 2000
#: Rows of the report table and the decision log, and characters of a scenario, a page shows; the
#: rest is in the run folder's files (the page says so), so that thousands of VMs stay a small page.
MAX_ROWS = 2000
MAX_SCENARIO_CHARS = 100_000
#: VMs drawn one by one per run; beyond this, the VMs the host reclaimed most from are drawn and
#: all VMs are summed in one chart (each chart says so).
MAX_VMS = 12
KIB_PER_MIB = 1024

#: Where a VM's memory lives, as stacked areas: (label, columns summed, unit divisor to MiB).
WHERE = [
    ("anonymous", ["Active_anon_KiB", "Inactive_anon_KiB"], KIB_PER_MIB),
    ("page cache", ["Active_file_KiB", "Inactive_file_KiB"], KIB_PER_MIB),
    ("free in the guest", ["MemFree_KiB"], KIB_PER_MIB),
    ("ballooned", ["MCTLSZ_MiB"], 1),
    ("compressed (host)", ["CACHEUSD_MiB"], 1),
    ("host-swapped", ["SWCUR_MiB"], 1),
]
RATES = [
    ("swap-ins/s", "pswpin_pages"),
    ("swap-outs/s", "pswpout_pages"),
    ("major faults/s", "pgmajfault"),
    ("device queue wait of the VM's datastore (ms per s)", "datastore_queue_wait_ms"),
    # Denali hosts (their rows are all VMs together and the most popular few).
    ("requests served/s", "requests_served"),
    ("host page-ins/s", "page_ins"),
]
STATE_COLOURS = {"high": "rgba(0,160,0,0.08)", "soft": "rgba(230,180,0,0.15)", "hard": "rgba(240,110,0,0.18)", "low": "rgba(220,0,0,0.2)"}


@dataclass
class Run:
    """One run's folder, read."""

    label: str
    path: Path
    timeseries: object  # pandas DataFrame
    decisions: list[dict]
    summary: dict
    scenario: str | None
    variant: str | None = None  # None: the run folder's one run


class BadRun(ValueError):
    """A folder that is not a run folder, or a run folder's file that is missing or cannot be read
    as what a run writes there (damaged, or not ours)."""


#: What every run folder with a time series holds (scenario.toml too, but a manage run's has none).
NEEDED = ("timeseries.parquet", "summary.json", "decisions.jsonl")


def _read(path: Path, what: str, read: Callable[[Path], object]):
    try:
        return read(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid and json's errors are ValueErrors
        raise BadRun(f"{path}: cannot be read as {what}: {e}") from None


def _is_number(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _json_object(path: Path) -> dict:
    obj = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    return obj


def _summary(path: Path) -> dict:
    summary = _json_object(path)
    # A simulated run lists its VMs; a managed one (`memvisor manage`) its rounds instead.
    if "vms" not in summary and "rounds" not in summary:
        raise ValueError("neither a simulated run's summary (no 'vms') nor a managed run's (no 'rounds')")
    vms = summary.get("vms", [])
    if not isinstance(vms, list):
        raise ValueError("not an object with a list of 'vms'")
    for i, vm in enumerate(vms):
        if not isinstance(vm, dict) or not isinstance(vm.get("name"), str):
            raise ValueError(f"vms[{i}] is not an object with a 'name' (text)")
        if not _is_number(vm.get("runtime_s")):
            raise ValueError(f"vms[{i}].runtime_s is {vm['runtime_s']!r}; it is a number or null")
        report = vm.get("report", {})
        if not isinstance(report, dict) or not all(map(_is_number, report.values())):
            raise ValueError(f"vms[{i}].report is not an object of numbers (or nulls)")
    return summary


def _variants(path: Path) -> list[str]:
    """The variants' folders a summary.json lists (empty: it lists none)."""
    variants = _json_object(path).get("variants", [])
    if not isinstance(variants, list):
        raise ValueError("'variants' is not a list")
    for i, v in enumerate(variants):
        # A folder of its own directly inside, never a path leading elsewhere.
        if not isinstance(v, dict) or not isinstance(v.get("folder"), str) or v["folder"] in ("", ".", "..") or "/" in v["folder"]:
            raise ValueError(f"variants[{i}] is not an object whose 'folder' names a subfolder of this one")
    return [v["folder"] for v in variants]


def _decisions(path: Path) -> list[dict]:
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ValueError(f"line {i}: {e}") from None
        if not isinstance(rec, dict):
            raise ValueError(f"line {i}: not an object")
        out.append(rec)
    return out


def _timeseries(path: Path):
    import pandas as pd
    import pyarrow as pa

    # Its bytes, copied into a buffer Arrow owns: pyarrow cannot open every path Python can (a name
    # that is not UTF-8), and a reader over Python's own bytes lets an Arrow worker thread drop the
    # last reference to them after the read returns; if the interpreter is exiting by then, that
    # thread's wait for the GIL ends it inside a C++ destructor and the process aborts
    # ("terminate called without an active exception", status -6; apache/arrow#34314).
    copy = pa.BufferOutputStream()
    copy.write(path.read_bytes())
    return _series_checked(pd.read_parquet(pa.BufferReader(copy.getvalue())))


def _series_checked(df):
    """A time series frame, if it has what a report draws from; else ValueError saying what not."""
    import pandas as pd

    for col in ("time_s", "vm"):
        if col not in df:
            raise ValueError(f"lacks column '{col}' (not a memvisor time series)")
    for col in df.columns:
        text = col in ("vm", "state")
        ok = pd.api.types.is_string_dtype(df[col]) if text else pd.api.types.is_numeric_dtype(df[col])
        if not ok and not df[col].isna().all():
            raise ValueError(f"column '{col}' holds {df[col].dtype} values, not {'text' if text else 'numbers'}")
    return df


def _run(d: Path, label: str, variant: str | None, why: str, timeseries=None) -> Run:
    for name in NEEDED:
        if not (d / name).exists():
            raise BadRun(f"{d}: {name} missing ({why})")
    scen = d / "scenario.toml"
    summary = _read(d / "summary.json", "a run summary (JSON)", _summary)
    # A simulated run writes the scenario that reproduces it; a managed run has none.
    if "rounds" not in summary and not scen.exists():
        raise BadRun(f"{d}: scenario.toml missing ({why})")
    # A variant's folder given by itself still knows which variant it ran.
    own = summary.get("variant")
    return Run(
        label=label,
        path=d,
        timeseries=_read(d / "timeseries.parquet", "a time series (Parquet)", _timeseries)
        if timeseries is None
        else _read(d / "timeseries.parquet", "a time series", lambda _: _series_checked(timeseries)),
        decisions=_read(d / "decisions.jsonl", "decisions (JSON lines)", _decisions),
        summary=summary,
        scenario=_read(scen, "a scenario (text)", lambda p: p.read_text(encoding="utf-8")) if scen.exists() else None,
        variant=variant if variant is not None else own if isinstance(own, str) else None,
    )


def runs_in(folder: Path, label: str | None = None, frames: dict | None = None) -> list[Run]:
    """The runs of a run folder (a folder with a summary.json): itself, if it has a time series,
    or the variants its summary.json lists. A missing file, or one that cannot be read, raises
    `BadRun`, naming it. `frames`: the time series already in memory, by variant (None: the run
    without variants), which are then not read back (a large run's would be a second copy)."""
    frames = frames or {}
    folder = Path(folder)
    summ = folder / "summary.json"
    if not summ.is_file():
        raise BadRun(f"{folder}: not a run folder (it has no summary.json)")
    if (folder / "timeseries.parquet").exists():
        return [_run(folder, label or folder.name, None, "a run folder with a time series has one", frames.get(None))]
    variants = _read(summ, "a run folder's summary (JSON)", _variants)
    if not variants:
        raise BadRun(f"{folder}: no timeseries.parquet, and its summary.json lists no variants: a run folder without a time series has nothing to report")
    return [_run(folder / v, f"{label}/{v}" if label else v, v, f"the folder's summary.json lists variant {v}", frames.get(v)) for v in variants]


def _thin(df):
    step = max(1, -(-len(df) // MAX_POINTS))
    return (df.iloc[::step], step)


def _figure(title: str, ytitle: str):
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title="time (s)", yaxis_title=ytitle, height=360, margin=dict(l=60, r=20, t=50, b=40), hovermode="x unified")
    return fig


def _state_bands(fig, df) -> None:
    """The host memory state as background bands."""
    if "state" not in df or df["state"].isna().all():
        return
    t = df.drop_duplicates("time_s")[["time_s", "state"]].reset_index(drop=True)
    start = 0
    for i in range(1, len(t) + 1):
        if i == len(t) or t.state[i] != t.state[start]:
            colour = STATE_COLOURS.get(t.state[start])
            if colour:
                end = t.time_s[i] if i < len(t) else t.time_s[i - 1]
                fig.add_vrect(x0=t.time_s[start], x1=end, fillcolor=colour, line_width=0, layer="below",
                              annotation_text=t.state[start], annotation_position="top left", annotation_font_size=9)
            start = i


def _shown(df) -> tuple[list, str]:
    """The VMs drawn one by one, and what the titles say about the others."""
    vms = list(df["vm"].unique())
    if len(vms) <= MAX_VMS:
        return vms, ""
    if "MCTLSZ_MiB" not in df:
        return vms[:MAX_VMS], f" ({MAX_VMS} of {len(vms)} VMs: the first)"
    # In the run's VM order, so that ties (none reclaimed from) keep it: web-1, web-2, ...
    reclaimed = (df["MCTLSZ_MiB"].fillna(0) + df["SWCUR_MiB"].fillna(0)).groupby(df["vm"]).max().reindex(vms)
    top = list(reclaimed.sort_values(ascending=False, kind="stable").index[:MAX_VMS])
    return top, f" ({MAX_VMS} of {len(vms)} VMs: those reclaimed from most)"


def _where(fig, d) -> None:
    import plotly.graph_objects as go

    for label, cols, div in WHERE:
        if all(c in d for c in cols):
            y = sum(d[c] for c in cols) / div
            if y.fillna(0).abs().sum() > 0:
                fig.add_trace(go.Scatter(x=d.time_s, y=y, name=label, stackgroup="where", mode="lines"))


def _charts(runs: list[Run]) -> list[str]:
    import plotly.graph_objects as go

    overlay = len(runs) > 1
    figs = []
    for r in runs:
        df = r.timeseries
        vms, more = _shown(df)
        if more:
            total = df.groupby("time_s", as_index=False).sum(numeric_only=True)
            d, step = _thin(total)
            fig = _figure(f"{r.label}: all {df['vm'].nunique()} VMs summed: memory by where it lives" + ("" if step == 1 else f" (one sample in {step})"), "MiB")
            _where(fig, d)
            _state_bands(fig, df)
            figs.append(fig)
        for vm in vms:
            d, step = _thin(df[df.vm == vm])
            note = "" if step == 1 else f" (one sample in {step})"
            fig = _figure(f"{r.label}: {vm}: memory by where it lives{note}{more}", "MiB")
            _where(fig, d)
            _state_bands(fig, df)
            figs.append(fig)
    few = {r.label: _shown(r.timeseries) for r in runs}
    others = "".join(dict.fromkeys(m for _, m in few.values()))
    fig = _figure("balloon: target against size" + (" (runs overlaid)" if overlay else "") + others, "MiB")
    for r in runs:
        df = r.timeseries
        for vm in few[r.label][0]:
            d, _ = _thin(df[df.vm == vm])
            if "MCTLTGT_MiB" in d and d["MCTLTGT_MiB"].fillna(0).abs().sum() + d["MCTLSZ_MiB"].fillna(0).abs().sum() > 0:
                fig.add_trace(go.Scatter(x=d.time_s, y=d.MCTLTGT_MiB, name=f"{r.label}/{vm} target", mode="lines", line=dict(dash="dash")))
                fig.add_trace(go.Scatter(x=d.time_s, y=d.MCTLSZ_MiB, name=f"{r.label}/{vm} size", mode="lines"))
    figs.append(fig)
    for title, col in RATES:
        fig = _figure(title + (" (runs overlaid)" if overlay else "") + others, title)
        for r in runs:
            df = r.timeseries
            if col not in df:
                continue
            for vm in few[r.label][0]:
                d, _ = _thin(df[df.vm == vm])
                rate = d[col].diff() / d.time_s.diff()
                fig.add_trace(go.Scatter(x=d.time_s, y=rate, name=f"{r.label}/{vm}", mode="lines"))
        figs.append(fig)
    runtimes = [(r.label, vm["name"], vm["runtime_s"]) for r in runs for vm in r.summary.get("vms", []) if vm.get("runtime_s") is not None]
    if runtimes:
        # Runs side by side: the case's baseline (a VM alone, a reserved VM) is one of the bars.
        fig = _figure("runtime of each VM, run by run", "seconds")
        fig.update_layout(xaxis_title="run", hovermode="closest")
        for vm in dict.fromkeys(v for _, v, _ in runtimes):
            pts = [(label, t) for label, v, t in runtimes if v == vm]
            fig.add_trace(go.Bar(x=[p[0] for p in pts], y=[p[1] for p in pts], name=vm))
        figs.insert(0, fig)
    # Ids by place, not plotly's random ones: the same runs give the same page, byte for byte.
    return [f.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{i}", config={"displaylogo": False}) for i, f in enumerate(figs)]


def _table(header: list[str], rows: list[list], cls: str = "") -> str:
    h = "".join(f"<th>{html.escape(str(c))}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


#: How every page `render` writes begins.
PAGE_START = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>"


def is_report_page(path: Path) -> bool:
    """Whether `path` holds a page `render` wrote (which a new report may replace)."""
    with open(path, "rb") as f:
        return f.read(len(PAGE_START)) == PAGE_START.encode()


def render(runs: list[Run], title: str) -> str:
    """The page."""
    from plotly.offline import get_plotlyjs

    parts = [f"<h1>{html.escape(title)}</h1>"]
    keys = list(dict.fromkeys(k for r in runs for vm in r.summary.get("vms", []) for k in (vm.get("report") or {})))
    cell = lambda v: "-" if v is None else (f"{v:,.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    report_rows = [
        [r.label, vm.get("name"), cell(vm.get("runtime_s")), *(cell((vm.get("report") or {}).get(k)) for k in keys)]
        for r in runs
        for vm in r.summary.get("vms", [])
    ]
    if report_rows:
        more = f"<p>The first {MAX_ROWS:,} of {len(report_rows):,} rows; all are in each run's summary.json.</p>" if len(report_rows) > MAX_ROWS else ""
        parts.append("<h2>Report</h2>" + more + _table(["run", "vm", "runtime_s", *keys], report_rows[:MAX_ROWS]))
    parts.append("<h2>Charts</h2>")
    parts.extend(f'<div class="chart">{c}</div>' for c in _charts(runs))
    rows = [[r.label, d.get("time_s"), d.get("vm"), d.get("action"), d.get("reason"), d.get("outcome")] for r in runs for d in r.decisions]
    more = f"<p>The first {MAX_ROWS:,} of {len(rows):,} decisions; all are in each run's decisions.jsonl.</p>" if len(rows) > MAX_ROWS else ""
    parts.append('<h2>Decisions</h2><input id="filter" placeholder="filter decisions (any text)" oninput="filterDecisions(this.value)">'
                 + more + _table(["run", "time_s", "vm", "action", "reason", "outcome"], rows[:MAX_ROWS], "decisions"))
    for r in runs:
        if r.scenario:
            text = r.scenario
            cut = "" if len(text) <= MAX_SCENARIO_CHARS else f"\n... (the first {MAX_SCENARIO_CHARS:,} characters of {len(text):,}: all of it is scenario.toml in the run folder)"
            parts.append(f"<h2>Scenario: {html.escape(r.label)}</h2><pre>{html.escape(text[:MAX_SCENARIO_CHARS] + cut)}</pre>")
    style = ("body{font-family:sans-serif;margin:1.5em;max-width:1400px} table{border-collapse:collapse;font-size:12px} "
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left} pre{background:#f6f6f6;padding:1em;font-size:12px} "
             "#filter{margin:0.5em 0;width:30em}")
    script = ("function filterDecisions(q){q=q.toLowerCase();for(const tr of document.querySelectorAll('table.decisions tbody tr'))"
              "{tr.style.display=tr.textContent.toLowerCase().includes(q)?'':'none';}}")
    return (f"{PAGE_START}{html.escape(title)}</title><style>{style}</style>"
            f"<script>{get_plotlyjs()}</script><script>{script}</script></head><body>{''.join(parts)}</body></html>")


def page_title(folder: str, scenario: object) -> str:
    """A run folder's page title: its scenario's name, and the folder's where that differs."""
    name = scenario if isinstance(scenario, str) and scenario else None
    if name is None or name == folder or not folder:
        return name or folder
    return f"{name} ({folder})"


def write(folder: Path, runs: list[Run] | None = None, title: str | None = None, out: Path | None = None) -> Path:
    """Writes `report.html` for the run folder (or `out` for other runs), atomically; titled by
    `page_title` unless `title` is given."""
    folder = Path(folder)
    runs = runs if runs is not None else runs_in(folder)
    own = out is None
    out = out or folder / "report.html"
    # A directory in the place of the run folder's own page is the folder's fault (`out` elsewhere
    # is the caller's to check).
    if own and out.is_dir():
        raise BadRun(f"{out}: a directory, not a report: the run folder's report is written there; move it away")
    # A folder name that is not UTF-8 (its bytes held as surrogates) is shown escaped.
    # The folder's own name, also for "." (the folder a user stands in).
    title = title or page_title(Path(os.path.abspath(folder)).name, runs[0].summary.get("scenario") if runs else None)
    write_atomically(out, render(runs, title).encode("utf-8", errors="backslashreplace"))
    return out
