"""Replays kept on disk, so a question-time change is measured without folding again.

A replay with folds spends minutes of model time writing chapters (10-15 min for a 400-message
dataset at n_ctx 2048 on 2 cores); asking the questions takes seconds. A change to how the
questions are answered (recall, the evidence count, the questions themselves) leaves the replay
as it was, so `kotonia eval --replay-cache DIR` keeps each replay's database and what fed it
under a key, and a later run with the same key opens that copy instead of feeding the
conversation again.

The key is a hash of everything that decides the replay: the conversation's messages, its
character and user (not its questions), the card, the settings, the model (file name and size,
window) and its profile (the run's seed), the llama-cpp-python version, and the source of every
module of the package except those that only run once the replay is done or never write what
it keeps (`QUESTION_TIME`: the recall modules read the store and plan nothing the store keeps;
the evaluation's own modules past the replay; the TUI and the CLI). Any other change to the
code is a new key, so a stale replay is never reused; the cost of a wrong entry in
`QUESTION_TIME` would be a replay that no longer matches the code, which is why the list is
short and each entry says why.

Only a replay that can be drawn again is kept: without a fixed seed the chronicler samples
anew each run (K runs are K draws), so `ReplayCache.usable` says why it is not used. The model
calls the replay made (the chronicler's, which the audit reads) are kept with it and put back
in the meter, so a reused replay reports the same fold figures as the run that made it (the
run's `replay_reused` names the folder). A kept entry that cannot be read is a miss (the run
replays, with a warning); one that cannot be written leaves the run going, with a warning.
Two runs keeping the same key: the first one kept stays.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from kotonia_tui.characters import CharacterCard
from kotonia_tui.config import Settings
from kotonia_tui.engine import Engine, llama_cpp_version
from kotonia_tui.eval.dataset import EvalConversation
from kotonia_tui.eval.meter import CallRecord
from kotonia_tui.eval.replay import Fed, Replay, StoredReplay, eval_settings
from kotonia_tui.eval.results import FoldEvent
from kotonia_tui.store import Store, StoreError

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
    # The report's records: the events a replay keeps are read back field by field (a record
    # that changed shape is an entry that cannot be read: replayed).
    "eval/results.py",
    # The input's readers: what the replay is fed (the messages, the character, the user) is
    # itself part of the key, so a reader's change to it is too; its questions are not.
    "eval/dataset.py",
    "eval/locomo.py",
    "eval/longmemeval.py",
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

    def __init__(self, root: Path, warn: Callable[[str], None] = log.warning) -> None:
        self.root = root
        self.warn = warn  # a kept replay that cannot be read or written (the run goes on)

    @staticmethod
    def usable(engine: Engine) -> str | None:
        """Why a replay with this engine cannot be kept or reused (None: it can)."""
        if engine.profile.seed is None:
            return "no fixed seed: each run draws its chapters anew (give --seed)"
        return None

    def key(
        self,
        conv: EvalConversation,
        card: CharacterCard | None,
        settings: Settings,
        engine: Engine,
        *,
        folds: bool,
    ) -> str:
        card = card or conv.character.card()
        described = {
            "format": FORMAT,
            # What is fed; the questions, threads and notes are read only after the replay.
            "conversation": conv.model_dump(
                mode="json", include={"title", "character", "user", "messages"}
            ),
            # As the replay writes the card (its picture is not part of it).
            "card": {"key": card.key, "json": card.to_json_dict()},
            "settings": eval_settings(settings, conv).model_dump(mode="json"),
            "model": engine.model_key,
            "n_ctx": engine.n_ctx,
            "profile": engine.profile.model_dump(mode="json"),  # the run's seed is here
            "folds": folds,
            "llama_cpp_python": llama_cpp_version(),
            "source": source_digest(),
        }
        text = json.dumps(described, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def load(self, key: str) -> tuple[StoredReplay, list[CallRecord]] | None:
        """The replay kept under `key` and the model calls it made; None when there is none
        or it cannot be read (then it is removed, with a warning: the run replays and keeps
        its own)."""
        folder = self.root / key
        database, fed_file = folder / DATABASE, folder / FED
        if not folder.exists():
            return None
        try:
            data = json.loads(fed_file.read_text(encoding="utf-8"))
            fed = Fed(
                conv_id=int(data["conv_id"]),
                to_stored={int(k): int(v) for k, v in data["to_stored"].items()},
                to_source={int(k): int(v) for k, v in data["to_source"].items()},
                boundaries=[int(i) for i in data["boundaries"]],
                forced=[int(i) for i in data["forced"]],
                applied=int(data["applied"]),
                events=[FoldEvent(**e) for e in data["events"]],
            )
            calls = [CallRecord(**c) for c in data["calls"]]
            with Store.open(database, read_only=True) as kept:
                problems = kept.integrity_check()
        except (OSError, ValueError, TypeError, KeyError, StoreError) as exc:
            problems = str(exc)
        else:
            if problems == "ok":
                return StoredReplay(database=database, fed=fed), calls
        # Set aside, so that this run keeps its replay in its place.
        self.warn(f"the kept replay {folder} cannot be read ({problems}): replaying")
        shutil.rmtree(folder, ignore_errors=True)
        return None

    def save(self, key: str, replayed: Replay, calls: list[CallRecord]) -> Path | None:
        """Keep the replay's database and what fed it under `key`: written aside, then renamed
        into place, so a run stopped halfway leaves no half entry. Returns the folder, or None
        when it was not kept (an entry already there stays; a failure to write is logged)."""
        folder = self.root / key
        aside: Path | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if folder.exists():
                return None
            aside = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.root))
            replayed.store.copy_to(aside / DATABASE)
            data = {**asdict(replayed.fed), "calls": [asdict(c) for c in calls]}
            (aside / FED).write_text(json.dumps(data), encoding="utf-8")
            aside.rename(folder)  # fails when another run kept the same key first
        except (OSError, StoreError) as exc:
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
            if folder.exists():
                return None
            self.warn(f"the replay could not be kept in {folder}: {exc}")
            return None
        return folder
