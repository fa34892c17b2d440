"""The chronicler's JSON schema, enforced by the in-process engine's grammar, on real tiny models.

A random-weight model that never ends by itself (its </s> pushed down) and one that wants to end
at once both end with a chapter that parses, within the byte bound the schema was sized to: the
answer cannot reach the output cap, whatever the model does.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from kotonia_tui.domain import ChatMessage, Message, Role
from kotonia_tui.engine import FinishReason, GenerationRequest, LlamaEngine, Slot
from kotonia_tui.memory.chapter_schema import (
    MIN_ITEM_CHARS,
    ChapterSource,
    chapter_schema,
    max_tokens,
    schema_text,
)
from kotonia_tui.memory.structured import parse_answer
from tests.engine.test_engine import profile

SOURCE = [
    Message(id=11, role=Role.USER, speaker="Ann", text="My sister Mia lands on the 14th."),
    Message(id=12, role=Role.CHARACTER, speaker="Rowan", text="Then we meet her at the pier."),
    Message(id=13, role=Role.USER, speaker="Ann", text="Never call me Annie."),
]
PROMPT = (
    ChatMessage("system", "Record the messages as JSON."),
    ChatMessage("user", "[#11] Ann: My sister Mia lands on the 14th."),
)


def starts_with_letter(text: str) -> bool:
    """After one space at most (a SentencePiece word token's)."""
    first = text[1] if text.startswith(" ") else text[0]
    return first.isalpha() or not first.isascii()


@pytest.mark.parametrize("budget", [240, 600])
def test_a_random_model_ends_with_a_chapter_inside_its_bound(
    tmp_path, tiny_noeos_model_path, budget
):
    schema = chapter_schema(ChapterSource.of(SOURCE, ()), budget)
    bound = max_tokens(schema)
    assert bound <= budget
    randomly = profile(tiny_noeos_model_path, temperature=1.0, seed=7)
    with LlamaEngine.open(randomly, cache_dir=tmp_path) as engine:
        for seed_run in range(3):
            result = asyncio.run(
                engine.generate(
                    GenerationRequest(
                        messages=PROMPT,
                        max_tokens=budget,
                        slot=Slot.FOLD,
                        json_schema=schema_text(schema),
                        temperature=1.0 + seed_run * 0.5,
                    )
                )
            )
            # Without the grammar this model runs to the cap every time ("length").
            assert result.finish_reason is FinishReason.STOP, result.text
            assert len(result.text.encode()) <= bound
            assert result.metrics.generated <= bound
            answer = parse_answer(result.text)
            assert 1 <= len(answer.events) <= schema["properties"]["events"]["maxItems"]
            for event in answer.events:
                assert set(event.ids) <= {11, 12, 13}
            for fact in answer.user_facts:
                assert set(fact.ids) <= {11, 13}  # the user's facts cite the user's lines
            # Every list is written (a small model closed the object after the events), and
            # every text starts with a letter and says at least a few characters (a 270M
            # model wrote "1", "1887" and "}, {" where the first schema let it). A letter is
            # what is not ASCII punctuation, digit or space: any script's letters pass (and
            # this random model's stray bytes, which the grammar reads as code points).
            data = json.loads(result.text, strict=False)
            assert [k for k in data if k != "time"] == schema["required"]
            for name in schema["required"]:
                for item in data[name]:
                    texts = [v for k, v in item.items() if isinstance(v, str) and k != "replaces"]
                    main = texts[0] if name != "resolved" else None
                    if main is not None:
                        assert len(main.lstrip()) >= MIN_ITEM_CHARS, main
                        assert starts_with_letter(main), main
                    assert all(t == "" or starts_with_letter(t) for t in texts), texts


def test_a_model_that_wants_to_stop_still_writes_a_whole_chapter(tmp_path, tiny_eos_model_path):
    schema = chapter_schema(ChapterSource.of(SOURCE, ()), 300)
    with LlamaEngine.open(profile(tiny_eos_model_path), cache_dir=tmp_path) as engine:
        result = asyncio.run(
            engine.generate(
                GenerationRequest(
                    messages=PROMPT, max_tokens=300, slot=Slot.FOLD, json_schema=schema_text(schema)
                )
            )
        )
    assert result.finish_reason is FinishReason.STOP
    assert len(parse_answer(result.text).events) >= 1


def test_a_thinking_block_the_template_opens_is_closed_for_a_schema_answer():
    from kotonia_tui.config import PromptFormat
    from kotonia_tui.engine.formats import make_formatter, render_request

    formatter = make_formatter(
        PromptFormat.TEMPLATE,
        chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}<think>",
        bos_token="",
        eos_token="",
        thinking=True,
        reasoning_tags=("<think>", "</think>"),
        model_name="thinker",
    )
    free = GenerationRequest(messages=PROMPT, max_tokens=8)
    assert render_request(formatter, free).starts_in_reasoning  # a reply may think first
    schema = schema_text(chapter_schema(ChapterSource.of(SOURCE, ()), 600))
    bound = render_request(formatter, GenerationRequest(PROMPT, 600, json_schema=schema))
    # The chapter would otherwise be written inside the thinking block and read as reasoning.
    assert bound.text.endswith("<think></think>") and not bound.starts_in_reasoning
