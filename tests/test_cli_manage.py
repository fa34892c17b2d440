"""The command line for personas and conversation management: listings, --persona, rename,
delete, duplicate and branch, as scripts use them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Role, utcnow
from kotonia_tui.store import Store
from tests.cards import write_short_card
from tests.test_cli import ST_CHAT, run, write_jsonl


def test_personas_lists_the_default_id_first_and_as_json(capsys, monkeypatch):
    monkeypatch.setenv("KOTONIA_PERSONA__NAME", "Ann")
    monkeypatch.setenv("KOTONIA_PERSONA__DESCRIPTION", "A sailor\twith a tab.")
    code, out, _ = run(capsys, "personas")
    assert code == 0
    (line,) = out.splitlines()
    assert line.split("\t")[:4] == ["1", "Ann", "default", "0 conversations"]
    code, out, _ = run(capsys, "personas", "--json")
    assert json.loads(out) == [
        {
            "id": 1,
            "name": "Ann",
            "default": True,
            "conversations": 0,
            "picture": False,
            "description": "A sailor\twith a tab.",
        }
    ]


def test_an_import_keeps_its_user_as_a_persona(capsys, tmp_path):
    source = write_jsonl(tmp_path / "chat.jsonl", ST_CHAT)  # played as "Ann"
    code, out, _ = run(capsys, "import", str(source), "--character", "rowan")
    assert code == 0
    conv_id = int(out)
    code, out, _ = run(capsys, "personas", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["Ann"]["conversations"] == 1 and not rows["Ann"]["default"]
    assert rows["User"]["default"]  # the settings' persona stays the default
    code, out, _ = run(capsys, "conversations", "--json")
    assert [(c["id"], c["persona"]) for c in json.loads(out)] == [(conv_id, "Ann")]


def test_chat_plays_as_the_persona_named(capsys, monkeypatch, tiny_model_path):
    key = write_short_card()
    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(tiny_model_path))
    monkeypatch.setenv("KOTONIA_N_CTX", "4096")
    monkeypatch.setenv("KOTONIA_FOLD_DELAY_S", "0")
    code, _out, err = run(capsys, "chat", key, "--persona", "Kit", "--say", "Hello.")
    assert code == 0, err
    assert "made a new persona 'Kit'" in err
    conv_id = int(
        next(line for line in err.splitlines() if line.startswith("conversation")).split()[1]
    )
    code, _out, err = run(capsys, "chat", key, "--persona", "kit", "--say", "Again.")
    assert code == 0 and "made a new persona" not in err  # found, ignoring case
    with Store.open(app_dirs().default_db) as store:
        conv = store.get_conversation(conv_id)
        assert conv.persona_name == "Kit"
        user = [m for m in store.recent_messages(conv_id, 10) if m.role is Role.USER]
        assert [m.speaker for m in user] == ["Kit"]
    # Continuing a conversation as another persona says what that means.
    code, _out, err = run(
        capsys, "chat", key, "--conversation", str(conv_id), "--persona", "Mae", "--say", "Hi."
    )
    assert code == 0
    assert f"conversation {conv_id} is now played as Mae" in err
    code, _out, err = run(capsys, "chat", key, "--persona", "Two\nLines", "--say", "x")
    assert code == 1 and "must be one line" in err


def test_rename_duplicate_branch_and_delete(capsys, tmp_path):
    source = write_jsonl(tmp_path / "chat.jsonl", ST_CHAT)
    _code, out, _ = run(capsys, "import", str(source), "--character", "rowan")
    conv_id = int(out)
    code, _out, err = run(capsys, "rename", str(conv_id), "The  clock   shop")
    assert code == 0 and "'The clock shop'" in err

    code, out, err = run(capsys, "duplicate", str(conv_id))
    assert code == 0
    copy_id = int(out)
    assert "3 messages of conversation" in err
    code, out, err = run(capsys, "branch", str(conv_id), "#2", "--title", "What if")
    assert code == 0
    branch_id = int(out)

    _code, out, _ = run(capsys, "conversations", "--json")
    listed = {c["id"]: (c["title"], c["messages"]) for c in json.loads(out)}
    assert listed == {
        conv_id: ("The clock shop", 3),
        copy_id: ("The clock shop (copy)", 3),
        branch_id: ("What if", 2),
    }
    code, _out, err = run(capsys, "branch", str(conv_id), "9")
    assert code == 1 and f"conversation {conv_id} has messages #1 to #3; there is no #9" in err
    code, _out, err = run(capsys, "branch", str(conv_id), "last")
    assert code == 1 and "not 'last'" in err

    code, _out, err = run(capsys, "delete", str(copy_id))
    assert code == 0 and "3 messages" in err
    code, _out, err = run(capsys, "delete", str(copy_id))
    assert code == 1 and f"conversation {copy_id} does not exist" in err
    _code, out, _ = run(capsys, "conversations")
    assert sorted(int(line.split("\t")[0]) for line in out.splitlines()) == sorted(
        [conv_id, branch_id]
    )


@pytest.mark.parametrize("command", ["rename", "delete", "duplicate"])
def test_management_needs_an_existing_conversation(capsys, command):
    argv = [command, "42"] + (["title"] if command == "rename" else [])
    code, _out, err = run(capsys, *argv)
    assert code == 1
    assert err.startswith("error: conversation 42 does not exist")


def test_an_imported_chat_is_listed_by_its_last_message_not_by_the_import(capsys, tmp_path):
    """`kotonia conversations` gave an imported chat the import's time (and listed it first):
    now it is its last message's `send_date`. A file with no dates keeps the import's time; one
    dated ahead of now (SillyTavern writes local time without a zone: read as UTC, east of
    Greenwich a chat just written is hours ahead) is listed at the import's time, not above
    every chat written after it until that hour comes."""
    dated = [
        {**ST_CHAT[0], "create_date": "2024-03-02@19h04m00s"},
        *(
            {**line, "send_date": f"March 2, 2024 7:0{4 + i}pm"}
            for i, line in enumerate(ST_CHAT[1:])
        ),
    ]
    ahead = [
        ST_CHAT[0],
        *(
            {**line, "send_date": f"{utcnow() + timedelta(hours=9):%B %d, %Y %I:%M%p}"}
            for line in ST_CHAT[1:]
        ),
    ]
    undated = [
        ST_CHAT[0],
        *({k: v for k, v in line.items() if k != "send_date"} for line in ST_CHAT[1:]),
    ]
    ids = {}
    for name, rows in (("dated", dated), ("ahead", ahead), ("undated", undated)):
        before = utcnow()
        code, out, _ = run(capsys, "import", str(write_jsonl(tmp_path / f"{name}.jsonl", rows)))
        assert code == 0
        ids[name] = (int(out), before, utcnow())

    code, out, _ = run(capsys, "conversations")
    assert code == 0
    listed = [line.split("\t") for line in out.splitlines()]
    # Newest first: the chat imported last (no dates: now), the one dated ahead (now, when
    # it was imported), then the one whose last message is two years old.
    assert [int(row[0]) for row in listed] == [ids[n][0] for n in ("undated", "ahead", "dated")]
    updated = {int(row[0]): datetime.fromisoformat(row[3]) for row in listed}
    assert updated[ids["dated"][0]] == datetime.fromisoformat("2024-03-02T19:06:00+00:00")
    for name in ("ahead", "undated"):
        conv_id, before, after = ids[name]
        assert before.replace(microsecond=0) <= updated[conv_id] <= after, name
    code, out, _ = run(capsys, "conversations", "--json")
    as_json = {row["id"]: row["updated"] for row in json.loads(out)}
    assert as_json[ids["dated"][0]] == "2024-03-02T19:06:00+00:00"
