"""The interface every engine backend offers (in-process llama.cpp, an inference server).

The chat service, the fold worker and the evaluation use only this, so a backend can be
swapped per model profile without touching memory, folding or the inspector.
"""

from __future__ import annotations

from typing import Protocol

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import ImageInput
from kotonia_tui.engine.formats import RenderedPrompt
from kotonia_tui.engine.llama_engine import EngineCall, EngineInfo
from kotonia_tui.engine.types import GenerationRequest, GenerationResult


class Engine(Protocol):
    profile: ModelProfile
    info: EngineInfo

    @property
    def n_ctx(self) -> int: ...

    @property
    def model_key(self) -> str: ...

    @property
    def has_vision(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def count_tokens(self, text: str) -> int: ...

    def image_cells(self, image: ImageInput) -> int: ...

    def render(self, request: GenerationRequest) -> RenderedPrompt: ...

    def prompt_cells(self, request: GenerationRequest) -> int: ...

    def start(self, request: GenerationRequest) -> EngineCall: ...

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    def prewarm(self, request: GenerationRequest) -> EngineCall: ...

    def close(self) -> None: ...
