"""Where evidence stands in a prompt: a memory block built by the real renderers (structured
chapters, the ledger, quoted chapters and a quoted synopsis), read back by `eval/evidence.py`."""

from __future__ import annotations

from kotonia_tui.domain import (
    QUOTED_SYNOPSIS_LEAD,
    Chapter,
    ChapterOrigin,
    LedgerKind,
    Message,
    Role,
    StoredLedgerEntry,
)
from kotonia_tui.eval.evidence import (
    MemoryRefs,
    Place,
    answer_words,
    carries_answer,
    locate,
    memory_refs,
)
from kotonia_tui.eval.grading import content_words
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.memory.extract import extract_passages, message_passages, synopsis_passages
from kotonia_tui.memory.numbering import renumber
from kotonia_tui.memory.structured import Line, StructuredChapter, render_chapter

TEXTS = {
    1: (Role.USER, "Ann", "I brought the brass key from Harwick."),
    2: (Role.CHARACTER, "Bo", '*Bo takes it.* "It opens the lamp room. I was a captain once."'),
    3: (Role.USER, "Ann", "Were you really a captain?"),
    4: (Role.USER, "Ann", "My sister Ilse marries on the 14th."),
    5: (Role.USER, "Ann", "The storm lasted three days."),
    6: (Role.CHARACTER, "Bo", '"The boat came late, with forty crowns of oil."'),
    9: (Role.CHARACTER, "Bo", '"I lit the lamp at dusk."'),
    10: (Role.CHARACTER, "Bo", '"The cat is called Soot."'),
}


def message(number: int) -> Message:
    role, speaker, text = TEXTS[number]
    return Message(id=number, conversation_id=1, role=role, speaker=speaker, text=text)


def structured(*lines: tuple[str, tuple[int, ...]]) -> str:
    events = tuple(Line(text, ids) for text, ids in lines)
    return render_chapter(StructuredChapter("", events, (), (), ()))


def quoted_chapter(first: int, last: int) -> Chapter:
    messages = [message(n) for n in range(first, last + 1) if n in TEXTS]
    return Chapter(
        conversation_id=1,
        first_message_id=first,
        last_message_id=last,
        text=extract_passages(message_passages(messages), 2000),
        note=f"quoted from messages #{first}-#{last}: the chronicler's chapter was unusable",
        origin=ChapterOrigin.QUOTED,
    )


def memory_text() -> str:
    # The synopsis quotes two older chapters: one structured (its item cites #9), one quoted
    # (it quotes #10's own words).
    older_structured = Chapter(
        conversation_id=1,
        first_message_id=9,
        last_message_id=9,
        text=structured(("Bo lit the lamp at dusk.", (9,))),
    )
    synopsis = (
        QUOTED_SYNOPSIS_LEAD
        + "\n"
        + extract_passages(
            synopsis_passages(None, [older_structured, quoted_chapter(10, 10)]), 2000
        )
    )
    chapters = (
        Chapter(
            conversation_id=1,
            first_message_id=1,
            last_message_id=3,
            text=structured(
                ("Ann gave Bo the brass key from Harwick.", (1,)),
                ("On the surface: Bo told Ann: I was a captain.", (2, 3)),
            ),
        ),
        quoted_chapter(5, 6),
    )
    ledger = (
        StoredLedgerEntry(
            id=1,
            conversation_id=1,
            kind=LedgerKind.USER_FACT,
            text="Ann's sister Ilse marries on the 14th.",
            subject="Ann",
            evidence=[4],
            chapter_id=1,
        ),
    )
    return MemoryBlock(synopsis, chapters, ledger).render()


def test_the_block_names_what_it_cites_and_what_it_quotes():
    text = memory_text()
    # The block as the prompt carries it: headings with ranges, range labels in the synopsis.
    assert "## Chapters\n#1-#3:\n" in text and "#9-#9: " in text
    refs = memory_refs(text)
    # Items and ledger entries cite by their ids, also an item the quoted synopsis quotes.
    assert refs.cited == {1, 2, 3, 4, 9}
    # Quoted extracts quote messages under their labels, also inside the quoted synopsis.
    assert refs.quoted == {5, 6, 10}
    # What is quoted of each, up to the next label.
    assert refs.quoted_text[5] == "The storm lasted three days."
    assert refs.quoted_text[6] == '"The boat came late, with forty crowns of oil."'
    assert "The cat is called Soot." in refs.quoted_text[10]


def test_the_block_the_reader_read_names_messages_by_number_and_maps_to_the_input():
    """Stored, a second conversation's block cites store ids (337 on); the reader reads it
    numbered (1 on, chat/numbering.py), and its references map to the input's ids (1001 on)
    as they would with ids equal to numbers."""
    stored = renumber(memory_text(), {i: i + 336 for i in range(1, 13)})
    assert "#337-#339:" in stored and "(#337" in stored
    read = renumber(stored, {i + 336: i for i in range(1, 13)})
    assert read == memory_text()
    refs = memory_refs(read).mapped({n: n + 1000 for n in range(1, 13)})
    assert refs.cited == {1001, 1002, 1003, 1004, 1009}
    assert refs.quoted == {1005, 1006, 1010}
    assert refs.quoted_text[1005] == "The storm lasted three days."
    # A number the mapping does not know stays as it is.
    assert memory_refs("- Mara met Soot. (#40)").mapped({1: 1001}).cited == {40}
    # A citation some of whose messages were deleted names the ones left (the deleted one is
    # said in words: no number to find); one with none left names none.
    said = "- Mara met Soot. (#4 and a deleted message)\n- Bo left. (#7 #8 and 2 deleted messages)"
    said += "\n- Gone. (a deleted message)\n- Met. (#9 and deleted messages)"
    assert memory_refs(said).cited == {4, 7, 8, 9}


def test_a_dated_label_of_the_quoted_synopsis_names_no_message():
    """A chapter's line in a quoted synopsis says its in-story time after its range
    ("#9-#9, Friday, 19 October 2018: "): the time is no quoted message's label, and what the
    line quotes and cites is found as without it."""
    older = Chapter(
        conversation_id=1,
        first_message_id=9,
        last_message_id=9,
        text=structured(("Bo lit the lamp at dusk.", (9,))),
        story_time="Friday, 19 October 2018, 7:42 pm",
    )
    quoted = quoted_chapter(10, 10).model_copy(update={"story_time": "Day 2: noon"})
    text = extract_passages(synopsis_passages(None, [older, quoted]), 2000)
    assert "#9-#9, Friday, 19 October 2018, 7:42 pm: " in text
    assert "#10-#10, Day 2 - noon: " in text
    refs = memory_refs(f"{QUOTED_SYNOPSIS_LEAD}\n{text}")
    assert (refs.cited, refs.quoted) == (frozenset({9}), frozenset({10}))
    assert "The cat is called Soot." in refs.quoted_text[10]


def test_a_quote_that_leaves_out_the_answer_is_not_present():
    refs = memory_refs("#5 Ann: The storm lasted … and then we slept.\n#6 Bo: The boat came.")
    wholes = {5: "The storm lasted three days, and then we slept.", 6: "The boat came."}
    found = locate(
        [5, 6], window=set(), recalled=set(), refs=refs, reference="three days", wholes=wholes
    )
    assert [(f.message, f.where, f.present) for f in found] == [
        (5, (Place.QUOTED_PART,), False),  # "three" is in the message, not in its quote
        (6, (Place.QUOTED,), True),  # holds none of the answer's words: nothing to leave out
    ]


def test_a_summary_in_prose_names_no_message():
    text = MemoryBlock("Ann brought a key on the first day (messages one to three).", ()).render()
    refs = memory_refs(text)
    assert not refs.cited and not refs.quoted


def test_places_of_each_evidence_message():
    refs = memory_refs(memory_text())
    found = locate([1, 5, 7, 8, 12], window={12}, recalled={7}, refs=refs)
    assert [(f.message, f.where) for f in found] == [
        (1, (Place.CITED,)),
        (5, (Place.QUOTED,)),
        (7, (Place.RECALLED,)),
        (8, (Place.ABSENT,)),
        (12, (Place.WINDOW,)),
    ]
    assert [f.present for f in found] == [True, True, True, False, True]
    both = locate([7], window={7}, recalled={7}, refs=refs)
    assert both[0].where == (Place.WINDOW, Place.RECALLED)


def test_a_message_recalled_in_part_counts_only_by_what_the_part_holds():
    """A long message quoted by its pieces is in front of the reader only as far as they go:
    the piece that shares the question's words may leave the answer out."""
    whole = (
        "I finally learned a new song on the piano last week. "
        "It is the theme from Interstellar, and it took me a month."
    )
    without = "I finally learned a new song on the piano last week. …"
    with_it = "… It is the theme from Interstellar, and it took me a month."
    reference = "the Interstellar theme"
    assert not carries_answer(without, whole, reference)
    assert carries_answer(with_it, whole, reference)
    # A message that holds none of the answer's words: any part of it counts.
    assert carries_answer(without, whole, "a film score")
    # Read by the sentence that answers: a common word of the reference used elsewhere in
    # the message is not asked of the part.
    letter = (
        "I want to get better at chess. "
        "We would not give the tablet to Ollie, we don't want him addicted to technology."
    )
    reason = "so he doesn't get addicted to technology"
    assert carries_answer("… we don't want him addicted to technology.", letter, reason)
    assert not carries_answer("I want to get better at chess. …", letter, reason)
    refs = MemoryRefs(frozenset(), frozenset())
    found = locate(
        [3, 4, 5],
        window=set(),
        recalled={3, 4, 5},
        refs=refs,
        parts={3: (without, whole), 4: (with_it, whole)},
        reference=reference,
    )
    assert [(f.message, f.where, f.carried) for f in found] == [
        (3, (Place.RECALLED_PART,), without),
        (4, (Place.RECALLED,), with_it),
        (5, (Place.RECALLED,), None),  # quoted whole
    ]
    assert [f.present for f in found] == [False, True, True]
    # In the window as well: present whatever the excerpt cut.
    (both,) = locate(
        [3], window={3}, recalled={3}, refs=refs, parts={3: (without, whole)}, reference=reference
    )
    assert both.where == (Place.WINDOW, Place.RECALLED_PART) and both.present


def test_the_answer_words_in_the_prompt():
    assert content_words("her brother Tomas") == ["brother", "tomas"]
    assert content_words("forty crowns") == ["40", "crowns"]
    assert content_words("the") == []
    prompt = ["Bo: The boat came late, with 40 crowns of oil.", "Ann: Tomas is my brother?"]
    found = answer_words("forty crowns", prompt)
    assert found.words == ("40", "crowns") and found.missing == () and found.all_there
    missing = answer_words("fifty crowns", prompt)
    assert missing.missing == ("50",) and missing.all_there is False
    assert answer_words("her brother Tomas", prompt).all_there
    assert answer_words("a", prompt).all_there is None  # nothing to look for
    # Scripts without spaces: each character is a word.
    assert answer_words("灯台", ["灯台守のボー"]).all_there
