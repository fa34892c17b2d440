"""Closing the store while another thread reads it: the app closes while a prompt for a turn
it is stopping may still be read on a worker thread. sqlite3 closed under a running statement
crashes the whole process (Python 3.11 dereferences the closed handle); the close waits for
the statement, and what comes after it is a StoreError naming the file."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kotonia_tui.store import Store, StoreError

from .conftest import make_messages, new_conversation


def _until_closed(read: Callable[[], int], counts: list[int], errors: list[Exception]) -> None:
    """Call `read` until the store says it is closed, keeping what each call counted."""
    try:
        while True:
            counts.append(read())
    except StoreError as exc:
        errors.append(exc)


def test_a_reader_on_another_thread_gets_an_error_not_a_crash(db_path: Path) -> None:
    with Store.open(db_path) as store:
        conv_id = new_conversation(store).id
        store.add_messages(conv_id, make_messages(3000))
    for attempt in range(12):  # the race is in the timing: close at several moments of a read
        store = Store.open(db_path)
        reads: list[int] = []
        errors: list[Exception] = []
        read = functools.partial(lambda s: len(s.recent_messages(conv_id, 3000)), store)
        reader = threading.Thread(target=_until_closed, args=(read, reads, errors))
        reader.start()
        time.sleep(0.002 * attempt)
        store.close()
        reader.join(timeout=30)
        assert not reader.is_alive()
        assert all(n == 3000 for n in reads)  # every read that ran saw the whole chat
        (error,) = errors
        assert str(error) == f"{db_path}: the database was closed"


def test_a_closed_store_says_so_for_reads_and_writes(db_path: Path) -> None:
    store = Store.open(db_path)
    conv_id = new_conversation(store).id
    store.close()
    with pytest.raises(StoreError, match="the database was closed"):
        store.list_conversations()
    with pytest.raises(StoreError, match="the database was closed"):
        store.add_messages(conv_id, make_messages(1))
    with pytest.raises(StoreError, match="the database was closed"):
        store.delete_conversation(conv_id)


def test_a_vector_search_on_another_thread_ends_with_an_error_not_a_crash(db_path: Path) -> None:
    # Semantic recall ranks on a second connection (apsw, store/vectors.py), off the event loop.
    key = "tiny.gguf:1:abc:4"
    with Store.open(db_path) as store:
        conv_id = new_conversation(store).id
        store.add_messages(conv_id, make_messages(400))
        pending = store.vectors_pending(key, 1000)
        store.put_vectors(key, [(p, [1.0, float(i % 7), 0.5, 0.0]) for i, p in enumerate(pending)])
    for attempt in range(6):
        store = Store.open(db_path)
        counts: list[int] = []
        errors: list[Exception] = []
        search = functools.partial(
            lambda s: len(s.similar(conv_id, key, [1.0, 0.0, 0.0, 0.0], 10**9, 24)), store
        )
        searcher = threading.Thread(target=_until_closed, args=(search, counts, errors))
        searcher.start()
        deadline = time.monotonic() + 30
        while not counts and not errors and time.monotonic() < deadline:
            time.sleep(0.001)  # the first search loads sqlite-vec: close during the later ones
        time.sleep(0.005 * attempt)
        store.close()
        searcher.join(timeout=30)
        assert not searcher.is_alive()
        assert counts and all(n == 24 for n in counts)  # every search that ran was whole
        (error,) = errors
        assert "the database was closed" in str(error)
