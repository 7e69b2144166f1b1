"""Traces: formats, the trace commands, and equivalence with libCacheSim's LRU."""

import json
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memvisor
from memvisor import _core
from memvisor import tracecmd
from memvisor.tracecmd import peer_compare

from conftest import SMALL, interrupted
from conftest import memvisor as run_cli


def lackey_text(n=3000, seed=7):
    rng = random.Random(seed)
    lines = ["==1== Lackey, an example Valgrind tool"]
    for _ in range(n):
        page = rng.choice([rng.randrange(40), rng.randrange(400)])
        kind = rng.choice("LSM")
        lines.append(f" {kind} {0x400000 + page * 4096 + rng.randrange(4000):08x},{rng.choice([1, 4, 8])}")
        lines.append(f"I  {0x10000 + rng.randrange(10) * 4096:08x},3")
    return "\n".join(lines) + "\n"


def oracle_general(ids):
    return b"".join(struct.pack("<IQIq", i, o, 4096, -1) for i, o in enumerate(ids))


@pytest.fixture
def traces(tmp_path):
    rng = random.Random(3)
    (tmp_path / "prog.lackey").write_text(lackey_text())
    (tmp_path / "zipf.oracleGeneral").write_bytes(oracle_general([int(rng.paretovariate(0.8)) % 2000 for _ in range(20000)]))
    (tmp_path / "loop.csv").write_text("time,obj,size\n" + "".join(f"{i},{i % 257},4096\n" for i in range(5000)))
    return tmp_path


@pytest.mark.parametrize("name", ["prog.lackey", "zipf.oracleGeneral", "loop.csv"])
def test_exact_lru_faults_equal_libcachesim_lru_misses(traces, name):
    t = memvisor.traces.read_trace(traces / name)
    n = t.n_pages
    rows = peer_compare(t, name, sorted({1, 5, n // 10 or 1, n // 2 or 1, n - 1 or 1, n, n + 3}))
    for r in rows:
        assert r["memvisor_faults"] == r["libcachesim_misses"], r
        # The whole replay_trace call includes the replay, so its rate is the lower; each ratio is
        # that memvisor rate over libCacheSim's (whose time includes its trace reader).
        assert 0 < r["memvisor_whole_req_per_s"] < r["memvisor_replay_req_per_s"], r
        assert r["replay_ratio"] == r["memvisor_replay_req_per_s"] / r["libcachesim_with_reader_req_per_s"], r
        assert r["whole_ratio"] == r["memvisor_whole_req_per_s"] / r["libcachesim_with_reader_req_per_s"], r


def test_convert_info_and_replay_from_the_command_line(traces, tmp_path):
    r = run_cli("trace", "convert", str(traces / "prog.lackey"), "prog.mvtrace", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("trace", "info", "prog.mvtrace", "--json", cwd=tmp_path)
    info = json.loads(r.stdout)
    assert info["references"] >= 3000 and info["reads"] + info["writes"] == info["references"]
    assert info["footprint_bytes"] == info["distinct_pages"] * 4096
    r = run_cli("trace", "convert", "prog.mvtrace", "prog.oracleGeneral", "--to", "oracleGeneral", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    back = memvisor.traces.read_trace(tmp_path / "prog.oracleGeneral")
    assert back.n_pages == info["distinct_pages"]
    # The table gives what was written: oracleGeneral has no writes.
    row = next(x for x in r.stdout.splitlines() if x.startswith("│"))
    assert row.split("│")[2].strip() == f"{info['references']:,}" and row.split("│")[3].strip() == "0", r.stdout
    # Named .zst, it is one zstd frame of the same records, as libCacheSim's tools expect.
    r = run_cli("trace", "convert", "prog.mvtrace", "prog.oracleGeneral.zst", "--to", "oracleGeneral", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    z = (tmp_path / "prog.oracleGeneral.zst").read_bytes()
    assert z[:4] == b"\x28\xb5\x2f\xfd" and len(z) < (tmp_path / "prog.oracleGeneral").stat().st_size
    assert bytes(memvisor.traces.read_trace(tmp_path / "prog.oracleGeneral.zst").to_native()) == bytes(back.to_native())
    # A native trace has its own header: a .zst name would promise a bare zstd frame.
    r = run_cli("trace", "convert", "prog.oracleGeneral", "p.mvtrace.zst", cwd=tmp_path)
    assert r.returncode == 2 and "DEST p.mvtrace.zst: a name ending in .zst says one zstd frame" in r.stderr, r.stderr
    assert not (tmp_path / "p.mvtrace.zst").exists()
    # An oracleGeneral trace is known by its name: one the other commands would read as another
    # format is refused, and nothing is written.
    for name, taken in [("og.mvtrace", "native"), ("og.csv", "csv"), ("og.trace", "lackey")]:
        r = run_cli("trace", "convert", "prog.mvtrace", name, "--to", "oracleGeneral", cwd=tmp_path)
        assert r.returncode == 2 and f"DEST {name}: an oracleGeneral trace is known by its name" in r.stderr and f"read as {taken}" in r.stderr, r.stderr
        assert not (tmp_path / name).exists()
    # Nor is a native trace written under a text format's name.
    for name, said in [("n.csv", "csv"), ("n.lackey", "lackey")]:
        r = run_cli("trace", "convert", "prog.mvtrace", name, cwd=tmp_path)
        assert r.returncode == 2 and f"DEST {name}: a name ending in .{said} says {said} text" in r.stderr, r.stderr
        assert not (tmp_path / name).exists()
    # --from reads a file as said, with a word when its name says otherwise.
    r = run_cli("trace", "convert", str(traces / "prog.lackey"), "as-csv.mvtrace", "--from", "csv", cwd=tmp_path)
    assert "prog.lackey is read as csv (--from), though its name says lackey" in r.stderr, r.stderr
    # A file read as lackey only because its name says no format is told how to say another.
    (tmp_path / "table.txt").write_text("time,obj\n1,2\n")
    r = run_cli("trace", "info", "table.txt", cwd=tmp_path)
    assert r.returncode == 2 and "table.txt was read as lackey, as a name with no trace ending is" in r.stderr, r.stderr
    r = run_cli("trace", "convert", "prog.mvtrace", "no/such/folder/p.oracleGeneral", cwd=tmp_path)
    assert r.returncode == 2 and "the folder no/such/folder does not exist" in r.stderr, r.stderr
    r = run_cli("trace", "replay", "prog.mvtrace", "--frames", "20", "--json", cwd=tmp_path)
    res = json.loads(r.stdout)
    assert res["references"] == info["references"]
    assert res["faults"] >= info["distinct_pages"]
    r = run_cli("trace", "replay", "prog.mvtrace", "--frames", "20", "--mode", "linux", "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["references"] == info["references"]
    # CPU time between references, with a unit: each reference then takes at least that long.
    r = run_cli("trace", "replay", "prog.mvtrace", "--frames", "20", "--compute", "0", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("trace", "replay", "prog.mvtrace", "--frames", "20", "--compute", "1us", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["sim_time_s"] >= info["references"] * 1e-6, r.stdout + r.stderr


def test_bench_labels_what_each_side_times(traces, tmp_path):
    r = run_cli("trace", "bench", str(traces / "loop.csv"), "--frames", "100,300", "--repeats", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    words = " ".join(r.stdout.split())  # headers and caption may wrap
    for label in ["(replay only)", "(whole replay_trace)", "(incl. trace reader)", "ratio", "(whole)", "includes reading its trace file"]:
        assert label in words, r.stdout


def test_corrupt_traces_get_a_located_error(traces, tmp_path):
    t = memvisor.traces.read_trace(traces / "loop.csv")
    data = bytes(t.to_native())
    (tmp_path / "cut.mvtrace").write_bytes(data[: len(data) - 7])
    r = run_cli("trace", "info", "cut.mvtrace", cwd=tmp_path)
    assert r.returncode == 2 and "byte 24" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "cut.oracleGeneral").write_bytes(oracle_general([1, 2, 3])[:60])
    r = run_cli("trace", "info", "cut.oracleGeneral", cwd=tmp_path)
    assert r.returncode == 2 and "byte 48" in r.stderr
    (tmp_path / "bad.lackey").write_text(" L 1000,4\n Q oops\n")
    r = run_cli("trace", "info", "bad.lackey", cwd=tmp_path)
    assert r.returncode == 2 and "line 2" in r.stderr
    # A native trace cut inside its header is one, by its name or by the start of its magic.
    (tmp_path / "empty.mvtrace").write_bytes(b"")
    (tmp_path / "cut12").write_bytes(data[:12])
    (tmp_path / "cut4").write_bytes(data[:4])  # inside the magic itself
    for f in ["empty.mvtrace", "cut12", "cut4"]:
        r = run_cli("trace", "info", f, cwd=tmp_path)
        assert r.returncode == 2 and "truncated: a native trace header is 24 bytes" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # Nothing to replay is an error, whether the file is empty or its one line was a header.
    (tmp_path / "empty.lackey").write_bytes(b"")
    (tmp_path / "header.csv").write_text("time,obj,size\n")
    for f in ["empty.lackey", "header.csv"]:
        r = run_cli("trace", "info", f, cwd=tmp_path)
        assert r.returncode == 2 and "holds no references" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run_cli("trace", "info", ".", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    # A scenario's trace cut short is the same mistake, found as its run starts: nothing ran.
    (tmp_path / "s.toml").write_text(SMALL.replace('{ kind = "file-io", size = "64MiB", read = true }', '{ kind = "trace", file = "cut.mvtrace" }'))
    r = run_cli("run", "s.toml", "--quiet", "--out", "out", cwd=tmp_path)
    assert r.returncode == 2 and "byte 24" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
    # A device would be read without end: refused at once, from the API as from a scenario.
    import pytest

    with pytest.raises(memvisor._core.TraceError, match="/dev/zero: not a regular file"):
        memvisor.traces.read_trace("/dev/zero")


def test_convert_writes_only_a_file_and_never_over_its_source(traces, tmp_path):
    src = tmp_path / "loop.csv"
    src.write_bytes((traces / "loop.csv").read_bytes())
    r = run_cli("trace", "convert", "loop.csv", "loop.csv", cwd=tmp_path)
    assert r.returncode == 2 and "DEST loop.csv is SOURCE" in r.stderr, r.stderr
    assert src.read_bytes() == (traces / "loop.csv").read_bytes(), "the source is untouched"
    (tmp_path / "d").mkdir()
    r = run_cli("trace", "convert", "loop.csv", "d", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = run_cli("trace", "convert", "loop.csv", "/dev/null", cwd=tmp_path)
    assert r.returncode == 2 and "exists and is not a regular file" in r.stderr, r.stderr
    for col in ["0", "99999999999999999999"]:
        r = run_cli("trace", "convert", "loop.csv", "x.mvtrace", "--obj-id-col", col, cwd=tmp_path)
        assert r.returncode == 2 and "--obj-id-col" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_replay_longer_than_a_century_is_refused_and_a_long_one_interrupted(traces, tmp_path):
    r = run_cli("trace", "replay", str(traces / "loop.csv"), "-c", "64", "--loops", "4294967295", "--compute", "1h", cwd=tmp_path)
    assert r.returncode == 2 and "years of simulated time; a run is at most a century" in r.stderr, r.stderr
    # 21 billion references would take hours: Ctrl-C ends the replay, not its end.
    exe = Path(sys.executable).parent / "memvisor"
    p = subprocess.Popen([str(exe), "trace", "replay", str(traces / "loop.csv"), "-c", "64", "--loops", "4294967295"], cwd=tmp_path,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    start = time.monotonic()
    stderr = interrupted(p, lambda: time.monotonic() - start >= 2, "the replay ended within 2 s")
    assert p.returncode == 130 and stderr.splitlines() == ["error: interrupted"], stderr


def test_a_replay_whose_process_the_guest_kills_is_an_error_not_a_part(traces, monkeypatch):
    # A replay's guest gives its process a swap slot for every page, so its kernel does not run
    # out of memory (`linux_mode_with_swap_for_every_page_replays_every_reference`); were it to,
    # the counts would be a part's, and the replay says so instead of reporting them.
    t = memvisor.traces.read_trace(traces / "loop.csv")
    real = tracecmd.simulate

    def killed_partway(s, traces):
        r = real(s, traces=traces)
        vm = r.summary["vms"][0]
        vm["processes"][0].update(state="killed", touches=310)
        vm["log"].append({"time_s": 0.1, "message": "Out of memory: killed process 0 (trace)"})
        return r

    assert tracecmd.replay_trace(t, "loop.csv", 2, "linux")["references"] == 5000
    monkeypatch.setattr(tracecmd, "simulate", killed_partway)
    with pytest.raises(tracecmd.ReplayKilled, match=r"^loop.csv: the replay's process was killed after 310 of 5,000 references "
                       r"\(Out of memory: killed process 0 \(trace\)\): with --frames 2 in linux mode .* give more frames$"):
        tracecmd.replay_trace(t, "loop.csv", 2, "linux")


def test_a_trace_or_scenario_whose_name_is_not_utf8_is_read_and_named(traces, tmp_path):
    odd = tmp_path / "bad\udcff.csv"
    shutil.copy(traces / "loop.csv", odd)
    r = run_cli("trace", "replay", str(odd), "-c", "64", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["trace"] == "bad\\xff.csv", r.stderr
    (tmp_path / "f\udcfe.toml").write_text('name = "odd"\n[host]\nmemory = "1GiB"\n')
    # A folder's name is how the engine finds the files a scenario names beside it: it must be text.
    (tmp_path / "d\udcff").mkdir()
    (tmp_path / "d\udcff" / "s.toml").write_text('name = "odd"\n[host]\nmemory = "1GiB"\n')
    r = run_cli("run", "d\udcff/s.toml", cwd=tmp_path)
    assert r.returncode == 2 and "d\\xff/s.toml: its folder" in r.stderr and "not UTF-8" in r.stderr and "Traceback" not in r.stderr, r.stderr
    for cmd in (["run"], ["plan", "--vm", "a", "--slowdown", "2", "--host-memory", "--min", "1GiB", "--max", "2GiB"], ["sweep", "--vary", "host.memory=1GiB,2GiB"]):
        r = run_cli(*cmd[:1], "f\udcfe.toml", *cmd[1:], cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "f\\xfe.toml:" in r.stderr and "no [[vm]]" in r.stderr, r.stderr


def test_a_scenario_replays_a_trace_file_next_to_it(traces, tmp_path):
    t = memvisor.traces.read_trace(traces / "zipf.oracleGeneral")
    (tmp_path / "z.mvtrace").write_bytes(bytes(t.to_native()))
    text = _core.replay_scenario("z.mvtrace", t.n_pages, 100, "linux", 2, 0)
    (tmp_path / "s.toml").write_text(text)
    (r,) = memvisor.run(str(tmp_path / "s.toml"))
    assert r.summary["vms"][0]["processes"][0]["touches"] == 2 * 20000


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_record_runs_a_program_under_lackey(tmp_path):
    r = run_cli("trace", "record", "-o", "true.mvtrace", "--", "/bin/true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    t = memvisor.traces.read_trace(tmp_path / "true.mvtrace")
    info = dict(t.info())
    assert info["references"] > 1000 and info["distinct_pages"] > 10
    rows = peer_compare(t, "true", [8, 32, info["distinct_pages"]])
    assert all(r["memvisor_faults"] == r["libcachesim_misses"] for r in rows)
    # A program that cannot run, or a folder that is not there, is refused before anything runs.
    r = run_cli("trace", "record", "-o", "x.mvtrace", "--", "no-such-program", cwd=tmp_path)
    assert r.returncode == 2 and "no-such-program: no such program" in r.stderr and not (tmp_path / "x.mvtrace").exists()
    (tmp_path / "data.txt").write_text("not a program")
    r = run_cli("trace", "record", "-o", "x.mvtrace", "--", "./data.txt", cwd=tmp_path)
    assert r.returncode == 2 and "./data.txt: not executable" in r.stderr and not (tmp_path / "x.mvtrace").exists(), r.stderr
    r = run_cli("trace", "record", "-o", "nowhere/x.mvtrace", "--", "/bin/true", cwd=tmp_path)
    assert r.returncode == 2 and "the folder nowhere does not exist" in r.stderr
    # A native trace is not one zstd frame: a .zst name is refused here too.
    r = run_cli("trace", "record", "-o", "x.mvtrace.zst", "--", "/bin/true", cwd=tmp_path)
    assert r.returncode == 2 and "-o x.mvtrace.zst: a name ending in .zst says one zstd frame" in r.stderr and not (tmp_path / "x.mvtrace.zst").exists()
