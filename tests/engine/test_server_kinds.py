"""What each kind of server is sent: the request bodies built for llama-server, vLLM,
llama-cpp-python's server and a plain OpenAI-compatible one.

Only llama-cpp-python's server runs here (tests/server/); llama-server and vLLM cannot, so
their bodies are checked as built, against the fields their APIs document.
"""

from __future__ import annotations

from typing import Any

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import ChatMessage
from kotonia_tui.engine.formats import TranscriptFormat
from kotonia_tui.engine.sampling import Sampling
from kotonia_tui.engine.server.kinds import (
    Detected,
    LlamaCppPython,
    LlamaServer,
    OpenAICompatible,
    Vllm,
)
from kotonia_tui.engine.server.requests import build_request
from kotonia_tui.engine.types import GenerationRequest, Slot

PROFILE = ModelProfile(top_k=7, repeat_last_n=128, repeat_penalty=1.3, seed=5, temperature=0.6)


def ask(**values: Any) -> GenerationRequest:
    values.setdefault("max_tokens", 32)
    return GenerationRequest(
        messages=(ChatMessage("system", "Wren keeps the lighthouse."), ChatMessage("user", "Hi.")),
        reply_name="Wren",
        user_name="Ann",
        **values,
    )


def body(kind: OpenAICompatible, request: GenerationRequest, *, rendered: bool = True) -> dict:
    wire = build_request(
        request,
        kind=kind,
        sampling=Sampling.of(PROFILE, request),
        formatter=TranscriptFormat() if rendered else None,
        model_id="m",
        images=0,
    )
    return {"path": wire.path, **wire.payload}


def test_every_kind_gets_the_profiles_sampling():
    for kind in (LlamaServer(), Vllm(), LlamaCppPython(), OpenAICompatible()):
        sent = body(kind, ask())
        assert sent["temperature"] == 0.6 and sent["top_k"] == 7 and sent["seed"] == 5, kind
        assert sent["path"] == "/v1/completions" and sent["prompt"].endswith("Wren:")
        assert sent["stream"] is True and sent["max_tokens"] == 32


def test_llama_server_gets_its_penalty_window_cache_and_slots():
    sent = body(LlamaServer(Detected(slots=2)), ask(slot=Slot.FOLD))
    assert sent["repeat_penalty"] == 1.3 and sent["repeat_last_n"] == 128
    assert sent["cache_prompt"] is True and sent["id_slot"] == 1  # folds keep off the chat slot
    assert body(LlamaServer(Detected(slots=2)), ask())["id_slot"] == 0
    assert "id_slot" not in body(LlamaServer(), ask())  # one slot: the server picks


def test_vllm_gets_its_own_penalty_and_continuation_fields():
    sent = body(Vllm(), ask(prefill="The lamp"), rendered=False)
    assert sent["repetition_penalty"] == 1.3 and "repeat_penalty" not in sent
    assert sent["path"] == "/v1/chat/completions"
    assert sent["messages"][-1] == {"role": "assistant", "content": "The lamp"}
    assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    unlimited = ModelProfile(top_k=0)
    wire = build_request(
        ask(), kind=Vllm(), sampling=Sampling.of(unlimited, ask()), formatter=None,
        model_id="m", images=0,
    )  # fmt: skip
    assert wire.payload["top_k"] == -1  # vLLM's "no cut"


def test_llama_cpp_python_gets_no_stream_options_and_an_openai_server_at_most_four_stops():
    assert "stream_options" not in body(LlamaCppPython(), ask())
    assert body(OpenAICompatible(), ask())["stream_options"] == {"include_usage": True}
    stops = tuple(f"\n{n}:" for n in "ABCDEF")
    assert len(body(OpenAICompatible(), ask(extra_stops=stops))["stop"]) == 4
    assert len(body(LlamaServer(), ask(extra_stops=stops))["stop"]) > 4
