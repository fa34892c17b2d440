"""Reading a streamed answer: the chunks of server-sent events become deltas and a result.

The visible text goes through the same `ReplyText` as the in-process engine (thinking apart,
stop strings cut), so both backends show the same reply. Reasoning a server sends apart
(`reasoning_content`) is kept as reasoning. The figures are the server's where it gives them
(which ones depends on the kind), measured here otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import TurnMetrics
from kotonia_tui.engine.base import call_metrics
from kotonia_tui.engine.errors import ServerResponseError
from kotonia_tui.engine.server import bodies
from kotonia_tui.engine.server.kinds import OpenAICompatible
from kotonia_tui.engine.server.requests import WireRequest
from kotonia_tui.engine.streaming import ReplyText
from kotonia_tui.engine.types import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ReasoningDelta,
    StreamEvent,
)

# A server that has begun to answer writes a token every second or faster, even on a CPU: a
# minute with none after the first (keep-alives or empty events only) is a stall.
TOKEN_GAP_S = 60.0
DEFAULT_FIRST_TOKEN_S = 120.0  # when the client has no read timeout (it always has one)


class StreamWatch:
    """The bounds a streamed reply is read within, whatever the server sends.

    - Time without a token: until the first, the read timeout (a cold read of the whole
      prompt comes before it, `http.read_timeout_s`); after it, `TOKEN_GAP_S`. Keep-alive
      comments and events with no text do not count: a server that sends only those stalls.
    - Tokens: past the request's cap the reply is cut there and the stream closed.
    - Bytes, counted after decoding: `bodies.stream_limit` of the cap.
    """

    def __init__(self, where: str, max_tokens: int, read_timeout_s: float | None) -> None:
        self.where = where
        self.max_tokens = max(max_tokens, 1)
        self.first_token_s = read_timeout_s or DEFAULT_FIRST_TOKEN_S
        self.gap_s = min(TOKEN_GAP_S, self.first_token_s)
        self.counted = bodies.Counted(
            bodies.stream_limit(self.max_tokens), where, f"a reply of at most {max_tokens:,} tokens"
        )

    def stalled(self, chunks: int) -> str:
        """Why a stream that stopped giving tokens was closed."""
        if chunks:
            return (
                f"{self.where}: the server sent no token for {self.gap_s:g} s after the last "
                "one; the stream was closed"
            )
        return (
            f"{self.where}: the server sent no token within {self.first_token_s:g} s (the read "
            "timeout), only keep-alives or empty events; the stream was closed"
        )


class StreamedReply:
    """What a stream has delivered so far: visible text, reasoning, the server's figures."""

    def __init__(
        self,
        profile: ModelProfile,
        wire: WireRequest,
        request: GenerationRequest,
        kind: OpenAICompatible,
        scrub: Callable[[str], str],
    ) -> None:
        self.visible = ReplyText(
            stops=wire.stops,
            reasoning_tags=profile.reasoning_tags,
            starts_in_reasoning=wire.starts_in_reasoning,
            continues=bool(request.prefill),
        )
        self.reasoning: list[str] = []  # reasoning the server sent apart (reasoning_content)
        self.started = time.perf_counter()
        self.first_at: float | None = None
        self.chunks = 0
        self.finish: FinishReason | None = None
        self.done = False  # [DONE] seen
        self.timings: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.wire = wire
        self.request = request
        self.kind = kind
        self._scrub = scrub  # takes credentials out of what the server says

    @staticmethod
    def adds_tokens(chunk: Any) -> bool:
        """Whether feeding `chunk` would add text or reasoning (a token, for the cap)."""
        if not isinstance(chunk, dict):
            return False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            fields: tuple[Any, ...] = (choice.get("text"),)
            if isinstance(delta, dict):
                fields = (
                    delta.get("content"),
                    delta.get("reasoning_content"),
                    delta.get("reasoning"),
                )
            if any(_text(value) for value in fields):
                return True
        return False

    def feed(self, where: str, chunk: Any) -> list[StreamEvent]:
        """One parsed `data:` payload; `where` names the endpoint in errors."""
        if not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise ServerResponseError(
                f"{where}: the server reported an error mid-stream: {self._scrub(str(message))}"
            )
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = _text(delta.get("content"))
                # vLLM and llama-server with a reasoning parser send thinking apart.
                thought = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
            else:
                text, thought = _text(choice.get("text")), ""
            if text or thought:
                self.chunks += 1
                if self.first_at is None:
                    self.first_at = time.perf_counter()
            if thought:
                self.reasoning.append(thought)
                events.append(ReasoningDelta(thought))
            if text:
                events.extend(self.visible.events(text))
            reason = choice.get("finish_reason")
            if reason:
                self.finish = FinishReason.LENGTH if reason == "length" else FinishReason.STOP
        return events

    def server_figures(self) -> dict[str, float]:
        """The figures the server reported for this call: only those it gave as numbers a
        count or a time can be (anything else is measured here instead)."""
        figures = self.kind.server_figures(self.timings, self.usage)
        return {name: value for name, value in figures.items() if _figure(value) is not None}

    def metrics(self, finish: FinishReason, positions_fallback: int) -> TurnMetrics:
        now = time.perf_counter()
        first = self.first_at or now
        given = self.server_figures()
        reused = int(given.get("reused", 0))
        if "evaluated" in given:
            evaluated = int(given["evaluated"])
            positions = evaluated + reused
        else:
            positions = int(given.get("positions", 0)) or positions_fallback
            evaluated = max(0, positions - reused)
        return call_metrics(
            self.request,
            finish,
            positions=positions,
            reused=reused,
            evaluated=evaluated,
            prompt_ms=float(given.get("prompt_ms", (first - self.started) * 1000)),
            generated=int(given.get("generated", 0)) or self.chunks,
            gen_ms=float(given.get("gen_ms", (now - first) * 1000)),
            rate=float(given.get("rate", 0.0)),
            images=self.wire.images,
        )

    def result(self, finish: FinishReason, positions_fallback: int = 0) -> GenerationResult:
        if self.request.prefill_only:
            text, reasoning = "", ""
        else:
            text = self.visible.text
            reasoning = ("".join(self.reasoning) + self.visible.reasoning).strip()
        return GenerationResult(
            text=text,
            reasoning=reasoning,
            finish_reason=finish,
            metrics=self.metrics(finish, positions_fallback),
            stop_string=self.visible.stops.stopped_by,
        )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _figure(value: Any) -> float | None:
    """A count or a time as a server may report it; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 2**53 else None
    return value if math.isfinite(value) and value >= 0 else None
