import os
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = """
name = "small"
[host]
memory = "1GiB"
sample_interval = "100ms"
[[datastore]]
name = "d"
device = "ssd"
[[vm]]
name = "g"
memory = "128MiB"
datastore = "d"
workload = { kind = "file-io", size = "64MiB", read = true }
"""


@pytest.fixture
def small_scenario(tmp_path: Path) -> Path:
    p = tmp_path / "small.toml"
    p.write_text(SMALL)
    return p


def memvisor(*args: str, cwd: Path, columns: int | None = None) -> subprocess.CompletedProcess:
    """Runs the installed `memvisor` command, its output as wide as its tables (not a terminal, and
    no `COLUMNS`: GNU readline, once a test process loads it, exports the terminal's size to every
    child, which would make the output's width depend on how the tests were started); `columns`
    sets a width, as a narrow terminal would."""
    exe = Path(sys.executable).parent / "memvisor"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def pytest_terminal_summary(terminalreporter):
    """Say how real guests ran (test_live.py): KVM, TCG, or not at all and why (shown with -q too)."""
    from memvisor.live import launch

    why = launch.available()
    if why:
        terminalreporter.write_line(f"live guests: skipped ({why})")
    else:
        terminalreporter.write_line(f"live guests: QEMU with {'KVM' if launch.kvm_usable() else 'TCG (software emulation: KVM is not usable on this machine)'}")
