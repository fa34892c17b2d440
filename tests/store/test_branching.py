"""Branches: a new conversation sharing the story up to a message, with the memory covering it."""

from __future__ import annotations

import json

import pytest

from kotonia_tui.domain import (
    Alternative,
    Chapter,
    ChatSettings,
    Conversation,
    FoldJob,
    FoldKind,
    FoldStatus,
    GenerationSettings,
    LedgerEnd,
    LedgerEnding,
    LedgerEntry,
    LedgerKind,
    Message,
    NewChapter,
    Role,
    StoredConversation,
    Synopsis,
    SynopsisOrigin,
)
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.memory.ledger import carried, render_ledger
from kotonia_tui.memory.numbering import referenced_ids, renumber
from kotonia_tui.memory.structured import (
    LedgerItem,
    Line,
    Resolution,
    StructuredChapter,
    render_chapter,
    retarget_structure,
)
from kotonia_tui.store import MemoryState, NotFoundError, Store
from kotonia_tui.store.branching import Branched

from .conftest import T0, make_messages, new_conversation

MEMORY_TEXT = "[The story so far]\n\n## Synopsis\nAnn arrived.\n\n## Chapter (messages #6-#14)\n..."


def _branch_conv(source: StoredConversation, title: str) -> Conversation:
    return Conversation(
        character_key=source.character_key,
        character_name=source.character_name,
        persona_name=source.persona_name,
        title=title,
    )


def _story(store: Store) -> tuple[StoredConversation, list[int]]:
    """A conversation of 20 messages whose ids are not contiguous (another conversation wrote
    in between), two chapters and a synopsis landed and applied, a third chapter landed."""
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(10))
    other = new_conversation(store, key="other")
    store.add_messages(other.id, make_messages(2))
    ids += store.add_messages(conv.id, make_messages(10, start=10))
    store.add_alternative(ids[9], Alternative(text="another version"), choose=True)
    store.set_token_count(ids[3], "gemma", 17)
    first = store.add_chapter(_chapter(conv.id, ids[0], ids[4], "They met."))
    second = store.add_chapter(_chapter(conv.id, ids[5], ids[12], "They talked."))
    store.add_chapter(_chapter(conv.id, ids[13], ids[17], "They argued."))
    synopsis = store.add_synopsis(
        Synopsis(
            conversation_id=conv.id, version=1, text="Ann arrived.", through_message_id=ids[4]
        ),
        [first.id],
    )
    store.set_memory_state(
        MemoryState(
            conversation_id=conv.id,
            verbatim_start_id=ids[13],
            applied_chapter_id=second.id,
            applied_synopsis_id=synopsis.id,
            memory_text=MEMORY_TEXT,
            memory_tokens=42,
            memory_model_key="gemma",
        )
    )
    return conv, ids


def _chapter(conv_id: int, first: int, last: int, text: str) -> Chapter:
    return Chapter(conversation_id=conv_id, first_message_id=first, last_message_id=last, text=text)


def _texts(store: Store, conv_id: int, first: int, last: int) -> list[str]:
    return [m.text for m in store.messages_between(conv_id, first, last)]


def test_a_branch_shares_messages_chapters_synopsis_and_the_memory_text(store: Store) -> None:
    conv, ids = _story(store)
    branched = store.branch_conversation(conv.id, ids[15], _branch_conv(conv, "What if"))
    new = branched.conversation
    assert (new.title, new.message_count, branched.messages) == ("What if", 16, 16)
    copies = store.recent_messages(new.id, 100, model_key="gemma")
    originals = store.recent_messages(conv.id, 100, model_key="gemma")[:16]
    assert [(m.role, m.speaker, m.text, m.created_at) for m in copies] == [
        (m.role, m.speaker, m.text, m.created_at) for m in originals
    ]
    assert [a.text for a in copies[9].alternatives] == [
        originals[9].alternatives[0].text,
        "another version",
    ]
    assert copies[3].token_counts == {"gemma": 17}  # nothing shared is counted again
    assert min(m.id for m in copies) > max(ids)  # new rows, after every existing id

    # The chapters that end before the branch point, each over the copies of its messages;
    # the third one reaches past the branch point and is not the branch's.
    folded, live = store.chapters(new.id, include_in_synopsis=True)
    assert (folded.text, folded.in_synopsis, live.text, live.in_synopsis) == (
        "They met.",
        True,
        "They talked.",
        False,
    )
    assert _texts(store, new.id, live.first_message_id, live.last_message_id) == _texts(
        store, conv.id, ids[5], ids[12]
    )
    synopsis = store.current_synopsis(new.id)
    assert synopsis.text == "Ann arrived."
    assert _texts(store, new.id, 0, synopsis.through_message_id) == _texts(
        store, conv.id, 0, ids[4]
    )

    # The memory block is the original's, byte for byte, so the prompt prefix is the same.
    state = store.memory_state(new.id)
    assert branched.memory_shared
    assert (state.memory_text, state.memory_tokens, state.memory_model_key) == (
        MEMORY_TEXT,
        42,
        "gemma",
    )
    assert (state.applied_chapter_id, state.applied_synopsis_id) == (live.id, synopsis.id)
    assert state.verbatim_start_id is not None
    assert store.get_message(state.verbatim_start_id).text == store.get_message(ids[13]).text
    assert store.integrity_check() == "ok"


def test_a_branch_keeps_how_each_synopsis_version_was_made(store: Store) -> None:
    """A branch's synopsis versions are the original's in every column: a quoted version stays
    quoted (the next major fold reads its lines as quoted lines, not as one summary), its
    target stays its target, and what the chronicler's draft left out is still shown."""
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(12))
    chapter = store.add_chapter(_chapter(conv.id, ids[0], ids[5], "They met."))
    later = store.add_chapter(_chapter(conv.id, ids[6], ids[9], "They talked."))
    made = [
        Synopsis(
            conversation_id=conv.id,
            version=0,
            text="Quoted from the story so far:\n#1-#6: They met.",
            through_message_id=ids[5],
            target_tokens=64,
            origin=SynopsisOrigin.QUOTED,
        ),
        Synopsis(
            conversation_id=conv.id,
            version=0,
            text="Ann met Bo and they talked.",
            through_message_id=ids[9],
            target_tokens=64,
            dropped=("So far I have found nothing of this story.",),
        ),
    ]
    store.add_synopsis(made[0], [chapter.id])
    store.add_synopsis(made[1], [later.id])
    new = store.branch_conversation(conv.id, ids[11], _branch_conv(conv, "Again")).conversation
    copies = store.synopsis_versions(new.id)
    assert [(s.text, s.origin, s.target_tokens, s.dropped, s.current) for s in copies] == [
        (made[0].text, SynopsisOrigin.QUOTED, 64, (), False),
        (made[1].text, SynopsisOrigin.SUMMARY, 64, made[1].dropped, True),
    ]


def test_what_happens_in_one_branch_never_reaches_the_other(store: Store) -> None:
    conv, ids = _story(store)
    new = store.branch_conversation(conv.id, ids[15], _branch_conv(conv, "b")).conversation
    assert store.mark_chapters_stale(conv.id, ids[7])  # an edit in the original
    assert not any(c.stale for c in store.chapters(new.id))
    store.add_chapter(
        _chapter(
            new.id,
            store.recent_messages(new.id, 1)[0].id - 1,
            store.recent_messages(new.id, 1)[0].id,
            "Only in the branch.",
        )
    )
    assert "Only in the branch." not in [c.text for c in store.chapters(conv.id)]
    store.add_messages(new.id, make_messages(1))
    assert store.message_count(conv.id) == 20 and store.message_count(new.id) == 17


def test_a_branch_inside_the_applied_memory_starts_from_the_chapters_it_shares(store: Store):
    conv, ids = _story(store)
    branched = store.branch_conversation(conv.id, ids[8], _branch_conv(conv, "early"))
    new = branched.conversation
    # The second chapter covers messages after the branch point: only the first is shared,
    # and the original's memory text (which holds the second) is not carried over.
    assert not branched.memory_shared
    assert [c.text for c in store.chapters(new.id, include_in_synopsis=True)] == ["They met."]
    state = store.memory_state(new.id)
    assert (state.memory_text, state.applied_chapter_id) == ("", None)
    assert state.verbatim_start_id is not None
    assert store.get_message(state.verbatim_start_id).text == store.get_message(ids[5]).text


def test_duplicate_copies_everything_and_new_messages_come_after_every_range(store: Store):
    conv, ids = _story(store)
    store.delete_message(ids[17])  # the last message of the third chapter
    branched = store.branch_conversation(conv.id, None, _branch_conv(conv, "copy"))
    new = branched.conversation
    assert branched.messages == 19 and branched.chapters == 3
    third = store.chapters(new.id)[-1]
    assert third.text == "They argued."
    (added,) = store.add_messages(new.id, make_messages(1))
    assert added > third.last_message_id  # a new message never falls inside a chapter


def test_stale_and_refolded_chapters_come_over_with_their_refold(store: Store) -> None:
    conv, ids = _story(store)
    store.mark_chapters_stale(conv.id, ids[2])  # inside the first chapter
    (second,) = [c for c in store.chapters(conv.id) if c.text == "They talked."]
    store.mark_chapters_stale(conv.id, ids[7])
    refold = store.refold_chapter(second.id, _chapter(conv.id, ids[5], ids[12], "Refolded."))
    branched = store.branch_conversation(conv.id, ids[15], _branch_conv(conv, "b"))
    new = branched.conversation
    every = store.chapters(new.id, include_in_synopsis=True, include_superseded=True)
    (old,) = [c for c in every if c.text == "They talked."]
    (copy_of_refold,) = [c for c in every if c.text == refold.text]
    assert old.superseded_by == copy_of_refold.id
    # The first chapter was stale (an edit waiting for its refold): the branch refolds it too.
    (job,) = store.fold_jobs(new.id, statuses=(FoldStatus.PENDING,))
    (stale,) = [c for c in every if c.stale and c.superseded_by is None]
    assert (job.kind, job.first_message_id, job.last_message_id) == (
        FoldKind.REFOLD,
        stale.first_message_id,
        stale.last_message_id,
    )
    assert branched.refolds == 1


def test_a_retired_chapter_comes_over_retired_with_nothing_to_refold(store: Store) -> None:
    """A chapter whose messages were all deleted (retired by its refold) is copied as it is,
    out of the branch's memory too, its ended entries with it; it queues no refold (its stale
    mark is not an edit waiting for one)."""
    conv, ids = _story(store)
    (third,) = [c for c in store.chapters(conv.id) if c.text == "They argued."]
    store.store_chapter(
        _chapter(conv.id, ids[18], ids[19], "They left."),
        [LedgerEntry(conversation_id=conv.id, kind=LedgerKind.USER_FACT, text="Ann left")],
    )
    (last,) = [c for c in store.chapters(conv.id) if c.text == "They left."]
    for message_id in ids[18:]:
        store.mark_chapters_stale(conv.id, message_id)
        store.delete_message(message_id)
    store.retire_chapters(conv.id, [last.id])
    store.add_messages(conv.id, make_messages(1, start=20))  # the story goes on after it
    branched = store.branch_conversation(conv.id, None, _branch_conv(conv, "b"))
    new = branched.conversation
    assert branched.refolds == 0 and not store.fold_jobs(new.id)
    every = store.chapters(new.id, include_in_synopsis=True, include_superseded=True)
    (copy,) = [c for c in every if c.text == "They left."]
    assert (copy.retired, copy.stale, copy.superseded_by) == (True, True, None)
    assert "They left." not in [c.text for c in store.chapters(new.id)]
    (entry,) = store.ledger(new.id, include_ended=True)
    assert (entry.end, entry.ended_by_chapter_id) == (LedgerEnd.RETIRED, copy.id)
    assert store.ledger(new.id) == []
    assert third.text in [c.text for c in store.chapters(new.id)]


def test_branching_at_a_message_of_another_conversation_is_refused(store: Store) -> None:
    conv, _ids = _story(store)
    other = new_conversation(store, key="third")
    (foreign,) = store.add_messages(other.id, make_messages(1))
    with pytest.raises(NotFoundError, match=f"message {foreign} is not in conversation {conv.id}"):
        store.branch_conversation(conv.id, foreign, _branch_conv(conv, "x"))
    assert [c.id for c in store.list_conversations()].count(conv.id) == 1


def test_a_deleted_message_comes_back_in_its_place(store: Store) -> None:
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(5))
    store.add_alternative(ids[2], Alternative(text="second take"), choose=True)
    store.set_token_count(ids[2], "gemma", 9)
    gone = store.get_message(ids[2])
    store.delete_message(ids[2])
    assert store.message_count(conv.id) == 4
    back = store.restore_message(gone)
    assert back == gone
    assert [m.id for m in store.recent_messages(conv.id, 10)] == ids
    assert store.message_count(conv.id) == 5


def test_hidden_conversations_are_out_of_sight_until_brought_back(store: Store) -> None:
    conv = new_conversation(store)
    store.add_messages(conv.id, make_messages(2))
    store.enqueue_fold(FoldJob(conversation_id=conv.id, kind=FoldKind.CHAPTER))
    store.hide_conversation(conv.id)
    assert store.list_conversations() == []
    with pytest.raises(NotFoundError, match=f"conversation {conv.id} was deleted"):
        store.get_conversation(conv.id)
    assert store.claim_next_fold() is None  # its folds wait
    assert store.next_fold_due() is None
    assert store.unhide_conversation(conv.id).id == conv.id
    assert store.claim_next_fold() is not None
    store.hide_conversation(conv.id)
    assert store.purge_hidden() == [conv.id]
    with pytest.raises(NotFoundError, match="cannot be brought back"):
        store.unhide_conversation(conv.id)


def test_system_role_survives_a_branch(store: Store) -> None:
    conv = new_conversation(store)
    store.add_messages(
        conv.id, [Message(role=Role.SYSTEM, speaker="", text="[Start a new chat]", created_at=T0)]
    )
    new = store.branch_conversation(conv.id, None, _branch_conv(conv, "b")).conversation
    assert store.recent_messages(new.id, 1)[0].role is Role.SYSTEM


def test_a_branch_and_a_duplicate_keep_the_conversations_settings(store: Store) -> None:
    conv, ids = _story(store)
    settings = ChatSettings(
        generation=GenerationSettings(temperature=0.4, reply_max_tokens=300),
        author_note="Keep it rainy.",
        author_note_depth=4,
        world_info=("saltmere-harbour.json",),
        lore_budget=700,
    )
    store.set_conversation_settings(conv.id, settings)
    branch = store.branch_conversation(conv.id, ids[7], _branch_conv(conv, "b")).conversation
    copy = store.branch_conversation(conv.id, None, _branch_conv(conv, "c")).conversation
    assert store.conversation_settings(branch.id) == settings
    assert store.conversation_settings(copy.id) == settings
    # Copies, not shared: changing the branch's note leaves the source's alone.
    store.set_conversation_settings(branch.id, settings.model_copy(update={"author_note": "Sun."}))
    assert store.conversation_settings(conv.id).author_note == "Keep it rainy."


# ---- the ledger and the chapters' structures ------------------------------------------------


def _structured(conv_id: int, ids: list[int], event: str, resolves: str = "") -> Chapter:
    """A structured chapter over `ids` whose event cites the first one, as a fold stores it."""
    structure = StructuredChapter(
        time="",
        events=(Line(event, (ids[0],)),),
        claims=(Line(f"Ann said {event}", (ids[1],)),),
        ledger=(LedgerItem(LedgerKind.USER_FACT, "Ann keeps the key", "Ann", (ids[2],)),),
        resolved=(Resolution(resolves, "it was found", (ids[3],)),) if resolves else (),
    )
    return Chapter(
        conversation_id=conv_id,
        first_message_id=ids[0],
        last_message_id=ids[-1],
        text=render_chapter(structure),
        structure=structure.to_json(),
    )


def _entry(conv_id: int, kind: LedgerKind, text: str, *evidence: int) -> LedgerEntry:
    return LedgerEntry(
        conversation_id=conv_id, kind=kind, text=text, subject="Ann", evidence=list(evidence)
    )


def _ledger_story(store: Store) -> tuple[StoredConversation, list[int]]:
    """Twelve messages (ids not contiguous, so an id is no message's place) folded in three
    chapters: the first writes a fact and a thread, the second resolves the thread and writes
    a rule, the third replaces the fact and writes a promise. The block the prompt carries
    holds all three and the live ledger, as a fold renders it."""
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(6))
    other = new_conversation(store, key="other")
    store.add_messages(other.id, make_messages(3))
    ids += store.add_messages(conv.id, make_messages(6, start=6))
    first = store.store_chapter(
        _structured(conv.id, ids[0:4], "Ann met Seraphina."),
        [
            _entry(conv.id, LedgerKind.USER_FACT, "Ann's sister Mia lands on the 14th", ids[0]),
            _entry(conv.id, LedgerKind.THREAD, f"Who took the key of message #{ids[2]}", ids[2]),
        ],
    )
    fact, thread = store.ledger(conv.id)
    second = store.store_chapter(
        _structured(conv.id, ids[4:8], "Seraphina found the key.", resolves=thread.label),
        [_entry(conv.id, LedgerKind.CONSTRAINT, "Never call Ann 'miss'", ids[4], ids[6])],
        [LedgerEnding(thread.id, LedgerEnd.RESOLVED, f"Seraphina had it (#{ids[5]})")],
    )
    third = store.store_chapter(
        _structured(conv.id, ids[8:12], "They lit the lamps."),
        [
            _entry(conv.id, LedgerKind.USER_FACT, "Mia lands on the 20th", ids[8]),
            _entry(conv.id, LedgerKind.PROMISE, "Seraphina will meet Mia", ids[9]),
        ],
        [LedgerEnding(fact.id, LedgerEnd.SUPERSEDED, "Mia lands on the 20th")],
    )
    chapters = (first, second, third)
    block = MemoryBlock(None, chapters, tuple(store.ledger(conv.id))).render()
    store.set_memory_state(
        MemoryState(
            conversation_id=conv.id,
            verbatim_start_id=None,
            applied_chapter_id=third.id,
            memory_text=block,
        )
    )
    return conv, ids


def _ledger_branch(store: Store, conv: StoredConversation, through: int | None) -> Branched:
    """A branch as the app makes it: its memory's texts and structures cite the copies."""
    return store.branch_conversation(
        conv.id, through, _branch_conv(conv, "b"), renumber, retarget_structure
    )


def _seen(store: Store, conv_id: int) -> list[tuple[str, str, str, list[str], str, str]]:
    """Each ledger entry as a reader tells it apart: label, kind, text and note (messages
    numbered as the chat numbers them), the texts of the messages it cites, how it ended."""

    def said(i: int) -> str:
        return store.get_message(i).text

    def shown(text: str) -> str:
        return renumber(text, store.message_numbers(conv_id, list(referenced_ids(text))))

    return [
        (
            e.label,
            e.kind.value,
            shown(e.text),
            [said(i) for i in e.evidence],
            str(e.end),
            shown(e.end_note),
        )
        for e in store.ledger(conv_id, include_ended=True)
    ]


def test_a_branch_carries_the_ledger_its_chapters_wrote_citing_its_own_messages(store: Store):
    conv, ids = _ledger_story(store)
    # At message 10 of 12: the third chapter (which replaced the fact and wrote the promise)
    # is past the branch point, so in the branch the fact was never replaced.
    branched = _ledger_branch(store, conv, ids[9])
    new = branched.conversation
    assert (branched.chapters, branched.ledger_entries) == (2, 3)
    fact, thread, rule = store.ledger(new.id, include_ended=True)
    originals = store.ledger(conv.id, include_ended=True)
    copies = store.messages_between(new.id, 0, 10**9)
    place = {m.id: n for n, m in enumerate(copies)}
    assert [(e.label, e.kind, e.subject) for e in (fact, thread, rule)] == [
        (e.label, e.kind, e.subject) for e in originals[:3]
    ]
    # The same texts, citing the same places among the branch's own messages.
    assert [place[i] for e in (fact, thread, rule) for i in e.evidence] == [0, 2, 4, 6]
    assert thread.text == f"Who took the key of message #{copies[2].id}"
    assert fact.end is None and rule.end is None  # the fact's end came after the branch point
    copied_chapters = store.chapters(new.id)
    assert [e.chapter_id for e in (fact, thread, rule)] == [
        copied_chapters[0].id,
        copied_chapters[0].id,
        copied_chapters[1].id,
    ]
    assert (thread.end, thread.ended_by_chapter_id, thread.end_note) == (
        LedgerEnd.RESOLVED,
        copied_chapters[1].id,
        f"Seraphina had it (#{copies[5].id})",
    )
    assert [e.label for e in store.ledger(new.id)] == [fact.label, rule.label]
    assert (
        _seen(store, new.id)
        == [
            (*row[:4], "None", "") if row[0] == fact.label else row for row in _seen(store, conv.id)
        ][:3]
    )
    assert store.integrity_check() == "ok"


def test_a_duplicate_carries_every_entry_and_its_block_still_carries_them(store: Store):
    conv, _ids = _ledger_story(store)
    branched = _ledger_branch(store, conv, None)
    new = branched.conversation
    assert branched.memory_shared and branched.ledger_entries == 5
    assert _seen(store, new.id) == _seen(store, conv.id)
    # The copied block's ledger lines are the copies' own (same labels, the copies' ids), so
    # the inspector knows the prompt carries them.
    live = store.ledger(new.id)
    text = store.memory_state(new.id).memory_text
    assert carried(live, text) == {e.id for e in live} and len(live) == 3
    assert render_ledger(live) in text


def test_the_branchs_chapters_structures_cite_its_own_messages(store: Store) -> None:
    conv, ids = _ledger_story(store)
    new = _ledger_branch(store, conv, ids[9]).conversation
    copies = store.messages_between(new.id, 0, 10**9)
    first, second = (json.loads(c.structure or "") for c in store.chapters(new.id))
    cited = [
        item["ids"]
        for data in (first, second)
        for name in ("events", "claims", "ledger", "resolved")
        for item in data[name]
    ]
    assert cited == [
        [copies[0].id],
        [copies[1].id],
        [copies[2].id],
        [copies[4].id],
        [copies[5].id],
        [copies[6].id],
        [copies[7].id],
    ]
    originals = store.chapters(conv.id)[:2]
    # All else as the original's: the resolved thread by its label (the copy keeps it).
    assert (
        second["resolved"][0]["thread"]
        == json.loads(originals[1].structure or "")["resolved"][0]["thread"]
        == store.ledger(new.id, include_ended=True)[1].label
    )


def test_an_entry_citing_a_message_deleted_since_keeps_that_id(store: Store) -> None:
    """The copied block leaves an id with no copy as it is (memory/numbering.py), so the
    entry's evidence does too: its line in the block stays its own, and the inspector knows
    the prompt carries it."""
    conv, ids = _ledger_story(store)
    store.delete_message(ids[6])  # cited by the rule; no chapter's range ends there
    new = _ledger_branch(store, conv, None).conversation
    (rule,) = [e for e in store.ledger(new.id) if e.kind is LedgerKind.CONSTRAINT]
    first = store.messages_between(new.id, 0, 10**9)[4]
    assert first.text == store.get_message(ids[4]).text
    assert rule.evidence == [first.id, ids[6]]
    assert rule.id in carried([rule], store.memory_state(new.id).memory_text)


def test_what_one_branch_does_to_its_ledger_never_reaches_the_other(store: Store) -> None:
    conv, ids = _ledger_story(store)
    new = _ledger_branch(store, conv, ids[9]).conversation
    before = _seen(store, conv.id)
    # The branch's own next chapter replaces its rule.
    (rule,) = [e for e in store.ledger(new.id) if e.kind is LedgerKind.CONSTRAINT]
    copies = store.messages_between(new.id, 0, 10**9)
    store.store_chapter(
        _chapter(new.id, copies[8].id, copies[9].id, "Ann changed her mind."),
        [_entry(new.id, LedgerKind.CONSTRAINT, "Call Ann 'captain'", copies[8].id)],
        [LedgerEnding(rule.id, LedgerEnd.SUPERSEDED, "Call Ann 'captain'")],
    )
    assert _seen(store, conv.id) == before
    assert "Never call Ann 'miss'" in [e.text for e in store.ledger(conv.id)]
    # A refold in the original (an edit in the second chapter) ends the original's entries of
    # that chapter, not the branch's.
    branch_before = _seen(store, new.id)
    second = store.chapters(conv.id)[1]
    store.store_refold(
        [second.id], [NewChapter(_chapter(conv.id, ids[4], ids[7], "Seraphina kept the key."))]
    )
    assert "Never call Ann 'miss'" not in [e.text for e in store.ledger(conv.id)]
    assert _seen(store, new.id) == branch_before
    # And a new entry in either names itself apart from every copied label.
    labels = [e.label for e in store.ledger(new.id, include_ended=True)]
    assert len(set(labels)) == len(labels)
