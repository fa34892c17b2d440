"""Structured chapters: the schema's bound, reading an answer against its source, rendering it
byte-stable, and the readback of the user's names and numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import LedgerKind, Message, Role, StoredLedgerEntry
from kotonia_tui.memory.chapter_schema import (
    ChapterSource,
    NoRoomForChapterError,
    chapter_schema,
    max_tokens,
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
    StructuredChapter,
    parse_answer,
    read_chapter,
    render_chapter,
)

CAST = Cast(char="Rowan", user="Ann")
SOURCE = [
    Message(
        id=3, role=Role.USER, speaker="Ann", text="My sister Mia lands on the 14th. It costs 3.50."
    ),
    Message(id=4, role=Role.CHARACTER, speaker="Rowan", text='"I was a navigator," he lies.'),
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


def test_readback_finds_the_users_names_and_numbers():
    assert user_specifics(SOURCE) == ["Mia", "14", "3.50"]
    assert missing(["14", "Mia", "3.50"], "Mia comes on the 14th for 3.5") == ["3.50"]
    assert missing(["14"], "on the 140th") == ["14"]


def test_a_readback_miss_is_asked_for_once_then_stored_with_the_misses():
    request = ChronicleRequest.chapter(SOURCE, CAST, (THREAD, FACT))
    prompt = chronicler_prompt(request, ModelProfile())
    assert "T7: Who broke the clock" in prompt.messages[1].content
    assert "F2: Ann lives in Oslo" in prompt.messages[1].content
    thin = {"time": "", "events": [{"event": "Ann talked.", "ids": [3]}]}
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


def test_an_answer_that_keeps_nothing_is_not_a_chapter():
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    # An event without text and one citing no message of the source: both are dropped.
    hollow = {"time": "the 14th", "events": [{"event": "", "ids": [3]}, {"event": "x", "ids": []}]}
    reply = read_reply(request, prompt, json.dumps(hollow), cut=False)
    assert reply.verdict is Verdict.HOLLOW and not reply.ok and reply.retry == request


def test_an_answer_that_is_not_the_schema_is_asked_for_again():
    request = ChronicleRequest.chapter(SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile())
    reply = read_reply(request, prompt, "Ann talked about Mia.", cut=False)
    assert reply.verdict is Verdict.MALFORMED and reply.retry == request
