"""The durable fold queue. Jobs survive a crash; claims are atomic across processes.

A claim is one `UPDATE ... RETURNING` inside `BEGIN IMMEDIATE`, so two app instances sharing the
file never claim the same job. A claim names its claimer and holds for a lease that the running
worker renews: an instance starting up puts back to pending only the jobs whose claimer is gone
(its process ended, or its lease ran out), never a job another live instance is running.
Finishing is refused for a job already done, so that if a job was ever run twice, the second
result is rolled back instead of stored twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from kotonia_tui.domain import FoldJob, FoldKind, FoldStatus, StoredFoldJob, utcnow
from kotonia_tui.store.codec import opt_ts_from_db, ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError

_OPEN = (FoldStatus.PENDING.value, FoldStatus.RUNNING.value)
DEFAULT_LEASE_S = 60.0  # a running worker renews its claim well within this


def job_from_row(row: sqlite3.Row) -> StoredFoldJob:
    return StoredFoldJob(
        id=row["id"],
        conversation_id=row["conversation_id"],
        kind=FoldKind(row["kind"]),
        first_message_id=row["first_message_id"],
        last_message_id=row["last_message_id"],
        status=FoldStatus(row["status"]),
        attempts=row["attempts"],
        last_error=row["last_error"],
        not_before=ts_from_db(row["not_before"]),
        created_at=ts_from_db(row["created_at"]),
        finished_at=opt_ts_from_db(row["finished_at"]),
        claimed_by=row["claimed_by"],
        lease_until=opt_ts_from_db(row["lease_until"]),
    )


def get_fold(db: Db, job_id: int) -> StoredFoldJob:
    row = db.select_one("SELECT * FROM fold_jobs WHERE id = ?", (job_id,))
    if row is None:
        raise NotFoundError(f"fold job {job_id} does not exist in {db.path}")
    return job_from_row(row)


def enqueue_fold(db: Db, job: FoldJob) -> StoredFoldJob:
    """Queue a job; if the same kind and range is already pending or running, return that one."""
    if job.status not in (FoldStatus.PENDING,):
        raise StoreError(f"a new fold job must be pending, got {job.status.value}")
    with db.write():
        existing = db.select_one(
            """SELECT * FROM fold_jobs WHERE conversation_id = ? AND kind = ?
                   AND first_message_id IS ? AND last_message_id IS ?
                   AND status IN (?, ?)""",
            (
                job.conversation_id,
                job.kind.value,
                job.first_message_id,
                job.last_message_id,
                *_OPEN,
            ),
        )
        if existing is not None:
            return job_from_row(existing)
        try:
            new_id = db.insert(
                "fold_jobs",
                {
                    "conversation_id": job.conversation_id,
                    "kind": job.kind.value,
                    "first_message_id": job.first_message_id,
                    "last_message_id": job.last_message_id,
                    "status": FoldStatus.PENDING.value,
                    "attempts": 0,
                    "last_error": None,
                    "not_before": ts_to_db(job.not_before),
                    "created_at": ts_to_db(job.created_at),
                },
            )
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(
                f"conversation {job.conversation_id} does not exist in {db.path}"
            ) from exc
        return get_fold(db, new_id)


def claim_next_fold(
    db: Db,
    now: datetime | None = None,
    *,
    claimer: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
) -> StoredFoldJob | None:
    """The oldest job that is due, now running under `claimer` with one more attempt; None if
    nothing is due. Due: pending with `not_before` passed, or running under a lease that ran
    out (its worker stopped renewing it: a process that died on another machine, or hung).
    Chapters and refolds go before major folds: they bring messages into the memory, a major
    fold only makes it smaller. `now` (default: the system's) is the caller's clock: what is due
    and when the lease ends go by it."""
    clock = now or utcnow()
    when = ts_to_db(clock)
    with db.write():
        rows = db.returning(
            """UPDATE fold_jobs SET status = 'running', attempts = attempts + 1, claimed_at = ?,
                   claimed_by = ?, lease_until = ?
               WHERE id = (SELECT j.id FROM fold_jobs j
                           JOIN conversations c ON c.id = j.conversation_id
                           WHERE ((j.status = 'pending' AND j.not_before <= ?)
                                  OR (j.status = 'running' AND j.lease_until IS NOT NULL
                                      AND j.lease_until < ?))
                               AND c.deleted_at IS NULL
                           ORDER BY j.kind = 'major_gc', j.id LIMIT 1)
               RETURNING *""",
            (
                ts_to_db(clock),
                claimer,
                ts_to_db(clock + timedelta(seconds=lease_s)),
                when,
                ts_to_db(clock),
            ),
        )
    return job_from_row(rows[0]) if rows else None


def renew_lease(
    db: Db,
    job_id: int,
    claimer: str,
    lease_s: float = DEFAULT_LEASE_S,
    now: datetime | None = None,
) -> bool:
    """Extend a running job's lease (from `now`, default the system's clock); False when the
    job is no longer this claimer's."""
    with db.write():
        rows = db.returning(
            """UPDATE fold_jobs SET lease_until = ?
               WHERE id = ? AND status = 'running' AND claimed_by = ? RETURNING id""",
            (ts_to_db((now or utcnow()) + timedelta(seconds=lease_s)), job_id, claimer),
        )
    return bool(rows)


def hasten(db: Db, job_ids: Iterable[int], now: datetime | None = None) -> list[int]:
    """Make pending jobs due now (a turn waits for them); returns the ids changed."""
    ids = list(job_ids)
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    with db.write():
        rows = db.returning(
            f"""UPDATE fold_jobs SET not_before = ?
                WHERE id IN ({marks}) AND status = 'pending' AND not_before > ? RETURNING id""",
            (ts_to_db(now or utcnow()), *ids, ts_to_db(now or utcnow())),
        )
    return sorted(row["id"] for row in rows)


def mark_done(db: Db, job_id: int, conv_id: int | None = None) -> StoredFoldJob:
    """Inside the caller's transaction: the job is done, or the whole transaction fails."""
    job = get_fold(db, job_id)
    if conv_id is not None and job.conversation_id != conv_id:
        raise StoreError(
            f"fold job {job_id} belongs to conversation {job.conversation_id}, not {conv_id}"
        )
    if job.status is FoldStatus.DONE:
        raise StoreError(f"fold job {job_id} is already done; its result was stored before")
    db.execute(
        "UPDATE fold_jobs SET status = 'done', finished_at = ?, last_error = NULL WHERE id = ?",
        (ts_to_db(utcnow()), job_id),
    )
    return get_fold(db, job_id)


def finish_fold(db: Db, job_id: int) -> StoredFoldJob:
    with db.write():
        return mark_done(db, job_id)


def fail_fold(db: Db, job_id: int, error: str, retry_at: datetime | None = None) -> StoredFoldJob:
    """Pending again at `retry_at`, or failed for good when `retry_at` is None."""
    with db.write():
        job = get_fold(db, job_id)
        if job.status is FoldStatus.DONE:
            raise StoreError(f"fold job {job_id} is already done; it cannot fail")
        if retry_at is None:
            db.execute(
                """UPDATE fold_jobs SET status = 'failed', last_error = ?, finished_at = ?
                   WHERE id = ?""",
                (error, ts_to_db(utcnow()), job_id),
            )
        else:
            db.execute(
                """UPDATE fold_jobs SET status = 'pending', last_error = ?, not_before = ?
                   WHERE id = ?""",
                (error, ts_to_db(retry_at), job_id),
            )
        return get_fold(db, job_id)


def release_fold(db: Db, job_id: int) -> StoredFoldJob:
    """A running job back to pending without an error: its attempt was stopped (it gave way to
    a turn's chapter, or the app shut down), it did not fail. Its last error is cleared, so a
    turn can tell it from a job in its failure backoff."""
    with db.write():
        db.execute(
            """UPDATE fold_jobs SET status = 'pending', last_error = NULL
               WHERE id = ? AND status = 'running'""",
            (job_id,),
        )
        return get_fold(db, job_id)


def requeue_running(db: Db, claimed_before: datetime | None = None) -> list[int]:
    """Running jobs back to pending (a killed process must not strand them); returns their ids.

    With two instances sharing the file, pass `claimed_before` (e.g. start-up time minus the
    longest fold) so the other instance's live jobs are left alone.
    """
    with db.write():
        if claimed_before is None:
            rows = db.returning(
                "UPDATE fold_jobs SET status = 'pending' WHERE status = 'running' RETURNING id"
            )
        else:
            rows = db.returning(
                """UPDATE fold_jobs SET status = 'pending'
                   WHERE status = 'running' AND ifnull(claimed_at, '') < ? RETURNING id""",
                (ts_to_db(claimed_before),),
            )
    return sorted(row["id"] for row in rows)


def requeue_abandoned(
    db: Db, gone: Callable[[str], bool], now: datetime | None = None
) -> list[int]:
    """Running jobs whose claimer is gone back to pending; returns their ids.

    Gone: no claimer recorded (a file from before claims were named), a lease that ran out, or
    `gone(claimed_by)` says so (the worker's process has ended). A job another live instance is
    running is left alone, so it is never run twice. Leases are read against `now` (default:
    the system's clock).
    """
    clock = ts_to_db(now or utcnow())
    with db.write():
        rows = db.select(
            "SELECT id, claimed_by, lease_until FROM fold_jobs WHERE status = 'running'"
        )
        abandoned = [
            row["id"]
            for row in rows
            if row["claimed_by"] is None
            or row["lease_until"] is None
            or row["lease_until"] < clock
            or gone(row["claimed_by"])
        ]
        for job_id in abandoned:
            db.execute(
                "UPDATE fold_jobs SET status = 'pending' WHERE id = ? AND status = 'running'",
                (job_id,),
            )
    return sorted(abandoned)


def fold_jobs(
    db: Db, conv_id: int, statuses: Iterable[FoldStatus] | None = None
) -> list[StoredFoldJob]:
    """The conversation's jobs, oldest first, optionally only those in `statuses`."""
    sql = "SELECT * FROM fold_jobs WHERE conversation_id = ?"
    params: list[object] = [conv_id]
    if statuses is not None:
        wanted = [FoldStatus(s).value for s in statuses]
        if not wanted:
            return []
        sql += f" AND status IN ({','.join('?' * len(wanted))})"
        params += wanted
    return [job_from_row(row) for row in db.select(sql + " ORDER BY id", params)]


def next_fold_due(db: Db) -> datetime | None:
    """The earliest `not_before` among pending jobs: how long the scheduler may sleep (a lease
    that runs out makes a job due too; the worker never sleeps longer than a lease)."""
    # A conversation deleted in the app (until the session ends, when it can be undone) keeps
    # its jobs, but they wait: folding what may be gone for good is wasted model time.
    row = db.select_one(
        """SELECT min(j.not_before) AS due FROM fold_jobs j
           JOIN conversations c ON c.id = j.conversation_id
           WHERE j.status = 'pending' AND c.deleted_at IS NULL"""
    )
    return ts_from_db(row["due"]) if row is not None and row["due"] is not None else None
