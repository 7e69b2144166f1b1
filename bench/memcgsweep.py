"""The sweep in a memory cgroup under tracepoints that reclaimcost.py and reclaimtrace.py run: a
96 MiB sweep (sweep.c, 5 passes) in a cgroup v1 memory cgroup with a swap file, the kernel's trace
events of choice recorded while it runs.

`Bench` sets the machine up and puts back everything it changed when it ends, also on error or
interrupt: tracefs (mounted if it was not), the events, the trace buffer's size and `tracing_on`,
the swap file and the cgroup. Needs root, cgroup v1 memory, swap-file support and tracefs.
"""

import os
import subprocess
import tempfile
from pathlib import Path

TRACE = Path("/sys/kernel/tracing")
CG_ROOT = Path("/sys/fs/cgroup/memory")
#: The sweep: 96 MiB of pages, 5 passes.
PAGES, PASSES = 96 * 256, 5


class Bench:
    """A memory cgroup with swap and tracing ready for the sweep; use it in a `with` block."""

    def __init__(self, name: str, events: list[str]):
        self.events = events
        self.work = Path(tempfile.mkdtemp(prefix=f"memvisor-{name}-", dir="/var/tmp"))
        self.cg = CG_ROOT / f"memvisor-{name}-{os.getpid()}"
        self._mounted, self._swap_on, self._buffer, self._on = False, False, None, None

    def __enter__(self) -> "Bench":
        try:
            if not (TRACE / "events").exists():
                subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACE)], check=True)
                self._mounted = True
            here = Path(__file__).resolve().parent
            subprocess.run(["cc", "-O2", "-o", str(self.work / "sweep"), str(here / "sweep.c")], check=True)
            swap = self.work / "swap"
            subprocess.run(["dd", "if=/dev/zero", f"of={swap}", "bs=1M", "count=256", "status=none"], check=True)
            swap.chmod(0o600)
            subprocess.run(["mkswap", "-q", str(swap)], check=True)
            subprocess.run(["swapon", "-p", "32767", str(swap)], check=True)
            self._swap_on = True
            self._buffer = (TRACE / "buffer_size_kb").read_text().split()[0]
            (TRACE / "buffer_size_kb").write_text("262144")
            self._on = (TRACE / "tracing_on").read_text().strip()
            (TRACE / "tracing_on").write_text("1")
            self.cg.mkdir()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _enable(self, on: bool) -> None:
        for e in self.events:
            (TRACE / "events" / e / "enable").write_text("1" if on else "0")

    def sweep(self, limit_mib: int, traced: bool):
        """Runs the sweep in the cgroup limited to `limit_mib`; returns its resource usage and the
        trace it left (empty when not traced). The cgroup's OOM killer may end it early (SIGKILL)."""
        (self.cg / "memory.limit_in_bytes").write_text(str(limit_mib << 20))
        (TRACE / "trace").write_text("")
        if traced:
            self._enable(True)
        pid = os.fork()
        if pid == 0:
            (self.cg / "cgroup.procs").write_text(str(os.getpid()))
            os.execv(str(self.work / "sweep"), [str(self.work / "sweep"), str(PAGES), str(PASSES)])
        _, _, usage = os.wait4(pid, 0)
        if traced:
            self._enable(False)
        trace = (TRACE / "trace").read_text() if traced else ""
        (self.cg / "memory.limit_in_bytes").write_text(str(1 << 40))
        return usage, trace

    def stat(self, key: str) -> int:
        """A counter of the cgroup's memory.stat."""
        return int(next(line.split()[1] for line in (self.cg / "memory.stat").read_text().splitlines() if line.split()[0] == key))

    def __exit__(self, *exc) -> None:
        if (TRACE / "events").exists():
            self._enable(False)
            (TRACE / "trace").write_text("")
            if self._buffer is not None:
                (TRACE / "buffer_size_kb").write_text(self._buffer)
            if self._on is not None:
                (TRACE / "tracing_on").write_text(self._on)
        if self.cg.exists():
            self.cg.rmdir()
        if self._swap_on:
            subprocess.run(["swapoff", str(self.work / "swap")], check=False)
        if self._mounted:
            subprocess.run(["umount", str(TRACE)], check=False)
        subprocess.run(["rm", "-rf", str(self.work)], check=False)
