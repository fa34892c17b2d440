"""The settings a character or a conversation sets over the model profile (`ChatSettings`).

One row per character (by card key: cards get edited and the settings stay) and per
conversation (deleted with it), each the settings as JSON. No row reads as the defaults.
"""

from __future__ import annotations

from pydantic import ValidationError

from kotonia_tui.domain import ChatSettings, utcnow
from kotonia_tui.store.codec import ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError


def _read(db: Db, what: str, row_text: str | None) -> ChatSettings:
    if row_text is None:
        return ChatSettings()
    try:
        return ChatSettings.model_validate_json(row_text)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise StoreError(
            f"{db.path}: the settings of {what} cannot be read ({field}: {first['msg']})"
        ) from exc


def character_settings(db: Db, character_key: str) -> ChatSettings:
    row = db.select_one(
        "SELECT settings FROM character_settings WHERE character_key = ?", (character_key,)
    )
    return _read(db, f"character {character_key}", row["settings"] if row else None)


def conversation_settings(db: Db, conv_id: int) -> ChatSettings:
    row = db.select_one(
        "SELECT settings FROM conversation_settings WHERE conversation_id = ?", (conv_id,)
    )
    return _read(db, f"conversation {conv_id}", row["settings"] if row else None)


def set_character_settings(db: Db, character_key: str, settings: ChatSettings) -> None:
    with db.write():
        db.execute(
            """INSERT INTO character_settings (character_key, settings, updated_at)
               VALUES (?, ?, ?) ON CONFLICT (character_key) DO UPDATE SET
               settings = excluded.settings, updated_at = excluded.updated_at""",
            (character_key, settings.model_dump_json(), ts_to_db(utcnow())),
        )


def set_conversation_settings(db: Db, conv_id: int, settings: ChatSettings) -> None:
    with db.write():
        if db.select_one("SELECT 1 AS found FROM conversations WHERE id = ?", (conv_id,)) is None:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
        db.execute(
            """INSERT INTO conversation_settings (conversation_id, settings, updated_at)
               VALUES (?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET
               settings = excluded.settings, updated_at = excluded.updated_at""",
            (conv_id, settings.model_dump_json(), ts_to_db(utcnow())),
        )
