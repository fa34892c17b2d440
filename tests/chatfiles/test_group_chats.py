"""SillyTavern group chats (issue 31): imported as a group (each speaker's card from the card
file its lines name, or its name), exported with each line's speaker and card, and back, on a
real SQLite file and the shipped cards."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from kotonia_tui.chat.importing import import_chat_file
from kotonia_tui.chat.library import CharacterLibrary, shipped_characters_dir
from kotonia_tui.chatfiles.sillytavern import write_sillytavern
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.store import Store

# As SillyTavern writes a group chat: a header whose names are not a character's, then each
# line signed by its speaker with the card file it came from.
ST_GROUP: list[dict[str, Any]] = [
    {"user_name": "unused", "character_name": "unused", "chat_metadata": {}},
    {
        "name": "Rowan Ashby",
        "is_user": False,
        "send_date": "November 1, 2026 10:00am",
        "mes": "Evening. The shop is closing.",
        "original_avatar": "Rowan Ashby.png",
    },
    {
        "name": "林晚舟",
        "is_user": False,
        "send_date": "November 1, 2026 10:01am",
        "mes": "客官，喝杯茶吧。",
        "original_avatar": "lin-wanzhou.png",
    },
    {"name": "Ann", "is_user": True, "send_date": "November 1, 2026 10:02am", "mes": "Hello!"},
    {
        "name": "林晚舟",
        "is_user": False,
        "send_date": "November 1, 2026 10:03am",
        "mes": "请坐。",
        "original_avatar": "lin-wanzhou.png",
    },
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", "utf-8")
    return path


def _library() -> CharacterLibrary:
    return CharacterLibrary([shipped_characters_dir()])


def _export(store: Store, conv_id: int) -> str:
    out = io.StringIO()
    write_sillytavern(
        store.get_conversation(conv_id),
        store.iter_messages(conv_id),
        out,
        store.get_image,
        store.conversation_settings(conv_id),
        store.cast(conv_id),
    )
    return out.getvalue()


def _shape(store: Store, conv_id: int) -> list[tuple[str, str | None, str]]:
    return [(m.speaker, m.character_key, m.text) for m in store.iter_messages(conv_id)]


def test_a_sillytavern_group_chat_imports_as_a_group_and_round_trips(tmp_path: Path) -> None:
    library = _library()
    store = Store.open(tmp_path / "kotonia.sqlite3")
    path = _write(tmp_path / "group.jsonl", ST_GROUP)
    imported = import_chat_file(store, path, "User", match=library.match)
    conv_id = imported.conversation.id
    assert [(m.character_key, m.character_name) for m in store.cast(conv_id)] == [
        ("rowan-ashby", "Rowan Ashby"),
        ("lin-wanzhou", "林晚舟"),
    ]
    assert store.get_conversation(conv_id).character_key == "rowan-ashby"  # not "unused"
    assert _shape(store, conv_id) == [
        ("Rowan Ashby", "rowan-ashby", "Evening. The shop is closing."),
        ("林晚舟", "lin-wanzhou", "客官，喝杯茶吧。"),
        ("Ann", None, "Hello!"),
        ("林晚舟", "lin-wanzhou", "请坐。"),
    ]
    text = _export(store, conv_id)
    lines = [json.loads(line) for line in text.splitlines()]
    assert [m["name"] for m in lines[0]["kotonia_cast"]] == ["Rowan Ashby", "林晚舟"]
    # Each line keeps the card file SillyTavern named on it.
    assert [line.get("original_avatar") for line in lines[1:]] == [
        "Rowan Ashby.png",
        "lin-wanzhou.png",
        None,
        "lin-wanzhou.png",
    ]
    again = import_chat_file(
        store, _write(tmp_path / "again.jsonl", lines), "User", match=library.match
    )
    assert _shape(store, again.conversation.id) == _shape(store, conv_id)
    assert store.cast(again.conversation.id) == store.cast(conv_id)
    store.close()


def test_a_kotonia_group_keeps_its_order_muted_members_and_speakers(tmp_path: Path) -> None:
    """A member who never spoke and a muted one come back as they were (the header's cast),
    and a member whose lines are signed with its nickname gets them back by its card file."""
    library = _library()
    store = Store.open(tmp_path / "kotonia.sqlite3")
    conv = store.create_conversation(
        Conversation(character_key="lin-wanzhou", character_name="林晚舟", persona_name="Ann")
    )
    store.set_cast(
        conv.id,
        [
            ("lin-wanzhou", "林晚舟"),
            ("rowan-ashby", "Rowan Ashby"),
            ("tsukishima-tsumugi", "月島 紬"),
        ],
    )
    store.set_cast_muted(conv.id, "rowan-ashby", True)
    tsumugi = Message(
        role=Role.CHARACTER, speaker="紬", text="…", character_key="tsukishima-tsumugi"
    )
    store.add_messages(
        conv.id,
        [
            Message(role=Role.USER, speaker="Ann", text="Good morning."),
            Message(
                role=Role.CHARACTER, speaker="林晚舟", text="早。", character_key="lin-wanzhou"
            ),
            tsumugi,  # signed with the card's nickname; the card's name is 月島 紬
        ],
    )
    lines = [json.loads(line) for line in _export(store, conv.id).splitlines()]
    assert lines[2]["original_avatar"] == "lin-wanzhou.png"
    back = import_chat_file(store, _write(tmp_path / "g.jsonl", lines), "Ann", match=library.match)
    cast = store.cast(back.conversation.id)
    assert [(m.character_key, m.muted) for m in cast] == [
        ("lin-wanzhou", False),
        ("rowan-ashby", True),  # muted, and never spoke
        ("tsukishima-tsumugi", False),
    ]
    assert _shape(store, back.conversation.id) == _shape(store, conv.id)
    store.close()
