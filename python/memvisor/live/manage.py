"""`memvisor manage`: the engine's controller over the live host, every period, with the run
folder a simulated run has (decisions.jsonl appended as decisions are made, timeseries.parquet
and summary.json when the manager stops) and status.json replaced every round for `status`."""

from __future__ import annotations

import fcntl
import json
import math
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from memvisor import _core
from memvisor.atomic import write_atomically
from memvisor.signals import SIGNAL_POLL_S, deferred_signals
from memvisor.live.livehost import LiveHost, VmSpec

#: A policy that decides once (static) is still re-observed this often, s, for the time series.
DEFAULT_PERIOD_S = 10.0


@dataclass
class ManageConfig:
    """What `manage` runs: the policy, the VMs it may touch, and how."""

    policy: str
    vms: list[VmSpec]
    period_s: float | None = None
    dry_run: bool = False
    manage_ksm: bool = False
    timeout_s: float = 1.0
    rounds: int | None = None
    host_memory: int | None = None


def _row(t: float, state: str, v: dict, columns: list[str]) -> dict:
    """A time-series row with the simulated run's columns; what a live host cannot measure is NaN."""
    mib = 1 / (1 << 20)
    known = {
        "pswpin_pages": v["swap_in"],
        "pswpout_pages": v["swap_out"],
        "pgfault": v["minor_faults"] + v["major_faults"],
        "pgmajfault": v["major_faults"],
        "MemTotal_KiB": v["guest_total"] / 1024,
        "MemFree_KiB": v["guest_free"] / 1024,
        "host_wait_ms": math.nan if v["host_stall_ns"] is None else v["host_stall_ns"] / 1e6,
        "GRANT_MiB": v["granted"] * mib,
        "MCTLSZ_MiB": v["balloon_size"] * mib,
        "MCTLTGT_MiB": v["balloon_target"] * mib,
        "MCTLMAX_MiB": v["balloon_max"] * mib,
        "SWCUR_MiB": v["swapped"] * mib,
    }
    row = {"time_s": t, "vm": v["name"], "state": state}
    row.update({c: float(known.get(c, math.nan)) for c in columns})
    return row


def _target(vm) -> dict:
    """The balloon target the round's decisions left (its view was taken before them)."""
    return {"balloon_target": vm.balloon_target} if vm.last.get("balloon_target") is not None else {}


def _write_json(path: Path, obj) -> None:
    write_atomically(path, json.dumps(obj, indent=2) + "\n")


class FolderInUse(Exception):
    """Another manager is writing the run folder."""


def _lock(out: Path) -> int:
    """Takes the run folder for this manager (an exclusive lock on the folder itself, dropped when
    the process ends however it ends); FolderInUse if another manager holds it. Returns the fd."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderInUse(f"{out}: another manager is running with this run folder; stop it first or name another folder") from None
    return fd


def manage(cfg: ManageConfig, out: Path, say: Callable[[str], None] = print, started: Callable[[], None] | None = None) -> dict:
    """Runs `cfg.policy` over the listed VMs until SIGINT, SIGTERM or SIGHUP, or `cfg.rounds` rounds, writing
    the run folder `out` (`started` is called once it is this manager's). Returns the summary."""
    ctl = _core.Controller(cfg.policy)
    period = cfg.period_s or ctl.period_s() or DEFAULT_PERIOD_S
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock(out)
    try:
        if started is not None:
            started()
        return _manage(cfg, out, say, ctl, period)
    finally:
        os.close(lock)


def _manage(cfg: ManageConfig, out: Path, say: Callable[[str], None], ctl, period: float) -> dict:
    host = LiveHost(cfg.vms, dry_run=cfg.dry_run, manage_ksm=cfg.manage_ksm, timeout_s=cfg.timeout_s, stats_poll_s=max(1, round(period)), host_memory=cfg.host_memory)
    # What an earlier run wrote when it ended: left beside this run's files, a run that fails would
    # look complete.
    for stale in ("summary.json", "timeseries.parquet", "status.json", "report.html"):
        (out / stale).unlink(missing_ok=True)
    (out / "manage.json").write_text(json.dumps({**asdict(cfg), "period_s": period}, indent=2) + "\n", encoding="utf-8")
    columns = _core.timeseries_columns()
    rows: list[dict] = []
    rounds = 0
    stop = "rounds done"
    decisions = open(out / "decisions.jsonl", "w", encoding="utf-8")
    events = open(out / "events.jsonl", "w", encoding="utf-8")
    round_s: list[float] = []
    with deferred_signals() as got:
        try:
            next_t = time.monotonic()
            while cfg.rounds is None or rounds < cfg.rounds:
                t0 = time.perf_counter()
                if rounds > 0 and ctl.period_s() is None:
                    host.observe()  # a policy that decides once: keep observing for the record
                    records = []
                else:
                    records = ctl.tick(host)
                round_s.append(time.perf_counter() - t0)
                rounds += 1
                for r in records:
                    decisions.write(json.dumps(r) + "\n")
                    say(f"{r['time_s']:8.1f}s {r['vm']}: {r['action']} -- {r['reason']} [{r['outcome']}]")
                decisions.flush()
                for vm, what in host.events:
                    events.write(json.dumps({"time_s": time.monotonic() - host.start, "vm": vm, "event": what}) + "\n")
                    say(f"{vm}: {what}")
                events.flush()
                host.events.clear()
                t = time.monotonic() - host.start
                seen = [v.last for v in host.vms if v.in_view]
                rows.extend(_row(t, host.state, v, columns) for v in seen)
                _write_json(out / "status.json", {"time_s": t, "policy": ctl.policy(), "state": host.state, "dry_run": cfg.dry_run,
                                                  "vms": [{"name": v.spec.name, "reachable": v.reachable, **v.last, **_target(v)} for v in host.vms]})
                next_t += period
                while not got and time.monotonic() < next_t and (cfg.rounds is None or rounds < cfg.rounds):
                    time.sleep(min(SIGNAL_POLL_S, max(0.0, next_t - time.monotonic())))
                if got:
                    stop = f"stopped on {signal.Signals(got[0]).name}"
                    break
        finally:
            # Read before the monitors close: the view of the last round is from before its decisions.
            left = host.balloon_sizes()
            targets = {v.spec.name: v.balloon_target for v in host.vms if v.reachable}
            restored = host.close()
            decisions.close()
            events.close()
        # Still with signals held: a second Ctrl-C must not leave a summary without its report.
        summary = {
            "policy": ctl.policy(),
            "dry_run": cfg.dry_run,
            "rounds": rounds,
            "period_s": period,
            "stop": stop,
            "balloons_left_bytes": left,
            "balloon_targets_bytes": targets,
            "restored": restored,
            "round_ms_median": sorted(round_s)[len(round_s) // 2] * 1e3 if round_s else None,
        }
        import pandas as pd

        from memvisor.runfolder import parquet_bytes

        write_atomically(out / "timeseries.parquet", parquet_bytes(pd.DataFrame(rows, columns=["time_s", "vm", "state", *columns])))
        _write_json(out / "summary.json", summary)
        from memvisor import report

        report.write(out)
    return summary
