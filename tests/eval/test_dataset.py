"""The shipped dataset and the input formats the evaluation reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kotonia_tui.chatfiles import write_sillytavern
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.eval.command import SHIPPED_DATASET
from kotonia_tui.eval.dataset import DatasetError, load_file, load_stored
from kotonia_tui.eval.grading import is_short
from kotonia_tui.store import Store
from tests.eval.dataset_builders import load_builder


def test_shipped_dataset_is_complete_and_consistent():
    conv = load_file(SHIPPED_DATASET)
    assert conv.title == "The Keeper of Gull's Reach"
    assert len(conv.messages) >= 300
    assert len(conv.questions) >= 40
    assert {m.role for m in conv.messages} == {Role.USER, Role.CHARACTER}
    kinds = {q.kind for q in conv.questions}
    assert {"lie", "decision", "constraint", "resolved", "user", "fact"} <= kinds
    assert len({q.id for q in conv.questions}) == len(conv.questions)
    # Threads are resolved after they open; lies point at the character's messages.
    for thread in conv.threads:
        assert thread.resolved is not None and thread.opened < thread.resolved
    by_id = {m.id: m for m in conv.messages}
    for lie in conv.lies:
        assert by_id[lie.message].role is Role.CHARACTER
    # The liar's thoughts show the truth (backticks), so the chronicler can tell.
    assert sum("`" in m.text for m in conv.messages if m.role is Role.CHARACTER) >= 15
    # Short reference answers, so exact/F1 can be used beside the judge.
    assert sum(is_short(q.answer) for q in conv.questions) >= 55


def test_dataset_builder_reproduces_the_shipped_file():
    assert load_builder("make_lighthouse").build() == json.loads(
        SHIPPED_DATASET.read_text(encoding="utf-8")
    )


def test_chat_files_and_stored_conversations(tmp_path: Path):
    rows = [{"speaker": "Ann", "text": "Hello"}, {"speaker": "Bo", "text": '"Hi," *he waves.*'}]
    listed = tmp_path / "chat.json"
    listed.write_text(json.dumps(rows))
    conv = load_file(listed, persona_name="Ann")
    assert [(m.id, m.role, m.speaker) for m in conv.messages] == [
        (1, Role.USER, "Ann"),
        (2, Role.CHARACTER, "Bo"),
    ]
    assert conv.character.name == "Bo" and not conv.questions

    with Store.open(tmp_path / "db.sqlite3") as store:
        stored = store.create_conversation(
            Conversation(character_key="bo", character_name="Bo", persona_name="Ann")
        )
        for row in rows:
            role = Role.USER if row["speaker"] == "Ann" else Role.CHARACTER
            store.add_message(
                Message(
                    conversation_id=stored.id, role=role, speaker=row["speaker"], text=row["text"]
                )
            )
        from_store = load_stored(store, stored.id)
        assert from_store.character.key == "bo"
        assert [m.text for m in from_store.messages] == ["Hello", '"Hi," *he waves.*']
        jsonl = tmp_path / "chat.jsonl"
        with jsonl.open("w", encoding="utf-8") as out:
            write_sillytavern(
                store.get_conversation(stored.id), store.iter_messages(stored.id), out
            )
    from_jsonl = load_file(jsonl, persona_name="Ann")
    assert [m.role for m in from_jsonl.messages] == [Role.USER, Role.CHARACTER]


def test_bad_dataset_names_the_problem(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "character": {"name": "B"},
                "messages": [
                    {"id": 2, "role": "user", "speaker": "A", "text": "x"},
                    {"id": 1, "role": "character", "speaker": "B", "text": "y"},
                ],
            }
        )
    )
    with pytest.raises(DatasetError, match="ascending"):
        load_file(bad)
    with pytest.raises(DatasetError, match="cannot be read"):
        load_file(tmp_path / "missing.json")


def test_the_builder_refuses_evidence_that_holds_no_word_of_the_answer(
    monkeypatch: pytest.MonkeyPatch,
):
    """A label on the question's line ("What's his name?") instead of the line that answers it
    made every arm's evidence for three questions absent (issue 28): the builder says which."""
    builder = load_builder("make_lighthouse")
    asked = ("qx", "fact", "What is the fisherman's name?", "Piet Vos", ["piet"])
    monkeypatch.setattr(builder, "QUESTIONS", [*builder.QUESTIONS, asked])
    with pytest.raises(SystemExit, match=r"qx: no evidence message \(#202\) holds a word of"):
        builder.build()
    answered = ("qx", "fact", "What is the fisherman's name?", "Piet Vos", ["piet_named"])
    monkeypatch.setattr(builder, "QUESTIONS", [*builder.QUESTIONS[:-1], answered])
    assert builder.build()["questions"][-1]["evidence"] == [203]


def test_the_builder_refuses_a_restatement_without_the_answer(monkeypatch: pytest.MonkeyPatch):
    """A line marked as saying the answer again must hold a word of it, as evidence must."""
    builder = load_builder("make_lighthouse")
    monkeypatch.setitem(builder.RESTATED, "q37", ["report_named", "greet"])
    with pytest.raises(SystemExit, match=r"q37: the restatement #1 holds no word of the answer"):
        builder.build()
    monkeypatch.setitem(builder.RESTATED, "q37", ["piet_named"])  # its own evidence
    with pytest.raises(SystemExit, match=r"q37: #203 is its evidence, not a restatement"):
        builder.build()


@pytest.mark.parametrize(
    ("restated", "error"),
    [
        ([9], r"question q: restated \[9\] are not messages"),
        ([1], r"question q: \[1\] are evidence"),
    ],
)
def test_a_restatement_must_be_another_message(tmp_path: Path, restated: list[int], error: str):
    def dataset(again: list[int]) -> str:
        question = {"id": "q", "question": "The cat?", "answer": "Soot", "evidence": [1]}
        return json.dumps(
            {
                "character": {"name": "B"},
                "messages": [
                    {"id": 1, "role": "user", "speaker": "A", "text": "My cat is called Soot."},
                    {"id": 2, "role": "character", "speaker": "B", "text": "Soot, then."},
                ],
                "questions": [{**question, "restated": again}],
            }
        )

    path = tmp_path / "restated.json"
    path.write_text(dataset(restated), encoding="utf-8")
    with pytest.raises(DatasetError, match=f"^{path}: {error}"):
        load_file(path)
    path.write_text(dataset([2]), encoding="utf-8")
    assert load_file(path).questions[0].restated == [2]
