"""What every command prints with: untrusted text made visible, JSON for scripts, progress."""

from __future__ import annotations

import errno
import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, TextIO

from kotonia_tui.chat.startup import redact
from kotonia_tui.terminal_text import escape_json_controls, visible
from kotonia_tui.untrusted_text import replacement_note, scrub


def say(
    text: str, *, stream: TextIO | None = None, end: str = "\n", one_line: bool = False
) -> None:
    """Print text that may come from a card, a chat file, a model or a server: its control
    and escape characters are shown (␛, ⟨U+202E⟩), never sent to the terminal raw; the API
    keys the profiles name are redacted."""
    print(visible(redact(text), one_line=one_line), end=end, file=stream or sys.stdout, flush=True)


class TypedText:
    """What the user typed (arguments, a pipe) under the one Unicode policy: bytes that are not
    UTF-8 become U+FFFD and the message is sent anyway; said once per run."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, text: str, where: str) -> str:
        decoded = scrub(text)  # undecodable bytes arrive as surrogate escapes
        if decoded.replaced and not self.said:
            self.said = True
            print(f"note: {where}: {replacement_note(decoded.replaced)}", file=sys.stderr)
        return decoded.text


_STANDARD = ((0, "standard input", "r"), (1, "standard output", "w"), (2, "standard error", "w"))


def reopen_closed_streams() -> list[str]:
    """Put /dev/null on each of file descriptors 0-2 that was closed (`kotonia ... >&-`), and
    return the names of those that were.

    Otherwise the next file opened (the database, the log) would get the number, and a native
    library writing to "standard output" would write into it. A closed standard error is
    quiet from then on; the caller decides what a closed standard output means.
    """
    closed: list[str] = []
    for fd, name, mode in _STANDARD:
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:  # lower descriptors were free as well: put it where it belongs
            os.dup2(null, fd)
            os.close(null)
        closed.append(name)
        stream = open(fd, mode, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        setattr(sys, ("stdin", "stdout", "stderr")[fd], stream)
    return closed


class StandardOutputError(OSError):
    """Standard output cannot be written (`> /dev/full`, a full disk, an I/O error)."""

    def __str__(self) -> str:
        reason = "disk full" if self.errno in (errno.ENOSPC, errno.EDQUOT) else self.strerror
        return f"standard output cannot be written ({reason}): what this command printed is lost"


class _GuardedOutput(io.RawIOBase):
    """File descriptor 1, whose write failures are `StandardOutputError` (a closed pipe stays
    BrokenPipeError: the reader left, nothing is wrong)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: Any) -> int:
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StandardOutputError(exc.errno, exc.strerror) from exc


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """For the length of a command, standard output (fd 1, as text) raises
    `StandardOutputError` when a write fails, so the command can say so in one line; the
    previous stream comes back after, and what could not be written is dropped with it."""
    previous = sys.stdout
    try:
        fd = previous.fileno()
    except (AttributeError, OSError, ValueError):
        yield  # a test's capture, no descriptor: left as it is
        return
    if fd != 1:
        yield
        return
    previous.flush()
    guarded = io.TextIOWrapper(
        io.BufferedWriter(_GuardedOutput(fd)),
        encoding=previous.encoding,
        errors=previous.errors,
        line_buffering=True,
    )
    sys.stdout = guarded
    try:
        yield
        guarded.flush()
    finally:
        sys.stdout = previous
        with suppress(OSError, ValueError):
            guarded.detach()  # nothing left to flush into a stream that failed


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit status 1."""


class Interrupted(Exception):
    """A signal (SIGTERM) that stops a long command the way Ctrl-C does; `status` is the
    exit status a shell expects (128 + the signal's number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.status = 128 + signum


def progress(stream: TextIO) -> Any:
    last: dict[str, int] = {}
    live = stream.isatty()

    def report(what: str, done: int, total: int) -> None:
        percent = int(done * 100 / total) if total else 100
        # On a terminal the line updates in place; in a log, one line per quarter.
        step = percent if live else percent - percent % 25
        if last.get(what) == step:
            return
        last[what] = step
        if total > 1:
            end = "\n" if done >= total or not live else "\r"
            say(f"{what}: {step}%", stream=stream, end=end, one_line=True)
        else:
            say(what, stream=stream, one_line=True)

    return report


def json_text(rows: object) -> str:
    """JSON for scripts: the exact text, with no control or bidi character raw in it."""
    return escape_json_controls(json.dumps(rows, ensure_ascii=False, indent=2))


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
