"""Personas in the database: the migration from version 3, names, the default, conversations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kotonia_tui.domain import Conversation
from kotonia_tui.store import Store, StoreError
from kotonia_tui.store.connection import Db
from kotonia_tui.store.migrations import STEPS, migrate

from .conftest import T0, new_conversation


def _write_v3_data(path: Path) -> None:
    """Conversations as version 3 wrote them: the persona only as a name on each row."""
    db = Db.connect(path)
    db.configure()
    assert migrate(db, target=3) == 3
    db.close()
    raw = sqlite3.connect(path)
    rows = [
        (1, "Ann", "A traveller", "2026-11-01T10:00:00.000000+00:00"),
        (2, "ann", "A traveller who stayed", "2026-11-03T10:00:00.000000+00:00"),
        (3, "Bob", "", "2026-11-02T10:00:00.000000+00:00"),
        (4, "", "", "2026-11-02T10:00:00.000000+00:00"),
    ]
    for conv_id, name, description, when in rows:
        raw.execute(
            "INSERT INTO conversations (id, character_key, character_name, persona_name, "
            "persona_description, created_at, updated_at) VALUES (?, 'sera', 'Seraphina', ?, ?, "
            "?, ?)",
            (conv_id, name, description, when, when),
        )
    raw.commit()
    raw.close()


def test_the_personas_step_keeps_version_3_data_and_makes_a_persona_per_name(tmp_path):
    path = tmp_path / "v3.sqlite3"
    _write_v3_data(path)
    with Store.open(path) as store:
        assert store.schema_version == len(STEPS)
        personas = store.personas()
        # "Ann" and "ann" are one persona: the newest conversation's spelling and description.
        assert [(p.name, p.description) for p in personas] == [
            ("ann", "A traveller who stayed"),
            ("Bob", ""),
        ]
        ann, bob = personas
        assert [store.get_conversation(i).persona_id for i in (1, 2, 3, 4)] == [
            ann.id,
            ann.id,
            bob.id,
            None,
        ]
        # Each conversation still says who it was played as, as before.
        assert store.get_conversation(1).persona_name == "Ann"
        assert store.default_persona() is None  # the app makes the settings' persona default
        assert store.integrity_check() == "ok"


def test_names_are_unique_ignoring_case_and_the_error_names_the_other(store: Store):
    ann = store.create_persona("Ann", "A traveller")
    with pytest.raises(StoreError, match=r"a persona named 'Ann' already exists \(persona 1\)"):
        store.create_persona("ANN")
    assert store.find_persona("  ann ") == ann
    assert store.find_persona("Éva") is None
    eva = store.create_persona("Éva")
    assert store.find_persona("éVA") == eva  # casefold, beyond ASCII


def test_one_default_and_the_default_cannot_be_deleted(store: Store):
    ann = store.create_persona("Ann", default=True)
    bob = store.create_persona("Bob")
    assert store.default_persona() == ann
    with pytest.raises(StoreError, match="'Ann' is the default persona"):
        store.delete_persona(ann.id)
    store.set_default_persona(bob.id)
    assert store.default_persona().id == bob.id
    assert not store.get_persona(ann.id).is_default
    store.delete_persona(ann.id)
    assert [p.name for p in store.personas()] == ["Bob"]


def test_conversations_follow_their_persona_and_keep_it_when_it_is_deleted(store: Store):
    store.create_persona("Zed", default=True)
    ann = store.create_persona("Ann", "A traveller")
    conv = store.create_conversation(
        Conversation(
            character_key="sera",
            character_name="Seraphina",
            persona_name=ann.name,
            persona_description=ann.description,
            persona_id=ann.id,
            created_at=T0,
            updated_at=T0,
        )
    )
    other = new_conversation(store)  # not linked to any persona
    store.update_persona(ann.id, "Anna", "A traveller from the coast", None)
    assert store.get_conversation(conv.id).persona_name == "Anna"
    assert store.get_conversation(conv.id).persona_description == "A traveller from the coast"
    assert store.get_conversation(other.id).persona_name == "Ann"  # untouched
    assert store.persona_conversations(ann.id) == 1

    store.delete_persona(ann.id)
    kept = store.get_conversation(conv.id)
    assert (kept.persona_id, kept.persona_name) == (None, "Anna")


def test_a_conversation_can_be_played_as_another_persona(store: Store):
    conv = new_conversation(store)
    bob = store.create_persona("Bob", "A fisherman")
    changed = store.set_conversation_persona(conv.id, bob.id)
    assert (changed.persona_id, changed.persona_name, changed.persona_description) == (
        bob.id,
        "Bob",
        "A fisherman",
    )


def test_a_persona_picture_must_be_stored_first(store: Store):
    with pytest.raises(StoreError, match="persona picture abc is not stored"):
        store.create_persona("Ann", image="abc")
    digest = store.put_image(b"\x89PNG fake but stored", "image/png", 2, 2)
    assert store.create_persona("Ann", image=digest).image == digest
