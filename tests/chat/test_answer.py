"""The character answers the user's last message when it has no reply yet (ChatService.answer):
after a reply stopped before its first word, or in a chat imported ending with the user.
Regenerate and continue do the same in that case (before, both refused and nothing could get
the character to answer)."""

from __future__ import annotations

import pytest

from kotonia_tui.chat.errors import ChatError
from kotonia_tui.domain import Conversation, Message, Role
from tests.cards import write_short_card

from .conftest import tiny_settings

REPLY = "Of course, come in."
SHORT = "wren"  # tests/cards.py writes it; the card's setup fits the tiny model's window


@pytest.fixture(autouse=True)
def short_card() -> None:
    assert write_short_card() == SHORT


async def stopped_before_the_first_word(service):
    card = service.library.get(SHORT)
    conv = service.new_conversation(card)
    turn = await service.send(conv.id, "May I come in?")
    turn.cancel()  # before the first token
    done = await turn.wait()
    assert done.reply is None and done.error == "stopped before the first word"
    last = service.store.last_message(conv.id)
    assert last.role is Role.USER and last.text == "May I come in?"
    return conv


@pytest.mark.parametrize("how", ["answer", "regenerate", "continue_reply"])
async def test_the_character_answers_a_message_left_without_a_reply(
    how, make_service, scripted_model
):
    service = await make_service(tiny_settings(scripted_model(REPLY)))
    conv = await stopped_before_the_first_word(service)
    turn = await getattr(service, how)(conv.id)
    assert turn.target is None and turn.user_message is None  # a new reply, no new message
    done = await turn.wait()
    assert done.error is None and done.reply is not None
    assert done.reply.text == REPLY and done.reply.role is Role.CHARACTER
    texts = [(m.role, m.text) for m in service.store.recent_messages(conv.id, 10)]
    assert texts[-2:] == [(Role.USER, "May I come in?"), (Role.CHARACTER, REPLY)]
    # The user's message is in the prompt, once, as the last thing before the reply.
    prompt = service.engine.render(turn.prepared.request).text
    assert prompt.count("May I come in?") == 1


async def test_an_imported_chat_ending_with_the_user_is_answered(make_service, scripted_model):
    service = await make_service(tiny_settings(scripted_model(REPLY)))
    card = service.library.get(SHORT)
    conv = service.store.import_conversation(
        Conversation(character_key=card.key, character_name=card.name, persona_name="Ann"),
        [
            Message(role=Role.CHARACTER, speaker=card.name, text="The lamp is lit."),
            Message(role=Role.USER, speaker="Ann", text="Can I wait out the storm here?"),
        ],
    )
    done = await (await service.regenerate(conv.id)).wait()
    assert done.reply is not None and done.reply.text == REPLY
    assert service.store.message_count(conv.id) == 3


async def test_answer_refuses_when_the_character_spoke_last(make_service, scripted_model):
    service = await make_service(tiny_settings(scripted_model(REPLY)))
    card = service.library.get(SHORT)
    conv = service.new_conversation(card)  # opens with the greeting
    with pytest.raises(ChatError, match="nothing to answer"):
        await service.answer(conv.id)
