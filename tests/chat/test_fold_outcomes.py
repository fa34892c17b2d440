"""What a fold does after each outcome (chat/fold/outcomes.py): one table, read by the chapter
pieces, the synopsis drafts and the worker; and the worker's waits between attempts."""

from __future__ import annotations

import pytest

from kotonia_tui.chat.fold.outcomes import AFTER, FoldFailure, Step, Then, then
from kotonia_tui.chat.fold.worker import MAX_ATTEMPTS, RETRY_BACKOFF_S
from kotonia_tui.domain import FoldJob, FoldKind, FoldStatus, Message, Role
from tests.cards import write_short_card
from tests.fake_clock import FakeClock
from tests.fake_engine import scripted
from tests.settings import fake_settings

UNUSABLE = (
    FoldFailure.REFUSED,
    FoldFailure.EMPTY,
    FoldFailure.CUT,
    FoldFailure.HOLLOW,
    FoldFailure.MALFORMED,
    FoldFailure.NO_ROOM,
    FoldFailure.NOT_SHORTER,
)


@pytest.mark.parametrize("why", UNUSABLE)
def test_a_chapter_the_chronicler_cannot_give_is_quoted_never_failed(why: FoldFailure) -> None:
    assert then(Step.CHAPTER, why) is Then.QUOTE
    assert then(Step.CHAPTER, why, last_attempt=True) is Then.QUOTE


def test_a_model_that_fails_fails_the_attempt_until_the_last_which_quotes() -> None:
    assert then(Step.CHAPTER, FoldFailure.MODEL_FAILED) is Then.FAIL
    assert then(Step.CHAPTER, FoldFailure.MODEL_FAILED, last_attempt=True) is Then.QUOTE
    # A server that is down is never the range's fault: deferred, on the last attempt too.
    assert then(Step.CHAPTER, FoldFailure.SERVER_DOWN, last_attempt=True) is Then.DEFER


def test_a_synopsis_is_asked_again_redrafted_or_quoted() -> None:
    assert then(Step.SYNOPSIS, None) is Then.STORE
    for why in (FoldFailure.REFUSED, FoldFailure.EMPTY, FoldFailure.SAYS_AGAIN):
        assert then(Step.SYNOPSIS, why) is Then.ASK_AGAIN
    for why in (FoldFailure.CUT, FoldFailure.OFF_LENGTH):
        assert then(Step.SYNOPSIS, why) is Then.REDRAFT
    assert then(Step.SYNOPSIS, FoldFailure.NO_ROOM) is Then.QUOTE


def test_the_worker_defers_only_for_a_server_and_has_a_verdict_for_every_failure() -> None:
    for why in FoldFailure:
        expected = Then.DEFER if why is FoldFailure.SERVER_DOWN else Then.FAIL
        assert AFTER[(Step.JOB, why)] is expected


async def test_the_worker_waits_each_backoff_once_and_the_last_attempt_fails_for_good(
    make_fake_service,
):
    """Five attempts had five waits, and the fifth could never be used: now each failed attempt
    but the last waits the next one, and the last fails the job.

    Fake engine and clock: this test is about the worker's waits, which do not depend on the
    model; the worker is paused and the attempts are claimed and failed here."""
    clock = FakeClock()
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("The lamp is lit."), None, clock)
    worker, store = service.worker, service.store
    worker.pause()
    conv = service.new_conversation(service.library.get(key))
    store.add_messages(conv.id, [Message(role=Role.USER, speaker="Ann", text="Hello.")])
    job = store.enqueue_fold(
        FoldJob(
            conversation_id=conv.id,
            kind=FoldKind.CHAPTER,
            first_message_id=1,
            last_message_id=1,
            not_before=clock.now(),
        )
    )
    waits = []
    for _attempt in range(MAX_ATTEMPTS):
        claimed = store.claim_next_fold(clock.now(), claimer=worker.claimer)
        assert claimed is not None and claimed.id == job.id
        worker._fail(claimed, "the model failed (test)")
        after = store.get_fold(job.id)
        if after.status is FoldStatus.FAILED:
            break
        waits.append(round((after.not_before - clock.now()).total_seconds()))
        clock.advance(waits[-1])
    assert waits == list(RETRY_BACKOFF_S)
    assert store.get_fold(job.id).attempts == MAX_ATTEMPTS
