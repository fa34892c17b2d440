"""`ServerEngine`: the engine surface over an inference server (see the package docstring).

It opens by probing the server (`probe`), counts tokens with the server's tokenizer
(`tokens`), builds each request for the kind of server (`requests`, `kinds`), lets one request
at a time through the priority gate (`gate`) and reads the streamed answer (`stream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import httpx

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.engine.base import EngineBase, call_metrics
from kotonia_tui.engine.errors import (
    BackendUnavailableError,
    CallPreemptedError,
    EngineClosedError,
    EngineError,
    ModelFileError,
    ServerResponseError,
    StreamInterruptedError,
)
from kotonia_tui.engine.formats import (
    MEDIA_MARKER,
    PromptFormatter,
    RenderedPrompt,
    render_request,
)
from kotonia_tui.engine.protocol import Call
from kotonia_tui.engine.sampling import Sampling
from kotonia_tui.engine.server import bodies, http
from kotonia_tui.engine.server.call import ServerCall
from kotonia_tui.engine.server.credentials import api_key_headers, server_address
from kotonia_tui.engine.server.gate import PriorityGate, ReplyFence
from kotonia_tui.engine.server.kinds import OpenAICompatible
from kotonia_tui.engine.server.probe import ServerInfo, probe
from kotonia_tui.engine.server.requests import WireRequest, build_request
from kotonia_tui.engine.server.slots import SlotStates, SlotSupport, probe_slots
from kotonia_tui.engine.server.stream import StreamedReply, StreamWatch
from kotonia_tui.engine.server.tokens import TokenCounter
from kotonia_tui.engine.state_cache import StateCacheConfig
from kotonia_tui.engine.types import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    Priority,
    Slot,
    Work,
)

log = logging.getLogger(__name__)

# A server does not say how many positions an image takes; budgets use this (generous: an
# overestimate only keeps a little less verbatim history).
IMAGE_CELLS_ESTIMATE = 768
CHAT_MESSAGE_OVERHEAD = 6  # role markers per message on the chat path (an estimate)
BOS_CELLS = 1  # the BOS the server adds to a prompt rendered here
PROBE_TIMEOUT_S = 10.0


class ServerEngine(EngineBase):
    """A model on an inference server. Create with `open`; close when done."""

    info: ServerInfo
    _kind: OpenAICompatible
    _formatter: PromptFormatter | None
    _vision: bool
    _tokens: TokenCounter

    def __init__(self, profile: ModelProfile, url: str) -> None:
        self.profile = profile
        address = server_address(url)
        self._http = http.ServerHttp(
            address,
            api_key_headers(profile.api_key_env, address.secrets),
            profile.server_connect_timeout_s,
            PROBE_TIMEOUT_S,
        )
        self._gate = PriorityGate()
        self._calls: set[ServerCall] = set()
        self._closed = False
        self._fence = ReplyFence()  # token counts vs user replies, where they cannot overlap
        self.slot_support = SlotSupport(False, "saved states are off (state_cache_mb = 0)")
        self._slot_states: SlotStates | None = None
        self._work: dict[Slot, Work] = {}

    @property
    def url(self) -> str:
        """The server's address as messages show it (credentials hidden)."""
        return self._http.url

    @classmethod
    def open(
        cls,
        profile: ModelProfile,
        *,
        fold_ctx_for: Callable[[int], int] | None = None,
        states: StateCacheConfig | None = None,
        schema_grammar: Callable[[str], str] | None = None,
    ) -> ServerEngine:
        """Ask the server what it is and what it serves (blocking; a UI calls it off-thread).

        With `states` (and a cap above 0), the chat slot is saved on the server after a turn
        and restored when a conversation comes back, where the server allows it (`slots`).
        """
        if not profile.server_url:
            raise ModelFileError(
                'the profile uses backend = "server" but sets no server_url '
                "(e.g. http://127.0.0.1:8080)"
            )
        engine = cls(profile, profile.server_url)
        try:
            probed = probe(engine._http, profile, fold_ctx_for)
        except BaseException:
            engine.close()
            raise
        engine.info = probed.info
        engine._kind = probed.kind
        engine._kind.schema_grammar = schema_grammar
        engine._formatter = probed.formatter
        engine._vision = probed.vision
        if probed.kind.ends_stream_for_any_request:
            # A count would cut the user's reply short: a background caller waits instead.
            engine._fence.keep_apart(
                f"{engine.url}: busy with a reply ({probed.kind.kind}'s server cannot count "
                "tokens while it streams)"
            )
        engine._tokens = TokenCounter(
            engine._http, probed.kind, probed.info.model_id, engine._fence
        )
        if states is not None and states.cap_bytes > 0:
            engine.slot_support = probe_slots(engine._http, vision=probed.vision)
            if engine.slot_support.available:
                key = f"{engine.url}|{probed.info.model_id}|{states.profile}"
                digest = hashlib.sha256(key.encode()).hexdigest()[:12]
                engine._slot_states = SlotStates(
                    engine._http,
                    slot_id=0,
                    key=key,
                    index=states.folder / f"server-slots-{digest}.json",
                )
        return engine

    # ---- properties -----------------------------------------------------------------------

    @property
    def has_vision(self) -> bool:
        # Images travel only on the chat path; a transcript has nowhere to put them.
        return self._vision and self.profile.prompt_format is PromptFormat.TEMPLATE

    @property
    def busy(self) -> bool:
        return self._gate.busy

    # ---- tokens ---------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Token count of `text` inside a prompt (no BOS), from the server's tokenizer.

        A blocking request on a cache miss: on the event loop use `count_tokens_many`.
        """
        return self._tokens.count(text)

    async def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """Counts of many texts, by concurrent requests that never block the event loop."""
        return await self._tokens.count_many(texts)

    def image_cells(self, image: ImageInput) -> int:
        """Positions an image takes (an estimate: servers do not say); 0 without vision."""
        del image
        return IMAGE_CELLS_ESTIMATE if self.has_vision else 0

    def _images(self, request: GenerationRequest) -> int:
        return sum(len(m.images) for m in request.messages) if self.has_vision else 0

    def render(self, request: GenerationRequest) -> RenderedPrompt:
        """The prompt text. Exact on the client-rendered path; on the chat path a readable
        approximation (the server applies the template)."""
        if self._formatter is not None:
            return render_request(self._formatter, request)
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
        images = self._images(request)
        if self._formatter is not None and not images:
            return self.count_tokens(self.render(request).text) + BOS_CELLS
        return (
            sum(self.count_tokens(m.content) + CHAT_MESSAGE_OVERHEAD for m in request.messages)
            + self.count_tokens(request.prefill)
            + images * IMAGE_CELLS_ESTIMATE
        )

    # ---- calls ----------------------------------------------------------------------------

    def start(self, request: GenerationRequest) -> ServerCall:
        """Start a call; must be called from a running asyncio loop."""
        if self._closed:
            raise EngineClosedError("the engine is closed")
        loop = asyncio.get_running_loop()
        call = ServerCall(loop)
        self._calls.add(call)
        call.task = loop.create_task(self._run(call, request), name="kotonia-server-call")
        return call

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
            self._gate.acquire(int(request.priority), lambda: call.request_stop("preempt"))
        )
        await call.wait_unless_stopped(acquire)
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
            await self._restore_slot(request)
            result = await self._stream(call, request)
            # The server tells the prompt's figures at the end of the call.
            self._add_work(request.slot, evaluated=result.metrics.evaluated)
            return self._slot_used(request, result)
        finally:
            self._gate.release(ticket)

    def _not_started(self, call: ServerCall, request: GenerationRequest) -> GenerationResult:
        if call.stop_reason == "close":
            raise EngineClosedError("the engine is closed")
        metrics = call_metrics(request, FinishReason.CANCELLED)
        return GenerationResult("", "", FinishReason.CANCELLED, metrics)

    async def _stream(self, call: ServerCall, request: GenerationRequest) -> GenerationResult:
        wire = build_request(
            request,
            kind=self._kind,
            sampling=Sampling.of(self.profile, request),
            formatter=self._formatter,
            model_id=self.info.model_id,
            images=self._images(request),
        )
        reply = StreamedReply(self.profile, wire, request, self._kind, self._http.scrub)
        reader = asyncio.ensure_future(self._read(call, reply))
        try:
            await call.wait_unless_stopped(reader)
        finally:
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
        reply.visible.events("", final=True)
        return reply.result(FinishReason.CANCELLED)

    async def _read(self, call: ServerCall, reply: StreamedReply) -> GenerationResult:
        wire = reply.wire
        where = self._http.where(wire.path)
        interactive = reply.request.priority is Priority.INTERACTIVE
        watch = StreamWatch(where, wire.max_tokens, self._http.timeout.read)
        try:
            async with (
                self._fence.replying() if interactive else contextlib.nullcontext(),
                self._http.async_client() as client,
                client.stream(
                    "POST", self._http.endpoint(wire.path), json=wire.payload
                ) as response,
                asyncio.timeout(watch.first_token_s) as silence,
            ):
                decoder = bodies.Decoder(response.headers.get("content-encoding", ""), where)
                raw = response.aiter_raw()
                if response.status_code != 200:
                    body = await bodies.aread_head(raw, decoder, bodies.MAX_ERROR_BYTES)
                    raise self._http.status_error(wire.path, response.status_code, body)
                lines = bodies.lines(raw, decoder, watch.counted)
                async for data in http.sse_data(lines):
                    if data.strip() == "[DONE]":
                        reply.done = True
                        break
                    chunk = http.parse_json(where, data)
                    if reply.chunks >= watch.max_tokens and reply.adds_tokens(chunk):
                        # A server that ignores the cap: the reply is cut at it, as it would
                        # have been, and the stream is closed (which stops the server).
                        log.warning("%s: the server went past the reply's cap", where)
                        reply.finish = FinishReason.LENGTH
                        break
                    before = (reply.chunks, len(reply.reasoning))
                    for event in reply.feed(where, chunk):
                        call._deliver(event)
                    self._add_work(
                        reply.request.slot, generated=reply.chunks - call.tokens_generated
                    )
                    call.tokens_generated = reply.chunks
                    if (reply.chunks, len(reply.reasoning)) != before:
                        # A token came: the next may take a gap, not a whole prompt's read.
                        silence.reschedule(asyncio.get_running_loop().time() + watch.gap_s)
                    if reply.visible.stops.stopped_by is not None:
                        break  # closing the stream stops the server as well
        except TimeoutError as exc:
            error = BackendUnavailableError(watch.stalled(reply.chunks))
            raise self._interrupted(reply, error) from exc
        except bodies.BodyTooLarge as exc:
            raise self._interrupted(reply, exc) from exc
        except httpx.HTTPError as exc:
            error = http.unavailable(where, exc)
            if reply.chunks:
                reply.visible.events("", final=True)
                raise StreamInterruptedError(
                    f"{error} part way through the reply ({reply.chunks} tokens arrived)",
                    partial=reply.result(FinishReason.LENGTH),
                ) from exc
            raise error from exc
        if reply.finish is None and reply.visible.stops.stopped_by is None:
            reply.visible.events("", final=True)
            why = "the server ended the stream before the reply finished"
            if self._kind.ends_stream_for_any_request:
                why += f" ({self._kind.kind}'s server does that when another request arrives)"
            partial = reply.result(FinishReason.LENGTH)
            if reply.request.priority is Priority.BACKGROUND:
                # A background call cut short is run again, not kept in part.
                raise CallPreemptedError(f"{where}: {why}")
            raise StreamInterruptedError(f"{where}: {why}", partial=partial)
        for event in reply.visible.events("", final=True):
            call._deliver(event)
        finish = (
            FinishReason.STOP
            if reply.visible.stops.stopped_by
            else (reply.finish or FinishReason.STOP)
        )
        given = reply.server_figures()
        fallback = 0
        if not given.get("positions") and "evaluated" not in given:
            # The server gave no prompt figures (llama-cpp-python): count them here.
            fallback = await asyncio.to_thread(self._positions, wire, reply.request)
        result = reply.result(finish, fallback)
        if finish is FinishReason.LENGTH and "generated" not in given:
            # Chunks can be fewer than tokens (a chunk may carry a split character). With no
            # count from the server: when the prompt and the cap fit the window, the cap is
            # what stopped the reply, so the service names the right reason for the cut.
            metrics = result.metrics
            if metrics.prompt_positions + reply.request.max_tokens <= self.n_ctx:
                generated = max(metrics.generated, reply.request.max_tokens)
                result.metrics = metrics.model_copy(update={"generated": generated})
        return result

    def _interrupted(self, reply: StreamedReply, error: EngineError) -> EngineError:
        """A stream stopped by a bound (a stall, too many bytes): what arrived is kept as a
        reply cut by the error. A background call keeps nothing in part: a stall waits for the
        server like one that is down (not counted as a failure), an oversized answer is a
        failed attempt."""
        if reply.request.priority is Priority.BACKGROUND or not reply.chunks:
            return error
        reply.visible.events("", final=True)
        return StreamInterruptedError(
            f"{error} ({reply.chunks} tokens arrived)", partial=reply.result(FinishReason.LENGTH)
        )

    def _positions(self, wire: WireRequest, request: GenerationRequest) -> int:
        try:
            if wire.rendered is not None:
                return self.count_tokens(wire.payload["prompt"]) + BOS_CELLS
            return self.prompt_cells(request)
        except BackendUnavailableError as exc:
            log.info("prompt positions not counted: %s", exc)
            return 0

    # ---- saved states (llama-server's slot files) -------------------------------------------

    def settle(self, request: GenerationRequest, after: Call) -> ServerCall:
        """After a turn, once the server is idle: save the chat slot as the conversation (if
        it still holds it: `after` needs no check, the server's prompt cache does that)."""
        del after
        return self._slot_call(request, self._save_slot)

    def restore(self, request: GenerationRequest) -> ServerCall:
        """When a conversation is opened: restore its saved slot, if the server has one."""
        return self._slot_call(request, self._restore_slot)

    def _slot_call(
        self, request: GenerationRequest, action: Callable[[GenerationRequest], Awaitable[int]]
    ) -> ServerCall:
        if self._closed:
            raise EngineClosedError("the engine is closed")
        loop = asyncio.get_running_loop()
        call = ServerCall(loop)
        background = replace(request, priority=Priority.BACKGROUND, prefill_only=True)

        async def run() -> None:
            try:
                # A slot action is short: it is not stopped for a user turn, which waits.
                ticket = await self._gate.acquire(int(Priority.BACKGROUND), lambda: None)
                try:
                    restored = await action(background)
                finally:
                    self._gate.release(ticket)
            except BaseException as exc:
                call._deliver(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            finally:
                self._calls.discard(call)
            metrics = call_metrics(background, FinishReason.STOP, restored=restored)
            call._deliver(GenerationResult("", "", FinishReason.STOP, metrics))

        self._calls.add(call)
        call.task = loop.create_task(run(), name="kotonia-server-slot")
        return call

    async def _save_slot(self, request: GenerationRequest) -> int:
        slots, ref = self._slot_states, request.state
        if slots is None or ref is None or slots.holds != ref.name or not slots.unsaved:
            return 0
        async with self._http.async_client() as client:
            saved = await slots.save(client, ref.name)
        log.info("saved the server's chat slot as %s (%d tokens)", ref.name, saved)
        return 0

    async def _restore_slot(self, request: GenerationRequest) -> int:
        """Before a chat call (or when a conversation opens): bring back the conversation's
        saved slot when the slot holds something else and the file was saved."""
        slots, ref = self._slot_states, request.state
        if slots is None or ref is None or request.slot is Slot.FOLD:
            return 0
        if slots.holds == ref.name or not slots.known(ref.name):
            return 0
        try:
            async with self._http.async_client() as client:
                restored = await slots.restore(client, ref.name)
        except (BackendUnavailableError, ServerResponseError) as exc:
            log.warning("the saved slot %s was not restored: %s", ref.name, exc)
            return 0
        log.info("restored the server's chat slot %s (%d tokens)", ref.name, restored)
        return restored

    def _slot_used(self, request: GenerationRequest, result: GenerationResult) -> GenerationResult:
        """After a call: what the chat slot holds now, and the restored figure."""
        slots = self._slot_states
        if slots is None:
            return result
        if request.slot is Slot.FOLD and self.info.slots < 2:
            slots.holds = None  # one slot: the fold used it
            return result
        if request.state is None or request.slot is Slot.FOLD:
            return result
        slots.holds, slots.unsaved = request.state.name, True
        restored, slots.pending_restored = slots.pending_restored, 0
        metrics = result.metrics
        result.metrics = metrics.model_copy(update={"restored": min(restored, metrics.reused)})
        return result

    # ---- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop running calls (their streams close) and release the connection pool."""
        if self._closed:
            return
        self._closed = True
        if self._slot_states is not None:
            self._slot_states.save_now()
        for call in list(self._calls):
            call.request_stop("close")
        self._fence.close()
        self._http.close()
