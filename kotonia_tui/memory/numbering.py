"""Message references in a memory text, rewritten from store ids to the numbers the chat shows.

The store and the fold pipeline cite messages by store id (unique across every conversation):
a quoted line's label ("#337 Kyle: "), an item's evidence ("(#340 #341)"), a chapter's range
("#337-#375, Friday, 19 October 2018:"), a note ("quoted from messages #337-#375"). The chat
numbers a conversation's messages from #1. Whatever a person or the reply model reads is
rewritten here with a mapping {store id: number}; what is stored keeps the ids, so the fold
pipeline, its grounding and existing databases are unchanged. Pure and deterministic: the
same text and mapping give the same bytes (the prompt's prefix stays stable between folds).

Only references are rewritten, never a "#5" of the story (a room, a hashtag, "your #1 fan"):

- a quoted line's label, at a line's start or after a space, ending in ": " (or ":" ending the
  line, as a chapter's heading in the memory block): "#12 Mara: ", "#33-#51: ",
  "#33-#51, <time>: " (a one-message label names its speaker: "#12: " and "#12, Baker
  Street: " are not ones the pipeline writes);
- a citation, ids alone in brackets: "(#34)", "(#3 #7)", "(#3, #7)", "(#3-#5)";
- "message #12", "messages #12-#15" (notes and fold errors), "[extract of #12]" (a quote cut to
  fit, memory/extract.py `extract_mark`).

What is ambiguous, and what is done about it (tests/memory/test_numbering.py):

- an id that is not in the mapping (a message of another conversation, a deleted one, a number
  of the story, a run of more than 19 digits or of digits other than ASCII) is left exactly as
  it is; so is a range with either end not in it (half
  rewritten, it would mix two numberings);
- a one-message label names its message's speaker ("#12 Mara: "): given the speakers, a label
  whose name is not that message's speaker is story text ("I'm your #12 fan: ...") and is left
  as it is; without them, its shape decides;
- a "#5" in a reference's shape inside story text ("(#5)", "message #5") whose 5 is an id of a
  message of this conversation cannot be told from a reference: it is rewritten. A bare "#5" is
  never rewritten, even when the chronicler's prose means a message by it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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
