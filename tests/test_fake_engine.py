"""The fake engine (tests/fake_engine.py) keeps the promises the chat and memory tests rely on:
its tokenizer counts every character, its chapter answers follow the schema they are given and
read as chapters, a user turn goes before background work, a call stops within a token when
cancelled, and what a context holds is reused."""

from __future__ import annotations

import asyncio
import json

import pytest

from kotonia_tui.domain import Message, Role
from kotonia_tui.engine import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    Priority,
    PromptTooLongError,
    Slot,
    TextDelta,
)
from kotonia_tui.memory.chapter_schema import ChapterSource, chapter_schema, schema_text
from kotonia_tui.memory.structured import parse_answer
from tests.fake_engine import (
    FakeEngine,
    SchemaMismatchError,
    answer_in_schema,
    by_kind,
    pieces,
    scripted,
)
from tests.settings import fake_settings

SCRIPT = "Ann lit the storm lamps of the lighthouse while Wren watched the sea."


def engine_for(answer=None, **values) -> FakeEngine:
    return FakeEngine.for_settings(fake_settings(**values), answer or scripted(SCRIPT))


def request(*texts: str, **fields) -> GenerationRequest:
    messages = tuple(ChatMessage("user", text, name="Ann") for text in texts)
    fields.setdefault("max_tokens", 64)
    return GenerationRequest(messages=messages, reply_name="Wren", user_name="Ann", **fields)


@pytest.mark.parametrize(
    "text",
    ["", "Ann: hello, world!", "  two\n\nlines\t", "安在暴风雨夜", "<|user|>\nhi</s>", "é🙂"],
)
def test_every_character_is_in_exactly_one_token(text: str) -> None:
    assert "".join(pieces(text)) == text
    assert len(pieces(text)) <= len(text)


def chapter_schema_for(ids: tuple[int, ...]) -> str:
    messages = [
        Message(id=i, role=Role.USER if i % 2 else Role.CHARACTER, speaker="Ann", text="Hi there.")
        for i in ids
    ]
    return schema_text(chapter_schema(ChapterSource.of(messages, ()), 1024, 0.5))


def test_prose_under_a_chapter_schema_is_a_chapter_that_carries_the_script() -> None:
    schema = chapter_schema_for((3, 4, 5))
    answer = parse_answer(answer_in_schema(SCRIPT, schema))
    (event,) = answer.events
    assert event.event.startswith("Ann lit the storm lamps") and event.ids == [3]
    # A string ends where the script writes a quote (the model closed it), and a script too
    # short for it is written again (a scripted model starts over).
    cut = parse_answer(answer_in_schema('Ann said "no" to Wren.', schema))
    assert cut.events[0].event == "Ann said Ann said"


def test_a_json_script_is_written_as_its_schema_allows() -> None:
    schema = chapter_schema_for((3, 4))
    written = json.loads(
        answer_in_schema(
            '{"events":[{"event":"Ann lit the lamps.","ids":[4]}],"resolved":[],"bogus":1}', schema
        )
    )
    assert list(written) == list(json.loads(schema)["required"])  # every list, in order
    assert written["events"] == [{"event": "Ann lit the lamps.", "ids": [4]}]
    assert "bogus" not in written and "resolved" not in written  # none of them allowed
    with pytest.raises(SchemaMismatchError):
        answer_in_schema('{"user_facts":[]}', schema)  # an event needs words the script lacks


async def test_a_reply_streams_is_cut_at_its_cap_and_counts_its_work() -> None:
    engine = engine_for()
    try:
        call = engine.start(request("Hello.", max_tokens=5))
        deltas = [event.text async for event in call if isinstance(event, TextDelta)]
        result = await call.result()
        assert result.finish_reason is FinishReason.LENGTH and result.metrics.generated == 5
        assert "".join(deltas) == result.text == "".join(pieces(SCRIPT)[:5]).strip()
        work = engine.work(Slot.CHAT)
        assert work.generated == 5 and work.evaluated == result.metrics.prompt_positions
        with pytest.raises(PromptTooLongError):
            await engine.generate(request("x " * 9000))
    finally:
        engine.close()


async def test_what_a_context_holds_is_reused_and_a_prewarm_it_holds_is_skipped() -> None:
    engine = engine_for()
    try:
        first = await engine.generate(request("One.", "Two."))
        second = await engine.generate(request("One.", "Two.", "Three."))
        assert second.metrics.reused > first.metrics.prompt_positions - 8
        assert second.metrics.evaluated < 16
        again = await engine.prewarm(request("One.", "Two.", "Three.")).result()
        assert again.metrics.evaluated == 0
    finally:
        engine.close()


async def test_a_user_turn_goes_before_background_work_and_cancel_stops_within_a_token() -> None:
    engine = engine_for(by_kind(chat="Yes.", prose=" ".join(["lamp"] * 400)))
    try:
        # The fold is held from its first written token on, for as long as it takes (held
        # before it starts: set after, a busy machine let the fold finish all 400 first).
        engine.hold(lambda held: held.slot is Slot.FOLD and engine.work(Slot.FOLD).generated > 0)
        fold = engine.start(
            request("Fold.", max_tokens=500, slot=Slot.FOLD, priority=Priority.BACKGROUND)
        )
        while engine.work(Slot.FOLD).generated == 0:  # until the fold is writing
            await asyncio.sleep(0.001)
        turn = await engine.generate(request("Quick?"))
        assert turn.text == "Yes."
        assert not fold._result.done()  # the turn went first: the fold is still writing
        fold.cancel()
        result = await fold.result()
        assert result.finish_reason is FinishReason.CANCELLED
        assert 0 < result.metrics.generated < 400
    finally:
        engine.close()
