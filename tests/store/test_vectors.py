"""Message vectors on the real store with the real sqlite-vec: kept in step with the messages,
never stale, never mixed between models, and a store that works without the extension.

The vectors here are written by hand (a store holds whatever an embedding model gives it), so
a test can say exactly which message is nearest."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlite_vec

from kotonia_tui.domain import Alternative, Message, Role
from kotonia_tui.store import SCHEMA_VERSION, Store
from kotonia_tui.store.migrations import _message_vectors

from .conftest import new_conversation, stored_before

KEY = "tiny.gguf:1:abc:4"
OTHER_KEY = "other.gguf:2:def:3"
AXES = {"north": [1.0, 0.0, 0.0, 0.0], "east": [0.0, 1.0, 0.0, 0.0], "up": [0.0, 0.0, 1.0, 0.0]}


def _say(store: Store, conv_id: int, *texts: str) -> list[int]:
    return [
        store.add_message(
            Message(conversation_id=conv_id, role=Role.USER, speaker="Ann", text=text)
        ).id
        for text in texts
    ]


def _embed_all(store: Store, key: str = KEY, vectors: dict[str, list[float]] = AXES) -> int:
    """Give every pending message the vector named by its text's first word."""
    pending = store.vectors_pending(key, 1000)
    return store.put_vectors(key, [(p, vectors[p.text.split()[0]]) for p in pending])


def _nearest(store: Store, conv_id: int, query: list[float], key: str = KEY) -> list[int]:
    return [hit.message_id for hit in store.similar(conv_id, key, query, 10**9, 10)]


def test_vectors_are_ranked_nearest_first_within_one_conversation(store: Store) -> None:
    conv = new_conversation(store)
    other = new_conversation(store)
    north, east, up = _say(store, conv.id, "north wind", "east wind", "up high")
    (elsewhere,) = _say(store, other.id, "north too")
    assert store.vector_counts(KEY).pending == 4
    assert _embed_all(store) == 4
    assert store.vector_counts(KEY).stored == 4 and store.vector_counts(KEY).pending == 0

    hits = store.similar(conv.id, KEY, [0.9, 0.1, 0.0, 0.0], 10**9, 10)
    assert [h.message_id for h in hits] == [north, east, up]  # never the other conversation's
    assert hits[0].similarity == pytest.approx(0.9939, abs=1e-3)
    assert hits[2].similarity == pytest.approx(0.0, abs=1e-6)
    # Older than a message only, and at most `limit`; equally far, the newer first.
    assert [h.message_id for h in store.similar(conv.id, KEY, AXES["up"], up, 10)] == [east, north]
    assert len(store.similar(conv.id, KEY, AXES["up"], 10**9, 1)) == 1
    assert elsewhere not in _nearest(store, conv.id, AXES["north"])


def test_an_edit_a_chosen_version_and_a_delete_leave_no_stale_vector(store: Store) -> None:
    conv = new_conversation(store)
    edited, deleted = _say(store, conv.id, "north star", "east gate")
    reply = store.add_message(
        Message(conversation_id=conv.id, role=Role.CHARACTER, speaker="Sera", text="up there")
    )
    _embed_all(store)
    assert store.vector_counts(KEY).stored == 3

    store.update_message_text(edited, "east star", [])
    store.add_alternative(reply.id, Alternative(text="north again"), choose=True)
    store.delete_message(deleted)
    # The changed texts wait for new vectors; the deleted message's vector is gone.
    assert store.vector_counts(KEY).stored == 0
    assert sorted(p.message_id for p in store.vectors_pending(KEY, 10)) == [edited, reply.id]
    assert _nearest(store, conv.id, AXES["north"]) == []

    _embed_all(store)
    assert _nearest(store, conv.id, AXES["north"])[0] == reply.id  # its new text's vector
    store.choose_alternative(reply.id, 0)  # back to "up there"
    assert store.vectors_pending(KEY, 10)[0].message_id == reply.id
    assert reply.id not in _nearest(store, conv.id, AXES["north"])


def test_a_vector_of_a_text_changed_while_it_was_computed_is_not_stored(store: Store) -> None:
    conv = new_conversation(store)
    (msg,) = _say(store, conv.id, "north light")
    (pending,) = store.vectors_pending(KEY, 10)
    store.update_message_text(msg, "east light", [])  # the worker was still embedding
    assert store.put_vectors(KEY, [(pending, AXES["north"])]) == 0
    assert store.vector_counts(KEY).stored == 0 and store.vector_counts(KEY).pending == 1


def test_two_models_never_mix_even_with_another_dimension(store: Store) -> None:
    conv = new_conversation(store)
    north, east = _say(store, conv.id, "north", "east")
    _embed_all(store)
    assert store.vector_counts(OTHER_KEY).pending == 2  # the new model starts from nothing
    store.put_vectors(
        OTHER_KEY, [(p, [0.0, 0.0, 1.0]) for p in store.vectors_pending(OTHER_KEY, 10)]
    )
    assert _nearest(store, conv.id, AXES["north"]) == [north, east]
    assert [
        h.similarity for h in store.similar(conv.id, OTHER_KEY, [0.0, 0.0, 1.0], 10**9, 10)
    ] == [
        pytest.approx(1.0),
        pytest.approx(1.0),
    ]
    assert store.vector_counts(KEY).stored == 2 == store.vector_counts(OTHER_KEY).stored


def test_without_the_extension_the_store_opens_and_says_why(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The extension file cannot be loaded (as on a platform sqlite-vec has no build for).
    monkeypatch.setattr(sqlite_vec, "loadable_path", lambda: str(tmp_path / "no-vec"))
    with Store.open(db_path) as store:
        conv = new_conversation(store)
        (msg,) = _say(store, conv.id, "north")
        reason = store.vector_search_unavailable()
        assert reason is not None and reason.startswith("sqlite-vec cannot be loaded (")
        assert "no-vec" in reason and "\n" not in reason
        # The vectors are kept without the extension (plain SQL); only ranking needs it.
        assert store.put_vectors(KEY, [(store.vectors_pending(KEY, 1)[0], AXES["north"])]) == 1
        assert store.similar(conv.id, KEY, AXES["north"], 10**9, 5) == []
        assert [h.message_id for h in store.recall(conv.id, "north", 10**9, 5)] == [msg]
        store.delete_message(msg)
        assert store.vector_counts(KEY).stored == 0
        assert store.integrity_check() == "ok"


def test_the_vectors_step_keeps_earlier_data_and_embeds_nothing_itself(tmp_path: Path) -> None:
    path = tmp_path / "before.sqlite3"
    stored_before(path, _message_vectors, ["north of the old lighthouse", "east gate"])
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [m.text for m in store.recent_messages(1, 10)] == [
            "north of the old lighthouse",
            "east gate",
        ]
        assert [h.message_id for h in store.recall(1, "lighthouse", 10**9, 5)] == [1]
        counts = store.vector_counts(KEY)
        assert (counts.stored, counts.pending) == (0, 2)  # the backfill's work, not the step's
        _embed_all(store)
        assert _nearest(store, 1, AXES["east"])[0] == 2
        store.update_message_text(1, "up the old lighthouse", [])
        assert store.vector_counts(KEY).pending == 1
        assert store.integrity_check() == "ok"
