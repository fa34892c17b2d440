"""The durable fold queue: idempotent enqueue, atomic claims, retries, crash recovery."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldKind,
    FoldStatus,
    LedgerKind,
    NewChapter,
    utcnow,
)
from kotonia_tui.store import Store, StoreError
from tests.scripted_chapters import ledger_entry

from .conftest import make_messages, new_conversation


def _job(conv_id: int, first: int = 1, last: int = 10, **kw: Any) -> FoldJob:
    return FoldJob(
        conversation_id=conv_id,
        kind=FoldKind.CHAPTER,
        first_message_id=first,
        last_message_id=last,
        **kw,
    )


def test_enqueue_is_idempotent_while_pending_or_running(store: Store) -> None:
    conv = new_conversation(store)
    first = store.enqueue_fold(_job(conv.id))
    assert store.enqueue_fold(_job(conv.id)).id == first.id
    assert store.enqueue_fold(_job(conv.id, last=11)).id != first.id  # another range
    store.claim_next_fold()
    assert store.enqueue_fold(_job(conv.id)).id == first.id  # running counts too
    store.finish_fold(first.id)
    assert store.enqueue_fold(_job(conv.id)).id != first.id  # done: a new job may be queued


def test_claim_takes_the_oldest_due_job_once(store: Store) -> None:
    conv = new_conversation(store)
    now = utcnow()
    later = store.enqueue_fold(_job(conv.id, 1, 5, not_before=now + timedelta(seconds=30)))
    due = store.enqueue_fold(_job(conv.id, 6, 9, not_before=now))
    assert store.next_fold_due() == due.not_before
    claimed = store.claim_next_fold(now)
    assert (claimed.id, claimed.status, claimed.attempts) == (due.id, FoldStatus.RUNNING, 1)
    assert store.claim_next_fold(now) is None  # the other is not due yet
    assert store.next_fold_due() == later.not_before
    assert store.claim_next_fold(now + timedelta(seconds=31)).id == later.id
    assert store.next_fold_due() is None


def test_two_instances_never_claim_the_same_job(db_path: Path) -> None:
    with Store.open(db_path) as a, Store.open(db_path) as b:
        conv = new_conversation(a)
        for i in range(6):
            a.enqueue_fold(_job(conv.id, i * 10, i * 10 + 9))
        claims = []
        while True:
            got = [s.claim_next_fold() for s in (a, b)]
            claims += [j.id for j in got if j is not None]
            if None in got:
                break
        assert sorted(claims) == sorted(set(claims)) and len(claims) == 6


def test_fail_retries_later_or_gives_up(store: Store) -> None:
    conv = new_conversation(store)
    job = store.enqueue_fold(_job(conv.id))
    store.claim_next_fold()
    retry_at = utcnow() + timedelta(minutes=5)
    again = store.fail_fold(job.id, "model refused", retry_at)
    assert (again.status, again.not_before, again.last_error) == (
        FoldStatus.PENDING,
        retry_at,
        "model refused",
    )
    assert store.claim_next_fold() is None
    second = store.claim_next_fold(retry_at)
    assert second.attempts == 2
    failed = store.fail_fold(job.id, "refused again")
    assert (failed.status, failed.finished_at is not None) == (FoldStatus.FAILED, True)
    assert store.fold_jobs(conv.id, [FoldStatus.FAILED]) == [failed]
    assert store.fold_jobs(conv.id, [FoldStatus.PENDING]) == []


def test_a_killed_process_does_not_strand_its_job(db_path: Path) -> None:
    with Store.open(db_path) as crashed:
        conv = new_conversation(crashed)
        job = crashed.enqueue_fold(_job(conv.id))
        crashed.claim_next_fold()
    # Next start-up: the running job goes back to the queue.
    with Store.open(db_path) as restarted:
        assert restarted.requeue_running() == [job.id]
        assert restarted.claim_next_fold().id == job.id


def test_requeue_can_spare_jobs_claimed_by_a_live_instance(store: Store) -> None:
    conv = new_conversation(store)
    store.enqueue_fold(_job(conv.id))
    before_claim = utcnow()
    store.claim_next_fold()
    assert store.requeue_running(claimed_before=before_claim) == []
    assert store.fold_jobs(conv.id, [FoldStatus.RUNNING]) != []


def test_finishing_twice_is_refused(store: Store) -> None:
    conv = new_conversation(store)
    job = store.enqueue_fold(_job(conv.id))
    store.finish_fold(job.id)
    with pytest.raises(StoreError, match=f"fold job {job.id} is already done"):
        store.finish_fold(job.id)


def test_a_claim_names_its_worker_and_holds_for_a_lease(store: Store) -> None:
    conv = new_conversation(store)
    job = store.enqueue_fold(_job(conv.id))
    claimed = store.claim_next_fold(claimer="host:1:aa", lease_s=60)
    assert claimed is not None and claimed.claimed_by == "host:1:aa"
    assert claimed.lease_until is not None
    assert 55 <= (claimed.lease_until - utcnow()).total_seconds() <= 60
    # Held: nobody else claims it, and it stays running.
    assert store.claim_next_fold(claimer="host:2:bb") is None
    assert store.renew_lease(job.id, "host:1:aa", lease_s=120)
    assert not store.renew_lease(job.id, "host:2:bb")  # not theirs to renew
    renewed = store.get_fold(job.id).lease_until
    assert renewed is not None and renewed > claimed.lease_until


def test_a_lease_that_ran_out_lets_another_worker_take_the_job(store: Store) -> None:
    conv = new_conversation(store)
    job = store.enqueue_fold(_job(conv.id))
    store.claim_next_fold(claimer="host:1:aa", lease_s=-1)  # a worker that stopped renewing
    taken = store.claim_next_fold(claimer="host:2:bb")
    assert taken is not None and (taken.id, taken.claimed_by, taken.attempts) == (
        job.id,
        "host:2:bb",
        2,
    )
    assert not store.renew_lease(job.id, "host:1:aa")


def test_due_times_and_leases_go_by_the_callers_clock(store: Store) -> None:
    """The fold worker passes its clock's `now` (tests move it instead of sleeping): a claim's
    lease, its renewal and a start-up's look at leases all go by it."""
    conv = new_conversation(store)
    now = utcnow() + timedelta(hours=3)  # a clock three hours ahead of the system's
    later = store.enqueue_fold(_job(conv.id, not_before=now - timedelta(minutes=1)))
    claimed = store.claim_next_fold(now, claimer="host:1:aa", lease_s=60)
    assert claimed is not None and claimed.id == later.id
    assert claimed.lease_until == now + timedelta(seconds=60)
    assert store.renew_lease(later.id, "host:1:aa", lease_s=60, now=now + timedelta(seconds=50))
    held = now + timedelta(seconds=100)  # within the renewed lease
    assert store.requeue_abandoned(lambda _claimer: False, now=held) == []
    ran_out = now + timedelta(seconds=111)
    assert store.requeue_abandoned(lambda _claimer: False, now=ran_out) == [later.id]


def test_start_up_requeues_only_jobs_whose_worker_is_gone(store: Store) -> None:
    """Two instances starting together: the second must not requeue (and run again, paying for
    the model call twice) the job the first is running."""
    conv = new_conversation(store)
    live = store.enqueue_fold(_job(conv.id, 1, 5))
    dead = store.enqueue_fold(_job(conv.id, 6, 9))
    store.claim_next_fold(claimer="host:1:live")
    store.claim_next_fold(claimer="host:2:dead")
    assert store.requeue_abandoned(lambda claimer: claimer == "host:2:dead") == [dead.id]
    assert store.get_fold(live.id).status is FoldStatus.RUNNING
    assert store.get_fold(dead.id).status is FoldStatus.PENDING


def test_chapters_are_claimed_before_major_folds(store: Store) -> None:
    conv = new_conversation(store)
    major = store.enqueue_fold(FoldJob(conversation_id=conv.id, kind=FoldKind.MAJOR_GC))
    chapter = store.enqueue_fold(_job(conv.id))
    assert store.claim_next_fold().id == chapter.id
    assert store.claim_next_fold().id == major.id


def test_a_waiting_turn_makes_pending_jobs_due_now(store: Store) -> None:
    conv = new_conversation(store)
    later = store.enqueue_fold(_job(conv.id, not_before=utcnow() + timedelta(hours=1)))
    assert store.claim_next_fold() is None
    assert store.hasten_folds([later.id]) == [later.id]
    assert store.claim_next_fold().id == later.id
    assert store.hasten_folds([later.id]) == []  # running: nothing to hasten


def test_a_stopped_attempt_is_not_a_failure(store: Store) -> None:
    """A fold that gave way to a turn's chapter, or was stopped by a shutdown, is pending again
    with no error: a turn tells it from a job in its failure backoff by its last error."""
    conv = new_conversation(store)
    job = store.enqueue_fold(_job(conv.id))
    store.claim_next_fold()
    store.fail_fold(job.id, "model refused", utcnow())
    assert store.claim_next_fold().id == job.id
    released = store.release_fold(job.id)
    assert (released.status, released.last_error, released.attempts) == (
        FoldStatus.PENDING,
        None,
        2,
    )
    assert store.claim_next_fold().id == job.id  # at once: no backoff
    store.finish_fold(job.id)
    assert store.release_fold(job.id).status is FoldStatus.DONE  # only a running job goes back


def test_jobs_a_fold_queues_are_stored_with_its_chapters_or_not_at_all(store: Store) -> None:
    """A chapter and the rest of its range, quoted chapters and their refolds: one transaction.
    A quote of a job that is done already (its chapter landed first) stores nothing and queues
    nothing: a refold queued alone would find nothing stale and fold the range again."""
    conv = new_conversation(store)
    store.add_messages(conv.id, make_messages(30))
    job = store.enqueue_fold(_job(conv.id, 1, 30))
    rest = _job(conv.id, 11, 30)
    chapter = Chapter(conversation_id=conv.id, first_message_id=1, last_message_id=10, text="A")
    store.store_chapter(chapter, job_id=job.id, then=[rest])
    (queued,) = store.fold_jobs(conv.id, statuses=(FoldStatus.PENDING,))
    assert (queued.first_message_id, queued.last_message_id) == (11, 30)

    store.finish_fold(queued.id)  # the worker landed it
    quote = Chapter(
        conversation_id=conv.id, first_message_id=11, last_message_id=30, text="B", stale=True
    )
    refold = _job(conv.id, 11, 30).model_copy(update={"kind": FoldKind.REFOLD})
    with pytest.raises(StoreError, match="already done"):
        store.store_refold([], [NewChapter(chapter=quote)], queued.id, then=[refold])
    assert store.fold_jobs(conv.id, statuses=(FoldStatus.PENDING,)) == []
    assert [c.text for c in store.chapters(conv.id)] == ["A"]


def test_a_then_job_that_cannot_be_queued_rolls_back_the_chapter_and_leaves_its_job_open(
    store: Store,
) -> None:
    """The jobs `then` are part of the fold's transaction: when one cannot be queued (here a
    job for a conversation that is not in the file), the call raises StoreError, and the
    chapter, its ledger entries and its job's completion are rolled back with it; the
    chapters a refold would have replaced stay live."""
    conv = new_conversation(store)
    store.add_messages(conv.id, make_messages(30))
    missing = _job(conv.id + 100, 11, 30)  # no such conversation
    job = store.enqueue_fold(_job(conv.id, 1, 30))
    entry = ledger_entry(conv.id, LedgerKind.USER_FACT, "Ann keeps the lantern", 2)
    chapter = Chapter(conversation_id=conv.id, first_message_id=1, last_message_id=10, text="A")
    with pytest.raises(StoreError):
        store.store_chapter(chapter, [entry], job_id=job.id, then=[missing])
    assert store.chapters(conv.id) == [] and store.ledger(conv.id) == []
    assert store.get_fold(job.id).status is FoldStatus.PENDING
    assert [j.id for j in store.fold_jobs(conv.id)] == [job.id]

    old = store.store_chapter(chapter, [entry], job_id=job.id)
    refold = store.enqueue_fold(_job(conv.id, 1, 10).model_copy(update={"kind": FoldKind.REFOLD}))
    new = Chapter(conversation_id=conv.id, first_message_id=1, last_message_id=10, text="B")
    with pytest.raises(StoreError):
        store.store_refold([old.id], [NewChapter(chapter=new)], refold.id, then=[missing])
    assert [(c.id, c.text, c.superseded_by) for c in store.chapters(conv.id)] == [
        (old.id, "A", None)
    ]
    assert [e.text for e in store.ledger(conv.id)] == ["Ann keeps the lantern"]
    assert store.get_fold(refold.id).status is FoldStatus.PENDING
    # Without the job that cannot be queued, the same refold is stored.
    (stored,) = store.store_refold([old.id], [NewChapter(chapter=new)], refold.id)
    assert [c.text for c in store.chapters(conv.id)] == ["B"] and stored.text == "B"
