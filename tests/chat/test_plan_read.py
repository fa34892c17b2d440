"""A turn plans from one consistent picture of its memory and its open fold jobs.

The plan asks two things of the store: which messages the memory covers (the live chapters, the
synopsis) and which an open chapter job will fold. A chapter job that lands between the two
reads is in neither answer when the chapters were read before it and the jobs after it: the
turn then queued its range again, and the range got a second chapter (a wasted chronicler
call, and the same messages twice in the memory). The fold worker runs on the turn's event
loop, so a chapter lands at any of the turn's awaits (the ledger's fit counts tokens off the
loop); another instance sharing the file lands one at any moment.

A user turn with quote first on is announced to the engine (engine/foreground.py): no
chronicler step starts while it is prepared, so there only a fold's code after its last model
step can land; the look-ahead after a reply, and a turn with quote first off, are not held.

A quote (chat/fold/quote_first.py) races the worker the same way: a job the worker lands while
the quote awaits its counts is left as it landed (never stopped after it, while the worker still
queues what follows its chapter), the jobs after it are quoted, and the rest of its range, which
it queued with its chapter, is quoted in the look-ahead's next round.

Real SQLite files, the real fold worker and service, on the fake engine: the chronicler is held
(`FakeEngine.hold`) and let go for exactly one chapter inside the await the test picks.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from kotonia_tui.chat import service as service_module
from kotonia_tui.chat.events import FoldProgress, FoldState
from kotonia_tui.chat.fold import chapters as fold_chapters
from kotonia_tui.chat.fold import quote_first
from kotonia_tui.chat.fold import synopsis as fold_synopsis
from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldKind,
    FoldStatus,
    LedgerKind,
    Message,
    Role,
    StoredChapter,
    StoredFoldJob,
    utcnow,
)
from kotonia_tui.engine import GenerationRequest, Slot
from kotonia_tui.store import Store
from tests.cards import write_short_card
from tests.fake_engine import FakeEngine
from tests.scripted_chapters import ledger_entry

from .test_folding import CHAPTER, chat_until, fake_settings_for
from .test_small_windows import events_of

LANDING_TIMEOUT_S = 10.0
OPEN = (FoldStatus.PENDING, FoldStatus.RUNNING)
OPEN_JOBS_READ = "SELECT * FROM fold_jobs WHERE conversation_id = ?"
WREN_LINE = re.compile(r"Wren says the harbour keeps lantern number \d+ lit in every storm\.")


def _lines(count: int) -> list[Message]:
    """Ann and Wren in turn, each line naming a lantern's number (the chronicler's chapter
    keeps Wren's; Ann's numbers it leaves out go into the ledger)."""
    return [
        Message(
            role=Role.USER if index % 2 == 0 else Role.CHARACTER,
            speaker="Ann" if index % 2 == 0 else "Wren",
            text=(
                f"Ann asks about lantern number {index + 100}: who keeps it now?"
                if index % 2 == 0
                else f"Wren says the harbour keeps lantern number {index + 100} lit in every storm."
            ),
        )
        for index in range(count)
    ]


def _prompt(request: GenerationRequest) -> str:
    return "\n".join(m.content for m in request.messages if isinstance(m.content, str))


def _from_the_source(request: GenerationRequest) -> str:
    """A chronicler that writes Wren's lines from the messages it reads; a chat reply that
    says one line."""
    if request.slot is not Slot.FOLD:
        return CHAPTER
    return " ".join(WREN_LINE.findall(_prompt(request))[:3]) or CHAPTER


def _in_read() -> bool:
    """Called from a turn's read (`Prompter.read`)."""
    return any(
        frame.function == "read" and frame.filename.endswith("prompting.py")
        for frame in inspect.stack(context=0)
    )


def _spans(chapters: Sequence[StoredChapter]) -> list[tuple[int, int]]:
    return sorted((c.first_message_id, c.last_message_id) for c in chapters)


def _overlaps(chapters: Sequence[StoredChapter]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of live chapters that both cover a message."""
    spans = _spans(chapters)
    return [(a, b) for a, b in itertools.pairwise(spans) if b[0] <= a[1]]


class Chronicler:
    """The fake engine's fold calls, held until `land_one` lets one chapter job through."""

    def __init__(self, service: ChatService) -> None:
        engine = service.engine
        assert isinstance(engine, FakeEngine)
        self.engine = engine
        self.open = False
        self.landed: list[StoredChapter] = []
        self.calls_before: list[int] = []  # the engine's calls so far, at each landing
        self._landed = threading.Event()
        engine.hold(lambda request: request.slot is Slot.FOLD and not self.open)
        store = service.store
        store_chapter = store.store_chapter

        def landing(*args: Any, **kwargs: Any) -> StoredChapter:
            stored = store_chapter(*args, **kwargs)
            # Held again at once (on the loop, before the next job's first call starts).
            self.open = False
            self.landed.append(stored)
            self.calls_before.append(len(engine.requests))
            self._landed.set()
            return stored

        store.store_chapter = landing  # type: ignore[method-assign]

    def land_one(self) -> None:
        """Let the running chapter job write and store its chapter, and return once it has;
        called off the event loop (the loop runs the job)."""
        self._landed.clear()
        self.open = True
        assert self._landed.wait(LANDING_TIMEOUT_S), "no chapter landed"

    def chapter_calls_after(self, landing: int) -> list[str]:
        """The prompts of the chronicler's chapter calls made after the `landing`-th chapter
        landed (a major fold's calls read chapters, not messages)."""
        later = self.engine.requests[self.calls_before[landing] :]
        return [_prompt(r) for r in later if r.slot is Slot.FOLD and r.json_schema is not None]

    def release(self) -> None:
        self.open = True
        self.engine.release()


class LandInFits:
    """While `armed`, a chapter lands inside each of the first `count` ledger fits the
    prompter makes off the event loop (the turn's fit; before the fix, also the fit made again
    when the ledger changed under the first)."""

    def __init__(self, service: ChatService, chronicler: Chronicler, count: int) -> None:
        self.armed = False
        self.fits = 0
        prompter = service.prompter
        fit = prompter.fit_ledger

        def landing_fit(live: Any) -> Any:
            off_loop = threading.current_thread() is not threading.main_thread()
            if self.armed and off_loop and self.fits < count:
                self.fits += 1
                chronicler.land_one()
            return fit(live)

        prompter.fit_ledger = landing_fit  # type: ignore[method-assign]


def _conversation(service: ChatService, key: str) -> int:
    """A new conversation with Wren (the short card `key`), her greeting its first message."""
    return service.new_conversation(service.library.get(key)).id


def _backlog(service: ChatService, key: str, messages: int) -> tuple[int, StoredChapter]:
    """A conversation of `messages` lines after the greeting, its oldest ten folded into a
    chapter C0 that wrote a ledger entry (so the turn fits a ledger), not applied yet."""
    conv_id = _conversation(service, key)
    store = service.store
    ids = store.add_messages(conv_id, _lines(messages))
    first, last = ids[0], ids[9]
    c0 = store.store_chapter(
        Chapter(
            conversation_id=conv_id,
            first_message_id=first,
            last_message_id=last,
            text=f"- Wren says the harbour keeps lantern number 101 lit. (#{first})",
        ),
        [ledger_entry(conv_id, LedgerKind.USER_FACT, "Ann asks about lantern 100", first)],
    )
    return conv_id, c0


def _queue(store: Store, conv_id: int, first: int, last: int) -> StoredFoldJob:
    return store.enqueue_fold(
        FoldJob(
            conversation_id=conv_id,
            kind=FoldKind.CHAPTER,
            first_message_id=first,
            last_message_id=last,
            not_before=utcnow() - timedelta(seconds=1),
        )
    )


async def _settle(service: ChatService, chronicler: Chronicler, conv_id: int) -> None:
    """Let every fold run, now."""
    chronicler.release()
    store = service.store
    store.hasten_folds([j.id for j in store.fold_jobs(conv_id, statuses=OPEN)])
    await service.worker.wait_settled(conv_id)


@pytest.mark.parametrize("reader", ["turn", "look-ahead"])
async def test_a_chapter_landing_while_the_plan_reads_is_never_folded_again(
    make_fake_service, reader: str
) -> None:
    """A backlog folds chapter after chapter (J1, then J2) while the history is past the
    ceiling, and a plan reads: a turn with quote first off, or the look-ahead quote first
    runs when a conversation is opened. J1 lands inside the ledger's fit, and J2 inside the
    next fit (the fit made again because J1 changed the ledger, before the fix): a plan that
    read the chapters before J2 landed and the open jobs after it saw J2's messages neither
    folded nor queued, and queued them again (the turn) or quoted them at once over J2's
    chapter (the look-ahead). Whatever lands when: no job folds what a chapter covers, no
    message is in two live chapters, and the memory a turn carries is one the store held."""
    key = write_short_card()
    quote_first = reader == "look-ahead"
    # The chronicler is held: a turn that waits for it gives up at once.
    settings = fake_settings_for(fold_delay_s=0, fold_quote_first=quote_first, fold_wait_s=0.5)
    service = await make_fake_service(settings, _from_the_source)
    store = service.store
    conv_id, c0 = _backlog(service, key, 130)
    chronicler = Chronicler(service)
    j1 = _queue(store, conv_id, c0.last_message_id + 1, c0.last_message_id + 20)
    j2 = _queue(store, conv_id, c0.last_message_id + 21, c0.last_message_id + 40)
    folded = c0.last_message_id + 40  # what C0, J1 and J2 fold
    service.worker.wake()  # J1 runs, its chronicler held
    landings = LandInFits(service, chronicler, 2)

    if quote_first:
        carry_ahead = service.prompter.carry_ahead

        async def armed_ahead(*args: Any, **kwargs: Any) -> bool:
            landings.armed = True
            return await carry_ahead(*args, **kwargs)

        service.prompter.carry_ahead = armed_ahead
        await service.open_conversation(conv_id)  # what the history cuts is quoted at once
        await asyncio.wait_for(service.looked_ahead(), LANDING_TIMEOUT_S * 3)
    else:
        landings.armed = True
        turn = await service.send(conv_id, "Ann asks who keeps lantern number 7 now?")
        done = await asyncio.wait_for(turn.wait(), LANDING_TIMEOUT_S * 3)
        assert done.error is None, done.error
        # C0 alone, with J1, or with J1 and J2: a memory the store held.
        applied = store.memory_state(conv_id).applied_chapter_id
        assert applied in {c0.id, *(c.id for c in chronicler.landed)}

    assert landings.fits >= 1 and chronicler.landed, "J1 landed in the plan's fit"
    assert _spans(chronicler.landed[:1]) == [(j1.first_message_id, j1.last_message_id)]
    # J1's chapter kept Ann's numbers in the ledger: the live ledger changed under the fit.
    assert any(e.chapter_id == chronicler.landed[0].id for e in store.ledger(conv_id))

    def folded_again() -> list[tuple[str, int | None, int | None, str]]:
        """Jobs for what C0, J1 and J2 fold (a chapter job, or the refold of a quote)."""
        return [
            (j.kind.value, j.first_message_id, j.last_message_id, j.status.value)
            for j in store.fold_jobs(conv_id)
            if j.id not in (j1.id, j2.id)
            and j.kind is not FoldKind.MAJOR_GC
            and (j.first_message_id or 0) <= folded
        ]

    assert folded_again() == []
    live = store.chapters(conv_id, include_in_synopsis=True)
    assert _overlaps(live) == [], _spans(live)

    await _settle(service, chronicler, conv_id)
    assert folded_again() == []
    live = store.chapters(conv_id, include_in_synopsis=True)
    assert _overlaps(live) == [], _spans(live)
    # J2's messages are in one chapter, J2's own, and the next turn carries it.
    (j2_chapter,) = [c for c in live if c.first_message_id <= folded <= c.last_message_id]
    assert (j2_chapter.first_message_id, j2_chapter.last_message_id) == (
        j2.first_message_id,
        j2.last_message_id,
    )
    assert store.get_fold(j2.id).status is FoldStatus.DONE
    # No chronicler call read J2's messages again once J2 had landed.
    j2_lines = [
        m.text
        for m in store.messages_between(conv_id, j2.first_message_id or 0, folded)
        if m.role is Role.CHARACTER
    ]
    landing = [c.id for c in chronicler.landed].index(j2_chapter.id)
    again = [p for p in chronicler.chapter_calls_after(landing) if any(t in p for t in j2_lines)]
    assert again == [], f"{len(again)} chronicler calls read J2's messages again"
    after = await service.send(conv_id, "And the harbour?")
    assert (await after.wait()).error is None
    assert after.prepared.plan.apply_landed


async def test_a_chapter_another_instance_lands_while_the_turn_reads_is_not_queued_again(
    make_fake_service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the trigger, a turn queued chapter J (not due yet). A second instance sharing the
    file lands J (its chapter and J done, one transaction) while the next turn reads, just
    before that turn reads its open jobs: the turn sees J open or J's chapter, never neither,
    and does not queue J's messages again."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(fold_delay_s=3600), _from_the_source)
    store = service.store
    conv_id = _conversation(service, key)
    turns = await chat_until(service, conv_id, lambda turn: turn.prepared.queued is not None)
    job = turns[-1].prepared.queued
    assert job is not None and job.status is FoldStatus.PENDING

    db = store._db  # the test hooks the reader's own statements
    select = db.select
    landed: list[StoredChapter] = []

    def land_before_the_jobs(sql: str, params: Any = ()) -> Any:
        # The open jobs of the conversation, as a turn reads them.
        if not landed and sql.startswith(OPEN_JOBS_READ) and "status IN" in sql and _in_read():
            with Store.open(store.path) as other:  # a second instance
                chapter = Chapter(
                    conversation_id=conv_id,
                    first_message_id=job.first_message_id or 0,
                    last_message_id=job.last_message_id or 0,
                    text=f"- Ann visited Wren at the lighthouse. (#{job.first_message_id})",
                )
                landed.append(other.store_chapter(chapter, job_id=job.id))
        return select(sql, params)

    await service.looked_ahead()  # the look-ahead after the last reply reads too
    monkeypatch.setattr(db, "select", land_before_the_jobs)
    turn = await service.send(conv_id, "Ann asks about the lamps again.")
    assert (await turn.wait()).error is None
    monkeypatch.undo()

    assert landed and store.get_fold(job.id).status is FoldStatus.DONE
    queued = turn.prepared.queued
    assert queued is None or (queued.first_message_id or 0) > (job.last_message_id or 0), queued
    chapter_jobs = [
        (j.first_message_id, j.last_message_id)
        for j in store.fold_jobs(conv_id, statuses=OPEN)
        if j.kind is FoldKind.CHAPTER
    ]
    assert all(first > (job.last_message_id or 0) for first, _last in chapter_jobs), chapter_jobs


async def test_a_chapter_job_too_large_for_one_call_queues_its_rest_with_its_chapter(
    make_fake_service,
) -> None:
    """A chapter job whose range takes two calls stores its first chapter and queues the rest
    of its range in the same transaction: another instance's turn that reads in between (its
    read is one transaction too) never finds the job done and the rest of its messages
    neither folded nor queued, which it would queue again."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(fold_delay_s=0), _from_the_source)
    store = service.store
    conv_id = _conversation(service, key)
    ids = store.add_messages(conv_id, _lines(90))
    job = _queue(store, conv_id, ids[0], ids[79])
    store_chapter = store.store_chapter
    seen: list[tuple[int, int]] = []  # (covered through, queued through) after each chapter

    def then_read(*args: Any, **kwargs: Any) -> StoredChapter:
        stored = store_chapter(*args, **kwargs)
        with Store.open(store.path) as other:  # a second instance, right after the commit
            rows = other.memory_rows(conv_id, jobs=OPEN)
        covered = max((c.last_message_id for c in rows.chapters), default=0)
        queued = max((j.last_message_id or 0 for j in rows.jobs), default=0)
        seen.append((covered, queued))
        return stored

    store.store_chapter = then_read
    service.worker.wake()
    await service.worker.wait_settled(conv_id)

    assert len(seen) >= 2, "the range took more than one call"
    assert store.get_fold(job.id).status is FoldStatus.DONE
    # After each chapter, the job's range is folded or still queued, every message of it.
    assert all(max(covered, queued) >= ids[79] for covered, queued in seen), seen
    live = store.chapters(conv_id)
    assert _overlaps(live) == [] and live[-1].last_message_id == ids[79], _spans(live)


# ---- a quote racing the worker's landing ----------------------------------------------------


def _land_in_the_quote(monkeypatch: pytest.MonkeyPatch, chronicler: Chronicler) -> None:
    """The running chapter job lands while the quote writes its first extract (an await of the
    quote: it counts tokens), before the quote stores anything."""
    extract = fold_chapters.extracted_piece  # as quote_first imports it

    async def landing_extract(*args: Any, **kwargs: Any) -> Any:
        if not chronicler.landed:
            await asyncio.to_thread(chronicler.land_one)
        return await extract(*args, **kwargs)

    monkeypatch.setattr(quote_first, "extracted_piece", landing_extract)


def _quote_calls(monkeypatch: pytest.MonkeyPatch, returned: asyncio.Event) -> list[list[int]]:
    """The ids of the jobs each quote the service makes is asked for; `returned` is set as
    the first returns (the service then goes on without an await)."""
    quote = quote_first.quote_chapter_jobs  # as the service imports it
    calls: list[list[int]] = []

    async def quoting(ctx: Any, jobs: Sequence[StoredFoldJob]) -> Any:
        calls.append([j.id for j in jobs])
        try:
            return await quote(ctx, jobs)
        finally:
            returned.set()

    monkeypatch.setattr(service_module, "quote_chapter_jobs", quoting)
    return calls


async def test_a_chapter_that_lands_while_the_quote_runs_is_not_stopped_after_it_landed(
    make_fake_service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look-ahead quotes J1 (running, its chronicler held) and the range after it. J1
    lands while the quote writes, and the worker is still in the code after J1's chapter (it
    queues a major fold when one is due: a count, an await) when the quote returns. The quote
    leaves J1 as it landed and stops only the jobs it quoted: J1 ends as a landing (said, so
    the UI and the prewarm hear of it), and its major fold check runs to its end."""
    key = write_short_card()
    settings = fake_settings_for(fold_delay_s=0, fold_quote_first=True, fold_wait_s=0.5)
    service = await make_fake_service(settings, _from_the_source)
    store = service.store
    conv_id, c0 = _backlog(service, key, 130)
    chronicler = Chronicler(service)
    j1 = _queue(store, conv_id, c0.last_message_id + 1, c0.last_message_id + 20)
    events = events_of(service)
    service.worker.wake()  # J1 runs, its chronicler held
    _land_in_the_quote(monkeypatch, chronicler)
    returned = asyncio.Event()
    quote_calls = _quote_calls(monkeypatch, returned)
    queue_major = fold_synopsis.queue_major_fold  # as chapters imports it
    after_j1: list[str] = []  # how the worker's major fold check after J1's chapter went

    async def slow_queue_major(ctx: Any, conv: int) -> None:
        if after_j1:  # a later job's
            await queue_major(ctx, conv)
            return
        after_j1.append("started")
        # The worker after J1's chapter is still in this await when the quote returns.
        await returned.wait()
        await queue_major(ctx, conv)
        after_j1.append("ended")

    monkeypatch.setattr(fold_chapters, "queue_major_fold", slow_queue_major)

    await service.open_conversation(conv_id)  # what the history cuts is quoted at once
    await asyncio.wait_for(service.looked_ahead(), LANDING_TIMEOUT_S * 3)
    assert quote_calls and j1.id in quote_calls[0], "the quote was asked for J1"
    (c1,) = chronicler.landed
    assert (c1.first_message_id, c1.last_message_id) == (j1.first_message_id, j1.last_message_id)
    await _settle(service, chronicler, conv_id)

    assert store.get_fold(j1.id).status is FoldStatus.DONE
    assert after_j1 == ["started", "ended"], "the worker was stopped after J1 had landed"
    landed = [
        e
        for e in events
        if isinstance(e, FoldProgress) and e.state is FoldState.LANDED and e.job.id == j1.id
    ]
    assert landed, "J1's landing was never said"
    live = store.chapters(conv_id, include_in_synopsis=True)
    assert _overlaps(live) == [], _spans(live)


async def test_the_rest_of_a_range_that_landed_while_the_quote_ran_is_quoted_too(
    make_fake_service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look-ahead quotes J1 alone (it covers every message the next turn would cut), and
    J1 lands while the quote writes: too large for one call, it stored its first chapter and
    queued the rest of its range, J1', which the quote was not asked for. With J1's chapter the
    only one (nothing for the synopsis to take), the look-ahead still quotes J1' in its next
    round: the landing moved the memory on, and what the next turn cuts is carried."""
    key = write_short_card()
    settings = fake_settings_for(fold_delay_s=0, fold_quote_first=True, fold_wait_s=0.5)
    service = await make_fake_service(settings, _from_the_source)
    store = service.store
    conv_id = _conversation(service, key)
    ids = store.add_messages(conv_id, _lines(200))
    chronicler = Chronicler(service)
    j1 = _queue(store, conv_id, ids[0], ids[-11])
    service.worker.wake()  # J1 runs, its chronicler held
    _land_in_the_quote(monkeypatch, chronicler)
    quote_calls = _quote_calls(monkeypatch, asyncio.Event())

    await service.open_conversation(conv_id)
    await asyncio.wait_for(service.looked_ahead(), LANDING_TIMEOUT_S * 3)

    assert quote_calls[:1] == [[j1.id]], quote_calls
    (c1,) = chronicler.landed
    assert c1.first_message_id == ids[0] and c1.last_message_id < ids[-11]
    assert store.get_fold(j1.id).status is FoldStatus.DONE
    # J1', queued with C1, is quoted at once: its range is in the memory before the next turn.
    (rest,) = [
        j
        for j in store.fold_jobs(conv_id)
        if j.kind is FoldKind.CHAPTER and j.first_message_id == c1.last_message_id + 1
    ]
    assert rest.last_message_id == ids[-11]
    assert store.get_fold(rest.id).status is FoldStatus.DONE, "J1' was left to the chronicler"
    live = store.chapters(conv_id, include_in_synopsis=True)
    assert _overlaps(live) == [], _spans(live)
    quoted = [c for c in live if c.quoted]
    assert quoted and quoted[0].first_message_id == c1.last_message_id + 1
    await _settle(service, chronicler, conv_id)


async def test_a_job_landed_while_the_quote_reads_its_notes_only_range_lets_the_next_be_quoted(
    make_fake_service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chapter job Jn over imported notes only (nothing to quote: the quote finishes it) and
    J2 after it. Another instance lands Jn while the quote reads Jn's messages: the quote
    leaves Jn as it landed and goes on to quote J2."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(fold_delay_s=3600), _from_the_source)
    store = service.store
    conv_id = _conversation(service, key)
    notes = store.add_messages(
        conv_id,
        [Message(role=Role.SYSTEM, speaker="", text="[Start a new chat]") for _ in range(3)],
    )
    ids = store.add_messages(conv_id, _lines(20))
    later = utcnow() + timedelta(hours=1)  # never due: the worker leaves both alone
    jn, j2 = (
        store.enqueue_fold(
            FoldJob(
                conversation_id=conv_id,
                kind=FoldKind.CHAPTER,
                first_message_id=first,
                last_message_id=last,
                not_before=later,
            )
        )
        for first, last in ((notes[0], notes[-1]), (ids[0], ids[-1]))
    )
    pieces = fold_chapters.pieces_of  # as quote_first imports it

    async def landing_pieces(ctx: Any, job: StoredFoldJob, work: Any) -> Any:
        read = await pieces(ctx, job, work)
        if job.id == jn.id:
            with Store.open(store.path) as other:  # a second instance lands Jn
                other.finish_fold(jn.id)
        return read

    monkeypatch.setattr(quote_first, "pieces_of", landing_pieces)

    quoted = await quote_first.quote_chapter_jobs(service.worker.context, [jn, j2])

    assert (quoted.landed, quoted.done) == ([jn.id], [j2.id])
    assert store.get_fold(j2.id).status is FoldStatus.DONE
    spans = _spans(quoted.chapters)
    assert spans and spans[0][0] == ids[0] and spans[-1][1] == ids[-1], spans
    assert all(c.quoted and c.stale for c in store.chapters(conv_id))
