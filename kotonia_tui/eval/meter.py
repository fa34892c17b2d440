"""A pass-through engine that counts model calls, their time and their output.

The evaluation reports calls and time per arm, and the audit counts chronicler refusals,
which production never stores (a refusal is retried and discarded): only the calls themselves
show them. Everything is delegated to the real engine; phases of the evaluation run one after
another, so a phase's figures are the calls logged between two marks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kotonia_tui.engine import Engine, EngineCall, GenerationRequest, GenerationResult


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


@dataclass(frozen=True)
class CallStats:
    calls: int
    seconds: float
    evaluated: int
    generated: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "seconds": round(self.seconds, 3),
            "evaluated_tokens": self.evaluated,
            "generated_tokens": self.generated,
        }


class EngineWrapper:
    """An engine that hands everything to `inner`; subclasses replace what they change."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        # Everything not overridden (count_tokens, info, render, ...) is the real engine's.
        return getattr(self.inner, name)

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

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await self.inner.generate(request)

    def start(self, request: GenerationRequest) -> EngineCall:
        return self.inner.start(request)

    def prewarm(self, request: GenerationRequest) -> EngineCall:
        return self.inner.prewarm(request)

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
            seconds=sum(c.seconds for c in calls),
            evaluated=sum(c.evaluated for c in calls),
            generated=sum(c.generated for c in calls),
        )
