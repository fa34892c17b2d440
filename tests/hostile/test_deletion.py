"""Issue 33, item 2: deleting a conversation (or a persona) leaves no copy of it in the cache.

Real `kotonia` subprocesses on a tiny scripted model: a turn saves the KV states (the
conversation's, whose header holds the prompt's token ids, and the setup's); `kotonia delete`
must take the conversation's along, and deleting a persona the setup states made with it.
"""

from __future__ import annotations

from pathlib import Path

from kotonia_tui.chat.derived_copies import DerivedCopies
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.config import app_dirs, load_settings
from kotonia_tui.store import Store

from .harness import assert_ok, kotonia

SECRET = "the smuggler hid the ledger under the third stair"


def _states(pattern: str) -> list[Path]:
    folder = app_dirs().cache / "kv-state"
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def _chat(card: str, model: Path, *extra: str) -> str:
    env = {"KOTONIA_MODEL_PATH": str(model), "KOTONIA_N_CTX": "2048"}
    run = kotonia("chat", card, "--say", SECRET, "--no-wait", *extra, env=env)
    assert_ok(run)
    with Store.open(app_dirs().default_db) as store:
        (conv_id,) = {c.id for c in store.list_conversations()}
    return str(conv_id)


def test_delete_removes_the_conversations_saved_state(card, short_reply_model):
    """Before: the `...-conversation-...-1.kvstate` file stayed; its header gave the deleted
    text back when detokenized."""
    conv_id = _chat(card, short_reply_model)
    saved = _states(f"*-conversation-*-{conv_id}.kvstate")
    assert saved, "the turn saved no state: the test would prove nothing"
    assert_ok(kotonia("delete", conv_id))
    assert _states("*conversation-*") == [], "a saved state of the deleted conversation stayed"
    assert _states(".*.partial") == []


def test_deleting_a_persona_removes_the_setup_states_made_with_it(card, short_reply_model):
    _chat(card, short_reply_model, "--persona", "Mara")
    assert _states("*-setup-*.kvstate"), "the turn saved no setup state"
    with Store.open(app_dirs().default_db) as store:
        (mara,) = [p for p in store.personas() if p.name == "Mara"]
        PersonaBook(store, load_settings().persona).delete(mara.id)
    assert _states("*-setup-*.kvstate") == []


def test_a_card_that_left_takes_its_setup_states_along(card, short_reply_model):
    _chat(card, short_reply_model)
    assert _states("*-setup-*.kvstate")
    assert DerivedCopies().forget_cards_except(["some-other-card"]) >= 1
    assert _states("*-setup-*.kvstate") == []
