"""Other memory blocks from the same replay (`--block-variants`): each variant is the final
store's memory without some of its items, at the generational arm's history tokens, the
verbatim window taking what the block leaves; its recall arm recalls as much as its base.

On the tiny real model and a real store, the chronicler scripted as in test_evidence_run.py:
one range's chapter is hollow, so the fold quotes it (a quoted chapter).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.eval import EvalOptions
from kotonia_tui.eval.block_variants import render_variant
from kotonia_tui.eval.replay import replay
from kotonia_tui.eval.results import ArmResult
from tests.eval.conftest import ScriptedEngine
from tests.eval.test_evidence_run import (
    HOLLOW,
    _run,
    _settings,
    one_question_per_message,
    pooled_twice,
)

ARMS = ("generational", "generational+recall", "truncation+recall")
VARIANTS = ("no-chapters", "no-quotes", "no-ledger", "no-quoted-story", "no-quoted-chapters")


def _recall_budget(arm: ArmResult) -> int:
    found = re.search(r"recall: up to (\d+) tokens", arm.note)
    assert found, arm.note
    return int(found.group(1))


def _ids(arm: ArmResult, count: int) -> set[int]:
    return set(range(count - arm.verbatim_messages + 1, count + 1))


async def test_variants_share_the_history_and_recall_of_their_base(
    eval_settings_for, tmp_path: Path
):
    conv = one_question_per_message()
    count = len(conv.messages)
    report, _ = await _run(
        _settings(eval_settings_for), conv, ARMS, evidence_only=True, variants=VARIANTS
    )
    run = report.runs[0]
    base = run.arms["generational"]
    recalling = run.arms["generational+recall"]
    hollow = f"#{HOLLOW.start}-#{HOLLOW.stop - 1}"
    assert "## Chapters" in base.memory_text and hollow in base.memory_text

    for variant in VARIANTS:
        plain = run.arms[f"generational/{variant}"]
        recalled = run.arms[f"generational/{variant}+recall"]
        assert variant in plain.note
        for arm, of in ((plain, base), (recalled, recalling)):
            # No more history than the base; the window is the base's and older messages.
            assert arm.memory_tokens + arm.verbatim_tokens <= of.memory_tokens + of.verbatim_tokens
            assert arm.verbatim_messages >= of.verbatim_messages
            assert arm.memory_tokens < of.memory_tokens  # each variant leaves something out
            # Every question's evidence in the longer window is found there.
            window = _ids(arm, count)
            for q in arm.questions:
                evidence = [found for found in q.found if not found.restated]
                for m, found in zip(q.evidence, evidence, strict=True):
                    assert ("window" in found.where) == (m in window), (variant, q.id, m)
        # Its recall arm recalls as much as its base does.
        assert _recall_budget(recalled) == _recall_budget(recalling) > 0
        assert max(q.recalled_tokens for q in recalled.questions) > 0
        assert report.summary[f"generational/{variant}+recall"].evidence_in_prompt is not None

    no_chapters = run.arms["generational/no-chapters"]
    assert "## Chapters" not in no_chapters.memory_text
    # The chapters' tokens went to the window: it reaches back over folded messages.
    assert no_chapters.verbatim_messages > base.verbatim_messages
    no_quotes = run.arms["generational/no-quotes"]
    assert hollow not in no_quotes.memory_text  # the quoted chapter is left out
    assert "## Chapters" in no_quotes.memory_text  # the chronicler's chapters stay
    assert 'said "' not in no_quotes.memory_text
    assert "## Ledger" not in run.arms["generational/no-ledger"].memory_text
    story = run.arms["generational/no-quoted-story"].memory_text
    assert hollow not in story and "## Chapters" in story and 'said "' in story
    assert run.arms["generational/no-quoted-chapters"].memory_text == story  # no quoted synopsis

    pairs = {(p.arm, p.against) for p in report.paired}
    for variant in VARIANTS:
        assert (f"generational/{variant}+recall", "generational+recall") in pairs
        assert (f"generational/{variant}+recall", "truncation+recall") in pairs
        assert (f"generational/{variant}", "generational") in pairs
    data = json.loads(json.dumps(report.to_json()))
    assert data["options"]["block_variants"] == list(VARIANTS)
    assert "generational/no-quotes+recall" in data["summary"]
    # Reports of one seed each are pooled with the variants' pairs too.
    twice = pooled_twice(report, tmp_path)
    once = {(p.arm, p.against): p for p in report.paired}
    for variant in VARIANTS:
        pair = (f"generational/{variant}+recall", "truncation+recall")
        assert twice[pair]["questions"] == 2 * once[pair].questions > 0


def test_an_unknown_variant_or_no_generational_arm_is_named():
    with pytest.raises(ValueError, match="no-such"):
        EvalOptions(arms=("generational",), block_variants=("no-such",))
    with pytest.raises(ValueError, match="generational arm"):
        EvalOptions(arms=("truncation",), block_variants=("no-ledger",))


async def test_a_block_larger_than_the_history_leaves_the_newest_message(eval_settings_for):
    """Where a variant's block takes more than the base's history tokens, the window loses its
    oldest messages, never the newest (the question's turn reads on from it)."""
    conv = one_question_per_message()
    settings = _settings(eval_settings_for)
    engine = open_engine(settings)
    scripted = ScriptedEngine(engine, {}, hollow=lambda ids: any(i in HOLLOW for i in ids))
    replayed = await replay(conv, settings, scripted)
    try:
        final = replayed.final
        history = final.plan.memory_tokens + final.plan.verbatim_tokens
        same = render_variant(replayed, scripted, "no-ledger", history)
        assert same.window[-len(final.window) :] == tuple(final.window)
        assert same.memory_tokens + same.verbatim_tokens <= history
        # Room for the block and a little: the window keeps its newest messages only.
        tight = render_variant(replayed, scripted, "no-ledger", same.memory_tokens + 1)
        assert tight.window == (final.window[-1],)
        assert 0 < len(tight.window) < len(final.window)
    finally:
        await replayed.close()
        engine.close()
