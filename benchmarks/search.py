"""Benchmark 7: full-text search and recall at 1,000 and 100,000 messages, as a ratio.

Each size is a real SQLite file filled through `Store.add_messages` (so the triggers build the
FTS5 indexes as a real store does), in conversations of 1,000 messages: half English, half
Japanese, with word frequencies drawn from a Zipf law over a vocabulary of common words and
names (English) or kanji/kana words (Japanese), so common words are in many messages and rare
ones in few, as in real text. Each query is run REPEATS times after a warm-up; the median is
reported with the number of messages it found. Recall is `Store.recall`: one conversation,
messages older than its newest, ten best (issue 16's per-turn call).
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

from benchmarks.common import BenchResult, Table, median, ratio
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.store import SearchOrder, Store

SIZES = (1_000, 100_000)
CONVERSATION = 1_000  # messages per conversation
REPEATS = 9

_COMMON = [
    "the",
    "and",
    "to",
    "of",
    "a",
    "I",
    "you",
    "it",
    "in",
    "that",
    "is",
    "was",
    "he",
    "she",
    "for",
    "on",
    "with",
    "as",
    "his",
    "her",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "an",
    "which",
    "they",
    "do",
    "if",
    "will",
    "up",
    "about",
    "out",
    "them",
    "then",
    "so",
    "would",
    "my",
    "me",
    "like",
    "time",
    "no",
    "just",
    "him",
    "know",
    "take",
    "people",
    "into",
    "year",
    "good",
    "some",
    "could",
    "see",
    "other",
    "than",
    "now",
    "look",
    "only",
    "come",
    "its",
    "over",
    "think",
    "also",
    "back",
    "after",
    "use",
    "two",
    "how",
    "our",
    "work",
    "first",
    "well",
    "way",
    "even",
    "new",
    "want",
    "because",
    "any",
    "these",
    "give",
    "day",
    "most",
]
_STORY = [
    "lighthouse",
    "storm",
    "harbor",
    "compass",
    "lantern",
    "keeper",
    "ship",
    "sailor",
    "letter",
    "brother",
    "sister",
    "winter",
    "tide",
    "cliff",
    "rope",
    "anchor",
    "village",
    "tea",
    "stove",
    "cat",
    "window",
    "stairs",
    "lamp",
    "oil",
    "map",
    "island",
    "fog",
    "bell",
    "promise",
    "secret",
    "key",
    "door",
    "garden",
    "boat",
    "river",
    "forest",
    "mountain",
    "castle",
    "sword",
    "king",
    "queen",
]
_KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわん"
_KANJI = (
    "東京大阪猫犬海山川空雨雪風花春夏秋冬灯台嵐船港鍵地図宝城王姫夢名前妹兄母父家窓扉光影夜朝星月"
)
_PARTICLES = ("は", "が", "を", "に", "で", "と", "の", "も", "へ")


def _vocabulary(rng: random.Random) -> tuple[list[str], list[str]]:
    english = _COMMON + _STORY + [_pseudo_word(rng) for _ in range(20_000)]
    japanese = [
        "".join(rng.choice(_KANJI) for _ in range(rng.choice((1, 2, 2, 2, 3))))
        + "".join(rng.choice(_KANA) for _ in range(rng.choice((0, 0, 1, 2))))
        for _ in range(6_000)
    ]
    return english, japanese


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnprstvwz") + rng.choice("aeiou") for _ in range(3))


def _zipf_weights(n: int) -> list[float]:
    return [1.0 / (rank + 1) ** 1.07 for rank in range(n)]


class Corpus:
    """Deterministic messages: English lines and Japanese lines, alternating."""

    def __init__(self, seed: int = 19) -> None:
        self.rng = random.Random(seed)
        self.english, self.japanese = _vocabulary(self.rng)
        self.en_weights = list(itertools.accumulate(_zipf_weights(len(self.english))))
        self.ja_weights = list(itertools.accumulate(_zipf_weights(len(self.japanese))))

    def line(self, index: int) -> str:
        rng = self.rng
        if index % 2 == 0:
            words = rng.choices(self.english, cum_weights=self.en_weights, k=rng.randint(8, 40))
            return " ".join(words).capitalize() + "."
        parts = []
        for word in rng.choices(self.japanese, cum_weights=self.ja_weights, k=rng.randint(4, 14)):
            parts.append(word + rng.choice(_PARTICLES))
        return "".join(parts) + "。"


def build(path: Path, n: int) -> tuple[float, int]:
    """A file of `n` messages; returns seconds to fill it and the last conversation's id."""
    path.unlink(missing_ok=True)
    corpus = Corpus()
    messages = [
        Message(
            role=Role.USER if i % 2 == 0 else Role.CHARACTER,
            speaker="Ann" if i % 2 == 0 else "Wren",
            text=corpus.line(i),
        )
        for i in range(n)
    ]
    started = time.perf_counter()
    conv_id = 0
    with Store.open(path) as store:
        for first in range(0, n, CONVERSATION):
            conv = store.create_conversation(
                Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
            )
            conv_id = conv.id
            store.add_messages(conv.id, messages[first : first + CONVERSATION])
    return time.perf_counter() - started, conv_id


# (label, kind, query): kind "search" is Store.search (every term, best first), "newest" the
# same newest first, "recall" Store.recall in the last conversation.
QUERIES = (
    ("English word (story)", "search", "lighthouse"),
    ("English word (common: the)", "search", "the"),
    ("English, two words", "search", "storm harbor"),
    ("English word, newest first", "newest", "lighthouse"),
    ("Japanese, 3+ characters", "search", "東京に"),
    ("Japanese, 2 characters", "search", "灯台"),
    ("Japanese, 1 character", "search", "猫"),
    ("Japanese, 1 kana (の: scanned)", "search", "の"),
    ("one conversation: lighthouse", "conversation", "lighthouse"),
    ("recall, English sentence", "recall", "Do you remember the storm at the lighthouse?"),
    ("recall, Japanese sentence", "recall", "灯台の鍵を覚えていますか"),
)


def _time(store: Store, kind: str, query: str, conv_id: int) -> tuple[float, int]:
    def once() -> int:
        if kind == "recall":
            newest = store.last_message(conv_id)
            assert newest is not None
            return len(store.recall(conv_id, query, newest.id, 10))
        if kind == "conversation":
            return len(store.search(query, conversation_id=conv_id, limit=50))
        order = SearchOrder.NEWEST if kind == "newest" else SearchOrder.RANK
        return len(store.search(query, limit=50, order=order))

    once()
    times = []
    found = 0
    for _ in range(REPEATS):
        started = time.perf_counter()
        found = once()
        times.append((time.perf_counter() - started) * 1000)
    return median(times), found


def measure(path: Path, conv_id: int) -> dict[str, tuple[float, int]]:
    with Store.open(path) as store:
        return {label: _time(store, kind, q, conv_id) for label, kind, q in QUERIES}


async def run() -> BenchResult:
    started = time.perf_counter()
    folder = app_dirs().data / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    built: dict[int, tuple[float, int, float]] = {}
    results: dict[int, dict[str, tuple[float, int]]] = {}
    for n in SIZES:
        path = folder / f"search-{n}.sqlite3"
        seconds, conv_id = build(path, n)
        built[n] = (seconds, conv_id, path.stat().st_size / 1e6)
        results[n] = measure(path, conv_id)
    small, large = SIZES
    table = Table(
        f"7. Search: query time at {small:,} and {large:,} messages",
        (
            "query",
            f"ms at {small:,}",
            f"ms at {large:,}",
            "ratio",
            f"found at {small:,}",
            f"found at {large:,}",
        ),
    )
    for label, _kind, _query in QUERIES:
        (a_ms, a_found), (b_ms, b_found) = results[small][label], results[large][label]
        table.add(label, a_ms, b_ms, ratio(b_ms, a_ms), a_found, b_found)
    table.notes = [
        f"median of {REPEATS} runs after a warm-up; at most 50 results (recall: 10); messages "
        f"in conversations of {CONVERSATION:,}, half English, half Japanese",
        *(
            f"{n:,} messages: filled through Store.add_messages (triggers index them) in "
            f"{seconds:.1f} s; the file is {mb:.1f} MB"
            for n, (seconds, _conv, mb) in built.items()
        ),
    ]
    figures = {
        "sizes": {
            str(n): {label: {"ms": round(ms, 3), "found": hits} for label, (ms, hits) in r.items()}
            for n, r in results.items()
        },
        "build_s": {str(n): round(b[0], 2) for n, b in built.items()},
        "file_mb": {str(n): round(b[2], 1) for n, b in built.items()},
    }
    return BenchResult("search", [table], figures, time.perf_counter() - started)
