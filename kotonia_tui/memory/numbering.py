"""Message references in a memory text, rewritten from store ids to the numbers the chat shows.

The store and the fold pipeline cite messages by store id (unique across every conversation):
a quoted line's label ("#337 Kyle: "), an item's evidence ("(#340 #341)"), a chapter's range
("#337-#375, Friday, 19 October 2018:"), a note ("quoted from messages #337-#375"). The chat
numbers a conversation's messages from #1. Whatever a person or the reply model reads is
rewritten here (`numbered_text`) with what the store says of the ids a text cites
(`asked_ids`); what is stored keeps the ids, so the fold pipeline, its grounding and existing
databases are unchanged. Pure and deterministic: the same text and the same store answers give
the same bytes (the prompt's prefix stays stable between folds; chat/numbering.py `numbering`
says what changes it).

Only references are rewritten, never a "#5" of the story (a room, a hashtag, "your #1 fan"):

- a quoted line's label, at a line's start or after a space, ending in ": " (or ":" ending the
  line, as a chapter's heading in the memory block): "#12 Mara: ", "#33-#51: ",
  "#33-#51, <time>: " (a one-message label names its speaker: "#12: " and "#12, Baker
  Street: " are not ones the pipeline writes);
- a citation, ids alone in brackets: "(#34)", "(#3 #7)", "(#3, #7)", "(#3-#5)";
- "message #12", "messages #12-#15" (notes and fold errors), "[extract of #12]" (a quote cut to
  fit, memory/extract.py `extract_mark`).

A cited message that was deleted is never shown by a number: its id would read as the number
of another message. It is said in words, as the ledger's evidence is said (`evidence_said`):

- a citation keeps the messages left and says the rest: "(#2 and a deleted message)",
  "(a deleted message)", "(2 deleted messages)";
- "message #6" reads "a deleted message", "[extract of #6]" "[extract of a deleted message]";
- a quoted line's label "#6 Kyle: " reads "(a deleted message) Kyle: ";
- a range ("#5-#9: ", "messages #5-#9", "(#5-#9)") is numbered by the messages still in it,
  from the count before its first (as a chapter's range is, chat/numbering.py
  `range_numbers`): its first deleted, it starts at the next message; with none left it reads
  "(no messages left)" as a label, "deleted messages" in a note or a citation.

Which ids are deleted the store says (`Store.deleted_messages`): message ids are never reused,
so a deleted message's id is one given out that no message has now. An id that is a message of
another conversation, or one never given out ("(#0)", "Room (#999999)"), is story text: the
chronicler cites only its source's ids.

What is ambiguous, and what is done about it (tests/memory/test_numbering.py):

- an id in a reference's shape is the conversation's message, a deleted one, or the story's:
  a story's "(#5)" or "message #5" whose 5 is a message of this conversation reads as its
  number, and one whose 5 was deleted (from any conversation: the store does not keep where a
  deleted message was) reads "a deleted message"; a bare "#5" is never rewritten, even when
  the chronicler's prose means a message by it. A run of more than 19 digits, or of digits
  other than ASCII, is no id, and is left as it is;
- a one-message label names its message's speaker ("#12 Mara: "): given the speakers, a label
  whose name is not that message's speaker is story text ("I'm your #12 fan: ...") and is left
  as it is; without them, its shape decides. A deleted message's speaker is not known: its
  label is read as one at the start of a line, where the pipeline writes its labels (a quoted
  sentence's white space is collapsed to spaces, so a message's own "#12 fan: " never starts a
  line; the chronicler's text would have to start one so); inside a line (a quote quoted again
  in the synopsis) only when it names one of the conversation's speakers (`numbered_text`'s
  `names`), or "your #12 fan: " would read as a deleted message's line. A nested label of a
  deleted message whose speaker is none of them now (a persona renamed, a member removed)
  keeps its id.

`renumber` rewrites with a plain mapping {id: id} and leaves every other id as it is: a branch
retargets its copied texts to its copies' ids with it (store/branching.py), and a message
deleted before the branch keeps its id, which the branch's numbering then says is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from enum import Enum

# A time may hold a colon ("at 10:30") but never ": " (memory/extract.py `label_time`).
_TIME = r"(?:[^:\n]|:(?! )){1,100}"
# An id: at most 19 ASCII digits (SQLite's largest id has 19; a longer run is no message, and
# Python refuses int() past 4,300 digits: story text "(#999…)" must not stop a turn).
_ID = r"[0-9]{1,19}(?![0-9])"
_ONE = rf"#{_ID}(?:-#{_ID})?"  # one id, or a range of two
_PATTERN = re.compile(
    # A citation: ids (or ranges) and nothing else between brackets.
    rf"(?P<cite>\({_ONE}(?:(?:, ?| ){_ONE})*\))"
    # A note's "message #12" / "messages #12-#15", and a cut quote's mark.
    rf"|(?P<lead>\b[Mm]essages? |\[extract of )(?P<said>{_ONE})"
    # A label: a range, with its time or not, or one message with its speaker (the pipeline
    # writes no "#12: " and no "#12, <time>: ": a chapter's range is "#12-#12" even for one
    # message), then ": " (or ":" ending a chapter's heading line).
    rf"|(?:^|(?<=\s))(?:(?P<range>#{_ID}-#{_ID})(?=(?:, {_TIME})?:(?: |$))"
    rf"|(?P<label>#{_ID})(?= (?P<name>[^:\n]{{1,60}}):(?: |$)))",
    re.MULTILINE,
)
_IDS = re.compile(rf"#({_ID})(?:-#({_ID}))?")
# The largest id SQLite stores: a longer run of digits is no message of any store.
_MAX_ID = 2**63 - 1


def _ids(reference: str) -> list[int]:
    return [int(n) for found in _IDS.finditer(reference) for n in found.groups() if n]


def referenced_ids(text: str) -> frozenset[int]:
    """The ids `text` cites as references (the shapes above; a label's speaker unchecked), so a
    caller can ask the store for exactly those messages' numbers."""
    found: set[int] = set()
    for match in _PATTERN.finditer(text):
        reference = "".join(match.group(g) or "" for g in ("cite", "said", "range", "label"))
        found.update(i for i in _ids(reference) if i <= _MAX_ID)
    return frozenset(found)


def renumber(
    text: str, numbers: Mapping[int, int], speakers: Mapping[int, str] | None = None
) -> str:
    """`text` with the references to the ids in `numbers` rewritten to their numbers (or to any
    other id: a branch's copy retargets its source's ids so). `speakers`: each id's speaker,
    which a one-message label must name to be read as one."""
    if not numbers:
        return text

    def one(found: re.Match[str]) -> str:
        first, last = int(found.group(1)), found.group(2)
        if last is None:
            return f"#{numbers[first]}" if first in numbers else found.group(0)
        end = int(last)
        if first in numbers and end in numbers:
            return f"#{numbers[first]}-#{numbers[end]}"
        return found.group(0)

    def rewrite(match: re.Match[str]) -> str:
        if match.group("cite"):
            return _IDS.sub(one, match.group("cite"))
        if match.group("said"):
            return match.group("lead") + _IDS.sub(one, match.group("said"))
        if match.group("range"):
            return _IDS.sub(one, match.group("range"))
        label, name = match.group("label"), match.group("name")
        if name is not None and speakers is not None:
            speaker = speakers.get(int(label[1:]))
            # "#12 Mara: " or, with its time, "#12 Mara, Friday: ".
            if speaker is None or (name != speaker and not name.startswith(f"{speaker}, ")):
                return label
        return _IDS.sub(one, label)

    return _PATTERN.sub(rewrite, text)


# ---- as read: every cited message numbered, a deleted one said in words ------------------------

# Said for a cited message that was deleted: never as the number of another message, nor "#0"
# for the conversation's first.
DELETED_MESSAGE = "a deleted message"
# Said for a range none of whose messages is left (all deleted): it has no first or last number.
NO_MESSAGES = "(no messages left)"
# Said for a range of messages all deleted, in a note or a citation ("quoted from deleted
# messages"): how many there were is not known.
DELETED_MESSAGES = "deleted messages"


def deleted_said(count: int, ranges: int = 0) -> str:
    """`count` deleted messages (and `ranges` ranges with none left) in words: "a deleted
    message", "2 deleted messages", "deleted messages"; "" for none."""
    if ranges:
        return DELETED_MESSAGES
    if count == 0:
        return ""
    return DELETED_MESSAGE if count == 1 else f"{count} deleted messages"


def evidence_said(numbers: Iterable[int | None]) -> str:
    """The messages a ledger entry (or a chapter's item) rests on, as a person reads them: "#5
    #7" by the chat's numbers, a deleted one in words ("#5 and a deleted message", "#5 and 2
    deleted messages", "a deleted message"); "" when it cites none. `numbers`: each cited
    message's number, None for one no longer stored. The same words in the inspector, the
    ledger page, the by-speaker page, `kotonia memory` and the texts `numbered_text` numbers."""
    numbers = list(numbers)
    shown = " ".join(f"#{n}" for n in numbers if n is not None)
    return _with_deleted(shown, sum(1 for n in numbers if n is None))


def _with_deleted(shown: str, count: int, ranges: int = 0) -> str:
    gone = deleted_said(count, ranges)
    if not gone:
        return shown
    return f"{shown} and {gone}" if shown else gone


def asked_ids(text: str) -> frozenset[int]:
    """The ids whose places `numbered_text` needs for `text`: those it cites (`referenced_ids`)
    and, for a range, the id before its first (counted up to it, the range's messages are
    those after: a deleted first is no place of its own)."""
    found = set(referenced_ids(text))
    for match in _PATTERN.finditer(text):
        reference = "".join(match.group(g) or "" for g in ("cite", "said", "range"))
        for ids in _IDS.finditer(reference):
            first = int(ids.group(1))
            if ids.group(2) is not None and 0 < first <= _MAX_ID:
                found.add(first - 1)
    return frozenset(found)


class _Gone(Enum):
    """What a reference to deleted messages named."""

    ONE = "one"  # one message
    RANGE = "range"  # a range with no message left in it


# One reference read: its numbers ("#5", "#5-#9"), or the deleted message(s) it named, or None:
# it names no message of the conversation nor a deleted one (story text, left as written).
_Read = str | _Gone | None


def numbered_text(
    text: str,
    numbers: Mapping[int, int],
    counts: Mapping[int, int],
    deleted: Collection[int],
    speakers: Mapping[int, str] | None = None,
    names: Collection[str] = (),
) -> str:
    """`text` as a person or the reply model reads it: every reference numbered as the chat
    numbers messages, one to a deleted message said in words (the module says how, shape by
    shape).

    `numbers`: the number of each cited id that is a message of the conversation; `counts`:
    for every id asked (`asked_ids`), how many of the conversation's messages have an id up to
    it (`Store.message_places`), which a range is numbered by; `deleted`: the cited ids that
    were messages and are no more (`Store.deleted_messages`). An id in none of them (another
    conversation's message, an id never given out) is story text, left as it is. `speakers`:
    each found id's speaker, which a one-message label must name to be read as one. `names`:
    the conversation's speakers, one of which a deleted message's label inside a line must name
    (otherwise it is story text: "your #12 fan: "); at a line's start it is the pipeline's."""
    if not numbers and not deleted:
        return text

    def one(first: int, last: int | None) -> _Read:
        if last is None:
            if first in numbers:
                return f"#{numbers[first]}"
            return _Gone.ONE if first in deleted else None
        if first in numbers and last in numbers:
            return f"#{numbers[first]}-#{numbers[last]}"
        known = all(end in numbers or end in deleted for end in (first, last))
        if not known or first - 1 not in counts or last not in counts:
            return None  # an end is the story's: half read, it would mix two numberings
        before, end = counts[first - 1], counts[last]
        if before < end:
            return f"#{before + 1}-#{end}"
        return _Gone.ONE if first == last else _Gone.RANGE

    def read(found: re.Match[str]) -> _Read:
        last = found.group(2)
        return one(int(found.group(1)), int(last) if last is not None else None)

    def cite(text: str) -> str:
        parts = [(found.group(0), read(found)) for found in _IDS.finditer(text)]
        if not any(isinstance(r, _Gone) for _ref, r in parts):
            return _IDS.sub(lambda found: _said(found.group(0), read(found)), text)
        shown = [r if isinstance(r, str) else ref for ref, r in parts if not isinstance(r, _Gone)]
        sep = ", " if "," in text else " "
        count = sum(1 for _ref, r in parts if r is _Gone.ONE)
        ranges = sum(1 for _ref, r in parts if r is _Gone.RANGE)
        return f"({_with_deleted(sep.join(shown), count, ranges)})"

    def said(lead: str, reference: str) -> str:
        found = _IDS.fullmatch(reference)
        assert found is not None
        r = read(found)
        if not isinstance(r, _Gone):
            return lead + _said(reference, r)
        gone = DELETED_MESSAGE if r is _Gone.ONE else DELETED_MESSAGES
        if lead.startswith("["):
            return lead + gone
        return gone[0].upper() + gone[1:] if lead[0].isupper() else gone

    def rewrite(match: re.Match[str]) -> str:
        if match.group("cite"):
            return cite(match.group("cite"))
        if match.group("said"):
            return said(match.group("lead"), match.group("said"))
        if match.group("range"):
            reference = match.group("range")
            found = _IDS.fullmatch(reference)
            assert found is not None
            r = read(found)
            return NO_MESSAGES if isinstance(r, _Gone) else _said(reference, r)
        label, name = match.group("label"), match.group("name")
        message_id = int(label[1:])
        if message_id in deleted:
            # A deleted message's quoted line (its speaker is not known): the pipeline's at a
            # line's start; inside a line, only when it names one of the conversation's speakers.
            at_start = match.start() == 0 or text[match.start() - 1] == "\n"
            if at_start or any(_names(name, n) for n in names):
                return f"({DELETED_MESSAGE})"
            return label
        if message_id not in numbers:
            return label
        if speakers is not None and not _names(name, speakers.get(message_id)):
            return label
        return f"#{numbers[message_id]}"

    return _PATTERN.sub(rewrite, text)


def _said(reference: str, read: _Read) -> str:
    return read if isinstance(read, str) else reference


def _names(name: str, speaker: str | None) -> bool:
    """Whether a label's name ("Mara", or with its time "Mara, Friday") names `speaker`."""
    return speaker is not None and (name == speaker or name.startswith(f"{speaker}, "))
