"""Scene dates: the calendar dates a conversation states at the opening of its messages.

A story, or a chat imported with its sessions, says when a scene happens in the line that
opens it ("*Friday, 19 October 2018, evening.*", "March 3rd, 1889. The fog has not lifted.").
The scene keeps that date until a later opening names another one. Code finds these dates, so
a recalled excerpt or a chapter can say when it happened without asking the model, and a date
survives folding even when the chronicler leaves its "When:" line empty. What the chronicler
writes there counts only when it reads as a time (`reads_as_time`).

Only a date in a message's opening line counts, outside quoted speech: a date someone
mentions in passing ("my sister marries on 3 May") is not the day of the scene. The date is
kept as the conversation wrote it, with its spaces tidied: nothing is computed or invented.
English month and weekday names, and ISO dates; other calendars are not recognised.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from kotonia_tui.terms import has_unspaced

# How much of a message's first line is its opening: a scene header is short.
OPENING_CHARS = 200

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_WEEKDAY = r"(?:Mon|Tues?|Wed(?:nes)?|Thu(?:rs)?|Fri|Sat(?:ur)?|Sun)(?:day)?\.?"
_WEEKDAY_NAME = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day"
_DAY = r"(?:[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:1\d{3}|2\d{3})"

_DATE = re.compile(
    rf"""
    \b(?:
        (?:{_WEEKDAY},?\s+)?
        (?:
            {_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?      # 19 October 2018, 3rd of May
          | {_MONTH}\s+{_DAY}\b(?:,?\s+{_YEAR})?             # October 19, 2018
          | {_MONTH}\s+{_YEAR}                                 # October 2018
        )
      | {_YEAR}-[01]\d-[0-3]\d                                 # 2018-10-19
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


def dates_in(text: str) -> list[str]:
    """The dates `text` writes anywhere, as written, in order (a bare weekday only as a
    capitalised name)."""
    found: list[str] = []
    for match in _DATE.finditer(text):
        written = _SPACES.sub(" ", match.group(0)).strip(" ,.")
        if _BARE_WEEKDAY.match(written) and not written[:1].isupper():
            continue
        found.append(written)
    return found


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


# A time is a few words: a scene header's date and part of the day ("Friday, 19 October 2018,
# evening"), or a phrase and what it is relative to ("three days later, at dusk", "late
# afternoon on the day of the funeral": eight). Longer, it is a sentence that mentions a time.
# The dates it writes are not counted, so a span of two full dates (what `chapter_time`
# stores when the conversation wrote them) is one.
TIME_WORDS = 8
# The mark a string the chronicler's grammar ended at its length limit carries
# (memory/cut_items.CUT_MARK): the rest of what it was writing is not there.
CUT_MARK = "…"
# Words that say when (English, like the dates): a part of the day or a season, a unit of time
# ("three days later", "that week"), a relative time, a feast, a clock time, a day of the
# month ("the 14th"), a year said as one ("in 1887", "spring of '88"). A weekday or a date is
# found by `dates_in`; a month alone counts with its capital (not "May": "she may").
_TIME_WORD = re.compile(
    r"""
    \b(?:
        (?:mid-?)?(?:morning|afternoon|evening|night|noon|midday|midnight|dawn|dusk|daybreak|sunrise
          |sunset|sundown|twilight|nightfall|daytime|night-?time|bedtime|lunchtime|teatime
          |spring|summer|autumn|fall|winter
          |minute|hour|day|week|weekend|fortnight|month|year|decade|century|centuries
          |tonight|today|tomorrow|yesterday|overnight|later|earlier|meanwhile|ago
          |afterwards?|christmas|easter|halloween|new\ year|o'clock)s?
      | [0-2]?\d:[0-5]\d                                   # 7:42, 19:00
      | \d{1,2}[/.]\d{1,2}[/.](?:\d\d)?\d\d                # 12/25/2020, 25.12.20
      | [01]?\d\s?[ap]\.?m                                 # 7 pm, 7a.m.
      | (?:[12]?\d|3[01])(?:st|nd|rd|th)                    # the 14th
      | [12]\d{3}s                                          # the 1990s
      | (?:in|of|since|until|by|around|circa)\s+(?:the\s+)?(?:year\s+)?[12]\d{3}s?
    )\b
    | '\d\d\b                                               # '88
    | ^[12]\d{3}s?$                                          # 1887, the year alone
    """,
    re.VERBOSE | re.IGNORECASE,
)
_MONTH_NAME = re.compile(
    r"\b(?:January|February|March|April|June|July|August|September|October|November"
    r"|December)\b"
)
# A line someone says, as the chronicler copies it: "Mara says: ...", "Mara: ...", or a
# sentence about someone ("She was here in ...", "I'll call you when ..."), not a time.
_SAYS = re.compile(
    r"^\S+(?:\s+\S+){0,2}?\s+(?:says|said|asks|asked|replies|replied|tells|told|whispers"
    r"|whispered|shouts|shouted|writes|wrote)\b",
    re.IGNORECASE,
)
_HEAD = re.compile(r"^([^:]+):(?:\s|$)")
_SUBJECT = re.compile(r"^(?:I|you|he|she|we|they)(?:['\u2019]\w+)?\b", re.IGNORECASE)
# A question, an exclamation or quoted speech is a line of the story, in any script.
_SPOKEN = re.compile('[?!"\u201c\u201d\u00ab\u00bb\u300c\u300d\u300e\u300f\uff01\uff1f]')
# A speaker's name before a line in any script ("Mara: ...", "マラ：...").
_ANY_HEAD = re.compile("^[^:\uff1a]+[:\uff1a]")
# In a script written without spaces (Japanese, Chinese, Thai, ...), the letters of a time of
# TIME_WORDS words: about two a word ("十月十九日の夜" is seven).
UNSPACED_TIME_LETTERS = 2 * TIME_WORDS


def _names_a_time(text: str) -> bool:
    return bool(dates_in(text) or _TIME_WORD.search(text) or _MONTH_NAME.search(text))


def _in_latin(text: str) -> bool:
    """Whether `text` has no letter, or one of the Latin script (what the English rule can
    read); else it is written in another script only (翌日の朝, Вечер)."""
    letters = [c for c in text if c.isalpha()]
    return not letters or any(unicodedata.name(c, "").startswith("LATIN") for c in letters)


def _short_unread(said: str) -> bool:
    """A time in a script the English words do not read, judged by its shape alone: no
    speaker's name before it, at most TIME_WORDS words, and at most UNSPACED_TIME_LETTERS
    letters of a script written without spaces."""
    if _ANY_HEAD.match(said) or len(said.split()) > TIME_WORDS:
        return False
    return sum(1 for c in said if c.isalpha() and has_unspaced(c)) <= UNSPACED_TIME_LETTERS


def reads_as_time(text: str | None) -> bool:
    """Whether a chapter's in-story time as written (the chronicler's "When:", or one stored)
    reads as a time: a few words (TIME_WORDS, not counting the dates it writes) that name a
    time (a date `dates_in` finds, a weekday, a clock time, a part of the day or a season, a
    relative time: "the next morning", "three days later", "spring of '88"), not cut by the
    grammar (ending in CUT_MARK), and not a line of the story: "Mara says: ...", "Mara: ...",
    "She was here ...", a question, an exclamation or quoted speech.

    The words are English, like the dates. A time written only in another script (the
    chronicler writes in the story's language: "翌日の朝", "Вечер") is judged by its shape
    alone (`_short_unread`): dropping it would take the time from every chapter of a
    Japanese story. A time in another language written in Latin letters ("Am nächsten
    Morgen") names no English time word and is not kept.

    A small chronicler fills "When:" with whatever it copies, shown then as the time of
    recalled excerpts ("In-story time: Mara says: I've had enough of"; docs/decisions.md
    D-51)."""
    said = _SPACES.sub(" ", text or "").strip()
    if not said or said.endswith(CUT_MARK) or _SPOKEN.search(said):
        return False
    if not _in_latin(said):
        return _short_unread(said)
    if _SAYS.match(said) or _SUBJECT.match(said):
        return False
    head = _HEAD.match(said)
    if head and len(head.group(1).split()) <= 4 and not _names_a_time(head.group(1)):
        return False  # a speaker's name before the line ("Mara:"), not "Day 2: noon"
    rest = _DATE.sub(" ", said)
    if len([w for w in rest.split() if any(c.isalnum() for c in w)]) > TIME_WORDS:
        return False
    return _names_a_time(said)


def told_time(text: str | None) -> str | None:
    """`text` stripped when it reads as a time (`reads_as_time`), else None."""
    return text.strip() if text is not None and reads_as_time(text) else None


def chapter_time(chronicled: str | None, dates: Sequence[str]) -> str | None:
    """A chapter's in-story time: the chronicler's "When:" (`chronicled`) or the `span` of
    the scene dates of its range (`dates`, in story order, the first being the date in
    force when the range begins); None when neither gives one.

    The chronicler's counts only when it reads as a time (`reads_as_time`). It stays when the
    range has no dates, or when it names the range's first and last dates in full (it may add
    the hour or the part of the day). When it names none, only vaguer words ("that evening",
    a weekday where the range has a full date), part of the range, or a date the conversation
    does not write for these messages, the range's span is the chapter's time: a date the
    conversation wrote is a fact, the chronicler's a reading of it (a small model invents
    dates, or leaves "When:" empty)."""
    written = span(dates)
    said = told_time(chronicled)
    if said is None or written is None:
        return said or written
    named = [d.casefold() for d in dates_in(said)]
    ends = {_SPACES.sub(" ", d).casefold() for d in (dates[0], dates[-1])}
    if all(any(end in date for date in named) for end in ends):
        return said
    return written
