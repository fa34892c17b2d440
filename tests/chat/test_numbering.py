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

import io
import re
from datetime import timedelta

from kotonia_tui.chat.events import FoldProgress, FoldState, ServiceEvent
from kotonia_tui.chat.numbering import numbered, told
from kotonia_tui.chat.prompting import memory_tokens
from kotonia_tui.cli import main
from kotonia_tui.cli.chat import _print_event
from kotonia_tui.domain import (
    Chapter,
    ChapterOrigin,
    FoldJob,
    FoldKind,
    LedgerKind,
    Message,
    Role,
    StoredMessage,
    utcnow,
)
from kotonia_tui.memory.assembly import MEMORY_TITLE
from kotonia_tui.memory.extract import extract_passages, message_passages
from kotonia_tui.tui.app import fold_status
from kotonia_tui.tui.widgets.inspector import fold_queue
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
    """What a memory text cites may be no message of the conversation: another
    conversation's (a story's "#5"), or one deleted since; those stay as they are."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, _messages = await _second_conversation(service, key)
    store = service.store
    assert store.cited_messages(conv_id, [5, 33, 34, 35, 10**6, 2**70]) == {
        33: (2, service.persona.name),
        34: (3, "Wren"),
        35: (4, service.persona.name),
    }
    store.delete_message(34)
    assert store.cited_messages(conv_id, [33, 34, 35]) == {
        33: (2, service.persona.name),
        35: (3, service.persona.name),
    }
    shown = numbered(store, conv_id, "#33-#34:\n#33-#35:\n- They met. (#5 #33 #34 #35)")
    assert shown == "#33-#34:\n#2-#3:\n- They met. (#5 #2 #34 #3)"


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
    queue_text = fold_queue(view, (major, 12.0), utcnow()).plain
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
