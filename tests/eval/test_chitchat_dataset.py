"""The second shipped dataset: nine real chats between two brothers (assets/eval/chitchat.json)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from kotonia_tui.domain import Role
from kotonia_tui.eval.command import SHIPPED_DATASET
from kotonia_tui.eval.dataset import load_file
from kotonia_tui.eval.grading import is_short
from tests.eval.dataset_builders import load_builder

DATASET = SHIPPED_DATASET.parent / "chitchat.json"
# Each chat opens with its date as narration: the only place the model sees when it happened.
HEADING = re.compile(
    r"^\*(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), \d{1,2} \w+ 2018, "
    r'\d{1,2}:\d{2} [ap]m\. Chat prompt: ".+"\*\n'
)


def test_the_dataset_loads_with_questions_over_the_whole_conversation():
    conv = load_file(DATASET)
    assert conv.character.name == "Kyle" and conv.user.name == "Sam"
    assert 200 <= len(conv.messages) <= 400
    assert {(m.role, m.speaker) for m in conv.messages} == {
        (Role.USER, "Sam"),
        (Role.CHARACTER, "Kyle"),
    }
    raw = json.loads(DATASET.read_text(encoding="utf-8"))["messages"]
    # Within a chat the turns alternate: a message is what one brother typed before the other
    # answered.
    for one, two in itertools.pairwise(raw):
        assert one["session"] != two["session"] or one["role"] != two["role"], two["id"]
    openings = [m for i, m in enumerate(raw) if i == 0 or m["session"] != raw[i - 1]["session"]]
    assert len(openings) == 9
    assert all(HEADING.match(m["text"]) for m in openings)
    assert sum(bool(HEADING.match(m["text"])) for m in raw) == 9

    questions = conv.questions
    assert len(questions) >= 45
    assert len({q.id for q in questions}) == len(questions)
    kinds = {q.kind for q in questions}
    assert {"fact", "user", "temporal", "multihop"} <= kinds
    assert kinds <= {"fact", "user", "temporal", "multihop", "decision", "resolved"}
    for question in questions:
        if question.kind == "multihop":
            assert len(question.evidence) >= 2, question.id
    by_id = {m.id: m for m in conv.messages}
    # A `user` question is about what the user said of himself.
    for question in questions:
        if question.kind == "user":
            assert all(by_id[e].role is Role.USER for e in question.evidence), question.id
    # A question about a date cites the chat opening that carries it.
    opening_ids = {m["id"] for m in openings}
    dated = [q for q in questions if q.kind == "temporal" and re.search(r"\d{4}", q.answer)]
    assert dated and all(opening_ids & set(q.evidence) for q in dated)
    # The evidence is spread over old and recent chats, not bunched at one end.
    session_of = {m["id"]: m["session"] for m in raw}
    newest = [session_of[q.newest_evidence] for q in questions]
    assert set(newest) == set(range(1, 10))
    assert max(newest.count(s) for s in range(1, 10)) <= len(questions) // 4
    # Short references, so exact match and F1 count beside the judge.
    assert sum(is_short(q.answer) for q in questions) >= 0.9 * len(questions)
    for thread in conv.threads:
        assert thread.resolved is not None and thread.opened < thread.resolved


def test_the_builder_reproduces_the_shipped_file():
    assert load_builder("make_chitchat").build() == json.loads(DATASET.read_text(encoding="utf-8"))


def test_the_builder_refuses_evidence_that_does_not_hold_the_answer(
    monkeypatch: pytest.MonkeyPatch,
):
    builder = load_builder("make_chitchat")
    wrong = ("qx", "fact", "What is the cat called?", "Soot", [(2, "the cat is called Soot")])
    monkeypatch.setattr(builder, "QUESTIONS", [*builder.QUESTIONS, wrong])
    with pytest.raises(SystemExit, match="qx: message 2 does not contain 'the cat is called Soot'"):
        builder.build()


def test_the_source_is_the_package_text_with_its_licence():
    builder = load_builder("make_chitchat")
    source = json.loads(Path(builder.SOURCE).read_text(encoding="utf-8"))
    assert "Perception, Control and Cognition Lab" in source["license"]
    assert "MIT License" in source["license"]
    chats = source["conversations"]
    assert len(chats) == 9
    in_order = sorted(chats.values(), key=lambda chat: chat["messages"][0][0]["timestamp"])
    typed = [line["text"] for chat in in_order for turn in chat["messages"] for line in turn]
    shipped = "\n".join(m["text"] for m in builder.build()["messages"])
    # Every line typed in the source is in the dataset, in order: nothing dropped or cut.
    position = 0
    for line in typed:
        position = shipped.find(line, position)
        assert position >= 0, line
        position += len(line)
