"""The in-process engine on real tiny GGUF models written by the test suite (no mocks)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import ChatMessage, ImageInput
from kotonia_tui.engine import (
    FinishReason,
    GenerationRequest,
    ImageError,
    LlamaEngine,
    ModelFileError,
    Priority,
    PromptTooLongError,
    Slot,
    TextDelta,
)
from tests.tiny_models import png_bytes


def profile(model: Path, mmproj: Path | None = None, **extra: object) -> ModelProfile:
    values: dict[str, object] = {
        "model_path": model,
        "mmproj_path": mmproj,
        "n_ctx": 1024,
        "prompt_format": PromptFormat.TEMPLATE,
        "temperature": 0.0,
        "threads": 2,
    }
    values.update(extra)
    return ModelProfile.model_validate(values)


def open_engine(tmp_path: Path, model: Path, mmproj: Path | None = None, **extra: object):
    return LlamaEngine.open(profile(model, mmproj, **extra), cache_dir=tmp_path / "cache")


def request(*messages: ChatMessage, max_tokens: int = 16, **extra: Any) -> GenerationRequest:
    return GenerationRequest(messages=tuple(messages), max_tokens=max_tokens, **extra)


SYSTEM = ChatMessage("system", "You are a helpful guide in a small town by the sea.")


def image(color: tuple[int, int, int]) -> ImageInput:
    data = png_bytes((32, 32), color)
    return ImageInput(data=data, key=f"img-{color}", mime="image/png")


@pytest.fixture
def engine(tmp_path, tiny_noeos_model_path):
    with open_engine(tmp_path, tiny_noeos_model_path) as engine:
        yield engine


@pytest.fixture
def vision_engine(tmp_path, tiny_model_path, tiny_mmproj_path):
    with open_engine(tmp_path, tiny_model_path, tiny_mmproj_path) as engine:
        yield engine


async def test_stream_deltas_make_the_reply_and_length_is_reported_as_cut(engine):
    call = engine.start(request(SYSTEM, ChatMessage("user", "Tell me about the harbour.")))
    deltas = [event.text async for event in call if isinstance(event, TextDelta)]
    result = await call.result()
    assert result.finish_reason is FinishReason.LENGTH
    assert result.cut
    assert result.metrics.generated == 16
    assert "".join(deltas).strip() == result.text
    assert result.metrics.tokens_per_s > 0


async def test_natural_stop_is_not_cut(tmp_path, tiny_eos_model_path):
    with open_engine(tmp_path, tiny_eos_model_path) as engine:
        result = await engine.generate(request(SYSTEM, ChatMessage("user", "Hello?")))
    assert result.finish_reason is FinishReason.STOP
    assert not result.cut


async def test_cancel_stops_within_a_token_and_the_engine_stays_usable(engine):
    call = engine.start(request(SYSTEM, ChatMessage("user", "Talk forever."), max_tokens=400))
    seen = 0
    at_cancel = -1
    async for event in call:
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 3:
                at_cancel = call.tokens_generated
                call.cancel()
    result = await call.result()
    assert result.finish_reason is FinishReason.CANCELLED
    # The flag is read before every token: at most one more token after the cancel.
    assert 3 <= at_cancel <= result.metrics.generated <= at_cancel + 1
    assert result.metrics.generated < 400
    again = await engine.generate(request(SYSTEM, ChatMessage("user", "Still there?")))
    assert again.finish_reason is FinishReason.LENGTH
    assert again.metrics.generated == 16


async def test_overflow_is_refused_before_anything_is_sent(engine):
    first = await engine.generate(request(SYSTEM, ChatMessage("user", "Short.")))
    huge = ChatMessage("user", "the harbour and the boats " * 400)
    with pytest.raises(PromptTooLongError) as caught:
        await engine.generate(request(SYSTEM, huge, max_tokens=64))
    assert caught.value.n_ctx == 1024
    assert caught.value.prompt_cells > 1024 - 64
    assert "nothing was sent" in str(caught.value)
    # The refused call did not touch the KV cache: the next turn reuses the first prompt.
    again = await engine.generate(request(SYSTEM, ChatMessage("user", "Short.")))
    assert again.metrics.reused == first.metrics.prompt_positions - 1


async def test_reply_reserve_counts_in_the_precheck(engine):
    cells = engine.prompt_cells(request(SYSTEM, ChatMessage("user", "Hi.")))
    with pytest.raises(PromptTooLongError):
        await engine.generate(
            request(SYSTEM, ChatMessage("user", "Hi."), max_tokens=1024 - cells + 1)
        )


async def test_token_counts_are_exact_and_usable_while_streaming(engine):
    req = request(SYSTEM, ChatMessage("user", "Count me."))
    cells = engine.prompt_cells(req)
    call = engine.start(req)
    counts = []
    async for event in call:
        if isinstance(event, TextDelta):
            counts.append(engine.count_tokens("Hello there, how are you?"))
    result = await call.result()
    assert result.metrics.prompt_positions == cells
    assert counts and set(counts) == {engine.count_tokens("Hello there, how are you?")}
    assert engine.count_tokens("") == 0
    assert engine.count_tokens("hello world") < len("hello world")


async def test_second_turn_evaluates_only_the_new_tokens(engine):
    history = [SYSTEM, ChatMessage("user", "What is the lighthouse called?")]
    first = await engine.generate(request(*history))
    assert first.metrics.reused == 0
    assert first.metrics.evaluated == first.metrics.prompt_positions
    history += [
        ChatMessage("assistant", first.text),
        ChatMessage("user", "And who keeps it?"),
    ]
    req = request(*history)
    second = await engine.generate(req)
    # New tokens: the prompt minus the longest prefix it shares with what the KV holds.
    before = engine._tokenize_prompt_text(
        engine.render(request(*history[:2])).text
    )  # the first prompt
    now = engine._tokenize_prompt_text(engine.render(req).text)
    shared = 0
    for a, b in zip(before, now, strict=False):
        if a != b:
            break
        shared += 1
    assert second.metrics.prompt_positions == len(now)
    assert second.metrics.reused >= shared
    assert second.metrics.evaluated == len(now) - second.metrics.reused
    assert second.metrics.evaluated < second.metrics.prompt_positions / 2


async def test_image_turns_reuse_the_prefix_and_count_image_cells(vision_engine):
    engine = vision_engine
    picture = image((200, 120, 40))
    assert engine.image_cells(picture) == 16
    history = [
        SYSTEM,
        ChatMessage("user", "Look at this painting.", images=(picture,)),
    ]
    turn1 = await engine.generate(request(*history))
    assert turn1.metrics.images == 1
    assert turn1.metrics.reused == 0
    assert turn1.metrics.prompt_positions == engine.prompt_cells(request(*history))
    history += [ChatMessage("assistant", turn1.text), ChatMessage("user", "What colour is it?")]
    turn2 = await engine.generate(request(*history))
    # The image is not encoded again: the whole first prompt is reused, and only what was
    # added since (the reply as text and the new question) is evaluated.
    new_tokens = turn2.metrics.prompt_positions - turn1.metrics.prompt_positions
    assert turn2.metrics.reused >= turn1.metrics.prompt_positions - 1
    assert turn2.metrics.evaluated <= new_tokens + 1
    print(
        f"\nimage chat: turn 1 evaluated {turn1.metrics.evaluated} of "
        f"{turn1.metrics.prompt_positions}, turn 2 evaluated {turn2.metrics.evaluated} of "
        f"{turn2.metrics.prompt_positions}"
    )
    # A second image later in the conversation: only it and the new text are evaluated.
    history += [
        ChatMessage("assistant", turn2.text),
        ChatMessage("user", "And this one?", images=(image((10, 200, 90)),)),
    ]
    turn3 = await engine.generate(request(*history))
    assert turn3.metrics.images == 2
    assert turn3.metrics.reused >= turn2.metrics.prompt_positions - 1
    new_tokens = turn3.metrics.prompt_positions - turn2.metrics.prompt_positions
    assert 16 <= turn3.metrics.evaluated <= new_tokens + 1


async def test_bad_image_is_a_clear_error_and_the_conversation_goes_on(vision_engine):
    broken = ImageInput(data=b"\x89PNG\r\n\x1a\nnot really", key="broken", mime="image/png")
    with pytest.raises(ImageError, match="not a readable image"):
        await vision_engine.generate(request(SYSTEM, ChatMessage("user", "See?", images=(broken,))))
    gif = ImageInput(data=b"GIF89a" + b"\x00" * 20, key="gif", mime="image/gif")
    with pytest.raises(ImageError):
        await vision_engine.generate(request(SYSTEM, ChatMessage("user", "Gif?", images=(gif,))))
    result = await vision_engine.generate(request(SYSTEM, ChatMessage("user", "Fine then.")))
    assert result.metrics.generated >= 0


async def test_image_without_projector_is_a_clear_error(engine):
    with pytest.raises(ImageError, match="no vision projector"):
        await engine.generate(
            request(SYSTEM, ChatMessage("user", "See?", images=(image((1, 2, 3)),)))
        )


def test_missing_model_names_the_file(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    with pytest.raises(ModelFileError) as caught:
        open_engine(tmp_path, missing)
    assert str(missing) in str(caught.value)
    assert "KOTONIA_MODEL_PATH" in str(caught.value)


def test_not_a_gguf_names_the_file(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 definitely a zip")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        open_engine(tmp_path, junk)


def test_unreadable_model_names_the_file(tmp_path, tiny_model_path):
    folder = tmp_path / "a-folder.gguf"
    folder.mkdir()
    with pytest.raises(ModelFileError, match="is a folder"):
        open_engine(tmp_path, folder)


def test_missing_mmproj_names_the_file(tmp_path, tiny_model_path):
    with pytest.raises(ModelFileError, match="mmproj file not found"):
        open_engine(tmp_path, tiny_model_path, tmp_path / "no-mmproj.gguf")


def test_mmproj_that_does_not_fit_names_both_widths(
    tmp_path, tiny_model_path, tiny_misfit_mmproj_path
):
    with pytest.raises(ModelFileError) as caught:
        open_engine(tmp_path, tiny_model_path, tiny_misfit_mmproj_path)
    message = str(caught.value)
    assert str(tiny_misfit_mmproj_path) in message
    assert "does not fit" in message
    assert "n_embd = 64" in message and "n_embd = 32" in message


async def test_a_waiting_interactive_call_goes_before_a_running_background_one(engine):
    fold = engine.start(
        request(
            ChatMessage("user", "Summarize everything."),
            max_tokens=300,
            slot=Slot.FOLD,
            priority=Priority.BACKGROUND,
        )
    )
    order: list[str] = []

    async def watch_fold():
        await fold.result()
        order.append("fold")

    watcher = asyncio.create_task(watch_fold())
    await asyncio.sleep(0.01)
    chat = await engine.generate(request(SYSTEM, ChatMessage("user", "Quick question.")))
    order.append("chat")
    await watcher
    fold_result = await fold.result()
    assert order == ["chat", "fold"]
    # The fold was paused, not restarted or cut: it produced every token it was asked for.
    assert fold_result.metrics.generated == 300
    assert fold_result.metrics.slot == "fold"
    assert chat.metrics.slot == "chat"


async def test_fold_slot_does_not_evict_the_chat_cache(engine):
    history = [SYSTEM, ChatMessage("user", "Where is the market?")]
    first = await engine.generate(request(*history))
    await engine.generate(
        request(
            ChatMessage("user", "A long unrelated summary request " * 10),
            slot=Slot.FOLD,
            priority=Priority.BACKGROUND,
        )
    )
    history += [ChatMessage("assistant", first.text), ChatMessage("user", "Thanks!")]
    second = await engine.generate(request(*history))
    assert second.metrics.reused >= first.metrics.prompt_positions - 1
    assert second.metrics.evaluated < second.metrics.prompt_positions / 2


async def test_a_prewarmed_prompt_makes_the_next_chat_turn_cheap(engine):
    old = [SYSTEM, ChatMessage("user", "Earlier story, verbatim. " * 20)]
    first = await engine.generate(request(*old))
    # A fold lands: the prompt now starts with a memory exchange instead of the old messages.
    folded = [
        SYSTEM,
        ChatMessage("user", "[The story so far] They met at the harbour."),
        ChatMessage("assistant", "[I remember.]"),
        ChatMessage("user", "The latest message."),
    ]
    warm = await engine.prewarm(request(*folded)).result()
    assert warm.metrics.slot == "prewarm"
    assert warm.metrics.generated == 0
    turn = await engine.generate(
        request(*folded, ChatMessage("assistant", "ok"), ChatMessage("user", "New words."))
    )
    # The chat call took the prewarmed context: only what follows the prewarmed prompt (the
    # two new messages; the prewarm's own generation prompt differs by a few tokens) was
    # evaluated, not the memory and the setup again.
    new = turn.metrics.prompt_positions - warm.metrics.prompt_positions
    assert turn.metrics.reused >= warm.metrics.prompt_positions - 4
    assert turn.metrics.evaluated <= new + 4
    assert turn.metrics.evaluated < turn.metrics.prompt_positions / 4
    # And the old context is still there for a prompt that continues the old story.
    back = await engine.generate(request(*old, ChatMessage("assistant", first.text)))
    assert back.metrics.reused >= first.metrics.prompt_positions - 1
