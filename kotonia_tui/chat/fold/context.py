"""What every fold job works with (the store, the engine, the budgets), and the one place a
chronicler request becomes a model call.

The fold worker runs jobs (chat/fold/worker.py); chapters (chat/fold/chapters.py) and the
synopsis (chat/fold/synopsis.py) are written through this one context, so a job's kind decides
what it writes, never how the model is called or how a failure is said.

The fold's chapters and synopses and the evaluation's rolling summary all go through
`chronicle`: the chronicler's prompt on the fold slot at background priority (a waiting user
turn goes first), the output cap fitted to what the fold context has left after the prompt (a
ceiling, so nothing is cut, never a target), and the reply read by the chronicler, asked once
more when it says so and a call is left (a refusal, a malformed answer, a readback miss). A
chapter is answered in a JSON schema sized to the output cap (memory/chapter_schema.py), so it
ends before the cap whatever the model writes. The chronicler samples at a low temperature with
no repeat penalty: a record repeats names and numbers on purpose.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from kotonia_tui.chat.fold.outcomes import VERDICT_FAILURES, FoldFailed, NoRoomFailed
from kotonia_tui.domain import FoldJob, FoldKind, FoldStatus, StoredChapter
from kotonia_tui.engine import Engine, FinishReason, GenerationRequest, Priority, Slot
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chapter_schema import NoRoomForChapterError, tokens_per_char
from kotonia_tui.memory.chronicler import (
    CHRONICLER,
    LENGTH_TOLERANCE,
    Cast,
    ChronicleReply,
    ChronicleRequest,
    ChroniclerPrompt,
    Verdict,
    chronicler_prompt,
    read_reply,
    render_source,
)
from kotonia_tui.memory.extract import Passage, extract_passages
from kotonia_tui.memory.policy import major_gc_split
from kotonia_tui.store import Store

log = logging.getLogger(__name__)

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

    def failure(self) -> FoldFailed:
        """The failure an unusable reply is (for a usable one, a bug: it is not a failure)."""
        why, then = self.problem_parts()
        return FoldFailed(VERDICT_FAILURES[self.reply.verdict], why, then)

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


# The output cap holds at least this many times a synopsis's target: the +20% a draft may run
# over and a little more, so a draft the cap stops is one far too long (and asked again).
SYNOPSIS_CAP_SHARE = 1.25


QUOTE_FITS = 3  # tries at a quote's character limit before its size is taken as it is


@dataclass
class FoldContext:
    store: Store
    engine: Engine
    # A conversation's budgets, fitted to its setup (counted without holding the event loop).
    budgets_for: Callable[[int], Awaitable[Budgets]]
    cast_of: Callable[[int], Cast]  # who a conversation's story is between
    max_output: int  # the chronicler's output ceiling (so nothing is cut; never a target)

    async def ask(
        self, request: ChronicleRequest, *, cut_ok: bool = False, calls: int = 2
    ) -> Chronicled:
        """The chronicler's usable reply in at most `calls` model calls (a refusal, a hollow
        answer or a readback miss is asked once more when there is a call left), or FoldFailed.
        With `cut_ok`, a reply the output cap stopped is returned too (a synopsis draft to
        shorten; never stored)."""
        try:
            done = await chronicle(self.engine, request, max_output=self.max_output, calls=calls)
        except NoRoomError as exc:
            raise NoRoomFailed(str(exc)) from exc
        if cut_ok and done.reply.verdict is Verdict.CUT:
            return done
        if not done.reply.ok:
            if done.reply.verdict is Verdict.REFUSED:
                log.warning("the chronicler refused: %r", done.reply.text[:120])
            raise done.failure()
        return done

    async def count(self, texts: Sequence[str]) -> list[int]:
        return await self.engine.count_tokens_many(list(texts))

    async def quote(self, passages: Sequence[Passage], target: int) -> tuple[str, int]:
        """The passages quoted (memory/extract.py) in about `target` tokens, and its size: what
        a fold stores when the chronicler's answer cannot be stored."""
        # About four characters a token in English; a denser script is fitted below.
        limit = target * 4
        text, tokens = "", 0
        for _try in range(QUOTE_FITS):
            text = extract_passages(passages, limit)
            (tokens,) = await self.count([text])
            if tokens <= target * (1 + LENGTH_TOLERANCE):
                break
            limit = max(1, int(limit * target / tokens * 0.95))
        return text, tokens

    def synopsis_target(self, budgets: Budgets) -> int:
        """The length a synopsis is asked for: the budgets' target, or less when the output
        cap could not hold a draft over it. A draft is stored within +-20% of its target, and
        a prose draft runs past it: a target near the cap has every draft cut
        (docs/decisions.md D-10)."""
        return max(1, min(budgets.synopsis_target, int(self.max_output / SYNOPSIS_CAP_SHARE)))

    def input_room(self, instructions: int) -> int:
        """Tokens of source one chronicler call can read beside its instructions, keeping room
        for the answer in the fold context."""
        fold_ctx = self.engine.info.fold_n_ctx
        reserve = min(self.max_output, max(4 * MIN_SUMMARY_ROOM, fold_ctx // 4))
        return max(1, fold_ctx - instructions - reserve - 64)

    async def major_fold_count(self, conv_id: int, chapters: Sequence[StoredChapter]) -> int:
        """How many of the oldest live `chapters` a major fold takes now (0: not yet)."""
        budgets = await self.budgets_for(conv_id)
        return major_gc_split(
            [c.tokens for c in chapters],
            budgets.major_gc,
            budgets.major_gc_min_chapters,
            budgets.chapters_cap,
        )

    async def queue_major_fold(self, conv_id: int) -> None:
        """Queue a major fold when the synopsis must be rebuilt (a chapter it holds was
        refolded) or the live chapters are due for one; not when one is already queued."""
        store = self.store
        current = store.current_synopsis(conv_id)
        due = await self.major_fold_count(conv_id, store.chapters(conv_id))
        if not due and not (current is not None and current.stale):
            return
        open_jobs = store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))
        if any(j.kind is FoldKind.MAJOR_GC for j in open_jobs):
            return
        store.enqueue_fold(FoldJob(conversation_id=conv_id, kind=FoldKind.MAJOR_GC))
