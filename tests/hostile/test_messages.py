"""Issue 33, item 6: messages that tell the user what is wrong, in one line.

Real `kotonia` subprocesses: standard output on /dev/full, a database with damaged pages,
chats and cards in UTF-16 or UTF-32, an empty KOTONIA_HOME.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
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


# ---- text in UTF-16 and UTF-32 ------------------------------------------------------------

WIDE = ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]
CHAT = (
    '{"user_name":"Ann","character_name":"Wren"}\n'
    '{"name":"Wren","mes":"Welcome, café ☕."}\n'
    '{"name":"Ann","is_user":true,"mes":"Thanks."}\n'
)


@pytest.mark.parametrize("encoding", WIDE)
def test_a_chat_saved_in_utf16_or_utf32_is_imported(encoding, tmp_path):
    """Before: `line 1: not valid JSON`."""
    source = tmp_path / "chat.jsonl"
    source.write_bytes(CHAT.encode(encoding))
    run = kotonia("import", source)
    assert_ok(run)
    exported = kotonia("export", run.out.strip())
    assert '"mes":"Welcome, café ☕."' in exported.out
    assert '"mes":"Thanks."' in exported.out


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-be"])
def test_a_card_saved_in_utf16_or_utf32_is_listed(encoding):
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    card = '{"name": "Wide Wren", "first_mes": "Hello, café."}'
    (folder / "wide.json").write_bytes(card.encode(encoding))
    run = kotonia("characters")
    assert_ok(run)
    assert "wide\tWide Wren\t1 greeting" in run.out
    assert "warning" not in run.err


# ---- the rest of the list ------------------------------------------------------------------


def test_an_empty_kotonia_home_is_refused_not_taken_for_the_real_dirs():
    """Before: KOTONIA_HOME="" silently meant the user's real config and data."""
    assert_refused(kotonia("characters", env={"KOTONIA_HOME": ""}), "KOTONIA_HOME", "empty")


def test_a_key_binding_that_is_not_a_key_is_named(tmp_path):
    """Before: accepted silently, and Ctrl+Q no longer quit."""
    config = app_dirs().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[keys]\nquit = "not a key !!"\n', encoding="utf-8")
    assert_refused(kotonia("characters"), str(config), "keys.quit", "'not a key !!'")
    config.write_text('[keys]\nquit = "ctrl+q,f10"\ninspector = "?"\n', encoding="utf-8")
    assert_ok(kotonia("characters"))


def test_a_wrong_greeting_number_leaves_no_empty_conversation(card, short_reply_model):
    """Before: the error, and an empty conversation left behind."""
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    run = kotonia("chat", card, "--greeting", "99", "--say", "hi", env=env)
    assert_refused(run, "99 is not one")
    listed = kotonia("conversations")
    assert_ok(listed)
    assert listed.out == ""


def test_a_card_whose_file_name_is_not_utf8_can_be_started(short_reply_model):
    """Before: listed (key `caf⟨U+DCE9⟩`), but its key could not be typed or stored."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    name = os.fsencode(folder) + b"/caf\xe9.json"
    Path(os.fsdecode(name)).write_text('{"name": "Cafe", "first_mes": "hi"}', encoding="utf-8")
    listed = kotonia("characters")
    assert_ok(listed)
    (line,) = [row for row in listed.out.splitlines() if "\tCafe\t" in row]
    key = line.split("\t")[0]
    assert key == "caf\ufffd"
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    assert_ok(kotonia("chat", key, "--say", "hi", env=env))
    assert "caf\ufffd" in kotonia("conversations").out


@pytest.fixture
def full_disk(tmp_path):
    """A 4 MB tmpfs to fill (mounting needs root with CAP_SYS_ADMIN: skipped otherwise)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_says_disk_full_and_export_still_works(full_disk, tmp_path):
    """Before: `cannot be opened: disk I/O error`, for export as for every other command."""
    env = {"KOTONIA_HOME": str(full_disk / "home")}
    source = tmp_path / "chat.jsonl"
    source.write_text(CHAT, encoding="utf-8")
    imported = kotonia("import", source, env=env)
    assert_ok(imported)
    conv = imported.out.strip()
    assert_ok(kotonia("conversations", env=env))  # checkpointed: no write-ahead log left
    with (full_disk / "filler").open("wb") as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * (1 << 16))
    exported = kotonia("export", conv, env=env)
    assert_ok(exported)
    assert '"mes":"Welcome, café ☕."' in exported.out
    assert_refused(kotonia("rename", conv, "Another title", env=env), "disk full")
