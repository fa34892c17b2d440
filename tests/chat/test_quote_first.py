"""A turn never waits on memory (issue 30): what it would cut is quoted at once (code only),
and the chronicler's chapters replace the quotes in the background (chat/fold/quote_first.py).

Real SQLite, the real fold worker and service, on the fake engine (tests/fake_engine.py): these
tests are about which model calls a turn waits for and what the memory carries, which do not
depend on the model. The chronicler is held (`FakeEngine.hold`) while the turns run, so a turn
that waited for one of its calls would never end; what it would have waited for is read from
`fold_wait_ms`, the FoldWait events and the calls the engine was asked for.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from kotonia_tui.chat.events import FoldProgress, FoldState, FoldWait
from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import QUOTED_FIRST_LEAD, FoldKind, FoldStatus
from kotonia_tui.engine import GenerationRequest, Slot
from tests.cards import write_short_card
from tests.fake_engine import FakeEngine, scripted

from .test_folding import CHAPTER, chat_until, fake_settings_for
from .test_small_windows import events_of

PLACES = ["harbour", "chapel", "orchard", "quarry", "mill", "ferry", "bakery", "tower"]


def _long_chat(path: Path, messages: int) -> Path:
    """A SillyTavern chat of `messages` lines between Ann and Wren, each naming a place and a
    number of its own, ending with Ann's line."""
    lines: list[dict[str, object]] = [
        {"user_name": "Ann", "character_name": "Wren", "create_date": "2026-01-01@10h00m00s"}
    ]
    for index in range(messages):
        place = PLACES[index % len(PLACES)]
        user = index % 2 == (messages - 1) % 2  # the last line is Ann's
        text = (
            f"Ann asks about the {place} and lantern number {index}: who keeps it now?"
            if user
            else f"Wren says the {place} keeps lantern number {index} lit in every storm."
        )
        lines.append({"name": "Ann" if user else "Wren", "is_user": user, "mes": text})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


WREN_LINE = re.compile(r"Wren says the \w+ keeps lantern number \d+ lit in every storm\.")


def _from_the_source(request: GenerationRequest) -> str:
    """A chronicler that writes Wren's lines from the messages it reads (so its chapters hold
    something from their range); a chat reply that says one line."""
    if request.slot is not Slot.FOLD:
        return CHAPTER
    prompt = "\n".join(m.content for m in request.messages if isinstance(m.content, str))
    found = WREN_LINE.findall(prompt)
    return " ".join(found[:3]) if found else CHAPTER


def _fold_calls(engine: FakeEngine) -> list[GenerationRequest]:
    return [r for r in engine.requests if r.slot is Slot.FOLD]


def _held(service: ChatService) -> FakeEngine:
    """The service's fake engine, its chronicler held: no fold call ends until released."""
    engine = service.engine
    assert isinstance(engine, FakeEngine)
    engine.hold(lambda request: request.slot is Slot.FOLD)
    return engine


async def test_a_long_imported_chat_answers_its_first_turn_without_waiting_for_the_backlog(
    make_fake_service, tmp_path
):
    """300 imported messages at n_ctx 2048: the first turn is answered while every chronicler
    call is held; the backlog is quoted in the memory (chapters and a quoted synopsis), and the
    chronicler's chapters land later, replacing the quotes."""
    write_short_card()
    service = await make_fake_service(fake_settings_for(fold_delay_s=0), _from_the_source)
    engine = _held(service)
    imported = service.manager.import_file(_long_chat(tmp_path / "long.jsonl", 300))
    conv_id = imported.conversation.id
    events = events_of(service)

    turn = await service.answer(conv_id)
    done = await turn.wait()

    assert done.error is None and done.reply is not None
    assert turn.prepared.fold_wait_ms == 0.0
    assert not [e for e in events if isinstance(e, FoldWait)]
    chapters = service.store.chapters(conv_id, include_in_synopsis=True)
    assert chapters and all(c.quoted and c.stale for c in chapters)
    # What does not fit the window is carried at once: quoted chapters from the first
    # message on, and the oldest of them quoted into the synopsis.
    assert (
        min(c.first_message_id for c in chapters)
        == service.store.messages_between(conv_id, 0, 10**9)[0].id
    )
    synopsis = service.store.current_synopsis(conv_id)
    assert synopsis is not None and synopsis.text.startswith(QUOTED_FIRST_LEAD)
    assert synopsis.stale  # the chronicler rebuilds it
    memory = turn.prepared.history[1].content  # the memory exchange at the head
    assert QUOTED_FIRST_LEAD in memory
    stats = turn.stats()
    assert stats is not None and stats["fold_applied"] is True
    assert stats["forced_cut"] is False

    # The chronicler's chapters land later, in the background, in place of the quotes.
    engine.release()
    await service.worker.wait_settled(conv_id)
    written = [c for c in service.store.chapters(conv_id, include_in_synopsis=True)]
    assert written and not [c for c in written if c.quoted]
    assert _fold_calls(engine)
    current = service.store.current_synopsis(conv_id)
    assert current is not None and not current.stale
    assert not current.text.startswith(QUOTED_FIRST_LEAD)
    after = await service.send(conv_id, "Who keeps the harbour lantern now?")
    assert (await after.wait()).error is None
    assert after.prepared.plan.apply_landed


async def test_a_fast_typist_at_the_ceiling_never_waits_for_a_chronicler_call(make_fake_service):
    """Turns sent one after another with the chronicler held: each turn at the ceiling quotes
    the range it would cut instead of waiting for its chapter; no forced cut, no wait, and the
    chronicler's chapters replace the quotes once it runs."""
    write_short_card()
    service = await make_fake_service(fake_settings_for(fold_delay_s=0), scripted(CHAPTER))
    conv_id = service.new_conversation(service.library.cards[0]).id
    engine = _held(service)
    events = events_of(service)

    def quoted_twice(_turn: object) -> bool:
        return len(service.store.chapters(conv_id, include_in_synopsis=True)) >= 2

    turns = await chat_until(service, conv_id, quoted_twice)
    more = itertools.count(1)
    turns += await chat_until(service, conv_id, lambda _turn: next(more) == 10)

    assert not [t for t in turns if t.prepared.plan.forced_cut_through is not None]
    assert service.store.memory_state(conv_id).forced_cuts == 0
    assert [t.prepared.fold_wait_ms for t in turns] == [0.0] * len(turns)
    assert not [e for e in events if isinstance(e, FoldWait)]
    assert [t for t in turns if t.prepared.plan.apply_landed]
    quoted = service.store.chapters(conv_id, include_in_synopsis=True)
    assert quoted and all(c.quoted and c.stale for c in quoted)
    # The chapter jobs the quotes cover (the first was running, its call held) are done by
    # their quotes: stopped, never failed, never run again. A later range's job stays open.
    covered = max(c.last_message_id for c in quoted)
    chapter_jobs = [
        j
        for j in service.store.fold_jobs(conv_id)
        if j.kind is FoldKind.CHAPTER and (j.last_message_id or 0) <= covered
    ]
    assert chapter_jobs and all(j.status is FoldStatus.DONE for j in chapter_jobs)
    assert not [e for e in events if isinstance(e, FoldProgress) and e.state is FoldState.FAILED]
    refolds = [j for j in service.open_folds(conv_id) if j.kind is FoldKind.REFOLD]
    assert {(j.first_message_id, j.last_message_id) for j in refolds} >= {
        (c.first_message_id, c.last_message_id) for c in quoted if not c.in_synopsis
    }

    engine.release()
    await service.worker.wait_settled(conv_id)
    live = service.store.chapters(conv_id)
    assert live and not [c for c in live if c.quoted]
    after = await service.send(conv_id, "And the lamps?")
    assert (await after.wait()).error is None
    assert after.prepared.plan.apply_landed
