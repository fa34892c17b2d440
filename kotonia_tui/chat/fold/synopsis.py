"""Major folds: the older chapters and the synopsis become a new synopsis of a set length.

A major fold takes the oldest live chapters (at least `major_gc_min_chapters` at once) with the
current synopsis and writes the next version. Its length is held in code: the synopsis is asked
for in about its target (a share of the window, said in words or characters of the story's
language), measured in tokens, and asked again with its draft when it is more than 20% off, up
to SYNOPSIS_CALLS calls. When none is within 20%, the longest short draft is stored, however
short (it keeps the memory within its plan), when it keeps THIN_SHARE of what a quote as long as
its target keeps; else the quote takes its room (D-44). A draft that only says the old
synopsis again while its chapters say more is never stored: it would fold the chapters into
nothing (docs/decisions.md D-9). When no draft can be used (every one too long, as a small
model loops to its cap, only the old synopsis again, or refused), the synopsis quotes the old
synopsis and the chapters instead (memory/extract.py), in its target length, under a line that
says so: asking a greedy chronicler again writes the same drafts, and a memory that never folds
grows past its ceiling and cuts the recent messages.

Before a draft is judged, its sentences that rest on nothing it folds (the old synopsis and the
chapters hold too few of their words: memory/grounding.py `ground_prose`) are left out, as a
chapter's items are (D-5): a small chronicler writes about itself beside a line of the story
("So far in the story, I have not found a single word of this story."). The version keeps what
was left out (`Synopsis.dropped`), which the inspector shows (docs/decisions.md D-44).

When a chapter the synopsis took in is refolded (an edit), the versions that folded the old text
are stale; the next major fold rebuilds the synopsis from the newest version that never held it,
folding the current chapters after it again, in as few calls as the fold context allows. The
versions in between are kept (not current) as bases for a later rebuild; the current version's
`through_message_id` never goes back. A chapter retired since (its messages were deleted) makes
the versions that folded it stale too, and the rebuild folds only the current chapters: when
none is left after the base, the base's text is the new version (empty with no base: every
chapter it held was retired), with no model call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kotonia_tui.chat.fold.chronicle import Chronicled, ask
from kotonia_tui.chat.fold.context import FoldContext
from kotonia_tui.chat.fold.outcomes import (
    FoldFailed,
    FoldFailure,
    Step,
    Then,
    reply_failure,
    then,
)
from kotonia_tui.domain import (
    QUOTED_SYNOPSIS_LEAD,
    Chapter,
    FoldJob,
    FoldKind,
    FoldStatus,
    StoredChapter,
    StoredFoldJob,
    StoredSynopsis,
    Synopsis,
    SynopsisOrigin,
)
from kotonia_tui.memory.chronicler import (
    Cast,
    ChronicleKind,
    ChronicleRequest,
    LengthFit,
    Verdict,
    chapter_heading,
    chronicler_instructions,
    length_fit,
    source_room,
)
from kotonia_tui.memory.extract import (
    THIN_SHARE,
    Passage,
    kept_share,
    quote_passages,
    synopsis_passages,
)
from kotonia_tui.memory.grounding import ground_prose, says_again
from kotonia_tui.memory.policy import major_gc_split

log = logging.getLogger(__name__)

SYNOPSIS_CALLS = 3  # model calls per attempt: a draft far from its length is asked again twice
REBUILD_READ_LIMIT = 200  # chapters read per round of a rebuild


async def fold_synopsis_job(ctx: FoldContext, job: StoredFoldJob) -> str:
    """Run a major fold (or a rebuild); returns what it stored, in words."""
    conv_id = job.conversation_id
    store = ctx.store
    cast = ctx.cast_of(conv_id)
    budgets = await ctx.budgets_for(conv_id)
    current = store.current_synopsis(conv_id)
    if current is not None and current.stale:
        return await _rebuild(ctx, job, cast, ctx.synopsis_target(budgets), current)
    chapters = store.chapters(conv_id)
    count = await major_fold_count(ctx, conv_id, chapters)
    if count == 0:
        store.finish_fold(job.id)
        return "chapters no longer need folding"
    older = chapters[:count]
    through = max(older[-1].last_message_id, current.through_message_id if current else 0)
    stored, why = await _fold(
        ctx,
        job,
        cast,
        ctx.synopsis_target(budgets),
        # An empty version (every chapter it held retired) is no synopsis to fold into.
        current.text if current and current.text else None,
        current is not None and current.quoted,
        older,
        through,
        [c.id for c in older],
    )
    await queue_major_fold(ctx, conv_id)
    how = f", quoted: {why}" if why else ""
    return (
        f"synopsis version {stored.version} from {count} chapters "
        f"({stored.tokens} tokens, target {stored.target_tokens}{how})"
    )


async def _rebuild(
    ctx: FoldContext, job: StoredFoldJob, cast: Cast, target: int, current: StoredSynopsis
) -> str:
    conv_id = job.conversation_id
    store = ctx.store
    base = store.rebuild_base(conv_id, current.through_message_id + 1)
    after = base.through_message_id if base is not None else 0
    text = base.text if base is not None and base.text else None
    quoted = base is not None and base.quoted
    folded = 0
    while True:
        chapters = store.synopsis_chapters_after(
            conv_id, after, current.through_message_id, REBUILD_READ_LIMIT
        )
        more = len(chapters) == REBUILD_READ_LIMIT
        if not chapters:
            # Nothing (more) to fold: the chapters after the base were retired (their messages
            # deleted), or the round before read exactly the limit. What was folded so far is
            # the synopsis, through where the current one reached (it never goes back).
            stored = await _kept_as_is(ctx, job, target, text, quoted, current)
            if folded:
                since = f"version {base.version}" if base is not None else "the first chapter"
                words = f"rebuilt from {since} and {folded} current chapters"
            elif base is not None:
                words = f"rebuilt from version {base.version} alone: the rest was retired"
            else:
                words = "empty: every chapter it held was retired"
            size = f"{stored.tokens} tokens, target {target}"
            return f"synopsis version {stored.version} {words} ({size})"
        # Only the last round stores the current version (and finishes the job).
        final_through = current.through_message_id if not more else None
        stored, _why = await _fold(
            ctx, job, cast, target, text, quoted, chapters, final_through, []
        )
        folded += len(chapters)
        if not more:
            since = f"version {base.version}" if base is not None else "the first chapter"
            return (
                f"synopsis version {stored.version} rebuilt from {since} and {folded} current "
                f"chapters ({stored.tokens} tokens, target {target})"
            )
        after, text, quoted = stored.through_message_id, stored.text, stored.quoted


async def _kept_as_is(
    ctx: FoldContext,
    job: StoredFoldJob,
    target: int,
    text: str | None,
    quoted: bool,
    current: StoredSynopsis,
) -> StoredSynopsis:
    """`text` (a rebuild's so far; None: nothing) stored as the current version through
    `current`'s last message, the job done: no chapter is left to fold into it."""
    tokens = (await ctx.engine.count_tokens_many([text]))[0] if text else 0
    return ctx.store.add_synopsis(
        Synopsis(
            conversation_id=job.conversation_id,
            version=0,  # numbered by the store
            text=text or "",
            through_message_id=current.through_message_id,
            tokens=tokens,
            current=True,
            target_tokens=target,
            origin=SynopsisOrigin.QUOTED if quoted else SynopsisOrigin.SUMMARY,
        ),
        [],
        job.id,
    )


async def _fold(
    ctx: FoldContext,
    job: StoredFoldJob,
    cast: Cast,
    target: int,
    base: str | None,
    base_quoted: bool,
    chapters: Sequence[StoredChapter],
    final_through: int | None,
    folded_ids: Sequence[int],
) -> tuple[StoredSynopsis, str]:
    """Fold `chapters` into `base`, in as few calls as the fold context allows. The last call's
    synopsis is stored current (through `final_through`, the chapters `folded_ids` marked
    in it, the job done); the ones before it as versions kept for audit and later rebuilds.
    With `final_through` None, every version is kept non-current (a rebuild goes on). Returns
    the last version stored, and why it is quoted ("" for a summary). `base_quoted`: `base`
    is a quoted synopsis."""
    text, quoted = base, base_quoted
    stored: StoredSynopsis | None = None
    batches = await _batches(ctx, cast, base, chapters)
    for index, batch in enumerate(batches):
        last = index == len(batches) - 1 and final_through is not None
        request = ChronicleRequest.synopsis(text, batch, cast, target_tokens=target)
        draft = await _write(ctx, request, text, quoted, batch, cast)
        synopsis = Synopsis(
            conversation_id=job.conversation_id,
            version=0,  # numbered by the store
            text=draft.text,
            through_message_id=final_through
            if last and final_through
            else batch[-1].last_message_id,
            model="" if draft.quoted else ctx.engine.info.model_name,
            gen_ms=draft.gen_ms,
            tokens=draft.tokens,
            current=last,
            target_tokens=target,
            origin=SynopsisOrigin.QUOTED if draft.quoted else SynopsisOrigin.SUMMARY,
            dropped=draft.dropped,
        )
        if last:
            stored = ctx.store.add_synopsis(synopsis, folded_ids, job.id)
        else:
            stored = ctx.store.add_synopsis(synopsis, [])
        text, quoted = draft.text, draft.quoted
    assert stored is not None
    return stored, draft.why


async def _batches(
    ctx: FoldContext, cast: Cast, base: str | None, chapters: Sequence[StoredChapter]
) -> list[list[StoredChapter]]:
    """The chapters in groups that fit one call each beside the synopsis they are folded into
    (the first group beside `base`, the next beside a synopsis of the target's size)."""
    instructions, base_tokens, *headings = await ctx.engine.count_tokens_many(
        [chronicler_instructions(ChronicleKind.SYNOPSIS, cast), base or ""]
        + [chapter_heading(c) for c in chapters]
    )
    room = source_room(ctx.engine.info.fold_n_ctx, ctx.max_output, instructions)
    batches: list[list[StoredChapter]] = [[]]
    used = base_tokens
    for chapter, heading in zip(chapters, headings, strict=True):
        size = chapter.tokens + heading + 2
        if batches[-1] and used + size > room:
            batches.append([])
            used = base_tokens  # the next call folds into a synopsis of about the same size
        batches[-1].append(chapter)
        used += size
    return batches


def _judged(
    done: Chronicled,
    tokens: int,
    target: int | None,
    base: str | None,
    names: tuple[str, ...],
    sources: Sequence[Passage] = (),
) -> FoldFailure | None:
    """A usable draft's outcome: cut at the cap, only `base` again (given when the chapters say
    more than it), keeping almost nothing of `sources` (what it folds: a quote of them as long
    keeps THIN_SHARE or more of what it would), or far from its target; None when it can be
    stored."""
    if done.reply.verdict is Verdict.CUT:
        return FoldFailure.CUT
    if sources and not done.reply.text.strip():
        return FoldFailure.THIN  # none of its sentences rests on what it folds
    if base is not None and says_again(done.reply.text, base, names):
        return FoldFailure.SAYS_AGAIN
    if sources and kept_share(done.reply.text, sources) < THIN_SHARE:
        return FoldFailure.THIN
    if target is not None and length_fit(tokens, target) is not LengthFit.OK:
        return FoldFailure.OFF_LENGTH
    return None


def failure_of_draft(done: Chronicled | None, outcome: FoldFailure) -> FoldFailed:
    """The failure of a draft that cannot be stored and cannot be asked for again."""
    if done is not None and not done.reply.ok:
        return reply_failure(done.reply, done.calls, done.cap)
    return FoldFailed(outcome, f"the synopsis draft was not stored: {outcome}")


@dataclass(frozen=True)
class Draft:
    """The synopsis a call (or a quote) wrote, its size, and the time it took."""

    text: str
    tokens: int
    gen_ms: float
    why: str = ""  # why the synopsis is quoted ("" for a summary)
    dropped: tuple[str, ...] = ()  # sentences of the draft left out (`ground_prose`)

    @property
    def quoted(self) -> bool:
        return bool(self.why)


async def _write(
    ctx: FoldContext,
    request: ChronicleRequest,
    base: str | None,
    base_quoted: bool,
    chapters: Sequence[Chapter],
    cast: Cast,
) -> Draft:
    """A synopsis within +-20% of its target, asked again with the draft when it is not; the
    longest short draft when no call got within 20% (memory/budgets.py LENGTH_TOLERANCE).
    A draft the output cap stopped is too long: never stored, it is shown to the chronicler to
    shorten (the cap holds more than the target's +20%, `FoldContext.synopsis_target`). A draft
    that says nothing `base` did not, when `chapters` do, or that the chronicler refused
    or left empty, is asked again as it was first asked, and never stored. When no draft can be
    used, or the fold context has no room left to ask (again), `base` and `chapters` quoted in
    the target's length."""
    target = request.target_tokens
    asked = request
    drafts: list[tuple[Chronicled, int, tuple[str, ...]]] = []
    names = (*cast.names, cast.char, cast.user)
    news = base is None or not says_again("\n".join(c.text for c in chapters), base, names)
    passages = synopsis_passages(base, chapters, base_quoted=base_quoted)
    repeats = refusals = thin = 0
    # One model call per ask (a refusal is asked again here, not inside the call as well):
    # at most SYNOPSIS_CALLS calls in an attempt.
    for _call in range(SYNOPSIS_CALLS):
        done: Chronicled | None = None
        try:
            done = await ask(ctx.engine, asked, max_output=ctx.max_output, cut_ok=True, calls=1)
        except FoldFailed as exc:
            failed: FoldFailed | None = exc
        else:
            failed = None
        tokens = 0
        dropped: tuple[str, ...] = ()
        if done is not None and done.reply.ok and target is not None:
            done, dropped = _grounded(done, passages, names)
        if done is not None:
            (tokens,) = await ctx.engine.count_tokens_many([done.reply.text])
            sources = passages if target is not None else ()
            outcome = _judged(done, tokens, target, base if news else None, names, sources)
        else:
            assert failed is not None
            outcome = failed.reason
        if target is None and outcome is not None:
            # No length to ask for (notes merged into one): nothing but a draft within it.
            raise failed if failed is not None else failure_of_draft(done, outcome)
        match then(Step.SYNOPSIS, outcome):
            case Then.STORE:
                assert done is not None
                return Draft(done.reply.text, tokens, done.gen_ms, dropped=dropped)
            case Then.ASK_AGAIN if outcome is FoldFailure.SAYS_AGAIN:
                repeats += 1
                log.info("synopsis draft says only the old synopsis again: asked again")
            case Then.ASK_AGAIN:
                # Refused, or empty. Failing the major fold would hold the chapters in the
                # memory until it grows past its ceiling and a turn cuts the recent messages.
                refusals += 1
                log.info("synopsis not written (%s): asked again", failed)
            case Then.REDRAFT:
                assert done is not None
                drafts.append((done, tokens, dropped))
                log.info("synopsis of %s tokens for a target of %s: asked again", tokens, target)
                asked = request.again_with(done.reply.text, tokens)
            case Then.QUOTE if outcome is FoldFailure.THIN:
                # It would replace every line before it with almost nothing of them; asked
                # again, a greedy chronicler writes it again.
                thin += 1
                log.info("synopsis draft keeps almost nothing of what it folds: quoted")
                break
            case Then.QUOTE:
                # Asked again, the prompt shows the draft as well: a long draft of a full batch
                # can leave no room for the answer. What the drafts gave so far, or the quote,
                # is stored instead of failing a major fold that cannot go better.
                log.info("synopsis asked again: %s; stopped at %s drafts", failed, len(drafts))
                break
            case _:
                assert outcome is not None  # a draft that can be stored is stored
                raise failed if failed is not None else failure_of_draft(done, outcome)
    assert target is not None  # without a target the first draft was taken
    short = [
        (draft, tokens, dropped)
        for draft, tokens, dropped in drafts
        if draft.reply.ok and length_fit(tokens, target) is LengthFit.SHORT
    ]
    short_thin = False
    if short:
        draft, tokens, dropped = max(short, key=lambda kept: kept[1])
        # Held against what a quote as long as its target keeps: the room is the synopsis's
        # either way, and a short draft that keeps almost nothing of it would leave the room
        # to a quote that keeps more (D-44).
        room = round(len(draft.reply.text) * target / max(tokens, 1))
        if kept_share(draft.reply.text, passages, room) >= THIN_SHARE:
            log.info(
                "synopsis of %s tokens for a target of %s: the longest short draft of %s "
                "calls, stored",
                tokens,
                target,
                len(drafts),
            )
            return Draft(draft.reply.text, tokens, draft.gen_ms, dropped=dropped)
        short_thin = True
    lengths = ", ".join(
        f"{tokens} (cut at the cap)" if not draft.reply.ok else str(tokens)
        for draft, tokens, _dropped in drafts
    )
    if thin:
        why = "its draft kept almost nothing of what it folds"
    elif short_thin:
        why = "its drafts were short and kept almost nothing of what its length would quote"
    elif drafts:
        why = "its drafts ran too long"
    elif repeats:
        why = "its drafts only said the old synopsis again"
    elif refusals:
        why = "the chronicler refused it or wrote nothing"
    else:
        why = "no room to ask for a draft"
    (lead_tokens,) = await ctx.engine.count_tokens_many([QUOTED_SYNOPSIS_LEAD])
    quoted, tokens = await quote_passages(
        passages, max(1, target - lead_tokens), ctx.engine.count_tokens_many
    )
    log.warning(
        "the synopsis for a target of %s tokens was quoted (%s tokens): %s (%s calls%s)",
        target,
        tokens,
        why,
        len(drafts) + repeats + refusals + thin,
        f"; drafts of {lengths} tokens" if lengths else "",
    )
    text = f"{QUOTED_SYNOPSIS_LEAD}\n{quoted}"
    (tokens,) = await ctx.engine.count_tokens_many([text])
    return Draft(text, tokens, sum(d.gen_ms for d, _t, _d in drafts), why=why)


def _grounded(
    done: Chronicled, passages: Sequence[Passage], names: Sequence[str]
) -> tuple[Chronicled, tuple[str, ...]]:
    """The draft without its sentences that rest on nothing it folds (`ground_prose`), and
    those sentences: judged, counted, stored and shown to the chronicler again as kept."""
    grounded = ground_prose(done.reply.text, [p.text for p in passages], names)
    if not grounded.dropped:
        return done, ()
    log.info(
        "synopsis draft: %s sentences rest on nothing it folds, left out: %s",
        len(grounded.dropped),
        " | ".join(grounded.dropped),
    )
    return replace(done, reply=replace(done.reply, text=grounded.text)), grounded.dropped


async def major_fold_count(
    ctx: FoldContext, conv_id: int, chapters: Sequence[StoredChapter]
) -> int:
    """How many of the oldest live `chapters` a major fold takes now (0: not yet)."""
    budgets = await ctx.budgets_for(conv_id)
    return major_gc_split(
        [c.tokens for c in chapters],
        budgets.major_gc,
        budgets.major_gc_min_chapters,
        budgets.chapters_cap,
    )


async def queue_major_fold(ctx: FoldContext, conv_id: int) -> None:
    """Queue a major fold when the synopsis must be rebuilt (a chapter it holds was refolded)
    or the live chapters are due for one; not when one is already queued. Every job that
    stores chapters or a synopsis ends with it."""
    store = ctx.store
    current = store.current_synopsis(conv_id)
    due = await major_fold_count(ctx, conv_id, store.chapters(conv_id))
    if not due and not (current is not None and current.stale):
        return
    open_jobs = store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))
    if any(j.kind is FoldKind.MAJOR_GC for j in open_jobs):
        return
    store.enqueue_fold(FoldJob(conversation_id=conv_id, kind=FoldKind.MAJOR_GC))
