"""The CLI never prints a control, escape or bidi character raw, and shows hostile text as
written (controls as pictures: ␛, ⟨U+202E⟩): `characters`, `conversations`, `import`,
`chat --say`, `doctor` and error lines, on the hostile corpus of tests/hostile.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs
from tests.hostile.text import (
    HOSTILE,
    expected,
    raw_controls,
    write_broken_cards,
    write_hostile_cards,
    write_hostile_chat,
)
from tests.tiny_models import write_scripted_llama

MODEL_NAME = "[/OOC] \x1b]0;Kq7 model\x07 \u202emodel"
REPLY = "[@click=app.quit]Kq7 reply[/] \x1b]52;c;eA==\x07 \u202edone."


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    for stream in (out, err):
        raw = raw_controls(stream)
        assert not raw, f"raw control characters printed: {raw!r}\n{stream}"
    return code, out, err


@pytest.fixture(scope="module")
def hostile_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile_cli_model") / "hostile.gguf"
    return write_scripted_llama(path, REPLY, name=MODEL_NAME)


def test_characters_lists_hostile_cards_one_per_line(capsys):
    folder = app_dirs().user_characters
    cards = write_hostile_cards(folder)
    broken = write_broken_cards(folder)
    code, out, err = run(capsys, "characters")
    assert code == 0
    lines = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    for card in cards:
        fields = lines[card.key]
        assert len(fields) == 4  # key, name, greetings, path: no tab or newline inside a field
        assert fields[1] == expected(card.name)
    for path in broken:
        assert expected(path.name) in err

    code, out, _err = run(capsys, "characters", "--json")
    assert code == 0
    names = {row["key"]: row["name"] for row in json.loads(out)}
    assert all(names[card.key] == card.name for card in cards)  # the exact text, for scripts


def test_import_conversations_chat_and_doctor(capsys, hostile_model, tmp_path, monkeypatch):
    cards = write_hostile_cards(app_dirs().user_characters, huge=False)
    card = next(c for c in cards if c.kind == "osc-title")
    chat_file = write_hostile_chat(tmp_path / "[OOC] \x1b]0;Kq7\x07 \u202echat.jsonl", card.name)

    code, out, err = run(capsys, "import", str(chat_file))
    assert code == 0
    conv_id = out.strip()
    assert f"with card {card.key} ({expected(card.name)})" in err

    code, out, _err = run(capsys, "conversations")
    assert code == 0
    (line,) = out.splitlines()
    fields = line.split("\t")
    assert fields[0] == conv_id and fields[1] == card.key
    assert fields[4] == expected(chat_file.stem)
    code, out, _err = run(capsys, "conversations", "--json")
    assert json.loads(out)[0]["title"] == chat_file.stem

    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(hostile_model))
    monkeypatch.setenv("KOTONIA_N_CTX", "4096")
    code, out, err = run(
        capsys, "chat", card.key, "--conversation", conv_id, "--say", HOSTILE["csi"], "--no-wait"
    )
    assert code == 0, err
    assert out == f"{expected(REPLY)}\n"

    code, out, err = run(capsys, "doctor", "--load")
    assert code == 0, err
    assert expected(MODEL_NAME) in out


def test_error_lines_show_hostile_values_literally(capsys):
    code, _out, err = run(capsys, "chat", "[/OOC] \x1b]0;title\x07", "--say", "hi")
    assert code == 1
    assert "no character card named '[/OOC] \\x1b]0;title\\x07'" in err  # repr: escaped
