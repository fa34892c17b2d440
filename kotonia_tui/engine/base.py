"""What the two backends (in-process llama.cpp, an inference server) do the same way.

Each backend subclasses `EngineBase` and supplies how a call starts, how text is tokenized and
what it knows about its model (`info`); running a call to its end, batch counting, the window
sizes, the figures of a call and the context-manager protocol live here once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Self

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import TurnMetrics
from kotonia_tui.engine.calls import EngineCall
from kotonia_tui.engine.protocol import ModelInfo
from kotonia_tui.engine.types import FinishReason, GenerationRequest, GenerationResult, Slot, Work

# Counting a batch in-process reads the vocabulary on the loop's thread; it lets other tasks
# run between this many texts so a batch of thousands never holds the loop for long.
COUNT_YIELD_EVERY = 128


def fold_window(n_ctx: int, fold_ctx_for: Callable[[int], int] | None) -> int:
    """The fold slot's size: what `fold_ctx_for` wants for this window, never more than it."""
    return min(n_ctx, fold_ctx_for(n_ctx)) if fold_ctx_for is not None else n_ctx


def call_metrics(
    request: GenerationRequest,
    finish: FinishReason,
    *,
    positions: int = 0,
    reused: int = 0,
    evaluated: int = 0,
    prompt_ms: float = 0.0,
    generated: int = 0,
    gen_ms: float = 0.0,
    rate: float = 0.0,
    images: int = 0,
    restored: int = 0,
) -> TurnMetrics:
    """One call's figures; the rate is derived from the counts when the backend gave none."""
    if not rate and gen_ms > 0:
        rate = generated / (gen_ms / 1000)
    return TurnMetrics(
        prompt_positions=positions,
        reused=reused,
        evaluated=evaluated,
        prompt_ms=prompt_ms,
        generated=generated,
        gen_ms=gen_ms,
        tokens_per_s=rate,
        finish_reason=str(finish),
        images=images,
        restored=restored,
        slot=str(Slot.PREWARM if request.prefill_only else request.slot),
    )


class EngineBase:
    """The shared half of an engine. Subclasses set `profile` and `info` and implement
    `start`, `count_tokens` and `close`."""

    profile: ModelProfile
    info: ModelInfo
    _work: dict[Slot, Work]  # set empty by each backend's __init__

    @property
    def n_ctx(self) -> int:
        return self.info.n_ctx

    @property
    def model_key(self) -> str:
        return self.info.model_key

    def count_tokens(self, text: str) -> int:
        raise NotImplementedError

    def work(self, slot: Slot) -> Work:
        """What the calls of `slot` have evaluated and generated so far (it only grows)."""
        return self._work.get(slot, Work())

    def _add_work(self, slot: Slot, *, evaluated: int = 0, generated: int = 0) -> None:
        # One writer per backend (the owner thread, or the event loop for a server); a reader
        # on another thread sees the old or the new figures, never a mix.
        done = self._work.get(slot, Work())
        self._work[slot] = Work(done.evaluated + evaluated, done.generated + generated)

    async def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """Token counts of many texts, in order, without holding the event loop.

        In-process a count is a cheap vocabulary read; a server backend overrides this with
        concurrent requests.
        """
        counts: list[int] = []
        for index, text in enumerate(texts):
            if index and index % COUNT_YIELD_EVERY == 0:
                await asyncio.sleep(0)
            counts.append(self.count_tokens(text))
        return counts

    def start(self, request: GenerationRequest) -> EngineCall:
        raise NotImplementedError

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Run a call to the end and return its result (no streaming)."""
        call = self.start(request)
        async for _event in call:
            pass
        return await call.result()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
