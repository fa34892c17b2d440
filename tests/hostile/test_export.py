"""`kotonia export -o FILE` never destroys FILE: a failure part way leaves it as it was."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

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


# ---- issue 33, item 1: a FIFO or a device is written into, never replaced by a file ----------


def _device(tmp_path: Path, name: str = "null", minor: int = 3) -> Path:
    """A character device the test may write to: made here when the tests run as root (mknod:
    1,3 is a null device, 1,7 a full one), otherwise a symbolic link to the system's (which a
    plain user cannot replace, so a regression shows as a refusal, not as damage to the
    machine)."""
    if os.geteuid() == 0:
        node = tmp_path / name
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        return node
    link = tmp_path / f"{name}-link"
    link.symlink_to(f"/dev/{name}")
    return link


def test_export_into_a_character_device_writes_into_it_and_keeps_it(conv_id, tmp_path):
    """Before: `wrote 3 messages` and a regular 0666 file where the device node was."""
    device = _device(tmp_path)
    run = kotonia("export", conv_id, "-o", device)
    assert_ok(run)
    assert "wrote 3 messages" in run.err
    assert stat.S_ISCHR(device.stat().st_mode), "the device was replaced by a file"
    assert device.is_symlink() == (os.geteuid() != 0)
    assert not list(tmp_path.glob(".*.partial"))


def test_export_into_a_fifo_streams_to_its_reader(conv_id, tmp_path):
    """Before: the FIFO became a regular file and its reader got nothing."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    run = kotonia("export", conv_id, "-o", fifo)
    reader.join(timeout=30)
    assert_ok(run)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert got and got[0] == kotonia("export", conv_id).out.encode()


def test_export_into_a_fifo_nobody_reads_is_refused_with_the_reason(conv_id, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    line = assert_refused(kotonia("export", conv_id, "-o", fifo), str(fifo), "FIFO")
    assert "nothing reads" in line
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_export_to_dev_stdout_writes_into_the_pipe(conv_id):
    """Before: /dev/stdout resolved to /proc/PID/fd/pipe:[N], which cannot be replaced:
    `cannot be written`; as root with stdout on /dev/full, /dev/full was replaced."""
    run = kotonia("export", conv_id, "-o", "/dev/stdout")
    assert_ok(run)
    assert run.out == kotonia("export", conv_id).out


def test_export_to_dev_stdout_on_a_full_device_says_disk_full(conv_id, tmp_path):
    full = _device(tmp_path, "full", 7)
    run = kotonia("export", conv_id, "-o", "/dev/stdout", stdout_path=full)
    assert_refused(run, "/dev/stdout", "disk full")
    assert stat.S_ISCHR(full.stat().st_mode)


def test_export_to_dev_stdout_redirected_to_a_file_writes_that_open_file(conv_id, tmp_path):
    """The shell's file is written through its descriptor, not renamed over by name."""
    target = tmp_path / "redirected.jsonl"
    target.write_bytes(b"")
    inode = target.stat().st_ino
    assert_ok(kotonia("export", conv_id, "-o", "/dev/stdout", stdout_path=target))
    assert target.stat().st_ino == inode
    assert target.read_text(encoding="utf-8") == kotonia("export", conv_id).out
