"""Fixtures for store tests: a real SQLite file under tmp_path, never a mock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kotonia_tui.domain import Conversation, Message, Role, StoredConversation
from kotonia_tui.store import Store

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
