"""Importing a chat file into the store: streamed, all or nothing, segments derived here.

A chat file's own `extra.kotonia.segments` are never used: the chronicler reads segments, so a
file whose segments disagree with its text would feed the memory words nobody wrote. Every
message (and its chosen version) gets the segments its text gives, as a new message would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kotonia_tui.characters import CharacterCard
from kotonia_tui.chat.errors import PersonaError
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.chatfiles.sillytavern import ChatFile, ReadProgress
from kotonia_tui.domain import Conversation, GroupCast, Message, Role, StoredConversation
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.store import Store


@dataclass(frozen=True)
class ImportedChat:
    conversation: StoredConversation
    messages: int
    notes: tuple[str, ...]  # what was repaired on the way (said once, not an error)
    card: CharacterCard | None  # the card the chat was filed under by its character's name


def import_chat_file(
    store: Store,
    path: Path,
    persona_name: str,
    character_name_hint: str | None = None,
    character_key: str | None = None,
    match: Callable[[str], CharacterCard | None] | None = None,
    personas: PersonaBook | None = None,
    read: ReadProgress | None = None,
) -> ImportedChat:
    """Read `path` line by line into a new conversation (one transaction); raises
    `ImportFormatError` naming the file and line, with nothing stored.

    Without a `character_key`, `match` finds the card the file's character name means: the
    chat is filed under that card, so the app lists it with the card and it can be continued.
    With `personas`, the chat is played as the persona the file's user name is (made if there
    is none), in the same transaction. With `read`, the caller follows how far the file has
    been read (a progress line; where an interrupted import stopped).
    """
    chat = ChatFile(path, persona_name, character_name_hint, character_key)
    if read is not None:
        chat.read = read
    placeholder = Conversation(
        character_key=character_key or character_name_hint or "",
        character_name=character_name_hint or "",
        persona_name=persona_name,
        title=path.stem,
    )
    count = 0

    def derived() -> Iterator[Message]:
        nonlocal count
        for message in chat.messages():
            count += 1
            yield with_segments(message, *chat.names())

    matched: list[CharacterCard] = []

    def described() -> Conversation:
        conv = chat.conversation()
        if personas is not None and conv.persona_name.strip():
            try:
                persona = personas.for_name(conv.persona_name)
            except PersonaError as exc:
                # The chat goes on under the name it has; it is just not a persona to pick.
                chat.notes.append(f"{path}: the user name is not kept as a persona: {exc}")
                return _filed(conv)
            conv = conv.model_copy(
                update={
                    "persona_id": persona.id,
                    "persona_name": persona.name,
                    "persona_description": persona.description,
                }
            )
        return _filed(conv)

    def _filed(conv: Conversation) -> Conversation:
        card = match(conv.character_name) if match and character_key is None else None
        if card is None:
            return conv
        matched.append(card)
        return conv.model_copy(update={"character_key": card.key})

    def card_for(text: str | None) -> CharacterCard | None:
        return match(text) if match is not None and text else None

    def group() -> GroupCast:
        """A group chat's members: each one's card (by the key the file gives, else by its
        name), or the name itself when no card matches (as a chat with no card is filed); and
        whose lines are whose (by the card file a line names, else by its speaker's name)."""
        members = chat.cast()
        if len(members) < 2:
            return GroupCast((), {})
        cast: list[tuple[str, str, bool]] = []
        for name, key, muted in members:
            card = card_for(key) or card_for(name)
            if card is None:
                # A member with no card cannot answer, and the chat cannot go on until it has
                # one: most often the user's lines, written under a name that is not the
                # persona's, with no role to say so.
                chat.notes.append(
                    f"{path}: {name!r} speaks in it as a character and no card matches, so the "
                    f"chat is a group that cannot go on until a card named {name!r} is added; "
                    f'if {name!r} is you, give those lines "role": "user" and import again '
                    f"(or import with --user {name!r})"
                )
            found = card.key if card is not None else key or name
            if all(found != other for other, _name, _muted in cast):
                cast.append((found, card.name if card is not None else name, muted))
        keys = {key for key, _name, _muted in cast}
        speakers: dict[str, str] = {}
        for speaker, avatar in chat.speakers.items():
            card = card_for(Path(avatar).stem if avatar else None) or card_for(speaker)
            key = card.key if card is not None else speaker
            if key in keys:
                speakers[speaker] = key
        return GroupCast(tuple(cast), speakers)

    stored = store.import_conversation(
        placeholder, derived(), described=described, settings=chat.settings, cast_of=group
    )
    return ImportedChat(stored, count, tuple(chat.notes), matched[0] if matched else None)


def with_segments(message: Message, persona: str, character: str) -> Message:
    """The message with segments parsed from its text (the chosen version's too)."""
    listener = character if message.role is Role.USER else persona
    segments = parse_segments(message.text, speaker=message.speaker, listener=listener)
    alternatives = list(message.alternatives)
    if alternatives:
        alternatives[message.chosen] = alternatives[message.chosen].model_copy(
            update={"segments": segments}
        )
    return message.model_copy(update={"segments": segments, "alternatives": alternatives})
