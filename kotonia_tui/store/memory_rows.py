"""The memory a conversation carries: chapters, synopsis versions and the memory state row.

Chapters are written once and never rewritten: a refold adds new chapters and marks the old ones
`superseded_by` the first of them. A refold of a chapter the synopsis took in marks the synopsis
versions that folded it `stale`, so the synopsis is rebuilt from the current chapters, never on
top of a version that holds the old text. A chapter whose messages were all deleted is `retired`
(a refold with nothing left to fold): it leaves the memory with no successor, and a synopsis
that folded it is marked stale the same way. Synopsis versions are all kept; exactly one per
conversation is current (a partial unique index guarantees it) and its `through_message_id`
never goes back. Each write that also completes a fold job does both in one transaction, so a
crash can never store a chapter whose job still looks pending, or the reverse.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence

from kotonia_tui import story_dates
from kotonia_tui.domain import (
    Chapter,
    ChapterOrigin,
    StoredChapter,
    StoredSynopsis,
    Synopsis,
    SynopsisOrigin,
    utcnow,
)
from kotonia_tui.store import fold_jobs
from kotonia_tui.store.codec import stored_as, ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db, is_sqlite_int
from kotonia_tui.store.errors import NotFoundError, StoreError
from kotonia_tui.store.records import MemoryState

# Chapters ------------------------------------------------------------------------------------


def chapter_from_row(row: sqlite3.Row) -> StoredChapter:
    return StoredChapter(
        id=row["id"],
        conversation_id=row["conversation_id"],
        first_message_id=row["first_message_id"],
        last_message_id=row["last_message_id"],
        text=row["text"],
        created_at=ts_from_db(row["created_at"]),
        model=row["model"],
        gen_ms=row["gen_ms"],
        tokens=row["tokens"],
        stale=bool(row["stale"]),
        in_synopsis=bool(row["in_synopsis"]),
        # A chapter stored before D-51 may hold a time its grammar cut ("She was here in the
        # spring of '…"): it is shown as no time (story_dates.told_time; the cast's names are
        # not read here, so an older speaker's line with no mark stays).
        story_time=story_dates.told_time(row["story_time"]),
        superseded_by=row["superseded_by"],
        retired=bool(row["retired"]),
        structure=row["structure"],
        readback_misses=json.loads(row["readback_misses"]),
        note=row["note"],
        origin=ChapterOrigin(row["origin"]),
    )


def get_chapter(db: Db, chapter_id: int) -> StoredChapter:
    row = db.select_one("SELECT * FROM chapters WHERE id = ?", (chapter_id,))
    if row is None:
        raise NotFoundError(f"chapter {chapter_id} does not exist in {db.path}")
    return chapter_from_row(row)


def insert_chapter(db: Db, chapter: Chapter) -> StoredChapter:
    """Insert inside the caller's transaction (a new chapter is never superseded)."""
    if chapter.first_message_id > chapter.last_message_id:
        raise StoreError(
            f"chapter covers messages {chapter.first_message_id}..{chapter.last_message_id}: "
            "the first id is after the last"
        )
    try:
        new_id = db.insert(
            "chapters",
            {
                "conversation_id": chapter.conversation_id,
                "first_message_id": chapter.first_message_id,
                "last_message_id": chapter.last_message_id,
                "text": chapter.text,
                "created_at": ts_to_db(chapter.created_at),
                "model": chapter.model,
                "gen_ms": chapter.gen_ms,
                "tokens": chapter.tokens,
                "stale": int(chapter.stale),
                "in_synopsis": int(chapter.in_synopsis),
                "story_time": chapter.story_time,
                "superseded_by": None,
                # A branch copies a retired chapter as it is (written new, never retired).
                "retired": int(chapter.retired),
                "structure": chapter.structure,
                "readback_misses": json.dumps(chapter.readback_misses, ensure_ascii=False),
                "note": chapter.note,
                "origin": chapter.origin.value,
            },
        )
    except sqlite3.IntegrityError as exc:
        raise NotFoundError(
            f"conversation {chapter.conversation_id} does not exist in {db.path}"
        ) from exc
    return stored_as(StoredChapter, chapter, id=new_id, superseded_by=None)


def add_chapter(db: Db, chapter: Chapter, job_id: int | None = None) -> StoredChapter:
    """Insert the chapter and mark its fold job done, together or not at all."""
    with db.write():
        stored = insert_chapter(db, chapter)
        if job_id is not None:
            fold_jobs.mark_done(db, job_id, chapter.conversation_id)
        return stored


def refold_chapters(
    db: Db, old_ids: Sequence[int], new: Sequence[Chapter], job_id: int | None = None
) -> list[StoredChapter]:
    """Store a refold: the new chapters, the old ones marked superseded by the first of them,
    and the job done, in one transaction.

    When an old chapter was in the synopsis, the new ones are too (they belong to the same
    generation), and every synopsis version that folded the old text is marked stale: the next
    major fold rebuilds the synopsis from a version that never held it. So when the current
    synopsis already covers the new chapters' range (a retired chapter brought back by an undo
    after a major fold folded the chapters around it): live, they would sit after a synopsis
    that tells what came after them, and the next major fold would add them after it, out of
    order; in the synopsis, the rebuild folds them in their place. (A range reaching past the
    synopsis stays live: a rebuild folds only what the synopsis covers.)
    """
    if not new:
        raise StoreError("a refold stores at least one chapter")
    conv_id = new[0].conversation_id
    with db.write():
        olds = _replaceable(db, conv_id, old_ids)
        current = current_synopsis(db, conv_id)
        reach = current.through_message_id if current is not None else 0
        first_new = min(chapter.first_message_id for chapter in new)
        covered = max(chapter.last_message_id for chapter in new) <= reach
        in_synopsis = any(old.in_synopsis for old in olds) or covered
        stored = [
            insert_chapter(db, chapter.model_copy(update={"in_synopsis": in_synopsis}))
            for chapter in new
        ]
        for old in olds:
            db.execute("UPDATE chapters SET superseded_by = ? WHERE id = ?", (stored[0].id, old.id))
        if in_synopsis:
            held = [old.first_message_id for old in olds if old.in_synopsis]
            first = min([*held, first_new])
            _stale_synopses_from(db, conv_id, first)
        if job_id is not None:
            fold_jobs.mark_done(db, job_id, conv_id)
        return stored


def _stale_synopses_from(db: Db, conv_id: int, first_id: int) -> None:
    """Mark stale every synopsis version that folded message `first_id` or later: one that held
    a chapter a refold replaced or a retirement took out (the next major fold rebuilds it)."""
    db.execute(
        """UPDATE synopses SET stale = 1
           WHERE conversation_id = ? AND through_message_id >= ?""",
        (conv_id, first_id),
    )


def _replaceable(db: Db, conv_id: int, ids: Sequence[int]) -> list[StoredChapter]:
    """The chapters `ids`, each of conversation `conv_id` and not superseded yet: what a refold
    may replace or a retirement take out (StoreError otherwise)."""
    olds = [get_chapter(db, chapter_id) for chapter_id in ids]
    for old in olds:
        if old.conversation_id != conv_id:
            raise StoreError(
                f"chapter {old.id} belongs to conversation {old.conversation_id}, not {conv_id}"
            )
        if old.superseded_by is not None:
            raise StoreError(f"chapter {old.id} was already superseded by {old.superseded_by}")
    return olds


def retire_chapters(
    db: Db, conv_id: int, ids: Sequence[int], job_id: int | None = None
) -> list[StoredChapter]:
    """Retire chapters whose messages were all deleted: they leave the memory (the prompt, the
    inspector's chapters, major folds) with no successor, and stay stored for audit; the job
    is done; one transaction. A chapter already retired is left as it was; the ones retired
    now are returned. When one was in the synopsis, every version that folded it is marked
    stale, as a refold of it does: the next major fold rebuilds the synopsis without it.
    (ledger_rows.retire_chapters ends their ledger entries in the same transaction.)"""
    with db.write():
        olds = _replaceable(db, conv_id, ids)
        now = [old for old in olds if not old.retired]
        for old in now:
            db.execute("UPDATE chapters SET retired = 1 WHERE id = ?", (old.id,))
        held = [old.first_message_id for old in now if old.in_synopsis]
        if held:
            _stale_synopses_from(db, conv_id, min(held))
        if job_id is not None:
            fold_jobs.mark_done(db, job_id, conv_id)
        return [old.model_copy(update={"retired": True}) for old in now]


def retired_count(db: Db, conv_id: int) -> int:
    """How many of the conversation's chapters were retired (one read of a partial index)."""
    row = db.select_one(
        "SELECT count(*) AS n FROM chapters WHERE conversation_id = ? AND retired = 1",
        (conv_id,),
    )
    return int(row["n"]) if row is not None else 0


def refold_chapter(db: Db, old_id: int, new: Chapter, job_id: int | None = None) -> StoredChapter:
    """Add the refolded chapter and mark the old one superseded by it, in one transaction."""
    return refold_chapters(db, [old_id], [new], job_id)[0]


def stale_chapters(db: Db, conv_id: int, first_id: int, last_id: int) -> list[StoredChapter]:
    """Stale chapters not yet superseded inside `first_id`..`last_id` (live or in the synopsis):
    the ones a refold of that range replaces. A retired one too (stale since its messages were
    deleted): a refold after the deletion was undone supersedes it."""
    rows = db.select(
        """SELECT * FROM chapters WHERE conversation_id = ? AND stale = 1
               AND superseded_by IS NULL AND first_message_id >= ? AND last_message_id <= ?
           ORDER BY first_message_id, id""",
        (conv_id, first_id, last_id),
    )
    return [chapter_from_row(row) for row in rows]


def synopsis_chapters_after(
    db: Db, conv_id: int, after_id: int, through_id: int, limit: int
) -> list[StoredChapter]:
    """The current chapters the synopsis holds for messages after `after_id` up to
    `through_id`, in story order, at most `limit` (a rebuild reads them batch by batch)."""
    rows = db.select(
        """SELECT * FROM chapters WHERE conversation_id = ? AND in_synopsis = 1
               AND superseded_by IS NULL AND retired = 0
               AND first_message_id > ? AND last_message_id <= ?
           ORDER BY first_message_id, id LIMIT ?""",
        (conv_id, after_id, through_id, limit),
    )
    return [chapter_from_row(row) for row in rows]


def chapters(
    db: Db, conv_id: int, include_in_synopsis: bool = False, include_superseded: bool = False
) -> list[StoredChapter]:
    """Chapters in story order (by first message). By default only the live ones;
    `include_superseded` adds those no longer in the memory (superseded by a refold, or
    retired: their messages were deleted)."""
    where = "conversation_id = ?"
    # These literal conditions match the partial index `chapters_live`, keeping the read small.
    if not include_in_synopsis:
        where += " AND in_synopsis = 0"
    if not include_superseded:
        where += " AND superseded_by IS NULL AND retired = 0"
    rows = db.select(
        f"SELECT * FROM chapters WHERE {where} ORDER BY first_message_id, id", (conv_id,)
    )
    return [chapter_from_row(row) for row in rows]


# Chapter ids per `IN (...)` list: far below SQLite's parameter limit.
_IN_CHUNK = 500


def chapter_ranges(db: Db, conv_id: int, ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """The first and last message ids of each of `ids` that is a chapter of the conversation
    (live, in the synopsis or superseded alike); an id of no chapter of it is left out. One
    read per 500 ids, by primary key."""
    wanted = sorted({i for i in ids if is_sqlite_int(i)})
    out: dict[int, tuple[int, int]] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        for row in db.select(
            "SELECT id, first_message_id, last_message_id FROM chapters "
            f"WHERE id IN ({marks}) AND conversation_id = ?",
            (*chunk, conv_id),
        ):
            out[row["id"]] = (row["first_message_id"], row["last_message_id"])
    return out


def story_times(db: Db, conv_id: int, ids: Iterable[int]) -> dict[int, str]:
    """For each message id, when it happened in the story: the date its scene's opening gave
    (the newest dated message at or before it, `messages.scene_date`), else the in-story time
    of the newest chapter covering it that names one its grammar did not cut (in the synopsis
    or not; a superseded chapter's refold speaks for it). One indexed read or two per id."""
    out: dict[int, str] = {}
    for msg_id in sorted(set(ids)):
        row = db.select_one(
            "SELECT scene_date FROM messages INDEXED BY messages_scene_dates "
            "WHERE conversation_id = ? AND id <= ? AND scene_date IS NOT NULL "
            "ORDER BY id DESC LIMIT 1",
            (conv_id, msg_id),
        )
        if row is not None:
            out[msg_id] = str(row["scene_date"])
            continue
        covering = db.select(
            "SELECT story_time FROM chapters WHERE conversation_id = ? "
            "AND first_message_id <= ? AND last_message_id >= ? "
            "AND superseded_by IS NULL AND retired = 0 "
            "AND story_time IS NOT NULL AND story_time != '' "
            "ORDER BY id DESC",
            (conv_id, msg_id, msg_id),
        )
        # As `chapter_from_row` reads it: an older chapter's cut time is no time.
        times = (story_dates.told_time(str(r["story_time"])) for r in covering)
        if (time := next((t for t in times if t), None)) is not None:
            out[msg_id] = time
    return out


def scene_dates(db: Db, conv_id: int, first_id: int, last_id: int) -> list[str]:
    """The scene dates of messages `first_id`..`last_id`, in story order: the date in force
    at the first (the newest dated message at or before it), then each date an opening
    inside the range gives. Empty when none is dated. Two indexed reads."""
    rows = db.select(
        "SELECT scene_date FROM messages INDEXED BY messages_scene_dates "
        "WHERE conversation_id = ? AND id <= ? AND scene_date IS NOT NULL "
        "ORDER BY id DESC LIMIT 1",
        (conv_id, first_id),
    )
    rows += db.select(
        "SELECT scene_date FROM messages INDEXED BY messages_scene_dates "
        "WHERE conversation_id = ? AND id > ? AND id <= ? AND scene_date IS NOT NULL "
        "ORDER BY id",
        (conv_id, first_id, last_id),
    )
    return [str(row["scene_date"]) for row in rows]


def mark_chapters_stale(db: Db, conv_id: int, message_id: int) -> list[int]:
    """Mark the live chapters whose range covers the message (after an edit); returns their ids.
    A retired chapter is among them (a deleted message of its range put back: its range is
    folded again)."""
    with db.write():
        rows = db.returning(
            """UPDATE chapters SET stale = 1
               WHERE conversation_id = ? AND first_message_id <= ? AND last_message_id >= ?
                 AND superseded_by IS NULL
               RETURNING id""",
            (conv_id, message_id, message_id),
        )
    return sorted(row["id"] for row in rows)


# Synopsis ------------------------------------------------------------------------------------


def synopsis_from_row(row: sqlite3.Row) -> StoredSynopsis:
    return StoredSynopsis(
        id=row["id"],
        conversation_id=row["conversation_id"],
        version=row["version"],
        text=row["text"],
        through_message_id=row["through_message_id"],
        created_at=ts_from_db(row["created_at"]),
        model=row["model"],
        gen_ms=row["gen_ms"],
        tokens=row["tokens"],
        current=bool(row["current"]),
        target_tokens=row["target_tokens"],
        stale=bool(row["stale"]),
        origin=SynopsisOrigin(row["origin"]),
        dropped=tuple(json.loads(row["dropped"])),
    )


def synopsis_row(synopsis: Synopsis, conv_id: int, version: int, through: int) -> dict[str, object]:
    """The columns of `synopsis` stored as version `version` of conversation `conv_id`, through
    message `through` (a branch stores a copy under its own ids)."""
    return {
        "conversation_id": conv_id,
        "version": version,
        "text": synopsis.text,
        "through_message_id": through,
        "created_at": ts_to_db(synopsis.created_at),
        "model": synopsis.model,
        "gen_ms": synopsis.gen_ms,
        "tokens": synopsis.tokens,
        "current": int(synopsis.current),
        "target_tokens": synopsis.target_tokens,
        "origin": synopsis.origin.value,
        # A quoted version stored for a turn (chat/fold/quote_first.py) is stale from the
        # start: the next major fold rebuilds it with the chronicler.
        "stale": int(synopsis.stale),
        "dropped": json.dumps(list(synopsis.dropped), ensure_ascii=False),
    }


def add_synopsis(
    db: Db,
    synopsis: Synopsis,
    folded_chapter_ids: Sequence[int],
    job_id: int | None = None,
) -> StoredSynopsis:
    """Store a new version (numbered by the store: previous + 1) and keep the old ones; mark
    the folded chapters `in_synopsis` and the job done; all in one transaction.

    A version stored as current never covers less than the current one did
    (`through_message_id` never goes back). A version stored with `current=False` is a step of
    a rebuild, kept for audit and as a base for a later rebuild.
    """
    conv_id = synopsis.conversation_id
    with db.write():
        row = db.select_one(
            "SELECT max(version) AS v FROM synopses WHERE conversation_id = ?", (conv_id,)
        )
        version = (row["v"] if row is not None and row["v"] is not None else 0) + 1
        for chapter_id in folded_chapter_ids:
            chapter = get_chapter(db, chapter_id)
            if chapter.conversation_id != conv_id:
                raise StoreError(
                    f"chapter {chapter_id} belongs to conversation {chapter.conversation_id}, "
                    f"not {conv_id}"
                )
        if synopsis.current:
            now = current_synopsis(db, conv_id)
            if now is not None and synopsis.through_message_id < now.through_message_id:
                raise StoreError(
                    f"a synopsis through message {synopsis.through_message_id} would replace "
                    f"version {now.version}, which covers through {now.through_message_id}: "
                    "the synopsis never covers less than before"
                )
            db.execute(
                "UPDATE synopses SET current = 0 WHERE conversation_id = ? AND current = 1",
                (conv_id,),
            )
        try:
            new_id = db.insert(
                "synopses",
                synopsis_row(synopsis, conv_id, version, synopsis.through_message_id),
            )
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}") from exc
        if folded_chapter_ids:
            marks = ",".join("?" * len(folded_chapter_ids))
            db.execute(
                f"UPDATE chapters SET in_synopsis = 1 WHERE id IN ({marks})",
                list(folded_chapter_ids),
            )
        if job_id is not None:
            fold_jobs.mark_done(db, job_id, conv_id)
        return stored_as(StoredSynopsis, synopsis, id=new_id, version=version, stale=False)


def rebuild_base(db: Db, conv_id: int, before_id: int) -> StoredSynopsis | None:
    """The newest version a rebuild can start from: not stale (it never folded a chapter that
    was refolded since) and covering only messages before `before_id`."""
    row = db.select_one(
        """SELECT * FROM synopses WHERE conversation_id = ? AND stale = 0
               AND through_message_id < ?
           ORDER BY through_message_id DESC, version DESC LIMIT 1""",
        (conv_id, before_id),
    )
    return synopsis_from_row(row) if row is not None else None


def current_synopsis(db: Db, conv_id: int) -> StoredSynopsis | None:
    row = db.select_one(
        "SELECT * FROM synopses WHERE conversation_id = ? AND current = 1", (conv_id,)
    )
    return synopsis_from_row(row) if row is not None else None


def synopsis_versions(db: Db, conv_id: int) -> list[StoredSynopsis]:
    """Every version, oldest first (the audit trail of major GCs)."""
    rows = db.select(
        "SELECT * FROM synopses WHERE conversation_id = ? ORDER BY version", (conv_id,)
    )
    return [synopsis_from_row(row) for row in rows]


# Memory state --------------------------------------------------------------------------------


def memory_state(db: Db, conv_id: int) -> MemoryState:
    """The stored row, or the default (nothing folded yet) when there is none."""
    row = db.select_one("SELECT * FROM memory_state WHERE conversation_id = ?", (conv_id,))
    if row is None:
        return MemoryState(conversation_id=conv_id)
    return MemoryState(
        conversation_id=conv_id,
        verbatim_start_id=row["verbatim_start_id"],
        applied_chapter_id=row["applied_chapter_id"],
        applied_synopsis_id=row["applied_synopsis_id"],
        forced_cut_through_id=row["forced_cut_through_id"],
        memory_text=row["memory_text"],
        memory_tokens=row["memory_tokens"],
        memory_model_key=row["memory_model_key"],
        forced_cuts=row["forced_cuts"],
        applied_retired=row["applied_retired"],
        updated_at=ts_from_db(row["updated_at"]),
    )


def set_memory_state(db: Db, state: MemoryState) -> MemoryState:
    now = utcnow()
    stored = state.model_copy(update={"updated_at": now})
    with db.write():
        try:
            db.execute(
                """INSERT INTO memory_state (conversation_id, verbatim_start_id,
                       applied_chapter_id, applied_synopsis_id, forced_cut_through_id,
                       memory_text, memory_tokens, memory_model_key, forced_cuts,
                       applied_retired, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (conversation_id) DO UPDATE SET
                       verbatim_start_id = excluded.verbatim_start_id,
                       applied_chapter_id = excluded.applied_chapter_id,
                       applied_synopsis_id = excluded.applied_synopsis_id,
                       forced_cut_through_id = excluded.forced_cut_through_id,
                       memory_text = excluded.memory_text,
                       memory_tokens = excluded.memory_tokens,
                       memory_model_key = excluded.memory_model_key,
                       forced_cuts = excluded.forced_cuts,
                       applied_retired = excluded.applied_retired,
                       updated_at = excluded.updated_at""",
                (
                    stored.conversation_id,
                    stored.verbatim_start_id,
                    stored.applied_chapter_id,
                    stored.applied_synopsis_id,
                    stored.forced_cut_through_id,
                    stored.memory_text,
                    stored.memory_tokens,
                    stored.memory_model_key,
                    stored.forced_cuts,
                    stored.applied_retired,
                    ts_to_db(now),
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(
                f"conversation {state.conversation_id} does not exist in {db.path}"
            ) from exc
    return stored
