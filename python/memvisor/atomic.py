"""Files written whole or not at all: under a temporary name beside the file, renamed into place,
so an interrupted or failed write never leaves a file that looks complete; and only over a file,
never over a device, a pipe or a folder (the rename would replace it)."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def output_problem(path: Path) -> str | None:
    """Why `path` cannot take an output file, or None: it needs a name, an existing folder, and
    nothing there but a regular file (a link to one is written through)."""
    if not path.name:
        return "a file name is needed"
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist"
    if (path.exists() or path.is_symlink()) and not path.is_file():
        return "exists and is not a regular file: it is not replaced"
    return None


def write_atomically(path: str | Path, data: bytes | str) -> None:
    """Writes `data` (text as UTF-8) to `path` whole, or leaves `path` as it was. A link is written
    through, as `open` would; anything else but a regular file is refused (OSError)."""
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    if path.exists() and not path.is_file():
        raise OSError(errno.EEXIST, "exists and is not a regular file: it is not replaced", str(path))
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
