"""The one SQLite connection: pragmas, transactions, and the read helper that counts rows.

The connection is opened with `check_same_thread=False` so the chat service may create the store
on one thread and use it from the asyncio thread, but it must be used from ONE thread at a time:
sqlite3 connections are not safe for concurrent use.

Transactions are explicit (`isolation_level=None`): writes run inside `write()`, which starts with
`BEGIN IMMEDIATE` so that two app instances sharing the file queue on the write lock (waiting up to
`busy_timeout`) instead of failing half way through a read-then-write. Multi-statement reads run
inside `read()` so they see one snapshot even while another process writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from kotonia_tui.store.errors import StoreError

DEFAULT_BUSY_TIMEOUT_S = 10.0

Params = Sequence[Any] | dict[str, Any]


class Db:
    """A sqlite3 connection wrapped by sqlite-utils, plus the counters tests rely on."""

    def __init__(self, path: Path, conn: sqlite3.Connection, busy_timeout_s: float) -> None:
        self.path = path
        self.conn = conn
        self.busy_timeout_s = busy_timeout_s
        self.utils = sqlite_utils.Database(conn)
        self.rows_read = 0

    @classmethod
    def connect(cls, path: Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Db:
        """Open (creating) the file and probe it, turning "not a database" into a StoreError."""
        if path.exists() and not path.is_file():
            raise StoreError(f"{path}: is not a file, cannot be used as the database")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{path}: cannot create its folder: {exc.strerror}") from exc
        try:
            conn = sqlite3.connect(
                str(path),
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout_s,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot be opened: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            # The first real read fails here when the file is not SQLite at all.
            conn.execute("PRAGMA user_version").fetchone()
            return cls(path, conn, busy_timeout_s)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise StoreError(f"{path}: is not a Kotonia database (not SQLite: {exc})") from exc
            raise StoreError(f"{path}: cannot be opened: {exc}") from exc

    def configure(self) -> None:
        """Pragmas that must be set outside a transaction, once per connection."""
        try:
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA synchronous = NORMAL")  # durable enough in WAL mode
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot be configured: {exc}") from exc
        if str(mode).lower() != "wal":
            raise StoreError(f"{self.path}: cannot switch to WAL mode (journal mode is {mode})")

    def close(self) -> None:
        self.conn.close()

    def error(self, exc: sqlite3.Error) -> StoreError:
        """A sqlite3 error as a StoreError naming the file (callers never import sqlite3)."""
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return StoreError(
                f"{self.path}: the database is busy: another Kotonia instance held it for more "
                f"than {self.busy_timeout_s:g} s ({exc})"
            )
        return StoreError(f"{self.path}: database error: {exc}")

    @property
    def user_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    # Reads -------------------------------------------------------------------------------------

    def select(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """Every SELECT goes through here so `rows_read` counts what each call costs."""
        cursor = self.conn.cursor()
        cursor.row_factory = sqlite3.Row
        try:
            rows = cursor.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        self.rows_read += len(rows)
        return rows

    def select_one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        rows = self.select(sql, params)
        return rows[0] if rows else None

    # Writes ------------------------------------------------------------------------------------

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def insert(self, table: str, row: dict[str, object]) -> int:
        """Insert one row (sqlite-utils) and return its new rowid."""
        new_id = self.utils.table(table).insert(row).last_pk
        if not isinstance(new_id, int):
            raise StoreError(f"{self.path}: a row inserted into {table} got no id")
        return new_id

    def insert_all(self, table: str, rows: Iterable[dict[str, object]]) -> None:
        self.utils.table(table).insert_all(rows, batch_size=1000)

    def returning(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """An `UPDATE/INSERT ... RETURNING` (a write, so not counted in `rows_read`)."""
        cursor = self.conn.cursor()
        cursor.row_factory = sqlite3.Row
        return cursor.execute(sql, params).fetchall()

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction (nested calls become savepoints of the outer one)."""
        if self.conn.in_transaction:
            with self.utils.atomic():
                yield
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")  # waits up to busy_timeout for the write lock
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self.error(exc) from exc
            raise

    @contextmanager
    def read(self) -> Iterator[None]:
        """A read snapshot for several SELECTs; inside a write it is that write's view."""
        if self.conn.in_transaction:
            yield
            return
        try:
            self.conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        try:
            yield
        finally:
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")
