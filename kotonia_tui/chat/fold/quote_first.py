"""Quote first, summarise later: a turn never waits for the chronicler to keep its messages.

A turn at the ceiling used to wait for the chapter that covers the messages it would cut, for
minutes on a small machine (docs/decisions.md D-21). Here those messages are carried at once,
by code only: each chapter job the turn needs is quoted now (memory/extract.py, the same
extract a fold stores when the chronicler's answer is unusable), piece by piece as the
chronicler would read it, and stored as stale chapters with a refold job each. The worker's
refolds then replace them with the chronicler's chapters in the background
(chat/fold/chapters.py, as after an edit), and the turn after one lands applies it like any
fold.

When the quoted chapters are more than the memory can hold beside the window (a long import
at a small window), the oldest are folded the same way into a quoted synopsis, stored stale:
the next major fold rebuilds it with the chronicler from the chapters it holds. What is still
left out of the prompt is reached by recall (chat/recall.py), which needs no model either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from kotonia_tui.chat.fold.chapters import Chronicling, extracted_piece, pieces_of
from kotonia_tui.chat.fold.context import FoldContext
from kotonia_tui.chat.fold.synopsis import queue_major_fold
from kotonia_tui.domain import (
    QUOTED_FIRST_LEAD,
    FoldJob,
    FoldKind,
    FoldStatus,
    NewChapter,
    StoredChapter,
    StoredFoldJob,
    Synopsis,
    SynopsisOrigin,
)
from kotonia_tui.memory.assembly import in_prompt
from kotonia_tui.memory.extract import quote_passages, synopsis_passages
from kotonia_tui.store import StoreError

log = logging.getLogger(__name__)

QUOTED_AT_ONCE = "quoted at once for a turn at the ceiling; the chronicler's chapter follows"


@dataclass(frozen=True)
class Quoted:
    """What `quote_chapter_jobs` did: the chapters it stored, the jobs it made done (quoted, or
    finished with nothing to quote), and the jobs the worker landed meanwhile, left as they
    landed (never to be stopped: the worker may still be queueing what follows them)."""

    chapters: list[StoredChapter] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    landed: list[int] = field(default_factory=list)


async def quote_chapter_jobs(ctx: FoldContext, jobs: Sequence[StoredFoldJob]) -> Quoted:
    """Store each chapter job's range quoted, as stale chapters (one per piece a chronicler
    call would read), with a refold job per chapter that writes the chronicler's in its place;
    each job is done with its chapters and refolds, in one transaction. A job the worker landed
    meanwhile (the quote awaits counts) is left as it landed, and the next is quoted."""
    quoted = Quoted()
    for job in sorted(jobs, key=lambda j: j.first_message_id or 0):
        if job.kind is not FoldKind.CHAPTER:
            continue
        conv_id = job.conversation_id
        work = Chronicling.of(ctx, conv_id, ctx.store.ledger(conv_id))
        pieces = await pieces_of(ctx, job, work)
        pieces = [p for p in pieces if any(in_prompt(m.role) for m in p.messages)]
        if not pieces:
            _settle(ctx, job, quoted, partial(_finished, ctx, job))
            continue
        chapters: list[NewChapter] = []
        for piece in pieces:
            extract = await extracted_piece(work, piece, "", note=QUOTED_AT_ONCE)
            stale = extract.chapter.model_copy(update={"stale": True})
            chapters.append(NewChapter(stale, extract.entries, extract.endings))
        refolds = [
            FoldJob(
                conversation_id=conv_id,
                kind=FoldKind.REFOLD,
                first_message_id=new.chapter.first_message_id,
                last_message_id=new.chapter.last_message_id,
            )
            for new in chapters
        ]
        # The refolds with the quotes, in one transaction: when the worker landed this job's
        # chapter meanwhile, neither is stored. A refold queued alone would find nothing stale
        # and fold the range a second time.
        stored = _settle(
            ctx, job, quoted, partial(ctx.store.store_refold, [], chapters, job.id, then=refolds)
        )
        if not stored:
            continue
        log.info(
            "conversation %s: messages #%s-#%s quoted at once in %s chapters",
            conv_id,
            pieces[0].messages[0].id,
            pieces[-1].messages[-1].id,
            len(chapters),
        )
    return quoted


def _settle(
    ctx: FoldContext,
    job: StoredFoldJob,
    quoted: Quoted,
    store: Callable[[], Sequence[StoredChapter]],
) -> bool:
    """Make `job` done with `store` (its one transaction, giving the chapters it stored), noted
    in `quoted`: True when it was; False when the worker landed it first (noted as landed)."""
    try:
        quoted.chapters.extend(store())
    except StoreError:
        if not _landed_first(ctx, job):
            raise
        quoted.landed.append(job.id)
        return False
    quoted.done.append(job.id)
    return True


def _finished(ctx: FoldContext, job: StoredFoldJob) -> list[StoredChapter]:
    """`job` made done with no chapter (its range holds nothing the prompt carries)."""
    ctx.store.finish_fold(job.id)
    return []


def _landed_first(ctx: FoldContext, job: StoredFoldJob) -> bool:
    """After the store refused to make `job` done: whether the worker (or another instance)
    landed it first (then nothing of the quote was stored; any other refusal is an error)."""
    if ctx.store.get_fold(job.id).status is not FoldStatus.DONE:
        return False
    log.info("conversation %s: fold job %s landed before its quote", job.conversation_id, job.id)
    return True


async def quote_major_fold(ctx: FoldContext, conv_id: int) -> bool:
    """Fold every live chapter but the newest into a quoted synopsis now (stored stale: the
    next major fold rebuilds it with the chronicler). It is asked for when the memory does not
    fit beside the window, so it does not wait for the chapters a major fold would want at
    once. False when there is nothing to fold (one chapter or none)."""
    store = ctx.store
    chapters = store.chapters(conv_id)
    count = len(chapters) - 1
    if count < 1:
        return False
    older = chapters[:count]
    current = store.current_synopsis(conv_id)
    budgets = await ctx.budgets_for(conv_id)
    target = ctx.synopsis_target(budgets)
    (lead,) = await ctx.engine.count_tokens_many([QUOTED_FIRST_LEAD])
    quoted, _tokens = await quote_passages(
        # A quoted current synopsis is quoted by its own lines, under their ranges and times.
        synopsis_passages(
            current.text if current else None,
            older,
            base_quoted=current is not None and current.quoted,
        ),
        max(1, target - lead),
        ctx.engine.count_tokens_many,
    )
    text = f"{QUOTED_FIRST_LEAD}\n{quoted}"
    (tokens,) = await ctx.engine.count_tokens_many([text])
    through = max(older[-1].last_message_id, current.through_message_id if current else 0)
    stored = store.add_synopsis(
        Synopsis(
            conversation_id=conv_id,
            version=0,  # numbered by the store
            text=text,
            through_message_id=through,
            tokens=tokens,
            target_tokens=target,
            stale=True,
            origin=SynopsisOrigin.QUOTED,
        ),
        [c.id for c in older],
    )
    await queue_major_fold(ctx, conv_id)  # the rebuild with the chronicler
    log.info(
        "conversation %s: synopsis version %s quoted at once from %s chapters (%s tokens)",
        conv_id,
        stored.version,
        count,
        tokens,
    )
    return True
