"""Signals: how Ctrl-C and SIGTERM reach the commands. SIGTERM is raised like Ctrl-C so that the
same cleanup runs; while a pool of threads or processes runs, both are only recorded and delivered
once it has shut down; where nothing may cut a block short (restoring a machine setting, starting
workers), they are held pending until it ends."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same cleanup runs (run folders, swap files)."""


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (a KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


#: How often a wait for runs looks for a signal received meanwhile, s.
SIGNAL_POLL_S = 0.05


@contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Within the block (in the main thread), SIGINT and SIGTERM are only recorded in the yielded
    list: an exception raised by a signal handler in the middle of a thread or process pool's own
    locking can leave a lock held and hang the process on shutdown, so the caller polls the list
    and, once its pool is shut down, re-raises the first with `reraise` after the block."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    sigs = [signal.SIGINT, signal.SIGTERM]
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
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
