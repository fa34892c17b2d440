"""`kotonia eval` with an embedding model set: the replayed archive is embedded before the
questions, so a question that shares no word with its evidence still finds it by meaning.

Real store, the real tiny chat engine (scripted outputs, tests/eval/conftest.py) and a real
llama.cpp embedding model (the suite's tiny random one: its vectors carry no meaning, but a
nearly identical string of characters gets a nearly equal vector, which is what this relies
on). Evidence only: the reader is not asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.eval import EvalOptions, run_eval
from kotonia_tui.eval.dataset import DatasetError, EvalConversation, EvalQuestion
from kotonia_tui.eval.results import EvalReport, GradedAnswer
from tests.eval.conftest import ScriptedEngine, short_conversation

# Archived early, asked about at the end in other words: every word is misspelled within its
# first letters, so no word (nor a form of it) is shared, while the characters, and so the
# tiny model's vectors, nearly are.
ARCHIVED = "Grandmother Ilsebill kept beehives beside Bergenhus."
ASKED = "Garndmother Iselbill kpet ebehives bseide Bregenhus?"
ARM = "truncation+recall"


def conversation() -> EvalConversation:
    conv = short_conversation(24)
    messages = [m.model_copy(update={"text": ARCHIVED}) if m.id == 1 else m for m in conv.messages]
    question = EvalQuestion(id="bees", question=ASKED, answer="Ilsebill", evidence=[1], kind="fact")
    return conv.model_copy(update={"messages": messages, "questions": [question]})


async def report_of(settings, arms: tuple[str, ...] = (ARM,)) -> EvalReport:
    conv = conversation()
    engine = open_engine(settings)
    scripted = ScriptedEngine(engine, {q.question: q.answer for q in conv.questions})
    options = EvalOptions(questions_per_range=100, arms=arms, evidence_only=True)
    try:
        return await run_eval(conv, settings, scripted, options)
    finally:
        engine.close()


async def asked(settings) -> GradedAnswer:
    (question,) = (await report_of(settings)).runs[0].arms[ARM].questions
    return question


def _settings(eval_settings_for, **values):
    return eval_settings_for(n_ctx=4096, recall_budget_ratio=0.15, **values)


async def test_the_archive_is_embedded_before_the_questions(eval_settings_for, tiny_embedding_path):
    words = await asked(_settings(eval_settings_for))
    assert words.found[0].where == ["absent"]  # out of the window, and no word in common
    assert 1 not in words.recalled and words.answer_words_missing == ["ilsebill"]

    report = await report_of(_settings(eval_settings_for, embedding_model_path=tiny_embedding_path))
    # The report says what recall matched by.
    assert report.runs[0].semantic.startswith("on: tiny-embed-64.gguf, dimension 64;")
    (meaning,) = report.runs[0].arms[ARM].questions
    assert meaning.found[0].where == ["recalled"]
    assert 1 in meaning.recalled and meaning.recalled_tokens > 0
    assert meaning.answer_words_missing == []


async def test_an_embedding_model_that_cannot_load_stops_the_run(eval_settings_for, tmp_path: Path):
    broken = tmp_path / "broken-embed.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 60)
    stopped = (
        r"^semantic recall cannot be had: .*broken-embed\.gguf: .*"
        r"\(--set semantic_recall=false measures recall by words alone\)$"
    )
    with pytest.raises(DatasetError, match=stopped):
        await asked(_settings(eval_settings_for, embedding_model_path=broken))


async def test_without_a_recall_arm_no_embedding_model_is_opened(eval_settings_for, tmp_path):
    """A model that cannot be had does not stop a run whose arms do not recall: nothing is
    embedded for them, and the report says semantic recall was not used."""
    broken = tmp_path / "broken-embed.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 60)
    settings = _settings(eval_settings_for, embedding_model_path=broken)
    report = await report_of(settings, arms=("truncation",))
    assert report.runs[0].semantic == "not used (no recall arm)"
