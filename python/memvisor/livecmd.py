"""`memvisor manage` and `memvisor status`: the live backend from the command line."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import click
from rich.table import Table

from memvisor import _core
from memvisor.console import USAGE, MemvisorError, err, fmt, out
from memvisor.params import ByteSize, Number, RunFolderPath, listed_twice
from memvisor.runfolder import NotARunFolder, check_location, run_kind

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

_VM_KEYS = {"name", "qmp", "floor", "shares"}
_TOP_KEYS = {"policy", "period", "ksm", "timeout", "host_memory", "vm"}


def _pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not eq or not k or not v:
            raise MemvisorError(f"{option} {item!r}: give NAME={'QMP_SOCKET' if option == '--vm' else 'SIZE'}", USAGE)
        if k in out:
            raise MemvisorError(f"{option} {k}=...: given twice; give each VM once", USAGE)
        out[k] = v
    return out


def _size(v, where: str) -> int:
    """A size with its unit, as scenarios and the command line take it: a bare number (bytes? MiB?)
    is refused, not guessed."""
    if not isinstance(v, str):
        raise MemvisorError(f"{where}: a size with a unit, as a string such as \"1GiB\", not {v!r}", USAGE)
    try:
        return _core.parse_bytes(v)
    except ValueError as e:
        raise MemvisorError(f"{where}: {e}", USAGE) from None


#: The longest period between rounds, s: a day (a manager that looks less often does not manage).
PERIOD_MAX_S = 86_400.0
#: The longest a VM's monitor may be given to answer, s: QMP answers in milliseconds, and a
#: monitor silent for ten minutes has hung (and 1e12 s overflowed the socket's timeout).
TIMEOUT_MAX_S = 600.0


def _seconds(v, where: str, least: float, most: float) -> float:
    """A config file's number of seconds, from `least` to `most` (TOML has no unit for them)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not least <= v <= most:
        raise MemvisorError(f"{where}: seconds, a number from {least:g} to {most:g}, not {v!r}", USAGE)
    return float(v)


def load_config(path: Path) -> tuple[dict, list]:
    """A manage config file: top-level policy, period (s), ksm, timeout (s), and [[vm]] tables
    with name, qmp, floor (a size) and shares."""
    from memvisor.live.livehost import VmSpec

    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise MemvisorError(f"{path}: {e.strerror}", USAGE) from None
    except UnicodeDecodeError as e:
        raise MemvisorError(f"{path}: byte {e.start}: a config file is UTF-8 text (TOML)", USAGE) from None
    except tomllib.TOMLDecodeError as e:
        raise MemvisorError(f"{path}: not valid TOML: {e}", USAGE) from None
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise MemvisorError(f"{path}: unknown key {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(_TOP_KEYS))})", USAGE)
    if "policy" in raw and not isinstance(raw["policy"], str):
        raise MemvisorError(f"{path}: policy: a policy's name (a string), not {raw['policy']!r}", USAGE)
    if "ksm" in raw and not isinstance(raw["ksm"], bool):
        raise MemvisorError(f"{path}: ksm: true or false, not {raw['ksm']!r}", USAGE)
    for key, least, most in (("period", 0.1, PERIOD_MAX_S), ("timeout", 0.01, TIMEOUT_MAX_S)):
        if key in raw:
            raw[key] = _seconds(raw[key], f"{path}: {key}", least, most)
    if "host_memory" in raw:
        raw["host_memory"] = _size(raw["host_memory"], f"{path}: host_memory")
        if raw["host_memory"] == 0:
            raise MemvisorError(f"{path}: host_memory: must be larger than zero", USAGE)
    if not isinstance(raw.get("vm", []), list) or not all(isinstance(t, dict) for t in raw.get("vm", [])):
        raise MemvisorError(f"{path}: vm: a [[vm]] table per VM, each with name and qmp", USAGE)
    vms = []
    for i, t in enumerate(raw.get("vm", [])):
        where = f"{path}: vm[{i}]"
        if set(t) - _VM_KEYS:
            raise MemvisorError(f"{where}: unknown key {', '.join(sorted(set(t) - _VM_KEYS))} (allowed: {', '.join(sorted(_VM_KEYS))})", USAGE)
        for k in ("name", "qmp"):
            if not isinstance(t.get(k), str) or not t[k]:
                raise MemvisorError(f"{where}.{k}: required, a string", USAGE)
        shares = t.get("shares")
        if shares is not None and (isinstance(shares, bool) or not isinstance(shares, int) or shares <= 0):
            raise MemvisorError(f"{where}.shares: must be a positive integer, got {shares!r}", USAGE)
        vms.append(VmSpec(t["name"], t["qmp"], _size(t["floor"], f"{where}.floor") if "floor" in t else 0, shares))
    return raw, vms


def _vm_options(vm: tuple[str, ...], floor: tuple[str, ...], config: Path | None) -> tuple[dict, list]:
    # The live backend (asyncio, the QMP library) is imported only by the commands that use it.
    from memvisor.live.livehost import VmSpec

    raw, specs = load_config(config) if config else ({}, [])
    for name, qmp in _pairs(vm, "--vm").items():
        specs.append(VmSpec(name, qmp))
    if twice := listed_twice([s.name for s in specs]):
        raise MemvisorError(f"VM {', '.join(twice)} listed twice (counting --config and --vm together); give each VM once", USAGE)
    # One VM under two names: a QMP socket serves one client, so the second name would only ever
    # read as a VM that does not answer.
    by_socket: dict[str, VmSpec] = {}
    for s in specs:
        other = by_socket.setdefault(os.path.realpath(s.qmp), s)
        if other is not s:
            paths = other.qmp if other.qmp == s.qmp else f"{other.qmp} and {s.qmp}"
            raise MemvisorError(f"VMs {other.name} and {s.name} are one QMP socket ({paths}): one VM, listed twice; give each VM once", USAGE)
    floors = _pairs(floor, "--floor")
    by_name = {s.name: s for s in specs}
    for name, size in floors.items():
        if name not in by_name:
            raise MemvisorError(f"--floor {name}=...: no VM '{name}' is listed", USAGE)
        by_name[name].floor = _size(size, f"--floor {name}")
    if not specs:
        raise MemvisorError("no VMs: list them with --vm NAME=QMP_SOCKET or a --config file; no other VM is ever touched", USAGE)
    return raw, specs


def _known_policy(policy: str, where: str = "") -> None:
    if policy not in _core.policy_names():
        raise MemvisorError(f"{where}unknown policy '{policy}' (policies: {', '.join(_core.policy_names())})", USAGE)


def _rounds(n) -> str:
    return f"{n} round{'' if n == 1 else 's'}"


def _check_sockets(specs: list) -> None:
    """A mistyped path is never going to answer: refused, where a VM whose socket is there but
    silent is waited for (round after round by a manager)."""
    for s in specs:
        try:
            is_socket = stat.S_ISSOCK(os.stat(s.qmp).st_mode)
        except FileNotFoundError:
            raise MemvisorError(f"VM {s.name}: no QMP socket at {s.qmp} (the path of its QEMU's -qmp unix:PATH,server)", USAGE) from None
        except OSError as e:  # a folder it may not enter, a symlink loop
            raise MemvisorError(f"VM {s.name}: {s.qmp}: {e.strerror}", USAGE) from None
        if not is_socket:
            raise MemvisorError(f"VM {s.name}: {s.qmp} is not a socket (give the path of its QEMU's -qmp unix:PATH,server)", USAGE)


_vm_opt = click.option("--vm", multiple=True, metavar="NAME=QMP_SOCKET", help="A VM, by its QMP socket (repeatable; the allow-list: no other VM is touched).")
_floor_opt = click.option("--floor", multiple=True, metavar="NAME=SIZE", help="Never shrink VM NAME below SIZE, whatever the policy says.")
_config_opt = click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="A TOML file: policy, period, ksm, timeout, host_memory, [[vm]] name/qmp/floor/shares.")


@click.command("manage")
@click.argument("policy", required=False)
@_vm_opt
@_floor_opt
@_config_opt
@click.option("--period", type=Number(min=0.1, max=PERIOD_MAX_S), help="Seconds between rounds, 0.1 to 86400 (default: the policy's own).")
@click.option("--dry-run", is_flag=True, help="Apply no decision: print what would be done and why. Observing still sets each guest's statistics interval (put back on exit) and clears the QEMU process's referenced bits each round.")
@click.option("--ksm/--no-ksm", "manage_ksm", default=None, help="Let the policy set KSM (restored when the manager stops), or not, whatever the config file says.")
@click.option("--timeout", type=Number(min=0.01, max=TIMEOUT_MAX_S), help="Seconds a VM's monitor may take to answer, 0.01 to 600 (default 1).")
@click.option("--rounds", type=click.IntRange(min=1), help="Stop after this many rounds (default: until SIGINT, SIGTERM or SIGHUP).")
@click.option("--host-memory", type=ByteSize(), help="Manage the VMs as if the host had this much memory for them (default: the machine's).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Run folder (default runs/manage-POLICY).")
def manage_cmd(policy, vm, floor, config, period, dry_run, manage_ksm, timeout, rounds, host_memory, out_dir) -> None:
    """Run POLICY against the live KVM host: every period, observe the listed VMs (QMP, cgroups,
    /proc), decide, apply, and log each decision with its reason. SIGTERM stops it cleanly and
    leaves the balloons where they are. POLICY (or the config's policy): {policies}."""
    from memvisor.live.livehost import NOT_RESTORED
    from memvisor.live.manage import FolderInUse, ManageConfig, manage

    # A policy named here is checked first: mistakes come out in the order they were typed.
    if policy:
        _known_policy(policy)
    raw, specs = _vm_options(vm, floor, config)
    if not policy:
        policy = raw.get("policy")
        if not policy:
            raise MemvisorError(f"no policy given (policies: {', '.join(_core.policy_names())})", USAGE)
        _known_policy(policy, f"{config}: policy: ")
    cfg = ManageConfig(
        policy=policy,
        vms=specs,
        period_s=period or raw.get("period"),
        dry_run=dry_run,
        manage_ksm=bool(manage_ksm if manage_ksm is not None else raw.get("ksm", False)),
        timeout_s=timeout or raw.get("timeout", 1.0),
        rounds=rounds,
        host_memory=host_memory if host_memory is not None else raw.get("host_memory"),
    )
    if host_memory == 0:
        raise MemvisorError("--host-memory: must be larger than zero", USAGE)
    path = out_dir or Path("runs") / f"manage-{policy}"
    # It replaces an earlier manage run's folder, never a simulated run's or anything else.
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / "manage.json").is_file())):
        raise MemvisorError(f"--out {path}: exists and is not a manage run folder (it has no manage.json): name a new folder or an earlier manage run's", USAGE)
    try:
        check_location(path)
    except NotARunFolder as e:
        raise MemvisorError(f"--out {e}", USAGE) from None
    _check_sockets(specs)

    def started() -> None:
        err.print(f"managing {', '.join(s.name for s in specs)} with '{policy}'{' (dry run)' if dry_run else ''}; run folder {path}", highlight=False)

    try:
        summary = manage(cfg, path, say=lambda line: out.print(line, highlight=False), started=started)
    except FolderInUse as e:
        raise MemvisorError(f"--out {e}", USAGE) from None
    targets = summary["balloon_targets_bytes"]
    left = "; ".join(f"{k} {fmt(v >> 20)} MiB" + (f", target {fmt(targets[k] >> 20)} MiB" if targets.get(k) not in (None, v) else "")
                     for k, v in summary["balloons_left_bytes"].items())
    err.print(f"{summary['stop']} after {_rounds(summary['rounds'])}; balloons left where they are ({left or 'none reachable'})", highlight=False)
    for r in summary["restored"]:
        err.print(r if r.startswith(NOT_RESTORED) else f"restored {r}", highlight=False)


# The engine's policies, a new one included (the help is read when the command is built).
manage_cmd.help = manage_cmd.help.format(policies=", ".join(_core.policy_names()))


def _status_table(status: dict) -> Table:
    t = Table("vm", "reachable", "memory MiB", "balloon MiB", "target MiB", "granted MiB", "guest free MiB", "swap in", "major faults", box=None)
    mib = lambda v: fmt(v >> 20) if isinstance(v, int) else "-"  # noqa: E731
    for v in status["vms"]:
        t.add_row(v["name"], "yes" if v.get("reachable") else "no", mib(v.get("memory")), mib(v.get("balloon_size")), mib(v.get("balloon_target")),
                  mib(v.get("granted")), mib(v.get("guest_free")), fmt(v.get("swap_in")), fmt(v.get("major_faults")))
    return t


def _manager_running(run: Path) -> bool:
    """Whether a manager holds run folder `run` (it locks the folder while it runs)."""
    import fcntl

    try:
        fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@click.command("status")
@click.argument("run", required=False, type=RunFolderPath(exists=False, wants="the folder `memvisor manage --out` writes"))
@_vm_opt
@_config_opt
def status_cmd(run, vm, config) -> None:
    """The live host's current state: from a running manager's run folder RUN, or observed once
    from the listed VMs (their QMP sockets must be free; a guest's balloon statistics are switched
    on where off for the reading, and off again after)."""
    if run is not None:
        if vm or config:
            raise MemvisorError("give a manage run folder, or VMs to observe (--vm, --config), not both", USAGE)
        try:
            status = json.loads((run / "status.json").read_text(encoding="utf-8"))
            if not isinstance(status, dict) or not {"policy", "state", "dry_run", "vms"} <= set(status):
                raise ValueError("it is not an object with policy, state, dry_run and vms")
            if not isinstance(status["vms"], list) or not all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in status["vms"]):
                raise ValueError("vms must be a list of VM objects, each with a name")
        except FileNotFoundError:
            if not run.is_dir():
                raise MemvisorError(f"{run}: no such folder (give the folder `memvisor manage --out` writes)", USAGE) from None
            if run_kind(run) in ("simulated", "validation"):
                raise MemvisorError(f"{run}: not a manage run's folder (a simulated run's or a validation's); status reads the folder `memvisor manage --out` writes", USAGE) from None
            raise MemvisorError(f"{run}: no status.json (is it a manage run folder?)", USAGE) from None
        except (OSError, ValueError, TypeError) as e:  # a folder, not UTF-8, not JSON, not an object
            raise MemvisorError(f"{run / 'status.json'}: not a manager's status ({e})", USAGE) from None
        age = time.time() - (run / "status.json").stat().st_mtime
        out.print(f"policy {status['policy']}, state {status['state'] or '-'}, as of {age:.0f} s ago{' (dry run)' if status['dry_run'] else ''}", highlight=False)
        # A manager writes summary.json when it stops: the state above is then its last, not the host's now.
        if (run / "summary.json").exists():
            try:
                s = json.loads((run / "summary.json").read_text(encoding="utf-8"))
                how = f": {s['stop']} after {_rounds(s['rounds'])}" if isinstance(s, dict) and {"stop", "rounds"} <= set(s) else ""
            except (OSError, ValueError):
                how = ""
            out.print(f"the manager has stopped{how}; this was its last round, not the host's state now", highlight=False)
        elif not _manager_running(run):
            out.print("no manager is running with this folder, and none stopped cleanly (it was killed?): this was its last round, not the host's state now", highlight=False)
    else:
        from memvisor.live.livehost import LiveHost

        if not vm and not config:
            raise MemvisorError("give a manage run folder (RUN), or VMs to observe (--vm NAME=QMP_SOCKET, --config FILE)", USAGE)
        _, specs = _vm_options(vm, (), config)
        _check_sockets(specs)
        host = LiveHost(specs, dry_run=True, observe_only=True)
        try:
            host.observe()
        finally:
            host.close()
        for name, what in host.events:
            err.print(f"{name}: {what}", highlight=False)
        status = {"vms": [{"name": v.spec.name, "reachable": v.reachable, **v.last} for v in host.vms]}
    out.print(_status_table(status))
    if run is not None:
        # Why a VM did not answer, which the live form has said already as it observed.
        for v in status["vms"]:
            if not v.get("reachable") and isinstance(v.get("error"), str):
                out.print(f"{v['name']}: not answering at that round: {v['error']}", highlight=False)
    if run is None and not any(v["reachable"] for v in status["vms"]):
        raise MemvisorError("no listed VM answered", 1)
