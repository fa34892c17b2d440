"""Per-turn reads cost the same at 100 messages and at 20,000: the DESIGN's "bounded reads"."""

from __future__ import annotations

import time
from pathlib import Path

from kotonia_tui.domain import Alternative, Chapter, StoredMessage, Synopsis
from kotonia_tui.store import MemoryState, Store

from .conftest import make_messages, new_conversation

WINDOW = 40


def _build(store: Store, n: int) -> int:
    conv = new_conversation(store)
    msgs = [
        m.model_copy(update={"token_counts": {"gemma": 12, "glm": 10}}) for m in make_messages(n)
    ]
    for i in range(n):
        if (n - i) % 10 == 1:  # every tenth reply was regenerated once (same spots near the end)
            alts = [Alternative(text="first take"), Alternative(text=msgs[i].text)]
            msgs[i] = msgs[i].model_copy(update={"alternatives": alts, "chosen": 1})
    started = time.perf_counter()
    ids = store.add_messages(conv.id, msgs)
    print(f"\nbulk insert of {n} messages: {time.perf_counter() - started:.2f} s")
    # The memory a long story would carry: a few live chapters, folded ones, one synopsis.
    for k in range(6):
        store.add_chapter(
            Chapter(
                conversation_id=conv.id,
                first_message_id=ids[k],
                last_message_id=ids[k],
                text=f"chapter {k}",
            )
        )
    old = [c.id for c in store.chapters(conv.id)[:3]]
    store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=1, text="so far", through_message_id=ids[2]),
        old,
    )
    store.set_memory_state(MemoryState(conversation_id=conv.id, verbatim_start_id=ids[-WINDOW]))
    return conv.id


def _turn_reads(store: Store, conv_id: int) -> tuple[int, list[StoredMessage]]:
    """What the chat service reads for one turn, counted in rows."""
    before = store.rows_read
    state = store.memory_state(conv_id)
    store.current_synopsis(conv_id)
    store.chapters(conv_id)
    assert state.verbatim_start_id is not None
    window = store.messages_from(conv_id, state.verbatim_start_id, WINDOW, model_key="gemma")
    store.recent_messages(conv_id, WINDOW, model_key="gemma")
    store.last_turn_metrics(conv_id)
    store.message_count(conv_id)
    return store.rows_read - before, window


def test_rows_read_per_turn_do_not_grow_with_the_conversation(tmp_path: Path) -> None:
    counts = {}
    for n in (100, 20_000):
        with Store.open(tmp_path / f"{n}.sqlite3") as store:
            conv_id = _build(store, n)
            rows, window = _turn_reads(store, conv_id)
            assert len(window) == WINDOW
            assert all(m.token_counts == {"gemma": 12} for m in window)
            assert store.message_count(conv_id) == n
            counts[n] = rows
    print(f"rows read per turn: {counts[100]} at 100 messages, {counts[20_000]} at 20,000")
    assert counts[100] == counts[20_000]
    # Two 40-message windows with one token count each, their few alternatives, and a handful
    # of memory rows: a constant, whatever the length of the story.
    assert counts[20_000] <= 4 * WINDOW + 40


def test_every_per_turn_select_is_an_index_search(tmp_path: Path) -> None:
    """No per-turn query scans a table or sorts in a temporary b-tree (checked on the real plan)."""
    with Store.open(tmp_path / "plan.sqlite3") as store:
        conv_id = _build(store, 300)
        conn = store._db.conn  # the test inspects the store's own connection, read-only
        seen: list[str] = []
        conn.set_trace_callback(seen.append)  # the SQL as executed, parameters filled in
        _turn_reads(store, conv_id)
        store.next_fold_due()
        conn.set_trace_callback(None)
        selects = [q for q in seen if q.lstrip().upper().startswith("SELECT")]
        assert len(selects) >= 8
        for query in selects:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query)]
            assert all(step.startswith("SEARCH") for step in plan), (query, plan)
