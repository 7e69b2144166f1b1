"""Signals: how Ctrl-C, SIGTERM and SIGHUP (the terminal closed) reach the commands. SIGTERM and
SIGHUP are raised like Ctrl-C so that the same cleanup runs; while a pool of threads or processes
runs, all three are only recorded and delivered once it has shut down; where nothing may cut a
block short (restoring a machine setting, starting workers), they are held pending until it
ends."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


#: The signals that end a command: Ctrl-C, `kill`, and the terminal closing.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that the same cleanup runs (run folders, swap
    files)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum

    @property
    def word(self) -> str:
        """What happened, for the error line."""
        return "hung up" if self.signum == signal.SIGHUP else "terminated"

    @property
    def exit_code(self) -> int:
        """The shell's status for the signal: 143 for SIGTERM, 129 for SIGHUP."""
        return 128 + self.signum


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated(signum)


def _stopping() -> list[int]:
    """The stopping signals this process acts on: those it was not started with ignored, so that a
    command under `nohup` outlives its terminal, and one started in the background by a script
    (SIGINT ignored) is not stopped by the terminal's Ctrl-C."""
    return [s for s in STOPPING if signal.getsignal(s) != signal.SIG_IGN]


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Terminated` (a KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_terminated) for s in _stopping() if s != signal.SIGINT}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


#: How often a wait for runs looks for a signal received meanwhile, s.
SIGNAL_POLL_S = 0.05


@contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Within the block (in the main thread), the stopping signals are only recorded in the
    yielded list: an exception raised by a signal handler in the middle of a thread or process pool's own
    locking can leave a lock held and hang the process on shutdown, so the caller polls the list
    and, once its pool is shut down, re-raises the first with `reraise` after the block."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = {s: signal.getsignal(s) for s in _stopping()}
    for s in old:
        signal.signal(s, lambda n, _frame: got.append(n))
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def reraise(sig: int) -> None:
    """Delivers `sig` again, now that its handler is back (KeyboardInterrupt for SIGINT)."""
    signal.raise_signal(sig)
    # The handler runs at the next instruction; a default or ignored disposition does not raise.
    raise KeyboardInterrupt


@contextmanager
def held(*sigs: signal.Signals) -> Iterator[None]:
    """The calling thread holds `sigs` pending until the block ends, when they are delivered:
    nothing cuts the block short, and processes started within it inherit them blocked."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(sigs))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
