"""One reply being generated, owned by the chat service as an asyncio task.

The task runs the model call and stores its result however the turn ends, whoever is reading:
completed (a whole reply, or one cut by its cap or the window), cancelled (Esc), interrupted
(Ctrl-C in the line-by-line chat, the chat screen closed, the app quitting) or failed (the
model or the store). A partial reply is stored marked as stopped or cut, never dropped.
Callers subscribe to the turn's events (each subscriber gets them all, from the first); a
subscriber that goes away changes nothing for the turn. This is how Textual's workers own their
tasks, and why the TUI and the CLI handle a turn the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from enum import StrEnum

from kotonia_tui.characters import CharacterSetup
from kotonia_tui.chat.events import ReasoningDelta, ReplyDelta, TurnDone, TurnEvent, TurnOutcome
from kotonia_tui.chat.prompting import PreparedTurn
from kotonia_tui.chat.replies import join_continuation, reply_status
from kotonia_tui.domain import (
    Alternative,
    Message,
    MessageStatus,
    Role,
    StoredConversation,
    StoredMessage,
)
from kotonia_tui.engine import (
    Call,
    Engine,
    EngineError,
    GenerationResult,
    StreamInterruptedError,
    TextDelta,
)
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.store import Store, StoreError

log = logging.getLogger(__name__)

STOPPED_BY_THE_USER = "stopped by the user"
NOTHING_WRITTEN = "stopped before the first word"
NO_REPLY = "the model wrote no reply; nothing was stored"


class TurnKind(StrEnum):
    NEW = "new"  # a reply to a new user message
    REGENERATE = "regenerate"  # another version of the last reply
    CONTINUE = "continue"  # the last reply carried on from where it stopped


class Turn:
    """A reply being generated. `async for event in turn` gives its events, `TurnDone` last;
    `await turn.wait()` gives the `TurnDone` alone. The turn runs whether or not anyone reads."""

    def __init__(
        self,
        engine: Engine,
        store: Store,
        conv: StoredConversation,
        setup: CharacterSetup,
        prepared: PreparedTurn,
        *,
        kind: TurnKind,
        user_name: str,
        user_message: StoredMessage | None,
        target: StoredMessage | None = None,
        speaker_key: str | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.conv = conv
        self.setup = setup
        self.prepared = prepared
        self.kind = kind
        self.user_name = user_name
        self.user_message = user_message
        self.target = target  # the reply regenerated or continued
        self.speaker_key = speaker_key  # a group reply's card (stored on the reply)
        self.notices = list(prepared.notices)
        self._stop: tuple[TurnOutcome, str] | None = None  # why it was asked to stop
        self._events: list[TurnEvent] = []
        self._subscribers: set[asyncio.Queue[TurnEvent]] = set()
        # The model call starts now, before anything else queued on the loop (a fold woken by
        # this very turn): the user's turn takes the engine first.
        self._call: Call | None = None
        self._start_error: EngineError | None = None
        try:
            self._call = engine.start(prepared.request)
        except EngineError as exc:
            self._start_error = exc
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"kotonia-turn-{conv.id}"
        )

    # ---- for callers ------------------------------------------------------------------------

    def cancel(self) -> None:
        """The user stops the reply (Esc): what was written is kept, marked as stopped."""
        self._ask_stop(TurnOutcome.CANCELLED, STOPPED_BY_THE_USER)

    def interrupt(self, why: str) -> None:
        """The caller goes away (Ctrl-C, the chat closed, the app quitting): the reply stops
        and what was written is kept, marked as stopped, with `why`."""
        self._ask_stop(TurnOutcome.INTERRUPTED, f"stopped: {why}")

    @property
    def stopping(self) -> bool:
        """It was asked to stop (Esc, or its caller went away) and has not ended yet."""
        return self._stop is not None and self.done is None

    @property
    def call(self) -> Call | None:
        """The model call (None when it could not start)."""
        return self._call

    @property
    def done(self) -> TurnDone | None:
        """How the turn ended; None while it runs."""
        last = self._events[-1] if self._events else None
        return last if isinstance(last, TurnDone) else None

    def stats(self) -> dict[str, object] | None:
        """The figures `kotonia chat --stats` prints for this turn (None while it runs or when
        no model call was made): the model call's, what the memory did on this turn, and the
        message ids it recalled from the archive."""
        done = self.done
        if done is None or done.metrics is None:
            return None
        plan = self.prepared.plan
        return {
            **done.metrics.stats_dict(),
            "forced_cut": plan.forced_cut_through is not None,
            "fold_applied": plan.apply_landed,
            "fold_wait_ms": round(self.prepared.fold_wait_ms, 1),
            "recalled": self.prepared.recall.message_ids,
            **({"speaker": self.setup.display_name} if self.speaker_key is not None else {}),
        }

    async def wait(self) -> TurnDone:
        """The end of the turn. Cancelling the waiter does not stop the turn."""
        return await asyncio.shield(self._task)

    def add_done_callback(self, callback: Callable[[Turn], object]) -> None:
        """Call `callback(turn)` once the turn has ended and its reply is stored."""
        self._task.add_done_callback(lambda _task: callback(self))

    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[TurnEvent]:
        """Every event of the turn, from its first, as long as the caller reads."""
        queue: asyncio.Queue[TurnEvent] = asyncio.Queue()
        for event in self._events:
            queue.put_nowait(event)
        self._subscribers.add(queue)
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, TurnDone):
                    return
        finally:
            self._subscribers.discard(queue)

    # ---- the task ---------------------------------------------------------------------------

    def _ask_stop(self, outcome: TurnOutcome, reason: str) -> None:
        if self._stop is None and not self._task.done():
            self._stop = (outcome, reason)
            if self._call is not None:
                self._call.cancel()

    def _publish(self, event: TurnEvent) -> None:
        self._events.append(event)
        for queue in self._subscribers:
            queue.put_nowait(event)

    async def _run(self) -> TurnDone:
        try:
            done = await self._generate()
        except asyncio.CancelledError:
            # The task itself was cancelled (the event loop is closing): the reply stops and
            # what it holds is still stored; the turn ends here instead of vanishing.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self._ask_stop(TurnOutcome.INTERRUPTED, "stopped: the program was closing")
            done = await self._after_cancel()
        self._publish(done)
        return done

    async def _generate(self) -> TurnDone:
        call = self._call
        if call is None:
            error = str(self._start_error or "the model call did not start")
            return TurnDone(None, None, error, TurnOutcome.FAILED)
        try:
            async for event in call:
                if isinstance(event, TextDelta):
                    self._publish(ReplyDelta(event.text))
                elif isinstance(event, ReasoningDelta):
                    self._publish(event)
                elif isinstance(event, GenerationResult):
                    return self._store(event)
        except StreamInterruptedError as exc:
            # The stream broke part way: keep what arrived, marked, and say why.
            log.warning("turn interrupted: %s", exc)
            partial = exc.partial
            if isinstance(partial, GenerationResult) and partial.text:
                return self._store(partial, error=str(exc))
            return TurnDone(None, None, str(exc), TurnOutcome.FAILED)
        except EngineError as exc:
            # The user's message is already stored; the turn fails visibly and nothing is lost.
            log.warning("turn failed: %s", exc)
            return TurnDone(None, None, str(exc), TurnOutcome.FAILED)
        except StoreError as exc:
            # The reply could not be written (a full disk, a file held too long by another
            # instance): the turn ends with the reason, like a failed model call.
            log.warning("reply not stored: %s", exc)
            error = f"the reply could not be stored: {exc}"
            return TurnDone(None, None, error, TurnOutcome.FAILED)
        return TurnDone(None, None, "the model call ended without a result", TurnOutcome.FAILED)

    async def _after_cancel(self) -> TurnDone:
        """The result of a call stopped by the task's cancellation, stored."""
        if self._call is None:
            return TurnDone(None, None, NOTHING_WRITTEN, TurnOutcome.INTERRUPTED)
        try:
            return self._store(await self._call.result())
        except (EngineError, StoreError) as exc:
            log.warning("an interrupted reply was not stored: %s", exc)
            return TurnDone(None, None, str(exc), TurnOutcome.FAILED)

    # ---- storing ----------------------------------------------------------------------------

    def _store(self, result: GenerationResult, *, error: str | None = None) -> TurnDone:
        """Store the reply however the call ended; the `TurnDone` says how."""
        store = self.store
        outcome = TurnOutcome.COMPLETED
        cap, n_ctx = self.prepared.request.max_tokens, self.engine.n_ctx
        status, reason = reply_status(result, cap, n_ctx)
        if error is not None:
            status, reason = MessageStatus.ERROR, f"cut by an error: {error}"
            outcome = TurnOutcome.FAILED
        elif status is MessageStatus.CANCELLED:
            outcome, reason = self._stop or (TurnOutcome.CANCELLED, STOPPED_BY_THE_USER)
        if not result.text and status is MessageStatus.CANCELLED:
            # Nothing new: a continued or regenerated reply stays as it was, cut reason and all.
            return TurnDone(None, result.metrics, NOTHING_WRITTEN, outcome)
        if (
            not result.text
            and status is MessageStatus.COMPLETE
            and self.kind is not TurnKind.CONTINUE
        ):
            # The model ended its turn at once (a thinking model may write only an empty
            # thinking block): an empty line would stand in the story as the character's.
            return TurnDone(None, result.metrics, NO_REPLY, outcome)
        speaker, listener = self.setup.display_name, self.user_name
        reply: StoredMessage
        if self.kind is TurnKind.CONTINUE and self.target is not None:
            joined = join_continuation(self.target.text, result.text)
            reply = store.finish_message(
                self.target.id,
                joined,
                parse_segments(joined, speaker=speaker, listener=listener),
                status,
                reason,
                result.reasoning or self.target.reasoning,
            )
        elif self.kind is TurnKind.REGENERATE and self.target is not None:
            alternative = Alternative(
                text=result.text,
                segments=parse_segments(result.text, speaker=speaker, listener=listener),
                status=status,
                status_reason=reason,
                reasoning=result.reasoning or None,
            )
            store.add_alternative(self.target.id, alternative, choose=True)
            reply = store.get_message(self.target.id)
        else:
            reply = store.add_message(
                Message(
                    conversation_id=self.conv.id,
                    role=Role.CHARACTER,
                    speaker=speaker,
                    text=result.text,
                    segments=parse_segments(result.text, speaker=speaker, listener=listener),
                    status=status,
                    status_reason=reason,
                    reasoning=result.reasoning or None,
                    character_key=self.speaker_key,
                )
            )
        store.add_turn_metrics(self.conv.id, reply.id, result.metrics)
        return TurnDone(reply, result.metrics, error, outcome)
