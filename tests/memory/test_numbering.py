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
from kotonia_tui.memory.numbering import (
    NO_MESSAGES,
    asked_ids,
    evidence_said,
    numbered_text,
    referenced_ids,
    renumber,
)
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
    # `renumber`, the plain mapping a branch retargets its copies with: an id it does not map
    # (a message deleted before the branch) stays as it is. What is read says a deleted one in
    # words (`numbered_text`, below).
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


# ---- as read, with messages deleted -----------------------------------------------------------


def _read(
    text: str,
    present: set[int],
    names: frozenset[str] = frozenset(),
    *,
    elsewhere: range = range(1, 337),
    given: int = 400,
) -> str:
    """`text` as `numbered_text` reads it when the conversation's messages are the ids
    `present` and other conversations' are `elsewhere` (what `Store.message_places` and
    `Store.deleted_messages` say of the ids asked): an id up to `given` (the highest the store
    gave out) that is in neither was deleted; one past it was never given out."""
    counts = {i: sum(1 for p in present if p <= i) for i in asked_ids(text)}
    numbers = {i: counts[i] for i in counts if i in present}
    speakers = {i: _speaker(i) for i in numbers}
    deleted = {
        i
        for i in referenced_ids(text)
        if 0 < i <= given and i not in present and i not in elsewhere
    }
    return numbered_text(text, numbers, counts, deleted, speakers, names)


def test_nothing_deleted_reads_as_the_plain_mapping_does():
    """With every cited message there, the text reads byte for byte as before (a prompt's
    cached prefix does not change with this reading)."""
    block = _block(first=337)
    present = set(range(337, 337 + 40))
    assert _read(block, present, frozenset({"Mara", "Kyle"})) == renumber(
        block, NUMBERS, {i: _speaker(i) for i in NUMBERS}
    )


def test_a_deleted_message_is_said_in_words_in_every_shape():
    """Left as written, a deleted message's id read as the number of another message: 337 and
    342 deleted, the block read "(#337)", "#337 Mara: " and "(#342)" among numbers #1-#10."""
    block = _block(first=337)
    present = set(range(337, 337 + 40)) - {337, 342}
    shown = _read(block, present, frozenset({"Mara", "Kyle"}))
    # The ledger's evidence and a chapter item's: in words, as the inspector says them.
    assert "- F1 (Mara): Mara has a lamp (a deleted message)" in shown
    assert "- Mara lit the lamp (a deleted message)" in shown
    assert "- Kyle left (#5 #6)" in shown  # 343, 344: the next numbers now
    # The chapter's range from the message after its deleted first; its quoted line by its
    # speaker; so in the quoted synopsis.
    assert "#1-#3:\n(a deleted message) Mara: Line 1 of the night." in shown
    assert "\n#1-#3: (a deleted message) Mara: Line 1 of the night." in shown
    assert "#4-#6, Friday, 19 October 2018:" in shown
    assert not re.search(r"#(3[0-9]{2}|0)(?![0-9])", shown)
    assert shown == _read(block, present, frozenset({"Mara", "Kyle"}))  # deterministic


def test_each_reference_shape_with_deleted_messages():
    present = {337, 339, 340}  # 338 and 341-345 deleted: #1-#3 left
    names = frozenset({"Mara", "Kyle"})
    assert _read("- x (#338)\n- y (#338 #340)\n- z (#341, #342, #339)", present, names) == (
        "- x (a deleted message)\n- y (#3 and a deleted message)\n- z (#2 and 2 deleted messages)"
    )
    assert _read("- a (#341-#345)\n- b (#338-#340)\n- c (#338-#338)", present) == (
        "- a (deleted messages)\n- b (#2-#3)\n- c (a deleted message)"
    )
    assert _read("#341-#345:\n- gone\n#341-#345, Friday: gone", present) == (
        f"{NO_MESSAGES}:\n- gone\n{NO_MESSAGES}, Friday: gone"
    )
    notes = (
        "quoted from messages #341-#345: why\nMessage #338 is too long\n"
        "through message #340; cut … [extract of #338] … [extract of #341-#345]"
    )
    assert _read(notes, present) == (
        "quoted from deleted messages: why\nA deleted message is too long\n"
        "through message #3; cut … [extract of a deleted message] … [extract of deleted messages]"
    )
    # A quoted line of a deleted message: at a line's start whoever it names (the persona was
    # renamed since: Ann is no speaker now); inside a line (a quote quoted again) only when it
    # names a speaker of the conversation, or the story's "your #341 fan: " would be one.
    assert _read("#338 Kyle: I'm home. I'm your #341 fan: always.", present, names) == (
        "(a deleted message) Kyle: I'm home. I'm your #341 fan: always."
    )
    assert _read("#338 Kyle, Friday: I'm home.", present, names) == (
        "(a deleted message) Kyle, Friday: I'm home."
    )
    assert _read("- x\n#338 Ann: I'm home.", present, names) == (
        "- x\n(a deleted message) Ann: I'm home."
    )
    nested = "#337-#340: #339 Mara: Hi. #338 Kyle: I'm home."
    assert (
        _read(nested, present, names) == "#1-#3: #2 Mara: Hi. (a deleted message) Kyle: I'm home."
    )
    # What stays a store id: Kyle renamed since and no speaker now (memory/numbering.py says so).
    assert _read(nested, present, frozenset({"Mara"})) == "#1-#3: #2 Mara: Hi. #338 Kyle: I'm home."
    # A bare "#5", and a run of digits no id has, are never references.
    assert _read("Room #338 and (#" + "9" * 25 + ")", present) == (
        "Room #338 and (#" + "9" * 25 + ")"
    )
    # Only the ids said to be deleted are: one neither numbered nor deleted is left as it is.
    assert numbered_text("(#338) (#5)", {}, {338: 1, 5: 0}, {338}) == "(a deleted message) (#5)"


def test_the_storys_own_ids_stay_as_written():
    """An id in a reference's shape that is no message of the conversation and was never
    deleted is the story's (the chronicler cites only its source's ids): "(#0)", another
    conversation's "(#13)" and "message #13", "Room (#999999)" (no message ever had it). They
    read as written, with nothing deleted and with a message of the conversation deleted,
    never as "a deleted message"."""
    story = (
        "- The vault. (#0)\n- The clue (#13); see message #13.\n- Room (#999999).\n"
        "- From (#13-#20) to (#13-#338).\n#13-#20: as written"
    )
    present = set(range(337, 377))
    assert _read(story, present) == story
    assert _read(story, present - {338}) == story
    assert _read(story + "\n- Lit. (#338 #339)", present - {338}) == (
        story + "\n- Lit. (#2 and a deleted message)"
    )
    # A run of digits past every id given out, at a line's start with a speaker's name.
    assert _read("#999999 Kyle: hi", present, frozenset({"Kyle"})) == "#999999 Kyle: hi"


def test_evidence_is_said_as_a_citation_is():
    assert evidence_said([2, None]) == "#2 and a deleted message"
    assert evidence_said([None, None]) == "2 deleted messages"
    assert evidence_said([]) == ""
    assert _read("(#337 #338)", {337}) == f"({evidence_said([1, None])})"
