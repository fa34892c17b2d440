"""Where the evidence stands, measured by a whole evaluation on the tiny real model and a real
store: window, recalled excerpt, a chapter item's citation, a quoted extract, absent; and the
shares the report computes from them.

The chronicler is scripted (tests/eval/conftest.py): a chapter's events cite the first lines of
its range, and for one range the items say nothing, so the fold quotes that range's own lines.
Every question asks about one message (its evidence), with the day's code word as the answer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.eval import EvalOptions, run_eval
from kotonia_tui.eval import replay as replay_module
from kotonia_tui.eval.dataset import EvalConversation, EvalQuestion
from kotonia_tui.eval.examiner import JUDGE, READER_A
from kotonia_tui.eval.report import table
from kotonia_tui.eval.results import ArmResult, EvalReport, GradedAnswer
from kotonia_tui.memory.chronicler import CHRONICLER
from kotonia_tui.store import Store
from tests.eval.conftest import ScriptedEngine, short_conversation

HOLLOW = range(18, 26)  # the range whose chapter the scripted chronicler writes hollow
_CHAPTER = re.compile(r"^#(\d+)-#(\d+)(?:, .*)?:$", re.MULTILINE)  # a chapter's range label


def one_question_per_message(turns: int = 24) -> EvalConversation:
    conv = short_conversation(turns)
    questions = [
        EvalQuestion(
            id=f"m{m.id}",
            question=f"What did message {m.id} say?",
            answer=f"amber{(m.id + 1) // 2}x",  # the code word of its day
            evidence=[m.id],
            kind=m.role.value,
        )
        for m in conv.messages
    ]
    # Two pieces of evidence: the first message, long gone, and the newest.
    last = conv.messages[-1].id
    questions.append(
        EvalQuestion(
            id="both",
            question="What did the first and the last message say?",
            answer="amber1x",
            evidence=[1, last],
            kind="multihop",
        )
    )
    return conv.model_copy(update={"questions": questions})


async def _run(
    settings,
    conv: EvalConversation,
    arms: Sequence[str],
    *,
    evidence_only: bool = True,
    variants: Sequence[str] = (),
) -> tuple[EvalReport, ScriptedEngine]:
    engine = open_engine(settings)
    scripted = ScriptedEngine(
        engine,
        {q.question: q.answer for q in conv.questions},
        hollow=lambda ids: any(i in HOLLOW for i in ids),
    )
    options = EvalOptions(
        questions_per_range=100,
        arms=tuple(arms),
        evidence_only=evidence_only,
        block_variants=tuple(variants),
    )
    try:
        report = await run_eval(conv, settings, scripted, options)
    finally:
        engine.close()
    return report, scripted


def pooled_twice(report: EvalReport, tmp_path: Path) -> dict[tuple[str, str], Any]:
    """scripts/paired_runs.py's pooled pairs over two copies of `report`'s JSON, by arms."""
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(report.to_json()), encoding="utf-8")
    script = Path(__file__).parents[2] / "scripts" / "paired_runs.py"
    pooled = subprocess.run(
        [sys.executable, str(script), str(saved), str(saved), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {(c["arm"], c["against"]): c for c in json.loads(pooled.stdout)}


def _where(arm: ArmResult) -> dict[str, list[list[str]]]:
    return {q.id: [found.where for found in q.found] for q in arm.questions}


def _any(arm: ArmResult) -> float:
    """The share of the arm's questions with evidence in the prompt (it must have one)."""
    assert arm.evidence_in_prompt is not None and arm.evidence_in_prompt.any is not None
    return arm.evidence_in_prompt.any


def _window(arm: ArmResult, messages: int) -> set[int]:
    # Every arm's window is the newest messages, and the conversation has no system notes.
    return set(range(messages - arm.verbatim_messages + 1, messages + 1))


PRESENT = {"window", "recalled", "cited", "quoted"}  # not "recalled_part", not "absent"


def _any_of(question: GradedAnswer) -> bool:
    return any(PRESENT & set(f.where) for f in question.found)


def _share(questions: Sequence[GradedAnswer]) -> tuple[float, float]:
    """Any: an evidence or a restated message present; all: every evidence message."""
    present = [[(bool(PRESENT & set(f.where)), f.restated) for f in q.found] for q in questions]
    return (
        round(sum(any(p for p, _again in q) for q in present) / len(present), 4),
        round(sum(all(p for p, again in q if not again) for q in present) / len(present), 4),
    )


def _settings(eval_settings_for):
    # 4,096 tokens (the tiny tokenizer spends a token per byte) so the conversation folds into
    # a few chapters with room to recall; a larger share for chapters before a major fold, so
    # the quoted chapter is still a chapter at the end.
    return eval_settings_for(n_ctx=4096, recall_budget_ratio=0.15, major_gc_ratio=0.2)


async def test_each_place_of_the_evidence_and_the_shares(eval_settings_for, tmp_path: Path):
    conv = one_question_per_message()
    count = len(conv.messages)
    arms = ("generational", "truncation", "truncation+recall")
    report, scripted = await _run(_settings(eval_settings_for), conv, arms)
    run = report.runs[0]
    # Evidence only: the reader and the judge were never asked, and nothing claims a grade.
    assert READER_A not in scripted.calls and JUDGE not in scripted.calls
    for name in arms:
        arm = run.arms[name]
        assert arm.questions_asked == len(conv.questions)
        assert arm.mean_recall is None and arm.answer_calls is None
        for q in arm.questions:
            assert q.correct is None and q.answer == "" and q.evaluated is None

    # Truncation: in the window or absent, nothing else.
    truncation = run.arms["truncation"]
    window = _window(truncation, count)
    for q in truncation.questions:
        expected = [["window" if m in window else "absent"] for m in q.evidence]
        assert [f.where for f in q.found] == expected, q.id
    assert _where(truncation)["both"] == [["absent"], ["window"]]
    # The code word of a day is in both of its messages, and nowhere else in this prompt.
    for q in truncation.questions:
        number = int(q.reference.removeprefix("amber").removesuffix("x"))
        day = [2 * number - 1, 2 * number]
        assert (q.answer_words_missing == []) == any(m in window for m in day), q.id

    # Truncation with recall: what the window lost is found in the excerpts recalled for it.
    recalled = run.arms["truncation+recall"]
    assert _window(recalled, count) == window
    for q in recalled.questions:
        expected = [
            ["window"] if m in window else ["recalled"] if m in q.recalled else ["absent"]
            for m in q.evidence
        ]
        assert [f.where for f in q.found] == expected, q.id
    found_in_excerpts = [q for q in recalled.questions if q.found[0].where == ["recalled"]]
    assert found_in_excerpts
    assert all(q.recalled_tokens > 0 for q in found_in_excerpts)
    # Excerpts are read past the cached prompt: they cost positions each question.
    assert (recalled.evaluated_per_question or 0) > (truncation.evaluated_per_question or 0)
    for q in recalled.questions:
        assert q.new_positions == q.prompt_tokens - recalled.prompt_tokens > 0

    # Generational: the newest messages verbatim, chapter items citing their messages, the
    # hollow range quoted, the rest absent.
    generational = run.arms["generational"]
    memory = generational.memory_text
    where = {q.evidence[0]: q.found[0].where for q in generational.questions if q.id != "both"}
    for m in _window(generational, count):
        assert where[m] == ["window"]
    live = [(int(a), int(b)) for a, b in _CHAPTER.findall(memory)]
    assert (HOLLOW.start, HOLLOW.stop - 1) in live  # the quoted chapter is still a chapter
    cited = [m for m in scripted.cited if any(a <= m <= b for a, b in live) and m not in HOLLOW]
    assert cited
    for m in cited:  # what the chronicler cited in a chapter the prompt carries
        assert "cited" in where[m], (m, where[m])
    quoted = [m for m in HOLLOW if "quoted" in where[m]]
    assert quoted
    for m in quoted:  # its own words are in the prompt
        text = conv.messages[m - 1].text
        assert any(part.strip() in memory for part in text.split(".") if len(part) > 12), m
    # The character's lines of the hollow range the extract left out are nowhere (the ledger
    # keeps only the user's sentences).
    left_out = [m for m in HOLLOW if m % 2 == 0 and "quoted" not in where[m]]
    assert left_out and all(where[m] == ["absent"] for m in left_out)

    # The shares: per arm, by kind, by range, by place, from the questions' records.
    for name in arms:
        arm = run.arms[name]
        share = arm.evidence_in_prompt
        assert share is not None
        assert (share.any, share.all) == _share(arm.questions)
        assert share.questions == len(arm.questions)
        for kind, of_kind in arm.evidence_by_kind.items():
            asked = [q for q in arm.questions if q.kind == kind]
            assert (of_kind.any, of_kind.all) == _share(asked)
        for index, cell in enumerate(arm.evidence_by_range):
            asked = [q for q in arm.questions if q.range == index]
            assert (cell is None) == (not asked)
            if cell is not None:
                assert (cell.any, cell.all) == _share(asked)
        found = [f.where for q in arm.questions for f in q.found]
        places = ("window", "recalled", "recalled_part", "cited", "quoted", "quoted_part")
        for place in (*places, "absent"):
            assert arm.evidence_places[place] == round(
                sum(place in w for w in found) / len(found), 4
            )
        words = [not q.answer_words_missing for q in arm.questions]
        assert arm.answer_in_prompt == round(sum(words) / len(words), 4)
        summary = report.summary[name]
        assert summary.evidence_in_prompt.any.mean == share.any
        assert summary.evidence_in_prompt.all.mean == share.all
    # The two-message question: one of its messages is in truncation's prompt, not both.
    multihop = truncation.evidence_by_kind["multihop"]
    assert (multihop.any, multihop.all, multihop.questions) == (1.0, 0.0, 1)
    # Recall only adds: what truncation holds, truncation with recall holds too.
    assert _any(recalled) > _any(truncation)
    # Question by question: the questions only recall's prompt holds, none the other way.
    pairs = {(p.arm, p.against): p for p in report.paired}
    gained = sum(
        _any_of(mine) and not _any_of(theirs)
        for mine, theirs in zip(recalled.questions, truncation.questions, strict=True)
    )
    versus = pairs[("truncation+recall", "truncation")]
    assert versus.questions == len(truncation.questions) and versus.right is None
    assert (versus.evidence.here, versus.evidence.there) == (gained, 0) and gained > 0
    assert versus.evidence.p == round(2 / 2**gained, 4)  # every split question went one way
    assert ("generational", "truncation") in pairs

    # The JSON carries the same, one record per question.
    data = json.loads(json.dumps(report.to_json()))
    assert data["summary"]["truncation"]["evidence_in_prompt"]["any"]["mean"] == (
        truncation.evidence_in_prompt.any
    )
    record = data["runs"][0]["arms"]["truncation+recall"]["questions"][0]
    for key in ("question", "reference", "answer", "correct", "evidence", "found", "recalled"):
        assert key in record
    assert record["prompt_tokens"] > 0 and record["found"][0]["where"]
    text = table(report)
    assert "evidence any/all" in text and "evidence only" in text
    assert "evidence messages by place" in text
    # Reports of separate commands (one per seed) are pooled by scripts/paired_runs.py the
    # same way: two copies of this report count every question twice.
    twice = pooled_twice(report, tmp_path)
    both = twice[("truncation+recall", "truncation")]
    assert both["questions"] == 2 * versus.questions and both["right"] is None
    assert (both["evidence"]["here"], both["evidence"]["there"]) == (2 * gained, 0)


# A made-up letter, long gone from the window, longer than the recall budget: the words the
# questions share with it are in its first sentence; one answer is there, the other far away.
LETTER = (
    "My cousin Marguerite runs a bakery in Quimper, by the harbour. "
    + " ".join(
        f"On day {n} the wind came from the {side} and the boats stayed in, so we walked "
        f"along the {place} and counted {bird} until the light went."
        for n, side, place, bird in [
            (1, "north", "dunes", "gulls"),
            (2, "west", "cliffs", "terns"),
            (3, "south", "quay", "herons"),
            (4, "east", "marsh", "geese"),
            (5, "north", "pier", "swans"),
            (6, "west", "beach", "crows"),
            (7, "south", "canal", "ducks"),
            (8, "east", "harbour wall", "cormorants"),
            (9, "north", "lighthouse path", "plovers"),
        ]
    )
    + " Everyone in town queues for her kouign amann."
)


async def test_a_restatement_in_the_prompt_counts_for_any_not_for_all(eval_settings_for):
    """The answer said again later (a report that sums up): the evidence is in front of the
    reader when the restatement is, though the first statement is long gone; "all" and the
    question's range still go by its evidence."""
    conv = one_question_per_message()
    last = conv.messages[-1].id
    again = EvalQuestion(
        id="again",
        question="What did the first message say?",
        answer="amber1x",
        evidence=[1],
        restated=[last],
        kind="fact",
    )
    conv = conv.model_copy(update={"questions": [*conv.questions, again]})
    report, _scripted = await _run(_settings(eval_settings_for), conv, ("truncation",))
    truncation = report.runs[0].arms["truncation"]
    asked = {q.id: q for q in truncation.questions}
    first, restated = asked["again"], asked["m1"]
    assert [(f.message, f.where, f.restated) for f in first.found] == [
        (1, ["absent"], False),
        (last, ["window"], True),
    ]
    assert first.restated == [last] and restated.found[0].where == ["absent"]
    assert first.range == restated.range  # its range is its evidence's, not the restatement's
    assert _any_of(first) and not _any_of(restated)
    share = truncation.evidence_in_prompt
    assert share is not None
    without = [q for q in truncation.questions if q.id != "again"]
    present = sum(_any_of(q) for q in without)
    assert share.any == round((present + 1) / len(truncation.questions), 4)
    # "all" asks for every evidence message: #1 is not in the prompt.
    every = sum(all(PRESENT & set(f.where) for f in q.found) for q in without)
    assert share.all == round(every / len(truncation.questions), 4)


async def test_a_message_recalled_in_part_counts_by_what_the_part_holds(eval_settings_for):
    """The eval is honest about pieces: an evidence message quoted by the part that shares
    the question's words is present when that part holds the answer, and `recalled_part` (not
    present) when the answer is elsewhere in the message; the JSON keeps the part."""
    conv = one_question_per_message()
    messages = list(conv.messages)
    messages[2] = messages[2].model_copy(update={"text": LETTER})
    questions = [
        EvalQuestion(
            id="where",
            question="Where does Marguerite run her bakery?",
            answer="Quimper",
            evidence=[3],
        ),
        EvalQuestion(
            id="pastry",
            question="Which pastry made Marguerite famous?",
            answer="kouign amann",
            evidence=[3],
        ),
    ]
    conv = conv.model_copy(update={"messages": messages, "questions": questions})
    settings = _settings(eval_settings_for)
    report, _ = await _run(settings, conv, ("truncation+recall",))
    arm = report.runs[0].arms["truncation+recall"]
    found = {q.id: q.found[0] for q in arm.questions}
    assert all(3 in q.recalled for q in arm.questions)  # both quote the letter, in part
    assert found["where"].where == ["recalled"]
    assert found["where"].carried is not None and "Quimper" in found["where"].carried
    assert found["pastry"].where == ["recalled_part"]
    # The record keeps the excerpts as the reader read them: the part, not the whole letter.
    recalled_text = {q.id: q.recalled_text for q in arm.questions}
    assert "Quimper" in recalled_text["where"] and "kouign" not in recalled_text["pastry"]
    carried = found["pastry"].carried
    assert carried is not None and "Marguerite" in carried and "kouign" not in carried
    assert arm.evidence_in_prompt is not None
    assert (arm.evidence_in_prompt.any, arm.evidence_in_prompt.all) == (0.5, 0.5)
    assert arm.evidence_places["recalled_part"] == 0.5


async def test_without_an_arm_that_carries_memory_no_fold_runs(eval_settings_for):
    conv = one_question_per_message()
    arms = ("truncation", "truncation+recall")
    report, scripted = await _run(_settings(eval_settings_for), conv, arms)
    assert CHRONICLER not in scripted.calls  # seconds, not minutes: no model call at all
    assert report.options["folds"] is False
    run = report.runs[0]
    assert run.folds.chapters == 0 and run.folds.forced_cuts
    # Ranges end where the policy cut the oldest messages out of the window.
    assert [r.last_message for r in run.ranges if r.folded] == run.folds.forced_cuts
    truncation = run.arms["truncation"]
    assert "no fold ran" in truncation.note
    window = _window(truncation, len(conv.messages))
    assert all(
        f.where == ["window" if f.message in window else "absent"]
        for q in truncation.questions
        for f in q.found
    )
    assert _any(run.arms["truncation+recall"]) > _any(truncation)


async def test_a_reader_run_records_the_evidence_beside_the_grades(eval_settings_for):
    conv = one_question_per_message(16)
    report, _ = await _run(
        _settings(eval_settings_for), conv, ("truncation+recall",), evidence_only=False
    )
    arm = report.runs[0].arms["truncation+recall"]
    assert arm.mean_recall is not None
    for q in arm.questions:
        # The scripted reader answers when the reference is in its prompt: what it got right
        # is exactly what had its answer's words in front of it.
        assert q.correct == (not q.answer_words_missing), q.id
        assert q.evaluated is not None and q.evaluated > 0


def test_cli_evidence_only_with_a_recall_budget(tiny_model_path: Path, tmp_path: Path, capsys):
    from kotonia_tui.cli import main

    conv = one_question_per_message(12)
    data = tmp_path / "conv.json"
    data.write_text(conv.model_dump_json())
    out = tmp_path / "out.json"
    code = main(
        [
            "eval",
            str(data),
            "--model",
            str(tiny_model_path),
            "--n-ctx",
            "1024",
            "--questions",
            "100",
            "--arms",
            "truncation,truncation+recall,full",
            "--evidence-only",
            "--set",
            "recall_budget_ratio=0.1",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["options"]["evidence_only"] is True
    assert report["settings"]["recall_budget_ratio"] == 0.1
    assert report["budgets"]["recall"] == 102
    arms = report["runs"][0]["arms"]
    assert "up to 102 tokens" in arms["truncation+recall"]["note"]
    assert arms["truncation"]["questions_asked"] == len(conv.questions)
    # The full arm needs more than the window: measured, not loaded wider; everything there.
    assert "measured, not answered" in arms["full"]["note"]
    assert report["summary"]["full"]["evidence_in_prompt"]["all"]["mean"] == 1.0
    for name in ("truncation", "truncation+recall", "full"):
        cell = report["summary"][name]["evidence_in_prompt"]
        assert 0.0 <= cell["all"]["mean"] <= cell["any"]["mean"] <= 1.0
    printed = capsys.readouterr().out
    assert "evidence in prompt by range" in printed


class _AfterAnother(Store):
    """The replay's store, holding another conversation's 50 messages first: the replayed
    conversation's store ids are not its numbers (51 is its #1)."""

    @classmethod
    def open(cls, path: Path | str, *args: Any, **kwargs: Any) -> Store:
        store = Store.open(path, *args, **kwargs)
        other = store.create_conversation(
            Conversation(character_key="else", character_name="Else", persona_name="Sam")
        )
        store.add_messages(
            other.id,
            [Message(role=Role.USER, speaker="Sam", text=f"Elsewhere {i}.") for i in range(50)],
        )
        return store


async def test_the_evidence_is_found_by_number_when_store_ids_are_not_numbers(
    eval_settings_for, monkeypatch
):
    """The reader's memory numbers the messages it cites as the chat does (the stored memory
    cites store ids); the evidence is read from it by number and mapped to the input's own ids.
    Here the three differ: the input's ids are 1001 on, the store's 51 on (another
    conversation came first), the numbers 1 on. Every message a chapter the prompt carries
    cites or quotes is found there, by its input id."""
    conv = one_question_per_message()
    shifted = conv.model_copy(
        update={
            "messages": [m.model_copy(update={"id": m.id + 1000}) for m in conv.messages],
            "questions": [
                q.model_copy(update={"evidence": [m + 1000 for m in q.evidence]})
                for q in conv.questions
            ],
        }
    )
    settings = _settings(eval_settings_for)
    monkeypatch.setattr(replay_module, "Store", _AfterAnother)
    engine = open_engine(settings)
    scripted = ScriptedEngine(
        engine,
        {q.question: q.answer for q in shifted.questions},
        hollow=lambda ids: any(i - 50 in HOLLOW for i in ids),
    )
    options = EvalOptions(questions_per_range=100, arms=("generational",), evidence_only=True)
    try:
        report = await run_eval(shifted, settings, scripted, options)
    finally:
        engine.close()
    arm = report.runs[0].arms["generational"]
    memory = arm.memory_text  # as the reader read it: numbers
    assert min(scripted.cited) > 50  # the chronicler cited store ids
    live = [(int(a), int(b)) for a, b in _CHAPTER.findall(memory)]
    assert live and max(b for _a, b in live) <= len(conv.messages)  # numbers, not ids
    where = {q.evidence[0]: q.found[0].where for q in arm.questions if q.id != "both"}
    count = len(conv.messages)
    for n in _window(arm, count):
        assert where[n + 1000] == ["window"]
    cited = [
        s - 50
        for s in scripted.cited
        if any(a <= s - 50 <= b for a, b in live) and s - 50 not in HOLLOW
    ]
    assert cited
    for n in cited:
        assert "cited" in where[n + 1000], (n, where[n + 1000])
    assert [n for n in HOLLOW if "quoted" in where[n + 1000]]
