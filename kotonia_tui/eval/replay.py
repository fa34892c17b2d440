"""Replaying a conversation through the real fold policy, as production would have folded it.

The conversation's messages go into a fresh temporary store (a real SQLite file), one by one,
through a real `ChatService`: after each user message the service's `Prompter.prepare` plans
the turn exactly as `ChatService.send` does (apply a landed fold, cut at the ceiling, queue a
chapter job past the trigger), and the real `FoldWorker` writes the chapters and runs the
major GCs. No replies are generated: the conversation's own replies are stored as they are.

Two things differ from a live session, on purpose:
- the fold delay is 0 and the replay waits for the worker to go idle after every user turn,
  so a chapter lands before the next turn (live, it lands a few turns later);
- a failed fold is retried after its backoff on a virtual clock that advances 30 s per user
  turn (`RetryClock`), not the wall clock: the same number of turns pass between attempts
  as in a live session, whatever the machine's speed.

Once the conversation is in, the worker is paused: the questions read the store the replay
left (a job still due does not land a chapter while they are asked), as a replay kept by
eval/replay_cache.py is opened.

The ranges are the policy's fold points: each queued chapter job ends a range; the messages
after the last one (the verbatim tail) are the newest range.

Without folds (`folds=False`: an evidence-only run whose arms need no memory), the worker never
runs a job, no chapter lands, and the policy cuts the oldest messages at the ceiling, as a
session whose folds never land would: each forced cut ends a range instead.

With semantic recall on (`semantic_recall`, the default: the profile's `embedding_model_path`
or the shipped model), the replay opens it as the app does and waits until every replayed
message has its vector before it returns, so the questions' recall ranks the whole archive by
meaning as well as by words (a live session's background worker has long caught up by then).
A model that cannot be had stops the run with its reason (`DatasetError`): a measurement
"with semantic recall" never runs without it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from kotonia_tui.characters import CharacterCard, CharacterSetup, write_json_card
from kotonia_tui.chat.events import FoldProgress, FoldState, MemoryNotice, ServiceEvent
from kotonia_tui.chat.fold.worker import RETRY_BACKOFF_S
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.chat.prompting import PreparedTurn
from kotonia_tui.chat.semantic import SemanticRecall
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings
from kotonia_tui.domain import (
    Conversation,
    FoldStatus,
    Message,
    Persona,
    Role,
    StoredChapter,
    StoredMessage,
    StoredSynopsis,
    utcnow,
)
from kotonia_tui.engine import Engine
from kotonia_tui.eval.dataset import DatasetError, EvalConversation
from kotonia_tui.eval.results import FoldEvent, RangeRecord
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.store import Store

log = logging.getLogger(__name__)

MAX_SETTLE_ROUNDS = 12  # a fold and the jobs it enqueues (remainders, a major GC) in one turn
# Virtual time per user turn for the retry backoff: about one message every half minute.
TURN_SECONDS = 30.0


@dataclass(frozen=True)
class Range:
    """One folded range (or the verbatim tail), in stored ids and in the input's own ids."""

    index: int
    first_id: int
    last_id: int
    first_source: int
    last_source: int
    messages: int
    tokens: int
    folded: bool  # False: the verbatim tail

    def record(self) -> RangeRecord:
        return RangeRecord(
            index=self.index,
            first_message=self.first_source,
            last_message=self.last_source,
            messages=self.messages,
            tokens=self.tokens,
            folded=self.folded,
        )


@dataclass
class Replay:
    """The replayed conversation, its memory at the end, and the open service over it."""

    service: ChatService
    conv_id: int
    card: CharacterCard
    setup: CharacterSetup
    persona: Persona
    to_stored: dict[int, int]  # input message id -> stored id
    to_source: dict[int, int]  # stored id -> input message id
    ranges: list[Range]
    final: PreparedTurn  # the prompt the next turn would carry (dry run: nothing saved)
    fed: Fed
    events: list[FoldEvent] = field(default_factory=list)
    forced_cuts: list[int] = field(default_factory=list)  # input ids cut at the ceiling
    applied_folds: int = 0
    tmp: tempfile.TemporaryDirectory[str] | None = None
    folds: bool = True  # False: no fold ran; ranges end at the forced cuts

    @property
    def store(self) -> Store:
        return self.service.store

    @property
    def memory_text(self) -> str:
        """The memory the final prompt carries, as stored (citing store ids)."""
        return self.final.state.memory_text

    def source_of_numbers(self) -> dict[int, int]:
        """Each message's number in the conversation (as a prompt numbers the messages its
        memory cites, chat/numbering.py) -> its input id."""
        numbers = self.store.message_numbers(self.conv_id, self.to_source)
        return {number: self.to_source[i] for i, number in numbers.items()}

    def all_chapters(self) -> list[StoredChapter]:
        """Every chapter written, including those since folded into the synopsis."""
        return self.store.chapters(self.conv_id, include_in_synopsis=True)

    def synopses(self) -> list[StoredSynopsis]:
        return self.store.synopsis_versions(self.conv_id)

    def messages(self, first_id: int, last_id: int) -> list[StoredMessage]:
        return self.store.messages_between(self.conv_id, first_id, last_id)

    def all_messages(self) -> list[StoredMessage]:
        return list(self.store.iter_messages(self.conv_id, model_key=self.service.engine.model_key))

    async def close(self) -> None:
        """Stop the worker and the store; the engine is the caller's and stays open."""
        await self.service.worker.stop()
        await self.service.semantic.stop()
        self.service.store.close()
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


def eval_settings(settings: Settings, conv: EvalConversation) -> Settings:
    """The run's settings: the input's persona, folds at once, no prewarm (no chat turns)."""
    persona = Persona(name=conv.user.name, description=conv.user.description)
    return settings.model_copy(
        update={"persona": persona, "fold_delay_s": 0.0, "prewarm_after_fold": False}
    )


@dataclass(frozen=True)
class Fed:
    """What feeding the conversation left beside the store: all a stored replay keeps."""

    conv_id: int
    to_stored: dict[int, int]  # input message id -> stored id
    to_source: dict[int, int]  # stored id -> input message id
    boundaries: list[int]  # stored ids that end a range: fold points, or forced cuts
    forced: list[int]  # stored ids cut at the ceiling
    applied: int  # turns that applied a landed fold
    events: list[FoldEvent] = field(default_factory=list)  # in the input's own message ids


@dataclass(frozen=True)
class StoredReplay:
    """A replay made before (eval/replay_cache.py): its database file and what fed it."""

    database: Path
    fed: Fed


async def replay(
    conv: EvalConversation,
    settings: Settings,
    engine: Engine,
    *,
    card: CharacterCard | None = None,
    workdir: Path | None = None,
    turn_seconds: float = TURN_SECONDS,
    folds: bool = True,
    semantic: bool = True,
    stored: StoredReplay | None = None,
) -> Replay:
    """Feed the conversation through a fresh store and the real fold policy (`folds`: let the
    worker write the chapters it queues; without, none lands and the policy cuts instead;
    `semantic`: open semantic recall as the settings ask, else recall by words alone;
    `stored`: a copy of this same replay made before, opened instead of fed again). The worker
    is paused once the conversation is in: the store stays as the replay left it."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="kotonia-eval-")
        workdir = Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    settings = eval_settings(settings, conv)
    card = card or conv.character.card()
    # The library reads the card from a folder, like any card the app offers.
    cards_dir = workdir / "characters"
    cards_dir.mkdir(exist_ok=True)
    write_json_card(card, cards_dir / f"{card.key}.json")
    library = CharacterLibrary([cards_dir])
    card = library.get(card.key)
    database = workdir / "eval.sqlite3"
    if stored is not None:
        shutil.copyfile(stored.database, database)
    store = Store.open(database)
    try:
        recall = await _semantic(store, settings) if semantic else SemanticRecall(store)
    except DatasetError:
        store.close()
        if tmp is not None:
            tmp.cleanup()
        raise
    service = ChatService(settings, store, engine, library, recall)
    events: list[FoldEvent] = []
    service.subscribe(lambda event: _record(event, events))
    await service.start()
    if not folds or stored is not None:
        # Jobs stay queued and never run: without folds the policy sees a fold in flight and
        # cuts at the ceiling (no model call is made); a stored replay stays as it was left.
        service.worker.pause()
    persona = service.persona
    setup = service.setup_for(card)
    try:
        if stored is None:
            fed = await _feed(conv, service, card, setup, persona, folds, turn_seconds, events)
            # The store as the replay left it, for every question and whatever reads it after:
            # a job still due lands no chapter while the questions are asked (a kept replay
            # opens paused too, so both are the same store).
            service.worker.pause()
            await service.worker.wait_idle()
        else:
            fed = stored.fed
        await _embedded(service)
        final = await service.prompter.preview(fed.conv_id, card, setup, persona)
        if stored is None:
            fed = replace(fed, events=_in_source(events, fed.to_source))
    except BaseException:
        await service.worker.stop()
        await service.semantic.stop()
        store.close()
        if tmp is not None:
            tmp.cleanup()
        raise
    return Replay(
        service=service,
        conv_id=fed.conv_id,
        card=card,
        setup=setup,
        persona=persona,
        to_stored=fed.to_stored,
        to_source=fed.to_source,
        ranges=_ranges(service, fed.conv_id, fed.boundaries, fed.to_source),
        final=final,
        fed=fed,
        events=fed.events,
        forced_cuts=[fed.to_source.get(i, i) for i in fed.forced],
        applied_folds=fed.applied,
        tmp=tmp,
        folds=folds,
    )


async def _feed(
    conv: EvalConversation,
    service: ChatService,
    card: CharacterCard,
    setup: CharacterSetup,
    persona: Persona,
    folds: bool,
    turn_seconds: float,
    events: list[FoldEvent],
) -> Fed:
    """Store the messages one by one, planning each user turn as a live one is planned."""
    store = service.store
    stored_conv = store.create_conversation(
        Conversation(
            character_key=card.key,
            character_name=card.name,
            persona_name=persona.name,
            persona_description=persona.description,
            title=conv.title,
        )
    )
    conv_id = stored_conv.id
    assert conv_id is not None
    to_stored: dict[int, int] = {}
    to_source: dict[int, int] = {}
    boundaries: list[int] = []
    forced: list[int] = []
    applied = 0
    clock = RetryClock(turn_seconds)
    for item in conv.messages:
        listener = setup.display_name if item.role is Role.USER else persona.name
        message = store.add_message(
            Message(
                conversation_id=conv_id,
                role=item.role,
                speaker=item.speaker,
                text=item.text,
                segments=parse_segments(item.text, speaker=item.speaker, listener=listener),
            )
        )
        assert message.id is not None
        to_stored[item.id] = message.id
        to_source[message.id] = item.id
        if item.role is not Role.USER:
            continue
        clock.tick()
        # One user turn, planned exactly as ChatService.send plans it.
        prepared = await service.prompter.prepare(conv_id, card, setup, persona)
        if prepared.plan.apply_landed:
            applied += 1
        if prepared.plan.forced_cut_through is not None:
            forced.append(prepared.plan.forced_cut_through)
        if prepared.queued is not None:
            assert prepared.queued.last_message_id is not None
            boundaries.append(prepared.queued.last_message_id)
            events.append(
                FoldEvent(
                    state="queued",
                    at_message=item.id,
                    first=prepared.queued.first_message_id,
                    last=prepared.queued.last_message_id,
                )
            )
            if folds:
                service.worker.wake()
        if folds:
            await _settle(service, conv_id, clock)
    if folds:
        await _settle(service, conv_id, clock)
    return Fed(
        conv_id=conv_id,
        to_stored=to_stored,
        to_source=to_source,
        boundaries=boundaries if folds else forced,
        forced=forced,
        applied=applied,
    )


class RetryClock:
    """Fold retries on a virtual clock that advances a fixed time per user turn.

    Live, a failed fold is retried after 30 s, 2 min, 10 min, ... of wall-clock time while
    the user keeps talking. A replay takes milliseconds (or, on a slow model, minutes) per
    turn, so the real clock would make runs depend on the machine. Instead a failed job is
    parked far in the future and pulled back when the virtual time (`turn_seconds` per user
    turn) reaches its backoff: the same number of turns pass between attempts as live.
    """

    PARK = timedelta(days=365)

    def __init__(self, turn_seconds: float) -> None:
        self.turn_seconds = turn_seconds
        self.now = 0.0
        self.due: dict[int, float] = {}  # job id -> virtual time of its next attempt
        self.seen: dict[int, int] = {}  # job id -> attempts already scheduled

    def tick(self) -> None:
        self.now += self.turn_seconds

    def park_failures(self, store: Store, conv_id: int) -> None:
        """Jobs that just failed (pending again, attempts > 0): schedule them virtually."""
        for job in store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING,)):
            assert job.id is not None
            if job.attempts == 0 or self.seen.get(job.id) == job.attempts:
                continue
            self.seen[job.id] = job.attempts
            backoff = RETRY_BACKOFF_S[min(job.attempts, len(RETRY_BACKOFF_S)) - 1]
            self.due[job.id] = self.now + backoff
            store.fail_fold(job.id, job.last_error or "failed", utcnow() + self.PARK)

    def release_due(self, store: Store, conv_id: int) -> bool:
        released = False
        for job in store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING,)):
            assert job.id is not None
            if job.id in self.due and self.due[job.id] <= self.now:
                del self.due[job.id]
                store.fail_fold(job.id, job.last_error or "failed", utcnow())
                released = True
        return released


async def _settle(service: ChatService, conv_id: int, clock: RetryClock) -> None:
    """Run every fold that is due now; park the ones that fail until their virtual retry."""
    store = service.store
    if clock.release_due(store, conv_id):
        service.worker.wake()
    for _ in range(MAX_SETTLE_ROUNDS):
        due_now = [
            job
            for job in store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))
            if job.id not in clock.due
        ]
        if not due_now:
            return
        await service.worker.wait_idle()
        clock.park_failures(store, conv_id)
    log.warning("conversation %s: folds still due after %s rounds", conv_id, MAX_SETTLE_ROUNDS)


async def _semantic(store: Store, settings: Settings) -> SemanticRecall:
    """Semantic recall as the app opens it; the run stops when it is on and cannot be had (a
    run that measured words alone would otherwise pass for one that measured meaning)."""
    semantic = await asyncio.to_thread(SemanticRecall.from_settings, store, settings)
    if semantic.configured is not None and not semantic.active:
        await semantic.stop()
        raise DatasetError(
            f"semantic recall cannot be had: {semantic.problem} (--set semantic_recall=false "
            "measures recall by words alone)"
        )
    return semantic


async def _embedded(service: ChatService) -> None:
    """Wait until every replayed message has its vector (nothing to do without the model)."""
    if not service.semantic.active:
        return
    service.semantic.wake()
    await service.semantic.settled()
    counts = service.semantic.counts()
    if counts is not None and counts.pending:
        log.warning("%s replayed messages could not be embedded", counts.pending)


def _ranges(
    service: ChatService, conv_id: int, boundaries: list[int], to_source: dict[int, int]
) -> list[Range]:
    messages = list(service.store.iter_messages(conv_id, model_key=service.engine.model_key))
    sized = [(m.id, service.prompter.message_tokens(m)) for m in messages]
    return split_ranges(sized, boundaries, to_source)


def split_ranges(
    messages: Sequence[tuple[int, int]], boundaries: Sequence[int], to_source: dict[int, int]
) -> list[Range]:
    """Consecutive ranges ending at each fold point (stored ids), then the verbatim tail.

    `messages` are (stored id, tokens) in order. A fold point may repeat or come out of
    order (a job that failed for good is queued again over a longer range): only the distinct
    points count, in order, so ranges never overlap and together cover every message.
    """
    cuts = sorted(set(boundaries))
    ranges: list[Range] = []
    position = 0
    for cut in [*cuts, None]:
        chunk = []
        while position < len(messages) and (cut is None or messages[position][0] <= cut):
            chunk.append(messages[position])
            position += 1
        if not chunk:
            continue
        first, last = chunk[0][0], chunk[-1][0]
        ranges.append(
            Range(
                index=len(ranges),
                first_id=first,
                last_id=last,
                first_source=to_source.get(first, first),
                last_source=to_source.get(last, last),
                messages=len(chunk),
                tokens=sum(tokens for _id, tokens in chunk),
                folded=cut is not None,
            )
        )
    return ranges


def _in_source(events: list[FoldEvent], to_source: dict[int, int]) -> list[FoldEvent]:
    """Queued ranges in the input's own message ids, like everything else reported."""
    return [
        replace(
            e,
            first=None if e.first is None else to_source.get(e.first, e.first),
            last=None if e.last is None else to_source.get(e.last, e.last),
        )
        for e in events
    ]


def _record(event: ServiceEvent, events: list[FoldEvent]) -> None:
    if isinstance(event, FoldProgress) and event.state in (FoldState.LANDED, FoldState.FAILED):
        events.append(
            FoldEvent(
                state=event.state.value,
                kind=event.job.kind.value,
                detail=event.detail,
                seconds=round(event.elapsed_s, 3),
            )
        )
    elif isinstance(event, MemoryNotice):
        events.append(FoldEvent(state="notice", detail=event.text))
