"""Token counts from the server's own tokenizer, cached per text.

A count is exact for llama-server, vLLM and llama-cpp-python's server (their tokenize
endpoints); a server with none gets an estimate that overcounts, which `kotonia doctor` says.
One text is counted with a blocking request (a caller on the event loop should not); many are
counted with concurrent requests on the running loop (`count_many`), so a fold that costs
thousands of messages never holds the loop while the server answers.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from kotonia_tui.engine.server.gate import ReplyFence
from kotonia_tui.engine.server.http import ServerHttp, not_the_answer
from kotonia_tui.engine.server.kinds import OpenAICompatible

CHARS_PER_TOKEN_ESTIMATE = 3.0  # servers with no tokenize endpoint (conservative: overcounts)
CACHE_SIZE = 4096
CACHE_MAX_CHARS = 16384  # whole prompts are not worth keeping
CONCURRENT_REQUESTS = 4  # a batch's requests in flight at once


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

    Every request goes through `fence.counting()`, which refuses it when the server cannot
    count now (the engine is closed, or counting would cut a user's reply).
    """

    def __init__(
        self, http: ServerHttp, kind: OpenAICompatible, model_id: str, fence: ReplyFence
    ) -> None:
        self._http = http
        self._kind = kind
        self._model_id = model_id
        self._fence = fence
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
        with self._fence.counting():
            answer = self._http.json(path, self._http.post(path, self._body(text)))
        return self._record(text, answer)

    async def count_many(self, texts: Sequence[str]) -> list[int]:
        """Many texts, in order: cache misses are counted by concurrent requests on the loop."""
        path = self._kind.tokenize_path
        if path is None:
            return [self._estimate(t) if t else 0 for t in texts]
        # Known counts are taken now: a large batch may push them out of the cache meanwhile.
        counted: dict[str, int] = {"": 0}
        missing = []
        for text in dict.fromkeys(texts):
            known = self._cache.get(text) if text else 0
            if known is None:
                missing.append(text)
            else:
                counted[text] = known
        if missing:
            queue = iter(missing)
            async with self._http.async_client() as client:

                async def worker() -> None:
                    for text in queue:  # shared: each text is taken by one worker
                        with self._fence.counting():
                            answer = await self._http.apost(client, path, self._body(text))
                        counted[text] = self._record(text, answer)

                workers = [
                    asyncio.ensure_future(worker())
                    for _ in range(min(CONCURRENT_REQUESTS, len(missing)))
                ]
                try:
                    await asyncio.gather(*workers)
                finally:
                    for task in workers:  # one failed: the others stop too
                        task.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
        return [counted[t] for t in texts]

    def _body(self, text: str) -> dict[str, Any]:
        return self._kind.tokenize_body(text, self._model_id)

    def _record(self, text: str, answer: Any) -> int:
        raw = self._kind.token_count(answer)
        if raw is None:
            where = self._http.where(self._kind.tokenize_path or "")
            raise not_the_answer(where, "a token count", answer)
        count = max(0, raw - self._baseline)
        self._cache.put(text, count)
        return count

    def _estimate(self, text: str) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)
