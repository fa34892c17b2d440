"""Structured chapters: the schema's bound, reading an answer against its source, rendering it
byte-stable, and the readback of the user's names and numbers."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import LedgerKind, LedgerSource, Message, Role, StoredLedgerEntry
from kotonia_tui.memory.chapter_schema import (
    MIN_SHORT,
    TIME_FLOOR,
    ChapterSource,
    NoRoomForChapterError,
    Shape,
    chapter_schema,
    max_tokens,
    pattern_chars,
    schema_for,
    shapes,
    string_patterns,
)
from kotonia_tui.memory.chronicler import (
    Cast,
    ChronicleRequest,
    Verdict,
    chronicler_prompt,
    read_reply,
)
from kotonia_tui.memory.readback import missing, user_specifics
from kotonia_tui.memory.structured import (
    Dropped,
    DropReason,
    StructuredChapter,
    chapter_words,
    parse_answer,
    read_chapter,
    render_chapter,
    says_something,
)
from kotonia_tui.sentences import CUT_MARK

CAST = Cast(char="Rowan", user="Ann")
SOURCE = [
    Message(
        id=3, role=Role.USER, speaker="Ann", text="My sister Mia lands on the 14th. It costs 3.50."
    ),
    Message(
        id=4,
        role=Role.CHARACTER,
        speaker="Rowan",
        text='"I was a navigator," he lies. He was a clerk all his life.',
    ),
    Message(id=5, role=Role.USER, speaker="Ann", text="Who took the brass key?"),
]
THREAD = StoredLedgerEntry(
    id=7, conversation_id=1, kind=LedgerKind.THREAD, text="Who broke the clock", chapter_id=1
)
FACT = StoredLedgerEntry(
    id=2, conversation_id=1, kind=LedgerKind.USER_FACT, text="Ann lives in Oslo", chapter_id=1
)

ANSWER = {
    "time": "the 14th",
    "events": [
        {"event": "Ann said her sister Mia lands on the 14th.", "ids": [3]},
        {"event": "Ann said her sister Mia lands on the 14th.", "ids": [3]},  # a repeat
        {"event": "Rowan fixed nothing.", "ids": [99]},  # cites no message of the source
    ],
    "claims": [{"said": "he was a navigator", "in_fact": "he was a clerk", "ids": [4]}],
    "user_facts": [
        {"fact": "Ann's sister is Mia; the ticket costs 3.50", "replaces": "F2", "ids": [3]},
        {"fact": "Rowan is a navigator", "replaces": "", "ids": [4]},  # not the user's line
    ],
    "open_threads": [{"thread": "Who took the brass key", "ids": [5]}],
    "resolved": [{"thread": "T7", "how": "the cat did it", "ids": [4]}],
}


def read(answer: dict[str, Any]) -> StructuredChapter:
    return read_chapter(
        parse_answer(json.dumps(answer)),
        SOURCE,
        char="Rowan",
        user="Ann",
        open_threads=("T7",),
        replaceable=("F2",),
    )


def test_an_answer_is_read_against_its_source():
    chapter = read(ANSWER)
    assert [e.text for e in chapter.events] == ["Ann said her sister Mia lands on the 14th."]
    # Who said it and to whom come from message #4, not from the model.
    assert [c.text for c in chapter.claims] == [
        "On the surface: Rowan told Ann: he was a navigator In fact: he was a clerk"
    ]
    kinds = [(item.kind, item.subject, item.evidence, item.replaces) for item in chapter.ledger]
    assert kinds == [
        (LedgerKind.USER_FACT, "Ann", (3,), "F2"),
        (LedgerKind.THREAD, "", (5,), ""),
    ]
    assert [(r.label, r.how) for r in chapter.resolved] == [("T7", "the cat did it")]
    unknown = read({**ANSWER, "resolved": [{"thread": "T99", "how": "", "ids": [4]}]})
    assert unknown.resolved == ()


def test_a_chapter_renders_the_same_bytes_every_time():
    first, second = read(ANSWER), read(json.loads(json.dumps(ANSWER)))
    assert render_chapter(first) == render_chapter(second)
    assert first.to_json() == second.to_json()
    assert render_chapter(first) == (
        "- Ann said her sister Mia lands on the 14th. (#3)\n"
        "Said:\n"
        "- On the surface: Rowan told Ann: he was a navigator In fact: he was a clerk (#4)\n"
        "Resolved: T7: the cat did it"
    )


@pytest.mark.parametrize("budget", [240, 500, 1000, 4096])
def test_the_schema_is_bounded_by_the_budget(budget):
    source = ChapterSource.of(SOURCE, (THREAD, FACT))
    schema = chapter_schema(source, budget)
    assert max_tokens(schema) <= budget
    props = schema["properties"]
    assert props["events"]["minItems"] == 1
    # No list holds more items than the source has messages to cite.
    assert all(p["maxItems"] <= len(SOURCE) * 2 for k, p in props.items() if k != "time")
    if "resolved" in props:
        assert props["resolved"]["items"]["properties"]["thread"]["enum"] == ["T7"]
    if "user_facts" in props:
        assert props["user_facts"]["items"]["properties"]["ids"]["items"]["enum"] == [3, 5]
    with pytest.raises(NoRoomForChapterError):
        chapter_schema(source, 100)


def _chain(source: ChapterSource, per_char: float, *, old: bool) -> list[tuple[int, Shape]]:
    """The shapes a budget is fitted to, largest first, with what each costs at most: the
    schema's order (`shapes`), or (`old`) the rule before D-51's time floor: each step of
    `Shape.smaller`, the time as long as the secondary strings."""
    if old:
        chain: list[Shape] = []
        shape: Shape | None = source.first_shape()
        while shape is not None:
            chain.append(replace(shape, time=MIN_SHORT))
            shape = shape.smaller()
    else:
        chain = list(shapes(source))
    return [(max_tokens(schema_for(source, s), per_char), s) for s in chain]


def _fitted(chain: list[tuple[int, Shape]], budget: int) -> Shape | None:
    return next((shape for cost, shape in chain if cost <= budget), None)


def _swept_source(n: int, n_user: int, first_id: int, threads: int) -> ChapterSource:
    ids = tuple(range(first_id, first_id + n))
    return ChapterSource(
        all_ids=ids,
        user_ids=ids[:n_user],
        open_threads=tuple(f"T{i}" for i in range(1, threads + 1)),
        replaceable=("F1",) * bool(threads),
        names=("Mara", "Wren"),
        user_names=("Mara",),
    )


def test_the_story_time_never_costs_an_item_or_an_items_length():
    """The time had the secondary strings' length (31 characters at the shipped shapes, 11 to
    17 at small budgets), so a date the chronicler wrote there was cut and left out (D-51).
    It has room for 40 characters now, but a floor that made the shape smaller lost an event,
    the only user fact or open thread, or event text, at budgets between the shipped ones. So
    each shape is tried with the time at 40, 24, then its old length, before a smaller one:
    every budget holds the chapter it held before, and the time is never shorter than it was
    and 40 characters wherever that chapter leaves room for them."""
    sources = [
        ChapterSource.of(SOURCE, (THREAD, FACT)),
        _swept_source(5, 2, 1, 0),
        _swept_source(10, 5, 4000, 0),
        _swept_source(15, 7, 990, 3),
    ]
    at_floor = total = 0
    for source in sources:
        for per_char in (0.45, 0.5, 0.6, 0.9):
            old, new = _chain(source, per_char, old=True), _chain(source, per_char, old=False)
            for budget in range(100, 701):
                before, now = _fitted(old, budget), _fitted(new, budget)
                if before is None:
                    assert now is None
                    with pytest.raises(NoRoomForChapterError):
                        chapter_schema(source, budget, per_char)
                    continue
                assert now is not None
                assert now.counts == before.counts
                assert (now.text, now.short) == (before.text, before.short)
                assert now.time_length >= before.time_length
                for floor in (TIME_FLOOR, 24):
                    timed = schema_for(source, replace(before, time=floor))
                    if max_tokens(timed, per_char) <= budget:
                        assert now.time_length >= floor
                total += 1
                at_floor += now.time_length >= TIME_FLOOR
                if budget % 50 == 0:
                    assert chapter_schema(source, budget, per_char) == schema_for(source, now)
    assert at_floor > 0.9 * total
    # The cases the review found (English, 0.5 tokens a character; a source of 10 messages, 5
    # the user's), and the chapter each budget held before D-51.
    source = _swept_source(10, 5, 4000, 0)
    held = {
        120: ({"events": 1}, 48, 40),  # the time 40, the event text as before (48, not 27)
        202: ({"events": 2}, 64, 32),  # two events, the time as before: 40 would cost one
        256: ({"events": 2}, 64, 40),
        279: ({"events": 3}, 64, 32),
        392: ({"events": 3, "user_facts": 1}, 64, 32),
        491: ({"events": 3, "user_facts": 1, "open_threads": 1}, 64, 32),
    }
    for budget, (counts, text, time) in held.items():
        schema = chapter_schema(source, budget, 0.5)
        props = schema["properties"]
        assert {k: p["maxItems"] for k, p in props.items() if k != "time"} == counts
        assert pattern_chars(string_patterns(schema)[("events", "event")]) == text
        assert _time_length(schema) == time


def _time_length(schema: dict[str, Any]) -> int:
    return pattern_chars(string_patterns(schema)[("time", "time")])


def test_readback_finds_the_users_names_and_numbers():
    assert user_specifics(SOURCE) == ["Mia", "14", "3.50"]
    assert missing(["14", "Mia", "3.50"], "Mia comes on the 14th for 3.5") == ["3.50"]
    assert missing(["14"], "on the 140th") == ["14"]


def test_a_readback_miss_is_asked_for_once_then_stored_with_the_misses():
    request = ChronicleRequest.chapter(SOURCE, CAST, (THREAD, FACT))
    prompt = chronicler_prompt(request, ModelProfile())
    assert "T7: Who broke the clock" in prompt.messages[1].content
    assert "F2: Ann lives in Oslo" in prompt.messages[1].content
    thin = {"time": "", "events": [{"event": "Ann's sister lands.", "ids": [3]}]}
    reply = read_reply(request, prompt, json.dumps(thin), cut=False)
    assert reply.ok and reply.misses == ("Mia", "14", "3.50")
    assert reply.retry is not None and reply.retry.misses == reply.misses
    again = chronicler_prompt(reply.retry, ModelProfile())
    assert "left out these names and numbers from Ann's lines: Mia, 14, 3.50" in (
        again.messages[1].content
    )
    last = read_reply(reply.retry, again, json.dumps(thin), cut=False)
    assert last.ok and last.retry is None and last.misses == ("Mia", "14", "3.50")
    whole = read_reply(request, prompt, json.dumps(ANSWER), cut=False)
    assert whole.ok and whole.misses == () and whole.retry is None
    assert whole.story_time == "the 14th"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        # A small chronicler copies a line into "When:"; stored as the chapter's time it headed
        # recalled excerpts ("In-story time: Mara says: I've had enough of").
        ("Ann says: My sister Mia lands on the 14th", DropReason.SPEAKERS_LINE),
        ("Rowan: who took the brass key", DropReason.SPEAKERS_LINE),
        # A date someone mentions is not the day of the scene.
        ("Ann says: Mia lands on 14 May 2019", DropReason.SPEAKERS_LINE),
    ],
)
def test_a_line_of_the_story_in_the_time_is_left_out_and_says_why(
    line: str, reason: DropReason
) -> None:
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, json.dumps({**ANSWER, "time": line}), cut=False)
    assert reply.ok and reply.structure is not None
    assert reply.story_time is None and reply.structure.time == ""
    assert Dropped("time", line, reason) in reply.structure.dropped


@pytest.mark.parametrize(
    "time",
    ["Am nächsten Morgen", "Le lendemain", "Noche", "翌日の朝", "Вечер", "Day 2: noon"],
)
def test_a_time_in_any_language_is_the_chapters(time: str) -> None:
    """The chronicler writes in the story's language, and no word of a time is read: a rule
    of English time words dropped "Am nächsten Morgen" and, stored, every chapter's time of a
    German story."""
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, json.dumps({**ANSWER, "time": time}), cut=False)
    assert reply.ok and reply.structure is not None
    assert reply.story_time == time
    assert all(d.field != "time" for d in reply.structure.dropped)


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        (f"Later that night{CUT_MARK}", "Later that night"),
        (f"She was here in the spring of '{CUT_MARK}", "She was here in the spring of '"),
        (f"Am nächsten Morgen {CUT_MARK}{CUT_MARK}", "Am nächsten Morgen"),
        (f"Later that night{CUT_MARK} {CUT_MARK}", "Later that night"),
    ],
)
def test_a_time_the_model_ends_with_an_ellipsis_is_kept_without_it(written: str, kept: str):
    """Under its limit, a time ending in "…" is the model's own ellipsis: since D-51 nothing
    marks a time the grammar cut, so it is a whole time. Stored with its "…" it would read as
    a time D-50 marked as cut (story_dates.told_time): it is kept without the mark."""
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, json.dumps({**ANSWER, "time": written}), cut=False)
    assert reply.ok and reply.structure is not None
    assert reply.story_time == kept == reply.structure.time
    assert all(d.field != "time" for d in reply.structure.dropped)


def test_a_time_in_digits_is_left_out_unrecorded():
    """A time with fewer letters than digits is left out as before (a small model writes
    "14:00:00" anywhere), without a reason in the chapter's dropped items."""
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, json.dumps({**ANSWER, "time": "10:30 pm"}), cut=False)
    assert reply.ok and reply.structure is not None
    assert reply.story_time is None
    assert all(d.field != "time" for d in reply.structure.dropped)


def test_an_answer_that_keeps_nothing_is_not_a_chapter():
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    # An event without text and one citing no message of the source: both are dropped.
    hollow = {"time": "the 14th", "events": [{"event": "", "ids": [3]}, {"event": "x", "ids": []}]}
    reply = read_reply(request, prompt, json.dumps(hollow), cut=False)
    assert reply.verdict is Verdict.HOLLOW and not reply.ok
    # Asked again, told that its answer said nothing (unchanged, a model at a low temperature
    # writes the same answer again).
    assert reply.retry == replace(request, hollow=True)
    again = chronicler_prompt(reply.retry, ModelProfile()).messages[1].content
    assert "Your last record said nothing about these messages." in again


def test_an_answer_that_is_not_the_schema_is_asked_for_again():
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, "Ann talked about Mia.", cut=False)
    assert reply.verdict is Verdict.MALFORMED and reply.retry == request


# Items a 270M base model wrote under the first schema (embedded default, the shipped dataset
# and a second story; scripts/chapter_probe.py): they say nothing about the story.
DEGENERATE = [
    "1, 2, 3, 4, 5, 6, 7, 8, 9",
    "claims: 1, 2, 3, 4",
    "events.13 of them",
    "aaaaaaaaaaaa",
    "ha ha ha ha ha ha",
    "Harwick, Street, Corwin",
    "I was in the store, I was in the store, I was in the store",
    "date_of_birth",
    "Mara says to Piet:",
]


def test_items_that_say_nothing_are_dropped_and_a_chapter_of_them_is_not_stored():
    good = {"event": "Ann said her sister Mia lands on the 14th", "ids": [3]}
    junk = [{"event": text, "ids": [3]} for text in DEGENERATE]
    chapter = read({"events": [*junk, good], "time": "14:00:00"})
    assert [e.text for e in chapter.events] == [good["event"]]
    assert chapter.time == ""  # a time with no words in it is not a time
    facts = read({"events": [good], "user_facts": [{"fact": t, "ids": [3]} for t in DEGENERATE]})
    assert facts.ledger == ()

    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, json.dumps({"events": junk}), cut=False)
    assert reply.verdict is Verdict.HOLLOW and not reply.ok
    assert reply.retry == replace(request, hollow=True)


def test_an_item_that_only_names_the_cast_is_dropped_and_says_why():
    """ "Rowan and Ann (#4)": its only words of substance are the cast's names, which any
    message of the range holds, so grounding passed it; it tells the reader nothing. The
    chapter keeps its other items; a group member counts as cast, anyone else does not."""
    good = {"event": "Ann said her sister Mia lands on the 14th", "ids": [3]}
    cast_only = ["Rowan and Ann", "Ann met Rowan (#4)", "Rowan, Ann", "Bo and Ann"]
    chapter = read_chapter(
        parse_answer(
            json.dumps(
                {
                    "events": [*({"event": t, "ids": [4]} for t in cast_only), good],
                    "claims": [{"said": "Rowan and Bo", "in_fact": "", "ids": [4]}],
                    "user_facts": [{"fact": "Ann and Rowan", "ids": [3]}],
                }
            )
        ),
        SOURCE,
        char="Rowan",
        user="Ann",
        members=("Bo",),
        open_threads=(),
        replaceable=(),
    )
    assert [e.text for e in chapter.events] == [good["event"]]
    assert chapter.claims == () and chapter.ledger == ()
    assert [d for d in chapter.dropped if d.reason is DropReason.ONLY_CAST] == [
        *(Dropped("events", t, DropReason.ONLY_CAST) for t in cast_only),
        Dropped("claims", "Rowan and Bo", DropReason.ONLY_CAST),
        Dropped("user_facts", "Ann and Rowan", DropReason.ONLY_CAST),
    ]
    # A name from outside the cast is something said: checked against the source as before.
    mia = read({"events": [{"event": "Ann and Mia", "ids": [3]}]})
    assert [e.text for e in mia.events] == ["Ann and Mia"]

    # Every item only names the cast: the chapter holds nothing, and is asked for again
    # (then quoted from its range, as any hollow answer: chat/fold/outcomes.py).
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    only = {"events": [{"event": "Rowan and Ann", "ids": [4]}]}
    reply = read_reply(request, prompt, json.dumps(only), cut=False)
    assert reply.verdict is Verdict.HOLLOW and reply.retry == replace(request, hollow=True)


def test_sentences_that_say_something_are_kept():
    for text in (
        "Mara bought bread, milk, eggs and tea",
        "Corwin said the Albatross sank in the gale of 1887",
        "マラはお茶にラムを入れないでと頼んだ",  # no spaces, no capitals: still a sentence
    ):
        assert says_something(text), text


def test_the_users_names_and_numbers_a_chapter_left_out_are_kept_in_their_words():
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    thin = {"events": [{"event": "Ann told Rowan her sister lands", "ids": [3]}]}
    reply = read_reply(request, prompt, json.dumps(thin), cut=False)
    assert reply.misses == ("Mia", "14", "3.50")
    kept = reply.kept
    assert kept is not None and reply.structure is not None
    quotes = [(item.kind, item.subject, item.text, item.evidence) for item in kept.ledger]
    assert quotes == [
        (LedgerKind.USER_FACT, "Ann", 'said "My sister Mia lands on the 14th."', (3,)),
        (LedgerKind.USER_FACT, "Ann", 'said "It costs 3.50."', (3,)),
    ]
    # The chapter's own text is what the chronicler wrote; the readback changes the ledger.
    assert render_chapter(kept) == render_chapter(reply.structure)
    assert missing(user_specifics(SOURCE), chapter_words(kept)) == []


def test_a_line_that_only_names_the_character_is_not_quoted():
    source = [Message(id=8, role=Role.USER, speaker="Ann", text="Goodnight, Rowan.")]
    request = ChronicleRequest.chapter(source, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    thin = {"events": [{"event": "Ann said goodnight to the keeper", "ids": [8]}]}
    reply = read_reply(request, prompt, json.dumps(thin), cut=False)
    assert reply.misses == ("Rowan",)
    kept = reply.kept
    assert kept is not None and kept.ledger == ()


def test_quoted_lines_are_not_offered_to_the_chronicler_to_copy_or_replace():
    quoted = StoredLedgerEntry(
        id=4,
        conversation_id=1,
        kind=LedgerKind.USER_FACT,
        text='said "I\'m Ann Lee."',
        subject="Ann",
        chapter_id=1,
        source=LedgerSource.READBACK,
    )
    request = ChronicleRequest.chapter(SOURCE, CAST, (FACT, quoted))
    prompt = chronicler_prompt(request, ModelProfile()).messages[1].content
    assert "F2: Ann lives in Oslo" in prompt and "Ann Lee" not in prompt
    schema = chapter_schema(request.source, 4096)
    replaces = schema["properties"]["user_facts"]["items"]["properties"]["replaces"]["enum"]
    assert replaces == ["", "F2"]


def test_every_string_starts_with_a_letter_and_the_bound_follows_the_pattern():
    schema = chapter_schema(ChapterSource.of(SOURCE, (THREAD, FACT)), 4096)
    event = schema["properties"]["events"]["items"]["properties"]["event"]
    pattern = re.compile(event["pattern"])
    assert pattern.match("Ann met Rowan") and pattern.match(" Ann met Rowan")
    assert not pattern.match("1887 was the year") and not pattern.match(" 1887 was it")
    assert not pattern.match("}, {") and not pattern.match("T7") and not pattern.match("")
    assert pattern_chars(event["pattern"]) == event["maxLength"]
    in_fact = schema["properties"]["claims"]["items"]["properties"]["in_fact"]
    assert re.match(in_fact["pattern"], "") and not re.match(in_fact["pattern"], "  x")
    assert pattern_chars(in_fact["pattern"]) == in_fact["maxLength"]
    # Every list is required (a small model must open each); the story time is optional.
    assert schema["required"] == [k for k in schema["properties"] if k != "time"]
    assert list(schema["properties"])[:3] == ["events", "user_facts", "rules"]
    item = schema["properties"]["events"]["items"]["properties"]
    assert list(item) == ["event", "ids"]  # the text before the ids
