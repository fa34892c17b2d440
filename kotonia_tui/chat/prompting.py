"""Building one turn's prompt from bounded reads: the memory state, the window, the landed memory.

Reads per turn do not grow with the conversation: the memory state row, the live chapters
(bounded by the major GC), the current synopsis, the open fold jobs, and the newest messages
up to a fixed LIMIT. Token counts are exact, from the model's tokenizer, cached per message.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from kotonia_tui.characters import CharacterCard, CharacterSetup
from kotonia_tui.characters.macros import MacroLimitError, apply_macros
from kotonia_tui.chat.chat_settings import TurnSettings, resolve
from kotonia_tui.chat.derived_copies import conversation_state_name, setup_owner
from kotonia_tui.chat.fold.wait import SYSTEM_CLOCK, Clock
from kotonia_tui.chat.lore import LoreMatcher, LoreTurn, WorldInfoFolder
from kotonia_tui.chat.memory_snapshot import (
    LandedMemory,
    MemorySnapshot,
    landed_memory,
    snapshot_of,
)
from kotonia_tui.chat.numbering import Numbering, numbering
from kotonia_tui.chat.recall import Recaller
from kotonia_tui.chat.semantic import SemanticRecall
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.domain import (
    ChatMessage,
    DepthNote,
    FoldJob,
    FoldKind,
    FoldStatus,
    ImageInput,
    Message,
    Persona,
    Role,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredMessage,
)
from kotonia_tui.engine import Engine, GenerationRequest, StateRef
from kotonia_tui.memory.assembly import (
    MEMORY_ACK,
    MEMORY_TITLE,
    History,
    PromptLine,
    build_history,
    in_prompt,
    line_cost_text,
    shared_setup_messages,
    split_notes,
    with_notes,
)
from kotonia_tui.memory.budgets import Budgets, recall_takes_room
from kotonia_tui.memory.ledger import LedgerFit, fit_ledger
from kotonia_tui.memory.lookahead import expected_next_tokens, with_next_message
from kotonia_tui.memory.policy import TurnInputs, TurnPlan, WindowMessage, plan_turn
from kotonia_tui.memory.recall import NO_RECALL, RECALL_STOPS, Recall, recall_query
from kotonia_tui.store import Store
from kotonia_tui.store.records import MemoryRows, MemoryState

log = logging.getLogger(__name__)

# Upper bound on rows read for the verbatim window. The window is kept under the ceiling in
# tokens, so this is only reached by a backlog (a conversation moved from a wide window to a
# narrow one); what lies beyond it leaves the prompt as a forced cut and is folded later.
MAX_WINDOW_MESSAGES = 3000
# Texts whose counts a prompter keeps (setups; memory blocks as read, one or two a conversation
# open in a session): past it the cache starts again, a text is then counted once more.
COUNTS_KEPT = 16


def _remember(counts: dict[str, int], text: str, count: int) -> int:
    """`count` kept for `text` in `counts`, which never holds more than COUNTS_KEPT texts."""
    if len(counts) >= COUNTS_KEPT:
        counts.clear()
    counts[text] = count
    return count


# Steps a turn takes to carry what it would cut by code only (chapters quoted, then the oldest
# of them quoted into the synopsis, as often as the memory still does not fit).
CARRY_ROUNDS = 8


# Below this a continuation would be cut again at once: better to say so.
MIN_CONTINUATION_TOKENS = 16


class SetupTooLargeError(Exception):
    """The character setup alone (nearly) fills the context window."""


class ContinuationTooLongError(Exception):
    """The reply to continue leaves (almost) no room in the window for more."""


@dataclass(frozen=True)
class GroupTurn:
    """A group reply (issue 31): the cast's names in its order. The setup's name is the one
    who speaks; the shared setup holds the whole cast (characters/group_setup.py)."""

    names: tuple[str, ...]

    def stops(self, speaker: str) -> tuple[str, ...]:
        """A reply ends where the model starts another member's line."""
        return tuple(f"\n{name}:" for name in self.names if name != speaker)


def speaker_note(speaker: str) -> str:
    """Names who answers, after the history: only these tokens differ between speakers."""
    return f"[{speaker} answers next.]"


@dataclass(frozen=True)
class TurnRead:
    """What one turn reads (bounded reads, no writes): the plan and the prompt come from it."""

    conv_id: int
    # As stored, its memory block counted as this turn reads it (`read`): `recounted` when
    # that count is not the stored one, which the turn then stores.
    state: MemoryState
    window: list[StoredMessage]  # from where the verbatim window starts, before `before_id`
    counts: list[WindowMessage]  # their exact token costs
    landed: LandedMemory
    landed_pending: bool  # landed memory the prompt does not carry yet
    # That memory as stored would carry it, and its tokens as sent ("" and 0 when none is
    # pending): counted in `read`, off the event loop (a server backend's count is a request).
    landed_text: str
    landed_tokens: int
    # The numbers of the messages the stored and the landed memory cite: the prompt carries
    # them instead of store ids (chat/numbering.py).
    numbering: Numbering
    open_through: int  # the newest message an open chapter job covers (0: none)
    fold_in_flight: bool
    open_jobs: list[StoredFoldJob]  # the conversation's pending and running fold jobs
    notes: str  # lore, depth-0 system notes, post-history instructions: after the history
    lore: LoreTurn  # which entries fired, on which keys, and which the budget left out
    # The Author's Note and the card's Character's Note when the history holds them (depth > 0,
    # or a card's user or assistant note at depth 0), in that order.
    depth_notes: tuple[DepthNote, ...]
    settings: TurnSettings  # the profile's, the character's and the conversation's
    budgets: Budgets  # for this turn's reply length
    portrait: ImageInput | None
    recall_budget: int  # tokens kept for recalled excerpts (0: recall is off)
    fixed_tokens: int  # setup, notes, the note, picture, recall budget: never folded
    notices: list[str]
    warnings: list[str]  # said as warnings (a lorebook key turned off)
    group: GroupTurn | None = None  # a group reply: who else may speak
    recounted: bool = False


@dataclass(frozen=True)
class TurnDecision:
    """The fold policy's plan for the turn and what follows from it."""

    plan: TurnPlan
    state: MemoryState  # the memory state the prompt is built on (stored by `commit`)
    fold: FoldJob | None  # a chapter job to queue (queued by `commit`)
    notices: list[str]
    # Open fold jobs worth waiting for before this turn is built: without them messages leave
    # the prompt at the ceiling (or already left it) and are in neither prompt nor memory.
    wait_for: tuple[StoredFoldJob, ...] = ()


@dataclass(frozen=True)
class Carry:
    """How a turn carries what it would cut by code only (chat/fold/quote_first.py): `chapters`
    quotes chapter jobs now, `major(conv_id)` quotes the oldest chapters into the synopsis;
    each says whether the memory moved on: it stored something, or (`chapters`) a job the
    worker landed meanwhile was left as it landed (the rest of its range may be open now)."""

    chapters: Callable[[Sequence[StoredFoldJob]], Awaitable[bool]]
    major: Callable[[int], Awaitable[bool]]


@dataclass(frozen=True)
class PreparedTurn:
    request: GenerationRequest
    layout: History  # the request's messages without this turn's notes, in parts
    plan: TurnPlan
    state: MemoryState
    window: list[StoredMessage]  # the messages the prompt carries verbatim
    notices: list[str]
    warnings: list[str]  # said as warnings (a lorebook key turned off)
    fixed_tokens: int
    queued: StoredFoldJob | None  # the chapter job this turn queued (never for a preview)
    lore: LoreTurn
    recall: Recall = NO_RECALL  # what the turn recalled from the archive (none for a preview)
    fold_wait_ms: float = 0.0  # how long the turn waited for a fold before it was built

    @property
    def history(self) -> tuple[ChatMessage, ...]:
        """The request's messages without this turn's notes."""
        return self.layout.messages


def memory_count_text(text: str) -> str:
    """What a memory block costs in the prompt: its text and the reply that acknowledges it."""
    return f"{text}\n{MEMORY_ACK}"


def memory_tokens(engine: Engine, text: str) -> int:
    return engine.count_tokens(memory_count_text(text)) if text else 0


def _in_backoff(job: StoredFoldJob) -> bool:
    """The job's last attempt failed and it waits for its retry (a running job is not)."""
    return job.status is not FoldStatus.RUNNING and job.last_error is not None


def _fold_in_flight(chapter_jobs: Sequence[StoredFoldJob]) -> bool:
    """Whether an open chapter job holds back the trigger. One job in its failure backoff does
    not: the next range is queued after it, or each later fold waits for the ceiling and
    begins as a forced cut (docs/decisions.md D-12). Two do:
    a chronicler failing range after range would only fail more jobs, and hold turns."""
    failing = sum(1 for job in chapter_jobs if _in_backoff(job))
    return failing > 1 or failing < len(chapter_jobs)


class Prompter:
    """Prepares turns for one model: budgets, token counts, the fold policy, assembly."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        settings: Settings,
        semantic: SemanticRecall | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.clock = clock  # fold delays and the time a turn waited for folds go by it
        self.engine = engine
        self.settings = settings
        # The profile's budgets; a turn uses its own (a character or a conversation may set
        # another reply length, which is the reply reserve in every budget).
        self.budgets = self.budgets_for(engine.profile.reply_max_tokens)
        self.world_info = WorldInfoFolder(settings.world_info_folder(app_dirs()))
        self.lore = LoreMatcher(self.world_info, engine.count_tokens)
        self.recaller = Recaller(store, engine, semantic)
        self._setup_tokens: dict[str, int] = {}  # a setup is counted once, not every turn
        self._memory_tokens: dict[str, int] = {}  # so is a memory block as it is read

    def state_ref(
        self, conv_id: int, portrait: ImageInput | None, card_key: str, persona_name: str
    ) -> StateRef:
        """Which saved KV state a conversation's turns continue (see engine/resume.py), named
        so that deleting the conversation, the persona or the card finds it
        (derived_copies.py)."""
        return StateRef(
            name=conversation_state_name(self.store.path, conv_id),
            shared_messages=shared_setup_messages(portrait),
            setup_owner=setup_owner(card_key, persona_name),
        )

    def budgets_for(self, reply_max_tokens: int) -> Budgets:
        return Budgets.for_window(self.engine.n_ctx, reply_max_tokens, self.settings)

    def turn_settings(self, conv_id: int, character_key: str) -> TurnSettings:
        """The profile's settings under the character's and the conversation's (two rows)."""
        return resolve(
            self.engine.profile,
            self.store.character_settings(character_key),
            self.store.conversation_settings(conv_id),
            lore_budget=self.budgets.lore,
        )

    def setup_tokens(self, system_text: str) -> int:
        """Tokens of a character setup (up to a million characters: worth remembering)."""
        count = self._setup_tokens.get(system_text)
        if count is None:
            count = _remember(
                self._setup_tokens, system_text, self.engine.count_tokens(system_text)
            )
        return count

    async def count_setup(self, system_text: str) -> int:
        """`setup_tokens`, counted the first time without holding the event loop."""
        count = self._setup_tokens.get(system_text)
        if count is None:
            (counted,) = await self.engine.count_tokens_many([system_text])
            count = _remember(self._setup_tokens, system_text, counted)
        return count

    async def count_memory(self, text: str) -> int:
        """What the memory block `text` (as read: numbered) costs in the prompt
        (`memory_count_text`), counted the first time it is seen without holding the event
        loop; a turn whose memory reads as the last one's counts nothing."""
        count = self._memory_tokens.get(text)
        if count is None:
            (counted,) = await self.engine.count_tokens_many([memory_count_text(text)])
            count = _remember(self._memory_tokens, text, counted)
        return count

    # ---- token counts -------------------------------------------------------------------

    def message_tokens(self, message: Message) -> int:
        if not in_prompt(message.role):
            return 0  # left out of the prompt (a count cached before it was is not used)
        cached = message.token_counts.get(self.engine.model_key)
        if cached is not None:
            return cached
        return self._keep_count(message, self.engine.count_tokens(_cost_text(message)))

    async def count_messages(self, messages: Sequence[Message]) -> list[int]:
        """`message_tokens` of each; the uncounted ones are counted in one batch that does not
        block the event loop (a server backend counts them with concurrent requests)."""
        key = self.engine.model_key
        todo = [m for m in messages if key not in m.token_counts and in_prompt(m.role)]
        counts = await self.engine.count_tokens_many([_cost_text(m) for m in todo])
        for message, count in zip(todo, counts, strict=True):
            self._keep_count(message, count)
        return [m.token_counts[key] if in_prompt(m.role) else 0 for m in messages]

    def _keep_count(self, message: Message, text_tokens: int) -> int:
        """The message's count (images included), cached on the row for this model."""
        key = self.engine.model_key
        count = text_tokens
        if self.engine.has_vision:
            count += sum(self.engine.image_cells(image) for image in self.images_of(message))
        if message.id is not None:
            self.store.set_token_count(message.id, key, count)
        message.token_counts[key] = count
        return count

    def images_of(self, message: Message) -> tuple[ImageInput, ...]:
        images = []
        for digest in message.images:
            data, mime = self.store.get_image(digest)
            images.append(ImageInput(data=data, key=digest, mime=mime))
        return tuple(images)

    def portrait(self, card: CharacterCard) -> ImageInput | None:
        if not self.engine.has_vision or card.image is None:
            return None
        digest = hashlib.sha256(card.image.data).hexdigest()
        return ImageInput(data=card.image.data, key=digest, mime=card.image.mime)

    # ---- memory ---------------------------------------------------------------------------

    def fit_ledger(self, live: Sequence[StoredLedgerEntry]) -> LedgerFit:
        """The live ledger fitted to its share of the window, counted by the model."""
        return fit_ledger(live, self.budgets.ledger, self.engine.count_tokens)

    def snapshot(self, rows: MemoryRows) -> MemorySnapshot:
        """The memory of `rows` (`Store.memory_rows`) now and as the next turn carries it
        (counted here, on the caller's thread, only when landed memory must be fitted)."""
        return snapshot_of(rows, self.fit_ledger)

    async def fitted_ledger(self, live: Sequence[StoredLedgerEntry]) -> LedgerFit:
        """The live entries `live` fitted to their share of the window, counted off the event
        loop (a server backend's count is a request)."""
        if not live:
            return LedgerFit((), ())
        return await asyncio.to_thread(self.fit_ledger, live)

    # ---- the turn: read -> plan -> commit -> assemble -------------------------------------

    async def prepare(
        self,
        conv_id: int,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        *,
        before_id: int | None = None,
        prefill: str = "",
        wait: Callable[[Sequence[StoredFoldJob]], Awaitable[bool]] | None = None,
        group: GroupTurn | None = None,
        carry: Carry | None = None,
    ) -> PreparedTurn:
        """The prompt for the next reply, with the memory state saved and folds queued.

        `before_id`: leave that message and later ones out (a regenerated or continued reply);
        `prefill`: the text a continued reply goes on from; `wait(jobs)`: called (and awaited)
        when the turn should wait for those fold jobs first; the plan is made again after it,
        and waited again for the jobs that fold has queued (the rest of a range too large for
        one call) as long as `wait` says the jobs finished (it bounds the time); `group`: a
        group reply, `card` and `setup` the speaker's (`setup` over the group's shared text);
        `carry`: what the turn would cut is quoted at once instead (chat/fold/quote_first.py),
        and the plan made again; the turn never waits for the chronicler then.
        """
        read = await self.read(conv_id, card, setup, persona, before_id=before_id, group=group)
        decision = self.plan(read, queue_by_trigger=before_id is None)
        if carry is not None:

            async def again() -> tuple[TurnRead, TurnDecision]:
                read = await self.read(
                    conv_id, card, setup, persona, before_id=before_id, group=group
                )
                return read, self.plan(read, queue_by_trigger=before_id is None)

            read, decision = await self._carry_at_once(read, decision, carry, again)
        if wait is not None and self._cut_without_a_job(read, decision):
            # One long reply can carry the history from under the trigger past the ceiling:
            # the chapter for what this turn would cut is queued now, so the turn waits for
            # it instead of cutting first and folding after.
            assert decision.fold is not None
            self.store.enqueue_fold(decision.fold)
            read = await self.read(conv_id, card, setup, persona, before_id=before_id, group=group)
            decision = self.plan(read, queue_by_trigger=before_id is None)
        started = self.clock.monotonic()
        waited: set[int] = set()
        asked = False
        while wait is not None and decision.wait_for:
            jobs = {job.id for job in decision.wait_for}
            if jobs <= waited:
                break
            asked = True
            if not await wait(decision.wait_for):
                break
            waited |= jobs
            read = await self.read(conv_id, card, setup, persona, before_id=before_id, group=group)
            decision = self.plan(read, queue_by_trigger=before_id is None)
        waited_ms = (self.clock.monotonic() - started) * 1000 if asked else 0.0
        state, queued = self.commit(read, decision)
        recall = await self.recall(read, decision, names=(setup.display_name, persona.name))
        prepared = self._prepared(read, decision, state, queued, setup, persona, prefill, recall)
        return replace(prepared, fold_wait_ms=waited_ms)

    async def preview(
        self,
        conv_id: int,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        group: GroupTurn | None = None,
    ) -> PreparedTurn:
        """The prompt the next turn will start with (a landed fold applied), storing nothing
        and queueing nothing: the prewarm evaluates it, the evaluation measures it."""
        read = await self.read(conv_id, card, setup, persona, group=group)
        decision = self.plan(read, queue_by_trigger=False)
        return self._prepared(read, decision, decision.state, None, setup, persona, "", NO_RECALL)

    async def read(
        self,
        conv_id: int,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        *,
        before_id: int | None = None,
        group: GroupTurn | None = None,
    ) -> TurnRead:
        """Everything the turn's plan and prompt need, from bounded reads; nothing is written
        (token counts are cached on their rows, as always)."""
        # The memory's rows and the open fold jobs in one read transaction, before any await:
        # the fold worker runs on this loop (and another instance on the file), and a chapter
        # that lands between a read of the chapters and one of the jobs is in neither: its
        # range looks unfolded and would be queued again. What lands after this read is the
        # next turn's.
        rows = self.store.memory_rows(conv_id, jobs=(FoldStatus.PENDING, FoldStatus.RUNNING))
        state = rows.state
        key = self.engine.model_key
        notices: list[str] = []
        window = self._window(conv_id, state.verbatim_start_id, notices)
        if before_id is not None:
            window = [m for m in window if m.id < before_id]
        counts = [
            WindowMessage(m.id, count)
            for m, count in zip(window, await self.count_messages(window), strict=True)
        ]
        # Fitted to the rows' own live entries: the block carries the ledger of the rows it is
        # built from (a chapter retired meanwhile is in both or in neither). Only when landed
        # memory is pending, as `snapshot_of` asks: else the stored block carries its ledger,
        # and a fit (a bisection of token counts over the rendered ledger) would be thrown away.
        unfitted = landed_memory(rows.synopsis, rows.chapters, rows.live, rows.retired)
        fitted = (
            await self.fitted_ledger(rows.live) if unfitted.pending(state) else LedgerFit((), ())
        )

        def fitted_to(live: Sequence[StoredLedgerEntry]) -> LedgerFit:
            # The fit made above, off the loop: the snapshot fits the rows' own live entries.
            assert live is rows.live, "the snapshot fits other entries than the rows' own"
            return fitted

        snapshot = snapshot_of(rows, fitted_to)
        landed = snapshot.landed
        pending = snapshot.pending
        landed_text = landed.block.render() if pending else ""
        # The prompt numbers the messages its memory cites as the chat does (the stored text
        # cites store ids): counted as sent. Numbers are places, so they change only when an
        # earlier message is deleted, and a deletion inside a folded range refolds it anyway.
        numbers = numbering(self.store, conv_id, (state.memory_text, landed_text))
        # The memory block is counted as it is sent this turn: stored, its count is of the text
        # read when it was applied, and a message it cites deleted since (said in words) or
        # put back, or another model's tokenizer, changes it. Counted only when that text is
        # new to this prompter (`count_memory`), so a turn like the last costs a lookup.
        recounted = False
        if state.memory_text:
            counted = await self.count_memory(numbers.text(state.memory_text))
            if counted != state.memory_tokens or state.memory_model_key != key:
                state = state.model_copy(update={"memory_tokens": counted, "memory_model_key": key})
                recounted = True
        open_jobs = rows.jobs
        chapter_jobs = [j for j in open_jobs if j.kind is FoldKind.CHAPTER]
        settings = self.turn_settings(conv_id, card.key)
        budgets = self.budgets_for(settings.reply_max_tokens)
        warnings: list[str] = []
        # Lorebook keys may be regular expressions from the card (time-bounded, but many of
        # them can still add up): matched off the event loop.
        try:
            lore = await asyncio.to_thread(
                self.lore.for_turn,
                card,
                setup,
                persona,
                window,
                int(settings.lore_budget.value),
                [name for name, _layer in settings.world_info],
            )
        except MacroLimitError as exc:
            raise SetupTooLargeError(
                f"{card.source_path or card.key}: the lorebook entries chosen this turn: {exc}"
            ) from exc
        warnings.extend(lore.warnings)
        if lore.notice:
            notices.append(lore.notice)
        lore_text = lore.text
        note = _author_note_text(settings, setup, persona)
        # The Author's Note before the card's notes: SillyTavern's order at one depth.
        placed = [DepthNote(note, settings.author_note_depth)] if note else []
        placed.extend(setup.character_notes)
        # At depth 0 the system notes go after the history with the other notes of the turn;
        # the others are placed in the history (`split_notes`, as the evaluation's arms do).
        last, depth_notes = split_notes(placed)
        # A group names who answers last of all, so the speaker is all that changes.
        named = speaker_note(setup.display_name) if group is not None else ""
        notes = "\n\n".join(part for part in (lore_text, last, setup.post_history, named) if part)
        # A group's shared prefix holds no one member's picture (it would change with the
        # speaker and be evaluated again with everything after it).
        portrait = self.portrait(card) if group is None else None
        fixed = await self.count_setup(setup.system_text)
        fixed += sum(await self.engine.count_tokens_many([notes, *(n.text for n in depth_notes)]))
        if portrait is not None:
            fixed += self.engine.image_cells(portrait) + 16
        reserve = budgets.reply_reserve
        if fixed + reserve + budgets.min_verbatim // 4 > budgets.n_ctx:
            raise SetupTooLargeError(
                f"{setup.display_name}'s setup and notes take {fixed} tokens and the reply "
                f"reserve {reserve}, which leaves no room for the story in a "
                f"{budgets.n_ctx}-token window: use a model profile with a larger n_ctx"
                + (" or a shorter reply length" if reserve != self.budgets.reply_reserve else "")
            )
        # The recall budget is kept whether or not anything is recalled, so the fold policy
        # (which sees it as fixed) plans the same turn whatever the archive answers; a setup
        # that leaves less room gets a smaller one.
        room = budgets.n_ctx - fixed - reserve - budgets.min_verbatim
        recall_budget = max(0, min(budgets.recall, room))
        fixed += recall_budget
        landed_tokens = await self.count_memory(numbers.text(landed_text)) if landed_text else 0
        return TurnRead(
            conv_id=conv_id,
            state=state,
            window=window,
            counts=counts,
            landed=landed,
            landed_pending=pending,
            landed_text=landed_text,
            landed_tokens=landed_tokens,
            numbering=numbers,
            open_through=max((j.last_message_id or 0 for j in chapter_jobs), default=0),
            fold_in_flight=_fold_in_flight(chapter_jobs),
            open_jobs=open_jobs,
            notes=notes,
            lore=lore,
            depth_notes=depth_notes,
            settings=settings,
            budgets=budgets,
            portrait=portrait,
            recall_budget=recall_budget,
            fixed_tokens=fixed,
            notices=notices,
            warnings=warnings,
            group=group,
            recounted=recounted,
        )

    def plan(self, read: TurnRead, *, queue_by_trigger: bool) -> TurnDecision:
        """The fold policy on what was read: which memory the prompt carries, where the
        verbatim window starts, and which chapter job to queue (`queue_by_trigger`: a new
        message crossing the trigger queues one; a forced cut always does)."""
        landed, state = read.landed, read.state
        landed_text = read.landed_text
        covered = landed.covered_through
        plan = plan_turn(
            TurnInputs(
                budgets=read.budgets,
                verbatim_start_id=state.verbatim_start_id,
                window=read.counts,
                applied_memory_tokens=state.memory_tokens,
                landed_memory_tokens=(read.landed_tokens if read.landed_pending else None),
                landed_covered_through=covered if read.landed_pending else None,
                # A new range starts after what is stored and what open jobs will fold.
                covered_through=max(covered, read.open_through) or None,
                fold_in_flight=read.fold_in_flight,
                fixed_tokens=read.fixed_tokens,
            )
        )
        notices = list(read.notices)
        if plan.apply_landed:
            state = state.model_copy(
                update={
                    "applied_chapter_id": landed.newest_chapter_id,
                    "applied_synopsis_id": landed.synopsis_id,
                    "applied_retired": landed.retired,
                    "memory_text": landed_text,
                    "memory_tokens": plan.memory_tokens,
                    "memory_model_key": self.engine.model_key,
                }
            )
            notices.append("the memory was folded: this turn carries the new chapters")
            cut_before = state.forced_cut_through_id
            if cut_before is not None and covered >= cut_before:
                # What left the prompt at the ceiling is in the memory again.
                state = state.model_copy(update={"forced_cut_through_id": None})
        if plan.landed_too_large:
            notices.append(
                "the memory that landed is too large to fit under the ceiling beside the new "
                "message; the prompt keeps its memory until a major fold makes it smaller"
            )
        if plan.forced_cut_through is not None:
            state = state.model_copy(
                update={
                    "forced_cut_through_id": plan.forced_cut_through,
                    "forced_cuts": state.forced_cuts + 1,
                }
            )
            cut = plan.forced_cut_through
            number = self.store.message_numbers(read.conv_id, [cut]).get(cut, cut)
            notices.append(
                f"the history passed its ceiling with no chapter ready: messages up to "
                f"#{number} left the prompt (they stay stored and will be folded)"
            )
        # Record where the window starts even before the first fold, so the next turn reads
        # one range from there instead of the newest rows.
        start = plan.verbatim_start_id
        if start is None and read.window:
            start = read.window[0].id
        state = state.model_copy(update={"verbatim_start_id": start})
        fold = self._fold_to_queue(read, plan, queue_by_trigger)
        return TurnDecision(plan, state, fold, notices, self._worth_waiting_for(read, plan))

    @staticmethod
    def _cut_without_a_job(read: TurnRead, decision: TurnDecision) -> bool:
        """The turn would cut messages that no open chapter job covers yet, and the chronicler
        is not failing (a job in its backoff: a new job would only fail too, and hold the
        turn while it did)."""
        fold = decision.fold
        cut = decision.plan.forced_cut_through
        failing = any(job.last_error is not None for job in read.open_jobs)
        return (
            cut is not None
            and not failing
            and fold is not None
            and fold.kind is FoldKind.CHAPTER
            and (fold.last_message_id or 0) >= cut
        )

    async def _carry_at_once(
        self,
        read: TurnRead,
        decision: TurnDecision,
        carry: Carry,
        again: Callable[[], Awaitable[tuple[TurnRead, TurnDecision]]],
    ) -> tuple[TurnRead, TurnDecision]:
        """Carry what the turn would cut by code only: the chapter jobs that cover it quoted
        now, and when the memory is then too large to apply (or still cuts), the oldest
        chapters quoted into the synopsis; the plan made again after each step. Bounded by
        CARRY_ROUNDS: what still does not fit leaves the prompt (recall reaches it)."""
        for _round in range(CARRY_ROUNDS):
            through = _cut_through(read, decision.plan)
            if through is None and not decision.plan.landed_too_large:
                break
            quoted = False
            if through is not None:
                fold = decision.fold
                if fold is not None and fold.kind is FoldKind.CHAPTER:
                    # The chapter for what this turn would cut, queued now to be quoted.
                    self.store.enqueue_fold(fold)
                    read, decision = await again()
                jobs = [
                    job
                    for job in read.open_jobs
                    if job.kind is FoldKind.CHAPTER and (job.first_message_id or 0) <= through
                ]
                # Progress even when every job had landed meanwhile: a landed job's rest of
                # range, queued with its chapter, is in none of `jobs` and is quoted next round.
                quoted = bool(jobs) and await carry.chapters(jobs)
                if jobs:
                    # Read again even when nothing was quoted: the worker may have landed one
                    # of these chapters meanwhile.
                    read, decision = await again()
            if _cut_through(read, decision.plan) is None and not decision.plan.landed_too_large:
                break
            # The memory itself does not fit beside the window: its chapters go into the
            # synopsis.
            if not await carry.major(read.conv_id):
                if not quoted:
                    break
                continue
            read, decision = await again()
        return read, decision

    async def carry_ahead(
        self,
        conv_id: int,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        carry: Carry,
        group: GroupTurn | None = None,
        *,
        stand_in: bool = True,
    ) -> bool:
        """After a reply: carry now what the next turn would cut, planned with a stand-in for
        the player's next message (memory/lookahead.py; without `stand_in`, what the history
        cuts already), so the prompt that carries it can be prewarmed before that message
        arrives. Nothing else is stored (the next turn stores its own state). True when the
        next turn would have cut (something was carried, or tried)."""

        async def ahead() -> tuple[TurnRead, TurnDecision]:
            read = await self.read(conv_id, card, setup, persona, group=group)
            users = [
                count.tokens
                for message, count in zip(read.window, read.counts, strict=True)
                if message.role is Role.USER
            ]
            if stand_in:
                counts = with_next_message(read.counts, expected_next_tokens(users))
                read = replace(read, counts=counts)
            return read, self.plan(read, queue_by_trigger=False)

        read, decision = await ahead()
        if not read.window:
            return False
        if _cut_through(read, decision.plan) is None and not decision.plan.landed_too_large:
            return False
        await self._carry_at_once(read, decision, carry, ahead)
        return True

    def _worth_waiting_for(self, read: TurnRead, plan: TurnPlan) -> tuple[StoredFoldJob, ...]:
        """The open fold jobs this turn should wait for: it would cut messages at the ceiling,
        or messages cut before are not in the memory yet, or the memory that landed is too
        large to apply. Then the chapter jobs that cover the cut messages, and the major fold:
        only it makes the memory smaller (waiting for chapters alone, each applied chapter can
        push the history over the ceiling again: docs/decisions.md D-13).
        A job whose last attempt failed is in its backoff and not waited for (a failing
        chronicler must not hold every turn); one that gave way to a chapter did not fail."""
        cut_before = read.state.forced_cut_through_id
        uncovered = cut_before is not None and read.landed.covered_through < cut_before
        cutting = plan.forced_cut_through is not None or uncovered
        if not cutting and not plan.landed_too_large:
            return ()
        through = max(plan.forced_cut_through or 0, cut_before or 0)
        return tuple(
            job
            for job in read.open_jobs
            if not _in_backoff(job)
            and (job.kind is FoldKind.MAJOR_GC or (job.first_message_id or 0) <= through)
        )

    def _fold_to_queue(
        self, read: TurnRead, plan: TurnPlan, queue_by_trigger: bool
    ) -> FoldJob | None:
        covered = read.landed.covered_through
        folded_through = max(covered, read.open_through)
        cut = plan.forced_cut_through
        if cut is not None and folded_through < cut:
            # Messages that left the prompt without a chapter must be folded soon: until
            # then they are in neither the memory nor the prompt.
            return FoldJob(
                conversation_id=read.conv_id,
                kind=FoldKind.CHAPTER,
                first_message_id=folded_through + 1,
                last_message_id=cut,
            )
        if plan.queue_range is not None and queue_by_trigger:
            first = (folded_through + 1) if folded_through else plan.queue_range[0]
            return FoldJob(
                conversation_id=read.conv_id,
                kind=FoldKind.CHAPTER,
                first_message_id=min(first, plan.queue_range[0]),
                last_message_id=plan.queue_range[1],
                not_before=self.clock.now() + timedelta(seconds=self.settings.fold_delay_s),
            )
        return None

    def recall_takes_room(self) -> bool:
        """Whether recall also takes the room the history leaves under the trigger
        (`recall_free_room`; unset: when semantic recall is active, whose hits found by
        meaning rank past what the share alone holds: docs/decisions.md D-41)."""
        semantic = self.recaller.semantic
        return recall_takes_room(
            self.settings.recall_free_room, semantic is not None and semantic.active
        )

    async def recall(
        self, read: TurnRead, decision: TurnDecision, *, names: Sequence[str] = ()
    ) -> Recall:
        """Archived messages older than the verbatim window that share words with the new
        message and the reply before it, within the turn's recall budget (memory/recall.py).
        `names`: the speakers' (the character's and the persona's): every archived message
        is said by one of them, so recall does not look for them."""
        start = decision.plan.verbatim_start_id
        verbatim = [m for m in read.window if start is None or m.id >= start]
        budget = read.recall_budget
        fitted = decision.plan.budgets
        if self.recall_takes_room() and fitted is not None:
            budget = fitted.recall_with_room(budget, decision.plan.history_tokens)
        if not verbatim:
            return Recall(budget=budget)
        return await self.recaller.recall(
            read.conv_id,
            recall_query(verbatim),
            older_than=verbatim[0].id,
            memory_text=decision.state.memory_text,
            budget=budget,
            names=names,
        )

    def commit(
        self, read: TurnRead, decision: TurnDecision
    ) -> tuple[MemoryState, StoredFoldJob | None]:
        """Store the memory state the turn is built on and queue its fold job (the turn's only
        writes); returns the state as stored and the job."""
        state = decision.state
        if state != read.state or read.recounted or read.state.updated_at is None:
            state = self.store.set_memory_state(state)
        if decision.plan.forced_cut_through is not None:
            log.warning(
                "conversation %s: forced cut through #%s",
                read.conv_id,
                decision.plan.forced_cut_through,
            )
        queued = self.store.enqueue_fold(decision.fold) if decision.fold is not None else None
        return state, queued

    def assemble(
        self,
        read: TurnRead,
        decision: TurnDecision,
        setup: CharacterSetup,
        persona: Persona,
        *,
        prefill: str = "",
        recall: Recall = NO_RECALL,
    ) -> tuple[GenerationRequest, History, list[StoredMessage]]:
        """The model request: setup, memory, the verbatim window, notes (recalled excerpts
        first); the history (the same without the notes) and that window."""
        start = decision.plan.verbatim_start_id
        verbatim = [m for m in read.window if start is None or m.id >= start]
        lines = [
            PromptLine(
                m.role, m.speaker, m.text, self.images_of(m) if self.engine.has_vision else ()
            )
            for m in verbatim
        ]
        history = build_history(
            system_text=setup.system_text,
            char_name=setup.display_name,
            memory_text=read.numbering.text(decision.state.memory_text),
            window=lines,
            depth_notes=read.depth_notes,
            portrait=read.portrait,
            # A continued reply is left out of the window (`before_id`) and sent as the
            # prefill, but the notes' depths count it, as SillyTavern's do.
            continued=bool(prefill),
        )
        notes = "\n\n".join(part for part in (recall.render(), read.notes) if part)
        request = GenerationRequest(
            messages=with_notes(history.messages, notes),
            max_tokens=read.budgets.reply_reserve,
            sampling=read.settings.sampling(),
            reply_name=setup.display_name,
            user_name=persona.name,
            prefill=prefill,
            # The group's first: an OpenAI server takes four (the client cuts at every one).
            extra_stops=(
                MEMORY_TITLE,
                *(read.group.stops(setup.display_name) if read.group is not None else ()),
                *(RECALL_STOPS if recall.excerpts else ()),
            ),
            state=self.state_ref(read.conv_id, read.portrait, setup.key, persona.name),
        )
        if prefill:
            request = self._fit_continuation(request)
        return request, history, verbatim

    def _prepared(
        self,
        read: TurnRead,
        decision: TurnDecision,
        state: MemoryState,
        queued: StoredFoldJob | None,
        setup: CharacterSetup,
        persona: Persona,
        prefill: str,
        recall: Recall,
    ) -> PreparedTurn:
        request, history, verbatim = self.assemble(
            read, decision, setup, persona, prefill=prefill, recall=recall
        )
        return PreparedTurn(
            request,
            history,
            decision.plan,
            state,
            verbatim,
            decision.notices,
            read.warnings,
            read.fixed_tokens,
            queued,
            read.lore,
            recall,
        )

    def _fit_continuation(self, request: GenerationRequest) -> GenerationRequest:
        """A continuation gets the room the window has left after the reply so far.

        The budgets reserve room for one reply; a reply cut at its cap already fills it, so a
        full reserve on top would not fit a small window.
        """
        room = self.engine.n_ctx - self.engine.prompt_cells(request)
        if room < MIN_CONTINUATION_TOKENS:
            raise ContinuationTooLongError(
                f"the reply is too long to continue in the {self.engine.n_ctx}-token window "
                f"({max(room, 0)} tokens left): regenerate it, or use a profile with a larger n_ctx"
            )
        return replace(request, max_tokens=min(request.max_tokens, room))

    def _window(self, conv_id: int, start: int | None, notices: list[str]) -> list[StoredMessage]:
        """The verbatim window: one indexed range read from where it starts, with a LIMIT.

        Its size follows the window (kept under the ceiling), not the conversation's length.
        Only a backlog longer than the limit (a long unfolded import, or a move from a wide
        window to a narrow one) reads the newest rows instead; the rest leave the prompt
        and are folded in the background.
        """
        key = self.engine.model_key
        if start is not None:
            rows = self.store.messages_from(conv_id, start, MAX_WINDOW_MESSAGES, model_key=key)
            if len(rows) < MAX_WINDOW_MESSAGES:
                return rows
        rows = self.store.recent_messages(conv_id, MAX_WINDOW_MESSAGES, model_key=key)
        if len(rows) == MAX_WINDOW_MESSAGES:
            notices.append(
                f"{MAX_WINDOW_MESSAGES} recent messages are the most one turn reads; older "
                "unfolded ones are left out of the prompt until they are folded"
            )
        return rows


def _cut_through(read: TurnRead, plan: TurnPlan) -> int | None:
    """The newest message the turn cuts, or that an earlier turn cut and the memory does not
    cover yet (None: nothing is out of both prompt and memory)."""
    cut_before = read.state.forced_cut_through_id
    if cut_before is not None and read.landed.covered_through >= cut_before:
        cut_before = None
    if plan.forced_cut_through is None and cut_before is None:
        return None
    return max(plan.forced_cut_through or 0, cut_before or 0)


def _author_note_text(settings: TurnSettings, setup: CharacterSetup, persona: Persona) -> str:
    """The note as the model reads it: {{char}} and {{user}} filled in."""
    note = settings.author_note.strip()
    if not note:
        return ""
    try:
        return apply_macros(note, char=setup.display_name, user=persona.name)
    except MacroLimitError as exc:
        raise SetupTooLargeError(f"the Author's Note: {exc}") from exc


def _cost_text(message: Message) -> str:
    return line_cost_text(PromptLine(message.role, message.speaker, message.text))
