"""What every fold job works with: the store, the engine, the budgets, and the chronicler.

The fold worker runs jobs (chat/fold/worker.py); chapters (chat/fold/chapters.py) and the
synopsis (chat/fold/synopsis.py) are written through this one context, so a job's kind decides
what it writes, never how the model is called or how a failure is said.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from kotonia_tui.chat.fold.chronicle import MIN_SUMMARY_ROOM, Chronicled, NoRoomError, chronicle
from kotonia_tui.chat.fold.outcomes import NoRoomFailed, failure_of
from kotonia_tui.domain import FoldJob, FoldKind, FoldStatus, StoredChapter
from kotonia_tui.engine import Engine
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chronicler import LENGTH_TOLERANCE, Cast, ChronicleRequest, Verdict
from kotonia_tui.memory.extract import Passage, extract_passages
from kotonia_tui.memory.policy import major_gc_split
from kotonia_tui.store import Store

log = logging.getLogger(__name__)

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
            raise failure_of(done)
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
