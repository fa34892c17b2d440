"""Saved KV states on a server: llama-server's slot save and restore, when the server allows it.

`POST /slots/{id}?action=save|restore` with `{"filename": ...}` writes the slot's tokens and KV
to (or reads them from) the server's `--slot-save-path`. llama-server answers 501 when it was
started without that path, and refuses both actions while a projector (mmproj) is loaded; other
servers have no such endpoint. `probe_slots` finds out once, without touching any slot (an
unknown action is refused before the slot is looked at), and `kotonia doctor` says what it found.

The server checks a restored file itself (its prompt cache keeps only the prefix the next
prompt shares), so Kotonia keeps only a small index of the files it saved (in its cache dir):
a restore is asked for only when that file was saved, because a failed restore empties the
slot. File names carry the server's address, model and profile, and the conversation. The
server's folder has no size cap of Kotonia's: the server's owner keeps it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kotonia_tui.engine.errors import BackendUnavailableError
from kotonia_tui.engine.server.http import ServerHttp
from kotonia_tui.safe_files import WriteError, write_atomically

log = logging.getLogger(__name__)

PROBE_ACTION = "kotonia-probe"  # not an action: refused before any slot is touched


@dataclass(frozen=True)
class SlotSupport:
    """Whether the server saves and restores slots, and why not when it does not."""

    available: bool
    why: str


def probe_slots(http: ServerHttp, *, vision: bool) -> SlotSupport:
    """Ask the server whether it has the slot actions (blocking, at open)."""
    path = f"/slots/0?action={PROBE_ACTION}"
    try:
        response = http.post(path, {"filename": "kotonia-probe.bin"})
    except BackendUnavailableError as exc:
        return SlotSupport(False, f"the slot endpoint did not answer ({exc})")
    if response.status_code == 501:
        return SlotSupport(False, "the server was started without --slot-save-path")
    if response.status_code != 400:
        return SlotSupport(False, f"no slot save/restore (HTTP {response.status_code})")
    if vision:
        return SlotSupport(False, "llama-server does not save slots while a projector is loaded")
    return SlotSupport(True, "llama-server slot save/restore (--slot-save-path)")


class SlotStates:
    """The chat slot's saved states on the server, one file per conversation."""

    def __init__(self, http: ServerHttp, *, slot_id: int, key: str, index: Path | None) -> None:
        self._http = http
        self.slot_id = slot_id
        self._key = hashlib.sha256(key.encode()).hexdigest()[:12]
        self._index_path = index
        self._saved: set[str] = self._read_index()
        self.holds: str | None = None  # the conversation the chat slot holds now
        self.unsaved = False  # it changed since it was saved
        self.pending_restored = 0  # tokens a restore brought, for the next call's figures

    def filename(self, name: str) -> str:
        return f"kotonia-{self._key}-{name}.bin"

    def known(self, name: str) -> bool:
        return self.filename(name) in self._saved

    async def save(self, client: httpx.AsyncClient, name: str) -> int:
        """Save the chat slot as `name`; the tokens saved."""
        answer = await self._action(client, "save", name)
        self._saved.add(self.filename(name))
        self._write_index()
        self.unsaved = False
        return _count(answer, "n_saved")

    async def restore(self, client: httpx.AsyncClient, name: str) -> int:
        """Load `name` into the chat slot; the tokens restored."""
        try:
            answer = await self._action(client, "restore", name)
        except BackendUnavailableError:
            raise
        except Exception:
            # Gone from the server's folder (or refused): it is not asked for again.
            self._saved.discard(self.filename(name))
            self._write_index()
            self.holds = None
            raise
        self.holds, self.unsaved = name, False
        self.pending_restored = _count(answer, "n_restored")
        return self.pending_restored

    def save_now(self) -> None:
        """At close: save what the chat slot holds if it changed since (blocking, bounded by
        the connection's timeouts)."""
        if self.holds is None or not self.unsaved:
            return
        path = self._path("save")
        try:
            response = self._http.post(path, {"filename": self.filename(self.holds)})
            self._http.json(path, response)
        except Exception as exc:
            log.warning("the chat slot was not saved on the server: %s", exc)
            return
        self._saved.add(self.filename(self.holds))
        self._write_index()

    async def _action(self, client: httpx.AsyncClient, action: str, name: str) -> Any:
        return await self._http.apost(client, self._path(action), {"filename": self.filename(name)})

    def _path(self, action: str) -> str:
        return f"/slots/{self.slot_id}?action={action}"

    def _read_index(self) -> set[str]:
        if self._index_path is None:
            return set()
        try:
            names = json.loads(self._index_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()

    def _write_index(self) -> None:
        if self._index_path is None:
            return
        with contextlib.suppress(OSError, WriteError):
            self._index_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomically(self._index_path, json.dumps(sorted(self._saved)))


def _count(answer: Any, field: str) -> int:
    value = answer.get(field) if isinstance(answer, dict) else None
    return value if type(value) is int and value >= 0 else 0
