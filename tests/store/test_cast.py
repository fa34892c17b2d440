"""Group casts, the speaker's card on messages, the reply order and quick replies (issue 31),
on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kotonia_tui.domain import Conversation, Message, QuickReply, ReplyOrder, Role
from kotonia_tui.store import NotFoundError, Store, StoreError
from kotonia_tui.store.migrations import _group_chats

from .conftest import new_conversation, stored_before


def _keys(store: Store, conv_id: int) -> list[tuple[str, bool]]:
    return [(m.character_key, m.muted) for m in store.cast(conv_id)]


def test_a_one_card_chat_is_its_card_and_grows_into_a_group_with_it_first(store: Store) -> None:
    conv = new_conversation(store)
    assert _keys(store, conv.id) == [("sera", False)]
    assert not store.is_group(conv.id)
    store.add_cast_member(conv.id, "lilith", "Lilith")
    store.add_cast_member(conv.id, "aqua", "Aqua")
    assert _keys(store, conv.id) == [("sera", False), ("lilith", False), ("aqua", False)]
    assert store.is_group(conv.id)
    with pytest.raises(StoreError, match="Lilith \\(lilith\\) is already in conversation"):
        store.add_cast_member(conv.id, "lilith", "Lilith")


def test_removing_a_member_keeps_the_others_order_and_the_last_one_stays(store: Store) -> None:
    conv = new_conversation(store)
    store.set_cast(conv.id, [("sera", "Seraphina"), ("lilith", "Lilith"), ("aqua", "Aqua")])
    store.remove_cast_member(conv.id, "lilith")
    store.add_cast_member(conv.id, "lilith", "Lilith")  # comes back at the end
    assert [m.character_key for m in store.cast(conv.id)] == ["sera", "aqua", "lilith"]
    # The conversation's own card leaves: the first member left becomes it.
    store.remove_cast_member(conv.id, "sera")
    assert store.get_conversation(conv.id).character_key == "aqua"
    store.remove_cast_member(conv.id, "lilith")
    with pytest.raises(StoreError, match="aqua is the last member"):
        store.remove_cast_member(conv.id, "aqua")
    with pytest.raises(NotFoundError, match="nobody is not in conversation"):
        store.remove_cast_member(conv.id, "nobody")


def test_a_muted_member_stays_in_the_cast_marked(store: Store) -> None:
    conv = new_conversation(store)
    store.set_cast(conv.id, [("sera", "Seraphina"), ("lilith", "Lilith")])
    store.set_cast_muted(conv.id, "lilith", True)
    assert _keys(store, conv.id) == [("sera", False), ("lilith", True)]
    store.set_cast_muted(conv.id, "lilith", False)
    assert _keys(store, conv.id) == [("sera", False), ("lilith", False)]
    with pytest.raises(NotFoundError, match="aqua is not in conversation"):
        store.set_cast_muted(conv.id, "aqua", True)


def test_a_cast_is_set_once_without_a_card_twice(store: Store) -> None:
    conv = new_conversation(store)
    with pytest.raises(StoreError, match="a card appears twice"):
        store.set_cast(conv.id, [("sera", "Seraphina"), ("sera", "Seraphina")])
    store.set_cast(conv.id, [("sera", "Seraphina"), ("lilith", "Lilith")])
    with pytest.raises(StoreError, match="already has a cast"):
        store.set_cast(conv.id, [("aqua", "Aqua")])
    with pytest.raises(NotFoundError, match="conversation 999 does not exist"):
        store.set_cast(999, [("aqua", "Aqua")])


def test_group_replies_keep_their_speakers_card_through_reads_and_branches(store: Store) -> None:
    conv = new_conversation(store)
    store.set_cast(conv.id, [("sera", "Seraphina"), ("lilith", "Lilith")])
    store.set_reply_order(conv.id, ReplyOrder.LIST)
    user = store.add_message(
        Message(conversation_id=conv.id, role=Role.USER, speaker="Ann", text="Hello, both")
    )
    reply = store.add_message(
        Message(
            conversation_id=conv.id,
            role=Role.CHARACTER,
            speaker="Lilith",
            text="Hm.",
            character_key="lilith",
        )
    )
    assert store.get_message(reply.id).character_key == "lilith"
    assert store.get_message(user.id).character_key is None
    assert [m.character_key for m in store.recent_messages(conv.id, 10)] == [None, "lilith"]
    branched = store.branch_conversation(
        conv.id,
        None,
        Conversation(character_key="sera", character_name="Seraphina", persona_name="Ann"),
    ).conversation
    assert [m.character_key for m in store.recent_messages(branched.id, 10)] == [None, "lilith"]
    assert _keys(store, branched.id) == [("sera", False), ("lilith", False)]
    assert store.reply_order(branched.id) is ReplyOrder.LIST


def test_a_conversation_starts_in_natural_order(store: Store) -> None:
    conv = new_conversation(store)
    assert store.reply_order(conv.id) is ReplyOrder.NATURAL
    store.set_reply_order(conv.id, ReplyOrder.MANUAL)
    assert store.reply_order(conv.id) is ReplyOrder.MANUAL
    with pytest.raises(NotFoundError):
        store.set_reply_order(999, ReplyOrder.LIST)


def test_quick_replies_global_then_the_characters_own_in_order(store: Store) -> None:
    store.add_quick_reply(QuickReply(label="Look", text="*looks around*", position=2))
    store.add_quick_reply(QuickReply(label="Wave", text="*waves*", send=False, position=1))
    store.add_quick_reply(QuickReply(character_key="sera", label="Heal", text="Heal me?"))
    store.add_quick_reply(QuickReply(character_key="lilith", label="Bow", text="*bows*"))
    listed = store.quick_replies(["sera"])
    assert [(q.label, q.send) for q in listed] == [("Wave", False), ("Look", True), ("Heal", True)]
    assert [q.label for q in store.quick_replies()] == ["Wave", "Look"]
    store.delete_quick_reply(listed[0].id)
    assert [q.label for q in store.quick_replies(["lilith"])] == ["Look", "Bow"]
    with pytest.raises(StoreError, match="its text is empty"):
        store.add_quick_reply(QuickReply(label="Empty", text="  "))
    with pytest.raises(NotFoundError, match="quick reply 999"):
        store.delete_quick_reply(999)


def test_a_quick_reply_is_edited_in_place_and_can_change_whose_it_is(store: Store) -> None:
    wave = store.add_quick_reply(QuickReply(label="Wave", text="*waves*"))
    store.add_quick_reply(QuickReply(label="Look", text="*looks*", position=1))
    edited = wave.model_copy(update={"text": "*waves back*", "send": False, "label": "Wave!"})
    store.update_quick_reply(edited)
    assert [(q.label, q.text, q.send) for q in store.quick_replies()] == [
        ("Wave!", "*waves back*", False),
        ("Look", "*looks*", True),
    ]
    store.update_quick_reply(edited.model_copy(update={"character_key": "sera"}))
    assert [q.label for q in store.quick_replies()] == ["Look"]
    assert [q.label for q in store.quick_replies(["sera"])] == ["Look", "Wave!"]
    with pytest.raises(StoreError, match="its text is empty"):
        store.update_quick_reply(edited.model_copy(update={"text": ""}))
    assert store.quick_replies(["sera"])[1].text == "*waves back*"  # nothing stored
    with pytest.raises(NotFoundError, match="quick reply 999"):
        store.update_quick_reply(edited.model_copy(update={"id": 999}))


def test_the_group_step_keeps_a_stored_chat_a_one_card_chat(tmp_path: Path) -> None:
    path = tmp_path / "before.sqlite3"
    stored_before(path, _group_chats, ["Hello there", "Still here?"])
    with Store.open(path) as store:
        assert _keys(store, 1) == [("sera", False)]
        assert [m.character_key for m in store.recent_messages(1, 10)] == [None, None]
        assert store.reply_order(1) is ReplyOrder.NATURAL
        assert store.quick_replies() == []
        store.add_cast_member(1, "lilith", "Lilith")
        assert _keys(store, 1) == [("sera", False), ("lilith", False)]
        assert store.integrity_check() == "ok"
