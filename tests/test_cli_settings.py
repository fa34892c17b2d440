"""`kotonia settings`: a conversation's settings shown and set from scripts, checked as the
settings screen checks them, carried into branches and exports."""

from __future__ import annotations

import json

from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Conversation
from kotonia_tui.store import Store
from tests.test_cli import ST_CHAT, run, write_jsonl


def _imported(capsys, tmp_path) -> int:
    code, out, err = run(capsys, "import", str(write_jsonl(tmp_path / "c.jsonl", ST_CHAT)))
    assert code == 0, err
    return int(out)


def test_settings_are_set_shown_and_carried_into_a_branch_and_an_export(capsys, tmp_path):
    conv_id = _imported(capsys, tmp_path)
    worlds = app_dirs().data / "worlds"
    worlds.mkdir(parents=True, exist_ok=True)
    (worlds / "harbour.json").write_text(
        json.dumps({"entries": {"0": {"uid": 0, "key": ["ferry"], "content": "A ferry."}}}),
        encoding="utf-8",
    )
    code, _out, err = run(
        capsys,
        "settings",
        str(conv_id),
        "--set",
        "temperature=0.4",
        "--set",
        "author_note=It is raining.",
        "--set",
        "author_note_depth=4",
        "--set",
        "world_info=harbour.json",
        "--set",
        "lore_budget=300",
    )
    assert code == 0, err
    assert f"saved the conversation's settings of conversation {conv_id}" in err

    code, out, _ = run(capsys, "settings", str(conv_id))
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines()}
    assert rows["temperature"] == ["0.4", "conversation"]
    assert rows["author_note"] == ["'It is raining.'", "conversation"]
    assert rows["author_note_depth"] == ["4", "conversation"]
    assert rows["world_info"] == ["harbour.json", "conversation"]
    assert rows["lore_budget"] == ["300", "conversation"]
    assert rows["top_k"][1] == "profile"

    code, out, _ = run(capsys, "branch", str(conv_id), "2")
    branch_id = int(out)
    code, out, _ = run(capsys, "settings", str(branch_id), "--json")
    shown = json.loads(out)
    assert shown["conversation"]["author_note"] == "It is raining."
    assert shown["effective"]["world_info"] == {"value": ["harbour.json"], "layer": "conversation"}

    code, out, _ = run(capsys, "export", str(conv_id))
    metadata = json.loads(out.splitlines()[0])["chat_metadata"]
    assert (metadata["note_prompt"], metadata["note_depth"]) == ("It is raining.", 4)
    assert metadata["world_info"] == "harbour"


def test_a_wrong_setting_is_named_and_nothing_is_saved(capsys, tmp_path):
    conv_id = _imported(capsys, tmp_path)
    code, _out, err = run(capsys, "settings", str(conv_id), "--set", "temprature=0.4")
    assert code == 1
    assert "no setting 'temprature'" in err
    code, _out, err = run(
        capsys, "settings", str(conv_id), "--set", "author_note=Hi", "--set", "top_p=7"
    )
    assert code == 1
    assert "top_p = '7'" in err
    code, _out, err = run(capsys, "settings", str(conv_id), "--set", "reply_max_tokens=99999")
    assert code == 1
    assert "reply length 99999" in err and "nothing was saved" in err
    code, _out, err = run(capsys, "settings", str(conv_id), "--set", "world_info=missing.json")
    assert code == 1
    assert "'missing.json'" in err
    code, out, _ = run(capsys, "settings", str(conv_id), "--json")
    assert json.loads(out)["conversation"]["author_note"] == ""


def test_an_empty_value_clears_a_setting_and_the_character_layer_is_its_own(capsys, tmp_path):
    conv_id = _imported(capsys, tmp_path)
    run(capsys, "settings", str(conv_id), "--set", "temperature=0.3")
    code, _out, err = run(
        capsys, "settings", str(conv_id), "--character", "--set", "temperature=0.9"
    )
    assert code == 0, err
    code, out, _ = run(capsys, "settings", str(conv_id), "--json")
    assert json.loads(out)["effective"]["temperature"] == {"value": 0.3, "layer": "conversation"}
    run(capsys, "settings", str(conv_id), "--set", "temperature=")
    code, out, _ = run(capsys, "settings", str(conv_id), "--json")
    assert json.loads(out)["effective"]["temperature"] == {"value": 0.9, "layer": "character"}


def test_a_world_info_file_named_without_its_extension_is_named_back(capsys, tmp_path):
    """`world_info=forest` with forest.json in the folder (a slip made in the issue-30 tmux
    run): the error names the file meant; a name matching nothing lists what is there."""
    conv_id = _imported(capsys, tmp_path)
    code, _out, err = run(capsys, "settings", str(conv_id), "--set", "world_info=forest")
    assert code == 1
    assert "the folder has no .json files" in err
    worlds = app_dirs().data / "worlds"
    worlds.mkdir(parents=True, exist_ok=True)
    for name in ("forest", "harbour"):
        (worlds / f"{name}.json").write_text(
            json.dumps({"entries": {"0": {"uid": 0, "key": ["bridge"], "content": "A bridge."}}}),
            encoding="utf-8",
        )
    code, _out, err = run(capsys, "settings", str(conv_id), "--set", "world_info=forest")
    assert code == 1
    assert "did you mean 'forest.json'?" in err and "nothing was saved" in err
    code, _out, err = run(capsys, "settings", str(conv_id), "--set", "world_info=lake")
    assert code == 1
    assert "it has 'forest.json', 'harbour.json'" in err


def _card(key: str, name: str, depth_prompt: dict | None = None) -> None:
    """A card in the user's folder, with this Character's Note (`extensions.depth_prompt`)."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    extensions = {"depth_prompt": depth_prompt} if depth_prompt is not None else {}
    data = {"name": name, "description": f"{name} keeps the lighthouse.", "extensions": extensions}
    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
    (folder / f"{key}.json").write_text(json.dumps(card), encoding="utf-8")


def test_the_cards_character_note_is_listed_beside_the_authors_note(capsys, tmp_path):
    """A card's Character's Note is placed like the Author's Note, so it is listed with it: its
    text as the card writes it, its depth and its role, each said to be the card's."""
    note = {"prompt": "{{char}} hides the key.", "depth": 2, "role": "user"}
    _card("wren", "Wren", note)
    chat = [
        {**ST_CHAT[0], "character_name": "Wren"},
        {"name": "Wren", "is_user": False, "send_date": "November 1, 2026 10:00am", "mes": "Hi."},
    ]
    code, out, err = run(capsys, "import", str(write_jsonl(tmp_path / "w.jsonl", chat)))
    assert code == 0, err
    conv_id = int(out)
    run(capsys, "settings", str(conv_id), "--set", "author_note=It is raining.")

    code, out, err = run(capsys, "settings", str(conv_id))
    assert code == 0, err
    names = [line.split("\t")[0] for line in out.splitlines()]
    at = names.index("author_note_depth")
    assert names[at + 1 : at + 4] == [
        "character_note",
        "character_note_depth",
        "character_note_role",
    ]
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines()}
    assert rows["author_note"] == ["'It is raining.'", "conversation"]
    assert rows["character_note"] == ["'{{char}} hides the key.'", "card wren"]
    assert rows["character_note_depth"] == ["2", "card wren"]
    assert rows["character_note_role"] == ["'user'", "card wren"]

    code, out, _ = run(capsys, "settings", str(conv_id), "--json")
    assert json.loads(out)["character_notes"] == [
        {
            "character_key": "wren",
            "character_name": "Wren",
            "prompt": "{{char}} hides the key.",
            "depth": 2,
            "role": "user",
            "muted": False,
        }
    ]


def test_a_groups_notes_are_listed_card_by_card_and_a_missing_card_is_said(capsys):
    """In a group every member's note is listed in the cast's order (a muted member's says
    when it is placed); a card with no note adds nothing; a member whose card is gone is
    named on standard error. A note with no depth or role has SillyTavern's: 4, system."""
    _card("wren", "Wren", {"prompt": "Wren is tired."})
    _card("mira", "Mira", {"prompt": "Mira lies.", "depth": 0, "role": "assistant"})
    _card("lin", "Lin")
    with Store.open(app_dirs().default_db) as store:
        conv = store.create_conversation(
            Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
        )
        cast = [("wren", "Wren"), ("lin", "Lin"), ("mira", "Mira"), ("gone", "Gone")]
        store.set_cast(conv.id, cast)
        store.set_cast_muted(conv.id, "mira", True)

    code, out, err = run(capsys, "settings", str(conv.id))
    assert code == 0, err
    notes = [line.split("\t") for line in out.splitlines() if line.startswith("character_note")]
    muted = "card mira (muted: placed only on its own turns)"
    assert notes == [
        ["character_note", "'Wren is tired.'", "card wren"],
        ["character_note_depth", "4", "card wren"],
        ["character_note_role", "'system'", "card wren"],
        ["character_note", "'Mira lies.'", muted],
        ["character_note_depth", "0", muted],
        ["character_note_role", "'assistant'", muted],
    ]
    assert err.strip() == (
        f"conversation {conv.id}: the card 'gone' is not in the character folders: its "
        "Character's Note, if it has one, cannot be shown"
    )
    code, out, _ = run(capsys, "settings", str(conv.id), "--json")
    shown = json.loads(out)["character_notes"]
    assert [(n["character_key"], n["muted"]) for n in shown] == [("wren", False), ("mira", True)]


def test_a_member_whose_card_file_is_broken_is_said_with_the_loaders_reason(capsys):
    """A member whose card file is there but cannot be read is not said to be missing from the
    folders: the card could not be read, and why (file, field, what is wrong), as the picker
    says it."""
    _card("wren", "Wren", {"prompt": "Wren is tired."})
    folder = app_dirs().user_characters
    broken = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": 7}}
    (folder / "torn.json").write_text(json.dumps(broken), encoding="utf-8")
    with Store.open(app_dirs().default_db) as store:
        conv = store.create_conversation(
            Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
        )
        store.set_cast(conv.id, [("wren", "Wren"), ("torn", "Torn")])

    code, out, err = run(capsys, "settings", str(conv.id))
    assert code == 0, err
    assert app_dirs().default_db.is_file()
    assert "'Wren is tired.'" in out
    assert err.strip() == (
        f"conversation {conv.id}: the card 'torn' could not be read (torn.json: data.name: "
        "expected a string, got int): its Character's Note, if it has one, cannot be shown"
    )
    assert "not in the character folders" not in err


def test_a_broken_cards_reason_is_found_by_its_stem_exactly_then_in_any_case(tmp_path):
    """`error_of` names the card file of that stem: the exact stem before one in another case,
    the user's folder before the shipped one."""
    shipped, user = tmp_path / "shipped", tmp_path / "user"
    for folder in (shipped, user):
        folder.mkdir()
        (folder / "torn.json").write_text("{", encoding="utf-8")
    (user / "Torn.charx").write_bytes(b"not a zip")
    library = CharacterLibrary([shipped, user])
    found = library.error_of("torn")
    assert found is not None and found.path == user / "torn.json"
    found = library.error_of("TORN")
    assert found is not None and found.path.parent == user
    assert library.error_of("wren") is None
