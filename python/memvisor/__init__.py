"""memvisor: memory manager and faithful simulator for hosts that overcommit memory to VMs.

The Python API::

    import memvisor
    runs = memvisor.run("paging-stress")          # a case name or a scenario file
    runs[0].timeseries                             # pandas DataFrame, one row per VM per sample
    runs[0].summary["vms"][0]["report"]            # the report row of the first VM
"""

from memvisor._core import RunError, ScenarioError
from memvisor.api import RunResult, cases, load, run, simulate
from memvisor.policy import Policy
from memvisor.runfolder import write_run_folder

__all__ = [
    "Policy",
    "RunError",
    "RunResult",
    "ScenarioError",
    "cases",
    "load",
    "run",
    "simulate",
    "write_run_folder",
]
