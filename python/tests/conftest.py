import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

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


def interrupted(p: subprocess.Popen, ready: Callable[[], bool], what: str) -> str:
    """Sends SIGINT to the command `p` once `ready()` (polled while it runs, for at most 60 s;
    `what` says what did not happen otherwise) and returns its stderr; killed if it outlives that."""
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert p.poll() is None and time.monotonic() < deadline, what
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        return p.communicate(timeout=60)[1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def pytest_terminal_summary(terminalreporter):
    """Say how real guests ran (test_live.py): KVM, TCG, or not at all and why (shown with -q too)."""
    from memvisor.live import launch

    why = launch.available()
    if why:
        terminalreporter.write_line(f"live guests: skipped ({why})")
    else:
        terminalreporter.write_line(f"live guests: QEMU with {'KVM' if launch.kvm_usable() else 'TCG (software emulation: KVM is not usable on this machine)'}")
