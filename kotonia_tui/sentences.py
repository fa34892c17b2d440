"""Where a sentence ends: one splitter for every part of Kotonia that cuts text into sentences.

The readback quotes the user's sentences that hold a name or a number a chapter left out
(memory/readback.py), the extract quotes a range's best sentences when no chapter can be stored
(memory/extract.py), recall quotes a long message by its sentences (memory/recall_forms.py), and
the memory audit judges a memory text sentence by sentence (eval/audit.py), and the evaluation
finds the sentence of an evidence message that answers (eval/evidence.py). They cut the same
text at the same places. (A long message cut into parts for the chronicler, memory/oversized.py,
keeps every character and prefers coarser seams: it is no sentence list.)

- A line break ends a sentence (a chapter's items, a quote's lines).
- `.`, `!`, `?`, `…` (and the Arabic `؟`, the Devanagari `।`) end one before a space, keeping
  any closing quotes, brackets and action marks after them (`"Welcome, Mara."`, `*He nods.*`).
  A dot with no space after it is no end ("3.50", "example.com", "e.g.").
- Not after a title or a common abbreviation ("Dr. Mara", "Mr.", "vs.") or a single initial
  ("J. R. Rowan"), and not where the text goes on in lower case: an ellipsis inside a sentence
  ("Wait... what?"), a quoted exclamation (`She said "No!" and left.`).
- `。`, `！`, `？` (Japanese, Chinese) end one with or without a space after them, keeping their
  closing brackets (「東京へ行きます。」彼は言った。).
"""

from __future__ import annotations

import itertools
import re

# The mark a text cut before its sentence ended carries: a chronicler's string its grammar
# ended at its length limit (memory/cut_items.py), and a chapter's in-story time read as such
# (story_dates.told_time). What it was saying is not there.
CUT_MARK = "…"

_CLOSING = "\"'”’»」』）)\\]*_`"
# A Latin-style stop (a run of . ! ? …) with its closing marks, before a space or the end.
_SPACED_END = re.compile(rf"[.!?…؟।]+[{_CLOSING}]*(?=\s|$)")
# A full-width stop with its closing marks, wherever it stands.
_FULL_WIDTH_END = re.compile(rf"[。！？]+[{_CLOSING}]*")
_LINE_BREAK = re.compile(r"\n")
# A word and its dot that do not end a sentence (case folded).
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "mt", "vs", "capt", "lt", "sgt"}
)
_NEXT_WORD = re.compile(r"\s*(\S)")


def _word_before(text: str, end: int) -> str:
    """The run of word characters (as the regex `\\w`: letters, digits, `_`) that ends at
    `end`. Walked back from `end`, not searched from the text's start: a search per stop made
    a 100 KB message cost minutes."""
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return text[start:end]


def _ends(text: str, match: re.Match[str]) -> bool:
    """Whether a Latin-style stop ends its sentence (see the module's rules)."""
    if match.group(0) == ".":
        word = _word_before(text, match.start())
        if word.casefold() in ABBREVIATIONS or (len(word) == 1 and word.isupper()):
            return False
    after = _NEXT_WORD.match(text, match.end())
    # A script without case (Arabic, Hindi) has no lower case: its stops always end.
    return after is None or not after.group(1).islower()


def sentence_ends(text: str) -> list[int]:
    """Where `text`'s sentences end (after their closing marks), in order; the text's end
    is one."""
    cuts = {len(text)}
    cuts.update(m.end() for m in _SPACED_END.finditer(text) if _ends(text, m))
    cuts.update(m.end() for m in _FULL_WIDTH_END.finditer(text))
    cuts.update(m.end() for m in _LINE_BREAK.finditer(text))
    cuts.discard(0)
    return sorted(cuts)


def sentences(text: str) -> list[str]:
    """`text` cut into sentences, each with its closing marks, white space collapsed; no
    empty ones."""
    cuts = [0, *sentence_ends(text)]
    parts = (" ".join(text[start:end].split()) for start, end in itertools.pairwise(cuts))
    return [part for part in parts if part]
