"""A conversation's memory reads with the numbers its chat shows, not the store's ids.

Seen under tmux: in a user's second conversation (store ids 337 onward), the inspector's
synopsis read "#337-#375, Friday, 19 October 2018: #337 Kyle: ..." for the messages the chat
and the recall block called #1-#39, and the reply model's prompt carried both numberings. Here
a second conversation in the same store (its ids are not its numbers) gets a quoted chapter, a
structured one citing its evidence and a ledger entry, stored as a fold stores them (with ids);
the inspector's view, `kotonia memory` and the turn's prompt show numbers, and the store keeps
the ids. Fake engine: only the store, the memory and the prompt count here.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
from datetime import timedelta

import pytest

from kotonia_tui.chat.events import FoldProgress, FoldState, RunningFold, ServiceEvent
from kotonia_tui.chat.numbering import NO_MESSAGES, numbered, told
from kotonia_tui.chat.prompting import memory_tokens
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.cli import main
from kotonia_tui.cli.chat import _print_event
from kotonia_tui.domain import (
    Chapter,
    ChapterOrigin,
    FoldJob,
    FoldKind,
    LedgerEnd,
    LedgerEnding,
    LedgerKind,
    Message,
    NewChapter,
    Role,
    StoredMessage,
    utcnow,
)
from kotonia_tui.engine import Slot
from kotonia_tui.memory.assembly import MEMORY_TITLE
from kotonia_tui.memory.extract import extract_passages, message_passages
from kotonia_tui.store import StoreError
from kotonia_tui.tui.app import fold_running_status, fold_status
from kotonia_tui.tui.screens.cast_memory import cast_memory_page
from kotonia_tui.tui.screens.dialogs import chapter_page, ledger_page
from kotonia_tui.tui.widgets.inspector import chapter_line, fold_queue, ledger_line
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.scripted_chapters import ledger_entry
from tests.settings import fake_settings

from .test_folding import CHAPTER, chat_until, fake_settings_for

IDS = list(range(32, 39))
LINES = (
    "My sister Mia lands on the 14th.",
    "Then we light the east lamp for her.",
    "I keep the key in my blue coat.",
    "Good. The coat hangs by the door.",
    "Where did the ferry go?",
    "It left at dawn for Halden.",
)


async def _second_conversation(service, key: str) -> tuple[int, list[StoredMessage]]:
    """A conversation after another one in the same store (each begins with the card's
    greeting): its messages' ids are 32-38, its numbers #1-#7."""
    card = service.library.get(key)
    setup = service.setup_for(card)
    user, char = service.persona.name, setup.display_name
    first = service.new_conversation(card)
    service.store.add_messages(
        first.id,
        [Message(role=Role.USER, speaker=user, text=f"Line {i}.") for i in range(30)],
    )
    conv = service.new_conversation(card)
    service.store.add_messages(
        conv.id,
        [
            Message(
                role=Role.USER if k % 2 == 0 else Role.CHARACTER,
                speaker=user if k % 2 == 0 else char,
                text=text,
            )
            for k, text in enumerate(LINES)
        ],
    )
    messages = service.store.messages_between(conv.id, 0, 10**9)
    assert [m.id for m in messages] == IDS  # ids are not numbers here
    return conv.id, messages


def _fold(service, conv_id: int, messages: list[StoredMessage]) -> None:
    """As a fold stores them: a chapter quoted from #1-#4, one that cites its evidence, and a
    ledger entry; every reference by store id."""
    a, b = messages[0].id, messages[3].id
    service.store.store_chapter(
        Chapter(
            conversation_id=conv_id,
            first_message_id=a,
            last_message_id=b,
            text=extract_passages(message_passages(messages[:4]), 400),
            note=f"quoted from messages #{a}-#{b}: the chronicler's chapter was empty",
            origin=ChapterOrigin.QUOTED,
        ),
        [
            ledger_entry(
                conv_id, LedgerKind.USER_FACT, "Ann's sister Mia lands on the 14th", messages[1].id
            )
        ],
    )
    service.store.store_chapter(
        Chapter(
            conversation_id=conv_id,
            first_message_id=messages[4].id,
            last_message_id=messages[6].id,
            text=f"- The ferry left at dawn for Halden. (#{messages[6].id})",
            story_time="Friday, 19 October 2018",
        ),
        [],
    )


def _says_ids(text: str) -> bool:
    return any(f"#{i}" in text for i in IDS)


async def test_a_second_conversations_memory_is_numbered_as_its_chat_numbers_it(
    make_fake_service, capsys
):
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, messages = await _second_conversation(service, key)
    _fold(service, conv_id, messages)
    user = service.persona.name

    # The inspector: the chapters' texts and note, the ranges.
    view = service.memory_view(conv_id)
    quoted, cited = (c.chapter for c in view.chapters)
    assert f"\n#2 {user}: My sister Mia lands on the 14th." in quoted.text
    assert quoted.text.startswith("#1 Wren: ") and not _says_ids(quoted.text)
    assert quoted.note == "quoted from messages #1-#4: the chronicler's chapter was empty"
    assert cited.text == "- The ferry left at dawn for Halden. (#7)"
    assert [view.number(i) for i in (quoted.first_message_id, cited.last_message_id)] == [
        "#1",
        "#7",
    ]
    # The store keeps the ids.
    stored = service.store.chapters(conv_id)
    assert stored[1].text == "- The ferry left at dawn for Halden. (#38)"

    # `kotonia memory`: the chapters as the inspector shows them.
    assert main(["--db", str(service.store.path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert "(quoted from messages #1-#4: the chronicler's chapter was empty)" in out
    assert f"    #2 {user}: My sister Mia" in out
    assert "    - The ferry left at dawn for Halden. (#7)" in out
    assert not _says_ids(out)

    # The turn's prompt: the memory block the engine got numbers what it cites, as the recall
    # block and the chat do, and it stays the same bytes on the next turn (the cached prefix).
    turn = await service.send(conv_id, "Is the lamp lit?")
    done = await turn.wait()
    assert done.error is None and turn.prepared.plan.apply_landed
    assert turn.prepared.request in service.engine.requests  # what the engine got
    memory = _memory_message(turn.prepared.request.messages)
    assert "#1-#4:\n#1 Wren: " in memory
    assert f"\n#2 {user}: My sister Mia lands on the 14th." in memory
    assert "#5-#7, Friday, 19 October 2018:\n- The ferry left at dawn for Halden. (#7)" in memory
    assert "Ann's sister Mia lands on the 14th (#2)" in memory
    assert not _says_ids(memory)
    state = service.store.memory_state(conv_id)
    assert "(#38)" in state.memory_text  # as stored: ids
    assert state.memory_tokens == memory_tokens(service.engine, memory)  # counted as sent
    again = await service.send(conv_id, "And the ferry?")
    assert (await again.wait()).error is None
    assert _memory_message(again.prepared.request.messages) == memory


def _memory_message(messages) -> str:
    (memory,) = [m.content for m in messages if m.content.startswith(MEMORY_TITLE)]
    return memory


async def test_only_the_conversations_own_messages_are_numbered(make_fake_service):
    """What a memory text cites may be no message of the conversation: one deleted since, or
    a "#5" of the story. Left as written, a deleted message's store id read as the number of
    another message ("#34" once 34 was deleted, beside #2 and #3): it is said in words, and a
    range is numbered by the messages left in it. The story's own ids stay as written: another
    conversation's message ("(#13)", "message #13"), "(#0)", an id never given out ("Room
    (#999999)"); with nothing deleted the text reads as it did before deleted messages were
    said in words, and it still does after a deletion. Message ids are never reused, so a
    deleted message is an id given out that no message has (`Store.deleted_messages`)."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, _messages = await _second_conversation(service, key)
    store = service.store
    user = service.persona.name
    assert store.message_places(conv_id, [5, 33, 34, 35, 10**6, 2**70]) == {
        5: (0, None),
        33: (2, user),
        34: (3, "Wren"),
        35: (4, user),
        10**6: (store.message_count(conv_id), None),  # every message is before it
    }
    # The story's ids, nothing deleted: 13 is the first conversation's (ids 1-31), 999999 and
    # 2**70 no message ever had, 0 none.
    story = (
        "- The vault. (#0)\n- The clue (#13); see message #13.\n- Room (#999999).\n"
        "- Then (#13-#20)."
    )
    assert store.deleted_messages([0, 5, 13, 33, 38, 39, 999999, 2**70]) == frozenset()
    assert numbered(store, conv_id, story) == story

    store.delete_message(34)
    assert store.message_places(conv_id, [33, 34, 35]) == {
        33: (2, user),
        34: (2, None),
        35: (3, user),
    }
    assert store.deleted_messages([5, 13, 33, 34, 35, 39, 999999]) == {34}
    # Every id asked is counted (a range is numbered from the count before its first).
    assert store.message_places(conv_id, [0, 5, 31, 32, 34, 35, 2**70]) == {
        0: (0, None),
        5: (0, None),
        31: (0, None),
        32: (1, "Wren"),
        34: (2, None),
        35: (3, user),
    }
    shown = numbered(store, conv_id, "#33-#34:\n#33-#35:\n- They met. (#33 #34 #35)")
    assert shown == "#2-#2:\n#2-#3:\n- They met. (#2 #3 and a deleted message)"
    assert numbered(store, conv_id, "#34-#34:\n- Gone. (#34)\nquoted from message #34") == (
        f"{NO_MESSAGES}:\n- Gone. (a deleted message)\nquoted from a deleted message"
    )
    # The story's ids stay as written beside a deleted message (a citation keeps what it does
    # not know as it is).
    assert numbered(store, conv_id, story) == story
    assert numbered(store, conv_id, "- They met. (#5 #33 #34)") == (
        "- They met. (#5 #2 and a deleted message)"
    )

    # Which conversation a deleted message was in is not kept: a story's id of a message
    # deleted from another conversation reads as deleted too (docs/memory-schema.md).
    store.delete_message(13)
    assert store.deleted_messages([13]) == {13}
    assert numbered(store, conv_id, "see message #13") == "see a deleted message"


async def test_a_real_fold_in_a_second_conversation_is_told_and_carried_in_numbers(
    make_fake_service,
):
    """The fold worker's own chapter (the chronicler cites its evidence by store id): what it
    says when it lands, and the prompt that carries it, number the messages."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    await _second_conversation(service, key)
    conv = service.new_conversation(service.library.get(key))  # ids from 39 on
    queued = await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
    await service.worker.wait_settled(conv.id)
    job = queued[-1].prepared.queued
    first, last = job.first_message_id, job.last_message_id
    numbers = service.store.message_numbers(conv.id, [first, last])
    assert (first, numbers[first]) == (39, 1)
    said = [e.detail for e in events if isinstance(e, FoldProgress) and e.state is FoldState.LANDED]
    assert said[0].startswith("chapter for messages #1-#")  # not #39-#...
    # The job itself, queued, running and landed: by its range in numbers, as the inspector
    # names it (the status line and `kotonia chat` show this label), not "fold #<job id>".
    told_of = [e for e in events if isinstance(e, FoldProgress) and e.job.id == job.id]
    assert [e.state for e in told_of][:3] == [FoldState.QUEUED, FoldState.RUNNING, FoldState.LANDED]
    assert {e.label for e in told_of} == {f"chapter #1-#{numbers[last]}"}
    chapters = service.store.chapters(conv.id)
    assert re.search(r"\(#(39|[4-9]\d)\)", chapters[0].text)  # stored: the chronicler's ids
    applying = await service.send(conv.id, "And then?")
    await applying.wait()
    assert applying.prepared.plan.apply_landed
    memory = _memory_message(applying.prepared.request.messages)
    for chapter in chapters:
        span = service.store.message_numbers(
            conv.id, [chapter.first_message_id, chapter.last_message_id]
        )
        assert f"\n#{span[chapter.first_message_id]}-#{span[chapter.last_message_id]}:" in memory
    cited = {int(n) for n in re.findall(r"#(\d+)", memory)}
    assert cited and max(cited) <= numbers[last]  # every reference is a number of #1-#last


async def test_a_second_conversations_fold_jobs_are_named_by_the_ranges_they_fold(
    make_fake_service,
):
    """A fold job was shown by its store id, in a shape that reads as a message number: the
    inspector's fold queue "#10 chapter #1–#4", the status line "fold #10 chapter landed",
    `kotonia chat` "fold chapter #10 landed". In a second conversation (its ids are not its
    numbers), with job ids past its numbers, each names the job by its kind and the range it
    folds as the chat numbers messages, with a hyphen as a chapter's range: "chapter #1-#4",
    "refold #5-#7", "major fold" (no range: it takes the oldest chapters when it runs); the
    rest of a range, queued from the id after a chapter's last, by the messages it holds.
    Fake engine: the jobs are queued for later, never run."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, messages = await _second_conversation(service, key)
    store = service.store
    later = utcnow() + timedelta(hours=1)
    # The user goes back to the first chat, then on with this one: ids 39-41 are the first
    # chat's, 42-44 this one's (#8-#10).
    other = store.get_message(1).conversation_id
    said = [Message(role=Role.USER, speaker="User", text=f"Back {i}.") for i in range(3)]
    assert store.add_messages(other, said) == [39, 40, 41]
    assert store.add_messages(conv_id, said) == [42, 43, 44]

    def queue(kind: FoldKind, first: int | None = None, last: int | None = None):
        job = FoldJob(
            conversation_id=conv_id,
            kind=kind,
            first_message_id=first,
            last_message_id=last,
            not_before=later,
        )
        return store.enqueue_fold(job)

    for k in range(12):  # done jobs first: the ones shown have ids past the numbers #1-#10
        store.finish_fold(queue(FoldKind.CHAPTER, messages[0].id, messages[0].id + k).id)
    chapter = queue(FoldKind.CHAPTER, messages[0].id, messages[3].id)
    # Queued from the id after a chapter of #1-#7 (38 + 1: the first chat's message).
    rest = queue(FoldKind.CHAPTER, messages[-1].id + 1, 44)
    refold = queue(FoldKind.REFOLD, messages[4].id, messages[6].id)
    refold = store.fail_fold(
        refold.id, f"the chapter holds nothing from messages #{messages[4].id}-#{messages[6].id}"
    )
    major = queue(FoldKind.MAJOR_GC)
    jobs = [chapter, rest, refold, major]
    assert min(j.id for j in jobs) > 10
    labels = ["chapter #1-#4", "chapter #8-#10", "refold #5-#7", "major fold"]

    # The inspector's fold queue (the major fold running).
    view = service.memory_view(conv_id)
    assert [view.job_label(j) for j in jobs] == labels
    queue_text = fold_queue(view, RunningFold(major, 12.0, view.job_label(major)), utcnow()).plain
    lines = queue_text.splitlines()
    assert lines[0] == "● running major fold  12 s"
    assert lines[1].startswith("○ queued chapter #1-#4  due in ")
    assert lines[2].startswith("○ queued chapter #8-#10  due in ")
    assert lines[3] == "✗ failed refold #5-#7  the chapter holds nothing from messages #5-#7"

    # What the service tells of each (chat/numbering.py `told`, as the worker and the
    # service send it): the status line's item and `kotonia chat`'s line.
    shown = [queue_text]
    for job, label in zip(jobs, labels, strict=True):
        event = told(store, FoldProgress(conv_id, job, FoldState.LANDED))
        assert event.label == label
        status = fold_status(event).plain
        assert status == f"● {label} landed: applied on the next turn"
        printed = io.StringIO()
        _print_event(event, printed)
        assert printed.getvalue() == f"fold: {label} landed\n"
        shown += [status, printed.getvalue()]
    text = "\n".join(shown)
    assert not any(f"#{j.id}" in text for j in jobs) and not _says_ids(text)
    assert not any(f"#{i}" in text for i in range(39, 45))
    assert "–" not in text  # a range has a hyphen, as a chapter's does


async def test_a_branch_numbers_its_memory_as_the_original_does(make_fake_service):
    """A branch copies the messages under new ids, and the chapters and the memory block with
    them: their texts cite the copies (a chapter's range already did), so the branch shows and
    sends the numbers the original does, and its prompt starts with the same bytes."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, messages = await _second_conversation(service, key)
    _fold(service, conv_id, messages)
    turn = await service.send(conv_id, "Is the lamp lit?")
    assert (await turn.wait()).error is None and turn.prepared.plan.apply_landed
    memory = _memory_message(turn.prepared.request.messages)

    branched = service.manager.branch(conv_id, turn.prepared.window[-1].id)
    new = branched.conversation.id
    assert branched.memory_shared
    copies = service.store.messages_between(new, 0, 10**9)
    assert copies[0].id > max(IDS)
    stored = service.store.chapters(new)
    # The copies cite the branch's own messages, as their ranges do.
    assert stored[1].text == f"- The ferry left at dawn for Halden. (#{copies[6].id})"
    assert stored[0].note == (
        f"quoted from messages #{copies[0].id}-#{copies[3].id}: the chronicler's chapter was empty"
    )
    assert not _says_ids(service.store.memory_state(new).memory_text)
    original, branch = service.memory_view(conv_id), service.memory_view(new)
    assert [c.chapter.text for c in branch.chapters] == [c.chapter.text for c in original.chapters]
    assert [c.chapter.note for c in branch.chapters] == [c.chapter.note for c in original.chapters]

    again = await service.send(new, "Meanwhile, in the other story...")
    assert (await again.wait()).error is None
    assert not again.prepared.plan.apply_landed  # the copied block, as the original's
    assert _memory_message(again.prepared.request.messages) == memory


# ---- a range whose first message was deleted --------------------------------------------------


def _chapter(conv_id: int, first: int, last: int, text: str) -> Chapter:
    return Chapter(conversation_id=conv_id, first_message_id=first, last_message_id=last, text=text)


async def _three_chapters(service, key: str) -> int:
    """The store's first conversation: the greeting and 11 lines, ids 1-12 (its numbers too),
    folded as a fold stores them into A (ids 1-5), B (6-10) and C (11-12). A writes a fact and
    a thread, B resolves the thread and writes a rule that cites two messages."""
    card = service.library.get(key)
    conv = service.new_conversation(card)
    user, char = service.persona.name, service.setup_for(card).display_name
    lines = [
        Message(
            role=Role.USER if k % 2 == 0 else Role.CHARACTER,
            speaker=user if k % 2 == 0 else char,
            text=f"Line {k + 2}.",
        )
        for k in range(11)
    ]
    store = service.store
    assert store.add_messages(conv.id, lines) == list(range(2, 13))
    assert [m.id for m in store.messages_between(conv.id, 0, 10**9)] == list(range(1, 13))
    fact = ledger_entry(conv.id, LedgerKind.USER_FACT, "Mia lands on the 14th", 2, subject=user)
    thread = ledger_entry(conv.id, LedgerKind.THREAD, "Whether the east lamp is lit", 3)
    store.store_chapter(_chapter(conv.id, 1, 5, "- They met. (#2)"), [fact, thread])
    (open_thread,) = store.ledger(conv.id)[1:]
    store.store_chapter(
        _chapter(conv.id, 6, 10, "- The lamp was lit. (#7)"),
        [ledger_entry(conv.id, LedgerKind.CONSTRAINT, "Ask before the ferry", 7, 9)],
        [LedgerEnding(open_thread.id, LedgerEnd.RESOLVED, "lit at dawn")],
    )
    store.store_chapter(_chapter(conv.id, 11, 12, "- The ferry left. (#12)"), [])
    return conv.id


async def test_a_range_whose_first_message_was_deleted_is_numbered_by_the_messages_left(
    make_fake_service, capsys
):
    """`Store.message_numbers` counts the messages up to an id, so a chapter whose first
    message was deleted was numbered from the message before it: with the conversation's very
    first message and B's first deleted, A (ids 1-5) read "#0-#4" and B (6-10) "#4-#8",
    overlapping A, in the inspector's Chapters and Ledger, a chapter's page and `kotonia
    memory`; a chapter whose every message was deleted "#8-#8"; a superseded chapter's entry
    "#0-#4 to #1-#4" for good. Each range is now numbered from the count before its first (as
    a fold job's): A is #1-#4 (ids 2-5), B #5-#8, and C (ids 11-12, both deleted) has no
    message left and says so in words. Fake engine, the worker paused (the refolds the
    deletions queue stay queued): only the store and the numbering count."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    service.worker.pause()
    conv_id = await _three_chapters(service, key)
    store = service.store
    for message_id in (1, 6, 11, 12):  # as a user deletes them: the chapters go stale
        service.delete_message(message_id)
    view = service.memory_view(conv_id)
    a, b, c = (v.chapter for v in view.chapters)
    assert [(x.first_message_id, x.last_message_id, x.stale) for x in (a, b, c)] == [
        (1, 5, True),
        (6, 10, True),
        (11, 12, True),
    ]

    # The inspector's Chapters, and a chapter's page.
    listed = [chapter_line(v, view, utcnow()).plain for v in view.chapters]
    assert listed[0].startswith("#1-#4 · ") and listed[1].startswith("#5-#8 · ")
    assert listed[2].startswith(f"{NO_MESSAGES} · ")
    pages = [chapter_page(x, service.chapter_source(x.id), True, view, 1) for x in (a, c)]
    assert pages[0].page_title == "Chapter #1-#4"
    assert pages[0].blocks[0].plain.startswith("messages #1-#4 (4 messages) · ")
    assert pages[1].page_title == f"Chapter {NO_MESSAGES}"
    assert pages[1].blocks[0].plain.startswith(f"messages {NO_MESSAGES} · ")

    # The inspector's Ledger: each entry's chapters by their ranges, its evidence numbered.
    ledger = {e.label[0]: ledger_line(e, view).plain for e in view.ledger}
    assert "user fact · #1 · from #1-#4 · next turn" in ledger["F"]
    assert "thread · #2 · #1-#4 to #5-#8, resolved" in ledger["T"]
    assert "rule · #5 #7 · from #5-#8" in ledger["C"]

    # `kotonia memory`, text and JSON.
    assert main(["--db", str(store.path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert "  Mia lands on the 14th  #1  from #1-#4  " in out
    assert "#2  from #1-#4 to #5-#8 (resolved)" in out
    assert "#5 #7  from #5-#8" in out
    assert "  chapter #1-#4 (prose)\n" in out and "  chapter #5-#8 (prose)\n" in out
    assert f"  chapter {NO_MESSAGES} (prose)\n" in out
    assert main(["--db", str(store.path), "memory", str(conv_id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [
        (ch["first_message_number"], ch["last_message_number"]) for ch in report["chapters"]
    ] == [(1, 4), (5, 8), (None, None)]
    assert [(e["valid_from_numbers"], e["valid_to_numbers"]) for e in report["ledger"]] == [
        ([1, 4], None),
        ([1, 4], [5, 8]),
        ([5, 8], None),
    ]

    # The refold lands (as a fold stores it, from the messages left): the entries A wrote end,
    # superseded, and still name A by its range.
    kept = store.messages_between(conv_id, 1, 5)
    store.store_refold([a.id], [NewChapter(_chapter(conv_id, kept[0].id, kept[-1].id, "Again."))])
    view = service.memory_view(conv_id)
    (fact,) = [e for e in view.ledger if e.kind is LedgerKind.USER_FACT]
    superseded = ledger_line(fact, view).plain
    assert "#1-#4 to #1-#4, superseded" in superseded
    assert main(["--db", str(store.path), "memory", str(conv_id)]) == 0
    after = capsys.readouterr().out
    assert "from #1-#4 to #1-#4 (superseded)" in after

    shown = "\n".join([*listed, *ledger.values(), superseded, out, after])
    shown += "\n".join(f"{p.page_title}\n{p.blocks[0].plain}" for p in pages)
    assert not re.search(r"#0(?![0-9])", shown)
    assert "#4-#8" not in shown and "#8-#8" not in shown  # B over A; C's non-range


async def test_a_refold_is_told_by_the_numbers_the_chat_shows_once_the_message_is_gone(
    make_fake_service,
):
    """A deletion's refold was told before the message was deleted, so by the numbers its
    range had with the message ("refold #1-#5 queued", then "refold #1-#4 running"); and the
    running job's label, read once when it started, kept numbers a later deletion changed
    (the status line shows it every second). Now the refold is told once the message is gone,
    and a deletion in the running job's conversation names it again. Fake engine: the
    chronicler's calls are held while the running job is looked at."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted(CHAPTER))
    service.engine.hold(lambda request: request.slot is Slot.FOLD)
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv_id = await _three_chapters(service, key)

    def told_of(state: FoldState) -> list[FoldProgress]:
        return [e for e in events if isinstance(e, FoldProgress) and e.state is state]

    service.delete_message(1)  # A (ids 1-5) keeps ids 2-5: #1-#4
    (queued,) = told_of(FoldState.QUEUED)
    assert fold_status(queued).plain == "◔ refold #1-#4 queued"
    printed = io.StringIO()
    _print_event(queued, printed)
    assert printed.getvalue() == "fold: refold #1-#4 queued: an edit inside a folded chapter\n"
    for _ in range(500):  # until the worker runs it (its chronicler call held)
        if service.worker.running is not None:
            break
        await asyncio.sleep(0.01)
    running_job = service.worker.running
    assert running_job is not None and running_job.label == "refold #1-#4"
    assert [e.label for e in told_of(FoldState.RUNNING)] == ["refold #1-#4"]

    # Another message of A goes while its refold runs: the same job, told and shown running
    # by the numbers left (ids 2, 4, 5).
    service.delete_message(3)
    assert fold_status(told_of(FoldState.QUEUED)[-1]).plain == "◔ refold #1-#3 queued"
    assert (running_job := service.worker.running) is not None
    assert running_job.label == "refold #1-#3"
    running = fold_queue(service.memory_view(conv_id), service.worker.running, utcnow())
    assert running.plain.splitlines()[0].startswith("● running refold #1-#3  ")

    # C (ids 11-12; #9-#10 now) loses one message, then the other: its refold says what is
    # left.
    service.delete_message(11)
    service.delete_message(12)
    assert [fold_status(e).plain for e in told_of(FoldState.QUEUED)[-2:]] == [
        "◔ refold #9-#9 queued",
        f"◔ refold {NO_MESSAGES} queued",
    ]
    said = "\n".join(fold_status(e).plain for e in events if isinstance(e, FoldProgress))
    # Never the numbers a range had before its message went, nor "#0".
    assert not re.search(r"#1-#5|#9-#10|#0(?![0-9])", said)

    service.engine.release()
    await service.worker.wait_settled(conv_id)
    landed = [e.label for e in told_of(FoldState.LANDED)]
    assert landed[0] == "refold #1-#3"


async def test_a_job_that_runs_before_the_inspector_reads_it_is_shown_by_its_range(
    make_fake_service,
):
    """The inspector's fold queue named the running job from the numbers its view was read
    with, and a job queued after that read (the rest of a range too large for one call is
    queued with no event; it starts as the chapter before it lands) is in none of them: the
    line read "● running chapter  0 s", the kind alone, until the next refresh. The label the
    worker read when the job started (`RunningFold.label`) names it in the inspector and on
    the status line, which read no store on their one-second tick. Fake engine: the
    chronicler's call is held while the job runs."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted(CHAPTER))
    service.engine.hold(lambda request: request.slot is Slot.FOLD)
    conv_id, messages = await _second_conversation(service, key)
    view = service.memory_view(conv_id)  # before the job is queued
    assert view.fold_jobs == [] and view.running is None
    service.store.enqueue_fold(
        FoldJob(
            conversation_id=conv_id,
            kind=FoldKind.CHAPTER,
            first_message_id=messages[0].id,
            last_message_id=messages[3].id,
        )
    )
    service.worker.wake()
    for _ in range(500):  # until the worker runs it (its chronicler call held)
        if service.worker.running is not None:
            break
        await asyncio.sleep(0.01)
    running = service.worker.running
    assert running is not None

    # What the inspector's tick paints with the view it has, and the status line's item.
    line = fold_queue(view, running, utcnow()).plain.splitlines()[0]
    assert re.fullmatch(r"● running chapter #1-#4  \d+ s", line), line
    status = fold_running_status(running).plain
    assert re.fullmatch(r"◑ chapter #1-#4 running \d+ s", status), status
    assert not any(f"#{i}" in line + status for i in IDS)  # never by store ids

    service.engine.release()
    await service.worker.wait_settled(conv_id)


async def test_a_fold_the_store_cannot_number_is_told_by_its_kind(make_fake_service, monkeypatch):
    """The service named a fold job bare (the worker guarded it): a store read that failed
    while numbering the job's range failed the turn that queued it, or stopped a deletion
    half-way (its chapter stale and a refold queued, the message not deleted, nothing to
    undo). Now the event goes out with the job's kind alone, as the worker's does, and the
    turn and the deletion go through. Fake engine: only the service's steps count."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    service.worker.pause()
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    store = service.store
    reads = store.message_numbers

    def numbers(conv_id: int, ids):
        # The read that names a fold job's range fails (a damaged page, a locked file).
        if sys._getframe(1).f_code.co_name == "job_numbers":
            raise StoreError("database disk image is malformed")
        return reads(conv_id, ids)

    monkeypatch.setattr(store, "message_numbers", numbers)

    def queued() -> list[str]:
        return [
            fold_status(e).plain
            for e in events
            if isinstance(e, FoldProgress) and e.state is FoldState.QUEUED
        ]

    conv_id = await _three_chapters(service, key)
    service.delete_message(3)
    assert queued() == ["◔ refold queued"]
    assert 3 not in [m.id for m in store.messages_between(conv_id, 0, 10**9)]
    assert service.can_undo_delete(conv_id)

    conv = service.new_conversation(service.library.get(key))
    await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
    assert queued()[-1] == "◔ chapter queued"  # and the turn went through (chat_until)


async def test_a_deletion_that_fails_keeps_the_message_and_tells_no_refold(
    make_fake_service, monkeypatch
):
    """The refold is told after the deletion, but still stored before it: a deletion the store
    refuses leaves the message where it was, its chapter stale with a refold queued (folded
    again as it is: nothing lost), and says nothing of a refold yet (the worker tells it when
    it runs). Fake engine, the worker paused."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    service.worker.pause()
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv_id = await _three_chapters(service, key)
    store = service.store

    def refused(_message_id: int) -> None:
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "delete_message", refused)
    with pytest.raises(StoreError):
        service.delete_message(6)
    assert 6 in [m.id for m in store.messages_between(conv_id, 0, 10**9)]
    assert not service.can_undo_delete(conv_id)
    assert [(j.kind, j.first_message_id) for j in service.open_folds(conv_id)] == [
        (FoldKind.REFOLD, 6)
    ]
    assert not [e for e in events if isinstance(e, FoldProgress)]


# ---- evidence that cites a deleted message ----------------------------------------------------


def _evidence_pages(service, conv_id: int) -> tuple[list[str], list[str], list[str]]:
    """The inspector's Ledger lines, each entry's page and the by-speaker page, as the chat
    screen builds them (tui/screens/chat_inspector.py: the numbers of the messages still
    stored, `ConversationReader.cited_numbers`)."""
    reader = ConversationReader(service.store, service.library)
    view = service.memory_view(conv_id)
    lines = [ledger_line(e, view).plain for e in view.ledger]
    pages = [
        "\n".join(
            b.plain
            for b in ledger_page(
                e, service.ledger_evidence(e), reader.cited_numbers(conv_id, e.evidence), view
            ).blocks
        )
        for e in view.ledger
    ]
    memory = service.groups.memory(conv_id)
    ids = sorted({i for s in memory.speakers for it in (*s.said, *s.about) for i in it.evidence})
    by_speaker = [
        b.plain for b in cast_memory_page(memory, reader.cited_numbers(conv_id, ids)).blocks
    ]
    return lines, pages, by_speaker


async def test_evidence_that_cites_a_deleted_message_says_so_in_words(make_fake_service, capsys):
    """A ledger entry's evidence was numbered with `Store.message_numbers`, which counts the
    messages up to an id whether or not it is still stored: an entry citing #2 and #4 read
    "#2 #3" once #4 was deleted (#3 another message), in the inspector's Ledger, the
    by-speaker page and `kotonia memory`. A deleted one is now said in words, the message left
    keeps its number, and `--json` keeps the ids with a null number. A second conversation (its
    ids 32-38 are not its numbers); fake engine, the worker paused (the refold the deletion
    queues stays queued): only the store and the numbering count."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    service.worker.pause()
    conv_id, messages = await _second_conversation(service, key)
    store, user = service.store, service.persona.name
    kept, gone = messages[1].id, messages[3].id  # #2 and #4, both the user's lines
    store.store_chapter(
        _chapter(conv_id, messages[0].id, messages[4].id, "- They met."),
        [ledger_entry(conv_id, LedgerKind.USER_FACT, "Mia lands on the 14th", kept, gone)],
    )
    lines, pages, by_speaker = _evidence_pages(service, conv_id)
    assert "user fact · #2 #4 · from #1-#5" in lines[0]
    assert "Evidence · #2 #4\n#2 " in pages[0] and "\n#4 " in pages[0]

    service.delete_message(gone)
    lines, pages, by_speaker = _evidence_pages(service, conv_id)
    # The inspector's Ledger line and the entry's page: #2 by its number, #4 in words.
    assert "user fact · #2 and a deleted message · from #1-#4" in lines[0]
    assert "Evidence · #2 and a deleted message\n#2 " in pages[0]
    assert f"#2 {user}\nMy sister Mia lands on the 14th." in pages[0]
    # The by-speaker page: the item rests on the user's line left.
    assert any("user fact · #2 and a deleted message · from #1-#4" in b for b in by_speaker)

    # `kotonia memory`: text, and JSON with the ids kept and a null number for the deleted one.
    assert main(["--db", str(store.path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert "  Mia lands on the 14th  #2 and a deleted message  from #1-#4" in out
    assert main(["--db", str(store.path), "memory", str(conv_id), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["ledger"]
    assert (entry["evidence"], entry["evidence_numbers"]) == ([kept, gone], [2, None])

    shown = "\n".join([*lines, *pages, *by_speaker, out])
    assert "#2 #3" not in shown and not _says_ids(shown)


async def test_evidence_that_cites_a_deleted_first_message_is_never_numbered_0(
    make_fake_service, capsys
):
    """Evidence citing the conversation's first message read "#0" once it was deleted (no
    message is stored up to its id); two deleted read "#0 #0". They are said in words, and
    `--json` gives null numbers. Fake engine, the worker paused."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    service.worker.pause()
    conv_id, messages = await _second_conversation(service, key)
    store = service.store
    first, second = messages[0].id, messages[1].id
    store.store_chapter(
        _chapter(conv_id, first, messages[4].id, "- They met."),
        [
            ledger_entry(conv_id, LedgerKind.USER_FACT, "Wren keeps the lamp", first),
            ledger_entry(conv_id, LedgerKind.DECISION, "They wait for Mia", first, second),
        ],
    )
    service.delete_message(first)
    service.delete_message(second)
    lines, pages, _by_speaker = _evidence_pages(service, conv_id)
    by_text = {
        e.text: line for e, line in zip(service.memory_view(conv_id).ledger, lines, strict=True)
    }
    assert "user fact · a deleted message · from #1-#3" in by_text["Wren keeps the lamp"]
    assert "decision · 2 deleted messages · from #1-#3" in by_text["They wait for Mia"]
    assert any("Evidence · a deleted message" in p for p in pages)
    assert any("Evidence · 2 deleted messages" in p for p in pages)

    assert main(["--db", str(store.path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert "  Wren keeps the lamp  a deleted message  from #1-#3" in out
    assert "  They wait for Mia  2 deleted messages  from #1-#3" in out
    assert main(["--db", str(store.path), "memory", str(conv_id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(e["evidence_numbers"] for e in report["ledger"]) == [[None], [None, None]]

    shown = "\n".join([*lines, *pages, out])
    assert not re.search(r"#0(?![0-9])", shown) and not _says_ids(shown)


# ---- a memory text that cites a deleted message -----------------------------------------------


async def _cited_chapters(service, key: str) -> int:
    """The store's first conversation: the greeting and 11 lines, ids 1-12 (its numbers too,
    until a message is deleted), folded as a fold stores them: A (1-5) quoted, B (6-10) with
    items citing their evidence, C (11-12); a user fact resting on #2, a rule on #6 and #9."""
    card = service.library.get(key)
    conv = service.new_conversation(card)
    user, char = service.persona.name, service.setup_for(card).display_name
    texts = ["My sister Mia lands on the 14th.", "She will like the lamp.", "Then we wait."]
    lines = [
        Message(
            role=Role.USER if k % 2 == 0 else Role.CHARACTER,
            speaker=user if k % 2 == 0 else char,
            text=texts[k] if k < len(texts) else f"Line {k + 2}.",
        )
        for k in range(11)
    ]
    store = service.store
    assert store.add_messages(conv.id, lines) == list(range(2, 13))
    messages = store.messages_between(conv.id, 1, 5)
    store.store_chapter(
        Chapter(
            conversation_id=conv.id,
            first_message_id=1,
            last_message_id=5,
            text=extract_passages(message_passages(messages), 600),
            note="quoted from messages #1-#5: the chronicler's chapter was empty",
            origin=ChapterOrigin.QUOTED,
        ),
        [ledger_entry(conv.id, LedgerKind.USER_FACT, "Mia lands on the 14th", 2, subject=user)],
    )
    store.store_chapter(
        _chapter(conv.id, 6, 10, "- The lamp was lit. (#6 #7)\n- They waited by the door. (#6)"),
        [ledger_entry(conv.id, LedgerKind.CONSTRAINT, "Ask before the ferry", 6, 9)],
    )
    store.store_chapter(_chapter(conv.id, 11, 12, "- The ferry left. (#12)"), [])
    return conv.id


async def test_a_memory_text_citing_a_deleted_message_says_so_in_words(make_fake_service, capsys):
    """A memory text's references were numbered only for the messages found, and an id the
    numbering could not find (a message the player deleted) was left as written: in the first
    conversation (ids were its numbers) with messages #2 and #6 deleted, the prompt's memory
    block read "- The lamp was lit. (#6 #5)" (store id 6, then message 7 now numbered #5),
    "They waited by the door. (#6)" (the old #7), "#2 Ann: My sister..." (the old #3's number),
    "Ask before the ferry (#6 #7)" and B's heading "#6-#10" (over C's first message). The
    inspector, `kotonia memory` and a branch read the same. A deleted message is now said in
    words in every memory text, as the ledger's evidence is, a range is numbered by the messages
    left in it, and the block stays the same bytes from one turn to the next. Fake engine, the
    worker paused after the memory is applied (the refolds the deletions queue stay queued, as
    a failed or waiting refold leaves them): only the store and the numbering count."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id = await _cited_chapters(service, key)
    store, user = service.store, service.persona.name
    turn = await service.send(conv_id, "Is the lamp lit?")
    assert (await turn.wait()).error is None and turn.prepared.plan.apply_landed
    before = _memory_message(turn.prepared.request.messages)
    assert "#6-#10:\n- The lamp was lit. (#6 #7)\n- They waited by the door. (#6)" in before
    assert f"\n#2 {user}: My sister Mia lands on the 14th." in before

    service.worker.pause()
    service.delete_message(2)
    service.delete_message(6)
    turn = await service.send(conv_id, "And the ferry?")
    assert (await turn.wait()).error is None and not turn.prepared.plan.apply_landed
    memory = _memory_message(turn.prepared.request.messages)
    # A (ids 1-5): #1-#4, its quoted line of the deleted #2 by its speaker, not by a number.
    assert "#1-#4:\n#1 Wren: Welcome to the lighthouse." in memory
    assert f"\n(a deleted message) {user}: My sister Mia lands on the 14th." in memory
    assert "\n#2 Wren: She will like the lamp." in memory
    # B (ids 6-10): from the message after the deleted first, #5-#8.
    assert (
        "#5-#8:\n- The lamp was lit. (#5 and a deleted message)\n"
        "- They waited by the door. (a deleted message)\n"
    ) in memory
    assert "#9-#10:\n- The ferry left. (#10)" in memory
    assert "Mia lands on the 14th (a deleted message)" in memory
    assert "Ask before the ferry (#7 and a deleted message)" in memory
    # Every number in it is one of the ten messages left in #1-#10 (the turns' messages are
    # #11 on), and no citation names a message twice.
    assert max(int(n) for n in re.findall(r"#(\d+)", memory)) <= 10
    assert not re.search(r"\(#(\d+) #\1\)", memory)
    # As stored: ids, unchanged (a refold or undo reads them again).
    assert "(#6 #7)" in store.memory_state(conv_id).memory_text
    # Its count is of what is sent (a deleted message in words is longer than its number):
    # counted again as read, used by the turn's plan and stored.
    counted = memory_tokens(service.engine, memory)
    assert counted != memory_tokens(service.engine, before)
    assert turn.prepared.plan.memory_tokens == counted
    assert store.memory_state(conv_id).memory_tokens == counted
    # The cached prefix: the same bytes on the next turn, nothing deleted meanwhile; its count
    # agrees with the stored one, so the turn writes no memory state.
    written = store.memory_state(conv_id).updated_at
    again = await service.send(conv_id, "Good.")
    assert (await again.wait()).error is None
    assert _memory_message(again.prepared.request.messages) == memory
    assert again.prepared.plan.memory_tokens == counted
    assert store.memory_state(conv_id).updated_at == written

    # The inspector: the chapters' texts and notes, their ranges, the ledger's evidence.
    view = service.memory_view(conv_id)
    a, b, c = (v.chapter for v in view.chapters)
    assert f"\n(a deleted message) {user}: My sister Mia" in a.text
    assert a.note == "quoted from messages #1-#4: the chronicler's chapter was empty"
    assert b.text == "- The lamp was lit. (#5 and a deleted message)\n" + (
        "- They waited by the door. (a deleted message)"
    )
    assert c.text == "- The ferry left. (#10)"
    listed = [chapter_line(v, view, utcnow()).plain for v in view.chapters]
    assert [line.split()[0] for line in listed] == ["#1-#4", "#5-#8", "#9-#10"]
    ledger = {e.label[0]: ledger_line(e, view).plain for e in view.ledger}
    assert "user fact · a deleted message · from #1-#4" in ledger["F"]
    assert "rule · #7 and a deleted message · from #5-#8" in ledger["C"]
    page = chapter_page(b, service.chapter_source(b.id), True, view, 1)
    assert "(#5 and a deleted message)" in "\n".join(x.plain for x in page.blocks)

    # `kotonia memory`: the same, text and JSON; the memory block is the prompt's.
    assert main(["--db", str(store.path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert "    - The lamp was lit. (#5 and a deleted message)\n" in out
    assert "    - They waited by the door. (a deleted message)\n" in out
    assert f"    (a deleted message) {user}: My sister Mia lands on the 14th." in out
    assert "(quoted from messages #1-#4: the chronicler's chapter was empty)" in out
    assert main(["--db", str(store.path), "memory", str(conv_id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["memory_text"] == memory
    assert [ch["text"] for ch in report["chapters"]][1:] == [b.text, c.text]

    # A branch: the deleted #2 keeps its id in the copies (no copy of it), #6 ends B's range
    # and gets one no message took; both read as deleted there too, and the branch's prompt
    # starts with the same bytes.
    last = store.messages_between(conv_id, 0, 10**9)[-1].id
    branched = service.manager.branch(conv_id, last)
    assert branched.memory_shared
    new = branched.conversation.id
    assert [v.chapter.text for v in service.memory_view(new).chapters] == [a.text, b.text, c.text]
    turn = await service.send(new, "Meanwhile, in the other story...")
    assert (await turn.wait()).error is None and not turn.prepared.plan.apply_landed
    assert _memory_message(turn.prepared.request.messages) == memory

    # Undone, the message is numbered again (and the rest after it move down).
    assert service.undo_delete_message(conv_id) is not None  # #6 back
    shown = numbered(store, conv_id, store.memory_state(conv_id).memory_text)
    assert "#5-#9:\n- The lamp was lit. (#5 #6)\n- They waited by the door. (#5)" in shown
    assert f"\n(a deleted message) {user}: My sister" in shown
