"""`memvisor plan`: the capacity questions of `memvisor.planning`, from the command line."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import click
from rich.table import Table

from memvisor import _core, api
from memvisor.console import USAGE, MemvisorError, given, out, some_of
from memvisor.params import ByteSize, IntList, Number

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

MIB = 1 << 20
PAGE = 4096
# The most guests --count tries: a [[vm]] table's count is at most 100,000 (scenario/resolve/vm.rs).
MAX_COUNT = 100_000


def _size(v: int) -> str:
    """A probed size as a scenario would take it: MiB, or KiB for a range that began off a MiB."""
    return f"{v // MIB}MiB" if v % MIB == 0 else f"{v // 1024}KiB"


@click.command("plan")
@click.argument("spec")
@click.option("--vm", required=True, help="The VM whose runtime must stay within the bound.")
@click.option("--slowdown", type=Number(min=1.0), required=True, help="The bound: runtime at most this many times the baseline's.")
@click.option("--reservation", "ask_reservation", is_flag=True, help="Find the VM's smallest reservation (baseline: a full one).")
@click.option("--host-memory", "ask_host_memory", is_flag=True, help="Find the smallest host memory (baseline: --max).")
@click.option("--count", "group", metavar="VM", help="Find the largest count of VM group VM (baseline: --min, default 1).")
@click.option("--min", "lo", metavar="SIZE|N", help="The range's low end (a size; a count for --count).")
@click.option("--max", "hi", metavar="SIZE|N",
              help="The range's high end, the baseline for sizes (default: the scenario's host memory, or the VM's memory for --reservation).")
@click.option("--step", type=ByteSize(), default="64MiB", show_default=True, help="Grid step for sizes.")
@click.option("--seeds", type=IntList(min=0, max=2**63 - 1), default="1,2,3", show_default=True, help="Seeds run at every probed value.")
@click.option("--variant", help="The variant to plan for, in a case or scenario that has several.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a scenario value in every run.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: the number of CPUs).")
@click.pass_context
def plan_cmd(ctx, spec, vm, slowdown, ask_reservation, ask_host_memory, group, lo, hi, step, seeds, variant, sets, jobs) -> None:
    """Answer a capacity question by bisection over simulated runs, several seeds per value: the
    smallest reservation for VM, the smallest host memory, or the largest number of guests, that
    keeps VM's runtime within SLOWDOWN x its baseline. Prints the answer, whether it is sharp, and
    the runs that bound it."""
    from memvisor.planning import Planner, one_scenario, search
    from memvisor.sweep import refuse_sets_of

    asked = [q for q, on in [("--reservation", ask_reservation), ("--host-memory", ask_host_memory), ("--count", group is not None)] if on]
    if len(asked) != 1:
        listed = f" (given: {' and '.join(asked)})" if asked else ""
        raise MemvisorError(f"ask one question: --reservation, --host-memory or --count VM{listed}", USAGE)
    question = "reservation" if ask_reservation else "host-memory" if ask_host_memory else None
    if group is not None and given("step"):
        raise MemvisorError("--step is a size step; --count steps by one guest", USAGE)
    if step < PAGE:
        raise MemvisorError(f"--step {step}B: the grid step is at least one page (4KiB)", USAGE)
    if step % PAGE:
        raise MemvisorError(f"--step {step}B: the grid step is a whole number of pages (4KiB): sizes are whole pages", USAGE)
    if variant is not None and not variant.strip():
        raise MemvisorError("--variant: empty; name one of the variants", USAGE)
    if len(set(seeds)) != len(seeds):
        raise MemvisorError(f"--seeds {','.join(map(str, seeds))}: each seed once (the same seed gives the same run)", USAGE)
    for opt, v in [("--min", lo), ("--max", hi)]:
        if v is not None and not v.strip():
            raise MemvisorError(f"{opt}: empty; give a size (a count with --count)", USAGE)
    try:
        scenarios = api.load_scenarios(spec, sets, [variant] if variant else [])
    except _core.ScenarioError as e:
        raise MemvisorError(str(e), USAGE) from None
    if len(scenarios) != 1:
        raise MemvisorError(one_scenario(spec, scenarios), USAGE)
    (s,) = scenarios
    resolved = tomllib.loads(s.to_toml())
    # The runs name a group of several VMs web-1, web-2, ...; the bound is on one of them.
    vms = {v["name"]: v for v in resolved.get("vm", [])}
    groups = {g: v.get("count", 1) for g, v in vms.items()}
    names = [x for g, n in groups.items() for x in ([g] if n == 1 else [f"{g}-{i}" for i in range(1, n + 1)])]
    # A VM of the group being counted: its name depends on the count (web alone, web-1 from two).
    nth = vm.removeprefix(f"{group}-") if group in groups and vm.startswith(f"{group}-") else ""
    in_counted = group in groups and (vm == group or nth.isdigit() and int(nth) >= 1)
    if vm not in names and not in_counted:
        what = f"a group of {groups[vm]} VMs, name one of them" if groups.get(vm, 1) > 1 else "no such VM"
        raise MemvisorError(f"--vm {vm}: {what} (VMs: {some_of(names, 12)})", USAGE)

    def size(text, what):
        try:
            v = _core.parse_bytes(text)
        except ValueError as e:
            raise MemvisorError(f"{what}: {e}", USAGE) from None
        if v % PAGE:
            # Every probe is a whole number of pages: the range's ends must be too.
            raise MemvisorError(f"{what} {text}: a whole number of pages (4KiB), as the probed sizes are", USAGE)
        return v

    if group is not None:
        if group not in groups:
            raise MemvisorError(f"--count {group}: no [[vm]] named '{group}' (VMs: {', '.join(groups)})", USAGE)
        key, fmt, high = f"vm.{group}.count", str, False
        try:
            lo_v, hi_v = int(lo or 1), int(hi) if hi else None
        except ValueError:
            raise MemvisorError("--min and --max are counts with --count", USAGE) from None
        if hi_v is None:
            raise MemvisorError("--count needs --max (the most guests to try)", USAGE)
        # The baseline is one guest; the scenario takes at most MAX_COUNT of one table.
        for opt, v in [("--min", lo_v), ("--max", hi_v)]:
            if not 1 <= v <= MAX_COUNT:
                raise MemvisorError(f"{opt} {v}: a count of guests, 1 to {MAX_COUNT:,}", USAGE)
        if in_counted and (vm == group or lo_v < max(2, int(nth))):
            first = 2 if vm == group else max(2, int(nth))
            name = f"{group}-1" if vm == group else vm
            raise MemvisorError(
                f"--vm {vm}: the VMs of '{group}' are named by its count ('{group}' alone, {group}-1, {group}-2, ... from two on), "
                f"so {name} exists from a count of {first}: bound {name} with --min {first}, or bound a VM of another group",
                USAGE,
            )
        grid_step = 1
        what = f"the largest count of '{group}'"
    elif question == "reservation":
        if vm not in vms:
            raise MemvisorError(f"--reservation sets one VM's reservation, but '{vm}' is one of a group whose VMs share their settings: give it a [[vm]] of its own", USAGE)
        key, fmt, high = f"vm.{vm}.reservation", _size, True
        mem = _core.parse_bytes(str(vms[vm]["memory"]))
        lo_v, hi_v = size(lo or "0B", "--min"), size(hi, "--max") if hi else mem
        if hi_v > mem:
            raise MemvisorError(f"--max {fmt(hi_v)}: above {vm}'s memory ({fmt(mem)}), the most it can reserve", USAGE)
        grid_step = step
        what = f"the smallest reservation of '{vm}'"
    else:
        key, fmt, high = "host.memory", _size, True
        if not lo:
            raise MemvisorError("--host-memory needs --min (the smallest host to try)", USAGE)
        lo_v, hi_v = size(lo, "--min"), size(hi, "--max") if hi else _core.parse_bytes(str(resolved["host"]["memory"]))
        grid_step = step
        what = "the smallest host memory"
    if lo_v >= hi_v:
        default = "" if hi else f"; --max defaults to the scenario's {'host memory' if key == 'host.memory' else 'VM memory'}"
        raise MemvisorError(f"--min must be below --max ({fmt(lo_v)} >= {fmt(hi_v)}{default})", USAGE)
    # A step as wide as the range asks only whether --min will do; a wider one could not be meant.
    if grid_step > hi_v - lo_v:
        tag = "" if given("step") else " (the default)"
        raise MemvisorError(f"--step {fmt(grid_step)}{tag}: wider than the range ({fmt(lo_v)} to {fmt(hi_v)}), so the answer "
                            "could only be one of its ends; give a --step a fraction of the range", USAGE)
    try:
        refuse_sets_of(sets, [key], "is the value plan searches for")
        refuse_sets_of(sets, ["seed"], "is set by plan, to each of --seeds in turn")
    except _core.ScenarioError as e:
        raise MemvisorError(str(e), USAGE) from None
    # The range's ends as the scenario takes them, before any run: a value it refuses (a host of 0
    # bytes) is the option's error, not a failed probe's.
    for opt, v, text in [("--min", lo_v, lo), ("--max", hi_v, hi)]:
        if text:
            setting = f"{key}={fmt(v)}"
            try:
                api.load_scenarios(spec, [*sets, setting], [variant] if variant else [])
            except _core.ScenarioError as e:
                raise MemvisorError(f"{opt} {text}: {str(e).removeprefix(f'--set {setting}: ')}", USAGE) from None
    planner = Planner(spec, vm, key, list(sets), list(seeds), jobs, fmt, variant)
    try:
        a = search(planner, lo_v, hi_v, grid_step, slowdown, generous_high=high)
    except (_core.ScenarioError, _core.RunError) as e:
        raise MemvisorError(str(e), 1) from None
    except BrokenProcessPool as e:
        raise MemvisorError(f"a worker process died: {e}", 1) from None
    t = Table(key, *[f"seed {x} runtime s" for x in seeds], "slowdowns", "within", title=f"{spec}: {what} keeping '{vm}' within {slowdown:g}x of {a.baseline:.1f} s")
    for v in sorted(a.probes):
        p = a.probes[v]
        mark = " <- answer" if v == a.value else (" <- bound" if v in a.bracket else "")
        t.add_row(fmt(v) + mark, *["-" if r is None else f"{r:.1f}" for r in p.runtimes],
                  ", ".join("-" if x is None else f"{x:.2f}" for x in p.slowdowns), "yes" if p.within(slowdown) else "no")
    out.print(t)
    # Whole, under the table: a reason cut to a column's width loses what it says.
    for v in sorted(a.probes):
        for e in dict.fromkeys(a.probes[v].errors):
            out.print(f"why no runtime at {fmt(v)}: {e}", soft_wrap=True)
    if a.value is None:
        raise MemvisorError("no answer: " + "; ".join(a.notes), 1)
    out.print(f"answer: {key} = {fmt(a.value)}" + ("" if a.bracket[1] is None else f" (bracketed by {fmt(a.bracket[1])}, outside the bound)"))
    out.print("sharp: the seeds agree at every probe and the runtime was monotonic where probed" if a.sharp else "not sharp: " + "; ".join(a.notes))
    for n in a.notes if a.sharp else []:
        out.print(f"note: {n}")
