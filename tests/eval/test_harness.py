"""The whole harness on the tiny real model: every arm, the report, the JSON/PNG/terminal output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.engine import ChatMessage, Engine, GenerationRequest, GenerationResult
from kotonia_tui.eval import EvalOptions, run_eval
from kotonia_tui.eval.meter import EngineWrapper
from kotonia_tui.eval.plot_png import write_png
from kotonia_tui.eval.report import audit_text, table, terminal_plot
from kotonia_tui.eval.results import ArmStatus, EvalReport
from kotonia_tui.memory.budgets import LENGTH_TOLERANCE
from tests.eval.conftest import ScriptedEngine, short_conversation


async def _run(
    settings, conv, options, *, bigger=True, scripted=True
) -> tuple[EvalReport, list[Engine]]:
    engine = open_engine(settings)
    answers = {q.question: q.answer for q in conv.questions}
    used = ScriptedEngine(engine, answers) if scripted else engine
    opened: list[Engine] = []

    async def open_bigger(n_ctx: int):
        wide = open_engine(settings.model_copy(update={"n_ctx": n_ctx}))
        opened.append(wide)
        return ScriptedEngine(wide, answers) if scripted else wide

    try:
        report = await run_eval(
            conv, settings, used, options, open_bigger=open_bigger if bigger else None
        )
    finally:
        engine.close()
    return report, opened


async def test_every_arm_on_a_scripted_tiny_model(eval_settings_for, conversation, tmp_path):
    settings = eval_settings_for()
    names = ("generational", "rolling", "truncation", "full")  # recall arms: their own test
    report, opened = await _run(
        settings, conversation, EvalOptions(questions_per_range=3, arms=names)
    )
    run = report.runs[0]
    folded = [r for r in run.ranges if r.folded]
    assert len(folded) >= 3, run.ranges
    # Ranges are contiguous and cover the whole conversation.
    assert run.ranges[0].first_message == 1
    assert run.ranges[-1].last_message == len(conversation.messages)
    for before, after in zip(run.ranges, run.ranges[1:], strict=False):
        assert after.first_message == before.last_message + 1
    assert run.folds.chapters >= len(folded)

    arms = run.arms
    assert set(arms) == {"generational", "rolling", "truncation", "full"}
    for name, arm in arms.items():
        assert arm.status is ArmStatus.OK, (name, arm.note)
        assert len(arm.recall_by_range) == len(run.ranges)
        assert arm.questions_asked > 0
        # Recall per question kind: each kind asked, the share of its questions answered.
        kinds = {q.kind for q in arm.questions}
        assert set(arm.recall_by_kind) == kinds
        for kind in kinds:
            asked = [q.correct is True for q in arm.questions if q.kind == kind]
            assert arm.recall_by_kind[kind] == round(sum(asked) / len(asked), 4)  # as reported
    assert all(value == 1.0 for value in arms["full"].recall_by_kind.values())
    kinds_over_runs = report.summary["generational"].recall_by_kind
    assert set(kinds_over_runs) == set(arms["generational"].recall_by_kind)
    # The newest range is verbatim in every arm; the full arm holds everything.
    assert arms["full"].mean_recall == 1.0
    for name in ("generational", "rolling", "truncation"):
        assert arms[name].recall_by_range[-1] == 1.0
    # Truncation has no memory: old ranges are gone. Rolling keeps only its last rewrite.
    assert arms["truncation"].memory_tokens == 0
    assert arms["truncation"].recall_by_range[0] == 0.0
    recall = {name: arm.mean_recall or 0.0 for name, arm in arms.items()}
    assert recall["generational"] > recall["rolling"]
    assert recall["generational"] > recall["truncation"]
    assert arms["generational"].memory_tokens > arms["rolling"].memory_tokens > 0
    # Equal budget: truncation keeps about as many history tokens as memory + verbatim.
    budget = arms["generational"].memory_tokens + arms["generational"].verbatim_tokens
    assert arms["truncation"].verbatim_tokens <= budget
    # The full arm did not fit 1024 tokens and was answered by a wider load of the model.
    assert arms["full"].n_ctx > settings.active_profile().n_ctx
    assert opened and "answered by the same model" in arms["full"].note
    # Calls and time are counted per arm.
    assert arms["rolling"].build.calls >= len(folded)
    assert arms["generational"].build.calls >= len(folded)
    assert arms["truncation"].build.calls == 0
    assert arms["generational"].answer_calls is not None
    assert arms["generational"].answer_calls.calls == arms["generational"].questions_asked

    summary = report.summary
    assert summary["generational"].mean_recall.min == arms["generational"].mean_recall
    assert report.budgets.trigger > 0
    assert report.settings["fold_delay_s"] >= 0

    # Outputs: JSON round trip, PNG, terminal table and plot, audit text.
    out = tmp_path / "report.json"
    out.write_text(json.dumps(report.to_json()))
    data = json.loads(out.read_text())
    assert data["runs"][0]["arms"]["full"]["mean_recall"] == 1.0
    assert data["runs"][0]["ranges"][0]["first_message"] == 1
    assert (
        data["summary"]["generational"]["mean_recall"]["min"]
        == summary["generational"].mean_recall.min
    )
    assert data["budgets"]["trigger"] == report.budgets.trigger
    audited = data["runs"][0]["audit"]
    assert set(audited["chapters"][0]) == {"in", "text"}  # `in_` is written as "in"
    assert audited["refusals"]["chronicler_calls"] >= len(folded)
    png = write_png(report, tmp_path / "curve.png")
    with Image.open(png) as image:
        assert image.size == (900, 560)
    text = table(report)
    assert "generational" in text and "truncation" in text
    # What recall matched by is in the report: no arm recalled, so no embedding model opened.
    assert data["runs"][0]["semantic"] == "not used (no recall arm)"
    assert "\nsemantic recall: not used (no recall arm)\n" in text
    plot = terminal_plot(report)
    assert "G=generational" in plot and "│" in plot
    assert "refusals" in audit_text(report)


async def test_recall_arms_answer_from_the_archive_what_their_window_lost(
    eval_settings_for, conversation
):
    # The tiny tokenizer spends a token per byte: a window of 4,096 (the conversation still
    # folds) with 15% for recall, to quote an exchange under its header.
    settings = eval_settings_for(n_ctx=4096, recall_budget_ratio=0.15)
    arms = ("generational", "truncation", "generational+recall", "truncation+recall")
    report, _ = await _run(
        settings, conversation, EvalOptions(questions_per_range=3, arms=arms), bigger=False
    )
    run = report.runs[0]
    got = run.arms
    assert set(got) == set(arms)
    for name in arms:
        assert got[name].status is ArmStatus.OK, (name, got[name].note)
    # Same prompt and questions as its base arm; recall on top.
    for base in ("generational", "truncation"):
        with_recall = got[f"{base}+recall"]
        assert with_recall.prompt_tokens == got[base].prompt_tokens
        assert [q.question for q in with_recall.questions] == [
            q.question for q in got[base].questions
        ]
        assert "recall: up to" in with_recall.note
    # Truncation forgets the oldest range; with recall the code word comes back from the
    # archive (the question names its day, the message holding it is quoted).
    assert got["truncation"].recall_by_range[0] == 0.0
    assert (got["truncation+recall"].recall_by_range[0] or 0.0) > 0.0
    assert (got["truncation+recall"].mean_recall or 0.0) > (got["truncation"].mean_recall or 0.0)
    answered = [q for q in got["truncation+recall"].questions if q.correct and q.range == 0]
    assert answered and all(q.recalled for q in answered)
    day = answered[0].id.removeprefix("d")
    assert 2 * int(day) - 1 in answered[0].recalled  # the user's line that said it
    assert all(not q.recalled for q in got["truncation"].questions)
    assert "g=generational+recall" in terminal_plot(report)
    # Recall by words here (tests/conftest.py), and the report says so.
    assert run.semantic == "off (semantic_recall = false): recall matches words only"
    # Question by question: the answers only the recall arm got right, and the other way.
    pairs = {(p.arm, p.against): p for p in report.paired}
    versus = pairs[("truncation+recall", "truncation")]
    mine, theirs = got["truncation+recall"].questions, got["truncation"].questions
    here = sum(bool(a.correct and not b.correct) for a, b in zip(mine, theirs, strict=True))
    there = sum(bool(b.correct and not a.correct) for a, b in zip(mine, theirs, strict=True))
    assert versus.right is not None and versus.right.here >= len(answered) > 0
    assert (versus.right.here, versus.right.there) == (here, there)
    assert f"truncation+recall against truncation ({len(mine)} questions): right " in table(report)


async def test_full_arm_is_skipped_when_it_cannot_fit(eval_settings_for):
    settings = eval_settings_for()
    conv = short_conversation(18)
    report, _ = await _run(
        settings,
        conv,
        EvalOptions(questions_per_range=1, arms=("truncation", "full")),
        bigger=False,
    )
    full = report.runs[0].arms["full"]
    assert full.status is ArmStatus.SKIPPED
    assert "skipped: the whole conversation needs" in full.note
    assert report.summary["full"].status is ArmStatus.SKIPPED
    assert "skipped" in table(report)


async def test_runs_report_the_spread_and_generated_questions(eval_settings_for):
    settings = eval_settings_for()
    conv = short_conversation(16).model_copy(update={"questions": []})
    report, _ = await _run(
        settings, conv, EvalOptions(questions_per_range=2, runs=2, arms=("generational",))
    )
    assert len(report.runs) == 2
    assert report.input.questions == "generated by the examiner"
    first = [q.question for q in report.runs[0].arms["generational"].questions]
    second = [q.question for q in report.runs[1].arms["generational"].questions]
    assert first and first == second  # the examiner writes once; every run answers the same
    spread = report.summary["generational"].mean_recall
    assert spread.min <= spread.mean <= spread.max
    assert report.summary["generational"].runs == 2


class _SeedLog(EngineWrapper):
    """The real engine, noting the seed it samples each call with."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.seeds: list[int | None] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.seeds.append(self.inner.profile.seed)
        return await self.inner.generate(request)


async def test_runs_at_a_seed_draw_each_with_its_own(eval_settings_for):
    """`--seed` with `--runs`: run k samples with seed + k - 1, so the runs are not copies of
    one another (at one seed for all, three runs of the shipped story were identical: no
    spread), each run can be repeated, and the engine keeps its own seed after. (The tiny
    model's chapters are all quoted, so the runs' stored memory cannot show the difference:
    the calls' seeds, and what another seed does to the same call, do.)"""
    settings = eval_settings_for()
    conv = short_conversation(12)
    engine = open_engine(settings)
    try:
        engine.profile = engine.profile.model_copy(update={"seed": 5, "temperature": 1.0})
        logged = _SeedLog(engine)
        options = EvalOptions(questions_per_range=1, runs=2, arms=("generational",))
        report = await run_eval(conv, settings, logged, options)
        assert [run.seed for run in report.runs] == [5, 6]
        assert "2 run(s) at seeds 5-6" in table(report)
        assert engine.profile.seed == 5
        first = logged.seeds.index(6)
        assert first > 0 and set(logged.seeds[:first]) == {5} and set(logged.seeds[first:]) == {6}
        # What the seed changes: the same sampled call draws other tokens.
        request = GenerationRequest(
            messages=(ChatMessage("user", "Tell me about the lighthouse."),), max_tokens=24
        )
        draws: dict[int, list[str]] = {}
        for seed in (5, 6, 5):
            engine.profile = engine.profile.model_copy(update={"seed": seed})
            draws.setdefault(seed, []).append((await engine.generate(request)).text)
        assert draws[5][0] == draws[5][1] != draws[6][0]
    finally:
        engine.close()


@pytest.mark.slow
async def test_unscripted_tiny_model_never_stores_a_cut_fold(eval_settings_for):
    """Random weights: a chapter, answered under its grammar, still lands as a chapter that
    parses (never cut at its cap). The synopsis of a major fold is prose, with no grammar to
    bound it: a draft the output cap stops is never stored; it is asked again shorter, and when
    every draft is too long, or asking again leaves no room (the draft shown beside a full batch
    of quoted chapters left 45 tokens of the 2,048-token fold context: the major fold failed),
    the chapters are quoted in the synopsis's length. Every major fold
    lands within its length. The run ends and every arm answers."""
    settings = eval_settings_for()
    conv = short_conversation(12)
    report, _ = await _run(
        settings,
        conv,
        EvalOptions(questions_per_range=1, arms=("generational", "truncation")),
        scripted=False,
    )
    run = report.runs[0]
    failed = [e for e in run.folds.events if e.state == "failed"]
    assert run.folds.chapters >= 1
    assert [e.kind for e in failed if e.kind != "major_gc"] == []  # no chapter failed
    majors = [e for e in run.folds.events if e.kind == "major_gc" and e.state != "queued"]
    assert majors  # the run went as far as a major fold
    assert [e for e in majors if e.state == "failed"] == []
    for event in majors:
        if event.state != "landed":
            continue
        size = re.search(r"\((\d+) tokens, target (\d+)[,)]", event.detail)
        assert size is not None, event.detail
        tokens, target = int(size[1]), int(size[2])
        assert tokens <= target * (1 + LENGTH_TOLERANCE)  # within its length: not a cut draft
    landed = [e for e in majors if e.state == "landed"]
    assert run.folds.synopsis_versions == len(landed)
    assert run.arms["generational"].status is ArmStatus.OK
    assert run.audit.refusals.stored == 0


def test_cli_eval_on_a_tiny_model(tiny_model_path: Path, tmp_path: Path, capsys, monkeypatch):
    from kotonia_tui.cli import main

    conv = short_conversation(10)
    data = tmp_path / "conv.json"
    data.write_text(conv.model_dump_json())
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    code = main(
        [
            "eval",
            str(data),
            "--model",
            str(tiny_model_path),
            "--n-ctx",
            "1024",
            "--questions",
            "1",
            "--arms",
            "truncation,full",
            "--full-max-ctx",
            "0",
            "--set",
            "fold_delay_s=5",
            "--seed",
            "3",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--quiet",
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["model"]["sha256"] and len(report["model"]["sha256"]) == 64
    assert report["model"]["n_ctx"] == 1024
    assert report["profile"]["seed"] == 3
    assert report["input"]["messages"] == 20
    assert png.exists()
    printed = capsys.readouterr().out
    assert "recall by range" in printed and "audit of the chronicler" in printed
    assert "recall by question kind" in printed
    kinds = report["summary"]["truncation"]["recall_by_kind"]
    assert kinds and all(0.0 <= cell["mean"] <= 1.0 for cell in kinds.values())


def test_cli_eval_wrong_input_is_one_line(tmp_path: Path, capsys):
    from kotonia_tui.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"messages": [{"id": 1, "role": "user", "speaker": "A", "text": "x"}],'
        ' "character": {"name": "B"}, "questions": [{"id": "q", "question": "?",'
        ' "answer": "a", "evidence": [9]}]}'
    )
    assert main(["eval", str(bad), "--arms", "truncation"]) == 1
    err = capsys.readouterr().err
    assert "evidence [9] are not messages" in err
    assert main(["eval", str(bad), "--arms", "nope"]) in (1, 2)
