"""report.html: self-contained, rendered by a real browser (Debian's Chromium, headless), and
`compare` overlays runs."""

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from memvisor import report

CHROMIUM = shutil.which("chromium")


class _Refs(HTMLParser):
    """Every URL an element of the page would load or link to (script text is not an element)."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        self.refs += [v for k, v in attrs if k in ("src", "href", "data") and v]


def memvisor(*args, cwd: Path) -> subprocess.CompletedProcess:
    # A name that is not UTF-8 is printed as its bytes.
    return subprocess.run([sys.executable, "-m", "memvisor.cli", *args], capture_output=True, text=True, errors="surrogateescape", cwd=cwd)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("report")
    p = memvisor("run", "nfs-balloon", "--set", "duration=60s", "--quiet", "--out", str(d / "nfs"), cwd=d)
    assert p.returncode == 0, p.stderr
    return d / "nfs"


def test_every_run_folder_has_a_self_contained_report(run_folder):
    page = (run_folder / "report.html").read_text()
    parser = _Refs()
    parser.feed(page)
    assert parser.refs == [], "nothing to fetch: it opens offline"
    assert "<script src" not in page
    for text in ("memory by where it lives", "balloon: target against size", "swap-ins", "Decisions", "Scenario: 4GiB"):
        assert text in page
    assert len(page) < 10 << 20
    # Rebuilt from the same files, the page is the same, byte for byte (chart ids included).
    p = memvisor("report", str(run_folder), cwd=run_folder.parent)
    assert p.returncode == 0, p.stderr
    assert (run_folder / "report.html").read_text() == page
    assert 'id="chart-0"' in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make setup installs it)")
def test_the_report_renders_in_headless_chromium(run_folder, tmp_path):
    url = (run_folder / "report.html").resolve().as_uri()
    flags = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="main-svg"') >= 10, "plotly drew the charts"
    for name in ("ballooned", "anonymous", "4GiB/small target", "4GiB/small size", "device queue wait"):
        assert name in dom, name
    shot = tmp_path / "report.png"
    subprocess.run(flags + ["--window-size=1400,2400", f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_compare_sets_runs_side_by_side(run_folder, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run_folder, other)
    p = memvisor("compare", str(run_folder), str(other), "--out", str(tmp_path / "cmp.html"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "ratios against nfs" in p.stdout and "(1.00x)" in p.stdout
    page = (tmp_path / "cmp.html").read_text()
    assert "nfs/4GiB" in page and "other/4GiB" in page and "runs overlaid" in page
    p = memvisor("report", str(run_folder), cwd=tmp_path)
    assert p.returncode == 0 and "report.html" in p.stdout
    p = memvisor("compare", str(tmp_path / "nope"), cwd=tmp_path)
    assert p.returncode == 2
    # Two folders of one name are told apart by the paths given.
    (tmp_path / "x").mkdir()
    shutil.copytree(run_folder, tmp_path / "x" / run_folder.name)
    p = memvisor("compare", str(run_folder), f"x/{run_folder.name}", "--out", str(tmp_path / "two.html"), cwd=tmp_path)
    assert p.returncode == 0 and f"x/{run_folder.name}/4GiB" in p.stdout, p.stdout
    # A folder whose summary has no VMs (a manage run's) is named, not left out without a word.
    managed = tmp_path / "managed"
    shutil.copytree(run_folder / "8GiB", managed)
    (managed / "summary.json").write_text('{"policy": "pressure", "rounds": 3}')
    p = memvisor("compare", str(run_folder), str(managed), "--out", str(tmp_path / "m.html"), cwd=tmp_path)
    assert p.returncode == 0 and "managed: no runtime or report values" in p.stdout, p.stdout + p.stderr
    p = memvisor("compare", str(run_folder), "--out", str(run_folder / "8GiB" / "report.html"), cwd=tmp_path)
    assert p.returncode == 2 and "inside a run folder" in p.stderr, p.stderr
    p = memvisor("compare", str(run_folder), "--out", "", cwd=tmp_path)
    assert p.returncode == 2 and "--out: give the file" in p.stderr, p.stderr
    p = memvisor("compare", str(run_folder), "--out", "/proc/nope/c.html", cwd=tmp_path)
    assert p.returncode == 2 and "--out /proc/nope/c.html: the folder /proc/nope does not exist" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_run_s_time_series_in_memory_is_not_read_back(run_folder, tmp_path):
    # The report of a finished run is made from the frames it has, the same page as from the files.
    copy = tmp_path / "copy"
    shutil.copytree(run_folder, copy)
    frames = {r.variant: r.timeseries for r in report.runs_in(run_folder)}
    for v in frames:
        (copy / v / "timeseries.parquet").write_text("not read")
    runs = report.runs_in(copy, frames=frames)
    assert [r.variant for r in runs] == list(frames) and all(r.timeseries is frames[r.variant] for r in runs)
    with pytest.raises(report.BadRun, match="cannot be read as a time series"):
        report.runs_in(copy)


@pytest.mark.parametrize("file, content, expect", [
    ("timeseries.parquet", "garbage", "cannot be read as a time series (Parquet)"),
    ("summary.json", "[1]", "cannot be read as a run summary (JSON): not an object"),
    ("summary.json", "{", "cannot be read as a run summary (JSON)"),
    ("summary.json", "{}", "cannot be read as a run summary (JSON): neither a simulated run's summary (no 'vms') nor a managed run's"),
    ("decisions.jsonl", "{}\n{", "cannot be read as decisions (JSON lines): line 2"),
])
def test_a_damaged_run_file_is_named_not_a_traceback(run_folder, tmp_path, file, content, expect):
    damaged = tmp_path / "damaged"
    shutil.copytree(run_folder, damaged)
    (damaged / "8GiB" / file).write_text(content)
    for args in (["report", str(damaged)], ["compare", str(run_folder), str(damaged), "--out", str(tmp_path / "c.html")]):
        p = memvisor(*args, cwd=tmp_path)
        assert p.returncode == 2 and f"damaged/8GiB/{file}: {expect}" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "c.html").exists()


def test_a_file_given_for_a_run_folder_is_told_what_is_wanted(tmp_path):
    (tmp_path / "v.toml").write_text("name = 'v'\n")
    for args in (["report", "v.toml"], ["compare", "v.toml"]):
        p = memvisor(*args, cwd=tmp_path)
        assert p.returncode == 2 and "'v.toml' is a file: give a run folder" in p.stderr and "`memvisor run v.toml`" in p.stderr, p.stderr
    p = memvisor("status", "v.toml", cwd=tmp_path)
    assert p.returncode == 2 and "'v.toml' is a file: give the folder `memvisor manage --out` writes" in p.stderr and "memvisor run" not in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["v.toml"]


TINY = """
name = "tiny"
duration = "10s"
[host]
memory = "768MiB"
[[datastore]]
name = "d"
device = "ssd"
[[vm]]
name = "a"
memory = "128MiB"
datastore = "d"
workload = { kind = "stress", pages = "64MiB", passes = 3 }
[[vm]]
name = "b"
memory = "128MiB"
datastore = "d"
workload = { kind = "stress", pages = "64MiB", passes = 3 }
[[variant]]
name = "v1"
set = { "vm.a.memory" = "128MiB" }
[[variant]]
name = "v2"
set = { "vm.a.memory" = "160MiB" }
"""


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> Path:
    """A run folder of two variants, v1 and v2."""
    d = tmp_path_factory.mktemp("variants")
    (d / "tiny.toml").write_text(TINY)
    p = memvisor("run", "tiny.toml", "--quiet", "--out", "A", cwd=d)
    assert p.returncode == 0, p.stderr
    return d / "A"


def _bad_input(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2 and "Traceback" not in p.stderr and all(w in p.stderr for w in words), p.stderr


def _rewrite(change):
    """Rewrites a time series with `change` made to its table."""
    def rewrite(path: Path) -> None:
        change(pd.read_parquet(path)).to_parquet(path)
    return rewrite


@pytest.mark.parametrize("file, spoil, expect", [
    ("timeseries.parquet", Path.unlink, ["damaged/v2: timeseries.parquet missing", "lists variant v2"]),
    ("summary.json", Path.unlink, ["damaged/v2: summary.json missing", "lists variant v2"]),
    ("scenario.toml", Path.unlink, ["damaged/v2: scenario.toml missing", "lists variant v2"]),
    ("timeseries.parquet", _rewrite(lambda df: df.drop(columns="vm")), ["damaged/v2/timeseries.parquet:", "lacks column 'vm'"]),
    ("timeseries.parquet", _rewrite(lambda df: df.drop(columns="time_s")), ["damaged/v2/timeseries.parquet:", "lacks column 'time_s'"]),
    ("timeseries.parquet", _rewrite(lambda df: pd.DataFrame({"x": [1, 2]})), ["damaged/v2/timeseries.parquet:", "not a memvisor time series"]),
    ("timeseries.parquet", _rewrite(lambda df: df.assign(MCTLSZ_MiB=df.MCTLSZ_MiB.astype(str))), ["damaged/v2/timeseries.parquet:", "'MCTLSZ_MiB'", "not numbers"]),
    ("summary.json", '{"vms": [1, 2]}', ["damaged/v2/summary.json:", "vms[0] is not an object with a 'name'"]),
    ("summary.json", '{"vms": [{"runtime_s": 3}]}', ["damaged/v2/summary.json:", "vms[0] is not an object with a 'name'"]),
    ("summary.json", '{"vms": [{"name": ["a"]}]}', ["damaged/v2/summary.json:", "vms[0] is not an object with a 'name'"]),
    ("summary.json", '{"vms": [{"name": "a", "report": [1]}]}', ["damaged/v2/summary.json:", "vms[0].report is not an object"]),
    ("decisions.jsonl", "[1, 2]\n", ["damaged/v2/decisions.jsonl:", "line 1: not an object"]),
    ("../summary.json", '{"variants": [{"folder": "../A"}]}', ["damaged/summary.json:", "variants[0] is not an object whose 'folder' names a subfolder"]),
])
def test_a_missing_or_wrongly_shaped_run_file_is_named(variants, tmp_path, file, spoil, expect):
    damaged = tmp_path / "damaged"
    shutil.copytree(variants, damaged)
    f = damaged / "v2" / file
    if isinstance(spoil, str):
        f.write_text(spoil)
    else:
        spoil(f)
    _bad_input(memvisor("report", str(damaged), cwd=tmp_path), *expect)
    _bad_input(memvisor("compare", str(variants), str(damaged), "--out", str(tmp_path / "c.html"), cwd=tmp_path), *expect)
    assert not (tmp_path / "c.html").exists()


def test_compare_takes_no_ratio_against_another_variant(variants, tmp_path):
    # B has v1 and v3 (v2's figures): v3 is set against nothing, and says so; v1 against A's v1.
    b = tmp_path / "B"
    shutil.copytree(variants, b)
    (b / "v2").rename(b / "v3")
    (b / "summary.json").write_text((b / "summary.json").read_text().replace('"v2"', '"v3"'))
    p = memvisor("compare", str(variants), str(b), "--out", str(tmp_path / "c.html"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = {line.split("│")[1].strip() for line in p.stdout.splitlines() if "(1.00x)" in line}
    assert rows == {"B/v1"}, p.stdout
    assert "B/v3: no ratios (A has no variant v3)" in p.stdout
    # A variant's folder given by itself is set against the same variant (its summary names it).
    c = tmp_path / "C"
    shutil.copytree(variants, c)
    p = memvisor("compare", str(variants), str(c / "v2"), "--out", str(tmp_path / "c.html"), cwd=tmp_path)
    assert p.returncode == 0 and "no ratios" not in p.stdout, p.stdout
    assert {line.split("│")[1].strip() for line in p.stdout.splitlines() if "(1.00x)" in line} == {"v2"}, p.stdout
    # ... but not beside the folder holding it: it would be set against itself.
    _bad_input(memvisor("compare", str(variants), str(variants / "v2"), "--out", str(tmp_path / "c.html"), cwd=tmp_path),
               "v2: the same run as A/v2, given before", "give each run once")
    # Two variants' own folders, given alone, are set against each other.
    p = memvisor("compare", str(variants / "v1"), str(variants / "v2"), "--out", str(tmp_path / "c.html"), cwd=tmp_path)
    assert p.returncode == 0 and "no ratios" not in p.stdout and "x)" in p.stdout.split("│ v2")[1], p.stdout
    # A folder given twice is refused: its rows would be set against themselves.
    _bad_input(memvisor("compare", str(variants), str(variants) + "/", "--out", str(tmp_path / "c.html"), cwd=tmp_path),
               "the same folder as", "give each run folder once")


def test_a_directory_where_the_report_goes_is_named(variants, tmp_path):
    folder = tmp_path / "A"
    shutil.copytree(variants, folder)
    (folder / "report.html").unlink()
    (folder / "report.html").mkdir()
    _bad_input(memvisor("report", str(folder), cwd=tmp_path), "A/report.html: a directory", "move it away")


def test_a_folder_name_that_is_not_utf8_is_written_and_read(variants, tmp_path):
    bad = tmp_path / os.fsdecode(b"bad\xff")
    (tmp_path / "tiny.toml").write_text(TINY)
    p = memvisor("run", "tiny.toml", "--quiet", "--out", str(bad), cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    # Titled by its scenario, and by the folder the user named, as written and as rebuilt.
    assert "<title>tiny (bad\\udcff)</title>" in (bad / "report.html").read_text()
    (bad / "report.html").unlink()
    p = memvisor("report", str(bad), cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "<title>tiny (bad\\udcff)</title>" in (bad / "report.html").read_text()
    p = memvisor("compare", str(bad), str(variants), "--out", str(tmp_path / "c.html"), cwd=tmp_path)
    assert p.returncode == 0 and "(1.00x)" in p.stdout, p.stderr


def test_a_report_rebuilt_from_inside_its_folder_is_titled_by_it(variants):
    p = memvisor("report", ".", cwd=variants)
    assert p.returncode == 0, p.stderr
    assert "<title>tiny (A)</title>" in (variants / "report.html").read_text()


def test_a_folder_that_is_not_a_run_folder_is_refused(variants, tmp_path):
    # A folder of run folders (or any folder holding one) is not one: its summary.json marks one.
    shutil.copytree(variants, tmp_path / "many" / "A")
    for args in (["report", "many"], ["compare", str(variants), "many", "--out", "c.html"]):
        _bad_input(memvisor(*args, cwd=tmp_path), "many: not a run folder", "no summary.json")
    assert not (tmp_path / "many" / "report.html").exists() and not (tmp_path / "c.html").exists()


def test_compare_writes_nowhere_inside_a_run_folder(variants, tmp_path):
    out = variants / "sub" / "deeper" / "c.html"
    _bad_input(memvisor("compare", str(variants), "--out", str(out), cwd=tmp_path), "inside a run folder", str(variants))
    assert not (variants / "sub").exists()


def test_compare_writes_only_a_file_in_a_folder_that_exists(run_folder, tmp_path):
    """The overlaid report replaces a file or writes through a link to one, never a device, a pipe
    or a folder (a rename over /dev/null would leave a regular file in its place, running as root),
    and makes no folder but the default's."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out in [fifo, Path("/dev/null")]:
        _bad_input(memvisor("compare", str(run_folder), "--out", str(out), cwd=tmp_path), f"--out {out}", "not a regular file")
    _bad_input(memvisor("compare", str(run_folder), "--out", str(tmp_path), cwd=tmp_path), "is a directory")
    assert Path("/dev/null").is_char_device() and fifo.is_fifo()
    _bad_input(memvisor("compare", str(run_folder), "--out", "no/such/c.html", cwd=tmp_path), "the folder no/such does not exist")
    assert not (tmp_path / "no").exists()
    target = tmp_path / "target.html"
    (tmp_path / "link.html").symlink_to(target)
    # Only an earlier report is replaced, never a file of another kind named by mistake.
    target.write_text('name = "mine"\n')
    _bad_input(memvisor("compare", str(run_folder), "--out", "link.html", cwd=tmp_path), "--out link.html: exists and is not a report memvisor wrote")
    assert target.read_text() == 'name = "mine"\n'
    target.write_text(report.PAGE_START + "an earlier report</title>")
    r = memvisor("compare", str(run_folder), "--out", "link.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "link.html").is_symlink() and target.read_text().startswith("<!DOCTYPE html>")
    (tmp_path / "dangling.html").symlink_to(tmp_path / "nowhere" / "x.html")
    _bad_input(memvisor("compare", str(run_folder), "--out", "dangling.html", cwd=tmp_path), "is a link to nothing")
    # A file where the default's folder would be: said as such, and of the default.
    (tmp_path / "runs").write_text("")
    _bad_input(memvisor("compare", str(run_folder), cwd=tmp_path), "the default --out runs/compare.html: runs is not a folder")


def test_a_run_folders_own_files_replace_a_link_never_follow_it(tmp_path):
    """What memvisor writes in its own folders replaces a link found there: a report.html linked to
    another file leaves that file alone."""
    from memvisor.atomic import write_atomically

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "report.html").symlink_to(victim)
    write_atomically(tmp_path / "report.html", "new")
    assert victim.read_text() == "keep" and not (tmp_path / "report.html").is_symlink()
    assert (tmp_path / "report.html").read_text() == "new"


def test_many_vms_are_drawn_a_dozen_at_a_time_and_say_so():
    names = [f"web-{i}" for i in range(1, 31)]
    df = pd.DataFrame({"time_s": [0.0] * 30, "vm": names, "MCTLSZ_MiB": [0.0] * 30, "SWCUR_MiB": [0.0] * 30})
    # None reclaimed from: the first twelve in the run's order, not by name (web-1, web-10, ...).
    vms, more = report._shown(df)
    assert vms == names[:12] and more == " (12 of 30 VMs: those reclaimed from most)"
    df.loc[df.vm == "web-30", "SWCUR_MiB"] = 5.0
    assert report._shown(df)[0][0] == "web-30"
    # Without the esxtop columns the titles still say that these are some of them.
    vms, more = report._shown(df.drop(columns=["MCTLSZ_MiB", "SWCUR_MiB"]))
    assert vms == names[:12] and more == " (12 of 30 VMs: the first)"
    assert report._shown(df[df.vm.isin(names[:3])]) == (names[:3], "")
