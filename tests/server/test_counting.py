"""Token counting on the server backend never blocks the event loop.

A count is an HTTP request to the server's tokenizer. A fold costs every message of its range
(up to 4,000) and a turn every new message of its window: those go as one batch of concurrent
requests on the loop (`count_tokens_many`), so the UI keeps running meanwhile. The tests watch
the loop from a concurrent task and record every blocking count (`count_tokens`,
`prompt_cells`) that is made on the loop's own thread; there must be none. The longest stall
the watcher saw is printed for the record (timings are not asserted: this machine is shared).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from kotonia_tui.domain import ChatMessage, FoldJob, FoldKind, Message, Role, utcnow
from kotonia_tui.engine.errors import BackendUnavailableError
from kotonia_tui.engine.server import ServerEngine
from kotonia_tui.engine.server.tokens import TokenCache
from kotonia_tui.engine.types import FinishReason, GenerationRequest
from tests.cards import write_short_card

from .conftest import poll, server_profile, server_settings


class LoopWatch:
    """A task that runs every millisecond while the loop lets it, and a record of blocking
    token counts made on the loop's thread."""

    def __init__(self) -> None:
        self.ticks = 0
        self.longest_stall_ms = 0.0
        self.blocking_on_loop: list[str] = []
        self._thread = threading.get_ident()
        self._task: asyncio.Task[None] | None = None

    def spy_on(self, engine: ServerEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("count_tokens", "prompt_cells"):
            real = getattr(engine, name)

            def spy(*args, _real=real, _name=name):
                if threading.get_ident() == self._thread:
                    self.blocking_on_loop.append(_name)
                return _real(*args)

            monkeypatch.setattr(engine, name, spy)

    async def _watch(self, since: float) -> None:
        last = since  # from the watch's start: the task may first run after a stall
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest_stall_ms = max(self.longest_stall_ms, (now - last) * 1000)
            self.ticks += 1
            last = now

    def __enter__(self) -> LoopWatch:
        watch = self._watch(time.perf_counter())
        self._task = asyncio.get_running_loop().create_task(watch)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def story(count: int) -> list[Message]:
    return [
        Message(
            role=Role.USER if i % 2 == 0 else Role.CHARACTER,
            speaker="User" if i % 2 == 0 else "Wren",
            text=f"Line {i}: the lamp on the {i % 7}th landing needs oil before the storm.",
        )
        for i in range(count)
    ]


async def test_a_batch_is_counted_exactly_while_the_loop_runs(scripted_server, local_tokenizer):
    engine = ServerEngine.open(server_profile(scripted_server.url))
    texts = [m.text for m in story(400)] + ["", "月島 tea", "Line 0: again"] * 2
    try:
        with LoopWatch() as watch:
            counts = await engine.count_tokens_many(texts)
            ticks_while_counting = watch.ticks
        print(f"\n400 texts: the loop ran {ticks_while_counting} times while they were counted")
        assert counts == [local_tokenizer.count_tokens(t) for t in texts]
        assert ticks_while_counting > 0  # a blocking batch leaves the loop no turn at all
        # Counted once: a second batch is answered from the cache.
        assert await engine.count_tokens_many(texts[:50]) == counts[:50]
    finally:
        engine.close()


async def test_a_batch_larger_than_the_cache_makes_no_blocking_request(
    scripted_server, local_tokenizer, monkeypatch
):
    """Counts known when a batch starts are kept for it, even if the batch pushes them out of
    the cache (a small cache here stands in for a fold of more texts than the cache holds)."""
    engine = ServerEngine.open(server_profile(scripted_server.url))
    engine._tokens._cache = TokenCache(size=50)
    texts = [m.text for m in story(120)]
    try:
        known = await engine.count_tokens_many(texts[:10])
        blocking = []
        monkeypatch.setattr(engine._tokens, "count", lambda text: blocking.append(text))
        counts = await engine.count_tokens_many(texts)
        assert counts[:10] == known and blocking == []
        assert counts == [local_tokenizer.count_tokens(t) for t in texts]
    finally:
        engine.close()


async def test_counts_never_cut_a_users_reply_on_llama_cpp_python(noeos_server):
    """That server ends the stream it is sending whenever another request arrives. Counts
    come from the loop (a fold's batch) and from threads (a prompt's size) at any moment; none
    may reach the server while a user's reply streams, or the reply is cut."""
    engine = ServerEngine.open(server_profile(noeos_server.url))
    stop = threading.Event()
    refused = []

    def count_in_a_thread() -> None:
        for index in itertools.count():
            if stop.is_set():
                return
            try:
                engine.count_tokens(f"the lamp on landing {index}")
            except BackendUnavailableError:
                refused.append(index)  # while a reply streams: the caller retries later

    counters = [threading.Thread(target=count_in_a_thread) for _ in range(3)]
    for counter in counters:
        counter.start()
    try:
        batch = asyncio.ensure_future(engine.count_tokens_many([m.text for m in story(3000)]))
        ask = (ChatMessage("user", "Is the lamp lit?", name="Ann"),)
        for _ in range(15):
            reply = await engine.generate(GenerationRequest(messages=ask, max_tokens=24))
            assert reply.finish_reason is FinishReason.LENGTH  # its cap: not cut by a count
        with pytest.raises(BackendUnavailableError, match="busy with a reply"):
            await batch  # refused while a reply streamed: the fold worker retries later
        assert refused
    finally:
        stop.set()
        for counter in counters:
            counter.join(10)
        engine.close()


async def watched_story(make_service, url, monkeypatch, length):
    """A service on the server, a conversation with `length` uncounted messages (as after an
    import), the fold worker paused, and a watch on the service's engine."""
    key = write_short_card()
    service = await make_service(server_settings(url, n_ctx=2048))
    conv = service.new_conversation(service.library.get(key))
    ids = service.store.add_messages(conv.id, story(length))
    service.worker.pause()
    watch = LoopWatch()
    watch.spy_on(service.engine, monkeypatch)
    return service, conv, ids, watch


@pytest.mark.slow
async def test_a_fold_over_many_messages_never_counts_on_the_loop(
    make_service, scripted_server, monkeypatch
):
    service, conv, ids, watch = await watched_story(
        make_service, scripted_server.url, monkeypatch, 1500
    )
    service.store.enqueue_fold(
        FoldJob(
            conversation_id=conv.id,
            kind=FoldKind.CHAPTER,
            first_message_id=ids[0],
            last_message_id=ids[-1],
            not_before=utcnow(),
        )
    )
    with watch:
        service.worker.resume()
        await poll(lambda: service.store.chapters(conv.id), timeout_s=120)
        service.worker.pause()
    print(
        f"\nfold over 1500 messages: longest loop stall {watch.longest_stall_ms:.0f} ms, "
        f"blocking counts on the loop: {len(watch.blocking_on_loop)}"
    )
    assert watch.blocking_on_loop == []


@pytest.mark.slow
async def test_sending_into_a_long_uncounted_history_never_counts_on_the_loop(
    make_service, scripted_server, monkeypatch
):
    service, conv, _ids, watch = await watched_story(
        make_service, scripted_server.url, monkeypatch, 600
    )
    with watch:
        turn = await service.send(conv.id, "Is the lamp lit?")
        ticks_in_send = watch.ticks
        done = await turn.wait()
    print(
        f"\nsend into 600 uncounted messages: longest loop stall "
        f"{watch.longest_stall_ms:.0f} ms, blocking counts on the loop: "
        f"{len(watch.blocking_on_loop)}"
    )
    assert done.error is None, done.error
    assert watch.blocking_on_loop == []
    assert ticks_in_send > 0
    key = service.engine.model_key
    counted = service.store.recent_messages(conv.id, 50, model_key=key)[:-1]  # not the reply
    assert all(key in m.token_counts for m in counted)
