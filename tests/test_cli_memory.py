"""`kotonia memory ID [--json]`: the memory the next turn carries, read from a real store file."""

from __future__ import annotations

import json
from datetime import timedelta

from kotonia_tui.cli import main
from kotonia_tui.domain import (
    QUOTED_SYNOPSIS_LEAD,
    Chapter,
    ChapterOrigin,
    Conversation,
    FoldJob,
    FoldKind,
    LedgerEnd,
    LedgerEnding,
    LedgerKind,
    Message,
    Role,
    StoredConversation,
    Synopsis,
    SynopsisOrigin,
    utcnow,
)
from kotonia_tui.store import Store
from tests.fake_engine import scripted
from tests.scripted_chapters import ledger_entry
from tests.settings import fake_settings


def ann_and_wren(store: Store, *lines: str) -> StoredConversation:
    """A conversation of Ann's and Wren's `lines`, Ann's first, taking turns."""
    conv = store.create_conversation(
        Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
    )
    turns = [(Role.USER, "Ann"), (Role.CHARACTER, "Wren")]
    store.add_messages(
        conv.id,
        [
            Message(role=turns[i % 2][0], speaker=turns[i % 2][1], text=text)
            for i, text in enumerate(lines)
        ],
    )
    return conv


def seeded(path) -> int:
    with Store.open(path) as store:
        conv = ann_and_wren(
            store, "My sister Mia lands on the 14th.", "Where is the key?", "In my coat."
        )
        old = Chapter(
            conversation_id=conv.id, first_message_id=1, last_message_id=1, text="Old prose."
        )
        store.add_chapter(old)
        first = store.store_chapter(
            Chapter(
                conversation_id=conv.id,
                first_message_id=2,
                last_message_id=2,
                text="- Wren asked where the key is. (#2)",
                structure='{"time": "", "events": []}',
                readback_misses=["Mia"],
            ),
            [
                ledger_entry(
                    conv.id, LedgerKind.USER_FACT, "Ann's sister is Mia", 1, subject="Ann"
                ),
                ledger_entry(conv.id, LedgerKind.THREAD, "Where the key is", 2),
                ledger_entry(conv.id, LedgerKind.THREAD, "Why Mia comes", 1),
            ],
        )
        thread = store.ledger(conv.id)[1]
        store.store_chapter(
            Chapter(
                conversation_id=conv.id,
                first_message_id=3,
                last_message_id=3,
                text="- Ann had the key. (#3)",
            ),
            [],
            [LedgerEnding(thread.id, LedgerEnd.RESOLVED, "in Ann's coat")],
        )
        job = store.enqueue_fold(FoldJob(conversation_id=conv.id, kind=FoldKind.MAJOR_GC))
        store.claim_next_fold(utcnow() + timedelta(seconds=1))
        store.fail_fold(job.id, "the chronicler refused twice", utcnow() + timedelta(hours=1))
        assert first.id
        return conv.id


def test_memory_json_has_the_ledger_chapters_threads_and_fold_counts(capsys, tmp_path):
    path = tmp_path / "k.sqlite3"
    conv_id = seeded(path)
    assert main(["--db", str(path), "memory", str(conv_id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(e["label"], e["kind"], e["live"]) for e in report["ledger"]] == [
        ("F1", "user_fact", True),
        ("T2", "thread", False),
        ("T3", "thread", True),
    ]
    resolved = report["ledger"][1]
    assert (resolved["valid_from_chapter"], resolved["valid_to_chapter"]) == (2, 3)
    assert (resolved["valid_from_numbers"], resolved["valid_to_numbers"]) == ([2, 2], [3, 3])
    assert (resolved["end"], resolved["end_note"], resolved["evidence"]) == (
        "resolved",
        "in Ann's coat",
        [2],
    )
    assert [(c["first_message_id"], c["last_message_id"]) for c in report["chapters"]] == [
        (1, 1),
        (2, 2),
        (3, 3),
    ]
    assert report["chapters"][0]["structure"] is None  # an old prose chapter keeps its place
    assert report["chapters"][1]["structure"] == {"time": "", "events": []}
    assert report["chapters"][1]["readback_misses"] == ["Mia"]
    assert report["chapters"][1]["note"] == "" and not report["chapters"][1]["quoted"]
    assert report["open_threads"] == [
        {"label": "T3", "text": "Why Mia comes", "evidence": [1], "evidence_numbers": [1]}
    ]
    assert report["synopsis"] is None
    assert (report["fold_jobs"]["pending"], report["fold_jobs"]["done"]) == (1, 0)  # retried later
    assert report["fold_jobs"]["failed_attempts"] == {"the chronicler refused twice": 1}
    text = report["memory_text"]
    # The ledger comes before the chapters; the resolved thread has left it.
    assert text.index("## Ledger") < text.index("Old prose.")
    assert "F1 (Ann): Ann's sister is Mia (#1)" in text and "T3: Why Mia comes (#1)" in text
    assert "Where the key is" not in text
    assert report["applies_on_next_turn"] is True


def test_memory_text_and_an_unknown_conversation(capsys, tmp_path):
    path = tmp_path / "k.sqlite3"
    conv_id = seeded(path)
    assert main(["--db", str(path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert "T2  thread  Where the key is  #2  from #2-#2 to #3-#3 (resolved)" in out
    assert "T3  thread  Why Mia comes  #1  from #2-#2  (not in the prompt" in out
    assert "readback misses: Mia" in out
    assert "1 failed attempts: the chronicler refused twice" in out
    assert main(["--db", str(path), "memory", "99"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "99" in err


def test_memory_text_says_which_chapters_and_synopsis_are_quoted(capsys, tmp_path):
    # A quoted chapter is the range's own lines, not a summary: the text form says so and why,
    # as the inspector and `--json` (`quoted`) do.
    path = tmp_path / "k.sqlite3"
    with Store.open(path) as store:
        conv = ann_and_wren(store, "My name is Ann Ruiz.", "Welcome, Ann.")
        why = "quoted from messages #1-#2: the chronicler's chapter was unusable (it was empty)"
        store.add_chapter(
            Chapter(
                conversation_id=conv.id,
                first_message_id=1,
                last_message_id=2,
                text="#1 Ann: My name is Ann Ruiz.",
                note=why,
                origin=ChapterOrigin.QUOTED,
            )
        )
        store.add_synopsis(
            Synopsis(
                conversation_id=conv.id,
                version=0,
                text=f"{QUOTED_SYNOPSIS_LEAD}\n#1-#2: #1 Ann: My name is Ann Ruiz.",
                through_message_id=2,
                origin=SynopsisOrigin.QUOTED,
            ),
            [],
        )
        conv_id = conv.id
    assert main(["--db", str(path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert f"  chapter #1-#2 (quoted)\n    ({why})\n    #1 Ann: My name is Ann Ruiz." in out
    assert "synopsis: version 1 through #2 (quoted)" in out


def test_memory_shows_what_a_synopsis_draft_left_out(capsys, tmp_path):
    path = tmp_path / "k.sqlite3"
    left_out = "So far in the story, I have not found a single word of this story."
    with Store.open(path) as store:
        conv = ann_and_wren(store, "My name is Ann Ruiz.", "Welcome, Ann.")
        store.add_synopsis(
            Synopsis(
                conversation_id=conv.id,
                version=0,
                text="Ann Ruiz came to the lighthouse.",
                through_message_id=2,
                dropped=(left_out,),
            ),
            [],
        )
        conv_id = conv.id
    assert main(["--db", str(path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    assert (
        "  Ann Ruiz came to the lighthouse.\n"
        f"  (left out of the draft: it rests on nothing it folds) {left_out}\n" in out
    )
    assert main(["--db", str(path), "memory", str(conv_id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["synopsis"]["dropped"] == [left_out]


async def test_after_a_deletion_memory_numbers_messages_as_the_app_does(capsys, make_fake_service):
    """A message deleted before a chapter's range: ids and places part. `kotonia memory` shows
    the places, the numbers the app shows on the messages and in its inspector (it showed the
    ids: #4-#5 where the app said #3-#4). Fake engine: only the store and the numbering count."""
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv = ann_and_wren(service.store, "One.", "Two.", "Three.", "Four.", "Five.")
    ids = [m.id for m in service.store.recent_messages(conv.id, 10)]
    service.delete_message(ids[1])
    chapter = service.store.store_chapter(
        Chapter(
            conversation_id=conv.id,
            first_message_id=ids[3],
            last_message_id=ids[4],
            text="x",
            story_time="Friday, 19 October 2018",
        ),
        [ledger_entry(conv.id, LedgerKind.THREAD, "Whether five follows four", ids[3])],
    )
    view = service.memory_view(conv.id)
    # The inspector's numbers: the chapter's range and the entry's evidence.
    shown = (view.chapter_span(chapter.id), view.evidence([ids[3]]))
    assert shown == ("#3-#4", "#3")  # the places: "Four." is the third message left
    db = str(service.store.path)
    assert main(["--db", db, "memory", str(conv.id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (listed,) = [c for c in report["chapters"] if c["id"] == chapter.id]
    assert (listed["first_message_id"], listed["last_message_id"]) == (ids[3], ids[4])
    assert (listed["first_message_number"], listed["last_message_number"]) == (3, 4)
    assert report["ledger"][0]["evidence_numbers"] == [3]
    assert main(["--db", db, "memory", str(conv.id)]) == 0
    out = capsys.readouterr().out
    # With its in-story time, as the memory block heads it.
    assert "  chapter #3-#4 (prose), in-story time: Friday, 19 October 2018" in out
    assert "Whether five follows four  #3  " in out
