"""What every run checks and prepares first: private dirs, a usable data dir, and the log.

* The config, data and cache dirs are private to the user: created 0700; an existing one with
  group or other bits, and the files in the data dir that hold conversations (the database with
  its WAL and shared-memory files, the log, the UI state), are tightened (0700 / 0600) and the
  run says so once. New files are private because the CLI sets the umask to 077.
* The data dir must be a folder that can be read; commands that write need to write there. An
  unusable one (a file in the way, a path under a file, no permission, a read-only disk) is one
  line naming the path and the reason (`DataDirError`), never a traceback. A read-only data dir
  still serves the commands that only read.
* The log goes to `kotonia.log` in the data dir. When it cannot be written (a read-only dir, a
  full disk, the file gone) the log falls back to standard error, warnings only, said once: no
  "--- Logging error ---" flood. Secrets (API keys from the environment) never reach a log line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kotonia_tui.config import AppDirs, Settings
from kotonia_tui.engine.server.credentials import RedactingFormatter

LOG_NAME = "kotonia.log"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_SIDE_FILES = ("-wal", "-shm")  # SQLite's WAL and shared-memory files beside a database
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words


class DataDirError(Exception):
    """The data dir cannot be used; the message is one line: the path and the reason."""


@dataclass
class DataDir:
    """The prepared dirs: whether the data dir takes writes, and what to say once."""

    dirs: AppDirs
    writable: bool
    notes: list[str] = field(default_factory=list)


def prepare_dirs(dirs: AppDirs, *, need_write: bool) -> DataDir:
    """Create (0700) or tighten the dirs and check the data dir; raises `DataDirError`."""
    data = dirs.data
    if data.exists() and not data.is_dir():
        raise DataDirError(f"{data}: the data dir is not a folder (a file is in the way)")
    try:
        data.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    except OSError as exc:
        raise DataDirError(f"{data}: the data dir cannot be created ({_reason(exc)})") from exc
    try:
        os.listdir(data)
    except OSError as exc:
        raise DataDirError(f"{data}: the data dir cannot be read ({_reason(exc)})") from exc
    problem = _write_problem(data)
    if problem is not None and need_write:
        raise DataDirError(f"{data}: the data dir is read-only ({problem}); nothing can be saved")
    state = DataDir(dirs, writable=problem is None)
    if problem is not None:
        state.notes.append(
            f"{data}: the data dir is read-only ({problem}): conversations can be read, "
            "not changed; the log goes to standard error"
        )
        return state
    for folder in (dirs.config, dirs.cache):
        # Used only by the commands that need them, which say so when they cannot.
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    changed = make_private([dirs.config, data, dirs.cache], dir_mode=PRIVATE_DIR)
    changed += make_private(data_files(dirs, dirs.default_db), dir_mode=PRIVATE_DIR)
    if changed:
        state.notes.append(private_note(changed))
    return state


def data_files(dirs: AppDirs, db: Path) -> list[Path]:
    """The files in which conversations live: the database (with its side files), log, state."""
    return [*db_files(db), dirs.data / LOG_NAME, dirs.state_file]


def db_files(db: Path) -> list[Path]:
    return [db, *(db.with_name(db.name + suffix) for suffix in _SIDE_FILES)]


def make_private(paths: Iterable[Path], *, dir_mode: int = PRIVATE_DIR) -> list[str]:
    """Take group and other permissions away from what exists, is ours and has them; returns
    what changed, as "path (was 0755)". Never raises: what cannot be changed stays as it is."""
    changed = []
    for path in paths:
        try:
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
                continue  # a link's target, or another user's file, is not ours to change
            mode = stat.S_IMODE(info.st_mode)
            if not mode & 0o077:
                continue
            os.chmod(path, mode & (dir_mode if stat.S_ISDIR(info.st_mode) else PRIVATE_FILE))
            changed.append(f"{path} (was {mode:04o})")
        except OSError:
            continue
    return changed


def private_note(changed: list[str]) -> str:
    return "made private, readable by your user only: " + ", ".join(changed)


def _write_problem(folder: Path) -> str | None:
    """Why nothing can be created in `folder`, or None (a real probe: permissions, a read-only
    mount and ACLs all answer the same way)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as exc:
        return _reason(exc)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# The log -------------------------------------------------------------------------------------


class _Redactor:
    """Replaces known secrets in a line with "[redacted]"."""

    def __init__(self) -> None:
        self.secrets: list[str] = []

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text


redact = _Redactor()


def add_secrets(settings: Settings) -> None:
    """Remember the API keys the profiles name, so no log line or error line shows them."""
    names = {"KOTONIA_API_KEY", *(p.api_key_env for p in settings.all_profiles().values())}
    for name in sorted(n for n in names if n):
        value = os.environ.get(name, "")
        for secret in (value, value.strip()):
            if len(secret) >= MIN_SECRET_CHARS and secret not in redact.secrets:
                redact.secrets.append(secret)
    redact.secrets.sort(key=len, reverse=True)  # a longer secret first: no partial leftovers


class _PrivateFormatter(RedactingFormatter):
    """Log lines with credentials in URLs hidden (a server_url with a password, a token in a
    query) and the API keys the profiles name redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


_terminal: TextIO | None = None  # a copy of standard error taken by `setup_logging`


def _stderr() -> TextIO:
    """Where a note or a fallback warning goes. llama-cpp-python points standard error at
    /dev/null while it loads a model (and logs through us meanwhile), so line-by-line commands
    write to a copy taken at set-up; under the TUI it is whatever `sys.stderr` is then."""
    return _terminal if _terminal is not None else sys.stderr


def say(text: str) -> None:
    """One line on standard error that native code cannot swallow."""
    with contextlib.suppress(Exception):  # a broken stderr has nowhere left to report to
        print(redact(text), file=_stderr(), flush=True)


class _StderrHandler(logging.Handler):
    """Warnings to standard error (see `_stderr`)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        say(self.format(record))


class LogFile(logging.Handler):
    """The log file; on the first write that fails it says so once and falls back to stderr."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        self.path = path
        self._stream: TextIO | None = None
        self.fallback: _StderrHandler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.fallback is not None:
            if record.levelno >= self.fallback.level:
                self.fallback.emit(record)
            return
        try:
            line = redact(self.format(record)) + "\n"
            if self._stream is None:
                self._stream = self.path.open("a", encoding="utf-8", errors="replace")
            self._stream.write(line)
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._fall_back(exc)
            if record.levelno >= logging.WARNING:
                self.emit(record)

    def _fall_back(self, exc: Exception) -> None:
        self.fallback = _StderrHandler()
        self.fallback.setFormatter(self.formatter)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        say(
            f"note: the log {self.path} cannot be written ({reason}); "
            "warnings go to standard error from now on"
        )
        self._close_stream()

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            # The unflushed rest is what could not be written.
            with contextlib.suppress(OSError, ValueError):
                stream.close()

    def close(self) -> None:
        self._close_stream()
        super().close()


def setup_logging(data: DataDir, *, full_screen: bool = False) -> logging.Handler:
    """Route the root logger: the file in a writable data dir, else stderr (warnings only).

    `full_screen`: the TUI owns the terminal, so nothing is written to the real standard error.
    """
    global _terminal
    if _terminal is not None:
        with contextlib.suppress(OSError):
            _terminal.close()
        _terminal = None
    if not full_screen:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            _terminal = os.fdopen(
                os.dup(sys.stderr.fileno()), "w", encoding="utf-8", errors="backslashreplace"
            )
    formatter = _PrivateFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler: logging.Handler
    handler = LogFile(data.dirs.data / LOG_NAME) if data.writable else _StderrHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # httpx logs every request's URL at INFO: thousands of token counts per fold.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return handler
