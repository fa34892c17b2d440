"""Chat files: SillyTavern round trips keep every message, speaker, date and swipe."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kotonia_tui.chat.importing import import_chat_file
from kotonia_tui.chatfiles import ImportFormatError
from kotonia_tui.chatfiles.sillytavern import parse_st_date, read_chat_file, write_sillytavern
from kotonia_tui.domain import (
    Alternative,
    ChatSettings,
    Conversation,
    GenerationSettings,
    Message,
    MessageStatus,
    Role,
    Segment,
    SegmentKind,
)
from kotonia_tui.store import Store

from ..store.conftest import new_conversation
from ..zones import local_zone

HEADER: dict[str, Any] = {
    "user_name": "Ann",
    "character_name": "Seraphina",
    "create_date": "2026-11-29@19h30m05s",
    "chat_metadata": {
        "note_prompt": "",
        "note_interval": 1,
        "timedWorldInfo": {"sticky": {}, "cooldown": {}},
        "lastInContextMessageId": 5,
    },
}
LINES: list[dict[str, Any]] = [
    {
        "name": "Seraphina",
        "is_user": False,
        "is_system": False,
        "send_date": "November 29, 2026 7:30pm",
        "mes": '*You wake in a glade.* "Easy now, you\'re safe."',
        "extra": {},
        "swipe_id": 1,
        "swipes": ["*A greeting.*", '*You wake in a glade.* "Easy now, you\'re safe."'],
        "swipe_info": [
            {"send_date": "November 29, 2026 7:30pm", "extra": {}},
            {"send_date": "November 29, 2026 7:30pm", "extra": {}},
        ],
    },
    {
        "name": "Ann",
        "is_user": True,
        "send_date": "November 29, 2026 7:31pm",
        "mes": "Where am I?",
        "extra": {"isSmallSys": False},
        "force_avatar": "User Avatars/ann.png",
    },
    {
        "name": "Seraphina",
        "is_user": False,
        "is_system": False,
        "send_date": 1795980720000,
        "mes": '"In my forest." *She tilts her head.*',
        "gen_started": "2026-11-29T19:32:00.120Z",
        "gen_finished": "2026-11-29T19:32:04.812Z",
        "extra": {
            "api": "koboldcpp",
            "model": "glm-4.6v-flash",
            "reasoning": "She should reassure Ann.",
            "token_count": 17,
        },
        "swipe_id": 0,
        "swipes": ['"In my forest." *She tilts her head.*', '"Shh. Rest."'],
        "swipe_info": [
            {
                "send_date": "2026-11-29T19:32:00.000Z",
                "gen_started": "2026-11-29T19:32:00.120Z",
                "gen_finished": "2026-11-29T19:32:04.812Z",
                "extra": {"api": "koboldcpp", "reasoning": "She should reassure Ann."},
            },
            {
                "send_date": "2026-11-29T19:33:10.000Z",
                "extra": {"api": "koboldcpp", "reasoning": "Keep it short."},
            },
        ],
    },
    {
        "name": "Ann",
        "is_user": True,
        "is_system": True,
        "send_date": "2026-11-29T19:34:00.000Z",
        "mes": "(a line hidden from the model)",
        "extra": {},
    },
    {
        "name": "System",
        "is_user": False,
        "is_system": True,
        "send_date": "2026-11-29@19h35m00s",
        "mes": "Night falls.",
        "extra": {"type": "narrator"},
    },
    {
        "name": "Seraphina",
        "is_user": False,
        "is_system": False,
        "send_date": "November 29, 2026 7:36pm",
        "mes": "*She lights a lantern.*",
        "extra": {},
        "swipe_id": 0,
        "swipes": ["*She blows out the candle.*"],
        "swipe_info": [],
    },
]


def _write_chat(path: Path, lines: list[dict]) -> None:
    path.write_text("\n".join(json.dumps(o, ensure_ascii=False) for o in [HEADER, *lines]) + "\n")


def _objects(text: str) -> list[dict]:
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def test_round_trip_through_the_store_keeps_the_file(tmp_path: Path, store: Store) -> None:
    source = tmp_path / "Seraphina - 2026-11-29@19h30m05s.jsonl"
    _write_chat(source, LINES)
    conv, msgs = read_chat_file(source, persona_name="Someone else")
    stored = store.import_conversation(conv.model_copy(update={"character_key": "sera"}), msgs)
    assert stored.message_count == len(LINES)

    loaded = list(store.iter_messages(stored.id, batch=4))
    assert [(m.speaker, m.role) for m in loaded] == [
        ("Seraphina", Role.CHARACTER),
        ("Ann", Role.USER),
        ("Seraphina", Role.CHARACTER),
        ("Ann", Role.USER),
        ("System", Role.SYSTEM),
        ("Seraphina", Role.CHARACTER),
    ]
    assert loaded[0].created_at == datetime(2026, 11, 29, 19, 30, tzinfo=UTC)
    assert loaded[2].created_at == datetime.fromtimestamp(1795980720, UTC)
    assert (loaded[0].chosen, len(loaded[0].alternatives)) == (1, 2)
    assert loaded[2].reasoning == "She should reassure Ann."
    assert loaded[2].alternatives[1].reasoning == "Keep it short."

    out = io.StringIO()
    assert write_sillytavern(store.get_conversation(stored.id), loaded, out) == len(LINES)
    assert _objects(out.getvalue()) == [HEADER, *LINES]


def test_choosing_another_swipe_exports_as_that_swipe(tmp_path: Path, store: Store) -> None:
    source = tmp_path / "chat.jsonl"
    _write_chat(source, LINES[2:3])
    conv, msgs = read_chat_file(source, "Ann")
    stored = store.import_conversation(conv, msgs)
    msg = store.last_message(stored.id)
    store.choose_alternative(msg.id, 1)
    store.add_alternative(msg.id, Alternative(text="A third take."), choose=False)
    out = io.StringIO()
    write_sillytavern(stored, store.iter_messages(stored.id), out)
    line = _objects(out.getvalue())[1]
    assert (line["mes"], line["swipe_id"]) == ('"Shh. Rest."', 1)
    assert line["swipes"] == [*LINES[2]["swipes"], "A third take."]
    assert line["extra"]["reasoning"] == "Keep it short."
    assert len(line["swipe_info"]) == 3


def test_kotonia_messages_export_as_valid_sillytavern_and_come_back(tmp_path: Path) -> None:
    conv = Conversation(character_key="sera", character_name="Seraphina", persona_name="Ann")
    segments = [Segment(kind=SegmentKind.DIALOGUE, text="Hi.", speaker="Seraphina", listener="Ann")]
    msgs = [
        Message(role=Role.USER, speaker="Ann", text="Hello"),
        Message(
            role=Role.CHARACTER,
            speaker="Seraphina",
            text="Hi.",
            segments=segments,
            status=MessageStatus.CUT,
            status_reason="length",
        ),
    ]
    path = tmp_path / "out.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_sillytavern(conv, msgs, out)
    header, first, second = _objects(path.read_text())
    assert (header["user_name"], header["character_name"]) == ("Ann", "Seraphina")
    assert (first["is_user"], first["name"], first["mes"]) == (True, "Ann", "Hello")
    assert {"send_date", "is_system", "extra"} <= set(second)
    _, back = read_chat_file(path, "Ann")
    assert [(m.speaker, m.text, m.created_at) for m in back] == [
        (
            m.speaker,
            m.text,
            m.created_at.replace(microsecond=m.created_at.microsecond // 1000 * 1000),
        )
        for m in msgs
    ]
    # The status comes back; segments are not read from a file (the importer derives them).
    assert second["extra"]["kotonia"]["segments"] == [s.model_dump() for s in segments]
    assert (back[1].segments, back[1].status, back[1].status_reason) == (
        [],
        MessageStatus.CUT,
        "length",
    )


def test_a_malformed_line_7_is_reported_and_nothing_is_imported(
    tmp_path: Path, store: Store
) -> None:
    source = tmp_path / "broken.jsonl"
    lines = [json.dumps(o) for o in [HEADER, *LINES]]
    lines.insert(6, '{"name": "Ann", "is_user": true, "mes": "unfinished')  # line 7
    source.write_text("\n".join(lines))
    with pytest.raises(ImportFormatError, match=r"broken\.jsonl: line 7: not valid JSON"):
        conv, msgs = read_chat_file(source, "Ann")
        store.import_conversation(conv, msgs)
    assert store.list_conversations() == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"name": "Ann", "mes": 42}, "line 2: 'mes' must be text, got 42"),
        ({"name": "Ann", "mes": "x", "send_date": "tuesday-ish"}, "'send_date' is not a date"),
        ({"name": "Ann", "mes": "x", "swipes": ["x"], "swipe_id": 3}, "'swipe_id' is 3"),
        ({"name": "Ann", "mes": "x", "is_user": "yes"}, "'is_user' must be true or false"),
    ],
)
def test_bad_fields_name_the_line_and_the_value(tmp_path: Path, bad: dict, message: str) -> None:
    source = tmp_path / "bad.jsonl"
    _write_chat(source, [bad])
    with pytest.raises(ImportFormatError, match=message.replace("(", r"\(")):
        read_chat_file(source, "Ann")


def test_json_list_import_for_test_and_evaluation_data(tmp_path: Path, store: Store) -> None:
    source = tmp_path / "story.json"
    source.write_text(
        json.dumps(
            [
                {"speaker": "Ann", "text": "I was born in Lisbon."},
                {"speaker": "Seraphina", "text": "Lisbon! Tell me more.", "mood": "curious"},
                {"speaker": "Narrator", "text": "Rain.", "role": "system"},
                {"speaker": "Bob", "text": "Me too.", "is_user": True},
            ]
        )
    )
    conv, msgs = read_chat_file(source, persona_name="Ann", character_name_hint="Seraphina")
    stored = store.import_conversation(conv, msgs)
    loaded = store.recent_messages(stored.id, 10)
    assert [m.role for m in loaded] == [Role.USER, Role.CHARACTER, Role.SYSTEM, Role.USER]
    assert loaded[1].extra == {"mood": "curious"}
    assert [m.created_at for m in loaded] == sorted({m.created_at for m in loaded})
    assert (stored.character_name, stored.persona_name) == ("Seraphina", "Ann")

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"speaker": "Ann", "text": "ok"}, {"speaker": "Ann"}]))
    with pytest.raises(ImportFormatError, match=r"bad\.json: item 2: 'text' must be text"):
        read_chat_file(bad, "Ann")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("November 29, 2026 7:30pm", datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),
        ("2026-11-29T19:30:00.000Z", datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),
        ("2026-11-29@19h30m00s", datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),
        ("2026-11-29 @19h 30m 00s 250ms", datetime(2026, 11, 29, 19, 30, 0, 250000, tzinfo=UTC)),
        (1795980600000, datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),
        ("1795980600000", datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),
        (
            "Sun Nov 29 2026 20:30:00 GMT+0100 (Central European Standard Time)",
            datetime(2026, 11, 29, 19, 30, tzinfo=UTC),
        ),
    ],
)
def test_sillytavern_dates_in_every_format(raw: object, expected: datetime) -> None:
    assert parse_st_date(raw) == expected


@pytest.fixture
def tokyo() -> Iterator[None]:
    """This process's local zone is UTC+9 (no daylight saving) for the test, then UTC again
    (tests/conftest.py pins the run to UTC)."""
    with local_zone("Asia/Tokyo"):
        yield


@pytest.mark.parametrize(
    "raw",
    [
        "December 5, 2026 1:21am",  # SillyTavern's send_date
        "2026-12-05@01h21m00s",  # its create_date
        "2026-12-05T01:21:00",  # ISO without a zone
        "2026-12-05 01:21",
    ],
)
def test_a_date_without_a_zone_is_this_machines_local_time(tokyo: None, raw: str) -> None:
    """SillyTavern writes the wall-clock time of the machine it runs on, and a user imports
    their own chats on that machine: 1:21am in UTC+9 is 16:21 UTC the day before."""
    assert parse_st_date(raw) == datetime(2026, 12, 4, 16, 21, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-12-05T01:21:00.000Z", datetime(2026, 12, 5, 1, 21, tzinfo=UTC)),
        ("2026-12-05T01:21:00+00:00", datetime(2026, 12, 5, 1, 21, tzinfo=UTC)),
        ("2026-12-05T01:21:00-05:00", datetime(2026, 12, 5, 6, 21, tzinfo=UTC)),
        ("2026-12-05T01:21:00+09:00", datetime(2026, 12, 4, 16, 21, tzinfo=UTC)),
        (1795980600000, datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),  # epoch ms
        ("1795980600000", datetime(2026, 11, 29, 19, 30, tzinfo=UTC)),
        (
            "Sun Nov 29 2026 20:30:00 GMT+0100 (Central European Standard Time)",
            datetime(2026, 11, 29, 19, 30, tzinfo=UTC),
        ),
    ],
)
def test_a_date_with_a_zone_or_an_epoch_number_is_read_as_it_is(
    tokyo: None, raw: object, expected: datetime
) -> None:
    assert parse_st_date(raw) == expected


def test_local_time_follows_daylight_saving() -> None:
    with local_zone("America/New_York"):
        assert parse_st_date("July 4, 2026 1:21pm") == datetime(2026, 7, 4, 17, 21, tzinfo=UTC)
        assert parse_st_date("January 4, 2026 1:21pm") == datetime(2026, 1, 4, 18, 21, tzinfo=UTC)
        # 2:30 on the night the clocks go from 2:00 to 3:00 never was: 3:30 summer time, as
        # JavaScript reads it (not 1:30); 1:30 on the night they go back twice: the first.
        assert parse_st_date("March 8, 2026 2:30am") == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
        assert parse_st_date("2026-03-08@02h30m00s") == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
        assert parse_st_date("November 1, 2026 1:30am") == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
        # Past the calendar's edge in this zone: read as UTC rather than refused.
        assert parse_st_date("9999-12-31 23:00") == datetime(9999, 12, 31, 23, tzinfo=UTC)


def test_an_import_in_utc_plus_9_lists_the_chat_at_its_real_time(
    tokyo: None, tmp_path: Path, store: Store
) -> None:
    """The conversation list's age comes from the newest message: read in the local zone, a
    chat written "1:21am" in Tokyo is stored at 16:21 UTC, not nine hours later; and the file
    exported on the same machine gives back its own dates."""
    header = {**HEADER, "create_date": "2025-12-05@01h20m00s"}
    lines = [
        {**LINES[1], "send_date": "December 5, 2025 1:20am"},
        {**LINES[5], "send_date": "December 5, 2025 1:21am"},
    ]
    source = tmp_path / "tokyo.jsonl"
    source.write_text("\n".join(json.dumps(o) for o in [header, *lines]) + "\n")
    conv, msgs = read_chat_file(source, persona_name="Ann")
    assert conv.created_at == datetime(2025, 12, 4, 16, 20, tzinfo=UTC)
    assert conv.updated_at == datetime(2025, 12, 4, 16, 21, tzinfo=UTC)
    stored = store.import_conversation(conv.model_copy(update={"character_key": "sera"}), msgs)
    loaded = list(store.iter_messages(stored.id))
    assert [m.created_at for m in loaded] == [
        datetime(2025, 12, 4, 16, 20, tzinfo=UTC),
        datetime(2025, 12, 4, 16, 21, tzinfo=UTC),
    ]
    out = io.StringIO()
    write_sillytavern(store.get_conversation(stored.id), loaded, out)
    assert _objects(out.getvalue()) == [header, *lines]


def test_a_new_chat_exports_its_create_date_in_local_time_as_sillytavern_writes_it(
    tokyo: None, tmp_path: Path, store: Store
) -> None:
    """SillyTavern's `create_date` has no zone: a conversation started here is written in
    local wall-clock time, so an import on this machine (or SillyTavern) reads its own time."""
    when = datetime(2025, 12, 4, 16, 21, 7, tzinfo=UTC)
    conv = new_conversation(store)
    conv = conv.model_copy(update={"created_at": when})
    message = Message(role=Role.USER, speaker="Ann", text="Hello.", created_at=when)
    out = io.StringIO()
    write_sillytavern(conv, [message], out)
    header = _objects(out.getvalue())[0]
    assert header["create_date"] == "2025-12-05@01h21m07s"
    path = tmp_path / "back.jsonl"
    path.write_text(out.getvalue())
    back, _msgs = read_chat_file(path, persona_name="Ann")
    assert back.created_at == when
    assert abs(back.updated_at - when) < timedelta(seconds=1)


def test_a_chat_imported_when_dates_were_read_as_utc_exports_as_it_came(
    tmp_path: Path, store: Store
) -> None:
    """Kotonia read a date without a zone as UTC before it read it as local time: a chat
    imported then holds those times. Exported in UTC+9 now, its dates' text still means them
    read as UTC, so the file goes back as it came, not with ISO dates nine hours off."""
    source = tmp_path / "old.jsonl"
    source.write_text("\n".join(json.dumps(o) for o in [HEADER, *LINES]) + "\n")
    conv, msgs = read_chat_file(source, persona_name="Ann")  # in UTC: as it was read then
    stored = store.import_conversation(conv.model_copy(update={"character_key": "sera"}), msgs)
    with local_zone("Asia/Tokyo"):
        out = io.StringIO()
        write_sillytavern(
            store.get_conversation(stored.id), list(store.iter_messages(stored.id)), out
        )
    assert _objects(out.getvalue()) == [HEADER, *LINES]


def test_export_of_a_stored_conversation_streams_from_the_store(store: Store) -> None:
    conv = new_conversation(store)
    store.add_messages(
        conv.id, [Message(role=Role.USER, speaker="Ann", text=f"m{i}") for i in range(1200)]
    )
    out = io.StringIO()
    assert write_sillytavern(conv, store.iter_messages(conv.id), out) == 1200
    assert _objects(out.getvalue())[-1]["mes"] == "m1199"


_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)


@st.composite
def _messages(draw: st.DrawFn) -> list[Message]:
    out = []
    for i in range(draw(st.integers(1, 6))):
        role = draw(st.sampled_from(list(Role)))
        texts = draw(st.lists(_TEXT, min_size=1, max_size=3))
        chosen = draw(st.integers(0, len(texts) - 1))
        alts = (
            [Alternative(text=t, created_at=datetime(2026, 1, 1, 0, i, tzinfo=UTC)) for t in texts]
            if len(texts) > 1
            else []
        )
        out.append(
            Message(
                role=role,
                speaker=draw(st.sampled_from(["Ann", "Seraphina", "System"])),
                text=texts[chosen],
                created_at=datetime(2026, 1, 1, 0, i, draw(st.integers(0, 59)), tzinfo=UTC),
                alternatives=alts,
                chosen=chosen if alts else 0,
                reasoning=draw(st.none() | _TEXT),
            )
        )
    return out


@settings(max_examples=60, deadline=None)
@given(msgs=_messages())
def test_any_kotonia_chat_survives_export_and_import(tmp_path_factory, msgs) -> None:
    conv = Conversation(character_key="sera", character_name="Seraphina", persona_name="Ann")
    path = tmp_path_factory.mktemp("rt") / "chat.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_sillytavern(conv, msgs, out)
    _, back = read_chat_file(path, "Ann")

    def key(m: Message) -> tuple:
        alts = [(a.text, a.created_at) for a in m.alternatives]
        return (m.role, m.speaker, m.text, m.created_at, m.chosen, alts, m.reasoning)

    assert [key(m) for m in back] == [key(m) for m in msgs]


def test_the_authors_note_and_world_info_travel_in_chat_metadata(tmp_path: Path, store: Store):
    """Export writes the conversation's settings where SillyTavern reads them; import reads
    them back, so the chat plays on there and here with its note and lorebook."""
    conv = new_conversation(store)
    store.add_messages(conv.id, [Message(role=Role.USER, speaker="User", text="Hello.")])
    chosen = ChatSettings(
        generation=GenerationSettings(temperature=0.5),
        author_note="It is raining.",
        author_note_depth=4,
        world_info=("saltmere-harbour.json", "tides.json"),
        lore_budget=600,
    )
    store.set_conversation_settings(conv.id, chosen)
    out = io.StringIO()
    write_sillytavern(
        store.get_conversation(conv.id),
        store.iter_messages(conv.id),
        out,
        settings=store.conversation_settings(conv.id),
    )
    metadata = _objects(out.getvalue())[0]["chat_metadata"]
    assert metadata["note_prompt"] == "It is raining."
    assert (metadata["note_position"], metadata["note_depth"]) == (1, 4)
    assert metadata["world_info"] == "saltmere-harbour"

    path = tmp_path / "exported.jsonl"
    path.write_text(out.getvalue(), encoding="utf-8")
    imported = import_chat_file(store, path, persona_name="User", character_key="mira")
    assert store.conversation_settings(imported.conversation.id) == chosen


def test_a_sillytavern_note_at_another_position_is_placed_after_the_history(
    tmp_path: Path, store: Store
) -> None:
    header = {**HEADER, "chat_metadata": {"note_prompt": "Stay calm.", "note_position": 0}}
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in [header, *LINES]) + "\n", encoding="utf-8")
    imported = import_chat_file(store, path, persona_name="User", character_key="sera")
    settings = store.conversation_settings(imported.conversation.id)
    assert (settings.author_note, settings.author_note_depth) == ("Stay calm.", 0)
    assert any("position 0 has no place here" in note for note in imported.notes)


def test_a_chat_whose_settings_did_not_change_exports_its_metadata_as_it_came(
    tmp_path: Path, store: Store
) -> None:
    header = {**HEADER, "chat_metadata": {**HEADER["chat_metadata"], "note_prompt": "Rain."}}
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in [header, *LINES]) + "\n", encoding="utf-8")
    imported = import_chat_file(store, path, persona_name="User", character_key="sera")
    conv_id = imported.conversation.id
    out = io.StringIO()
    settings = store.conversation_settings(conv_id)
    assert settings.author_note == "Rain."
    write_sillytavern(
        store.get_conversation(conv_id), store.iter_messages(conv_id), out, settings=settings
    )
    assert _objects(out.getvalue())[0]["chat_metadata"] == header["chat_metadata"]
