"""Per-turn model-call figures (KV reuse, timings), kept for `--stats` and the inspector."""

from __future__ import annotations

import sqlite3

from kotonia_tui.domain import TurnMetrics, utcnow
from kotonia_tui.store.codec import ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError
from kotonia_tui.store.records import TurnMetricsRecord

_FIELDS = tuple(TurnMetrics.model_fields)


def add_turn_metrics(db: Db, conv_id: int, message_id: int | None, metrics: TurnMetrics) -> int:
    row: dict[str, object] = {
        "conversation_id": conv_id,
        "message_id": message_id,
        "created_at": ts_to_db(utcnow()),
        **metrics.model_dump(),
    }
    with db.write():
        try:
            return db.insert("turn_metrics", row)
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(
                f"conversation {conv_id} or message {message_id} does not exist in {db.path}"
            ) from exc


def _record(row: sqlite3.Row) -> TurnMetricsRecord:
    return TurnMetricsRecord(
        id=row["id"],
        conversation_id=row["conversation_id"],
        message_id=row["message_id"],
        created_at=ts_from_db(row["created_at"]),
        metrics=TurnMetrics(**{name: row[name] for name in _FIELDS}),
    )


def turn_metrics(db: Db, conv_id: int, limit: int) -> list[TurnMetricsRecord]:
    """The last `limit` calls, oldest first."""
    if limit < 0:
        raise StoreError(f"limit must be 0 or more, got {limit}")
    rows = db.select(
        "SELECT * FROM turn_metrics WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
        (conv_id, limit),
    )
    return [_record(row) for row in reversed(rows)]


def last_turn_metrics(db: Db, conv_id: int) -> TurnMetrics | None:
    found = turn_metrics(db, conv_id, 1)
    return found[0].metrics if found else None
