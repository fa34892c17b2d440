"""Conversations the tests and benchmarks put straight into a store (no model calls)."""

from __future__ import annotations

from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.store import Store
from tests.cards import SHORT_CARD_KEY


def seed_conversation(store: Store, count: int, *, token_key: str | None = None) -> list[int]:
    """A conversation with Wren of `count` alternating messages; returns their ids."""
    store.upsert_character(SHORT_CARD_KEY, "Wren", "test", "")
    conv = store.create_conversation(
        Conversation(character_key=SHORT_CARD_KEY, character_name="Wren", persona_name="User")
    )
    assert conv.id is not None
    msgs = [
        Message(
            role=Role.USER if i % 2 == 0 else Role.CHARACTER,
            speaker="User" if i % 2 == 0 else "Wren",
            text=f"Line {i} about the lamps.",
            token_counts={token_key: 9} if token_key else {},
        )
        for i in range(count)
    ]
    return store.add_messages(conv.id, msgs)
