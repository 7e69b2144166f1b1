"""The `memvisor` command."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import click
from rich.table import Column, Table

from memvisor import _core, api
from memvisor.atomic import written_through
from memvisor.console import SKIPPED, USAGE, MemvisorError, OnceGroup, check_output, err, fmt, given, out, some_of, warn
from memvisor.signals import Terminated, sigterm_as_interrupt
from memvisor.runfolder import NotARunFolder, RunFolder, check_replaceable, is_run_folder, run_folder_around, scenario_of
from memvisor.params import RunFolderPath
from memvisor.livecmd import manage_cmd, status_cmd
from memvisor.plancmd import plan_cmd
from memvisor.sweepcmd import sweep_cmd
from memvisor.tracecmd import trace
from memvisor.validatecmd import meminfo_mib, validate


class _Main(OnceGroup):
    """The top-level group: Ctrl-C, SIGTERM and SIGHUP end any command with one error line and
    the shell's status for the signal (130, 143, 129), after the cleanup on the way out has run."""

    def invoke(self, ctx: click.Context):
        try:
            with sigterm_as_interrupt():
                return super().invoke(ctx)
        except Terminated as e:
            raise MemvisorError(e.word, e.exit_code) from None
        except KeyboardInterrupt:
            raise MemvisorError("interrupted", 130) from None
        except OSError as e:
            # A full disk, a closed pipe or a file that cannot be made or read (a folder not there
            # or not writable) is the machine's state, not a bug: one line, no traceback.
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EPIPE):
                # What is still buffered for stdout could not be written either; drop it.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                if e.errno == errno.EPIPE:  # the reader left (`| head`): nothing more to say
                    raise SystemExit(141) from None
            elif e.filename is None:
                raise
            raise MemvisorError(f"{e.filename or 'output'}: {e.strerror}", 1) from None


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """memvisor: memory manager and simulator for overcommitted virtual-machine hosts."""


@main.command()
def cases() -> None:
    """List the case studies that can be run by name."""
    t = Table("case", "what it reproduces", box=None)
    for name, desc in api.cases():
        t.add_row(name, desc)
    out.print(t)


@main.command()
@click.argument("spec")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Run folder: new, empty or an earlier simulated run's (replaced); default runs/<name>.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a scenario value, e.g. host.memory=4GiB.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Variants run at once (default: the number of CPUs).")
@click.option("--variant", "variants", multiple=True, metavar="NAME", help="Run only this variant (repeatable).")
@click.option("--quiet", is_flag=True, help="No progress bar (there is none when stderr is not a terminal).")
def run(spec: str, out_dir: Path | None, sets: tuple[str, ...], jobs: int | None, variants: tuple[str, ...], quiet: bool) -> None:
    """Run a case study (by name) or a scenario file and write its run folder. Variants run side by
    side; each gives what it would give alone."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    try:
        scenarios = api.load_scenarios(spec, sets, variants)
    except _core.ScenarioError as e:
        raise MemvisorError(str(e), USAGE) from None
    for w in dict.fromkeys(w for s in scenarios for w in s.warnings):
        warn(w)
    path = out_dir or Path("runs") / scenarios[0].name
    # A rerun replaces its folder; another scenario's run there is said to go, before the work.
    # Refused before the work: a folder that is not an earlier simulated run's, nor empty.
    try:
        check_replaceable(path, "simulated")
    except NotARunFolder as e:
        raise MemvisorError(f"--out {e}", USAGE) from None
    before = scenario_of(path)
    if is_run_folder(path) and before != scenarios[0].name:
        what = f"a run of scenario '{before}'" if before else "a run that names no scenario"
        warn(f"{path} holds {what}: this run of '{scenarios[0].name}' replaces it")
    try:
        with RunFolder(path) as folder, Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TextColumn("sim {task.fields[sim]:>8.1f}s"),
            TimeElapsedColumn(),
            console=err,
            # A bar drawn into a file or pipe is noise among the results: a terminal's only.
            disable=quiet or not err.is_terminal,
        ) as bar:
            tasks = [bar.add_task(s.variant or s.name, total=s.duration_s, sim=0.0) for s in scenarios]

            def progress_for(i: int):
                def progress(now: float, total: float | None) -> None:
                    bar.update(tasks[i], completed=now if total else None, sim=now)

                return progress

            results = api.simulate_all(scenarios, progress_for, jobs=jobs)
            for task, s, r in zip(tasks, scenarios, results):
                bar.update(task, completed=s.duration_s or 1, total=s.duration_s or 1)
                folder.add(r)
            final = folder.commit(results)
    except (_core.ScenarioError, _core.TraceError) as e:
        # Found only as the run starts (a Python policy's module or class, a trace file's records):
        # still the scenario's.
        raise MemvisorError(str(e), USAGE) from None
    except _core.RunError as e:
        raise MemvisorError(str(e), 1) from None
    except NotARunFolder as e:
        raise MemvisorError(str(e), USAGE) from None
    try:
        _report_finished(results)
    except (KeyboardInterrupt, Terminated) as e:
        # The folder is in place and complete: the signal cut only what is printed about it.
        code, what = (e.exit_code, e.word) if isinstance(e, Terminated) else (130, "interrupted")
        raise MemvisorError(f"{what} while printing the report; the run finished and its folder is complete: {final}", code) from None
    out.print(f"run folder: {final}")


def _report_finished(results: list[api.RunResult]) -> None:
    """The report table of finished runs, and a warning for decisions naming VMs that never were."""
    _print_report(results)
    for r in results:
        where = f"variant '{r.variant}': " if r.variant else ""
        start, end = r.summary["report_window_s"]
        if start >= end:
            # The window is the scenario's, the run's end is known only now.
            warn(f"{where}report.window starts at {start:g} s, and the run ended at {end:g} s: "
                 "nothing was measured over it, so its rates are empty ('-')")
        # The controller refuses them (a live host's VM may have gone); in a simulation the VMs
        # never change, so the policy named one that never was.
        d = r.decisions
        stray = d[d["outcome"].str.startswith("refused: VM #")]
        if len(stray):
            ids = ", ".join(f"#{i}" for i in dict.fromkeys(stray["vm_id"]))
            warn(f"{where}{len(stray):,} decisions of policy '{stray['policy'].iloc[0]}' name VMs the host does not have ({ids}); "
                 "they were refused (decisions.jsonl)")
        # A target beyond the VM's memory is a policy's mistake the controller mends; say so.
        over = d[d["outcome"].str.contains(r"^clamped to [^,]*, all of .*'s memory", regex=True)]
        if len(over):
            vms = ", ".join(dict.fromkeys(over["vm"]))
            warn(f"{where}{len(over):,} decisions of policy '{over['policy'].iloc[0]}' asked for more than the VM's memory ({vms}); "
                 "each was clamped to all of it (decisions.jsonl)")
        if r.policy_s > max(POLICY_SLOW_S, r.run_s / 2):
            warn(f"{where}policy '{r.summary['host']['policy']}' took {r.policy_s:.1f} s of the run's {r.run_s:.1f} s of "
                 f"real time in decide ({r.policy_calls:,} calls, {1e3 * r.policy_s / max(r.policy_calls, 1):.1f} ms each); "
                 "a longer period_s calls it less often")


#: Real seconds a Python policy's decide may take over a run before the run says it was slow
#: (and then only if it took half of the run's time or more).
POLICY_SLOW_S = 1.0

# Rows a run shows in the terminal; the rest are in its summary.json (a run of thousands of VMs
# would otherwise print thousands of lines).
REPORT_ROWS_SHOWN = 20


def _print_report(results: list[api.RunResult]) -> None:
    """A row per run and VM, a column per report value. Where that is wider than the terminal (it
    would cut names and numbers short), the same figures turned round: a row per report value and a
    column per run and VM, in one table or, if that is too wide too, one per run."""
    cols = results[0].summary["report_columns"]
    every = [(r, r.report_rows()) for r in results]
    shown = [(r, rows[:REPORT_ROWS_SHOWN]) for r, rows in every]
    hidden = sum(max(0, len(rows) - REPORT_ROWS_SHOWN) for _, rows in every)
    notes = [f"{hidden:,} more VM rows not shown (the first {REPORT_ROWS_SHOWN} of each run are); summary.json has every row"] if hidden else []
    notes += _unfinished(
        cols,
        [(f"{r.variant}/{row['vm']}" if r.variant else row["vm"], _vm_summary(r.summary, row["vm"])) for r, rows in every for row in rows if row.get("runtime_s") is None],
    )
    caption = "\n".join(notes) or None
    t = Table(*(["variant"] if results[0].variant else []), "vm", *cols, "sim s", "wall s", title=results[0].name, caption=caption)
    for r, rows in shown:
        for row in rows:
            cells = ([r.variant] if r.variant else []) + [row["vm"]] + [fmt(row.get(c)) for c in cols]
            t.add_row(*cells, fmt(r.summary["sim_time_s"]), f"{r.wall_s:.2f}")
    if _fits(t):
        out.print(t)
        return
    # A lone variant's columns name only its VMs: the title names it.
    lone = results[0].variant if len(results) == 1 else None
    turned = _turned(results[0].name + (f": {lone}" if lone else ""), shown, cols, caption)
    if _fits(turned):
        out.print(turned)
        return
    # One table per run, split into as few tables over its VMs as fit; where even one VM does not
    # fit, its cells fold onto more lines, never cut.
    for r, rows in shown:
        title = results[0].name + (f": {r.variant}" if r.variant else "")
        i = 0
        while i < len(rows):
            j = len(rows)
            while j > i + 1 and not _fits(_turned(title, [(r, rows[i:j])], cols, None)):
                j -= 1
            out.print(_turned(title, [(r, rows[i:j])], cols, None, fold=True))
            i = j
    if caption:
        out.print(caption)


def _vm_summary(summary: dict, name: str) -> dict:
    """A VM's entry in a run's summary (empty if the run has none of that name)."""
    return next((v for v in summary.get("vms", []) if v.get("name") == name), {})


def _killed(vm: dict) -> bool:
    """Whether the OOM killer ended one of the VM's processes (its work was never done)."""
    return any(p.get("state") == "killed" for p in vm.get("processes", []))


def _unfinished(cols: list[str], vms: list[tuple[str, dict]]) -> list[str]:
    """The notes that explain a runtime shown as `-` for these VMs ((run/VM name, its summary)):
    a process was killed by the OOM killer, or the work had not ended when the run did (the
    scenario's duration came first) or has no end."""
    if "runtime_s" not in cols:
        return []

    def note(what: str, names: list[str]) -> list[str]:
        return [f"runtime_s -: {what}: {some_of(names, 3)}"] if names else []

    return note("a process was killed by the OOM killer", [n for n, v in vms if _killed(v)]) + note(
        "work not finished when the run ended", [n for n, v in vms if not _killed(v)]
    )


def _fits(t: Table) -> bool:
    """Whether a table shows in full at the terminal's width (measured unbounded: a measurement
    is otherwise capped at the width it is checked against)."""
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update(max_width=1 << 20), t).maximum <= out.width


def _turned(title: str, shown: list, cols: list[str], caption: str | None, fold: bool = False) -> Table:
    """The report turned round: a row per value, a column per run and VM; with `fold`, a cell too
    wide for its column continues on the next line instead of being cut short."""
    overflow = "fold" if fold else "ellipsis"
    # One run's table names its variant in the title, its columns only the VMs.
    named = len(shown) > 1
    heads = [Column(f"{r.variant}\n{row['vm']}" if r.variant and named else row["vm"], justify="right", overflow=overflow) for r, rows in shown for row in rows]
    t = Table(Column("", overflow=overflow), *heads, title=title, caption=caption)
    for c in cols:
        t.add_row(c, *(fmt(row.get(c)) for _, rows in shown for row in rows))
    t.add_row("sim s", *(fmt(r.summary["sim_time_s"]) for r, rows in shown for _ in rows))
    t.add_row("wall s", *(f"{r.wall_s:.2f}" for r, rows in shown for _ in rows))
    return t


@main.command()
@click.option("--quick", is_flag=True, help="A smoke run: the touch benchmarks one simulated second each, the KSM scanner 3 full scans, the "
              "page-sharing runs 20 simulated seconds; the 10,000-VM point runs in full.")
@click.option("--live", type=click.IntRange(min=1), metavar="N", help="Time policy rounds over N real guests (QEMU) instead.")
def bench(quick: bool, live: int | None) -> None:
    """Measure simulated page touches per real second (one core) and the KSM and ESX page-sharing
    scanners' time per page; with --live N, the time of one policy round over N real guests instead."""
    from memvisor.bench import run_bench, run_denali_bench, run_ksm_bench, run_live_rounds, run_tps_bench

    if live is not None:
        from memvisor.live import launch

        from memvisor.bench import LIVE_GUEST_MIB

        room = meminfo_mib("MemAvailable")
        # Each guest's cgroup lets QEMU hold its RAM and QEMU_HEADROOM beside it (under TCG an idle
        # 128 MiB guest already holds over 200 MiB): counting the RAM alone would let the guests
        # outgrow the machine.
        each = LIVE_GUEST_MIB + (launch.QEMU_HEADROOM >> 20)
        if live * each > room:
            raise MemvisorError(f"--live {live}: {live} guests of {LIVE_GUEST_MIB} MiB, each with up to {each - LIVE_GUEST_MIB} MiB of QEMU's own, "
                                f"need more than this machine has available ({room:,} MiB: room for {room // each:,})", USAGE)
        why = launch.available()
        if why:
            raise MemvisorError(f"bench --live cannot run on this machine: {why}", SKIPPED)
        try:
            r = run_live_rounds(live, rounds=10 if quick else 50)
        except launch.GuestError as e:
            raise MemvisorError(f"bench --live: {e}", 1) from None
        t = Table("VMs", "rounds", "guests on", "round ms (median)", "round ms (p90)", "observe ms (median)", "decisions", title="memvisor bench --live: observe/decide/apply over real guests")
        t.add_row(str(r.vms), str(r.rounds), r.accelerator, f"{r.round_ms_median:.1f}", f"{r.round_ms_p90:.1f}", f"{r.observe_ms_median:.1f}", str(r.decisions))
        out.print(t)
        return
    # The tables are printed together at the end: an interrupted run leaves none that looks final.
    tables = []
    t = Table("benchmark", "sim s", "touches", "faults", "wall s", "touches/s", title="memvisor bench")
    for r in run_bench(quick):
        t.add_row(r.what, f"{r.sim_s:.0f}", f"{r.touches:.3e}", f"{r.faults:,}", f"{r.wall_s:.2f}", f"{r.touches_per_s:.3e}")
    tables.append(t)
    k = run_ksm_bench(quick)
    t = Table("mergeable pages", "full scans", "pages visited", "wall s (median of 3)", "ns per page visited", title="KSM scanner (simulated)")
    t.add_row(f"{k.pages:,}", str(k.full_scans), f"{k.visited:,}", f"{k.wall_s:.3f}", f"{k.ns_per_page:.1f}")
    tables.append(t)
    t = Table("host", "pages read", "wall s, sharing on", "wall s, off", "ns per page read", title="Host page-sharing scanners (simulated, in a run; hashes memoised as identities; medians of 3)")
    for profile, name in (("esx", "ESX TPS"), ("kvm", "KVM ksmd")):
        p = run_tps_bench(quick, profile)
        t.add_row(name, f"{p.visited:,}", f"{p.wall_on_s:.3f}", f"{p.wall_off_s:.3f}", f"{p.ns_per_page:.1f}")
    tables.append(t)
    d = run_denali_bench()
    t = Table("VMs", "wall s", "events", "events/s", "peak RSS MiB", "of it, the run MiB", "accounted B per paged-out VM", "modelled metadata MiB", title="denali-scale, 10,000-VM point (list pool; a fresh process, against one that only loads it)")
    t.add_row(f"{d.vms:,}", f"{d.wall_s:.2f}", f"{d.events:,}", f"{d.events_per_s:.3e}", f"{d.rss_mib:.0f}", f"{d.sim_mib:.0f}", f"{d.accounted_bytes_per_vm:.0f}", f"{d.metadata_mib:.1f}")
    tables.append(t)
    for t in tables:
        out.print(t)


@main.command("report")
@click.argument("run", type=RunFolderPath())
def report_cmd(run: Path) -> None:
    """Rebuild RUN's report.html (a self-contained page: charts, decisions, scenario)."""
    from memvisor import report

    try:
        out.print(f"wrote {report.write(run)}")
    except (FileNotFoundError, report.BadRun) as e:
        raise MemvisorError(str(e), USAGE) from None
    except OSError as e:  # a folder it may not write, a full disk
        raise MemvisorError(f"{run}: cannot write its report.html: {e.strerror or e}", 1) from None


_COMPARE_OUT = Path("runs/compare.html")


@main.command("compare")
@click.argument("runs", nargs=-1, required=True, type=RunFolderPath())
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=_COMPARE_OUT, show_default=True, help="The overlaid report.")
def compare_cmd(runs: tuple[Path, ...], out_path: Path) -> None:
    """Compare run folders: each VM's runtime and report values side by side, with the ratio to
    the first run, and a report that overlays them."""
    from memvisor import report

    if not out_path.name:
        raise MemvisorError("--out: give the file the overlaid report is written to, e.g. runs/compare.html", USAGE)
    seen: dict[Path, Path] = {}
    for p in runs:
        if (twin := seen.setdefault(p.resolve(), p)) is not p:
            raise MemvisorError(f"{p}: the same folder as {twin}, given before; give each run folder once", USAGE)
    # A run folder's files are the run's, and a rerun replaces all inside it: the overlay goes elsewhere.
    around = run_folder_around(out_path)
    if around is not None:
        raise MemvisorError(f"--out {out_path}: inside a run folder ({around}); write the overlaid report elsewhere", USAGE)
    # The default's folder is made (just before the report is written), as a run's `runs/` is; a
    # folder given is not (a typo would make one anywhere).
    default = out_path == _COMPARE_OUT and not out_path.parent.exists()
    if not default:
        check_output(out_path, "--out" if given("out_path") else "the default --out")
    # It replaces an earlier report, never a file of another kind (a scenario named by mistake).
    if out_path.is_file() and not report.is_report_page(out_path):
        raise MemvisorError(f"--out {out_path}: exists and is not a report memvisor wrote; name a new file or an earlier report", USAGE)
    try:
        # Folders are labelled by name, or by the path given where two share a name.
        names = [p.name for p in runs]
        per_folder = [report.runs_in(p, label=p.name if names.count(p.name) == 1 else str(p)) for p in runs]
    except (FileNotFoundError, report.BadRun) as e:
        raise MemvisorError(str(e), USAGE) from None
    loaded = [r for rs in per_folder for r in rs]
    # A variant's folder given beside the folder holding it would be set against itself.
    reached: dict = {}
    for r in loaded:
        if (twin := reached.setdefault(r.path.resolve(), r)) is not r:
            raise MemvisorError(f"{r.label}: the same run as {twin.label}, given before; give each run once", USAGE)
    # Each run is set against the first folder's run of the same variant, or its one run if it has
    # no variants; a variant it lacks has no ratios (another variant's figures are no base). Two
    # folders of one run each (two variants' own folders) are set against each other, as asked.
    first_folder = per_folder[0]
    base_of = {r.variant: r for r in first_folder}
    bases = [None] * len(first_folder)
    for folder in per_folder[1:]:
        alone = len(first_folder) == 1 and len(folder) == 1
        bases += [first_folder[0] if alone else base_of.get(r.variant, base_of.get(None)) for r in folder]
    # The runtime first, once (it is often a report column too).
    keys = list(dict.fromkeys(["runtime_s"] + [k for r in loaded for vm in r.summary.get("vms", []) for k in (vm.get("report") or {})]))
    unfinished = _unfinished(keys, [(f"{r.label}/{vm['name']}", vm) for r in loaded for vm in r.summary.get("vms", []) if vm.get("runtime_s") is None])
    t = Table(Column("run", overflow="fold"), "vm", *keys, title=f"ratios against {runs[0].name}", caption="\n".join(unfinished) or None)
    for r, base in zip(loaded, bases):
        ref_vms = {vm["name"]: vm for vm in (base.summary.get("vms", []) if base else [])}
        for vm in r.summary.get("vms", []):
            ref = ref_vms.get(vm["name"], {})
            cells = []
            for k in keys:
                v = vm.get(k) if k == "runtime_s" else (vm.get("report") or {}).get(k)
                b = ref.get(k) if k == "runtime_s" else (ref.get("report") or {}).get(k)
                ratio = f" ({v / b:.2f}x)" if isinstance(v, (int, float)) and isinstance(b, (int, float)) and b else ""
                cells.append(fmt(v) + ratio)
            t.add_row(r.label, vm["name"], *cells)
    out.print(t)
    for r, base in zip(loaded[len(first_folder):], bases[len(first_folder):]):
        if base is None:
            lacks = f"no variant {r.variant}" if r.variant else "variants, and this run has none"
            out.print(f"{r.label}: no ratios ({runs[0].name} has {lacks})", highlight=False)
            continue
        # Ratios pair VMs by name: a VM the base run lacks has none.
        ref_names = {vm["name"] for vm in base.summary.get("vms", [])}
        missing = [vm["name"] for vm in r.summary.get("vms", []) if vm["name"] not in ref_names]
        if missing and base.summary.get("vms"):
            shown = some_of(missing, 3)
            out.print(f"{r.label}: no ratios for {shown} ({base.label} has no VM of that name)", highlight=False)
    # A manage run measures no runtime or report values: it is only in the overlaid charts.
    for r in loaded:
        if not r.summary.get("vms"):
            out.print(f"{r.label}: no runtime or report values (a manage run's folder has none); its series are in the overlaid report", highlight=False)
    try:
        if default:
            out_path.parent.mkdir(parents=True, exist_ok=True)
        target = written_through(out_path)
        out.print(f"wrote {report.write(out_path.parent, loaded, title='compare: ' + ', '.join(p.name for p in runs), out=target)}")
    except OSError as e:
        raise MemvisorError(f"--out {out_path}: {e.strerror}", 1) from None


main.add_command(sweep_cmd)
main.add_command(validate)
main.add_command(trace)
main.add_command(plan_cmd)
main.add_command(manage_cmd)
main.add_command(status_cmd)

if __name__ == "__main__":
    main()
