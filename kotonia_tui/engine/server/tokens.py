"""Token counts from the server's own tokenizer, cached per text.

A count is exact for llama-server, vLLM and llama-cpp-python's server (their tokenize
endpoints); a server with none gets an estimate that overcounts, which `kotonia doctor` says.
A count is a blocking request.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kotonia_tui.engine.server.http import ServerHttp
from kotonia_tui.engine.server.kinds import OpenAICompatible

CHARS_PER_TOKEN_ESTIMATE = 3.0  # servers with no tokenize endpoint (conservative: overcounts)
CACHE_SIZE = 4096
CACHE_MAX_CHARS = 16384  # whole prompts are not worth keeping


class TokenCache:
    """Least recently used counts, shared by the loop and worker threads."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, text: str) -> int | None:
        with self._lock:
            count = self._counts.get(text)
            if count is not None:
                self._counts.move_to_end(text)
            return count

    def put(self, text: str, count: int) -> None:
        if len(text) > CACHE_MAX_CHARS:
            return
        with self._lock:
            self._counts[text] = count
            self._counts.move_to_end(text)
            while len(self._counts) > self._size:
                self._counts.popitem(last=False)


class TokenCounter:
    """Counts texts as they appear inside a prompt (no BOS) with one server's tokenizer.

    `guard()` runs before every request and raises when the server cannot count now (the
    engine is closed, or counting would cut a user's reply).
    """

    def __init__(
        self,
        http: ServerHttp,
        kind: OpenAICompatible,
        model_id: str,
        guard: Callable[[], None],
    ) -> None:
        self._http = http
        self._kind = kind
        self._model_id = model_id
        self._guard = guard
        self._baseline = kind.detected.tokenize_baseline
        self._cache = TokenCache()

    def count(self, text: str) -> int:
        """One text, with a blocking request on a cache miss."""
        if not text:
            return 0
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        path = self._kind.tokenize_path
        if path is None:
            return self._estimate(text)
        self._guard()
        answer = self._http.json(path, self._http.post(path, self._body(text)))
        return self._record(text, answer)

    def _body(self, text: str) -> dict[str, Any]:
        return self._kind.tokenize_body(text, self._model_id)

    def _record(self, text: str, answer: Any) -> int:
        raw = self._kind.token_count(answer)
        count = max(0, int(raw) - self._baseline)
        self._cache.put(text, count)
        return count

    def _estimate(self, text: str) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)
