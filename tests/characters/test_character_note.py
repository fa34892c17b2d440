"""A card's Character's Note (SillyTavern's `data.extensions.depth_prompt`): read and checked on
load with the field named, rendered with its macros, written back unchanged on export."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kotonia_tui.characters import (
    CardError,
    CharacterNote,
    load_card,
    load_cards,
    render_setup,
    write_json_card,
    write_png_card,
)
from kotonia_tui.domain import DepthNote, Persona

from .builders import json_card, picture, v2_card, v3_card


def _with_note(note: Any, *, v3: bool = False) -> dict[str, Any]:
    make = v3_card if v3 else v2_card
    return make("Mira", extensions={"depth_prompt": note, "fav": True})


def test_a_note_is_read_with_sillytaverns_defaults(tmp_path):
    card = load_card(
        json_card(tmp_path / "a.json", _with_note({"prompt": "Stay wry.", "depth": 2}))
    )
    assert card.character_note == CharacterNote(prompt="Stay wry.", depth=2, role="system")
    # SillyTavern's defaults (public/script.js): depth 4, role system; a whole float is its int.
    bare = load_card(json_card(tmp_path / "b.json", _with_note({"prompt": "x"})))
    assert bare.character_note == CharacterNote(prompt="x", depth=4, role="system")
    user = load_card(
        json_card(tmp_path / "c.json", _with_note({"prompt": "x", "depth": 1.0, "role": "user"}))
    )
    assert user.character_note == CharacterNote(prompt="x", depth=1, role="user")
    # An empty prompt (most chub.ai exports carry one) is no note; nor is a missing object.
    empty = {"prompt": "  ", "depth": 4, "role": "system"}
    assert load_card(json_card(tmp_path / "d.json", _with_note(empty))).character_note is None
    assert load_card(json_card(tmp_path / "e.json", v2_card())).character_note is None


@pytest.mark.parametrize(
    ("note", "expected"),
    [
        ({"prompt": "x", "depth": -1}, "depth_prompt.depth: expected a whole number of 0 or more"),
        ({"prompt": "x", "depth": "4"}, "depth_prompt.depth: expected a whole number, got string"),
        ({"prompt": "x", "depth": 2.5}, "depth_prompt.depth: expected a whole number, got float"),
        ({"prompt": "x", "depth": 1001}, "depth_prompt.depth: 1001 is deeper than 1000"),
        ({"prompt": "x", "role": "narrator"}, "depth_prompt.role: expected 'system', 'user'"),
        ({"prompt": "x", "role": 1}, "depth_prompt.role: expected 'system', 'user' or 'assis"),
        ({"prompt": 5}, "depth_prompt.prompt: expected a string, got int"),
        ("Stay wry.", "depth_prompt: expected an object, got string"),
        ({"prompt": "x" * 200_001}, "depth_prompt.prompt: is 200,001 characters long"),
    ],
)
def test_a_bad_note_refuses_the_card_naming_the_field(tmp_path, note, expected):
    path = json_card(tmp_path / "x.json", _with_note(note))
    with pytest.raises(CardError) as caught:
        load_card(path)
    message = str(caught.value)
    assert message.startswith("x.json: data.extensions.depth_prompt"), message
    assert expected in message, message
    # As any broken card: listed with the reason, the folder's other cards still load.
    json_card(tmp_path / "good.json", v2_card("Good"))
    cards, problems = load_cards([tmp_path])
    assert [c.name for c in cards] == ["Good"]
    assert [str(p) for p in problems] == [message]


def test_the_note_is_rendered_with_its_macros_for_the_persona(tmp_path):
    note = {"prompt": "  {{char}} teases {{user}}.  ", "depth": 3, "role": "assistant"}
    card = load_card(json_card(tmp_path / "mira.json", _with_note(note)))
    setup = render_setup(card, Persona(name="Ann"))
    assert setup.character_notes == (
        DepthNote("Mira teases Ann.", 3, "assistant", name="Mira", owner="Mira"),
    )
    assert "teases" not in setup.system_text  # never in the shared setup


@pytest.mark.parametrize("v3", [False, True])
def test_export_writes_the_note_back_as_read(tmp_path, v3):
    note = {"prompt": "{{char}} hums.", "depth": 2, "role": "user", "vendor": [1, None]}
    original = load_card(json_card(tmp_path / "mira.json", _with_note(note, v3=v3)))
    for out in (tmp_path / "copy.json", tmp_path / "copy.png"):
        if out.suffix == ".json":
            write_json_card(original, out)
            written = json.loads(out.read_text(encoding="utf-8"))
            assert written["data"]["extensions"]["depth_prompt"] == note
        else:
            write_png_card(original, picture(), out)
        again = load_card(out)
        assert again.extensions["depth_prompt"] == note
        assert again.character_note == CharacterNote(prompt="{{char}} hums.", depth=2, role="user")
