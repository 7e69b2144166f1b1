"""`memvisor validate balloon`: a real Linux guest and its simulated twin, side by side.

A guest of `memory` MiB with `swap` MiB of swap on a virtio disk boots under QEMU; its balloon is
inflated to leave it `size` MiB (without deflate-on-oom, so its MemTotal shrinks); then memhog
writes one byte in every page of `hog` MiB, `passes` times over. The guest's own /proc/vmstat gives
its major faults and swap traffic, /proc/meminfo its free memory. The simulator runs the same: a
guest of the same size, the same kernel reservation (measured: memory less the real guest's MemTotal
before ballooning) and swap, the balloon set to the same target before the program starts, and
seed 003's stress program (the same access pattern as memhog: one store per page, in order).

The live host view (what `manage` gives a policy, from virtio-balloon statistics) is read at the
end too, and set beside the guest's own figures: it must say the same.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from memvisor import _core, api
from memvisor.live import launch
from memvisor.live.livehost import LiveHost, VmSpec
from memvisor.live.monitor import Monitor, Unreachable
from memvisor.runfolder import RunFolder

MIB = 1 << 20
#: The guest kernel's defaults (Linux 6.1): vm.page-cluster 3, vm.swappiness 60.
GUEST_SYSCTL = {"vm.page-cluster": 3, "vm.swappiness": 60}
#: Simulated time before the program starts: the balloon is inflated meanwhile, as the real guest's
#: is before memhog runs.
SIM_START_S = 5


@dataclass
class Side:
    """What one side measured."""

    pgmajfault: int
    pswpin: int
    pswpout: int
    MemTotal_KiB: int
    MemFree_KiB: int


async def _inflate(mon: Monitor, size: int, wait_s: float = 60.0, poll_s: float = 0.1) -> None:
    """Has the balloon leave the guest `size` MiB and waits until it does; GuestError if it does
    not within `wait_s` (the comparison is of a guest of that size, not of one the balloon did not
    get there) or the monitor does not answer."""
    deadline = time.monotonic() + wait_s
    try:
        await mon.cmd("balloon", {"value": size * MIB})
        while (actual := (await mon.cmd("query-balloon"))["actual"]) > size * MIB:
            if time.monotonic() > deadline:
                raise launch.GuestError(f"the balloon did not take the guest down to {size} MiB within {wait_s:g} s (it is at {actual / MIB:.0f} MiB)")
            await asyncio.sleep(poll_s)
    except Unreachable as e:
        raise launch.GuestError(f"the guest's monitor: {e}") from None
    finally:
        await mon.close()


def _real(memory: int, size: int, swap: int, hog: int, passes: int, log) -> tuple[Side, dict, float, int]:
    # The guest's sockets, log and swap disk: removed with it, whatever became of the run.
    work = Path(tempfile.mkdtemp(prefix="memvisor-validate-balloon-"))
    try:
        return _real_in(work, memory, size, swap, hog, passes, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _real_in(work: Path, memory: int, size: int, swap: int, hog: int, passes: int, log) -> tuple[Side, dict, float, int]:
    with launch.Guest("guest", work, memory, swap_mib=swap) as g:
        log(f"real guest booted in {g.wait_ready():.1f} s ({'KVM' if launch.kvm_usable() else 'TCG'})")
        reserved = memory * MIB - g.meminfo()["MemTotal"] * 1024
        mon = Monitor("validate", g.qmp2, 5.0)

        asyncio.run(_inflate(mon, size))
        idle = g.meminfo()
        before = g.vmstat()
        t0 = time.monotonic()
        out = g.sh(f"memhog {hog} {passes}", timeout_s=1800)
        wall = time.monotonic() - t0
        if f"pass {passes} " not in out:
            raise launch.GuestError(f"memhog {hog} {passes} did not finish in the guest ({memory} MiB ballooned to {size} MiB, {swap} MiB of swap): "
                                    f"{' '.join(out.split())[-300:] or 'it printed nothing'}")
        after = g.vmstat()
        mi = g.meminfo()
        real = Side(
            after["pgmajfault"] - before["pgmajfault"],
            after["pswpin"] - before["pswpin"],
            after["pswpout"] - before["pswpout"],
            mi["MemTotal"],
            mi["MemFree"],
        )
        # What a policy would see: the live host view, once the guest's statistics have refreshed.
        host = LiveHost([VmSpec("guest", g.qmp)], dry_run=True)
        try:
            host.observe()
            time.sleep(2.5)
            view = host.observe()["vms"][0]
        finally:
            host.close()
        totals = {"pgmajfault": after["pgmajfault"], "pswpin": after["pswpin"], "pswpout": after["pswpout"], "MemFree_KiB": g.meminfo()["MemFree"]}
        hostview = {
            "guest": totals,
            "host view": {"pgmajfault": view["major_faults"], "pswpin": view["swap_in"], "pswpout": view["swap_out"], "MemFree_KiB": view["guest_free"] // 1024},
            # The guest's own use before the program (kernel slab, the initramfs in RAM, page
            # tables): memory the simulated guest does not model.
            "idle_used_KiB": idle["MemTotal"] - idle["MemFree"],
        }
        return real, hostview, wall, reserved


def _simulated(memory: int, size: int, swap: int, hog: int, passes: int, reserved: int) -> tuple[Side, float]:
    text = f"""name = "validate-balloon"
[host]
memory = "{2 * memory}MiB"
sample_interval = "1h"
[[datastore]]
name = "vdisk"
device = "ssd"
[[vm]]
name = "guest"
memory = "{memory}MiB"
kernel_reserved = "{reserved // 1024}KiB"
balloon = "virtio"
transparent_hugepage = "never"
datastore = "vdisk"
swap = "{swap}MiB"
sysctl = {{ "vm.page-cluster" = {GUEST_SYSCTL['vm.page-cluster']}, "vm.swappiness" = {GUEST_SYSCTL['vm.swappiness']} }}
workload = {{ kind = "stress", pages = {hog * MIB // 4096}, passes = {passes}, start = "{SIM_START_S}s" }}
"""
    (s,) = _core.load(text, "validate-balloon")
    sim = _core.Simulation(s)
    sim.set_balloon_target(0, (memory - size) * MIB)
    sim.run_until(SIM_START_S)
    r0 = sim.results()
    sim.run_until(float("inf"))
    r = sim.results()
    c0 = json.loads(r0["summary_json"])["vms"][0]["counters"]
    c = json.loads(r["summary_json"])["vms"][0]["counters"]
    ts = api.series_frame(r["timeseries"])
    side = Side(
        int(c["pgmajfault"] - c0["pgmajfault"]),
        int(c["pswpin_pages"] - c0["pswpin_pages"]),
        int(c["pswpout_pages"] - c0["pswpout_pages"]),
        int(ts["MemTotal_KiB"].iloc[-1]),
        int(ts["MemFree_KiB"].iloc[-1]),
    )
    return side, json.loads(r["summary_json"])["sim_time_s"] - SIM_START_S


def run(out: Path, memory: int = 512, size: int = 256, swap: int = 256, hog: int = 320, passes: int = 3, log=print) -> dict:
    """Runs both sides and writes the run folder (summary.json: the comparison); returns it."""
    real, hostview, wall, reserved = _real(memory, size, swap, hog, passes, log)
    sim, sim_s = _simulated(memory, size, swap, hog, passes, reserved)
    rows = []
    for k in ("pgmajfault", "pswpin", "pswpout", "MemTotal_KiB", "MemFree_KiB"):
        rv, sv = getattr(real, k), getattr(sim, k)
        rows.append({"measure": k, "real": rv, "simulated": sv, "error": (sv - rv) / rv if rv else None})
    result = {
        "setup": {"memory_MiB": memory, "kernel_reserved_KiB": reserved // 1024, "balloon_leaves_MiB": size, "swap_MiB": swap, "memhog_MiB": hog, "passes": passes, "sysctl": GUEST_SYSCTL,
                  "kernel": (launch.IMAGE / "kernel-package").read_text().strip() if (launch.IMAGE / "kernel-package").exists() else None},
        "rows": rows,
        "host_view": hostview,
        "real_wall_s": wall,
        "simulated_s": sim_s,
        "real": asdict(real),
        "simulated": asdict(sim),
    }
    with RunFolder(out, "validation") as folder:
        (folder.tmp / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
        folder.commit([])
    return result
