"""Scene dates found in message openings: what counts as a scene's date and how long it holds."""

from __future__ import annotations

import pytest

from kotonia_tui.sentences import CUT_MARK
from kotonia_tui.story_dates import (
    chapter_time,
    dates_in,
    scene_date,
    scene_dates,
    span,
    speakers_line,
    told_time,
    uncut_dates,
)


@pytest.mark.parametrize(
    ("text", "date"),
    [
        (
            '*Friday, 19 October 2018, 7:42 pm. Prompt: "Mozart?"*\nBeethoven!',
            "Friday, 19 October 2018",
        ),
        ("March 3rd, 1889. The fog has not lifted.", "March 3rd, 1889"),
        ("*The 3rd of May, at dawn.* She wakes.", "3rd of May"),
        ("2024-02-29: the log's last entry.", "2024-02-29"),
        ("*Monday morning.* The sea is calm.", "Monday"),
        ("*Sept. 12, 1920* The train is late.", "Sept. 12, 1920"),
        ("\n\n  *Oct 2019*  \nLater lines", "Oct 2019"),
    ],
)
def test_a_date_opening_a_message_is_its_scene_date_as_written(text: str, date: str) -> None:
    assert scene_date(text) == date


@pytest.mark.parametrize(
    "text",
    [
        '"On 3 May my sister marries," she said.',  # a date in speech is not the scene's
        "She sat down. Sun rose over the hills.",  # not weekdays
        "I may go, if you march with me.",
        "*Late that night* nothing moved.",  # a time without a date
        "The harbour.\nFriday, 19 October 2018 was the day she left.",  # not the first line
        "",
    ],
)
def test_dates_outside_an_opening_or_words_that_only_look_like_them_are_not_scene_dates(
    text: str,
) -> None:
    assert scene_date(text) is None


def test_a_scene_keeps_its_date_until_an_opening_names_another() -> None:
    dates = scene_dates(
        [
            (1, "No date yet."),
            (2, "*Friday, 19 October 2018.* Hello."),
            (3, "Hi! What did you do today?"),
            (5, "*Saturday, 20 October 2018.* Back again."),
            (6, "Yes."),
        ]
    )
    assert dates == {
        2: "Friday, 19 October 2018",
        3: "Friday, 19 October 2018",
        5: "Saturday, 20 October 2018",
        6: "Saturday, 20 October 2018",
    }


def test_a_span_names_its_first_and_last_date() -> None:
    assert span([]) is None
    assert span(["Friday", "Friday"]) == "Friday"
    assert span(["Friday", "Saturday", "Friday", "Sunday"]) == "Friday to Sunday"


@pytest.mark.parametrize(
    ("chronicled", "dates", "time"),
    [
        (None, ["Friday, 19 October 2018"], "Friday, 19 October 2018"),
        ("  ", ["Friday, 19 October 2018"], "Friday, 19 October 2018"),
        ("evening", ["Friday, 19 October 2018"], "Friday, 19 October 2018"),
        ("Friday", ["Friday, 19 October 2018"], "Friday, 19 October 2018"),
        ("19 October 2018", ["Friday, 19 October 2018"], "Friday, 19 October 2018"),
        ("Friday, 19 October 2018 at 7 pm", ["Friday, 19 October 2018"], None),
        (
            "Friday, 19 October 2018",
            ["Friday, 19 October 2018", "Saturday"],
            "Friday, 19 October 2018 to Saturday",
        ),
        ("Friday and Saturday", ["Friday", "Saturday"], None),
        ("May 3rd, 1999", ["March 3rd, 1889"], "March 3rd, 1889"),  # not the story's date
        ("dawn", [], None),
        (None, [], None),
    ],
)
def test_a_chapter_keeps_the_chroniclers_time_only_when_it_names_the_ranges_dates(
    chronicled: str | None, dates: list[str], time: str | None
) -> None:
    """`time` None: the chronicler's, as it wrote it (stripped)."""
    expected = time if time is not None else (chronicled or "").strip() or None
    assert chapter_time(chronicled, dates) == expected


def test_dates_anywhere_in_a_text_as_written() -> None:
    assert dates_in("From Friday, 19 October 2018 to the 3rd of May; then friday.") == [
        "Friday, 19 October 2018",
        "3rd of May",
    ]


SPAN_WRITTEN = "Friday, 19 October 2018 to Saturday, 20 October 2018"
# The story's speakers, as the chronicler's reply is read with them (memory/structured.py).
NAMES = ("Mara", "Piet", "マラ")
# What a 270M chronicler wrote in "When:" over eight evaluation runs, shown as the time of
# recalled excerpts: strings the grammar cut (marked so: memory/cut_items.py) and speakers'
# lines.
NOT_TIMES = [
    "Mara says: I've had enough of",
    f"Mara says: I'll call you when I{CUT_MARK}",
    f"She was here in the spring of '{CUT_MARK}",
    f"She was here in 1887, after the{CUT_MARK}",
    f"that night, when the ferry{CUT_MARK}",  # cut: what it was saying is not there
    "Piet: see you tomorrow night",
    "mara whispers to Piet: tomorrow",
    "マラ：もう我慢できない",  # a speaker's line in another script, with its colon
    "マラは言った：明日また来る",
    "Mara says: on Friday, 19 October 2018 I leave",  # names the range's date, still a line
    "",
    "   ",
]
TIMES = [
    "5th of October",
    "28 SEPT",
    "Wednesday, 31 October 2018",
    "Friday, 19 October 2018, evening",
    "that night",
    "the next morning",
    "Monday",
    "spring of '88",
    "at 7:42 pm",
    "10:30 pm",
    "Day 2: noon",  # a label before a colon that is no name
    "Chapter 3: evening",
    "Tag 2: Abend",
    "Morning: the harbour",
    "Marathon day: noon",  # opens with a name's letters, not with the name
    "Mara's birthday: evening",
    "Friday, 19 October 2018 to Saturday, 20 October 2018",  # a span chapter_time writes
    # No word is read: a time in any language is one.
    "Am nächsten Morgen",
    "Le lendemain",
    "Noche",
    "翌日の朝",
    "Вечер",
    "Через три дня",
    "2018年10月19日",
]


@pytest.mark.parametrize("said", NOT_TIMES)
def test_a_cut_string_or_a_speakers_line_is_no_chapter_time(said: str) -> None:
    assert told_time(said, NAMES) is None
    # Given to chapter_time (which reads no names) as the chronicler's, each gives way to the
    # range's written dates but a speaker's line that names them: reading the reply leaves
    # that one out (tests/chat/test_chapter_dates.py).
    written = "Friday, 19 October 2018"
    names_it = written in said and not said.endswith(CUT_MARK)
    assert chapter_time(said, [written]) == (said if names_it else written)


@pytest.mark.parametrize("said", TIMES)
def test_a_time_the_chronicler_writes_is_the_chapters_when_the_range_has_no_dates(
    said: str,
) -> None:
    assert told_time(f"  {said} ", NAMES) == said
    assert chapter_time(f"  {said} ", []) == said


def test_without_the_cast_only_the_cut_mark_is_read() -> None:
    """Read from the store, a time's speakers are not known: a speaker's line is kept, a cut
    string is not."""
    assert told_time("Mara says: I've had enough of") == "Mara says: I've had enough of"
    assert told_time(f"She was here in the spring of '{CUT_MARK}") is None
    assert chapter_time(f"She was here in the spring of '{CUT_MARK}", []) is None
    assert not speakers_line("Mara: tomorrow", [])


def test_a_sentence_the_grammar_did_not_cut_is_kept_as_the_time() -> None:
    """A known limit (docs/decisions.md D-51): no word is read, so a short sentence without a
    cut or a speaker's head stands as the chapter's time."""
    for said in ("Mara wakes up in the morning", "Mara says we leave at dawn"):
        assert told_time(said, NAMES) == said


@pytest.mark.parametrize(
    ("cut", "kept"),
    [
        ("Friday, 19 October 2018, eveni", "Friday, 19 October 2018"),
        ("Friday, 19 October 2018", "Friday, 19 October 2018"),  # a year cannot go on
        ("Friday, 19 October 20", "Friday, 19 October"),  # the year cut, the day whole
        ("October 19, 2018, after the", "October 19, 2018"),
        ("2018-10-19 in the early mor", "2018-10-19"),
        # A day and a month at the cut: only a year could follow, which keeps the day.
        ("Friday, 19 October", "Friday, 19 October"),
        ("Mara left on the 3rd of May", "3rd of May"),
        # An ISO date before a time, or a script written without spaces, is whole.
        ("2018-10-19T20:0", "2018-10-19"),
        ("2018-10-19の夜", "2018-10-19"),
        ("2018-10-19", "2018-10-19"),
        ("Friday, 19 October 2018 to Saturday, 20 October 2018, ni", SPAN_WRITTEN),
        # The weekday before a month the cut ran into is whole on its own.
        ("Friday, 19 October 2018 to Saturday, 20 Octo", "Friday, 19 October 2018 to Saturday"),
        (
            "Friday, 19 October 2018 to Saturday, 20 Oct",
            "Friday, 19 October 2018 to Saturday, 20 Oct",
        ),
        # A date the cut ran into may be another one: "October 1" of "October 19".
        ("Mara left on October 1", None),
        ("Friday, 19 Octobe", "Friday"),
        ("2018-10-19th", None),  # a letter that may go on: not a time's "T"
        ("She was here in the spring of '", None),
        ("Am nächsten Abend, nachdem Corwin", None),
    ],
)
def test_of_a_time_the_grammar_cut_only_the_dates_it_writes_whole_are_kept(
    cut: str, kept: str | None
) -> None:
    assert uncut_dates(cut) == kept


def test_a_month_is_a_whole_word() -> None:
    """A word that starts like a month names no date: "3 Mayfair" is an address, "2 Decades"
    a span; the month's own abbreviations and full names still count."""
    assert dates_in("We met at 3 Mayfair Lane. 2 Decades later, 4 Marines came.") == []
    assert dates_in("3 May 1887, then 19 Oct. 2018 and Sept 5") == [
        "3 May 1887",
        "19 Oct. 2018",
        "Sept 5",
    ]
