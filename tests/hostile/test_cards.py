"""Hostile cards in the user's folder: each one is refused or repaired with a line naming the
file and the field; every other card stays usable; nothing hangs (a lorebook regex key that
backtracks for ever is stopped and turned off for its card)."""

from __future__ import annotations

import json

import pytest

from kotonia_tui.config import app_dirs
from kotonia_tui.store import Store

from .corpus import (
    CATASTROPHIC_KEY,
    REFUSED_CARDS,
    REPAIRED_CARDS,
    expansion_card,
    regex_trap_card,
)
from .harness import assert_ok, assert_refused, kotonia


def put_card(name: str, content: bytes | dict) -> None:
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    data = json.dumps(content).encode() if isinstance(content, dict) else content
    (folder / name).write_bytes(data)


@pytest.mark.parametrize(
    ("name", "content", "named"), REFUSED_CARDS, ids=[c[0] for c in REFUSED_CARDS]
)
def test_a_hostile_card_is_named_and_the_others_still_list(name, content, named, card):
    put_card(name, content)
    run = kotonia("characters")
    assert_ok(run)
    keys = [line.split("\t")[0] for line in run.out.splitlines()]
    assert card in keys and "rowan-ashby" in keys  # every other card is still offered
    assert name.removesuffix(".json") not in keys
    warnings = [line for line in run.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, run.err
    for part in (name, *named):
        assert part in warnings[0], warnings[0]
    assert len(warnings[0]) < 400, warnings[0]


@pytest.mark.parametrize(
    ("name", "content", "shown"), REPAIRED_CARDS, ids=[c[0] for c in REPAIRED_CARDS]
)
def test_invalid_unicode_in_a_card_is_replaced_and_said_once(name, content, shown, card):
    """A lone surrogate crashed `kotonia characters` for every card; now U+FFFD, one note."""
    put_card(name, content)
    for args in (("characters",), ("characters", "--json")):
        run = kotonia(*args)
        assert_ok(run)
        notes = [line for line in run.err.splitlines() if "U+FFFD" in line]
        assert len(notes) == 1 and name in notes[0], run.err
    names = {row["name"] for row in json.loads(run.out)}
    assert shown in names and "Wren" in names


def test_a_backtracking_lorebook_key_is_stopped_and_turned_off(short_reply_model):
    """`(a|aa)+$` against a greeting of 40 a's ran past 240 s; now each key has a time bound,
    the key is turned off for the card (said once), and the chat goes on."""
    put_card("trap.json", regex_trap_card())
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    run = kotonia("chat", "trap", "--say", "Is the lamp lit?", "--say", "And now?", env=env)
    assert_ok(run)
    notes = [line for line in run.err.splitlines() if CATASTROPHIC_KEY in line]
    assert len(notes) == 1, run.err  # the second turn does not scan it again
    assert "turned off" in notes[0] and "Trap" in notes[0]
    with Store.open(app_dirs().default_db) as store:
        (conv,) = store.list_conversations()
        texts = [m.text for m in store.iter_messages(conv.id)]
    assert "Is the lamp lit?" in texts and "And now?" in texts


def test_a_setup_that_expands_past_the_bound_is_refused_naming_the_field(short_reply_model):
    """Within every size bound on disk, but {{user}} with a long persona name would fill
    millions of characters: refused before anything is built or tokenized."""
    put_card("wide.json", expansion_card())
    env = {
        "KOTONIA_MODEL_PATH": str(short_reply_model),
        "KOTONIA_N_CTX": "2048",
        "KOTONIA_PERSONA__NAME": "P" * 150,
    }
    assert_refused(kotonia("chat", "wide", "--say", "hi", env=env), "wide.json", "data.description")
