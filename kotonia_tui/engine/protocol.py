"""The interface every engine backend offers (in-process llama.cpp, an inference server).

The chat service, the fold worker and the evaluation use only this, so a backend can be
swapped per model profile without touching memory, folding or the inspector.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Protocol

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import ImageInput
from kotonia_tui.engine.types import (
    GenerationRequest,
    GenerationResult,
    ReasoningDelta,
    TextDelta,
)

if TYPE_CHECKING:  # the formats bring jinja2, which only a loaded engine needs
    from kotonia_tui.engine.formats import RenderedPrompt


class Call(Protocol):
    """A running model call: iterate for deltas (the result comes last), or cancel."""

    tokens_generated: int

    def cancel(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[TextDelta | ReasoningDelta | GenerationResult]: ...

    async def result(self) -> GenerationResult: ...


class ModelInfo(Protocol):
    """What the app shows about the model a backend serves."""

    @property
    def model_name(self) -> str: ...

    @property
    def model_key(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_ctx_train(self) -> int: ...

    @property
    def fold_n_ctx(self) -> int: ...

    @property
    def prompt_format(self) -> PromptFormat: ...

    @property
    def has_chat_template(self) -> bool: ...

    @property
    def load_ms(self) -> float: ...


class Engine(Protocol):
    profile: ModelProfile

    @property
    def info(self) -> ModelInfo: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def model_key(self) -> str: ...

    @property
    def has_vision(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def count_tokens(self, text: str) -> int: ...

    async def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """Counts of many texts in order, without blocking the event loop (a server backend
        counts them concurrently off the loop): for per-message costs."""
        ...

    def image_cells(self, image: ImageInput) -> int: ...

    def render(self, request: GenerationRequest) -> RenderedPrompt: ...

    def prompt_cells(self, request: GenerationRequest) -> int: ...

    def start(self, request: GenerationRequest) -> Call: ...

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    def prewarm(self, request: GenerationRequest) -> Call: ...

    def settle(self, request: GenerationRequest, after: Call) -> Call:
        """After a turn (`after` is its call): keep the conversation's history
        (`request.messages`, no notes) ready for the next prompt and save it as
        `request.state`, in the background."""
        ...

    def restore(self, request: GenerationRequest) -> Call:
        """When a conversation is opened: load its saved state, so its first turn is warm."""
        ...

    def close(self) -> None: ...
