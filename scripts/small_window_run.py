"""Headless turns at a small window, and the memory's figures after each one (issue 14).

Runs `kotonia chat CARD --say ... --stats` in one process (a fast typist: the folds compete with
the turns), with KOTONIA_N_CTX and KOTONIA_FOLD_DELAY_S set, then reads the database the run
wrote and prints one row per turn: prompt positions, evaluated, forced cut, fold applied, the
chapters and the synopsis (tokens against its target) that had landed by the end of the turn.

    .venv/bin/python scripts/small_window_run.py --home /tmp/i14home --turns 40

The home is emptied first. `--timeout S` stops the run after S seconds and reports the turns
made so far (the `--stats` lines are written to HOME/stderr.txt as they come). Figures per
turn come from the `--stats` lines; the memory figures from the chapters' and synopses'
creation times against the turns' (stored) times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

LINES = (
    "I set the stopped pocket watch on the counter. It was my grandfather's.",
    "My name is Mara Quill, and I came to Saltmere on the morning coach.",
    "Can you tell why it stopped at a quarter past three?",
    "I ask how long you have kept this shop on Lantern Street.",
    "My sister Ines is a nurse in Portcallow; she told me to find you.",
    "I look at the hundred clocks ticking out of step. Why not set them together?",
    "Were you really the navigator of the Grey Heron?",
    "I am allergic to cats, so I keep away from the one on the stool.",
    "How much will the repair cost? I can pay twelve shillings, no more.",
    "I watch your hands while you open the case.",
    "What is the engraving inside the lid? I never could read it.",
    "I tell you the watch stopped the night my grandfather died.",
    "Do you believe a clock can remember the hour something happened?",
    "I promise to come back on Friday to collect it.",
    "The rain is getting worse. May I wait here until it eases?",
    "I ask about the brass chronometer in the window.",
    "Someone told me the Grey Heron never sailed in January. Is that true?",
    "I notice a ship's log on your shelf, half hidden by a clock.",
    "I decide not to press you about the ship tonight.",
    "Tell me how you learned clockwork.",
    "I ask whether the tide bell by the harbour is yours too.",
    "I pour us both some tea from the kettle.",
    "My train back to Portcallow leaves on Saturday at nine.",
    "What do the fishermen say about the Skerry Rocks?",
    "I show you a photograph of my grandfather on a quay.",
    "Do you recognise the man standing beside him?",
    "I ask if the log on the shelf is from the Grey Heron.",
    "I tell you I will not tell anyone what you say tonight.",
    "Why did you really come to Saltmere eleven years ago?",
    "I listen to the clocks strike nine, one after another.",
    "I ask what part the watch needs and when it will arrive.",
    "I remind you that twelve shillings is all I have.",
    "Can I watch you fit the new mainspring on Friday?",
    "I ask about the woman in the locket on your workbench.",
    "The rain stops. I say I should go before the lamps are lit.",
    "I thank you for the tea and for the story.",
    "At the door I ask if the Grey Heron had a cook.",
    "I say goodnight and step out into Lantern Street.",
    "On Friday I come back for the watch, as I promised.",
    "I ask whether it runs now, and what you found inside.",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/i14home"))
    parser.add_argument("--card", default="rowan-ashby")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--fold-delay", type=float, default=0.0)
    parser.add_argument("--kotonia", default=str(Path(sys.executable).parent / "kotonia"))
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument(
        "--timeout", type=float, default=None, help="stop after this many seconds (the rows so far)"
    )
    args = parser.parse_args()

    shutil.rmtree(args.home, ignore_errors=True)
    args.home.mkdir(parents=True)
    env = dict(os.environ)
    env.update(
        KOTONIA_HOME=str(args.home),
        KOTONIA_N_CTX=str(args.n_ctx),
        KOTONIA_FOLD_DELAY_S=str(args.fold_delay),
    )
    command = [args.kotonia, "chat", args.card, "--stats"]
    for index in range(args.turns):
        command += ["--say", LINES[index % len(LINES)]]
    started = time.monotonic()
    # Written to files as they come, so a run stopped by --timeout keeps the turns it made.
    err_path, out_path = args.home / "stderr.txt", args.home / "stdout.txt"
    with err_path.open("w", encoding="utf-8") as err, out_path.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        try:
            returncode = child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            child.terminate()
            child.wait()
            returncode = 124
            print(f"stopped after {args.timeout:.0f} s: the turns made so far", file=sys.stderr)
    wall = time.monotonic() - started
    stderr = err_path.read_text(encoding="utf-8")
    if returncode not in (0, 124):
        print(stderr[-3000:], file=sys.stderr)
        print(f"kotonia exited {returncode}", file=sys.stderr)
    stats = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    rows = _rows(args.home / "data" / "kotonia.sqlite3", stats)
    _print(rows, stderr, wall)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return returncode


def _rows(db_path: Path, stats: list[dict[str, object]]) -> list[dict[str, object]]:
    db = sqlite3.connect(db_path)
    db.row_factory = sqlite3.Row
    replies = db.execute(
        "SELECT m.id, m.created_at FROM messages m JOIN turn_metrics t ON t.message_id = m.id "
        "ORDER BY t.id"
    ).fetchall()
    chapters = db.execute("SELECT * FROM chapters ORDER BY id").fetchall()
    synopses = db.execute("SELECT * FROM synopses ORDER BY id").fetchall()
    rows = []
    for index, (figures, reply) in enumerate(zip(stats, replies, strict=False), start=1):
        at = reply["created_at"]
        landed = [c for c in chapters if c["created_at"] <= at]
        versions = [s for s in synopses if s["created_at"] <= at]
        synopsis = versions[-1] if versions else None
        rows.append(
            {
                "turn": index,
                "positions": figures.get("prompt_positions"),
                "evaluated": figures.get("evaluated"),
                "forced_cut": figures.get("forced_cut"),
                "fold_applied": figures.get("fold_applied"),
                "fold_wait_ms": figures.get("fold_wait_ms"),
                "chapters": len(landed),
                "live_chapters": sum(
                    1 for c in landed if not c["superseded_by"] and not _in_synopsis_by(c, versions)
                ),
                "synopses": len(versions),
                "synopsis_tokens": synopsis["tokens"] if synopsis else None,
                "synopsis_target": _target(synopsis),
            }
        )
    return rows


def _in_synopsis_by(chapter: sqlite3.Row, versions: list[sqlite3.Row]) -> bool:
    return any(chapter["last_message_id"] <= s["through_message_id"] for s in versions)


def _target(synopsis: sqlite3.Row | None) -> int | None:
    if synopsis is None:
        return None
    try:
        return int(synopsis["target_tokens"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def _print(rows: list[dict[str, object]], stderr: str, wall: float) -> None:
    columns = (
        "turn",
        "positions",
        "evaluated",
        "forced_cut",
        "fold_applied",
        "fold_wait_ms",
        "chapters",
        "live_chapters",
        "synopses",
        "synopsis_tokens",
        "synopsis_target",
    )
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join("" if row[c] is None else str(row[c]) for c in columns) + " |")
    notes = [line for line in stderr.splitlines() if line.startswith(("note:", "fold "))]
    cuts = sum(1 for line in notes if "passed its ceiling" in line)
    failed = sum(1 for line in notes if line.startswith("fold ") and " failed" in line)
    print(f"\nturns {len(rows)}, wall {wall:.0f} s, forced-cut notes {cuts}, failed folds {failed}")


if __name__ == "__main__":
    raise SystemExit(main())
