"""Saved KV states in the cache dir: named files for one key, written in the background, read
with checks, and kept under a size cap by evicting the least recently used.

A file is `<key digest>-<name>.kvstate` in `<cache dir>/kv-state/` (the format is in
`state_file`). Writes go to a temporary file beside the target, flushed, then renamed over it
(`safe_files.replacing`), on a writer thread so the owner thread only copies the state out of
llama.cpp; the writer hashes and writes a few MiB at a time and pauses while a reply is being
made (foreground.py), and drops a write that a newer one of the same name made moot. A file
that is damaged, cut short, or made for another model, projector, profile, llama.cpp build or
cache layout is removed when it is found, never loaded. Loading a file touches it: the
eviction removes the files used longest ago until the folder fits the cap.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kotonia_tui.engine.foreground import FOREGROUND, STATE_WRITE, Foreground
from kotonia_tui.engine.items import PromptItem
from kotonia_tui.engine.state_file import (
    StateFileError,
    StateHead,
    StateKey,
    read_head,
    read_state,
    write_state,
)
from kotonia_tui.safe_files import replacing

log = logging.getLogger(__name__)

SUFFIX = ".kvstate"
PARTIAL_SUFFIX = ".partial"  # safe_files' temporary files; a crash can leave one behind
STALE_PARTIAL_S = 3600.0  # older than this, a temporary file is no write in progress
FOLDER_NAME = "kv-state"


@dataclass(frozen=True)
class StateCacheConfig:
    """Where saved states go, how much room they may take, and the profile they belong to."""

    folder: Path
    cap_bytes: int  # 0: nothing is saved or loaded
    profile: str


@dataclass(frozen=True)
class CacheUsage:
    files: int
    bytes: int


_Bytes = ctypes.Array[ctypes.c_uint8]


class _Superseded(Exception):
    """A newer save of the same name was asked for while this one was being written."""


def remove_states(folder: Path, name: str) -> int:
    """Remove every saved state called `name` (a glob allowed), whatever model or profile it
    was saved for, with the temporary files of writes left behind; returns how many went."""
    removed = 0
    for pattern in (f"*-{name}{SUFFIX}", f".*-{name}{SUFFIX}.*{PARTIAL_SUFFIX}"):
        for path in folder.glob(pattern):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed


def state_names(folder: Path) -> list[str]:
    """The names of the saved states in `folder` (without the key digest and the suffix)."""
    return sorted(
        {p.name.removesuffix(SUFFIX).partition("-")[2] for p in folder.glob(f"*{SUFFIX}")}
    )


def usage(folder: Path) -> CacheUsage:
    """The saved states in `folder`, for `kotonia doctor`."""
    files = list(_state_files(folder))
    return CacheUsage(len(files), sum(size for _path, size, _mtime in files))


class StateCache:
    """The saved states of one key (model, projector, profile, build, layout)."""

    def __init__(
        self, config: StateCacheConfig, key: StateKey, foreground: Foreground = FOREGROUND
    ) -> None:
        self._foreground = foreground
        self.folder = config.folder
        self.cap_bytes = config.cap_bytes
        self.key = key
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kotonia-kv-write")
        self._lock = threading.Lock()
        self._latest: dict[str, int] = {}  # name -> the newest write asked for
        # name -> (ticket, items, bytes) of a write not on disk yet: a restore right after a
        # settle (the user switches back at once) loads these, not the older file.
        self._pending: dict[str, tuple[int, tuple[PromptItem, ...], _Bytes]] = {}
        self._writes = 0

    @property
    def enabled(self) -> bool:
        return self.cap_bytes > 0

    def path(self, name: str) -> Path:
        return self.folder / f"{self.key.digest}-{name}{SUFFIX}"

    def exists(self, name: str) -> bool:
        return self.enabled and self.path(name).is_file()

    def head(self, name: str) -> StateHead | None:
        """The saved state's items, or None when there is none (or it was unusable and is
        now removed)."""
        if not self.enabled:
            return None
        path = self.path(name)
        try:
            return read_head(path, self.key)
        except FileNotFoundError:
            return None
        except (StateFileError, OSError) as exc:
            self.discard(path, str(exc))
            return None

    def read(self, head: StateHead) -> ctypes.Array[ctypes.c_uint8] | None:
        """The state bytes, checked against the file's digest; None (and the file removed)
        when they do not match."""
        buffer = (ctypes.c_uint8 * head.state_bytes)()
        try:
            read_state(head, buffer)
        except (StateFileError, OSError) as exc:
            self.discard(head.path, str(exc))
            return None
        with contextlib.suppress(OSError):
            os.utime(head.path)  # used now: the last to be evicted
        return buffer

    def discard(self, path: Path, why: str) -> None:
        """Remove a file that cannot be trusted, and say so in the log."""
        log.warning("saved KV state %s removed: %s", path.name, why)
        with contextlib.suppress(OSError):
            path.unlink()

    def save(
        self,
        name: str,
        items: tuple[PromptItem, ...],
        buffer: ctypes.Array[ctypes.c_uint8],
    ) -> Future[Path | None]:
        """Write the state in the background (a newer save of the same name queued meanwhile
        makes this one moot); the future gives the path written, or None."""
        with self._lock:
            self._writes += 1
            ticket = self._writes
            self._latest[name] = ticket
            self._pending[name] = (ticket, items, buffer)
        return self._writer.submit(self._write_then_forget, name, ticket, items, buffer)

    def pending(
        self, name: str
    ) -> tuple[tuple[PromptItem, ...], ctypes.Array[ctypes.c_uint8]] | None:
        """The newest state saved under `name` that is not written yet (items, bytes)."""
        with self._lock:
            found = self._pending.get(name)
        return None if found is None else (found[1], found[2])

    def _write_then_forget(
        self,
        name: str,
        ticket: int,
        items: tuple[PromptItem, ...],
        buffer: ctypes.Array[ctypes.c_uint8],
    ) -> Path | None:
        try:
            return self._write(name, ticket, items, buffer)
        finally:
            with self._lock:
                if self._pending.get(name, (None,))[0] == ticket:
                    del self._pending[name]

    def _write(
        self,
        name: str,
        ticket: int,
        items: tuple[PromptItem, ...],
        buffer: ctypes.Array[ctypes.c_uint8],
    ) -> Path | None:
        if self._superseded(name, ticket):
            return None
        if not self.enabled:
            return None
        if len(buffer) > self.cap_bytes:
            log.info(
                "KV state %s not saved: %.1f MB is more than the cap (state_cache_mb)",
                name,
                len(buffer) / 1e6,
            )
            return None
        path = self.path(name)
        started = time.perf_counter()
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with replacing(path, binary=True) as out:
                size = write_state(
                    out,
                    self.key,
                    items,
                    memoryview(buffer).cast("B"),
                    each_chunk=lambda: self._chunk(name, ticket),
                )
        except _Superseded:
            return None  # the temporary file is gone; the newer write follows
        except OSError as exc:
            log.warning("KV state %s not saved: %s", name, exc)
            return None
        log.info(
            "saved KV state %s: %d items, %.1f MB in %.0f ms",
            path.name,
            len(items),
            size / 1e6,
            (time.perf_counter() - started) * 1000,
        )
        with self._foreground.background(STATE_WRITE):
            self.evict()
        return path

    def _superseded(self, name: str, ticket: int) -> bool:
        with self._lock:
            return self._latest.get(name) != ticket

    @contextlib.contextmanager
    def _chunk(self, name: str, ticket: int) -> Iterator[None]:
        """One chunk of a write: when no reply runs, and only while the write still matters."""
        with self._foreground.background(STATE_WRITE):
            if self._superseded(name, ticket):
                raise _Superseded
            yield

    def evict(self) -> list[Path]:
        """Remove the least recently used states (of any key) until the folder fits the cap,
        and temporary files a crashed write left; returns what was removed."""
        removed: list[Path] = []
        now = time.time()
        for leftover in self.folder.glob(f".*{PARTIAL_SUFFIX}"):
            with contextlib.suppress(OSError):
                if now - leftover.stat().st_mtime > STALE_PARTIAL_S:
                    leftover.unlink()
                    removed.append(leftover)
        files = sorted(_state_files(self.folder), key=lambda f: f[2])  # oldest use first
        total = sum(size for _path, size, _mtime in files)
        for path, size, _mtime in files:
            if total <= self.cap_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
                total -= size
                log.info("saved KV state %s evicted (cache over its cap)", path.name)
        return removed

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the writes asked for so far are on disk."""
        self._writer.submit(lambda: None).result(timeout)

    def close(self) -> None:
        """Finish the queued writes, then stop the writer."""
        self._writer.shutdown(wait=True)


def _state_files(folder: Path) -> list[tuple[Path, int, float]]:
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if entry.name.endswith(SUFFIX) and not entry.name.startswith("."):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                found.append((Path(entry.path), info.st_size, info.st_mtime))
    return found
