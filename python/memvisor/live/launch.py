"""Real guests for tests and `memvisor validate balloon`: QEMU (TCG where KVM is not usable)
booting the project's small Linux image (vmimage/build.sh), each inside a memory cgroup of its own
so that no guest can exhaust the machine, with two QMP monitors (a QMP socket serves one client:
the manager takes one, a test the other) and a shell on its serial console."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from memvisor.console import describe_status
from memvisor.live.cgroup import ROOT, MemoryCgroup

#: Where `make setup` builds the guest image (override with MEMVISOR_VMIMAGE).
IMAGE = Path(os.environ.get("MEMVISOR_VMIMAGE", Path(__file__).resolve().parents[3] / "target" / "vmimage"))
#: QEMU's memory beyond guest RAM under TCG: about 215-230 MB for an idle 512 MB guest, 47 MB of
#: it the translation cache (DESIGN.md 9); the cgroup's hard limit leaves this much headroom.
QEMU_HEADROOM = 384 << 20
_END = "__MV_END__"


def kvm_usable() -> bool:
    """Whether /dev/kvm can run a guest (here it cannot: DESIGN.md 9, so TCG is used)."""
    return os.access("/dev/kvm", os.R_OK | os.W_OK) and any(
        f in Path("/proc/cpuinfo").read_text() for f in (" vmx", " svm")
    )


def available() -> str | None:
    """None if real guests can be started here, else why not."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (make setup installs it)"
    if not (IMAGE / "bzImage").exists() or not (IMAGE / "initrd.gz").exists():
        return f"no guest image in {IMAGE} (make setup builds it)"
    if os.geteuid() != 0:
        return "creating memory cgroups needs root"
    return None


class GuestError(RuntimeError):
    """A guest did not start, did not answer on its console, or a command in it failed."""


class Guest:
    """A running guest. `qmp` is the manager's monitor socket, `qmp2` a second one."""

    def __init__(self, name: str, workdir: Path, memory_mib: int = 512, deflate_on_oom: bool = False, swap_mib: int = 0):
        self.name = name
        self.dir = Path(workdir) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.memory_mib = memory_mib
        self.qmp = str(self.dir / "qmp.sock")
        self.qmp2 = str(self.dir / "qmp2.sock")
        self.console_path = str(self.dir / "console.sock")
        for p in (self.qmp, self.qmp2, self.console_path):
            Path(p).unlink(missing_ok=True)
        args = [
            "qemu-system-x86_64", "-accel", "kvm" if kvm_usable() else "tcg", "-m", f"{memory_mib}M", "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot",
            "-kernel", str(IMAGE / "bzImage"), "-initrd", str(IMAGE / "initrd.gz"),
            "-append", "console=ttyS0 quiet panic=-1",
            "-device", f"virtio-balloon-pci,id=balloon0,deflate-on-oom={'on' if deflate_on_oom else 'off'},free-page-reporting=on",
            "-qmp", f"unix:{self.qmp},server=on,wait=off",
            "-qmp", f"unix:{self.qmp2},server=on,wait=off",
            "-serial", f"unix:{self.console_path},server=on,wait=off",
        ]
        if swap_mib:
            disk = self.dir / "swap.img"
            with open(disk, "wb") as f:
                f.truncate(swap_mib << 20)
            args += ["-drive", f"file={disk},if=virtio,format=raw,cache=none"]
        v2 = MemoryCgroup.root_v2()
        self.cgroup = MemoryCgroup.create(ROOT if v2 else ROOT / "memory", f"memvisor-{os.getpid()}-{name}", v2)
        try:
            self.cgroup.set_limit((memory_mib << 20) + QEMU_HEADROOM)
        except BaseException:
            self.cgroup.remove()
            raise
        procs = self.cgroup.path / "cgroup.procs"
        try:
            # Into the cgroup before exec, so that all of QEMU's memory is charged to it.
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=open(self.dir / "qemu.log", "wb"), stderr=subprocess.STDOUT,
                preexec_fn=lambda: procs.write_text(str(os.getpid())),
            )
        except BaseException:
            self.cgroup.remove()
            raise
        # At once: the serial port drops what the guest prints while no client is connected.
        try:
            self.sock = self._connect(time.monotonic() + 30)
        except BaseException:
            self.stop()
            raise

    # -- console -------------------------------------------------------------------------------

    def _connect(self, deadline: float) -> socket.socket:
        while True:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.console_path)
                return s
            except OSError:
                s.close()
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise GuestError(f"guest {self.name}: no serial console{self._qemu_said()}") from None
                time.sleep(0.05)

    def _read_until(self, marker: str, deadline: float) -> str:
        buf = b""
        while marker.encode() not in buf:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                chunk = None
            if not chunk:
                raise GuestError(f"guest {self.name}: no '{marker}' on the console in time; got {buf[-300:]!r}{self._qemu_said()}")
            buf += chunk
        return buf.decode(errors="replace")

    def _qemu_said(self) -> str:
        """QEMU's last words, for an error (its log is in a work folder that may be gone by the time
        the error is read)."""
        try:
            log = (self.dir / "qemu.log").read_text(errors="replace").strip()
        except OSError:
            return ""
        status = self.proc.poll()
        head = "QEMU" if status is None else f"QEMU ended with {describe_status(status)}"
        if not log:
            return "" if status is None else f" ({head})"
        return f" ({head}: {' '.join(log.split())[-300:]})"

    def wait_ready(self, timeout_s: float = 120) -> float:
        """Waits for the guest's init to reach its shell; returns the boot time, s."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        self._read_until("MEMVISOR-GUEST-READY", deadline)
        return time.monotonic() - t0

    def sh(self, command: str, timeout_s: float = 60) -> str:
        """Runs a shell command in the guest and returns what it printed."""
        self.sock.sendall(f"{command}\necho {_END}\n".encode())
        return self._read_until(_END, time.monotonic() + timeout_s).split(_END)[0].strip()

    def read_file(self, path: str) -> str:
        """A file of the guest's, read by the shell's builtins: no process is forked, so reading a
        gauge such as MemFree does not change it (a forked `cat` holds about 15 pages while it runs)."""
        return self.sh(f'while IFS= read -r l; do echo "$l"; done < {path}')

    def meminfo(self) -> dict[str, int]:
        """The guest's /proc/meminfo, KiB."""
        out = {}
        for line in self.read_file("/proc/meminfo").splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                if v.split() and v.split()[0].isdigit():
                    out[k.strip()] = int(v.split()[0])
        return out

    def vmstat(self) -> dict[str, int]:
        """The guest's /proc/vmstat."""
        return {k: int(v) for k, v in (line.split() for line in self.read_file("/proc/vmstat").splitlines() if len(line.split()) == 2)}

    # -- lifetime ------------------------------------------------------------------------------

    def kill(self) -> None:
        """Ends QEMU at once (as a crashed or killed VM would)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if getattr(self, "sock", None) is not None:
            self.sock.close()
        self.kill()
        self.cgroup.remove()

    def __enter__(self) -> Guest:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
