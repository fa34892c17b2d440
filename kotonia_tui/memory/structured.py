"""A structured chapter read from the chronicler's JSON, and rendered back as text.

The model writes only what it must: what happened, what was said, what holds. Who said it, to
whom, and the message it rests on come from the source (the model names a message id; its
speaker is looked up), so a small model cannot swap speakers. Items that cite no message of the
source, say nothing, or repeat an earlier item of their list are dropped here (small models
repeat one item to fill an array).

The text a chapter puts in the prompt is rendered from the structure by `render_chapter`, one
line per item in a fixed order, so the same structure always gives the same bytes. The ledger
items (facts, rules, decisions, promises, threads) are not repeated in the chapter's text: they
go to the ledger, which the memory block renders once, before the synopsis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kotonia_tui.domain import (
    LedgerEnd,
    LedgerEnding,
    LedgerEntry,
    LedgerKind,
    Message,
    Role,
    StoredLedgerEntry,
)
from kotonia_tui.memory.grounding import content, evidence, grounded
from kotonia_tui.memory.readback import quote
from kotonia_tui.terms import has_unspaced, is_number

# ---- the answer as the schema spells it --------------------------------------------------


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")
    ids: list[int] = Field(default_factory=list)


class EventItem(_Item):
    event: str = ""


class ClaimItem(_Item):
    said: str = ""
    in_fact: str = ""


class FactItem(_Item):
    fact: str = ""
    replaces: str = ""


class RuleItem(_Item):
    rule: str = ""
    replaces: str = ""


class DecisionItem(_Item):
    decision: str = ""
    because: str = ""
    rejected: str = ""


class PromiseItem(_Item):
    promise: str = ""


class ThreadItem(_Item):
    thread: str = ""


class ResolvedItem(_Item):
    thread: str = ""
    how: str = ""


_ITEM_KINDS = (
    EventItem,
    ClaimItem,
    FactItem,
    RuleItem,
    DecisionItem,
    PromiseItem,
    ThreadItem,
    ResolvedItem,
)


class ChapterAnswer(BaseModel):
    """The chronicler's answer, as parsed (before the source checks it)."""

    model_config = ConfigDict(extra="ignore")

    time: str = ""
    events: list[EventItem] = Field(default_factory=list)
    claims: list[ClaimItem] = Field(default_factory=list)
    user_facts: list[FactItem] = Field(default_factory=list)
    constraints: list[RuleItem] = Field(default_factory=list)
    decisions: list[DecisionItem] = Field(default_factory=list)
    promises: list[PromiseItem] = Field(default_factory=list)
    open_threads: list[ThreadItem] = Field(default_factory=list)
    resolved: list[ResolvedItem] = Field(default_factory=list)


class MalformedAnswerError(ValueError):
    """The answer is not a chapter in the schema (a server that ignored the schema)."""


def parse_answer(text: str) -> ChapterAnswer:
    try:
        # Lenient about raw control characters: a server's grammar may allow them in strings.
        data = json.loads(text, strict=False)
        return ChapterAnswer.model_validate(data)
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise MalformedAnswerError(
            f"the chronicler's answer is not a chapter's JSON: {first}"
        ) from exc


# ---- checked against the source ----------------------------------------------------------


@dataclass(frozen=True)
class LedgerItem:
    """An entry a chapter adds to the ledger (stored with the chapter's id)."""

    kind: LedgerKind
    text: str
    subject: str
    evidence: tuple[int, ...]
    replaces: str = ""  # the label of an entry it supersedes ("" for none)


@dataclass(frozen=True)
class Resolution:
    """A thread this chapter closes, by label."""

    label: str
    how: str
    evidence: tuple[int, ...]


@dataclass(frozen=True)
class Line:
    """One line of the chapter's text and the messages it rests on."""

    text: str
    evidence: tuple[int, ...]


@dataclass(frozen=True)
class StructuredChapter:
    """A chapter as stored: its story time, its lines, its ledger items and resolutions."""

    time: str
    events: tuple[Line, ...]
    claims: tuple[Line, ...]
    ledger: tuple[LedgerItem, ...]
    resolved: tuple[Resolution, ...]

    @property
    def holds_nothing(self) -> bool:
        """No item of any kind: the chapter keeps nothing of its messages (a time alone is not
        a record of what happened)."""
        return not (self.events or self.claims or self.ledger or self.resolved)

    def to_json(self) -> str:
        """The structure as stored in the chapter row (stable key order)."""
        return json.dumps(
            {
                "time": self.time,
                "events": [{"text": x.text, "ids": list(x.evidence)} for x in self.events],
                "claims": [{"text": x.text, "ids": list(x.evidence)} for x in self.claims],
                "ledger": [
                    {
                        "kind": x.kind.value,
                        "text": x.text,
                        "subject": x.subject,
                        "ids": list(x.evidence),
                        "replaces": x.replaces,
                    }
                    for x in self.ledger
                ],
                "resolved": [
                    {"thread": x.label, "how": x.how, "ids": list(x.evidence)}
                    for x in self.resolved
                ],
            },
            ensure_ascii=False,
        )


def _clean(text: str) -> str:
    return " ".join(text.split())


def _evidence(ids: Sequence[int], allowed: set[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(i for i in ids if i in allowed))


_FIELDS = frozenset(ChapterAnswer.model_fields) | frozenset(
    name for item in _ITEM_KINDS for name in item.model_fields
)
_LIST_PART_WORDS = 2  # a comma-separated part this short is a list's entry, not a clause
# A text of this many word pairs or more whose distinct pairs are under this share of them
# repeats itself: a loop, not a sentence.
_LOOP_PAIRS = 4
_LOOP_SHARE = 0.8


def _wordy(text: str) -> bool:
    """At least as many letters as digits and marks, and three different letters."""
    compact = [c for c in text if not c.isspace()]
    letters = [c for c in compact if c.isalpha()]
    return len(letters) * 2 >= len(compact) and len({c.casefold() for c in letters}) >= 3


def says_something(text: str) -> bool:
    """Whether an item's text can be a record of anything. Measured on the embedded 270M
    model, a degenerate chapter held items like these, and a chapter of them must fail
    (HOLLOW, asked again), never be stored as memory. Not when the text:
    - holds no letter, or fewer letters than digits and marks ("1, 2, 3", "14:00:00");
    - repeats one or two characters ("aaaaaaa", "ha ha ha");
    - is one word of a script that spaces its words ("date_of_birth", "Pellmouth");
    - ends where its content should begin ("Mara says to Piet:");
    - starts with one of the answer's own field names ("claims: 1, 2", "events.13");
    - is a bare list of words ("Harwick, Street, Corwin": the names a readback retry asked
      for, listed with nothing said about them);
    - goes round in a loop ("I was in the store, I was in the store, I was in the").
    """
    if not _wordy(text) or text.rstrip().endswith(":"):
        return False
    words = text.split()
    if len(words) == 1 and not has_unspaced(text):
        return False  # one word of a spaced script: a name or a key ("Pellmouth")
    head = words[0].rstrip(":.,;").split(".")[0]
    if head in _FIELDS:
        return False
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) >= 3 and all(len(p.split()) <= _LIST_PART_WORDS for p in parts):
        return False
    bare = [w.strip(".,;:!?\"'") for w in text.casefold().split()]
    pairs = list(pairwise(bare))
    return len(pairs) < _LOOP_PAIRS or len(set(pairs)) >= len(pairs) * _LOOP_SHARE


class _Seen:
    """Drops an item that says nothing (`says_something`, or no content term but numbers) or
    that says what one already kept in the same list says (for the ledger: in any of its
    kinds): the same content terms (`grounding.content`), whatever the framing around them, or
    for a text of none, the same text whatever its case."""

    def __init__(self, cast: tuple[str, ...]) -> None:
        self._cast = cast
        self._seen: set[frozenset[str] | str] = set()

    def fresh(self, text: str) -> bool:
        terms = content(text, self._cast)
        if terms and all(is_number(term) for term in terms):
            # "User says: 300," (the embedded 270M, for "I can pay 300 crowns for the lantern,
            # not more."): a number with nothing said about it. Dropped, the readback finds the
            # number missing and keeps the user's sentence.
            return False
        key: frozenset[str] | str = terms or text.casefold().strip()
        if not key or key in self._seen or not says_something(text):
            return False
        self._seen.add(key)
        return True


def read_chapter(
    answer: ChapterAnswer,
    messages: Sequence[Message],
    *,
    char: str,
    user: str,
    open_threads: Sequence[str],
    replaceable: Sequence[str],
    members: Sequence[str] = (),
) -> StructuredChapter:
    """The answer checked against its source: speakers from the messages cited, items without
    evidence or text, or not grounded in the messages they cite, dropped (an ungrounded "in
    fact", "because" or "rejected" is left out of its item), repeats dropped, labels checked
    against the ledger."""
    by_id = {m.id: m for m in messages if m.id is not None}
    allowed = set(by_id)
    user_ids = {i for i, m in by_id.items() if m.role is Role.USER}
    cast = (char, user, *members)  # a group's members by name, each whole
    texts = {i: m.text for i, m in by_id.items()}
    user_texts = {i: texts[i] for i in user_ids}

    def rests_on(text: str, ids: tuple[int, ...], pool: dict[int, str] = texts) -> tuple[int, ...]:
        """The ids `text` rests on: those it cites, or the message of `pool` that holds it."""
        return evidence(text, ids, pool, cast) if text else ()

    def anywhere(text: str) -> str:
        """A secondary string (in fact, because, rejected) if the range holds it, else ""."""
        return text if text and grounded(text, list(texts.values()), cast) else ""

    events: list[Line] = []
    seen = _Seen(cast)
    for event in answer.events:
        text = _clean(event.event)
        ids = rests_on(text, _evidence(event.ids, allowed))
        if ids and seen.fresh(text):
            events.append(Line(text, ids))

    claims: list[Line] = []
    # A claim that only says again what an event of the chapter says is the same line twice
    # (the 270M wrote "User says: I can pay 300 crowns" as both); one with an "in fact" is not.
    told = {content(line.text, cast) for line in events}
    seen = _Seen(cast)
    for claim in answer.claims:
        said = _clean(claim.said)
        ids = rests_on(said, _evidence(claim.ids, allowed))
        # What is in fact true shows in the narration or thoughts, often of another message.
        # One that only says the claim again ("In fact: User says: I can pay 300 crowns") is
        # not a contradiction, and would show a plain statement as a lie.
        in_fact = anywhere(_clean(claim.in_fact))
        if in_fact and grounded(in_fact, [said], cast):
            in_fact = ""
        if not in_fact and content(said, cast) in told:
            continue
        if not ids or not seen.fresh(said):
            continue
        source = by_id[ids[0]]
        speaker = source.speaker
        listener = char if source.role is Role.USER else user
        if in_fact:
            line = f"On the surface: {speaker} told {listener}: {said} In fact: {in_fact}"
        else:
            line = f"{speaker} told {listener}: {said}"
        claims.append(Line(line, ids))

    ledger: list[LedgerItem] = []

    def add(
        kind: LedgerKind,
        text: str,
        ids: tuple[int, ...],
        subject: str | None,
        replaces: str = "",
        *,
        main: str | None = None,
        pool: dict[int, str] = texts,
    ) -> None:
        """Ledger an item on the messages it rests on; `subject` None: whoever said the first."""
        ids = rests_on(text if main is None else main, ids, pool)
        if subject is None and ids:
            subject = by_id[ids[0]].speaker
        if ids and subject is not None and seen.fresh(text):
            ok_replace = replaces if replaces in replaceable else ""
            ledger.append(LedgerItem(kind, text, subject, ids, ok_replace))

    # One list for every kind: a small model copies one line into each of them (the 270M wrote
    # "I can pay 300 crowns" as a fact, a rule, a promise and an open thread), and the copies
    # would take four times its room in the ledger's share. The first kind that has it keeps it.
    seen = _Seen(cast)
    for fact in answer.user_facts:
        add(
            LedgerKind.USER_FACT,
            _clean(fact.fact),
            _evidence(fact.ids, user_ids),
            user,
            fact.replaces,
            pool=user_texts,
        )
    for rule in answer.constraints:
        add(
            LedgerKind.CONSTRAINT,
            _clean(rule.rule),
            _evidence(rule.ids, user_ids),
            user,
            rule.replaces,
            pool=user_texts,
        )
    for decision in answer.decisions:
        ids = _evidence(decision.ids, allowed)
        main = _clean(decision.decision)
        text = main
        # The reasons and the alternatives are often in other messages of the range.
        if because := anywhere(_clean(decision.because)):
            text += f" Because: {because}"
        if rejected := anywhere(_clean(decision.rejected)):
            text += f" Rejected: {rejected}"
        add(LedgerKind.DECISION, text if main else "", ids, None, main=main)
    for promise in answer.promises:
        ids = _evidence(promise.ids, allowed)
        add(LedgerKind.PROMISE, _clean(promise.promise), ids, None)
    for thread in answer.open_threads:
        add(LedgerKind.THREAD, _clean(thread.thread), _evidence(thread.ids, allowed), "")

    resolved: list[Resolution] = []
    closed: set[str] = set()
    for item in answer.resolved:
        if item.thread in open_threads and item.thread not in closed:
            closed.add(item.thread)
            resolved.append(Resolution(item.thread, _clean(item.how), _evidence(item.ids, allowed)))

    time = _clean(answer.time)
    return StructuredChapter(
        time=time if _wordy(time) else "",
        events=tuple(events),
        claims=tuple(claims),
        ledger=tuple(ledger),
        resolved=tuple(resolved),
    )


def with_quotes(
    chapter: StructuredChapter, quotes: Sequence[tuple[Message, str]]
) -> StructuredChapter:
    """The chapter with the user's sentences that hold what it left out, as facts the user
    stated, in their own words (readback.quoted_lines): each names the message it is from."""
    quoted = tuple(
        LedgerItem(LedgerKind.USER_FACT, quote(sentence), message.speaker, (message.id,))
        for message, sentence in quotes
        if message.id is not None
    )
    return replace(chapter, ledger=chapter.ledger + quoted)


def combine(parts: Sequence[StructuredChapter]) -> StructuredChapter:
    """One chapter from the chapters of consecutive parts of one message (a message too long
    for one call): their items in order, the first story time, each thread resolved once."""
    resolved: dict[str, Resolution] = {}
    for part in parts:
        for item in part.resolved:
            resolved.setdefault(item.label, item)
    return StructuredChapter(
        time=next((p.time for p in parts if p.time), ""),
        events=tuple(line for p in parts for line in p.events),
        claims=tuple(line for p in parts for line in p.claims),
        ledger=tuple(item for p in parts for item in p.ledger),
        resolved=tuple(resolved.values()),
    )


# ---- rendered ------------------------------------------------------------------------------


def _cite(evidence: Sequence[int]) -> str:
    return " ".join(f"#{i}" for i in evidence)


def render_chapter(chapter: StructuredChapter) -> str:
    """The chapter's text in the prompt: events, then claims, one line each with its evidence;
    the threads it resolves last. Same structure, same bytes."""
    lines = [f"- {line.text} ({_cite(line.evidence)})" for line in chapter.events]
    if chapter.claims:
        lines.append("Said:")
        lines.extend(f"- {line.text} ({_cite(line.evidence)})" for line in chapter.claims)
    for item in chapter.resolved:
        how = f": {item.how}" if item.how else ""
        lines.append(f"Resolved: {item.label}{how}")
    return "\n".join(lines) if lines else "(nothing recorded beyond the ledger)"


def chapter_words(chapter: StructuredChapter) -> str:
    """Everything the chapter keeps, as one text (what the readback searches)."""
    parts = [chapter.time, render_chapter(chapter)]
    parts.extend(item.text for item in chapter.ledger)
    return "\n".join(parts)


def ledger_changes(
    chapter: StructuredChapter, conv_id: int, live: Sequence[StoredLedgerEntry]
) -> tuple[list[LedgerEntry], list[LedgerEnding]]:
    """What storing this chapter does to the ledger: the entries it adds, and the live entries
    it ends (threads it resolves, facts and rules its items replace), by the labels it named."""
    by_label = {entry.label: entry for entry in live}
    entries = [
        LedgerEntry(
            conversation_id=conv_id,
            kind=item.kind,
            text=item.text,
            subject=item.subject,
            evidence=list(item.evidence),
        )
        for item in chapter.ledger
    ]
    endings: dict[int, LedgerEnding] = {}
    for resolution in chapter.resolved:
        if (entry := by_label.get(resolution.label)) is not None:
            endings[entry.id] = LedgerEnding(entry.id, LedgerEnd.RESOLVED, resolution.how)
    for item in chapter.ledger:
        if (entry := by_label.get(item.replaces)) is not None and entry.id not in endings:
            endings[entry.id] = LedgerEnding(entry.id, LedgerEnd.SUPERSEDED, item.text)
    return entries, list(endings.values())
