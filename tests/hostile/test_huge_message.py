"""Issue 33, item 5: one huge imported message cannot stall its conversation, and whatever
quotes it (a chapter, a synopsis, an extract) is bounded by the window it is for, and says
it is an extract.

The end-to-end case runs real `kotonia` subprocesses on a tiny scripted model (its chronicler
answers are unusable, so every range is quoted, the path the issue found unbounded).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kotonia_tui.memory.extract import Passage, extract_passages

from .harness import assert_ok, kotonia

MACROS = "{{char}}{{user}}" * 100_000  # 1.6 MB, no space: one "word"


def test_a_run_with_no_space_is_quoted_within_the_limit_and_says_so():
    """Before: the first word was kept whole, so the 1.6 MB run was the whole quote."""
    text = extract_passages([Passage("#12 Wren", MACROS)], 400)
    assert len(text) <= 400 + len("#12 Wren: ")
    assert text.endswith(" … [extract of #12]")


def test_a_long_sentence_cut_at_a_word_says_it_is_an_extract():
    text = extract_passages([Passage("#7 Ann", "the tide " * 50_000)], 300)
    assert len(text) <= 300 + len("#7 Ann: ")
    assert text.endswith(" … [extract of #7]")


def _chat_with(tmp_path: Path, big: str) -> Path:
    lines: list[dict[str, object]] = [{"user_name": "Ann", "character_name": "Wren"}]
    for i in range(12):
        lines.append({"name": "Ann", "is_user": True, "mes": f"Line {i} about the lamp."})
        lines.append({"name": "Wren", "mes": big if i == 1 else f"Reply {i}, the tide."})
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_huge_message_is_folded_into_a_bounded_chapter(card, short_reply_model, tmp_path):
    """Before: the {{char}}{{user}} x 100k message became a quoted chapter of 400,005 tokens
    (50 times the window), after a fold that ran for minutes."""
    conv = kotonia("import", _chat_with(tmp_path, MACROS), "--character", card)
    assert_ok(conv)
    conv_id = conv.out.strip()
    env = {
        "KOTONIA_MODEL_PATH": str(short_reply_model),
        "KOTONIA_N_CTX": "2048",
        "KOTONIA_FOLD_DELAY_S": "0",
    }
    run = kotonia("chat", card, "--conversation", conv_id, "--say", "And the lamp?", env=env)
    assert_ok(run)
    memory = kotonia("memory", conv_id, "--json")
    assert_ok(memory)
    chapters = json.loads(memory.out)["chapters"]
    assert chapters, "nothing was folded: the test would prove nothing"
    for chapter in chapters:
        assert chapter["tokens"] <= 2048, chapter["note"]
    (huge,) = [c for c in chapters if "{{char}}" in c["text"]]
    assert huge["text"].endswith("[extract of #4]")
