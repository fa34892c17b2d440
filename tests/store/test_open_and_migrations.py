"""Opening files: the schema is created, migrated step by step, and bad files are refused."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from kotonia_tui.domain import (
    Chapter,
    ChapterOrigin,
    LedgerEnd,
    LedgerEnding,
    LedgerEntry,
    LedgerKind,
    LedgerSource,
    MessageStatus,
    Role,
    Synopsis,
    SynopsisOrigin,
)
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.store import SCHEMA_VERSION, Store, StoreError
from kotonia_tui.store.connection import Db
from kotonia_tui.store.migrations import (
    LEDGER_STEP,
    STEPS,
    _fold_claims_and_targets,
    _ledger_label_numbers,
    _provenance_columns,
    _retired_chapters,
    _synopsis_dropped,
    _turn_metrics_restored,
    migrate,
)

from .conftest import T0, make_messages, new_conversation


def test_new_file_is_created_with_folders_wal_and_current_schema(db_path: Path) -> None:
    with Store.open(db_path) as store:
        assert store.schema_version == SCHEMA_VERSION == len(STEPS)
        assert store.integrity_check() == "ok"
        assert store.path == db_path
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_data_survives_closing_and_reopening(db_path: Path) -> None:
    with Store.open(db_path) as store:
        conv = new_conversation(store)
        store.add_messages(conv.id, make_messages(3))
    with Store.open(db_path) as store:
        assert [m.text for m in store.recent_messages(conv.id, 10)] == [
            m.text for m in make_messages(3)
        ]


def test_a_copy_holds_what_the_open_store_wrote_and_replaces_an_old_copy(
    db_path: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.sqlite3"
    copy.write_bytes(b"an older copy")
    with Store.open(db_path) as store:
        conv = new_conversation(store)
        store.add_messages(conv.id, make_messages(3))
        # Still open, the writes in its write-ahead log: the copy has them all the same.
        store.copy_to(copy)
        store.add_messages(conv.id, make_messages(1, start=3))
    assert not copy.with_name("copy.sqlite3-wal").exists()
    with Store.open(copy) as copied:
        assert copied.integrity_check() == "ok"
        assert [m.text for m in copied.recent_messages(conv.id, 10)] == [
            m.text for m in make_messages(3)
        ]


def test_a_copy_to_a_folder_that_cannot_be_written_names_the_file(
    db_path: Path, tmp_path: Path
) -> None:
    target = tmp_path / "missing" / "copy.sqlite3"
    with Store.open(db_path) as store, pytest.raises(StoreError, match=str(target)):
        store.copy_to(target)


def test_newer_schema_is_refused_with_both_versions_named(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    newer = SCHEMA_VERSION + 1
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version = {newer}")
    raw.close()
    with pytest.raises(StoreError) as err:
        Store.open(db_path)
    message = str(err.value)
    assert "kotonia.sqlite3 was written by a newer Kotonia TUI" in message
    assert f"schema {newer}, this one knows {SCHEMA_VERSION}" in message
    assert "upgrade the app" in message


def test_a_file_that_is_not_sqlite_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite3"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(StoreError, match=r"notes\.sqlite3: is not a Kotonia database"):
        Store.open(path)
    assert path.read_text().startswith("these are my notes")  # untouched


def test_someone_elses_sqlite_file_is_not_adopted(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match=r"other\.db: is a SQLite database but not a Kotonia one"):
        Store.open(path)


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is not a file"):
        Store.open(tmp_path)


def test_step_1_turns_an_empty_version_0_file_into_a_working_store(tmp_path: Path) -> None:
    # Version 0 holds no Kotonia data by definition: it is the empty file a first start makes.
    path = tmp_path / "empty.sqlite3"
    sqlite3.connect(path).close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        conv = new_conversation(store)
        assert store.get_conversation(conv.id).title == "In the glade"


def _write_v1_data(path: Path) -> None:
    """Rows as version 1 of the app wrote them (no memory_state, no superseded_by)."""
    db = Db.connect(path)
    db.configure()
    assert migrate(db, target=1) == 1
    db.close()
    raw = sqlite3.connect(path)
    ts = "2026-11-29T19:30:00.000000+00:00"
    raw.execute(
        "INSERT INTO conversations (id, character_key, character_name, persona_name, title, "
        "created_at, updated_at, message_count, extra) VALUES (1, 'sera', 'Seraphina', 'Ann', "
        "'Old story', ?, ?, 2, '{\"st\": 1}')",
        (ts, ts),
    )
    raw.execute(
        "INSERT INTO messages (id, conversation_id, role, speaker, text, created_at, status) "
        "VALUES (1, 1, 'user', 'Ann', 'Hello there', ?, 'complete'),"
        "       (2, 1, 'character', 'Seraphina', 'Welcome, traveller', ?, 'cut')",
        (ts, ts),
    )
    raw.execute(
        "INSERT INTO alternatives (message_id, idx, text, status, created_at) VALUES "
        "(2, 0, 'Welcome, traveller', 'cut', ?), (2, 1, 'Who goes there?', 'complete', ?)",
        (ts, ts),
    )
    raw.execute("INSERT INTO token_counts VALUES (1, 'gemma', 4)")
    raw.execute(
        "INSERT INTO chapters (conversation_id, first_message_id, last_message_id, text, "
        "created_at) VALUES (1, 1, 2, 'They met in the glade.', ?)",
        (ts,),
    )
    raw.execute(
        "INSERT INTO synopses (conversation_id, version, text, through_message_id, created_at, "
        "current) VALUES (1, 1, 'Ann arrived.', 2, ?, 1)",
        (ts,),
    )
    raw.execute(
        "INSERT INTO fold_jobs (conversation_id, kind, status, not_before, created_at) "
        "VALUES (1, 'chapter', 'pending', ?, ?)",
        (ts, ts),
    )
    raw.commit()
    raw.close()


def test_step_2_keeps_version_1_data_and_adds_memory_state(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    _write_v1_data(path)
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        conv = store.get_conversation(1)
        assert (conv.title, conv.message_count, conv.extra) == ("Old story", 2, {"st": 1})
        user, reply = store.recent_messages(1, 10, model_key="gemma")
        assert (user.text, user.token_counts) == ("Hello there", {"gemma": 4})
        assert reply.status is MessageStatus.CUT
        assert [a.text for a in reply.alternatives] == ["Welcome, traveller", "Who goes there?"]
        assert user.created_at == T0
        (chapter,) = store.chapters(1)
        assert (chapter.text, chapter.superseded_by) == ("They met in the glade.", None)
        assert store.current_synopsis(1).text == "Ann arrived."
        assert store.memory_state(1).verbatim_start_id is None
        assert store.claim_next_fold() is not None
        # The new table works on the migrated file.
        state = store.memory_state(1).model_copy(update={"verbatim_start_id": 2})
        store.set_memory_state(state)
        assert store.memory_state(1).verbatim_start_id == 2
        assert store.integrity_check() == "ok"
        assert reply.role is Role.CHARACTER


def test_step_3_keeps_version_2_memory_state_and_adds_the_memory_text(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite3"
    _write_v1_data(path)
    db = Db.connect(path)
    db.configure()
    assert migrate(db, target=2) == 2
    db.close()
    raw = sqlite3.connect(path)
    raw.execute(
        """INSERT INTO memory_state (conversation_id, verbatim_start_id, applied_chapter_id,
               applied_synopsis_id, forced_cut_through_id, updated_at)
           VALUES (1, 2, 1, 1, NULL, '2026-11-01T10:00:00.000000+00:00')"""
    )
    raw.commit()
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        state = store.memory_state(1)
        assert (state.verbatim_start_id, state.applied_chapter_id) == (2, 1)
        assert (state.memory_text, state.memory_tokens) == ("", 0)
        saved = store.set_memory_state(
            state.model_copy(update={"memory_text": "[The story so far]", "memory_tokens": 5})
        )
        assert store.memory_state(1).memory_text == saved.memory_text == "[The story so far]"
        assert store.recent_messages(1, 10)[0].text == "Hello there"
        assert store.integrity_check() == "ok"


def _data_before(path: Path, step: Callable[[Db], None]) -> sqlite3.Connection:
    """Version-1 data migrated up to the version `step` starts from, open for more rows."""
    before = STEPS.index(step)
    _write_v1_data(path)
    db = Db.connect(path)
    db.configure()
    assert migrate(db, target=before) == before
    db.close()
    return sqlite3.connect(path)


def test_the_restored_step_keeps_earlier_turn_figures_and_adds_restored(tmp_path: Path) -> None:
    path = tmp_path / "before.sqlite3"
    raw = _data_before(path, _turn_metrics_restored)
    raw.execute(
        """INSERT INTO turn_metrics (conversation_id, message_id, prompt_positions, reused,
               evaluated, prompt_ms, generated, gen_ms, tokens_per_s, finish_reason, images,
               slot, created_at)
           VALUES (1, 2, 1200, 1100, 100, 350.5, 40, 900.0, 44.4, 'stop', 0, 'chat',
                   '2026-11-01T10:00:00.000000+00:00')"""
    )
    raw.commit()
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        old = store.last_turn_metrics(1)
        assert (old.prompt_positions, old.reused, old.evaluated) == (1200, 1100, 100)
        assert old.restored == 0  # a figure from before saved states: nothing restored
        store.add_turn_metrics(
            1, 2, old.model_copy(update={"reused": 1190, "evaluated": 10, "restored": 1150})
        )
        assert store.last_turn_metrics(1).restored == 1150
        assert store.integrity_check() == "ok"


def test_fold_claims_step_keeps_earlier_memory_and_adds_claims_and_targets(
    tmp_path: Path,
) -> None:
    """From the last version before issue 14 (a store main migrated) to this one."""
    path = tmp_path / "before.sqlite3"
    raw = _data_before(path, _fold_claims_and_targets)
    raw.execute(
        """INSERT INTO memory_state (conversation_id, verbatim_start_id, forced_cut_through_id,
               memory_text, memory_tokens, updated_at)
           VALUES (1, 2, 1, '[The story so far]', 5, '2026-11-01T10:00:00.000000+00:00')"""
    )
    # A job an older process left running: it names no claimer.
    raw.execute("UPDATE fold_jobs SET status = 'running', claimed_at = created_at")
    raw.commit()
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        state = store.memory_state(1)
        assert (state.memory_text, state.forced_cut_through_id, state.forced_cuts) == (
            "[The story so far]",
            1,
            0,
        )
        store.set_memory_state(state.model_copy(update={"forced_cuts": 2}))
        assert store.memory_state(1).forced_cuts == 2
        (chapter,) = store.chapters(1)
        assert (chapter.text, chapter.note) == ("They met in the glade.", "")
        synopsis = store.current_synopsis(1)
        assert (synopsis.text, synopsis.target_tokens, synopsis.stale) == ("Ann arrived.", 0, False)
        # Nobody can be running the old job any more: it goes back to pending, and is claimed
        # under a name with a lease.
        (job,) = store.fold_jobs(1)
        assert store.requeue_abandoned(lambda _claimer: False) == [job.id]
        claimed = store.claim_next_fold(claimer="host:1:abc")
        assert claimed is not None and claimed.claimed_by == "host:1:abc"
        assert claimed.lease_until is not None and claimed.lease_until > claimed.created_at
        assert store.integrity_check() == "ok"


def test_two_stores_can_share_one_file(db_path: Path) -> None:
    with Store.open(db_path) as first, Store.open(db_path) as second:
        conv = new_conversation(first)
        second.add_messages(conv.id, make_messages(2))
        assert first.message_count(conv.id) == 2
        assert [m.speaker for m in first.recent_messages(conv.id, 5)] == ["Ann", "Seraphina"]


def test_a_held_write_lock_gives_a_clear_busy_error_and_reads_go_on(db_path: Path) -> None:
    with Store.open(db_path, busy_timeout_s=0.2) as store:
        conv = new_conversation(store)
        store.add_messages(conv.id, make_messages(2))
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another instance in the middle of a write
        try:
            assert len(store.recent_messages(conv.id, 10)) == 2  # WAL: readers never wait
            with pytest.raises(StoreError, match=r"kotonia\.sqlite3: the database is busy"):
                store.add_messages(conv.id, make_messages(1))
        finally:
            other.execute("ROLLBACK")
            other.close()
        store.add_messages(conv.id, make_messages(1))  # and it recovers
        assert store.message_count(conv.id) == 3


def test_the_ledger_step_keeps_prose_chapters_and_adds_structure_and_the_ledger(
    tmp_path: Path,
) -> None:
    path = tmp_path / "before-ledger.sqlite3"
    _data_before(path, LEDGER_STEP).close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (old,) = store.chapters(1)
        # The old prose chapter keeps its text and its place in memory.
        assert (old.text, old.structure, old.readback_misses) == (
            "They met in the glade.",
            None,
            [],
        )
        assert "They met in the glade." in MemoryBlock(None, (old,)).render()
        assert store.ledger(1) == []
        # New folds write structured chapters with ledger entries.
        new = Chapter(
            conversation_id=1,
            first_message_id=2,
            last_message_id=2,
            text="- Ann asked who took the key. (#2)",
            structure='{"time": ""}',
            readback_misses=["Mia"],
        )
        thread = LedgerEntry(
            conversation_id=1, kind=LedgerKind.THREAD, text="Who took the key", evidence=[2]
        )
        stored = store.store_chapter(new, [thread])
        (entry,) = store.ledger(1)
        assert (entry.label, entry.chapter_id, entry.evidence) == (f"T{entry.id}", stored.id, [2])
        assert store.get_chapter(stored.id).readback_misses == ["Mia"]
        closing = Chapter(conversation_id=1, first_message_id=2, last_message_id=2, text="x")
        store.store_chapter(closing, [], [LedgerEnding(entry.id, LedgerEnd.RESOLVED, "found")])
        assert store.ledger(1) == []
        (ended,) = store.ledger(1, include_ended=True)
        assert (ended.end, ended.end_note, ended.text) == (
            LedgerEnd.RESOLVED,
            "found",
            "Who took the key",
        )
        assert store.integrity_check() == "ok"


def test_the_provenance_step_turns_the_old_text_leads_into_columns(tmp_path: Path) -> None:
    """A store as main wrote it before issue 29: a quoted chapter said so by the lead of its
    note, a chapter summarized in parts by any other note, a quoted synopsis by one of two
    leads of its text, and a readback entry by `said "`. The step converts each row; text
    that only looks like a lead in another case or place stays what it was."""
    path = tmp_path / "before-provenance.sqlite3"
    raw = _data_before(path, _provenance_columns)
    ts = "2026-12-01T10:00:00.000000+00:00"
    notes = [
        "quoted from messages #1-#2: the chronicler's chapter was unusable (the chronicler "
        "refused twice)",
        "message #2 is 9,000 tokens, more than one chronicler call reads (1,500): summarized "
        "on its own in 7 parts",
        "Quoted From Messages, said the user",  # another case: not the lead
    ]
    for note in notes:
        raw.execute(
            "INSERT INTO chapters (conversation_id, first_message_id, last_message_id, text, "
            "created_at, note) VALUES (1, 1, 2, 'x', ?, ?)",
            (ts, note),
        )
    texts = [
        "Quoted from the story so far (the chronicler's summaries could not be used):\n#1-#2: x",
        "Quoted from the story so far (the chronicler's summaries ran too long):\n#1-#2: x",
        "So far Ann Quoted from the story so far (the chronicler's summaries ran too long):",
    ]
    raw.execute("UPDATE synopses SET current = 0")
    for version, text in enumerate(texts, start=2):
        raw.execute(
            "INSERT INTO synopses (conversation_id, version, text, through_message_id, "
            "created_at, current) VALUES (1, ?, ?, 2, ?, ?)",
            (version, text, ts, int(version == 4)),
        )
    for text in ['said "My name is Ann Ruiz."', 'Ann said "hello"', 'SAID "x"', "Ann is 30"]:
        raw.execute(
            "INSERT INTO ledger (conversation_id, kind, text, chapter_id, created_at) "
            "VALUES (1, 'user_fact', ?, 1, ?)",
            (text, ts),
        )
    raw.commit()
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        chapters = store.chapters(1, include_in_synopsis=True)
        assert [(c.origin, c.quoted) for c in chapters] == [
            (ChapterOrigin.SUMMARY, False),  # the old prose chapter, no note
            (ChapterOrigin.QUOTED, True),
            (ChapterOrigin.PARTS, False),
            (ChapterOrigin.PARTS, False),  # a note that is not the quoted lead
        ]
        assert [c.note for c in chapters[1:]] == notes  # the notes stay as they were
        versions = store.synopsis_versions(1)
        assert [(s.version, s.origin) for s in versions] == [
            (1, SynopsisOrigin.SUMMARY),
            (2, SynopsisOrigin.QUOTED),
            (3, SynopsisOrigin.QUOTED),
            (4, SynopsisOrigin.SUMMARY),
        ]
        assert [s.text for s in versions[1:]] == texts
        assert [e.source for e in store.ledger(1)] == [
            LedgerSource.READBACK,
            LedgerSource.CHRONICLER,
            LedgerSource.CHRONICLER,
            LedgerSource.CHRONICLER,
        ]
        # New rows say their origin in the column, whatever their text.
        stored = store.add_chapter(
            Chapter(
                conversation_id=1,
                first_message_id=2,
                last_message_id=2,
                text="quoted from messages",
                note="quoted from messages #2-#2",
            )
        )
        assert store.get_chapter(stored.id).origin is ChapterOrigin.SUMMARY
        assert store.integrity_check() == "ok"


def test_the_dropped_step_keeps_old_synopses_with_nothing_left_out(tmp_path: Path) -> None:
    """Versions stored before the synopsis kept what its draft left out have nothing recorded;
    a new version keeps its left-out sentences as written, any script."""
    path = tmp_path / "before-dropped.sqlite3"
    _data_before(path, _synopsis_dropped).close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (old,) = store.synopsis_versions(1)
        assert old.dropped == ()
        left_out = ("So far I have found nothing.", "物語はまだ何も。")
        store.add_synopsis(
            Synopsis(
                conversation_id=1,
                version=0,
                text="Ann met Bo.",
                through_message_id=old.through_message_id,
                dropped=left_out,
            ),
            [],
        )
        assert store.current_synopsis(1).dropped == left_out


def test_the_label_number_step_keeps_every_stored_entrys_label(tmp_path: Path) -> None:
    """Entries stored before a branch's copy could keep its original's label are named by
    their ids, as they were; a new entry is too."""
    path = tmp_path / "before-label-numbers.sqlite3"
    raw = _data_before(path, _ledger_label_numbers)
    raw.execute(
        "INSERT INTO ledger (id, conversation_id, kind, text, chapter_id, created_at) "
        "VALUES (7, 1, 'thread', 'Who took the key', 1, '2026-12-01T10:00:00.000000+00:00')"
    )
    raw.commit()
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (old,) = store.ledger(1)
        assert (old.label, old.label_number) == ("T7", None)
        new = Chapter(conversation_id=1, first_message_id=2, last_message_id=2, text="x")
        fact = LedgerEntry(conversation_id=1, kind=LedgerKind.USER_FACT, text="Ann is 30")
        store.store_chapter(new, [fact])
        assert [e.label for e in store.ledger(1)] == ["T7", "F8"]


def test_the_retired_step_keeps_every_stored_chapter_in_the_memory(tmp_path: Path) -> None:
    """Chapters stored before a refold could retire one are live as they were, a memory state
    counted no retired chapter, and the live chapters' index leaves retired ones out."""
    path = tmp_path / "before-retired.sqlite3"
    raw = _data_before(path, _retired_chapters)
    raw.execute(
        "INSERT INTO memory_state (conversation_id, applied_chapter_id, memory_text, updated_at) "
        "VALUES (1, 1, '[The story so far]', '2026-12-01T10:00:00.000000+00:00')"
    )
    raw.commit()
    raw.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (old,) = store.chapters(1)
        assert (old.text, old.retired) == ("They met in the glade.", False)
        assert store.memory_state(1).applied_retired == 0
        assert store.memory_rows(1).retired == 0
        done = store.retire_chapters(1, [old.id])
        assert [c.id for c in done.chapters] == [old.id]
        assert store.chapters(1) == [] and store.memory_rows(1).retired == 1
        (index,) = store._db.select(  # the test reads the schema the step wrote
            "SELECT sql FROM sqlite_master WHERE name = 'chapters_live'"
        )
        assert "retired = 0" in index["sql"]
        assert store.integrity_check() == "ok"
