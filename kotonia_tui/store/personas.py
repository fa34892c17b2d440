"""Personas (who the user plays) and which one each conversation is played as.

A conversation keeps the persona's name and description on its own row as well as the link: the
turn reads one row, an export writes the name it was played under, and a conversation whose
persona is deleted goes on as it was. Editing a persona updates the rows of the conversations
linked to it in the same transaction, so they follow the change.

Names are unique ignoring case (`casefold`, which SQLite's NOCASE does not do beyond ASCII), so
`--persona ann` finds Ann and an import that names "ann" does not create a second one.
"""

from __future__ import annotations

import sqlite3

from kotonia_tui.domain import StoredConversation, StoredPersona, utcnow
from kotonia_tui.store import conversations
from kotonia_tui.store.codec import ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError


def persona_from_row(row: sqlite3.Row) -> StoredPersona:
    return StoredPersona(
        id=row["id"],
        name=row["name"],
        description=row["description"],
        image=row["image"],
        is_default=bool(row["is_default"]),
        created_at=ts_from_db(row["created_at"]),
        updated_at=ts_from_db(row["updated_at"]),
    )


def list_personas(db: Db) -> list[StoredPersona]:
    """Every persona, by name (ignoring case)."""
    personas = [persona_from_row(row) for row in db.select("SELECT * FROM personas")]
    return sorted(personas, key=lambda p: (p.name.casefold(), p.id))


def get_persona(db: Db, persona_id: int) -> StoredPersona:
    row = db.select_one("SELECT * FROM personas WHERE id = ?", (persona_id,))
    if row is None:
        raise NotFoundError(f"persona {persona_id} does not exist in {db.path}")
    return persona_from_row(row)


def find_persona(db: Db, name: str) -> StoredPersona | None:
    """The persona with this name, ignoring case and surrounding space."""
    wanted = name.strip().casefold()
    for persona in list_personas(db):
        if persona.name.casefold() == wanted:
            return persona
    return None


def default_persona(db: Db) -> StoredPersona | None:
    row = db.select_one("SELECT * FROM personas WHERE is_default = 1")
    return persona_from_row(row) if row is not None else None


def _check_name_free(db: Db, name: str, persona_id: int | None) -> None:
    found = find_persona(db, name)
    if found is not None and found.id != persona_id:
        raise StoreError(f"a persona named {found.name!r} already exists (persona {found.id})")


def _check_image(db: Db, image: str | None) -> None:
    if image is not None and db.select_one("SELECT 1 FROM images WHERE hash = ?", (image,)) is None:
        raise StoreError(f"persona picture {image} is not stored; put_image first")


def create_persona(
    db: Db, name: str, description: str = "", image: str | None = None, *, default: bool = False
) -> StoredPersona:
    now = ts_to_db(utcnow())
    with db.write():
        _check_name_free(db, name, None)
        _check_image(db, image)
        if default:
            db.execute("UPDATE personas SET is_default = 0 WHERE is_default = 1")
        new_id = db.insert(
            "personas",
            {
                "name": name,
                "description": description,
                "image": image,
                "is_default": int(default),
                "created_at": now,
                "updated_at": now,
            },
        )
        return get_persona(db, new_id)


def update_persona(
    db: Db, persona_id: int, name: str, description: str, image: str | None
) -> StoredPersona:
    """Change a persona; the conversations played as it take the new name and description."""
    with db.write():
        get_persona(db, persona_id)
        _check_name_free(db, name, persona_id)
        _check_image(db, image)
        db.execute(
            """UPDATE personas SET name = ?, description = ?, image = ?, updated_at = ?
               WHERE id = ?""",
            (name, description, image, ts_to_db(utcnow()), persona_id),
        )
        db.execute(
            """UPDATE conversations SET persona_name = ?, persona_description = ?
               WHERE persona_id = ?""",
            (name, description, persona_id),
        )
        return get_persona(db, persona_id)


def delete_persona(db: Db, persona_id: int) -> None:
    """Delete a persona that is not the default; its conversations keep its name and
    description on their rows and go on as they were."""
    with db.write():
        persona = get_persona(db, persona_id)
        if persona.is_default:
            raise StoreError(
                f"{persona.name!r} is the default persona: make another one the default first"
            )
        db.execute("DELETE FROM personas WHERE id = ?", (persona_id,))


def set_default_persona(db: Db, persona_id: int) -> StoredPersona:
    with db.write():
        get_persona(db, persona_id)
        db.execute("UPDATE personas SET is_default = 0 WHERE is_default = 1")
        db.execute("UPDATE personas SET is_default = 1 WHERE id = ?", (persona_id,))
        return get_persona(db, persona_id)


def set_conversation_persona(db: Db, conv_id: int, persona_id: int) -> StoredConversation:
    """Play a conversation as another persona from now on (its rows take its name)."""
    with db.write():
        persona = get_persona(db, persona_id)
        cursor = db.execute(
            """UPDATE conversations SET persona_id = ?, persona_name = ?, persona_description = ?
               WHERE id = ? AND deleted_at IS NULL""",
            (persona.id, persona.name, persona.description, conv_id),
        )
        if cursor.rowcount == 0:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
        return conversations.get_conversation(db, conv_id)


def persona_conversations(db: Db, persona_id: int) -> int:
    """How many conversations are played as this persona (said before it changes)."""
    row = db.select_one(
        "SELECT count(*) AS n FROM conversations WHERE persona_id = ? AND deleted_at IS NULL",
        (persona_id,),
    )
    return int(row["n"]) if row is not None else 0
