"""The options of `kotonia eval`, apart from the evaluation itself: the CLI builds its parser
(and `--help`) without loading the engine or the store."""

from __future__ import annotations

import argparse
from pathlib import Path

from kotonia_tui.config import PromptFormat

# The memory designs compared, in report order (`arms` builds each).
ARMS = (
    "generational",
    "rolling",
    "truncation",
    "full",
    "generational+recall",
    "truncation+recall",
)
RECALL = "+recall"  # an arm's prompts with excerpts recalled from the archive it left out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="?",
        help="dataset or chat file, or a stored conversation id (default: the shipped dataset)",
    )
    parser.add_argument("--character", help="card to play the character (file or stored input)")
    parser.add_argument(
        "--sample",
        metavar="ID",
        help="the sample of a LoCoMo file (sample_id or number) or the question of a "
        "LongMemEval file (question_id) to evaluate (default: the first, named on standard "
        "error)",
    )
    parser.add_argument(
        "--character-speaker",
        metavar="NAME",
        help="the LoCoMo speaker who plays the character, by name or a/b (default: speaker_b; "
        "speaker_a is the user)",
    )
    parser.add_argument(
        "--skip-bad-evidence",
        action="store_true",
        help="leave out a LoCoMo or LongMemEval question whose evidence names no message "
        "(counted on standard error) instead of stopping",
    )
    parser.add_argument("--model", type=Path, help="a GGUF model (default: the active profile)")
    parser.add_argument(
        "--prompt-format", choices=[f.value for f in PromptFormat], help="template or transcript"
    )
    parser.add_argument("--n-ctx", type=int, help="context window; small enough to force folds")
    parser.add_argument("--threads", type=int)
    parser.add_argument(
        "--seed",
        type=int,
        help="sampling seed of the model (chronicler); with --runs, run k draws with seed + k - 1",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a setting for this run, e.g. fold_trigger_ratio=0.4; repeatable",
    )
    parser.add_argument("--questions", type=int, default=8, help="questions per range (8)")
    parser.add_argument("--runs", type=int, default=1, help="repeat K times; report the spread")
    parser.add_argument(
        "--arms", default=",".join(ARMS), help=f"comma-separated, from {','.join(ARMS)}"
    )
    parser.add_argument(
        "--full-max-ctx",
        type=int,
        default=32768,
        help="largest window the full arm may load the model with (32768; 0: never reload)",
    )
    parser.add_argument("--answer-tokens", type=int, default=48, help="reader answer cap")
    parser.add_argument(
        "--evidence-only",
        action="store_true",
        help="only where each question's evidence stands in each arm's prompt: no reader, no "
        "judge, and no folds unless an arm carries the memory",
    )
    parser.add_argument(
        "--block-variants",
        metavar="NAMES",
        help="comma-separated: also render each generational arm's memory block without some "
        "of its items (no-ledger, no-ledger-quotes, no-quotes, no-quoted-story, "
        "no-quoted-chapters, no-synopsis, no-chapters) from the same final store at the same "
        "history tokens, the window taking what the block leaves: a comparison of what the "
        "block holds at one fold phase",
    )
    parser.add_argument(
        "--replay-cache",
        type=Path,
        metavar="DIR",
        help="keep each replay (its database and what fed it) in DIR and reuse it when the "
        "input, settings, model and the code it depends on are the same: a change to how "
        "questions are answered is measured without folding again",
    )
    parser.add_argument("--json", type=Path, dest="json_out", help="write the report as JSON")
    parser.add_argument("--plot", type=Path, help="write the recall curve as a PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress on standard error")
