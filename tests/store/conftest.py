"""Fixtures for store tests: a real SQLite file under tmp_path, never a mock."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kotonia_tui.domain import Conversation, Message, Role, StoredConversation
from kotonia_tui.store import Store
from kotonia_tui.store.connection import Db
from kotonia_tui.store.migrations import STEPS, migrate

T0 = datetime(2026, 11, 29, 19, 30, tzinfo=UTC)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "kotonia.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(db_path) as opened:
        yield opened


def new_conversation(store: Store, key: str = "sera") -> StoredConversation:
    return store.create_conversation(
        Conversation(
            character_key=key,
            character_name="Seraphina",
            persona_name="Ann",
            persona_description="A traveller",
            title="In the glade",
            created_at=T0,
            updated_at=T0,
        )
    )


def make_messages(n: int, start: int = 0) -> list[Message]:
    """Alternating user / character lines with increasing timestamps."""
    return [
        Message(
            role=Role.USER if i % 2 == 0 else Role.CHARACTER,
            speaker="Ann" if i % 2 == 0 else "Seraphina",
            text=f"line {i}: " + "words " * 10,
            created_at=T0 + timedelta(seconds=i),
        )
        for i in range(start, start + n)
    ]


def stored_before(path: Path, step: Callable[[Db], None], texts: list[str]) -> None:
    """A file at the version just before `step`, holding conversation 1 with Ann's `texts`
    (ids 1, 2, ...), written as that version's app wrote them."""
    db = Db.connect(path)
    db.configure()
    before = STEPS.index(step)  # the version the step starts from
    assert migrate(db, target=before) == before
    db.close()
    raw = sqlite3.connect(path)
    ts = "2026-11-01T10:00:00.000000+00:00"
    raw.execute(
        "INSERT INTO conversations (id, character_key, character_name, persona_name, "
        "created_at, updated_at, message_count) VALUES (1, 'sera', 'Seraphina', 'Ann', ?, ?, ?)",
        (ts, ts, len(texts)),
    )
    raw.executemany(
        "INSERT INTO messages (id, conversation_id, role, speaker, text, created_at) "
        "VALUES (?, 1, 'user', 'Ann', ?, ?)",
        [(i, text, ts) for i, text in enumerate(texts, start=1)],
    )
    raw.commit()
    raw.close()
