"""A memory snapshot, and the inspector's view, are one consistent picture of the store.

A snapshot reads several tables (the memory state, the retired chapters' count, the current
synopsis, the live chapters, the ledger); a fold stores a chapter and its ledger changes, or a
synopsis, or a retirement, in one transaction, and another instance sharing the file (its fold
worker claims any conversation's jobs) may commit one at any moment. Read in separate
statements, a fold committed between two of them gave a block no store state ever held: a
refolded chapter's old text beside the fact its refold wrote, or a chapter a major fold took
into the synopsis gone from both. Each test here commits a fold from a second connection right
after one of the reader's statements, and checks that what was read is the memory before the
fold or after it, never a mix. Real SQLite files.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from kotonia_tui.chat.memory_snapshot import MemorySnapshot, snapshot_of
from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldKind,
    LedgerKind,
    NewChapter,
    Synopsis,
    utcnow,
)
from kotonia_tui.memory.ledger import LedgerFit
from kotonia_tui.store import Store
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.scripted_chapters import ledger_entry
from tests.store.conftest import make_messages, new_conversation

from .test_folding import CHAPTER, fake_settings_for

A_TEXT = "- Ann met Wren at the lighthouse. (#2)"
A_REFOLDED = "- Ann met Wren at the old lighthouse, after the edit. (#2)"
B_TEXT = "- Wren lit the east lamp at dawn. (#12)"
FACT = "Mia lands on the 14th"
NEW_FACT = "Mia lands on the 15th"
RULE = "Ask before taking the ferry"

# A fold another instance lands: (its store, the conversation, the fold job it finishes).
Fold = Callable[[Store, int, int | None], None]
FOLDED = "-- the fold committed here"


def _chapter(conv_id: int, first: int, last: int, text: str) -> Chapter:
    return Chapter(conversation_id=conv_id, first_message_id=first, last_message_id=last, text=text)


def _story(store: Store, conv_id: int) -> None:
    """Chapters A (messages 1-10, a fact) and B (11-20, a rule)."""
    store.store_chapter(
        _chapter(conv_id, 1, 10, A_TEXT), [ledger_entry(conv_id, LedgerKind.USER_FACT, FACT, 2)]
    )
    store.store_chapter(
        _chapter(conv_id, 11, 20, B_TEXT),
        [ledger_entry(conv_id, LedgerKind.CONSTRAINT, RULE, 12)],
    )


def _refold(store: Store, conv_id: int, job_id: int | None) -> None:
    """A's refold (an edit inside it): a new text and a new fact; A's fact ends with A."""
    a = store.chapters(conv_id)[0]
    new = _chapter(conv_id, a.first_message_id, a.last_message_id, A_REFOLDED)
    entry = ledger_entry(conv_id, LedgerKind.USER_FACT, NEW_FACT, a.first_message_id + 1)
    store.store_refold([a.id], [NewChapter(chapter=new, entries=(entry,))], job_id)


def _major_fold(store: Store, conv_id: int, job_id: int | None) -> None:
    """A major fold takes A into a synopsis."""
    a = store.chapters(conv_id)[0]
    synopsis = Synopsis(
        conversation_id=conv_id, version=0, text="Ann met Wren.", through_message_id=10
    )
    store.add_synopsis(synopsis, [a.id], job_id)


def _retirement(store: Store, conv_id: int, job_id: int | None) -> None:
    """A's messages were deleted: its refold retires it, and its fact ends with it."""
    store.retire_chapters(conv_id, [store.chapters(conv_id)[0].id], job_id)


FOLDS: dict[str, tuple[Fold, FoldKind]] = {
    "refold": (_refold, FoldKind.REFOLD),
    "major fold": (_major_fold, FoldKind.MAJOR_GC),
    "retirement": (_retirement, FoldKind.REFOLD),
}


def _fit_all(live):
    return LedgerFit(tuple(live), ())


def _snapshot(store: Store, conv_id: int) -> MemorySnapshot:
    return snapshot_of(store.memory_rows(conv_id), _fit_all)


def _fold_after(
    monkeypatch: pytest.MonkeyPatch,
    reader: Store,
    fold: Callable[[], None],
    nth: int,
    marker: str = "",
) -> list[str]:
    """Run `fold` (a commit on another connection) right after the reader's `nth` SELECT from
    now that names `marker`; returns the statements read, the fold's place marked."""
    db = reader._db  # the test hooks the reader's own statements
    select = db.select
    seen: list[str] = []

    def hooked(sql, params=()):
        rows = select(sql, params)
        seen.append(" ".join(sql.split())[:60])
        if FOLDED not in seen and sum(marker in line for line in seen) == nth:
            fold()
            seen.append(FOLDED)
        return rows

    monkeypatch.setattr(db, "select", hooked)
    return seen


@pytest.mark.parametrize("fold_name", list(FOLDS))
@pytest.mark.parametrize("nth", [1, 2, 3, 4, 5])
def test_a_fold_between_two_reads_never_mixes_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold_name: str, nth: int
) -> None:
    """The snapshot's six reads (state, retired count, synopsis, chapters, the ledger, the
    live ledger): the fold commits after each of the first five."""
    path = tmp_path / "kotonia.sqlite3"
    fold, _kind = FOLDS[fold_name]
    with Store.open(path) as reader, Store.open(path) as other:  # two connections: two instances
        conv_id = new_conversation(reader).id
        reader.add_messages(conv_id, make_messages(20))
        _story(reader, conv_id)
        before = _snapshot(reader, conv_id)

        seen = _fold_after(monkeypatch, reader, lambda: fold(other, conv_id, None), nth)
        read = _snapshot(reader, conv_id)
        monkeypatch.undo()
        after = _snapshot(reader, conv_id)

        assert FOLDED in seen, seen  # the fold did land mid-read
        assert before.next_text != after.next_text  # the fold changed the memory
        # What the next turn carries is the memory before the fold or after it: never a
        # chapter's old text with the fact its refold wrote, never a chapter the synopsis
        # took missing from both.
        assert read.next_text in (before.next_text, after.next_text), "\n".join(seen)
        # ...and what it counts (a retired chapter the count missed is applied again).
        assert read in (before, after), "\n".join(seen)


def _view_picture(view):
    """What the inspector shows of the memory: its chapters, the ledger (ended or not, carried
    or left out), whether landed memory waits, the fold jobs, the synopsis versions."""
    return (
        [(v.chapter.id, v.chapter.text, v.applied) for v in view.chapters],
        [(e.id, e.text, e.ended_by_chapter_id) for e in view.ledger],
        sorted(view.ledger_in_prompt),
        sorted(view.ledger_left_out),
        view.pending_apply,
        [(j.id, j.status) for j in view.fold_jobs],
        [s.id for s in view.synopsis_versions],
    )


@pytest.mark.parametrize("fold_name", list(FOLDS))
@pytest.mark.parametrize(
    ("marker", "nth"),
    [("FROM memory_state", 1), ("FROM ledger l", 1), ("FROM ledger l", 2)],
    ids=["after the state", "after the ledger", "after the live ledger"],
)
async def test_a_fold_landing_while_the_inspector_reads_is_shown_whole_or_not_yet(
    make_fake_service, monkeypatch: pytest.MonkeyPatch, fold_name: str, marker: str, nth: int
) -> None:
    """A second instance lands a fold, its job done with it, while the inspector reads: after
    the first of the memory's reads, between the two ledger reads, or after the last of the
    snapshot's (the view read its synopsis versions, chapters and jobs after those)."""
    fold, kind = FOLDS[fold_name]
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    store = service.store
    conv_id = service.new_conversation(service.library.get(key)).id  # the greeting: id 1
    store.add_messages(conv_id, make_messages(19))
    _story(store, conv_id)
    # The fold's job, pending and not due: this instance's worker leaves it to the other.
    job = store.enqueue_fold(
        FoldJob(
            conversation_id=conv_id,
            kind=kind,
            first_message_id=None if kind is FoldKind.MAJOR_GC else 1,
            last_message_id=None if kind is FoldKind.MAJOR_GC else 10,
            not_before=utcnow() + timedelta(days=1),
        )
    )
    with Store.open(store.path) as other:
        before = _view_picture(service.memory_view(conv_id))
        seen = _fold_after(monkeypatch, store, lambda: fold(other, conv_id, job.id), nth, marker)
        read = _view_picture(service.memory_view(conv_id))
        monkeypatch.undo()
        after = _view_picture(service.memory_view(conv_id))

    assert FOLDED in seen, seen
    assert before != after
    assert read in (before, after), "\n".join(seen)
