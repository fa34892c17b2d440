"""The fold worker: runs durable fold jobs in the background, one at a time.

Jobs live in SQLite (pending jobs resume at start-up; a job whose worker is gone goes back to
pending). The worker sleeps until the next job is due or it is woken. Model calls go through
the same engine as turns, on the fold slot at background priority: the engine's owner thread
runs a waiting user turn first, and the fold resumes after it where it stopped, on its own KV
context, so the chat's prompt cache is never evicted. What a job writes is decided by its kind:
chapters in chat/fold/chapters.py, the synopsis in chat/fold/synopsis.py.

A claim names this worker (host, process, a token of its own) and holds for a lease it renews
while the job runs: a second instance starting on the same file requeues only jobs whose worker
is gone, so one job is never run (and its model call paid for) twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta

from kotonia_tui.chat.background import cancel_and_wait
from kotonia_tui.chat.events import FoldProgress, FoldState, RunningFold, ServiceEvent
from kotonia_tui.chat.fold.chapters import fold_chapter_job
from kotonia_tui.chat.fold.context import FoldContext
from kotonia_tui.chat.fold.outcomes import FoldFailed, Step, Then, outcome_of, then
from kotonia_tui.chat.fold.synopsis import fold_synopsis_job
from kotonia_tui.chat.fold.wait import (
    GAVE_WAY,
    REPORT_EVERY_S,
    SYSTEM_CLOCK,
    Clock,
    Patience,
    WaitEnd,
    WaitProgress,
)
from kotonia_tui.chat.numbering import job_label, job_numbers, told
from kotonia_tui.config import Settings
from kotonia_tui.domain import FoldKind, FoldStatus, StoredFoldJob
from kotonia_tui.engine import (
    Engine,
    EngineError,
    Slot,
)
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chronicler import Cast
from kotonia_tui.store import Store, StoreError

log = logging.getLogger(__name__)

# The wait after each failed attempt; the attempt after the last wait is the last one (a
# chapter job quotes its range then, chat/fold/outcomes.py). One wait per attempt but the last.
RETRY_BACKOFF_S = (30, 120, 600, 1800)
MAX_ATTEMPTS = len(RETRY_BACKOFF_S) + 1
UNAVAILABLE_RETRY_S = 5.0  # how often a job waiting for a server that is down tries again
LEASE_S = 60.0  # a claim holds this long; the running worker renews it every third of it
WAIT_POLL_S = 0.1  # how often a turn waiting for a fold looks at the job


def _claimer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def claimer_gone(claimer: str) -> bool:
    """A claimer on this machine whose process has ended (a crash, kill -9). One on another
    machine, or in a process still running, is gone only when its lease runs out."""
    host, _, rest = claimer.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists but belongs to someone else
        return False
    return False


class FoldWorker:
    """An asyncio task that drains the fold queue."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        settings: Settings,
        *,
        cast: Callable[[int], Cast],
        budgets: Callable[[int], Awaitable[Budgets]] | None = None,
        notify: Callable[[ServiceEvent], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.clock = clock  # due times, backoff, leases and waits go by it
        self.engine = engine
        self.settings = settings
        self._send = notify
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: StoredFoldJob | None = None
        self._running_label = ""
        self._started_at = 0.0
        self._idle = asyncio.Event()
        self._deferrals: dict[int, int] = {}  # job id -> claims that ended waiting for a server
        self._paused = False
        self._job_task: asyncio.Task[None] | None = None
        self._giving_way = False  # the running job is being stopped for a waiting turn
        self.claimer = _claimer_name()
        fold_ctx = engine.info.fold_n_ctx
        self.budgets = Budgets.for_window(engine.n_ctx, engine.profile.reply_max_tokens, settings)
        window = self.budgets

        async def window_budgets(_conv_id: int) -> Budgets:
            return window

        # The chronicler's prompt and output share the fold context.
        self.max_output = min(self.budgets.summary_max_tokens, max(64, fold_ctx // 2))
        self.context = FoldContext(
            store=store,
            engine=engine,
            budgets_for=budgets or window_budgets,
            cast_of=cast,
            max_output=self.max_output,
        )

    # ---- lifetime -------------------------------------------------------------------------

    def start(self) -> None:
        resumed = self.store.requeue_abandoned(claimer_gone, now=self.clock.now())
        if resumed:
            log.info("resumed fold jobs whose worker is gone: %s", resumed)
        self._task = asyncio.create_task(self._run(), name="kotonia-fold-worker")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def wake(self) -> None:
        self._idle.clear()
        self._wake.set()

    def pause(self) -> None:
        """Stop claiming jobs (the one running finishes). Jobs stay queued in the database."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self.wake()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def running(self) -> RunningFold | None:
        """The job running now, how long it has run, and its label: the job as its events name
        it ("chapter #5-#9"; chat/numbering.py `job_label`), read when it started and again
        when a message of its conversation is deleted or restored (`renumber`)."""
        if self._running is None:
            return None
        elapsed = self.clock.monotonic() - self._started_at
        return RunningFold(self._running, elapsed, self._running_label)

    def renumber(self, conv_id: int) -> None:
        """A message of conversation `conv_id` was deleted or restored, so the numbers after it
        moved: the running job's label, if it is that conversation's, is read again (the app's
        status line shows it every second while the job runs). A store that cannot be read
        keeps the label it has."""
        job = self._running
        if job is None or job.conversation_id != conv_id:
            return
        with contextlib.suppress(StoreError):
            self._running_label = job_label(job, job_numbers(self.store, conv_id, [job]))

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no job is due or running (a script waits for the memory to settle)."""
        self.wake()
        try:
            async with asyncio.timeout(timeout):  # not wait_for: chat/fold/wait.py says why
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def wait_settled(self, conv_id: int, poll_s: float = 0.2) -> None:
        """Wait until the conversation's scheduled folds have run (retries of failed jobs,
        which wait minutes by design, are not waited for)."""
        while True:
            jobs = self.store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))
            waiting = [j for j in jobs if j.status is FoldStatus.RUNNING or j.attempts == 0]
            # A job's result is stored before its landing is announced (and prewarmed): this
            # worker's job of the conversation is settled once its run has ended.
            running = self._running is not None and self._running.conversation_id == conv_id
            if (not waiting and not running) or self._paused:
                return
            self.wake()
            await asyncio.sleep(poll_s)

    async def wait_for(
        self,
        job_ids: Iterable[int],
        patience: Patience,
        *,
        go_on: asyncio.Event | None = None,
        on_progress: Callable[[WaitProgress], None] | None = None,
    ) -> WaitEnd:
        """Run these jobs now and wait until each has finished one attempt (landed or failed):
        a turn waits for the fold that keeps its messages in memory. The wait lasts while the
        fold model works (chat/fold/wait.py): it ends when the fold has made no progress for
        `patience.stall_s`, after `patience.cap_s` in all, or when `go_on` is set.
        `on_progress` hears how far the fold has got, about once a second while it moves."""
        ids = list(job_ids)
        if not ids:
            return WaitEnd.DONE
        if patience.stall_s <= 0 or patience.cap_s <= 0:
            return WaitEnd.CAPPED
        started = {job_id: self.store.get_fold(job_id).attempts for job_id in ids}
        self.store.hasten_folds(ids, now=self.clock.now())
        self._give_way(ids)
        self.wake()
        began = moved = reported = self.clock.monotonic()
        first = seen = self.engine.work(Slot.FOLD)
        while True:
            waiting = [
                job_id
                for job_id, attempts in started.items()
                if _still_open(self.store.get_fold(job_id), attempts)
            ]
            if not waiting:
                return WaitEnd.DONE
            now = self.clock.monotonic()
            work = self.engine.work(Slot.FOLD)
            if work != seen:
                seen, moved = work, now
                if on_progress is not None and now - reported >= REPORT_EVERY_S:
                    reported = now
                    on_progress(
                        WaitProgress(
                            work.evaluated - first.evaluated,
                            work.generated - first.generated,
                            now - began,
                        )
                    )
            if go_on is not None and go_on.is_set():
                return WaitEnd.SKIPPED
            if now - moved >= patience.stall_s:
                return WaitEnd.STALLED
            if now - began >= patience.cap_s:
                return WaitEnd.CAPPED
            if go_on is None:
                await asyncio.sleep(WAIT_POLL_S)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WAIT_POLL_S):  # not wait_for: see fold/wait.py
                        await go_on.wait()

    def stop_jobs(self, ids: Iterable[int]) -> None:
        """The running job, when it is one of `ids`, stops (not a failed attempt): a turn
        quotes its range instead (chat/fold/quote_first.py), and its chronicler call would
        only write what the refold after the quote writes."""
        running, task = self._running, self._job_task
        if running is not None and task is not None and running.id in set(ids):
            self._giving_way = True
            task.cancel()

    def _give_way(self, ids: list[int]) -> None:
        """A major fold running while a turn waits for chapters stops and goes back to pending
        (not a failed attempt): the chapters bring messages back into the memory, the major
        fold only makes it smaller, and one call of it can take longer than the wait."""
        running, task = self._running, self._job_task
        if running is None or task is None or running.id in ids:
            return
        if running.kind is FoldKind.MAJOR_GC:
            self._giving_way = True
            task.cancel()

    # ---- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if self._paused:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self.store.claim_next_fold(
                self.clock.now(), claimer=self.claimer, lease_s=LEASE_S
            )
            if job is None:
                self._idle.set()
                await self._sleep_until_due()
                continue
            self._idle.clear()
            # Its own task, so a turn that waits for a chapter can make a major fold give way.
            self._job_task = asyncio.create_task(self._run_one(job), name=f"kotonia-fold-{job.id}")
            try:
                await self._job_task
            finally:
                self._job_task = None

    def _notify(self, event: FoldProgress) -> FoldProgress:
        """Send `event` as a person reads it (chat/numbering.py `told`): the job named by its
        kind and range in message numbers, never by its store id, and its detail (what landed,
        why it failed) naming messages as the chat numbers them; the job's stored error keeps
        the store ids it was written with (a store that cannot be read: the job by its kind
        alone). Returns what was sent."""
        event = told(self.store, event)
        self._send(event)
        return event

    async def _sleep_until_due(self) -> None:
        due = self.store.next_fold_due()
        # Never longer than a lease: a job whose worker is gone falls due when its lease ends.
        timeout = LEASE_S
        if due is not None:
            timeout = min(timeout, max(0.05, (due - self.clock.now()).total_seconds()))
        self._wake.clear()
        await self.clock.wait(self._wake, timeout)

    async def _run_one(self, job: StoredFoldJob) -> None:
        self._running = job
        self._running_label = job.kind.label
        self._started_at = self.clock.monotonic()
        # Named once here, by the range the RUNNING event tells (one store read; no await in
        # between, so no tick sees the kind alone): the status line and the inspector show
        # this label every second without reading the store (`running`).
        running = self._notify(FoldProgress(job.conversation_id, job, FoldState.RUNNING))
        self._running_label = running.job_label
        renewing = asyncio.create_task(self._renew(job), name=f"kotonia-fold-lease-{job.id}")
        try:
            if job.kind is FoldKind.MAJOR_GC:
                detail = await fold_synopsis_job(self.context, job)
            else:
                detail = await fold_chapter_job(
                    self.context, job, last_attempt=self._attempts(job) >= MAX_ATTEMPTS
                )
            self.wake()
            elapsed = self.clock.monotonic() - self._started_at
            self._notify(FoldProgress(job.conversation_id, job, FoldState.LANDED, detail, elapsed))
        except (FoldFailed, EngineError) as exc:
            # A server that is down defers the job; anything else fails the attempt (the
            # table in chat/fold/outcomes.py).
            if not self._done_elsewhere(job):
                if then(Step.JOB, outcome_of(exc)) is Then.DEFER:
                    self._defer(job, exc)
                else:
                    self._fail(job, str(exc))
        except asyncio.CancelledError:
            if self._giving_way:
                self._giving_way = False
                self._deferrals[job.id] = self._deferrals.get(job.id, 0) + 1
                if not self._done_elsewhere(job):
                    paused = self.store.release_fold(job.id)
                    self._notify(
                        FoldProgress(job.conversation_id, paused, FoldState.DEFERRED, GAVE_WAY)
                    )
                return
            # Shutting down mid-fold: the job goes back to pending and runs next time.
            if not self._done_elsewhere(job):
                self.store.release_fold(job.id)
            raise
        except Exception as exc:  # a bug must not kill the worker; the job records it
            if self._done_elsewhere(job):
                # Another instance took this job over (our lease ran out while this process
                # was stopped or hung) and stored its result first; ours was rolled back.
                log.info("fold job %s was finished by another instance", job.id)
                self._notify(
                    FoldProgress(job.conversation_id, job, FoldState.LANDED, "by another instance")
                )
            else:
                log.exception("fold job %s crashed", job.id)
                self._fail(job, f"{type(exc).__name__}: {exc}")
        finally:
            renewing.cancel()
            self._running = None

    async def _renew(self, job: StoredFoldJob) -> None:
        """Keep the claim on a running job alive (another instance leaves it alone)."""
        while True:
            await self.clock.sleep(LEASE_S / 3)
            try:
                if not self.store.renew_lease(job.id, self.claimer, LEASE_S, now=self.clock.now()):
                    log.warning("fold job %s is no longer claimed by this worker", job.id)
                    return
            except StoreError as exc:  # a busy file: the next renewal tries again
                log.warning("fold job %s: the lease was not renewed: %s", job.id, exc)

    def _done_elsewhere(self, job: StoredFoldJob) -> bool:
        """The job is already done (by another instance): failing it now would raise and kill
        the worker, leaving this instance without folds for the rest of the session."""
        try:
            return self.store.get_fold(job.id).status is FoldStatus.DONE
        except StoreError:
            return False

    def _defer(self, job: StoredFoldJob, exc: Exception) -> None:
        """The server is down or gave way to a user turn: not the job's fault. It goes back to
        pending with the reason as last_error and runs again shortly; the queue is paused in
        effect until the server answers, and this does not count toward MAX_ATTEMPTS."""
        self._deferrals[job.id] = self._deferrals.get(job.id, 0) + 1
        delay = min(getattr(exc, "retry_after_s", UNAVAILABLE_RETRY_S), UNAVAILABLE_RETRY_S)
        error = f"waiting for the model server: {exc}"
        deferred = self.store.fail_fold(job.id, error, self.clock.now() + timedelta(seconds=delay))
        log.info("fold job %s deferred: %s", job.id, exc)
        self._notify(FoldProgress(job.conversation_id, deferred, FoldState.DEFERRED, error))

    def _attempts(self, job: StoredFoldJob) -> int:
        """The job's attempts so far, this one included. Claims that ended in a deferral (server
        down, or gave way to a turn) are not attempts."""
        return job.attempts - self._deferrals.get(job.id, 0)

    def _fail(self, job: StoredFoldJob, error: str) -> None:
        attempts = self._attempts(job)
        retry_at = None
        if attempts < MAX_ATTEMPTS:
            delay = RETRY_BACKOFF_S[attempts - 1]
            retry_at = self.clock.now() + timedelta(seconds=delay)
        failed = self.store.fail_fold(job.id, error, retry_at)
        log.warning("fold job %s failed (attempt %s): %s", job.id, attempts, error)
        self._notify(FoldProgress(job.conversation_id, failed, FoldState.FAILED, error))


def _still_open(job: StoredFoldJob, attempts_before: int) -> bool:
    """The job has not finished an attempt since a turn began waiting for it."""
    if job.status is FoldStatus.RUNNING:
        return True
    return job.status is FoldStatus.PENDING and job.attempts <= attempts_before
