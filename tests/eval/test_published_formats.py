"""`kotonia eval` reads LoCoMo's and LongMemEval's published layouts as they are.

The files here are small synthetic ones written in those layouts (the real datasets are kept
for an independent check and are not read): the tests assert what a checker relies on, the
messages in order with their speakers and session dates, the question kinds and the evidence
message ids, the notes about what was chosen or left out, and one-line errors naming the file,
the record and the field. The last test runs `kotonia eval --evidence-only` end to end on the
tiny real model.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.domain import Role
from kotonia_tui.eval.dataset import DatasetError, load_file
from kotonia_tui.eval.published import PublishedChoice
from kotonia_tui.story_dates import scene_dates


def _locomo_sample(sample_id: str, a: str = "Ann", b: str = "Bo") -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "qa": [
            {
                "question": f"What is {a}'s dog called?",
                "answer": "Pip",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": f"When did {b} go sailing?",
                "answer": "June 2023",
                "evidence": ["D2:2"],
                "category": 2,
            },
            {
                "question": "Which pets came up?",
                "answer": "a dog, a kite",
                "evidence": ["D1:1", "(D2:1)", ""],
                "category": 1,
            },
            {"question": "What year?", "answer": 2022, "evidence": ["D2:1"], "category": 3},
            {
                "question": f"What did {a} photograph?",
                "adversarial_answer": "a red kite",
                "evidence": ["D1:2"],
                "category": 5,
            },
            {
                "question": f"What is {b}'s cat called?",
                "adversarial_answer": "Tom",
                "evidence": [],
                "category": 5,
            },
            {
                "question": "Who spoke of both?",
                "answer": f"{b}",
                "evidence": ["D1:02; D2:2"],
                "category": 9,
            },
        ],
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": a, "dia_id": "D1:1", "text": "I adopted a dog. His name is Pip."},
                {
                    "speaker": b,
                    "dia_id": "D1:2",
                    "text": "Look what I saw on the beach!",
                    "img_url": ["https://example.org/kite.jpg"],
                    "blip_caption": "a photo of a red kite",
                    "query": "kite",
                },
            ],
            "session_2_date_time": "10:04 am on 27 June, 2023",
            "session_2": [
                {"speaker": b, "dia_id": "D2:1", "text": "I went sailing last week."},
                {"speaker": a, "dia_id": "D2:2", "text": "Was it windy?"},
            ],
            "session_3_date_time": "9:00 am on 1 July, 2023",
            "session_3": [],
        },
        "event_summary": {"events_session_1": {}},
        "session_summary": {"session_1_summary": "..."},
    }


def _write(tmp_path: Path, data: Any, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_locomo_file_becomes_one_sample_with_dated_sessions_kinds_and_evidence(
    tmp_path: Path,
):
    path = _write(tmp_path, [_locomo_sample("conv-1"), _locomo_sample("conv-2", "Cy", "Di")])
    conv = load_file(path)
    assert conv.title == "LoCoMo conv-1: Ann and Bo"
    assert conv.source == f"{path}#conv-1"
    assert (conv.character.name, conv.user.name) == ("Bo", "Ann")
    assert [(m.id, m.role, m.speaker) for m in conv.messages] == [
        (1, Role.USER, "Ann"),
        (2, Role.CHARACTER, "Bo"),
        (3, Role.CHARACTER, "Bo"),
        (4, Role.USER, "Ann"),
    ]
    # Each session opens with its date as narration; the image keeps its caption as text.
    assert conv.messages[0].text == (
        "*Session 1: Monday, 8 May 2023, 1:56 pm.*\nI adopted a dog. His name is Pip."
    )
    assert conv.messages[1].text == (
        "Look what I saw on the beach!\n[shares a photo of a red kite]"
    )
    assert conv.messages[2].text.startswith("*Session 2: Tuesday, 27 June 2023, 10:04 am.*\n")
    # The story-date code sees the sessions' dates.
    dates = scene_dates((m.id, m.text) for m in conv.messages)
    assert dates == {
        1: "Monday, 8 May 2023",
        2: "Monday, 8 May 2023",
        3: "Tuesday, 27 June 2023",
        4: "Tuesday, 27 June 2023",
    }
    by_id = {q.id: q for q in conv.questions}
    assert [(q.id, q.kind, q.evidence, q.answer) for q in conv.questions] == [
        ("qa0", "fact", [1], "Pip"),
        ("qa1", "temporal", [4], "June 2023"),
        ("qa2", "multihop", [1, 3], "a dog, a kite"),
        ("qa3", "open-domain", [3], "2022"),
        ("qa4", "adversarial", [2], "Not mentioned in the conversation"),
        ("qa6", "category-9", [2, 4], "Bo"),
    ]
    assert "qa5" not in by_id  # an adversarial question with no evidence: left out, counted
    notes = "\n".join(conv.notes)
    assert "2 samples; evaluating the first, conv-1 (choose another with --sample: conv-2)" in (
        notes
    )
    assert "Bo (speaker_b) plays the character and Ann (speaker_a) the user" in notes
    assert "conv-1: left out 1 question: 1 adversarial with no evidence ids" in notes


def test_locomo_sample_and_speaker_are_chosen_and_a_wrong_choice_lists_them(tmp_path: Path):
    path = _write(tmp_path, [_locomo_sample("conv-1"), _locomo_sample("conv-2", "Cy", "Di")])
    second = load_file(path, choice=PublishedChoice(sample="conv-2", character_speaker="Cy"))
    assert (second.character.name, second.user.name) == ("Cy", "Di")
    assert [m.role for m in second.messages] == [
        Role.CHARACTER,
        Role.USER,
        Role.USER,
        Role.CHARACTER,
    ]
    assert not any("evaluating the first" in n or "plays the character" in n for n in second.notes)
    assert load_file(path, choice=PublishedChoice(sample="2")).title == "LoCoMo conv-2: Cy and Di"
    with pytest.raises(DatasetError) as wrong:
        load_file(path, choice=PublishedChoice(sample="conv-9"))
    assert str(wrong.value) == (
        f"{path}: --sample 'conv-9' names no sample; the file has: conv-1, conv-2"
    )
    with pytest.raises(DatasetError) as nobody:
        load_file(path, choice=PublishedChoice(character_speaker="Eve"))
    assert "--character-speaker 'Eve' is neither speaker_a ('Ann') nor speaker_b ('Bo')" in str(
        nobody.value
    )


def test_locomo_bad_input_names_the_file_the_sample_and_the_field(tmp_path: Path):
    sample = _locomo_sample("conv-1")
    sample["qa"][1]["evidence"] = ["D7:1"]
    path = _write(tmp_path, [sample])
    with pytest.raises(DatasetError) as bad:
        load_file(path)
    assert str(bad.value).startswith(f"{path}: sample conv-1: qa[1].evidence: 'D7:1' names no ")
    assert "--skip-bad-evidence" in str(bad.value)
    skipped = load_file(path, choice=PublishedChoice(skip_bad_evidence=True))
    assert "qa1" not in {q.id for q in skipped.questions} and len(skipped.questions) == 5
    assert any(
        "left out 2 questions: 1 with an evidence id that names no message; "
        "1 adversarial with no evidence ids" in n
        for n in skipped.notes
    )

    broken = copy.deepcopy(_locomo_sample("conv-1"))
    del broken["qa"][2]["question"]
    with pytest.raises(DatasetError) as missing:
        load_file(_write(tmp_path, [broken], "missing.json"))
    assert str(missing.value) == (
        f"{tmp_path / 'missing.json'}: sample conv-1: .qa[2].question: Field required"
    )

    stranger = copy.deepcopy(_locomo_sample("conv-1"))
    stranger["conversation"]["session_2"][0]["speaker"] = "Zed"
    with pytest.raises(DatasetError) as who:
        load_file(_write(tmp_path, [stranger], "stranger.json"))
    assert "conversation.session_2[0].speaker: 'Zed' is neither speaker_a" in str(who.value)

    undated = copy.deepcopy(_locomo_sample("conv-1"))
    del undated["conversation"]["session_2_date_time"]
    with pytest.raises(DatasetError) as when:
        load_file(_write(tmp_path, [undated], "undated.json"))
    assert "conversation.session_2_date_time: missing" in str(when.value)


def test_choices_for_published_files_are_refused_elsewhere(tmp_path: Path):
    chat = _write(tmp_path, [{"speaker": "Ann", "text": "Hello"}], "chat.json")
    with pytest.raises(DatasetError) as refused:
        load_file(chat, choice=PublishedChoice(sample="1"))
    assert "apply to a LoCoMo or LongMemEval file; this is not one" in str(refused.value)


def _turn(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": role, "content": content}
    if has_answer:
        turn["has_answer"] = True
    return turn


def _haystack() -> dict[str, Any]:
    # The file order is not the date order (as in longmemeval_oracle.json).
    return {
        "haystack_session_ids": ["answer_b", "filler_1", "answer_a"],
        "haystack_dates": [
            "2023/05/30 (Tue) 10:00",
            "2023/05/25 (Thu) 18:30",
            "2023/05/20 (Sat) 02:21",
        ],
        "haystack_sessions": [
            [_turn("user", "I moved to Lisbon last week."), _turn("assistant", "Welcome!")],
            [_turn("user", "Recipe for soup?"), _turn("assistant", "Leeks and potatoes.")],
            [_turn("user", "My sister Ines is visiting."), _turn("assistant", "Lovely, enjoy.")],
        ],
    }


def _record(
    qid: str,
    qtype: str,
    question: str,
    answer: Any,
    answers: list[str],
    marked: tuple[tuple[int, int], ...] = (),
) -> dict:
    """A record over the shared haystack; `marked` (session, turn) get `has_answer`: each
    record marks its own evidence in its own copy of the haystack."""
    haystack = _haystack()
    for session, turn in marked:
        haystack["haystack_sessions"][session][turn]["has_answer"] = True
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": question,
        "answer": answer,
        "question_date": "2023/06/01 (Thu) 09:00",
        **haystack,
        "answer_session_ids": answers,
    }


def _longmemeval() -> list[dict[str, Any]]:
    other = _record("q3", "temporal-reasoning", "How long ago?", "a week", ["s9"])
    other["haystack_session_ids"] = ["s9"]
    other["haystack_dates"] = ["2022/01/02 (Sun) 08:00"]
    other["haystack_sessions"] = [[_turn("user", "Started piano.", has_answer=True)]]
    return [
        _record(
            "q1",
            "single-session-user",
            "Who is visiting me?",
            "Ines",
            ["answer_a"],
            marked=((2, 0),),
        ),
        _record("q2", "knowledge-update", "Where do I live now?", "Lisbon", ["answer_b"]),
        other,
        _record(
            "q4_abs",
            "single-session-user",
            "What is my brother's name?",
            "You did not mention a brother",
            [],
        ),
        _record(
            "q5",
            "multi-session",
            "Who visits me where I live?",
            ["Ines", "Lisbon"],
            ["answer_a", "answer_b"],
            marked=((2, 0), (0, 0)),
        ),
    ]


def test_a_longmemeval_file_becomes_the_records_sharing_one_haystack(tmp_path: Path):
    path = _write(tmp_path, _longmemeval())
    conv = load_file(path, persona_name="Mara")
    assert conv.title == "LongMemEval q1 (+3 sharing its haystack)"
    assert (conv.character.name, conv.user.name) == ("Assistant", "Mara")
    # Sessions by date: answer_a (20 May), filler_1 (25 May), answer_b (30 May).
    assert [(m.id, m.role, m.speaker, m.text) for m in conv.messages] == [
        (
            1,
            Role.USER,
            "Mara",
            "*Session 1: Saturday, 20 May 2023, 2:21 am.*\nMy sister Ines is visiting.",
        ),
        (2, Role.CHARACTER, "Assistant", "Lovely, enjoy."),
        (3, Role.USER, "Mara", "*Session 2: Thursday, 25 May 2023, 6:30 pm.*\nRecipe for soup?"),
        (4, Role.CHARACTER, "Assistant", "Leeks and potatoes."),
        (
            5,
            Role.USER,
            "Mara",
            "*Session 3: Tuesday, 30 May 2023, 10:00 am.*\nI moved to Lisbon last week.",
        ),
        (6, Role.CHARACTER, "Assistant", "Welcome!"),
    ]
    assert scene_dates((m.id, m.text) for m in conv.messages)[6] == "Tuesday, 30 May 2023"
    assert [(q.id, q.kind, q.evidence, q.answer) for q in conv.questions] == [
        ("q1", "user", [1], "Ines"),
        ("q2", "knowledge-update", [5, 6], "Lisbon"),  # no has_answer: its whole session
        ("q5", "multihop", [1, 5], "Ines, Lisbon"),
    ]
    assert conv.questions[0].question == "Today is Thursday, 1 June 2023. Who is visiting me?"
    notes = "\n".join(conv.notes)
    assert "5 questions; evaluating the first, q1" in notes
    assert "5 records with 2 haystacks: this one holds 4 questions" in notes
    assert "q1: left out 1 question: 1 abstention (no evidence location)" in notes
    assert "1 question with no has_answer turn take every turn of their answer sessions" in notes

    other = load_file(path, choice=PublishedChoice(sample="q3"))
    assert [q.id for q in other.questions] == ["q3"] and len(other.messages) == 1
    assert other.messages[0].text.startswith("*Session 1: Sunday, 2 January 2022, 8:00 am.*")


def test_longmemeval_bad_input_names_the_file_the_record_and_the_field(tmp_path: Path):
    records = _longmemeval()
    records[1]["answer_session_ids"] = ["answer_zz"]
    path = _write(tmp_path, records)
    with pytest.raises(DatasetError) as bad:
        load_file(path)
    assert str(bad.value).startswith(
        f"{path}: q2: answer_session_ids: 'answer_zz' is not a session of the haystack"
    )
    kept = load_file(path, choice=PublishedChoice(skip_bad_evidence=True))
    assert [q.id for q in kept.questions] == ["q1", "q5"]

    records = _longmemeval()
    del records[2]["question_date"]
    with pytest.raises(DatasetError) as missing:
        load_file(_write(tmp_path, records, "missing.json"))
    assert str(missing.value) == f"{tmp_path / 'missing.json'}: [2].question_date: Field required"

    records = _longmemeval()
    records[0]["haystack_dates"] = records[0]["haystack_dates"][:2]
    with pytest.raises(DatasetError) as short:
        load_file(_write(tmp_path, records, "short.json"))
    assert "[0] q1: haystack_dates: 2 entries for 3 haystack_sessions" in str(short.value)

    with pytest.raises(DatasetError) as role:
        load_file(path, choice=PublishedChoice(character_speaker="user"))
    assert "in LongMemEval the assistant plays the character" in str(role.value)


def test_cli_evidence_only_on_a_locomo_file(tiny_model_path: Path, tmp_path: Path, capsys):
    """The whole command on a LoCoMo file and the tiny real model, no reader: the JSON says
    which sample was read, what was left out, and where each question's evidence stood."""
    from kotonia_tui.cli import main

    path = _write(tmp_path, [_locomo_sample("conv-1"), _locomo_sample("conv-2", "Cy", "Di")])
    out = tmp_path / "out.json"
    code = main(
        [
            "eval",
            str(path),
            "--sample",
            "conv-2",
            "--model",
            str(tiny_model_path),
            "--n-ctx",
            "1024",
            "--questions",
            "100",
            "--arms",
            "truncation,full",
            "--evidence-only",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["input"]["source"] == f"{path}#conv-2"
    assert report["input"]["messages"] == 4 and report["input"]["dataset_questions"] == 6
    assert report["input"]["notes"] == [
        f"{path}: sample conv-2: Di (speaker_b) plays the character and Cy (speaker_a) the "
        "user; --character-speaker chooses",
        f"{path}: conv-2: left out 1 question: 1 adversarial with no evidence ids",
    ]
    err = capsys.readouterr().err
    assert "note: " + report["input"]["notes"][1] in err  # said even with --quiet
    full = report["summary"]["full"]
    assert full["evidence_in_prompt"]["all"]["mean"] == 1.0
    assert set(full["evidence_by_kind"]) == {
        "fact",
        "temporal",
        "multihop",
        "open-domain",
        "adversarial",
        "category-9",
    }
    asked = report["runs"][0]["arms"]["truncation"]["questions"]
    assert {q["id"]: q["evidence"] for q in asked}["qa2"] == [1, 3]


def test_a_single_locomo_sample_with_a_date_in_another_format(tmp_path: Path):
    sample = _locomo_sample("conv-1")
    sample["conversation"]["session_2_date_time"] = "the  evening after"
    conv = load_file(_write(tmp_path, sample), choice=PublishedChoice(character_speaker="a"))
    assert conv.title == "LoCoMo conv-1: Ann and Bo"
    assert (conv.character.name, conv.user.name) == ("Ann", "Bo")
    # Kept as written (spaces tidied): no date is made up.
    assert conv.messages[2].text == "*Session 2: the evening after.*\nI went sailing last week."
    assert scene_dates((m.id, m.text) for m in conv.messages)[3] == "Monday, 8 May 2023"
    assert not any("samples; evaluating" in n for n in conv.notes)


def test_longmemeval_dates_in_another_format_keep_the_file_order(tmp_path: Path):
    records = _longmemeval()[:1]
    records[0]["haystack_dates"] = ["day three", "day two", "day one"]
    conv = load_file(_write(tmp_path, records))
    assert [m.text.splitlines()[0] for m in conv.messages if m.text.startswith("*")] == [
        "*Session 1: day three.*",
        "*Session 2: day two.*",
        "*Session 3: day one.*",
    ]
    assert conv.questions[0].evidence == [5]  # the marked turn, in its file position
    assert any("sessions kept in file order, dates shown as written" in n for n in conv.notes)
