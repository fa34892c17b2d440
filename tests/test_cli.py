"""The `kotonia` command as scripts use it: output channels, exit statuses, round trips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Role
from kotonia_tui.store import Store
from kotonia_tui.terminal_text import visible
from tests.chat_cli import chat_with_stats

ST_CHAT: list[dict[str, Any]] = [
    {
        "user_name": "Ann",
        "character_name": "Rowan Ashby",
        "create_date": "2026-11-01@10h00m00s",
        "chat_metadata": {"note": "kept"},
    },
    {
        "name": "Rowan Ashby",
        "is_user": False,
        "send_date": "November 1, 2026 10:00am",
        "mes": "*He looks up from the clock.* Evening.",
        "swipes": ["*He looks up from the clock.* Evening.", "Shop's closed."],
        "swipe_id": 0,
    },
    {"name": "Ann", "is_user": True, "send_date": "November 1, 2026 10:01am", "mes": "Hello!"},
    {
        "name": "Rowan Ashby",
        "is_user": False,
        "send_date": "November 1, 2026 10:02am",
        "mes": "What can I mend for you?",
        "extra": {"custom": 1},
    },
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_characters_lists_one_per_line_key_first_and_json(capsys):
    code, out, _ = run(capsys, "characters")
    assert code == 0
    keys = [line.split("\t")[0] for line in out.splitlines()]
    assert {"rowan-ashby", "tsukishima-tsumugi", "lin-wanzhou"} <= set(keys)
    code, out, _ = run(capsys, "characters", "--json")
    assert {row["key"] for row in json.loads(out)} >= set(keys)


def test_import_then_export_keeps_every_message_speaker_timestamp_and_swipe(capsys, tmp_path):
    source = write_jsonl(tmp_path / "chat.jsonl", ST_CHAT)
    code, out, err = run(capsys, "import", str(source), "--character", "rowan")
    assert code == 0
    conv_id = int(out.strip())
    assert "imported 3 messages" in err
    code, out, _ = run(capsys, "conversations")
    assert out.split("\t")[0] == str(conv_id)
    exported = tmp_path / "back.jsonl"
    code, _, _ = run(capsys, "export", str(conv_id), "-o", str(exported))
    assert code == 0
    back = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(back) == len(ST_CHAT)
    for original, again in zip(ST_CHAT[1:], back[1:], strict=True):
        assert again["name"] == original["name"]
        assert again["mes"] == original["mes"]
        assert again["send_date"] == original["send_date"]
        assert again.get("swipes", [original["mes"]]) == original.get("swipes", [original["mes"]])
    assert back[3]["extra"]["custom"] == 1
    # Without -o the export goes to standard output.
    code, out, _ = run(capsys, "export", str(conv_id))
    assert [json.loads(line)["mes"] for line in out.splitlines()[1:]] == [
        r["mes"] for r in ST_CHAT[1:]
    ]


def test_a_malformed_line_is_named_and_nothing_is_imported(capsys, tmp_path):
    rows = [*ST_CHAT[:2], "{not json", *ST_CHAT[2:]]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows))
    code, out, err = run(capsys, "import", str(path))
    assert code == 1
    assert err.startswith("error: ") and "line 3" in err and "bad.jsonl" in err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = run(capsys, "conversations")
    assert out == ""


def test_user_errors_exit_1_with_one_line_and_usage_errors_exit_2(capsys):
    code, out, err = run(capsys, "export", "999")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "999" in err
    code, _, err = run(capsys, "chat", "nobody-at-all", "--say", "hi")
    assert code == 1 and "no character card named 'nobody-at-all'" in err
    with pytest.raises(SystemExit) as usage:
        main(["export", "not-a-number"])
    assert usage.value.code == 2


def test_chat_say_prints_only_replies_and_stats_go_to_stderr(tiny_model_path, kotonia_home):
    env = {
        **os.environ,
        "KOTONIA_HOME": str(kotonia_home),
        "KOTONIA_MODEL_PATH": str(tiny_model_path),
        "KOTONIA_N_CTX": "8192",
        "KOTONIA_FOLD_DELAY_S": "0",
    }
    proc, stats = chat_with_stats(env, "rowan", "--say", "Hello there.", "--say", "How are you?")
    assert proc.returncode == 0, proc.stderr
    assert len(stats) == 2
    for figures in stats:
        assert {"prompt_positions", "reused", "evaluated", "prompt_ms", "tokens_per_s"} <= set(
            figures
        )
    assert stats[1]["reused"] > stats[1]["evaluated"]  # the second turn reused the prefix
    conv_line = next(line for line in proc.stderr.splitlines() if line.startswith("conversation"))
    conv_id = conv_line.split()[1]
    # Standard output holds the two replies, exactly as stored, and nothing the CLI says about
    # itself (the tiny model's random text may hold any word, so compare with the store).
    with Store.open(app_dirs().default_db) as store:
        stored = store.recent_messages(int(conv_id), 10)
    replies = [m.text for m in stored if m.role is Role.CHARACTER][-2:]
    # Shown as stored, with any control character the random model wrote made visible (␛):
    # a reply never reaches the terminal with raw escape sequences.
    expected = "".join(f"{visible(reply)}\n" for reply in replies)
    assert proc.stdout == expected
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "kotonia_tui",
            "chat",
            "rowan",
            "--conversation",
            conv_id,
            "--say",
            "One more.",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    listing = subprocess.run(
        [sys.executable, "-m", "kotonia_tui", "conversations", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    (conv,) = json.loads(listing.stdout)
    assert conv["messages"] == 7  # greeting + three exchanges


def test_doctor_names_a_missing_model(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(tmp_path / "missing.gguf"))
    code, out, err = run(capsys, "doctor")
    assert code == 1
    assert "missing.gguf" in out and "missing.gguf: model file not found" in err
    assert "schema" in out and "llama-cpp-python" in out


def test_export_keeps_attached_images_and_ends_with_a_newline(capsys, tmp_path):
    import base64

    from kotonia_tui.domain import Conversation, Message
    from tests.tiny_models import png_bytes

    picture = png_bytes((8, 8), (200, 40, 40))
    with Store.open(app_dirs().default_db) as store:
        digest = store.put_image(picture, "image/png", 8, 8)
        conv = store.import_conversation(
            Conversation(
                character_key="rowan-ashby", character_name="Rowan Ashby", persona_name="User"
            ),
            [
                Message(role=Role.USER, speaker="User", text="Look.", images=[digest]),
                Message(role=Role.CHARACTER, speaker="Rowan Ashby", text="A red square."),
            ],
        )
    code, out, _ = run(capsys, "export", str(conv.id))
    assert code == 0
    assert out.endswith("}\n")
    first = json.loads(out.splitlines()[1])
    mime, _, data = first["extra"]["image"].partition(";base64,")
    assert mime == "data:image/png" and base64.b64decode(data) == picture
    assert first["extra"]["kotonia_images"] == [first["extra"]["image"]]


def test_counts_read_as_words(capsys, tmp_path):
    _code, out, _ = run(capsys, "characters")
    assert "\t3 greetings\t" in out  # the shipped cards have three each
    source = write_jsonl(tmp_path / "one.jsonl", ST_CHAT[:2])
    _code, out, err = run(capsys, "import", str(source))
    assert "imported 1 message into conversation" in err
    _code, out, _ = run(capsys, "conversations")
    assert "\t1 message\t" in out


def test_chat_mistakes_are_reported_before_the_model_loads(capsys, monkeypatch, tmp_path):
    # A model path that would fail to load: any error about it means the model was tried.
    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(tmp_path / "missing.gguf"))
    code, _out, err = run(capsys, "chat", "rowan", "--say", "   ")
    assert code == 1 and "--say got an empty message" in err and "missing.gguf" not in err
    code, out, _ = run(capsys, "conversations")
    assert out == ""  # no empty conversation was created
    code, _out, err = run(capsys, "chat", "rowan", "--conversation", "42", "--say", "hi")
    assert code == 1 and "conversation 42" in err and "missing.gguf" not in err


def test_doctor_names_an_incomplete_embedded_model(capsys, monkeypatch, tmp_path):
    """An install whose model chunks are gone cannot be reached without breaking the venv;
    the package object is replaced by one that lists a chunk that does not exist."""
    import types

    from kotonia_tui.engine import default_model

    broken = types.SimpleNamespace(
        MODEL_NAME="gemma.gguf",
        EXPECTED_SHA256="0" * 64,
        chunk_paths=lambda: [tmp_path / "gone.part1"],
    )
    monkeypatch.setattr(default_model, "_package", lambda: broken)
    code, out, err = run(capsys, "doctor")
    assert code == 1
    assert "embedded default (problem)" in out and "gone.part1" in err
