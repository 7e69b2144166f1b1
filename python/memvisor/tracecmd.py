"""`memvisor trace`: record, convert, inspect and replay page-reference traces, and compare the
exact-LRU guest with libCacheSim's LRU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import click
from rich.table import Table

from memvisor import _core
from memvisor.api import as_text, simulate
from memvisor.console import USAGE, MemvisorError, OnceGroup, check_output, describe_status, given, out, refuse_twice, warn
from memvisor.params import Duration, Frames
from memvisor.atomic import write_atomically, written_through
from memvisor.traces import FORMATS, detect_format, named_format, read_trace


@click.group("trace", cls=OnceGroup)
def trace() -> None:
    """Record, convert, inspect and replay page-reference traces."""


def _info_table(title: str, info: dict) -> Table:
    t = Table("references", "reads", "writes", "distinct pages", "footprint", title=title)
    t.add_row(
        f"{info['references']:,}",
        f"{info['reads']:,}",
        f"{info['writes']:,}",
        f"{info['distinct_pages']:,}",
        _core.human_bytes(info["footprint_bytes"]),
    )
    return t


def _refuse_native_named_other(path: Path, option: str) -> None:
    """A native trace under a name that says another format is refused: memvisor tells a native
    trace by its magic, other tools (libCacheSim's, a csv reader) by its name."""
    said = named_format(path)
    if said == "oracleGeneral":
        raise MemvisorError(f"{option} {path}: a name ending in .oracleGeneral or .bin says libCacheSim's format, and this "
                            "trace is written native; name it .mvtrace (or convert it --to oracleGeneral)", USAGE)
    if said in ("csv", "lackey"):
        raise MemvisorError(f"{option} {path}: a name ending in .{said} says {said} text, and this trace is written native "
                            "(binary); name it .mvtrace", USAGE)
    if path.name.lower().endswith(".zst"):
        raise MemvisorError(f"{option} {path}: a name ending in .zst says one zstd frame, and a native trace has a header "
                            "before its compressed records; name it .mvtrace", USAGE)


@trace.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Native trace to write (.mvtrace).")
@click.option("--instructions", is_flag=True, help="Also record instruction fetches (as reads).")
@click.argument("program", nargs=-1, required=True)
def record(output: Path, instructions: bool, program: tuple[str, ...]) -> None:
    """Run PROGRAM under valgrind lackey and write its page-reference trace.

    The lackey output is streamed through the converter and never stored: memvisor trace record
    -o ls.mvtrace -- ls -l /usr
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise MemvisorError("valgrind is not installed (Debian: apt-get install valgrind)", USAGE)
    # Both found before anything runs: a recording can take minutes.
    check_output(output, "-o")
    _refuse_native_named_other(output, "-o")
    if shutil.which(program[0]) is None:
        named = Path(program[0])
        # A path names a file directly; a bare name is looked up on PATH, as the shell would.
        if os.sep in program[0] and named.is_file():
            raise MemvisorError(f"{program[0]}: not executable (no execute permission); a program to record is one the shell could run", USAGE)
        raise MemvisorError(f"{program[0]}: no such program (not a file, nor on PATH)", USAGE)
    rfd, wfd = os.pipe()
    cmd = [valgrind, "--tool=lackey", "--trace-mem=yes", f"--log-fd={wfd}", "--", *program]
    try:
        proc = subprocess.Popen(cmd, pass_fds=(wfd,))
    except OSError as e:
        raise MemvisorError(f"cannot start valgrind: {e}", USAGE) from None
    os.close(wfd)
    rec = _core.LackeyRecorder(instructions)
    t0 = time.perf_counter()
    try:
        with os.fdopen(rfd, "rb", buffering=0) as r:
            while chunk := r.read(1 << 20):
                rec.feed(chunk)
    except _core.TraceError as e:
        proc.kill()
        proc.wait()
        raise MemvisorError(f"lackey output: {e}", 1) from None
    code = proc.wait()
    t = rec.finish()
    if code != 0 and not dict(t.info())["references"]:
        raise MemvisorError(f"{' '.join(program)} ended with {describe_status(code)} before making a reference; nothing written", 1)
    write_atomically(written_through(output), bytes(t.to_native()))
    out.print(_info_table(f"{output} ({time.perf_counter() - t0:.1f} s)", dict(t.info())))
    if code != 0:
        warn(f"{' '.join(program)} ended with {describe_status(code)}; the trace covers what it did until then")


@trace.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from", "src_fmt", type=click.Choice(FORMATS), help="Input format (default: detected).")
@click.option("--to", "dst_fmt", type=click.Choice(["native", "oracleGeneral"]), default="native", show_default=True,
              help="native: memvisor's own (zstd-compressed, reads told from writes); oracleGeneral: libCacheSim's binary format (every reference a read; zstd-compressed when DEST ends in .zst).")
@click.option("--instructions", is_flag=True, help="lackey input: keep instruction fetches.")
@click.option("--obj-id-col", type=click.IntRange(min=1, max=2**32 - 1), default=2, show_default=True, help="csv input: 1-based object id column.")
@click.option("--delimiter", default=",", show_default=True, help="csv input: field separator.")
def convert(source: Path, dest: Path, src_fmt, dst_fmt: str, instructions: bool, obj_id_col: int, delimiter: str) -> None:
    """Convert a trace (lackey text, libCacheSim oracleGeneral or csv, native) to native or
    oracleGeneral."""
    check_output(dest, "DEST")
    if dest.exists() and source.resolve() == dest.resolve():
        raise MemvisorError(f"DEST {dest} is SOURCE: write the converted trace to another file", USAGE)
    # The other commands tell an oracleGeneral trace by its name alone (it has no magic).
    read_as = detect_format(dest, b"")
    if dst_fmt == "oracleGeneral" and read_as != dst_fmt:
        raise MemvisorError(f"DEST {dest}: an oracleGeneral trace is known by its name, ending in .oracleGeneral or .bin, "
                            f"and this name would be read as {read_as}; name it so", USAGE)
    if dst_fmt == "native":
        _refuse_native_named_other(dest, "DEST")
    zst = dest.name.lower().endswith(".zst")
    # An input format's own options given for another are said to be ignored.
    try:
        with open(source, "rb") as f:
            found = detect_format(source, f.read(8))
        fmt = src_fmt or found
        # --from reads it as said; a file whose magic or name says otherwise is likely a mistake.
        if src_fmt and src_fmt != found and (found == "native" or named_format(source)):
            warn(f"{source} is read as {src_fmt} (--from), though its {'content' if found == 'native' else 'name'} says {found}")
    except OSError:
        fmt = src_fmt  # read_trace says why
    for param, opt, own in (("instructions", "--instructions", "lackey"), ("obj_id_col", "--obj-id-col", "csv"), ("delimiter", "--delimiter", "csv")):
        if fmt is not None and fmt != own and given(param):
            warn(f"{opt} is for {own} input, and {source} is read as {fmt}: it is ignored")
    try:
        t = read_trace(source, fmt, instructions=instructions, obj_id_col=obj_id_col, delimiter=delimiter)
    except (_core.TraceError, ValueError) as e:
        raise MemvisorError(str(e), USAGE) from None
    data = t.to_native() if dst_fmt == "native" else t.to_oracle_general(zstd=zst)
    write_atomically(written_through(dest), bytes(data))
    # What was written: oracleGeneral keeps every reference as a read (no need to read it back).
    info = dict(t.info())
    if dst_fmt == "oracleGeneral":
        info.update(reads=info["references"], writes=0)
    out.print(_info_table(str(dest), info))


@trace.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(source: Path, as_json: bool) -> None:
    """References, reads, writes, distinct pages and footprint of a trace."""
    try:
        i = dict(read_trace(source).info())
    except _core.TraceError as e:
        raise MemvisorError(str(e), USAGE) from None
    if as_json:
        click.echo(json.dumps(i))
    else:
        out.print(_info_table(str(source), i))


#: Most frames `trace replay` gives a process: 1 TiB of 4 KiB pages, within the 4 TiB a guest may have.
MAX_FRAMES = 1 << 28
#: Most CPU time between two references: an hour.
MAX_COMPUTE_NS = 3_600 * 10**9
#: Longest replay, in CPU time between references alone: a scenario's longest duration, a
#: century (`units::MAX_DURATION_NS`).
MAX_REPLAY_NS = 100 * 31_557_600 * 10**9


class ReplayTooLong(ValueError):
    """A replay whose references alone would last past a run's longest duration."""


class ReplayKilled(RuntimeError):
    """A replay whose process the guest kernel killed (out of memory) before its last reference:
    its counts would be a part's, not the trace's."""


def replay_trace(t, name: str, frames: int, mode: str, loops: int = 1, compute_ns: int = 0) -> dict:
    """Replays a loaded trace with `frames` frames available; returns references, faults, time.
    Raises `ReplayKilled` if the guest kernel killed the process before the end."""
    name = as_text(name)
    refs = dict(t.info())["references"]
    if refs * loops * compute_ns > MAX_REPLAY_NS:
        raise ReplayTooLong(f"--loops {loops} of {refs:,} references with --compute {compute_ns / 1e9:g}s between them is "
                         f"{refs * loops * compute_ns / 31_557_600e9:.3g} years of simulated time; a run is at most a century")
    text = _core.replay_scenario(name, t.n_pages, frames, mode, loops, compute_ns)
    (s,) = _core.load(text, f"replay:{name}")
    # Default steps: between them an interruption is heard (results do not depend on them).
    r = simulate(s, traces={name: t})
    vm = r.summary["vms"][0]
    proc = vm["processes"][0]
    if proc["state"] != "exited":
        why = vm["log"][-1]["message"] if vm["log"] else proc["state"]
        raise ReplayKilled(f"{name}: the replay's process was killed after {proc['touches']:,} of {refs * loops:,} references "
                           f"({why}): with --frames {frames:,} in {mode} mode the guest kernel cannot run it; give more frames")
    return {
        "trace": name,
        "frames": frames,
        "mode": mode,
        "references": vm["processes"][0]["touches"],
        "faults": int(vm["counters"]["pgfault"]),
        "major_faults": int(vm["counters"]["pgmajfault"]),
        "sim_time_s": vm["runtime_s"],
        "wall_s": r.wall_s,
        "run_s": r.run_s,
    }


@trace.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--frames", "-c", type=Frames(max=MAX_FRAMES), required=True, help="Page frames available to the process: a count, or a size such as 100MiB (4 KiB frames).")
@click.option("--mode", type=click.Choice(["exact-lru", "linux"]), default="exact-lru", show_default=True,
              help="exact-lru: every reference moves its page to the head of one recency list (libCacheSim's LRU); linux: the guest kernel's active and inactive lists and accessed bits.")
@click.option("--loops", type=click.IntRange(min=1, max=2**32 - 1), default=1, show_default=True, help="Replay the trace this many times in a row.")
@click.option("--compute", "compute_ns", type=Duration(MAX_COMPUTE_NS, "an hour"), default="0ns", show_default=True,
              help="CPU time between references, with a unit as in scenarios (250ns, 1us).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def replay(source: Path, frames: int, mode: str, loops: int, compute_ns: int, as_json: bool) -> None:
    """Replay a trace in a one-guest simulated host with FRAMES page frames for the process."""
    try:
        t = read_trace(source)
    except _core.TraceError as e:
        raise MemvisorError(str(e), USAGE) from None
    try:
        res = replay_trace(t, source.name, frames, mode, loops, compute_ns)
    except (_core.RunError, ReplayKilled) as e:
        raise MemvisorError(str(e), 1) from None
    except ReplayTooLong as e:
        raise MemvisorError(str(e), USAGE) from None
    if as_json:
        click.echo(json.dumps(res))
        return
    tab = Table("references", "faults", "major faults", "simulated s", "wall s", title=f"{source} — {frames} frame{'s' if frames != 1 else ''}, {mode}")
    tab.add_row(f"{res['references']:,}", f"{res['faults']:,}", f"{res['major_faults']:,}", f"{res['sim_time_s']:.3f}", f"{res['wall_s']:.3f}")
    out.print(tab)


def peer_compare(t, name: str, sizes: list[int], repeats: int = 1) -> list[dict]:
    """The same trace through memvisor's exact-LRU guest and libCacheSim's LRU at each size; the
    speeds are medians of `repeats` runs of each, alternating, after one untimed run of each.

    The two sides' timings cover different work, so each is labelled with what it covers:
    memvisor's replay alone (`run_s`, the scenario built and loaded beforehand) and the whole
    `replay_trace` call (building and loading the scenario, then the simulation; the trace is in
    memory on both counts); libCacheSim's `process_trace`, which includes reading its trace file."""
    from statistics import median

    import libcachesim as lcs

    rows = []
    with tempfile.TemporaryDirectory() as d:
        og = Path(d) / "trace.oracleGeneral"
        og.write_bytes(bytes(t.to_oracle_general()))
        reader = lcs.TraceReader(trace=str(og), trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE)
        n = dict(t.info())["references"]
        # Each side once, untimed: one-off start-up (the first run's setup, the trace file read
        # into the page cache) would otherwise count against whichever size is listed first.
        replay_trace(t, name, sizes[0], "exact-lru")
        lcs.LRU(cache_size=sizes[0] * 4096).process_trace(reader)
        for c in sizes:
            replay_s, whole_s, peer_s = [], [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                mv = replay_trace(t, name, c, "exact-lru")
                whole_s.append(time.perf_counter() - t0)
                replay_s.append(mv["run_s"])
                cache = lcs.LRU(cache_size=c * 4096)
                t0 = time.perf_counter()
                miss_ratio, _ = cache.process_trace(reader)
                peer_s.append(time.perf_counter() - t0)
            replay, whole, peer = n / median(replay_s), n / median(whole_s), n / median(peer_s)
            rows.append({
                "frames": c,
                "references": n,
                "memvisor_faults": mv["faults"],
                "libcachesim_misses": round(miss_ratio * n),
                "memvisor_replay_req_per_s": replay,
                "memvisor_whole_req_per_s": whole,
                "libcachesim_with_reader_req_per_s": peer,
                "replay_ratio": replay / peer,
                "whole_ratio": whole / peer,
            })
    return rows


@trace.command("bench")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--frames", "-c", "sizes", type=Frames(max=MAX_FRAMES, many=True), required=True, help="Comma-separated cache sizes in 4 KiB frames or with a unit, e.g. 100,1000,10000 or 4MiB,40MiB.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Runs of each side per size (medians are shown).")
def bench_cmd(source: Path, sizes: tuple[int, ...], repeats: int) -> None:
    """Replay a trace through memvisor's exact-LRU guest and libCacheSim's LRU; check the miss
    counts agree and compare requests per second."""
    refuse_twice("--frames", sizes)
    try:
        import libcachesim  # noqa: F401  (the peer; an optional dependency)
    except ImportError:
        raise MemvisorError("trace bench needs libCacheSim: pip install libcachesim", USAGE) from None
    try:
        t = read_trace(source)
    except _core.TraceError as e:
        raise MemvisorError(str(e), USAGE) from None
    try:
        rows = peer_compare(t, source.name, list(sizes), repeats)
    except (_core.RunError, ReplayKilled) as e:
        raise MemvisorError(str(e), 1) from None
    tab = Table(
        "frames", "memvisor faults", "libCacheSim misses", "equal",
        "memvisor req/s\n(replay only)", "memvisor req/s\n(whole replay_trace)", "libCacheSim req/s\n(incl. trace reader)",
        "ratio\n(replay only)", "ratio\n(whole)",
        title=f"{source}: exact-LRU guest vs libCacheSim LRU",
        caption="memvisor: the replay alone (the scenario built and loaded beforehand), and the whole replay_trace call "
        "(building and loading the replay scenario, then the replay; the trace already in memory). "
        "libCacheSim: process_trace, which includes reading its trace file.",
    )
    bad = False
    for r in rows:
        eq = r["memvisor_faults"] == r["libcachesim_misses"]
        bad |= not eq
        tab.add_row(
            f"{r['frames']:,}", f"{r['memvisor_faults']:,}", f"{r['libcachesim_misses']:,}", "yes" if eq else "NO",
            f"{r['memvisor_replay_req_per_s'] / 1e6:.1f} M", f"{r['memvisor_whole_req_per_s'] / 1e6:.1f} M",
            f"{r['libcachesim_with_reader_req_per_s'] / 1e6:.1f} M",
            f"{r['replay_ratio']:.2f}x", f"{r['whole_ratio']:.2f}x",
        )
    out.print(tab)
    if bad:
        raise MemvisorError("miss counts differ", 1)
