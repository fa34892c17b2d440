"""A structured chapter read from the chronicler's JSON, and rendered back as text.

The model writes only what it must: what happened, what was said, what holds. Who said it, to
whom, and the message it rests on come from the source (the model names a message id; its
speaker is looked up), so a small model cannot swap speakers. Items that cite no message of the
source, say nothing, only name the cast ("Corwin and Mara"), or repeat an earlier item of their
list are dropped here (small models repeat one item to fill an array), each with its reason.

The text a chapter puts in the prompt is rendered from the structure by `render_chapter`, one
line per item in a fixed order, so the same structure always gives the same bytes. The ledger
items (facts, rules, decisions, promises, threads) are not repeated in the chapter's text: they
go to the ledger, which the memory block renders once, before the synopsis.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kotonia_tui.domain import (
    LedgerEnd,
    LedgerEnding,
    LedgerEntry,
    LedgerKind,
    LedgerSource,
    Message,
    Role,
    StoredLedgerEntry,
)
from kotonia_tui.memory.grounding import content, evidence, grounded, only_names_the_cast
from kotonia_tui.memory.readback import quote, quoted_lines, user_specifics
from kotonia_tui.sentences import CUT_MARK
from kotonia_tui.story_dates import speakers_line, uncut_dates
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
    rules: list[RuleItem] = Field(default_factory=list)
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
    source: LedgerSource = LedgerSource.CHRONICLER


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
    dropped: tuple[Dropped, ...] = ()  # the answer's items the checks left out, and why

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
                        "source": x.source.value,
                    }
                    for x in self.ledger
                ],
                "resolved": [
                    {"thread": x.label, "how": x.how, "ids": list(x.evidence)}
                    for x in self.resolved
                ],
                "dropped": [
                    {"field": x.field, "text": x.text, "reason": x.reason.name.lower()}
                    for x in self.dropped
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
    """Whether an item's text can be a record of anything: a chapter of items like these
    must fail (HOLLOW, asked again), never be stored as memory (docs/decisions.md D-4). Not
    when the text:
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


class DropReason(StrEnum):
    """Why `read_chapter` left an item of the answer out (kept with the chapter, shown in the
    inspector and counted by the audit)."""

    NO_TEXT = "it has no text"
    ONLY_CAST = "it only names the cast"
    NOT_GROUNDED = "no message it cites, or of its range, holds it"
    ONLY_NUMBERS = "a number with nothing said about it"
    SAYS_NOTHING = "it says nothing (a key, a bare list, a loop)"
    REPEATED = "it says what an item kept before says"
    EVENT_AGAIN = "a claim that only says an event of the chapter again"
    NOT_OPEN = "it resolves no open thread"
    # The story time (D-51): the grammar ended it (at its limit; its whole dates are kept), or
    # it is a speaker's line ("Mara says: ...": story_dates.speakers_line).
    CUT_TIME = "the grammar cut it: not the whole time"
    SPEAKERS_LINE = "it is a speaker's line, not a time"


@dataclass(frozen=True)
class Dropped:
    """An item of the answer that is not kept, and why."""

    field: str  # the answer's list ("events", "user_facts", ...)
    text: str
    reason: DropReason


@dataclass
class _Candidate:
    """One item of the answer on its way through the checks."""

    field: str
    text: str  # what is kept
    cited: tuple[int, ...]  # the ids it names that are in its range
    main: str = ""  # what must rest on the messages ("": the text)
    pool: dict[int, str] | None = None  # the messages it may rest on (None: the range's)
    plain_claim: bool = False  # a claim with no "in fact": not kept if an event says it
    ids: tuple[int, ...] = ()  # the ids it rests on, once grounded


@dataclass
class _Reading:
    """What the checks read an answer against: its messages and what was kept so far."""

    texts: dict[int, str]
    cast: tuple[str, ...]
    open_threads: Sequence[str]
    seen: set[frozenset[str] | str] = field(default_factory=set)  # per list (ledger: one)
    told: set[frozenset[str]] = field(default_factory=set)  # the events' content terms
    closed: set[str] = field(default_factory=set)  # threads resolved so far


Check = Callable[[_Candidate, _Reading], DropReason | None]


def has_text(item: _Candidate, _reading: _Reading) -> DropReason | None:
    return None if item.text else DropReason.NO_TEXT


def says_more_than_the_cast(item: _Candidate, reading: _Reading) -> DropReason | None:
    """Not an item whose only words of substance are the cast's names ("Corwin and Mara",
    cited to a message): the names are in every range, so grounding cannot tell it from a
    record, and it tells the reader nothing (grounding.only_names_the_cast)."""
    main = item.main or item.text
    return DropReason.ONLY_CAST if only_names_the_cast(main, reading.cast) else None


def rests_on_its_messages(item: _Candidate, reading: _Reading) -> DropReason | None:
    """Grounding (memory/grounding.py): the ids it cites that hold it, or the message of its
    pool that does."""
    main = item.main or item.text
    pool = reading.texts if item.pool is None else item.pool
    item.ids = evidence(main, item.cited, pool, reading.cast) if main else ()
    return None if item.ids else DropReason.NOT_GROUNDED


def says_something_new(item: _Candidate, reading: _Reading) -> DropReason | None:
    """Not a number alone, not an item that says nothing (`says_something`), not what an item
    kept before in the same list says: the same content terms (`grounding.content`), whatever
    the framing around them, or for a text of none, the same text whatever its case."""
    terms = content(item.text, reading.cast)
    if terms and all(is_number(term) for term in terms):
        # "User says: 300," (a small model, for "I can pay 300 crowns for the lantern, not
        # more."): dropped, the readback finds the number missing and keeps the sentence.
        return DropReason.ONLY_NUMBERS
    key: frozenset[str] | str = terms or item.text.casefold().strip()
    if not says_something(item.text):
        return DropReason.SAYS_NOTHING
    if key in reading.seen:
        return DropReason.REPEATED
    reading.seen.add(key)
    return None


def not_an_event_again(item: _Candidate, reading: _Reading) -> DropReason | None:
    """A claim with no "in fact" that says what an event of the chapter says is the same line
    twice (small models write "User says: I can pay 300 crowns" as both)."""
    if item.plain_claim and content(item.text, reading.cast) in reading.told:
        return DropReason.EVENT_AGAIN
    return None


def resolves_an_open_thread(item: _Candidate, reading: _Reading) -> DropReason | None:
    if item.text not in reading.open_threads:
        return DropReason.NOT_OPEN
    if item.text in reading.closed:
        return DropReason.REPEATED
    reading.closed.add(item.text)
    return None


# The checks each list's items pass, in order; the first that fails drops the item.
ITEM_CHECKS: tuple[Check, ...] = (
    has_text,
    says_more_than_the_cast,
    rests_on_its_messages,
    says_something_new,
)
CLAIM_CHECKS: tuple[Check, ...] = (
    has_text,
    not_an_event_again,
    says_more_than_the_cast,
    rests_on_its_messages,
    says_something_new,
)
RESOLVED_CHECKS: tuple[Check, ...] = (resolves_an_open_thread,)


def _passes(
    item: _Candidate, checks: Sequence[Check], reading: _Reading, dropped: list[Dropped]
) -> bool:
    for check in checks:
        if (reason := check(item, reading)) is not None:
            dropped.append(Dropped(item.field, item.text or item.main, reason))
            return False
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
    time_cut: bool = False,
) -> StructuredChapter:
    """The answer checked against its source, item by item through its list's checks
    (`ITEM_CHECKS`, `CLAIM_CHECKS`, `RESOLVED_CHECKS`): an item with no text, naming only the
    cast, not grounded in the messages it cites, saying nothing or what a kept item says is
    dropped, with the reason recorded (`StructuredChapter.dropped`). Speakers come from the
    messages cited; an ungrounded "in fact", "because" or "rejected" is left out of its item;
    a "replaces" label that names no replaceable entry is left out. The story time is left
    out, with its reason, when it is a line of the cast's ("Mara says: ...", D-51) or when
    the grammar ended it (`time_cut`: it reached its pattern's limit,
    memory/cut_items.time_cut), keeping then only the dates the cut did not reach
    (story_dates.uncut_dates). A time the model ended with "…" is whole: it is kept without
    the mark (a stored time ending in it reads as cut: story_dates.told_time)."""
    by_id = {m.id: m for m in messages if m.id is not None}
    allowed = set(by_id)
    user_ids = {i for i, m in by_id.items() if m.role is Role.USER}
    cast = (char, user, *members)  # a group's members by name, each whole
    texts = {i: m.text for i, m in by_id.items()}
    user_texts = {i: texts[i] for i in user_ids}
    dropped: list[Dropped] = []

    def anywhere(text: str) -> str:
        """A secondary string (in fact, because, rejected) if the range holds it, else ""."""
        return text if text and grounded(text, list(texts.values()), cast) else ""

    events: list[Line] = []
    reading = _Reading(texts, cast, open_threads)
    for event in answer.events:
        item = _Candidate("events", _clean(event.event), _evidence(event.ids, allowed))
        if _passes(item, ITEM_CHECKS, reading, dropped):
            events.append(Line(item.text, item.ids))

    claims: list[Line] = []
    told = {content(line.text, cast) for line in events}
    reading = _Reading(texts, cast, open_threads, told=told)
    for claim in answer.claims:
        said = _clean(claim.said)
        # What is in fact true shows in the narration or thoughts, often of another message.
        # One that only says the claim again ("In fact: User says: I can pay 300 crowns") is
        # not a contradiction, and would show a plain statement as a lie.
        in_fact = anywhere(_clean(claim.in_fact))
        if in_fact and grounded(in_fact, [said], cast):
            in_fact = ""
        ids = _evidence(claim.ids, allowed)
        item = _Candidate("claims", said, ids, plain_claim=not in_fact)
        if not _passes(item, CLAIM_CHECKS, reading, dropped):
            continue
        source = by_id[item.ids[0]]
        speaker = source.speaker
        listener = char if source.role is Role.USER else user
        if in_fact:
            line = f"On the surface: {speaker} told {listener}: {said} In fact: {in_fact}"
        else:
            line = f"{speaker} told {listener}: {said}"
        claims.append(Line(line, item.ids))

    ledger: list[LedgerItem] = []
    # One list for every kind: a small model copies one line into each of them (one line as a
    # fact, a rule, a promise and an open thread), and the copies would take four times its
    # room in the ledger's share. The first kind that has it keeps it.
    reading = _Reading(texts, cast, open_threads)

    def add(kind: LedgerKind, item: _Candidate, subject: str | None, replaces: str = "") -> None:
        """Ledger an item on the messages it rests on; `subject` None: whoever said the first."""
        if _passes(item, ITEM_CHECKS, reading, dropped):
            who = by_id[item.ids[0]].speaker if subject is None else subject
            ok_replace = replaces if replaces in replaceable else ""
            ledger.append(LedgerItem(kind, item.text, who, item.ids, ok_replace))

    for fact in answer.user_facts:
        ids = _evidence(fact.ids, user_ids)
        item = _Candidate("user_facts", _clean(fact.fact), ids, pool=user_texts)
        add(LedgerKind.USER_FACT, item, user, fact.replaces)
    for rule in answer.rules:
        item = _Candidate(
            "rules", _clean(rule.rule), _evidence(rule.ids, user_ids), pool=user_texts
        )
        add(LedgerKind.CONSTRAINT, item, user, rule.replaces)
    for decision in answer.decisions:
        main = _clean(decision.decision)
        text = main
        # The reasons and the alternatives are often in other messages of the range.
        if because := anywhere(_clean(decision.because)):
            text += f" Because: {because}"
        if rejected := anywhere(_clean(decision.rejected)):
            text += f" Rejected: {rejected}"
        item = _Candidate("decisions", text if main else "", _evidence(decision.ids, allowed), main)
        add(LedgerKind.DECISION, item, None)
    for promise in answer.promises:
        item = _Candidate("promises", _clean(promise.promise), _evidence(promise.ids, allowed))
        add(LedgerKind.PROMISE, item, None)
    for thread in answer.open_threads:
        item = _Candidate("open_threads", _clean(thread.thread), _evidence(thread.ids, allowed))
        add(LedgerKind.THREAD, item, "")

    resolved: list[Resolution] = []
    reading = _Reading(texts, cast, open_threads)
    for answered in answer.resolved:
        item = _Candidate("resolved", answered.thread, ())
        if _passes(item, RESOLVED_CHECKS, reading, dropped):
            ids = _evidence(answered.ids, allowed)
            resolved.append(Resolution(answered.thread, _clean(answered.how), ids))

    time = _clean(answer.time)
    if not _wordy(time):
        # Digits and marks ("14:00:00"): what a small model writes in any field, left out
        # unrecorded as before.
        time = ""
    elif speakers_line(time, cast):
        # Even one naming a date: a date someone mentions is not the day of the scene.
        dropped.append(Dropped("time", time, DropReason.SPEAKERS_LINE))
        time = ""
    elif time_cut:
        # A string the grammar ended is what the chronicler was writing, cut: shown as the
        # chapter's time, it headed recalled excerpts ("In-story time: She was here in the
        # spring of '…"). The dates the cut did not reach are kept ("Friday, 19 October 2018"
        # of "Friday, 19 October 2018, eveni"); the string as written is recorded as cut.
        dropped.append(Dropped("time", time, DropReason.CUT_TIME))
        time = uncut_dates(time) or ""
    else:
        # Not at its limit, a time ending in "…" is the model's own ellipsis ("Later that
        # night…"): a whole time. Stored with the mark, it would read as one the grammar cut
        # (story_dates.told_time: D-50 marked cut times so), so the marks go, with the spaces
        # between them ("Later… …").
        time = time.rstrip(f"{CUT_MARK} ")
    return StructuredChapter(
        time=time,
        events=tuple(events),
        claims=tuple(claims),
        ledger=tuple(ledger),
        resolved=tuple(resolved),
        dropped=tuple(dropped),
    )


def dropped_of(structure: str | None) -> list[Dropped]:
    """The items a stored chapter's checks left out (its `structure` JSON; none for a prose
    chapter, or one stored before the reasons were kept)."""
    if not structure:
        return []
    rows = json.loads(structure).get("dropped", [])
    return [Dropped(r["field"], r["text"], DropReason[r["reason"].upper()]) for r in rows]


def retarget_structure(structure: str, to_new: Mapping[int, int]) -> str:
    """A stored chapter's `structure` with its items' evidence ids rewritten by `to_new` (a
    branch's copy cites the copies of its messages, as its range and text do). Every item of
    every list (`to_json`: events, claims, ledger, resolved) names its ids under "ids"; an id
    not in `to_new` stays as it is, as `renumber` leaves it in a text. Labels ("replaces",
    a resolved thread) name ledger entries, which a branch's copies keep. A structure that is
    not JSON is returned as it is."""
    try:
        data = json.loads(structure)
    except ValueError:
        return structure
    if not isinstance(data, dict):
        return structure
    for items in data.values():
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("ids"), list):
                item["ids"] = [to_new.get(i, i) if isinstance(i, int) else i for i in item["ids"]]
    return json.dumps(data, ensure_ascii=False)


def with_quotes(
    chapter: StructuredChapter, messages: Sequence[Message], misses: Sequence[str] | None = None
) -> StructuredChapter:
    """The chapter with the user's sentences in `messages` that hold what it left out
    (`misses`; None: every name and number of the user's lines), as facts the user stated, in
    their own words (readback.quoted_lines): each names the message it is from."""
    if misses is None:
        misses = user_specifics(messages)
    quotes = quoted_lines(messages, misses)
    quoted = tuple(
        LedgerItem(
            LedgerKind.USER_FACT,
            quote(sentence),
            message.speaker,
            (message.id,),
            source=LedgerSource.READBACK,
        )
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
            source=item.source,
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
