"""A memory cgroup, v1 or v2: one a process is in (usage, limits, swap and pressure, read and set),
or one made for a program or a guest (limited, its OOM kills counted, removed)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryCgroup:
    """The memory cgroup at `path`; `v2` says which interface it has."""

    path: Path
    v2: bool

    @staticmethod
    def of_pid(pid: int, root: Path = ROOT) -> MemoryCgroup | None:
        """The memory cgroup process `pid` is in, or None if it is in the root (nothing to read
        or limit there)."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            hid, controllers, rel = line.split(":", 2)
            if hid == "0" and controllers == "" and (root / "cgroup.controllers").exists():
                path, v2 = root / rel.lstrip("/"), True
            elif "memory" in controllers.split(","):
                path, v2 = root / "memory" / rel.lstrip("/"), False
            else:
                continue
            return None if rel == "/" else MemoryCgroup(path, v2)
        return None

    @staticmethod
    def create(parent: Path, name: str, v2: bool) -> MemoryCgroup:
        """A new cgroup `name` under `parent` (a memory hierarchy: v1's `memory/` or v2's root)."""
        (parent / name).mkdir()
        return MemoryCgroup(parent / name, v2)

    @staticmethod
    def root_v2(root: Path = ROOT) -> bool:
        """Whether the machine's cgroups at `root` are v2 (unified)."""
        return (root / "cgroup.controllers").exists()

    def set_limit(self, limit: int) -> None:
        """The hard limit, bytes (memory.max; memory.limit_in_bytes), and no limit on swap: the
        group pages to swap as a guest would."""
        (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(str(limit))
        if self.v2 and (self.path / "memory.swap.max").exists():
            (self.path / "memory.swap.max").write_text("max")

    def oom_kills(self) -> int:
        """The group's OOM-kill counter (v1 `memory.oom_control`, v2 `memory.events`: `oom_kill`)."""
        try:
            text = self._read("memory.events" if self.v2 else "memory.oom_control")
        except FileNotFoundError:
            return 0
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self, tries: int = 50, wait_s: float = 0.1) -> bool:
        """Removes the group, waiting while the kernel still holds it (a process just killed);
        whether it is gone."""
        for _ in range(tries):
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                time.sleep(wait_s)
        return False

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def _int(self, name: str) -> int | None:
        try:
            v = self._read(name).strip()
        except FileNotFoundError:
            return None
        return None if v == "max" else int(v)

    def usage(self) -> int:
        """Memory charged to the group, bytes (memory.current; memory.usage_in_bytes)."""
        return self._int("memory.current" if self.v2 else "memory.usage_in_bytes") or 0

    def stat(self) -> dict[str, int]:
        """memory.stat."""
        return {k: int(v) for k, v in (line.split() for line in self._read("memory.stat").splitlines())}

    def swapped(self) -> int:
        """Memory of the group in host swap, bytes (v2 memory.swap.current; v1 memory.stat
        `swap`, present when swap accounting is on); 0 where the host cannot say."""
        if self.v2:
            return self._int("memory.swap.current") or 0
        return self.stat().get("swap", 0)

    def stall_ns(self) -> int | None:
        """Cumulative memory stall, ns (memory.pressure "some total", v2 only)."""
        if not self.v2:
            return None
        try:
            first = self._read("memory.pressure").splitlines()[0]
        except FileNotFoundError:
            return None
        fields = dict(f.split("=") for f in first.split()[1:])
        return int(fields["total"]) * 1000

    def soft_limit_file(self) -> str:
        """The file that takes a grant limit without the OOM killer behind it: memory.high
        throttles and reclaims (v2); memory.soft_limit_in_bytes guides reclaim (v1)."""
        return "memory.high" if self.v2 else "memory.soft_limit_in_bytes"

    def read_soft_limit(self) -> str:
        return self._read(self.soft_limit_file()).strip()

    def write_soft_limit(self, value: str) -> None:
        (self.path / self.soft_limit_file()).write_text(value)
