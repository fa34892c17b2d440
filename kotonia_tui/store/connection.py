"""The one SQLite connection: pragmas, transactions, and the read helper that counts rows.

The connection is opened with `check_same_thread=False` so the chat service may create the store
on one thread and use it from another: a turn's prompt is prepared on a worker thread (so a
big setup never stalls the UI) while the event loop may read or write for the fold worker. A
transaction belongs to the connection, not to a thread, so every statement and every `read()` /
`write()` block holds one re-entrant lock: the threads take turns, never interleave.

Transactions are explicit (`isolation_level=None`): writes run inside `write()`, which starts with
`BEGIN IMMEDIATE` so that two app instances sharing the file queue on the write lock (waiting up to
`busy_timeout`) instead of failing half way through a read-then-write. Multi-statement reads run
inside `read()` so they see one snapshot even while another process writes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from kotonia_tui.lazy import numpy_hidden
from kotonia_tui.safe_files import disk_full
from kotonia_tui.store.errors import StoreError

# sqlite-utils imports numpy, when installed, only to map numpy scalars to column types.
with numpy_hidden():
    import sqlite_utils

DEFAULT_BUSY_TIMEOUT_S = 10.0
# SQLite's integers are 64-bit: a row id beyond these names no row (binding it would raise).
SQLITE_INT_MIN, SQLITE_INT_MAX = -(2**63), 2**63 - 1

Params = Sequence[Any] | dict[str, Any]


def is_sqlite_int(value: int) -> bool:
    """Whether SQLite can hold `value`: an id outside this range is no row's id."""
    return SQLITE_INT_MIN <= value <= SQLITE_INT_MAX


class Db:
    """A sqlite3 connection wrapped by sqlite-utils, plus the counters tests rely on."""

    def __init__(self, path: Path, conn: sqlite3.Connection, busy_timeout_s: float) -> None:
        self.path = path
        self.conn = conn
        self.busy_timeout_s = busy_timeout_s
        self.utils = sqlite_utils.Database(conn)
        self.rows_read = 0
        self.read_only = False
        self.closed = False
        self.lock = threading.RLock()

    @classmethod
    def connect(
        cls, path: Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S, *, read_only: bool = False
    ) -> Db:
        """Open (creating, unless `read_only`) the file and probe it, turning "not a database"
        into a StoreError. A new file is private to the user (0600)."""
        if path.exists() and not path.is_file():
            raise StoreError(f"{path}: is not a file, cannot be used as the database")
        if read_only:
            return cls._connect_read_only(path, busy_timeout_s)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{path}: cannot create its folder: {exc.strerror}") from exc
        created = not path.exists()
        try:
            conn = sqlite3.connect(
                str(path),
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout_s,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot be opened: {exc}") from exc
        if created:
            with contextlib.suppress(OSError):
                path.chmod(0o600)  # before anything is written (the WAL files copy the mode)
        return cls._probe(path, conn, busy_timeout_s)

    @classmethod
    def _connect_read_only(cls, path: Path, busy_timeout_s: float) -> Db:
        """Open without writing anything: a read-only data dir still shows its conversations.

        A WAL database needs its shared-memory file; when none exists and the folder cannot
        take one, the file is opened as immutable (nothing can write to it meanwhile)."""
        if not path.exists():
            raise StoreError(f"{path}: no database here yet (nothing has been stored)")
        uri = f"{path.resolve().as_uri()}?mode=ro"
        failure: sqlite3.Error | None = None
        for suffix in ("", "&immutable=1"):
            conn = None
            try:
                conn = sqlite3.connect(
                    uri + suffix,
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=busy_timeout_s,
                )
                conn.execute("PRAGMA user_version").fetchone()
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                failure = exc
                continue
            return cls._probe(path, conn, busy_timeout_s, read_only=True)
        if "not a database" in str(failure) or "malformed" in str(failure):
            raise StoreError(f"{path}: is not a Kotonia database (not SQLite: {failure})")
        raise StoreError(f"{path}: cannot be opened read-only: {failure}")

    @classmethod
    def _probe(
        cls, path: Path, conn: sqlite3.Connection, busy_timeout_s: float, *, read_only: bool = False
    ) -> Db:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            # The first real read fails here when the file is not SQLite at all.
            conn.execute("PRAGMA user_version").fetchone()
            db = cls(path, conn, busy_timeout_s)
            db.read_only = read_only
            return db
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise StoreError(f"{path}: is not a Kotonia database (not SQLite: {exc})") from exc
            if disk_full(path.parent):
                raise StoreError(
                    f"{path}: cannot be opened: disk full ({exc}); free some space (reading "
                    "commands such as export still work)"
                ) from exc
            raise StoreError(f"{path}: cannot be opened: {exc}") from exc

    def configure(self) -> None:
        """Pragmas that must be set outside a transaction, once per connection."""
        try:
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA synchronous = NORMAL")  # durable enough in WAL mode
        except sqlite3.DatabaseError as exc:
            if disk_full(self.path.parent):
                raise StoreError(f"{self.path}: cannot be opened: disk full ({exc})") from exc
            raise StoreError(f"{self.path}: cannot be configured: {exc}") from exc
        if str(mode).lower() != "wal":
            raise StoreError(f"{self.path}: cannot switch to WAL mode (journal mode is {mode})")

    def close(self) -> None:
        # A thread still in a statement (a prompt prepared for a turn the app is stopping)
        # finishes it first: sqlite3 closed under a running statement crashes the process.
        # A statement that comes after is a StoreError (`_open`), not a crash.
        with self.lock:
            self.conn.close()
            self.closed = True

    @contextmanager
    def _open(self) -> Iterator[None]:
        """The connection's lock, for a statement of a store still open: a thread that
        outlived the app's close (it finished its statement first) gets a StoreError."""
        with self.lock:
            if self.closed:
                raise StoreError(f"{self.path}: the database was closed")
            yield

    def error(self, exc: sqlite3.Error) -> StoreError:
        """A sqlite3 error as a StoreError naming the file (callers never import sqlite3)."""
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return StoreError(
                f"{self.path}: the database is busy: another Kotonia instance held it for more "
                f"than {self.busy_timeout_s:g} s ({exc})"
            )
        name = getattr(exc, "sqlite_errorname", "") or ""
        text = str(exc)
        if name.startswith("SQLITE_CORRUPT") or "malformed" in text or "vtable constructor" in text:
            return StoreError(
                f"{self.path}: the database is damaged ({text}); what can still be read can "
                "be exported with `kotonia export ID`"
            )
        if name.startswith("SQLITE_FULL") or (
            name.startswith("SQLITE_IOERR") and disk_full(self.path.parent)
        ):
            return StoreError(f"{self.path}: disk full ({text}): free some space and retry")
        return StoreError(f"{self.path}: database error: {exc}")

    def too_large(self, exc: OverflowError) -> StoreError:
        """A number from the user (an id, a count) beyond SQLite's 64-bit integers."""
        return StoreError(f"{self.path}: a number is too large for the database ({exc})")

    @contextmanager
    def decoding(self, what: str) -> Iterator[None]:
        """A stored row that no longer reads (edited by hand, damaged) becomes a StoreError
        naming it, instead of a traceback out of the model classes."""
        try:
            yield
        except (ValueError, TypeError, KeyError) as exc:
            detail = " ".join(str(exc).split())
            detail = detail if len(detail) <= 160 else detail[:159] + "…"
            raise StoreError(f"{self.path}: {what} cannot be read ({detail})") from exc

    @property
    def user_version(self) -> int:
        with self._open():
            return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def copy_to(self, path: Path) -> None:
        """The whole database copied to one file at `path` by SQLite's online backup."""
        try:
            path.unlink(missing_ok=True)
            target = sqlite3.connect(path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{path}: cannot be written: {exc}") from exc
        try:
            with self._open():
                self.conn.backup(target)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot be written: {exc}") from exc
        finally:
            target.close()

    # Reads -------------------------------------------------------------------------------------

    def select(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """Every SELECT goes through here so `rows_read` counts what each call costs."""
        with self._open():
            cursor = self.conn.cursor()
            cursor.row_factory = sqlite3.Row
            try:
                rows = cursor.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self.error(exc) from exc
            except OverflowError as exc:
                raise self.too_large(exc) from exc
            self.rows_read += len(rows)
            return rows

    def select_one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        rows = self.select(sql, params)
        return rows[0] if rows else None

    # Writes ------------------------------------------------------------------------------------

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        with self._open():
            try:
                return self.conn.execute(sql, params)
            except OverflowError as exc:
                raise self.too_large(exc) from exc

    def insert_rows(self, table: str, rows: Sequence[dict[str, object]]) -> None:
        """Insert rows that share their keys with one executemany, inside the caller's write.

        sqlite-utils' `insert_all` inspects every cell, which dominated a big chat's import.
        """
        if not rows:
            return
        columns = list(rows[0])
        marks = ", ".join("?" * len(columns))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        with self._open():
            self.conn.executemany(sql, ([row[c] for c in columns] for row in rows))

    def insert(self, table: str, row: dict[str, object]) -> int:
        """Insert one row (sqlite-utils) and return its new rowid."""
        with self._open():
            new_id = self.utils.table(table).insert(row).last_pk
        if not isinstance(new_id, int):
            raise StoreError(f"{self.path}: a row inserted into {table} got no id")
        return new_id

    def returning(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """An `UPDATE/INSERT ... RETURNING` (a write, so not counted in `rows_read`)."""
        with self._open():
            cursor = self.conn.cursor()
            cursor.row_factory = sqlite3.Row
            return cursor.execute(sql, params).fetchall()

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction (nested calls become savepoints of the outer one)."""
        with self._open():
            yield from self._write()

    def _write(self) -> Iterator[None]:
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
                with suppress(sqlite3.Error):  # the error to tell is `exc`
                    self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self.error(exc) from exc
            raise

    @contextmanager
    def read(self) -> Iterator[None]:
        """A read snapshot for several SELECTs; inside a write it is that write's view."""
        with self._open():
            yield from self._read()

    def _read(self) -> Iterator[None]:
        if self.conn.in_transaction:
            yield
            return
        try:
            self.conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        try:
            yield
        except BaseException:
            # The first error is the one to tell: on a damaged page the COMMIT fails too
            # ("database disk image is malformed") and would hide it, as a traceback.
            if self.conn.in_transaction:
                with suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
            raise
        if self.conn.in_transaction:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self.error(exc) from exc
