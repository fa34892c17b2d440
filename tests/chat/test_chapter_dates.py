"""A chapter carries the in-story time of its range: the dates the conversation's scene openings
gave, when the chronicler gave none or a vaguer one; a synopsis that quotes the chapters keeps
their times.

Fake engine (tests/fake_engine.py) answering a given chapter JSON, on the real fold worker and a
real SQLite file: what is tested is which time the stored chapter, and so the memory the next
prompt carries, says, which does not depend on the model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kotonia_tui.chat.fold.quote_first import quote_major_fold
from kotonia_tui.domain import (
    QUOTED_FIRST_LEAD,
    QUOTED_SYNOPSIS_LEAD,
    Chapter,
    ChapterOrigin,
    Conversation,
    FoldJob,
    FoldKind,
    Message,
    Role,
    Synopsis,
    SynopsisOrigin,
)
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.memory.chronicler import chapter_heading
from kotonia_tui.store import Store
from tests.cards import write_short_card
from tests.chat.test_folding import fake_settings_for
from tests.chat.test_structured_folding import chapter_job, fold
from tests.fake_engine import scripted

# Two scenes: the first opened before the range that is folded, the second inside it.
LINES = [
    (Role.USER, "*Friday, 19 October 2018, evening.* Someone took the brass key."),
    (Role.CHARACTER, "Then we look for it."),
    (Role.USER, "Can you look in the tower?"),
    (Role.CHARACTER, "I will look for it in the tower."),
    (Role.USER, "*Saturday, 20 October 2018.* Where is the key now?"),
    (Role.CHARACTER, "I had it all along, in my coat."),
]


EVENTS = {
    6: "Wren said the key was in his coat all along.",
    4: "Wren said he will look for it in the tower.",
}


def answer_with(time: str | None, event: int = 6) -> str:
    """A chapter answer as the schema spells it, an event citing message `event`, with `time`
    as its "When:" (None: none)."""
    when = "" if time is None else f',"time":"{time}"'
    return (
        f'{{"events":[{{"event":"{EVENTS[event]}","ids":[{event}]}}],'
        '"user_facts":[],"rules": [],"open_threads" : [],"resolved" :[ ]' + when + "}"
    )


def seeded(tmp_path: Path) -> tuple[Store, int]:
    store = Store.open(tmp_path / "kotonia.sqlite3")
    conv = store.create_conversation(
        Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
    )
    messages = [
        Message(role=role, speaker="Ann" if role is Role.USER else "Wren", text=text)
        for role, text in LINES
    ]
    store.add_messages(conv.id, messages)
    return store, conv.id


SPAN = "Friday, 19 October 2018 to Saturday, 20 October 2018"


@pytest.mark.parametrize(
    ("chronicled", "stored"),
    [
        (None, SPAN),  # the chronicler gave no time
        ("that evening", SPAN),  # vaguer than the dates the conversation wrote
        ("Saturday", SPAN),  # a weekday where the range has full dates
        ("Saturday, 20 October 2018, dawn", SPAN),  # only part of the range
        ("3 May 1999", SPAN),  # a date the conversation does not write here
    ],
)
def test_a_chapter_takes_its_ranges_scene_dates_unless_the_chronicler_names_them(
    tmp_path: Path, chronicled: str | None, stored: str
) -> None:
    store, conv_id = seeded(tmp_path)
    # Messages 3-6: the range starts inside Friday's scene (opened at message 1).
    asyncio.run(fold(store, answer_with(chronicled), chapter_job(conv_id, 3, 6)))
    (chapter,) = store.chapters(conv_id)
    assert chapter.origin is not ChapterOrigin.QUOTED
    assert chapter.story_time == stored
    # What the memory block says of it.
    assert f"in-story time: {stored}" in chapter_heading(chapter)
    store.close()


@pytest.mark.parametrize(
    ("chronicled", "stored"),
    [
        (None, "Friday, 19 October 2018"),
        ("late evening", "Friday, 19 October 2018"),
        # The range's date in full, and more: the chronicler's stays.
        ("Friday, 19 October 2018, dusk", "Friday, 19 October 2018, dusk"),
        # A speaker's line is no time even where it names the range's date (D-51).
        ("Wren says: Friday, 19 October 2018", "Friday, 19 October 2018"),
        # The model's own "…", under the time's limit: a whole time, kept without the mark.
        ("Friday, 19 October 2018, late…", "Friday, 19 October 2018, late"),
    ],
)
def test_a_range_inside_one_scene_is_dated_by_the_opening_before_it(
    tmp_path: Path, chronicled: str | None, stored: str
) -> None:
    store, conv_id = seeded(tmp_path)
    asyncio.run(fold(store, answer_with(chronicled, event=4), chapter_job(conv_id, 2, 4)))
    (chapter,) = store.chapters(conv_id)
    assert chapter.origin is not ChapterOrigin.QUOTED
    assert chapter.story_time == stored
    store.close()


def test_a_chapter_quoted_from_its_range_is_dated_too(tmp_path: Path) -> None:
    store, conv_id = seeded(tmp_path)
    asyncio.run(fold(store, "", chapter_job(conv_id, 3, 6)))  # an empty answer: quoted
    (chapter,) = store.chapters(conv_id)
    assert chapter.origin is ChapterOrigin.QUOTED
    assert chapter.story_time == SPAN
    store.close()


@pytest.mark.parametrize(
    ("chronicled", "stored"),
    [
        ("dawn", "dawn"),
        (None, None),
        # A speaker's line in "When:" is no time (D-51), in any language it is a time.
        ("Wren: see you tonight", None),
        ("Ann says: hurry", None),
        ("Am nächsten Morgen", "Am nächsten Morgen"),
        # The model's own "…": kept without it, as a stored "…" reads as a cut (D-51).
        ("Later that night…", "Later that night"),
    ],
)
def test_an_undated_conversation_keeps_the_chroniclers_time_or_none(
    tmp_path: Path, chronicled: str | None, stored: str | None
) -> None:
    store = Store.open(tmp_path / "kotonia.sqlite3")
    conv = store.create_conversation(
        Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
    )
    store.add_messages(
        conv.id,
        [
            Message(role=Role.USER, speaker="Ann", text="Someone took the brass key."),
            Message(role=Role.CHARACTER, speaker="Wren", text="I had it in my coat."),
        ],
    )
    asyncio.run(fold(store, answer_with(chronicled), chapter_job(conv.id, 1, 2)))
    (chapter,) = store.chapters(conv.id)
    assert chapter.origin is not ChapterOrigin.QUOTED
    assert chapter.story_time == stored
    assert ("in-story time" in chapter_heading(chapter)) is (stored is not None)
    store.close()


REFUSAL = "I'm sorry, but I can't help with that."


def test_a_quoted_synopsis_keeps_its_chapters_in_story_times_in_the_prompt(
    tmp_path: Path,
) -> None:
    """A major fold whose synopsis the chronicler refuses quotes its chapters: the prompt then
    holds each chapter's in-story time beside its line (once for a run of the same time), so
    "when did Ann find the key?" still has its date after the chapters went into the synopsis.
    A time with ": " and a line break in it stays one label ("Day 3 - dawn at the pier")."""
    store = Store.open(tmp_path / "kotonia.sqlite3")
    conv = store.create_conversation(
        Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
    )
    store.add_messages(
        conv.id,
        [Message(role=Role.USER, speaker="Ann", text=f"Line {i}.") for i in range(1, 41)],
    )
    times = [
        "Friday, 19 October 2018",
        "Friday, 19 October 2018",
        "Day 3: dawn\nat the pier",
        "Wednesday, 31 October 2018",
        "Wednesday, 31 October 2018",
    ]
    events = [
        "Ann said someone took the brass key.",
        "Wren lit the storm lamps.",
        "Ann found the key in the boathouse.",
        "Wren sailed to Tarn with 12 crates.",
        "Ann wrote to her sister Mia.",
    ]
    for n, (time, event) in enumerate(zip(times, events, strict=True)):
        _store_dated(store, conv.id, 8 * n + 1, time, event, tokens=40)
    asyncio.run(fold(store, REFUSAL, FoldJob(conversation_id=conv.id, kind=FoldKind.MAJOR_GC)))
    synopsis = store.current_synopsis(conv.id)
    assert synopsis is not None and synopsis.quoted
    live = store.chapters(conv.id)
    prompt = MemoryBlock(synopsis.text, tuple(live)).render()
    assert f"## Synopsis\n{QUOTED_SYNOPSIS_LEAD}\n" in prompt
    quoted = synopsis.text.splitlines()[1:]
    folded = len(quoted)
    assert folded >= 3 and len(live) == 5 - folded, synopsis.text
    expected = [
        "#1-#8, Friday, 19 October 2018: - Ann said someone took the brass key. (#2)",
        "#9-#16: - Wren lit the storm lamps. (#10)",
        "#17-#24, Day 3 - dawn at the pier: - Ann found the key in the boathouse. (#18)",
        "#25-#32, Wednesday, 31 October 2018: - Wren sailed to Tarn with 12 crates. (#26)",
        "#33-#40: - Ann wrote to her sister Mia. (#34)",
    ]
    assert quoted == expected[:folded]
    store.close()


async def test_quoting_the_oldest_chapters_over_a_quoted_synopsis_keeps_its_lines_and_times(
    make_fake_service,
) -> None:
    """Quote first (a long import at a small window, chat/fold/quote_first.py) folds the oldest
    chapters into a quoted synopsis over the current one, which may be quoted itself: its lines
    are quoted again under their own ranges and times, not as one "So far" passage whose labels
    become words of the quote. Fake engine: no model call is made (the quote is code only)."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(REFUSAL))
    conv = service.new_conversation(service.library.get(key))
    store = service.store
    store.add_messages(
        conv.id,
        [Message(role=Role.USER, speaker="Ann", text=f"Line {i}.") for i in range(1, 33)],
    )
    earlier = (
        f"{QUOTED_FIRST_LEAD}\n"
        "#1-#8, Friday, 19 October 2018: - Ann said someone took the brass key. (#2)\n"
        "#9-#16: - Wren lit the storm lamps. (#10)"
    )
    store.add_synopsis(
        Synopsis(
            conversation_id=conv.id,
            version=0,
            text=earlier,
            through_message_id=16,
            tokens=40,
            target_tokens=80,
            stale=True,
            origin=SynopsisOrigin.QUOTED,
        ),
        [],
    )
    for first, time, event in (
        (17, "Saturday, 20 October 2018", "Ann found the key in the boathouse."),
        (25, "Sunday, 21 October 2018", "Wren sailed to Tarn with 12 crates."),
    ):
        _store_dated(store, conv.id, first, time, event, tokens=20)
    assert await quote_major_fold(service.worker.context, conv.id)
    synopsis = store.current_synopsis(conv.id)
    assert synopsis is not None and synopsis.through_message_id == 24
    assert synopsis.text.splitlines() == [
        QUOTED_FIRST_LEAD,
        "#1-#8, Friday, 19 October 2018: - Ann said someone took the brass key. (#2)",
        "#9-#16: - Wren lit the storm lamps. (#10)",
        "#17-#24, Saturday, 20 October 2018: - Ann found the key in the boathouse. (#18)",
    ]


def _store_dated(store, conv_id: int, first: int, time: str, event: str, *, tokens: int) -> None:
    """A chapter of messages `first`..`first + 7` at in-story `time`: one event citing its
    second message."""
    store.store_chapter(
        Chapter(
            conversation_id=conv_id,
            first_message_id=first,
            last_message_id=first + 7,
            text=f"- {event} (#{first + 1})",
            story_time=time,
            tokens=tokens,
        )
    )
