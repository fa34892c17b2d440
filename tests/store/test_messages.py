"""Messages: what a turn writes and reads, alternatives (swipes), token counts, images."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kotonia_tui.domain import (
    Alternative,
    Conversation,
    Message,
    MessageStatus,
    Role,
    Segment,
    SegmentKind,
)
from kotonia_tui.store import NotFoundError, Store, StoreError

from .conftest import T0, make_messages, new_conversation


def _reply(conv_id: int, text: str = "", status: MessageStatus = MessageStatus.COMPLETE) -> Message:
    return Message(
        conversation_id=conv_id, role=Role.CHARACTER, speaker="Seraphina", text=text, status=status
    )


def test_add_message_sets_ids_and_bumps_the_conversation(store: Store) -> None:
    conv = new_conversation(store)
    later = T0 + timedelta(hours=1)
    msg = store.add_message(
        Message(
            conversation_id=conv.id,
            role=Role.USER,
            speaker="Ann",
            text="Hello!",
            created_at=later,
            token_counts={"gemma": 3},
            extra={"note": [1, 2]},
        )
    )
    assert msg.id is not None and msg.conversation_id == conv.id
    stored = store.get_message(msg.id)
    assert (stored.text, stored.created_at, stored.extra) == ("Hello!", later, {"note": [1, 2]})
    assert stored.created_at.tzinfo is not None
    assert stored.token_counts == {"gemma": 3}
    after = store.get_conversation(conv.id)
    assert (after.message_count, after.updated_at) == (1, later)


def test_add_message_to_a_missing_conversation_names_it(store: Store) -> None:
    with pytest.raises(NotFoundError, match="conversation 99 does not exist"):
        store.add_message(_reply(99, "x"))


def test_nothing_stored_is_cut(store: Store) -> None:
    conv = new_conversation(store)
    long_text = "Ünïcode 🌸 " * 50_000
    msg = store.add_message(_reply(conv.id, long_text))
    assert store.get_message(msg.id).text == long_text


def test_windows_and_scrolling(store: Store) -> None:
    conv = new_conversation(store)
    other = new_conversation(store, key="other")
    ids = store.add_messages(conv.id, make_messages(30))
    store.add_messages(other.id, make_messages(5))  # interleaved ids must not leak in
    store.add_messages(conv.id, make_messages(2, start=30))
    all_ids = [m.id for m in store.iter_messages(conv.id, batch=7)]
    assert len(all_ids) == 32 and all_ids == sorted(all_ids) and all_ids[:30] == ids

    recent = store.recent_messages(conv.id, 5)
    assert [m.id for m in recent] == all_ids[-5:]  # the last five, oldest first
    assert store.last_message(conv.id).id == all_ids[-1]
    assert [m.id for m in store.messages_from(conv.id, ids[10], 3)] == ids[10:13]
    assert [m.id for m in store.messages_between(conv.id, ids[3], ids[6])] == ids[3:7]
    assert [m.id for m in store.messages_before(conv.id, ids[10], 4)] == ids[6:10]
    assert store.messages_before(conv.id, ids[0], 4) == []
    assert store.message_count(conv.id) == 32

    # Recall's reads: the message after each id, older than the window (ids from the other
    # conversation, added between, never come back), one row each.
    window = all_ids[31]
    before = store.rows_read
    following = store.next_messages(conv.id, [ids[3], ids[29], all_ids[30]], window)
    assert store.rows_read - before == 2
    assert {k: m and m.id for k, m in following.items()} == {
        ids[3]: ids[4],
        ids[29]: all_ids[30],
        all_ids[30]: None,  # the next one is the window's
    }
    assert store.neighbours(conv.id, [ids[29]], window)[ids[29]][1] == following[ids[29]]


def test_a_streamed_reply_is_finished_in_place(store: Store) -> None:
    conv = new_conversation(store)
    placeholder = store.add_message(_reply(conv.id, "", MessageStatus.CUT))
    segments = [
        Segment(kind=SegmentKind.NARRATION, text="She smiles."),
        Segment(kind=SegmentKind.DIALOGUE, text="Welcome.", speaker="Seraphina", listener="Ann"),
    ]
    done = store.finish_message(
        placeholder.id,
        'She smiles. "Welcome."',
        segments,
        MessageStatus.CUT,
        status_reason="length",
        reasoning="be kind",
    )
    assert done.segments == segments
    assert (done.status, done.status_reason, done.reasoning) == (
        MessageStatus.CUT,
        "length",
        "be kind",
    )
    assert store.get_message(placeholder.id) == done


def test_editing_text_marks_it_edited_and_drops_stale_token_counts(store: Store) -> None:
    conv = new_conversation(store)
    msg = store.add_message(_reply(conv.id, "Helo"))
    store.set_token_count(msg.id, "gemma", 2)
    store.set_token_count(msg.id, "glm", 3)
    assert store.recent_messages(conv.id, 1, model_key="glm")[0].token_counts == {"glm": 3}
    edited = store.update_message_text(msg.id, "Hello", [])
    assert (edited.text, edited.edited, edited.token_counts) == ("Hello", True, {})


def test_token_count_for_missing_message_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError, match="message 5 does not exist"):
        store.set_token_count(5, "gemma", 1)


def test_alternatives_regenerate_choose_and_page(store: Store) -> None:
    conv = new_conversation(store)
    msg = store.add_message(_reply(conv.id, "First try"))
    store.set_token_count(msg.id, "gemma", 2)
    assert store.add_alternative(msg.id, Alternative(text="Second try", reasoning="r2")) == 1
    second = store.get_message(msg.id)
    assert (second.text, second.chosen, second.reasoning) == ("Second try", 1, "r2")
    assert [a.text for a in second.alternatives] == ["First try", "Second try"]
    assert second.token_counts == {}  # the counted text is gone from the prompt

    kept = store.add_alternative(msg.id, Alternative(text="Third try"), choose=False)
    assert kept == 2 and store.get_message(msg.id).text == "Second try"

    back = store.choose_alternative(msg.id, 0)
    assert (back.text, back.chosen, back.reasoning) == ("First try", 0, None)
    assert [a.text for a in back.alternatives] == ["First try", "Second try", "Third try"]
    with pytest.raises(StoreError, match=r"message \d+ has no alternative 5 \(it has 3: 0..2\)"):
        store.choose_alternative(msg.id, 5)

    # Editing the chosen version edits that alternative too, and only that one.
    store.update_message_text(msg.id, "First try, fixed", [])
    edited = store.get_message(msg.id)
    assert [a.text for a in edited.alternatives] == ["First try, fixed", "Second try", "Third try"]


def test_inconsistent_alternatives_are_refused_not_overwritten(store: Store) -> None:
    conv = new_conversation(store)
    bad = _reply(conv.id, "shown").model_copy(
        update={"alternatives": [Alternative(text="other")], "chosen": 0}
    )
    with pytest.raises(StoreError, match="text differs from alternative 0"):
        store.add_message(bad)
    out_of_range = _reply(conv.id, "a").model_copy(
        update={"alternatives": [Alternative(text="a")], "chosen": 3}
    )
    with pytest.raises(StoreError, match="chosen is 3 but it has 1 alternatives"):
        store.add_message(out_of_range)
    assert store.message_count(conv.id) == 0


def test_delete_message_keeps_counts_right(store: Store) -> None:
    conv = new_conversation(store)
    ids = store.add_messages(conv.id, make_messages(3))
    store.add_alternative(ids[1], Alternative(text="alt"))
    store.delete_message(ids[1])
    assert [m.id for m in store.recent_messages(conv.id, 10)] == [ids[0], ids[2]]
    assert store.message_count(conv.id) == 2
    with pytest.raises(NotFoundError, match=f"message {ids[1]} does not exist"):
        store.get_message(ids[1])
    # Ids are never reused, so old ranges never capture new messages.
    store.delete_message(ids[2])
    (new_id,) = store.add_messages(conv.id, make_messages(1))
    assert new_id > ids[2]
    assert store.integrity_check() == "ok"


def test_images_are_stored_once_by_content(store: Store) -> None:
    data = bytes(range(256)) * 10
    digest = store.put_image(data, "image/png", 32, 16)
    assert store.put_image(data, "image/png", 32, 16) == digest
    assert store.get_image(digest) == (data, "image/png")
    conv = new_conversation(store)
    msg = store.add_message(_reply(conv.id, "look").model_copy(update={"images": [digest]}))
    assert store.get_message(msg.id).images == [digest]
    with pytest.raises(NotFoundError, match="image abc is not stored"):
        store.get_image("abc")
    with pytest.raises(StoreError, match="refers to image feed which is not stored"):
        store.add_message(_reply(conv.id, "x").model_copy(update={"images": ["feed"]}))


def test_conversations_list_rename_and_delete_cascades(store: Store) -> None:
    old = new_conversation(store)
    new = new_conversation(store, key="kael")
    store.add_messages(old.id, make_messages(2, start=100))  # later timestamps: now newest
    assert [c.id for c in store.list_conversations()] == [old.id, new.id]
    assert [c.id for c in store.list_conversations("kael")] == [new.id]
    assert store.rename_conversation(new.id, "Renamed").title == "Renamed"

    store.add_alternative(store.last_message(old.id).id, Alternative(text="x"))
    store.delete_conversation(old.id)
    assert [c.id for c in store.list_conversations()] == [new.id]
    with pytest.raises(NotFoundError, match=f"conversation {old.id} does not exist"):
        store.get_conversation(old.id)
    assert store.recent_messages(old.id, 10) == []
    assert store.integrity_check() == "ok"


def test_characters_seen_keep_first_seen(store: Store) -> None:
    store.upsert_character("sera", "Seraphina", "h1", "/cards/sera.png")
    first = store.characters_seen()[0]
    store.upsert_character("sera", "Seraphina II", "h2", "/cards/sera.png")
    (again,) = store.characters_seen()
    assert (again.name, again.card_hash, again.first_seen) == (
        "Seraphina II",
        "h2",
        first.first_seen,
    )


def test_import_preserves_everything_or_nothing(store: Store) -> None:
    msgs = make_messages(4)
    msgs[1] = msgs[1].model_copy(
        update={
            "text": "B",
            "alternatives": [Alternative(text="A", created_at=T0), Alternative(text="B")],
            "chosen": 1,
            "extra": {"sillytavern": {"gen_id": 7}},
        }
    )
    conv = store.import_conversation(
        Conversation(
            character_key="sera",
            character_name="Seraphina",
            persona_name="Ann",
            created_at=T0,
            updated_at=T0 + timedelta(seconds=3),
        ),
        msgs,
    )
    assert conv.message_count == 4
    back = list(store.iter_messages(conv.id))
    assert [(m.speaker, m.text, m.created_at) for m in back] == [
        (m.speaker, m.text, m.created_at) for m in msgs
    ]
    assert (back[1].chosen, [a.text for a in back[1].alternatives]) == (1, ["A", "B"])
    assert back[1].extra == {"sillytavern": {"gen_id": 7}}

    # The last message fails after the conversation and the first rows were written.
    broken = make_messages(3)
    broken[2] = broken[2].model_copy(update={"images": ["feed"]})
    with pytest.raises(StoreError, match="image feed"):
        store.import_conversation(
            Conversation(character_key="x", character_name="X", persona_name="Ann"), broken
        )
    assert [c.id for c in store.list_conversations()] == [conv.id]
    assert store.integrity_check() == "ok"
