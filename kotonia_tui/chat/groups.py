"""Group chats (issue 31): a conversation's cast, who answers, and runs of several replies.

A group turn is an ordinary turn (chat/turn.py) whose setup is the cast's shared text with the
speaker's name (characters/group_setup.py), so the fold policy, memory, recall and the stored
figures work as in a one-card chat. `GroupRun` is several such turns one after another: the
replies to a player's message (by the reply order) or an auto run of N replies; stopping it
stops the reply being written and starts no other.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kotonia_tui.characters import CardError, CharacterCard, CharacterSetup
from kotonia_tui.characters.group_setup import render_group_setup, speaking_setup
from kotonia_tui.chat.errors import ChatError
from kotonia_tui.chat.events import TurnOutcome
from kotonia_tui.chat.numbering import numbered_chapters
from kotonia_tui.chat.prompting import GroupTurn
from kotonia_tui.chat.speakers import Speaker, next_auto_speaker, reply_plan, talkativeness
from kotonia_tui.chat.turn import Turn
from kotonia_tui.domain import (
    CastMember,
    Conversation,
    Persona,
    ReplyOrder,
    Role,
    StoredConversation,
    StoredMessage,
    StoredPersona,
)
from kotonia_tui.memory.attribution import CastMemory, cast_memory, chapter_items
from kotonia_tui.memory.segments import FORMAT_INSTRUCTION
from kotonia_tui.store import NotFoundError

if TYPE_CHECKING:
    from kotonia_tui.chat.service import ChatService


@dataclass(frozen=True)
class GroupSpeaker:
    """What a group turn needs: the speaker's card, its setup over the cast's shared text,
    and the cast's names (for the stop strings)."""

    card: CharacterCard
    setup: CharacterSetup
    group: GroupTurn


class GroupChats:
    """The service's group side: casts, speakers, runs."""

    def __init__(self, service: ChatService, rng: random.Random | None = None) -> None:
        self.service = service
        self.rng = rng or random.Random()  # tests give a seeded one
        self._texts: dict[tuple[str, ...], str] = {}

    # ---- the cast -------------------------------------------------------------------------

    def new_group(
        self,
        cards: list[CharacterCard],
        *,
        persona: StoredPersona | None = None,
        title: str = "",
    ) -> StoredConversation:
        """A conversation with `cards` as its cast, in this order (the first is the
        conversation's own card); each member's first greeting opens it, in that order, as
        SillyTavern opens a group."""
        keys = [card.key for card in cards]
        if len(cards) < 2:
            raise ChatError("a group needs two cards or more")
        if len(set(keys)) != len(keys):
            raise ChatError(f"a card appears twice in the group: {', '.join(keys)}")
        service = self.service
        persona = persona or service.persona
        setups = [service.setup_for(card, persona) for card in cards]
        for card in cards:
            service.store.upsert_character(
                card.key, card.name, card.card_hash, str(card.source_path or "")
            )
        conv = service.store.create_conversation(
            Conversation(
                character_key=cards[0].key,
                character_name=cards[0].name,
                persona_name=persona.name,
                persona_description=persona.description,
                persona_id=persona.id,
                title=title,
            )
        )
        service.store.set_cast(conv.id, [(card.key, card.name) for card in cards])
        for card, setup in zip(cards, setups, strict=True):
            if setup.greetings:
                service.add_greeting(
                    conv.id,
                    setup,
                    setup.greetings[0],
                    listener=persona.name,
                    character_key=card.key,
                )
        return service.store.get_conversation(conv.id)

    def cast(self, conv_id: int) -> list[CastMember]:
        return self.service.store.cast(conv_id)

    def is_group(self, conv_id: int) -> bool:
        return self.service.store.is_group(conv_id)

    def cards(self, conv: StoredConversation) -> list[CharacterCard]:
        """The cast's cards in its order; a member whose card is gone is named in the error."""
        cards = []
        for member in self.cast(conv.id):
            card = self.service.library.card_of(member.character_key, member.character_name)
            if card is None:
                raise ChatError(
                    f"conversation {conv.id}'s cast has {member.character_name!r}, whose card "
                    f"({member.character_key}) is not in the character folders"
                )
            cards.append(card)
        return cards

    def speakers(self, conv: StoredConversation) -> list[Speaker]:
        members = self.cast(conv.id)
        cards = self.cards(conv)
        return [
            Speaker(card.key, card.display_name, talkativeness(card.extensions), member.muted)
            for member, card in zip(members, cards, strict=True)
        ]

    def add_member(self, conv_id: int, card: CharacterCard) -> list[CastMember]:
        """Add a card to the cast mid-story (its greeting is not added: the story goes on)."""
        self.service.store.upsert_character(
            card.key, card.name, card.card_hash, str(card.source_path or "")
        )
        return self.service.store.add_cast_member(conv_id, card.key, card.name)

    def remove_member(self, conv_id: int, key: str) -> list[CastMember]:
        return self.service.store.remove_cast_member(conv_id, key)

    def set_muted(self, conv_id: int, key: str, muted: bool) -> list[CastMember]:
        return self.service.store.set_cast_muted(conv_id, key, muted)

    def reply_order(self, conv_id: int) -> ReplyOrder:
        return self.service.store.reply_order(conv_id)

    def set_reply_order(self, conv_id: int, order: ReplyOrder) -> None:
        """Who answers from the next message on (stored on the conversation, as `--order`)."""
        self.service.store.set_reply_order(conv_id, order)

    def memory(self, conv_id: int) -> CastMemory:
        """What the memory holds of each member and the player, by the lines it cites (the
        inspector's "by speaker" page). Bounded: the chapters' items and the ledger, and the
        messages they cite."""
        store = self.service.store
        conv = store.get_conversation(conv_id)
        chapters = store.chapters(conv_id, include_in_synopsis=True)
        ledger = store.ledger(conv_id, include_ended=True)
        ids = {i for c in chapters for item in chapter_items(c) for i in item.evidence}
        ids |= {i for entry in ledger for i in entry.evidence}
        cited: dict[int, StoredMessage] = {}
        for message_id in sorted(ids):
            with contextlib.suppress(NotFoundError):
                cited[message_id] = store.get_message(message_id)
        try:
            # The names the story calls them (a card's display name), as their lines are signed.
            names = [speaker.name for speaker in self.speakers(conv)]
        except ChatError:  # a member's card is gone: the names the cast was made with
            names = [m.character_name for m in self.cast(conv_id)]
        # The page names each item's chapter by its range in numbers, as the inspector does.
        spans = numbered_chapters(
            store, conv_id, {c.id for c in chapters} | {e.chapter_id for e in ledger}
        )
        return cast_memory(names, conv.persona_name or "User", chapters, ledger, cited, spans)

    # ---- the setup ------------------------------------------------------------------------

    def shared_text(self, cards: list[CharacterCard], persona: Persona) -> str:
        key = (*(f"{c.key}:{c.card_hash}" for c in cards), persona.name, persona.description)
        text = self._texts.get(key)
        if text is None:
            try:
                text = render_group_setup(cards, persona, format_instruction=FORMAT_INSTRUCTION)
            except CardError as exc:
                raise ChatError(str(exc)) from exc
            if len(self._texts) >= 16:
                self._texts.clear()
            self._texts[key] = text
        return text

    def speaker(self, conv: StoredConversation, persona: Persona, key: str) -> GroupSpeaker:
        cards = self.cards(conv)
        card = next((c for c in cards if c.key == key), None)
        if card is None:
            names = ", ".join(c.key for c in cards)
            raise ChatError(f"{key!r} is not in this group's cast ({names})")
        text = self.shared_text(cards, persona)
        # Every unmuted member's Character's Note, in the cast's order, as SillyTavern's
        # `getGroupDepthPrompts` gives them, so a change of speaker among the unmuted members
        # keeps them and reads the history again no more than without them. A muted member that
        # answers (the player picks it) adds its own note for that turn only, as in SillyTavern:
        # that turn's history differs from the note's place on, and so does the next one's.
        muted = {m.character_key for m in self.cast(conv.id) if m.muted}
        notes = tuple(
            note
            for member in cards
            if member.key == key or member.key not in muted
            for note in self.service.setup_for(member, persona).character_notes
        )
        setup = speaking_setup(text, self.service.setup_for(card, persona), notes)
        return GroupSpeaker(card, setup, GroupTurn(tuple(c.display_name for c in cards)))

    # ---- who answers ----------------------------------------------------------------------

    def planned(
        self,
        conv: StoredConversation,
        order: ReplyOrder | None = None,
        rng: random.Random | None = None,
    ) -> list[str]:
        """Who answers the last message by the conversation's reply order (or `order`); the
        draws are `rng`'s (the groups' own by default)."""
        last = self.service.store.last_message(conv.id)
        return reply_plan(
            order or self.service.store.reply_order(conv.id),
            self.speakers(conv),
            last.text if last is not None else "",
            _speaker_key(last),
            rng or self.rng,
        )

    def next_speaker(self, conv: StoredConversation, *, peek: bool = False) -> str:
        """Who writes the next reply when nobody is named (`ChatService.speaking`): the first
        the reply order picks, else the first unmuted member, else the first member. `peek`:
        without drawing from the groups' random numbers (a copy of them draws), so the
        inspector names the member the next turn picks and does not change the pick."""
        rng = self.rng
        if peek:
            rng = random.Random()
            rng.setstate(self.rng.getstate())
        members = self.cast(conv.id)
        planned = self.planned(conv, rng=rng)
        return next(
            iter(planned),
            next((m.character_key for m in members if not m.muted), members[0].character_key),
        )

    def next_auto(self, conv: StoredConversation, order: ReplyOrder | None = None) -> str | None:
        last = self.service.store.last_message(conv.id)
        return next_auto_speaker(
            order or self.service.store.reply_order(conv.id),
            self.speakers(conv),
            last.text if last is not None else "",
            _speaker_key(last),
            self.rng,
        )

    # ---- runs -----------------------------------------------------------------------------

    async def send(
        self,
        conv_id: int,
        text: str,
        images: tuple[str, ...] = (),
        *,
        speakers: list[str] | None = None,
        order: ReplyOrder | None = None,
    ) -> GroupRun:
        """Store the player's message; the run gives the replies (`speakers`, in this order,
        or who the reply order picks: nobody in manual order, until `reply`)."""
        conv = self.service.store.get_conversation(conv_id)
        user = self.service.store_user_message(conv, text, images)
        wanted = speakers if speakers is not None else self.planned(conv, order)
        return GroupRun(self, conv_id, wanted, user_message=user)

    def answer(self, conv_id: int) -> GroupRun:
        """The replies the reply order gives to the last message (one left without any)."""
        conv = self.service.store.get_conversation(conv_id)
        return GroupRun(self, conv_id, self.planned(conv))

    def reply(self, conv_id: int, key: str) -> GroupRun:
        """One reply by the member the player picked (manual order, or any time)."""
        return GroupRun(self, conv_id, [key])

    def auto(self, conv_id: int, replies: int, order: ReplyOrder | None = None) -> GroupRun:
        """The cast goes on by itself for `replies` replies (stop() ends it)."""
        if replies < 1:
            raise ChatError(f"an auto run needs 1 reply or more, not {replies}")
        return GroupRun(self, conv_id, [], auto=replies, order=order)


class GroupRun:
    """Replies by several members, one after another. `async for turn in run` gives each turn
    once it started (read its events, or `await turn.wait()`); the next starts after it ends.
    `stop()` cancels the reply being written (kept, marked as stopped) and starts no other; a
    reply that fails or is stopped ends the run too."""

    def __init__(
        self,
        groups: GroupChats,
        conv_id: int,
        speakers: list[str],
        *,
        auto: int = 0,
        order: ReplyOrder | None = None,
        user_message: StoredMessage | None = None,
    ) -> None:
        self._groups = groups
        self.conv_id = conv_id
        self.planned = list(speakers)
        self._auto = auto
        self._order = order
        self._user_message = user_message
        self._stopped = False
        self.current: Turn | None = None
        self.turns: list[Turn] = []

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        self._stopped = True
        if self.current is not None:
            self.current.cancel()

    def __aiter__(self) -> AsyncIterator[Turn]:
        return self._run()

    async def _run(self) -> AsyncIterator[Turn]:
        service = self._groups.service
        queue = list(self.planned)
        left = self._auto
        while not self._stopped:
            conv = service.store.get_conversation(self.conv_id)
            if queue:
                key: str | None = queue.pop(0)
            elif left > 0:
                left -= 1
                key = self._groups.next_auto(conv, self._order)
            else:
                return
            if key is None:
                return
            turn = await service.group_turn(conv, key, user_message=self._user_message)
            self._user_message = None  # the first reply answers it; the others follow on
            self.current = turn
            self.turns.append(turn)
            yield turn
            done = await turn.wait()
            if done.outcome is not TurnOutcome.COMPLETED or done.reply is None:
                self._stopped = True
            self.current = None

    async def wait(self) -> list[Turn]:
        """Run to the end without reading the events; the turns that ran."""
        async for turn in self:
            await turn.wait()
        return self.turns


def _speaker_key(message: StoredMessage | None) -> str | None:
    if message is None or message.role is not Role.CHARACTER:
        return None
    return message.character_key
