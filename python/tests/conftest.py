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


def memvisor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Runs the installed `memvisor` command."""
    exe = Path(sys.executable).parent / "memvisor"
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def pytest_terminal_summary(terminalreporter):
    """Say how real guests ran (test_live.py): KVM, TCG, or not at all and why (shown with -q too)."""
    from memvisor.live import launch

    why = launch.available()
    if why:
        terminalreporter.write_line(f"live guests: skipped ({why})")
    else:
        terminalreporter.write_line(f"live guests: QEMU with {'KVM' if launch.kvm_usable() else 'TCG (software emulation: KVM is not usable on this machine)'}")
