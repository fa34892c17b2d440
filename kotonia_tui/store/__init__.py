"""The store layer: the only place in the app that speaks SQL (SQLite through sqlite-utils)."""

from kotonia_tui.store.errors import NotFoundError, StoreError
from kotonia_tui.store.migrations import SCHEMA_VERSION
from kotonia_tui.store.records import CharacterSeen, MemoryState, TurnMetricsRecord
from kotonia_tui.store.search import SearchHit, SearchMode, SearchOrder
from kotonia_tui.store.store import Store

__all__ = [
    "SCHEMA_VERSION",
    "CharacterSeen",
    "MemoryState",
    "NotFoundError",
    "SearchHit",
    "SearchMode",
    "SearchOrder",
    "Store",
    "StoreError",
    "TurnMetricsRecord",
]
