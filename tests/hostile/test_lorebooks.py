"""Lorebooks that multiply (tests/hostile/lorebooks.py): the turn ends within the lore step's
bound, with what was chosen so far, and what the scan left out is said in the log, on
standard error and in the inspector.

Before the whole step was bounded, each of these ran the turn past 120 s: the chain for
3,000 recursion rounds over a growing text, the regex cards for 0.25 s of CPU per key (400
or 500 keys, or five per selective entry).
"""

from __future__ import annotations

import json
import time

import pytest

from kotonia_tui.characters.lore_scan import LORE_COUNT_S, LORE_SCAN_S
from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.config import app_dirs
from kotonia_tui.tui.widgets.inspector_sections import lore_content
from tests.settings import tiny_settings

from .harness import assert_ok, kotonia
from .lorebooks import MULTIPLYING

# The step's own bound, one regex key's overshoot on a loaded machine, and the rest of a
# `kotonia chat` run on the tiny model (start-up, load, a short reply) with room to spare.
RUN_BOUND_S = 60.0


def write_card(key: str, card: dict) -> None:
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.json").write_text(json.dumps(card), encoding="utf-8")


@pytest.mark.parametrize("name", MULTIPLYING, ids=MULTIPLYING)
def test_a_lorebook_that_multiplies_ends_the_turn_and_says_what_it_left_out(
    name, short_reply_model
):
    make, said = MULTIPLYING[name]
    write_card(name, make())
    env = {"KOTONIA_MODEL_PATH": str(short_reply_model), "KOTONIA_N_CTX": "2048"}
    run = kotonia("chat", name, "--say", said, env=env, timeout=RUN_BOUND_S)
    assert_ok(run)
    assert run.out.strip() == "The lamp is lit."
    notes = [line for line in run.err.splitlines() if "lorebook scan stopped" in line]
    assert len(notes) == 1, run.err
    assert "not checked" in notes[0] or "not counted" in notes[0], notes[0]
    log = (app_dirs().data / "kotonia.log").read_text(encoding="utf-8")
    assert "lorebook scan stopped" in log


async def test_the_inspector_says_what_the_scan_left_out(short_reply_model):
    """The chain card: the entries that fired before the bound are listed (sent, within the
    budget), and one line says why the scan stopped and how much it did not check."""
    make, said = MULTIPLYING["chain-3000"]
    write_card("chain", make())
    service = open_service(tiny_settings(short_reply_model, n_ctx=2048))
    notices: list[str] = []
    service.subscribe(lambda event: notices.append(getattr(event, "text", "")))
    await service.start()
    try:
        conv = service.new_conversation(service.library.get("chain"))
        started = time.monotonic()
        turn = await service.send(conv.id, said)
        prepared_s = time.monotonic() - started
        result = await turn.wait()
        assert result.error is None, result.error
        selection = service.memory_view(conv.id).lore.selection
        assert selection.cut is not None
        shown = lore_content(service.memory_view(conv.id)).plain.splitlines()
        again = await service.send(conv.id, "And rune0 again?")
        assert (await again.wait()).error is None
        assert service.memory_view(conv.id).lore.selection.cut is not None
    finally:
        await service.close()
    # Said once for the card, though the second turn stopped the same way (the log has both).
    assert sum("lorebook scan stopped" in n for n in notices) == 1, notices
    assert shown[-1].startswith("✗ the lorebook scan stopped because")
    assert "entries of card not checked" in shown[-1] and "recursion stopped after" in shown[-1]
    fired = [line for line in shown if line.startswith(("✓ rune", "✗ rune"))]
    assert len(fired) == len(selection.fired) < 3_000
    assert any(line.startswith("✓ rune 0 (card) on 'rune0'") for line in fired), fired
    # Preparing the turn (lore included) stays near the step's bound, far from the minutes
    # the chain took before (generous: the machine is shared).
    assert prepared_s < 10 * (LORE_SCAN_S + LORE_COUNT_S), prepared_s
