"""Scene dates found in message openings: what counts as a scene's date and how long it holds."""

from __future__ import annotations

import pytest

from kotonia_tui.memory.cut_items import CUT_MARK
from kotonia_tui.story_dates import (
    chapter_time,
    dates_in,
    reads_as_time,
    scene_date,
    scene_dates,
    span,
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


# What a 270M chronicler wrote in "When:" over eight evaluation runs, shown as the time of
# recalled excerpts; and sentences that are no time.
NOT_TIMES = [
    "Mara says: I've had enough of",
    f"Mara says: I'll call you when I{CUT_MARK}",
    f"She was here in the spring of '{CUT_MARK}",
    f"She was here in 1887, after the{CUT_MARK}",
    "She was here in the spring of '",  # cut before cuts were marked
    "Piet: see you tomorrow night",
    "Mara says we leave at dawn",
    f"that night, when the ferry{CUT_MARK}",  # cut: what it was saying is not there
    "Mara walks Piet to the lighthouse.",
    "Ann has a sister, Mia, who lands on the 14th and stays a week.",
    "I'll call you tonight",
    "What day is it?",
    '"See you tomorrow"',
    "マラ：もう我慢できない",  # a speaker's line in another script
    "マラは「明日また来る」と言った",
    "マラは港でピートを待っていたが彼は来なかった",  # a sentence: too long for a time
    "",
]
TIMES = [
    "5th of October",
    "28 SEPT",
    "Wednesday, 31 October 2018",
    "Friday, 19 October 2018, evening",
    "that night",
    "the next morning",
    "Monday",
    "three days later",
    "spring of '88",
    "dawn",
    "at 7:42 pm",
    "the 14th",
    "late October",
    "Day 2: noon",
    "Three days later, at the harbour at dusk",
    "Friday, 19 October 2018 to Saturday, 20 October 2018",  # a span chapter_time writes
    "10:30 pm",
    "1887",
    "the 1990s",
    "midafternoon",
    "12/25/2020",
    # The chronicler writes in the story's language: another script is judged by its shape.
    "翌日の朝",
    "夜",
    "2018年10月19日",
    "Через три дня",
]


@pytest.mark.parametrize("said", NOT_TIMES)
def test_a_line_of_the_story_a_cut_phrase_or_a_sentence_is_no_chapter_time(said: str) -> None:
    assert not reads_as_time(said)
    assert chapter_time(said, []) is None
    # The range's written dates are still its time.
    assert chapter_time(said, ["Friday, 19 October 2018"]) == "Friday, 19 October 2018"


@pytest.mark.parametrize("said", TIMES)
def test_a_time_the_chronicler_writes_is_the_chapters_when_the_range_has_no_dates(
    said: str,
) -> None:
    assert reads_as_time(said)
    assert chapter_time(f"  {said} ", []) == said


def test_a_speakers_line_naming_the_ranges_date_is_not_its_time() -> None:
    said = "Mara says: on Friday, 19 October 2018 I leave"
    assert chapter_time(said, ["Friday, 19 October 2018"]) == "Friday, 19 October 2018"
