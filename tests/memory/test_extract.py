"""The extract a fold stores when the chronicler's answer cannot be stored (memory/extract.py)."""

from __future__ import annotations

from kotonia_tui.domain import QUOTED_SYNOPSIS_LEAD, Chapter, Message, Role
from kotonia_tui.memory.extract import (
    THIN_SHARE,
    Passage,
    extract_passages,
    kept_share,
    label_time,
    message_passages,
    synopsis_passages,
    without_references,
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


def dated(first: int, last: int, text: str, time: str | None) -> Chapter:
    return Chapter(
        conversation_id=1, first_message_id=first, last_message_id=last, text=text, story_time=time
    )


def test_a_quoted_synopsis_says_each_chapters_in_story_time_once_per_run() -> None:
    """A temporal question ("when did Mara meet Soot?") has its answer in the chapter's time:
    quoted into a synopsis, each chapter's line says it, once for a run of the same time."""
    chapters = [
        dated(1, 8, "- Mara met Soot at the mill. (#3)", "Wednesday, 31 October 2018"),
        dated(9, 20, "- Soot stole the lamp. (#12)", "Wednesday, 31 October 2018"),
        dated(21, 32, "- The lamp was found. (#25)", "Friday, 2 November 2018"),
        dated(33, 40, "- Rowan left for Tarn. (#35)", None),
    ]
    quoted = extract_passages(synopsis_passages(None, chapters), 1000)
    assert quoted.splitlines() == [
        "#1-#8, Wednesday, 31 October 2018: - Mara met Soot at the mill. (#3)",
        "#9-#20: - Soot stole the lamp. (#12)",
        "#21-#32, Friday, 2 November 2018: - The lamp was found. (#25)",
        "#33-#40: - Rowan left for Tarn. (#35)",
    ]
    # A label with its time is still a reference, not the story: a line of it alone says
    # nothing (what the extract's scoring and the quote-again split rely on).
    assert without_references("#1-#8, Wednesday, 31 October 2018: ").strip() == ""
    assert without_references("#1-#8, at 10:30 on Monday: ").strip() == ""


def test_a_chapters_time_quoted_again_keeps_its_date_when_the_line_before_is_left_out() -> None:
    """Quoted again, each earlier line keeps the time it was under, also a line that said it
    only once for its run when the line that said it is not quoted this time."""
    chapters = [
        dated(1, 8, "- Mara met Soot at the mill. (#3)", "Wednesday, 31 October 2018"),
        dated(9, 20, "- Soot stole 3 lamps at Halden's. (#12)", "Wednesday, 31 October 2018"),
    ]
    first = f"{QUOTED_SYNOPSIS_LEAD}\n" + extract_passages(synopsis_passages(None, chapters), 1000)
    later = dated(41, 50, "- The ferry ran again. (#44)", "Saturday, 3 November 2018")
    passages = synopsis_passages(first, [later], base_quoted=True)
    assert [(p.label, p.time) for p in passages] == [
        ("#1-#8", "Wednesday, 31 October 2018"),
        ("#9-#20", "Wednesday, 31 October 2018"),
        ("#41-#50", "Saturday, 3 November 2018"),
    ]
    # Room for one line: the line that said the date is left out, the one quoted says it.
    tight = extract_passages(passages, 45)
    assert tight == "#9-#20, Wednesday, 31 October 2018: - Soot stole 3 lamps at Halden's. (#12)"
    again = extract_passages(passages, 1000)
    assert again.splitlines() == [
        "#1-#8, Wednesday, 31 October 2018: - Mara met Soot at the mill. (#3)",
        "#9-#20: - Soot stole 3 lamps at Halden's. (#12)",
        "#41-#50, Saturday, 3 November 2018: - The ferry ran again. (#44)",
    ]


def test_a_time_with_a_colon_or_a_line_break_keeps_the_label_readable() -> None:
    """A story time is free text (the chronicler's "When:"): a ": " in it would end the label
    there when the quote is read back, a line break would end the line."""
    assert label_time("Day 3: dawn\n at the  pier") == "Day 3 - dawn at the pier"
    assert label_time("10:30, Monday") == "10:30, Monday"  # no space after it: a clock time
    assert label_time("Evening:") == "Evening"
    assert label_time(" \n ") is None and label_time(None) is None
    chapter = dated(1, 8, "- Mara met Soot. (#3)", "Day 3: dawn\nat 10:30")
    first = f"{QUOTED_SYNOPSIS_LEAD}\n" + extract_passages(synopsis_passages(None, [chapter]), 400)
    assert first.splitlines()[1:] == ["#1-#8, Day 3 - dawn at 10:30: - Mara met Soot. (#3)"]
    (again,) = synopsis_passages(first, [], base_quoted=True)
    assert (again.label, again.time, again.text) == (
        "#1-#8",
        "Day 3 - dawn at 10:30",
        "- Mara met Soot. (#3)",
    )


def test_a_synopsis_quoted_with_a_cut_time_is_quoted_again_without_it() -> None:
    """A synopsis quoted from chapters stored before D-51 holds a "When:" the grammar cut in
    its labels; quoted again, the line has no time."""
    first = (
        f"{QUOTED_SYNOPSIS_LEAD}\n"
        "#1-#8, She was here in the spring of '…: - Mara met Soot. (#3)\n"
        "#9-#16, that night: - Soot stole the lamp. (#12)"
    )
    passages = synopsis_passages(first, [], base_quoted=True)
    assert [(p.label, p.time) for p in passages] == [("#1-#8", None), ("#9-#16", "that night")]
    assert extract_passages(passages, 1000).splitlines() == [
        "#1-#8: - Mara met Soot. (#3)",
        "#9-#16, that night: - Soot stole the lamp. (#12)",
    ]


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


def test_a_speakers_name_with_nothing_after_it_is_not_quoted() -> None:
    # Lighthouse, seed 2: a draft's line "Mara: … …" was quoted again as "So far: … Mara: … …",
    # a name (worth double) in a few characters outweighing every sentence of the story.
    draft = "So far in the story, Mara says the Reach is wrong.\nMara: … …\nCorwin: …"
    passages = [Passage("So far", draft), Passage("#40-#52", "- Ann paid 40 crowns. (#44)")]
    for limit in (20, 60, 400):
        quoted = extract_passages(passages, limit)
        assert "Mara: …" not in quoted and "Corwin" not in quoted, quoted
    assert extract_passages(passages, 400) == (
        "So far: So far in the story, Mara says the Reach is wrong. …\n"
        "#40-#52: - Ann paid 40 crowns. (#44)"
    )
    # Said before a sentence, the name stays with it, as a message's label does.
    said = [Passage("So far", "Mara: …\nI measured the bar twice.")]
    assert extract_passages(said, 400) == "So far: Mara: … I measured the bar twice."


def test_a_line_cut_to_fit_says_which_text_it_is_an_extract_of() -> None:
    line = "So far in the story, Mara surveyed the north cove and found the bar moved."
    assert extract_passages([Passage("So far", line)], 40).endswith("[extract of So far]")
    shortened = extract_passages([Passage("#12 Mara", line)], 40)
    assert shortened.startswith("#12 Mara: So far") and shortened.endswith("[extract of #12]")


def _range(lines: list[tuple[str, str]]) -> list[Message]:
    return [
        Message(id=number, role=Role.CHARACTER, speaker=speaker, text=text)
        for number, (speaker, text) in enumerate(lines, start=40)
    ]


def test_a_tight_extract_quotes_what_is_said_once_over_openings_every_line_repeats() -> None:
    # Every line opens alike and names the cast; one states a specific the story never says
    # again. The old extract took each message's opening first and kept none of it.
    lines = [
        ("Corwin", "Mara, the lamp is lit again tonight. The weather turns cold."),
        ("Corwin", "Mara, the lamp is lit again. The clapper of the fog bell was cracked."),
        ("Corwin", "Mara, the lamp is lit again tonight. The weather turns grey."),
        ("Corwin", "Mara, the lamp is lit again. Piet will name his boat the Albatross."),
        ("Corwin", "Mara, the lamp is lit again tonight. The weather holds."),
    ]
    text = extract(_range(lines), 120)
    assert "The clapper of the fog bell was cracked." in text
    assert "Piet will name his boat the Albatross." in text
    assert text.count("the lamp is lit again") <= 1  # said once, it is there


def test_a_sentence_that_repeats_what_is_quoted_gives_way_to_one_that_adds() -> None:
    lines = [
        ("Mara", "The Albatross drew fourteen feet loaded."),
        ("Corwin", "The Albatross drew fourteen feet, loaded, that winter."),
        ("Mara", "Nineteen hands were lost off Pellmouth."),
    ]
    text = extract(_range(lines), 100)
    assert "fourteen feet loaded." in text
    assert "Nineteen hands were lost off Pellmouth." in text
    assert "that winter" not in text


def test_a_summary_that_keeps_nothing_of_its_sources_is_thin_and_a_fair_one_is_not() -> None:
    passages = message_passages(
        _range(
            [
                ("Corwin", "The Albatross went down in the gale of '87 with nineteen hands."),
                ("Mara", "I surveyed the north cove first: the lowest tides fall on the 4th."),
                ("Corwin", "The clapper of the fog bell was cracked, so I rang it by hand."),
            ]
        )
    )
    fair = "The Albatross sank in '87 with nineteen hands; the fog bell's clapper cracked."
    assert kept_share(fair, passages) >= THIN_SHARE
    nothing = "So far in the story, the chronicler is not saying anything."
    assert kept_share(nothing, passages) < THIN_SHARE
    assert kept_share("anything", []) == 1.0  # nothing to keep: never thin
    # Held against its room: a short line that keeps one fact is fair for its own length and
    # thin against the quote its room holds, which keeps every name, number and date.
    short = "The Albatross went down."
    assert kept_share(short, passages) >= THIN_SHARE
    assert kept_share(short, passages, room_chars=len(fair) * 2) < THIN_SHARE
    assert kept_share(fair, passages, room_chars=len(fair)) == kept_share(fair, passages)
