"""Chapters, synopsis versions and memory state: the memory a long story depends on."""

from __future__ import annotations

from pathlib import Path

import pytest

from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldKind,
    FoldStatus,
    LedgerEnd,
    LedgerEnding,
    LedgerEntry,
    LedgerKind,
    Message,
    NewChapter,
    Role,
    Synopsis,
    TurnMetrics,
)
from kotonia_tui.store import MemoryState, NotFoundError, Store, StoreError
from kotonia_tui.store.ledger_rows import RETIRE_NOTE
from kotonia_tui.store.migrations import SCHEMA_VERSION, _scene_dates

from .conftest import make_messages, new_conversation, stored_before


def _chapter(conv_id: int, first: int, last: int, text: str = "chapter") -> Chapter:
    return Chapter(conversation_id=conv_id, first_message_id=first, last_message_id=last, text=text)


def test_chapter_and_its_job_land_together(store: Store) -> None:
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(10))
    job = store.enqueue_fold(
        FoldJob(
            conversation_id=conv.id,
            kind=FoldKind.CHAPTER,
            first_message_id=ids[0],
            last_message_id=ids[4],
        )
    )
    claimed = store.claim_next_fold()
    chapter = store.add_chapter(_chapter(conv.id, ids[0], ids[4], "They met."), job_id=claimed.id)
    assert store.get_fold(job.id).status is FoldStatus.DONE
    assert store.chapters(conv.id) == [chapter]


def test_a_chapter_insert_that_fails_part_way_leaves_nothing(store: Store) -> None:
    conv = new_conversation(store)
    other = new_conversation(store, key="other")
    job = store.enqueue_fold(FoldJob(conversation_id=other.id, kind=FoldKind.CHAPTER))
    # The chapter row is written first, then the job check fails: both must be rolled back.
    with pytest.raises(StoreError, match=f"fold job {job.id} belongs to conversation {other.id}"):
        store.add_chapter(_chapter(conv.id, 1, 2), job_id=job.id)
    with pytest.raises(NotFoundError, match="fold job 999 does not exist"):
        store.add_chapter(_chapter(conv.id, 1, 2), job_id=999)
    assert store.chapters(conv.id, include_in_synopsis=True, include_superseded=True) == []
    assert store.get_fold(job.id).status is FoldStatus.PENDING


def test_a_job_run_twice_stores_its_chapter_once(store: Store) -> None:
    conv = new_conversation(store)
    job = store.enqueue_fold(FoldJob(conversation_id=conv.id, kind=FoldKind.CHAPTER))
    store.add_chapter(_chapter(conv.id, 1, 2), job_id=job.id)
    with pytest.raises(StoreError, match="already done"):
        store.add_chapter(_chapter(conv.id, 1, 2), job_id=job.id)
    assert len(store.chapters(conv.id)) == 1


def test_edit_marks_covering_chapters_stale_and_refold_supersedes_without_rewriting(
    store: Store,
) -> None:
    conv = new_conversation(store)
    first = store.add_chapter(_chapter(conv.id, 1, 10, "old one"))
    second = store.add_chapter(_chapter(conv.id, 11, 20))
    assert store.mark_chapters_stale(conv.id, 5) == [first.id]
    assert store.get_chapter(first.id).stale

    job = store.enqueue_fold(
        FoldJob(
            conversation_id=conv.id, kind=FoldKind.REFOLD, first_message_id=1, last_message_id=10
        )
    )
    new = store.refold_chapter(first.id, _chapter(conv.id, 1, 10, "new one"), job_id=job.id)
    old = store.get_chapter(first.id)
    assert (old.text, old.superseded_by) == ("old one", new.id)  # kept word for word
    assert [c.id for c in store.chapters(conv.id)] == [new.id, second.id]  # story order
    assert len(store.chapters(conv.id, include_superseded=True)) == 3
    assert store.get_fold(job.id).status is FoldStatus.DONE
    with pytest.raises(StoreError, match=f"chapter {first.id} was already superseded"):
        store.refold_chapter(first.id, _chapter(conv.id, 1, 10))


def test_chapter_ranges_are_the_conversations_own_chapters_of_any_generation(
    store: Store,
) -> None:
    # What names a chapter to a person (its range) is found for a chapter refolded or folded
    # into the synopsis since; an id of another conversation's chapter, or of none, is not.
    conv = new_conversation(store)
    other = new_conversation(store, key="other")
    old = store.add_chapter(_chapter(conv.id, 1, 10))
    new = store.refold_chapter(old.id, _chapter(conv.id, 1, 10))
    folded = store.add_chapter(_chapter(conv.id, 11, 20).model_copy(update={"in_synopsis": True}))
    theirs = store.add_chapter(_chapter(other.id, 21, 30))
    asked = [old.id, new.id, folded.id, theirs.id, 999, 2**70]
    assert store.chapter_ranges(conv.id, asked) == {
        old.id: (1, 10),
        new.id: (1, 10),
        folded.id: (11, 20),
    }
    assert store.chapter_ranges(conv.id, []) == {}


def test_synopsis_versions_are_all_kept_with_exactly_one_current(store: Store) -> None:
    conv = new_conversation(store)
    chapters = [store.add_chapter(_chapter(conv.id, i * 10 + 1, i * 10 + 10)) for i in range(4)]
    assert store.current_synopsis(conv.id) is None
    v1 = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="one", through_message_id=20),
        [chapters[0].id, chapters[1].id],
    )
    job = store.enqueue_fold(FoldJob(conversation_id=conv.id, kind=FoldKind.MAJOR_GC))
    v2 = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="two", through_message_id=30),
        [chapters[2].id],
        job_id=job.id,
    )
    assert (v1.version, v2.version) == (1, 2)
    assert store.current_synopsis(conv.id) == v2
    versions = store.synopsis_versions(conv.id)
    assert [(s.text, s.current) for s in versions] == [("one", False), ("two", True)]
    assert [c.id for c in store.chapters(conv.id)] == [chapters[3].id]
    assert len(store.chapters(conv.id, include_in_synopsis=True)) == 4
    assert store.get_fold(job.id).status is FoldStatus.DONE


def test_a_failed_synopsis_changes_nothing(store: Store) -> None:
    conv = new_conversation(store)
    other = new_conversation(store, key="other")
    mine = store.add_chapter(_chapter(conv.id, 1, 5))
    theirs = store.add_chapter(_chapter(other.id, 1, 5))
    store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=1, text="v1", through_message_id=1), []
    )
    with pytest.raises(StoreError, match=f"chapter {theirs.id} belongs to conversation"):
        store.add_synopsis(
            Synopsis(conversation_id=conv.id, version=2, text="v2", through_message_id=5),
            [mine.id, theirs.id],
        )
    assert store.current_synopsis(conv.id).text == "v1"
    assert len(store.synopsis_versions(conv.id)) == 1
    assert not store.get_chapter(mine.id).in_synopsis


def test_memory_state_defaults_and_round_trips(store: Store) -> None:
    conv = new_conversation(store)
    assert store.memory_state(conv.id) == MemoryState(conversation_id=conv.id)
    saved = store.set_memory_state(
        MemoryState(
            conversation_id=conv.id,
            verbatim_start_id=40,
            applied_chapter_id=3,
            applied_synopsis_id=1,
            forced_cut_through_id=None,
        )
    )
    assert store.memory_state(conv.id) == saved
    assert saved.updated_at is not None
    with pytest.raises(NotFoundError, match="conversation 77 does not exist"):
        store.set_memory_state(MemoryState(conversation_id=77))


def test_turn_metrics_newest_last(store: Store) -> None:
    conv = new_conversation(store)
    (msg_id,) = store.add_messages(conv.id, make_messages(1))
    assert store.last_turn_metrics(conv.id) is None
    for reused in (0, 100, 180):
        store.add_turn_metrics(
            conv.id,
            msg_id,
            TurnMetrics(prompt_positions=200, reused=reused, evaluated=200 - reused),
        )
    assert store.last_turn_metrics(conv.id).reused == 180
    assert [r.metrics.reused for r in store.turn_metrics(conv.id, 2)] == [100, 180]
    store.delete_message(msg_id)  # the figures outlive the message
    assert [r.message_id for r in store.turn_metrics(conv.id, 5)] == [None, None, None]


def test_a_refold_of_a_chapter_in_the_synopsis_stays_in_it_and_makes_the_synopsis_stale(
    store: Store,
) -> None:
    conv = new_conversation(store)
    a = store.add_chapter(_chapter(conv.id, 1, 10, "a"))
    b = store.add_chapter(_chapter(conv.id, 11, 20, "b"))
    c = store.add_chapter(_chapter(conv.id, 21, 30, "c"))
    v1 = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="s1", through_message_id=10), [a.id]
    )
    v2 = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="s2", through_message_id=20), [b.id]
    )
    store.mark_chapters_stale(conv.id, 15)
    (stale,) = store.stale_chapters(conv.id, 11, 20)
    assert stale.id == b.id
    (new,) = store.refold_chapters([b.id], [_chapter(conv.id, 11, 20, "b, edited")])
    assert new.in_synopsis  # it belongs to the synopsis's generation, not a live chapter
    assert store.get_chapter(b.id).superseded_by == new.id
    assert [x.id for x in store.chapters(conv.id)] == [c.id]  # no live chapter for 11-20
    versions = {v.id: v for v in store.synopsis_versions(conv.id)}
    assert not versions[v1.id].stale and versions[v2.id].stale  # v2 folded the old text
    # A rebuild starts from the newest version that never held it, and reads the current
    # chapters after it.
    base = store.rebuild_base(conv.id, v2.through_message_id + 1)
    assert base is not None and base.id == v1.id
    assert [x.text for x in store.synopsis_chapters_after(conv.id, 10, 20, 50)] == ["b, edited"]


def test_retiring_chapters_ends_their_entries_and_makes_a_synopsis_that_held_one_stale(
    store: Store,
) -> None:
    """A refold with nothing left to fold retires its stale chapters in one transaction with
    its job: out of the live chapters, the rebuild's and the live ledger; their live entries
    ended `retired` by the chapter that wrote them (an entry ended before keeps its end); the
    synopsis versions that folded one stale, the one before them not. Retiring again changes
    nothing; a superseded chapter is refused."""
    conv = new_conversation(store)
    a = store.add_chapter(_chapter(conv.id, 1, 10, "a"))
    fact = LedgerEntry(conversation_id=conv.id, kind=LedgerKind.USER_FACT, text="Ann is 30")
    thread = LedgerEntry(conversation_id=conv.id, kind=LedgerKind.THREAD, text="Who took it")
    b = store.store_chapter(_chapter(conv.id, 11, 20, "b"), [fact, thread])
    fact_id, thread_id = (e.id for e in store.ledger(conv.id))
    c = store.store_chapter(
        _chapter(conv.id, 21, 30, "c"), [], [LedgerEnding(thread_id, LedgerEnd.RESOLVED, "found")]
    )
    v1 = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="s1", through_message_id=10), [a.id]
    )
    v2 = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="s2", through_message_id=20), [b.id]
    )
    store.mark_chapters_stale(conv.id, 15)
    job = store.enqueue_fold(
        FoldJob(
            conversation_id=conv.id, kind=FoldKind.REFOLD, first_message_id=11, last_message_id=20
        )
    )
    done = store.retire_chapters(conv.id, [b.id], job.id)
    assert ([x.id for x in done.chapters], done.ended_entries) == ([b.id], 1)
    assert store.get_fold(job.id).status is FoldStatus.DONE
    retired = store.get_chapter(b.id)
    assert (retired.retired, retired.superseded_by, retired.text) == (True, None, "b")
    assert [x.id for x in store.chapters(conv.id, include_in_synopsis=True)] == [a.id, c.id]
    assert b.id in [x.id for x in store.chapters(conv.id, True, include_superseded=True)]
    assert store.synopsis_chapters_after(conv.id, 10, 20, 50) == []
    ended = {e.id: e for e in store.ledger(conv.id, include_ended=True)}
    assert (ended[fact_id].end, ended[fact_id].ended_by_chapter_id, ended[fact_id].end_note) == (
        LedgerEnd.RETIRED,
        b.id,
        RETIRE_NOTE,
    )
    assert (ended[thread_id].end, ended[thread_id].ended_by_chapter_id) == (
        LedgerEnd.RESOLVED,
        c.id,
    )
    assert store.ledger(conv.id) == []
    versions = {v.id: v for v in store.synopsis_versions(conv.id)}
    assert not versions[v1.id].stale and versions[v2.id].stale
    assert store.memory_rows(conv.id).retired == 1
    # Again: nothing changes (its entries stay as they were ended).
    assert store.retire_chapters(conv.id, [b.id]).chapters == []
    assert store.ledger(conv.id, include_ended=True) == list(ended.values())
    # A deleted message of its range put back: the retired chapter is stale and is what a
    # refold of its range replaces.
    assert store.mark_chapters_stale(conv.id, 15) == [b.id]
    assert [x.id for x in store.stale_chapters(conv.id, 11, 20)] == [b.id]
    (refold,) = store.store_refold([b.id], [NewChapter(_chapter(conv.id, 15, 15, "b again"))])
    assert store.get_chapter(b.id).superseded_by == refold.id
    with pytest.raises(StoreError, match="already superseded"):
        store.retire_chapters(conv.id, [b.id])


def test_a_retired_chapter_brought_back_after_a_major_fold_goes_into_the_synopsis(
    store: Store,
) -> None:
    """B retired, a major fold then took A and C in (the synopsis reaches past B's range), and
    the deletion is undone: B's refold belongs to the synopsis, in its place, not to the live
    chapters after it (the next major fold would add it after C). The versions that cover its
    range go stale, so the rebuild starts before it and folds A, B' and C in order."""
    conv = new_conversation(store)
    store.add_messages(conv.id, make_messages(12))
    a = store.add_chapter(_chapter(conv.id, 1, 4, "a"))
    b = store.add_chapter(_chapter(conv.id, 5, 8, "b"))
    c = store.add_chapter(_chapter(conv.id, 9, 12, "c"))
    store.mark_chapters_stale(conv.id, 6)
    store.retire_chapters(conv.id, [b.id])
    before = store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="a then c", through_message_id=12),
        [a.id, c.id],
    )
    (again,) = store.store_refold([b.id], [NewChapter(_chapter(conv.id, 5, 8, "b again"))])
    assert again.in_synopsis and store.get_chapter(again.id).in_synopsis
    assert store.chapters(conv.id) == []  # no live chapter after the synopsis
    (version,) = store.synopsis_versions(conv.id)
    assert (version.id, version.current, version.stale) == (before.id, True, True)
    assert store.rebuild_base(conv.id, version.through_message_id + 1) is None
    folded = store.synopsis_chapters_after(conv.id, 0, version.through_message_id, 50)
    assert [x.text for x in folded] == ["a", "b again", "c"]


def test_the_current_synopsis_never_covers_less_than_before(store: Store) -> None:
    conv = new_conversation(store)
    store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text="s1", through_message_id=19), []
    )
    with pytest.raises(StoreError, match="never covers less than before"):
        store.add_synopsis(
            Synopsis(conversation_id=conv.id, version=0, text="s2", through_message_id=7), []
        )
    # A step of a rebuild (not current) may cover less: it is kept as a base, not used.
    step = store.add_synopsis(
        Synopsis(
            conversation_id=conv.id, version=0, text="step", through_message_id=7, current=False
        ),
        [],
    )
    assert not step.current and store.current_synopsis(conv.id).text == "s1"


def test_a_message_happens_on_its_scene_s_date_before_any_chapter_s_word_for_it(
    store: Store,
) -> None:
    """Recall marks excerpts with these times: a date the conversation wrote survives folding
    whatever the chronicler put in its "When:" line."""
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(6))
    dated = store.add_messages(
        conv.id,
        [
            Message(
                role=Role.CHARACTER, speaker="Seraphina", text="*Monday, 22 October 2018.* Hi."
            ),
            Message(role=Role.USER, speaker="Ann", text="My class was cancelled."),
        ],
    )
    store.add_chapter(
        _chapter(conv.id, ids[0], dated[-1], "They met.").model_copy(
            update={"story_time": "the first week"}
        )
    )
    times = store.story_times(conv.id, [ids[1], dated[1], dated[0]])
    assert times == {
        ids[1]: "the first week",  # no date opened its scene: the chapter's word
        dated[0]: "Monday, 22 October 2018",
        dated[1]: "Monday, 22 October 2018",
    }


def test_a_chapter_stored_with_a_line_of_the_story_as_its_time_is_read_with_none(
    store: Store,
) -> None:
    """Chapters written before D-51 hold what a small chronicler put in "When:", cut by its
    grammar and marked so: it is neither recalled nor shown as a time."""
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(6))
    junk = "Mara says: I'll call you when I…"
    for first, last, time in ((ids[0], ids[2], junk), (ids[3], ids[5], "that night")):
        store.add_chapter(_chapter(conv.id, first, last).model_copy(update={"story_time": time}))
    assert [c.story_time for c in store.chapters(conv.id)] == [None, "that night"]
    assert store.story_times(conv.id, [ids[1], ids[4]]) == {ids[4]: "that night"}


def test_a_ranges_scene_dates_start_with_the_one_in_force_at_its_first_message(
    store: Store,
) -> None:
    """A chapter's in-story time is read from these (chat/fold/chapters.py)."""
    conv = new_conversation(store)
    texts = [
        "No date yet.",
        "*Friday, 19 October 2018.* Hello.",
        "Hi again.",
        "*Saturday, 20 October 2018.* Back.",
        "*Sunday.* Later.",
        "*Monday, 22 October 2018.* After the range.",
    ]
    ids = store.add_messages(
        conv.id, [Message(role=Role.USER, speaker="Ann", text=text) for text in texts]
    )
    assert store.scene_dates(conv.id, ids[0], ids[0]) == []
    assert store.scene_dates(conv.id, ids[2], ids[4]) == [
        "Friday, 19 October 2018",
        "Saturday, 20 October 2018",
        "Sunday",
    ]
    assert store.scene_dates(conv.id, ids[1], ids[2]) == ["Friday, 19 October 2018"]


def test_the_scene_date_step_dates_messages_stored_before_it(tmp_path: Path) -> None:
    path = tmp_path / "before.sqlite3"
    stored_before(
        path, _scene_dates, ["No date yet.", "*Friday, 19 October 2018.* Hello.", "Hi again."]
    )
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.story_times(1, [1, 2, 3]) == {
            2: "Friday, 19 October 2018",
            3: "Friday, 19 October 2018",
        }
        store.update_message_text(2, "*Saturday, 20 October 2018.* Hello.", [])
        assert store.story_times(1, [3]) == {3: "Saturday, 20 October 2018"}
        store.update_message_text(2, "Hello.", [])  # an edit that takes the date away
        assert store.story_times(1, [3]) == {}
