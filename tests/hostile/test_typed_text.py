"""What the user types or sets that is not valid Unicode, and settings that cannot be read:
the message is sent with U+FFFD (said once), a bad variable is one line naming it."""

from __future__ import annotations

import os

import pytest

from kotonia_tui.config import app_dirs
from kotonia_tui.store import Store

from .harness import assert_ok, assert_refused, kotonia


def stored_texts() -> list[tuple[str, str]]:
    with Store.open(app_dirs().default_db) as store:
        (conv,) = store.list_conversations()
        return [(m.speaker, m.text) for m in store.iter_messages(conv.id)]


@pytest.fixture
def env(card, scripted_model) -> dict[str, str]:
    return {"KOTONIA_MODEL_PATH": str(scripted_model("Hello there."))}


def test_a_say_argument_that_is_not_utf8_is_sent_with_a_replacement(env):
    """`--say $'caf\\xe9'` gave a traceback and the message was gone."""
    run = kotonia("chat", "wren", "--say", os.fsdecode(b"caf\xe9 au lait"), env=env)
    assert_ok(run)
    assert run.out == "Hello there.\n"
    assert ("User", "caf\ufffd au lait") in stored_texts()
    assert len([line for line in run.err.splitlines() if "U+FFFD" in line]) == 1


def test_piped_input_that_is_not_utf8_is_sent_with_a_replacement(env):
    lines = b"first caf\xe9\nsecond \xff\xfe na\xefve\n"
    run = kotonia("chat", "wren", stdin=lines, env=env)
    assert_ok(run)
    texts = [text for speaker, text in stored_texts() if speaker == "User"]
    assert texts == ["first caf\ufffd", "second \ufffd\ufffd na\ufffdve"]
    assert len([line for line in run.err.splitlines() if "U+FFFD" in line]) == 1  # said once


def test_a_persona_name_that_is_not_utf8_is_stored_with_a_replacement(env):
    run = kotonia("chat", "wren", "--say", "hi", env={**env, "KOTONIA_PERSONA__NAME": "Ann\udce9"})
    assert_ok(run)
    assert ("Ann\ufffd", "hi") in stored_texts()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("KOTONIA_PROFILES", "{bad", "not valid JSON"),
        ("KOTONIA_PERSONA", '{"name":', "not valid JSON"),
        ("KOTONIA_KEYS", "[1]", "dictionary"),
        ("KOTONIA_N_CTX", "abc", "integer"),
        ("KOTONIA_FOLD_DELAY_S", "inf", "finite"),
        ("KOTONIA_FOLD_DELAY_S", "nan", "finite"),
        ("KOTONIA_PROFILES", '{"x": {"n_ctx": "a"}}', "profiles.x.n_ctx"),
    ],
    ids=["profiles-json", "persona-json", "keys-list", "n-ctx-text", "delay-inf", "delay-nan",
         "profile-field"],
)  # fmt: skip
def test_a_setting_that_cannot_be_read_is_one_line_naming_the_variable(name, value, said):
    assert_refused(kotonia("characters", env={name: value}), name, said)
