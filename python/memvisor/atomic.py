"""Files written whole or not at all: under a temporary name beside the file, renamed into place,
so an interrupted or failed write never leaves a file that looks complete."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: str | Path, data: bytes | str) -> None:
    """Writes `data` (text as UTF-8) to `path` whole, or leaves `path` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
