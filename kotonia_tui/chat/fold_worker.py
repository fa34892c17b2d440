"""The fold worker: runs durable fold jobs in the background, one at a time.

Jobs live in SQLite (pending jobs resume at start-up; a job a killed process left running goes
back to pending). The worker sleeps until the next job is due or it is woken. Model calls go
through the same engine as turns, on the fold slot at background priority: the engine's owner
thread runs a waiting user turn first, and the fold resumes after it where it stopped, on its
own KV context, so the chat's prompt cache is never evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from kotonia_tui.chat.chronicle import MIN_SUMMARY_ROOM, Chronicled, NoRoomError, chronicle
from kotonia_tui.chat.events import FoldProgress, FoldState, ServiceEvent
from kotonia_tui.config import Settings
from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldKind,
    FoldStatus,
    Message,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredMessage,
    Synopsis,
    utcnow,
)
from kotonia_tui.engine import (
    BackendUnavailableError,
    Engine,
    EngineError,
)
from kotonia_tui.memory.assembly import in_prompt
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chronicler import (
    Cast,
    ChronicleKind,
    ChronicleRequest,
    Verdict,
    chronicler_instructions,
    ledger_prompt,
    render_source,
)
from kotonia_tui.memory.policy import WindowMessage, major_gc_split, split_source
from kotonia_tui.memory.structured import ledger_changes
from kotonia_tui.store import Store, StoreError

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
RETRY_BACKOFF_S = (30, 120, 600, 1800, 3600)
UNAVAILABLE_RETRY_S = 5.0  # how often a job waiting for a server that is down tries again
SOURCE_READ_LIMIT = 4000  # rows per read of a chapter's source; bigger ranges are split


class FoldFailed(Exception):
    """A fold that produced nothing usable (refused twice, empty, or cut); retried later."""


class FoldWorker:
    """An asyncio task that drains the fold queue."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        settings: Settings,
        *,
        cast: Callable[[int], Cast],
        message_tokens: Callable[[Message], int],
        notify: Callable[[ServiceEvent], None],
    ) -> None:
        self.store = store
        self.engine = engine
        self.settings = settings
        self._cast = cast
        self._message_tokens = message_tokens
        self._notify = notify
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: StoredFoldJob | None = None
        self._started_at = 0.0
        self._idle = asyncio.Event()
        self._deferrals: dict[int, int] = {}  # job id -> claims that ended waiting for a server
        self._paused = False
        fold_ctx = engine.info.fold_n_ctx
        self.budgets = Budgets.for_window(engine.n_ctx, engine.profile.reply_max_tokens, settings)
        # The chronicler's prompt and output share the fold context.
        self.max_output = min(self.budgets.summary_max_tokens, max(64, fold_ctx // 2))

    # ---- lifetime -------------------------------------------------------------------------

    def start(self) -> None:
        resumed = self.store.requeue_running()
        if resumed:
            log.info("resumed fold jobs left running by a previous process: %s", resumed)
        self._task = asyncio.create_task(self._run(), name="kotonia-fold-worker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
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
    def running(self) -> tuple[StoredFoldJob, float] | None:
        if self._running is None:
            return None
        return self._running, time.monotonic() - self._started_at

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no job is due or running (a script waits for the memory to settle)."""
        self.wake()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def wait_settled(self, conv_id: int, poll_s: float = 0.2) -> None:
        """Wait until the conversation's scheduled folds have run (retries of failed jobs,
        which wait minutes by design, are not waited for)."""
        while True:
            jobs = self.store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))
            waiting = [j for j in jobs if j.status is FoldStatus.RUNNING or j.attempts == 0]
            if not waiting or self._paused:
                return
            self.wake()
            await asyncio.sleep(poll_s)

    # ---- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if self._paused:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self.store.claim_next_fold(utcnow())
            if job is None:
                self._idle.set()
                await self._sleep_until_due()
                continue
            self._idle.clear()
            await self._run_one(job)

    async def _sleep_until_due(self) -> None:
        due = self.store.next_fold_due()
        timeout = None
        if due is not None:
            timeout = max(0.05, (due - utcnow()).total_seconds())
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _run_one(self, job: StoredFoldJob) -> None:
        self._running = job
        self._started_at = time.monotonic()
        self._notify(FoldProgress(job.conversation_id, job, FoldState.RUNNING))
        try:
            if job.kind is FoldKind.MAJOR_GC:
                detail = await self._major_gc(job)
            else:
                detail = await self._chapter(job)
            elapsed = time.monotonic() - self._started_at
            self._notify(FoldProgress(job.conversation_id, job, FoldState.LANDED, detail, elapsed))
        except BackendUnavailableError as exc:
            if not self._done_elsewhere(job):
                self._defer(job, exc)
        except (FoldFailed, EngineError) as exc:
            if not self._done_elsewhere(job):
                self._fail(job, str(exc))
        except asyncio.CancelledError:
            # Shutting down mid-fold: the job goes back to pending and runs next time.
            if not self._done_elsewhere(job):
                self.store.fail_fold(job.id, "interrupted by shutdown", utcnow())
            raise
        except Exception as exc:  # a bug must not kill the worker; the job records it
            if self._done_elsewhere(job):
                # A second instance on the same file requeued this job at its start-up, ran it
                # too and stored its result first; ours was rolled back (never stored twice).
                log.info("fold job %s was finished by another instance", job.id)
                self._notify(
                    FoldProgress(job.conversation_id, job, FoldState.LANDED, "by another instance")
                )
            else:
                log.exception("fold job %s crashed", job.id)
                self._fail(job, f"{type(exc).__name__}: {exc}")
        finally:
            self._running = None

    def _done_elsewhere(self, job: StoredFoldJob) -> bool:
        """The job is already done (by another instance): failing it now would raise and kill
        the worker, leaving this instance without folds for the rest of the session."""
        try:
            return self.store.get_fold(job.id).status is FoldStatus.DONE
        except StoreError:
            return False

    def _defer(self, job: StoredFoldJob, exc: BackendUnavailableError) -> None:
        """The server is down or gave way to a user turn: not the job's fault. It goes back to
        pending with the reason as last_error and runs again shortly; the queue is paused in
        effect until the server answers, and this does not count toward MAX_ATTEMPTS."""
        self._deferrals[job.id] = self._deferrals.get(job.id, 0) + 1
        delay = min(getattr(exc, "retry_after_s", UNAVAILABLE_RETRY_S), UNAVAILABLE_RETRY_S)
        error = f"waiting for the model server: {exc}"
        deferred = self.store.fail_fold(job.id, error, utcnow() + timedelta(seconds=delay))
        log.info("fold job %s deferred: %s", job.id, exc)
        self._notify(FoldProgress(job.conversation_id, deferred, FoldState.DEFERRED, error))

    def _fail(self, job: StoredFoldJob, error: str) -> None:
        # Claims that ended in a deferral (server down) are not failed attempts.
        attempts = job.attempts - self._deferrals.get(job.id, 0)
        retry_at = None
        if attempts < MAX_ATTEMPTS:
            delay = RETRY_BACKOFF_S[min(attempts, len(RETRY_BACKOFF_S)) - 1]
            retry_at = utcnow() + timedelta(seconds=delay)
        failed = self.store.fail_fold(job.id, error, retry_at)
        log.warning("fold job %s failed (attempt %s): %s", job.id, attempts, error)
        self._notify(FoldProgress(job.conversation_id, failed, FoldState.FAILED, error))

    # ---- the chronicler -------------------------------------------------------------------

    async def _ask(self, request: ChronicleRequest) -> Chronicled:
        """The chronicler's usable reply (a refusal is asked once more), or FoldFailed."""
        try:
            done = await chronicle(self.engine, request, max_output=self.max_output)
        except NoRoomError as exc:
            raise FoldFailed(str(exc)) from exc
        if not done.reply.ok:
            if done.reply.verdict is Verdict.REFUSED:
                log.warning("the chronicler refused: %r", done.reply.text[:120])
            raise FoldFailed(done.problem)
        return done

    # ---- chapters -------------------------------------------------------------------------

    async def _source(
        self, job: StoredFoldJob, cast: Cast, ledger: Sequence[StoredLedgerEntry] = ()
    ) -> list[StoredMessage]:
        """The job's messages, at most one chapter's worth (oldest first).

        Sized by what the chronicler actually reads (each message as rendered for it, with
        its "who -> whom" labels), and bounded so the instructions and the summary's room
        still fit the fold context.
        """
        first = job.first_message_id or 0
        last = job.last_message_id or 0
        rows = self.store.messages_from(
            job.conversation_id, first, SOURCE_READ_LIMIT, model_key=self.engine.model_key
        )
        rows = [m for m in rows if m.id <= last]
        if not rows:
            return []
        fold_ctx = self.engine.info.fold_n_ctx
        # One batch for the instructions and every message: up to SOURCE_READ_LIMIT counts,
        # which a server backend answers without blocking the loop.
        instructions, *message_costs = await self.engine.count_tokens_many(
            # The ledger the chapter prompt carries (open threads, facts it may replace) is
            # part of its fixed cost.
            [chronicler_instructions(ChronicleKind.CHAPTER, cast) + ledger_prompt(ledger)]
            + [render_source([m], char=cast.char, user=cast.user) for m in rows]
        )
        reserve = min(self.max_output, max(4 * MIN_SUMMARY_ROOM, fold_ctx // 4))
        budget = min(self.budgets.chapter_source, fold_ctx - instructions - reserve - 64)
        costs = [WindowMessage(m.id, cost) for m, cost in zip(rows, message_costs, strict=True)]
        _, piece_last = split_source(costs, max(budget, 1))[0]
        return [m for m in rows if m.id <= piece_last]

    async def _chapter(self, job: StoredFoldJob) -> str:
        cast = self._cast(job.conversation_id)
        ledger = self.store.ledger(job.conversation_id)
        source = await self._source(job, cast, ledger)
        if not any(in_prompt(m.role) for m in source):
            # Nothing, or only notes imported with a chat ("[Start a new chat]"), which are not
            # part of the story: the chronicler is not asked to write about them.
            self.store.finish_fold(job.id)
            return "nothing left to fold"
        done = await self._ask(ChronicleRequest.chapter(source, cast, ledger))
        (tokens,) = await self.engine.count_tokens_many([done.reply.text])
        first_id, last_id = source[0].id, source[-1].id
        structure = done.reply.structure
        entries, endings = (
            ledger_changes(structure, job.conversation_id, ledger) if structure else ([], [])
        )
        chapter = Chapter(
            conversation_id=job.conversation_id,
            first_message_id=first_id,
            last_message_id=last_id,
            text=done.reply.text,
            model=self.engine.info.model_name,
            gen_ms=done.gen_ms,
            tokens=tokens,
            story_time=done.reply.story_time,
            structure=structure.to_json() if structure else None,
            readback_misses=list(done.reply.misses),
        )
        remainder = job.last_message_id is not None and last_id < job.last_message_id
        refold_of = None
        if job.kind is FoldKind.REFOLD:
            stale = [
                c
                for c in self.store.chapters(job.conversation_id)
                if c.stale and c.first_message_id == job.first_message_id
            ]
            refold_of = stale[0].id if stale else None
        self.store.store_chapter(chapter, entries, endings, job_id=job.id, refold_of=refold_of)
        if remainder:
            # A range too large for one call becomes several chapters, oldest first.
            self.store.enqueue_fold(
                FoldJob(
                    conversation_id=job.conversation_id,
                    kind=job.kind,
                    first_message_id=last_id + 1,
                    last_message_id=job.last_message_id,
                )
            )
        self._maybe_major_gc(job.conversation_id)
        self.wake()
        return f"chapter for messages #{first_id}-#{last_id} ({chapter.tokens} tokens)"

    def _maybe_major_gc(self, conv_id: int) -> None:
        chapters = self.store.chapters(conv_id)
        if major_gc_split([c.tokens for c in chapters], self.budgets.major_gc) == 0:
            return
        open_jobs = self.store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))
        if any(j.kind is FoldKind.MAJOR_GC for j in open_jobs):
            return
        self.store.enqueue_fold(FoldJob(conversation_id=conv_id, kind=FoldKind.MAJOR_GC))

    # ---- major GC -------------------------------------------------------------------------

    async def _major_gc(self, job: StoredFoldJob) -> str:
        cast = self._cast(job.conversation_id)
        chapters = self.store.chapters(job.conversation_id)
        count = major_gc_split([c.tokens for c in chapters], self.budgets.major_gc)
        if count == 0:
            self.store.finish_fold(job.id)
            return "chapters no longer need folding"
        older = chapters[:count]
        previous = self.store.current_synopsis(job.conversation_id)
        done = await self._ask(
            ChronicleRequest.synopsis(previous.text if previous else None, older, cast)
        )
        (tokens,) = await self.engine.count_tokens_many([done.reply.text])
        synopsis = Synopsis(
            conversation_id=job.conversation_id,
            version=(previous.version + 1) if previous else 1,
            text=done.reply.text,
            through_message_id=older[-1].last_message_id,
            model=self.engine.info.model_name,
            gen_ms=done.gen_ms,
            tokens=tokens,
        )
        stored = self.store.add_synopsis(synopsis, [c.id for c in older], job.id)
        return f"synopsis version {stored.version} from {count} chapters ({stored.tokens} tokens)"
