"""Closing the store while another thread reads it: the app closes while a prompt for a turn
it is stopping may still be read on a worker thread. sqlite3 closed under a running statement
crashes the whole process (Python 3.11 dereferences the closed handle); the close waits for
the statement, and what comes after it is a StoreError naming the file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kotonia_tui.store import Store, StoreError

from .conftest import make_messages, new_conversation


def _read_until_closed(
    store: Store, conv_id: int, reads: list[int], errors: list[Exception]
) -> None:
    try:
        while True:
            reads.append(len(store.recent_messages(conv_id, 3000)))
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
        reader = threading.Thread(target=_read_until_closed, args=(store, conv_id, reads, errors))
        reader.start()
        time.sleep(0.002 * attempt)
        store.close()
        reader.join(timeout=30)
        assert not reader.is_alive()
        assert all(n == 3000 for n in reads)  # every read that ran saw the whole chat
        (error,) = errors
        assert str(error) == f"{db_path}: the database was closed"


def test_a_closed_store_says_so(db_path: Path) -> None:
    store = Store.open(db_path)
    store.close()
    with pytest.raises(StoreError, match="the database was closed"):
        store.list_conversations()
