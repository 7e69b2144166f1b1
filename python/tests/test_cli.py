"""The memvisor command: run folders, and one clear error per kind of bad input with no folder."""

import io
import json
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import memvisor as memvisor_api
from conftest import SMALL, memvisor
from memvisor import cli
from memvisor.console import MemvisorError, warn
from memvisor.params import Frames, IntList, MiB, Number
from memvisor.runfolder import RunFolder


def run_ok(tmp_path: Path, text: str, *args: str, out: str = "out") -> subprocess.CompletedProcess:
    """Writes `text` as a scenario file in `tmp_path` and runs it quietly into `out`; it must succeed."""
    (tmp_path / "s.toml").write_text(text)
    r = memvisor("run", "s.toml", "--out", out, "--quiet", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r


def test_cases_lists_paging_stress(tmp_path):
    r = memvisor("cases", cwd=tmp_path)
    assert r.returncode == 0
    assert "paging-stress" in r.stdout
    # Piped, a table's lines end at their text: no padding for a log or a diff to keep.
    assert all(line == line.rstrip() for line in r.stdout.splitlines()) and r.stdout.endswith("\n"), repr(r.stdout)


def test_a_closed_standard_stream_is_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("memvisor")
    r = subprocess.run(["bash", "-c", f"'{exe}' cases >&-"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == "error: standard output is closed: nothing can be written to it\n", r.stderr
    r = subprocess.run(["bash", "-c", f"'{exe}' cases 2>&-"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "paging-stress" in r.stdout, r.stdout


def test_run_writes_a_complete_run_folder(tmp_path, small_scenario):
    r = memvisor("run", str(small_scenario), "--out", "out", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = tmp_path / "out"
    assert sorted(p.name for p in d.iterdir()) == ["decisions.jsonl", "report.html", "scenario.toml", "summary.json", "timeseries.parquet"]
    table = pq.read_table(d / "timeseries.parquet")
    for col in ["time_s", "vm", "pgpgin_KiB", "pswpin_pages", "MemFree_KiB", "GRANT_MiB"]:
        assert col in table.column_names
    assert table.num_rows >= 3
    summary = json.loads((d / "summary.json").read_text())
    assert summary["vms"][0]["phases_s"]["write"] > 0
    # Without [report] columns: the guest's paging, then what the host took and what it cost.
    assert summary["report_columns"] == ["runtime_s", "pgmajfault/s", "pswpin_pages/s", "pswpout_pages/s", "MCTLSZ_MiB", "SWCUR_MiB", "host_wait_ms"]
    assert "static partitioning" in (d / "decisions.jsonl").read_text()
    assert 'name = "small"' in (d / "scenario.toml").read_text()
    assert "small" in r.stdout and "run folder" in r.stdout
    # The report names the run by its folder, not by the temporary name it was written under.
    page = (d / "report.html").read_text()
    assert "out: g: memory by where it lives" in page and ".out.partial" not in page


def test_decisions_jsonl_is_strict_json_and_a_host_decision_has_no_vm_id(tmp_path):
    # MOM's KSM tuning is a decision for the host, beside its balloon decisions for VMs: its
    # missing VM id must be null (it was NaN, which JSON parsers other than Python's reject) and
    # the others stay integers.
    text = (
        'name = "mom"\nduration = "11s"\n[host]\nmemory = "1GiB"\npolicy = "mom"\n[[datastore]]\nname = "d"\n'
        'device = "ssd"\n[[vm]]\nname = "g"\ncount = 2\nmemory = "768MiB"\ndatastore = "d"\n'
        'workload = { kind = "stress", pages = "400MiB", passes = 100 }\n'
    )
    run_ok(tmp_path, text)

    def not_json(constant):
        raise ValueError(f"{constant} is not JSON")

    lines = (tmp_path / "out" / "decisions.jsonl").read_text().splitlines()
    recs = [json.loads(line, parse_constant=not_json) for line in lines]
    assert any(rec["vm_id"] is None and rec["vm"] == "host" for rec in recs)
    assert any(type(rec["vm_id"]) is int for rec in recs)
    assert all(rec["vm_id"] is None or type(rec["vm_id"]) is int for rec in recs)


def test_a_runtime_not_reached_is_explained_under_the_table(tmp_path):
    # The run ends at its duration, before g's 64 MiB file is written and read back: its runtime
    # shows as "-", which the table must explain.
    short = SMALL.replace('name = "small"', 'name = "small"\nduration = "50ms"')
    assert "runtime_s -: work not finished when the run ended: g" in run_ok(tmp_path, short).stdout
    assert "not finished" not in run_ok(tmp_path, short, "--set", "duration=60s", out="out2").stdout


def test_a_report_window_after_the_runs_end_is_said_to_be_empty(tmp_path):
    # The run ends when g's file is read (well under 100 s): a window from 100 s measures nothing.
    r = run_ok(tmp_path, SMALL + '[report]\nwindow = ["100s", "200s"]\n')
    assert "warning: report.window starts at 100 s, and the run ended at" in r.stderr and "rates are empty" in r.stderr, r.stderr
    assert "report.window" not in run_ok(tmp_path, SMALL + '[report]\nwindow = ["0s", "200s"]\n', out="out2").stderr


def test_a_workload_the_oom_killer_ended_has_no_runtime(tmp_path):
    # Two 80 MiB stress processes in a 160 MiB guest (105 MiB of memory and swap together): each
    # may map its 80 MiB (Linux's overcommit check is per mapping), both do not fit, and the OOM
    # killer ends one. Its end is no runtime (a short one would read as fast); the note says why.
    oom = SMALL.replace('name = "small"', 'name = "small"\nduration = "60s"').replace('memory = "128MiB"', 'memory = "160MiB"\nswap = "16MiB"').replace(
        'workload = { kind = "file-io", size = "64MiB", read = true }', 'workload = { kind = "stress", instances = 2, pages = "80MiB", passes = 3 }'
    )
    r = run_ok(tmp_path, oom)
    assert "runtime_s -: a process was killed by the OOM killer: g" in r.stdout, r.stdout
    assert "not finished" not in r.stdout
    (vm,) = json.loads((tmp_path / "out" / "summary.json").read_text())["vms"]
    assert vm["runtime_s"] is None and vm["counters"]["oom_kill"] == 1


def test_compare_shows_each_column_once_and_explains_an_unfinished_runtime(tmp_path, small_scenario):
    # runtime_s is both compare's first column and the scenario's first report column.
    assert memvisor("run", str(small_scenario), "--out", "a", "--quiet", cwd=tmp_path).returncode == 0
    assert memvisor("run", str(small_scenario), "--out", "b", "--quiet", "--set", "duration=50ms", cwd=tmp_path).returncode == 0
    r = memvisor("compare", "a", "b", "--out", "cmp.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if " vm " in line)
    assert header.count("runtime_s") == 1, header
    assert "runtime_s -: work not finished when the run ended: b/g" in r.stdout
    # Ratios pair VMs by name: a run whose VM has another name says why it has none.
    assert memvisor("run", str(small_scenario), "--out", "c", "--quiet", "--set", "vm.g.name=h", cwd=tmp_path).returncode == 0
    r = memvisor("compare", "a", "c", "--out", "cmp.html", cwd=tmp_path)
    assert r.returncode == 0 and "c: no ratios for h (a has no VM of that name)" in r.stdout, r.stdout


def test_a_run_of_many_vms_shows_twenty_rows_and_says_how_many_more(tmp_path):
    text = (
        'name = "many"\nduration = "2s"\n[host]\nmemory = "8GiB"\n[[datastore]]\nname = "d"\ndevice = "ssd"\n'
        '[[vm]]\nname = "v"\ncount = 25\nmemory = "128MiB"\noverhead = "1MiB"\ndatastore = "d"\n'
        'workload = { kind = "idle", footprint = "1MiB" }\n'
    )
    r = run_ok(tmp_path, text)
    assert "v-20 " in r.stdout and "v-21 " not in r.stdout and "5 more VM rows not shown" in r.stdout
    assert len(json.loads((tmp_path / "out" / "summary.json").read_text())["vms"]) == 25


def test_a_report_too_wide_for_the_terminal_is_turned_round_and_cuts_nothing(tmp_path, monkeypatch):
    # Eleven report columns, two variants of three VMs: a row per VM is far wider than a terminal
    # of 160 columns, which would cut names and numbers short ("v-…", "42,7…").
    cols = ["pgpgin_KiB", "pgpgout_KiB", "pswpin_pages", "pswpout_pages", "MemTotal_KiB", "MemFree_KiB",
            "MCTLSZ_MiB", "SWCUR_MiB", "SWR_pages", "host_wait_ms", "GRANT_MiB"]
    text = (
        'name = "wide"\nduration = "1s"\n[host]\nmemory = "8GiB"\n[[datastore]]\nname = "d"\ndevice = "ssd"\n'
        '[[vm]]\nname = "guest-with-a-long-name"\ncount = 3\nmemory = "128MiB"\ndatastore = "d"\n'
        'workload = { kind = "idle", footprint = "1MiB" }\n'
        f"[report]\ncolumns = {json.dumps(cols)}\n"
        '[[variant]]\nname = "first-variant"\nset = { "host.memory" = "8GiB" }\n'
        '[[variant]]\nname = "second-variant"\nset = { "host.memory" = "4GiB" }\n'
    )
    # Not a terminal: one table as wide as it needs, a row per run and VM.
    wide = run_ok(tmp_path, text).stdout.splitlines()
    assert max(len(x) for x in wide) > 160 and sum("guest-with-a-long-name" in x for x in wide) == 6
    # Terminals of 160 and 60 columns: the report as the command prints it there.
    (tmp_path / "s.toml").write_text(text)
    results = memvisor_api.run(str(tmp_path / "s.toml"))

    def printed(width: int) -> str:
        buf = io.StringIO()
        monkeypatch.setattr(cli, "out", Console(file=buf, width=width, markup=False, emoji=False))
        cli._print_report(results)
        return buf.getvalue()

    turned = printed(160)
    assert "…" not in turned
    lines = turned.splitlines()
    assert max(len(x) for x in lines) <= 160
    # A row per report value, whose label starts its line; every run and VM named in full.
    for c in cols + ["sim s", "wall s"]:
        assert any(x.startswith(f"│ {c} ") for x in lines), c
    for v in ["first-variant", "second-variant", "guest-with-a-long-name-1", "guest-with-a-long-name-3"]:
        assert v in turned, v
    # Narrower than one run's table turned round: split over its VMs, still nothing cut.
    narrow = printed(60)
    assert "…" not in narrow and max(len(x) for x in narrow.splitlines()) <= 60
    assert narrow.count("wide: first-variant") >= 2, narrow
    # One variant turned round in one table: its title names it, as its columns do not.
    results = results[1:]
    alone = printed(160)
    assert "wide: second-variant" in alone and "first-variant" not in alone and "…" not in alone, alone


BAD = {
    "malformed TOML": (SMALL.replace("[host]", "[host"), "small.toml:3:"),
    "unknown field": (SMALL.replace('name = "g"', 'name = "g"\ncolour = "blue"'), "unknown field `colour`"),
    "unitless size": (SMALL.replace('"128MiB"', "128"), "has no unit"),
    "negative size": (SMALL.replace('"128MiB"', '"-128MiB"'), "negative"),
    "reservation above memory": (SMALL.replace('name = "g"', 'name = "g"\nreservation = "1GiB"'), "above the VM's memory"),
    "reservations above the host": (
        SMALL.replace('name = "g"', 'name = "g"\ncount = 3\nreservation = "128MiB"').replace('memory = "1GiB"', 'memory = "512MiB"'),
        "admission control refuses",
    ),
    # Error messages quoting TOML keep their brackets (rich markup would eat them).
    "no vm": (SMALL.split("[[vm]]")[0], "the scenario has no [[vm]]"),
    "report window without an end": (SMALL + '[report]\nwindow = ["0s"]\n', 'must be [start, end], e.g. ["0s", "150s"]'),
    # Names become folders: none may lead out of the run folder.
    "variant name leaving the folder": (
        SMALL + '[[variant]]\nname = "../../escape"\nset = { "host.memory" = "2GiB" }\n',
        "variant.name: '../../escape' must be a name of 1 to 100 bytes without '/'",
    ),
    "scenario name '..'": (SMALL.replace('name = "small"', 'name = ".."'), "name: must be a name of 1 to 100 bytes"),
    # Of several variants, the one whose run is refused is named (the message alone names a VM).
    "one variant refused at power-on": (
        SMALL.replace('name = "g"', 'name = "g"\ncount = 2\nreservation = "100MiB"')
        + '[[variant]]\nname = "roomy"\nset = {}\n[[variant]]\nname = "tight"\nset = { "host.memory" = "160MiB" }\n',
        "error: variant 'tight': admission control refuses to power on VM 'g-1'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_gets_one_clear_error_and_no_folder(tmp_path, case):
    text, expect = BAD[case]
    (tmp_path / "small.toml").write_text(text)
    r = memvisor("run", "small.toml", "--out", "out", "--quiet", cwd=tmp_path)
    # The README's statuses: a scenario mistake is 2; a run the simulated host refused is 1.
    assert r.returncode == (1 if "admission control" in expect else 2), (r.returncode, r.stderr)
    assert expect in r.stderr, r.stderr
    assert r.stderr.count("error:") == 1
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


def test_a_run_replaces_an_earlier_run_but_nothing_else(tmp_path, small_scenario):
    data = tmp_path / "mydata"
    data.mkdir()
    (data / "precious").write_text("not a run")
    r = memvisor("run", str(small_scenario), "--out", "mydata", "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and "mydata exists and is not a run folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert [p.name for p in data.iterdir()] == ["precious"], "what was there is untouched"
    (tmp_path / "file").write_text("x")
    r = memvisor("run", str(small_scenario), "--out", "file", "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and "is a file" in r.stderr and (tmp_path / "file").read_text() == "x"
    for _ in range(2):  # an earlier run is replaced
        r = memvisor("run", str(small_scenario), "--out", "out", "--quiet", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    assert "holds a run of scenario" not in r.stderr
    # Another scenario's run is replaced too, and said to be.
    other = small_scenario.read_text().replace('name = "', 'name = "other-', 1)
    (tmp_path / "other.toml").write_text(other)
    r = memvisor("run", "other.toml", "--out", "out", "--quiet", cwd=tmp_path)
    assert r.returncode == 0 and "out holds a run of scenario '" in r.stderr and "this run of 'other-" in r.stderr, r.stderr
    # A simulated run's folder that names no scenario is said to go too.
    (tmp_path / "out" / "summary.json").write_text('{"variants": []}')
    r = memvisor("run", "other.toml", "--out", "out", "--quiet", cwd=tmp_path)
    assert r.returncode == 0 and "out holds a run that names no scenario" in r.stderr, r.stderr
    # A manage run's or a validation's folder is refused, and left as it was.
    for name, files in (("managed", ("summary.json", "manage.json")), ("validated", ("summary.json", "results.csv"))):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text("{}")
        r = memvisor("run", "other.toml", "--out", name, "--quiet", cwd=tmp_path)
        assert r.returncode == 2 and f"--out {name} holds a " in r.stderr and "not a simulated run's" in r.stderr, r.stderr
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == sorted(files)
    # An empty folder made for the run is written in, also the one the command runs in (which
    # cannot be renamed, as a mount point cannot).
    made = tmp_path / "made"
    made.mkdir()
    r = memvisor("run", str(small_scenario), "--out", ".", "--quiet", cwd=made)
    assert r.returncode == 0, r.stderr
    assert (made / "summary.json").is_file() and not any(p.name.startswith(".") for p in made.iterdir())
    assert "<title>small (made)</title>" in (made / "report.html").read_text()


def test_a_scenario_that_is_not_utf8_text_or_is_a_folder_gets_one_error(tmp_path):
    (tmp_path / "s.toml").write_bytes(SMALL.encode("utf-16"))
    r = memvisor("run", "s.toml", "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and "s.toml: byte 0: a scenario file is UTF-8 text" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = memvisor("run", ".", "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and "is a folder" in r.stderr, r.stderr
    r = memvisor("run", "/dev/zero", "--quiet", cwd=tmp_path)
    assert r.returncode == 2 and "/dev/zero: not a regular file" in r.stderr, r.stderr


def test_unknown_case_names_the_cases(tmp_path):
    r = memvisor("run", "no-such-case", cwd=tmp_path)
    assert r.returncode == 2
    assert "paging-stress" in r.stderr and "did you mean" not in r.stderr
    r = memvisor("run", "NFS-balloon", cwd=tmp_path)
    assert r.returncode == 2 and "NFS-balloon: no such case or file (did you mean 'nfs-balloon'? cases: " in r.stderr, r.stderr


def test_names_with_brackets_print_as_they_are(tmp_path):
    text = SMALL.replace('name = "small"', 'name = "s[1]"').replace('name = "g"', 'name = "[g]"')
    r = run_ok(tmp_path, text)
    assert "s[1]" in r.stdout and "[g]" in r.stdout, r.stdout


def test_error_and_warning_lines_print_brackets_and_colons_as_they_are(capsys):
    MemvisorError("no [[vm]] in [bold]x[/bold] :ok:", 2, details=["[a]", "b"]).show()
    warn("prog [x] exited")
    assert capsys.readouterr().err.splitlines() == [
        "error: no [[vm]] in [bold]x[/bold] :ok:",
        "  - [a]",
        "  - b",
        "warning: prog [x] exited",
    ]


@pytest.mark.parametrize("args, option", [
    # (--cgroup-root: were the option accepted, the validation would refuse to run, not run.)
    (["validate", "linux-paging", "--cgroup-root", ".", "--limits", "16MiB,x"], "'--limits': '16MiB,x': 'x' does not start with a number"),
    (["validate", "linux-paging", "--cgroup-root", ".", "--limits", "16MiB,0B"], "'--limits': '16MiB,0B': '0B' is below 1MiB"),
    # Sizes with their unit, as everywhere: a bare number is not taken for MiB.
    (["validate", "linux-paging", "--cgroup-root", ".", "--limits", "16"], "'--limits': '16': '16' has no unit"),
    (["validate", "linux-paging", "--cgroup-root", ".", "--limits", "1500KiB"], "'--limits': '1500KiB': '1500KiB' is not a whole number of MiB"),
    (["validate", "balloon", "--memory", "512"], "'--memory': '512' has no unit"),
    (["validate", "balloon", "--size", "32MiB"], "'--size': '32MiB' is below 64MiB"),
    (["trace", "bench", "t.csv", "--frames", "1,,2"], "'--frames'"),
    (["trace", "bench", "t.csv", "--frames", ","], "'--frames'"),
    (["trace", "bench", "t.csv", "--frames", "4,1099511627776"], "'--frames'"),
    (["trace", "replay", "t.csv", "--frames", "1099511627776"], "'--frames'"),
    # Frames are a count or a size with a unit, a whole number of 4 KiB pages.
    (["trace", "replay", "t.csv", "--frames", "6KiB"], "'--frames' / '-c': '6KiB' is not a whole number of 4 KiB frames"),
    (["trace", "replay", "t.csv", "--frames", "0"], "'--frames' / '-c': '0' is below 1 frame, the least allowed"),
    (["trace", "replay", "t.csv", "--frames", "100x"], "'--frames' / '-c': '100x' is neither a number of 4 KiB frames nor a size"),
    (["trace", "bench", "t.csv", "--frames", "4,8TiB"], "'--frames' / '-c': '4,8TiB': '8TiB' is above 268,435,456 frames, the most allowed"),
    (["trace", "replay", "t.csv", "--frames", "9" * 5000], "'--frames' / '-c': '99999999999999999999...' is above"),
    (["trace", "replay", "t.csv", "--frames", "\u00b2"], "'--frames' / '-c': '\u00b2' is neither a number of 4 KiB frames nor a size"),
    (["manage", "pressure", "--timeout", "1e9"], "'--timeout': 1000000000.0 is not in the range 0.01<=x<=600"),
    (["manage", "pressure", "--period", "1e9"], "'--period': 1000000000.0 is not in the range 0.1<=x<=86400"),
    (["trace", "replay", "t.csv", "--frames", "4", "--loops", "4294967297"], "'--loops'"),
    (["trace", "replay", "t.csv", "--frames", "4", "--compute", "18446744073709551615"], "'--compute'"),
    # A duration takes a unit, as in scenarios, and an hour at most.
    (["trace", "replay", "t.csv", "--frames", "4", "--compute", "5"], "'--compute': '5' has no unit"),
    (["trace", "replay", "t.csv", "--frames", "4", "--compute", "2h"], "'--compute': '2h' is longer than an hour"),
])
def test_bad_lists_get_a_usage_error_naming_the_option(tmp_path, args, option):
    (tmp_path / "t.csv").write_text("time,obj,size\n0,1,4096\n")
    r = memvisor(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"Invalid value for {option}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_frames_are_counts_or_sizes():
    assert Frames(max=10**6).convert("100MiB", None, None) == 25_600
    assert Frames(max=10**6).convert("25600", None, None) == 25_600
    assert Frames(max=10**6, many=True).convert("4KiB, 3,1MiB", None, None) == (1, 3, 256)


def test_int_list_accepts_lists_and_rejects_the_rest():
    t = IntList(min=1)
    assert t.convert("16, 24,32", None, None) == (16, 24, 32)
    assert t.convert((8, 16), None, None) == (8, 16)
    for bad in ["", "1,,2", "a", "0", "3,-1", "1.5"]:
        with pytest.raises(click.BadParameter):
            t.convert(bad, None, None)


def test_manage_help_lists_the_engines_policies():
    """The help is written out (the command starts before the engine loads); it must name what
    the engine has."""
    from memvisor import _core
    from memvisor.livecmd import manage_cmd

    text = " ".join(manage_cmd.help.split())
    listed = text.split("POLICY (or the config's policy): ")[1].rstrip(".").replace(" or ", ", ").split(", ")
    assert listed == list(_core.policy_names())


def test_mib_takes_sizes_of_whole_mib():
    assert MiB(min=1, many=True).convert("24MiB, 48MiB,1GiB", None, None) == (24, 48, 1024)
    assert MiB(min=128).convert("512MiB", None, None) == 512
    for bad in ["512", "1500KiB", "64MiB", "x", ""]:
        with pytest.raises(click.BadParameter):
            MiB(min=128).convert(bad, None, None)


def test_number_refuses_what_is_not_a_finite_bound(tmp_path):
    t = Number(min=1.0)
    assert t.convert("1.5", None, None) == 1.5
    for bad in ["nan", "inf", "-inf", "0.5", "x"]:
        with pytest.raises(click.BadParameter):
            t.convert(bad, None, None)
    r = memvisor("plan", "nfs-balloon", "--vm", "small", "--slowdown", "nan", "--reservation", cwd=tmp_path)
    assert r.returncode == 2 and "Invalid value for '--slowdown': 'nan' is not a finite number" in r.stderr, r.stderr

LONG = SMALL.replace('name = "small"', 'name = "long"\nduration = "100000000s"').replace(
    'sample_interval = "100ms"', 'sample_interval = "1h"'
).replace('{ kind = "file-io", size = "64MiB", read = true }', '{ kind = "stress", pages = 1000 }')


@contextmanager
def long_run_writing_its_folder(tmp_path: Path, preexec):
    """A `memvisor run` that cannot finish (three simulated years), yielded once its temporary run
    folder exists, so a signal sent then always meets a run that is writing a folder; killed on the
    way out if still running."""
    (tmp_path / "long.toml").write_text(LONG)
    exe = Path(sys.executable).parent / "memvisor"
    p = subprocess.Popen([str(exe), "run", "long.toml", "--out", "out", "--quiet"], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                         preexec_fn=preexec)
    try:
        partial = tmp_path / f".out.partial-{p.pid}"
        deadline = time.monotonic() + 60
        while not partial.is_dir():
            assert p.poll() is None, f"the run ended before its folder was begun: {p.stderr.read()}"
            assert time.monotonic() < deadline, "no temporary run folder after 60 s"
            time.sleep(0.02)
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated"), (signal.SIGHUP, 129, "hung up")])
def test_interrupted_run_leaves_no_folder(tmp_path, sig, code, word):
    # Each signal as a terminal delivers it, also when the suite runs in the background: a shell
    # starts background jobs with SIGINT ignored, and `nohup` ignores SIGHUP; memvisor keeps an
    # ignored signal ignored (as the test after this one checks).
    def as_from_a_terminal():
        for s in (signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)

    with long_run_writing_its_folder(tmp_path, as_from_a_terminal) as p:
        p.send_signal(sig)
        _, stderr = p.communicate(timeout=60)
    assert p.returncode == code, stderr
    assert stderr.splitlines() == [f"error: {word}"], stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["long.toml"]


def test_a_signal_after_the_folder_is_in_place_says_the_run_is_complete(tmp_path, small_scenario, monkeypatch):
    """Ctrl-C while the report prints comes after the folder was renamed into place: the error says
    the folder is complete, not that the run was lost."""
    from click.testing import CliRunner

    from memvisor import cli

    def interrupted(results):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_print_report", interrupted)
    r = CliRunner().invoke(cli.main, ["run", str(small_scenario), "--out", str(tmp_path / "done"), "--quiet"])
    assert r.exit_code == 130, r.output
    assert f"interrupted while printing the report; the run finished and its folder is complete: {tmp_path / 'done'}" in r.output
    assert (tmp_path / "done" / "summary.json").is_file() and (tmp_path / "done" / "report.html").is_file()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_started_ignored_does_not_end_a_run(tmp_path, sig):
    """SIGHUP ignored (as `nohup` leaves it), or SIGINT (as a script's background job has it),
    stays ignored: the run goes on, and SIGTERM still ends it."""
    with long_run_writing_its_folder(tmp_path, lambda: signal.signal(sig, signal.SIG_IGN)) as p:
        p.send_signal(sig)
        time.sleep(1)
        assert p.poll() is None, f"{sig.name} ended a run started with it ignored"
        p.send_signal(signal.SIGTERM)
        _, stderr = p.communicate(timeout=60)
    assert p.returncode == 143 and stderr.splitlines() == ["error: terminated"], stderr


def test_ctrl_c_while_the_command_loads_is_one_line():
    """A Ctrl-C in the fraction of a second the command's modules take to load (pandas, polars,
    the engine) ends it as one during a command does: one line, status 130, no traceback. The
    interrupt is raised where Python would raise it, inside the import."""
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'memvisor.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from memvisor.entry import main\n"
        "main()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (130, "error: interrupted\n")
    assert "pandas" not in subprocess.run(
        [sys.executable, "-c", "import sys, memvisor.entry; print(sorted(sys.modules))"], capture_output=True, text=True, timeout=60
    ).stdout, "the entry loads the heavy modules before it can catch the interrupt"

def test_run_folder_appears_only_on_commit(tmp_path):
    with RunFolder(tmp_path / "out") as folder:
        (folder.tmp / "summary.json").write_text('{"scenario": "s"}')
        assert not (tmp_path / "out").exists()
        folder.commit([])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (tmp_path / "out" / "summary.json").read_text() == '{"scenario": "s"}'
    # A second run replaces the first.
    with RunFolder(tmp_path / "out") as folder:
        folder.commit([])
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt, None])
def test_run_folder_left_without_commit_leaves_nothing(tmp_path, exc):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text('{"scenario": "s"}')
    (tmp_path / "out" / "old").write_text("an earlier run")
    try:
        with RunFolder(tmp_path / "out") as folder:
            (folder.tmp / "summary.json").write_text("{}")
            assert folder.tmp.is_dir()
            if exc is not None:
                raise exc()
    except BaseException as e:
        assert exc is not None and isinstance(e, exc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["old", "summary.json"], "the earlier run is untouched"


def test_run_can_pick_variants(tmp_path, small_scenario):
    text = small_scenario.read_text() + '\n[[variant]]\nname = "a"\nset = {}\n\n[[variant]]\nname = "b"\nset = { "vm.g.memory" = "256MiB" }\n'
    small_scenario.write_text(text)
    r = memvisor("run", str(small_scenario), "--out", "out", "--quiet", "--variant", "b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["b"]
    r = memvisor("run", str(small_scenario), "--out", "out2", "--quiet", "--variant", "c", cwd=tmp_path)
    assert r.returncode == 2 and "no variant c (variants: a, b)" in r.stderr, r.stderr
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("config, expect", [
    ("ksm = 'false'\n", "ksm: true or false, not 'false'"),
    ("period = -5\n", "period: seconds, a number from 0.1 to 86400, not -5"),
    ("period = nan\n", "period: seconds, a number from 0.1 to 86400, not nan"),
    ("timeout = 'x'\n", "timeout: seconds, a number from 0.01 to 600, not 'x'"),
    # Past ten minutes a monitor has hung (and a socket's timeout overflows further on).
    ("timeout = 1e12\n", "timeout: seconds, a number from 0.01 to 600, not 1000000000000.0"),
    ("host_memory = true\n", "host_memory: a size"),
    ("host_memory = '0B'\n", "host_memory: must be larger than zero"),
    # A bare number is no size: bytes or MiB would be a guess (4096 bytes: a host with no room).
    ("host_memory = 4096\n", "host_memory: a size with a unit, as a string such as \"1GiB\", not 4096"),
    ("host_memory = '4096'\n", "host_memory: '4096' has no unit"),
    ("[[vm]]\nname = 'a'\nqmp = '/x'\nfloor = 448\n", "vm[0].floor: a size with a unit, as a string such as \"1GiB\", not 448"),
    ("vm = [1]\n", "vm: a [[vm]] table per VM"),
    ("[[vm]]\nname = 'a'\nqmp = '/x'\nshares = true\n", "vm[0].shares: must be a positive integer"),
    ("[[vm]]\nname = 'a'\nqmp = '/x'\n[[vm]]\nname = 'a'\nqmp = '/y'\n", "VM a listed twice"),
    ("[[vm]]\nname = 'b'\nqmp = '/x'\n", "VM b listed twice"),
    # One socket under two names: the second only ever read as a VM that does not answer.
    ("[[vm]]\nname = 'c'\nqmp = '/nonexistent.sock'\n", "VMs c and b are one QMP socket (/nonexistent.sock)"),
    ("[[vm]]\nname = 'c'\nqmp = '/./nonexistent.sock'\n", "VMs c and b are one QMP socket (/./nonexistent.sock and /nonexistent.sock)"),
])
def test_a_manage_config_is_checked_before_any_vm_is_touched(tmp_path, config, expect):
    (tmp_path / "m.toml").write_text("policy = 'pressure'\n" + config)
    r = memvisor("manage", "--config", "m.toml", "--vm", "b=/nonexistent.sock", "--dry-run", "--rounds", "1", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_manage_and_status_refuse_what_is_not_theirs(tmp_path, small_scenario):
    # A VM named twice; a simulated run's folder as --out (it would have been overwritten).
    r = memvisor("manage", "pressure", "--vm", "a=/x.sock", "--vm", "a=/y.sock", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "--vm a=...: given twice" in r.stderr, r.stderr
    # The policy typed first is checked first, before the VMs are.
    r = memvisor("manage", "bogus", cwd=tmp_path)
    assert r.returncode == 2 and "unknown policy 'bogus'" in r.stderr, r.stderr
    assert memvisor("run", str(small_scenario), "--quiet", "--out", "sim", cwd=tmp_path).returncode == 0
    before = (tmp_path / "sim" / "summary.json").read_text()
    r = memvisor("manage", "pressure", "--vm", "a=/nonexistent.sock", "--dry-run", "--rounds", "1", "--out", "sim", cwd=tmp_path)
    assert r.returncode == 2 and "--out sim: exists and is not a manage run folder" in r.stderr, r.stderr
    assert (tmp_path / "sim" / "summary.json").read_text() == before
    # A damaged status.json is named, not a traceback; a folder and VMs at once are refused.
    (tmp_path / "st").mkdir()
    whole = '{"policy": "p", "state": "", "dry_run": false, '
    for content in ["{", "{}", "[1]", '["policy", "state", "dry_run", "vms"]', whole + '"vms": null}', whole + '"vms": [1]}', whole + '"vms": [{}]}', whole + '"vms": "ab"}']:
        (tmp_path / "st" / "status.json").write_text(content)
        r = memvisor("status", "st", cwd=tmp_path)
        assert r.returncode == 2 and "status.json: not a manager's status" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = memvisor("status", "st", "--vm", "a=/x.sock", cwd=tmp_path)
    assert r.returncode == 2 and "not both" in r.stderr, r.stderr
    r = memvisor("status", "nope", cwd=tmp_path)
    assert r.returncode == 2 and "nope: no such folder" in r.stderr, r.stderr
    r = memvisor("status", "sim", cwd=tmp_path)
    assert r.returncode == 2 and "sim: not a manage run's folder (a simulated run's or a validation's)" in r.stderr, r.stderr
    # Observing VMs none of which answers is a failure a script can see.
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(tmp_path / "silent.sock"))  # there, but not listening: connections are refused
    try:
        r = memvisor("status", "--vm", "a=silent.sock", cwd=tmp_path)
    finally:
        silent.close()
    assert r.returncode == 1 and "no listed VM answered" in r.stderr, r.stdout + r.stderr


def test_output_to_a_full_device_is_one_error_line(tmp_path):
    exe = Path(sys.executable).parent / "memvisor"
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(exe), "cases"], stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and r.stderr.strip() == "error: output: No space left on device", r.stderr


def test_a_file_that_cannot_be_made_is_one_error_line(tmp_path, small_scenario):
    # /proc takes no new folders, even from root.
    r = memvisor("run", str(small_scenario), "--out", "/proc/memvisor-none/x", "--quiet", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.strip() == "error: /proc/memvisor-none: No such file or directory", r.stderr


def test_validations_check_their_arguments_before_touching_the_machine(tmp_path, small_scenario):
    """Each validation refuses an --out that is not a run folder, and out-of-range sizes, before
    it changes a kernel setting or starts a guest (exit 2 at once, not after the real side ran)."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    for form in ("linux-paging", "ksm", "balloon"):
        r = memvisor("validate", form, "--out", "notes", cwd=tmp_path)
        assert r.returncode == 2 and "--out notes exists and is not a run folder" in r.stderr, (form, r.stderr)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep"
    # A simulated run's folder is a run folder, but not a validation's: it is not replaced.
    assert memvisor("run", str(small_scenario), "--quiet", "--out", "sim", cwd=tmp_path).returncode == 0
    for form in ("linux-paging", "ksm", "balloon"):
        r = memvisor("validate", form, "--out", "sim", cwd=tmp_path)
        assert r.returncode == 2 and "--out sim holds a simulated run's folder, not a validation's" in r.stderr, (form, r.stderr)
    assert (tmp_path / "sim" / "report.html").exists()
    # Nor is a manage run's.
    (tmp_path / "managed").mkdir()
    for f in ("summary.json", "manage.json"):
        (tmp_path / "managed" / f).write_text("{}")
    r = memvisor("validate", "ksm", "--out", "managed", cwd=tmp_path)
    assert r.returncode == 2 and "--out managed holds a manage run's folder, not a validation's" in r.stderr, r.stderr
    for args, expect in [
        (["ksm", "--mixes", ""], "none given"),
        (["linux-paging", "--limits", "99999999999MiB"], "above this machine's memory"),
        (["linux-paging", "--limits", "48MiB,96MiB"], "--limits 96MiB: at or above the working set (96MiB), where nothing pages"),
        (["linux-paging", "--working-set", "4095B"], "--working-set 4095B: from 1MiB"),
    ]:
        r = memvisor("validate", *args, cwd=tmp_path)
        assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_ctrl_c_while_a_vm_keeps_silent_leaves_one_line(tmp_path):
    """status interrupted while a QMP socket has accepted but not greeted: one clear line, no
    complaint from asyncio about tasks left pending."""
    import socket
    import threading

    path = tmp_path / "silent.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(1)
    accepted = threading.Event()
    held = []

    def serve():
        held.append(srv.accept())
        accepted.set()

    threading.Thread(target=serve, daemon=True).start()
    exe = Path(sys.executable).parent / "memvisor"
    # SIGINT as a terminal delivers it, even when the tests run in the background (a shell starts
    # background jobs with SIGINT ignored, and Python then keeps ignoring it).
    p = subprocess.Popen([str(exe), "status", "--vm", f"a={path}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert accepted.wait(30), "status never connected"
        p.send_signal(signal.SIGINT)
        _, stderr = p.communicate(timeout=30)
    finally:
        p.kill()
        srv.close()
    assert "interrupted" in stderr and "Traceback" not in stderr and "Task was destroyed" not in stderr, stderr


def test_bench_live_refuses_more_guests_than_the_machine_holds(tmp_path):
    r = memvisor("bench", "--live", "100000", cwd=tmp_path)
    assert r.returncode == 2 and "--live 100000: 100000 guests of 128 MiB, each with up to 384 MiB of QEMU's own, need more than this machine has available" in r.stderr, r.stderr


# -- where run folders go, the manager's folder, status, bench --live and validate balloon's checks


class _FakeHost:
    """A live host with no VMs, for the manager's folder handling (no QEMU, no cgroups)."""

    fail = False

    def __init__(self, vms, **kw):
        self.vms, self.events, self.state, self.start = [], [], "", time.monotonic()

    def observe(self) -> dict:
        if self.fail:
            raise RuntimeError("(test) the host cannot be read")
        return {"time_ns": 0, "host_memory": 1 << 30, "host_free": 1 << 29, "host_available": 1 << 29, "hypervisor": 0,
                "sharing": {"run": False, "pages_to_scan": 100, "sleep_ms": 20, "pages_shared": 0, "pages_sharing": 0}, "vms": []}

    def apply(self, d) -> str:
        return "applied"

    def balloon_sizes(self) -> dict:
        return {}

    def close(self) -> list:
        return []


def test_the_live_host_leaves_a_page_to_a_whole_balloon_and_a_refused_command_is_no_dead_vm():
    """QMP's `balloon` takes no guest size of 0; an error QEMU answers is the command's, and the VM
    stays managed (only no answer leaves it out)."""
    from memvisor.live.livehost import LiveHost, VmSpec
    from memvisor.live.monitor import Refused, Unreachable

    sent = []

    class Mon:
        fail: Exception | None = None

        async def cmd(self, name, args=None):
            if self.fail:
                raise self.fail
            sent.append((name, args))

        async def close(self):
            pass

    host = LiveHost([VmSpec("v", "/x.sock")])
    try:
        vm = host.vms[0]
        vm.mon, vm.reachable, vm.memory = Mon(), True, 256 << 20
        decide = {"vm_id": 0, "kind": "balloon_target", "bytes": 256 << 20, "reason": "r"}
        assert host.apply(decide) == "applied leaving the guest one page: QEMU's balloon takes no size of 0"
        assert sent == [("balloon", {"value": 4096})] and vm.balloon_target == (256 << 20) - 4096
        vm.mon.fail = Refused("'balloon' refused: Parameter 'target' expects a size")
        assert host.apply(decide) == "failed: 'balloon' refused: Parameter 'target' expects a size" and vm.reachable
        vm.mon.fail = Unreachable("'balloon' got no answer within 1 s")
        assert host.apply(decide).startswith("not applied: ") and not vm.reachable

        class NoBalloon(Mon):
            async def cmd(self, name, args=None):
                if name == "query-memory-size-summary":
                    return {"base-memory": 256 << 20}
                raise Refused(f"'{name}' refused: Device '/machine/peripheral/balloon0' not found")

        vm.mon = NoBalloon()
        vm.reachable, vm.spec.floor = False, 1 << 30
        assert host.observe()["vms"] == []
        assert ("v", "its floor (1024 MiB) is above its memory (256 MiB): no decision takes anything from it") in host.events
        assert host.events[-1] == ("v", "left out of the view: it has no virtio balloon named balloon0 (give its QEMU "
                                        "-device virtio-balloon-pci,id=balloon0)"), host.events

        # Until the guest first reports balloon statistics, its zeros are no view of it.
        class Reporting(Mon):
            updated = 0

            async def cmd(self, name, args=None):
                if name == "query-memory-size-summary":
                    return {"base-memory": 256 << 20}
                if name == "query-balloon":
                    return {"actual": 256 << 20}
                if name == "qom-get" and args["property"] == "guest-stats":
                    return {"stats": {"stat-total-memory": 250 << 20}, "last-update": self.updated}
                return 1 if name == "qom-get" else {}

        vm.mon, vm.reachable, vm.spec.floor = Reporting(), False, 0
        host.events.clear()
        assert host.observe()["vms"] == []
        assert host.events[-1] == ("v", "answering, but left out of the view until its guest reports balloon statistics (asked for every 1 s)")
        vm.mon.updated = 1795739004
        (seen,) = host.observe()["vms"]
        assert seen["guest_total"] == 250 << 20 and seen["stats_time"] == 1795739004 and host.events[-1] == ("v", "answering; managed")
    finally:
        host.close()


def _no_machine(monkeypatch):
    """Were an argument accepted, each validation and bench --live would stop at its prerequisites
    (exit 77) rather than touch the machine."""
    from memvisor import bench, validate, validate_ksm
    from memvisor.live import launch

    monkeypatch.setattr(validate, "missing_prerequisites", lambda root: ["(test) nothing"])
    monkeypatch.setattr(validate_ksm, "missing_prerequisites", lambda: ["(test) nothing"])
    monkeypatch.setattr(launch, "available", lambda: "(test) no guests here")

    def started(*a, **kw):
        raise AssertionError("started real guests")

    monkeypatch.setattr(bench, "run_live_rounds", started)


def test_an_out_under_a_file_or_inside_a_run_folder_is_refused_before_anything_runs(tmp_path, small_scenario, monkeypatch):
    """A folder under a file was found only when the work was done (a traceback after the whole
    validation); one inside a run folder was written there, to go when that run is rerun."""
    from click.testing import CliRunner

    assert memvisor("run", str(small_scenario), "--quiet", "--out", "sim", cwd=tmp_path).returncode == 0
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in (tmp_path / "sim").iterdir())
    for out, expect in [("afile/sub", "afile is a file, not a folder"), ("sim/inner", "is inside the run folder")]:
        for args in (["run", str(small_scenario), "--quiet"], ["manage", "pressure", "--vm", "a=/nonexistent.sock", "--dry-run", "--rounds", "1"]):
            r = memvisor(*args, "--out", out, cwd=tmp_path)
            assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, (args, out, r.stderr)
        _no_machine(monkeypatch)
        monkeypatch.chdir(tmp_path)
        for form in (["linux-paging"], ["ksm"], ["balloon"]):
            r = CliRunner().invoke(cli.main, ["validate", *form, "--out", out])
            assert r.exit_code == 2 and f"--out {out}" in r.output and expect in r.output, (form, out, r.output)
    assert (tmp_path / "afile").read_text() == "x"
    assert sorted(p.name for p in (tmp_path / "sim").iterdir()) == before


def test_manage_refuses_a_zero_host_memory_and_a_folder_another_manager_runs_in(tmp_path):
    import fcntl
    import os

    r = memvisor("manage", "pressure", "--vm", "a=/nonexistent.sock", "--dry-run", "--rounds", "1", "--host-memory", "0B", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2 and "--host-memory: must be larger than zero" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
    # A socket path that is not there is a typo, not a VM that may answer later.
    r = memvisor("manage", "pressure", "--vm", "a=/nonexistent.sock", "--dry-run", "--rounds", "1", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2 and "VM a: no QMP socket at /nonexistent.sock" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
    # Nor is a path that is there but not a socket (a folder ran ten minutes of rounds unanswered);
    # status refuses both as manage does.
    (tmp_path / "afile").write_text("")
    for path, why in (("/nonexistent.sock", "no QMP socket at /nonexistent.sock"), (str(tmp_path), "is not a socket"), ("afile", "afile is not a socket")):
        for cmd in (["manage", "pressure", "--dry-run", "--rounds", "1", "--out", "o"], ["status"]):
            r = memvisor(*cmd, "--vm", f"a={path}", cwd=tmp_path)
            assert r.returncode == 2 and "VM a: " in r.stderr and why in r.stderr and "Traceback" not in r.stderr, (cmd, r.stderr)
    assert not (tmp_path / "o").exists()
    r = memvisor("status", cwd=tmp_path)
    assert r.returncode == 2 and "give a manage run folder (RUN), or VMs to observe" in r.stderr, r.stderr
    # A dry run with the default folder of a running manager (runs/manage-POLICY) truncated its
    # decisions.jsonl under it and removed its status.json.
    run = tmp_path / "runs" / "manage-pressure"
    run.mkdir(parents=True)
    (run / "manage.json").write_text("{}")
    (run / "decisions.jsonl").write_text('{"kept": true}\n')
    (run / "status.json").write_text("{}")
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "a.sock"))  # a socket that is there (nothing answers on it)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running manager holds it
        r = memvisor("manage", "pressure", "--vm", f"a={tmp_path / 'a.sock'}", "--dry-run", "--rounds", "1", cwd=tmp_path)
    finally:
        os.close(fd)
        listening.close()
    assert r.returncode == 2 and "another manager is running with this run folder" in r.stderr and "managing" not in r.stderr, r.stderr
    assert (run / "decisions.jsonl").read_text() == '{"kept": true}\n' and (run / "status.json").exists()


def test_a_manage_run_that_fails_leaves_no_earlier_runs_report(tmp_path, monkeypatch):
    from memvisor.live import manage as m

    monkeypatch.setattr(m, "LiveHost", type("Failing", (_FakeHost,), {"fail": True}))
    out = tmp_path / "run"
    out.mkdir()
    for name in ("manage.json", "summary.json", "report.html", "status.json"):
        (out / name).write_text("{}")
    with pytest.raises(Exception, match="cannot be read"):
        m.manage(m.ManageConfig("pressure", [], period_s=0.1, rounds=2), out)
    left = sorted(p.name for p in out.iterdir())
    assert "report.html" not in left and "summary.json" not in left, left


def test_a_second_signal_while_the_manager_writes_its_folder_leaves_it_whole(tmp_path, monkeypatch):
    import os

    from memvisor import report
    from memvisor.live import manage as m

    monkeypatch.setattr(m, "LiveHost", _FakeHost)
    real_write = report.write

    def interrupted_write(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again as the manager writes what it ends with
        return real_write(*a, **kw)

    monkeypatch.setattr(report, "write", interrupted_write)
    out = tmp_path / "run"
    try:
        summary = m.manage(m.ManageConfig("pressure", [], period_s=0.1, rounds=1), out)
    except KeyboardInterrupt:
        pytest.fail("the signal interrupted the writing of the run folder")
    assert summary["rounds"] == 1
    assert (out / "summary.json").exists() and (out / "report.html").exists()


def test_status_says_when_the_manager_is_no_longer_running(tmp_path):
    import fcntl
    import os

    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"time_s": 1.0, "policy": "pressure", "state": "", "dry_run": False,
                                                 "vms": [{"name": "a", "reachable": False, "error": "[Errno 111] Connection refused"}]}))
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = memvisor("status", "run", cwd=tmp_path)
    finally:
        os.close(fd)
    assert r.returncode == 0 and "stopped" not in r.stdout and "no manager is running" not in r.stdout, r.stdout
    r = memvisor("status", "run", cwd=tmp_path)  # killed: no lock, no summary
    assert r.returncode == 0 and "no manager is running with this folder" in r.stdout, r.stdout
    assert "a: not answering at that round: [Errno 111] Connection refused" in r.stdout, r.stdout
    (run / "summary.json").write_text(json.dumps({"stop": "stopped on SIGTERM", "rounds": 7}))
    r = memvisor("status", "run", cwd=tmp_path)
    assert r.returncode == 0 and "the manager has stopped: stopped on SIGTERM after 7 rounds" in r.stdout, r.stdout
    (run / "summary.json").write_text(json.dumps({"stop": "rounds done", "rounds": 1}))
    r = memvisor("status", "run", cwd=tmp_path)
    assert r.returncode == 0 and "rounds done after 1 round;" in r.stdout, r.stdout


def test_a_socket_given_by_a_relative_path_finds_its_process(tmp_path, monkeypatch):
    """/proc/net/unix names the path QEMU bound (absolute); a VM given as a relative path had no
    process, so no cgroup: its granted memory read 0 and grant limits were 'not in a cgroup'."""
    import os
    import socket

    from memvisor.live import hostfs

    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(tmp_path / "vm.qmp"))
        s.listen(1)
        monkeypatch.chdir(tmp_path)
        assert hostfs.socket_pid(str(tmp_path / "vm.qmp")) == os.getpid()
        assert hostfs.socket_pid("vm.qmp") == os.getpid()
        assert hostfs.socket_pid("./vm.qmp") == os.getpid()
    finally:
        s.close()


def test_bench_live_counts_qemus_own_memory_and_a_guest_failure_is_one_line(monkeypatch):
    from click.testing import CliRunner

    from memvisor import bench
    from memvisor.live import launch

    _no_machine(monkeypatch)
    monkeypatch.setattr(launch, "available", lambda: None)
    monkeypatch.setattr(cli, "meminfo_mib", lambda field="MemTotal": 1000)
    # 3 x 128 MiB fit in 1000 MiB, but each guest's QEMU may hold 384 MiB more (216 MiB idle under TCG).
    r = CliRunner().invoke(cli.main, ["bench", "--live", "3"])
    assert r.exit_code == 2 and "--live 3: 3 guests of 128 MiB, each with up to 384 MiB of QEMU's own" in r.output and "(1,000 MiB: room for 1)" in r.output, r.output

    def fails(n, rounds):
        raise launch.GuestError("guest g0: no serial console (QEMU ended with status 1: no KVM)")

    monkeypatch.setattr(bench, "run_live_rounds", fails)
    r = CliRunner().invoke(cli.main, ["bench", "--live", "1"])
    assert r.exit_code == 1 and "error: bench --live: guest g0: no serial console" in r.output, r.output


def test_bench_live_removes_its_work_folder(tmp_path, monkeypatch):
    import tempfile

    from memvisor import bench
    from memvisor.live import launch

    def no_guest(*a, **kw):
        raise launch.GuestError("(test) no guest")

    monkeypatch.setattr(launch, "Guest", no_guest)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(launch.GuestError):
        bench.run_live_rounds(1)
    assert list(tmp_path.iterdir()) == []


def test_validate_balloon_checks_its_sizes_and_a_guest_failure_is_one_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from memvisor import validate_balloon as vb
    from memvisor.live import launch

    _no_machine(monkeypatch)
    monkeypatch.chdir(tmp_path)
    from memvisor import validatecmd

    monkeypatch.setattr(validatecmd, "meminfo_mib", lambda field="MemTotal": 4000)
    for args, expect in [
        # The guest booted, then memhog's mmap failed: a traceback after the boot.
        (["--memory", "128MiB", "--size", "64MiB", "--swap", "16MiB", "--hog", "200MiB"], "--hog 200MiB: memhog must fit in what the ballooned guest has, --size 64 MiB of memory and --swap 16 MiB"),
        # A guest larger than the machine: its cgroup's limit no longer guards the machine.
        (["--memory", "8000MiB"], "--memory 8000MiB: a guest of 8000 MiB, and up to 384 MiB of QEMU's own beside it, needs more than this machine has available (4,000 MiB)"),
    ]:
        r = CliRunner().invoke(cli.main, ["validate", "balloon", *args, "--out", "v"])
        assert r.exit_code == 2 and expect in r.output, (args, r.output)
    monkeypatch.setattr(launch, "available", lambda: None)

    def fails(*a, **kw):
        raise launch.GuestError("memhog 320 3 did not finish in the guest (512 MiB ballooned to 256 MiB, 256 MiB of swap): memhog: mmap: Cannot allocate memory")

    monkeypatch.setattr(vb, "run", fails)
    r = CliRunner().invoke(cli.main, ["validate", "balloon", "--out", "v"])
    assert r.exit_code == 1 and "error: validate balloon: memhog 320 3 did not finish" in r.output, r.output
    assert not (tmp_path / "v").exists()


def test_validate_balloon_removes_its_guests_folder_and_refuses_a_balloon_short_of_its_size(tmp_path, monkeypatch):
    import asyncio
    import tempfile

    from memvisor import validate_balloon as vb
    from memvisor.live import launch

    def fails(work, *a):
        assert work.is_dir()
        raise launch.GuestError("(test) no guest")

    monkeypatch.setattr(vb, "_real_in", fails)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(launch.GuestError):
        vb._real(512, 256, 256, 320, 3, log=lambda _: None)
    assert list(tmp_path.iterdir()) == [], "its swap disk, sockets and log went with the guest"

    class Stuck:
        """A monitor whose guest never gives the balloon what it asks."""

        closed = False

        async def cmd(self, name, args=None):
            return {"actual": 300 << 20} if name == "query-balloon" else {}

        async def close(self):
            Stuck.closed = True

    # It went on after 60 s and compared a guest of 300 MiB as one of 256.
    with pytest.raises(launch.GuestError, match="did not take the guest down to 256 MiB within 0.05 s .it is at 300 MiB"):
        asyncio.run(vb._inflate(Stuck(), 256, wait_s=0.05, poll_s=0.01))
    assert Stuck.closed


def test_the_denali_benchs_peak_memory_is_the_childs_own():
    """getrusage's ru_maxrss survives execve: a child of `memvisor bench` (after the other
    benchmarks) reported the parent's peak as its own, and 'of it, the run' came out as 0."""
    from memvisor import bench

    held = bytearray(256 << 20)
    held[::4096] = b"\1" * len(held[::4096])  # resident, not just reserved
    r = subprocess.run([sys.executable, "-c", bench._PEAK_RSS + "print(peak_kib())"], capture_output=True, text=True, check=True)
    assert int(r.stdout) < 128 << 10, f"{int(r.stdout) >> 10} MiB: the parent's 256 MiB counted as the child's"
    del held


def test_an_output_that_cannot_be_written_is_said_of_the_users_path_before_the_work(tmp_path):
    # sysfs takes no new files, even from root: each output is refused at once, named as the user
    # named it (not the hidden folder or file it is written under), and nothing runs first.
    (tmp_path / "small.toml").write_text(SMALL)
    (tmp_path / "afile").write_text("")
    (tmp_path / "t.lackey").write_text("")
    cases = [
        (("run", "small.toml", "--out", "/sys/memvisor-x"), "/sys/memvisor-x: cannot create the run folder here"),
        (("sweep", "small.toml", "--vary", "vm.g.memory=96MiB,128MiB", "--csv", "/sys/x.csv"), "--csv /sys/x.csv: cannot be written there"),
        (("sweep", "small.toml", "--vary", "vm.g.memory=96MiB,128MiB", "--out", "afile/x"), "--out afile/x: cannot keep its runs there"),
        (("trace", "convert", "t.lackey", "/sys/x.mvtrace"), "DEST /sys/x.mvtrace: cannot be written there"),
    ]
    for args, said in cases:
        r = memvisor(*args, cwd=tmp_path)
        assert r.returncode != 0 and said in r.stderr and ".partial" not in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert "│" not in r.stdout, f"{args}: a table was printed, so the work ran first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "small.toml", "t.lackey"]


def test_an_option_that_takes_one_value_given_twice_is_refused(tmp_path):
    # click kept the last without a word: `plan --variant a --variant b` planned for b alone.
    (tmp_path / "small.toml").write_text(SMALL)
    for args, said in [
        (("plan", "small.toml", "--variant", "a", "--variant", "b", "--vm", "g"), "--variant: given twice ('a', then 'b')"),
        (("run", "small.toml", "--out=x", "--out", "y"), "--out: given twice ('x', then 'y')"),
        (("sweep", "small.toml", "--vary", "vm.g.memory=96MiB,128MiB", "--column", "a", "--column", "b"), "--column: given twice"),
        (("trace", "convert", "a", "b", "--delimiter", ",", "--delimiter", ";"), "--delimiter: given twice"),
    ]:
        r = memvisor(*args, cwd=tmp_path)
        assert r.returncode == 2 and said in r.stderr and "it takes one value" in r.stderr, (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]
    # Options that take many (--set, --variant of run) and flags still repeat.
    r = memvisor("run", "small.toml", "--variant", "x", "--variant", "y", cwd=tmp_path)
    assert "given twice" not in r.stderr, r.stderr


def test_trace_options_of_another_format_and_names_of_another_are_said(tmp_path):
    (tmp_path / "t.lackey").write_text("I  0400d7d4,8\n L 7ff000b28,8\n S 7ff000b30,4\n")
    r = memvisor("trace", "convert", "t.lackey", "t.mvtrace", "--delimiter", ";", cwd=tmp_path)
    assert r.returncode == 0 and "--delimiter is for csv input, and t.lackey is read as lackey: it is ignored" in r.stderr, r.stderr
    r = memvisor("trace", "convert", "t.lackey", "u.mvtrace", cwd=tmp_path)
    assert r.returncode == 0 and "ignored" not in r.stderr, r.stderr
    # A native trace under a name libCacheSim reads as oracleGeneral is refused; as oracleGeneral, taken.
    r = memvisor("trace", "convert", "t.lackey", "t.bin", cwd=tmp_path)
    assert r.returncode == 2 and "DEST t.bin: a name ending in .oracleGeneral or .bin" in r.stderr, r.stderr
    assert memvisor("trace", "convert", "t.lackey", "t.bin", "--to", "oracleGeneral", cwd=tmp_path).returncode == 0
    # A cache size given twice would run twice.
    r = memvisor("trace", "bench", "t.mvtrace", "--frames", "2,2", cwd=tmp_path)
    assert r.returncode == 2 and "--frames: 2 given more than once" in r.stderr, r.stderr


def test_an_empty_folder_is_filled_whole_or_left_empty(tmp_path, monkeypatch):
    import os as _os

    from memvisor import runfolder

    made = tmp_path / "made"
    made.mkdir()

    def written(folder: RunFolder) -> None:
        (folder.tmp / "timeseries.parquet").write_text("x")
        (folder.tmp / "summary.json").write_text("{}")

    # Interrupted while moving in: what was moved goes back, and leaving the block removes it all.
    calls = []
    real = _os.rename

    def rename(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(a, b)

    with pytest.raises(KeyboardInterrupt), RunFolder(made) as folder:
        written(folder)
        monkeypatch.setattr(runfolder.os, "rename", rename)
        folder._fill()
    monkeypatch.undo()
    assert list(made.iterdir()) == [], "nothing left that looks like a run"
    # Something put there during the run: the run is not written over it.
    with pytest.raises(runfolder.NotARunFolder, match="no longer empty"), RunFolder(made) as folder:
        written(folder)
        (made / "notes.txt").write_text("mine")
        folder._fill()
    assert sorted(p.name for p in made.iterdir()) == ["notes.txt"]
    # A summary nested past Python's recursion limit is no run's scenario, not a traceback.
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    assert runfolder.scenario_of(deep) is None


def test_a_pages_title_names_the_scenario_and_the_folder():
    from memvisor.report import page_title

    assert page_title("runs-a", "tiny") == "tiny (runs-a)"
    assert page_title("tiny", "tiny") == "tiny"
    assert page_title("x", None) == page_title("x", "") == page_title("x", 5) == "x"
    assert page_title("", "tiny") == "tiny"
