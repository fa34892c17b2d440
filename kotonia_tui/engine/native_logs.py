"""llama.cpp's and mtmd's own log lines: into Python logging, never onto the terminal.

Both libraries print to stderr by default, which would scribble over a full-screen TUI. The
last error lines are kept so an error message can say what llama.cpp said (for example why a
projector does not fit its model).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
from collections import deque
from collections.abc import Iterator

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd

log = logging.getLogger("kotonia.llama_cpp")

_ERROR_LEVEL = 4  # GGML_LOG_LEVEL_ERROR
_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_recent_errors: deque[str] = deque(maxlen=8)
_callback: object | None = None  # the ctypes callback must outlive every call into the library


def _on_log(level: int, text: bytes | None, _user_data: ctypes.c_void_p) -> None:
    line = (text or b"").decode("utf-8", "replace").rstrip()
    if not line:
        return
    if level == _ERROR_LEVEL:
        _recent_errors.append(line)
    log.log(_LEVELS.get(level, logging.DEBUG), "%s", line)


def install() -> None:
    """Route both libraries' logs through Python logging (idempotent)."""
    global _callback
    if _callback is not None:
        return
    _callback = llama_cpp.llama_log_callback(_on_log)
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    mtmd.mtmd_log_set(_callback, ctypes.c_void_p(0))
    mtmd.mtmd_helper_log_set(_callback, ctypes.c_void_p(0))


def take_errors() -> list[str]:
    """The error lines logged since the last call (and forget them)."""
    lines = list(_recent_errors)
    _recent_errors.clear()
    return lines


class _LogWriter(io.TextIOBase):
    """A text stream whose lines go to the log (for the library's Python-level prints)."""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.info("%s", line.rstrip())
        return len(text)


@contextlib.contextmanager
def quiet_python_prints() -> Iterator[None]:
    """Send llama-cpp-python's `print(..., file=sys.stderr)` (and stdout) to the log.

    Only `sys.stdout`/`sys.stderr` are swapped, never file descriptors 1 and 2, so whatever
    else writes to the terminal meanwhile (the TUI's frames) still reaches it.
    """
    writer = _LogWriter()
    with contextlib.redirect_stdout(writer), contextlib.redirect_stderr(writer):
        yield
