"""Reading a file the user named (a model, an image, a chat to import, a World Info file) only
when it is a regular file, and saying why not before a byte is read.

A FIFO blocks an ordinary open until a writer comes, a device such as /dev/zero never ends, a
folder cannot be read: each is refused by its kind. The open itself never waits (O_NONBLOCK,
which does nothing to a regular file). A file under /proc or /sys looks regular but may refuse
to be read (/proc/self/mem answers every read with EIO): `ReadError` names the file and the
reason, one line, like a refusal by kind.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kotonia_tui.file_kinds import kind_of

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class ReadError(Exception):
    """A file that cannot be read; `reason` says why in a few words (no path), and `str()` is
    one line: the path and the reason."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class NotRegularFile(ReadError):
    """A folder, a FIFO, a device or a socket where a file's content was expected; `kind`
    says which ("a FIFO (a named pipe)")."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(path, f"is {kind}, not a regular file")
        self.kind = kind


class FileTooLarge(ReadError):
    """More than the caller's `limit` bytes (whatever the file's size claims)."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(path, f"is larger than {limit:,} bytes")
        self.limit = limit


def _not_regular(path: Path, mode: int) -> NotRegularFile:
    return NotRegularFile(path, kind_of(mode))


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def require_regular(path: Path) -> os.stat_result:
    """The file's status if it is a regular file (a symbolic link is followed); otherwise
    `ReadError` (missing, unreadable) or `NotRegularFile`. For a path handed to a library that
    opens it itself (llama.cpp): checked, not opened."""
    try:
        status = path.stat()
    except OSError as exc:
        raise ReadError(path, f"cannot be read ({_reason(exc)})") from exc
    if not stat.S_ISREG(status.st_mode):
        raise _not_regular(path, status.st_mode)
    return status


@contextmanager
def open_regular(path: Path, buffer_size: int = 1 << 16) -> Iterator[io.BufferedReader[io.FileIO]]:
    """`path` opened for reading in binary, if it is a regular file (checked on the open file,
    so a swap between the check and the read is caught too). A read that fails later raises
    OSError as usual; `read_regular` turns it into `ReadError`."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise ReadError(path, f"cannot be read ({_reason(exc)})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        handle = io.BufferedReader(io.FileIO(fd, "rb", closefd=True), buffer_size=buffer_size)
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_regular(path: Path, limit: int) -> bytes:
    """The whole content of a regular file of at most `limit` bytes; `ReadError` naming the file
    otherwise (never more than `limit` + 1 bytes are read, whatever the file claims)."""
    with open_regular(path) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise ReadError(path, f"cannot be read ({_reason(exc)})") from exc
    if len(data) > limit:
        raise FileTooLarge(path, limit)
    return data


__all__ = ["FileTooLarge", "NotRegularFile", "ReadError", "open_regular", "read_regular"]
