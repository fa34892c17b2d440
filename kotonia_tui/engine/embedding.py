"""The embedding engine: an embedding GGUF loaded in-process for semantic recall's vectors.

Apart from the chat model: its own llama.cpp context (`EMBEDDING_CTX` positions) and one CPU
thread by default. It never runs beside a reply: each piece of text waits while a reply is
being made, and a reply that starts waits for the piece in progress (foreground.py); the
worker in chat/ also pauses between messages while a turn runs. One text is embedded at a
time under a lock: a turn's query waits for at most one archived message, never for a whole
batch.

A vector is the model's pooled output (its own pooling; the mean of the token vectors for a
model without one), normalised to length 1. A text longer than the context is embedded in
pieces whose vectors are averaged: nothing is left out of it. `model_key` names the file (its
fingerprint) and the dimension, so vectors of another model never mix with these.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from kotonia_tui.engine import native_logs
from kotonia_tui.engine.embedding_key import embedding_key
from kotonia_tui.engine.errors import EngineClosedError, ModelFileError
from kotonia_tui.engine.foreground import EMBEDDING, FOREGROUND
from kotonia_tui.engine.llama_engine import _templates_left_alone
from kotonia_tui.engine.model_files import check_gguf, model_facts
from kotonia_tui.engine.native_logs import quiet_python_prints
from kotonia_tui.engine.weight_layout import plain_weights_on_amx

log = logging.getLogger(__name__)

EMBEDDING_CTX = 512  # positions per piece: a message or more in one call, a small KV cache
PIECE_MARGIN = 8  # room for the BOS/EOS and separator tokens the model adds to a piece


class EmbeddingEngine:
    """One embedding model; `embed` is thread-safe (one text at a time)."""

    def __init__(self, path: Path, llama: Any, load_ms: float) -> None:
        self.path = path
        self._llama: Any = llama
        self._lock = threading.Lock()
        self.dimension = int(llama.n_embd())
        self.n_ctx = int(llama.n_ctx())
        self.load_ms = load_ms
        self.model_key = embedding_key(path, self.dimension)

    @classmethod
    def open(cls, path: Path, *, threads: int = 1) -> EmbeddingEngine:
        """Check and load the file (blocking); `ModelFileError` names it when it cannot be."""
        native_logs.install()
        facts = model_facts(path, check_gguf(path, "embedding model"))
        n_ctx = min(EMBEDDING_CTX, facts.n_ctx_train or EMBEDDING_CTX)
        started = time.perf_counter()
        try:
            # verbose=True for the same reason as the chat model (llama_engine.py): False
            # points the process's terminal at /dev/null while the file loads.
            with _templates_left_alone(), quiet_python_prints(), plain_weights_on_amx():
                llama = llama_cpp.Llama(
                    model_path=str(path),
                    embedding=True,
                    n_ctx=n_ctx,
                    n_batch=n_ctx,
                    n_ubatch=n_ctx,
                    n_threads=threads,
                    n_threads_batch=threads,
                    n_gpu_layers=0,
                    verbose=True,
                )
            llama.verbose = False
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelFileError(
                f"{path}: llama.cpp could not load this embedding model ({exc}); check that "
                "it is a complete GGUF for a supported architecture"
            ) from exc
        engine = cls(path, llama, (time.perf_counter() - started) * 1000)
        log.info(
            "embedding model %s loaded: dimension %s, %s positions, %.0f ms",
            path.name,
            engine.dimension,
            engine.n_ctx,
            engine.load_ms,
        )
        return engine

    def embed(self, text: str) -> list[float]:
        """The unit vector of `text` (blocking; waits while another text is embedded)."""
        with self._lock:
            llama = self._llama
            if llama is None:
                raise EngineClosedError("the embedding model is closed")
            vectors = []
            for piece in self._pieces(llama, text):
                with FOREGROUND.background(EMBEDDING):
                    vectors.append(_pooled(llama.embed(piece, truncate=False)))
        return _unit([sum(column) / len(vectors) for column in zip(*vectors, strict=True)])

    async def embed_async(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed, text)

    def _pieces(self, llama: Any, text: str) -> list[str]:
        tokens = llama.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False)
        size = max(1, self.n_ctx - PIECE_MARGIN)
        if len(tokens) <= size:
            return [text]
        return [
            llama.detokenize(tokens[start : start + size]).decode("utf-8", "replace")
            for start in range(0, len(tokens), size)
        ]

    def close(self) -> None:
        with self._lock:
            llama, self._llama = self._llama, None
        if llama is not None:
            llama.close()


def _pooled(output: Any) -> list[float]:
    """One vector: the model's pooled output, or the mean of its token vectors."""
    if output and isinstance(output[0], list):
        return [sum(column) / len(output) for column in zip(*output, strict=True)]
    return [float(x) for x in output]


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)
