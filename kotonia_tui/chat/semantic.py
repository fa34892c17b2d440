"""Semantic recall: the embedding model, the background worker that embeds messages, its state.

With `semantic_recall` on (the default), every stored message gets a vector (store/vectors.py)
from the profile's embedding GGUF (`embedding_model_path`, or the shipped all-MiniLM-L6-v2:
engine/default_embedding.py), and recall also finds archived messages similar in meaning to
the latest lines (chat/recall.py fuses both rankings). The vectors are computed here, in the
background:

- after each turn (the service wakes the worker when a reply is stored, a message is edited,
  another version chosen or a message deleted), the newest messages without a vector first;
- for messages stored before (an existing archive, an import, another process), a backfill in
  small batches that goes on until none is left and resumes after a restart, since the vector
  rows themselves say what is done;
- never while a turn runs: the worker waits until the turn has ended, and embeds one message
  at a time on its own thread, so a turn that starts meanwhile waits for one message at most.

When the model is missing or cannot be loaded, or sqlite-vec cannot be loaded, nothing is
embedded, recall uses the full-text index alone, and `status` says why in one line (the log,
the first turn's notice, `kotonia doctor`). With `semantic_recall = false` nothing here runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kotonia_tui.chat.background import cancel_and_wait
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.engine import EngineClosedError, EngineError, ModelFileError
from kotonia_tui.engine.default_embedding import (
    MODEL_NAME,
    default_embedding_path,
    discard_converted,
)
from kotonia_tui.engine.default_model import Progress
from kotonia_tui.store import Store, StoreError, VectorCounts

if TYPE_CHECKING:
    from kotonia_tui.engine import EmbeddingEngine

log = logging.getLogger(__name__)

BATCH = 16  # messages read per pending query; written together
BUSY_POLL_S = 0.2  # how often a waiting worker looks whether the turn has ended
IDLE_POLL_S = 30.0  # with nothing to do: look for messages stored by another process
RETRY_S = 5.0  # after a database error


def _load(path: Path, threads: int = 1) -> tuple[EmbeddingEngine | None, str | None]:
    from kotonia_tui.engine import EmbeddingEngine  # llama_cpp loads only when it is needed

    try:
        return EmbeddingEngine.open(path, threads=threads), None
    except (ModelFileError, EngineError) as exc:
        return None, str(exc)


def open_embedding_model(
    settings: Settings, progress: Progress | None = None
) -> tuple[EmbeddingEngine | None, Path, str | None]:
    """The embedding model semantic recall uses (blocking): the profile's
    `embedding_model_path`, or the shipped one, converted first if needed. Returns the loaded
    model (None when it cannot be had), its path (the shipped model's name before it has
    one) and why it cannot be had (None when loaded)."""
    path = settings.active_profile().embedding_model_path
    if path is not None:
        embedder, problem = _load(path)
        return embedder, path, problem
    cache = app_dirs().cache
    problem = None
    for _attempt in range(2):
        try:
            path = default_embedding_path(cache, progress)
        except ModelFileError as exc:
            return None, Path(MODEL_NAME), str(exc)
        embedder, problem = _load(path)
        if embedder is not None:
            return embedder, path, None
        # The converted copy does not load (damaged since it was written): convert again,
        # once; a fresh copy that fails too says why.
        discard_converted(cache)
    return None, path or Path(MODEL_NAME), problem


class SemanticRecall:
    """Semantic recall for one store: on (`active`), off (`semantic_recall = false`) or
    unavailable (`problem` says why)."""

    def __init__(
        self,
        store: Store,
        embedder: EmbeddingEngine | None = None,
        *,
        configured: Path | None = None,
        problem: str | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.configured = configured
        self.problem = problem
        if embedder is not None and problem is None:
            unavailable = store.vector_search_unavailable()
            if unavailable is not None:
                self.problem = unavailable
        self._busy: Callable[[], bool] = lambda: False
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._noticed = False
        self._failed: set[int] = set()  # messages the model could not embed (this session)

    @classmethod
    def from_settings(
        cls, store: Store, settings: Settings, progress: Progress | None = None
    ) -> SemanticRecall:
        """Semantic recall as the settings ask for it (blocking: the shipped model may be
        converted first, in about a second); off with `semantic_recall = false`. A model that
        cannot be had leaves semantic recall unavailable, with the reason; it never stops the
        app."""
        if not settings.semantic_recall:
            return cls(store)
        embedder, path, problem = open_embedding_model(settings, progress)
        return cls._with(store, embedder, path, problem)

    @classmethod
    def open(cls, store: Store, model_path: Path, *, threads: int = 1) -> SemanticRecall:
        """Semantic recall with the embedding GGUF at `model_path` (blocking)."""
        embedder, problem = _load(model_path, threads)
        return cls._with(store, embedder, model_path, problem)

    @classmethod
    def _with(
        cls, store: Store, embedder: EmbeddingEngine | None, path: Path, problem: str | None
    ) -> SemanticRecall:
        recall = cls(store, embedder, configured=path, problem=problem)
        if recall.problem is not None:  # the model's, or sqlite-vec's (checked in __init__)
            log.warning("semantic recall unavailable: %s", recall.problem)
        return recall

    @property
    def active(self) -> bool:
        """Vectors are computed and used: a model loaded and sqlite-vec available."""
        return self.embedder is not None and self.problem is None

    @property
    def model_key(self) -> str:
        return self.embedder.model_key if self.embedder is not None else ""

    @property
    def status(self) -> str:
        """One line: what semantic recall is doing and, when it cannot, why."""
        if self.configured is None:
            return "off (semantic_recall = false): recall matches words only"
        if self.active and self.embedder is not None:
            return (
                f"on: {self.embedder.path.name}, dimension {self.embedder.dimension}; recall "
                "matches words and meaning"
            )
        return f"unavailable, recall matches words only: {self.problem}"

    @property
    def matches_by(self) -> str:
        """What recall matches by, shorter than `status` (the inspector's Recall section)."""
        if self.configured is None:
            return "words (semantic_recall = false)"
        if self.active and self.embedder is not None:
            return f"words and meaning ({self.embedder.path.name})"
        return f"words: semantic recall is unavailable ({self.problem})"

    def notice_once(self) -> str | None:
        """The status to show once, on the first turn, when the setting cannot be honoured."""
        if self.configured is None or self.active or self._noticed:
            return None
        self._noticed = True
        return f"semantic recall {self.status}"

    def counts(self) -> VectorCounts | None:
        return self.store.vector_counts(self.model_key) if self.embedder is not None else None

    async def query_vector(self, text: str) -> list[float] | None:
        """The vector of a turn's recall query (None when semantic recall is not active)."""
        if not self.active or self.embedder is None or not text.strip():
            return None
        try:
            return await self.embedder.embed_async(text)
        except EngineError as exc:
            log.warning("semantic recall skipped this turn: %s", exc)
            return None

    # ---- the background worker ------------------------------------------------------------

    def start(self, busy: Callable[[], bool]) -> None:
        """Embed what is pending, in the background, pausing while `busy()` (a turn runs)."""
        if not self.active or self._task is not None:
            return
        self._busy = busy
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kotonia-embeddings")

    def wake(self) -> None:
        """Something was stored or changed: look for messages to embed now."""
        if self._task is not None:
            self._settled.clear()
            self._wake.set()

    async def settled(self) -> None:
        """Wait until nothing is left to embed (tests, benchmarks, `chat --say` at exit)."""
        if self._task is not None and not self._task.done():
            await self._settled.wait()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self.embedder is not None:
            await asyncio.to_thread(self.embedder.close)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE_POLL_S):  # not wait_for: chat/fold/wait.py
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._embed_pending()
            except EngineClosedError:
                return
            except StoreError as exc:
                log.warning("embedding messages paused: %s", exc)
                await asyncio.sleep(RETRY_S)
                self._wake.set()

    async def _embed_pending(self) -> None:
        embedder = self.embedder
        assert embedder is not None
        key = embedder.model_key
        while True:
            while self._busy():
                await asyncio.sleep(BUSY_POLL_S)
            # Off the event loop: with every message embedded, this read still walks the
            # message ids (tens of ms at 100,000), and the UI must not stall for it.
            pending = await asyncio.to_thread(
                self.store.vectors_pending, key, BATCH + len(self._failed)
            )
            batch = [item for item in pending if item.message_id not in self._failed][:BATCH]
            if not batch:
                # Settled only if nothing was stored since the read began: a wake() during
                # it cleared the flag for messages this read may not have seen, and the next
                # round (the wake is set) reads again.
                if not self._wake.is_set():
                    self._settled.set()
                return
            done = []
            for item in batch:
                if self._busy():
                    break  # a turn started: store what is done, wait for it to end
                try:
                    done.append((item, await embedder.embed_async(item.text)))
                except EngineClosedError:
                    raise
                except Exception as exc:  # one message llama.cpp cannot embed: skip it
                    log.warning("message %s cannot be embedded: %s", item.message_id, exc)
                    self._failed.add(item.message_id)
            if done:
                stored = await asyncio.to_thread(self.store.put_vectors, key, done)
                log.debug("embedded %s messages (%s stored)", len(done), stored)
