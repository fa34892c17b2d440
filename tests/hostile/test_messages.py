"""Issue 33, item 6: messages that tell the user what is wrong, in one line.

Real `kotonia` subprocesses: standard output on /dev/full, a database with damaged pages,
chats and cards in UTF-16 or UTF-32, an empty KOTONIA_HOME.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kotonia_tui.config import app_dirs

from .corpus import write_big_chat
from .harness import assert_ok, assert_refused, kotonia

FULL = Path("/dev/full")


@pytest.fixture
def conv_id(tmp_path) -> str:
    run = kotonia("import", write_big_chat(tmp_path / "big.jsonl", 400))
    assert_ok(run)
    return run.out.strip()


@pytest.mark.parametrize(
    "command", [("export", "1"), ("characters",), ("search", "lamp"), ("conversations",)]
)
def test_standard_output_on_a_full_device_is_one_line(command, conv_id):
    """Before: a traceback ending in `OSError: [Errno 28] No space left on device`."""
    line = assert_refused(kotonia(*command, stdout_path=FULL), "standard output", "disk full")
    assert line.startswith("error: ")


def _damage_search_pages(db: Path) -> None:
    """Garbage over the pages of the word index (a disk error, a bad copy)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [
            row[0]
            for row in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'message_words_data' AND pageno > 1"
            )
        ]
    assert pages
    with db.open("r+b") as out:
        for page in pages:
            out.seek((page - 1) * size)
            out.write(b"\xde\xad" * (size // 2))


def test_search_on_a_damaged_database_is_one_line(conv_id):
    """Before: a traceback (the failed COMMIT of the read hid the error, as a traceback)."""
    db = app_dirs().default_db
    _damage_search_pages(db)
    line = assert_refused(kotonia("search", "lamp"), str(db), "damaged")
    assert "export" in line  # what the user can still do
