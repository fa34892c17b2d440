"""The server backend: the same engine surface as `LlamaEngine`, over an OpenAI-compatible API.

For models that do not fit the player's machine: llama.cpp's `llama-server`, vLLM, or
llama-cpp-python's own server (`python -m llama_cpp.server`). This module never imports
llama_cpp; it speaks HTTP (httpx) and parses the streamed server-sent events itself.

How a prompt travels, and why:

* The prompt is rendered here, with the same formatter the in-process engine uses, whenever
  that is possible, and sent as text to `/v1/completions`. Then the bytes the server reads are
  the bytes the in-process engine would read: the memory's placement rules (a stable prefix
  between folds) carry over unchanged, and the server's prompt cache (llama-server:
  `cache_prompt`) reuses everything before the new message.
  - `transcript` profiles always go this way (the format needs no template).
  - `template` profiles go this way when the server hands out the model's chat template
    (llama-server's `/props` does, with the BOS/EOS pieces).
* Otherwise (`template` on vLLM or llama-cpp-python's server, which do not expose the
  template; or any prompt with images, which need the server's multimodal path) the messages
  go to `/v1/chat/completions` and the server applies the model's template. That path is
  deterministic too (same messages, same text), so the cache still works turn to turn; only
  `render()` is then an approximation, for display.

Token counts come from the server's tokenizer (llama-server and vLLM `/tokenize`,
llama-cpp-python `/extras/tokenize/count`), cached per text; a server with none gets an
estimate, which `kotonia doctor` says. The context size is the server's where it reports it
(llama-server `/props`, vLLM `max_model_len`), the profile's otherwise.

One request at a time goes to the server, through a priority gate: a user turn waits for
nothing but another user turn. A background call (a fold, a prewarm) that holds the gate when a
user turn arrives is stopped and raises `CallPreemptedError`; the fold worker runs it again
shortly. (llama-cpp-python's server does the same on its side: a new request interrupts the one
streaming.)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import heapq
import itertools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import httpx

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import TurnMetrics
from kotonia_tui.engine import http_client as http
from kotonia_tui.engine.calls import EngineCall
from kotonia_tui.engine.errors import (
    BackendUnavailableError,
    CallPreemptedError,
    EngineClosedError,
    ModelFileError,
    ServerResponseError,
    StreamInterruptedError,
)
from kotonia_tui.engine.formats import (
    MEDIA_MARKER,
    PromptFormatter,
    RenderedPrompt,
    TranscriptFormat,
    make_formatter,
)
from kotonia_tui.engine.streaming import ReplyText
from kotonia_tui.engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    Priority,
    ReasoningDelta,
    Slot,
    StreamEvent,
    TextDelta,
)

log = logging.getLogger(__name__)

# A server does not say how many positions an image takes; budgets use this (generous: an
# overestimate only keeps a little less verbatim history).
IMAGE_CELLS_ESTIMATE = 768
CHAT_MESSAGE_OVERHEAD = 6  # role markers per message on the chat path (an estimate)
CHARS_PER_TOKEN_ESTIMATE = 3.0  # servers with no tokenize endpoint (conservative: overcounts)
TOKEN_CACHE_SIZE = 4096
TOKEN_CACHE_MAX_CHARS = 16384  # whole prompts are not worth keeping
PROBE_TIMEOUT_S = 10.0


class ServerKind(StrEnum):
    LLAMA_SERVER = "llama-server"
    VLLM = "vllm"
    LLAMA_CPP_PYTHON = "llama-cpp-python"
    OPENAI = "openai-compatible"  # anything else: no tokenizer, no context size


@dataclass(frozen=True)
class ServerInfo:
    """What `kotonia doctor` and the inspector show about the server and its model."""

    url: str
    kind: ServerKind
    model_id: str
    model_name: str
    model_key: str
    n_ctx: int
    n_ctx_source: str  # "server" or "profile"
    fold_n_ctx: int
    prompt_format: PromptFormat
    client_renders: bool  # the prompt is rendered here and sent to /v1/completions
    has_chat_template: bool
    tokenizer: str  # the endpoint, or "estimate"
    slots: int
    read_timeout_s: float
    load_ms: float

    @property
    def n_ctx_train(self) -> int:
        return self.n_ctx


# ---- the priority gate ---------------------------------------------------------------------


@dataclass(order=True)
class _Ticket:
    priority: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)
    preempt: Callable[[], None] = field(compare=False)


class PriorityGate:
    """One holder at a time; the most urgent waiter goes next (lower value first, then FIFO).

    A waiter more urgent than the holder asks the holder to stop (`preempt`): a user turn never
    waits behind a background fold.
    """

    def __init__(self) -> None:
        self._holder: _Ticket | None = None
        self._waiting: list[_Ticket] = []
        self._seq = itertools.count()

    @property
    def busy(self) -> bool:
        return self._holder is not None or any(not t.future.done() for t in self._waiting)

    async def acquire(self, priority: int, preempt: Callable[[], None]) -> _Ticket:
        ticket = _Ticket(
            priority, next(self._seq), asyncio.get_running_loop().create_future(), preempt
        )
        if self._holder is None and not self._waiting:
            self._holder = ticket
            return ticket
        heapq.heappush(self._waiting, ticket)
        if self._holder is not None and priority < self._holder.priority:
            self._holder.preempt()
        try:
            await ticket.future
        except asyncio.CancelledError:
            # Granted in the same instant as cancelled: hand the gate on, do not strand it.
            if ticket.future.done() and not ticket.future.cancelled():
                self.release(ticket)
            raise
        return ticket

    def release(self, ticket: _Ticket) -> None:
        if self._holder is not ticket:
            return
        self._holder = None
        while self._waiting:
            following = heapq.heappop(self._waiting)
            if following.future.done():  # its waiter went away
                continue
            self._holder = following
            following.future.set_result(None)
            return


# ---- one call ------------------------------------------------------------------------------


class ServerCall(EngineCall):
    """A running server call: an `EngineCall` whose cancel closes the HTTP stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._stop = asyncio.Event()
        self.stop_reason: str | None = None  # "cancel", "preempt" or "close"
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Close the stream now; the result's finish_reason is then `cancelled`."""
        super().cancel()
        self._request_stop("cancel")

    def _request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()


@dataclass
class _Plan:
    """One request as it goes over the wire."""

    path: str
    payload: dict[str, Any]
    stops: tuple[str, ...]
    starts_in_reasoning: bool
    images: int
    rendered: RenderedPrompt | None  # set on the client-rendered path


class _Reply:
    """What a stream has delivered so far: visible text, reasoning, the server's figures."""

    def __init__(self, profile: ModelProfile, plan: _Plan, request: GenerationRequest) -> None:
        self.visible = ReplyText(
            stops=plan.stops,
            reasoning_tags=profile.reasoning_tags,
            starts_in_reasoning=plan.starts_in_reasoning,
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
        self.plan = plan
        self.request = request

    def emit(self, text: str, final: bool = False) -> list[StreamEvent]:
        """The same visible-text rules as the in-process engine: thinking apart, stops cut."""
        shown, reasoning = self.visible.feed(text, final=final)
        events: list[StreamEvent] = [ReasoningDelta(reasoning)] if reasoning else []
        if shown:
            events.append(TextDelta(shown))
        return events

    def feed(self, url: str, chunk: Any) -> list[StreamEvent]:
        if not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise ServerResponseError(f"{url}: the server reported an error mid-stream: {message}")
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
                text = delta.get("content") or ""
                # vLLM and llama-server with a reasoning parser send thinking apart.
                thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
            else:
                text, thought = choice.get("text") or "", ""
            if text or thought:
                self.chunks += 1
                if self.first_at is None:
                    self.first_at = time.perf_counter()
            if thought:
                self.reasoning.append(thought)
                events.append(ReasoningDelta(thought))
            if text:
                events.extend(self.emit(text))
            reason = choice.get("finish_reason")
            if reason:
                self.finish = FinishReason.LENGTH if reason == "length" else FinishReason.STOP
        return events

    def metrics(self, finish: FinishReason, positions_fallback: int) -> TurnMetrics:
        now = time.perf_counter()
        first = self.first_at or now
        t, u = self.timings, self.usage
        if t:  # llama-server's own figures: the cache is visible in the inspector
            evaluated = int(t.get("prompt_n", 0))
            reused = int(t.get("cache_n", 0))
            positions = evaluated + reused
            prompt_ms = float(t.get("prompt_ms", (first - self.started) * 1000))
            generated = int(t.get("predicted_n", self.chunks))
            gen_ms = float(t.get("predicted_ms", (now - first) * 1000))
            rate = float(t.get("predicted_per_second", 0.0))
        else:
            positions = int(u.get("prompt_tokens", 0)) or positions_fallback
            details = u.get("prompt_tokens_details") or {}
            reused = int(details.get("cached_tokens", 0) or 0) if isinstance(details, dict) else 0
            evaluated = max(0, positions - reused)
            prompt_ms = (first - self.started) * 1000
            generated = int(u.get("completion_tokens", 0)) or self.chunks
            gen_ms = (now - first) * 1000
            rate = 0.0
        if not rate and gen_ms > 0:
            rate = generated / (gen_ms / 1000)
        slot = Slot.PREWARM if self.request.prefill_only else self.request.slot
        return TurnMetrics(
            prompt_positions=positions,
            reused=reused,
            evaluated=evaluated,
            prompt_ms=prompt_ms,
            generated=generated,
            gen_ms=gen_ms,
            tokens_per_s=rate,
            finish_reason=str(finish),
            images=self.plan.images,
            slot=str(slot),
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


def _data_uri(image: ImageInput) -> str:
    return f"data:{image.mime};base64,{base64.b64encode(image.data).decode('ascii')}"


def chat_messages(
    messages: Sequence[ChatMessage], *, images: bool, prefill: str = ""
) -> list[dict[str, Any]]:
    """Messages as the chat endpoint takes them, in the shape strict templates accept.

    The same joining as the in-process template path: one leading system message (a later one
    joins the user side), consecutive messages of one role joined. Images become data URIs.
    """
    payload: list[dict[str, Any]] = []
    for message in messages:
        role = message.role if (message.role != "system" or not payload) else "user"
        parts: list[dict[str, Any]] = []
        if images:
            parts.extend(
                {"type": "image_url", "image_url": {"url": _data_uri(image)}}
                for image in message.images
            )
        if message.content or not parts:
            parts.append({"type": "text", "text": message.content})
        if payload and payload[-1]["role"] == role and role != "system":
            payload[-1]["parts"].append({"type": "text", "text": "\n\n"})
            payload[-1]["parts"].extend(parts)
        else:
            payload.append({"role": role, "parts": parts})
    if prefill:
        payload.append({"role": "assistant", "parts": [{"type": "text", "text": prefill}]})
    out: list[dict[str, Any]] = []
    for entry in payload:
        parts = entry["parts"]
        if all(p["type"] == "text" for p in parts):
            # Plain strings where there is no image: every server and template takes those.
            out.append({"role": entry["role"], "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": entry["role"], "content": parts})
    return out


# ---- the engine ----------------------------------------------------------------------------


class ServerEngine:
    """A model on an inference server. Create with `open`; close when done."""

    def __init__(self, profile: ModelProfile, url: str) -> None:
        self.profile = profile
        self.url = url
        self._headers = http.auth_headers(profile.api_key_env)
        self._gate = PriorityGate()
        self._calls: set[ServerCall] = set()
        self._closed = False
        self._token_cache: OrderedDict[str, int] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._formatter: PromptFormatter | None = None
        self._bos_cells = 1
        self._tokenize_baseline = 0  # llama-cpp-python's tokenize adds a BOS; counted once
        self._vision = False
        self._interactive_streams = 0  # user turns streaming right now
        self._client = httpx.Client(
            headers=self._headers,
            timeout=http.timeouts(profile.server_connect_timeout_s, PROBE_TIMEOUT_S),
        )
        self._timeout = http.timeouts(profile.server_connect_timeout_s, PROBE_TIMEOUT_S)
        self.info: ServerInfo

    # ---- opening --------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        profile: ModelProfile,
        *,
        fold_ctx_for: Callable[[int], int] | None = None,
    ) -> ServerEngine:
        """Ask the server what it is and what it serves (blocking; a UI calls it off-thread)."""
        if not profile.server_url:
            raise ModelFileError(
                'the profile uses backend = "server" but sets no server_url '
                "(e.g. http://127.0.0.1:8080)"
            )
        engine = cls(profile, http.base_url(profile.server_url))
        try:
            engine._probe(fold_ctx_for)
        except BaseException:
            engine.close()
            raise
        return engine

    def _get(self, path: str) -> httpx.Response:
        try:
            return self._client.get(self.url + path)
        except httpx.HTTPError as exc:
            raise http.unavailable(self.url + path, exc) from exc

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code != 200:
            raise http.status_error(str(response.url), response.status_code, response.content)
        return http.parse_json(str(response.url), response.text)

    def _probe(self, fold_ctx_for: Callable[[int], int] | None) -> None:
        started = time.perf_counter()
        profile = self.profile
        models = self._json(self._get("/v1/models"))
        entries = [m for m in models.get("data") or () if isinstance(m, dict)]
        if not entries:
            raise ServerResponseError(f"{self.url}/v1/models: the server lists no model")
        entry = next((m for m in entries if m.get("id") == profile.server_model), entries[0])
        model_id = profile.server_model or str(entry.get("id"))
        kind = ServerKind.OPENAI
        n_ctx: int | None = None
        slots = 1
        template: str | None = None
        bos = eos = ""
        if entry.get("owned_by") == "vllm" or "max_model_len" in entry:
            kind = ServerKind.VLLM
            n_ctx = entry.get("max_model_len")
        else:
            props = self._get("/props")
            data = http.parse_json(self.url, props.text) if props.status_code == 200 else None
            if isinstance(data, dict) and "default_generation_settings" in data:
                kind = ServerKind.LLAMA_SERVER
                settings = data.get("default_generation_settings") or {}
                # Per slot: with --parallel N each slot holds n_ctx / N.
                n_ctx = settings.get("n_ctx") or data.get("n_ctx")
                slots = int(data.get("total_slots") or 1)
                template = data.get("chat_template") or None
                bos, eos = data.get("bos_token") or "", data.get("eos_token") or ""
                modalities = data.get("modalities") or {}
                self._vision = bool(modalities.get("vision"))
            elif self._probe_lcp_tokenizer(model_id):
                kind = ServerKind.LLAMA_CPP_PYTHON
        if profile.server_vision is not None:
            self._vision = profile.server_vision
        self._kind = kind
        self._model_id = model_id
        n_ctx_source = "server" if n_ctx else "profile"
        window = int(n_ctx or profile.n_ctx)
        if n_ctx and int(n_ctx) != profile.n_ctx:
            log.info(
                "%s reports n_ctx %s (the profile says %s); using the server's",
                self.url,
                n_ctx,
                profile.n_ctx,
            )
        self._setup_formatter(template, bos, eos, model_id)
        read_s = http.read_timeout_s(window, profile.server_prompt_rate, profile.server_timeout_s)
        self._timeout = http.timeouts(profile.server_connect_timeout_s, read_s)
        fold_ctx = min(window, fold_ctx_for(window) if fold_ctx_for else window)
        tokenizer = {
            ServerKind.LLAMA_SERVER: "/tokenize",
            ServerKind.VLLM: "/tokenize",
            ServerKind.LLAMA_CPP_PYTHON: "/extras/tokenize/count",
        }.get(kind, "estimate")
        self.info = ServerInfo(
            url=self.url,
            kind=kind,
            model_id=model_id,
            model_name=model_id.rstrip("/").rsplit("/", 1)[-1],
            # Token counts cached on message rows are valid for this tokenizer only.
            model_key=f"server:{kind}:{model_id}",
            n_ctx=window,
            n_ctx_source=n_ctx_source,
            fold_n_ctx=fold_ctx,
            prompt_format=profile.prompt_format,
            client_renders=self._formatter is not None,
            has_chat_template=bool(template),
            tokenizer=tokenizer,
            slots=slots,
            read_timeout_s=read_s,
            load_ms=(time.perf_counter() - started) * 1000,
        )
        log.info(
            "server backend: %s (%s), model %s, n_ctx %s (%s), %s",
            self.url,
            kind,
            model_id,
            window,
            n_ctx_source,
            "prompt rendered here" if self._formatter else "server applies the chat template",
        )

    def _probe_lcp_tokenizer(self, model_id: str) -> bool:
        """llama-cpp-python's server: `/extras/tokenize` adds a BOS, measured once on ""."""
        try:
            response = self._client.post(
                self.url + "/extras/tokenize/count", json={"input": "", "model": model_id}
            )
        except httpx.HTTPError as exc:
            raise http.unavailable(self.url, exc) from exc
        if response.status_code != 200:
            return False
        self._tokenize_baseline = int(http.parse_json(self.url, response.text).get("count", 0))
        return True

    def _setup_formatter(self, template: str | None, bos: str, eos: str, name: str) -> None:
        profile = self.profile
        if profile.prompt_format is PromptFormat.TRANSCRIPT:
            self._formatter = TranscriptFormat()
            return
        if not template:
            return  # the chat endpoint applies the template on the server
        try:
            formatter = make_formatter(
                PromptFormat.TEMPLATE,
                chat_template=template,
                bos_token=bos,
                eos_token=eos,
                thinking=profile.thinking,
                reasoning_tags=profile.reasoning_tags,
                model_name=name,
            )
            formatter.render(
                (ChatMessage("system", "s"), ChatMessage("user", "u")),
                reply_name="",
                user_name="",
            )
        except ModelFileError as exc:
            # A template our sandbox cannot run is still the server's to apply: chat path.
            log.warning(
                "the server's chat template cannot be rendered here (%s); using the chat endpoint",
                exc,
            )
            return
        self._formatter = formatter

    # ---- properties -----------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        return self.info.n_ctx

    @property
    def model_key(self) -> str:
        return self.info.model_key

    @property
    def has_vision(self) -> bool:
        # Images travel only on the chat path; a transcript has nowhere to put them.
        return self._vision and self.profile.prompt_format is PromptFormat.TEMPLATE

    @property
    def busy(self) -> bool:
        return self._gate.busy

    # ---- tokens ---------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Token count of `text` inside a prompt (no BOS), from the server's tokenizer."""
        if not text:
            return 0
        with self._cache_lock:
            if text in self._token_cache:
                self._token_cache.move_to_end(text)
                return self._token_cache[text]
        count = self._tokenize(text)
        if len(text) <= TOKEN_CACHE_MAX_CHARS:
            with self._cache_lock:
                self._token_cache[text] = count
                while len(self._token_cache) > TOKEN_CACHE_SIZE:
                    self._token_cache.popitem(last=False)
        return count

    def _tokenize(self, text: str) -> int:
        kind = self.info.kind
        if kind is ServerKind.LLAMA_SERVER:
            path, body = "/tokenize", {"content": text, "add_special": False, "parse_special": True}
        elif kind is ServerKind.VLLM:
            path = "/tokenize"
            body = {"model": self._model_id, "prompt": text, "add_special_tokens": False}
        elif kind is ServerKind.LLAMA_CPP_PYTHON:
            path, body = "/extras/tokenize/count", {"input": text, "model": self._model_id}
        else:
            return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)
        if self._closed:
            raise EngineClosedError("the engine is closed")
        if kind is ServerKind.LLAMA_CPP_PYTHON and self._interactive_streams:
            # That server answers a tokenize only after interrupting the stream it is sending:
            # the user's reply would be cut. A background caller (the fold worker) waits.
            raise BackendUnavailableError(
                f"{self.url}: busy with a reply (llama-cpp-python's server cannot count tokens "
                "while it streams)"
            )
        try:
            response = self._client.post(self.url + path, json=body, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise http.unavailable(self.url + path, exc) from exc
        data = self._json(response)
        if "count" in data:
            return max(0, int(data["count"]) - self._tokenize_baseline)
        return max(0, len(data.get("tokens") or ()) - self._tokenize_baseline)

    def image_cells(self, image: ImageInput) -> int:
        """Positions an image takes (an estimate: servers do not say); 0 without vision."""
        del image
        return IMAGE_CELLS_ESTIMATE if self.has_vision else 0

    def render(self, request: GenerationRequest) -> RenderedPrompt:
        """The prompt text. Exact on the client-rendered path; on the chat path a readable
        approximation (the server applies the template)."""
        if self._formatter is not None:
            return self._formatter.render(
                request.messages,
                reply_name=request.reply_name,
                user_name=request.user_name,
                prefill=request.prefill,
            )
        parts = []
        for message in request.messages:
            markers = "".join(f"{MEDIA_MARKER}\n" for _ in message.images)
            parts.append(f"{message.role}: {markers}{message.content}")
        if request.prefill:
            parts.append(f"assistant: {request.prefill}")
        images = tuple(i for m in request.messages for i in m.images)
        return RenderedPrompt("\n\n".join(parts), images, ())

    def prompt_cells(self, request: GenerationRequest) -> int:
        """Positions the prompt takes: exact when rendered here, estimated on the chat path."""
        images = sum(len(m.images) for m in request.messages) if self.has_vision else 0
        if self._formatter is not None and not images:
            return self.count_tokens(self.render(request).text) + self._bos_cells
        return (
            sum(self.count_tokens(m.content) + CHAT_MESSAGE_OVERHEAD for m in request.messages)
            + self.count_tokens(request.prefill)
            + images * IMAGE_CELLS_ESTIMATE
        )

    # ---- requests -------------------------------------------------------------------------

    def _plan(self, request: GenerationRequest) -> _Plan:
        profile = self.profile
        kind = self.info.kind
        temperature = profile.temperature if request.temperature is None else request.temperature
        payload: dict[str, Any] = {
            "model": self._model_id,
            # A prewarm reads the prompt into the server's cache; one token is the least a
            # server accepts (llama-cpp-python takes 0 as "no limit").
            "max_tokens": 1 if request.prefill_only else request.max_tokens,
            "stream": True,
            "temperature": temperature,
            "top_p": profile.top_p,
            "min_p": profile.min_p,
            "top_k": 40,
        }
        if profile.seed is not None:
            payload["seed"] = profile.seed
        if kind in (ServerKind.LLAMA_SERVER, ServerKind.LLAMA_CPP_PYTHON):
            payload["repeat_penalty"] = profile.repeat_penalty
        if kind is ServerKind.LLAMA_SERVER:
            payload["cache_prompt"] = True
            payload["repeat_last_n"] = 64
            if self.info.slots >= 2:
                # Folds on their own slot, like the in-process fold context: they never
                # evict the chat's cached prefix.
                payload["id_slot"] = 1 if request.slot is Slot.FOLD else 0
        if kind is ServerKind.VLLM:
            payload["repetition_penalty"] = profile.repeat_penalty
        if kind in (ServerKind.LLAMA_SERVER, ServerKind.VLLM, ServerKind.OPENAI):
            payload["stream_options"] = {"include_usage": True}
        images = sum(len(m.images) for m in request.messages) if self.has_vision else 0
        if self._formatter is not None and not images:
            rendered = self._formatter.render(
                request.messages,
                reply_name=request.reply_name,
                user_name=request.user_name,
                prefill=request.prefill,
            )
            text = rendered.text
            if rendered.images:
                # No vision on this path: the markers would be read as literal text.
                text = text.replace(f"{MEDIA_MARKER}\n", "").replace(MEDIA_MARKER, "")
            stops = tuple(dict.fromkeys(rendered.stops + request.extra_stops))
            payload["prompt"] = text
            plan = _Plan(
                "/v1/completions", payload, stops, rendered.starts_in_reasoning, 0, rendered
            )
        else:
            stops = tuple(dict.fromkeys(request.extra_stops))
            payload["messages"] = chat_messages(
                request.messages, images=bool(images), prefill=request.prefill
            )
            if request.prefill and kind is ServerKind.VLLM:
                payload["continue_final_message"] = True
                payload["add_generation_prompt"] = False
            plan = _Plan("/v1/chat/completions", payload, stops, False, images, None)
        if stops:
            # The server stops there too (saves its time); the client still cuts exactly.
            payload["stop"] = list(stops[:4] if kind is ServerKind.OPENAI else stops)
        return plan

    def start(self, request: GenerationRequest) -> ServerCall:
        """Start a call; must be called from a running asyncio loop."""
        if self._closed:
            raise EngineClosedError("the engine is closed")
        loop = asyncio.get_running_loop()
        call = ServerCall(loop)
        self._calls.add(call)
        call.task = loop.create_task(self._run(call, request), name="kotonia-server-call")
        return call

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Run a call to the end and return its result (no streaming)."""
        call = self.start(request)
        async for _event in call:
            pass
        return await call.result()

    def prewarm(self, request: GenerationRequest) -> ServerCall:
        """Read a prompt the next chat call is expected to start with into the server's cache."""
        return self.start(replace(request, priority=Priority.BACKGROUND, prefill_only=True))

    async def _run(self, call: ServerCall, request: GenerationRequest) -> None:
        try:
            result = await self._gated(call, request)
        except asyncio.CancelledError:
            call._deliver(EngineClosedError("the call was abandoned (the engine is closing)"))
            raise
        except BaseException as exc:
            call._deliver(exc)
        else:
            call._deliver(result)
        finally:
            self._calls.discard(call)

    async def _gated(self, call: ServerCall, request: GenerationRequest) -> GenerationResult:
        acquire = asyncio.ensure_future(
            self._gate.acquire(int(request.priority), lambda: call._request_stop("preempt"))
        )
        stopped = asyncio.ensure_future(call._stop.wait())
        try:
            await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not acquire.done():
            # Cancelled (or the engine closed) while waiting for its turn.
            acquire.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquire
        if acquire.cancelled():
            return self._not_started(call, request)
        ticket = acquire.result()
        try:
            if call.stop_reason is not None:
                return self._not_started(call, request)
            return await self._stream(call, request)
        finally:
            self._gate.release(ticket)

    def _not_started(self, call: ServerCall, request: GenerationRequest) -> GenerationResult:
        if call.stop_reason == "close":
            raise EngineClosedError("the engine is closed")
        metrics = TurnMetrics(finish_reason=str(FinishReason.CANCELLED), slot=str(request.slot))
        return GenerationResult("", "", FinishReason.CANCELLED, metrics)

    async def _stream(self, call: ServerCall, request: GenerationRequest) -> GenerationResult:
        plan = self._plan(request)
        reply = _Reply(self.profile, plan, request)
        reader = asyncio.ensure_future(self._read(call, plan, reply))
        stopped = asyncio.ensure_future(call._stop.wait())
        try:
            await asyncio.wait({reader, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not reader.done():
                # Leaving the `stream` block closes the connection: the server stops generating.
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
        if reader.done() and not reader.cancelled():
            return reader.result()
        if call.stop_reason == "preempt":
            raise CallPreemptedError(
                f"{self.url}: the background call gave way to a user turn; it runs again next"
            )
        if call.stop_reason == "close":
            raise EngineClosedError("the engine is closed")
        reply.emit("", final=True)
        return reply.result(FinishReason.CANCELLED)

    async def _read(self, call: ServerCall, plan: _Plan, reply: _Reply) -> GenerationResult:
        url = self.url + plan.path
        interactive = reply.request.priority is Priority.INTERACTIVE
        self._interactive_streams += interactive
        try:
            async with (
                httpx.AsyncClient(headers=self._headers, timeout=self._timeout) as client,
                client.stream("POST", url, json=plan.payload) as response,
            ):
                if response.status_code != 200:
                    raise http.status_error(url, response.status_code, await response.aread())
                async for data in http.sse_data(response.aiter_lines()):
                    if data.strip() == "[DONE]":
                        reply.done = True
                        break
                    for event in reply.feed(url, http.parse_json(url, data)):
                        call._deliver(event)
                    call.tokens_generated = reply.chunks
                    if reply.visible.stops.stopped_by is not None:
                        break  # closing the stream stops the server as well
        except httpx.HTTPError as exc:
            error = http.unavailable(url, exc)
            if reply.chunks:
                reply.emit("", final=True)
                raise StreamInterruptedError(
                    f"{error} part way through the reply ({reply.chunks} tokens arrived)",
                    partial=reply.result(FinishReason.LENGTH),
                ) from exc
            raise error from exc
        finally:
            self._interactive_streams -= interactive
        if reply.finish is None and reply.visible.stops.stopped_by is None:
            reply.emit("", final=True)
            why = "the server ended the stream before the reply finished"
            if self.info.kind is ServerKind.LLAMA_CPP_PYTHON:
                why += " (llama-cpp-python's server does that when another request arrives)"
            partial = reply.result(FinishReason.LENGTH)
            if reply.request.priority is Priority.BACKGROUND:
                # A background call cut short is run again, not kept in part.
                raise CallPreemptedError(f"{url}: {why}")
            raise StreamInterruptedError(f"{url}: {why}", partial=partial)
        for event in reply.emit("", final=True):
            call._deliver(event)
        finish = (
            FinishReason.STOP
            if reply.visible.stops.stopped_by
            else (reply.finish or FinishReason.STOP)
        )
        fallback = 0
        if not reply.timings and not reply.usage.get("prompt_tokens"):
            # The server gave no prompt figures (llama-cpp-python): count them here.
            fallback = await asyncio.to_thread(self._positions, plan, reply.request)
        result = reply.result(finish, fallback)
        if finish is FinishReason.LENGTH and not reply.timings and not reply.usage:
            # Chunks can be fewer than tokens (a chunk may carry a split character). With no
            # count from the server: when the prompt and the cap fit the window, the cap is
            # what stopped the reply, so the service names the right reason for the cut.
            metrics = result.metrics
            if metrics.prompt_positions + reply.request.max_tokens <= self.n_ctx:
                generated = max(metrics.generated, reply.request.max_tokens)
                result.metrics = metrics.model_copy(update={"generated": generated})
        return result

    def _positions(self, plan: _Plan, request: GenerationRequest) -> int:
        try:
            if plan.rendered is not None:
                return self.count_tokens(plan.payload["prompt"]) + self._bos_cells
            return self.prompt_cells(request)
        except BackendUnavailableError as exc:
            log.info("prompt positions not counted: %s", exc)
            return 0

    # ---- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop running calls (their streams close) and release the connection pool."""
        if self._closed:
            return
        self._closed = True
        for call in list(self._calls):
            call._request_stop("close")
        self._client.close()

    def __enter__(self) -> ServerEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
