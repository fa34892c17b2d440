"""The chat service end to end on the GLM stand-ins: real SQLite, real fold worker, the GLM chat
template for replies and for the chronicler. Scripted models fix the text where it matters."""

from __future__ import annotations

from pathlib import Path

import pytest

from kotonia_tui.chat.events import ReplyDelta
from kotonia_tui.chat.turn import NO_REPLY
from kotonia_tui.domain import MessageStatus
from tests.cards import write_short_card
from tests.chat.conftest import cancel_turn_after
from tests.chat.test_folding import CHAPTER, chat_until
from tests.scripted_chapters import written_by_script
from tests.settings import tiny_settings
from tests.tiny_models import write_tiny_png


async def open_chat(make_service, settings, db: Path | None = None):
    """A service on `settings` (and `db`) and a new conversation with the short test card."""
    key = write_short_card()
    service = await make_service(settings, db)
    return service, service.new_conversation(service.library.get(key))


async def test_an_image_turn_is_stored_and_the_next_turn_reuses_it(
    make_service, scripted_glm, mmproj_for, tmp_path
):
    reply = "What a fine lens."
    model = scripted_glm(reply)
    service, conv = await open_chat(
        make_service, tiny_settings(model, mmproj=mmproj_for(model), n_ctx=2048)
    )
    digest = service.attach_image(write_tiny_png(tmp_path / "lens.png", (32, 48)))
    first = await (await service.send(conv.id, "Look at the lens.", [digest])).wait()
    assert first.error is None and first.reply.text == reply
    assert first.metrics.images == 1
    assert service.store.last_turn_metrics(conv.id) == first.metrics
    # The memory's budgets count the message with its picture's 24 KV cells (4x6), not its
    # 6 positions.
    sent = service.store.recent_messages(conv.id, 3)[-2]
    assert sent.images == [digest]
    assert service.prompter.message_tokens(sent) >= service.engine.count_tokens(sent.text) + 24
    second = await (await service.send(conv.id, "Is it clean?")).wait()
    assert second.reply.text == reply and second.metrics.images == 1
    # The image (24 KV cells) is not evaluated again: only the new turn's few tokens are.
    assert second.metrics.reused >= first.metrics.prompt_positions
    assert second.metrics.evaluated < 24


async def test_with_thinking_off_the_stored_reply_is_the_dialogue_only(make_service, scripted_glm):
    service, conv = await open_chat(
        make_service, tiny_settings(scripted_glm("<think></think>\nWelcome back, Ann."), n_ctx=2048)
    )
    turn = await service.send(conv.id, "Hello again.")
    shown = [e.text async for e in turn if isinstance(e, ReplyDelta)]
    reply = turn.done.reply
    assert "".join(shown).strip() == reply.text == "Welcome back, Ann."
    stored = service.store.get_message(reply.id)
    assert stored.text == "Welcome back, Ann." and not stored.reasoning
    assert all("think>" not in segment.text for segment in stored.segments)


async def test_a_reply_that_is_only_a_thinking_block_is_not_stored_as_dialogue(
    make_service, scripted_glm
):
    service, conv = await open_chat(
        make_service, tiny_settings(scripted_glm("<think></think>"), n_ctx=2048)
    )
    turn = await service.send(conv.id, "Hello?")
    shown = [e.text async for e in turn if isinstance(e, ReplyDelta)]
    assert "".join(shown).strip() == ""
    done = turn.done
    assert done.reply is None
    assert done.error == NO_REPLY
    last = service.store.last_message(conv.id)
    assert last.text == "Hello?"  # the user's message stays; no empty reply was stored


async def test_with_thinking_on_the_reasoning_is_stored_apart(make_service, scripted_glm):
    script = "<think>Ann looks cold.</think>\nSit by the fire."
    service, conv = await open_chat(
        make_service, tiny_settings(scripted_glm(script), n_ctx=2048, thinking=True)
    )
    turn = await service.send(conv.id, "Hello, Wren.")
    shown = [e.text async for e in turn if isinstance(e, ReplyDelta)]
    stored = service.store.get_message(turn.done.reply.id)
    assert (stored.text, stored.reasoning) == ("Sit by the fire.", "Ann looks cold.")
    assert "".join(shown).strip() == "Sit by the fire."


async def test_a_cancelled_reply_is_stored_as_cancelled(make_service, glm_endless_model_path):
    service, conv = await open_chat(
        make_service,
        tiny_settings(glm_endless_model_path, n_ctx=2048, reply_max_tokens=600, temperature=0.8),
    )
    turn = await service.send(conv.id, "Tell me everything.")
    await cancel_turn_after(turn, 3)
    reply = service.store.get_message(turn.done.reply.id)
    assert reply.status is MessageStatus.CANCELLED
    assert turn.done.metrics.generated < 600
    after = await (await service.send(conv.id, "Short, then.")).wait()
    assert after.error is None and after.metrics.reused > 0


@pytest.mark.slow
async def test_a_fold_through_the_chat_template_lands_and_the_prewarm_makes_it_cheap(
    make_service, scripted_glm, tmp_path
):
    model = scripted_glm(CHAPTER)
    figures = {}
    for prewarm in (False, True):
        # Recall off: its excerpts come after the history and are read again each turn (their
        # cost is benchmark 8's); this test is about what the prewarm saves.
        settings = tiny_settings(
            model,
            n_ctx=2048,
            reply_max_tokens=32,
            prewarm_after_fold=prewarm,
            recall_budget_ratio=0.0,
        )
        # Each round on its own database: the first round's worker (prewarm off) is still
        # running and would otherwise take the second round's folds, and their landing.
        service, conv = await open_chat(make_service, settings, tmp_path / f"round-{prewarm}.db")
        # The user says what the scripted chronicler records: a chapter's items must rest on
        # the messages they cite.
        await chat_until(
            service,
            conv.id,
            lambda turn: turn.prepared.queued is not None,
            say=lambda index: f"{CHAPTER} ({index})",
        )
        await service.worker.wait_settled(conv.id)
        # The chronicler's answer through GLM's template (thinking off) is the chapter: the
        # script's words in the chapter's structure (thinking would have taken them).
        chapters = service.store.chapters(conv.id)
        assert chapters and all(written_by_script(c, CHAPTER) for c in chapters)
        if prewarm:
            await service._prewarm_task
        applying = await service.send(conv.id, "And then?")
        done = await applying.wait()
        assert done.error is None and applying.prepared.plan.apply_landed
        assert all(c.text in applying.prepared.state.memory_text for c in chapters)
        figures[prewarm] = done.metrics
        after = await (await service.send(conv.id, "Go on.")).wait()
        assert after.metrics.reused >= done.metrics.prompt_positions - 2
        assert after.metrics.evaluated < after.metrics.prompt_positions / 4
    cold, warm = figures[False], figures[True]
    assert cold.evaluated > cold.prompt_positions / 2
    assert warm.evaluated < warm.prompt_positions / 4
