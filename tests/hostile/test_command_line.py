"""The command line, third round: numbers SQLite cannot hold, arguments that are not UTF-8,
a closed standard output, files that are not regular files, a cache dir in the way, and a
100 MB import: one line on standard error (or a progress line and where it stopped), never a
traceback or a hang, and nothing stored is lost."""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from kotonia_tui.config import app_dirs

from .corpus import write_big_chat
from .harness import CLI, assert_no_crash, assert_ok, assert_refused, code_under_test, kotonia

CHAT = (
    '{"user_name":"Ann","character_name":"Wren"}\n'
    '{"name":"Wren","mes":"Welcome."}\n'
    '{"name":"Ann","is_user":true,"mes":"Thanks."}\n'
)
HUGE = "9" * 23  # 99999999999999999999999: past SQLite's 64-bit integers


@pytest.fixture
def conv_id(tmp_path) -> str:
    source = tmp_path / "chat.jsonl"
    source.write_text(CHAT, encoding="utf-8")
    run = kotonia("import", source)
    assert_ok(run)
    return run.out.strip()


def stored_rows() -> list[tuple]:
    with sqlite3.connect(app_dirs().default_db) as conn:
        conversations = conn.execute("SELECT id, title FROM conversations ORDER BY id").fetchall()
        messages = conn.execute("SELECT id, text FROM messages ORDER BY id").fetchall()
    return [*conversations, *messages]


# ---- numbers too large for SQLite -------------------------------------------------------------


def _too_large_ids(conv: str) -> list[tuple[str, ...]]:
    """Every command that takes a conversation or message id, with one too large for SQLite
    in each place an id goes (and once negative)."""
    cases: list[tuple[str, ...]] = []
    for number in (HUGE, f"-{HUGE}"):
        cases += [
            ("memory", number),
            ("delete", number),
            ("rename", number, "title"),
            ("duplicate", number),
            ("branch", number, "1"),
            ("search", "welcome", "--conversation", number),
            ("chat", "wren", "--conversation", number, "--say", "hi"),
            ("export", number),
        ]
    cases += [("branch", conv, HUGE), ("branch", conv, f"#{HUGE}")]
    return cases


ID_CASES = _too_large_ids("{conv}")


@pytest.mark.parametrize("args", ID_CASES, ids=[" ".join(a) for a in ID_CASES])
def test_an_id_too_large_for_sqlite_is_no_such_conversation_or_message(
    args, conv_id, card, tiny_env
):
    before = stored_rows()
    args = tuple(a.replace("{conv}", conv_id) for a in args)
    run = kotonia(*args, env=tiny_env, timeout=60)
    line = assert_refused(run, HUGE)
    assert "does not exist" in line or "there is no #" in line, line
    assert stored_rows() == before


# ---- arguments that are not UTF-8 ------------------------------------------------------------

BAD = "\udcff\udcfe"  # how Python hands over the bytes 0xff 0xfe of an argument


def _non_utf8_arguments(conv: str) -> list[tuple[str, tuple[str, ...], str]]:
    """(name, arguments, what the note names), each with bytes that are not UTF-8."""
    return [
        ("rename-title", ("rename", conv, f"T{BAD}"), "the title"),
        ("duplicate-title", ("duplicate", conv, "--title", f"D{BAD}"), "--title"),
        ("branch-title", ("branch", conv, "1", "--title", f"B{BAD}"), "--title"),
        ("search-query", ("search", f"welcome{BAD}"), "the query"),
        ("conversations-character", ("conversations", f"wren{BAD}"), "the character name"),
        ("say", ("chat", "wren", "--say", f"Hello {BAD} there."), "--say"),
        ("persona", ("chat", "wren", "--persona", f"Ann{BAD}", "--say", "Hi."), "--persona"),
    ]


UTF8_CASES = _non_utf8_arguments("{conv}")


@pytest.mark.parametrize(("name", "args", "where"), UTF8_CASES, ids=[c[0] for c in UTF8_CASES])
def test_an_argument_that_is_not_utf8_is_kept_as_text_with_replacement_characters(
    name, args, where, conv_id, card, short_reply_model
):
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    args = tuple(a.replace("{conv}", conv_id) for a in args)
    run = kotonia(*args, env=env, timeout=60)
    assert_no_crash(run)
    notes = [line for line in run.err.splitlines() if "U+FFFD" in line]
    assert len(notes) == 1 and where in notes[0], run.err
    texts = " ".join(str(v) for row in stored_rows() for v in row)
    assert "\udcff" not in texts
    if name.endswith("title") or name == "say":
        assert "\ufffd\ufffd" in texts  # stored, with the bytes replaced


# ---- standard output closed -------------------------------------------------------------------


def _without_stdout(*args: str, close: int = 1) -> subprocess.CompletedProcess[bytes]:
    environment, folder = code_under_test()
    return subprocess.run(
        [*CLI, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE if close != 2 else subprocess.DEVNULL,
        preexec_fn=lambda: os.close(close),
        env=environment,
        cwd=folder,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args", [("export", "{conv}"), ("conversations",), ("import", "{file}"), ("memory", "{conv}")]
)
def test_a_closed_standard_output_is_one_line_and_nothing_is_done(args, conv_id, tmp_path):
    """`kotonia export 1 >&-` crashed with AttributeError; an import printed its id nowhere."""
    source = tmp_path / "chat.jsonl"
    args = tuple(a.replace("{conv}", conv_id).replace("{file}", str(source)) for a in args)
    before = stored_rows()
    proc = _without_stdout(*args)
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert proc.returncode == 1, err
    (line,) = err.splitlines()
    assert line.startswith("error: standard output is closed"), line
    assert stored_rows() == before


def test_a_closed_standard_error_still_exports(conv_id, tmp_path):
    out = tmp_path / "wren.jsonl"
    proc = _without_stdout("export", conv_id, "-o", str(out), close=2)
    assert proc.returncode == 0
    assert out.read_text(encoding="utf-8").count("\n") == 3


# ---- files that are not regular files ---------------------------------------------------------


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.gguf"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("command", ["doctor", "chat"])
def test_a_model_path_that_is_not_a_regular_file_is_refused_before_a_read(
    kind, command, fifo, card
):
    path = fifo if kind == "fifo" else Path("/dev/zero")
    args = ("doctor",) if command == "doctor" else ("chat", "wren", "--say", "hi")
    run = kotonia(*args, env={"KOTONIA_MODEL_PATH": str(path)}, timeout=60)
    assert_no_crash(run)
    assert run.code == 1
    said = "FIFO" if kind == "fifo" else "a device"
    named = [line for line in run.err.splitlines() if str(path) in line and said in line]
    assert len(named) == 1, run.err


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
def test_an_image_that_is_not_a_regular_file_is_refused_before_the_model_loads(
    kind, tmp_path, card, tiny_env
):
    """`--image /dev/zero` read for ever; now refused before the conversation is made."""
    path = {"dev-zero": Path("/dev/zero"), "fifo": tmp_path / "p.png", "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    run = kotonia("chat", "wren", "--say", "Look.", "--image", path, env=tiny_env, timeout=60)
    assert_refused(run, str(path), "not an image")
    assert "loading" not in run.err  # said before the model is loaded


def test_a_cache_dir_whose_models_is_a_file_is_named(card):
    """The embedded default is assembled into the cache dir's `models`: a file there made a
    NotADirectoryError traceback. Refused before any model loads."""
    models = app_dirs().cache / "models"
    models.parent.mkdir(parents=True, exist_ok=True)
    models.write_text("not a folder")
    run = kotonia("chat", "wren", "--say", "hi", timeout=60)
    assert_refused(run, str(models), "is not a folder")
    doctor = kotonia("doctor", timeout=60)
    assert_no_crash(doctor)
    assert doctor.code == 1
    assert f"problem: {models}: is not a folder" in doctor.err


def test_importing_a_link_to_proc_self_mem_is_one_line(tmp_path):
    link = tmp_path / "mem.jsonl"
    link.symlink_to("/proc/self/mem")
    before = stored_rows() if app_dirs().default_db.exists() else []
    assert_refused(kotonia("import", link, timeout=60), str(link), "cannot be read")
    assert (stored_rows() if app_dirs().default_db.exists() else []) == before


# ---- a 100 MB import --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """700,000 small messages (100 MB), written once for both ways of stopping (4 s of CPU
    each): an import only reads its file."""
    return write_big_chat(tmp_path_factory.mktemp("big_chat") / "big.jsonl", 700_000)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_100_mb_import_shows_progress_and_says_how_far_it_got_when_stopped(stop, big_chat):
    """700,000 small messages (100 MB) take minutes on a shared machine; the user sees a
    progress line at once, and `timeout` or Ctrl-C gets where it stopped, with nothing
    stored (an import is all or nothing)."""
    path = big_chat
    assert path.stat().st_size > 95 * 2**20
    environment, folder = code_under_test()
    proc = subprocess.Popen(
        [*CLI, "import", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        cwd=folder,
    )
    assert proc.stderr is not None
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        assert ready, "no progress line within 60 s"
        first = proc.stderr.readline().decode()
        assert first.startswith("importing big.jsonl: line "), first
        time.sleep(3)
        proc.send_signal(stop)
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = first + rest.decode()
    assert "Traceback" not in err, err
    assert proc.returncode == 128 + stop, err
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    assert "was interrupted at line " in line and "of 98.7 MB" in line, line
    assert "nothing was stored" in line
    assert out == b""  # no conversation id: there is none
    with sqlite3.connect(app_dirs().default_db) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
