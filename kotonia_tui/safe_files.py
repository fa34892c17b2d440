"""Writing a file the user owns without ever leaving it half-written.

The new content goes to a temporary file beside the target (same folder, so the final rename
is atomic), is flushed to disk, and only then replaces the target. Any failure on the way (a
full disk, a row that cannot be read mid-export, Ctrl-C) removes the temporary file and leaves
the target exactly as it was. A target that already exists keeps its permissions; a new one is
private (the process umask). A symbolic link is followed: the file it points to is replaced.

Only a regular file is ever replaced. Renaming over a device node or a FIFO would put a plain
file where `/dev/null` was (run as root, the system's); so a FIFO or a character device is
written into as a stream when the caller allows it (an export into a pipe or to /dev/stdout),
and refused with its kind otherwise. A folder, a block device and a socket are always refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from kotonia_tui.file_kinds import kind_of

# How long a FIFO may wait for its reader (`cat pipe & kotonia export 1 -o pipe`).
READER_WAIT_S = 10.0


class WriteError(OSError):
    """The file cannot be written; `str()` is one line: the path and the reason."""


@contextmanager
def replacing(path: Path, *, binary: bool = False, stream_ok: bool = False) -> Iterator[IO[Any]]:
    """A stream whose content replaces `path` when the block ends without an exception.

    With `stream_ok`, a FIFO or a character device at `path` (or a descriptor named by
    /dev/stdout, /proc/self/fd/N) is opened and written into instead: there is nothing to
    replace, and what was written before a failure has already gone."""
    status = _status(path)
    target = Path(os.path.realpath(path))
    if status is not None and not stat.S_ISREG(status.st_mode):
        if not stat.S_ISFIFO(status.st_mode) and not stat.S_ISCHR(status.st_mode):
            raise WriteError(f"{path}: is {kind_of(status.st_mode)}, not a regular file")
        if not stream_ok:
            raise WriteError(
                f"{path}: is {kind_of(status.st_mode)}, not a regular file; "
                "only a regular file is replaced"
            )
        with _streaming(path, binary) as out:
            yield out
        return
    if status is not None and stream_ok and _names_a_descriptor(path):
        # `-o /dev/stdout > file`: the shell's open file is written, not renamed over.
        with _streaming(path, binary) as out:
            yield out
        return
    if status is not None and _status(target) != status:
        # A link that cannot be followed by name (/proc/self/fd/1 of a deleted file): the
        # descriptor is written, as the shell's `>` would.
        with _streaming(path, binary) as out:
            yield out
        return
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
        _still_replaceable(path, target)
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(f"{path}: cannot be written ({_reason(exc)})") from exc
        raise


def _names_a_descriptor(path: Path) -> bool:
    name = os.path.abspath(path)
    return name in ("/dev/stdout", "/dev/stderr") or name.startswith(("/dev/fd/", "/proc/"))


def _status(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise WriteError(f"{path}: cannot be written ({_reason(exc)})") from exc


def _still_replaceable(path: Path, target: Path) -> None:
    """Checked again just before the rename: a FIFO or a device put there meanwhile stays."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise WriteError(f"{path}: is {kind_of(mode)}, not a regular file; it was not replaced")


@contextmanager
def _streaming(path: Path, binary: bool) -> Iterator[IO[Any]]:
    """`path` (a FIFO, a character device, an open descriptor) written into as it is."""
    try:
        fd = _open_for_stream(path)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8")
    except WriteError:
        raise
    except OSError as exc:
        raise WriteError(f"{path}: cannot be written ({_reason(exc)})") from exc
    try:
        with handle:
            yield handle
            handle.flush()
    except OSError as exc:
        if isinstance(exc, WriteError):
            raise
        raise WriteError(f"{path}: cannot be written ({_reason(exc)})") from exc


def _open_for_stream(path: Path) -> int:
    """The descriptor, opened without waiting: a FIFO nobody reads would block an ordinary open
    for ever, so its reader is given `READER_WAIT_S` to come, then the FIFO is refused."""
    # O_NOCTTY: a terminal named here never becomes the controlling one.
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    deadline = time.monotonic() + READER_WAIT_S
    while True:
        try:
            return os.open(path, flags)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: a FIFO with no reader yet
                raise
            if time.monotonic() >= deadline:
                raise WriteError(
                    f"{path}: is a FIFO (a named pipe) that nothing reads "
                    f"(waited {READER_WAIT_S:g} s); start its reader first"
                ) from exc
            time.sleep(0.05)


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
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    return exc.strerror or str(exc) or type(exc).__name__


def disk_full(folder: Path, room: int = 1 << 20) -> bool:
    """Less than `room` bytes left where `folder` is (SQLite reports a write that found no
    room as a "disk I/O error" as often as "database or disk is full")."""
    try:
        status = os.statvfs(folder)
    except OSError:
        return False
    return status.f_bavail * status.f_frsize < room
