"""A real turn on the embedded default model (Gemma 3 270M from its PyPI package)."""

from __future__ import annotations

import pytest

from kotonia_tui.config import load_settings
from kotonia_tui.domain import ChatMessage
from kotonia_tui.engine import FinishReason, GenerationRequest, LlamaEngine

pytestmark = pytest.mark.default_model


async def test_default_model_replies_in_character_and_stops_at_the_next_speaker(tmp_path):
    settings = load_settings()
    profile = settings.active_profile().model_copy(update={"temperature": 0.0, "n_ctx": 2048})
    progress: list[tuple[str, int, int]] = []
    engine = LlamaEngine.open(
        profile, cache_dir=tmp_path / "cache", progress=lambda *a: progress.append(a)
    )
    try:
        assert engine.info.model_name.lower().startswith("gemma")
        assert any(what.startswith("assembling") for what, _, _ in progress)
        messages = (
            ChatMessage("system", "A story transcript. Aria is a cheerful bard in a tavern."),
            ChatMessage("user", "Hello! Who are you?", name="Tom"),
            ChatMessage("assistant", "I'm Aria, the bard of this tavern.", name="Aria"),
            ChatMessage("user", "What do you play?", name="Tom"),
        )
        request = GenerationRequest(messages, max_tokens=200, reply_name="Aria", user_name="Tom")
        result = await engine.generate(request)
    finally:
        engine.close()
    assert result.text.strip()
    assert result.finish_reason is FinishReason.STOP
    assert result.stop_string in ("\nTom:", "\nAria:")
    assert "Tom:" not in result.text
    # The second start finds the assembled file and does not assemble again.
    again = LlamaEngine.open(profile, cache_dir=tmp_path / "cache", progress=lambda *a: None)
    again.close()
