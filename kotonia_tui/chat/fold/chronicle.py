"""The chronicler's call: the one place a chronicler request becomes a model call.

A fold job (chat/fold/chapters.py, chat/fold/synopsis.py) builds a `ChronicleRequest`; `ask`
turns it into the chronicler's prompt (memory/chronicler.py, a leaf: prompt in, parsed answer
out), makes the call on the fold slot at background priority (a waiting user turn goes first)
with the output cap fitted to what the fold context has left after the prompt (a ceiling, so
nothing is cut, never a target), and reads the reply, asking once more when the reply says so
and a call is left (a refusal, a malformed answer, a readback miss). What is unusable comes
back as `FoldFailed` with its reason (chat/fold/outcomes.py); what follows from it is the job's.
The evaluation's rolling summary goes through `chronicle` too.

A chapter is answered in a JSON schema sized to the output cap (memory/chapter_schema.py), so it
ends before the cap whatever the model writes. The chronicler samples at a low temperature with
no repeat penalty: a record repeats names and numbers on purpose.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

from kotonia_tui.chat.fold.outcomes import (
    FoldFailed,
    NoRoomFailed,
    reply_failure,
    reply_problem,
)
from kotonia_tui.engine import Engine, FinishReason, GenerationRequest, Priority, Slot
from kotonia_tui.memory.chapter_schema import NoRoomForChapterError, tokens_per_char
from kotonia_tui.memory.chronicler import (
    CHRONICLER,
    MIN_SUMMARY_ROOM,
    ChronicleReply,
    ChronicleRequest,
    Verdict,
    chronicler_prompt,
    read_reply,
)

log = logging.getLogger(__name__)

CHRONICLER_TEMPERATURE = 0.2


class NoRoomError(Exception):
    """The source and the instructions leave (almost) no room in the fold context to answer."""


@dataclass(frozen=True)
class Chronicled:
    """The last reply of a request, how many calls it took, and what the last one cost."""

    reply: ChronicleReply
    calls: int
    cap: int  # the output cap the calls had
    gen_ms: float  # the last call's time

    @property
    def problem(self) -> str:
        """Why nothing can be stored, in one line ("" when the reply is usable)."""
        why, then = reply_problem(self.reply, self.calls, self.cap)
        return f"{why}; {then}" if then else why

    def failure(self) -> FoldFailed:
        """The failure an unusable reply is (for a usable one, a bug: it is not a failure)."""
        return reply_failure(self.reply, self.calls, self.cap)


async def chronicle(
    engine: Engine, request: ChronicleRequest, *, max_output: int, calls: int = 2
) -> Chronicled:
    """Ask the chronicler, and again as its reply asks, in at most `calls` model calls; the
    last reply may still be unusable (`Chronicled.problem` says why). Of usable replies the
    one with the fewest readback misses is kept."""
    made = 0
    best: Chronicled | None = None
    fold_ctx = engine.info.fold_n_ctx
    while True:
        prompt = chronicler_prompt(request, engine.profile)
        generation = GenerationRequest(
            messages=prompt.messages,
            max_tokens=max_output,
            slot=Slot.FOLD,
            priority=Priority.BACKGROUND,
            reply_name=CHRONICLER,
            user_name="Story",
            extra_stops=prompt.stops,
            prefill=prompt.lead,
            temperature=CHRONICLER_TEMPERATURE,
            repeat_penalty=1.0,
        )
        # Counting the whole prompt is a blocking request on a server backend: off the loop.
        room = fold_ctx - await asyncio.to_thread(engine.prompt_cells, generation)
        if room < MIN_SUMMARY_ROOM:
            raise NoRoomError(
                f"the {request.kind.value}'s source and instructions leave {room} tokens of "
                f"the {fold_ctx}-token fold context for the summary"
            )
        if not request.structured:
            generation = replace(generation, max_tokens=min(max_output, room))
        else:
            # The schema is sized to the output budget at twice the source's own tokens per
            # character; the call may use all the room the fold context has left, so only an
            # answer far beyond what that schema calls for could be cut (and a cut answer is
            # never stored).
            (source_tokens,) = await engine.count_tokens_many([prompt.source])
            per_char = tokens_per_char(source_tokens, len(prompt.source))
            try:
                schema = request.schema(min(max_output, room), per_char)
            except NoRoomForChapterError as exc:
                raise NoRoomError(
                    f"the {request.kind.value} cannot fit the fold context: {exc}"
                ) from exc
            generation = replace(generation, max_tokens=room, json_schema=schema)
        started = time.monotonic()
        result = await engine.generate(generation)
        elapsed_ms = (time.monotonic() - started) * 1000
        made += 1
        cut = result.finish_reason is FinishReason.LENGTH
        reply = read_reply(request, prompt, result.text, cut=cut, schema=generation.json_schema)
        done = Chronicled(reply, made, generation.max_tokens, elapsed_ms)
        if reply.ok and (best is None or len(reply.misses) < len(best.reply.misses)):
            best = done
        if reply.retry is None or made >= calls:
            return replace(best, calls=made) if best is not None else done
        request = reply.retry


async def ask(
    engine: Engine,
    request: ChronicleRequest,
    *,
    max_output: int,
    cut_ok: bool = False,
    calls: int = 2,
) -> Chronicled:
    """The chronicler's usable reply in at most `calls` model calls (a refusal, a hollow
    answer or a readback miss is asked once more when there is a call left), or FoldFailed.
    With `cut_ok`, a reply the output cap stopped is returned too (a synopsis draft to
    shorten; never stored)."""
    try:
        done = await chronicle(engine, request, max_output=max_output, calls=calls)
    except NoRoomError as exc:
        raise NoRoomFailed(str(exc)) from exc
    if cut_ok and done.reply.verdict is Verdict.CUT:
        return done
    if not done.reply.ok:
        if done.reply.verdict is Verdict.REFUSED:
            log.warning("the chronicler refused: %r", done.reply.text[:120])
        raise reply_failure(done.reply, done.calls, done.cap)
    return done
