"""A memory text's message references, from store ids to the numbers the chat shows
(memory/numbering.py): what is a reference, and what of the story is left alone."""

from __future__ import annotations

import re

from kotonia_tui.domain import Chapter, LedgerKind, Message, Role, StoredLedgerEntry
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.memory.extract import (
    extract_mark,
    extract_passages,
    message_passages,
    synopsis_passages,
)
from kotonia_tui.memory.numbering import referenced_ids, renumber
from kotonia_tui.memory.structured import Line, StructuredChapter, render_chapter

# A user's second conversation: store ids 337 onward, numbered #1 onward in the chat.
NUMBERS = {337 + k: 1 + k for k in range(40)}
SPEAKERS = {i: ("Kyle" if i % 2 else "Mara") for i in NUMBERS}


def test_labels_citations_and_ranges_are_numbered():
    text = (
        "#337-#375, Friday, 19 October 2018:\n"
        "#337 Kyle: I moved in on Friday. … #340 Mara: Welcome home.\n"
        "- Mara gave Kyle the key. (#340)\n"
        "- They ate together. (#341 #342)\n"
        "- They argued. (#343, #345)\n"
        "- The storm came. (#346-#348)\n"
        "#349-#360: #349 Kyle: Is it late?\n"
        "#351, at 10:30 in the morning: the bell rang"
    )
    assert renumber(text, NUMBERS, SPEAKERS) == (
        "#1-#39, Friday, 19 October 2018:\n"
        "#1 Kyle: I moved in on Friday. … #4 Mara: Welcome home.\n"
        "- Mara gave Kyle the key. (#4)\n"
        "- They ate together. (#5 #6)\n"
        "- They argued. (#7, #9)\n"
        "- The storm came. (#10-#12)\n"
        "#13-#24: #13 Kyle: Is it late?\n"
        # One id with a time is no label the pipeline writes (a chapter's range is "#a-#b"
        # even for one message): as story text ("at #12, Baker Street: ...") it stays.
        "#351, at 10:30 in the morning: the bell rang"
    )
    # A run of digits no id has (SQLite's ids have at most 19) is story text, however long:
    # Python refuses int() past 4,300 digits, and a turn must not stop on it.
    long = "(#" + "9" * 5000 + ") (#340)"
    assert renumber(long, NUMBERS) == "(#" + "9" * 5000 + ") (#4)"
    assert referenced_ids(long) == {340}
    assert renumber("(#３) (#340)", NUMBERS) == "(#３) (#4)"  # only ASCII digits are ids


def test_notes_errors_and_cut_quotes_are_numbered():
    assert (
        renumber("quoted from messages #337-#375: the chronicler's chapter was empty", NUMBERS)
        == "quoted from messages #1-#39: the chronicler's chapter was empty"
    )
    assert (
        renumber("not asked for: message #340 is 90,000 tokens", NUMBERS)
        == "not asked for: message #4 is 90,000 tokens"
    )
    assert renumber(f"It was a long night{extract_mark('#340 Mara')}", NUMBERS) == (
        "It was a long night … [extract of #4]"
    )
    assert renumber("the synopsis through message #375 must be rebuilt", NUMBERS) == (
        "the synopsis through message #39 must be rebuilt"
    )


def test_an_id_not_in_the_mapping_is_left_exactly_as_it_is():
    # Another conversation's message, a deleted one, a number of the story.
    assert renumber("- They met. (#12)", NUMBERS) == "- They met. (#12)"
    assert renumber("- They met. (#12 #340)", NUMBERS) == "- They met. (#12 #4)"
    # A range with an end not in the mapping stays whole: half rewritten, it would mix two
    # numberings.
    for text in ("#300-#340:\nThey met.", "quoted from messages #340-#999: why", "(#340-#999)"):
        assert renumber(text, NUMBERS) == text
    assert referenced_ids("#300-#340: x (#12) message #5") == {300, 340, 12, 5}
    # A run of digits no store holds is no reference of any.
    huge = "#99999999999999999999999 Mara: hello (#99999999999999999999999)"
    assert referenced_ids(huge) == frozenset()
    assert renumber(huge, NUMBERS, SPEAKERS) == huge


def test_numbers_of_the_story_are_left_alone():
    numbers = {1: 7, 5: 9, 340: 4}
    speakers = {1: "Mara", 5: "Kyle", 340: "Mara"}
    story = (
        "#340 Mara: I'm your #1 fan: always. Room #5 is mine, and #340 too.\n"
        "We met at #5. Order #1, placed today\n"
        "- Kyle booked room #340. (#340)"
    )
    # The label, the citation and "#1 fan: ", which has a label's shape (its speaker is
    # checked once the store has said who wrote message 1); no bare "#5" or "#340".
    assert referenced_ids(story) == {1, 340}
    assert renumber(story, numbers, speakers) == (
        "#4 Mara: I'm your #1 fan: always. Room #5 is mine, and #340 too.\n"
        "We met at #5. Order #1, placed today\n"
        "- Kyle booked room #340. (#4)"
    )
    # "#1 fan: " at a line's start has a label's shape: with the speakers known, "fan" is not
    # message 1's speaker, so it is the story's. Without them, its shape decides (the one
    # ambiguity left: it must also be an id of a message of this conversation).
    line = "#1 fan: always."
    assert renumber(line, numbers, speakers) == line
    assert renumber(line, numbers) == "#7 fan: always."
    assert renumber("#1 Mara: always.", numbers, speakers) == "#7 Mara: always."
    # A "#5: " is no label the pipeline writes.
    assert renumber("Meet me at\n#5: the back door", numbers, speakers) == (
        "Meet me at\n#5: the back door"
    )


def test_a_conversation_whose_ids_are_its_numbers_reads_the_same():
    block = _block(first=1)
    ids = referenced_ids(block)
    assert renumber(block, {i: i for i in ids}, {i: _speaker(i) for i in ids}) == block


def _speaker(message_id: int) -> str:
    return "Mara" if message_id % 2 else "Kyle"


def _block(first: int) -> str:
    """A memory block as the pipeline writes it for messages `first`... (store ids): the
    ledger, a quoted synopsis, a structured chapter and a quoted one."""
    ids = range(first, first + 12)
    messages = [
        Message(
            id=i,
            role=Role.USER if i % 2 else Role.CHARACTER,
            speaker=_speaker(i),
            text=f"Line {i - first + 1} of the night. The lamp number {i - first + 1} is lit.",
        )
        for i in ids
    ]
    quoted = extract_passages(message_passages(messages[:4]), 200)
    structured = render_chapter(
        StructuredChapter(
            "",
            (Line("Mara lit the lamp", (ids[5],)), Line("Kyle left", (ids[6], ids[7]))),
            (),
            (),
            (),
        )
    )
    chapters = (
        Chapter(conversation_id=2, first_message_id=ids[0], last_message_id=ids[3], text=quoted),
        Chapter(
            conversation_id=2,
            first_message_id=ids[4],
            last_message_id=ids[7],
            text=structured,
            story_time="Friday, 19 October 2018",
        ),
    )
    synopsis = "Quoted from the story so far:\n" + extract_passages(
        synopsis_passages(None, chapters[:1]), 300
    )
    entry = StoredLedgerEntry(
        id=1,
        conversation_id=2,
        kind=LedgerKind.USER_FACT,
        text="Mara has a lamp",
        subject="Mara",
        evidence=[ids[0]],
        chapter_id=1,
    )
    return MemoryBlock(synopsis, chapters, (entry,)).render()


def test_a_memory_block_as_the_pipeline_writes_it_is_numbered_throughout():
    block = _block(first=337)
    ids = referenced_ids(block)
    assert ids == {337, 338, 339, 340, 341, 342, 343, 344}
    numbered = renumber(block, NUMBERS, SPEAKERS | {i: _speaker(i) for i in ids})
    assert "#33" not in numbered and "#34" not in numbered
    assert "- F1 (Mara): Mara has a lamp (#1)" in numbered
    assert "#1-#4:\n#1 Mara: Line 1 of the night." in numbered
    assert "#5-#8, Friday, 19 October 2018:\n- Mara lit the lamp (#6)" in numbered
    assert "- Kyle left (#7 #8)" in numbered
    assert "\n#1-#4: #1 Mara: Line 1 of the night." in numbered  # the quoted synopsis
    # Only the numbers after "#" changed: the block says the same otherwise.
    assert re.sub(r"#\d+", "#", numbered) == re.sub(r"#\d+", "#", block)
