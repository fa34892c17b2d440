"""How often a quote of a question's neighbourhood holds the words of its answer, without a model.

A fold that cannot store the chronicler's chapter quotes the range instead
(memory/extract.py), and a quoted synopsis quotes its chapters the same way. Whether a later
question can be answered from such a quote depends only on which sentences the extract picks,
so a change to how it weighs sentences can be judged here in seconds, before a reader run of
minutes: for each question of an eval dataset with marked evidence, the `--window` messages
around its first evidence message (a chapter's range, about) are quoted at each `--fraction` of
their characters, and the question counts when every content word of its reference answer is in
the quote (`eval.evidence.answer_words`, as the eval's "answer words" figure).

    .venv/bin/python scripts/extract_probe.py DATASET.json [...] [--window 15]
        [--fraction 0.08 --fraction 0.15 --fraction 0.3] [--json]

Prints one line per dataset and fraction: held / questions. Exit 1 with one line naming the
file when a dataset cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kotonia_tui.chatfiles.errors import ImportFormatError
from kotonia_tui.domain import Message
from kotonia_tui.eval.dataset import DatasetError, EvalConversation, load_file
from kotonia_tui.eval.evidence import answer_words
from kotonia_tui.memory.extract import extract_passages, message_passages


def held(conv: EvalConversation, window: int, fraction: float) -> tuple[int, int]:
    """Questions whose answer's words a quote of their neighbourhood holds, and questions."""
    ids = [m.id for m in conv.messages]
    where = {message_id: index for index, message_id in enumerate(ids)}
    count = total = 0
    for question in conv.questions:
        if not question.evidence or question.evidence[0] not in where:
            continue
        at = where[question.evidence[0]]
        start = max(0, at - window // 2)
        around = conv.messages[start : start + window]
        messages = [Message(id=m.id, role=m.role, speaker=m.speaker, text=m.text) for m in around]
        limit = max(1, int(sum(len(m.text) for m in messages) * fraction))
        quote = extract_passages(message_passages(messages), limit)
        total += 1
        count += bool(answer_words(question.answer, [quote]).all_there)
    return count, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--window", type=int, default=15, help="messages around the evidence")
    parser.add_argument(
        "--fraction", type=float, action="append", help="of the window's characters (repeat)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON list on standard output")
    args = parser.parse_args()
    if args.window < 1 or any(not 0 < f <= 1 for f in args.fraction or []):
        parser.error("--window must be 1 or more and each --fraction in (0, 1]")
    fractions = args.fraction or [0.08, 0.15, 0.3]
    rows = []
    for path in args.datasets:
        try:
            conv = load_file(path)
        except (DatasetError, ImportFormatError) as exc:
            print(exc, file=sys.stderr)
            raise SystemExit(1) from exc
        for fraction in fractions:
            count, total = held(conv, args.window, fraction)
            rows.append({"dataset": str(path), "fraction": fraction, "held": count, "of": total})
    if args.json:
        print(json.dumps(rows))
        return
    for row in rows:
        print(f"{row['dataset']} at {row['fraction']:g}: {row['held']} / {row['of']}")


if __name__ == "__main__":
    main()
