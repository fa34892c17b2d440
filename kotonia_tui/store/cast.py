"""A group conversation's cast (its cards in a stable order, each muted or not) and how the
group picks who answers.

A conversation with no cast rows is a one-card chat: its card is `conversations.character_key`.
Making it a group writes that card first, so the shared setup of a chat that grows into a group
starts with the card it always had. Positions only grow: a removed member leaves a gap, and the
members after it keep their places (the setup's order never depends on who left).
"""

from __future__ import annotations

import sqlite3

from kotonia_tui.domain import CastMember, GroupCast, ReplyOrder, utcnow
from kotonia_tui.store import conversations
from kotonia_tui.store.codec import ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError


def cast(db: Db, conv_id: int) -> list[CastMember]:
    """The members in their order; a one-card chat's card alone (never muted)."""
    with db.read():
        rows = db.select(
            """SELECT character_key, character_name, position, muted FROM conversation_cast
               WHERE conversation_id = ? ORDER BY position""",
            (conv_id,),
        )
        if rows:
            return [_member(row) for row in rows]
        conv = conversations.get_conversation(db, conv_id)
        return [CastMember(character_key=conv.character_key, character_name=conv.character_name)]


def casts(db: Db) -> dict[int, list[CastMember]]:
    """Every group's members in their order, by conversation id, in one read (a conversation
    list files a group under each of its cards)."""
    with db.read():
        rows = db.select(
            """SELECT conversation_id, character_key, character_name, position, muted
               FROM conversation_cast ORDER BY conversation_id, position"""
        )
    found: dict[int, list[CastMember]] = {}
    for row in rows:
        found.setdefault(row["conversation_id"], []).append(_member(row))
    return found


def _member(row: sqlite3.Row) -> CastMember:
    return CastMember(
        character_key=row["character_key"],
        character_name=row["character_name"],
        position=row["position"],
        muted=bool(row["muted"]),
    )


def is_group(db: Db, conv_id: int) -> bool:
    row = db.select_one(
        "SELECT count(*) AS n FROM conversation_cast WHERE conversation_id = ?", (conv_id,)
    )
    return bool(row is not None and row["n"] > 1)


def add_member(db: Db, conv_id: int, key: str, name: str) -> list[CastMember]:
    """Add a card at the end of the cast (a one-card chat becomes a group, its card first)."""
    with db.write():
        members = cast(db, conv_id)
        if any(m.character_key == key for m in members):
            raise StoreError(f"{name} ({key}) is already in conversation {conv_id}'s cast")
        now = ts_to_db(utcnow())
        rows = db.select(
            "SELECT 1 FROM conversation_cast WHERE conversation_id = ? LIMIT 1", (conv_id,)
        )
        if not rows:  # the one-card chat's own card becomes the first member
            first = members[0]
            _insert(db, conv_id, first.character_key, first.character_name, 0, now)
        top = max(m.position for m in members)
        _insert(db, conv_id, key, name, top + 1, now)
        return cast(db, conv_id)


def set_cast(db: Db, conv_id: int, members: list[tuple[str, str]]) -> list[CastMember]:
    """A new conversation's cast, (key, name) in order; refuses a conversation that has one."""
    keys = [key for key, _name in members]
    if len(set(keys)) != len(keys):
        raise StoreError(f"a card appears twice in the cast: {', '.join(keys)}")
    with db.write():
        conversations.get_conversation(db, conv_id)
        if db.select("SELECT 1 FROM conversation_cast WHERE conversation_id = ?", (conv_id,)):
            raise StoreError(f"conversation {conv_id} already has a cast")
        now = ts_to_db(utcnow())
        for position, (key, name) in enumerate(members):
            _insert(db, conv_id, key, name, position, now)
        return cast(db, conv_id)


def import_cast(db: Db, conv_id: int, group: GroupCast) -> None:
    """An imported group's cast, inside the import's transaction; each member's lines get its
    card key (by the name they are signed with)."""
    members = group.members
    set_cast(db, conv_id, [(key, name) for key, name, _muted in members])
    for key, _name, muted in members:
        if muted:
            set_muted(db, conv_id, key, True)
    for speaker, key in group.speakers.items():
        db.execute(
            """UPDATE messages SET character_key = ?
               WHERE conversation_id = ? AND role = 'character' AND speaker = ?""",
            (key, conv_id, speaker),
        )
    first_key, first_name, _muted = members[0]
    if conversations.get_conversation(db, conv_id).character_key not in {m[0] for m in members}:
        # Filed under the file's character name ("unused" in a SillyTavern group chat): the
        # conversation's own card is the cast's first.
        db.execute(
            "UPDATE conversations SET character_key = ?, character_name = ? WHERE id = ?",
            (first_key, first_name, conv_id),
        )


def _insert(db: Db, conv_id: int, key: str, name: str, position: int, now: str) -> None:
    """One member row, inside the caller's write (which has read the conversation)."""
    db.insert_rows(
        "conversation_cast",
        [
            {
                "conversation_id": conv_id,
                "character_key": key,
                "character_name": name,
                "position": position,
                "muted": 0,
                "added_at": now,
            }
        ],
    )


def remove_member(db: Db, conv_id: int, key: str) -> list[CastMember]:
    """Take a card out of the cast; its replies stay in the story. A group keeps one member
    at least (the conversation's own card is the one it falls back to)."""
    with db.write():
        members = cast(db, conv_id)
        if not any(m.character_key == key for m in members):
            raise NotFoundError(f"{key} is not in conversation {conv_id}'s cast")
        if len(members) == 1:
            raise StoreError(f"{key} is the last member of conversation {conv_id}'s cast")
        db.execute(
            "DELETE FROM conversation_cast WHERE conversation_id = ? AND character_key = ?",
            (conv_id, key),
        )
        left = cast(db, conv_id)
        conv = conversations.get_conversation(db, conv_id)
        if conv.character_key == key:  # the conversation's own card now is the first member
            db.execute(
                "UPDATE conversations SET character_key = ?, character_name = ? WHERE id = ?",
                (left[0].character_key, left[0].character_name, conv_id),
            )
        return left


def set_muted(db: Db, conv_id: int, key: str, muted: bool) -> list[CastMember]:
    with db.write():
        cursor = db.execute(
            """UPDATE conversation_cast SET muted = ?
               WHERE conversation_id = ? AND character_key = ?""",
            (int(muted), conv_id, key),
        )
        if cursor.rowcount == 0:
            raise NotFoundError(f"{key} is not in conversation {conv_id}'s group cast")
        return cast(db, conv_id)


def copy_cast(db: Db, source_id: int, new_id: int) -> None:
    """A branch plays on with the source's cast and reply order (inside its transaction)."""
    db.execute(
        """INSERT INTO conversation_cast
               (conversation_id, character_key, character_name, position, muted, added_at)
           SELECT ?, character_key, character_name, position, muted, added_at
           FROM conversation_cast WHERE conversation_id = ?""",
        (new_id, source_id),
    )
    db.execute(
        """UPDATE conversations SET reply_order =
               (SELECT reply_order FROM conversations WHERE id = ?) WHERE id = ?""",
        (source_id, new_id),
    )


def reply_order(db: Db, conv_id: int) -> ReplyOrder:
    row = db.select_one("SELECT reply_order FROM conversations WHERE id = ?", (conv_id,))
    if row is None:
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
    try:
        return ReplyOrder(row["reply_order"])
    except ValueError as exc:
        raise StoreError(
            f"conversation {conv_id}: reply_order {row['reply_order']!r} is not one of "
            f"{', '.join(o.value for o in ReplyOrder)}"
        ) from exc


def set_reply_order(db: Db, conv_id: int, order: ReplyOrder) -> None:
    with db.write():
        cursor = db.execute(
            "UPDATE conversations SET reply_order = ? WHERE id = ?", (order.value, conv_id)
        )
        if cursor.rowcount == 0:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
