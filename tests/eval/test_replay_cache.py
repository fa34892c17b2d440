"""A replay kept on disk (`kotonia eval --replay-cache DIR`): the second run with the same input,
settings, model and code opens the kept store instead of folding again, and reports the same
chapters, ranges and evidence; anything that decides the replay makes a new one.

The chronicler is the scripted one of tests/eval/conftest.py over the real tiny engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import kotonia_tui
from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.engine import GenerationRequest, GenerationResult
from kotonia_tui.eval import EvalOptions, run_eval
from kotonia_tui.eval.dataset import EvalConversation
from kotonia_tui.eval.meter import EngineWrapper
from kotonia_tui.eval.replay_cache import DATABASE, FED, QUESTION_TIME, source_digest
from kotonia_tui.eval.results import EvalReport
from kotonia_tui.memory.chronicler import CHRONICLER
from tests.eval.conftest import ScriptedEngine
from tests.eval.test_evidence_run import HOLLOW, one_question_per_message

ARMS = ("generational", "generational+recall", "truncation+recall")


class Counted(EngineWrapper):
    """Counts the model calls of one run, by name."""

    def __init__(self, inner: ScriptedEngine) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.calls.append(request.reply_name)
        return await self.inner.generate(request)


async def _run(settings, conv: EvalConversation, cache: Path) -> tuple[EvalReport, list[str]]:
    engine = open_engine(settings)
    scripted = ScriptedEngine(
        engine,
        {q.question: q.answer for q in conv.questions},
        hollow=lambda ids: any(i in HOLLOW for i in ids),
    )
    counted = Counted(scripted)
    options = EvalOptions(
        questions_per_range=100, arms=ARMS, evidence_only=True, replay_cache=cache
    )
    try:
        report = await run_eval(conv, settings, counted, options)
    finally:
        engine.close()
    return report, counted.calls


def _settings(eval_settings_for, **values):
    # As tests/eval/test_evidence_run.py: a few chapters, room to recall.
    return eval_settings_for(n_ctx=4096, recall_budget_ratio=0.15, major_gc_ratio=0.2, **values)


async def test_a_kept_replay_is_reused_with_the_same_figures(eval_settings_for, tmp_path: Path):
    conv = one_question_per_message()
    cache = tmp_path / "replays"
    first, first_calls = await _run(_settings(eval_settings_for), conv, cache)
    assert first_calls.count(CHRONICLER) >= 2  # the replay folded
    kept = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(kept) == 1 and {p.name for p in kept[0].iterdir()} == {DATABASE, FED}

    second, second_calls = await _run(_settings(eval_settings_for), conv, cache)
    assert second_calls == []  # nothing folded, nothing read (evidence only)
    before, after = first.runs[0], second.runs[0]
    assert after.ranges == before.ranges
    assert after.folds == before.folds
    assert after.audit == before.audit  # the chronicler's calls were kept with the replay
    for name in ARMS:
        assert after.arms[name].questions == before.arms[name].questions, name
        assert after.arms[name].evidence_in_prompt == before.arms[name].evidence_in_prompt
        assert after.arms[name].memory_tokens == before.arms[name].memory_tokens
    # The arms really carry folded memory, so the comparison above compares something.
    assert before.arms["generational"].memory_tokens > 0
    assert before.folds.chapters >= 2
    assert json.loads(json.dumps(second.to_json()))["options"]["replay_cache"] == str(cache)


async def test_what_decides_the_replay_makes_a_new_one(eval_settings_for, tmp_path: Path):
    conv = one_question_per_message()
    cache = tmp_path / "replays"
    await _run(_settings(eval_settings_for), conv, cache)
    _report, calls = await _run(_settings(eval_settings_for, summary_max_tokens=200), conv, cache)
    assert calls.count(CHRONICLER) >= 2  # another setting: folded again
    shorter = conv.model_copy(update={"messages": conv.messages[:-2]})
    shorter = shorter.model_copy(
        update={
            "questions": [q for q in conv.questions if max(q.evidence) <= len(shorter.messages)]
        }
    )
    _report, calls = await _run(_settings(eval_settings_for), shorter, cache)
    assert calls.count(CHRONICLER) >= 2  # another conversation: folded again
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 3


def _package(root: Path) -> Path:
    for name in ("memory/policy.py", "memory/recall.py", "tui/app.py", "eval/harness.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n", encoding="utf-8")
    return root


def test_only_question_time_modules_leave_the_key_as_it_was(tmp_path: Path):
    package = _package(tmp_path / "pkg")
    digest = source_digest(package)
    for name in ("memory/recall.py", "tui/app.py", "eval/harness.py"):
        (package / name).write_text("changed = True\n", encoding="utf-8")
        assert source_digest(package) == digest, name
    (package / "memory/policy.py").write_text("changed = True\n", encoding="utf-8")
    assert source_digest(package) != digest
    (package / "memory/policy.py").write_text("# memory/policy.py\n", encoding="utf-8")
    assert source_digest(package) == digest
    (package / "memory/new_module.py").write_text("\n", encoding="utf-8")
    assert source_digest(package) != digest


def test_every_question_time_entry_names_a_module_of_the_package():
    package = Path(kotonia_tui.__file__).parent
    for entry in QUESTION_TIME:
        assert (package / entry).exists(), entry  # a renamed module would leave a dead entry
