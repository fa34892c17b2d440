"""The ledger table: entries a chapter writes, and ends a later chapter records.

Append-only: an entry's kind, text, subject and evidence never change. A later chapter may end
it (a thread resolved, a fact or rule superseded), which sets who ended it and how; the entry
stays for the inspector and the audit. An entry whose chapter is retired (every message of the
chapter's range deleted) ends with it, `retired`, ended by that same chapter: no later chapter
replaced it, and it must not outlive the messages it rests on. A chapter and its ledger
changes are stored in the one transaction that stores the chapter, so memory never holds one
without the other.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from kotonia_tui.domain import (
    Chapter,
    LedgerEnd,
    LedgerEnding,
    LedgerEntry,
    LedgerKind,
    LedgerSource,
    NewChapter,
    StoredChapter,
    StoredLedgerEntry,
)
from kotonia_tui.store import memory_rows
from kotonia_tui.store.codec import ts_from_db, ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import StoreError
from kotonia_tui.store.records import Retirement

# Said by the entries a refold ended with the chapter that wrote them.
REFOLD_NOTE = "its messages were edited and folded again"
# Said by the entries that ended with their retired chapter.
RETIRE_NOTE = "its messages were deleted"


def entry_from_row(row: sqlite3.Row) -> StoredLedgerEntry:
    return StoredLedgerEntry(
        id=row["id"],
        conversation_id=row["conversation_id"],
        kind=LedgerKind(row["kind"]),
        text=row["text"],
        subject=row["subject"],
        evidence=json.loads(row["evidence"]),
        chapter_id=row["chapter_id"],
        ended_by_chapter_id=row["ended_by_chapter_id"],
        end=LedgerEnd(row["end_kind"]) if row["end_kind"] else None,
        end_note=row["end_note"],
        created_at=ts_from_db(row["created_at"]),
        source=LedgerSource(row["source"]),
        label_number=row["label_number"],
    )


def store_chapter(
    db: Db,
    chapter: Chapter,
    entries: Sequence[LedgerEntry],
    endings: Sequence[LedgerEnding],
    *,
    job_id: int | None = None,
) -> StoredChapter:
    """Store the chapter, its new ledger entries and the endings it records, and mark its job
    done: all in one transaction."""
    with db.write():
        stored = memory_rows.add_chapter(db, chapter, job_id)
        _write_ledger(db, stored, entries, endings)
        return stored


def store_refold(
    db: Db, old_ids: Sequence[int], new: Sequence[NewChapter], job_id: int | None = None
) -> list[StoredChapter]:
    """Store a refold (memory_rows.refold_chapters) with each new chapter's ledger changes, in
    one transaction. The live entries the replaced chapters wrote end with them, superseded by
    the first new chapter: they rest on text that was edited, so they leave the prompt and stay
    in the store, valid from their chapter to the refold."""
    with db.write():
        stored = memory_rows.refold_chapters(db, old_ids, [n.chapter for n in new], job_id)
        for chapter, change in zip(stored, new, strict=True):
            _write_ledger(db, chapter, change.entries, change.endings)
        if old_ids:
            marks = ", ".join("?" for _ in old_ids)
            db.execute(
                "UPDATE ledger SET ended_by_chapter_id = ?, end_kind = ?, end_note = ? "
                f"WHERE ended_by_chapter_id IS NULL AND chapter_id IN ({marks})",
                (stored[0].id, LedgerEnd.SUPERSEDED.value, REFOLD_NOTE, *old_ids),
            )
        return stored


def retire_chapters(
    db: Db, conv_id: int, ids: Sequence[int], job_id: int | None = None
) -> Retirement:
    """Retire chapters whose messages were all deleted (memory_rows.retire_chapters) and end
    the live entries they wrote, in one transaction. There is no refold to end them "by" (a
    refold with no chapter cannot store), so each ends by the chapter that wrote it, as
    `retired` with RETIRE_NOTE: it leaves the prompt and stays in the store, as a superseded
    entry does."""
    with db.write():
        retired = memory_rows.retire_chapters(db, conv_id, ids, job_id)
        ended = 0
        if retired:
            marks = ", ".join("?" for _ in retired)
            cursor = db.execute(
                "UPDATE ledger SET ended_by_chapter_id = chapter_id, end_kind = ?, end_note = ? "
                f"WHERE ended_by_chapter_id IS NULL AND chapter_id IN ({marks})",
                (LedgerEnd.RETIRED.value, RETIRE_NOTE, *(c.id for c in retired)),
            )
            ended = cursor.rowcount
        return Retirement(chapters=retired, ended_entries=ended)


def _write_ledger(
    db: Db, stored: StoredChapter, entries: Sequence[LedgerEntry], endings: Sequence[LedgerEnding]
) -> None:
    for entry in entries:
        db.insert(
            "ledger",
            {
                "conversation_id": stored.conversation_id,
                "kind": entry.kind.value,
                "text": entry.text,
                "subject": entry.subject,
                "evidence": json.dumps(entry.evidence),
                "chapter_id": stored.id,
                "ended_by_chapter_id": None,
                "end_kind": None,
                "end_note": "",
                "created_at": ts_to_db(entry.created_at),
                "source": entry.source.value,
            },
        )
    for ending in endings:
        cursor = db.execute(
            "UPDATE ledger SET ended_by_chapter_id = ?, end_kind = ?, end_note = ? "
            "WHERE id = ? AND conversation_id = ? AND ended_by_chapter_id IS NULL",
            (stored.id, ending.end.value, ending.note, ending.entry_id, stored.conversation_id),
        )
        if cursor.rowcount != 1:
            raise StoreError(
                f"ledger entry {ending.entry_id} of conversation {stored.conversation_id} "
                "does not exist or was already ended"
            )


def ledger(db: Db, conv_id: int, *, include_ended: bool = False) -> list[StoredLedgerEntry]:
    """The conversation's ledger in the order it was written. By default only the live entries:
    not ended, and written by a chapter a refold has not replaced nor retired."""
    where = "l.conversation_id = ?"
    if not include_ended:
        where += " AND l.ended_by_chapter_id IS NULL AND c.superseded_by IS NULL AND c.retired = 0"
    rows = db.select(
        f"SELECT l.* FROM ledger l JOIN chapters c ON c.id = l.chapter_id WHERE {where} "
        "ORDER BY l.id",
        (conv_id,),
    )
    return [entry_from_row(row) for row in rows]
