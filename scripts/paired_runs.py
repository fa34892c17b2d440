"""Two arms question by question over several `kotonia eval --json` reports (one per seed).

A report pools its own runs (`paired` in its JSON, eval/paired.py); separate commands, one
per seed, are pooled here the same way: for each pair of arms both reports ran, how many
questions only the first answered right and only the second, with the sign test's p, and the
same for the evidence in the prompt.

    .venv/bin/python scripts/paired_runs.py REPORT.json [REPORT.json ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kotonia_tui.eval.paired import PAIRS, PRESENT_PLACES, Outcome, compare


def _outcome(question: dict[str, Any]) -> Outcome:
    present = any(place in PRESENT_PLACES for f in question["found"] for place in f["where"])
    return question["correct"], present


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="one JSON list on standard output")
    args = parser.parse_args()
    matched: dict[tuple[str, str], list[tuple[Outcome, Outcome]]] = {}
    for path in args.reports:
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
            runs = report["runs"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"{path}: not a kotonia eval report ({exc})", file=sys.stderr)
            raise SystemExit(1) from exc
        # The pairs the report made too (a block variant against its base arm, eval/harness.py).
        pairs = list(PAIRS)
        for made in report.get("paired", []):
            pair = (made["arm"], made["against"])
            if pair not in pairs:
                pairs.append(pair)
        for run in runs:
            arms = run["arms"]
            for arm, against in pairs:
                mine, theirs = arms.get(arm), arms.get(against)
                if mine is None or theirs is None:
                    continue
                if mine["status"] != "ok" or theirs["status"] != "ok":
                    continue
                other = {q["id"]: _outcome(q) for q in theirs["questions"]}
                matched.setdefault((arm, against), []).extend(
                    (_outcome(q), other[q["id"]]) for q in mine["questions"] if q["id"] in other
                )
    counts = [compare(arm, against, pairs) for (arm, against), pairs in matched.items()]
    if args.json:
        print(json.dumps([asdict(c) for c in counts]))
        return
    for c in counts:
        right = (
            ""
            if c.right is None
            else (f"right {c.right.here} / {c.right.there} (p {c.right.p:.2f}), ")
        )
        print(
            f"{c.arm} against {c.against} ({c.questions} questions): {right}evidence in "
            f"prompt {c.evidence.here} / {c.evidence.there} (p {c.evidence.p:.2f})"
        )


if __name__ == "__main__":
    main()
