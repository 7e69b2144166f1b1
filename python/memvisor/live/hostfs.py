"""What the host kernel tells about memory: /proc/meminfo, /sys/kernel/mm/ksm, a process's
referenced pages, and which process serves a unix socket."""

from __future__ import annotations

import os
from pathlib import Path

KSM = Path("/sys/kernel/mm/ksm")
#: The KSM knobs a policy may set; their values are restored when the manager stops.
KSM_KNOBS = ("run", "pages_to_scan", "sleep_millisecs")


def meminfo() -> dict[str, int]:
    """/proc/meminfo, bytes."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, rest = line.split(":", 1)
        parts = rest.split()
        out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def ksm() -> dict[str, int]:
    """KSM's settings and counts (zeros where the kernel has no KSM)."""
    names = ("run", "pages_to_scan", "sleep_millisecs", "pages_shared", "pages_sharing")
    if not KSM.is_dir():
        return dict.fromkeys(names, 0)
    return {n: int((KSM / n).read_text()) for n in names}


def write_ksm(knob: str, value: int) -> None:
    (KSM / knob).write_text(str(value))


def referenced(pid: int) -> tuple[int, int, int]:
    """(Rss, Referenced, AnonHugePages) of process `pid`, bytes, from smaps_rollup: pages touched
    since the last `clear_refs` (the live analogue of ESX's active-memory sampling), and memory
    backed by transparent huge pages (what KSM cannot merge until the kernel splits them)."""
    want = {"Rss:": 0, "Referenced:": 0, "AnonHugePages:": 0}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(" ")
        if key in want:
            want[key] = int(rest.split()[0]) * 1024
    return want["Rss:"], want["Referenced:"], want["AnonHugePages:"]


def clear_refs(pid: int) -> None:
    """Clears the accessed bits of process `pid`'s pages (starts a new sampling period)."""
    Path(f"/proc/{pid}/clear_refs").write_text("1")


def socket_pid(path: str) -> int | None:
    """The process holding the listening unix socket `path`, or None. /proc/net/unix names a
    socket by the path it was bound to (absolute when QEMU was given one): `path` is matched as
    given, made absolute, and with its links resolved."""
    names = {path, os.path.abspath(path), os.path.realpath(path)}
    inodes = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[7] in names:
            inodes.add(f[6])
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None
