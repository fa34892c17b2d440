"""Hostile chat files given to `kotonia import`: a clear refusal or a faithful import, never a
traceback, a hang or a half-written conversation; what was stored before is untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kotonia_tui.chat.importing import import_chat_file
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.store import Store

from .corpus import ACCEPTED_CHATS, HEADER, REFUSED_CHATS, write_big_chat
from .harness import assert_ok, assert_refused, code_under_test, kotonia

GOOD_CHAT = (
    b'{"user_name":"Ann","character_name":"Wren"}\n'
    b'{"name":"Wren","is_user":false,"mes":"Welcome."}\n'
    b'{"name":"Ann","is_user":true,"mes":"Thank you."}\n'
)


def seed(db: Path, tmp_path: Path) -> list[tuple[int | None, str]]:
    """One conversation already stored; returns its (id, text) rows to compare later."""
    source = tmp_path / "good.jsonl"
    source.write_bytes(GOOD_CHAT)
    with Store.open(db) as store:
        conv = import_chat_file(store, source, "Ann").conversation
        return [(m.id, m.text) for m in store.iter_messages(conv.id)]


def stored(db: Path) -> list[list[tuple[int | None, str]]]:
    with Store.open(db) as store:
        return [
            [(m.id, m.text) for m in store.iter_messages(c.id)] for c in store.list_conversations()
        ]


@pytest.mark.parametrize(
    ("name", "content", "named"), REFUSED_CHATS, ids=[c[0] for c in REFUSED_CHATS]
)
def test_a_hostile_chat_file_is_refused_in_one_line_and_nothing_changes(
    name, content, named, db, tmp_path
):
    before = seed(db, tmp_path)
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(content)
    line = assert_refused(kotonia("import", path), path.name, *named)
    assert len(line) < 400, line  # a bad value is quoted short, not whole
    assert stored(db) == [before]  # nothing committed, nothing lost


@pytest.mark.parametrize(
    ("name", "content", "texts", "replaced"), ACCEPTED_CHATS, ids=[c[0] for c in ACCEPTED_CHATS]
)
def test_a_strange_but_readable_chat_imports_whole(name, content, texts, replaced, db, tmp_path):
    before = seed(db, tmp_path)
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(content)
    run = kotonia("import", path)
    assert_ok(run)
    conv_id = int(run.out.strip())
    with Store.open(db) as store:
        messages = list(store.iter_messages(conv_id))
        assert [m.text for m in messages] == texts
        for message in messages:
            # Segments are derived from the text, never taken from the file.
            assert message.segments == parse_segments(
                message.text, speaker=message.speaker, listener="Ann"
            )
    assert stored(db)[-1] == before  # the older conversation is as it was
    notes = [line for line in run.err.splitlines() if "U+FFFD" in line]
    assert len(notes) == (1 if replaced else 0), run.err  # said once, or not at all
    if replaced:
        assert f"{replaced} invalid Unicode" in notes[0], notes


def test_segments_in_a_file_never_reach_the_memory(db, tmp_path):
    """An imported `extra.kotonia.segments` that disagrees with `mes` is ignored."""
    path = tmp_path / "lie.jsonl"
    path.write_bytes(dict(ACCEPTED_CHATS_BY_NAME)["segments-that-lie"])
    run = kotonia("import", path)
    assert_ok(run)
    with Store.open(db) as store:
        (message,) = store.iter_messages(int(run.out))
    assert [s.text for s in message.segments] == ["Hello there."]
    assert all("hate" not in s.text for s in message.segments)


ACCEPTED_CHATS_BY_NAME = [(name, content) for name, content, *_ in ACCEPTED_CHATS]


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder", "missing", "dev-null"])
def test_files_that_are_not_chat_files_are_refused_at_once(kind, db, tmp_path):
    """/dev/zero never ends and a FIFO blocks a reader until a writer comes: both are refused
    before they are read (the timeout turns a hang into a failure)."""
    before = seed(db, tmp_path)
    path = {
        "dev-zero": Path("/dev/zero"),
        "dev-null": Path("/dev/null"),
        "folder": tmp_path,
        "missing": tmp_path / "nowhere.jsonl",
        "fifo": tmp_path / "pipe.jsonl",
    }[kind]
    if kind == "fifo":
        os.mkfifo(path)
    assert_refused(kotonia("import", path, timeout=60), str(path))
    assert stored(db) == [before]


@pytest.mark.slow
def test_a_huge_chat_streams_in_bounded_memory(db, tmp_path):
    """10^6 lines took 3 GB before; the file is now read and stored a batch at a time, so the
    peak memory of the import does not follow the file's size."""
    path = write_big_chat(tmp_path / "big.jsonl", 60_000)
    size_mb = path.stat().st_size / 2**20
    # VmHWM, not ru_maxrss: the latter keeps the forking pytest's size across exec.
    code = (
        "import re, sys\n"
        "from kotonia_tui.cli import main\n"
        "rc = main(['import', sys.argv[1]])\n"
        "status = open('/proc/self/status').read()\n"
        "print('peak', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    environment, folder = code_under_test()
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
        cwd=folder,
    )
    assert proc.returncode == 0, proc.stderr
    peak_mb = int(proc.stderr.split("peak ")[-1]) / 1024
    print(f"import of {size_mb:.1f} MB, 60,000 messages: peak RSS {peak_mb:.0f} MB")
    # Holding the parsed messages took ~18x the file (3.2 GB for 180 MB); streaming stays flat.
    assert peak_mb < 160 + 2 * size_mb, peak_mb
    with Store.open(db) as store:
        (conv,) = store.list_conversations()
        assert conv.message_count == 60_000
        assert store.last_message(conv.id).text.startswith("Message 59999:")
    assert HEADER["character_name"] == conv.character_name
