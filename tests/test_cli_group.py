"""`kotonia chat CARD --with OTHER --say TEXT` (issue 31) as a script runs it: a new process on
a tiny real GGUF, each reply on standard output as "Name: text", each turn's figures with its
speaker, and `kotonia conversations --json` listing the cast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Role
from kotonia_tui.store import Store
from kotonia_tui.terminal_text import visible
from tests.chat_cli import chat_with_stats


def _card(key: str, name: str, description: str) -> None:
    """A short card in the user's folder (the tiny model's byte-sized tokens make the shipped
    cards' setups, three of them together, fill its window)."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "description": description, "first_mes": f"{name} nods."}
    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
    (folder / f"{key}.json").write_text(json.dumps(card), encoding="utf-8")


def _kotonia(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kotonia_tui", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_group_turn_prints_each_reply_with_its_speaker(tiny_model_path: Path, kotonia_home):
    env = {
        **os.environ,
        "KOTONIA_HOME": str(kotonia_home),
        "KOTONIA_MODEL_PATH": str(tiny_model_path),
        "KOTONIA_N_CTX": "8192",
        "KOTONIA_FOLD_DELAY_S": "0",
    }
    _card("wren", "Wren", "Wren keeps the lighthouse.")
    _card("mira", "Mira", "Mira mends nets.")
    _card("lin", "林", "林 sells tea.")
    proc, stats = chat_with_stats(
        env, "wren", "--with", "lin", "--with", "mira", "--order", "list",
        "--say", "Good evening, all of you.",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # List order: every member in the cast's order, the card named first, then each --with.
    assert [s["speaker"] for s in stats] == ["Wren", "林", "Mira"]
    conv_id = int(
        next(x for x in proc.stderr.splitlines() if x.startswith("conversation")).split()[1]
    )
    with Store.open(app_dirs().default_db) as store:
        replies = [m for m in store.recent_messages(conv_id, 20) if m.role is Role.CHARACTER][-3:]
    assert [m.character_key for m in replies] == ["wren", "lin", "mira"]
    assert proc.stdout == "".join(f"{visible(f'{m.speaker}: {m.text}')}\n" for m in replies)

    listed = json.loads(_kotonia(env, "conversations", "--json").stdout)
    (row,) = [r for r in listed if r["id"] == conv_id]
    assert [(c["character"], c["name"], c["muted"]) for c in row["cast"]] == [
        ("wren", "Wren", False),
        ("lin", "林", False),
        ("mira", "Mira", False),
    ]

    # A member continues the group; a card outside it is refused before the model loads.
    again = _kotonia(
        env, "chat", "lin", "--conversation", str(conv_id), "--order", "natural", "--say", "林?"
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("林: ")  # natural order: the member named answers first
    stranger = _kotonia(env, "chat", "nobody-such", "--conversation", str(conv_id), "--say", "Hi")
    assert stranger.returncode == 1
    twice = _kotonia(env, "chat", "wren", "--with", "wren", "--say", "Hi")
    assert twice.returncode == 1
    assert "--with wren: Wren (wren) is in the group already" in twice.stderr


def test_the_line_by_line_group_chat_prints_each_speaker(tiny_model_path: Path, kotonia_home):
    env = {
        **os.environ,
        "KOTONIA_HOME": str(kotonia_home),
        "KOTONIA_MODEL_PATH": str(tiny_model_path),
        "KOTONIA_N_CTX": "8192",
        "KOTONIA_FOLD_DELAY_S": "0",
    }
    _card("wren", "Wren", "Wren keeps the lighthouse.")
    _card("mira", "Mira", "Mira mends nets.")
    proc = subprocess.run(
        [sys.executable, "-m", "kotonia_tui", "chat", "wren", "--with", "mira", "--order", "list"],
        env=env,
        input="Hello, you two.\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # The prompt ("User: ") is written where the player types, before the first reply.
    lines = [line.removeprefix("User: ") for line in proc.stdout.splitlines()]
    # The greetings, then each member's reply under its name, in the cast's order.
    assert lines[0] == "Wren: Wren nods." and "Mira: Mira nods." in lines
    replies = [line.split(":")[0] for line in lines if line.startswith(("Wren: ", "Mira: "))]
    assert replies[-2:] == ["Wren", "Mira"]
