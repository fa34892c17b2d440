"""The store layer: the only place in the app that speaks SQL (SQLite through sqlite-utils).

The errors load at once (every command names them); the store itself when first used, so a
command that never opens the database does not load sqlite-utils.
"""

from typing import TYPE_CHECKING

from kotonia_tui.lazy import lazy_exports
from kotonia_tui.store.errors import NotFoundError, StoreError

if TYPE_CHECKING:
    from kotonia_tui.store.migrations import SCHEMA_VERSION
    from kotonia_tui.store.records import (
        CharacterSeen,
        MemoryRows,
        MemoryState,
        Retirement,
        TurnMetricsRecord,
    )
    from kotonia_tui.store.search import SearchHit, SearchMode, SearchOrder
    from kotonia_tui.store.store import Store
    from kotonia_tui.store.vectors import PendingText, SimilarHit, VectorCounts

__getattr__ = lazy_exports(
    __name__,
    {
        "SCHEMA_VERSION": "kotonia_tui.store.migrations",
        "CharacterSeen": "kotonia_tui.store.records",
        "MemoryRows": "kotonia_tui.store.records",
        "MemoryState": "kotonia_tui.store.records",
        "Retirement": "kotonia_tui.store.records",
        "TurnMetricsRecord": "kotonia_tui.store.records",
        "SearchHit": "kotonia_tui.store.search",
        "SearchMode": "kotonia_tui.store.search",
        "SearchOrder": "kotonia_tui.store.search",
        "Store": "kotonia_tui.store.store",
        "PendingText": "kotonia_tui.store.vectors",
        "SimilarHit": "kotonia_tui.store.vectors",
        "VectorCounts": "kotonia_tui.store.vectors",
    },
)

__all__ = [
    "SCHEMA_VERSION",
    "CharacterSeen",
    "MemoryRows",
    "MemoryState",
    "NotFoundError",
    "PendingText",
    "Retirement",
    "SearchHit",
    "SearchMode",
    "SearchOrder",
    "SimilarHit",
    "Store",
    "StoreError",
    "TurnMetricsRecord",
    "VectorCounts",
]
