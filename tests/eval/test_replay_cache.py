"""A replay kept on disk (`kotonia eval --replay-cache DIR`): the second run with the same input,
settings, model and code opens the kept store instead of folding again, and reports the same
chapters, ranges and evidence; anything that decides the replay makes a new one.

The chronicler is the scripted one of tests/eval/conftest.py over the real tiny engine.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

import kotonia_tui
from kotonia_tui.characters import CharacterCard
from kotonia_tui.characters.card import CardImage
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


async def _run(
    settings,
    conv: EvalConversation,
    cache: Path,
    *,
    card: CharacterCard | None = None,
    progress: list[str] | None = None,
) -> tuple[EvalReport, list[str]]:
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
    said = progress if progress is not None else []
    try:
        report = await run_eval(conv, settings, counted, options, progress=said.append, card=card)
    finally:
        engine.close()
    return report, counted.calls


def _kept(cache: Path) -> list[Path]:
    return sorted(cache.iterdir()) if cache.exists() else []


def _settings(eval_settings_for, **values):
    # As tests/eval/test_evidence_run.py: a few chapters, room to recall.
    return eval_settings_for(n_ctx=4096, recall_budget_ratio=0.15, major_gc_ratio=0.2, **values)


async def test_a_kept_replay_is_reused_with_the_same_figures(eval_settings_for, tmp_path: Path):
    conv = one_question_per_message()
    cache = tmp_path / "replays"
    first, first_calls = await _run(_settings(eval_settings_for), conv, cache)
    assert first_calls.count(CHRONICLER) >= 2  # the replay folded
    kept = _kept(cache)  # one entry, nothing left aside
    assert len(kept) == 1 and {p.name for p in kept[0].iterdir()} == {DATABASE, FED}
    assert first.runs[0].replay_reused is None

    said: list[str] = []
    second, second_calls = await _run(_settings(eval_settings_for), conv, cache, progress=said)
    assert second_calls == []  # nothing folded, nothing read (evidence only)
    assert second.runs[0].replay_reused == str(kept[0])
    assert any("nothing folded now" in line for line in said)
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
    kept = conv.messages[:-2]
    questions = [q for q in conv.questions if max(q.evidence) <= len(kept)]
    shorter = conv.model_copy(update={"messages": kept, "questions": questions})
    _report, calls = await _run(_settings(eval_settings_for), shorter, cache)
    assert calls.count(CHRONICLER) >= 2  # another conversation: folded again
    assert len(_kept(cache)) == 3
    # The questions are asked after the replay: other questions reuse it.
    fewer = conv.model_copy(update={"questions": conv.questions[:5]})
    report, calls = await _run(_settings(eval_settings_for), fewer, cache)
    assert calls == [] and report.runs[0].arms["generational"].questions_asked == 5


async def test_without_a_seed_each_run_folds_anew(eval_settings_for, tmp_path: Path):
    # Without a seed the chronicler samples anew each run: a kept draw would pass for all.
    conv = one_question_per_message()
    cache = tmp_path / "replays"
    said: list[str] = []
    _report, calls = await _run(_settings(eval_settings_for, seed=None), conv, cache, progress=said)
    assert calls.count(CHRONICLER) >= 2 and _kept(cache) == []
    assert any("not kept: no fixed seed" in line for line in said)


async def test_a_card_with_a_picture_is_kept(eval_settings_for, tmp_path: Path):
    conv = one_question_per_message()
    png = Image.new("RGB", (4, 4), "red")
    data = io.BytesIO()
    png.save(data, format="PNG")
    card = conv.character.card().model_copy(
        update={"image": CardImage(data=data.getvalue(), mime="image/png")}
    )
    cache = tmp_path / "replays"
    await _run(_settings(eval_settings_for), conv, cache, card=card)
    _report, calls = await _run(_settings(eval_settings_for), conv, cache, card=card)
    assert calls == [] and len(_kept(cache)) == 1


async def test_a_damaged_entry_is_replayed_and_an_unwritable_cache_is_only_a_warning(
    eval_settings_for, tmp_path: Path
):
    conv = one_question_per_message()
    cache = tmp_path / "replays"
    first, _calls = await _run(_settings(eval_settings_for), conv, cache)
    (entry,) = _kept(cache)
    (entry / FED).write_text("{not json", encoding="utf-8")
    said: list[str] = []
    report, calls = await _run(_settings(eval_settings_for), conv, cache, progress=said)
    assert calls.count(CHRONICLER) >= 2  # replayed, and reported as the first run was
    assert (
        report.runs[0].arms["generational"].questions
        == first.runs[0].arms["generational"].questions
    )
    assert any(f"the kept replay {entry} cannot be read" in line for line in said)
    _report, calls = await _run(_settings(eval_settings_for), conv, cache)
    assert calls == []  # the replay of the run above took the damaged one's place

    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("", encoding="utf-8")
    said = []
    report, calls = await _run(_settings(eval_settings_for), conv, blocked, progress=said)
    assert calls.count(CHRONICLER) >= 2 and report.runs[0].arms["generational"].questions
    assert any("the replay could not be kept" in line for line in said)


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


def test_the_command_keeps_and_reuses_a_replay(tiny_model_path: Path, tmp_path: Path, capsys):
    """`kotonia eval --replay-cache DIR --seed N` twice: the second run says it opened the
    kept replay, and its JSON names it."""
    from kotonia_tui.cli import main

    conv = one_question_per_message(12)
    data = tmp_path / "conv.json"
    data.write_text(conv.model_dump_json())
    cache = tmp_path / "replays"
    args = [
        "eval",
        str(data),
        "--model",
        str(tiny_model_path),
        "--n-ctx",
        "1024",
        "--seed",
        "3",
        "--questions",
        "100",
        "--arms",
        "generational,generational+recall",
        "--evidence-only",
        "--replay-cache",
        str(cache),
    ]
    assert main([*args, "--json", str(tmp_path / "first.json")]) == 0
    first_err = capsys.readouterr().err
    (entry,) = _kept(cache)
    assert f"the replay kept in {entry}" in first_err and "nothing folded now" not in first_err
    assert main([*args, "--json", str(tmp_path / "second.json")]) == 0
    assert f"the replay kept in {entry} (nothing folded now)" in capsys.readouterr().err
    first = json.loads((tmp_path / "first.json").read_text())
    second = json.loads((tmp_path / "second.json").read_text())
    assert first["runs"][0]["replay_reused"] is None
    assert second["runs"][0]["replay_reused"] == str(entry)
    assert second["options"]["replay_cache"] == str(cache)
    for name in ("generational", "generational+recall"):
        assert (
            second["runs"][0]["arms"][name]["questions"]
            == (first["runs"][0]["arms"][name]["questions"])
        )
