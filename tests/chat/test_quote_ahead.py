"""Quote at the trigger (issue 30): when a reply ends and the next turn would cut, what it would
cut is quoted then, and the prompt that carries the quotes is prewarmed while the player types;
the turn that applies them evaluates what a warm turn does.

Real SQLite, the real fold worker and service, on the fake engine (tests/fake_engine.py): these
tests are about which prompt is prewarmed and how many positions a turn evaluates, which the
fake counts as the real engine does (its KV contexts reuse the longest common prefix); they do
not depend on the model. The chronicler is held, so the quotes stay in the memory.
"""

from __future__ import annotations

from kotonia_tui.chat.events import FoldWait, MemoryNotice
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.domain import TurnMetrics
from kotonia_tui.engine import Slot
from tests.cards import write_short_card
from tests.fake_engine import FakeEngine, scripted

from .test_folding import CHAPTER, fake_settings_for
from .test_quote_first import _from_the_source, _long_chat
from .test_small_windows import events_of


def _quoted(service: ChatService, conv_id: int) -> int:
    return sum(1 for c in service.store.chapters(conv_id, include_in_synopsis=True) if c.quoted)


async def _send(service: ChatService, conv_id: int, text: str) -> tuple[Turn, TurnMetrics]:
    turn = await service.send(conv_id, text)
    done = await turn.wait()
    assert done.error is None and done.metrics is not None
    return turn, done.metrics


async def _until_quoted_ahead(service: ChatService, conv_id: int) -> int:
    """Chat until a reply's look-ahead quoted something (the player reading the reply: the
    look-ahead and its prewarm have run); returns how many turns that took."""
    for index in range(200):
        _turn, _metrics = await _send(service, conv_id, f"Message number {index} about lamps.")
        quoted_by_turns = _quoted(service, conv_id)
        await service.looked_ahead()
        if _quoted(service, conv_id) > quoted_by_turns:
            return index + 1
    raise AssertionError("no reply's look-ahead ever quoted")


def _held_service(service: ChatService) -> FakeEngine:
    engine = service.engine
    assert isinstance(engine, FakeEngine)
    engine.hold(lambda request: request.slot is Slot.FOLD)
    return engine


async def test_the_turn_after_a_quote_at_the_trigger_evaluates_only_its_new_message(
    make_fake_service,
):
    """The player reads the reply while the quotes are prewarmed; their next turn carries the
    quotes and evaluates no more than the warm turn after it (the new message and the notes
    after the history), and quotes nothing itself."""
    key = write_short_card()
    service = await make_fake_service(
        fake_settings_for(fold_delay_s=0, prewarm_after_fold=True), scripted(CHAPTER)
    )
    engine = _held_service(service)
    conv_id = service.new_conversation(service.library.get(key)).id
    await _until_quoted_ahead(service, conv_id)
    events = events_of(service)

    turn, applying = await _send(service, conv_id, "I light the brass lamp by the door.")
    await service.looked_ahead()
    _warm_turn, warm = await _send(service, conv_id, "I pour the tea for both of us.")

    assert turn.prepared.plan.apply_landed  # this turn carries the quotes
    assert turn.prepared.plan.forced_cut_through is None
    assert turn.prepared.fold_wait_ms == 0.0
    assert not [e for e in events if isinstance(e, FoldWait)]
    said = [e.text for e in events if isinstance(e, MemoryNotice)]
    assert not [text for text in said if "quoted in the memory" in text], said
    print(
        f"\napplying the quotes: {applying.evaluated} of {applying.prompt_positions} "
        f"evaluated; the warm turn after: {warm.evaluated} of {warm.prompt_positions}"
    )
    assert applying.evaluated <= warm.evaluated + 8
    assert applying.evaluated < applying.prompt_positions / 4
    assert engine.requests  # the chronicler was asked and is still held


async def test_without_the_prewarm_the_turn_that_applies_the_quotes_reads_the_prompt(
    make_fake_service,
):
    """The same chat with the prewarm off: the turn that carries the quotes evaluates most of
    its prompt (what the prewarm above saves)."""
    key = write_short_card()
    service = await make_fake_service(
        fake_settings_for(fold_delay_s=0, prewarm_after_fold=False), scripted(CHAPTER)
    )
    _held_service(service)
    conv_id = service.new_conversation(service.library.get(key)).id
    await _until_quoted_ahead(service, conv_id)

    turn, applying = await _send(service, conv_id, "I light the brass lamp by the door.")

    assert turn.prepared.plan.apply_landed
    assert applying.evaluated > applying.prompt_positions / 2


async def test_a_reply_far_from_the_ceiling_quotes_nothing_ahead(make_fake_service):
    """A short chat: the look-ahead after each reply plans the next turn and finds nothing to
    carry; no chapter is quoted and no chapter job is queued by it."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(fold_delay_s=0), scripted(CHAPTER))
    _held_service(service)
    conv_id = service.new_conversation(service.library.get(key)).id
    for index in range(3):
        await _send(service, conv_id, f"Message number {index} about lamps.")
        await service.looked_ahead()

    assert _quoted(service, conv_id) == 0
    assert service.store.fold_jobs(conv_id) == []


async def test_a_long_import_opened_is_quoted_and_prewarmed_before_its_first_turn(
    make_fake_service, tmp_path
):
    """300 imported messages at n_ctx 2048, opened as the app opens a conversation: the
    backlog is quoted and the first turn's prompt prewarmed while the player writes, so the
    first turn evaluates a small part of its prompt (the figures are printed; the turn
    sent at once after the import reads it all, as the contrast shows)."""
    write_short_card()
    service = await make_fake_service(
        fake_settings_for(fold_delay_s=0, prewarm_after_fold=True), _from_the_source
    )
    _held_service(service)
    opened = service.manager.import_file(_long_chat(tmp_path / "long.jsonl", 300)).conversation
    at_once = service.manager.import_file(_long_chat(tmp_path / "again.jsonl", 300)).conversation

    await service.open_conversation(opened.id)
    await service.looked_ahead()
    first = await service.answer(opened.id)
    done = await first.wait()
    cold = await (await service.answer(at_once.id)).wait()

    assert done.error is None and done.metrics is not None
    assert cold.error is None and cold.metrics is not None
    assert first.prepared.plan.apply_landed and first.prepared.plan.forced_cut_through is None
    assert first.prepared.fold_wait_ms == 0.0
    print(
        f"\nfirst turn after opening: {done.metrics.evaluated} of "
        f"{done.metrics.prompt_positions} evaluated; sent at once: {cold.metrics.evaluated} "
        f"of {cold.metrics.prompt_positions}"
    )
    assert done.metrics.evaluated < done.metrics.prompt_positions / 4
    assert cold.metrics.evaluated > cold.metrics.prompt_positions / 2
