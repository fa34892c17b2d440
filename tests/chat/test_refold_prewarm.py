"""A refold (after an edit inside a chapter) and a major fold are prewarmed like a chapter that
lands (issue 30): the turn that applies them evaluates what a warm turn does, not the prompt.

Fake engine (tests/fake_engine.py): these tests are about which prompt the service prewarms
and what the next turn evaluates, which the fake counts in positions as the real engine does
(its KV contexts reuse the longest common prefix); they do not depend on the model.
"""

from __future__ import annotations

from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.domain import Role, TurnMetrics
from tests.cards import write_short_card
from tests.fake_engine import scripted

from .test_folding import CHAPTER, chat_until, fake_settings_for
from .test_small_windows import ON_TARGET, fold_until, telling, told_in_chapters


async def _applying_turn(service: ChatService, conv_id: int, text: str) -> tuple[Turn, TurnMetrics]:
    """Wait until the folds have landed and their prewarm has run, then send `text`."""
    await service.worker.wait_settled(conv_id)
    while service._prewarm_task is not None and not service._prewarm_task.done():
        await service._prewarm_task
    turn = await service.send(conv_id, text)
    done = await turn.wait()
    assert done.error is None and done.metrics is not None
    return turn, done.metrics


async def _warm_turn(service: ChatService, conv_id: int) -> TurnMetrics:
    await service.states_settled()
    done = await (await service.send(conv_id, "I pour the tea.")).wait()
    assert done.error is None and done.metrics is not None
    await service.states_settled()
    return done.metrics


async def test_the_turn_after_a_refold_evaluates_what_a_warm_turn_does(make_fake_service):
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(prewarm_after_fold=True), scripted(CHAPTER))
    conv_id = service.new_conversation(service.library.get(key)).id
    await chat_until(service, conv_id, lambda turn: turn.prepared.queued is not None)
    turn, _metrics = await _applying_turn(service, conv_id, "And then?")
    assert turn.prepared.plan.apply_landed
    warm = await _warm_turn(service, conv_id)

    chapter = service.store.chapters(conv_id)[0]
    inside = next(
        m
        for m in service.store.messages_between(
            conv_id, chapter.first_message_id, chapter.last_message_id
        )
        if m.role is Role.USER
    )
    service.edit_message(inside.id, "Message number 0 about the lamps and the brass compass.")
    turn, after = await _applying_turn(service, conv_id, "I pour the tea.")

    assert turn.prepared.plan.apply_landed  # the refold's chapter is in this prompt
    replaced = service.store.get_chapter(chapter.id).superseded_by
    assert replaced is not None
    assert service.store.get_chapter(replaced).first_message_id == chapter.first_message_id
    print(
        f"\nwarm turn: {warm.evaluated} of {warm.prompt_positions} evaluated; "
        f"after the refold: {after.evaluated} of {after.prompt_positions}"
    )
    assert after.evaluated < after.prompt_positions / 4


async def test_a_refold_in_a_conversation_only_opened_and_edited_is_prewarmed(make_fake_service):
    """The user opens a conversation in a new session and edits a message inside a chapter,
    with no turn yet: the refold that lands is prewarmed all the same, so the first turn
    does not read the whole prompt (it read 3,926 tokens, 106 s, in the issue)."""
    key = write_short_card()
    settings = fake_settings_for(prewarm_after_fold=True)
    first = await make_fake_service(settings, scripted(CHAPTER))
    conv_id = first.new_conversation(first.library.get(key)).id
    await chat_until(first, conv_id, lambda turn: turn.prepared.queued is not None)
    await _applying_turn(first, conv_id, "And then?")
    first.worker.pause()  # the new session's worker runs the refold

    service = await make_fake_service(settings, scripted(CHAPTER), db=first.store.path)
    await service.open_conversation(conv_id)
    await service.states_settled()
    chapter = service.store.chapters(conv_id)[0]
    service.edit_message(
        chapter.first_message_id + 1, "Message number 0 about the lamps and the brass compass."
    )
    turn, after = await _applying_turn(service, conv_id, "I pour the tea.")

    assert turn.prepared.plan.apply_landed
    assert service.store.get_chapter(chapter.id).superseded_by is not None
    print(f"\nafter the refold: {after.evaluated} of {after.prompt_positions} evaluated")
    assert after.evaluated < after.prompt_positions / 4


async def test_the_turn_after_a_major_fold_evaluates_what_a_warm_turn_does(make_fake_service):
    key = write_short_card()
    service = await make_fake_service(
        fake_settings_for(prewarm_after_fold=True, fold_quote_first=False),
        told_in_chapters(ON_TARGET["en"]),
    )
    conv_id = service.new_conversation(service.library.get(key)).id
    await fold_until(
        service,
        conv_id,
        lambda: service.store.current_synopsis(conv_id) is not None,
        say=telling(ON_TARGET["en"]),
    )
    turn, after = await _applying_turn(service, conv_id, "I pour the tea.")

    assert turn.prepared.plan.apply_landed
    assert ON_TARGET["en"] in turn.prepared.state.memory_text  # the synopsis is in this prompt
    print(f"\nafter the major fold: {after.evaluated} of {after.prompt_positions} evaluated")
    assert after.evaluated < after.prompt_positions / 4
