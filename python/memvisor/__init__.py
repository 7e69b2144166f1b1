"""memvisor: memory manager and faithful simulator for hosts that overcommit memory to VMs.

The Python API::

    import memvisor
    runs = memvisor.run("paging-stress")          # a case name or a scenario file
    runs[0].timeseries                             # pandas DataFrame, one row per VM per sample
    runs[0].summary["vms"][0]["report"]            # the report row of the first VM

The names below load their modules on first use, so that the `memvisor` command's entry
(`memvisor.entry`) starts before pandas and the engine are loaded, and a Ctrl-C while they load
ends it as one during a command does.
"""

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and editors see; at run time, `__getattr__` below
    from memvisor._core import RunError, ScenarioError
    from memvisor.api import RunResult, cases, load, run, simulate
    from memvisor.policy import Policy
    from memvisor.runfolder import write_run_folder

#: The API's names, and the module each comes from.
_FROM = {
    "Policy": "memvisor.policy",
    "RunError": "memvisor._core",
    "RunResult": "memvisor.api",
    "ScenarioError": "memvisor._core",
    "cases": "memvisor.api",
    "load": "memvisor.api",
    "run": "memvisor.api",
    "simulate": "memvisor.api",
    "write_run_folder": "memvisor.runfolder",
}

__all__ = sorted(_FROM)


def __getattr__(name: str):
    if name in _FROM:
        value = getattr(import_module(_FROM[name]), name)
    elif name.isidentifier() and not name.startswith("__") and find_spec(f"memvisor.{name}") is not None:
        value = import_module(f"memvisor.{name}")  # `memvisor.api` after `import memvisor`
    else:
        raise AttributeError(f"module 'memvisor' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM))
