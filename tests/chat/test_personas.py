"""Personas in the chat service: the default, a conversation's own persona, `{{user}}` in the
setup, greetings, lorebook and chronicler, a change mid-story, and imported chats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kotonia_tui.chat.errors import PersonaError
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Role
from kotonia_tui.memory.chronicler import ChronicleRequest, chronicler_prompt
from tests.characters.builders import picture, v2_card

from .conftest import tiny_settings


def _lore_card() -> str:
    """A small card whose greeting, description and keyed lorebook entry all say {{user}}."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    card = v2_card(
        "Wren",
        description="Wren keeps the lighthouse and writes letters to {{user}}.",
        personality="calm",
        scenario="",
        first_mes="Welcome back, {{user}}.",
        character_book={
            "entries": [
                {
                    "keys": ["lamp"],
                    "content": "The lamp was a gift from {{user}}.",
                    "enabled": True,
                    "insertion_order": 1,
                }
            ]
        },
    )
    (folder / "wren.json").write_text(json.dumps(card), encoding="utf-8")
    return "wren"


async def test_the_settings_persona_becomes_the_first_default(make_service, tiny_model_path):
    service = await make_service(
        tiny_settings(tiny_model_path, persona={"name": "Ann", "description": "A sailor."})
    )
    default = service.persona
    assert (default.name, default.description, default.is_default) == ("Ann", "A sailor.", True)
    assert [p.name for p in service.personas.all()] == ["Ann"]
    # Chosen in the app, another default sticks (the settings' persona was only the first).
    bob = service.personas.create("Bob", "A fisherman")
    service.personas.make_default(bob.id)
    assert service.persona.name == "Bob"


async def test_a_conversation_is_played_as_its_persona_everywhere(make_service, tiny_model_path):
    key = _lore_card()
    service = await make_service(tiny_settings(tiny_model_path))
    kit = service.personas.create("Kit", "{{user}} is a cartographer from the south.")
    card = service.library.get(key)
    conv = service.new_conversation(card, persona=kit)
    assert (conv.persona_id, conv.persona_name) == (kit.id, "Kit")
    # The greeting, the setup (the card's and the persona's own macros), the lorebook.
    assert service.store.last_message(conv.id).text == "Welcome back, Kit."
    turn = await service.send(conv.id, "Is the lamp still lit?")
    assert (await turn.wait()).error is None
    system = turn.prepared.request.messages[0].content
    assert "writes letters to Kit." in system
    assert "Kit is a cartographer from the south." in system
    notes = turn.prepared.request.messages[-1].content
    assert "The lamp was a gift from Kit." in notes
    assert turn.prepared.request.user_name == "Kit"
    assert service.store.get_message(turn.user_message.id).speaker == "Kit"
    # The chronicler is told the story is between Wren and Kit.
    cast = service.cast_of(conv.id)
    prompt = chronicler_prompt(
        ChronicleRequest.chapter(service.store.recent_messages(conv.id, 10), cast),
        service.engine.profile,
    )
    assert "between Wren and Kit" in prompt.messages[0].content
    assert "User" not in service.engine.render(turn.prepared.request).text


async def test_changing_a_conversations_persona_changes_the_setup_from_the_next_turn(
    make_service, tiny_model_path
):
    key = _lore_card()
    service = await make_service(tiny_settings(tiny_model_path))
    conv = service.new_conversation(service.library.get(key))
    first = await service.send(conv.id, "Hello.")
    await first.wait()
    assert "writes letters to User." in first.prepared.request.messages[0].content
    mae = service.personas.create("Mae")
    service.manager.set_persona(conv.id, mae.id)
    second = await service.send(conv.id, "It is me again.")
    done = await second.wait()
    assert "writes letters to Mae." in second.prepared.request.messages[0].content
    # What was written stays as it was written.
    speakers = [
        m.speaker for m in service.store.recent_messages(conv.id, 10) if m.role is Role.USER
    ]
    assert speakers == ["User", "Mae"]
    # The setup changed, so the prompt was read again from its start (said in the app).
    assert done.metrics is not None and done.metrics.reused < first.done.metrics.prompt_positions


async def test_editing_a_persona_updates_its_conversations_and_names_are_checked(
    make_service, tiny_model_path, tmp_path: Path
):
    key = _lore_card()
    service = await make_service(tiny_settings(tiny_model_path))
    ann = service.personas.create("Ann")
    conv = service.new_conversation(service.library.get(key), persona=ann)
    service.personas.update(ann.id, "Anna", "Tall.")
    assert service.persona_of(service.store.get_conversation(conv.id)).name == "Anna"
    with pytest.raises(PersonaError, match="a persona needs a name"):
        service.personas.create("   ")
    with pytest.raises(PersonaError, match="must be one line"):
        service.personas.create("Ann\nUser:")
    with pytest.raises(PersonaError, match=r"no persona named 'Zed' \(known: Anna, User"):
        service.personas.find("Zed")
    png = tmp_path / "me.png"
    png.write_bytes(picture())
    with_picture = service.personas.update(ann.id, "Anna", "Tall.", png)
    assert with_picture.image is not None
    data, mime = service.personas.picture(with_picture) or (b"", "")
    assert data == png.read_bytes() and mime == "image/png"
    assert service.personas.update(ann.id, "Anna", "Taller.").image == with_picture.image


def _st_chat(path: Path, user: str) -> Path:
    lines = [
        {"user_name": user, "character_name": "Wren", "create_date": "2026-01-01@10h00m00s"},
        {"name": "Wren", "is_user": False, "mes": "Welcome.", "send_date": "2026-01-01"},
        {"name": user, "is_user": True, "mes": "Thank you.", "send_date": "2026-01-01"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


async def test_an_imported_chat_keeps_its_user_as_a_persona(
    make_service, tiny_model_path, tmp_path: Path
):
    _lore_card()
    service = await make_service(tiny_settings(tiny_model_path))
    first = service.manager.import_file(_st_chat(tmp_path / "one.jsonl", "Tamsin"))
    tamsin = service.personas.find("tamsin")
    assert first.conversation.persona_id == tamsin.id
    assert first.card is not None and first.card.key == "wren"
    again = service.manager.import_file(_st_chat(tmp_path / "two.jsonl", "TAMSIN"))
    assert again.conversation.persona_id == tamsin.id  # the same persona, not a second one
    assert [p.name for p in service.personas.all()] == ["Tamsin", "User"]


async def test_a_user_name_that_cannot_be_a_persona_is_imported_without_one(
    make_service, tiny_model_path, tmp_path: Path
):
    _lore_card()
    service = await make_service(tiny_settings(tiny_model_path))
    imported = service.manager.import_file(_st_chat(tmp_path / "odd.jsonl", "Ann\x1b[2J"))
    assert imported.conversation.persona_name == "Ann\x1b[2J"  # as the file says
    assert imported.conversation.persona_id is None
    (note,) = imported.notes
    assert "odd.jsonl: the user name is not kept as a persona" in note
    assert [p.name for p in service.personas.all()] == ["User"]
