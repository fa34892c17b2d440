"""The one place a chronicler request becomes a model call.

The fold worker's chapters and synopses and the evaluation's rolling summary all go through
`chronicle`: the chronicler's prompt on the fold slot at background priority (a waiting user
turn goes first), the output cap fitted to what the fold context has left after the prompt (a
ceiling, so nothing is cut, never a target), and the reply read by the chronicler, asked once
more when it says so (a refusal, a malformed answer, a readback miss).

A chapter is answered in a JSON schema sized to the output cap (memory/chapter_schema.py), so
it ends before the cap whatever the model writes. The chronicler samples at a low temperature
with no repeat penalty: a record repeats names and numbers on purpose.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from kotonia_tui.engine import Engine, FinishReason, GenerationRequest, Priority, Slot
from kotonia_tui.memory.chapter_schema import NoRoomForChapterError, tokens_per_char
from kotonia_tui.memory.chronicler import (
    CHRONICLER,
    ChronicleReply,
    ChronicleRequest,
    ChroniclerPrompt,
    Verdict,
    chronicler_prompt,
    read_reply,
    render_source,
)

MIN_SUMMARY_ROOM = 48  # tokens; less than this cannot hold a useful chapter
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
        why, then = self.problem_parts()
        return f"{why}; {then}" if then else why

    def problem_parts(self) -> tuple[str, str]:
        """What was wrong with the reply, and what follows from it ("" when nothing)."""
        what = self.reply.request.kind.value
        match self.reply.verdict:
            case Verdict.OK:
                return "", ""
            case Verdict.EMPTY:
                return f"the chronicler wrote an empty {what}", ""
            case Verdict.CUT:
                return (
                    f"the {what} hit the output cap ({self.cap} tokens) and was cut",
                    "a cut summary is never stored",
                )
            case Verdict.REFUSED:
                times = "twice" if self.calls == 2 else f"{self.calls} times"
                return f"the chronicler refused {times}", f"the {what} was not stored"
            case Verdict.HOLLOW:
                messages = self.reply.request.messages
                return (
                    f"the {what} holds nothing from messages #{messages[0].id}-#{messages[-1].id}",
                    "it was not stored",
                )
            case Verdict.MALFORMED:
                start = self.reply.text[:80]
                return f"the chronicler's {what} did not follow its JSON schema: {start!r}", ""


async def chronicle(
    engine: Engine, request: ChronicleRequest, *, max_output: int, calls: int = 2
) -> Chronicled:
    """Ask the chronicler, and again as its reply asks, in at most `calls` model calls; the
    last reply may still be unusable (`Chronicled.problem` says why). Of usable replies the
    one with the fewest readback misses is kept."""
    made = 0
    best: Chronicled | None = None
    while True:
        prompt = chronicler_prompt(request, engine.profile)
        generation = await _generation(engine, request, prompt, max_output)
        started = time.monotonic()
        result = await engine.generate(generation)
        elapsed_ms = (time.monotonic() - started) * 1000
        made += 1
        cut = result.finish_reason is FinishReason.LENGTH
        reply = read_reply(request, prompt, result.text, cut=cut)
        done = Chronicled(reply, made, generation.max_tokens, elapsed_ms)
        if reply.ok and (best is None or len(reply.misses) < len(best.reply.misses)):
            best = done
        if reply.retry is None or made >= calls:
            return replace(best, calls=made) if best is not None else done
        request = reply.retry


async def _generation(
    engine: Engine, request: ChronicleRequest, prompt: ChroniclerPrompt, max_output: int
) -> GenerationRequest:
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
    fold_ctx = engine.info.fold_n_ctx
    # Counting the whole prompt is a blocking request on a server backend: off the loop.
    room = fold_ctx - await asyncio.to_thread(engine.prompt_cells, generation)
    if room < MIN_SUMMARY_ROOM:
        raise NoRoomError(
            f"the {request.kind.value}'s source and instructions leave {room} tokens of the "
            f"{fold_ctx}-token fold context for the summary"
        )
    if not request.structured:
        return replace(generation, max_tokens=min(max_output, room))
    # The schema is sized to the output budget at twice the source's own tokens per character;
    # the call may use all the room the fold context has left, so only an answer far beyond
    # what that schema calls for could be cut (and a cut answer is never stored).
    text = render_source(request.messages, char=request.cast.char, user=request.cast.user)
    (source_tokens,) = await engine.count_tokens_many([text])
    try:
        schema = request.schema(min(max_output, room), tokens_per_char(source_tokens, len(text)))
    except NoRoomForChapterError as exc:
        raise NoRoomError(f"the {request.kind.value} cannot fit the fold context: {exc}") from exc
    return replace(generation, max_tokens=room, json_schema=schema)
