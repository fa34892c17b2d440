"""Message vectors for semantic recall: kept by the app's connection, ranked by sqlite-vec.

`message_vectors` (the message vectors schema step) holds one vector per message and embedding
model, as float32 bytes (sqlite-vec's format), with the hash of the text it was computed from.
It is a plain table, so any connection keeps it in step without the extension: a deleted
message takes its vectors with it, and a trigger drops them when the text changes (an edit,
another version chosen, a reply finished). A vector is written only if the message still has
the text it was computed from, and a search keeps only rows whose hash matches the text read
with it: a stale vector is never used.

`model_key` names the embedding model and its dimension, so vectors of two models (or of a
model file replaced by another) never meet in one ranking.

Ranking needs sqlite-vec's `vec_distance_cosine`, loaded into a second, read-only connection
(apsw: many Python builds cannot load SQLite extensions through the standard sqlite3 module).
When that fails, `VectorSearch.open` raises `VectorsUnavailable` with the reason in one line
and recall goes on with the full-text index alone.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import StoreError
from kotonia_tui.store.search import SearchHit, hit_fields

log = logging.getLogger(__name__)

HASH_CHARS = 32


class VectorsUnavailable(Exception):
    """sqlite-vec cannot be used here; the message says why, in one line."""


def text_hash(text: str) -> str:
    """The version of a message's text a vector belongs to."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]


def vector_bytes(vector: Sequence[float]) -> bytes:
    """float32, the machine's byte order (little-endian wherever sqlite-vec builds)."""
    return array("f", vector).tobytes()


@dataclass(frozen=True)
class PendingText:
    """A message without a vector for the current model: what the worker embeds next."""

    message_id: int
    conversation_id: int
    text: str

    @property
    def text_hash(self) -> str:
        return text_hash(self.text)


@dataclass(frozen=True)
class VectorCounts:
    stored: int  # messages with a current vector for the model
    pending: int  # messages with text still to embed


@dataclass(frozen=True)
class Nearest:
    """A stored vector close to the query's (sqlite-vec's cosine distance: 0 is the same)."""

    message_id: int
    text_hash: str
    distance: float


class SimilarHit(SearchHit):
    """A message whose vector is close to the query's; `similarity` is the cosine (1: the
    same direction), `score` the distance (lower is better, like BM25's)."""

    similarity: float


_MISSING = """FROM messages AS m WHERE m.text != '' AND NOT EXISTS (
    SELECT 1 FROM message_vectors AS v WHERE v.message_id = m.id AND v.model_key = ?)"""


def pending(db: Db, model_key: str, limit: int) -> list[PendingText]:
    """Messages with text and no vector for `model_key`, newest first (the turn just stored
    comes before the backfill of older ones)."""
    rows = db.select(
        f"SELECT m.id, m.conversation_id, m.text {_MISSING} ORDER BY m.id DESC LIMIT ?",
        (model_key, limit),
    )
    return [PendingText(r["id"], r["conversation_id"], r["text"]) for r in rows]


def counts(db: Db, model_key: str) -> VectorCounts:
    with db.read():
        stored = db.select_one(
            "SELECT count(*) AS n FROM message_vectors WHERE model_key = ?", (model_key,)
        )
        missing = db.select_one(f"SELECT count(*) AS n {_MISSING}", (model_key,))
    return VectorCounts(
        int(stored["n"]) if stored is not None else 0,
        int(missing["n"]) if missing is not None else 0,
    )


def put(db: Db, model_key: str, items: Sequence[tuple[PendingText, Sequence[float]]]) -> int:
    """Store the vectors whose message still has the text they were computed from (an edit
    while the worker embedded leaves that message pending); returns how many were stored."""
    stored = 0
    with db.write():
        for item, vector in items:
            row = db.select_one(
                "SELECT text, conversation_id FROM messages WHERE id = ?", (item.message_id,)
            )
            if row is None or text_hash(row["text"]) != item.text_hash:
                continue
            db.execute(
                """INSERT INTO message_vectors
                       (message_id, conversation_id, model_key, text_hash, vector)
                   VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (message_id, model_key) DO UPDATE SET
                       text_hash = excluded.text_hash, vector = excluded.vector""",
                (
                    item.message_id,
                    row["conversation_id"],
                    model_key,
                    item.text_hash,
                    vector_bytes(vector),
                ),
            )
            stored += 1
    return stored


def similar_hits(db: Db, nearest: Sequence[Nearest]) -> list[SimilarHit]:
    """The messages `nearest` names, closest first, leaving out any whose text is no longer
    the one its vector was computed from."""
    if not nearest:
        return []
    marks = ", ".join("?" * len(nearest))
    rows = {
        r["id"]: r
        for r in db.select(
            f"""SELECT id, conversation_id, role, speaker, text, created_at FROM messages
                WHERE id IN ({marks})""",
            [n.message_id for n in nearest],
        )
    }
    hits = []
    for near in nearest:
        row = rows.get(near.message_id)
        if row is None or text_hash(row["text"]) != near.text_hash:
            continue
        with db.decoding(f"message {near.message_id}"):
            hits.append(
                SimilarHit(**hit_fields(row), score=near.distance, similarity=1 - near.distance)
            )
    return hits


class VectorSearch:
    """A read-only connection to the store's file with sqlite-vec loaded."""

    def __init__(self, conn: Any, errors: type[Exception]) -> None:
        self._conn: Any | None = conn
        self._errors = errors  # apsw.Error
        # A search runs on a worker thread; the store may close meanwhile (the app quitting).
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, busy_timeout_s: float) -> VectorSearch:
        try:
            import apsw
            import sqlite_vec
        except ImportError as exc:
            raise VectorsUnavailable(f"sqlite-vec is not installed ({exc})") from exc
        return cls.open_with(path, busy_timeout_s, Path(sqlite_vec.loadable_path()), apsw)

    @classmethod
    def open_with(
        cls, path: Path, busy_timeout_s: float, extension: Path, apsw: Any
    ) -> VectorSearch:
        """Open with the extension file at `extension` (a test names one that cannot load)."""
        conn = None
        try:
            conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            conn.set_busy_timeout(int(busy_timeout_s * 1000))
            conn.enable_load_extension(True)
            conn.load_extension(str(extension))
            conn.enable_load_extension(False)
            version = conn.execute("SELECT vec_version()").fetchone()[0]
        except apsw.Error as exc:
            if conn is not None:
                conn.close()
            detail = " ".join(str(exc).split())
            raise VectorsUnavailable(f"sqlite-vec cannot be loaded ({detail})") from exc
        log.info("sqlite-vec %s loaded for %s", version, path)
        return cls(conn, apsw.Error)

    def nearest(
        self, model_key: str, conversation_id: int, query: Sequence[float], before_id: int, k: int
    ) -> list[Nearest]:
        """The `k` vectors of one conversation's messages older than `before_id` closest to
        `query`, closest first (an exact scan of that conversation's vectors)."""
        with self._lock:
            if self._conn is None:
                raise StoreError("vector search: the database was closed")
            try:
                rows = self._conn.execute(
                    """SELECT message_id, text_hash, vec_distance_cosine(vector, ?) AS d
                       FROM message_vectors
                       WHERE model_key = ? AND conversation_id = ? AND message_id < ?
                       ORDER BY d, message_id DESC LIMIT ?""",
                    (vector_bytes(query), model_key, conversation_id, before_id, k),
                ).fetchall()
            except self._errors as exc:
                detail = " ".join(str(exc).split())
                raise StoreError(f"vector search failed: {detail}") from exc
        return [Nearest(int(r[0]), str(r[1]), float(r[2])) for r in rows]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
