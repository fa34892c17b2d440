"""A card's Character's Note (SillyTavern's `data.extensions.depth_prompt`): read on load as
SillyTavern reads it, what was repaired reported with the field named, rendered with its macros,
written back unchanged on export."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kotonia_tui.characters import (
    CardError,
    CardRepaired,
    CharacterNote,
    load_card,
    load_cards,
    render_setup,
    write_json_card,
    write_png_card,
)
from kotonia_tui.chat.library import CharacterLibrary
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


P = "data.extensions.depth_prompt"
NO_NOTE = "no Character's Note"


@pytest.mark.parametrize(
    ("note", "read", "repairs"),
    [
        # SillyTavern's setExtensionPrompt stores Number(depth): "4" is 4, true is 1.
        ({"prompt": "x", "depth": "4"}, (4, "system"), [f'{P}.depth: "4" read as 4, as Silly']),
        ({"prompt": "x", "depth": " 2 "}, (2, "system"), [f'{P}.depth: " 2 " read as 2']),
        ({"prompt": "x", "depth": True}, (1, "system"), [f"{P}.depth: true read as 1"]),
        # getExtensionPromptRoleByName: 0/1/2 are system/user/assistant, an unknown role system.
        ({"prompt": "x", "role": 1}, (4, "user"), [f'{P}.role: 1 read as "user", as Silly']),
        ({"prompt": "x", "role": 2.0}, (4, "assistant"), [f'{P}.role: 2.0 read as "assistant"']),
        ({"prompt": "x", "role": 0}, (4, "system"), [f'{P}.role: 0 read as "system"']),
        (
            {"prompt": "x", "role": "narrator"},
            (4, "system"),
            [f'{P}.role: "narrator" read as "system", as SillyTavern reads a role it does not'],
        ),
        (
            {"prompt": "x", "depth": "3", "role": "Narrator"},
            (3, "system"),
            [f'{P}.depth: "3" read as 3', f'{P}.role: "Narrator" read as "system"'],
        ),
        # doChatInject places nothing at a depth that is not a whole number from 0 to the max.
        ({"prompt": "x", "depth": -1}, None, [f"{P}.depth: -1 is not a depth from 0 to 10000"]),
        ({"prompt": "x", "depth": 10001}, None, [f"{P}.depth: 10001 is not a depth from 0 to"]),
        ({"prompt": "x", "depth": 4.5}, None, [f"{P}.depth: 4.5 is not a whole number: {NO_NOTE}"]),
        ({"prompt": "x", "depth": "four"}, None, [f'{P}.depth: "four" is not a number: {NO_NOTE}']),
        ({"prompt": "x", "depth": [4]}, None, [f"{P}.depth: [4] is not a number: {NO_NOTE}"]),
        ({"prompt": 5}, None, [f"{P}.prompt: 5 is not text: {NO_NOTE}"]),
        ("Stay wry.", None, [f'{P}: "Stay wry." is not an object: {NO_NOTE}']),
        # Within SillyTavern's MAX_INJECTION_DEPTH (10000 since its pull request #3800).
        ({"prompt": "x", "depth": 5000}, (5000, "system"), []),
        ({"prompt": "x", "depth": 4.0}, (4, "system"), []),  # the JSON number 4
        # An empty note is none, whatever its other fields say: nothing is reported.
        ({"prompt": "", "depth": "4", "role": "narrator"}, None, []),
    ],
)
def test_a_note_written_otherwise_is_read_as_sillytavern_reads_it_and_reported(
    tmp_path, note, read, repairs
):
    """Not refused (it loads on main, and in SillyTavern): read as SillyTavern reads it, and
    the card is listed as read with a repair, one line naming the file, the field, the value."""
    path = json_card(tmp_path / "x.json", _with_note(note))
    notes: list[CardError] = []
    card = load_card(path, notes)
    if read is None:
        assert card.character_note is None
    else:
        assert card.character_note == CharacterNote(prompt="x", depth=read[0], role=read[1])
    if not repairs:
        assert notes == []
        return
    (repaired,) = notes
    assert isinstance(repaired, CardRepaired)
    parts = str(repaired).removeprefix("x.json: ").split("; ")
    assert str(repaired).startswith("x.json: "), str(repaired)
    assert len(parts) == len(repairs), parts
    for part, expected in zip(parts, repairs, strict=True):
        assert part.startswith(expected), (part, expected)
    assert card.extensions["depth_prompt"] == note  # kept as read: an export writes it back
    # Listed apart from the cards that could not be read (chat/library.py; the picker's
    # "read with a repair" list), with every other card of the folder.
    json_card(tmp_path / "good.json", v2_card("Good"))
    library = CharacterLibrary([tmp_path])
    assert [c.name for c in library.cards] == ["Good", "Mira"]
    assert library.errors == []
    assert [str(p) for p in library.repairs] == [str(repaired)]


def test_a_card_with_invalid_unicode_and_a_repaired_note_is_one_card_read_with_a_repair(
    tmp_path,
):
    card = v2_card("Mira", extensions={"depth_prompt": {"prompt": "x", "depth": "2"}})
    data = json.dumps(card).encode().replace(b"Mira is", b"Mira\xff is")  # not UTF-8
    (tmp_path / "x.json").write_bytes(data)
    library = CharacterLibrary([tmp_path])
    (repaired,) = library.repairs
    assert str(repaired) == (
        "x.json: 1 invalid Unicode sequence was replaced with U+FFFD; "
        'data.extensions.depth_prompt.depth: "2" read as 2, as SillyTavern reads it'
    )
    assert library.cards[0].character_note == CharacterNote(prompt="x", depth=2)


@pytest.mark.parametrize(
    ("note", "expected"),
    [
        ({"prompt": "x" * 200_001}, "depth_prompt.prompt: is 200,001 characters long"),
        # Past the bounds whether or not it is placed: the card keeps it for export.
        ({"prompt": "x" * 200_001, "depth": -1}, "depth_prompt.prompt: is 200,001 characters"),
    ],
)
def test_a_note_past_the_size_bounds_refuses_the_card_naming_the_field(tmp_path, note, expected):
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
