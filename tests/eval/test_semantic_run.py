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
from kotonia_tui.eval.results import GradedAnswer
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


async def asked(settings) -> GradedAnswer:
    conv = conversation()
    engine = open_engine(settings)
    scripted = ScriptedEngine(engine, {q.question: q.answer for q in conv.questions})
    options = EvalOptions(questions_per_range=100, arms=(ARM,), evidence_only=True)
    try:
        report = await run_eval(conv, settings, scripted, options)
    finally:
        engine.close()
    (question,) = report.runs[0].arms[ARM].questions
    return question


def _settings(eval_settings_for, **values):
    return eval_settings_for(n_ctx=4096, recall_budget_ratio=0.15, **values)


async def test_the_archive_is_embedded_before_the_questions(eval_settings_for, tiny_embedding_path):
    words = await asked(_settings(eval_settings_for))
    assert words.found[0].where == ["absent"]  # out of the window, and no word in common
    assert 1 not in words.recalled and words.answer_words_missing == ["ilsebill"]

    meaning = await asked(_settings(eval_settings_for, embedding_model_path=tiny_embedding_path))
    assert meaning.found[0].where == ["recalled"]
    assert 1 in meaning.recalled and meaning.recalled_tokens > 0
    assert meaning.answer_words_missing == []


async def test_an_embedding_model_that_cannot_load_stops_the_run(eval_settings_for, tmp_path: Path):
    broken = tmp_path / "broken-embed.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 60)
    stopped = (
        r"^semantic recall unavailable, recall matches words only: .*broken-embed\.gguf: .*"
        r"\(--set semantic_recall=false measures words alone\)$"
    )
    with pytest.raises(DatasetError, match=stopped):
        await asked(_settings(eval_settings_for, embedding_model_path=broken))
