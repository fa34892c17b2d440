"""Scene dates: the calendar dates a conversation states at the opening of its messages.

A story, or a chat imported with its sessions, says when a scene happens in the line that
opens it ("*Friday, 19 October 2018, evening.*", "March 3rd, 1889. The fog has not lifted.").
The scene keeps that date until a later opening names another one. Code finds these dates, so
a recalled excerpt or a chapter can say when it happened without asking the model, and a date
survives folding even when the chronicler leaves its "When:" line empty. What the chronicler
writes there counts only when it is a time it finished (`told_time`), not a string its grammar
cut (of which only the dates it writes whole are kept: `uncut_dates`) or a speaker's line.

Only a date in a message's opening line counts, outside quoted speech: a date someone
mentions in passing ("my sister marries on 3 May") is not the day of the scene. The date is
kept as the conversation wrote it, with its spaces tidied: nothing is computed or invented.
English month and weekday names, and ISO dates; other calendars are not recognised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from kotonia_tui.sentences import CUT_MARK
from kotonia_tui.terms import has_unspaced

# How much of a message's first line is its opening: a scene header is short.
OPENING_CHARS = 200

# A month's name as a whole word: "3 Mayfair" or "2 Decades" names no date.
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)(?![^\W\d_])\.?"
)
_WEEKDAY = r"(?:Mon|Tues?|Wed(?:nes)?|Thu(?:rs)?|Fri|Sat(?:ur)?|Sun)(?:day)?\.?"
_WEEKDAY_NAME = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day"
_DAY = r"(?:[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:1\d{3}|2\d{3})"
_ISO_DATE = rf"{_YEAR}-[01]\d-[0-3]\d"  # 2018-10-19

_DATE = re.compile(
    rf"""
    \b(?:
        (?:{_WEEKDAY},?\s+)?
        (?:
            {_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?      # 19 October 2018, 3rd of May
          | {_MONTH}\s+{_DAY}\b(?:,?\s+{_YEAR})?             # October 19, 2018
          | {_MONTH}\s+{_YEAR}                                 # October 2018
        )
      | {_ISO_DATE}                                            # 2018-10-19
      | {_WEEKDAY_NAME}(?=[\s,.;:*_)]|$)                        # Friday (a scene's day alone)
    )
    """,
    re.VERBOSE | re.IGNORECASE,
)
# Quoted speech is left out of the opening; straight and curly quotes alike.
_QUOTED = re.compile(r"\"[^\"]*\"|\u201c[^\u201d]*\u201d")
# A weekday alone counts when written as a name, with its capital.
_BARE_WEEKDAY = re.compile(rf"^{_WEEKDAY_NAME}$", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def opening(text: str) -> str:
    """The part of a message that can hold its scene's date: its first non-empty line, at
    most OPENING_CHARS characters, without quoted speech."""
    first = text.lstrip()[:OPENING_CHARS].splitlines()[:1]
    return _QUOTED.sub(" ", first[0]) if first else ""


def _found(text: str) -> Iterable[tuple[str, int]]:
    """Each date `text` writes, as written, with where its match ends in `text`."""
    for match in _DATE.finditer(text):
        written = _SPACES.sub(" ", match.group(0)).strip(" ,.")
        if _BARE_WEEKDAY.match(written) and not written[:1].isupper():
            continue
        yield written, match.end()


def dates_in(text: str) -> list[str]:
    """The dates `text` writes anywhere, as written, in order (a bare weekday only as a
    capitalised name)."""
    return [written for written, _ in _found(text)]


# A date that ends where a cut string ends is whole only when what could follow would not change
# its day: after a year (four digits), an ISO date, or a day and a month ("19 October": only a
# year could follow). "October 1" may be "October 19" cut.
_WHOLE_AT_CUT = re.compile(
    rf"(?<!\d)\d{{4}}$|^{_ISO_DATE}$|\d(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}$",
    re.IGNORECASE,
)
_ISO = re.compile(rf"^{_ISO_DATE}$")


def _runs_on(written: str, after: str) -> bool:
    """Whether the date `written` may go on into `after`, the text after it: a letter or a
    digit follows ("19 Oct" of "19 Octobe"), other than a time after an ISO date ("T" of
    "2018-10-19T20:00") or a letter of a script written without spaces ("2018-10-19の夜"),
    which no date's word goes on with."""
    first = after[:1]
    if not first.isalnum() or has_unspaced(first):
        return False
    return not (first == "T" and _ISO.match(written))


def uncut_dates(text: str) -> str | None:
    """What a string its grammar cut at its length limit (`text`, a chapter's story time:
    memory/cut_items.time_cut) still says whole of when: the `span` of the dates it writes
    that the cut did not reach ("Friday, 19 October 2018" of "Friday, 19 October 2018,
    eveni"); None when there is none. A date the string goes on from with a letter or a
    digit ran into the cut ("19 Oct" of "19 Octobe"), unless it is an ISO date before a time
    ("2018-10-19T20:0") or the letter is of a script without spaces ("2018-10-19の夜"); one
    that ends at the cut is whole only if what could follow would not change its day: it
    ends in a year, is an ISO date, or is a day and a month ("Friday, 19 October"), and not
    a month and a day ("October 1" may be "October 19"; `_WHOLE_AT_CUT`)."""
    whole: list[str] = []
    for written, end in _found(text):
        after = text[end:]
        if _runs_on(written, after) or (not after.strip() and not _WHOLE_AT_CUT.search(written)):
            continue
        whole.append(written)
    return span(whole)


def scene_date(text: str) -> str | None:
    """The date a message's opening gives its scene, as written; None when it gives none.
    The longest date found wins ("Friday, 19 October 2018" over a later bare "Friday")."""
    found = dates_in(opening(text))
    return max(found, key=len) if found else None


def scene_dates(messages: Iterable[tuple[int, str]]) -> dict[int, str]:
    """For each (id, text) in story order, the date of the scene it belongs to: the date the
    latest opening at or before it gave. Messages before any dated opening are left out."""
    out: dict[int, str] = {}
    current: str | None = None
    for message_id, text in messages:
        current = scene_date(text) or current
        if current is not None:
            out[message_id] = current
    return out


def span(dates: Iterable[str]) -> str | None:
    """The dates of a run of messages as one phrase: one date, or "first to last"."""
    ordered: list[str] = []
    for date in dates:
        if not ordered or ordered[-1] != date:
            ordered.append(date)
    if not ordered:
        return None
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]} to {ordered[-1]}"


# A speaker's line is headed by a few words before a colon (Latin or full-width): "Mara:",
# "Mara says:", "マラ：". A longer head is a sentence that goes on after a colon.
SPEAKER_HEAD_WORDS = 4
_HEAD = re.compile("^([^:\uff1a]+)[:\uff1a]")


def speakers_line(text: str, names: Iterable[str]) -> bool:
    """Whether `text` is a line of the story as the chronicler copies it: a head of at most
    SPEAKER_HEAD_WORDS words before a colon (":" or "："), with no digit, that opens with one
    of `names` (the story's speakers) as a whole word ("Mara: ...", "Mara says: ...",
    "マラ：..."). A label that names a time ("Day 2: noon", "Tag 2: Abend") opens with no
    name, or has a digit. Without `names` nothing is a speaker's line: no word of any
    language is read for it."""
    head = _HEAD.match(text.strip())
    if head is None:
        return False
    said = head.group(1).strip()
    if not said or len(said.split()) > SPEAKER_HEAD_WORDS or any(c.isdigit() for c in said):
        return False
    folded = said.casefold()
    for name in names:
        name = " ".join(name.split()).casefold()
        if name and folded.startswith(name):
            after = folded[len(name) :]
            # A whole name: "Mara says", not "Marathon" or "Mara's birthday"; a name in a
            # script written without spaces runs on into what follows ("マラは言った").
            if not after or after[0].isspace() or has_unspaced(name[-1]):
                return True
    return False


def told_time(text: str | None, names: Iterable[str] = ()) -> str | None:
    """A chapter's in-story time as the chronicler wrote it or as it is stored (`text`),
    stripped; None when there is none, or when it is no time the chronicler finished: a
    string its grammar cut (it ends in CUT_MARK, as D-50 marked one before D-51; a time the
    model ended with "…" is stored without it, memory/structured.read_chapter) or, with the
    story's speakers (`names`), a speaker's line (`speakers_line`). The words are not
    judged: a time in any language is kept, and so is a short sentence the grammar did not
    cut ("Mara wakes up"; docs/decisions.md D-51)."""
    said = (text or "").strip()
    if not said or said.endswith(CUT_MARK) or speakers_line(said, names):
        return None
    return said


def chapter_time(chronicled: str | None, dates: Sequence[str]) -> str | None:
    """A chapter's in-story time: the chronicler's "When:" (`chronicled`) or the `span` of
    the scene dates of its range (`dates`, in story order, the first being the date in
    force when the range begins); None when neither gives one.

    The chronicler's is what reading its reply kept (memory/structured.read_chapter: no
    speaker's line; of a string its grammar cut, only the dates the cut did not reach), as
    `told_time` reads it. It stays when the range has no dates, or when it names the range's
    first and last dates in full (it may add the hour or the part of the day). When it names
    none, only vaguer words ("that evening", a weekday where the range has a full date), part
    of the range, or a date the conversation does not write for these messages, the range's
    span is the chapter's time: a date the conversation wrote is a fact, the chronicler's a
    reading of it (a small model invents dates, or leaves "When:" empty)."""
    written = span(dates)
    said = told_time(chronicled)
    if said is None or written is None:
        return said or written
    named = [d.casefold() for d in dates_in(said)]
    ends = {_SPACES.sub(" ", d).casefold() for d in (dates[0], dates[-1])}
    if all(any(end in date for date in named) for end in ends):
        return said
    return written
