"""The engine on GLM-4.6V-Flash's architecture in miniature (tests/tiny_glm.py): glm4 with
M-RoPE, the glm4v projector, GLM's chat template and its thinking tags. No mocks."""

from __future__ import annotations

import pytest

from kotonia_tui.domain import ChatMessage, ImageInput
from kotonia_tui.engine import (
    FinishReason,
    ModelFileError,
    PromptTooLongError,
    ReasoningDelta,
    TextDelta,
)
from tests.engine.test_engine import cancel_after, open_engine, request
from tests.tiny_glm import write_tiny_glm
from tests.tiny_models import png_bytes

SYSTEM = ChatMessage("system", "You are Wren, who keeps the lighthouse.")


def image(size: tuple[int, int], color: tuple[int, int, int] = (200, 120, 40)) -> ImageInput:
    return ImageInput(data=png_bytes(size, color), key=f"img-{size}-{color}", mime="image/png")


def new_text(engine, before: list[ChatMessage], after: list[ChatMessage]) -> str:
    """What the later prompt adds to the earlier one; asserts the earlier is its prefix."""
    first = engine.render(request(*before)).text
    second = engine.render(request(*after)).text
    assert second.startswith(first)
    return second[len(first) :]


async def test_a_text_turn_ends_at_the_end_of_turn_and_the_next_evaluates_only_new_text(
    tmp_path, scripted_glm
):
    reply = "Welcome to the lighthouse."
    with open_engine(tmp_path, scripted_glm(reply)) as engine:
        history = [SYSTEM, ChatMessage("user", "Good evening.")]
        first = await engine.generate(request(*history, max_tokens=32))
        assert (first.text, first.reasoning) == (reply, "")
        assert first.finish_reason is FinishReason.STOP  # <|user|> ended the turn
        assert first.metrics.generated == engine.count_tokens(reply)
        before = list(history)
        history += [ChatMessage("assistant", first.text), ChatMessage("user", "Is it lit?")]
        second = await engine.generate(request(*history, max_tokens=32))
        # GLM renders a past reply as "<think></think>\n" + reply: exactly what the generation
        # prompt and the reply put in the KV, so only the new user turn is evaluated.
        added = new_text(engine, before, history)
        assert added.startswith(reply + "<|user|>")
        new_tokens = engine.count_tokens(added) - engine.count_tokens(reply)
        assert second.metrics.reused >= first.metrics.prompt_positions
        assert second.metrics.evaluated <= new_tokens + 1
        assert second.metrics.evaluated == (second.metrics.prompt_positions - second.metrics.reused)


async def test_an_image_takes_its_kv_cells_in_the_budget_not_its_positions(
    tmp_path, glm_model_path, glm_mmproj_path
):
    with open_engine(tmp_path, glm_model_path, glm_mmproj_path, n_ctx=256) as engine:
        # glm4v merges 2x2 patches: 64x64 pixels are 8x8 = 64 cells but, with M-RoPE, only 8
        # positions; 32x48 pixels are 4x6 = 24 cells and 6 positions.
        square, tall = image((64, 64)), image((32, 48))
        assert engine.image_cells(square) == 64
        assert engine.image_cells(tall) == 24
        look = ChatMessage("user", "Look at the lamp.", images=(square,))
        cells = engine.prompt_cells(request(look))
        # A reply reserve that would fit beside the image's positions but not its cells.
        with pytest.raises(PromptTooLongError):
            await engine.generate(request(look, max_tokens=256 - cells + 1))
        result = await engine.generate(request(look, max_tokens=256 - cells))
        assert result.metrics.images == 1
        assert result.metrics.prompt_positions == cells  # the figure counts cells too


async def test_turns_after_an_image_evaluate_only_new_text_and_never_reencode_it(
    tmp_path, scripted_glm, mmproj_for
):
    reply = "A fine lens."
    model = scripted_glm(reply)
    with open_engine(tmp_path, model, mmproj_for(model)) as engine:
        lens = image((32, 48))
        history = [SYSTEM, ChatMessage("user", "Look at the lens.", images=(lens,))]
        first = await engine.generate(request(*history, max_tokens=16))
        assert first.text == reply and first.metrics.images == 1
        assert first.metrics.evaluated == first.metrics.prompt_positions
        before = list(history)
        history += [ChatMessage("assistant", first.text), ChatMessage("user", "Is it clean?")]
        second = await engine.generate(request(*history, max_tokens=16))
        new_tokens = engine.count_tokens(new_text(engine, before, history))
        # The image's 24 cells stay in the KV: the turn evaluates a handful of text tokens.
        assert second.metrics.images == 1
        assert second.metrics.reused >= first.metrics.prompt_positions
        assert second.metrics.evaluated <= new_tokens - engine.count_tokens(reply) + 1
        assert second.metrics.evaluated < engine.image_cells(lens)
        # A second image later on: it and the new text are evaluated, the first one is not.
        before = list(history)
        harbour = image((32, 32), (10, 90, 200))
        history += [
            ChatMessage("assistant", second.text),
            ChatMessage("user", "And the harbour?", images=(harbour,)),
        ]
        third = await engine.generate(request(*history, max_tokens=16))
        assert third.text == reply and third.metrics.images == 2
        assert third.metrics.reused >= second.metrics.prompt_positions
        new_cells = third.metrics.prompt_positions - second.metrics.prompt_positions
        assert engine.image_cells(harbour) <= third.metrics.evaluated <= new_cells + 1


async def test_with_thinking_off_a_closed_thinking_block_never_reaches_the_reply(
    tmp_path, scripted_glm
):
    # The real model sometimes writes the empty block again although the prompt closed it.
    with open_engine(tmp_path, scripted_glm("<think></think>\nThe lamp is lit.")) as engine:
        history = [SYSTEM, ChatMessage("user", "Is the lamp lit?")]
        prompt = engine.render(request(*history)).text
        assert prompt.endswith("<|assistant|>\n<think></think>\n")
        assert "Is the lamp lit?/nothink<|assistant|>" in prompt
        call = engine.start(request(*history, max_tokens=32))
        shown = [event.text async for event in call if isinstance(event, TextDelta)]
        result = await call.result()
        assert (result.text, result.reasoning) == ("The lamp is lit.", "")
        assert "".join(shown).strip() == "The lamp is lit."
    with open_engine(tmp_path, scripted_glm("<think></think>")) as engine:
        only_block = await engine.generate(request(*history, max_tokens=32))
        assert (only_block.text, only_block.reasoning) == ("", "")
        assert only_block.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("think_tags_control", [False, True], ids=["tags-as-text", "tags-control"])
async def test_with_thinking_on_the_reasoning_is_kept_apart(
    tmp_path, scripted_glm, think_tags_control
):
    script = "<think>Ann looks cold.</think>\nSit by the fire."
    model = scripted_glm(script, think_tags_control=think_tags_control)
    with open_engine(tmp_path, model, thinking=True) as engine:
        history = [SYSTEM, ChatMessage("user", "Hello, Wren.")]
        assert engine.render(request(*history)).text.endswith("Hello, Wren.<|assistant|>\n")
        call = engine.start(request(*history, max_tokens=48))
        shown, reasoning = [], []
        async for event in call:
            if isinstance(event, TextDelta):
                shown.append(event.text)
            elif isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
        result = await call.result()
        assert result.text == "Sit by the fire."
        assert result.reasoning == "Ann looks cold."
        assert "".join(shown).strip() == "Sit by the fire."
        assert "".join(reasoning).strip() == "Ann looks cold."
        # The next prompt shows the reply with an empty thinking block (the template drops old
        # reasoning), so the KV is reused up to where the reasoning began.
        history += [ChatMessage("assistant", result.text), ChatMessage("user", "Thank you.")]
        prompt = engine.render(request(*history)).text
        assert "<|assistant|>\n<think></think>\nSit by the fire.<|user|>" in prompt
        assert "Ann looks cold." not in prompt
        again = await engine.generate(request(*history, max_tokens=48))
        assert again.metrics.reused >= result.metrics.prompt_positions - 1


async def test_cancel_stops_within_a_token_and_the_next_turn_reuses_the_prompt(
    tmp_path, glm_endless_model_path
):
    with open_engine(tmp_path, glm_endless_model_path, temperature=0.8, seed=3) as engine:
        history = [SYSTEM, ChatMessage("user", "Tell me every story you know.")]
        call = engine.start(request(*history, max_tokens=400))
        at_cancel = await cancel_after(call, 3)
        result = await call.result()
        assert result.finish_reason is FinishReason.CANCELLED
        assert at_cancel <= result.metrics.generated <= at_cancel + 1
        again = await engine.generate(request(*history, max_tokens=8))
        assert again.finish_reason is FinishReason.LENGTH
        assert again.metrics.reused >= result.metrics.prompt_positions - 1


async def test_a_prewarmed_prompt_makes_the_next_turn_cheap(tmp_path, scripted_glm):
    with open_engine(tmp_path, scripted_glm("Yes.")) as engine:
        await engine.generate(request(SYSTEM, ChatMessage("user", "Old story. " * 30)))
        folded = [
            SYSTEM,
            ChatMessage("user", "[The story so far] Ann came to the lighthouse."),
            ChatMessage("assistant", "[I remember.]"),
            ChatMessage("user", "The latest message."),
        ]
        warm = await engine.prewarm(request(*folded)).result()
        assert warm.metrics.slot == "prewarm" and warm.metrics.generated == 0
        turn = await engine.generate(
            request(*folded, ChatMessage("assistant", "Yes."), ChatMessage("user", "Go on."))
        )
        assert turn.metrics.reused >= warm.metrics.prompt_positions - 1
        assert turn.metrics.evaluated < turn.metrics.prompt_positions / 3


def test_a_glm4_gguf_without_mrope_sections_is_refused_with_a_projector(tmp_path, glm_mmproj_path):
    """llama.cpp aborts the whole process on the first image for such a GGUF (converted before
    GLM-4.1V support); the engine refuses the pair at load, naming the file, instead."""
    old = write_tiny_glm(tmp_path / "old-conversion.gguf", mrope=False)
    with pytest.raises(ModelFileError, match=r"old-conversion\.gguf.*no M-RoPE sections"):
        open_engine(tmp_path, old, glm_mmproj_path)
    with open_engine(tmp_path, old) as engine:  # text alone still works
        assert not engine.has_vision
