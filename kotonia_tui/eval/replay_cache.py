"""Replays kept on disk, so a question-time change is measured without folding again.

A replay with folds spends minutes of model time writing chapters (10-15 min for a 400-message
dataset at n_ctx 2048 on 2 cores); asking the questions takes seconds. A change to how the
questions are answered (recall, the evidence count) leaves the replay as it was, so
`kotonia eval --replay-cache DIR` keeps each replay's database and what fed it under a key, and
a later run with the same key opens that copy instead of feeding the conversation again.

The key is a hash of everything that decides the replay: the conversation and card, the
settings (seed included), the model file, whether folds run and semantic recall is on, the
llama-cpp-python version, and the source of every module of the package except those that
only run once the replay is done or never write what it keeps (`QUESTION_TIME`: the recall
modules read the store and plan nothing the store keeps; the evaluation's own modules past
the replay; the TUI and the CLI). Any other change to the code is a new key, so a stale replay
is never reused; the cost of a wrong entry in `QUESTION_TIME` would be a replay that no longer
matches the code, which is why the list is short and each entry says why.

The model calls the replay made (the chronicler's, which the audit reads) are kept too and
put back in the meter, so a reused replay reports the same fold figures as the run that made
it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from kotonia_tui.characters import CharacterCard
from kotonia_tui.config import Settings
from kotonia_tui.engine import Engine, llama_cpp_version
from kotonia_tui.eval.dataset import EvalConversation
from kotonia_tui.eval.meter import CallRecord
from kotonia_tui.eval.replay import Fed, Replay, StoredReplay, eval_settings
from kotonia_tui.eval.results import FoldEvent

log = logging.getLogger(__name__)

FORMAT = 1  # of the stored files; a change makes every key new
PACKAGE = Path(__file__).resolve().parent.parent
# Folders and modules whose source is not part of the key (paths under the package).
QUESTION_TIME = (
    "tui/",  # the app's screens: never in an evaluation
    "cli/",  # argument parsing and output
    # Recall runs in every planned turn of the replay, but only reads the store and its
    # result is dropped with the turn: the chapters, ledger and ranges do not depend on it.
    "memory/recall.py",
    "memory/recall_forms.py",
    "chat/recall.py",
    # The evaluation past the replay: questions, arms, evidence, grading, reports.
    "eval/arguments.py",
    "eval/arms.py",
    "eval/audit.py",
    "eval/block_variants.py",
    "eval/command.py",
    "eval/evidence.py",
    "eval/examiner.py",
    "eval/grading.py",
    "eval/harness.py",
    "eval/paired.py",
    "eval/pinning.py",
    "eval/plot_png.py",
    "eval/published.py",
    "eval/report.py",
    "eval/replay_cache.py",
)
DATABASE = "replay.sqlite3"
FED = "fed.json"


def source_digest(package: Path = PACKAGE) -> str:
    """A hash of the source the replay depends on (every module not in `QUESTION_TIME`)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if any(name.startswith(s) if s.endswith("/") else name == s for s in QUESTION_TIME):
            continue
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class ReplayCache:
    """Replays under `root`, one folder per key."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def key(
        self,
        conv: EvalConversation,
        card: CharacterCard | None,
        settings: Settings,
        engine: Engine,
        *,
        folds: bool,
        semantic: bool,
    ) -> str:
        card = card or conv.character.card()
        described = {
            "format": FORMAT,
            "conversation": conv.model_dump(mode="json"),
            "card": card.model_dump(mode="json"),
            "settings": eval_settings(settings, conv).model_dump(mode="json"),
            "model": engine.model_key,
            "profile": engine.profile.model_dump(mode="json"),  # the run's seed is here
            "folds": folds,
            "semantic": semantic,
            "llama_cpp_python": llama_cpp_version(),
            "source": source_digest(),
        }
        text = json.dumps(described, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def load(self, key: str) -> tuple[StoredReplay, list[CallRecord]] | None:
        """The replay kept under `key` and the model calls it made, or None."""
        folder = self.root / key
        database, fed_file = folder / DATABASE, folder / FED
        if not (database.is_file() and fed_file.is_file()):
            return None
        data = json.loads(fed_file.read_text(encoding="utf-8"))
        fed = Fed(
            conv_id=data["conv_id"],
            to_stored={int(k): v for k, v in data["to_stored"].items()},
            to_source={int(k): v for k, v in data["to_source"].items()},
            boundaries=data["boundaries"],
            forced=data["forced"],
            applied=data["applied"],
            events=[FoldEvent(**e) for e in data["events"]],
        )
        calls = [CallRecord(**c) for c in data["calls"]]
        return StoredReplay(database=database, fed=fed), calls

    def save(self, key: str, replayed: Replay, calls: list[CallRecord]) -> Path:
        """Keep the replay's database and what fed it under `key` (written aside, then
        renamed into place: a run stopped halfway leaves no half entry)."""
        self.root.mkdir(parents=True, exist_ok=True)
        folder = self.root / key
        aside = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.root))
        try:
            replayed.store.copy_to(aside / DATABASE)
            data = {**asdict(replayed.fed), "calls": [asdict(c) for c in calls]}
            (aside / FED).write_text(json.dumps(data), encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(aside, folder)
        except BaseException:
            shutil.rmtree(aside, ignore_errors=True)
            raise
        return folder
