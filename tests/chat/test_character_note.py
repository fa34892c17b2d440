"""A card's Character's Note (SillyTavern's `data.extensions.depth_prompt`) in the prompt: at its
depth in the history, as a line of its role, with {{char}} and {{user}} filled in; beside an
Author's Note at the same depth in SillyTavern's order; costing a turn what an Author's Note at
that depth costs; in a group, every unmuted member's.

Fake engine: these tests are about where the prompt places the notes and what the engine reads
again for them, which the fake counts from what its context holds as the real engine does; they
do not depend on the model."""

from __future__ import annotations

import json
import random

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import ChatMessage, ChatSettings
from kotonia_tui.engine import Slot
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.settings import fake_settings

REPLY = "The lamp is lit and the sea is calm tonight."
NOTE = "[{{char}} keeps an eye on {{user}}.]"
SHOWN = "[Wren keeps an eye on User.]"  # the short card is Wren; the default persona is User
AUTHORS = "[Keep it short, {{char}}.]"
AUTHORS_SHOWN = "[Keep it short, Wren.]"


def _card(depth: int, role: str = "system", prompt: str = NOTE) -> str:
    note = {"prompt": prompt, "depth": depth, "role": role}
    return write_short_card(extensions={"depth_prompt": note})


async def _last_prompt(make_fake_service, key: str, author: ChatSettings | None = None):
    """The request of the third turn of a new conversation with `key` (a greeting, then
    One/reply, Two/reply, Three): the history ends ..., "Two.", reply, "Three."."""
    service = await make_fake_service(fake_settings(), scripted(REPLY))
    conv = service.new_conversation(service.library.get(key))
    if author is not None:
        service.save_settings(conv.id, ChatSettings(), author)
    for text in ("One.", "Two."):
        await (await service.send(conv.id, text)).wait()
    turn = await service.send(conv.id, "Three.")
    await turn.wait()
    return turn.prepared.request.messages


async def test_a_card_note_at_depth_2_sits_two_messages_from_the_end_with_its_macros(
    make_fake_service,
):
    messages = await _last_prompt(make_fake_service, _card(2))
    assert messages[-3] == ChatMessage("system", SHOWN)
    assert [(m.role, m.content) for m in messages[-2:]] == [
        ("assistant", REPLY),
        ("user", "Three."),
    ]
    assert SHOWN not in messages[0].content  # the shared setup is not touched
    assert sum(SHOWN in m.content for m in messages) == 1


async def test_a_card_note_at_depth_0_comes_after_the_last_message(make_fake_service):
    messages = await _last_prompt(make_fake_service, _card(0))
    assert [(m.role, m.content) for m in messages[-2:]] == [("user", "Three."), ("system", SHOWN)]
    # Another role is a line of that role, signed as SillyTavern signs it (the persona).
    messages = await _last_prompt(make_fake_service, _card(0, "user"))
    assert messages[-2:] == (
        ChatMessage("user", "Three.", name="User"),
        ChatMessage("user", SHOWN, name="User"),
    )


async def test_with_an_authors_note_at_the_same_depth_sillytaverns_order(make_fake_service):
    """SillyTavern (public/script.js `doChatInject`, public/scripts/openai.js
    `populationInjectionPrompts`): at one depth one message per role, assistant then user then
    system (the system one nearest the end); in a role the prompts in key order, the Author's
    Note ("2_floating_prompt") before the card's ("DEPTH_PROMPT"), joined by a line break."""
    for depth in (2, 0):
        author = ChatSettings(author_note=AUTHORS, author_note_depth=depth)
        messages = await _last_prompt(make_fake_service, _card(depth), author)
        at = len(messages) - 1 - depth
        assert messages[at] == ChatMessage("system", f"{AUTHORS_SHOWN}\n{SHOWN}"), depth
    author = ChatSettings(author_note=AUTHORS, author_note_depth=2)
    messages = await _last_prompt(make_fake_service, _card(2, "assistant"), author)
    assert messages[-4:-2] == (
        ChatMessage("assistant", SHOWN, name="Wren"),
        ChatMessage("system", AUTHORS_SHOWN),
    )
    assert messages[-2].content == REPLY


async def test_a_deep_card_note_costs_what_an_authors_note_at_its_depth_costs(
    make_fake_service,
):
    """The same mechanism as the Author's Note (docs/architecture.md): at depth 4 the note
    moves down the history each turn, and the settle after each reply reads it again in its
    next place while the user reads, so a turn reads only its new message and what follows."""
    text = "[Keep the lighthouse in every scene.]"
    evaluated: dict[str, list[int]] = {}
    background: dict[str, int] = {}
    for source in ("card", "author"):
        if source == "card":
            key = _card(4, prompt=text)
            author = ChatSettings()
        else:
            key = write_short_card()
            author = ChatSettings(author_note=text, author_note_depth=4)
        service = await make_fake_service(fake_settings(reply_max_tokens=24), scripted(REPLY))
        conv = service.new_conversation(service.library.get(key))
        service.save_settings(conv.id, ChatSettings(), author)
        evaluated[source] = []
        for i in range(6):
            turn = await service.send(conv.id, f"Message number {i} about the sea.")
            done = await turn.wait()
            await service.states_settled()  # the user reads the reply
            assert done.metrics is not None
            evaluated[source].append(done.metrics.evaluated)
            messages = turn.prepared.request.messages
            assert i == 0 or messages[-5] == ChatMessage("system", text), (source, i)
        background[source] = service.engine.work(Slot.CHAT).evaluated - sum(evaluated[source])
    assert evaluated["card"] == evaluated["author"]
    assert background["card"] == background["author"]


def _group_cards() -> None:
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    for key, name, note in (
        ("wren", "Wren", "{{char}} counts the gulls for {{user}}."),
        ("mira", "Mira", "{{char}} mends a net."),
    ):
        data = {
            "name": name,
            "description": f"{name} lives by the sea.",
            "first_mes": f"{name} nods.",
            "extensions": {"depth_prompt": {"prompt": note, "depth": 1, "role": "system"}},
        }
        card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
        (folder / f"{key}.json").write_text(json.dumps(card), encoding="utf-8")


async def test_a_group_carries_every_unmuted_members_note_whoever_speaks(make_fake_service):
    """As SillyTavern's `getGroupDepthPrompts`: each member's note with {{char}} its own name,
    in the cast's order, whoever of them answers, so a change of speaker keeps them; a muted
    member's only for a turn it answers."""
    _group_cards()
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    group = service.groups.new_group([service.library.get("wren"), service.library.get("mira")])
    both = ChatMessage("system", "Wren counts the gulls for User.\nMira mends a net.")
    for speaker in ("wren", "mira"):
        turn = await service.send(group.id, f"Hello, {speaker}.", speaker=speaker)
        await turn.wait()
        assert turn.prepared.request.messages[-3:-1] == (
            both,
            ChatMessage("user", f"Hello, {speaker}.", name="User"),
        ), speaker
    service.groups.set_muted(group.id, "mira", True)
    turn = await service.send(group.id, "Just you, Wren.", speaker="wren")
    await turn.wait()
    assert turn.prepared.request.messages[-3].content == "Wren counts the gulls for User."
    # A muted member the player picks adds its note for that turn only, as in SillyTavern.
    turn = await service.send(group.id, "Mira?", speaker="mira")
    await turn.wait()
    assert turn.prepared.request.messages[-3] == both
    turn = await service.send(group.id, "Wren again.", speaker="wren")
    await turn.wait()
    assert turn.prepared.request.messages[-3].content == "Wren counts the gulls for User."


async def test_the_inspector_lists_the_notes_the_next_turn_carries_not_a_muted_members(
    make_fake_service,
):
    """The group's first card (Ann) is muted: the next turn is Bob's or Cat's and carries their
    notes, not Ann's; the inspector used to show the notes as if Ann answered."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("Ann", "Bob", "Cat"):
        data = {
            "name": name,
            "description": f"{name} lives by the sea.",
            "first_mes": f"{name} nods.",
            "extensions": {"depth_prompt": {"prompt": f"[{{{{char}}}} is {name}.]", "depth": 1}},
        }
        card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
        (folder / f"{name.lower()}.json").write_text(json.dumps(card), encoding="utf-8")
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    service.groups.rng = random.Random(5)
    group = service.groups.new_group([service.library.get(k) for k in ("ann", "bob", "cat")])
    service.groups.set_muted(group.id, "ann", True)
    view = service.memory_view(group.id)
    assert [(n.owner, n.text) for n, _tokens in view.character_notes] == [
        ("Bob", "[Bob is Bob.]"),
        ("Cat", "[Cat is Cat.]"),
    ]
    turn = await service.send(group.id, "Hello, all.")
    done = await turn.wait()
    assert done.reply is not None and done.reply.character_key in ("bob", "cat")
    carried = turn.prepared.request.messages[-3]
    assert carried == ChatMessage("system", "[Bob is Bob.]\n[Cat is Cat.]")
    assert all("Ann is" not in m.content for m in turn.prepared.request.messages)


async def _continued_prompt(make_fake_service, key: str, author: ChatSettings):
    """The request that continues the third reply of a new conversation with `key` (a
    greeting, then One/reply, Two/reply, Three/reply): the history ends ..., reply, "Three.",
    and the reply continued is the prefill."""
    service = await make_fake_service(fake_settings(), scripted(REPLY))
    conv = service.new_conversation(service.library.get(key))
    service.save_settings(conv.id, ChatSettings(), author)
    for text in ("One.", "Two.", "Three."):
        await (await service.send(conv.id, text)).wait()
    turn = await service.continue_reply(conv.id)
    await turn.wait()
    return turn.prepared.request


async def test_on_continue_the_notes_count_the_continued_reply_as_sillytavern_does(
    make_fake_service,
):
    """SillyTavern injects into the chat with the continued message still in it, and moves
    depth 0 to depth 1 on continue (public/script.js `doChatInject(coreChat, isContinue)`):
    depth 2 sits before "Three." (the continued reply is the first message after it), and
    depths 1 and 0 right before the continued reply, after "Three.". Kotonia sends that reply
    as the prefill, so the notes at depths 0 and 1 end the messages."""
    both = f"{AUTHORS_SHOWN}\n{SHOWN}"
    tail = {
        0: [("user", "Three."), ("system", both)],
        1: [("user", "Three."), ("system", both)],
        2: [("assistant", REPLY), ("system", both), ("user", "Three.")],
    }
    for depth, expected in tail.items():
        author = ChatSettings(author_note=AUTHORS, author_note_depth=depth)
        request = await _continued_prompt(make_fake_service, _card(depth), author)
        messages = [(m.role, m.content) for m in request.messages]
        assert messages[-len(expected) :] == expected, depth
        assert messages[-len(expected) - 1] != ("system", both), depth  # placed once
        assert sum(SHOWN in content for _role, content in messages) == 1, depth
        assert request.prefill == REPLY, depth
    # At one place the deeper note first, as SillyTavern stacks them: the card's at depth 1,
    # then the Author's Note at depth 0 (after the history, with the turn's other notes).
    author = ChatSettings(author_note=AUTHORS, author_note_depth=0)
    request = await _continued_prompt(make_fake_service, _card(1), author)
    assert [(m.role, m.content) for m in request.messages[-3:]] == [
        ("user", "Three."),
        ("system", SHOWN),
        ("system", AUTHORS_SHOWN),
    ]
