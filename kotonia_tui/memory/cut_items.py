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
whole one. A string that did not reach its limit is left as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from kotonia_tui.domain import Message
from kotonia_tui.memory.chapter_schema import filled, pattern_chars, string_patterns
from kotonia_tui.memory.structured import ChapterAnswer
from kotonia_tui.sentences import sentence_ends

CUT_MARK = "…"
# A tail shorter than these is found in the wrong message by chance ("and the", "I don't know").
MIN_TAIL_CHARS = 16
MIN_TAIL_WORDS = 3
# Typographic quotes a model writes for the source's straight ones, or the other way round:
# matched as one (each maps one character to one, so positions stay those of the source).
_SAME_MARK = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})
_TRAILING = " ,;:-–—"


def finished(text: str, sources: Sequence[str], room: int) -> str:
    """`text`, which its grammar ended at its limit, finished: its longest tail of whole words
    (at least MIN_TAIL_CHARS long and MIN_TAIL_WORDS words, in any case, a comma or dash the
    grammar left at its end aside) that one of `sources` holds, in their order, goes on with
    that source's words to the end of their sentence, at most `room` characters more (past
    that, to a word and the mark); with no such tail, the text ends with the mark."""
    text = " ".join(text.split()).rstrip(_TRAILING)
    plain = _folded(text)
    written = [" ".join(source.split()) for source in sources]
    searched = [_folded(source) for source in written]
    starts = [0, *(i + 1 for i, ch in enumerate(plain) if ch == " ")]
    for start in starts:
        tail = plain[start:]
        if len(tail) < MIN_TAIL_CHARS or tail.count(" ") + 1 < MIN_TAIL_WORDS:
            break
        for source, folded in zip(written, searched, strict=True):
            at = folded.find(tail)
            if at >= 0:
                return text + _rest(source, at + len(tail), room)
    return _marked(text)


def _folded(text: str) -> str:
    """`text` with its case and quote marks folded, character for character (positions in it
    are positions in `text`; a character whose lower case is longer keeps its case)."""
    plain = text.translate(_SAME_MARK)
    lower = plain.lower()
    if len(lower) == len(plain):
        return lower
    return "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in plain)


def _rest(source: str, end: int, room: int) -> str:
    """What of `source`'s sentence comes after `end`, at most `room` characters (else cut at
    a word, with the mark)."""
    stop = next(e for e in sentence_ends(source) if e >= end)
    rest = source[end:stop]
    if len(rest) <= room:
        return rest
    cut = rest[: room + 1]
    word_end = cut.rfind(" ")
    return _marked(cut[:word_end] if word_end > 0 else cut[:room])


def _marked(text: str) -> str:
    return text.rstrip(_TRAILING) + CUT_MARK


def finish_answer(
    answer: ChapterAnswer, schema: Mapping[str, Any], messages: Sequence[Message]
) -> ChapterAnswer:
    """`answer` (in `schema`) with each string that reached its limit finished from the
    messages it cites, then from the rest of `messages` (the range it was written from);
    the story time, which copies no sentence, is only marked."""
    patterns = string_patterns(schema)
    texts = {m.id: m.text for m in messages if m.id is not None}
    changes: dict[str, Any] = {}
    time_pattern = patterns.get(("time", "time"))
    if time_pattern and answer.time and filled(time_pattern, answer.time):
        changes["time"] = _marked(" ".join(answer.time.split()))
    for name in type(answer).model_fields:
        items = getattr(answer, name)
        if not isinstance(items, list):
            continue
        finished_items = [_finished_item(name, item, patterns, texts) for item in items]
        if any(new is not old for new, old in zip(finished_items, items, strict=True)):
            changes[name] = finished_items
    return answer.model_copy(update=changes) if changes else answer


def _finished_item(
    list_name: str,
    item: BaseModel,
    patterns: Mapping[tuple[str, str], str],
    texts: Mapping[int, str],
) -> BaseModel:
    cited: list[int] = list(getattr(item, "ids", []))
    sources = [texts[i] for i in dict.fromkeys(cited) if i in texts]
    sources += [text for i, text in texts.items() if i not in cited]
    update: dict[str, str] = {}
    for field_name in type(item).model_fields:
        pattern = patterns.get((list_name, field_name))
        value = getattr(item, field_name)
        if pattern and isinstance(value, str) and value and filled(pattern, value):
            update[field_name] = finished(value, sources, pattern_chars(pattern))
    return item.model_copy(update=update) if update else item
