"""How a reply is sampled, resolved once per call from the model profile and the request.

The request may carry a character's or a conversation's settings over the profile
(`GenerationRequest.sampling`, resolved by chat/chat_settings.py); a value it leaves None is
the profile's, and an explicit `request.temperature` (the evaluation's greedy calls) wins.

Both backends read this one object: the in-process engine builds llama.cpp's sampler chain from
it, each server kind writes it as the request fields that server understands
(`engine/server/kinds.py`). So a sampling setting lives in the profile and nowhere else, and a
new one is added in one place and read by each backend.

Constrained output (the chronicler answers in a JSON schema) is one more field, copied from the
request: the in-process engine adds `LlamaGrammar.from_json_schema` to its chain, llama-server
takes `json_schema`, vLLM and other OpenAI-compatible servers `response_format`, llama-cpp-python's
server `response_format` on the chat path and `grammar` on the completions path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import GenerationSettings
from kotonia_tui.engine.types import GenerationRequest


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_k: int  # 0: no cut
    top_p: float
    min_p: float
    repeat_penalty: float
    repeat_last_n: int  # tokens the repeat penalty looks back over
    seed: int | None
    json_schema: str | None = None  # JSON text of the schema the reply must follow

    @classmethod
    def of(cls, profile: ModelProfile, request: GenerationRequest) -> Sampling:
        layer = request.sampling or GenerationSettings()
        temperature = request.temperature
        if temperature is None:
            temperature = _first(layer.temperature, profile.temperature)
        return cls(
            temperature=temperature,
            top_k=_first(layer.top_k, profile.top_k),
            top_p=_first(layer.top_p, profile.top_p),
            min_p=_first(layer.min_p, profile.min_p),
            repeat_penalty=(
                _first(layer.repeat_penalty, profile.repeat_penalty)
                if request.repeat_penalty is None
                else request.repeat_penalty
            ),
            repeat_last_n=profile.repeat_last_n,
            seed=profile.seed,
            json_schema=request.json_schema,
        )

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


ValueT = TypeVar("ValueT")


def _first(value: ValueT | None, default: ValueT) -> ValueT:
    return default if value is None else value
