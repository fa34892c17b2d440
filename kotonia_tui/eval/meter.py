"""A pass-through engine that counts model calls, their time and their output.

The evaluation reports calls and time per arm, and the audit counts chronicler refusals,
which production never stores (a refusal is retried and discarded): only the calls themselves
show them. Everything is delegated to the real engine; phases of the evaluation run one after
another, so a phase's figures are the calls logged between two marks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import ImageInput
from kotonia_tui.engine import (
    Call,
    Engine,
    GenerationRequest,
    GenerationResult,
    ModelInfo,
    Slot,
    Work,
)
from kotonia_tui.engine.formats import RenderedPrompt
from kotonia_tui.eval.results import CallStats


@dataclass(frozen=True)
class CallRecord:
    reply_name: str
    slot: str
    seconds: float
    prompt_positions: int
    evaluated: int
    generated: int
    finish_reason: str
    text: str


class EngineWrapper(Engine):
    """An engine that hands everything to `inner`; subclasses replace what they change.

    It subclasses the `Engine` protocol, so mypy checks that every member is here: a member
    added to the protocol and missing here is an error, not a silent `__getattr__` fallback.
    """

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    @property
    def profile(self) -> ModelProfile:
        return self.inner.profile

    @profile.setter
    def profile(self, value: ModelProfile) -> None:
        # The inner engine samples with its own profile: a copy here would change nothing.
        self.inner.profile = value

    @property
    def info(self) -> ModelInfo:
        return self.inner.info

    @property
    def n_ctx(self) -> int:
        return self.inner.n_ctx

    @property
    def model_key(self) -> str:
        return self.inner.model_key

    @property
    def has_vision(self) -> bool:
        return self.inner.has_vision

    @property
    def busy(self) -> bool:
        return self.inner.busy

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def work(self, slot: Slot) -> Work:
        return self.inner.work(slot)

    async def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        return await self.inner.count_tokens_many(texts)

    def image_cells(self, image: ImageInput) -> int:
        return self.inner.image_cells(image)

    def render(self, request: GenerationRequest) -> RenderedPrompt:
        return self.inner.render(request)

    def prompt_cells(self, request: GenerationRequest) -> int:
        return self.inner.prompt_cells(request)

    def start(self, request: GenerationRequest) -> Call:
        return self.inner.start(request)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await self.inner.generate(request)

    def prewarm(self, request: GenerationRequest) -> Call:
        return self.inner.prewarm(request)

    def settle(self, request: GenerationRequest, after: Call) -> Call:
        return self.inner.settle(request, after)

    def restore(self, request: GenerationRequest) -> Call:
        return self.inner.restore(request)

    def close(self) -> None:
        self.inner.close()


class MeteredEngine(EngineWrapper):
    """Wraps an engine; `generate` is timed and logged (streaming calls pass through: the
    evaluation does not use them)."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.log: list[CallRecord] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        started = time.monotonic()
        result = await self.inner.generate(request)
        self._record(request, result, time.monotonic() - started)
        return result

    def _record(self, request: GenerationRequest, result: GenerationResult, seconds: float) -> None:
        metrics = result.metrics
        self.log.append(
            CallRecord(
                reply_name=request.reply_name,
                slot=str(request.slot.value),
                seconds=seconds,
                prompt_positions=metrics.prompt_positions,
                evaluated=metrics.evaluated,
                generated=metrics.generated,
                finish_reason=str(result.finish_reason.value),
                text=result.text,
            )
        )

    def mark(self) -> int:
        return len(self.log)

    def since(self, mark: int, reply_name: str | None = None) -> list[CallRecord]:
        return [c for c in self.log[mark:] if reply_name is None or c.reply_name == reply_name]

    def stats(self, mark: int, reply_name: str | None = None) -> CallStats:
        calls = self.since(mark, reply_name)
        return CallStats(
            calls=len(calls),
            seconds=round(sum(c.seconds for c in calls), 3),
            evaluated_tokens=sum(c.evaluated for c in calls),
            generated_tokens=sum(c.generated for c in calls),
        )
