"""The process's local time zone for a test: the run's is UTC (tests/conftest.py,
`pin_time_zone`); a test of another zone sets it with `local_zone` and gets UTC back after."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator


@contextlib.contextmanager
def local_zone(name: str) -> Iterator[None]:
    """Inside the block this process's local zone is `name` (a tz database name, daylight
    saving included); after it, the zone it had before (TZ and `time.tzset()` restored)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
