"""The memory a conversation carries: chapters, synopsis versions and the memory state row.

Chapters are written once and never rewritten: a refold adds a new chapter and marks the old one
`superseded_by` it. Synopsis versions are all kept; exactly one per conversation is current (a
partial unique index guarantees it). Each write that also completes a fold job does both in one
transaction, so a crash can never store a chapter whose job still looks pending, or the reverse.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence

from kotonia_tui.domain import Chapter, StoredChapter, StoredSynopsis, Synopsis, utcnow
from kotonia_tui.store import fold_jobs
from kotonia_tui.store.codec import stored_as, ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db
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
        story_time=row["story_time"],
        superseded_by=row["superseded_by"],
        structure=row["structure"],
        readback_misses=json.loads(row["readback_misses"]),
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
                "structure": chapter.structure,
                "readback_misses": json.dumps(chapter.readback_misses, ensure_ascii=False),
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


def refold_chapter(db: Db, old_id: int, new: Chapter, job_id: int | None = None) -> StoredChapter:
    """Add the refolded chapter and mark the old one superseded by it, in one transaction."""
    with db.write():
        old = get_chapter(db, old_id)
        if old.conversation_id != new.conversation_id:
            raise StoreError(
                f"chapter {old_id} belongs to conversation {old.conversation_id}, "
                f"not {new.conversation_id}"
            )
        if old.superseded_by is not None:
            raise StoreError(f"chapter {old_id} was already superseded by {old.superseded_by}")
        stored = insert_chapter(db, new)
        db.execute("UPDATE chapters SET superseded_by = ? WHERE id = ?", (stored.id, old_id))
        if job_id is not None:
            fold_jobs.mark_done(db, job_id, new.conversation_id)
        return stored


def chapters(
    db: Db, conv_id: int, include_in_synopsis: bool = False, include_superseded: bool = False
) -> list[StoredChapter]:
    """Chapters in story order (by first message). By default only the live ones."""
    where = "conversation_id = ?"
    # These literal conditions match the partial index `chapters_live`, keeping the read small.
    if not include_in_synopsis:
        where += " AND in_synopsis = 0"
    if not include_superseded:
        where += " AND superseded_by IS NULL"
    rows = db.select(
        f"SELECT * FROM chapters WHERE {where} ORDER BY first_message_id, id", (conv_id,)
    )
    return [chapter_from_row(row) for row in rows]


def story_times(db: Db, conv_id: int, ids: Iterable[int]) -> dict[int, str]:
    """For each message id, the in-story time of the newest chapter covering it that names
    one (in the synopsis or not; a superseded chapter's refold speaks for it)."""
    out: dict[int, str] = {}
    for msg_id in ids:
        row = db.select_one(
            "SELECT story_time FROM chapters WHERE conversation_id = ? "
            "AND first_message_id <= ? AND last_message_id >= ? "
            "AND superseded_by IS NULL AND story_time IS NOT NULL AND story_time != '' "
            "ORDER BY id DESC LIMIT 1",
            (conv_id, msg_id, msg_id),
        )
        if row is not None:
            out[msg_id] = str(row["story_time"])
    return out


def mark_chapters_stale(db: Db, conv_id: int, message_id: int) -> list[int]:
    """Mark the live chapters whose range covers the message (after an edit); returns their ids."""
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
    )


def add_synopsis(
    db: Db, synopsis: Synopsis, folded_chapter_ids: Sequence[int], job_id: int | None = None
) -> StoredSynopsis:
    """Store a new current version (numbered by the store: previous + 1), keep the old ones,
    mark the folded chapters `in_synopsis` and the job done; all in one transaction."""
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
        db.execute(
            "UPDATE synopses SET current = 0 WHERE conversation_id = ? AND current = 1", (conv_id,)
        )
        try:
            new_id = db.insert(
                "synopses",
                {
                    "conversation_id": conv_id,
                    "version": version,
                    "text": synopsis.text,
                    "through_message_id": synopsis.through_message_id,
                    "created_at": ts_to_db(synopsis.created_at),
                    "model": synopsis.model,
                    "gen_ms": synopsis.gen_ms,
                    "tokens": synopsis.tokens,
                    "current": 1,
                },
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
        return stored_as(StoredSynopsis, synopsis, id=new_id, version=version, current=True)


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
                       memory_text, memory_tokens, memory_model_key, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (conversation_id) DO UPDATE SET
                       verbatim_start_id = excluded.verbatim_start_id,
                       applied_chapter_id = excluded.applied_chapter_id,
                       applied_synopsis_id = excluded.applied_synopsis_id,
                       forced_cut_through_id = excluded.forced_cut_through_id,
                       memory_text = excluded.memory_text,
                       memory_tokens = excluded.memory_tokens,
                       memory_model_key = excluded.memory_model_key,
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
                    ts_to_db(now),
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(
                f"conversation {state.conversation_id} does not exist in {db.path}"
            ) from exc
    return stored
