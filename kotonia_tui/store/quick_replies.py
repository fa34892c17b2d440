"""Quick replies: the player's own snippets, global or one character's, in the order shown."""

from __future__ import annotations

import sqlite3

from kotonia_tui.domain import QuickReply, StoredQuickReply, utcnow
from kotonia_tui.store.codec import ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError


def _from_row(row: sqlite3.Row) -> StoredQuickReply:
    return StoredQuickReply(
        id=row["id"],
        character_key=row["character_key"],
        label=row["label"],
        text=row["text"],
        send=bool(row["send"]),
        position=row["position"],
    )


def quick_replies(db: Db, character_keys: tuple[str, ...] = ()) -> list[StoredQuickReply]:
    """The global set, then each named character's own, each in its order."""
    rows = db.select(
        "SELECT * FROM quick_replies WHERE character_key IS NULL ORDER BY position, id"
    )
    for key in character_keys:
        rows += db.select(
            "SELECT * FROM quick_replies WHERE character_key = ? ORDER BY position, id", (key,)
        )
    return [_from_row(row) for row in rows]


def _check(reply: QuickReply) -> None:
    if not reply.label.strip():
        raise StoreError("a quick reply needs a label: it is empty")
    if not reply.text.strip():
        raise StoreError(f"quick reply {reply.label!r}: its text is empty")


def add_quick_reply(db: Db, reply: QuickReply) -> StoredQuickReply:
    _check(reply)
    with db.write():
        new_id = db.insert(
            "quick_replies",
            {
                "character_key": reply.character_key,
                "label": reply.label,
                "text": reply.text,
                "send": int(reply.send),
                "position": reply.position,
                "created_at": ts_to_db(utcnow()),
            },
        )
        return StoredQuickReply(**{**reply.model_dump(), "id": new_id})


def update_quick_reply(db: Db, reply: StoredQuickReply) -> StoredQuickReply:
    """Its label, text, whether it is sent, and whose it is (global or a character's)."""
    _check(reply)
    with db.write():
        cursor = db.execute(
            """UPDATE quick_replies SET character_key = ?, label = ?, text = ?, send = ?,
                   position = ? WHERE id = ?""",
            (
                reply.character_key,
                reply.label,
                reply.text,
                int(reply.send),
                reply.position,
                reply.id,
            ),
        )
        if cursor.rowcount == 0:
            raise NotFoundError(f"quick reply {reply.id} does not exist in {db.path}")
    return reply


def delete_quick_reply(db: Db, reply_id: int) -> None:
    with db.write():
        cursor = db.execute("DELETE FROM quick_replies WHERE id = ?", (reply_id,))
        if cursor.rowcount == 0:
            raise NotFoundError(f"quick reply {reply_id} does not exist in {db.path}")
