"""Chat file tests read and write through a real store: its fixtures, shared with tests/store."""

from tests.store.conftest import db_path, store

__all__ = ["db_path", "store"]
