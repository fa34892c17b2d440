"""The chat service: one user turn end to end (store -> memory -> engine -> store), and folding.

The TUI and the CLI talk only to this. A turn writes the user's message first, prepares the
prompt from bounded reads, and starts a `Turn`: an asyncio task the service owns, which streams
the reply to whoever subscribes and stores it however it ends (chat/turn.py). Crossing the fold
trigger queues a durable fold job that the background worker runs later; the turn after a
chapter lands applies it. docs/architecture.md tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from kotonia_tui.characters import CardError, CharacterCard, CharacterSetup
from kotonia_tui.chat.chat_settings import (
    ChatSettingsError,
    SettingsView,
    TurnSettings,
    resolve,
    validated,
)
from kotonia_tui.chat.derived_copies import DerivedCopies
from kotonia_tui.chat.errors import ChatError
from kotonia_tui.chat.events import (
    FoldProgress,
    FoldState,
    FoldWait,
    MemoryNotice,
    NoticeLevel,
    ServiceEvent,
    TurnPrepared,
)
from kotonia_tui.chat.fold.outcomes import FoldFailed
from kotonia_tui.chat.fold.quote_first import quote_chapter_jobs, quote_major_fold
from kotonia_tui.chat.fold.wait import SYSTEM_CLOCK, Clock, Patience, WaitEnd, WaitProgress
from kotonia_tui.chat.fold.worker import FoldWorker
from kotonia_tui.chat.groups import GroupChats
from kotonia_tui.chat.images import store_image
from kotonia_tui.chat.impersonate import impersonate
from kotonia_tui.chat.inspection import BudgetBar, ChapterView, MemoryView
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.chat.lore import LoreTurn
from kotonia_tui.chat.managing import ConversationManager
from kotonia_tui.chat.numbering import (
    chapter_numbers,
    chapter_span,
    job_ends,
    job_label,
    job_numbers,
    numbering,
    range_ends,
    range_numbers,
    row_texts,
    told,
)
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.chat.prompting import (
    MAX_WINDOW_MESSAGES,
    Carry,
    ContinuationTooLongError,
    GroupTurn,
    Prompter,
    SetupTooLargeError,
)
from kotonia_tui.chat.semantic import SemanticRecall
from kotonia_tui.chat.turn import Turn, TurnKind
from kotonia_tui.config import Settings
from kotonia_tui.domain import (
    ChatSettings,
    Conversation,
    DepthNote,
    FoldJob,
    FoldKind,
    FoldStatus,
    Message,
    Persona,
    QuickReply,
    ReplyOrder,
    Role,
    StoredConversation,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredMessage,
    StoredPersona,
    StoredQuickReply,
)
from kotonia_tui.engine import Call, Engine, EngineError, SlotTakenError
from kotonia_tui.engine.foreground import FOREGROUND
from kotonia_tui.memory.assembly import PromptLine, history_for_next_turn, prompt_message
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chronicler import Cast
from kotonia_tui.memory.ledger import LeftOut
from kotonia_tui.memory.recall import Recall
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.store import NotFoundError, Store, StoreError
from kotonia_tui.untrusted_text import scrub

log = logging.getLogger(__name__)

WAIT_WHY = "before this turn, so those messages stay in the memory instead of leaving the prompt"


def _jobs_said(jobs: Sequence[StoredFoldJob], numbers: Mapping[int, int]) -> str:
    """ "chapter #1-#14, major fold": fold jobs as the inspector names them, by their kind and
    range in the conversation's numbers (`numbers`: chat/numbering.py `job_numbers` of them;
    `job_label`), never by their store ids."""
    return ", ".join(job_label(job, numbers) for job in jobs)


class ChatService:
    """Conversations, turns, memory and the fold worker over one store and one engine."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        engine: Engine,
        library: CharacterLibrary,
        semantic: SemanticRecall | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.clock = clock  # what fold delays and a turn's wait for a fold go by
        self.store = store
        self.engine = engine
        self.library = library
        self.personas = PersonaBook(store, settings.persona)
        self.manager = ConversationManager(store, library, self.personas)
        # A card that left the characters' folders: its setup states go too.
        DerivedCopies().forget_cards_except(card.key for card in library.cards)
        self.semantic = semantic or SemanticRecall(store)  # vectors (chat/semantic.py)
        self.prompter = Prompter(store, engine, settings, self.semantic, clock)
        self.groups = GroupChats(self)  # casts, who answers, runs of replies (chat/groups.py)
        self._listeners: list[Callable[[ServiceEvent], object]] = []
        # The conversation the user is in (opened, edited or played last): a fold that lands
        # for it is prewarmed, so the turn that applies it does not read the whole prompt.
        self._active_conv: int | None = None
        self._prewarm_task: asyncio.Task[None] | None = None
        self._state_tasks: set[asyncio.Task[None]] = set()  # settles and restores in flight
        # After a reply, what the next turn would cut is carried at once (`_look_ahead`); that
        # turn waits for it (it is code only), never for the prewarm that follows it.
        self._ahead: dict[int, asyncio.Task[None]] = {}
        self._closing = False
        self._turns: set[Turn] = set()  # turns running now; each stores its reply when it ends
        self._lore: dict[int, LoreTurn] = {}  # the last turn's lore, per conversation
        self._deleted: list[StoredMessage] = []  # this session's deleted messages (undo)
        self._recall: dict[int, Recall] = {}  # what the last turn recalled, per conversation
        self._fold_waits: dict[int, asyncio.Event] = {}  # set: that turn goes on without it
        self.worker = FoldWorker(
            store,
            engine,
            settings,
            cast=self.cast_of,
            budgets=self.fold_budgets,
            notify=self._emit,
            clock=clock,
        )

    # ---- lifetime -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the fold worker (resuming jobs a previous run left) and the embedding one."""
        self.worker.start()
        self.semantic.start(busy=lambda: bool(self._turns))

    async def close(self, why: str = "the app was closed") -> None:
        """Stop the turns still running (their replies are stored as stopped, with `why`) and
        the worker, then release the model and the database."""
        self._closing = True  # the replies stopped now are not looked ahead from
        running = list(self._turns)
        for turn in running:
            turn.interrupt(why)
        await asyncio.gather(*(turn.wait() for turn in running))
        await self.worker.stop()
        await self.semantic.stop()
        if self._prewarm_task is not None:
            self._prewarm_task.cancel()
        # The engine saves the chat's KV state before it closes (the settles already asked
        # for run first); the tasks reading their results are not needed any more.
        for task in list(self._state_tasks):
            task.cancel()
        await asyncio.to_thread(self.engine.close)
        # After the engine saved its last state: a conversation deleted in this session
        # takes that file along.
        self.manager.close()
        self.store.close()

    def subscribe(self, listener: Callable[[ServiceEvent], object]) -> None:
        self._listeners.append(listener)

    def _emit(self, event: ServiceEvent) -> None:
        if (
            isinstance(event, FoldProgress)
            and event.state is FoldState.LANDED
            and event.conversation_id == self._active_conv
            and self.settings.prewarm_after_fold
        ):
            self._prewarm_task = asyncio.get_running_loop().create_task(
                self._prewarm(event.conversation_id)
            )
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("listener failed")

    # ---- characters and conversations ----------------------------------------------------

    @property
    def persona(self) -> StoredPersona:
        """The default persona: new conversations are played as it unless another is chosen."""
        return self.personas.default()

    def cards(self) -> list[CharacterCard]:
        return list(self.library.cards)

    def setup_for(self, card: CharacterCard, persona: Persona | None = None) -> CharacterSetup:
        try:
            return self.library.setup(card, persona or self.persona)
        except CardError as exc:  # a setup past the size bounds, naming the file and field
            raise ChatError(str(exc)) from exc

    def persona_of(self, conv: StoredConversation) -> Persona:
        """Who the user plays in this conversation: the persona it was started (or imported)
        with, so a chat imported as "Ann" goes on as Ann whatever the settings say now."""
        if not conv.persona_name:
            return self.persona
        return Persona(name=conv.persona_name, description=conv.persona_description)

    def cast_of(self, conv_id: int) -> Cast:
        """Who the conversation is between: the card's display name (the stored name when the
        card is gone), and the name the user goes by in the story: what the user's latest line
        is signed with (an imported chat keeps its own name for the user), else `persona_of`."""
        conv = self.store.get_conversation(conv_id)
        user = self.persona_of(conv).name
        latest = self.store.last_message_by(conv_id, Role.USER)
        if latest is not None and latest.speaker.strip():
            user = latest.speaker.strip()
        if self.groups.is_group(conv_id):  # every member, each by the name its lines carry
            members = []
            for member in self.groups.cast(conv_id):
                card = self.library.card_of(member.character_key, member.character_name)
                members.append(card.display_name if card is not None else member.character_name)
            return Cast.group(members, user)
        card = self.library.card_of(conv.character_key, conv.character_name)
        char = card.display_name if card is not None else conv.character_name
        return Cast(char=char, user=user)

    def budgets_for(self, conv_id: int) -> Budgets:
        """The conversation's budgets for its reply length, fitted to its card's setup (the
        window's own when the card is gone)."""
        budgets, setup = self._budgets_and_setup(conv_id)
        if setup is None:
            return budgets
        return budgets.with_setup(self.prompter.setup_tokens(setup))

    async def fold_budgets(self, conv_id: int) -> Budgets:
        """`budgets_for`, the setup counted the first time without holding the event loop
        (on a server backend a count is an HTTP request): the fold worker's."""
        budgets, setup = self._budgets_and_setup(conv_id)
        if setup is None:
            return budgets
        return budgets.with_setup(await self.prompter.count_setup(setup))

    def _budgets_and_setup(self, conv_id: int) -> tuple[Budgets, str | None]:
        """The budgets for the conversation's reply length and its setup's text to fit them
        to (None: the card is gone, the window's own budgets)."""
        conv = self.store.get_conversation(conv_id)
        card = self.library.card_of(conv.character_key, conv.character_name)
        if card is None:
            return self.prompter.budgets, None
        try:
            setup = self.setup_for(card, self.persona_of(conv))
            if self.groups.is_group(conv_id):  # the cast's shared setup
                setup = self.groups.speaker(conv, self.persona_of(conv), card.key).setup
            settings = self.prompter.turn_settings(conv_id, card.key)
        except (ChatError, ChatSettingsError):
            return self.prompter.budgets, None
        return self.prompter.budgets_for(settings.reply_max_tokens), setup.system_text

    def _card(self, conv: StoredConversation) -> CharacterCard:
        card = self.library.card_of(conv.character_key, conv.character_name)
        if card is None:
            raise ChatError(
                f"conversation {conv.id} is with {conv.character_name!r}, whose card "
                f"({conv.character_key}) is not in the character folders"
            )
        return card

    def new_conversation(
        self,
        card: CharacterCard,
        *,
        greeting: int = 0,
        title: str = "",
        persona: StoredPersona | None = None,
    ) -> StoredConversation:
        """Start a conversation played as `persona` (the default one if None); the chosen
        greeting (first message or alternate) opens it, its {{user}} filled with the persona."""
        persona = persona or self.persona
        setup = self.setup_for(card, persona)
        # Checked before anything is stored: a wrong number left an empty conversation.
        if setup.greetings and not 0 <= greeting < len(setup.greetings):
            raise ChatError(
                f"{card.name} has {len(setup.greetings)} greetings; {greeting} is not one "
                f"(0 to {len(setup.greetings) - 1})"
            )
        # A file name that is not UTF-8 is stored as text (U+FFFD for its bytes): SQLite
        # takes no lone surrogate.
        where = scrub(str(card.source_path or "")).text
        self.store.upsert_character(card.key, card.name, card.card_hash, where)
        conv = self.store.create_conversation(
            Conversation(
                character_key=card.key,
                character_name=card.name,
                persona_name=persona.name,
                persona_description=persona.description,
                persona_id=persona.id,
                title=title,
            )
        )
        if setup.greetings:
            self.add_greeting(conv.id, setup, setup.greetings[greeting], listener=persona.name)
        return self.store.get_conversation(conv.id)

    def add_greeting(
        self,
        conv_id: int,
        setup: CharacterSetup,
        text: str,
        *,
        listener: str,
        character_key: str | None = None,
    ) -> None:
        """Store a greeting that opens a conversation: the character's message to `listener`
        (the persona), its segments read as the character speaking (`character_key`: which
        member of a group said it)."""
        self.store.add_message(
            Message(
                conversation_id=conv_id,
                role=Role.CHARACTER,
                speaker=setup.display_name,
                text=text,
                segments=parse_segments(text, speaker=setup.display_name, listener=listener),
                character_key=character_key,
            )
        )

    def conversations(self, character_key: str | None = None) -> list[StoredConversation]:
        return self.store.list_conversations(character_key)

    def messages(
        self, conv_id: int, limit: int = 200, before_id: int | None = None
    ) -> list[StoredMessage]:
        if before_id is None:
            return self.store.recent_messages(conv_id, limit)
        return self.store.messages_before(conv_id, before_id, limit)

    def attach_image(self, path: Path) -> str:
        """Store an image file for a message; returns its content hash."""
        return store_image(self.store, path)

    # ---- turns ----------------------------------------------------------------------------

    async def _prewarm(self, conv_id: int) -> None:
        """Evaluate the post-fold prompt now, so the turn that applies the fold is cheap."""
        try:
            conv = self.store.get_conversation(conv_id)
            persona = self.persona_of(conv)
            card, setup, group = await self.speaking(conv, persona)
            prepared = await self.prompter.preview(conv_id, card, setup, persona, group)
            if not prepared.plan.apply_landed:
                return
            result = await self.engine.prewarm(prepared.request).result()
            log.info(
                "prewarmed conversation %s: %s positions in %.0f ms",
                conv_id,
                result.metrics.evaluated,
                result.metrics.prompt_ms,
            )
        except SlotTakenError as exc:
            # The turn came before the prewarm finished and went on from where it was.
            log.info("prewarm of conversation %s taken over by the turn: %s", conv_id, exc)
        except (EngineError, ChatError, StoreError) as exc:
            log.warning("prewarm of conversation %s skipped: %s", conv_id, exc)

    async def _turn(
        self,
        conv: StoredConversation,
        kind: TurnKind,
        *,
        user_message: StoredMessage | None = None,
        target: StoredMessage | None = None,
        speaker_key: str | None = None,
    ) -> Turn:
        """Prepare the prompt and start the turn's task (the service keeps it until it ends).

        A regenerated or continued reply (`target`) and what follows it are left out of the
        prompt; a continuation starts from the reply's text. In a group, `speaker_key` (or the
        target's speaker) says who writes the reply. The turn is announced to the engine
        (engine/foreground.py): no background model step (a refold, a major fold) starts while
        its prompt is prepared, so the reply finds the cores free; not while a turn may wait
        for a fold (that needs the background steps).
        """
        hold: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self.settings.fold_quote_first:
            hold = FOREGROUND.announce_turn()
        with hold:
            ahead = self._ahead.pop(conv.id, None)
            if ahead is not None:
                # Quoting what this turn would cut is under way: this turn's plan sees it done.
                await asyncio.gather(ahead, return_exceptions=True)
            persona = self.persona_of(conv)
            self._active_conv = conv.id
            if speaker_key is None and target is not None:
                speaker_key = target.character_key
            card, setup, group = await self.speaking(conv, persona, speaker_key)
            try:
                prepared = await self.prompter.prepare(
                    conv.id,
                    card,
                    setup,
                    persona,
                    before_id=target.id if target is not None else None,
                    prefill=target.text if kind is TurnKind.CONTINUE and target is not None else "",
                    wait=None if self.settings.fold_quote_first else self._fold_waiter(conv.id),
                    carry=self._carrier(conv.id) if self.settings.fold_quote_first else None,
                    group=group,
                )
            except (SetupTooLargeError, ContinuationTooLongError) as exc:
                raise ChatError(str(exc)) from exc
            self._lore[conv.id] = prepared.lore
            self._recall[conv.id] = prepared.recall
            self._emit(TurnPrepared(conv.id, prepared.plan.apply_landed))
            for notice in prepared.notices:
                self._emit(MemoryNotice(conv.id, notice))
            for warning in [*prepared.warnings, self.semantic.notice_once()]:
                if warning:
                    self._emit(MemoryNotice(conv.id, warning, level=NoticeLevel.WARNING))
            if prepared.queued is not None:
                queued = FoldProgress(conv.id, prepared.queued, FoldState.QUEUED)
                self._emit(told(self.store, queued))
                self.worker.wake()
            turn = Turn(
                self.engine,
                self.store,
                conv,
                setup,
                prepared,
                kind=kind,
                user_name=persona.name,
                user_message=user_message,
                target=target,
                speaker_key=card.key if group is not None else None,
            )
            self._turns.add(turn)
            turn.add_done_callback(self._turns.discard)
            turn.add_done_callback(self._settle)
            turn.add_done_callback(self._after_reply)
            turn.add_done_callback(lambda _turn: self.semantic.wake())
            return turn

    async def speaking(
        self, conv: StoredConversation, persona: Persona, speaker_key: str | None = None
    ) -> tuple[CharacterCard, CharacterSetup, GroupTurn | None]:
        """Who writes the next reply: the card, its setup (in a group, over the cast's shared
        text; a group's speaker is `speaker_key`, else the first its reply order picks, else
        its first unmuted member) and the group (None: a one-card chat)."""
        if not self.groups.is_group(conv.id):
            card = self._card(conv)
            # Rendering a big setup (macros filled in, up to the card bounds) is CPU work: off
            # the event loop. The prompt is prepared asynchronously (counts and lore off-loop).
            return card, await asyncio.to_thread(self.setup_for, card, persona), None
        if speaker_key is None:
            speaker_key = self.groups.next_speaker(conv)
        found = await asyncio.to_thread(self.groups.speaker, conv, persona, speaker_key)
        return found.card, found.setup, found.group

    async def impersonate(self, conv_id: int) -> str:
        """The player's next line in the persona's voice, for the input box: never stored,
        never sent by itself (chat/impersonate.py)."""
        return await impersonate(self, conv_id)

    def quick_replies(self, conv_id: int) -> list[StoredQuickReply]:
        """The player's quick replies for this conversation: the global ones, then those of
        each card in its cast."""
        keys = [m.character_key for m in self.store.cast(conv_id)]
        return self.store.quick_replies(keys)

    def save_quick_reply(self, reply: QuickReply) -> StoredQuickReply:
        """A new quick reply (no id) or an edited one; `StoreError` names what is wrong (an
        empty label or text), and nothing is stored then."""
        if reply.id is None:
            return self.store.add_quick_reply(reply)
        return self.store.update_quick_reply(StoredQuickReply(**reply.model_dump()))

    def delete_quick_reply(self, reply_id: int) -> None:
        self.store.delete_quick_reply(reply_id)

    async def group_turn(
        self, conv: StoredConversation, speaker_key: str, *, user_message: StoredMessage | None
    ) -> Turn:
        """One group reply by `speaker_key` (chat/groups.py runs them)."""
        return await self._turn(
            conv, TurnKind.NEW, user_message=user_message, speaker_key=speaker_key
        )

    def _fold_waiter(self, conv_id: int) -> Callable[[Sequence[StoredFoldJob]], Awaitable[bool]]:
        """How one turn waits for folds: while the fold makes progress (chat/fold/wait.py),
        said while it lasts, until the user goes on without it (`go_on_without_fold`).

        Why wait rather than give the fold priority over user turns: the engine is one lock, so
        a fold that goes first makes the user wait just as long, but without being told why,
        and the turn would still be built without the chapter, since its prompt was made
        before the chapter landed. Waiting before the prompt is made lets this very turn carry
        the chapter: the messages are in the memory at once, and the wait is shown.
        """
        started = self.clock.monotonic()
        stall_s, cap_s = self.settings.fold_wait_s, self.settings.fold_wait_max_s

        async def wait(jobs: Sequence[StoredFoldJob]) -> bool:
            # The cap holds for the whole turn, however many jobs it waits for in turn.
            patience = Patience(stall_s, cap_s - (self.clock.monotonic() - started))
            if self.worker.paused or patience.stall_s <= 0 or patience.cap_s <= 0:
                return False
            ids = tuple(job.id for job in jobs)
            what = f"waiting for {_jobs_said(jobs, job_numbers(self.store, conv_id, jobs))}"
            self._emit(FoldWait(conv_id, ids, f"{what} {WAIT_WHY}"))
            go_on = self._fold_waits[conv_id] = asyncio.Event()

            def progress(done: WaitProgress) -> None:
                self._emit(FoldWait(conv_id, ids, what, progress=done.said()))

            try:
                end = await self.worker.wait_for(ids, patience, go_on=go_on, on_progress=progress)
            finally:
                if self._fold_waits.get(conv_id) is go_on:
                    del self._fold_waits[conv_id]
            said = f"waiting for the memory: {patience.said(end)}"
            self._emit(FoldWait(conv_id, ids, said, done=True))
            return end is WaitEnd.DONE

        return wait

    def _carrier(self, conv_id: int) -> Carry:
        """How one turn carries what it would cut without waiting (chat/fold/quote_first.py):
        the chapter jobs quoted now (a running one stops once its quote is stored; one the
        worker landed meanwhile is left as it landed), the oldest chapters quoted into the
        synopsis when the memory is too large; said as notices."""
        ctx = self.worker.context

        async def chapters(jobs: Sequence[StoredFoldJob]) -> bool:
            try:
                quoted = await quote_chapter_jobs(ctx, jobs)
            except (FoldFailed, EngineError, StoreError) as exc:
                log.warning("conversation %s: the cut range was not quoted: %s", conv_id, exc)
                return False
            # The jobs the quote made done stop (a running one's chronicler call would only
            # write what the refold after the quote writes): the worker sees them done and
            # neither releases nor runs them again. Never a job the worker landed meanwhile:
            # it may still be queueing what follows its chapter, and says that it landed.
            self.worker.stop_jobs(quoted.done)
            stored = quoted.chapters
            if stored:
                # Numbered as a chapter's range is (its first may be no message of this chat).
                first, last = stored[0].first_message_id, stored[-1].last_message_id
                numbers = self.store.message_numbers(conv_id, range_ends(first, last))
                span = chapter_span(range_numbers(first, last, numbers))
                self._emit(
                    MemoryNotice(
                        conv_id,
                        f"messages {span} are quoted in the memory for now; the "
                        "chronicler's chapters replace the quotes in the background",
                    )
                )
                self.worker.wake()
            # A job that landed meanwhile is progress too: the rest of its range, queued with
            # its chapter, is quoted in the next round.
            return bool(stored or quoted.landed)

        async def major(conv: int) -> bool:
            try:
                done = await quote_major_fold(ctx, conv)
            except (FoldFailed, EngineError, StoreError) as exc:
                log.warning("conversation %s: the synopsis was not quoted: %s", conv, exc)
                return False
            if done:
                self._emit(
                    MemoryNotice(
                        conv,
                        "the oldest chapters are quoted in the synopsis for now; the chronicler "
                        "rewrites it in the background",
                    )
                )
                self.worker.wake()
            return done

        return Carry(chapters, major)

    def _after_reply(self, turn: Turn) -> None:
        """Once a reply is stored, carry what the next turn would cut (quote first), so the
        prompt that carries it is prewarmed while the player reads and types."""
        done = turn.done
        if done is None or done.reply is None or self._closing:
            return
        self._start_look_ahead(turn.conv.id)

    def _start_look_ahead(self, conv_id: int, *, stand_in: bool = True) -> None:
        if not self.settings.fold_quote_first:
            return
        previous = self._ahead.get(conv_id)  # one look-ahead at a time per conversation
        task = asyncio.get_running_loop().create_task(
            self._look_ahead(conv_id, previous, stand_in=stand_in),
            name=f"kotonia-look-ahead {conv_id}",
        )
        self._ahead[conv_id] = task
        self._state_tasks.add(task)
        task.add_done_callback(self._state_tasks.discard)

    async def looked_ahead(self) -> None:
        """Wait until the look-ahead after the replies so far has run, and the prewarm it
        started (tests, benchmarks: the player reading the reply; settles may still wait
        behind a fold)."""
        while self._ahead:
            await asyncio.gather(*self._ahead.values(), return_exceptions=True)
        while self._prewarm_task is not None and not self._prewarm_task.done():
            await asyncio.gather(self._prewarm_task, return_exceptions=True)

    async def _look_ahead(
        self, conv_id: int, after: asyncio.Task[None] | None = None, *, stand_in: bool = True
    ) -> None:
        """Plan the next turn with a stand-in for the player's message (Prompter.carry_ahead);
        when it would cut, quote now what it cuts and prewarm the prompt that carries it."""
        if after is not None:
            await asyncio.gather(after, return_exceptions=True)
        try:
            conv = self.store.get_conversation(conv_id)
            persona = self.persona_of(conv)
            card, setup, group = await self.speaking(conv, persona)
            carried = await self.prompter.carry_ahead(
                conv_id, card, setup, persona, self._carrier(conv_id), group, stand_in=stand_in
            )
        except (ChatError, StoreError, EngineError, SetupTooLargeError) as exc:
            log.info("conversation %s: the next turn was not looked ahead at: %s", conv_id, exc)
            return
        finally:
            if self._ahead.get(conv_id) is asyncio.current_task():
                del self._ahead[conv_id]
        if carried and self.settings.prewarm_after_fold and conv_id == self._active_conv:
            self._prewarm_task = asyncio.get_running_loop().create_task(self._prewarm(conv_id))

    def go_on_without_fold(self, conv_id: int) -> bool:
        """The turn of `conv_id` that waits for a fold goes on at once, without it (the fold
        goes on in the background and lands on a later turn). False when none waits."""
        go_on = self._fold_waits.get(conv_id)
        if go_on is None:
            return False
        go_on.set()
        return True

    # ---- saved KV states ------------------------------------------------------------------

    def _settle(self, turn: Turn) -> None:
        """After a reply is stored: the engine keeps the history, reply included, ready for
        the next turn and saves it, so a restart resumes warm (engine/resume.py)."""
        done, call = turn.done, turn.call
        if done is None or done.reply is None or call is None:
            return
        if turn.prepared.request.state is None:
            return
        reply, prepared = done.reply, turn.prepared
        line = PromptLine(reply.role, reply.speaker, reply.text)
        request = replace(
            prepared.request,
            messages=history_for_next_turn(prepared.layout, prompt_message(line)),
            prefill="",
        )
        self._in_background(self.engine.settle(request, call), f"settle {turn.conv.id}")

    async def open_conversation(self, conv_id: int) -> None:
        """Load the conversation's saved KV state in the background while the user reads and
        types, so its first turn evaluates only the new message."""
        self._active_conv = conv_id
        try:
            conv = self.store.get_conversation(conv_id)
            persona = self.persona_of(conv)
            card, setup, group = await self.speaking(conv, persona)
            prepared = await self.prompter.preview(conv_id, card, setup, persona, group)
        except (ChatError, StoreError, SetupTooLargeError, EngineError) as exc:
            log.info("conversation %s opened cold: %s", conv_id, exc)
            return
        # The saved state holds the history as the next turn starts it (see `_settle`).
        history = history_for_next_turn(prepared.layout)
        request = replace(prepared.request, messages=history)
        self._in_background(self.engine.restore(request), f"restore {conv_id}")
        # A long import (or a window made smaller) cuts at its first turn: that is quoted now
        # and its prompt prewarmed while the player writes. Only what the history cuts as it
        # is: a guess at the player's message would change a prompt a saved state holds.
        self._start_look_ahead(conv_id, stand_in=False)

    async def states_settled(self) -> None:
        """Wait until the settles and restores asked for so far have run (tests, benchmarks:
        the moment a person would be reading the reply)."""
        while self._state_tasks:
            await asyncio.gather(*self._state_tasks, return_exceptions=True)

    def _in_background(self, call: Call, what: str) -> None:
        async def wait() -> None:
            try:
                await call.result()
            except EngineError as exc:
                log.warning("%s: %s", what, exc)

        task = asyncio.get_running_loop().create_task(wait(), name=f"kotonia-{what}")
        self._state_tasks.add(task)
        task.add_done_callback(self._state_tasks.discard)

    async def send(
        self, conv_id: int, text: str, images: Sequence[str] = (), speaker: str | None = None
    ) -> Turn:
        """Store the user's message, then return the turn that generates the reply (in a
        group: `speaker`'s, or the first the reply order picks; `groups.send` gives them all)."""
        conv = self.store.get_conversation(conv_id)
        if (
            speaker is None
            and self.groups.is_group(conv_id)
            and self.store.reply_order(conv_id) is ReplyOrder.MANUAL
        ):
            raise ChatError(
                "this group answers in manual order: pick who answers (nothing was sent)"
            )
        user = self.store_user_message(conv, text, images)
        return await self._turn(conv, TurnKind.NEW, user_message=user, speaker_key=speaker)

    def store_user_message(
        self, conv: StoredConversation, text: str, images: Sequence[str] = ()
    ) -> StoredMessage:
        """The player's message, stored before anything else of its turn."""
        if not text.strip() and not images:
            raise ChatError("an empty message was not sent")
        user_name = self.persona_of(conv).name
        return self.store.add_message(
            Message(
                conversation_id=conv.id,
                role=Role.USER,
                speaker=user_name,
                text=text,
                images=list(images),
                segments=parse_segments(text, speaker=user_name, listener=conv.character_name),
            )
        )

    async def answer(self, conv_id: int) -> Turn:
        """The character's reply to the last message, when that message is not the
        character's: a reply stopped before its first word, or a chat imported ending with
        the user. Regenerate and continue come here in that case."""
        conv = self.store.get_conversation(conv_id)
        last = self.store.last_message(conv_id)
        if last is not None and last.role is Role.CHARACTER:
            raise ChatError("the last message is the character's: there is nothing to answer")
        return await self._turn(conv, TurnKind.NEW)

    async def regenerate(self, conv_id: int) -> Turn:
        """A new version of the last reply; the old versions stay to page through."""
        conv = self.store.get_conversation(conv_id)
        last = self.store.last_message(conv_id)
        if last is None:
            raise ChatError("there is no reply to regenerate: the conversation has no messages")
        if last.role is not Role.CHARACTER:
            return await self.answer(conv_id)
        return await self._turn(conv, TurnKind.REGENERATE, target=last)

    async def continue_reply(self, conv_id: int) -> Turn:
        """Carry on writing the last reply from where it stopped."""
        conv = self.store.get_conversation(conv_id)
        last = self.store.last_message(conv_id)
        if last is None:
            raise ChatError("there is no reply to continue: the conversation has no messages")
        if last.role is not Role.CHARACTER:
            return await self.answer(conv_id)
        return await self._turn(conv, TurnKind.CONTINUE, target=last)

    # ---- edits ----------------------------------------------------------------------------

    def choose_alternative(self, message_id: int, index: int) -> StoredMessage:
        message = self.store.get_message(message_id)
        if not 0 <= index < max(1, len(message.alternatives)):
            conv_id = message.conversation_id
            number = self.store.message_numbers(conv_id, [message_id]).get(message_id)
            raise ChatError(f"message #{number} has no version {index + 1}")
        updated = self.store.choose_alternative(message_id, index)
        self._refold_if_folded(updated)
        return updated

    def edit_message(self, message_id: int, text: str) -> StoredMessage:
        message = self.store.get_message(message_id)
        speaker = message.speaker
        conv = self.store.get_conversation(message.conversation_id)
        listener = conv.character_name if message.role is Role.USER else self.persona_of(conv).name
        updated = self.store.update_message_text(
            message_id, text, parse_segments(text, speaker=speaker, listener=listener)
        )
        self._refold_if_folded(updated)
        return updated

    def delete_message(self, message_id: int) -> None:
        """Delete a message (undo brings it back this session); a chapter covering it is
        folded again without it."""
        message = self.store.get_message(message_id)
        conv_id = message.conversation_id
        # The refold is stored before the message goes (if the deletion fails, the message
        # stays and its range is folded again as it is: nothing is lost), and told after it,
        # so it is named by the numbers the chat shows once the message is gone.
        queued = self._queue_refolds(message)
        self.store.delete_message(message_id)
        self._deleted.append(message)
        self.worker.renumber(conv_id)
        self._tell_refolds(conv_id, queued)

    def can_undo_delete(self, conv_id: int) -> bool:
        return any(m.conversation_id == conv_id for m in self._deleted)

    def undo_delete_message(self, conv_id: int) -> StoredMessage | None:
        """The conversation's message deleted last, back in its place (None: none to undo);
        a chapter covering it is folded again with it."""
        for index in range(len(self._deleted) - 1, -1, -1):
            if self._deleted[index].conversation_id == conv_id:
                restored = self.store.restore_message(self._deleted.pop(index))
                self.worker.renumber(conv_id)
                self._refold_if_folded(restored)
                return restored
        return None

    def _refold_if_folded(self, message: StoredMessage) -> None:
        """An edit inside a folded range marks its chapter stale and re-folds that range only;
        the refold is prewarmed when it lands (the user is in this conversation)."""
        self._tell_refolds(message.conversation_id, self._queue_refolds(message))

    def _queue_refolds(self, message: StoredMessage) -> list[StoredFoldJob]:
        """Mark the chapters whose range holds `message` stale and queue a refold of each range
        (stored, not yet told: `_tell_refolds`); the refolds queued."""
        conv_id = message.conversation_id
        self._active_conv = conv_id
        self.semantic.wake()  # the changed text needs a new vector
        queued = []
        for chapter_id in self.store.mark_chapters_stale(conv_id, message.id):
            chapter = self.store.get_chapter(chapter_id)
            queued.append(
                self.store.enqueue_fold(
                    FoldJob(
                        conversation_id=conv_id,
                        kind=FoldKind.REFOLD,
                        first_message_id=chapter.first_message_id,
                        last_message_id=chapter.last_message_id,
                        not_before=self.clock.now(),
                    )
                )
            )
        return queued

    def _tell_refolds(self, conv_id: int, queued: Sequence[StoredFoldJob]) -> None:
        """Say that the refolds `queued` are queued, each named by its range as the chat numbers
        the messages now (chat/numbering.py `told`), and wake the worker for them."""
        for job in queued:
            event = FoldProgress(conv_id, job, FoldState.QUEUED, "an edit inside a folded chapter")
            self._emit(told(self.store, event))
        if queued:
            self.worker.wake()

    # ---- inspection -----------------------------------------------------------------------

    def open_folds(self, conv_id: int) -> list[StoredFoldJob]:
        return self.store.fold_jobs(conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING))

    def memory_view(self, conv_id: int) -> MemoryView:
        """The memory inspector's picture of a conversation (bounded reads, like a turn)."""
        conv = self.store.get_conversation(conv_id)
        prompter = self.prompter
        # The memory's rows, the synopsis versions and the fold jobs in one read: a fold that
        # lands meanwhile (its chapter, its ledger and its job done, in one transaction) is
        # shown whole or not yet, never a refolded chapter beside the ledger it ended.
        rows = self.store.memory_rows(
            conv_id,
            versions=True,
            jobs=(FoldStatus.PENDING, FoldStatus.RUNNING, FoldStatus.FAILED),
        )
        snapshot = prompter.snapshot(rows)
        state = snapshot.state
        versions = rows.versions
        applied_synopsis = next(
            (s for s in versions if s.id == state.applied_synopsis_id), None
        ) or (versions[-1] if versions else None)
        chapters = list(snapshot.chapters)
        applied_id = state.applied_chapter_id or 0
        window = self.store.messages_from(
            conv_id,
            state.verbatim_start_id or 0,
            MAX_WINDOW_MESSAGES,
            model_key=self.engine.model_key,
        )
        verbatim_tokens = sum(prompter.message_tokens(m) for m in window)
        settings: TurnSettings | None = None
        setup_tokens = note_tokens = post_history_tokens = 0
        character_notes: tuple[tuple[DepthNote, int], ...] = ()
        budgets = prompter.budgets
        name = conv.character_name
        try:
            card = self._card(conv)
            setup = self.setup_for(card, self.persona_of(conv))
            if self.groups.is_group(conv_id):
                # The cast's shared setup and the Character's Notes as the next turn carries
                # them: its speaker's (a muted member's note only when it is the one who answers),
                # picked as that turn picks it, without drawing for it.
                key = self.groups.next_speaker(conv, peek=True)
                found = self.groups.speaker(conv, self.persona_of(conv), key)
                card, setup = found.card, found.setup
            setup_tokens = prompter.setup_tokens(setup.system_text)
            name = setup.display_name
            settings = prompter.turn_settings(conv_id, card.key)
            budgets = prompter.budgets_for(settings.reply_max_tokens)
            note_tokens, post_history_tokens = (
                self.engine.count_tokens(text) if text else 0
                for text in (settings.author_note, setup.post_history)
            )
            character_notes = tuple(
                (note, self.engine.count_tokens(note.text)) for note in setup.character_notes
            )
        except ChatError:
            pass
        budgets = budgets.with_setup(setup_tokens)
        jobs = rows.jobs
        running = self.worker.running
        if running is not None and running.job.conversation_id != conv_id:
            running = None
        ledger = list(snapshot.ledger)
        left_out = snapshot.left_out()
        # Shown as the chat numbers messages: the texts' references and the ranges alike (the
        # rows' id fields stay ids; `MemoryView.number` shows them). The ledger's evidence is
        # read with them: only messages still stored are numbered, so a deleted one is said in
        # words (`MemoryView.evidence`), never by the number of the message before it.
        evidence = {i for e in ledger for i in e.evidence}
        shown = numbering(
            self.store, conv_id, row_texts(versions, chapters, ledger, jobs), evidence
        )
        versions = [shown.synopsis(s) for s in versions]
        applied_synopsis = next(
            (s for s in versions if applied_synopsis and s.id == applied_synopsis.id), None
        )
        chapters = [shown.chapter(c) for c in chapters]
        ledger = [shown.entry(e) for e in ledger]
        jobs = [shown.job(j) for j in jobs]
        # The chapters the ledger names, by their ranges, as the listed ones are: those are in
        # hand; a refolded one, or one in the synopsis, is read (by id, bounded by the ledger).
        ranges = {c.id: (c.first_message_id, c.last_message_id) for c in chapters}
        named = {i for e in ledger for i in (e.chapter_id, e.ended_by_chapter_id) if i is not None}
        ranges |= self.store.chapter_ranges(conv_id, named - ranges.keys())
        mentioned = [
            # What names the chapters' ranges (`MemoryView.chapter_span`): as a job's, the
            # message before each first (a first deleted since is no message to look up).
            *(i for span in ranges.values() for i in range_ends(*span)),
            state.forced_cut_through_id,
            window[0].id if window else None,
            applied_synopsis.through_message_id if applied_synopsis else None,
            *(s.through_message_id for s in versions),
            # What names the jobs' ranges, the running one's too (`MemoryView.job_label`).
            *(
                i
                for j in [*jobs, *([running.job] if running else [])]
                if (ends := job_ends(j)) is not None
                for i in ends
            ),
        ]
        numbers = self.store.message_numbers(conv_id, [i for i in mentioned if i is not None])
        return MemoryView(
            conversation_id=conv_id,
            synopsis=applied_synopsis,
            synopsis_versions=versions,
            chapters=[ChapterView(c, (c.id or 0) <= applied_id) for c in chapters],
            verbatim_start_id=state.verbatim_start_id,
            verbatim_first=window[0] if window else None,
            verbatim_messages=len(window),
            verbatim_tokens=verbatim_tokens,
            budget=BudgetBar(
                n_ctx=budgets.n_ctx,
                setup=setup_tokens,
                memory=state.memory_tokens,
                verbatim=verbatim_tokens,
                reply_reserve=budgets.reply_reserve,
                trigger=budgets.trigger,
                ceiling=budgets.ceiling,
            ),
            budgets=budgets,
            fold_jobs=jobs,
            running=running,
            last_metrics=self.store.last_turn_metrics(conv_id),
            forced_cut_through_id=state.forced_cut_through_id,
            pending_apply=snapshot.pending,
            forced_cuts=state.forced_cuts,
            room_note=budgets.room_note(name),
            numbers=numbers,
            chapter_numbers=chapter_numbers(ranges, numbers),
            cited={i: n for i, n in shown.numbers.items() if i in evidence},
            ledger=ledger,
            ledger_in_prompt=snapshot.in_prompt,
            ledger_left_out=frozenset(
                i for i, why in left_out.items() if why is LeftOut.OVER_SHARE
            ),
            settings=settings,
            note_tokens=note_tokens,
            character_notes=character_notes,
            post_history_tokens=post_history_tokens,
            lore=self._lore.get(conv_id),
            recall=self._recall.get(conv_id),
            recall_by=self.semantic.matches_by,
        )

    def ledger_evidence(self, entry: StoredLedgerEntry) -> list[StoredMessage]:
        """The messages a ledger entry rests on (for the inspector's Ledger section); a deleted
        message is left out."""
        found = []
        for message_id in entry.evidence:
            with contextlib.suppress(NotFoundError):
                found.append(self.store.get_message(message_id))
        return found

    # ---- settings over the profile (a character's, a conversation's) ------------------------

    def settings_view(self, conv_id: int) -> SettingsView:
        conv = self.store.get_conversation(conv_id)
        card = self._card(conv)
        character = self.store.character_settings(card.key)
        conversation = self.store.conversation_settings(conv_id)
        return SettingsView(
            conversation_id=conv_id,
            character_key=card.key,
            character_name=card.display_name,
            character=character,
            conversation=conversation,
            effective=resolve(
                self.engine.profile,
                character,
                conversation,
                lore_budget=self.prompter.budgets.lore,
            ),
            profile_name=self.settings.profile,
            n_ctx=self.engine.n_ctx,
            world_files=self.prompter.world_info.names(),
            world_folder=str(self.prompter.world_info.folder),
        )

    def save_settings(
        self, conv_id: int, character: ChatSettings, conversation: ChatSettings
    ) -> TurnSettings:
        """Store both layers when the turn they make can run (`ChatSettingsError` otherwise,
        naming the field; nothing is stored then). The next turn uses them."""
        view = self.settings_view(conv_id)
        effective = validated(
            self.engine.profile,
            character,
            conversation,
            n_ctx=self.engine.n_ctx,
            lore_budget=self.prompter.budgets.lore,
            world_info=self.prompter.world_info,
        )
        self.store.set_character_settings(view.character_key, character)
        self.store.set_conversation_settings(conv_id, conversation)
        return effective

    def chapter_source(self, chapter_id: int) -> list[StoredMessage]:
        """The messages a chapter summarizes (for the inspector's chapter view)."""
        chapter = self.store.get_chapter(chapter_id)
        return self.store.messages_between(
            chapter.conversation_id, chapter.first_message_id, chapter.last_message_id
        )
