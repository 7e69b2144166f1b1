"""The README's "Writing a scenario" section stays true: its template is a valid scenario, and the
mistake it shows gets the error it prints, line and column included."""

import os
import re
import subprocess
import sys
from pathlib import Path

import memvisor
from conftest import memvisor as memvisor_cmd

README = Path(__file__).resolve().parents[2] / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    return text[start : text.index("\n## ", start + 1)]


def template() -> str:
    return re.search(r"```toml\n(.*?)```", section("Writing a scenario"), re.S).group(1)


def test_the_scenario_template_loads(tmp_path):
    (tmp_path / "two.toml").write_text(template())
    s = memvisor.load(str(tmp_path / "two.toml"))
    assert [x.variant for x in s] == ["low-memory"]


def test_the_mistake_shown_gets_the_error_shown(tmp_path):
    shown = re.search(r"\$ memvisor run two.toml +# with swap = 1024\n(error: .*)\n", section("Writing a scenario")).group(1)
    text = template()
    assert 'swap = "1GiB"\n' in text
    (tmp_path / "two.toml").write_text(text.replace('swap = "1GiB"\n', "swap = 1024\n"))
    r = memvisor_cmd("run", "two.toml", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == shown, r.stderr
    assert not any(tmp_path.glob("runs")), "a refused scenario leaves no run folder"


def test_the_time_series_columns_named_are_the_columns():
    from memvisor import _core

    columns = set(_core.timeseries_columns()) | {"time_s", "vm", "state"}
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `timeseries.parquet`"))
    # Names in backticks, less the pool kinds that `summary.json`'s part of the row names.
    named = set(re.findall(r"`([A-Za-z0-9_/]+)`", row)) - {"EP", "PP"}
    assert len(named) > 40 and named <= columns, sorted(named - columns)


def test_the_plan_example_prints_what_is_shown(tmp_path):
    """The capacity question's table, reasons and answer, word for word (the table's borders and
    padding left to the terminal, here a wide one)."""
    part = section("Writing a scenario")
    part = part[part.index("### Capacity questions: `memvisor plan`") :]
    (tmp_path / "plan.toml").write_text(re.search(r"```toml\n(.*?)```", part, re.S).group(1))
    shown = re.search(r"```\n\$ (memvisor plan .*?)\n(.*?)```", part, re.S)
    exe = Path(sys.executable).parent / "memvisor"
    r = subprocess.run([str(exe), *shown.group(1).split()[1:]], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"}, timeout=600)
    assert r.returncode == 0, r.stderr

    def words(out: str) -> list[str]:
        return re.sub(r"[│┃━┏┓┡┩└┘┳╇┻┷─]", " ", out).split()

    assert words(r.stdout) == words(shown.group(2)), r.stdout
