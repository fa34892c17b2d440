"""The extract a fold stores when the chronicler's answer cannot be stored (memory/extract.py)."""

from __future__ import annotations

from kotonia_tui.domain import QUOTED_SYNOPSIS_LEAD, Chapter, Message, Role
from kotonia_tui.memory.extract import (
    Passage,
    extract_passages,
    message_passages,
    synopsis_passages,
)
from kotonia_tui.sentences import sentences


def extract(messages: list[Message], limit_chars: int) -> str:
    """A range quoted as the fold quotes it."""
    return extract_passages(message_passages(messages), limit_chars)


def story() -> list[Message]:
    lines = [
        (Role.USER, "Mara", "Good evening. My sister Ilse marries on the 14th of May. I am tired."),
        (
            Role.CHARACTER,
            "Rowan",
            '*He looks up from the ledger.* "Congratulations." The lamp flickers. It is late.',
        ),
        (Role.SYSTEM, "", "[Start a new chat]"),
        (Role.USER, "Mara", "The ring cost 300 crowns at Halden's. Ugh, so much."),
        (Role.CHARACTER, "Rowan", "「東京へ行きます。」彼は言った。それから黙った。"),
    ]
    return [
        Message(id=number, role=role, speaker=speaker, text=text)
        for number, (role, speaker, text) in enumerate(lines, start=11)
    ]


def test_sentences_keep_their_closing_marks_in_every_script():
    assert sentences('*He nods.* "Welcome, Mara." The wind   picks up') == [
        "*He nods.*",
        '"Welcome, Mara."',
        "The wind picks up",
    ]
    assert sentences("「東京へ行きます。」彼は言った。") == ["「東京へ行きます。」", "彼は言った。"]


def test_a_tight_extract_keeps_the_users_names_and_numbers_and_marks_what_it_left_out():
    text = extract(story(), 120)
    assert len(text) <= 120 + 30  # the limit, plus each line's "#id speaker: "
    # The user's own statements with names and numbers come first.
    assert "#11 Mara: Good evening. My sister Ilse marries on the 14th of May. …" in text
    assert "The ring cost 300 crowns at Halden's." in text
    # What was said aloud is not there, and nothing claims to be whole: each gap is marked.
    assert "Congratulations" not in text and "I am tired" not in text
    assert "[Start a new chat]" not in text  # an imported note is not part of the story


def test_a_roomy_extract_quotes_every_line_in_order_with_its_speaker():
    text = extract(story(), 10_000)
    assert text.splitlines() == [
        "#11 Mara: Good evening. My sister Ilse marries on the 14th of May. I am tired.",
        '#12 Rowan: *He looks up from the ledger.* "Congratulations." The lamp flickers. '
        "It is late.",
        "#14 Mara: The ring cost 300 crowns at Halden's. Ugh, so much.",
        "#15 Rowan: 「東京へ行きます。」 彼は言った。 それから黙った。",
    ]
    assert " …" not in text
    assert extract(story(), 10_000) == text  # the same bytes every time (cache-safe)


def test_a_sentence_longer_than_the_limit_is_shortened_at_a_word_and_says_so():
    long = Message(id=3, role=Role.USER, speaker="Mara", text="word " * 200 + "end.")
    # The mark says where the whole sentence is (issue 33): it takes its room in the limit.
    assert extract([long], 40) == "#3 Mara: " + " ".join(["word"] * 4) + " … [extract of #3]"
    assert extract([], 40) == ""


def test_a_quoted_synopsis_quoted_again_keeps_its_lines_labels_once() -> None:
    chapter = Chapter(
        conversation_id=1, first_message_id=33, last_message_id=51, text="- Mara met Soot. (#34)"
    )
    first = f"{QUOTED_SYNOPSIS_LEAD}\n" + extract_passages(synopsis_passages(None, [chapter]), 400)
    assert first == f"{QUOTED_SYNOPSIS_LEAD}\n#33-#51: - Mara met Soot. (#34)"
    later = Chapter(
        conversation_id=1, first_message_id=52, last_message_id=60, text="- The lamp failed."
    )
    again = extract_passages(synopsis_passages(first, [later], base_quoted=True), 400)
    # Each earlier line under its own label, not "So far: #33-#51: ..." (twice quoted, it read
    # "So far: So far: #1-#32: ..." in the evaluation).
    assert again == "#33-#51: - Mara met Soot. (#34)\n#52-#60: - The lamp failed."
    prose = extract_passages(synopsis_passages("Mara came to the Reach.", [later]), 400)
    assert prose == "So far: Mara came to the Reach.\n#52-#60: - The lamp failed."


def test_a_quote_quoted_again_quotes_words_not_its_marks() -> None:
    # A synopsis quoting chapters that are quotes or structured items: a 40-turn run stored
    # "#41-#52: … … …" and "#1-#5: … (#3)", pieces that fit a tight limit and say nothing.
    passages = [
        Passage("#1-#5", "… (#3)"),
        Passage("#41-#52", "#42 Mara: … …\n#44 Rowan: … Hello there, traveller. …"),
        Passage("#53-#60", "- Ann paid 40 crowns. (#54)\n- Rowan nodded. (#55 #56)"),
    ]
    for limit in (40, 120, 400):
        quoted = extract_passages(passages, limit)
        for line in quoted.splitlines():
            _label, _, text = line.partition(": ")
            words = text.replace("…", "").replace("#", "").strip(" ()0123456789")
            assert words, line
    roomy = extract_passages(passages, 400).splitlines()
    # The sentence keeps the label of who said it; the cited ids are no fact's number (the
    # price outranks the nod that cites more ids).
    assert "#41-#52: … #44 Rowan: … Hello there, traveller. …" in roomy
    assert extract_passages(passages, 40) == "#53-#60: - Ann paid 40 crowns. (#54) …"
