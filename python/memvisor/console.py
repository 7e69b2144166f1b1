"""The terminal: the two consoles every command writes to, and the one way they fail."""

from __future__ import annotations

import sys

from rich.console import Console

err = Console(stderr=True, soft_wrap=True)
# Wide enough for the report tables when the output is not a terminal (CI logs, pipes).
out = Console(width=None if sys.stdout.isatty() else 160)


def fail(message: str, code: int) -> None:
    """Prints one error line and exits with `code`."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    sys.exit(code)


def fmt(v) -> str:
    """A table cell."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)
