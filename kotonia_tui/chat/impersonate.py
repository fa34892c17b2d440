"""Impersonate (issue 31): the model writes the player's next line, in the persona's voice.

The prompt is the next turn's own (`Prompter.preview`: nothing stored, no fold queued), with a
note after the history that asks for the persona's line and the persona named where the reply
starts; the line stops where the model starts a character's. The text goes into the input box
for the player to edit: it is never stored and never sent by itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kotonia_tui.chat.errors import ChatError
from kotonia_tui.domain import ChatMessage
from kotonia_tui.engine import EngineError

if TYPE_CHECKING:
    from kotonia_tui.chat.service import ChatService

IMPERSONATE_NOTE = (
    "[Write {user}'s next line in the story, in {user}'s own voice, as {user} would say or do "
    "it. Write only {user}'s part.]"
)


async def impersonate(service: ChatService, conv_id: int) -> str:
    """The persona's next line as the model writes it ("" when it wrote nothing)."""
    conv = service.store.get_conversation(conv_id)
    persona = service.persona_of(conv)
    card, setup, group = await service.speaking(conv, persona)
    prepared = await service.prompter.preview(conv_id, card, setup, persona, group)
    request = prepared.request
    names = group.names if group is not None else (setup.display_name,)
    note = ChatMessage("system", IMPERSONATE_NOTE.format(user=persona.name))
    request = replace(
        request,
        messages=(*prepared.history, note),
        reply_name=persona.name,
        user_name=names[0],
        extra_stops=(*request.extra_stops, *(f"\n{name}:" for name in names)),
        state=None,  # never saved as the conversation's state: nothing of it is kept
    )
    try:
        result = await service.engine.start(request).result()
    except EngineError as exc:
        raise ChatError(f"impersonate: {exc}") from exc
    return result.text.strip()
