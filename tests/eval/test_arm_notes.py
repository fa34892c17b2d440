"""Every arm of the evaluation carries a card's Character's Note where the generational arm's
Prompter puts it: the arms differ in their memory, never in the notes they carry.

Fake engine (tests/fake_engine.py), no fold run: this is about the prompts the arms assemble,
which do not depend on the model."""

from __future__ import annotations

import pytest

from kotonia_tui.domain import ChatMessage
from kotonia_tui.eval.arms import full, generational, rolling, truncation
from kotonia_tui.eval.replay import replay
from tests.eval.conftest import short_conversation
from tests.fake_engine import FakeEngine, scripted
from tests.settings import fake_settings

NOTE = {"prompt": "[{{char}} keeps the ledger for {{user}}.]", "role": "system"}
SHOWN = ChatMessage("system", "[Bo keeps the ledger for Ann.]")


@pytest.mark.parametrize("depth", [2, 0])
async def test_every_arm_carries_the_cards_note_where_the_generational_arm_does(tmp_path, depth):
    settings = fake_settings()
    engine = FakeEngine.for_settings(settings, scripted("Hm."))
    conv = short_conversation(6)
    card = conv.character.card()
    card = card.model_copy(update={"extensions": {"depth_prompt": {**NOTE, "depth": depth}}})
    replayed = await replay(
        conv, settings, engine, card=card, workdir=tmp_path, folds=False, semantic=False
    )
    try:
        arms = [
            generational(replayed, engine),
            truncation(replayed, engine, 100_000),
            await full(replayed, engine, bigger=None, max_ctx=engine.n_ctx, answered=False),
            await rolling(replayed, engine, max_output=64),
        ]
        ours = arms[0].messages
        assert ours is not None
        for arm in arms:
            messages = arm.messages
            assert messages is not None, arm.name
            at = [i - len(messages) for i, m in enumerate(messages) if m == SHOWN]
            # Depth 2: before the last two lines; depth 0: after the history, the last part.
            assert at == [-1 - depth], (arm.name, messages[-4:])
            assert messages[-1 - depth :] == ours[-1 - depth :], arm.name
    finally:
        await replayed.close()
