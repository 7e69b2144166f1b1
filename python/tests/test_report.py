"""report.html: self-contained, rendered by a real browser (Debian's Chromium, headless), and
`compare` overlays runs."""

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")


class _Refs(HTMLParser):
    """Every URL an element of the page would load or link to (script text is not an element)."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        self.refs += [v for k, v in attrs if k in ("src", "href", "data") and v]


def memvisor(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memvisor.cli", *args], capture_output=True, text=True, cwd=cwd)


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
    assert p.returncode == 1 and "--out /proc/nope/c.html:" in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("file, content, expect", [
    ("timeseries.parquet", "garbage", "cannot be read as a time series (Parquet)"),
    ("summary.json", "[1]", "cannot be read as a run summary (JSON): not an object"),
    ("summary.json", "{", "cannot be read as a run summary (JSON)"),
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
