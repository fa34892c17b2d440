"""Turns end to end on a real SQLite file and a real tiny model: nothing the user wrote is lost."""

from __future__ import annotations

import pytest

from kotonia_tui.chat.errors import ChatError
from kotonia_tui.chat.events import ReplyDelta, TurnDone
from kotonia_tui.domain import MessageStatus, Role
from kotonia_tui.memory.assembly import MEMORY_TITLE
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.settings import fake_settings

from .conftest import cancel_turn_after, tiny_settings


async def new_chat(service, key: str = "rowan-ashby", greeting: int = 0):
    card = service.library.get(key)
    return card, service.new_conversation(card, greeting=greeting)


async def test_a_turn_stores_the_message_first_and_the_reply_when_it_ends(
    make_service, tiny_model_path
):
    service = await make_service(tiny_settings(tiny_model_path))
    card, conv = await new_chat(service)
    greeting = service.store.last_message(conv.id)
    assert greeting.role is Role.CHARACTER and greeting.text == service.setup_for(card).greetings[0]

    turn = await service.send(conv.id, "Good evening. Is the shop open?")
    # The user's message is in the database before the model has produced anything.
    stored = service.store.last_message(conv.id)
    assert stored.id == turn.user_message.id and stored.text == "Good evening. Is the shop open?"
    assert stored.segments and stored.segments[0].listener == card.name

    deltas = []
    async for event in turn:
        if isinstance(event, ReplyDelta):
            deltas.append(event.text)
    done = turn.done
    assert isinstance(done, TurnDone) and done.error is None
    reply = done.reply
    assert reply is not None and reply.role is Role.CHARACTER
    assert reply.text == "".join(deltas).strip()
    assert [m.id for m in service.store.recent_messages(conv.id, 10)] == [
        greeting.id,
        stored.id,
        reply.id,
    ]
    metrics = service.store.last_turn_metrics(conv.id)
    assert metrics == done.metrics
    assert metrics.prompt_positions == metrics.reused + metrics.evaluated


async def test_alternate_greeting_opens_the_conversation(make_service, tiny_model_path):
    service = await make_service(tiny_settings(tiny_model_path))
    card, conv = await new_chat(service, greeting=1)
    assert service.store.last_message(conv.id).text == service.setup_for(card).greetings[1]
    assert "{{char}}" not in service.store.last_message(conv.id).text
    with pytest.raises(ChatError, match="greetings"):
        service.new_conversation(card, greeting=9)


async def test_a_failed_model_call_keeps_the_users_message_and_the_chat_goes_on(
    make_fake_service,
):
    """Fake engine: this test is about what the service keeps when the engine refuses a prompt
    (the same PromptTooLongError the real engine raises, tests/engine/test_engine.py), and the
    fold the next turn waits for, which do not depend on the model. (On a tiny GGUF that fold,
    of a 22,000-character message read in parts, took minutes on a loaded machine.)"""
    service = await make_fake_service(fake_settings(n_ctx=4096), scripted("Hello again."))
    _, conv = await new_chat(service)
    huge = "the harbour bell rang again " * 800
    turn = await service.send(conv.id, huge)
    done = await turn.wait()
    assert done.reply is None
    assert "context window" in done.error and "nothing was sent" in done.error
    assert service.store.last_message(conv.id).text == huge  # not lost
    # The overflowing message leaves the prompt as a forced cut, so the next turn works.
    follow = await (await service.send(conv.id, "Sorry, too long. Hello!")).wait()
    assert follow.error is None and follow.reply is not None


async def test_a_cancelled_reply_is_stored_as_cancelled(make_service, tiny_noeos_model_path):
    service = await make_service(
        tiny_settings(tiny_noeos_model_path, reply_max_tokens=1500, temperature=0.8)
    )
    _, conv = await new_chat(service)
    turn = await service.send(conv.id, "Tell me everything.")
    await cancel_turn_after(turn, 5)
    reply = turn.done.reply
    assert reply is not None
    assert reply.status is MessageStatus.CANCELLED
    assert reply.status_reason == "stopped by the user"
    assert turn.done.metrics.generated < 1500
    assert service.store.get_message(reply.id).status is MessageStatus.CANCELLED


async def test_a_reply_that_hits_its_cap_is_stored_as_cut_with_the_reason(
    make_service, tiny_noeos_model_path
):
    service = await make_service(
        tiny_settings(tiny_noeos_model_path, reply_max_tokens=16, temperature=0.8)
    )
    _, conv = await new_chat(service)
    done = await (await service.send(conv.id, "Go on.")).wait()
    assert done.cut
    assert done.reply.status is MessageStatus.CUT
    assert "cap of 16 tokens" in done.reply.status_reason
    assert done.metrics.finish_reason == "length"


async def test_regenerate_keeps_every_version_and_continue_extends_the_reply(
    make_service, tiny_noeos_model_path
):
    service = await make_service(
        tiny_settings(tiny_noeos_model_path, reply_max_tokens=16, temperature=0.9, seed=None)
    )
    _, conv = await new_chat(service)
    first = (await (await service.send(conv.id, "Hello there.")).wait()).reply
    second = (await (await service.regenerate(conv.id)).wait()).reply
    assert second.id == first.id  # a new version of the same reply
    assert len(second.alternatives) == 2
    assert second.chosen == 1
    back = service.choose_alternative(first.id, 0)
    assert back.text == first.text
    longer = (await (await service.continue_reply(conv.id)).wait()).reply
    assert longer.id == first.id
    assert longer.text.startswith(first.text)
    assert len(longer.text) > len(first.text)
    # Only one reply in the conversation, still after the user's message.
    assert [m.role for m in service.store.recent_messages(conv.id, 10)] == [
        Role.CHARACTER,
        Role.USER,
        Role.CHARACTER,
    ]


async def test_regenerate_needs_a_message(make_service, tiny_model_path):
    service = await make_service(tiny_settings(tiny_model_path))
    _, conv = await new_chat(service)
    service.delete_message(service.store.last_message(conv.id).id)  # the greeting
    with pytest.raises(ChatError, match="no reply to regenerate"):
        await service.regenerate(conv.id)


async def test_images_are_attached_by_hash_and_a_bad_file_is_named(
    make_service, tiny_model_path, tiny_mmproj_path, tmp_path
):
    from kotonia_tui.chat.images import AttachmentError
    from tests.tiny_models import write_tiny_png

    service = await make_service(tiny_settings(tiny_model_path, mmproj=tiny_mmproj_path))
    _, conv = await new_chat(service)
    picture = write_tiny_png(tmp_path / "harbour.png")
    digest = service.attach_image(picture)
    done = await (await service.send(conv.id, "Look at this.", [digest])).wait()
    assert done.error is None
    assert done.metrics.images >= 1  # the user's image (and the card's picture)
    assert service.store.recent_messages(conv.id, 5)[-2].images == [digest]
    bogus = tmp_path / "notes.png"
    bogus.write_text("not an image")
    with pytest.raises(AttachmentError, match=r"notes\.png"):
        service.attach_image(bogus)
    with pytest.raises(AttachmentError, match="no such file"):
        service.attach_image(tmp_path / "missing.png")


async def test_continue_fits_a_long_cut_reply_into_a_small_window(
    make_service, tiny_noeos_model_path
):
    # A reply cut at its cap, in a window where prompt + that reply + a full reply reserve no
    # longer fit: the continuation gets the room that is left instead of failing.
    key = write_short_card()
    service = await make_service(
        tiny_settings(tiny_noeos_model_path, n_ctx=1024, reply_max_tokens=400)
    )
    _, conv = await new_chat(service, key)
    for line in ("Tell me about the lamps.", "And the storm?"):
        first = await (await service.send(conv.id, line)).wait()
        assert first.error is None and first.cut
    turn = await service.continue_reply(conv.id)
    done = await turn.wait()
    assert done.error is None
    assert done.reply.id == first.reply.id
    assert done.reply.text.startswith(first.reply.text)
    assert len(done.reply.text) > len(first.reply.text)
    assert turn.prepared.request.max_tokens < 400  # the room left, not the whole reserve
    # Continued until the window is full: then a clear error, and the reply stays as it was.
    reply = done.reply
    with pytest.raises(ChatError, match=r"too long to continue in the 1024-token window"):
        for _ in range(6):
            reply = (await (await service.continue_reply(conv.id)).wait()).reply
    assert service.store.get_message(reply.id).text == reply.text


def _imported(service, key: str, persona_name: str, lines: list[tuple[Role, str]]):
    """A conversation imported as `persona_name` with the card `key`."""
    from kotonia_tui.domain import Conversation, Message

    card = service.library.get(key)
    service.store.upsert_character(card.key, card.name, card.card_hash, "")
    speakers = {Role.USER: persona_name, Role.CHARACTER: card.name}
    return service.store.import_conversation(
        Conversation(character_key=card.key, character_name=card.name, persona_name=persona_name),
        [Message(role=role, speaker=speakers[role], text=text) for role, text in lines],
    )


async def test_an_imported_chat_goes_on_as_the_persona_it_was_written_with(
    make_service, tiny_model_path
):
    key = write_short_card()
    service = await make_service(tiny_settings(tiny_model_path))  # settings persona: "User"
    conv = _imported(
        service,
        key,
        "Ann",
        [(Role.USER, "I came for my brother Tom."), (Role.CHARACTER, '"Tom? I knew him."')],
    )
    turn = await service.send(conv.id, "Where is he now?")
    assert (await turn.wait()).error is None
    assert service.store.get_message(turn.user_message.id).speaker == "Ann"
    prompt = service.engine.render(turn.prepared.request).text
    assert "User" not in prompt  # neither the setup's {{user}} nor a speaker label
    assert prompt.count("Ann") >= 2


async def _cut_reply(service, key: str, text: str):
    """A conversation whose last reply was cut mid-word at its cap (stored as such)."""
    from kotonia_tui.domain import Message

    card, conv = await new_chat(service, key)
    service.store.add_message(
        Message(conversation_id=conv.id, role=Role.USER, speaker="User", text="Where to?")
    )
    reply = service.store.add_message(
        Message(
            conversation_id=conv.id,
            role=Role.CHARACTER,
            speaker=card.name,
            text=text,
            status=MessageStatus.CUT,
            status_reason="cut: the reply reached its cap of 16 tokens",
        )
    )
    return conv, reply


@pytest.mark.parametrize(
    ("cut", "written", "joined"),
    [
        # Cut mid-word: the continuation finishes the word, no space is put in.
        ("She kept walk", "ing along the quay.", "She kept walking along the quay."),
        # The continuation brings its own space: it is not doubled.
        ("She kept walking", " along the quay.", "She kept walking along the quay."),
    ],
)
async def test_a_continuation_joins_the_cut_reply_exactly(
    make_service, scripted_model, cut, written, joined
):
    key = write_short_card()
    service = await make_service(tiny_settings(scripted_model(written), reply_max_tokens=48))
    conv, reply = await _cut_reply(service, key, cut)
    done = await (await service.continue_reply(conv.id)).wait()
    assert done.error is None
    assert done.reply.id == reply.id
    assert done.reply.text == joined
    assert done.reply.status is MessageStatus.COMPLETE
    assert service.store.get_message(reply.id).text == joined


async def test_stopping_a_continuation_before_its_first_word_keeps_the_cut_reply_as_it_was(
    make_service, scripted_model
):
    key = write_short_card()
    service = await make_service(tiny_settings(scripted_model("ing along the quay.")))
    conv, reply = await _cut_reply(service, key, "She kept walk")
    turn = await service.continue_reply(conv.id)
    turn.cancel()  # before the model wrote anything
    done = await turn.wait()
    assert done.error == "stopped before the first word"
    kept = service.store.get_message(reply.id)
    assert kept.text == "She kept walk"
    assert kept.status is MessageStatus.CUT
    assert kept.status_reason == "cut: the reply reached its cap of 16 tokens"


async def test_one_rule_names_the_user_for_turns_edits_and_folds(make_service, tiny_model_path):
    # A conversation stored without a persona name (an old row, an import with no user name)
    # is played as the settings' persona everywhere: in the prompt, in an edited reply's
    # dialogue, and in what the chronicler is told.
    key = write_short_card()
    service = await make_service(tiny_settings(tiny_model_path))  # settings persona: "User"
    conv = _imported(service, key, "", [(Role.CHARACTER, '"Who goes there?"')])
    turn = await service.send(conv.id, "A friend.")
    await turn.wait()
    assert turn.prepared.request.user_name == "User"
    assert service.cast_of(conv.id).user == "User"
    reply = service.store.last_message(conv.id)
    edited = service.edit_message(reply.id, '"Come in, then."')
    assert [s.listener for s in edited.segments if s.listener] == ["User"]


async def test_a_reply_that_starts_writing_the_memory_header_stops_before_it(
    make_service, scripted_model
):
    # The embedded 270M ended a reply with the prompt's "[The story so far]" (a tmux chat,
    # issue 15): the header is the prompt's framing, never the character's words.
    key = write_short_card()
    written = f'"I was the navigator."\n\n{MEMORY_TITLE}\nThis is the record'
    service = await make_service(tiny_settings(scripted_model(written), reply_max_tokens=48))
    conv = service.new_conversation(service.library.get(key))
    done = await (await service.send(conv.id, "Tell me more.")).wait()
    assert done.error is None
    assert done.reply.text == '"I was the navigator."'
    assert service.store.get_message(done.reply.id).text == '"I was the navigator."'
