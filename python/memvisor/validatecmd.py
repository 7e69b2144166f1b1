"""`memvisor validate`: the simulator checked against the real kernel (linux-paging, ksm) and the
live view against a real guest (balloon)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from memvisor import _core
from memvisor.console import SKIPPED, USAGE, MemvisorError, OnceGroup, err, fmt, out, refuse_twice
from memvisor.params import MiB, ByteSize
from memvisor.runfolder import NotARunFolder, check_replaceable


@click.group(cls=OnceGroup)
def validate() -> None:
    """Check the simulator against real systems."""


def _check_out(out_dir: Path) -> None:
    """A validation's --out, checked before it touches the machine, not after: an earlier
    validation's folder is replaced, a simulated or manage run's is not."""
    try:
        check_replaceable(out_dir, "validation")
    except NotARunFolder as e:
        raise MemvisorError(f"--out {e}", USAGE) from None


_OUT_HELP = "Run folder: new, empty or an earlier validation's (replaced)."


def meminfo_mib(field: str = "MemTotal") -> int:
    """A /proc/meminfo figure of this machine, MiB (MemTotal: its memory)."""
    from memvisor.live import hostfs

    try:
        return hostfs.meminfo()[field] >> 20
    except (OSError, KeyError, ValueError, IndexError):
        raise MemvisorError(f"cannot read {field} from /proc/meminfo: this command needs Linux's memory figures", SKIPPED) from None


@validate.command("linux-paging")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/validate-linux-paging"), show_default=True, help=_OUT_HELP)
@click.option("--working-set", type=ByteSize(), default="96MiB", show_default=True, help="Memory each pattern touches.")
@click.option("--limits", "limit_list", type=MiB(min=1, many=True), default=None, help="Memory cgroup limits, whole MiB, comma-separated, e.g. 24MiB,48MiB [default: 25, 42, 58, 75 and 95 % of the working set].")
@click.option("--passes", type=click.IntRange(min=1), default=5, show_default=True, help="stress: passes over the pages.")
@click.option("--touches", type=click.IntRange(min=0), default=200_000, show_default=True, help="random, zipf: references after the first pass.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Kernel runs per point (their min..max is the band).")
@click.option("--patterns", "pattern_list", default=",".join(("stress", "random", "zipf")), show_default=True, help="Patterns to run, comma-separated: stress, random, zipf.")
@click.option("--cgroup-root", type=click.Path(path_type=Path), default=Path("/sys/fs/cgroup"), hidden=True)
def linux_paging(out_dir: Path, working_set: int, limit_list: tuple[int, ...] | None, passes: int, touches: int, repeats: int, pattern_list: str, cgroup_root: Path) -> None:
    """Run page-touching patterns in real memory cgroups with swap, several times each, and as a
    process in a memory cgroup of the simulated guest; compare major faults (against the kernel's
    band), swap traffic and refault counters. It compiles the patterns' program (cc), makes and
    turns on a swap file (mkswap, swapon) and makes memory cgroups, and undoes all three. Needs
    root, a memory cgroup controller and swap-file support; without them it says what is missing
    and exits with status 77."""
    from memvisor import validate as v

    _check_out(out_dir)
    machine = meminfo_mib()
    if not 1 <= working_set >> 20 <= machine:
        given = f"{working_set >> 20}MiB" if working_set % (1 << 20) == 0 else f"{working_set}B"
        raise MemvisorError(f"--working-set {given}: from 1MiB to this machine's memory ({machine:,}MiB)", USAGE)
    big = [x for x in limit_list or () if x > machine]
    if big:
        raise MemvisorError(f"--limits {big[0]}MiB: above this machine's memory ({machine:,}MiB); the kernel side runs here", USAGE)
    roomy = [x for x in limit_list or () if x << 20 >= working_set]
    if roomy:
        raise MemvisorError(f"--limits {roomy[0]}MiB: at or above the working set ({working_set >> 20}MiB), where nothing pages; give limits below it", USAGE)
    patterns = tuple(p.strip() for p in pattern_list.split(",") if p.strip())
    unknown = [p for p in patterns if p not in v.PATTERNS]
    if unknown or not patterns:
        raise click.BadParameter(f"{', '.join(unknown) or 'none given'}; allowed: {', '.join(v.PATTERNS)}", param_hint="'--patterns'")
    # A point given twice would run twice and its miss count twice against "at most one miss per pattern".
    refuse_twice("--limits", [f"{x}MiB" for x in limit_list or ()])
    refuse_twice("--patterns", patterns)
    if limit_list is None:
        # Once each: a small working set rounds several shares to one limit.
        limit_list = tuple(dict.fromkeys(max(1, round((working_set >> 20) * pct / 100)) for pct in (25, 42, 58, 75, 95)))
    missing = v.missing_prerequisites(cgroup_root)
    if missing:
        raise MemvisorError("validate linux-paging cannot run on this machine; it needs:", SKIPPED, details=missing)

    def log(r):
        k = "all OOM-killed" if r.kernel_majflt_median is None else f"{r.kernel_majflt_min}..{r.kernel_majflt_max}"
        err.print(f"  {r.pattern} {r.limit_MiB} MiB: kernel {k}, simulated {r.sim_majflt} major faults")

    try:
        rows, settings = v.run_validation(out_dir, cgroup_root, working_set, limit_list, passes, touches, repeats=repeats, patterns=patterns, log=log)
    except v.ValidationError as e:
        raise MemvisorError(str(e), 1) from None
    shown = ", ".join(f"{k}={settings[k]}" for k in ("kernel", "vm.page-cluster", "vm.swappiness", "transparent_hugepage", "swap_vma_readahead", "lru_gen", "cgroup_version"))
    out.print(f"kernel settings: {shown}")
    dev = settings["swap_device"]
    out.print(f"swap device (measured; the simulated swap device is given the same): {dev['latency_ns'] / 1000:.0f} us, {dev['bandwidth_B_s'] / 1e9:.2f} GB/s")
    t = Table("pattern", "limit MiB", "kernel majflt min..max", "median", "sim majflt", "in band", "kernel pswpin", "sim pswpin", "kernel refault act.", "sim refault act.", "kernel pgactivate", "sim pgactivate",
              title=f"linux-paging: {working_set >> 20} MiB working set, {repeats} kernel runs per point")
    for r in rows:
        kb = "OOM-killed" if r.kernel_majflt_min is None else f"{fmt(r.kernel_majflt_min)}..{fmt(r.kernel_majflt_max)}"
        if r.kernel_oom_kills and r.kernel_majflt_min is not None:
            kb += f" ({r.kernel_oom_kills} OOM)"
        inb = "-" if r.within_band is None else ("yes" if r.within_band else f"no ({r.majflt_error:+.0%})")
        k, sm = r.kernel, r.sim
        t.add_row(r.pattern, str(r.limit_MiB), kb, fmt(r.kernel_majflt_median), fmt(r.sim_majflt), inb,
                  fmt(k.get("pswpin")), fmt(sm["pswpin"]), fmt(k.get("workingset_activate_anon")), fmt(sm["workingset_activate_anon"]), fmt(k.get("pgactivate")), fmt(sm["pgactivate"]))
    out.print(t)
    out.print(f"run folder: {out_dir}")
    misses = {p: sum(1 for r in rows if r.pattern == p and r.within_band is False) for p in patterns}
    if any(m > 1 for m in misses.values()):
        worst = ", ".join(f"{p}: {m}" for p, m in misses.items() if m > 1)
        raise MemvisorError(f"simulated major faults outside the kernel's band at more than one limit per pattern ({worst})", 1)


@validate.command("ksm")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/validate-ksm"), show_default=True, help=_OUT_HELP)
@click.option("--mixes", "mix_list", default=None, help="Content mixes to run, comma-separated: zero, image, chains, mixed-sizes [default: all].")
@click.option("--scans", type=click.IntRange(min=3), default=3, show_default=True, help="Full scans at least after the processes are ready (above 4, smart scan's skips show).")
def ksm_cmd(out_dir: Path, mix_list: str | None, scans: int) -> None:
    """Run processes whose pages follow declared content mixes under this machine's KSM, and the
    simulated KSM scanner on the same mixes; compare KSM's counters (within 1 %, exact below 100).
    Restores every KSM setting it changes. Needs root and KSM; without them it says what is
    missing and exits with status 77."""
    from memvisor import validate_ksm as vk

    _check_out(out_dir)
    mixes = [m.strip() for m in mix_list.split(",") if m.strip()] if mix_list is not None else list(vk.MIXES)
    unknown = [m for m in mixes if m not in vk.MIXES]
    if unknown or not mixes:
        raise click.BadParameter(f"{', '.join(unknown) or 'none given'}; allowed: {', '.join(vk.MIXES)}", param_hint="'--mixes'")
    refuse_twice("--mixes", mixes)
    missing = vk.missing_prerequisites()
    if missing:
        raise MemvisorError("validate ksm cannot run on this machine; it needs:", SKIPPED, details=missing)
    try:
        folder = vk.run_validation(out_dir, mixes, min_scans=scans, log=lambda line: err.print(line, highlight=False))
    except vk.ValidationError as e:
        raise MemvisorError(str(e), 1) from None
    summary = json.loads((folder / "summary.json").read_text())
    t = Table("mix", "use_zero_pages", "full scans", "counter", "kernel", "simulated", "within 1 %", title=f"validate ksm: kernel {summary['kernel']}")
    for run in summary["runs"]:
        first = True
        for r in run["rows"]:
            if r["counter"] in ("full_scans", "pages_skipped", "general_profit") and r["simulated"] is None:
                continue
            t.add_row(run["mix"] if first else "", str(run["settings"]["use_zero_pages"]) if first else "", fmt(run["kernel"]["full_scans"]) if first else "",
                      r["counter"], fmt(r["kernel"]), fmt(r["simulated"]), "yes" if r["within_1pct"] else "NO")
            first = False
        t.add_section()
    out.print(t)
    out.print(f"run folder: {folder}")
    if not summary["target_met"]:
        raise MemvisorError("simulated KSM counters differ from the kernel's by more than the tolerance", 1)


@validate.command("balloon")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/validate-balloon"), show_default=True, help=_OUT_HELP)
@click.option("--memory", type=MiB(min=128), default="512MiB", show_default=True, help="Guest memory, whole MiB, at least 128MiB.")
@click.option("--size", type=MiB(min=64), default="256MiB", show_default=True, help="Guest size the balloon leaves, whole MiB, at least 64MiB.")
@click.option("--swap", type=MiB(min=16), default="256MiB", show_default=True, help="Swap on a virtio disk, whole MiB, at least 16MiB.")
@click.option("--hog", type=MiB(min=1), default="320MiB", show_default=True, help="Memory memhog touches, whole MiB.")
@click.option("--passes", type=click.IntRange(min=1), default=3, show_default=True, help="memhog's passes over it.")
def balloon_cmd(out_dir: Path, memory: int, size: int, swap: int, hog: int, passes: int) -> None:
    """Inflate the balloon of a real guest (QEMU) and of its simulated twin, run the same
    page-touching program in both, and compare major faults, swap traffic and free memory read from
    the guest itself; the live backend's view of the real guest is shown beside the guest's own
    figures. It boots a QEMU guest (KVM if usable, else TCG) from the guest image `make setup`
    builds, in a memory cgroup it removes after. Needs root, QEMU and the image; without them it
    says what is missing and exits with status 77."""
    from memvisor import validate_balloon as vb
    from memvisor.live import launch

    if size >= memory:
        raise MemvisorError(f"--size {size}MiB must be below --memory {memory}MiB", USAGE)
    if hog >= size + swap:
        # The guest's kernel refuses memhog's mapping (or OOM-kills it) after the guest has booted.
        raise MemvisorError(f"--hog {hog}MiB: memhog must fit in what the ballooned guest has, --size {size} MiB of memory and --swap {swap} MiB of swap; "
                            f"give less than {size + swap}MiB", USAGE)
    _check_out(out_dir)
    headroom = launch.QEMU_HEADROOM >> 20
    room = meminfo_mib("MemAvailable")
    if memory + headroom > room:
        raise MemvisorError(f"--memory {memory}MiB: a guest of {memory} MiB, and up to {headroom} MiB of QEMU's own beside it, needs more than this machine has available ({room:,} MiB)", USAGE)
    why = launch.available()
    if why:
        raise MemvisorError(f"validate balloon cannot run on this machine: {why}", SKIPPED)
    try:
        r = vb.run(out_dir, memory, size, swap, hog, passes, log=lambda line: err.print(line, highlight=False))
    except launch.GuestError as e:
        raise MemvisorError(f"validate balloon: {e}", 1) from None
    except (_core.ScenarioError, _core.RunError) as e:
        raise MemvisorError(f"validate balloon: the simulated twin: {e}", 1) from None
    t = Table("measure", "real guest", "simulated", "error", title=f"balloon: {memory} MiB guest ballooned to {size} MiB, memhog {hog} MiB x {passes}")
    for row in r["rows"]:
        t.add_row(row["measure"], fmt(row["real"]), fmt(row["simulated"]), "-" if row["error"] is None else f"{row['error']:+.1%}")
    out.print(t)
    hv = r["host_view"]
    t2 = Table("measure", "guest /proc", "live host view", title="what manage gives a policy (virtio-balloon statistics)")
    for k in hv["guest"]:
        t2.add_row(k, fmt(hv["guest"][k]), fmt(hv["host view"][k]))
    out.print(t2)
    out.print(f"real guest {r['real_wall_s']:.1f} s under {'KVM' if launch.kvm_usable() else 'TCG'}; run folder: {out_dir}")
