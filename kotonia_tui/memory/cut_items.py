"""A chronicler's string that its grammar ended at its length limit: finished from the message
it copies, or marked as cut.

A chapter's schema bounds every string (memory/chapter_schema.py) so that any answer fits the
output budget. A small model that copies a sentence longer than that bound is stopped by the
grammar, not by itself, often inside a word. Measured (issue 28, the embedded 270M at n_ctx
2048, six evaluation runs): 109 of 166 stored chronicler items ended at their limit, as "Mara
says: I'll send you a photograph of Ilse in our mother's", where the message goes on "veil."
and a question asks for the veil.

Where the string's last words are a message's own, it goes on with that message's words to the
end of their sentence (the source's words, as the readback quotes them, never the model's);
otherwise it ends with a mark, so that neither the reader nor the person takes a cut line for a
whole one. A string that did not reach its limit is left as written. The story time is not
finished: of one that reached its limit only the dates the cut did not reach are a time
(`time_cut`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from kotonia_tui.domain import Message, Role
from kotonia_tui.memory.chapter_schema import filled, pattern_chars, string_patterns
from kotonia_tui.memory.structured import ChapterAnswer
from kotonia_tui.sentences import CUT_MARK, sentence_ends

# A tail shorter than these is found in the wrong message by chance ("and the", "I don't know").
MIN_TAIL_CHARS = 16
MIN_TAIL_WORDS = 3
# Typographic quotes a model writes for the source's straight ones, or the other way round,
# and a line break for a space: matched as one (each maps one character to one, so positions
# in the folded text are positions in the source).
_SAME_MARK = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "\n": " "})
# Left at a cut string's end by the grammar; a colon is kept ("Mara says to Piet:" says
# nothing, and the chapter's checks drop it as such).
_TRAILING = " ,;-–—"
_WHOLE = re.compile(r"[.!?…。！？][\"'”’»」』)\]*_]*$")


@dataclass(frozen=True)
class Source:
    """A message's text as a cut string is finished from: white space collapsed within its
    lines (a line break still ends a sentence), and folded for matching."""

    text: str
    folded: str

    @classmethod
    def of(cls, text: str) -> Source:
        lines = (" ".join(line.split()) for line in text.splitlines())
        written = "\n".join(line for line in lines if line)
        return cls(written, _folded(written))


def finished(text: str, sources: Sequence[str | Source], room: int) -> str:
    """`text`, which its grammar ended at its limit, finished: its longest tail of whole words
    (at least MIN_TAIL_CHARS long and MIN_TAIL_WORDS words, in any case, a comma or dash the
    grammar left at its end aside) that one of `sources` holds from a word's start, in their
    order, goes on with that source's words to the end of their sentence, at most `room`
    characters more (past that, to a word and the mark); with no such tail, the text ends with
    the mark unless it ends a sentence."""
    text = " ".join(text.split()).rstrip(_TRAILING)
    plain = _folded(text)
    prepared = [s if isinstance(s, Source) else Source.of(s) for s in sources]
    starts = [0, *(i + 1 for i, ch in enumerate(plain) if ch == " ")]
    for start in starts:
        tail = plain[start:]
        if len(tail) < MIN_TAIL_CHARS or tail.count(" ") + 1 < MIN_TAIL_WORDS:
            break
        for source in prepared:
            at = _word_start_find(source.folded, tail)
            if at >= 0:
                return text + _rest(source.text, at + len(tail), room)
    return _marked(text)


def _word_start_find(folded: str, tail: str) -> int:
    """Where `tail` first stands in `folded` from the start of a word, or -1 ("the art of"
    is not in "heart of the sea")."""
    at = folded.find(tail)
    while at > 0 and folded[at - 1].isalnum() and tail[0].isalnum():
        at = folded.find(tail, at + 1)
    return at


def _folded(text: str) -> str:
    """`text` with its case, quote marks and line breaks folded, character for character
    (positions in it are positions in `text`; a character whose lower case is longer keeps its
    case)."""
    plain = text.translate(_SAME_MARK)
    lower = plain.lower()
    if len(lower) == len(plain):
        return lower
    return "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in plain)


def _rest(source: str, end: int, room: int) -> str:
    """What of `source`'s sentence comes after `end`, at most `room` characters (else cut at
    a word, with the mark)."""
    stop = next(e for e in sentence_ends(source) if e >= end)
    rest = source[end:stop].rstrip("\n")
    if len(rest) <= room:
        return rest
    cut = rest[: room + 1]
    word_end = cut.rfind(" ")
    return _marked(cut[:word_end] if word_end > 0 else cut[:room])


def _marked(text: str) -> str:
    """`text`, which the grammar ended, with the mark that says so; not a whole sentence, nor
    a text that ends on a colon (it says nothing, and is dropped as such)."""
    text = text.rstrip(_TRAILING)
    if not text or text.endswith(":") or _WHOLE.search(text):
        return text
    return text + CUT_MARK


# The lists whose items rest on the user's own lines (memory/structured.read_chapter reads them
# against those alone): finished from them alone, or a finished fact would rest on another's.
_USERS_OWN = frozenset({"user_facts", "rules"})


def time_cut(answer: ChapterAnswer, schema: Mapping[str, Any]) -> bool:
    """Whether `answer`'s story time (in `schema`) reached its pattern's limit: the grammar
    ended it, not the chronicler, so what it was writing there is not all there (on the
    embedded 270M, a line of the story it was copying: "She was here in the spring of '").
    It is not finished or marked: memory/structured.read_chapter keeps only the dates it
    writes whole (story_dates.uncut_dates), else leaves it out (D-51)."""
    pattern = string_patterns(schema).get(("time", "time"))
    return bool(pattern and answer.time and filled(pattern, answer.time))


def finish_answer(
    answer: ChapterAnswer, schema: Mapping[str, Any], messages: Sequence[Message]
) -> ChapterAnswer:
    """`answer` (in `schema`) with each string of its lists that reached its limit finished
    from the messages it cites, then from the rest of `messages` (the range it was written
    from; for the user's facts and rules, the user's messages of it). The story time is left
    as written (`time_cut` says whether the grammar ended it)."""
    patterns = string_patterns(schema)
    sources = {m.id: Source.of(m.text) for m in messages if m.id is not None}
    users = {m.id for m in messages if m.id is not None and m.role is Role.USER}
    changes: dict[str, Any] = {}
    for name in type(answer).model_fields:
        items = getattr(answer, name)
        if not isinstance(items, list):
            continue
        pool = {i: s for i, s in sources.items() if i in users} if name in _USERS_OWN else sources
        finished_items = [_finished_item(name, item, patterns, pool) for item in items]
        if any(new is not old for new, old in zip(finished_items, items, strict=True)):
            changes[name] = finished_items
    return answer.model_copy(update=changes) if changes else answer


def _finished_item(
    list_name: str,
    item: BaseModel,
    patterns: Mapping[tuple[str, str], str],
    pool: Mapping[int, Source],
) -> BaseModel:
    """`item` of `list_name` with its strings that reached their limits finished from `pool`,
    the messages it cites first."""
    cited = [i for i in dict.fromkeys(getattr(item, "ids", [])) if i in pool]
    ordered = [pool[i] for i in cited] + [s for i, s in pool.items() if i not in cited]
    update: dict[str, str] = {}
    for field_name in type(item).model_fields:
        pattern = patterns.get((list_name, field_name))
        value = getattr(item, field_name)
        if pattern and isinstance(value, str) and value and filled(pattern, value):
            update[field_name] = finished(value, ordered, pattern_chars(pattern))
    return item.model_copy(update=update) if update else item
