"""The character setup the model sees: complete, deterministic, and without creator notes."""

from __future__ import annotations

from kotonia_tui.characters import DEFAULT_SYSTEM_PROMPT, load_card, render_setup
from kotonia_tui.domain import Persona

from .builders import json_card, v3_card

SECRET = "CREATOR-ONLY-7f3a"
BOOK = {
    "entries": [
        {
            "keys": [],
            "constant": True,
            "content": "{{char}} lives in Saltmere.",
            "insertion_order": 1,
        },
        {"keys": ["storm"], "content": "Storms frighten {{char}}.", "insertion_order": 2},
        {"keys": [], "constant": True, "enabled": False, "content": "Disabled lore."},
    ]
}


def _card(tmp_path, **data):
    fields = {
        "description": "{{char}} keeps the lighthouse and watches {{user}}'s boat.",
        "personality": "steady, wry",
        "scenario": "<USER> arrives at <BOT>'s door in a storm.",
        "first_mes": "Come in, {{user}}.",
        "alternate_greetings": ["{{user}}! Again?", ""],
        "mes_example": (
            "<START>\n{{user}}: Cold?\n{{char}}: Always.\n<start>\n{{user}}: Tea?\n{{char}}: Yes."
        ),
        "creator_notes": f"{SECRET} do not show",
        "character_book": BOOK,
        **data,
    }
    return load_card(json_card(tmp_path / "mira.json", v3_card("Mira", **fields)))


PERSONA = Persona(name="Sam", description="{{user}} is a fisher who never learned to swim.")


def test_system_text_contains_the_setup_in_order(tmp_path):
    setup = render_setup(_card(tmp_path), PERSONA)
    text = setup.system_text
    expected_in_order = [
        "You are Mira.",
        "Mira keeps the lighthouse and watches Sam's boat.",
        "steady, wry",
        "Sam arrives at Mira's door in a storm.",
        "Sam is a fisher who never learned to swim.",
        "Mira lives in Saltmere.",
        "Sam: Cold?\nMira: Always.",
        "Sam: Tea?\nMira: Yes.",
    ]
    positions = [text.index(part) for part in expected_in_order]
    assert positions == sorted(positions)
    assert "{{" not in text
    assert "<START>" not in text.upper()
    assert "Storms frighten" not in text  # keyed lore goes after the history, not here
    assert "Disabled lore" not in text
    assert setup.examples == ("Sam: Cold?\nMira: Always.", "Sam: Tea?\nMira: Yes.")


def test_creator_notes_are_never_sent(tmp_path):
    setup = render_setup(_card(tmp_path, post_history_instructions="Be {{char}}."), PERSONA)
    sent = [setup.system_text, setup.post_history, *setup.greetings, *setup.examples]
    assert all(SECRET not in part for part in sent)
    assert SECRET not in setup.model_dump_json()


def test_system_text_is_identical_every_time(tmp_path):
    first = render_setup(_card(tmp_path), PERSONA)
    reloaded = render_setup(_card(tmp_path), Persona(**PERSONA.model_dump()))
    assert first.system_text == reloaded.system_text
    assert first == reloaded
    assert render_setup(_card(tmp_path), Persona(name="Kai")).system_text != first.system_text


def test_greetings_are_first_message_then_alternates(tmp_path):
    setup = render_setup(_card(tmp_path), PERSONA)
    assert setup.greetings == ("Come in, Sam.", "Sam! Again?")


def test_card_system_prompt_replaces_the_default_and_can_include_it(tmp_path):
    own = render_setup(_card(tmp_path, system_prompt="Write as {{char}}, tersely."), PERSONA)
    assert own.system_text.startswith("Write as Mira, tersely.")
    assert "open-ended role-play" not in own.system_text
    wrapped = render_setup(_card(tmp_path, system_prompt="{{original}} Extra rule."), PERSONA)
    default = DEFAULT_SYSTEM_PROMPT.replace("{{char}}", "Mira").replace("{{user}}", "Sam")
    assert wrapped.system_text.startswith(default + " Extra rule.")


def test_post_history_has_macros_and_original(tmp_path):
    setup = render_setup(
        _card(tmp_path, post_history_instructions="{{original}} Stay as {{char}}."),
        PERSONA,
        default_post_history="Reply briefly to {{user}}.",
    )
    assert setup.post_history == "Reply briefly to Sam. Stay as Mira."


def test_nickname_is_the_display_name_and_the_char_macro(tmp_path):
    card = _card(tmp_path, nickname="Mimi")
    setup = render_setup(card, PERSONA)
    assert (setup.name, setup.nickname, setup.display_name) == ("Mira", "Mimi", "Mimi")
    assert "Mimi keeps the lighthouse" in setup.system_text


def test_constant_lore_can_be_left_out_of_the_system_text(tmp_path):
    setup = render_setup(_card(tmp_path), PERSONA, constant_lore_in_system=False)
    assert "Saltmere" not in setup.system_text
    assert setup.constant_lore_in_system is False


def test_empty_sections_are_left_out(tmp_path):
    card = load_card(json_card(tmp_path / "bare.json", {"name": "Bare"}))
    setup = render_setup(card, Persona(name="Sam"))
    assert "##" not in setup.system_text
    assert setup.greetings == ()
    assert setup.post_history == ""
