"""Files written whole or not at all: under a temporary name beside the file, renamed into place,
so an interrupted or failed write never leaves a file that looks complete; and only over a file,
never over a device, a pipe or a folder (the rename would replace it)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def output_problem(path: Path) -> str | None:
    """Why `path` cannot take an output file a user named, or None: it needs a name, an existing
    folder, and nothing there but a regular file or a link to one (see `written_through`)."""
    if not path.name:
        return "a file name is needed"
    if not path.parent.is_dir():
        return f"{path.parent} is not a folder" if path.parent.exists() else f"the folder {path.parent} does not exist"
    if path.is_symlink() and not path.exists():
        return "is a link to nothing: it is not followed"
    if path.exists() and not path.is_file():
        return "exists and is not a regular file: it is not replaced"
    # What `write_atomically` will do there, tried now rather than after the work.
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.probe-", dir=written_through(path).parent)
    except OSError as e:
        return f"cannot be written there ({e.strerror or e})"
    os.close(fd)
    os.unlink(probe)
    return None


def written_through(path: Path) -> Path:
    """Where an output a user named goes: through a link to the file it names, as `>` would."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def write_atomically(path: str | Path, data: bytes | str) -> None:
    """Writes `data` (text as UTF-8) to `path` whole, or leaves `path` as it was. A link at `path`
    is replaced, not followed (a run folder's files are ours, whatever a link there points to);
    anything else but a regular file is refused (OSError)."""
    path = Path(path)
    if not path.is_symlink() and path.exists() and not path.is_file():
        raise OSError(errno.EEXIST, "exists and is not a regular file: it is not replaced", str(path))
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
