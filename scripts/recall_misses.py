"""Classify the questions whose evidence recall did not put in front of the reader.

Reads the `--json` report of `kotonia eval --evidence-only` (a `+recall` arm) and sorts each
question with no evidence message present (the honest count: a part without the answer's
words does not count) by why:

- `part`: an evidence message was quoted, but only in a part without the answer (part
  selection);
- `budget`: recall's ranking found an evidence message (`ranked`) but did not quote it
  (packing: the budget went to others);
- `ranking`: no evidence message was among the messages the ranking found (vocabulary,
  stemming, names);
- `memory`: held by the window or the memory only in a way that does not count (a quoted part).

    .venv/bin/python scripts/recall_misses.py REPORT.json [--arm truncation+recall] [-v] [--show ID]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

PRESENT = {"window", "recalled", "cited", "quoted"}


def classify(question: dict[str, Any]) -> str | None:
    """Why a question's evidence is not present (None: it is)."""
    where = {place for found in question["found"] for place in found["where"]}
    if where & PRESENT:
        return None
    if "recalled_part" in where:
        return "part"
    stating = set(question["evidence"]) | set(question.get("restated", []))
    if stating & set(question.get("ranked", [])):
        return "budget"
    if "quoted_part" in where:
        return "memory"
    return "ranking"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--arm", default="truncation+recall")
    parser.add_argument("-v", "--verbose", action="store_true", help="list each miss")
    parser.add_argument(
        "--show", metavar="ID", action="append", default=[], help="print what a question recalled"
    )
    args = parser.parse_args()
    report = json.loads(args.report.read_text(encoding="utf-8"))
    counts: Counter[str] = Counter()
    total = 0
    for run in report["runs"]:
        arm = run["arms"].get(args.arm)
        if arm is None:
            raise SystemExit(f"{args.report}: no arm {args.arm!r} in run {run['run']}")
        for question in arm["questions"]:
            total += 1
            why = classify(question)
            counts[why or "present"] += 1
            if question["id"] in args.show:
                print(f"== {question['id']} ({why or 'present'}): {question['question']}")
                print(
                    f"   reference {question['reference']!r}, evidence {question['evidence']}, "
                    f"restated {question.get('restated', [])}"
                )
                print(question.get("recalled_text") or "   (nothing recalled)")
            if why and args.verbose:
                ranked = question.get("ranked", [])
                ranks, again = (
                    [ranked.index(e) + 1 if e in ranked else None for e in ids]
                    for ids in (question["evidence"], question.get("restated", []))
                )
                print(
                    f"  {question['id']} {why}: {question['question']!r} ranks {ranks}"
                    + (f", restated ranks {again}" if again else "")
                )
    shown = ", ".join(
        f"{k} {counts[k]}" for k in ("present", "part", "budget", "ranking", "memory")
    )
    print(f"{args.report.name} ({args.arm}, {total} questions): {shown}")


if __name__ == "__main__":
    main()
