"""`kotonia export -o FILE` never destroys FILE: a failure part way leaves it as it was."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from kotonia_tui.config import app_dirs

from .harness import assert_ok, assert_refused, kotonia

CHAT = (
    '{"user_name":"Ann","character_name":"Wren"}\n'
    '{"name":"Wren","mes":"Welcome."}\n'
    '{"name":"Ann","is_user":true,"mes":"Thanks."}\n'
    '{"name":"Wren","mes":"Tea?"}\n'
)


@pytest.fixture
def conv_id(tmp_path) -> str:
    source = tmp_path / "chat.jsonl"
    source.write_text(CHAT, encoding="utf-8")
    run = kotonia("import", source)
    assert_ok(run)
    return run.out.strip()


def damage_a_row(message_index: int = 2) -> None:
    """A row the app cannot read any more (edited by hand, a disk error)."""
    with sqlite3.connect(app_dirs().default_db) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")]
        conn.execute("UPDATE messages SET segments = 'garbage' WHERE id = ?", (ids[message_index],))


def test_a_failed_export_leaves_the_old_file_as_it_was(conv_id, tmp_path):
    """A damaged row left the previous export at 0 lines; now FILE keeps every byte."""
    out = tmp_path / "wren.jsonl"
    assert_ok(kotonia("export", conv_id, "-o", out))
    before = out.read_bytes()
    damage_a_row()
    line = assert_refused(kotonia("export", conv_id, "-o", out), "message")
    assert "cannot be read" in line
    assert out.read_bytes() == before
    assert not list(tmp_path.glob(".wren.jsonl.*"))  # no partial file left behind


@pytest.mark.parametrize("target", ["missing-folder", "folder"])
def test_an_unwritable_target_is_one_line(target, conv_id, tmp_path):
    path = tmp_path / "nonexistent" / "dir" / "x" if target == "missing-folder" else tmp_path
    assert_refused(kotonia("export", conv_id, "-o", path), str(path))


def test_the_export_ends_with_a_newline_and_matches_stdout(conv_id, tmp_path):
    out = tmp_path / "wren.jsonl"
    assert_ok(kotonia("export", conv_id, "-o", out))
    text = out.read_text(encoding="utf-8")
    assert text.endswith("}\n") and len(text.splitlines()) == 4
    stdout = kotonia("export", conv_id)
    assert stdout.out == text


def test_replacing_a_file_keeps_its_permissions_and_a_new_one_is_private(conv_id, tmp_path):
    shared = tmp_path / "shared.jsonl"
    shared.write_text("old\n")
    shared.chmod(0o644)
    assert_ok(kotonia("export", conv_id, "-o", shared))
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
    fresh = tmp_path / "fresh.jsonl"
    assert_ok(kotonia("export", conv_id, "-o", fresh))
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
