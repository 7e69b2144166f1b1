"""Policies written in Python. Subclass `Policy`, override `decide`, and either pass the class to
`memvisor.run(..., policy=MyPolicy)` or name it in a scenario as `host.policy =
"python:MODULE:CLASS"` (MODULE importable, or a file next to the scenario). The engine calls
`decide` with the same host view a built-in policy gets and logs what it returns the same way.

The view is a dict: `time_ns`, `host_memory`, `host_free`, `host_available`, `hypervisor`,
`sharing` (`run`, `pages_to_scan`, `sleep_ms`, `pages_shared`, `pages_sharing`) and `vms`, a list of
dicts with every `VmView` field: `id`, `name`, `memory`, `reservation`, `limit`, `shares`,
`overhead`, `granted`, `guest_total`, `guest_free`, `guest_available`, `swap_in`, `swap_out`,
`major_faults`, `memory_stall_ns`, `host_stall_ns`, `committed`, `guest_reserve`, `frontswap`,
`frontswap_selfshrink`, `balloon_size`, `balloon_target`, `balloon_max`, `swapped`, `compressed`,
`compression_cache`, `swap_target`, `large_pages`, `active_periods`, `active_sample` and
`active_sample_now` (sizes in bytes; `memory_stall_ns`, `host_stall_ns`, `guest_reserve` and
`frontswap` are None where the host cannot see them). Decisions are dicts made with the helpers below, which pass their values on as
given: the engine refuses a size that is not a non-negative integer (numpy integers are taken),
a boolean for a number or a number for a boolean, naming the field and the value.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from memvisor import _core


class Policy:
    """Base class of a Python policy: set `name` (default: the class's name) and `period_s`
    (seconds between decisions, or None to decide once, at start), override `decide`."""

    name = "python"
    period_s: float | None = 1.0

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        # A class that names itself nowhere (nor does a base between it and Policy) is known by
        # its class name in the decisions and errors, not by a name every such policy shares.
        if cls.name is Policy.name:
            cls.name = cls.__name__

    def decide(self, view: dict) -> list[dict]:
        """The decisions for the host as `view` shows it (a dict of `HostView`'s fields, its VMs
        under "vms"): a list of the dicts the helpers below build, each with its reason; an empty
        list changes nothing."""
        raise NotImplementedError("a Policy must override decide(view)")


def balloon_target(vm_id: int, nbytes: int, reason: str) -> dict:
    """Ask VM `vm_id`'s balloon to hold `nbytes`."""
    return {"vm_id": vm_id, "kind": "balloon_target", "bytes": nbytes, "reason": reason}


def grant_limit(vm_id: int, nbytes: int, reason: str) -> dict:
    """Cap the machine memory granted to VM `vm_id`."""
    return {"vm_id": vm_id, "kind": "grant_limit", "bytes": nbytes, "reason": reason}


def swap_target(vm_id: int, nbytes: int, reason: str) -> dict:
    """Memory the host keeps swapped or compressed for VM `vm_id`."""
    return {"vm_id": vm_id, "kind": "swap_target", "bytes": nbytes, "reason": reason}


def blocked(vm_id: int, is_blocked: bool, reason: str) -> dict:
    """Stop (or resume) VM `vm_id`'s vCPUs."""
    return {"vm_id": vm_id, "kind": "blocked", "blocked": is_blocked, "reason": reason}


def break_large_pages(vm_id: int, share_now: bool, reason: str) -> dict:
    """Break VM `vm_id`'s large pages so its small pages can share; with `share_now`, share what
    the scanner has already hashed at once (ESX 6.0's clear state)."""
    return {"vm_id": vm_id, "kind": "break_large_pages", "share_now": share_now, "reason": reason}


def shrink_frontswap(vm_id: int, nbytes: int, reason: str) -> dict:
    """Bring VM `vm_id`'s frontswap pages back into its memory until frontswap holds `nbytes` (the
    guest's own self-ballooning driver does this; a live host cannot)."""
    return {"vm_id": vm_id, "kind": "shrink_frontswap", "bytes": nbytes, "reason": reason}


def memory_state(state: str, reason: str) -> dict:
    """The host's memory state as the policy judges it (high, clear, soft, hard, low, ...)."""
    return {"vm_id": None, "kind": "memory_state", "state": state, "reason": reason}


def sharing(run: bool, pages_to_scan: int, sleep_ms: int, reason: str) -> dict:
    """Same-page merging settings (KSM)."""
    return {"vm_id": None, "kind": "sharing", "run": run, "pages_to_scan": pages_to_scan, "sleep_ms": sleep_ms, "reason": reason}


PREFIX = "python:"


def module_file(name: str, base: Path | None) -> Path | None:
    """The file beside the scenario that a `python:MODULE:CLASS` policy names, if there is one:
    MODULE.py, or a package's module or `__init__.py`."""
    module = name[len(PREFIX):].partition(":")[0]
    if base is None:
        return None
    p = base.joinpath(*module.split("."))
    return next((f for f in (p.with_suffix(".py"), p / "__init__.py") if f.is_file()), None)


def _import(module: str, base: Path | None):
    """MODULE: a single file beside the scenario is loaded afresh under a name of its own (two
    scenarios may each have a `pol.py`, and an edited file must not be answered from
    `sys.modules`); a package, or an installed module, is imported with the scenario's folder
    first on the path."""
    path = module_file(f"{PREFIX}{module}:", base)
    added = base is not None and str(base) not in sys.path
    if added:
        sys.path.insert(0, str(base))  # its own imports may name files beside it
    try:
        if path is None or "." in module or path.name == "__init__.py":
            return importlib.import_module(module)
        name = f"_memvisor_policy_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses and pickling look classes up by their module
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
        return mod
    finally:
        if added:
            sys.path.remove(str(base))


def _where(e: BaseException) -> str:
    """`file:line` of the innermost frame of an exception, or of a syntax error."""
    if isinstance(e, SyntaxError) and e.filename:
        return f"{e.filename}:{e.lineno}: "
    tb = traceback.extract_tb(e.__traceback__)
    return f"{tb[-1].filename}:{tb[-1].lineno}: " if tb else ""


def _nearest(word: str, names) -> str | None:
    """The nearest of `names` to `word` (a misspelling of it, or it of them), if one is near."""
    near = difflib.get_close_matches(word, list(names), n=1, cutoff=0.6)
    return near[0] if near else None


def resolve(name: str, base: Path | None = None) -> type:
    """The class a scenario's `python:MODULE:CLASS` names; MODULE is looked for in `base` (the
    scenario's folder, or its `files_from`) first, then on the path. A module that fails to import
    is a scenario error naming where it failed."""
    module, _, cls = name[len(PREFIX):].partition(":")
    try:
        mod = _import(module, base)
    except ModuleNotFoundError as e:
        if e.name is not None and e.name != module and not module.startswith(e.name + "."):
            # The module is there; something it imports is not.
            raise _core.ScenarioError(f"host.policy: '{name}': module '{module}' failed as it was imported: {_where(e)}ModuleNotFoundError: {e}") from None
        if base is not None and not base.is_dir():
            # Only a scenario's files_from (its own or a run folder's record of the original's)
            # names a folder that is not there.
            raise _core.ScenarioError(f"host.policy: '{name}': cannot import module '{module}': the folder {base} that files_from names "
                                      "(where the module is looked for first) does not exist, and Python's path has no module of that name") from None
        beside = f"no {module.replace('.', '/')}.py in {base} (the scenario's folder, or files_from's), nor " if base is not None else "no "
        dotpy = f" (MODULE is a module's name, without .py: python:{module[:-3]}:{cls})" if module.endswith(".py") else ""
        raise _core.ScenarioError(f"host.policy: '{name}': cannot import module '{module}': {beside}a module of that name on Python's path{dotpy}") from None
    except ImportError as e:
        raise _core.ScenarioError(f"host.policy: '{name}': cannot import module '{module}': {_where(e)}{e}") from None
    except (Exception, SystemExit) as e:  # a syntax error, anything the module raises, or its exit()
        raise _core.ScenarioError(f"host.policy: '{name}': module '{module}' failed as it was imported: {_where(e)}{type(e).__name__}: {e}") from None
    c = getattr(mod, cls, None)
    if not isinstance(c, type):
        policies = [k for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, Policy) and v is not Policy]
        near = _nearest(cls, policies)
        raise _core.ScenarioError(f"host.policy: '{name}': module '{module}' has no class '{cls}'" + (f"; did you mean '{near}'?" if near else ""))
    if not issubclass(c, Policy):
        raise _core.ScenarioError(f"host.policy: '{name}': class '{cls}' is not a memvisor.Policy subclass: write class {cls}(memvisor.Policy)")
    return c


def check_decide(policy, name: str) -> None:
    """A policy (a class, or an instance) that does not override `decide` (a misspelt method) is a
    scenario error before the run, not a failure at its first decision."""
    cls = policy if isinstance(policy, type) else type(policy)
    own = not isinstance(policy, type) and "decide" in getattr(policy, "__dict__", {})  # given to this instance alone
    if issubclass(cls, Policy) and cls.decide is Policy.decide and not own:
        own = [k for c in cls.__mro__ if c not in (Policy, object) for k in vars(c) if callable(vars(c)[k]) and not k.startswith("__")]
        near = _nearest("decide", own)
        raise _core.ScenarioError(f"host.policy: '{name}': class '{cls.__name__}' does not override decide(view)"
                                  + (f" (it defines {near}(): a misspelling?)" if near else ""))


def instantiate(cls: type, name: str):
    """A new instance of a policy class; one whose constructor raises is a scenario error."""
    check_decide(cls, name)
    try:
        return cls()
    except (Exception, SystemExit) as e:
        if len(traceback.extract_tb(e.__traceback__)) == 1:  # raised by the call itself: its arguments
            raise _core.ScenarioError(f"host.policy: '{name}': {cls.__name__}() raised {type(e).__name__}: {e}: a policy is made with "
                                      "no arguments (give its settings as class attributes)") from None
        raise _core.ScenarioError(f"host.policy: '{name}': {cls.__name__}() raised {_where(e)}{type(e).__name__}: {e}") from None
