"""Building one turn's prompt from bounded reads: the memory state, the window, the landed memory.

Reads per turn do not grow with the conversation: the memory state row, the live chapters
(bounded by the major GC), the current synopsis, the open fold jobs, and the newest messages
up to a fixed LIMIT. Token counts are exact, from the model's tokenizer, cached per message.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from kotonia_tui.characters import CharacterCard, CharacterSetup, render_lore, select_entries
from kotonia_tui.config import Settings
from kotonia_tui.domain import (
    FoldJob,
    FoldKind,
    FoldStatus,
    ImageInput,
    Message,
    Persona,
    StoredFoldJob,
    StoredMessage,
    utcnow,
)
from kotonia_tui.engine import Engine, GenerationRequest
from kotonia_tui.memory.assembly import (
    MEMORY_ACK,
    MemoryBlock,
    PromptLine,
    assemble_prompt,
    line_cost_text,
)
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.policy import TurnInputs, TurnPlan, WindowMessage, plan_turn
from kotonia_tui.store import Store
from kotonia_tui.store.records import MemoryState

log = logging.getLogger(__name__)

# Upper bound on rows read for the verbatim window. The window is kept under the ceiling in
# tokens, so this is only reached by a backlog (a conversation moved from a wide window to a
# narrow one); what lies beyond it leaves the prompt as a forced cut and is folded later.
MAX_WINDOW_MESSAGES = 3000
LORE_SCAN_MESSAGES = 8


# Below this a continuation would be cut again at once: better to say so.
MIN_CONTINUATION_TOKENS = 16


class SetupTooLargeError(Exception):
    """The character setup alone (nearly) fills the context window."""


class ContinuationTooLongError(Exception):
    """The reply to continue leaves (almost) no room in the window for more."""


@dataclass(frozen=True)
class PreparedTurn:
    request: GenerationRequest
    plan: TurnPlan
    state: MemoryState
    window: list[StoredMessage]  # the messages the prompt carries verbatim
    notices: list[str]
    fixed_tokens: int
    queued: StoredFoldJob | None


def memory_tokens(engine: Engine, text: str) -> int:
    return engine.count_tokens(f"{text}\n{MEMORY_ACK}") if text else 0


class Prompter:
    """Prepares turns for one model: budgets, token counts, the fold policy, assembly."""

    def __init__(self, store: Store, engine: Engine, settings: Settings) -> None:
        self.store = store
        self.engine = engine
        self.settings = settings
        self.reply_reserve = engine.profile.reply_max_tokens
        self.budgets = Budgets.for_window(engine.n_ctx, self.reply_reserve, settings)

    # ---- token counts -------------------------------------------------------------------

    def message_tokens(self, message: Message) -> int:
        key = self.engine.model_key
        cached = message.token_counts.get(key)
        if cached is not None:
            return cached
        line = PromptLine(message.role, message.speaker, message.text)
        count = self.engine.count_tokens(line_cost_text(line))
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

    def landed_memory(self, conv_id: int) -> tuple[MemoryBlock, int | None, int | None, int]:
        """The memory as it would be if applied now: block, chapter id, synopsis id, covered."""
        synopsis = self.store.current_synopsis(conv_id)
        chapters = self.store.chapters(conv_id)  # live: not in the synopsis, not superseded
        block = MemoryBlock(synopsis.text if synopsis else None, tuple(chapters))
        newest = max((c.id for c in chapters if c.id is not None), default=None)
        covered = max(
            [c.last_message_id for c in chapters]
            + ([synopsis.through_message_id] if synopsis else []),
            default=0,
        )
        return block, newest, synopsis.id if synopsis else None, covered

    # ---- the turn -------------------------------------------------------------------------

    def prepare(
        self,
        conv_id: int,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        *,
        before_id: int | None = None,
        prefill: str = "",
        dry_run: bool = False,
    ) -> PreparedTurn:
        """The prompt for the next reply. `before_id`: leave that message and later ones out.

        `dry_run` builds the prompt the next turn will start with (a landed fold applied)
        without saving anything or queueing folds: the prewarm uses it.
        """
        state = self.store.memory_state(conv_id)
        key = self.engine.model_key
        notices: list[str] = []
        window = self._window(conv_id, state.verbatim_start_id, notices)
        if before_id is not None:
            window = [m for m in window if m.id < before_id]
        counts = [WindowMessage(m.id, self.message_tokens(m)) for m in window]

        block, newest_chapter, synopsis_id, covered = self.landed_memory(conv_id)
        # A memory block written with another model's tokenizer is re-counted once.
        if state.memory_text and state.memory_model_key != key:
            state = state.model_copy(
                update={
                    "memory_tokens": memory_tokens(self.engine, state.memory_text),
                    "memory_model_key": key,
                }
            )
        landed = (
            newest_chapter != state.applied_chapter_id or synopsis_id != state.applied_synopsis_id
        ) and not block.empty
        landed_text = block.render() if landed else ""
        open_jobs = [
            j
            for j in self.store.fold_jobs(
                conv_id, statuses=(FoldStatus.PENDING, FoldStatus.RUNNING)
            )
            if j.kind is FoldKind.CHAPTER
        ]
        in_flight = bool(open_jobs)
        queued_through = max((j.last_message_id or 0 for j in open_jobs), default=0)
        lore_text, lore_notice = self._lore(card, setup, persona, window)
        if lore_notice:
            notices.append(lore_notice)
        notes = "\n\n".join(part for part in (lore_text, setup.post_history) if part)
        portrait = self.portrait(card)
        fixed = self.engine.count_tokens(setup.system_text) + self.engine.count_tokens(notes)
        if portrait is not None:
            fixed += self.engine.image_cells(portrait) + 16
        if fixed + self.reply_reserve + self.budgets.min_verbatim // 4 > self.budgets.n_ctx:
            raise SetupTooLargeError(
                f"{setup.display_name}'s setup and notes take {fixed} tokens and the reply "
                f"reserve {self.reply_reserve}, which leaves no room for the story in a "
                f"{self.budgets.n_ctx}-token window: use a model profile with a larger n_ctx"
            )

        plan = plan_turn(
            TurnInputs(
                budgets=self.budgets,
                verbatim_start_id=state.verbatim_start_id,
                window=counts,
                applied_memory_tokens=state.memory_tokens,
                landed_memory_tokens=memory_tokens(self.engine, landed_text) if landed else None,
                landed_covered_through=covered if landed else None,
                covered_through=covered or None,
                fold_in_flight=in_flight,
                fixed_tokens=fixed,
            )
        )
        new_state = state
        if plan.apply_landed:
            new_state = new_state.model_copy(
                update={
                    "applied_chapter_id": newest_chapter,
                    "applied_synopsis_id": synopsis_id,
                    "memory_text": landed_text,
                    "memory_tokens": plan.memory_tokens,
                    "memory_model_key": key,
                }
            )
            notices.append("the memory was folded: this turn carries the new chapters")
            cut_before = new_state.forced_cut_through_id
            if cut_before is not None and covered >= cut_before:
                # What left the prompt at the ceiling is in the memory again.
                new_state = new_state.model_copy(update={"forced_cut_through_id": None})
        if plan.forced_cut_through is not None:
            new_state = new_state.model_copy(
                update={"forced_cut_through_id": plan.forced_cut_through}
            )
            notices.append(
                f"the history passed its ceiling with no chapter ready: messages up to "
                f"#{plan.forced_cut_through} left the prompt (they stay stored and will be folded)"
            )
            log.warning("conversation %s: forced cut through #%s", conv_id, plan.forced_cut_through)
        # Record where the window starts even before the first fold, so the next turn reads
        # one range from there instead of the newest rows.
        start = plan.verbatim_start_id
        if start is None and window:
            start = window[0].id
        new_state = new_state.model_copy(update={"verbatim_start_id": start})
        if not dry_run and (new_state != state or state.updated_at is None):
            new_state = self.store.set_memory_state(new_state)

        queued = None
        cut = plan.forced_cut_through
        if cut is not None and not dry_run and max(covered, queued_through) < cut:
            # Messages that left the prompt without a chapter must be folded soon: until
            # then they are in neither the memory nor the prompt.
            queued = self.store.enqueue_fold(
                FoldJob(
                    conversation_id=conv_id,
                    kind=FoldKind.CHAPTER,
                    first_message_id=max(covered, queued_through) + 1,
                    last_message_id=cut,
                )
            )
        elif plan.queue_range is not None and before_id is None and not dry_run:
            first = (covered + 1) if covered else plan.queue_range[0]
            queued = self.store.enqueue_fold(
                FoldJob(
                    conversation_id=conv_id,
                    kind=FoldKind.CHAPTER,
                    first_message_id=min(first, plan.queue_range[0]),
                    last_message_id=plan.queue_range[1],
                    not_before=utcnow() + timedelta(seconds=self.settings.fold_delay_s),
                )
            )

        verbatim = [
            m for m in window if plan.verbatim_start_id is None or m.id >= plan.verbatim_start_id
        ]
        lines = [
            PromptLine(
                m.role, m.speaker, m.text, self.images_of(m) if self.engine.has_vision else ()
            )
            for m in verbatim
        ]
        messages = assemble_prompt(
            system_text=setup.system_text,
            char_name=setup.display_name,
            memory_text=new_state.memory_text,
            window=lines,
            notes=notes,
            portrait=portrait,
        )
        request = GenerationRequest(
            messages=messages,
            max_tokens=self.reply_reserve,
            reply_name=setup.display_name,
            user_name=persona.name,
            prefill=prefill,
        )
        if prefill:
            request = self._fit_continuation(request)
        return PreparedTurn(request, plan, new_state, verbatim, notices, fixed, queued)

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

    def _lore(
        self,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        window: Sequence[Message],
    ) -> tuple[str, str | None]:
        if card.character_book is None or self.budgets.lore <= 0:
            return "", None
        texts = [m.text for m in window[-LORE_SCAN_MESSAGES:]]
        selection = select_entries(
            card.character_book,
            texts,
            self.engine.count_tokens,
            self.budgets.lore,
            include_constant=not setup.constant_lore_in_system,
        )
        text = render_lore(selection.entries, char=setup.display_name, user=persona.name)
        notice = None
        if selection.skipped:
            names = ", ".join(e.name or (e.keys[0] if e.keys else "?") for e in selection.skipped)
            notice = f"lorebook entries left out this turn (over the lore budget): {names}"
        return text, notice
