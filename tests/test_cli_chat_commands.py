"""`kotonia chat CARD --conversation ID` in the terminal: the last messages come first,
numbered as the app numbers them, and the player's commands (/help, /regenerate, /swipe,
/continue, /edit) run instead of being sent as text. In process on a tiny scripted GGUF (the
same reply to any prompt), the typed lines from a pipe."""

from __future__ import annotations

import io

import pytest

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.cli import main
from kotonia_tui.config import load_settings
from kotonia_tui.domain import Role

REPLY = "Let me see it."


@pytest.fixture
def scripted_env(monkeypatch, scripted_model):
    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(scripted_model(REPLY)))
    monkeypatch.setenv("KOTONIA_N_CTX", "8192")


def run(capsys, monkeypatch, *argv: str, typed: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(typed))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def started(capsys, monkeypatch) -> str:
    """A conversation with Rowan: the greeting, one message and its reply; its id."""
    code, _out, err = run(capsys, monkeypatch, "chat", "rowan", "--say", "Hello.", "--no-wait")
    assert code == 0, err
    return next(x for x in err.splitlines() if x.startswith("conversation ")).split()[1]


def test_continuing_shows_the_last_messages_and_runs_the_commands(
    capsys, monkeypatch, scripted_env
):
    conv = started(capsys, monkeypatch)
    typed = "\n".join(
        (
            "/help",
            "/regenerate",
            "/swipe back",
            "/edit #2 Hello, Rowan.",
            "/bogus",
            "/swipe sideways",
            "//shrug",
        )
    )
    code, out, err = run(
        capsys, monkeypatch, "chat", "rowan", "--conversation", conv, "--no-wait", typed=typed
    )
    assert code == 0, err
    # Where the story stands, first: the greeting (#1), the message and its reply.
    assert out.startswith("#1 Rowan Ashby: ")
    assert f"\n#2 User: Hello.\n#3 Rowan Ashby: {REPLY}\n" in out
    for usage in ("/help", "/regenerate", "/swipe [back]", "/continue", "/edit [#N] TEXT"):
        assert usage in err
    assert "(version 1 of 2)" in err  # /regenerate wrote a second version; back to the first
    assert "#2 edited: User: Hello, Rowan." in err
    assert "error: /bogus is not a command: /help lists them" in err
    assert "error: /swipe takes 'back' or nothing, got 'sideways'" in err
    with open_store(load_settings()) as store:
        messages = store.recent_messages(int(conv), 10)
    assert [m.text for m in messages if m.role is Role.USER] == ["Hello, Rowan.", "/shrug"]
    reply = messages[2]
    assert len(reply.alternatives) == 2 and reply.chosen == 0
    assert not any("bogus" in m.text or "sideways" in m.text for m in messages)


def test_continue_runs_a_turn_on_the_last_reply_and_bad_commands_are_named(
    capsys, monkeypatch, scripted_env
):
    """/continue is the app's Ctrl+G: a turn that carries on the last reply (the scripted
    model has said all it says, so nothing is added), never a message "/continue"."""
    conv = started(capsys, monkeypatch)
    code, out, err = run(
        capsys, monkeypatch, "chat", "rowan", "--conversation", conv, "--no-wait",
        typed="/continue\n/swipe back\n/edit\n",
    )  # fmt: skip
    assert code == 0, err
    with open_store(load_settings()) as store:
        messages = store.recent_messages(int(conv), 10)
    assert [m.text for m in messages[1:]] == ["Hello.", REPLY]  # nothing sent, nothing lost
    assert out.count("Rowan Ashby: ") == 3  # #1, #3, then the continuation's turn
    assert "error: /swipe back: this is the first version" in err
    assert "error: /edit needs the new text: /edit [#N] TEXT" in err
