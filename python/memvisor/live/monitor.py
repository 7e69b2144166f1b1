"""A QMP connection to one QEMU, through the QEMU project's own client library (`qemu.qmp`),
with a deadline on every command so that a hung VM cannot stall the manager."""

from __future__ import annotations

import asyncio
import logging

from qemu.qmp import ExecuteError, QMPClient

# The library logs every failed connection at WARNING; the manager reports them itself.
logging.getLogger("qemu.qmp").setLevel(logging.CRITICAL)


class Unreachable(Exception):
    """The VM's monitor did not answer (gone, hung, or busy with another client)."""


class Refused(Exception):
    """QEMU answered a command with an error (a value it does not take, a device the VM lacks):
    the VM is there, the command was wrong for it."""


class Monitor:
    """One VM's QMP socket, connected on first use and again after a failure."""

    def __init__(self, name: str, path: str, timeout_s: float):
        self.name = name
        self.path = path
        self.timeout_s = timeout_s
        self.client: QMPClient | None = None

    async def _connect(self) -> QMPClient:
        if self.client is None:
            c = QMPClient(self.name)
            try:
                await asyncio.wait_for(c.connect(self.path), self.timeout_s)
            except (Exception, asyncio.TimeoutError) as e:
                await _quietly(c.disconnect())
                why = f"no answer within {self.timeout_s:g} s" if isinstance(e, asyncio.TimeoutError) else str(e) or type(e).__name__
                raise Unreachable(f"cannot connect to {self.path}: {why}") from None
            self.client = c
        return self.client

    async def cmd(self, name: str, args: dict | None = None):
        """Runs a QMP command and returns its result; Refused if QEMU answers with an error,
        Unreachable if no answer comes (a failure or the deadline)."""
        c = await self._connect()
        try:
            return await asyncio.wait_for(c.execute(name, args), self.timeout_s)
        except ExecuteError as e:
            raise Refused(f"'{name}' refused: {e}") from None
        except asyncio.TimeoutError:
            await self.close()
            raise Unreachable(f"'{name}' got no answer within {self.timeout_s:g} s") from None
        except Exception as e:
            await self.close()
            raise Unreachable(f"'{name}' failed: {str(e) or type(e).__name__}") from None

    async def close(self) -> None:
        c, self.client = self.client, None
        if c is not None:
            await _quietly(c.disconnect())


async def _quietly(coro) -> None:
    try:
        await asyncio.wait_for(coro, 1.0)
    except (Exception, asyncio.TimeoutError):
        pass
