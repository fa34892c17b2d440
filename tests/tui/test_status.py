"""The status line's fold item: every fold state has its own words (no stale "running")."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kotonia_tui.chat.events import FoldProgress, FoldState, MemoryNotice, TurnPrepared
from kotonia_tui.domain import Conversation, FoldKind, Role, StoredFoldJob
from kotonia_tui.engine import Slot
from kotonia_tui.tui.app import KotoniaApp, fold_status
from kotonia_tui.tui.screens.chat_base import STOPPING
from kotonia_tui.tui.widgets.chat_input import ChatInput
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, wait_for
from tests.tui.screen_text import screen_text

WORDS = {
    FoldState.QUEUED: "queued",
    FoldState.RUNNING: "running",
    FoldState.DEFERRED: "waiting: the model server did not answer",
    FoldState.LANDED: "landed: applied on the next turn",
    FoldState.FAILED: "failed: the model server did not answer",
}


@pytest.mark.parametrize("state", list(FoldState))
def test_every_fold_state_has_its_own_status(state: FoldState) -> None:
    job = StoredFoldJob(id=7, conversation_id=1, kind=FoldKind.MAJOR_GC)
    event = FoldProgress(1, job, state, "the model server did not answer")
    text = fold_status(event).plain
    # The job by its kind (a major fold has no range), never by its store id ("#7").
    assert text.endswith(f" major fold {WORDS[state]}") and "#7" not in text
    # As the service tells it: by the range it folds, in message numbers.
    chapter = StoredFoldJob(
        id=7, conversation_id=1, kind=FoldKind.CHAPTER, first_message_id=40, last_message_id=44
    )
    event = FoldProgress(
        1, chapter, state, "the model server did not answer", label="chapter #5-#9"
    )
    assert fold_status(event).plain.endswith(f" chapter #5-#9 {WORDS[state]}")
    # A deferred job waits for the server: the line must not keep saying it runs.
    assert ("running" in text) is (state is FoldState.RUNNING)


async def test_a_chat_shows_its_own_conversations_notices_and_a_new_turn_clears_them(
    tiny_eos_model_path, mira_card
):
    """A notice or fold line of another conversation never shows in this chat; the notices of a
    turn are gone when the next turn is made, and a landed fold's line when a turn applies it."""
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_chat(app, pilot)
        service = app.service
        assert service is not None
        other = service.store.create_conversation(
            Conversation(character_key="mira", character_name="Mira", persona_name="User")
        )
        job = StoredFoldJob(id=9, conversation_id=other.id, kind=FoldKind.CHAPTER)
        service._emit(MemoryNotice(other.id, "left out in the other chat"))
        service._emit(FoldProgress(other.id, job, FoldState.LANDED))
        await pilot.pause()
        assert "left out in the other chat" not in screen_text(app)
        assert "chapter landed" not in screen_text(app)

        mine = StoredFoldJob(id=10, conversation_id=screen.conv_id, kind=FoldKind.CHAPTER)
        service._emit(MemoryNotice(screen.conv_id, "lorebook entries left out this turn"))
        service._emit(FoldProgress(screen.conv_id, mine, FoldState.LANDED))
        await wait_for(pilot, lambda: "lorebook entries left out" in screen_text(app))
        assert "chapter landed: applied on the next turn" in screen_text(app)

        # A turn that applies the landed fold: the old notice and the "landed" line go.
        service._emit(TurnPrepared(screen.conv_id, fold_applied=True))
        await send(pilot, screen, "Hello again.")
        text = screen_text(app)
        assert "lorebook entries left out" not in text and "chapter landed" not in text


async def test_esc_while_the_prompt_is_read_says_stopping_and_stops_between_batches(
    tiny_noeos_model_path, mira_card
):
    """Esc while a long message's prompt is read: the status says "stopping" at once, and the
    engine stops after the batch it is in (counted in batches: the owner thread is held in its
    first batch until Esc is pressed); nothing is written."""
    app = KotoniaApp(tiny_settings(tiny_noeos_model_path, reply_max_tokens=64))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_chat(app, pilot)
        assert app.service is not None
        engine: Any = app.service.engine  # the real engine: its per-batch count is wrapped
        batches: list[int] = []
        first, pressed = threading.Event(), threading.Event()
        counted = engine._add_work

        def count(slot: Slot, *, evaluated: int = 0, generated: int = 0) -> None:
            counted(slot, evaluated=evaluated, generated=generated)
            if slot is Slot.CHAT and evaluated:
                batches.append(evaluated)
                if len(batches) == 1:
                    first.set()
                    pressed.wait(10)

        engine._add_work = count
        ended = screen.turns_ended
        screen.query_one(ChatInput).insert("the harbour and the boats " * 60)
        await pilot.press("enter")
        await wait_for(pilot, first.is_set)
        await pilot.press("escape")
        assert app.turn_status == STOPPING
        await wait_for(pilot, lambda: STOPPING in screen_text(app))
        pressed.set()
        await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming)
        assert len(batches) == 1  # the rest of the prompt (the long message) was never read
        assert app.turn_status == ""
        last = app.service.store.last_message(screen.conv_id)
        assert last is not None and last.role is Role.USER  # no reply was stored
