"""The README's "Writing a scenario" section stays true: its template is a valid scenario, and the
mistake it shows gets the error it prints, line and column included."""

import re
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
