"""The JSON schema a structured chapter is written in, bounded by construction.

Free prose from a small model is the weak point of memory (docs/decisions.md D-1). So the
chronicler answers in this schema, which the engine enforces with a
grammar: every item is an object that names its evidence message ids (an enum of the source's
ids, so it cannot cite a message that is not there; the user's facts and rules can cite only the
user's messages), and every list and string has a maximum. `max_tokens` adds those maxima up the
way llama.cpp's grammar spells them, and `chapter_schema` shrinks the lists and strings until
the whole answer fits the output budget. The JSON around the strings is ASCII (a token each at
most); a string character costs at most `tokens_per_char` tokens: 4 is the strict bound (a
token is at least one byte, a character at most four), and the fold worker passes twice what the
source itself costs per character in this model's tokenizer, so a chapter has room for real
sentences and the cap it is given still lies far beyond what it can spend.

Fields (docs/memory-schema.md says why each exists): the story time; events; claims (who said
what to whom is taken from the message, the model writes what was said and, where the
narration or thoughts show otherwise, what is in fact true); facts the user states about
themselves and rules they set (each may replace an earlier one by its label); decisions with
reasons and rejected alternatives; promises; open threads; threads resolved here (by label).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kotonia_tui.domain import LedgerKind, Message, Role, StoredLedgerEntry

# UTF-8 needs at most 4 bytes for a code point and a token is at least one byte; the patterns
# below allow no escapes, so this is the strict bound of tokens per string character.
BYTES_PER_CHAR = 4.0
# A string holds no quote, backslash or control character: one plain line with no escapes, so
# its byte size has a bound, and the rendered text needs no unescaping.
_CHAR = '[^"\\\\\\x00-\\x1f]'
# And it starts with a letter of any script (not an ASCII digit, space, control character or
# punctuation mark): else the JSON and the ids around it leak into the text (D-2).
_FIRST = "[^\\x00-\\x40\\x5b-\\x60\\x7b-\\x7f]"
# The shortest text an item may hold: less cannot say who did what ("T7", "yes").
MIN_ITEM_CHARS = 8
# A name a pattern can start with as it is written: no regex or JSON metacharacter to escape.
_PLAIN_NAME = re.compile(r"[^\W\d_][\w' -]{0,39}")
_NAMED = re.compile(r"\^ \?\(([^()]*)\) ")
# How long a pattern below lets a string be: its `{min,max}` and the leading letter.
_LENGTH = re.compile(r"\{(\d+),(\d+)\}(?:\)\?)?\$$")

EVIDENCE_MAX = 2  # ids per item
MIN_TEXT = 24  # below this an item cannot say anything: the budget is too small
MIN_SHORT = 12
LONG_TEXT = 100  # a long sentence: strings shrink to this first
FEW_ITEMS = 3  # then lists come down to this many items
USEFUL_TEXT = 64  # strings shrink to this before lists come down to one item each
# The lists given up first when even one item of each does not fit (the events always stay).
DROP_ORDER = (
    "promises",
    "decisions",
    "claims",
    "rules",
    "resolved",
    "open_threads",
    "user_facts",
)
TIME_LENGTH = 60
# The story time's own floor, whatever the other strings' length: a full date and a part of the
# day ("Friday, 19 October 2018, evening", "Wednesday, 19 September 2018, night"). Tied to the
# secondary strings, it was 31 characters at the shipped shapes and 11 to 17 at small budgets,
# so a date the chronicler wrote there was cut and left out (docs/decisions.md D-51).
TIME_FLOOR = 40
# Each shape is tried with the time at each of these floors before the next smaller shape: the
# floor, a full date alone ("Friday, 19 October 2018"), then the secondary strings' length (the
# time before D-51). So no budget holds fewer items or shorter strings for the time's sake: it
# holds the shape it held before, with the longest time that shape leaves room for.
TIME_FLOORS = (TIME_FLOOR, 24, MIN_SHORT)

# The lists, in the order the answer writes them, and the most items each may hold.
LIST_LIMITS: dict[str, int] = {
    "events": 12,
    "user_facts": 6,
    "rules": 4,
    "claims": 6,
    "decisions": 3,
    "promises": 3,
    "open_threads": 4,
    "resolved": 6,
}

# Which lists the ledger takes, and as what.
LEDGER_LISTS: dict[str, LedgerKind] = {
    "user_facts": LedgerKind.USER_FACT,
    "rules": LedgerKind.CONSTRAINT,
    "decisions": LedgerKind.DECISION,
    "promises": LedgerKind.PROMISE,
    "open_threads": LedgerKind.THREAD,
}
# Kinds whose entries a later chapter may replace ("replaces": "F3").
REPLACEABLE = (LedgerKind.USER_FACT, LedgerKind.CONSTRAINT)


class NoRoomForChapterError(ValueError):
    """The output budget cannot hold even the smallest chapter."""


@dataclass(frozen=True)
class Shape:
    """How many items each list may hold and how long an item's strings may be."""

    counts: dict[str, int]
    text: int  # an item's main string
    short: int  # secondary strings: in fact, because, rejected, how
    time: int = TIME_FLOOR  # the story time's floor (its length is at least this, or `short`)

    def smaller(self) -> Shape | None:
        """One step smaller. In order: the strings come down to a long sentence and the lists
        to a few items (the one that costs most first); the strings to a short sentence; the
        lists other than the events to one item; the least needed lists go; the events to one;
        the strings to their minimum. A small budget keeps a few events and the user's facts
        rather than many long events and nothing else. The story time's floor is not a step
        here: `shapes` tries each shape with each of TIME_FLOORS."""
        weights = {"claims": 2, "decisions": 3, "resolved": 2}

        def cut(names: list[str]) -> Shape:
            biggest = max(names, key=lambda k: (self.counts[k] * weights.get(k, 1), k))
            return self._with(biggest, self.counts[biggest] - 1)

        if self.text > LONG_TEXT:
            return self._shrunk(LONG_TEXT)
        if few := [k for k, n in self.counts.items() if n > FEW_ITEMS]:
            return cut(few)
        if self.text > USEFUL_TEXT:
            return self._shrunk(USEFUL_TEXT)
        if others := [k for k, n in self.counts.items() if n > 1 and k != "events"]:
            return cut(others)
        for name in DROP_ORDER:
            if self.counts.get(name):
                return self._with(name, 0)
        if self.counts["events"] > 1:
            return self._with("events", self.counts["events"] - 1)
        if self.text > MIN_TEXT:
            return self._shrunk(MIN_TEXT)
        return None

    @property
    def time_length(self) -> int:
        """The story time's length: the secondary strings', never under the time's floor nor
        over TIME_LENGTH."""
        return min(TIME_LENGTH, max(self.short, self.time))

    def _with(self, name: str, count: int) -> Shape:
        return replace(self, counts={**self.counts, name: count})

    def _shrunk(self, floor: int) -> Shape:
        text = max(floor, self.text * 3 // 4)
        return replace(self, text=text, short=max(MIN_SHORT, min(self.short, text // 2)))


def text_schema(
    length: int, *, optional: bool = False, names: Sequence[str] = ()
) -> dict[str, Any]:
    """A string of at most `length` characters that starts with a letter (after one space at
    most): at least MIN_ITEM_CHARS of them, or (`optional`) none at all. With `names`, it
    starts with one of them and a space ("Wren lit the lamps")."""
    # One space may come first: a SentencePiece model's word tokens start with one (" Ann"),
    # and a grammar that refused it would force the model's words apart.
    names = [n for n in names if _PLAIN_NAME.fullmatch(n)]
    longest = max((len(n) for n in names), default=0)
    if names and length - longest - 2 >= MIN_ITEM_CHARS:
        rest = length - longest - 2
        pattern = f"^ ?({'|'.join(names)}) {_CHAR}{{{MIN_ITEM_CHARS - 1},{rest}}}$"
    elif optional:
        pattern = f"^( ?{_FIRST}{_CHAR}{{0,{length - 2}}})?$"
    else:
        pattern = f"^ ?{_FIRST}{_CHAR}{{{MIN_ITEM_CHARS - 1},{length - 2}}}$"
    return {"type": "string", "maxLength": length, "pattern": pattern}


def pattern_chars(pattern: str) -> int:
    """The most characters a string of `text_schema`'s pattern can hold: the space, the
    letter (or the longest name and its space) and the rest."""
    match = _LENGTH.search(pattern)
    if match is None:
        raise ValueError(f"not a pattern text_schema writes: {pattern!r}")
    if named := _NAMED.match(pattern):
        return 2 + max(len(n) for n in named.group(1).split("|")) + int(match.group(2))
    if f" ?{_FIRST}" not in pattern:
        raise ValueError(f"not a pattern text_schema writes: {pattern!r}")
    return 2 + int(match.group(2))


def _ids(ids: Sequence[int]) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"enum": list(ids)},
        "minItems": 1,
        "maxItems": EVIDENCE_MAX,
    }


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _list(item: dict[str, Any], count: int, *, at_least: int = 0) -> dict[str, Any]:
    return {
        "type": "array",
        "items": item,
        "minItems": min(at_least, count),
        "maxItems": count,
    }


def _speakers(messages: Iterable[Message]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.speaker.strip() for m in messages if m.speaker.strip()))


@dataclass(frozen=True)
class ChapterSource:
    """What a chapter's schema depends on: the source's ids and the ledger it may end."""

    all_ids: tuple[int, ...]
    user_ids: tuple[int, ...]
    open_threads: tuple[str, ...]  # labels a chapter may resolve
    replaceable: tuple[str, ...]  # labels of facts and rules a chapter may replace
    names: tuple[str, ...] = ()  # who speaks in the source (an event starts with one)
    user_names: tuple[str, ...] = ()  # who the user is in it (their facts start with it)

    @classmethod
    def of(cls, messages: Sequence[Message], ledger: Sequence[StoredLedgerEntry]) -> ChapterSource:
        ids = tuple(m.id for m in messages if m.id is not None)
        user = tuple(m.id for m in messages if m.id is not None and m.role is Role.USER)
        return cls(
            all_ids=ids,
            user_ids=user,
            open_threads=tuple(e.label for e in ledger if e.kind is LedgerKind.THREAD),
            # Not the user's lines quoted by the readback: they are what was said, which a
            # later chapter does not replace; and a small model shown them copied them into
            # its own items ("I'm Mara Lind" in chapter after chapter).
            replaceable=tuple(
                e.label for e in ledger if e.kind in REPLACEABLE and not e.quotes_user
            ),
            names=_speakers(m for m in messages if m.role is not Role.SYSTEM),
            user_names=_speakers(m for m in messages if m.role is Role.USER),
        )

    def first_shape(self) -> Shape:
        """The largest shape this source calls for (a list never holds more items than there
        are messages it could cite)."""
        n, n_user = len(self.all_ids), len(self.user_ids)
        room = {
            "events": n,
            "claims": n,
            "user_facts": 2 * n_user,
            "rules": n_user,
            "decisions": n,
            "promises": n,
            "open_threads": n,
            "resolved": len(self.open_threads),
        }
        counts = {k: min(limit, room[k]) for k, limit in LIST_LIMITS.items()}
        return Shape(counts, text=160, short=80)


def schema_for(source: ChapterSource, shape: Shape) -> dict[str, Any]:
    """The schema of a chapter of this source, in this shape.

    Every list the shape keeps is required, in LIST_LIMITS's order (the events first, the
    user's facts next): a small model closed the object after the events and never wrote a
    fact, a rule or a thread; now it must open each list, which it may leave empty. The story
    time is optional and last (a small model asked for the time first wrote anything there),
    with room for a full date and a part of the day (`Shape.time_length`). Each item writes
    its text first and its evidence ids after it: with the ids first, a small model goes on
    writing numbers in the text (docs/decisions.md D-3).
    """
    ids = _ids(source.all_ids)
    user_ids = _ids(source.user_ids or source.all_ids)  # unused when the lists are empty
    text, short = text_schema(shape.text), text_schema(shape.short, optional=True)
    # Who did what: an event, a decision, a promise starts with a name from the story, a fact
    # the user stated with the user's name; made to start with a name, a small model goes on
    # with what that person did (D-3).
    named = text_schema(shape.text, names=source.names)
    the_user = text_schema(shape.text, names=source.user_names)
    replaces = {"enum": ["", *source.replaceable]}
    threads = {"enum": list(source.open_threads) or [""]}
    items = {
        "events": _object({"event": named, "ids": ids}),
        "user_facts": _object({"fact": the_user, "ids": user_ids, "replaces": replaces}),
        "rules": _object({"rule": text, "ids": user_ids, "replaces": replaces}),
        "claims": _object({"said": text, "in_fact": short, "ids": ids}),
        "decisions": _object({"decision": named, "because": short, "rejected": short, "ids": ids}),
        "promises": _object({"promise": named, "ids": ids}),
        "open_threads": _object({"thread": text, "ids": ids}),
        "resolved": _object({"thread": threads, "how": short, "ids": ids}),
    }
    properties: dict[str, Any] = {}
    for name in LIST_LIMITS:
        if shape.counts[name]:
            at_least = 1 if name == "events" else 0
            properties[name] = _list(items[name], shape.counts[name], at_least=at_least)
    required = list(properties)
    properties["time"] = text_schema(shape.time_length, optional=True)
    return {**_object(properties), "required": required}


def shapes(source: ChapterSource) -> Iterator[Shape]:
    """The shapes `chapter_schema` tries for this source, largest first: each step of
    `Shape.smaller` with the story time at each of TIME_FLOORS in turn (a floor that leaves
    the time's length as it was is not tried again)."""
    shape: Shape | None = source.first_shape()
    while shape is not None:
        lengths: set[int] = set()
        for floor in TIME_FLOORS:
            timed = replace(shape, time=floor)
            if timed.time_length not in lengths:
                lengths.add(timed.time_length)
                yield timed
        shape = shape.smaller()


def chapter_schema(
    source: ChapterSource, budget_tokens: int, tokens_per_char: float = BYTES_PER_CHAR
) -> dict[str, Any]:
    """The largest schema for this source whose every answer fits `budget_tokens`, a string
    character costing `tokens_per_char` tokens at most. The story time is as long as the
    chosen shape leaves room for (`shapes`): it never costs an item or an item's length."""
    smallest = None
    for shape in shapes(source):
        schema = schema_for(source, shape)
        if max_tokens(schema, tokens_per_char) <= budget_tokens:
            return schema
        smallest = schema
    least = max_tokens(smallest, tokens_per_char) if smallest is not None else 0
    raise NoRoomForChapterError(
        f"an output budget of {budget_tokens} tokens cannot hold the smallest structured "
        f"chapter ({least} tokens at most)"
    )


def max_tokens(schema: dict[str, Any], tokens_per_char: float = BYTES_PER_CHAR) -> int:
    """The most tokens an answer in this schema's grammar can take (llama.cpp's converter: one
    optional space after each punctuation mark and value, no space inside an enum value): the
    ASCII around the strings a token per byte, each string character `tokens_per_char`."""
    space = 1
    if "enum" in schema:
        return max(len(json.dumps(v).encode()) for v in schema["enum"]) + space
    kind = schema.get("type")
    if kind == "string":
        # llama.cpp's converter follows the pattern and ignores maxLength when both are given.
        pattern = schema.get("pattern")
        length = pattern_chars(pattern) if pattern else int(schema["maxLength"])
        return 2 + math.ceil(tokens_per_char * length) + space
    if kind == "array":
        count = int(schema["maxItems"])
        item = max_tokens(schema["items"], tokens_per_char)
        return 1 + space + count * item + max(0, count - 1) * (1 + space) + 1 + space
    if kind == "object":
        props = schema["properties"]
        pairs = sum(
            len(json.dumps(k).encode()) + space + 1 + space + max_tokens(v, tokens_per_char)
            for k, v in props.items()
        )
        return 1 + space + pairs + max(0, len(props) - 1) * (1 + space) + 1 + space
    raise ValueError(f"max_tokens does not know this schema: {schema!r}")


def tokens_per_char(source_tokens: int, source_chars: int) -> float:
    """What a chapter's string character is budgeted at: twice what the source costs per
    character in this model's tokenizer (same language, same names), never above the strict
    bound."""
    if source_chars <= 0 or source_tokens <= 0:
        return BYTES_PER_CHAR
    return min(BYTES_PER_CHAR, 2.0 * source_tokens / source_chars)


def schema_text(schema: dict[str, Any]) -> str:
    """The schema as the engine takes it: JSON text, the same bytes for the same schema."""
    return json.dumps(schema, ensure_ascii=False, sort_keys=False, separators=(",", ":"))


def string_patterns(schema: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """The pattern of each string an answer in `schema` (`chapter_schema`'s) writes, by its list
    and field (("events", "event"), ("claims", "in_fact"), ...); the story time's by ("time",
    "time"). Enums (a thread a chapter resolves, a label it replaces) have none."""
    found: dict[tuple[str, str], str] = {}
    properties = schema.get("properties", {})
    for name, list_schema in properties.items():
        if name == "time":
            if pattern := list_schema.get("pattern"):
                found[("time", "time")] = pattern
            continue
        fields = list_schema.get("items", {}).get("properties", {})
        for field_name, field_schema in fields.items():
            if field_schema.get("type") == "string" and (pattern := field_schema.get("pattern")):
                found[(name, field_name)] = pattern
    return found


def filled(pattern: str, text: str) -> bool:
    """Whether `text`, as the model wrote it, holds the most characters `pattern` (one
    `text_schema` writes) lets a string have: then the grammar ended it, not the model, and
    it may stop inside a sentence or a word."""
    match = _LENGTH.search(pattern)
    if match is None:
        raise ValueError(f"not a pattern text_schema writes: {pattern!r}")
    most = int(match.group(2))
    body = text.removeprefix(" ")
    if named := _NAMED.match(pattern):
        # Of names that start one another ("Mara", "Mara Lee"), the grammar can read the
        # longer one, and so go on further.
        starts = [n for n in named.group(1).split("|") if body.startswith(f"{n} ")]
        return bool(starts) and len(body) - len(max(starts, key=len)) - 1 == most
    return len(body) - 1 == most
