"""Resuming warm: the chat context's KV state saved per conversation (and per character setup)
and loaded again when a prompt starts with what a saved state holds.

Everything here runs on the owner thread, between or inside model calls; the files themselves
are written by `StateCache`'s writer thread. docs/architecture.md ("Resume and start-up")
tells the whole story:

* **What is saved.** After a turn, once the model is idle, the chat context is brought to the
  conversation's *stable prefix* (the history up to where the next message will start,
  evaluated as the next prompt will render it) and saved under the conversation's name. The
  character setup's stable prefix is saved once, on the way, the first time a prompt is
  evaluated through it.
* **What is loaded.** When a chat call's context does not hold its conversation yet (a new
  process, another conversation in between), the saved states of the conversation and of its
  setup are read (their items only, cheaply), and the one that gives the prompt the longest
  usable prefix is loaded, if it beats what the context already shares. Only the rest of the
  prompt is evaluated.
* **Usable.** A state's items must be a prefix of the prompt. With a sliding-window (SWA)
  model a loaded state can only be extended, so all its items but the last must match; with
  other models a shared prefix of it is kept and the rest dropped.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from kotonia_tui.engine.items import PromptItem, cells_of, common_prefix
from kotonia_tui.engine.kv_slot import KvSlot
from kotonia_tui.engine.state_cache import StateCache
from kotonia_tui.engine.state_file import StateHead

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    """What a restore did: the file's name, the cells it brought, the time it took."""

    name: str
    cells: int
    ms: float


@dataclass(frozen=True)
class _Saved:
    """A saved state that may be loaded: its items, and how to get its bytes."""

    name: str
    label: str  # for the log
    items: tuple[PromptItem, ...]
    read: Callable[[], ctypes.Array[ctypes.c_uint8] | None]
    head: StateHead | None  # the file's, when it comes from disk


class Resumer:
    """Loads and saves the chat context's saved states for one engine."""

    def __init__(self, cache: StateCache, *, n_swa: int) -> None:
        self.cache = cache
        self.n_swa = n_swa
        self._saved_setups: set[str] = set()  # setup states known to be on disk

    @property
    def enabled(self) -> bool:
        return self.cache.enabled

    def usable(self, saved: Sequence[PromptItem], items: Sequence[PromptItem]) -> int:
        """How many of the saved items a prompt of `items` could keep after loading them."""
        shared = common_prefix(saved, items)
        if shared and shared == len(items):
            shared -= 1  # as `KvSlot.prefill`: the last token is evaluated again
        if self.n_swa > 0 and shared < len(saved) - 1:
            return 0  # a SWA state cannot be cut short: its window before the cut is gone
        return shared

    def restore(
        self, slot: KvSlot, items: Sequence[PromptItem], names: Sequence[str]
    ) -> Restored | None:
        """Load into `slot` the saved state (of `names`) that gives `items` the longest
        usable prefix, when it beats what the slot shares with them already."""
        if not self.enabled:
            return None
        held = slot.common_prefix_cells(items)
        candidates: list[tuple[int, _Saved]] = []
        for name in names:
            saved = self._saved(name)
            if saved is not None:
                cells = cells_of(saved.items[: self.usable(saved.items, items)])
                if cells > held:
                    candidates.append((cells, saved))
        # The most useful first; one that turns out damaged is removed and the next is tried.
        for cells, saved in sorted(candidates, key=lambda c: -c[0]):
            started = time.perf_counter()
            buffer = saved.read()
            if buffer is None:
                continue
            if not slot.load(saved.items, buffer, saved.name):
                refused = "llama.cpp refused it (another layout or size)"
                if saved.head is not None:
                    self.cache.discard(saved.head.path, refused)
                else:
                    log.warning("KV state %s not loaded: llama.cpp refused it", saved.name)
                continue
            ms = (time.perf_counter() - started) * 1000
            log.info("restored KV state %s: %d cells in %.0f ms", saved.label, cells, ms)
            return Restored(saved.name, cells, ms)
        return None

    def _saved(self, name: str) -> _Saved | None:
        """The newest state saved under `name`: one still being written (a settle a moment
        ago: the file on disk is older) or the file."""
        pending = self.cache.pending(name)
        if pending is not None:
            items, buffer = pending
            return _Saved(name, f"{name} (being written)", items, lambda: buffer, None)
        head = self.cache.head(name)
        if head is None:
            return None
        cache = self.cache
        return _Saved(name, head.path.name, head.items, lambda: cache.read(head), head)

    def save(self, slot: KvSlot, name: str) -> Future[Path | None] | None:
        """Copy the slot's state out (here, on the owner thread) and write it in the
        background under `name`; None when saving is off or the slot holds nothing."""
        if not self.enabled or not slot.items:
            return None
        items, buffer = slot.snapshot()
        return self.cache.save(name, items, buffer)

    def setup_saved(self, name: str) -> bool:
        if name not in self._saved_setups and self.cache.exists(name):
            self._saved_setups.add(name)
        return name in self._saved_setups

    def save_setup(self, slot: KvSlot, name: str) -> None:
        """Save the slot as the setup's state: called when it holds exactly the setup."""
        if self.enabled and self.save(slot, name) is not None:
            self._saved_setups.add(name)
