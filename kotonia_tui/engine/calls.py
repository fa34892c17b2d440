"""What every backend hands back: a running call (`EngineCall`) and the loaded model's facts.

Kept apart from the llama.cpp backend so a server backend can use them without loading
llama_cpp.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kotonia_tui.config import PromptFormat
from kotonia_tui.engine.owner import OwnerThread, Steps
from kotonia_tui.engine.types import GenerationResult, ReasoningDelta, StreamEvent, TextDelta


@dataclass(frozen=True)
class EngineInfo:
    """What `kotonia doctor` and the inspector show about the loaded model."""

    model_path: Path
    model_name: str
    model_key: str
    mmproj_path: Path | None
    n_ctx: int
    n_ctx_train: int
    fold_n_ctx: int
    n_gpu_layers: int
    gpu_offload: bool
    threads: int
    prompt_format: PromptFormat
    has_chat_template: bool
    load_ms: float
    llama_cpp_version: str


class EngineCall:
    """A running model call: iterate it for deltas (the last event is the result), or cancel."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue()
        self.cancel_flag = threading.Event()
        self.tokens_generated = 0  # advanced by the owner thread as tokens are sampled
        self.slot_version: int | None = None  # the context's version when the call ended
        self._result: asyncio.Future[GenerationResult] = loop.create_future()

    # Called on the owner thread.
    def _push(self, event: StreamEvent | BaseException) -> None:
        self._loop.call_soon_threadsafe(self._deliver, event)

    def _deliver(self, event: StreamEvent | BaseException) -> None:
        self._events.put_nowait(event)
        if self._result.done():
            return
        if isinstance(event, GenerationResult):
            self._result.set_result(event)
        elif isinstance(event, BaseException):
            self._result.set_exception(event)
            self._result.exception()  # mark retrieved: the iterator re-raises it

    def cancel(self) -> None:
        """Stop within one token; the result's finish_reason is then `cancelled`."""
        self.cancel_flag.set()

    async def __aiter__(self) -> AsyncIterator[TextDelta | ReasoningDelta | GenerationResult]:
        finished = False
        try:
            while True:
                event = await self._events.get()
                if isinstance(event, BaseException):
                    finished = True
                    raise event
                yield event
                if isinstance(event, GenerationResult):
                    finished = True
                    return
        finally:
            if not finished:
                # The reader went away (task cancelled, loop closing): stop the model too.
                self.cancel()

    async def result(self) -> GenerationResult:
        return await asyncio.shield(self._result)


def deliver_failure(call: EngineCall, done: Future[Any]) -> None:
    """A job that raised (an owner-thread future's callback): the call's reader gets it."""
    exc = done.exception()
    if exc is not None:
        call._push(exc)


def queue_call(
    owner: OwnerThread, job: Callable[[EngineCall], Steps], *, priority: int
) -> EngineCall:
    """Queue `job(call)` on the owner thread as a call read on the running event loop: its
    events, then its result or its exception, reach the call's reader."""
    call = EngineCall(asyncio.get_running_loop())
    future = owner.submit(lambda: job(call), priority=priority, on_event=call._push)
    future.add_done_callback(lambda done: deliver_failure(call, done))
    return call
