"""Characters seen and conversations: the rows everything else hangs from."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from kotonia_tui.domain import Conversation, StoredConversation, utcnow
from kotonia_tui.store.codec import dict_from_db, json_to_db, stored_as, ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db, is_sqlite_int
from kotonia_tui.store.errors import NotFoundError
from kotonia_tui.store.records import CharacterSeen

_CONVERSATION_COLUMNS = (
    "id, character_key, character_name, persona_name, persona_description, persona_id, title, "
    "created_at, updated_at, message_count, extra"
)


def upsert_character(db: Db, key: str, name: str, card_hash: str, source_path: str) -> None:
    now = ts_to_db(utcnow())
    with db.write():
        db.execute(
            """INSERT INTO characters (key, name, card_hash, source_path, first_seen, last_seen)
               VALUES (?, ?, ?, ?, ?, ?)
               ON CONFLICT (key) DO UPDATE SET name = excluded.name,
                   card_hash = excluded.card_hash, source_path = excluded.source_path,
                   last_seen = excluded.last_seen""",
            (key, name, card_hash, source_path, now, now),
        )


def characters_seen(db: Db) -> list[CharacterSeen]:
    rows = db.select("SELECT * FROM characters ORDER BY last_seen DESC")
    return [
        CharacterSeen(
            key=row["key"],
            name=row["name"],
            card_hash=row["card_hash"],
            source_path=row["source_path"],
            first_seen=ts_from_db(row["first_seen"]),
            last_seen=ts_from_db(row["last_seen"]),
        )
        for row in rows
    ]


def conversation_from_row(row: sqlite3.Row) -> StoredConversation:
    return StoredConversation(
        id=row["id"],
        character_key=row["character_key"],
        character_name=row["character_name"],
        persona_name=row["persona_name"],
        persona_description=row["persona_description"],
        persona_id=row["persona_id"],
        title=row["title"],
        created_at=ts_from_db(row["created_at"]),
        updated_at=ts_from_db(row["updated_at"]),
        message_count=row["message_count"],
        extra=dict_from_db(row["extra"]),
    )


def insert_conversation(db: Db, conv: Conversation, message_count: int = 0) -> StoredConversation:
    """Insert inside the caller's transaction; `message_count` is the store's to keep."""
    row: dict[str, object] = {
        "character_key": conv.character_key,
        "character_name": conv.character_name,
        "persona_name": conv.persona_name,
        "persona_description": conv.persona_description,
        "persona_id": conv.persona_id,
        "title": conv.title,
        "created_at": ts_to_db(conv.created_at),
        "updated_at": ts_to_db(conv.updated_at),
        "message_count": message_count,
        "extra": json_to_db(conv.extra, "conversation extra"),
    }
    new_id = db.insert("conversations", row)
    return stored_as(StoredConversation, conv, id=new_id, message_count=message_count)


def get_conversation(db: Db, conv_id: int) -> StoredConversation:
    if not is_sqlite_int(conv_id):
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
    row = db.select_one(
        f"SELECT {_CONVERSATION_COLUMNS}, deleted_at FROM conversations WHERE id = ?", (conv_id,)
    )
    if row is None:
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
    if row["deleted_at"] is not None:
        raise NotFoundError(f"conversation {conv_id} was deleted")
    with db.decoding(f"conversation {conv_id}"):
        return conversation_from_row(row)


def list_conversations(db: Db, character_key: str | None = None) -> list[StoredConversation]:
    if character_key is None:
        rows = db.select(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE deleted_at IS NULL "
            "ORDER BY updated_at DESC, id DESC"
        )
    else:
        rows = db.select(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "WHERE character_key = ? AND deleted_at IS NULL ORDER BY updated_at DESC, id DESC",
            (character_key,),
        )
    conversations = []
    for row in rows:
        with db.decoding(f"conversation {row['id']}"):
            conversations.append(conversation_from_row(row))
    return conversations


def touch(db: Db, conv_id: int, when: datetime, count_delta: int = 0) -> None:
    """Bump updated_at (never backwards) and message_count, inside the caller's transaction."""
    cursor = db.execute(
        """UPDATE conversations SET updated_at = max(updated_at, ?),
               message_count = message_count + ? WHERE id = ?""",
        (ts_to_db(when), count_delta, conv_id),
    )
    if cursor.rowcount == 0:
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")


def describe_conversation(db: Db, conv_id: int, conv: Conversation) -> None:
    """Set what an import learns only at the end (names, dates, extra), inside its transaction;
    `message_count` is the store's (counted as the messages went in).

    `updated_at` is set as given: the conversation's last activity as the file tells it, not
    the time of the import. The row was inserted before the file was read, with the import's
    time, and `touch` never moves it back: an imported chat two years old read "just now"."""
    cursor = db.execute(
        """UPDATE conversations SET character_key = ?, character_name = ?, persona_name = ?,
               persona_description = ?, persona_id = ?, title = ?, created_at = ?,
               updated_at = ?, extra = ? WHERE id = ?""",
        (
            conv.character_key,
            conv.character_name,
            conv.persona_name,
            conv.persona_description,
            conv.persona_id,
            conv.title,
            ts_to_db(conv.created_at),
            ts_to_db(conv.updated_at),
            json_to_db(conv.extra, "conversation extra"),
            conv_id,
        ),
    )
    if cursor.rowcount == 0:
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")


def rename_conversation(db: Db, conv_id: int, title: str) -> StoredConversation:
    if not is_sqlite_int(conv_id):
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
    with db.write():
        cursor = db.execute(
            "UPDATE conversations SET title = ? WHERE id = ? AND deleted_at IS NULL",
            (title, conv_id),
        )
        if cursor.rowcount == 0:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
        return get_conversation(db, conv_id)


def delete_conversation(db: Db, conv_id: int) -> None:
    """Deletes its messages, chapters, synopses, jobs, metrics and memory state (FK cascade)."""
    with db.write():
        cursor = db.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
        if cursor.rowcount == 0:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")


# Deleted in the app: hidden at once, removed for good when the session ends (until then the
# deletion can be undone). Readers never see a deleted conversation: listings leave it out,
# `get_conversation` says it was deleted, and its fold jobs wait (fold_jobs.claim_next_fold).


def hide_conversation(db: Db, conv_id: int) -> None:
    with db.write():
        cursor = db.execute(
            "UPDATE conversations SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL",
            (ts_to_db(utcnow()), conv_id),
        )
        if cursor.rowcount == 0:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")


def unhide_conversation(db: Db, conv_id: int) -> StoredConversation:
    with db.write():
        cursor = db.execute(
            "UPDATE conversations SET deleted_at = NULL WHERE id = ? AND deleted_at IS NOT NULL",
            (conv_id,),
        )
        if cursor.rowcount == 0:
            raise NotFoundError(
                f"conversation {conv_id} cannot be brought back: it is not among the deleted "
                "ones (another instance of the app may have removed it for good)"
            )
        return get_conversation(db, conv_id)


def purge_hidden(db: Db, conv_ids: list[int] | None = None) -> list[int]:
    """Remove deleted conversations for good (those in `conv_ids`, or all); returns their ids."""
    with db.write():
        rows = db.returning(
            "DELETE FROM conversations WHERE deleted_at IS NOT NULL RETURNING id"
            if conv_ids is None
            else "DELETE FROM conversations WHERE deleted_at IS NOT NULL AND id IN "
            f"({','.join('?' * len(conv_ids))}) RETURNING id",
            conv_ids or (),
        )
    return sorted(row["id"] for row in rows)
