"""Chapter jobs: a range of messages becomes chapters; a refold replaces stale ones.

A chapter job folds its range oldest first, one piece per call. The pieces are as even as the
messages allow (no one-message remainder beside a full chapter); a range larger than one piece
stores its first chapter and queues the rest, so a long backlog makes progress that survives a
restart. A refold (an edit inside a folded range) writes its whole range and supersedes the
stale chapters in the same transaction; when the synopsis held them, the synopsis is rebuilt
from the current chapters by the next major fold. A refold that finds nothing left to fold (every
message of its range deleted, or only notes that are not part of the story) retires the stale
chapters instead: they leave the memory with the ledger entries they wrote, and a synopsis that
held one is rebuilt without it, the same way (a deleted message must not live on in memory).

Each chapter is structured (memory/structured.py) and stored with what it does to the ledger:
the entries it adds and the ones it ends, by label. A chapter's prompt carries the live ledger
(open threads it may resolve, facts and rules it may replace); a refold's leaves out the entries
of the chapters it replaces, which rest on the text before the edit and end with them.

A single message too long for one call (a pasted letter, a 100 KB message) is summarized on its
own: cut at its seams into parts that fit (memory/oversized.py), one note per part, the notes
merged until they are the size of a chapter; the chapter records that it was made that way.
Each part is a structured chapter: their items together are the chapter's structure and its
ledger changes; when the parts had to be merged (prose), the merged text is the chapter's text
and only the ledger keeps the structure's items.

The job is the only orchestrator: it reads the store once for the job's ledger and its pieces,
builds the `Chronicling` every piece is written with, asks the chronicler through its call
(chat/fold/chronicle.py), decides what is stored from the reply (the chronicler's chapter, or
the piece quoted), and writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kotonia_tui import story_dates
from kotonia_tui.chat.fold.chronicle import ask
from kotonia_tui.chat.fold.context import FoldContext
from kotonia_tui.chat.fold.outcomes import FoldFailed, FoldFailure, Step, Then, then
from kotonia_tui.chat.fold.synopsis import queue_major_fold
from kotonia_tui.chat.numbering import chapter_span, range_ends, range_numbers
from kotonia_tui.domain import (
    Chapter,
    ChapterOrigin,
    FoldJob,
    FoldKind,
    Message,
    NewChapter,
    StoredChapter,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredMessage,
)
from kotonia_tui.engine import BackendUnavailableError, Engine, EngineError
from kotonia_tui.memory.assembly import in_prompt
from kotonia_tui.memory.chronicler import (
    Cast,
    ChronicleKind,
    ChronicleRequest,
    chronicler_instructions,
    ledger_prompt,
    render_source,
    source_room,
)
from kotonia_tui.memory.extract import message_passages, quote_passages
from kotonia_tui.memory.oversized import split_text
from kotonia_tui.memory.policy import EXPECTED_CHAPTER_RATIO, WindowMessage, split_source
from kotonia_tui.memory.readback import missing, user_specifics
from kotonia_tui.memory.structured import (
    StructuredChapter,
    combine,
    ledger_changes,
    render_chapter,
    with_quotes,
)

log = logging.getLogger(__name__)

SOURCE_READ_LIMIT = 4000  # rows per read of a chapter's source; bigger ranges are split
MERGE_ROUNDS = 8  # a long message's notes are merged at most this many times over
EXTRACT_MIN_TOKENS = 32  # an extract quotes at least a sentence or two
# A message longer than this many chronicler calls read is quoted, not summarized in parts.
MAX_MESSAGE_PARTS = 16  # a 100 KB letter at an 8k window is 12 parts: summarized


@dataclass(frozen=True)
class Piece:
    """Messages one chronicler call reads, and the budget it was cut to."""

    messages: list[StoredMessage]
    costs: list[int]  # each message as the chronicler reads it, in tokens
    budget: int
    # The scene dates of the piece's range in story order (Store.scene_dates): its time.
    scene_dates: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chronicling:
    """What every piece of a chapter job is written with, built once for the job: the model
    call's engine and output ceiling, the conversation, who its story is between, the live
    ledger a chapter may end, and whether a failing call quotes (the job's last attempt)."""

    engine: Engine
    max_output: int
    conv_id: int
    cast: Cast
    ledger: tuple[StoredLedgerEntry, ...]
    last_attempt: bool = False

    @classmethod
    def of(
        cls,
        ctx: FoldContext,
        conv_id: int,
        ledger: Sequence[StoredLedgerEntry],
        *,
        last_attempt: bool = False,
    ) -> Chronicling:
        return cls(
            ctx.engine, ctx.max_output, conv_id, ctx.cast_of(conv_id), tuple(ledger), last_attempt
        )

    @property
    def model(self) -> str:
        return self.engine.info.model_name


async def fold_chapter_job(
    ctx: FoldContext, job: StoredFoldJob, *, last_attempt: bool = False
) -> str:
    """Run a chapter or refold job; returns what it stored, in words. On the job's
    `last_attempt`, a model call that fails quotes the range instead of failing it for good."""
    conv_id = job.conversation_id
    store = ctx.store
    ledger = store.ledger(conv_id)
    refold = job.kind is FoldKind.REFOLD
    if refold:
        # The chapters this refold replaces wrote entries from the text before the edit.
        replaced = {c.id for c in _stale(ctx, job)}
        ledger = [e for e in ledger if e.chapter_id not in replaced]
    work = Chronicling.of(ctx, conv_id, ledger, last_attempt=last_attempt)
    pieces = await pieces_of(ctx, job, work)
    if not any(in_prompt(m.role) for piece in pieces for m in piece.messages):
        # Nothing, or only notes imported with a chat ("[Start a new chat]"), which are not
        # part of the story: the chronicler is not asked to write about them.
        if refold:
            # The chapters of the range speak of messages the user deleted: they leave the
            # memory (never to stay in it for want of a chapter to replace them).
            words = _retire(ctx, job, notes_left=any(p.messages for p in pieces))
            await queue_major_fold(ctx, conv_id)  # a rebuild, when the synopsis held one
            return words
        store.finish_fold(job.id)
        return "nothing left to fold"
    # A refold writes its whole range; a chapter job its first piece, and queues the rest.
    chapters = await _written(work, pieces if refold else pieces[:1])
    if refold:
        # Read again after the calls: a chapter made stale meanwhile is replaced too.
        stale = _stale(ctx, job)
        stored = store.store_refold([c.id for c in stale], chapters, job.id)
        words = ", ".join(_stored(c) for c in stored)
        if any(c.in_synopsis for c in stored):  # it held them, or covers their range
            words += "; the synopsis will be rebuilt from the current chapters"
    else:
        (folded,) = chapters
        chapter = folded.chapter
        last_id = chapter.last_message_id
        rest: list[FoldJob] = []
        if job.last_message_id is not None and last_id < job.last_message_id:
            # A range too large for one call becomes several chapters, oldest first. The rest
            # is queued with the chapter (one transaction): a turn that read the job done and
            # the rest not yet queued would queue those messages again.
            rest.append(
                FoldJob(
                    conversation_id=conv_id,
                    kind=job.kind,
                    first_message_id=last_id + 1,
                    last_message_id=job.last_message_id,
                )
            )
        store.store_chapter(chapter, folded.entries, folded.endings, job_id=job.id, then=rest)
        words = _stored(chapter)
    # A major fold when the chapters are due for one, or a rebuild when the synopsis held a
    # chapter this refold replaced.
    await queue_major_fold(ctx, conv_id)
    return words


async def _written(work: Chronicling, pieces: list[Piece]) -> list[NewChapter]:
    """A chapter for each piece, oldest first."""
    chapters: list[NewChapter] = []
    ended: set[int] = set()
    for piece in pieces:
        folded = await _fold_piece(work, piece)
        # Each piece reads the ledger as it stood before the range: an entry two pieces both
        # end is ended by the first.
        endings = tuple(e for e in folded.endings if e.entry_id not in ended)
        ended.update(e.entry_id for e in endings)
        chapters.append(NewChapter(folded.chapter, folded.entries, endings))
    return chapters


def _retire(ctx: FoldContext, job: StoredFoldJob, *, notes_left: bool) -> str:
    """Retire the stale chapters of a refold's range, which has nothing left to fold, and say
    so in words a user reads (`retired_words`)."""
    conv_id = job.conversation_id
    done = ctx.store.retire_chapters(conv_id, [c.id for c in _stale(ctx, job)], job.id)
    if not done.chapters:
        return "nothing left to fold"
    log.info(
        "conversation %s: retired chapters %s (messages %s): nothing left to fold",
        conv_id,
        ", ".join(str(c.id) for c in done.chapters),
        ", ".join(f"{c.first_message_id}-{c.last_message_id}" for c in done.chapters),
    )
    ends = [i for c in done.chapters for i in range_ends(c.first_message_id, c.last_message_id)]
    numbers = ctx.store.message_numbers(conv_id, ends)
    return retired_words(done.chapters, numbers, ended=done.ended_entries, notes_left=notes_left)


def retired_words(
    chapters: Sequence[StoredChapter],
    numbers: Mapping[int, int],
    *,
    ended: int,
    notes_left: bool,
) -> str:
    """What retiring `chapters` did, as a user reads it: each chapter named as the chat numbers
    its messages ("chapter #5-#6"; with none left, by the message before it, "the chapter after
    #4", or "the chapter at the start of the story"), why, and what left with it. `numbers`:
    `Store.message_numbers` of their `range_ends`.

    Already in numbers, so it holds no colon, bracket or "message #": nothing `told` would read
    as a store id to number again (memory/numbering.py)."""
    names = []
    for chapter in chapters:
        first, last = chapter.first_message_id, chapter.last_message_id
        span = range_numbers(first, last, numbers)
        if span:
            names.append(f"chapter {chapter_span(span)}")
        elif before := numbers[range_ends(first, last)[0]]:
            names.append(f"the chapter after #{before}")
        else:
            names.append("the chapter at the start of the story")
    its, they, them = ("its", "it", "it") if len(chapters) == 1 else ("their", "they", "them")
    if notes_left:
        why = f"only notes that are not part of the story are left in {them}"
    else:
        why = f"{its} messages were deleted"
    words = f"retired {' and '.join(names)}, as {why}; {they} left the memory"
    if ended:
        entries = "entry" if ended == 1 else "entries"
        words += f", and {ended} ledger {entries} {they} wrote ended with {them}"
    if any(c.in_synopsis for c in chapters):
        words += f"; the synopsis will be rebuilt without {them}"
    return words


def _stale(ctx: FoldContext, job: StoredFoldJob) -> list[StoredChapter]:
    """The stale chapters a refold job's range replaces."""
    return ctx.store.stale_chapters(
        job.conversation_id, job.first_message_id or 0, job.last_message_id or 0
    )


def story_time(piece: Piece, chronicled: str | None) -> str | None:
    """A chapter's in-story time: the chronicler's, or the dates its range's scenes were
    given when the chronicler gave none, a vaguer one or one its grammar cut
    (story_dates.chapter_time)."""
    return story_dates.chapter_time(chronicled, piece.scene_dates)


def _stored(chapter: Chapter) -> str:
    return (
        f"chapter for messages #{chapter.first_message_id}-#{chapter.last_message_id} "
        f"({chapter.tokens} tokens)"
    )


async def pieces_of(ctx: FoldContext, job: StoredFoldJob, work: Chronicling) -> list[Piece]:
    """The job's messages cut into pieces for one call each (oldest first). A refold needs all
    of them; a chapter job folds the first and queues the rest.

    Sized by what the chronicler actually reads (each message as rendered for it, with its
    "who -> whom" labels), so the instructions and the answer's room fit the fold context.
    """
    first = job.first_message_id or 0
    last = job.last_message_id or 0
    rows = ctx.store.messages_from(
        job.conversation_id, first, SOURCE_READ_LIMIT, model_key=ctx.engine.model_key
    )
    rows = [m for m in rows if m.id <= last]
    if not rows:
        return []
    story = work.cast.in_story(rows)
    # One batch for the instructions and every message: up to SOURCE_READ_LIMIT counts,
    # which a server backend answers without blocking the loop.
    instructions, *message_costs = await ctx.engine.count_tokens_many(
        # The ledger the chapter prompt carries (open threads, facts it may replace) is part
        # of its fixed cost.
        [chronicler_instructions(ChronicleKind.CHAPTER, story) + ledger_prompt(work.ledger)]
        + [render_source([m], char=story.char, user=story.user) for m in rows]
    )
    budgets = await ctx.budgets_for(job.conversation_id)
    room = source_room(ctx.engine.info.fold_n_ctx, ctx.max_output, instructions)
    budget = max(1, min(budgets.chapter_source, room))
    costs = [WindowMessage(m.id, cost) for m, cost in zip(rows, message_costs, strict=True)]
    by_id = {m.id: (m, cost) for m, cost in zip(rows, message_costs, strict=True)}
    pieces = []
    for first_id, last_id in split_source(costs, budget):
        chosen = [by_id[i] for i in sorted(by_id) if first_id <= i <= last_id]
        dates = ctx.store.scene_dates(job.conversation_id, first_id, last_id)
        pieces.append(Piece([m for m, _ in chosen], [c for _, c in chosen], budget, tuple(dates)))
    return pieces


async def _fold_piece(work: Chronicling, piece: Piece) -> NewChapter:
    """The piece's chapter: the chronicler's, or an extract of the piece's own lines when the
    chronicler's answer cannot be stored (a range never stays out of the memory).

    A model call that fails (an engine error) fails the attempt, and the job is retried after
    its backoff; on its last attempt the range is quoted instead: a job failed for good would
    leave its messages in neither the prompt nor the memory once the verbatim window moved on.
    A server that is down is never the range's fault (the job waits for it, uncounted). What
    follows each outcome is the table's (chat/fold/outcomes.py)."""
    failed: Exception
    try:
        return await _chronicled_piece(work, piece)
    except FoldFailed as exc:
        outcome, why, failed = exc.reason, f"unusable ({exc.why})", exc
    except BackendUnavailableError as exc:
        outcome, why, failed = FoldFailure.SERVER_DOWN, str(exc), exc
    except EngineError as exc:
        outcome, why = (
            FoldFailure.MODEL_FAILED,
            f"not written: the model failed on every attempt ({exc})",
        )
        failed = exc
    if then(Step.CHAPTER, outcome, last_attempt=work.last_attempt) is Then.QUOTE:
        return await extracted_piece(work, piece, why)
    raise failed  # deferred or failed by the worker (the same table, Step.JOB)


async def _chronicled_piece(work: Chronicling, piece: Piece) -> NewChapter:
    messages = piece.messages
    if len(messages) == 1 and piece.costs[0] > piece.budget * MAX_MESSAGE_PARTS:
        # Summarized part by part, a huge message takes hundreds of calls while the next
        # turn waits (docs/decisions.md D-22); past this many calls it is quoted instead,
        # bounded like any chapter, and the whole message stays in the archive.
        why = (
            f"not asked for: message #{messages[0].id} is {piece.costs[0]:,} tokens, more "
            f"than {MAX_MESSAGE_PARTS} chronicler calls read ({piece.budget:,} each)"
        )
        return await extracted_piece(work, piece, why)
    if len(messages) == 1 and piece.costs[0] > piece.budget:
        return await _fold_long_message(work, messages[0], piece)
    request = ChronicleRequest.chapter(messages, work.cast, work.ledger)
    done = await ask(work.engine, request, max_output=work.max_output)
    (tokens,) = await work.engine.count_tokens_many([done.reply.text])
    structure = done.reply.kept
    entries, endings = (
        ledger_changes(structure, work.conv_id, work.ledger) if structure else ([], [])
    )
    chapter = Chapter(
        conversation_id=work.conv_id,
        first_message_id=messages[0].id,
        last_message_id=messages[-1].id,
        text=done.reply.text,
        model=work.model,
        gen_ms=done.gen_ms,
        tokens=tokens,
        story_time=story_time(piece, done.reply.story_time),
        structure=structure.to_json() if structure else None,
        readback_misses=list(done.reply.misses),
    )
    return NewChapter(chapter, tuple(entries), tuple(endings))


async def extracted_piece(
    work: Chronicling, piece: Piece, why: str, *, note: str | None = None
) -> NewChapter:
    """The piece quoted (memory/extract.py) at about the size a chapter of it would have, and
    the user's sentences with names and numbers in the ledger (as a readback miss is kept).

    The chronicler is greedy, so asking it again later gives the same unusable answer; the
    extract keeps the range in the memory now, and its note says why it is one (`note`: said
    after the range instead of the chronicler's failure). The ledger keeps the user's own
    facts after a major fold has taken the extract into the synopsis."""
    # Bounded by the call the piece was cut for, whatever the source: a 400,000-token message
    # became a 400,005-token chapter, 50 times the window.
    source_tokens = min(sum(piece.costs), piece.budget)
    target = max(EXTRACT_MIN_TOKENS, int(source_tokens * EXPECTED_CHAPTER_RATIO))
    passages = message_passages(piece.messages)
    text, tokens = await quote_passages(passages, target, work.engine.count_tokens_many)
    if not text:
        raise FoldFailed(
            FoldFailure.NOTHING_TO_FOLD,
            f"the chronicler's chapter was {why} and the range has no lines to quote",
        )
    first, last = piece.messages[0].id, piece.messages[-1].id
    # A quote stored for a turn at the ceiling (`note` given) is the plan, not a failure.
    level = logging.INFO if note is not None else logging.WARNING
    said = note or f"the chronicler's chapter was {why}"
    note = f"quoted from messages #{first}-#{last}: {said}"
    log.log(level, "conversation %s: %s", work.conv_id, note)
    facts = with_quotes(StructuredChapter("", (), (), (), ()), piece.messages)
    entries, _ends = ledger_changes(facts, work.conv_id, work.ledger)
    chapter = Chapter(
        conversation_id=work.conv_id,
        first_message_id=first,
        last_message_id=last,
        text=text,
        tokens=tokens,
        story_time=story_time(piece, None),
        note=note,
        origin=ChapterOrigin.QUOTED,
    )
    return NewChapter(chapter, tuple(entries))


async def _fold_long_message(work: Chronicling, message: StoredMessage, piece: Piece) -> NewChapter:
    """One message too long for a call: a structured note on each part, their items together
    the chapter's; notes too long together are merged into prose."""
    story = work.cast.in_story([message])

    async def costs(texts: list[str]) -> list[int]:
        # Each part as the chronicler reads it; counted in batches, off the event loop.
        return await work.engine.count_tokens_many(
            [
                render_source(
                    [message.model_copy(update={"text": text, "segments": []})],
                    char=story.char,
                    user=story.user,
                )
                for text in texts
            ]
        )

    parts = await split_text(message.text, piece.budget, costs)
    notes: list[Chapter] = []
    structures: list[StructuredChapter] = []
    gen_ms = 0.0
    for number, text in enumerate(parts, start=1):
        part: Message = message.model_copy(update={"text": text, "segments": []})
        request = ChronicleRequest.chapter(
            [part], work.cast, work.ledger, part=(number, len(parts))
        )
        done = await ask(work.engine, request, max_output=work.max_output)
        gen_ms += done.gen_ms
        if done.reply.structure is not None:
            structures.append(done.reply.structure)
        (tokens,) = await work.engine.count_tokens_many([done.reply.text])
        notes.append(
            Chapter(
                conversation_id=work.conv_id,
                first_message_id=message.id,
                last_message_id=message.id,
                text=done.reply.text,
                tokens=tokens,
                story_time=done.reply.story_time,
            )
        )
    limit = max(1, int(piece.budget * EXPECTED_CHAPTER_RATIO))
    notes, merges, merge_ms = await _merge(work, story, notes, limit, piece.budget)
    whole = combine(structures) if structures else None
    if whole is not None and not merges:
        text = render_chapter(whole)
    else:
        text = "\n\n".join(n.text.strip() for n in notes)
    (tokens,) = await work.engine.count_tokens_many([text])
    note = (
        f"message #{message.id} is {piece.costs[0]:,} tokens, more than one chronicler call "
        f"reads ({piece.budget:,}): summarized on its own in {len(parts)} parts"
        + (
            f", merged in {merges} calls (its ledger entries keep the parts' items)"
            if merges
            else ""
        )
    )
    log.info("conversation %s: %s", work.conv_id, note)
    # Read back against the whole message, not part by part: a name one part's note left out
    # may be in another's.
    kept = "\n".join([text, *(item.text for item in whole.ledger)] if whole else [text])
    misses = missing(user_specifics([message]), kept)
    if whole is not None:
        whole = with_quotes(whole, [message], misses)
    entries, endings = ledger_changes(whole, work.conv_id, work.ledger) if whole else ([], [])
    chapter = Chapter(
        conversation_id=work.conv_id,
        first_message_id=message.id,
        last_message_id=message.id,
        text=text,
        model=work.model,
        gen_ms=gen_ms + merge_ms,
        tokens=tokens,
        story_time=story_time(piece, next((n.story_time for n in notes if n.story_time), None)),
        note=note,
        origin=ChapterOrigin.PARTS,
        structure=whole.to_json() if whole is not None and not merges else None,
        readback_misses=misses,
    )
    return NewChapter(chapter, tuple(entries), tuple(endings))


async def _merge(
    work: Chronicling, cast: Cast, notes: list[Chapter], limit: int, budget: int
) -> tuple[list[Chapter], int, float]:
    """Merge consecutive notes (as a synopsis of them) until they fit `limit` tokens together
    or stop shrinking; returns the notes, the calls made and their time."""
    calls, gen_ms = 0, 0.0
    for _round in range(MERGE_ROUNDS):
        total = sum(n.tokens for n in notes)
        if total <= limit or len(notes) < 2:
            break
        groups: list[list[Chapter]] = [[]]
        for note in notes:
            # The merge's own instructions and headings are longer than a chapter's.
            if groups[-1] and sum(n.tokens for n in groups[-1]) + note.tokens > budget * 0.8:
                groups.append([])
            groups[-1].append(note)
        merged: list[Chapter] = []
        for group in groups:
            if len(group) == 1:
                merged.append(group[0])
                continue
            request = ChronicleRequest.synopsis(None, group, cast)
            done = await ask(work.engine, request, max_output=work.max_output)
            calls += 1
            gen_ms += done.gen_ms
            (tokens,) = await work.engine.count_tokens_many([done.reply.text])
            merged.append(group[0].model_copy(update={"text": done.reply.text, "tokens": tokens}))
        if sum(n.tokens for n in merged) >= total:
            raise FoldFailed(
                FoldFailure.NOT_SHORTER,
                f"the notes on message #{notes[0].first_message_id}'s parts did not get shorter "
                f"when merged ({total} tokens): the chapter was not stored",
            )
        notes = merged
    return notes, calls, gen_ms
