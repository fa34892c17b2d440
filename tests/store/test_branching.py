"""Branches: a new conversation sharing the story up to a message, with the memory covering it."""

from __future__ import annotations

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
    Message,
    Role,
    StoredConversation,
    Synopsis,
    SynopsisOrigin,
)
from kotonia_tui.store import MemoryState, NotFoundError, Store

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
