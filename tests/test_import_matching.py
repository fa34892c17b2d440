"""An imported chat is filed under the card it is with, so the app lists it with that card and
it can be continued: matched by the character's name (or key) in the file, and the CLI says
which card was chosen or that none matched. Before, a chat was filed under the character's
display name, appeared under no card, and `chat --conversation` said "is with Rowan Ashby, not
Rowan Ashby"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.cli import main
from kotonia_tui.config import load_settings
from kotonia_tui.domain import Conversation, Message, Role


def st_chat(path, character: str, last_is_user: bool = False):
    lines = [
        {"user_name": "Ann", "character_name": character, "chat_metadata": {}},
        {"name": character, "is_user": False, "mes": "*The bell rings.* Evening."},
        {"name": "Ann", "is_user": True, "mes": "I came about a clock."},
    ]
    if not last_is_user:
        lines.append({"name": character, "is_user": False, "mes": '"Show me."'})
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny_model_env(monkeypatch, scripted_model):
    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(scripted_model("Let me see it.")))
    monkeypatch.setenv("KOTONIA_N_CTX", "8192")


@pytest.mark.parametrize("written_as", ["Rowan Ashby", "  rowan ashby ", "rowan-ashby"])
def test_a_chat_is_matched_to_its_card_by_name_or_key(written_as, capsys, tmp_path, tiny_model_env):
    code, out, err = run(capsys, "import", str(st_chat(tmp_path / "chat.jsonl", written_as)))
    assert code == 0
    conv_id = out.strip()
    assert "with card rowan-ashby (Rowan Ashby)" in err
    code, out, _err = run(capsys, "conversations", "rowan")
    assert out.split("\t")[0] == conv_id  # listed with the card
    code, out, err = run(
        capsys, "chat", "rowan", "--conversation", conv_id, "--say", "Here.", "--no-wait"
    )
    assert code == 0, err
    assert out == "Let me see it.\n"


def test_no_matching_card_is_said_and_the_chat_is_kept(capsys, tmp_path):
    code, out, err = run(capsys, "import", str(st_chat(tmp_path / "chat.jsonl", "Nobody Known")))
    assert code == 0
    conv_id = out.strip()
    assert "no card matches the character 'Nobody Known'" in err
    assert "--character" in err
    code, out, err = run(capsys, "chat", "rowan", "--conversation", conv_id, "--say", "Hi")
    assert code == 1
    assert f"conversation {conv_id} is with Nobody Known" in err
    assert "not with Rowan Ashby (card rowan-ashby)" in err


def test_kotonias_own_export_comes_back_under_its_card(capsys, tmp_path):
    code, out, _err = run(capsys, "import", str(st_chat(tmp_path / "chat.jsonl", "Rowan Ashby")))
    exported = tmp_path / "export.jsonl"
    assert run(capsys, "export", out.strip(), "-o", str(exported))[0] == 0
    code, out, err = run(capsys, "import", str(exported))
    assert code == 0 and "with card rowan-ashby" in err


def test_a_chat_filed_under_a_name_before_matching_is_listed_and_continued(capsys, tiny_model_env):
    # What an import wrote before this fix: the key is the character's display name.
    with open_store(load_settings()) as store:
        conv = store.import_conversation(
            Conversation(
                character_key="Rowan Ashby", character_name="Rowan Ashby", persona_name="Ann"
            ),
            [
                Message(role=Role.CHARACTER, speaker="Rowan Ashby", text="Evening."),
                Message(role=Role.USER, speaker="Ann", text="Evening, Rowan."),
            ],
        )
    code, out, _err = run(capsys, "conversations", "rowan-ashby")
    assert out.split("\t")[0] == str(conv.id)
    code, out, err = run(
        capsys, "chat", "rowan", "--conversation", str(conv.id), "--say", "Well?", "--no-wait"
    )
    assert code == 0, err
    assert out == "Let me see it.\n"


def test_an_empty_line_in_the_terminal_chat_answers_the_last_message(
    capsys, tmp_path, tiny_model_env, monkeypatch
):
    import io

    code, out, _err = run(
        capsys, "import", str(st_chat(tmp_path / "chat.jsonl", "Rowan Ashby", last_is_user=True))
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))  # Enter on an empty line, then EOF
    code, out, err = run(capsys, "chat", "rowan", "--conversation", out.strip(), "--no-wait")
    assert code == 0, err
    assert "Rowan Ashby: Let me see it." in out


def test_the_id_line_comes_before_the_note_when_both_streams_share_a_pipe(tmp_path):
    """A script reading `kotonia import` through one pipe (2>&1) gets the id on its own line
    first; stdout was block-buffered and the id came out after the note, as `...card 1`."""
    chat = st_chat(tmp_path / "chat.jsonl", "Nobody Known")
    proc = subprocess.run(
        [sys.executable, "-m", "kotonia_tui", "import", str(chat)],
        # As a user's shell runs it: this machine's PYTHONUNBUFFERED would hide the fault.
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    first, rest = proc.stdout.split("\n", 1)
    assert first.isdigit(), proc.stdout
    assert rest.startswith("imported 3 messages into conversation " + first)


def test_a_speaker_with_no_card_is_named_with_what_to_do(capsys, tmp_path):
    """A list of lines whose user is not written under the persona's name becomes a group
    with a member that has no card (no turn can run in it): the import says so, and how to
    fix it, instead of leaving a chat that cannot go on unexplained."""
    chat = tmp_path / "brothers.json"
    lines = [
        {"speaker": "Rowan Ashby", "text": "Evening."},
        {"speaker": "Sam", "text": "Which gym do you go to?"},
        {"speaker": "Rowan Ashby", "text": "The one by the harbour."},
    ]
    chat.write_text(json.dumps(lines), encoding="utf-8")
    code, _out, err = run(capsys, "import", str(chat))
    assert code == 0
    assert (
        "note: " + f"{chat}: 'Sam' speaks in it as a character and no card matches, so the chat is "
        "a group that cannot go on until a card named 'Sam' is added; if 'Sam' is you, give "
        'those lines "role": "user" and import again (or import with --user \'Sam\')'
    ) in " ".join(err.split())
    # Said who the user is, the same file is a chat with Rowan that goes on, played as Sam.
    code, out, err = run(capsys, "import", str(chat), "--user", "Sam")
    assert code == 0, err
    assert "note:" not in err
    conv_id = int(out.split()[0])
    settings = load_settings()
    with open_store(settings) as store:
        conv = store.get_conversation(conv_id)
        messages = list(store.iter_messages(conv_id))
    assert conv.persona_name == "Sam" and conv.character_name == "Rowan Ashby"
    assert [(m.role, m.speaker) for m in messages] == [
        (Role.CHARACTER, "Rowan Ashby"),
        (Role.USER, "Sam"),
        (Role.CHARACTER, "Rowan Ashby"),
    ]
