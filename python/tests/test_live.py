"""`memvisor manage` against real QEMU guests (TCG here: KVM is not usable on this machine). Each
guest runs in a memory cgroup of its own; the manager takes each VM's first QMP socket, the tests
read balloon sizes through the second and guest memory through the guest's console."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from qemu.qmp import QMPClient

from memvisor.live import launch

MIB = 1 << 20
why_not = launch.available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=f"real guests cannot run here: {why_not}")


def qmp2(g: launch.Guest, name: str, args: dict | None = None):
    """A QMP command's result, through the guest's second monitor (the manager holds the first)."""

    async def q():
        c = QMPClient("test")
        await c.connect(g.qmp2)
        try:
            return await c.execute(name, args)
        finally:
            await c.disconnect()

    return asyncio.run(q())


def actual(g: launch.Guest) -> int:
    """The guest's size as QEMU reports it (`query-balloon`)."""
    return qmp2(g, "query-balloon")["actual"]


def set_size(g: launch.Guest, size: int) -> None:
    qmp2(g, "balloon", {"value": size})


def run_state(g: launch.Guest) -> str:
    """QEMU's run state (`query-status`: running, paused, ...)."""
    return qmp2(g, "query-status")["status"]


def manage(out: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memvisor.cli", "manage", *args, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def decisions(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "decisions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def guests(tmp_path_factory):
    """idle (a, managed, floor 400 MiB), bystander (b, never listed), busy (c, swap on a virtio
    disk, started at 256 MiB and running memhog over 300 MiB)."""
    print(f"accelerator: {'KVM' if launch.kvm_usable() else 'TCG (KVM is not usable here)'}")
    d = tmp_path_factory.mktemp("vms")
    gs = {}
    try:
        for name, swap in (("a", 0), ("b", 0), ("c", 256)):
            gs[name] = launch.Guest(name, d, 512, swap_mib=swap)
        for g in gs.values():
            g.wait_ready()
        set_size(gs["c"], 256 * MIB)
        deadline = time.monotonic() + 60
        while actual(gs["c"]) > 260 * MIB and time.monotonic() < deadline:
            time.sleep(0.2)
        gs["c"].sh("memhog 300 0 > /tmp/hog.log 2>&1 &")
        yield gs
    finally:
        for g in gs.values():
            g.stop()


def test_dry_run_changes_nothing(guests, tmp_path):
    a, b, c = guests["a"], guests["b"], guests["c"]
    before = {n: actual(g) for n, g in guests.items()}
    p = manage(tmp_path, "pressure", "--vm", f"a={a.qmp}", "--vm", f"c={c.qmp}", "--period", "0.25", "--rounds", "16", "--dry-run")
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    recs = decisions(tmp_path)
    assert recs, "the policy decided something (c is swapping, a is idle)"
    assert all(r["outcome"] == "dry run: not applied" for r in recs)
    assert "dry run" in stdout
    assert {n: actual(g) for n, g in guests.items()} == before
    # status observes a listed VM once, through the same QMP socket.
    st = subprocess.run([sys.executable, "-m", "memvisor.cli", "status", "--vm", f"a={a.qmp}"], capture_output=True, text=True, timeout=60)
    assert st.returncode == 0 and st.stdout.split("\n")[1].split()[:2] == ["a", "yes"], st.stdout + st.stderr


def test_manage_moves_memory_from_idle_to_busy_within_floors(guests, tmp_path):
    a, b, c = guests["a"], guests["b"], guests["c"]
    b_before, c_before = actual(b), actual(c)
    c_total_before = c.meminfo()["MemTotal"]
    p = manage(tmp_path, "pressure", "--vm", f"a={a.qmp}", "--vm", f"c={c.qmp}", "--floor", "a=400MiB", "--period", "0.25", "--rounds", "176")
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    recs = decisions(tmp_path)
    ts = pd.read_parquet(tmp_path / "timeseries.parquet")
    # The busy guest grew as soon as it faulted (virtio-balloon major faults: no PSI on this cgroup
    # v1 host); later probes take it back down only as far as its program's 300 MiB lets them.
    c_sizes = 512 - ts[ts.vm == "c"].MCTLSZ_MiB
    assert c_sizes.max() >= c_before / MIB + 128, c_sizes.tolist()
    assert actual(c) >= 300 * MIB, actual(c) / MIB
    assert c.meminfo()["MemTotal"] > c_total_before + 40 * 1024, "the guest sees the memory it was given"
    assert any(r["vm"] == "c" and "grow" in r["reason"] and "major faults" in r["reason"] for r in recs)
    # The idle guest gave memory, down to its floor and never below (a 1 % probe every 6 rounds:
    # 25 of the run's 29 probes take it there).
    assert abs(actual(a) - 400 * MIB) <= MIB, actual(a) / MIB
    assert ts[ts.vm == "a"].MCTLSZ_MiB.max() <= 112 + 1e-9
    # A VM that is not listed is never touched (b is as idle as a).
    assert actual(b) == b_before
    assert set(r["vm"] for r in recs) <= {"a", "c"}
    assert all(r["reason"] for r in recs)


def test_a_hung_or_killed_guest_does_not_stop_the_loop(guests, tmp_path):
    a = guests["a"]
    e = launch.Guest("e", tmp_path / "vms", 256)
    try:
        e.wait_ready()
        out = tmp_path / "run"
        p = manage(out, "pressure", "--vm", f"a={a.qmp}", "--vm", f"e={e.qmp}", "--period", "0.25", "--timeout", "0.5")
        time.sleep(3)
        os.kill(e.proc.pid, signal.SIGSTOP)  # hung: its monitor stops answering
        time.sleep(3)
        os.kill(e.proc.pid, signal.SIGCONT)
        time.sleep(3)
        e.kill()  # gone
        time.sleep(3)
        a_at_stop = actual(a)
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        e.stop()
    assert p.returncode == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop"] == "stopped on SIGTERM"
    assert summary["rounds"] >= 30, "rounds went on while e was hung and after it was killed"
    assert "balloons left where they are" in stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    e_events = [ev["event"] for ev in events if ev["vm"] == "e"]
    assert sum("not answering" in ev for ev in e_events) >= 2, e_events  # hung, then killed
    assert any("answering; managed" == ev for ev in e_events[1:]), "it came back after SIGCONT"
    time.sleep(1)
    assert actual(a) == a_at_stop, "stopping leaves the balloons where they are"
    status = subprocess.run([sys.executable, "-m", "memvisor.cli", "status", str(out)], capture_output=True, text=True)
    assert status.returncode == 0 and "pressure" in status.stdout and "a" in status.stdout


def test_what_the_manager_stopped_it_resumes(tmp_path):
    """esx on a host of one byte: the low state stops the guest's vCPUs; the guest runs again when
    the manager ends, and what is said at the end is the target the last round set."""
    f = launch.Guest("f", tmp_path / "vms", 256)
    try:
        f.wait_ready()
        out = tmp_path / "run"
        p = manage(out, "esx", "--vm", f"f={f.qmp}", "--host-memory", "1B", "--period", "0.25", "--rounds", "3")
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        recs = decisions(out)
        assert any(r["action"].startswith("block") and r["outcome"] == "applied" for r in recs), recs
        assert "restored f: running again (the manager had stopped it)" in stderr, stderr
        assert run_state(f) == "running"
        last = [r for r in recs if r["action"].startswith("set balloon target")][-1]
        summary = json.loads((out / "summary.json").read_text())
        status = json.loads((out / "status.json").read_text())
        assert f"target {summary['balloon_targets_bytes']['f'] >> 20} MiB" in stderr or summary["balloons_left_bytes"]["f"] == summary["balloon_targets_bytes"]["f"]
        assert status["vms"][0]["balloon_target"] == summary["balloon_targets_bytes"]["f"], (status, summary)
        # The action is what the policy asked; a target the floors clamped says so first in the outcome.
        value, unit = (last["outcome"].split()[2:4] if last["outcome"].startswith("clamped to") else last["action"].split()[3:5])
        mib = float(value) * {"B": 1 / MIB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "TiB": 1 << 20}[unit]
        assert abs(summary["balloon_targets_bytes"]["f"] / MIB - mib) < 0.1, (last, summary)
    finally:
        f.stop()


def test_a_real_guest_and_its_simulated_twin_agree(tmp_path):
    """validate balloon, small: a 256 MiB guest ballooned to 128 MiB runs memhog over 160 MiB twice.
    Tolerances: major faults and swap-ins within 10 %, the band where validate linux-paging found
    the kernel stable. What the idle guest itself holds (kernel slab, the initramfs: U pages, not
    modelled) leaves the simulated program U more pages of room, so each pass writes out up to U
    fewer pages, and free memory at the end is up to U higher; both within that plus 10 %. The
    live host view must give the guest's own figures exactly."""
    from memvisor import validate_balloon as vb

    r = vb.run(tmp_path / "vb", memory=256, size=128, swap=128, hog=160, passes=2, log=lambda _: None)
    rows = {row["measure"]: row for row in r["rows"]}
    for k in ("pgmajfault", "pswpin"):
        assert rows[k]["real"] > 1000, "the guest did swap"
        assert abs(rows[k]["error"]) <= 0.10, rows[k]
    u = r["host_view"]["idle_used_KiB"] // 4
    out = rows["pswpout"]
    assert out["simulated"] <= out["real"] * 1.10 and out["real"] - out["simulated"] <= 1.1 * (2 * u) + 0.1 * out["real"], (out, u)
    assert rows["MemTotal_KiB"]["real"] == rows["MemTotal_KiB"]["simulated"], "the balloon took the same memory out of MemTotal"
    gap = rows["MemFree_KiB"]["simulated"] - rows["MemFree_KiB"]["real"]
    assert 0 <= gap <= 1.1 * 4 * u, (gap, u)
    hv = r["host_view"]
    guest, view = dict(hv["guest"]), dict(hv["host view"])
    free_gap = abs(guest.pop("MemFree_KiB") - view.pop("MemFree_KiB"))
    assert guest == view, "cumulative counters are the guest's own"
    # MemFree is a gauge read at two moments (the balloon's statistics up to one polling period
    # before the guest's own read): the global free count lags the per-CPU deltas by up to the
    # zones' stat_threshold each (calculate_normal_threshold: 2 x fls(cpus) x (1 + fls(zone MiB /
    # 128)); 1 vCPU, DMA 16 MiB: 2, DMA32 240 MiB: 4), so two reads differ by up to twice 6 pages.
    assert free_gap <= 2 * 6 * 4, (hv["guest"], hv["host view"])
    assert (tmp_path / "vb" / "summary.json").exists()


def test_grant_limits_and_ksm_are_set_and_restored(guests, tmp_path):
    """static caps each VM's grant at its memory: a soft limit (v1) or memory.high (v2), never below
    what the cgroup holds; mom, allowed to, switches KSM on for guests that do not fit a 600 MiB
    budget. Both are put back when the manager stops."""
    from memvisor.live import hostfs
    from memvisor.live.cgroup import MemoryCgroup

    a, c = guests["a"], guests["c"]
    cg = MemoryCgroup.of_pid(a.proc.pid)
    soft_before = cg.read_soft_limit()
    p = manage(tmp_path / "static", "static", "--vm", f"a={a.qmp}", "--period", "0.2", "--rounds", "2")
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    (rec,) = decisions(tmp_path / "static")
    assert rec["action"] == "set grant limit 512 MiB" and rec["outcome"].startswith("applied")
    assert f"restored a: {cg.soft_limit_file()} = {soft_before}" in stderr
    assert cg.read_soft_limit() == soft_before

    ksm_before = {k: int((hostfs.KSM / k).read_text()) for k in hostfs.KSM_KNOBS}
    p = manage(tmp_path / "mom", "mom", "--vm", f"a={a.qmp}", "--vm", f"c={c.qmp}", "--host-memory", "600MiB", "--ksm", "--period", "0.2", "--rounds", "3")
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    ksm = [r for r in decisions(tmp_path / "mom") if r["vm"] == "host" and "share pages" in r["action"]]
    assert ksm and ksm[0]["outcome"] == "applied", decisions(tmp_path / "mom")
    assert {k: int((hostfs.KSM / k).read_text()) for k in hostfs.KSM_KNOBS} == ksm_before
    assert "restored KSM run" in stderr


def test_a_guest_qemu_cannot_start_says_what_qemu_said(tmp_path):
    """The error names QEMU's own message (its log sits in a work folder removed with the guest),
    as a GuestError the commands turn into one line."""
    t0 = time.monotonic()
    with pytest.raises(launch.GuestError, match="QEMU ended with status 1: .*cannot set up guest memory"):
        launch.Guest("huge", tmp_path, 100_000_000)  # 100 TB: QEMU cannot reserve it and exits at once
    assert time.monotonic() - t0 < 30
    name = f"memvisor-{os.getpid()}-huge"
    assert not (Path("/sys/fs/cgroup") / name).exists() and not (Path("/sys/fs/cgroup/memory") / name).exists(), "its cgroup went with it"
