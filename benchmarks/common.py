"""Shared helpers for the benchmarks: an isolated home, settings, a small card, tables, RSS.

Every benchmark runs in one temporary KOTONIA_HOME (set by `__main__` before anything opens), so
no benchmark touches the user's config, data or model cache. The tiny GGUF writers come from
tests/tiny_models.py and the settings from tests/settings.py (`gguf` and `numpy` are the app's
own dependencies; `make bench` installs the `test` extra as well).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kotonia_tui.config import app_dirs
from tests.settings import default_model_settings, tiny_settings

__all__ = ["default_model_settings", "tiny_settings"]

# A short card: the benchmarks measure the memory and the engine, not a long setup.
CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Wren",
        "description": (
            "Wren keeps the old lighthouse on a stormy northern coast. She is calm, dry-witted "
            "and kind, and she remembers every ship that passed."
        ),
        "personality": "calm, patient, curious",
        "scenario": "{{user}} arrives at the lighthouse during a long winter storm.",
        "first_mes": '*Wren looks up from the lamp.* "Welcome to the lighthouse. Tea?"',
        "mes_example": "",
    },
}
CARD_KEY = "wren"

# What the user says, cycled: varied enough that the story moves and the chapters differ.
USER_LINES = (
    "I shake the snow off my coat and thank you for the tea.",
    "How long have you kept this lighthouse?",
    "Tell me about the ship that sank in the autumn storm.",
    "I notice a brass compass on the shelf. Whose was it?",
    "My name is Ann, and I came here looking for my brother.",
    "He was a sailor on the Grey Heron. Did you ever see it?",
    "I look out of the window at the dark sea.",
    "Do you ever get lonely up here?",
    "I help you carry the oil up the stairs.",
    "What do the villagers say about the lighthouse?",
    "I show you the letter my brother wrote last spring.",
    "Can we climb to the lamp room tonight?",
    "I ask if the storm will pass by morning.",
    "Tell me a story your father told you.",
    "I sit by the fire and warm my hands.",
    "Why did you keep the compass all these years?",
    "I promise to stay until the storm is over.",
    "What is the name of the cat sleeping by the stove?",
)


def user_line(index: int) -> str:
    return f"{USER_LINES[index % len(USER_LINES)]} ({index})"


def write_card() -> str:
    """The benchmark card in the user's folder of the current KOTONIA_HOME; returns its key."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CARD_KEY}.json").write_text(json.dumps(CARD), encoding="utf-8")
    return CARD_KEY


def rss_kib() -> int:
    """Resident memory of this process (VmRSS) in KiB; psutil is not a dependency."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def median(values: Iterable[float]) -> float:
    items = list(values)
    return float(statistics.median(items)) if items else 0.0


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000


@dataclass
class Table:
    """A printed table: a title, column names, rows, and notes under it."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *row: Any) -> None:
        self.rows.append(row)

    def render(self) -> str:
        cells = [[_fmt(c) for c in self.columns]] + [[_fmt(c) for c in r] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [self.title, "=" * len(self.title)]
        for index, row in enumerate(cells):
            lines.append(
                "  ".join(
                    c.rjust(w) if i else c.ljust(w)
                    for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
            if index == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines += [f"  * {note}" for note in self.notes]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "notes": self.notes,
        }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@dataclass
class BenchResult:
    """What one benchmark hands back: its tables and the figures for the JSON file."""

    name: str
    tables: list[Table]
    figures: dict[str, Any]
    seconds: float = 0.0
