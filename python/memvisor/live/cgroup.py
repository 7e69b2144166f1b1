"""A process's memory cgroup, v1 or v2: usage, limits, swap and pressure, read and set."""

from __future__ import annotations

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
