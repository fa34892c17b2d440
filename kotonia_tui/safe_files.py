"""Writing a file the user owns without ever leaving it half-written.

The new content goes to a temporary file beside the target (same folder, so the final rename
is atomic), is flushed to disk, and only then replaces the target. Any failure on the way (a
full disk, a row that cannot be read mid-export, Ctrl-C) removes the temporary file and leaves
the target exactly as it was. A target that already exists keeps its permissions; a new one is
private (the process umask). A symbolic link is followed: the file it points to is replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


class WriteError(OSError):
    """The file cannot be written; `str()` is one line: the path and the reason."""


@contextmanager
def replacing(path: Path, *, binary: bool = False) -> Iterator[IO[Any]]:
    """A stream whose content replaces `path` when the block ends without an exception."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise WriteError(f"{path}: is a folder")
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below on every path
            mode="wb" if binary else "w",
            encoding=None if binary else "utf-8",
            dir=target.parent,
            prefix=f".{target.name}.",
            suffix=".partial",
            delete=False,
        )
    except OSError as exc:
        raise WriteError(f"{path}: cannot be written ({_reason(exc)})") from exc
    temporary = Path(handle.name)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _keep_mode(target, temporary)
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(f"{path}: cannot be written ({_reason(exc)})") from exc
        raise


def write_atomically(path: Path, data: str | bytes) -> None:
    """Replace `path` with `data` (text is written as UTF-8)."""
    with replacing(path, binary=isinstance(data, bytes)) as out:
        out.write(data)


def _keep_mode(target: Path, temporary: Path) -> None:
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return  # a new file: the temporary file's private mode stays
    os.chmod(temporary, mode)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__
