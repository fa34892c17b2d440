"""`kotonia search`: id-first lines and JSON, one conversation or all, never a deleted message."""

from __future__ import annotations

import json

import pytest

from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.store import Store


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stored() -> dict[str, int]:
    """Two conversations in the app's database, in English and Japanese."""
    with Store.open(app_dirs().default_db) as store:
        ids: dict[str, int] = {}
        for key, lines in (
            ("rowan-ashby", ["The clock tower chimed at midnight.", "Mend the clock, Rowan."]),
            ("tsukishima-tsumugi", ["灯台の鍵をなくした。", "猫が時計の上で寝ている。"]),
        ):
            conv = store.create_conversation(
                Conversation(character_key=key, character_name=key, persona_name="Ann", title=key)
            )
            ids[key] = conv.id
            for i, text in enumerate(lines):
                msg = store.add_message(
                    Message(
                        conversation_id=conv.id,
                        role=Role.USER if i % 2 == 0 else Role.CHARACTER,
                        speaker="Ann" if i % 2 == 0 else key,
                        text=text,
                    )
                )
                ids[text] = msg.id
        return ids


def test_lines_start_with_the_message_id_then_the_conversation(capsys, stored) -> None:
    code, out, err = _run(capsys, "search", "clock")
    assert code == 0 and err == ""
    lines = [line.split("\t") for line in out.splitlines()]
    assert {int(f[0]) for f in lines} == {
        stored["The clock tower chimed at midnight."],
        stored["Mend the clock, Rowan."],
    }
    assert {int(f[1]) for f in lines} == {stored["rowan-ashby"]}
    assert {f[2] for f in lines} == {"#1", "#2"}
    assert all("clock" in f[-1].lower() for f in lines)


def test_json_and_japanese_substrings(capsys, stored) -> None:
    code, out, _ = _run(capsys, "search", "時計", "--json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["message"] == stored["猫が時計の上で寝ている。"]
    assert row["conversation"] == stored["tsukishima-tsumugi"]
    assert row["number"] == 2 and row["speaker"] == "tsukishima-tsumugi"
    assert row["text"] == "猫が時計の上で寝ている。"
    code, out, _ = _run(capsys, "search", "猫", "--json")
    assert [r["message"] for r in json.loads(out)] == [row["message"]]


def test_one_conversation_and_deleted_messages(capsys, stored) -> None:
    rowan = str(stored["rowan-ashby"])
    code, out, _ = _run(capsys, "search", "clock", "--conversation", rowan, "--newest")
    assert [int(line.split("\t")[0]) for line in out.splitlines()] == [
        stored["Mend the clock, Rowan."],
        stored["The clock tower chimed at midnight."],
    ]
    code, out, _ = _run(capsys, "search", "灯台", "--conversation", rowan)
    assert (code, out) == (0, "")
    with Store.open(app_dirs().default_db) as store:
        store.delete_message(stored["Mend the clock, Rowan."])
    code, out, _ = _run(capsys, "search", "clock", "--json")
    kept = stored["The clock tower chimed at midnight."]
    assert [r["message"] for r in json.loads(out)] == [kept]
    # Deleted in the app (still stored until the app closes, for undo): not listed.
    with Store.open(app_dirs().default_db) as store:
        store.hide_conversation(stored["rowan-ashby"])
    code, out, err = _run(capsys, "search", "clock")
    assert (code, out, err) == (0, "", "")
    code, out, _ = _run(capsys, "search", "猫")
    assert [int(line.split("\t")[0]) for line in out.splitlines()] == [
        stored["猫が時計の上で寝ている。"]
    ]


def test_mistakes_exit_1_or_2_with_one_line(capsys, stored) -> None:
    code, out, err = _run(capsys, "search", "clock", "--conversation", "999")
    assert (code, out) == (1, "")
    assert err.startswith("error: conversation 999 does not exist") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "clock", "--limit", "0"])
    assert exit_info.value.code == 2
    assert "must be 1 or more" in capsys.readouterr().err
