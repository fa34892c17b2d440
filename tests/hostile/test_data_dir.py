"""An unusable, read-only or full data dir: one line naming the path and the reason (exit 1)
for every command, reading still works on a read-only one, the log never floods, and what is
stored is private to the user."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kotonia_tui.config import app_dirs

from .harness import assert_ok, assert_refused, kotonia

COMMANDS = [
    ("characters",),
    ("conversations",),
    ("export", "1"),
    ("doctor",),
    ("import", "chat.jsonl"),
    ("chat", "wren", "--say", "hi"),
]
READING = COMMANDS[:4]
WRITING = COMMANDS[4:]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def seed_chat(tmp_path: Path) -> Path:
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        '{"user_name":"Ann","character_name":"Wren"}\n{"name":"Wren","mes":"Welcome."}\n',
        encoding="utf-8",
    )
    return chat


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_file_where_the_data_dir_should_be(args, kotonia_home, tmp_path):
    (kotonia_home / "data").write_text("not a folder")
    seed_chat(tmp_path)
    run = kotonia(*args, cwd=tmp_path)
    assert_refused(run, str(kotonia_home / "data"), "not a folder")


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_data_dir_under_a_file_cannot_be_created(args, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    seed_chat(tmp_path)
    run = kotonia(*args, cwd=tmp_path, env={"KOTONIA_HOME": str(blocker / "home")})
    assert_refused(run, str(blocker / "home" / "data"), "cannot be created", "Not a directory")


def make_read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o500 if path.is_dir() else 0o400)


@pytest.fixture
def read_only_store(card, tmp_path, short_reply_model):
    """A data dir with one stored conversation, then made read-only."""
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    assert_ok(kotonia("chat", "wren", "--say", "Hello there.", env=env))
    data = app_dirs().data
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()}
    make_read_only(data)
    yield env
    for path in [data, *data.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} == before  # untouched


@pytest.mark.parametrize("args", READING, ids=[c[0] for c in READING])
def test_commands_that_only_read_work_on_a_read_only_data_dir(args, read_only_store, tmp_path):
    """`doctor` crashed with OSError from the log file; now reading works, said once."""
    run = kotonia(*args, env=read_only_store, as_plain_user=True, cwd=tmp_path)
    assert_ok(run)
    notes = [line for line in run.err.splitlines() if "read-only" in line]
    assert len(notes) == 1 and "standard error" in notes[0], run.err
    if args[0] == "conversations":
        assert run.out.startswith("1\twren\t")
    if args[0] == "export":
        assert '"mes":"Hello there."' in run.out


@pytest.mark.parametrize("args", WRITING, ids=[c[0] for c in WRITING])
def test_commands_that_write_refuse_a_read_only_data_dir_in_one_line(
    args, read_only_store, tmp_path
):
    seed_chat(tmp_path)
    run = kotonia(*args, env=read_only_store, as_plain_user=True, cwd=tmp_path)
    assert_refused(run, str(app_dirs().data), "read-only")


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_an_unreadable_data_dir_is_one_line_for_every_command(args, tmp_path):
    data = app_dirs().data
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0)
    seed_chat(tmp_path)
    try:
        run = kotonia(*args, as_plain_user=True, cwd=tmp_path)
    finally:
        data.chmod(0o700)
    assert_refused(run, str(data), "Permission denied")


def test_a_new_data_dir_and_its_files_are_private(short_reply_model):
    """Made by the app itself, under a typical umask of 022 (files readable by everyone)."""
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "8192"}
    dirs = app_dirs()
    assert not dirs.data.exists()
    umask = os.umask(0o022)
    try:
        assert_ok(kotonia("chat", "rowan", "--say", "Hello.", env=env))
    finally:
        os.umask(umask)
    for folder in (dirs.data, dirs.config, dirs.cache):
        assert mode(folder) == 0o700, folder
    files = [p for p in dirs.data.iterdir() if p.is_file()]
    assert {p.name for p in files} >= {"kotonia.sqlite3", "kotonia.log"}
    for path in files:
        assert mode(path) & 0o077 == 0, f"{path} is {mode(path):04o}"


def test_an_existing_open_data_dir_is_tightened_and_said_once(card, short_reply_model):
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    assert_ok(kotonia("chat", "wren", "--say", "Hello.", env=env))
    dirs = app_dirs()
    dirs.data.chmod(0o755)
    for path in dirs.data.iterdir():
        if path.is_file():
            path.chmod(0o644)
    first = kotonia("conversations")
    assert_ok(first)
    notes = [line for line in first.err.splitlines() if "made private" in line]
    assert len(notes) == 1 and "kotonia.sqlite3 (was 0644)" in notes[0], first.err
    assert mode(dirs.data) == 0o700 and mode(dirs.default_db) == 0o600
    again = kotonia("conversations")
    assert "made private" not in again.err  # said once: nothing left to tighten


def test_a_full_disk_under_the_log_is_said_once_not_flooded(card, short_reply_model):
    """The log file on a full disk (here /dev/full) printed 36 '--- Logging error ---'
    tracebacks; now one note, and the chat goes on."""
    dirs = app_dirs()
    dirs.data.mkdir(parents=True, exist_ok=True)  # the card fixture made it
    (dirs.data / "kotonia.log").symlink_to("/dev/full")
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    run = kotonia("chat", "wren", "--say", "One.", "--say", "Two.", env=env)
    assert_ok(run)
    notes = [line for line in run.err.splitlines() if "cannot be written" in line]
    assert len(notes) == 1 and "No space left" in notes[0], run.err


def test_an_api_key_never_reaches_a_log_or_error_line(tmp_path):
    secret = "sk-test-Secret-4f9a1c"
    missing = tmp_path / f"{secret}.jsonl"
    run = kotonia("import", missing, env={"KOTONIA_API_KEY": secret})
    line = assert_refused(run, "[redacted]")
    assert secret not in run.err and secret not in line
    log = app_dirs().data / "kotonia.log"
    assert secret not in log.read_text(encoding="utf-8")
