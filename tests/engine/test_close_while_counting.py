"""Closing the engine while another thread counts tokens (lorebook matching and long-message
folds count on worker threads): the model is freed after the count, never under it, and a count
after close is a clear error instead of a read of freed memory (which aborts the process)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kotonia_tui.engine import EngineError
from tests.engine.test_engine import open_engine


def test_close_waits_for_counts_in_flight_and_later_counts_fail_cleanly(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    engine = open_engine(tmp_path, tiny_model_path)
    text = "the lighthouse keeper counts the waves " * 2000
    counting = threading.Event()
    counts: list[int] = []
    errors: list[BaseException] = []

    def count_until_closed() -> None:
        try:
            while True:
                counts.append(engine.count_tokens(text))
                counting.set()
        except EngineError as exc:
            errors.append(exc)

    worker = threading.Thread(target=count_until_closed)
    worker.start()
    assert counting.wait(timeout=60)
    engine.close()  # frees the model while the worker is mid-count or between counts
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert counts and len(set(counts)) == 1  # every count finished whole, on a live model
    assert errors and "closed" in str(errors[0])
    with pytest.raises(EngineError, match="closed"):
        engine.count_tokens("one more")
