"""`LiveHost`: a Linux KVM host as a backend of the engine's controller. `observe()` returns the
host view a simulated host gives (the same fields, meaning the same things, DESIGN.md 9);
`apply(decision)` sets what the decision names and says what became of it.

Only the listed VMs are ever read or touched: each is named with its QMP socket, and its VM id is
its place in that list. A VM that stops answering is left out of the view (so no policy can act on
it) and reported; it is tried again next round.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from memvisor.live import hostfs
from memvisor.live.cgroup import MemoryCgroup
from memvisor.live.monitor import Monitor, Refused, Unreachable
from memvisor.params import listed_twice

PAGE = 4096
#: QOM path of the balloon device: QEMU names a `-device virtio-balloon-pci,id=balloon0` so.
BALLOON = "/machine/peripheral/balloon0"
#: Its property for how often the guest is asked for statistics, s (0: never).
STATS_INTERVAL = {"path": BALLOON, "property": "guest-stats-polling-interval"}
#: ESX's default shares per MB of guest memory ("normal": 10 per MB, vSphere Resource Management).
SHARES_PER_MIB = 10
DRY_RUN = "dry run: not applied"
#: How `close` begins what it could not put back.
NOT_RESTORED = "not restored: "


@dataclass
class VmSpec:
    """A VM the manager may manage."""

    name: str
    qmp: str
    #: Never shrink the guest below this, bytes, whatever a policy says (its reservation).
    floor: int = 0
    #: Shares (default: ESX's normal, 10 per MB of guest memory).
    shares: int | None = None


@dataclass
class _Vm:
    spec: VmSpec
    id: int
    mon: Monitor
    pid: int | None = None
    cgroup: MemoryCgroup | None = None
    memory: int = 0
    balloon_target: int | None = None
    periods: int = 0
    reachable: bool = False
    #: In the policy's view: answering, and its guest has reported balloon statistics.
    in_view: bool = False
    #: Whether the manager stopped its vCPUs (QMP `stop`; resumed on close).
    stopped: bool = False
    #: The guest-statistics interval before the manager set it (restored on close).
    poll_before: int | None = None
    last: dict = field(default_factory=dict)


class LiveHost:
    """The backend. `events` collects what happened outside the policy's decisions (a VM that
    stopped answering, came back, or was restored), for the manager to log."""

    def __init__(
        self,
        vms: list[VmSpec],
        dry_run: bool = False,
        manage_ksm: bool = False,
        timeout_s: float = 1.0,
        stats_poll_s: int = 1,
        host_memory: int | None = None,
        observe_only: bool = False,
    ):
        """`host_memory`: manage the listed VMs as if the host had this much memory for them (a
        share of a larger machine: free memory is then this less what the VMs' cgroups hold);
        None: the machine's own /proc/meminfo. `observe_only` (`memvisor status`): leave what a
        running manager relies on as it is: the guests' statistics interval unless they are off,
        and the referenced bits its active-memory sampling reads."""
        if dup := listed_twice([v.name for v in vms]):
            raise ValueError(f"VM names must be unique: {', '.join(dup)} listed twice")
        self.vms = [_Vm(spec=s, id=i, mon=Monitor(s.name, s.qmp, timeout_s)) for i, s in enumerate(vms)]
        self.dry_run = dry_run
        self.manage_ksm = manage_ksm
        self.stats_poll_s = max(1, int(stats_poll_s))
        self.host_memory = host_memory
        self.observe_only = observe_only
        self.start = time.monotonic()
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_on_interrupt)
        self.state = ""
        self.ksm_before: dict[str, int] = {}
        #: Each cgroup whose soft limit the manager wrote, with its value before (restored on
        #: close, also when its VM has gone or moved to another cgroup since).
        self.soft_limits_before: dict[Path, tuple[str, MemoryCgroup, str]] = {}
        self.events: list[tuple[str, str]] = []

    # -- observe -------------------------------------------------------------------------------

    async def _attach(self, vm: _Vm) -> None:
        """First contact (or again after a failure): the QEMU process, its cgroup, its memory
        size, and guest statistics switched on."""
        vm.pid = hostfs.socket_pid(vm.spec.qmp)
        vm.cgroup = MemoryCgroup.of_pid(vm.pid) if vm.pid else None
        vm.memory = (await vm.mon.cmd("query-memory-size-summary"))["base-memory"]
        if vm.spec.floor > vm.memory:
            self.events.append((vm.spec.name, f"its floor ({vm.spec.floor >> 20} MiB) is above its memory ({vm.memory >> 20} MiB): "
                                              "no decision takes anything from it"))
        if vm.pid is None:
            # Without its process the host side of the view is unknown, not zero: say so.
            self.events.append((vm.spec.name, f"no process found listening on {vm.spec.qmp} (/proc/net/unix): its granted memory, "
                                              "host swap and active memory read as 0, and no grant limit can be set"))
        try:
            was = await vm.mon.cmd("qom-get", STATS_INTERVAL)
        except Refused:
            raise Refused("it has no virtio balloon named balloon0 (give its QEMU -device virtio-balloon-pci,id=balloon0)") from None
        # `status` leaves a running manager's interval as it is, and only switches statistics on.
        if (not self.observe_only or not was) and was != self.stats_poll_s:
            await _poll_set(vm, self.stats_poll_s)
            if vm.poll_before is None:
                vm.poll_before = was

    async def _observe_vm(self, vm: _Vm) -> dict | None:
        try:
            if not vm.reachable:
                await self._attach(vm)
            actual = (await vm.mon.cmd("query-balloon"))["actual"]
            guest_stats = await vm.mon.cmd("qom-get", {"path": BALLOON, "property": "guest-stats"})
        except (Unreachable, Refused) as e:
            if vm.reachable or not vm.last:
                silent = "not answering, " if isinstance(e, Unreachable) else ""
                self.events.append((vm.spec.name, f"{silent}left out of the view: {e}"))
            vm.reachable = vm.in_view = False
            vm.last = {"error": str(e)}
            return None
        # Until the guest's driver first reports, its statistics read as zeros, which a policy
        # would take for an empty guest: the VM waits outside the view (as MOM skips a guest whose
        # collectors have no data yet).
        stats, updated = guest_stats["stats"], int(guest_stats.get("last-update") or 0)
        reported = updated > 0
        if not vm.in_view and reported:
            self.events.append((vm.spec.name, "answering" if self.observe_only else "answering; managed"))
        elif (vm.in_view or not vm.reachable) and not reported:
            self.events.append((vm.spec.name, f"answering, but left out of the view until its guest reports balloon statistics "
                                              f"(asked for every {self.stats_poll_s} s)"))
        vm.reachable, vm.in_view = True, reported
        balloon = vm.memory - actual
        if vm.balloon_target is None:
            vm.balloon_target = balloon
        cg = vm.cgroup
        try:
            rss, ref, huge = hostfs.referenced(vm.pid) if vm.pid else (0, 0, 0)
            if vm.pid and not self.observe_only:
                hostfs.clear_refs(vm.pid)
            granted = cg.usage() if cg else rss
            swapped = cg.swapped() if cg else 0
            stall = cg.stall_ns() if cg else None
        except OSError:
            rss = ref = huge = granted = swapped = 0
            stall = None
        vm.periods += 1
        pages = vm.memory // PAGE
        s = lambda k: max(0, int(stats.get(k, 0)))  # noqa: E731 -- -1 means "the guest does not report it"
        v = {
            "id": vm.id,
            "name": vm.spec.name,
            "memory": vm.memory,
            "reservation": min(vm.spec.floor, vm.memory),
            "limit": vm.memory,
            "shares": vm.spec.shares if vm.spec.shares is not None else SHARES_PER_MIB * (vm.memory >> 20),
            # What QEMU itself holds beyond guest RAM is not separable from a cgroup's usage.
            "overhead": 0,
            "granted": granted,
            "guest_total": s("stat-total-memory"),
            "guest_free": s("stat-free-memory"),
            "guest_available": s("stat-available-memory"),
            # virtio-balloon reports swap traffic in bytes (pages_to_bytes in the guest driver).
            "swap_in": s("stat-swap-in") // PAGE,
            "swap_out": s("stat-swap-out") // PAGE,
            "major_faults": s("stat-major-faults"),
            "minor_faults": s("stat-minor-faults"),
            # The guest's own stall is not visible from the host; its cgroup's PSI is the host's.
            "memory_stall_ns": None,
            "host_stall_ns": stall,
            # Committed_AS is not among the virtio-balloon statistics, nor the guest's reserve.
            "committed": 0,
            "guest_reserve": None,
            # frontswap lives inside the guest.
            "frontswap": None,
            "frontswap_selfshrink": False,
            "balloon_size": balloon,
            "balloon_target": vm.balloon_target,
            "balloon_max": vm.memory - min(vm.spec.floor, vm.memory),
            "swapped": swapped,
            "compressed": 0,
            "compression_cache": 0,
            "swap_target": 0,
            # One sampling period per round: the share of guest memory referenced since the last.
            "active_sample": (pages, min(pages, ref // PAGE)),
            "active_sample_now": (0, 0),
            "active_periods": vm.periods,
            "large_pages": huge,
            # When the guest last reported (QEMU's clock, s; 0: never).
            "stats_time": updated,
        }
        vm.last = v
        return v if reported else None

    def observe(self) -> dict:
        """The host view: host memory from /proc/meminfo, KSM from sysfs, each answering VM from
        QMP and its cgroup (queried concurrently, each with its own deadline)."""
        views = self.loop.run_until_complete(_gather(self._observe_vm(v) for v in self.vms))
        vms = [v for v in views if v is not None]
        k = hostfs.ksm()
        granted = sum(v["granted"] for v in vms)
        if self.host_memory is not None:
            total = self.host_memory
            free = available = max(0, total - granted)
        else:
            mi = hostfs.meminfo()
            total, free, available = mi["MemTotal"], mi["MemFree"], mi["MemAvailable"]
        return {
            "time_ns": int((time.monotonic() - self.start) * 1e9),
            "host_memory": total,
            "host_free": free,
            "host_available": available,
            # The host's own use: what is neither available nor charged to a managed VM.
            "hypervisor": max(0, total - available - granted),
            "sharing": {
                "run": k["run"] == 1,
                "pages_to_scan": k["pages_to_scan"],
                "sleep_ms": k["sleep_millisecs"],
                "pages_shared": k["pages_shared"],
                "pages_sharing": k["pages_sharing"],
            },
            "vms": vms,
        }

    # -- apply ---------------------------------------------------------------------------------

    def apply(self, d: dict) -> str:
        """Sets what decision `d` names; returns the outcome for the log."""
        kind = d["kind"]
        if d["vm_id"] is None:
            if kind == "memory_state":
                self.state = d["state"]
                return "applied"
            if kind == "sharing":
                return self._apply_ksm(d)
            return f"refused: '{kind}' needs a VM"
        if not 0 <= d["vm_id"] < len(self.vms):
            return f"refused: VM #{d['vm_id']} is not one this manager was given"
        vm = self.vms[d["vm_id"]]
        if not vm.reachable:
            return f"not applied: '{vm.spec.name}' is not answering"
        if self.dry_run:
            return DRY_RUN
        try:
            if kind == "balloon_target":
                return self._run(vm, self._balloon(vm, d["bytes"]))
            if kind == "blocked":
                return self._run(vm, self._block(vm, d["blocked"]))
            if kind == "grant_limit":
                return self._grant_limit(vm, d["bytes"])
        except OSError as e:
            return f"failed: {e}"
        if kind == "break_large_pages":
            return "not applied: a KVM host splits transparent huge pages by its own reclaim; it has no per-VM call to break them"
        if kind == "shrink_frontswap":
            return "not applied: frontswap lives inside the guest; only its own driver can shrink it"
        if kind == "swap_target":
            return "not applied: a live host has no per-VM swap target (the host kernel swaps a VM's cgroup by its own reclaim)"
        return f"refused: unknown action '{kind}'"

    async def _balloon(self, vm: _Vm, bytes_: int) -> str:
        # QMP `balloon` takes the size the guest should have, not the balloon's, and refuses 0.
        size = max(PAGE, vm.memory - bytes_)
        await vm.mon.cmd("balloon", {"value": size})
        vm.balloon_target = vm.memory - size
        return "applied" if size == vm.memory - bytes_ else "applied leaving the guest one page: QEMU's balloon takes no size of 0"

    async def _block(self, vm: _Vm, blocked: bool) -> str:
        await vm.mon.cmd("stop" if blocked else "cont")
        vm.stopped = blocked
        return "applied"

    def _run(self, vm: _Vm, coro) -> str:
        try:
            return self.loop.run_until_complete(coro)
        except Refused as e:
            return f"failed: {e}"
        except Unreachable as e:
            vm.reachable = False
            return f"not applied: {e}"

    def _grant_limit(self, vm: _Vm, bytes_: int) -> str:
        cg = vm.cgroup
        if cg is None:
            return f"not applied: '{vm.spec.name}' is not in a memory cgroup of its own"
        # Never below what the group holds: reclaiming it is the balloon's work, and a limit under
        # the usage without host swap would have the cgroup's OOM killer end QEMU.
        usage = cg.usage()
        value = max(bytes_, usage)
        if cg.path not in self.soft_limits_before:
            self.soft_limits_before[cg.path] = (vm.spec.name, cg, cg.read_soft_limit())
        cg.write_soft_limit(str(value))
        return "applied" if value == bytes_ else f"applied as {value >> 20} MiB, the current usage"

    def _apply_ksm(self, d: dict) -> str:
        if self.dry_run:
            return DRY_RUN
        if not self.manage_ksm:
            return "not applied: KSM is not managed here (allow it with --ksm)"
        if not hostfs.KSM.is_dir():
            return "not applied: the host kernel has no KSM"
        want = {"run": int(d["run"]), "pages_to_scan": d["pages_to_scan"], "sleep_millisecs": d["sleep_ms"]}
        for knob, value in want.items():
            self.ksm_before.setdefault(knob, int((hostfs.KSM / knob).read_text()))
            hostfs.write_ksm(knob, value)
        return "applied"

    def balloon_sizes(self) -> dict[str, int]:
        """Each answering VM's balloon as QEMU reports it now, bytes (it moves toward its target
        as the guest gives or takes pages back)."""

        async def size(vm: _Vm) -> int | None:
            try:
                return vm.memory - (await vm.mon.cmd("query-balloon"))["actual"]
            except (Refused, Unreachable):
                return None

        answering = [v for v in self.vms if v.reachable]
        sizes = self.loop.run_until_complete(_gather(size(v) for v in answering))
        return {v.spec.name: s for v, s in zip(answering, sizes) if s is not None}

    # -- close ---------------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Disconnects; restores what the manager changed: KSM's settings, cgroup limits, the
        guests' statistics interval, and the vCPUs of a VM it stopped (balloons stay where they
        are: the guests keep the sizes last set). Returns what was restored, and what could not
        be (those begin with `NOT_RESTORED`)."""
        done = []
        for knob, value in self.ksm_before.items():
            hostfs.write_ksm(knob, value)
            done.append(f"KSM {knob} = {value}")
        for name, cg, before in self.soft_limits_before.values():
            try:
                cg.write_soft_limit(before)
                done.append(f"{name}: {cg.soft_limit_file()} = {before}")
            except OSError as e:
                done.append(f"{NOT_RESTORED}{name}: {cg.soft_limit_file()} = {before}: {e.strerror or e}")
        for vm in self.vms:
            undo = []
            if vm.stopped:
                undo.append(("running again (the manager had stopped it)", "running again", vm.mon.cmd("cont")))
            if vm.poll_before is not None:
                every = f"every {vm.poll_before} s" if vm.poll_before else "off"
                undo.append((f"guest statistics {every} again", f"guest statistics {every}", _poll_set(vm, vm.poll_before)))
            for restored, failed, coro in undo:
                try:
                    self.loop.run_until_complete(coro)
                    done.append(f"{vm.spec.name}: {restored}")
                except (Refused, Unreachable) as e:
                    done.append(f"{NOT_RESTORED}{vm.spec.name}: {failed}: {e}")
        # What Ctrl-C left half done (a connect, a command) is cancelled and allowed to clean up on
        # this loop, rather than complain from the garbage collector after it is closed.
        pending = asyncio.all_tasks(self.loop)
        for t in pending:
            t.cancel()
        self.loop.run_until_complete(_gather(pending, return_exceptions=True))
        self.loop.run_until_complete(_gather(v.mon.close() for v in self.vms))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()
        return done


async def _poll_set(vm: _Vm, seconds: int) -> None:
    await vm.mon.cmd("qom-set", {**STATS_INTERVAL, "value": seconds})


def _quiet_on_interrupt(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The loop's error report, less the task Ctrl-C stopped: its KeyboardInterrupt reached the
    caller already (asyncio would report it again when the task is collected)."""
    if isinstance(context.get("exception"), KeyboardInterrupt):
        return
    loop.default_exception_handler(context)


async def _gather(coros, return_exceptions: bool = False):
    """Runs coroutines (or awaits tasks) concurrently on the running loop (the host's own, not a
    default one)."""
    return await asyncio.gather(*coros, return_exceptions=return_exceptions)
